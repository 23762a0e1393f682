//! Op-table cases of flash attention and the row selections (argmax, top_k).
//!
//! Attention reads K/V as a view of a cache `[d·n_head_kv, n_ctx, batch]` one row in (a strided,
//! offset view, as a model's KV cache), with decode (n_q = 1, 2, 8: the vec kernel, GQA 1:1 to
//! 8:1, key counts off its 32- and 64-key steps) and prefill (7, 33) shapes, masks with -inf
//! (causal, random, runs, a sliding window, a masked cache tail, a fully masked row), sinks,
//! logit softcap and ALiBi.
//!
//! Tolerance: the CPU reference decodes the same f16/bf16/q8_0/q4_0 bytes to the same f32 values,
//! so every K/V dtype is plain f32 math on both sides; what differs is the summation order of the
//! dot products and of the online softmax (per tile of 64 keys here, per key there) and WGSL's
//! `exp`/`tanh`, which are not correctly rounded. Those are relative errors of ~1e-6 at most on
//! each output, so NMSE 1e-10 as for the other f32 math ops ([`F32_MATH`]); prefill cases allow
//! the f16 rounding of the cooperative-matrix kernel ([`ATTN_PREFILL`]). The selections return
//! indices: exact.

use wgllm_core::{DType, Graph, Result, TensorId};

use super::cases::{case, input, EXACT, F32_MATH};

/// Prefill attention (more than 8 query rows), which runs on f16 operands where cooperative
/// matrices are enabled: q and the probabilities rounded to f16 (a relative error of 2^-11 at
/// most each), sums in f32; ~1e-7 for these cases, as the f16 products' [`MATMUL_F16`].
///
/// [`MATMUL_F16`]: super::cases::MATMUL_F16
const ATTN_PREFILL: f64 = 1e-6;
use super::{random_bytes, Built, Case, Rng};

/// Which logits a mask hides.
#[derive(Clone, Copy, Debug)]
enum Mask {
    /// Query i of n_q sees keys 0..=n_kv - n_q + i; visible entries are 0.
    Causal,
    /// About a quarter of the entries -inf, the rest in [-1, 0).
    Random,
    /// A KV cache filled up to position p = n_kv / 8 + i: later keys are -inf (whole splits of
    /// a split-K decode see no key).
    Prefix,
    /// Runs of -inf: keys j with (j / 37) % 3 == 1 hidden (runs across the decode kernel's
    /// octets and steps), the others causal.
    Runs,
    /// A sliding window of 100 keys ending at the query's causal position.
    Window,
    /// A decode step at position 11 + i of a long cache: every later key -inf (what a model
    /// passes early in a generation: the whole cache, the unwritten rows masked).
    Tail,
}

/// One attention case.
#[derive(Clone, Copy, Debug)]
struct Spec {
    d: u64,
    dv: u64,
    n_q: u64,
    n_kv: u64,
    n_head: u64,
    n_head_kv: u64,
    batch: u64,
    kv: DType,
    /// Mask dtype, kind, and whether query row 0 has every key masked.
    mask: Option<(DType, Mask, bool)>,
    /// Mask heads (1 or n_head).
    m2: u64,
    sinks: bool,
    scale: f32,
    max_bias: f32,
    softcap: f32,
    /// K and V rows that every query row's mask hides are NaN (a cache's unwritten rows may
    /// hold anything): the reference skips them, a kernel must not let them reach the output.
    nan_hidden: bool,
}

/// Llama 8B's decode heads in small: 8 query heads of 128 over 2 K/V heads, an f16 cache.
const GQA128: Spec = Spec {
    d: 128,
    dv: 128,
    n_head: 8,
    n_head_kv: 2,
    kv: DType::F16,
    scale: 0.088,
    ..BASE
};

const BASE: Spec = Spec {
    d: 64,
    dv: 64,
    n_q: 1,
    n_kv: 64,
    n_head: 4,
    n_head_kv: 4,
    batch: 1,
    kv: DType::F32,
    mask: None,
    m2: 1,
    sinks: false,
    scale: 0.125,
    max_bias: 0.0,
    softcap: 0.0,
    nan_hidden: false,
};

/// `[dim, n_kv, n_head_kv, batch]` as a view of a cache `[dim·n_head_kv, n_kv + 3, batch]`
/// starting at its second row.
fn kv_view(g: &mut Graph, rng: &mut Rng, b: &mut Built, s: &Spec, dim: u64) -> Result<TensorId> {
    let (ctx, row) = (s.n_kv + 3, dim * s.n_head_kv);
    let cache = g.input(
        &format!("cache{}", b.inputs.len()),
        s.kv,
        [row, ctx, s.batch, 1],
    )?;
    let mut bytes = random_bytes(rng, s.kv, row * ctx * s.batch, -1.0, 1.0)?;
    let row_bytes = s.kv.row_bytes(row).unwrap_or(0);
    if s.nan_hidden {
        let nan: &[u8] = match s.kv {
            DType::F32 => &[0x00, 0x00, 0xc0, 0x7f],
            DType::F16 => &[0x00, 0x7e],
            DType::BF16 => &[0xc0, 0x7f],
            other => {
                let what = format!("NaN rows in {other}");
                return Err(wgllm_core::Error::Shape { what });
            }
        };
        let what = "NaN rows without a mask".to_string();
        let (_, kind, _) = s.mask.ok_or(wgllm_core::Error::Shape { what })?;
        for j in (0..s.n_kv).filter(|&j| (0..s.n_q).all(|i| hides(kind, s, i, j) == Some(true))) {
            for batch in 0..s.batch {
                // View key j is cache row j + 1.
                let at = ((batch * ctx + j + 1) * row_bytes) as usize;
                for e in bytes[at..at + row_bytes as usize].chunks_mut(nan.len()) {
                    e.copy_from_slice(nan);
                }
            }
        }
    }
    b.inputs.push((cache, bytes));
    let head_bytes = row_bytes / s.n_head_kv;
    let nb = [
        s.kv.type_size() as u64,
        row_bytes,
        head_bytes,
        row_bytes * ctx,
    ];
    g.view(cache, [dim, s.n_kv, s.n_head_kv, s.batch], nb, row_bytes)
}

/// Whether a mask of `kind` hides key j from query row i (`None`: at random).
fn hides(kind: Mask, s: &Spec, i: u64, j: u64) -> Option<bool> {
    Some(match kind {
        Mask::Causal => j + s.n_q > s.n_kv + i,
        Mask::Random => return None,
        Mask::Prefix => j > s.n_kv / 8 + i,
        Mask::Runs => (j / 37) % 3 == 1 || j + s.n_q > s.n_kv + i,
        Mask::Window => j + s.n_q > s.n_kv + i || j + s.n_q + 100 <= s.n_kv + i,
        Mask::Tail => j > 11 + i,
    })
}

/// A mask `[n_kv, n_q + 1, m2, batch]` (one padding row, as ggml pads n_q).
fn mask(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    s: &Spec,
    (dtype, kind, dead_row): (DType, Mask, bool),
) -> Result<TensorId> {
    let ne = [s.n_kv, s.n_q + 1, s.m2, s.batch];
    let t = g.input("mask", dtype, ne)?;
    let mut vals = Vec::new();
    for _ in 0..ne[2] * ne[3] {
        for i in 0..ne[1] {
            for j in 0..ne[0] {
                let hidden = hides(kind, s, i, j).unwrap_or_else(|| rng.below(4) == 0);
                vals.push(if hidden || (dead_row && i == 0) {
                    f32::NEG_INFINITY
                } else if matches!(kind, Mask::Random) {
                    rng.uniform(-1.0, 0.0)
                } else {
                    0.0
                });
            }
        }
    }
    let bytes = match dtype {
        DType::F16 => vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    b.inputs.push((t, bytes));
    Ok(t)
}

fn flash_attn_cases(out: &mut Vec<Case>) {
    let causal16 = Some((DType::F16, Mask::Causal, false));
    let causal32 = Some((DType::F32, Mask::Causal, false));
    let random32_dead = Some((DType::F32, Mask::Random, true));
    let random16 = Some((DType::F16, Mask::Random, false));
    let random16_dead = Some((DType::F16, Mask::Random, true));
    let prefix16 = Some((DType::F16, Mask::Prefix, false));
    let runs16 = Some((DType::F16, Mask::Runs, false));
    let runs32_dead = Some((DType::F32, Mask::Runs, true));
    let window16 = Some((DType::F16, Mask::Window, false));
    let tail16 = Some((DType::F16, Mask::Tail, false));
    let specs = [
        // Decode as GQA models run it: the query heads of a K/V head in one workgroup.
        Spec {
            n_kv: 1000,
            mask: runs32_dead,
            ..GQA128
        },
        Spec {
            n_kv: 333,
            n_head: 16,
            n_head_kv: 2,
            kv: DType::BF16,
            mask: prefix16,
            ..BASE
        },
        Spec {
            n_q: 2,
            n_kv: 515,
            n_head: 8,
            n_head_kv: 1,
            batch: 2,
            kv: DType::F16,
            mask: window16,
            sinks: true,
            ..BASE
        },
        Spec {
            n_q: 2,
            n_kv: 130,
            n_head: 8,
            n_head_kv: 2,
            mask: random32_dead,
            m2: 8,
            max_bias: 8.0,
            sinks: true,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_kv: 700,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::Q4_0,
            mask: runs16,
            softcap: 30.0,
            ..BASE
        },
        Spec {
            n_q: 8,
            n_kv: 300,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::Q8_0,
            mask: causal16,
            ..BASE
        },
        // Early decode over a long cache, the tail masked (most splits and steps see no key).
        Spec {
            n_kv: 640,
            mask: tail16,
            ..GQA128
        },
        // A mask row per head with ALiBi, 8 heads a workgroup (past 2,048 keys): the vec
        // kernel's mask chunks are 128 keys, so these take several (all visible in some; none
        // in most with the tail).
        Spec {
            n_q: 2,
            n_kv: 2100,
            n_head: 8,
            n_head_kv: 1,
            mask: runs32_dead,
            m2: 8,
            max_bias: 8.0,
            sinks: true,
            ..BASE
        },
        // The same past 1,024 keys: split.
        Spec {
            n_kv: 1100,
            n_head: 8,
            n_head_kv: 1,
            kv: DType::F16,
            mask: tail16,
            m2: 8,
            max_bias: 4.0,
            ..BASE
        },
        // Rows that are not whole 16-byte words: the tiled kernel's split path.
        Spec {
            d: 36,
            dv: 36,
            n_kv: 400,
            n_head: 4,
            n_head_kv: 1,
            kv: DType::F16,
            mask: causal16,
            ..BASE
        },
        // A cache past 2,048 keys: vec workgroups of 4 heads of 128 (2 below), split.
        Spec {
            n_kv: 2500,
            mask: prefix16,
            ..GQA128
        },
        // Past 4,096 keys heads of 128 take 2 keys an octet too (`split_keys`), every key seen.
        Spec {
            n_kv: 4200,
            mask: causal16,
            ..GQA128
        },
        // Long decode: split-K over the keys, most splits fully masked.
        Spec {
            n_kv: 1500,
            n_head: 9,
            n_head_kv: 3,
            kv: DType::F16,
            mask: prefix16,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_q: 2,
            n_kv: 1100,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::Q8_0,
            mask: prefix16,
            sinks: true,
            softcap: 30.0,
            ..BASE
        },
        Spec {
            n_kv: 700,
            sinks: true,
            ..BASE
        },
        // Decode.
        Spec { n_kv: 1, ..BASE },
        Spec {
            n_kv: 5,
            kv: DType::F16,
            mask: causal16,
            ..BASE
        },
        Spec {
            n_kv: 257,
            mask: causal16,
            ..GQA128
        },
        Spec {
            n_kv: 600,
            n_head_kv: 2,
            kv: DType::Q8_0,
            mask: causal32,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_head: 7,
            n_head_kv: 1,
            kv: DType::Q4_0,
            mask: causal16,
            sinks: true,
            ..BASE
        },
        Spec {
            d: 256,
            dv: 256,
            n_head: 2,
            n_head_kv: 1,
            kv: DType::F16,
            mask: causal16,
            scale: 0.0625,
            ..BASE
        },
        Spec {
            n_kv: 257,
            n_head_kv: 2,
            batch: 2,
            kv: DType::Q8_0,
            mask: random16,
            ..BASE
        },
        Spec {
            d: 40,
            dv: 40,
            n_kv: 5,
            sinks: true,
            ..BASE
        },
        // Prefill.
        // f32 K/V of an encoder (no mask; a padding mask): rounded to f16 for the cooperative
        // kernel where it runs.
        Spec {
            n_q: 40,
            n_kv: 300,
            n_head: 3,
            n_head_kv: 3,
            ..BASE
        },
        Spec {
            d: 32,
            dv: 32,
            n_q: 40,
            n_kv: 200,
            n_head: 6,
            n_head_kv: 6,
            batch: 2,
            mask: random32_dead,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_q: 33,
            n_kv: 90,
            n_head: 4,
            n_head_kv: 2,
            batch: 2,
            mask: random32_dead,
            ..BASE
        },
        Spec {
            n_q: 7,
            n_kv: 5,
            kv: DType::F16,
            mask: causal16,
            ..BASE
        },
        Spec {
            d: 40,
            dv: 40,
            n_q: 33,
            n_kv: 64,
            mask: random32_dead,
            softcap: 2.0,
            scale: 1.0,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_q: 33,
            n_kv: 257,
            n_head_kv: 2,
            batch: 2,
            kv: DType::F16,
            mask: random16_dead,
            max_bias: 8.0,
            scale: 0.088,
            ..BASE
        },
        Spec {
            n_q: 7,
            n_kv: 600,
            n_head: 7,
            n_head_kv: 1,
            kv: DType::Q8_0,
            mask: causal32,
            sinks: true,
            softcap: 20.0,
            ..BASE
        },
        Spec {
            d: 80,
            dv: 80,
            n_q: 7,
            n_kv: 257,
            batch: 2,
            mask: random32_dead,
            m2: 4,
            ..BASE
        },
        Spec {
            n_q: 33,
            n_kv: 64,
            n_head_kv: 2,
            batch: 2,
            kv: DType::Q4_0,
            mask: causal16,
            sinks: true,
            ..BASE
        },
        Spec {
            n_q: 7,
            n_kv: 64,
            kv: DType::BF16,
            mask: causal32,
            max_bias: 4.0,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 64,
            n_q: 7,
            n_kv: 33,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::F16,
            mask: causal16,
            ..BASE
        },
        Spec {
            n_q: 7,
            n_kv: 5,
            sinks: true,
            ..BASE
        },
        // Prefill on cooperative matrices where they run (f16 K/V, K heads of 128): a whole
        // block of 64 rows stored straight from the accumulators, GQA with a mask row per head
        // and ALiBi, V heads apart from K's; a partial block over a window with sinks and
        // softcap.
        Spec {
            d: 128,
            dv: 64,
            n_q: 64,
            n_kv: 200,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::F16,
            mask: runs32_dead,
            m2: 8,
            max_bias: 8.0,
            scale: 0.088,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_q: 70,
            n_kv: 300,
            n_head: 4,
            n_head_kv: 1,
            kv: DType::F16,
            mask: window16,
            sinks: true,
            softcap: 30.0,
            scale: 0.088,
            ..BASE
        },
        // The same without a mask (the kernel's other variant: every key below n_kv, the last
        // tile cut short), batch 2: whole blocks of the second batch and a later block stored
        // straight from the accumulators.
        Spec {
            d: 128,
            dv: 128,
            n_q: 128,
            n_kv: 45,
            n_head: 4,
            n_head_kv: 2,
            batch: 2,
            kv: DType::F16,
            sinks: true,
            softcap: 20.0,
            scale: 0.088,
            ..BASE
        },
        // A first block that sees no key (no tile runs; the sinks alone), fewer keys than a
        // tile.
        Spec {
            d: 128,
            dv: 64,
            n_q: 80,
            n_kv: 10,
            n_head: 2,
            n_head_kv: 1,
            kv: DType::F16,
            mask: causal16,
            sinks: true,
            scale: 0.088,
            ..BASE
        },
        // Prefill by tiles of keys: several blocks of query rows and a partial last one,
        // a causal upper triangle and the keys before a window skipped, head sizes up to 256
        // (lavapipe's 32 KiB of workgroup memory runs 256 on the row kernel), no mask, and NaN
        // in the rows no query sees (unwritten cache rows).
        Spec {
            d: 128,
            dv: 128,
            n_q: 100,
            n_kv: 300,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::F16,
            mask: causal16,
            scale: 0.088,
            ..BASE
        },
        Spec {
            n_q: 64,
            n_kv: 400,
            n_head: 4,
            n_head_kv: 1,
            kv: DType::Q8_0,
            mask: window16,
            sinks: true,
            ..BASE
        },
        Spec {
            d: 256,
            dv: 256,
            n_q: 20,
            n_kv: 90,
            n_head: 4,
            n_head_kv: 2,
            kv: DType::F16,
            mask: causal32,
            sinks: true,
            softcap: 30.0,
            scale: 0.0625,
            ..BASE
        },
        Spec {
            n_q: 40,
            n_kv: 50,
            sinks: true,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_q: 48,
            n_kv: 200,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::F16,
            mask: prefix16,
            nan_hidden: true,
            ..BASE
        },
        Spec {
            n_q: 12,
            n_kv: 150,
            kv: DType::BF16,
            mask: tail16,
            nan_hidden: true,
            ..BASE
        },
        Spec {
            d: 128,
            dv: 128,
            n_kv: 640,
            n_head: 8,
            n_head_kv: 2,
            kv: DType::F32,
            mask: tail16,
            nan_hidden: true,
            ..BASE
        },
        Spec {
            n_kv: 3000,
            kv: DType::F16,
            mask: prefix16,
            nan_hidden: true,
            ..BASE
        },
        // K and V heads of different sizes, 192 and 128 (blocks of 8 rows in 32 KiB of
        // workgroup memory), a mask row per head with ALiBi.
        Spec {
            d: 192,
            dv: 128,
            n_q: 20,
            n_kv: 70,
            n_head: 4,
            n_head_kv: 2,
            kv: DType::F16,
            mask: random32_dead,
            m2: 4,
            max_bias: 8.0,
            scale: 0.07,
            ..BASE
        },
        // More query rows than keys: the first block sees no key at all (no tile runs), the
        // second some rows none; sinks, and heads of 80 (the last vec4 columns unowned).
        Spec {
            d: 80,
            dv: 80,
            n_q: 40,
            n_kv: 6,
            n_head: 2,
            n_head_kv: 1,
            kv: DType::BF16,
            mask: causal16,
            sinks: true,
            ..BASE
        },
    ];
    for s in specs {
        let mask_desc = s
            .mask
            .map(|(t, k, dead)| format!("{t} {k:?}{}", if dead { " +dead row" } else { "" }));
        let desc = format!(
            "FLASH_ATTN_EXT {} d={} dv={} n_q={} n_kv={} heads {}/{} batch {} mask {} m2={} sinks={} softcap={} max_bias={}{}",
            s.kv, s.d, s.dv, s.n_q, s.n_kv, s.n_head, s.n_head_kv, s.batch,
            mask_desc.unwrap_or_else(|| "none".into()), s.m2, s.sinks, s.softcap, s.max_bias,
            if s.nan_hidden { " NaN in hidden rows" } else { "" }
        );
        let tol = if s.n_q > 8 { ATTN_PREFILL } else { F32_MATH };
        out.push(case("FLASH_ATTN_EXT", desc, tol, move |g, rng| {
            let mut b = Built::default();
            let q = input(
                g,
                rng,
                &mut b,
                DType::F32,
                [s.d, s.n_q, s.n_head, s.batch],
                -1.0,
                1.0,
            )?;
            let k = kv_view(g, rng, &mut b, &s, s.d)?;
            let v = kv_view(g, rng, &mut b, &s, s.dv)?;
            let m = s.mask.map(|m| mask(g, rng, &mut b, &s, m)).transpose()?;
            let sinks = match s.sinks {
                true => Some(input(
                    g,
                    rng,
                    &mut b,
                    DType::F32,
                    [s.n_head, 1, 1, 1],
                    -2.0,
                    2.0,
                )?),
                false => None,
            };
            let r = g.flash_attn_ext(q, k, v, m, sinks, s.scale, s.max_bias, s.softcap)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
}

/// Rows of small integers (many ties), in `dtype`, with NaN at the given flat positions.
fn tied_input(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    dtype: DType,
    ne: [u64; 4],
    nans: &[u64],
) -> Result<TensorId> {
    let t = g.input("x", dtype, ne)?;
    let n = ne.iter().product::<u64>();
    let vals: Vec<f32> = (0..n)
        .map(|i| match nans.contains(&i) {
            true => f32::NAN,
            false => rng.below(9) as f32 - 4.0,
        })
        .collect();
    let bytes = match dtype {
        DType::F16 => vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        DType::BF16 => vals
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    b.inputs.push((t, bytes));
    Ok(t)
}

fn select_cases(out: &mut Vec<Case>) {
    // (dtype, extents, NaN positions, tied values)
    let argmax = [
        (DType::F32, [1u64, 3, 1, 1], vec![], true),
        (DType::F32, [7, 5, 1, 1], vec![0, 10], true),
        (DType::F32, [1000, 3, 1, 1], vec![], true),
        (DType::F32, [1000, 2, 1, 1], vec![], false),
        (DType::F16, [1000, 2, 1, 1], vec![], true),
        (DType::BF16, [7, 3, 1, 1], vec![], true),
        (DType::F32, [50000, 2, 1, 1], vec![], true),
        (DType::F32, [50000, 1, 1, 1], vec![], false),
        // Chunked rows whose first value, or a later one, is NaN.
        (DType::F32, [9000, 2, 1, 1], vec![0, 9005], true),
        (DType::F16, [5000, 3, 1, 1], vec![4500], true),
        // Vocabulary rows; one row past the per-invocation registers of the one-pass kernel.
        (DType::F32, [128256, 1, 1, 1], vec![], false),
        (DType::BF16, [49152, 2, 1, 1], vec![49159], true),
        (DType::F32, [6000, 2, 1, 1], vec![5, 5999], true),
    ];
    for (dtype, ne, nans, tied) in argmax {
        let desc = format!("ARGMAX {dtype} {ne:?} tied={tied} NaN at {nans:?}");
        out.push(case("ARGMAX", desc, EXACT, move |g, rng| {
            let mut b = Built::default();
            let x = match tied {
                true => tied_input(g, rng, &mut b, dtype, ne, &nans)?,
                false => input(g, rng, &mut b, dtype, ne, -10.0, 10.0)?,
            };
            let r = g.argmax(x)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
    let top_k = [
        (DType::F32, [1u64, 2, 1, 1], 1u32, vec![], true),
        (DType::F32, [1000, 3, 1, 1], 5, vec![], true),
        (DType::F32, [1000, 3, 2, 1], 40, vec![3, 1500], true),
        (DType::F32, [64, 2, 1, 1], 64, vec![], true),
        (DType::F16, [257, 2, 1, 1], 7, vec![], true),
        (DType::F32, [50000, 1, 1, 1], 40, vec![], false),
        (DType::F32, [9000, 2, 1, 1], 64, vec![17, 9100], true),
        (DType::F16, [5000, 3, 1, 1], 7, vec![], true),
        (DType::BF16, [4200, 2, 1, 1], 1, vec![], true),
        // Vocabulary rows, several k; ties at the k-th value broken by index in rows past
        // 65536 values, one with more chunk candidates than the merge keeps in registers; a
        // last chunk shorter than k; a one-pass row past the per-invocation registers.
        (DType::F32, [49152, 1, 1, 1], 64, vec![], false),
        (DType::F16, [49152, 1, 1, 1], 2, vec![], true),
        (DType::F32, [70000, 2, 1, 1], 64, vec![100, 135600], true),
        (DType::F32, [270000, 1, 1, 1], 64, vec![7, 269999], true),
        (DType::F32, [70000, 1, 1, 1], 1, vec![], true),
        (DType::F32, [8232, 2, 1, 1], 64, vec![], true),
        (DType::F32, [6000, 2, 1, 1], 64, vec![2500], true),
        // The largest k, one pass and chunked.
        (DType::F32, [1000, 2, 1, 1], 256, vec![3], true),
        (DType::F32, [50000, 1, 1, 1], 256, vec![], false),
    ];
    for (dtype, ne, k, nans, tied) in top_k {
        let desc = format!("TOP_K {dtype} {ne:?} k={k} tied={tied} NaN at {nans:?}");
        out.push(case("TOP_K", desc, EXACT, move |g, rng| {
            let mut b = Built::default();
            let x = match tied {
                true => tied_input(g, rng, &mut b, dtype, ne, &nans)?,
                false => input(g, rng, &mut b, dtype, ne, -10.0, 10.0)?,
            };
            let r = g.top_k(x, k)?;
            g.mark_output(r)?;
            Ok(b)
        }));
    }
}

/// Appends the attention and selection cases.
pub(super) fn add(out: &mut Vec<Case>) {
    flash_attn_cases(out);
    select_cases(out);
}
