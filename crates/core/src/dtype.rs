//! Element types: plain scalars and every GGUF block-quantized format.
//!
//! Spec: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md> (the `ggml_type` ids) and
//! `ggml-common.h` (block layouts). A block format stores `block_size()` values in `type_size()`
//! bytes; plain scalars are blocks of one.

use std::fmt;

/// Declares the closed `DType` enum once, with its GGUF id, name, block size and block bytes.
macro_rules! dtypes {
    ($( $(#[$doc:meta])* $variant:ident = $id:literal, $name:literal, $block:literal, $bytes:literal; )*) => {
        /// An element type. The discriminant is the `ggml_type` id stored in GGUF files.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(non_camel_case_types)]
        #[repr(u32)]
        pub enum DType {
            $( $(#[$doc])* $variant = $id, )*
        }

        impl DType {
            /// Every dtype, in GGUF id order.
            pub const ALL: &'static [DType] = &[$(DType::$variant),*];

            /// The dtype for a GGUF `ggml_type` id, if we know it.
            pub fn from_gguf_id(id: u32) -> Option<DType> {
                match id {
                    $( $id => Some(DType::$variant), )*
                    _ => None,
                }
            }

            /// The `ggml_type` id written in GGUF files.
            pub fn gguf_id(self) -> u32 {
                self as u32
            }

            /// The name ggml uses (`"q4_K"`, `"f16"`, …).
            pub fn name(self) -> &'static str {
                match self { $( DType::$variant => $name, )* }
            }

            /// Values per block (1 for plain scalars).
            pub fn block_size(self) -> usize {
                match self { $( DType::$variant => $block, )* }
            }

            /// Bytes per block.
            pub fn type_size(self) -> usize {
                match self { $( DType::$variant => $bytes, )* }
            }
        }
    };
}

dtypes! {
    F32 = 0, "f32", 1, 4;
    F16 = 1, "f16", 1, 2;
    Q4_0 = 2, "q4_0", 32, 18;
    Q4_1 = 3, "q4_1", 32, 20;
    Q5_0 = 6, "q5_0", 32, 22;
    Q5_1 = 7, "q5_1", 32, 24;
    Q8_0 = 8, "q8_0", 32, 34;
    Q8_1 = 9, "q8_1", 32, 36;
    Q2_K = 10, "q2_K", 256, 84;
    Q3_K = 11, "q3_K", 256, 110;
    Q4_K = 12, "q4_K", 256, 144;
    Q5_K = 13, "q5_K", 256, 176;
    Q6_K = 14, "q6_K", 256, 210;
    Q8_K = 15, "q8_K", 256, 292;
    IQ2_XXS = 16, "iq2_xxs", 256, 66;
    IQ2_XS = 17, "iq2_xs", 256, 74;
    IQ3_XXS = 18, "iq3_xxs", 256, 98;
    IQ1_S = 19, "iq1_s", 256, 50;
    IQ4_NL = 20, "iq4_nl", 32, 18;
    IQ3_S = 21, "iq3_s", 256, 110;
    IQ2_S = 22, "iq2_s", 256, 82;
    IQ4_XS = 23, "iq4_xs", 256, 136;
    I8 = 24, "i8", 1, 1;
    I16 = 25, "i16", 1, 2;
    I32 = 26, "i32", 1, 4;
    I64 = 27, "i64", 1, 8;
    F64 = 28, "f64", 1, 8;
    IQ1_M = 29, "iq1_m", 256, 56;
    BF16 = 30, "bf16", 1, 2;
    TQ1_0 = 34, "tq1_0", 256, 54;
    TQ2_0 = 35, "tq2_0", 256, 66;
    MXFP4 = 39, "mxfp4", 32, 17;
}

impl DType {
    /// True for the block-quantized formats.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for F32, F16, BF16 and F64.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// True for the signed integer scalars.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Bytes taken by a row of `n` values, or `None` when `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Parses a name as ggml spells it, case-insensitively (`q4_k`, `Q4_K`, `f16`…).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_names_are_unique() {
        for &d in DType::ALL {
            assert_eq!(DType::from_gguf_id(d.gguf_id()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
            assert_eq!(DType::from_name(&d.name().to_uppercase()), Some(d));
        }
        assert_eq!(
            DType::from_gguf_id(4),
            None,
            "4 was Q4_2, removed from ggml"
        );
        assert_eq!(DType::from_gguf_id(1000), None);
    }

    #[test]
    fn block_sizes_match_ggml_common() {
        // Bytes per block derived from the block structs in ggml-common.h.
        let qk_k = 256;
        assert_eq!(DType::Q2_K.type_size(), qk_k / 16 + qk_k / 4 + 2 * 2);
        assert_eq!(DType::Q3_K.type_size(), qk_k / 8 + qk_k / 4 + 12 + 2);
        assert_eq!(DType::Q4_K.type_size(), 2 * 2 + 12 + qk_k / 2);
        assert_eq!(DType::Q5_K.type_size(), 2 * 2 + 12 + qk_k / 8 + qk_k / 2);
        assert_eq!(DType::Q6_K.type_size(), qk_k / 2 + qk_k / 4 + qk_k / 16 + 2);
        assert_eq!(DType::Q8_K.type_size(), 4 + qk_k + qk_k / 16 * 2);
        assert_eq!(DType::IQ2_XXS.type_size(), 2 + qk_k / 8 * 2);
        assert_eq!(DType::IQ2_XS.type_size(), 2 + qk_k / 8 * 2 + qk_k / 32);
        assert_eq!(DType::IQ2_S.type_size(), 2 + qk_k / 4 + qk_k / 16);
        assert_eq!(DType::IQ3_XXS.type_size(), 2 + 3 * (qk_k / 8));
        assert_eq!(
            DType::IQ3_S.type_size(),
            2 + qk_k / 4 + qk_k / 32 + qk_k / 8 + qk_k / 64
        );
        assert_eq!(DType::IQ1_S.type_size(), 2 + qk_k / 8 + qk_k / 16);
        assert_eq!(DType::IQ1_M.type_size(), qk_k / 8 + qk_k / 16 + qk_k / 32);
        assert_eq!(DType::IQ4_XS.type_size(), 2 + 2 + qk_k / 64 + qk_k / 2);
        assert_eq!(
            DType::TQ1_0.type_size(),
            (qk_k - 4 * qk_k / 64) / 5 + qk_k / 64 + 2
        );
        assert_eq!(DType::TQ2_0.type_size(), 2 + qk_k / 4);
        assert_eq!(DType::MXFP4.type_size(), 1 + 16);
    }

    #[test]
    fn row_bytes_checks_blocks_and_overflow() {
        assert_eq!(DType::Q4_0.row_bytes(64), Some(36));
        assert_eq!(DType::Q4_0.row_bytes(33), None);
        assert_eq!(DType::F32.row_bytes(u64::MAX), None);
        assert_eq!(DType::F16.row_bytes(3), Some(6));
    }
}
