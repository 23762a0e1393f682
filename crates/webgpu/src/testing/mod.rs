//! The op test table and its runner, shared by `tests/ops.rs` and the CLI's `wgllm ops`.
//!
//! A [`Case`] builds a small graph with random inputs; [`run_case`] runs it on a reference
//! backend (the CPU) and on the backend under test, and compares every output by normalized mean
//! squared error, `Σ(a−b)² / Σb²`, against the case's tolerance (as ggml's test-backend-ops).
//! [`run_case_async`] is the same run for the browser, where readbacks are awaited.

mod attn_cases;
mod cases;
mod fuse_cases;
mod nn_cases;
pub mod perf;
mod perf_cases;
mod reduce_cases;
mod sample_cases;
mod seq_cases;
mod shape_cases;

use web_time::{Duration, Instant};

use wgllm_core::{Backend, DType, Error, Graph, Result, TensorId};

pub use cases::cases;
pub use perf_cases::{large_cases, LargeCase, COPY_CASE};

/// A deterministic pseudo-random generator (SplitMix64): the same case gets the same data on
/// every run and machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Byte offsets of the f16 scale fields of a block, which random bytes must not make NaN or huge.
fn scale_fields(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q4_0
        | DType::Q5_0
        | DType::Q8_0
        | DType::IQ4_NL
        | DType::IQ4_XS
        | DType::IQ2_XXS
        | DType::IQ2_XS
        | DType::IQ2_S
        | DType::IQ3_XXS
        | DType::IQ3_S
        | DType::IQ1_S => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q2_K => &[80, 82],
        DType::Q3_K => &[108],
        DType::Q6_K => &[208],
        _ => &[],
    }
}

/// Sane scales for the formats whose scale is not one f16 field: IQ1_M's f16 split over the top
/// nibbles of its four scale words, MXFP4's E8M0 exponent (2^-8..2^-3), Q8_K's f32.
fn other_scale(dtype: DType, block: &mut [u8], rng: &mut Rng) {
    match dtype {
        DType::IQ1_M => {
            let bits = half::f16::from_f32(rng.uniform(0.002, 0.02)).to_bits();
            for k in 0..4 {
                let b = &mut block[49 + 2 * k];
                *b = (*b & 0x0f) | ((((bits >> (4 * k)) & 0xf) as u8) << 4);
            }
        }
        DType::MXFP4 => block[0] = 120 + rng.below(6) as u8,
        DType::Q8_K => block[..4].copy_from_slice(&rng.uniform(0.002, 0.02).to_le_bytes()),
        _ => {}
    }
}

/// Offsets that center a random block's values on zero, as a quantizer's do: q4_1 and q5_1 get
/// m = -d times the middle quant, q4_K and q5_K dmin = d times it and each sub-block's min equal
/// to its scale (value = d · sc · (q - middle)). With positive offsets every weight was
/// positive, the products' outputs moved together with the sum of the activations, and the
/// NMSE of int8 activations on a GLU of 20 q4_K rows ranged from 4e-6 to 4.6e-3 across seeds.
fn center(dtype: DType, block: &mut [u8]) {
    let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
    let (offset, middle) = match dtype {
        DType::Q4_1 => (-1.0, 7.5),
        DType::Q5_1 => (-1.0, 15.5),
        DType::Q4_K => (1.0, 7.5),
        DType::Q5_K => (1.0, 15.5),
        _ => return,
    };
    let m = half::f16::from_f32(offset * middle * d);
    block[2..4].copy_from_slice(&m.to_le_bytes());
    if matches!(dtype, DType::Q4_K | DType::Q5_K) {
        // scales[0..4] hold the low scales (and the high ones' top bits), scales[4..8] the
        // mins likewise, scales[8..12] the high ones' low nibbles (scale | min << 4).
        let (sc, rest) = block[4..16].split_at_mut(4);
        rest[..4].copy_from_slice(sc);
        for b in &mut rest[4..] {
            *b = (*b & 0x0f) | (*b << 4);
        }
    }
}

/// Random contiguous bytes of `dtype` for `n` values: floats uniform in `[lo, hi)`, integers
/// uniform in `[lo, hi)` truncated, block formats random bits with scales in `[0.002, 0.02)`
/// (and offsets that [`center`] them).
pub fn random_bytes(rng: &mut Rng, dtype: DType, n: u64, lo: f32, hi: f32) -> Result<Vec<u8>> {
    let bytes = dtype
        .row_bytes(n)
        .ok_or_else(|| Error::shape(format!("{n} values are not whole {dtype} blocks")))?
        as usize;
    let mut out = Vec::with_capacity(bytes);
    match dtype {
        DType::F32 => (0..n).for_each(|_| out.extend(rng.uniform(lo, hi).to_le_bytes())),
        DType::F16 => {
            (0..n).for_each(|_| out.extend(half::f16::from_f32(rng.uniform(lo, hi)).to_le_bytes()))
        }
        DType::BF16 => {
            (0..n).for_each(|_| out.extend(half::bf16::from_f32(rng.uniform(lo, hi)).to_le_bytes()))
        }
        DType::I32 => (0..n).for_each(|_| out.extend((rng.uniform(lo, hi) as i32).to_le_bytes())),
        DType::I64 => (0..n).for_each(|_| out.extend((rng.uniform(lo, hi) as i64).to_le_bytes())),
        d if !scale_fields(d).is_empty()
            || matches!(d, DType::IQ1_M | DType::MXFP4 | DType::Q8_K) =>
        {
            out.extend((0..bytes).map(|_| rng.next_u64() as u8));
            for block in out.chunks_exact_mut(d.type_size()) {
                for &f in scale_fields(d) {
                    let s = half::f16::from_f32(rng.uniform(0.002, 0.02));
                    block[f..f + 2].copy_from_slice(&s.to_le_bytes());
                }
                other_scale(d, block, rng);
                center(d, block);
            }
        }
        d => {
            return Err(Error::DType {
                op: "random_bytes",
                dtypes: d.to_string(),
            })
        }
    }
    Ok(out)
}

/// Values of contiguous bytes of a readable dtype as f32.
pub fn to_f32(dtype: DType, bytes: &[u8]) -> Result<Vec<f32>> {
    let n = bytes.len() / dtype.type_size().max(1);
    let mut v = vec![0f32; n * dtype.block_size()];
    wgllm_core::quant::dequantize(dtype, bytes, &mut v)?;
    Ok(v)
}

/// `Σ(a−b)² / Σb²` (or `Σ(a−b)²` when b is all zeros); NaN in the same places counts as equal,
/// anywhere else as infinite error.
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let (mut err, mut norm) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        match (x.is_nan(), y.is_nan()) {
            (true, true) => continue,
            (false, false) if x == y => {}
            (false, false) => err += (f64::from(x) - f64::from(y)).powi(2),
            _ => return f64::INFINITY,
        }
        norm += f64::from(y).powi(2);
    }
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}

/// What a case's builder returns: the bytes of every input, and initial bytes for states.
#[derive(Default)]
pub struct Built {
    pub inputs: Vec<(TensorId, Vec<u8>)>,
    pub states: Vec<(TensorId, Vec<u8>)>,
}

/// Builds a case's graph (marking its outputs) and random data.
pub type Builder = Box<dyn Fn(&mut Graph, &mut Rng) -> Result<Built> + Send + Sync>;

/// One row of the op table.
pub struct Case {
    /// The op under test, as ggml names it (`"MUL_MAT"`), for filtering.
    pub op: &'static str,
    /// Op, dtypes and shapes, e.g. `"MUL_MAT q4_0 x f32 k=64 m=33 n=1"`.
    pub name: String,
    /// Largest acceptable NMSE per output.
    pub max_nmse: f64,
    pub build: Builder,
}

/// How a case went.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every output within tolerance; the worst NMSE.
    Pass { nmse: f64 },
    /// Some output beyond tolerance.
    Fail { nmse: f64, max_nmse: f64 },
    /// The backend under test said it does not support the graph.
    Unsupported(String),
    /// Building, compiling, running or reading failed.
    Error(String),
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub op: &'static str,
    pub name: String,
    pub outcome: Outcome,
    /// Compile + run + read time on the backend under test.
    pub time: Duration,
}

/// Runs `graph` once on `backend` with `built`'s states and inputs; every output's bytes.
pub(crate) async fn execute(
    backend: &dyn Backend,
    graph: &Graph,
    built: &Built,
) -> Result<Vec<Vec<u8>>> {
    let mut exe = backend.compile(graph)?;
    for (t, data) in &built.states {
        exe.write(*t, data)?;
    }
    let inputs: Vec<(TensorId, &[u8])> = built.inputs.iter().map(|(t, d)| (*t, &d[..])).collect();
    exe.run(&inputs)?;
    let mut out = Vec::with_capacity(graph.outputs().len());
    for &t in graph.outputs() {
        out.push(exe.read_async(t).await?);
    }
    Ok(out)
}

/// The seed of `case`'s random inputs under the base seed `seed`: mixed with its name
/// (FNV-1a), so a case's inputs do not move when cases are added before it.
pub fn case_seed(seed: u64, name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64 ^ seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The NMSE int8 activations explain in a product or fusion case (ggml's tolerance for
/// products, 5e-4; 1e-3 for a GLU of two products, whose gate amplifies relative errors), or
/// `None` for an op they do not touch.
pub fn int8_bound(case: &Case) -> Option<f64> {
    let glu = case.op == "FUSED_GLU"
        || case.op == "FUSED_NORM_MAT_VEC" && case.name.contains(" into Glu ");
    match case.op == "MUL_MAT" || case.op == "MUL_MAT_ID" || case.op.starts_with("FUSED") {
        true if glu => Some(1e-3),
        true => Some(5e-4),
        false => None,
    }
}

/// Runs `case` on `reference` and on `backend` and compares the outputs, its inputs drawn from
/// [`case_seed`]`(seed, name)`.
#[cfg(not(target_arch = "wasm32"))]
pub fn run_case(
    reference: &dyn Backend,
    backend: &dyn Backend,
    case: &Case,
    seed: u64,
) -> CaseResult {
    pollster::block_on(run_case_async(reference, backend, case, seed))
}

/// [`run_case`] without blocking: the browser's way.
pub async fn run_case_async(
    reference: &dyn Backend,
    backend: &dyn Backend,
    case: &Case,
    seed: u64,
) -> CaseResult {
    let (outcome, time) = compare(reference, backend, case, seed).await;
    CaseResult {
        op: case.op,
        name: case.name.clone(),
        outcome,
        time,
    }
}

async fn compare(
    reference: &dyn Backend,
    backend: &dyn Backend,
    case: &Case,
    seed: u64,
) -> (Outcome, Duration) {
    let mut graph = Graph::new();
    let mut rng = Rng::new(case_seed(seed, &case.name));
    let built = match (case.build)(&mut graph, &mut rng) {
        Ok(b) => b,
        Err(e) => return (Outcome::Error(format!("building: {e}")), Duration::ZERO),
    };
    let want = match execute(reference, &graph, &built).await {
        Ok(w) => w,
        Err(e) => return (Outcome::Error(format!("reference: {e}")), Duration::ZERO),
    };
    let t0 = Instant::now();
    let got = match execute(backend, &graph, &built).await {
        Ok(g) => g,
        Err(Error::Unsupported { why, .. }) => return (Outcome::Unsupported(why), t0.elapsed()),
        Err(e) => return (Outcome::Error(e.to_string()), t0.elapsed()),
    };
    let time = t0.elapsed();
    let mut worst = 0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let dtype = graph.dtype(graph.outputs()[i]);
        let err = match (to_f32(dtype, g), to_f32(dtype, w)) {
            (Ok(g), Ok(w)) => nmse(&g, &w),
            (Err(e), _) | (_, Err(e)) => return (Outcome::Error(e.to_string()), time),
        };
        worst = worst.max(err);
    }
    let outcome = if worst <= case.max_nmse {
        Outcome::Pass { nmse: worst }
    } else {
        Outcome::Fail {
            nmse: worst,
            max_nmse: case.max_nmse,
        }
    };
    (outcome, time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nmse_is_relative_and_nan_aware() {
        assert_eq!(nmse(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((nmse(&[1.1, 2.0], &[1.0, 2.0]) - 0.01 / 5.0).abs() < 1e-9);
        assert_eq!(nmse(&[f32::NAN], &[f32::NAN]), 0.0);
        assert_eq!(nmse(&[f32::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(nmse(&[1.0], &[1.0, 2.0]), f64::INFINITY);
    }

    /// A mul_mat_id's experts count only as far as its ids can pick them.
    #[test]
    fn expert_bytes_count_the_picked_experts() {
        let mut g = wgllm_core::Graph::new();
        let (k, m) = (64u64, 16u64);
        let expert = k * m * 4;
        let w = g
            .weight(
                "w",
                DType::F32,
                [k, m, 8, 1],
                vec![0u8; (expert * 8) as usize].into(),
            )
            .unwrap();
        let x = g.input("x", DType::F32, [k, 1, 1, 1]).unwrap();
        let ids = g.input("ids", DType::I32, [2, 1, 1, 1]).unwrap();
        let r = g.mul_mat_id(w, x, ids).unwrap();
        g.mark_output(r).unwrap();
        // Two experts, the activations, the ids and the two result columns.
        assert_eq!(perf::bytes(&g), 2 * expert + k * 4 + 2 * 4 + 2 * m * 4);
    }

    #[test]
    fn random_blocks_have_sane_scales() {
        let mut rng = Rng::new(1);
        let b = random_bytes(&mut rng, DType::Q6_K, 512, 0.0, 0.0).unwrap();
        let v = to_f32(DType::Q6_K, &b).unwrap();
        assert!(v
            .iter()
            .all(|x| x.is_finite() && x.abs() < 0.02 * 128.0 * 32.0));
    }
}
