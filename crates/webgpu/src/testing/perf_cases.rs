//! The large shapes of issue 6's kernel benchmarks, for `wgllm ops --large`: a plain copy (the
//! bandwidth reference every other figure is a fraction of), quantized mat-vec at a Llama-8B
//! layer's shapes (alone, and streamed through 8 layers of distinct weights as a decode step
//! reads them), f16 mat-mat at 4096³ and prefill shapes, decode attention over long caches,
//! and chains of small dependent dispatches (what one costs when a decode step is ~400).
//!
//! The op table checks correctness on small shapes; these cases exist to be timed. Each says
//! whether it is also compared with the CPU reference ([`LargeCase::check`]): the mat-vec and
//! attention cases are (cheap on the CPU), the mat-mat ones (tens of GFLOP) and the copy are not.
//! Big operands are states (written once before the timed runs), not per-run inputs.

use bytes::Bytes;
use wgllm_core::{DType, Graph, Result};

use super::cases::{case, input, EXACT, F32_MATH, MATMUL};
use super::{random_bytes, Built, Case};

/// One benchmark shape.
pub struct LargeCase {
    pub case: Case,
    /// Whether to compare with the CPU reference before timing.
    pub check: bool,
}

/// Name of the copy case whose GB/s the others are reported against.
pub const COPY_CASE: &str = "COPY f32 256 MiB";

/// Weight dtypes of the mat-vec benchmark (issue 6's list).
const MAT_VEC_DTYPES: [DType; 7] = [
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q4_K,
    DType::Q6_K,
    DType::Q8_0,
    DType::F16,
];

/// The copy first, then mat-vec, mat-mat and attention.
pub fn large_cases() -> Vec<LargeCase> {
    let mut out = vec![LargeCase {
        case: case("CPY", COPY_CASE.into(), 0.0, |g, rng| {
            let n = 64 << 20;
            let mut b = Built::default();
            let s = g.state("src", DType::F32, [n, 1, 1, 1])?;
            b.states
                .push((s, random_bytes(rng, DType::F32, n, -1.0, 1.0)?));
            let r = g.cont(s, DType::F32)?;
            g.mark_output(r)?;
            Ok(b)
        }),
        check: false,
    }];
    // (k, m): attention output / q projection, the ffn up/gate, the ffn down of Llama 3.1 8B.
    for wt in MAT_VEC_DTYPES {
        for (k, m) in [(4096, 4096), (4096, 14336), (14336, 4096)] {
            out.push(LargeCase {
                case: mat_case(wt, k, m, 1),
                check: true,
            });
        }
    }
    // The same products as a decode step meets them: a chain of distinct weights, far more
    // than the L2 cache holds, so every byte comes from memory (the cases above repeat one
    // weight, which a large GPU's L2 holds across runs).
    for wt in [DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::F16] {
        for shapes in [&[(4096, 4096)][..], &[(4096, 14336), (14336, 4096)]] {
            out.push(LargeCase {
                case: stream_case(wt, shapes),
                check: false,
            });
        }
    }
    for (k, m, n) in [(4096, 4096, 4096), (4096, 4096, 512), (4096, 14336, 512)] {
        out.push(LargeCase {
            case: mat_case(DType::F16, k, m, n),
            check: false,
        });
    }
    // Prefill of Llama 3.1 8B's q4_0 and q4_K layers (512 tokens): the weights decoded per tile.
    for wt in [DType::Q4_0, DType::Q4_K] {
        for (k, m) in [(4096, 4096), (4096, 14336), (14336, 4096), (4096, 1024)] {
            out.push(LargeCase {
                case: mat_case(wt, k, m, 512),
                check: false,
            });
        }
    }
    // What one dispatch costs when a chain of them depends each on the last (a decode step is
    // ~400 such): 400 one-element scales, 400 RMS norms times a weight (one fused kernel) of
    // Llama 8B's width, and 400 SmolLM2-sized mat-vecs (576 x 576 q4_1).
    out.push(LargeCase {
        case: chain_case("SCALE f32 [1]", 1, Link::Scale),
        check: true,
    });
    out.push(LargeCase {
        case: chain_case("RMS_NORM x w f32 [4096]", 4096, Link::Norm),
        check: true,
    });
    out.push(LargeCase {
        // The products grow without bound: timed only.
        case: chain_case("MUL_MAT q4_1 576 x 576", 576, Link::MatVec(DType::Q4_1)),
        check: false,
    });
    // ... and early in a generation: a 512-row cache with only its first 12 keys written, the
    // rest masked -inf (the short-context cost of a decode step).
    for (n_kv, visible) in [(4096, 4096), (32768, 32768), (512, 12)] {
        out.push(LargeCase {
            case: attn_case(1, n_kv, visible),
            check: true,
        });
    }
    // A 512-token prefill's attention (causal: query i sees keys 0 ..= i).
    out.push(LargeCase {
        case: attn_case(512, 512, 512),
        check: false,
    });
    // Mixture-of-experts products: Qwen3-30B-A3B's expert FFN shapes, 8 of 128 experts a
    // token (GB/s counts the experts the ids can pick). A decode step's one token, batches
    // around where the columns leave the mat-vec for the routed tiles, and a 512-token
    // prefill's gate (or up) and down projections.
    for (k, m, tokens) in [
        (2048, 768, 1),
        (2048, 768, 16),
        (2048, 768, 64),
        (2048, 768, 512),
        (768, 2048, 512),
    ] {
        out.push(LargeCase {
            case: moe_case(DType::Q4_K, k, m, (128, 8), tokens),
            check: tokens <= 64,
        });
    }
    // The output head of a decode step: top-64 and argmax over SmolLM2's, Llama 3's and
    // Gemma 3's vocabularies.
    for (n, k) in [(49152, Some(64)), (262144, Some(64)), (128256, None)] {
        out.push(LargeCase {
            case: select_case(n, k),
            check: true,
        });
    }
    out
}

/// `top_k(x, k)` (argmax when `k` is `None`) of one random row of `n` values.
fn select_case(n: u64, k: Option<u32>) -> Case {
    let (op, name) = match k {
        Some(k) => ("TOP_K", format!("TOP_K f32 [{n}] k={k}")),
        None => ("ARGMAX", format!("ARGMAX f32 [{n}]")),
    };
    case(op, name, EXACT, move |g, rng| {
        let mut b = Built::default();
        let x = input(g, rng, &mut b, DType::F32, [n, 1, 1, 1], -10.0, 10.0)?;
        let r = match k {
            Some(k) => g.top_k(x, k)?,
            None => g.argmax(x)?,
        };
        g.mark_output(r)?;
        Ok(b)
    })
}

/// `w [k, m] × x [k, n]` with random weights of `wt`.
fn mat_case(wt: DType, k: u64, m: u64, n: u64) -> Case {
    let name = format!("MUL_MAT {wt} x f32 k={k} m={m} n={n}");
    case("MUL_MAT", name, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let data = random_bytes(rng, wt, k * m, -1.0, 1.0)?;
        let w = g.weight("w", wt, [k, m, 1, 1], Bytes::from(data))?;
        let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
        let r = g.mul_mat(w, x)?;
        g.mark_output(r)?;
        Ok(b)
    })
}

/// `mul_mat_id` of `n_expert` experts of `wt` [k, m] for `tokens` tokens that each route to
/// `n_used` of them.
fn moe_case(wt: DType, k: u64, m: u64, (n_expert, n_used): (u64, u64), tokens: u64) -> Case {
    let name =
        format!("MUL_MAT_ID {wt} x f32 k={k} m={m} experts={n_expert} used={n_used} n={tokens}");
    case("MUL_MAT_ID", name, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let data = random_bytes(rng, wt, k * m * n_expert, -1.0, 1.0)?;
        let w = g.weight("experts", wt, [k, m, n_expert, 1], Bytes::from(data))?;
        let x = input(g, rng, &mut b, DType::F32, [k, 1, tokens, 1], -1.0, 1.0)?;
        let ids = g.input("ids", DType::I32, [n_used, tokens, 1, 1])?;
        let picks = super::shape_cases::expert_ids(rng, n_used * tokens, n_expert);
        b.inputs.push((ids, picks));
        let r = g.mul_mat_id(w, x, ids)?;
        g.mark_output(r)?;
        Ok(b)
    })
}

/// Layers of a [`stream_case`].
pub const STREAM_LAYERS: usize = 8;

/// [`STREAM_LAYERS`] times the products `shapes` ((k, m) each, every m the next k, the last m the
/// first k) on one vector, each with its own weight of `wt` and behind an RMS norm (which keeps
/// the values bounded and, as in a decode step, fuses into the product's activation rounding).
fn stream_case(wt: DType, shapes: &[(u64, u64)]) -> Case {
    let dims: Vec<String> = shapes.iter().map(|(k, m)| format!("{k}x{m}")).collect();
    let name = format!(
        "STREAM {STREAM_LAYERS} x MUL_MAT {wt} {} n=1",
        dims.join(" + ")
    );
    let shapes = shapes.to_vec();
    case("MUL_MAT", name, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let mut x = input(
            g,
            rng,
            &mut b,
            DType::F32,
            [shapes[0].0, 1, 1, 1],
            -1.0,
            1.0,
        )?;
        for layer in 0..STREAM_LAYERS {
            for (i, &(k, m)) in shapes.iter().enumerate() {
                let data = random_bytes(rng, wt, k * m, -1.0, 1.0)?;
                let w = g.weight(
                    &format!("w{layer}.{i}"),
                    wt,
                    [k, m, 1, 1],
                    Bytes::from(data),
                )?;
                let ones = g.weight(
                    &format!("g{layer}.{i}"),
                    DType::F32,
                    [k, 1, 1, 1],
                    Bytes::from(1f32.to_le_bytes().repeat(k as usize)),
                )?;
                let h = g.rms_norm(x, 1e-6)?;
                let h = g.mul(h, ones)?;
                x = g.mul_mat(w, h)?;
            }
        }
        g.mark_output(x)?;
        Ok(b)
    })
}

/// Dispatches in a chain case.
pub const CHAIN: u64 = 400;

/// One op of a chain case.
#[derive(Clone, Copy)]
enum Link {
    /// `x * 0.999 + 0.001`.
    Scale,
    /// `rms_norm(x) * w` with an f32 `w` of `x`'s length.
    Norm,
    /// `w × x` with an `n × n` weight of this dtype.
    MatVec(DType),
}

/// [`CHAIN`] dependent `link`s on an `n`-vector.
fn chain_case(desc: &str, n: u64, link: Link) -> Case {
    let name = format!("CHAIN {CHAIN} x {desc}");
    case("CHAIN", name, MATMUL, move |g, rng| {
        let mut b = Built::default();
        let mut x = input(g, rng, &mut b, DType::F32, [n, 1, 1, 1], -1.0, 1.0)?;
        let (wt, wn) = match link {
            Link::Scale => (None, 0),
            Link::Norm => (Some(DType::F32), n),
            Link::MatVec(wt) => (Some(wt), n * n),
        };
        let w = match wt {
            Some(wt) => {
                let data = random_bytes(rng, wt, wn, -1.0, 1.0)?;
                let ne1 = wn / n;
                Some(g.weight("w", wt, [n, ne1, 1, 1], Bytes::from(data))?)
            }
            None => None,
        };
        for _ in 0..CHAIN {
            x = match (link, w) {
                (Link::MatVec(_), Some(w)) => g.mul_mat(w, x)?,
                (Link::Norm, Some(w)) => {
                    let y = g.rms_norm(x, 1e-6)?;
                    g.mul(y, w)?
                }
                _ => g.scale(x, 0.999, 0.001)?,
            };
        }
        g.mark_output(x)?;
        Ok(b)
    })
}

/// `n_q` queries (32 heads of 128) over an f16 cache of `n_kv` keys and 8 KV heads, with a
/// causal mask, as Llama 3.1 8B's attention for the last `n_q` of `visible` positions: query i
/// sees keys up to visible - n_q + i, the keys past `visible` are -inf.
fn attn_case(n_q: u64, n_kv: u64, visible: u64) -> Case {
    let tail = match n_kv - visible {
        0 => String::new(),
        t => format!(" (last {t} keys -inf)"),
    };
    let name = format!("FLASH_ATTN_EXT f16 d=128 n_q={n_q} n_kv={n_kv} heads 32/8{tail}");
    case(
        "FLASH_ATTN_EXT",
        name,
        F32_MATH,
        move |g: &mut Graph, rng| {
            let mut b = Built::default();
            let q = input(g, rng, &mut b, DType::F32, [128, n_q, 32, 1], -1.0, 1.0)?;
            let mut cache = |name: &str, g: &mut Graph| -> Result<_> {
                let t = g.state(name, DType::F16, [128, n_kv, 8, 1])?;
                b.states
                    .push((t, random_bytes(rng, DType::F16, 128 * n_kv * 8, -1.0, 1.0)?));
                Ok(t)
            };
            let k = cache("k", g)?;
            let v = cache("v", g)?;
            // Rows padded to an even count (the decode case's second row repeats the first).
            let rows = n_q.max(2);
            let mask = g.input("mask", DType::F16, [n_kv, rows, 1, 1])?;
            // f16 0 for the keys a row sees, -inf (0xfc00) after.
            let bytes = (0..rows).flat_map(|i| {
                let seen = visible - n_q + i.min(n_q - 1) + 1;
                (0..n_kv).flat_map(move |j| match j < seen {
                    true => [0u8, 0],
                    false => [0, 0xfc],
                })
            });
            b.inputs.push((mask, bytes.collect()));
            let r = g.flash_attn_ext(q, k, v, Some(mask), None, 0.088, 0.0, 0.0)?;
            g.mark_output(r)?;
            Ok(b)
        },
    )
}
