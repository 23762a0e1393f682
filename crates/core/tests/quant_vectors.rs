//! Checks of `wgllm_core::quant`.
//!
//! 1. Bit-exact comparison with reference vectors from the `gguf` Python package, written by
//!    `scripts/gen_quant_vectors.py vectors` (its docstring gives the file format and the package
//!    version): for every dtype our dequantize must give exactly the reference f32 bits (any NaN
//!    matches any NaN); where the package can quantize, our quantize must give exactly its bytes.
//! 2. Round trips for the quantizers the package lacks (K-quants, IQ4): normalised error bounds on
//!    seeded gaussian data, stability when requantizing, degenerate blocks, and length errors.

use std::path::PathBuf;

use wgllm_core::quant::{dequantize, quantize};
use wgllm_core::DType;

/// One parsed vector file.
struct Vectors {
    dtype: DType,
    deq_bytes: Vec<u8>,
    deq_values: Vec<f32>,
    q_input: Vec<f32>,
    q_bytes: Vec<u8>,
}

/// A little-endian reader over a vector file that reports truncation as a test failure.
struct Reader<'a> {
    buf: &'a [u8],
    name: &'a str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        assert!(self.buf.len() >= n, "{}: truncated", self.name);
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        head
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant")
}

fn load(dtype: DType) -> Vectors {
    let path = data_dir().join(format!("{}.bin", dtype.name()));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = dtype.name();
    let mut r = Reader { buf: &bytes, name };
    assert_eq!(r.take(4), b"WGQV", "{name}: magic");
    assert_eq!(r.u32(), 1, "{name}: version");
    assert_eq!(r.u32(), dtype.gguf_id(), "{name}: type id");
    let row = |n: usize| dtype.row_bytes(n as u64).expect("whole blocks") as usize;
    let n_deq = r.u32() as usize;
    let deq_bytes = r.take(row(n_deq)).to_vec();
    let deq_values = r.f32s(n_deq);
    let n_q = r.u32() as usize;
    let q_input = r.f32s(n_q);
    let q_bytes = r.take(row(n_q)).to_vec();
    assert!(r.buf.is_empty(), "{name}: trailing bytes");
    Vectors {
        dtype,
        deq_bytes,
        deq_values,
        q_input,
        q_bytes,
    }
}

fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn check_dequantize(v: &Vectors) -> Result<(), String> {
    let mut out = vec![0f32; v.deq_values.len()];
    dequantize(v.dtype, &v.deq_bytes, &mut out).map_err(|e| e.to_string())?;
    let bad: Vec<usize> = (0..out.len())
        .filter(|&i| !same_f32(out[i], v.deq_values[i]))
        .collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "dequantize: {} of {} values differ; first at {i}: got {:e} ({:#010x}), want {:e} ({:#010x})",
            bad.len(),
            out.len(),
            out[i],
            out[i].to_bits(),
            v.deq_values[i],
            v.deq_values[i].to_bits()
        )),
    }
}

fn check_quantize(v: &Vectors) -> Result<(), String> {
    let mut out = vec![0u8; v.q_bytes.len()];
    quantize(v.dtype, &v.q_input, &mut out).map_err(|e| e.to_string())?;
    if out == v.q_bytes {
        return Ok(());
    }
    let bs = v.dtype.block_size();
    let ts = v.dtype.type_size();
    let blocks: Vec<usize> = (0..out.len() / ts)
        .filter(|&b| out[b * ts..(b + 1) * ts] != v.q_bytes[b * ts..(b + 1) * ts])
        .collect();
    let b = blocks[0];
    Err(format!(
        "quantize: {} of {} blocks differ; first is block {b} (input {:?}…):\n  got  {:02x?}\n  want {:02x?}",
        blocks.len(),
        out.len() / ts,
        &v.q_input[b * bs..(b * bs + 4.min(bs))],
        &out[b * ts..(b + 1) * ts],
        &v.q_bytes[b * ts..(b + 1) * ts]
    ))
}

#[test]
fn every_dtype_matches_the_gguf_reference() {
    let mut failures = Vec::new();
    for &dtype in DType::ALL {
        let v = load(dtype);
        assert!(!v.deq_values.is_empty(), "{dtype}: no dequantize vectors");
        if let Err(e) = check_dequantize(&v) {
            failures.push(format!("{dtype}: {e}"));
        }
        if !v.q_input.is_empty() {
            if let Err(e) = check_quantize(&v) {
                failures.push(format!("{dtype}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn reference_quantizers_are_covered() {
    // The types gguf.quants can encode (plus the plain scalars); a missing vector set would
    // silently weaken `every_dtype_matches_the_gguf_reference`.
    for dtype in [
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::TQ1_0,
        DType::TQ2_0,
        DType::MXFP4,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
    ] {
        assert!(
            !load(dtype).q_input.is_empty(),
            "{dtype}: no quantize vectors"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips of the quantizers that have no reference vectors (K-quants, IQ4).

/// A small deterministic generator (xorshift64*), so the error figures below never move with a
/// dependency's version.
struct Gauss(u64);

impl Gauss {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// A standard normal sample (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
}

fn round_trip(dtype: DType, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut q = vec![0u8; dtype.row_bytes(x.len() as u64).unwrap() as usize];
    quantize(dtype, x, &mut q).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize(dtype, &q, &mut y).unwrap();
    (q, y)
}

/// Normalised mean squared error `Σ(x - y)² / Σx²`.
fn nmse(x: &[f32], y: &[f32]) -> f64 {
    let err: f64 = x
        .iter()
        .zip(y)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    let energy: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
    err / energy
}

/// Normalised MSE bounds for seeded gaussian data at scales 1e-3, 1 and 1e3, about 1.3-1.5x what
/// we measure (measured: see the comment on each line). Q8_K's floor is set by its step
/// `max|x| / 127` over 256 values (~0.021σ, so ≈ step²/12 ≈ 4e-5). At scale 1e-3 the f16
/// super-scales of Q6_K (and a little Q5_K) fall into the f16 subnormals, hence their worst case.
const NMSE_BOUNDS: &[(DType, f64)] = &[
    (DType::Q8_K, 6.5e-5),   // 4.7e-5 .. 4.9e-5
    (DType::Q6_K, 6.0e-4),   // 3.1e-4 .. 4.4e-4
    (DType::Q5_K, 1.8e-3),   // 1.27e-3 .. 1.37e-3
    (DType::Q4_K, 7.0e-3),   // 4.96e-3 .. 5.19e-3
    (DType::Q3_K, 3.0e-2),   // 2.24e-2 .. 2.29e-2
    (DType::Q2_K, 1.1e-1),   // 8.46e-2 .. 8.83e-2
    (DType::IQ4_NL, 7.5e-3), // 5.71e-3 .. 5.79e-3
    (DType::IQ4_XS, 8.5e-3), // 5.80e-3 .. 6.32e-3
    (DType::Q8_0, 4.0e-5),   // 2.8e-5 .. 2.9e-5
    (DType::Q5_1, 2.0e-3),   // 1.39e-3 .. 1.44e-3
    (DType::Q5_0, 2.4e-3),   // 1.78e-3 .. 1.81e-3
    (DType::Q4_1, 8.0e-3),   // 5.95e-3 .. 6.15e-3
    (DType::Q4_0, 1.0e-2),   // 7.23e-3 .. 7.49e-3
    (DType::MXFP4, 1.8e-2),  // 1.30e-2 .. 1.32e-2
];

const SCALES: [f32; 3] = [1e-3, 1.0, 1e3];

fn gaussian(scale: f32, n: usize) -> Vec<f32> {
    Gauss(0x9e37_79b9_7f4a_7c15 ^ u64::from(scale.to_bits())).vec(n, scale)
}

#[test]
fn round_trip_error_is_bounded() {
    let mut failures = Vec::new();
    for &(dtype, bound) in NMSE_BOUNDS {
        for scale in SCALES {
            let x = gaussian(scale, 256 * 64);
            let (_, y) = round_trip(dtype, &x);
            let e = nmse(&x, &y);
            println!("{dtype:8} scale {scale:6}: nmse {e:.3e} (bound {bound:.1e})");
            if e.is_nan() || e >= bound {
                failures.push(format!(
                    "{dtype} at scale {scale}: nmse {e:.3e} >= {bound:.1e}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn requantizing_quantized_data_is_stable() {
    let x = gaussian(1.0, 256 * 64);
    for &(dtype, _) in NMSE_BOUNDS {
        let (q1, y) = round_trip(dtype, &x);
        let (q2, z) = round_trip(dtype, &y);
        match dtype {
            // The largest value lands exactly on the grid, so the scale and codes come back.
            DType::Q8_0 | DType::Q5_1 | DType::Q5_0 | DType::Q4_1 | DType::Q4_0 | DType::MXFP4 => {
                assert!(q1 == q2, "{dtype}: requantized bytes differ");
            }
            // Same codes; the f32 scale `1 / (-127 / max)` may move by an ulp.
            DType::Q8_K => {
                for (a, b) in q1.chunks_exact(292).zip(q2.chunks_exact(292)) {
                    assert_eq!(a[4..], b[4..], "{dtype}: requantized codes differ");
                }
            }
            // Scale searches may settle elsewhere, but must lose far less than the first pass.
            _ => {
                let (first, second) = (nmse(&x, &y), nmse(&y, &z));
                assert!(
                    second <= 0.1 * first,
                    "{dtype}: requant nmse {second:.3e} vs {first:.3e}"
                );
            }
        }
    }
}

#[test]
fn quantizers_handle_zero_tiny_and_constant_blocks() {
    for &dtype in DType::ALL {
        if !wgllm_core::quant::can_quantize(dtype) || !dtype.is_quantized() {
            continue;
        }
        let n = 2 * dtype.block_size();
        for (what, x) in [
            ("zeros", vec![0.0f32; n]),
            ("tiny", gaussian(1e-30, n)),
            ("constant", vec![-0.75f32; n]),
        ] {
            let (_, y) = round_trip(dtype, &x);
            assert!(
                y.iter().all(|v| v.is_finite()),
                "{dtype} {what}: non-finite output"
            );
            if what == "zeros" {
                assert!(
                    y.iter().all(|&v| v == 0.0),
                    "{dtype}: zeros do not come back"
                );
            }
        }
    }
}

#[test]
fn wrong_lengths_are_errors_not_panics() {
    for &dtype in DType::ALL {
        let (n, bytes) = (dtype.block_size(), dtype.type_size());
        let mut vals = vec![0.0f32; n];
        let mut buf = vec![0u8; bytes + 1];
        assert!(dequantize(dtype, &buf, &mut vals).is_err(), "{dtype}");
        assert!(quantize(dtype, &vals, &mut buf).is_err(), "{dtype}");
        assert!(
            dequantize(dtype, &buf[..bytes], &mut vals).is_ok(),
            "{dtype}"
        );
        assert!(dequantize(dtype, &[], &mut []).is_ok(), "{dtype}");
        if n > 1 {
            let mut short = vec![0.0f32; n - 1];
            assert!(
                dequantize(dtype, &buf[..bytes], &mut short).is_err(),
                "{dtype}"
            );
            assert!(
                quantize(dtype, &short, &mut buf[..bytes]).is_err(),
                "{dtype}"
            );
        }
        let encoded = quantize(dtype, &vals, &mut buf[..bytes]);
        assert_eq!(
            encoded.is_ok(),
            wgllm_core::quant::can_quantize(dtype),
            "{dtype}"
        );
    }
}
