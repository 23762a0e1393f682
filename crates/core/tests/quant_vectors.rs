//! Bit-exact checks of `wgllm_core::quant` against reference vectors from the `gguf` Python
//! package, written by `scripts/gen_quant_vectors.py vectors` (its docstring gives the file format
//! and the package version). For every dtype: our dequantize must give exactly the reference f32
//! bits (any NaN matches any NaN); where the package can quantize, our quantize must give exactly
//! its bytes.

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
