//! The op table: op builder × dtypes × shapes, with odd sizes (1, 7, 33, 257), non-contiguous
//! views, broadcast and batches. Tolerances follow ggml's test-backend-ops: exact copies 0,
//! f16 results 1e-6 (one f16 ulp where f32 results straddle a rounding boundary), f32 math
//! 1e-10 (WGSL's transcendental functions are not correctly rounded), matrix products 1e-9
//! (summation order differs).

use bytes::Bytes;
use wgllm_core::op::{BinaryOp, UnaryOp};
use wgllm_core::{DType, Graph, Result, TensorId};

use super::{random_bytes, Built, Case, Rng};

/// Block formats the WebGPU kernels decode.
pub(super) use crate::kernels::QUANTS;

pub(super) const EXACT: f64 = 0.0;
pub(super) const F16_OUT: f64 = 1e-6;
pub(super) const F32_MATH: f64 = 1e-10;
pub(super) const MATMUL: f64 = 1e-9;
/// Products of 16 or more activation columns, which run on f16 operands (rounded weights and
/// activations, f32 sums) where cooperative matrices are enabled: ~7e-8 for random values.
pub(super) const MATMUL_F16: f64 = 1e-6;

/// The tolerance of a product of `n` activation columns: [`MATMUL_F16`] where the coop kernel
/// may take it (`COOP_MIN_N` columns or more), else [`MATMUL`].
pub(super) fn product_tol(n: u64) -> f64 {
    if n >= crate::ops::COOP_MIN_N {
        MATMUL_F16
    } else {
        MATMUL
    }
}
pub(super) fn case(
    op: &'static str,
    name: String,
    max_nmse: f64,
    build: impl Fn(&mut Graph, &mut Rng) -> Result<Built> + Send + Sync + 'static,
) -> Case {
    Case {
        op,
        name,
        max_nmse,
        build: Box::new(build),
    }
}

/// Adds an input with random values in `[lo, hi)`.
pub(super) fn input(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    dtype: DType,
    ne: [u64; 4],
    lo: f32,
    hi: f32,
) -> Result<TensorId> {
    let t = g.input(&format!("in{}", b.inputs.len()), dtype, ne)?;
    b.inputs
        .push((t, random_bytes(rng, dtype, ne.iter().product(), lo, hi)?));
    Ok(t)
}

/// Adds a weight with random values in `[-1, 1)` (random blocks for block formats).
pub(super) fn weight(g: &mut Graph, rng: &mut Rng, dtype: DType, ne: [u64; 4]) -> Result<TensorId> {
    let data = random_bytes(rng, dtype, ne.iter().product(), -1.0, 1.0)?;
    g.weight("w", dtype, ne, Bytes::from(data))
}

pub(super) fn f16_tol(dtype: DType, f32_tol: f64) -> f64 {
    match dtype {
        DType::F16 => F16_OUT,
        _ => f32_tol,
    }
}

fn binary_cases(out: &mut Vec<Case>) {
    let shapes: [([u64; 4], [u64; 4]); 4] = [
        ([7, 3, 2, 1], [7, 1, 1, 1]),
        ([33, 5, 1, 1], [1, 5, 1, 1]),
        ([1, 1, 1, 1], [1, 1, 1, 1]),
        ([257, 2, 3, 2], [257, 2, 3, 2]),
    ];
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
        let name = wgllm_core::Op::Binary(op).name();
        for dtype in [DType::F32, DType::F16] {
            // Division is not correctly rounded on GPUs; the rest is.
            let tol = f16_tol(dtype, if op == BinaryOp::Div { F32_MATH } else { EXACT });
            for (na, nb) in shapes {
                out.push(case(
                    name,
                    format!("{name} {dtype} {na:?} by {nb:?}"),
                    tol,
                    move |g, rng| {
                        let mut b = Built::default();
                        let x = input(g, rng, &mut b, dtype, na, -2.0, 2.0)?;
                        let y = input(g, rng, &mut b, dtype, nb, 0.5, 2.0)?;
                        let r = g.binary(x, y, op)?;
                        g.mark_output(r)?;
                        Ok(b)
                    },
                ));
            }
            out.push(case(
                name,
                format!("{name} {dtype} transposed [7,5] by [7,1]"),
                tol,
                move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, dtype, [5, 7, 1, 1], -2.0, 2.0)?;
                    let xt = g.transpose(x)?;
                    let y = input(g, rng, &mut b, dtype, [7, 1, 1, 1], 0.5, 2.0)?;
                    let r = g.binary(xt, y, op)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
    }
}

const UNARY: [UnaryOp; 27] = [
    UnaryOp::Abs,
    UnaryOp::Sgn,
    UnaryOp::Neg,
    UnaryOp::Step,
    UnaryOp::Tanh,
    UnaryOp::Elu,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Gelu,
    UnaryOp::GeluQuick,
    UnaryOp::GeluErf,
    UnaryOp::Silu,
    UnaryOp::Hardswish,
    UnaryOp::Hardsigmoid,
    UnaryOp::Exp,
    UnaryOp::Expm1,
    UnaryOp::Softplus,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Trunc,
    UnaryOp::Xielu {
        alpha_n: 0.8,
        alpha_p: 0.8,
        beta: 0.5,
        eps: -1e-6,
    },
    UnaryOp::Log,
    UnaryOp::Sqr,
    UnaryOp::Sqrt,
    UnaryOp::Sin,
    UnaryOp::Cos,
];

fn unary_cases(out: &mut Vec<Case>) {
    for op in UNARY {
        let name = op.name();
        let (lo, hi) = match op {
            UnaryOp::Log | UnaryOp::Sqrt => (0.1, 4.0),
            _ => (-4.0, 4.0),
        };
        for dtype in [DType::F32, DType::F16] {
            let tol = f16_tol(dtype, F32_MATH);
            for ne in [[7u64, 3, 2, 1], [257, 1, 1, 1]] {
                out.push(case(
                    name,
                    format!("{name} {dtype} {ne:?}"),
                    tol,
                    move |g, rng| {
                        let mut b = Built::default();
                        let x = input(g, rng, &mut b, dtype, ne, lo, hi)?;
                        let r = g.unary(x, op)?;
                        g.mark_output(r)?;
                        Ok(b)
                    },
                ));
            }
            out.push(case(
                name,
                format!("{name} {dtype} permuted [7,3,2,1]"),
                tol,
                move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, dtype, [3, 2, 7, 1], lo, hi)?;
                    let p = g.permute(x, [1, 2, 0, 3])?;
                    let r = g.unary(p, op)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
    }
}

fn map_cases(out: &mut Vec<Case>) {
    type MapFn = fn(&mut Graph, TensorId) -> Result<TensorId>;
    let maps: [(&'static str, MapFn); 3] = [
        ("SCALE", |g, x| g.scale(x, 0.75, -0.5)),
        ("CLAMP", |g, x| g.clamp(x, -0.5, 1.25)),
        ("FILL", |g, x| g.fill(x, 3.5)),
    ];
    for (name, f) in maps {
        for dtype in [DType::F32, DType::F16] {
            // `x·s + b` may be fused into one FMA on GPUs (NVIDIA does), which rounds once
            // instead of twice: not bit-exact with the CPU's two roundings.
            let exact = if name == "SCALE" { F32_MATH } else { EXACT };
            let tol = f16_tol(dtype, exact);
            out.push(case(
                name,
                format!("{name} {dtype} [33,3,1,1]"),
                tol,
                move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, dtype, [33, 3, 1, 1], -2.0, 2.0)?;
                    let r = f(g, x)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
            out.push(case(
                name,
                format!("{name} {dtype} transposed [3,33]"),
                tol,
                move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, dtype, [33, 3, 1, 1], -2.0, 2.0)?;
                    let xt = g.transpose(x)?;
                    let r = f(g, xt)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
    }
}

fn copy_cases(out: &mut Vec<Case>) {
    let conts = [
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::F32),
        (DType::BF16, DType::F16),
        (DType::I32, DType::I32),
    ];
    for (src, dst) in conts {
        let tol = f16_tol(dst, EXACT);
        out.push(case(
            "CONT",
            format!("CONT {src} -> {dst} [33,4,3,1]"),
            tol,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, src, [33, 4, 3, 1], -100.0, 100.0)?;
                let r = g.cont(x, dst)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
        out.push(case(
            "CONT",
            format!("CONT {src} -> {dst} permuted [4,3,33,1]"),
            tol,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, src, [33, 4, 3, 1], -100.0, 100.0)?;
                let p = g.permute(x, [2, 0, 1, 3])?;
                let r = g.cont(p, dst)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
    // f32 -> i32 truncates toward zero, as ggml; magnitudes have fractions below 0.5 so a
    // reference that rounds to nearest agrees.
    out.push(case(
        "CONT",
        "CONT f32 -> i32 [7,5,1,1]".into(),
        EXACT,
        |g, rng| {
            let mut b = Built::default();
            let x = g.input("x", DType::F32, [7, 5, 1, 1])?;
            let vals: Vec<u8> = (0..35)
                .flat_map(|_| {
                    let magnitude = rng.below(100) as f32 + rng.uniform(0.0, 0.4);
                    let sign = if rng.below(2) == 0 { -1.0f32 } else { 1.0 };
                    (sign * magnitude).to_le_bytes()
                })
                .collect();
            b.inputs.push((x, vals));
            let r = g.cont(x, DType::I32)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
    for dst in [DType::F32, DType::F16] {
        out.push(case(
            "CPY",
            format!("CPY f32 [7,5] into slice 1 of a {dst} state [7,5,3]"),
            f16_tol(dst, EXACT),
            move |g, rng| {
                let mut b = Built::default();
                let s = g.state("s", dst, [7, 5, 3, 1])?;
                b.states.push((s, random_bytes(rng, dst, 105, -1.0, 1.0)?));
                let nb = g.node(s).layout.nb;
                let v = g.view(s, [7, 5, 1, 1], nb, nb[2])?;
                let x = input(g, rng, &mut b, DType::F32, [5, 7, 1, 1], -1.0, 1.0)?;
                let xt = g.transpose(x)?;
                let c = g.cpy(xt, v)?;
                g.mark_output(c)?;
                g.mark_output(s)?;
                Ok(b)
            },
        ));
    }
    // Same-dtype copies that take the 16-byte word path (dense, whole words, 16-byte aligned
    // starts) and ones that just miss it (partial words, a 4- or 8-byte offset), which take the
    // element path.
    for dtype in [DType::F32, DType::F16, DType::I32] {
        // f32 [2056,4] is 2056 16-byte words: two full workgroups of 1024 and a tail of 8.
        out.push(case(
            "CONT",
            format!("CONT {dtype} -> {dtype} [2056,4,1,1] as 16-byte words"),
            EXACT,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, dtype, [2056, 4, 1, 1], -100.0, 100.0)?;
                let r = g.cont(x, dtype)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
        // A [4,8] input into slice 1 (128 bytes in) of a [8,4,3] state (f16: [4,16] into [16,4,3]).
        let row = 16 / dtype.type_size() as u64 * 2;
        out.push(case(
            "CPY",
            format!("CPY {dtype} [4,{row}] into slice 1 of a {dtype} state [{row},4,3] as words"),
            EXACT,
            move |g, rng| {
                let mut b = Built::default();
                let s = g.state("s", dtype, [row, 4, 3, 1])?;
                b.states
                    .push((s, random_bytes(rng, dtype, row * 12, -1.0, 1.0)?));
                let nb = g.node(s).layout.nb;
                let v = g.view(s, [row, 4, 1, 1], nb, nb[2])?;
                let x = input(g, rng, &mut b, dtype, [4, row, 1, 1], -1.0, 1.0)?;
                let c = g.cpy(x, v)?;
                g.mark_output(c)?;
                g.mark_output(s)?;
                Ok(b)
            },
        ));
        // 70 or 140 bytes: not whole words.
        out.push(case(
            "CONT",
            format!("CONT {dtype} -> {dtype} [7,5,1,1] (partial word)"),
            EXACT,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, dtype, [7, 5, 1, 1], -100.0, 100.0)?;
                let r = g.cont(x, dtype)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
    // Dense 1024-byte views of a [260] f32 input: at byte 16 on the word path, at byte 4 not.
    for offset in [16u64, 4] {
        out.push(case(
            "CONT",
            format!("CONT f32 view [256] at byte {offset} of [260]"),
            EXACT,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, DType::F32, [260, 1, 1, 1], -1.0, 1.0)?;
                let nb = g.node(x).layout.nb;
                let v = g.view(x, [256, 1, 1, 1], nb, offset)?;
                let r = g.cont(v, DType::F32)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
    // 64 bytes into a state: at byte 16 on the word path (the kernel adds the start's distance
    // from the binding's aligned offset), at byte 8 not.
    for offset in [16u64, 8] {
        out.push(case(
            "CPY",
            format!("CPY f32 [16] into a f32 state [40] at byte {offset}"),
            EXACT,
            move |g, rng| {
                let mut b = Built::default();
                let s = g.state("s", DType::F32, [40, 1, 1, 1])?;
                b.states
                    .push((s, random_bytes(rng, DType::F32, 40, -1.0, 1.0)?));
                let nb = g.node(s).layout.nb;
                let v = g.view(s, [16, 1, 1, 1], nb, offset)?;
                let x = input(g, rng, &mut b, DType::F32, [16, 1, 1, 1], -1.0, 1.0)?;
                let c = g.cpy(x, v)?;
                g.mark_output(c)?;
                g.mark_output(s)?;
                Ok(b)
            },
        ));
    }
}

fn get_rows_cases(out: &mut Vec<Case>) {
    let tables = [DType::F32, DType::F16, DType::BF16, DType::I32]
        .into_iter()
        .chain(QUANTS);
    for table in tables {
        let ne0 = match table.block_size() {
            1 => 33,
            bs => 2 * bs as u64,
        };
        let tol = if table.is_quantized() { 1e-12 } else { EXACT };
        out.push(case(
            "GET_ROWS",
            format!("GET_ROWS {table} [{ne0},7,2] by [5,2]"),
            tol,
            move |g, rng| {
                let mut b = Built::default();
                let w = weight(g, rng, table, [ne0, 7, 2, 1])?;
                let idx = input(g, rng, &mut b, DType::I32, [5, 2, 1, 1], 0.0, 7.0)?;
                let r = g.get_rows(w, idx)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
        out.push(case(
            "GET_ROWS",
            format!("GET_ROWS {table} [{ne0},7] by [1]"),
            tol,
            move |g, rng| {
                let mut b = Built::default();
                let w = weight(g, rng, table, [ne0, 7, 1, 1])?;
                let idx = input(g, rng, &mut b, DType::I32, [1, 1, 1, 1], 0.0, 7.0)?;
                let r = g.get_rows(w, idx)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
}

/// The first `k` values of a random permutation of `0..n`, as contiguous i32 or i64 bytes.
pub(super) fn distinct_rows(rng: &mut Rng, n: u64, k: usize, dtype: DType) -> Vec<u8> {
    let mut p: Vec<u64> = (0..n).collect();
    for i in (1..p.len()).rev() {
        p.swap(i, rng.below(i as u64 + 1) as usize);
    }
    p[..k]
        .iter()
        .flat_map(|&r| match dtype {
            DType::I64 => (r as i64).to_le_bytes().to_vec(),
            _ => (r as i32).to_le_bytes().to_vec(),
        })
        .collect()
}

fn set_rows_cases(out: &mut Vec<Case>) {
    for dst in [DType::F32, DType::F16] {
        for idx_t in [DType::I32, DType::I64] {
            let name = format!("SET_ROWS f32 [33,4,2] into {dst} [33,9,2] by {idx_t} [4,2]");
            out.push(case(
                "SET_ROWS",
                name,
                f16_tol(dst, EXACT),
                move |g, rng| {
                    let mut b = Built::default();
                    let s = g.state("s", dst, [33, 9, 2, 1])?;
                    b.states
                        .push((s, random_bytes(rng, dst, 33 * 9 * 2, -1.0, 1.0)?));
                    let src = input(g, rng, &mut b, DType::F32, [33, 4, 2, 1], -1.0, 1.0)?;
                    let idx = g.input("idx", idx_t, [4, 2, 1, 1])?;
                    let mut ids = distinct_rows(rng, 9, 4, idx_t);
                    ids.extend(distinct_rows(rng, 9, 4, idx_t));
                    b.inputs.push((idx, ids));
                    let r = g.set_rows(s, src, idx)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
    }
}

/// set_rows into a block-quantized cache, encoded on the device: row lengths of 1, 2 and 3 blocks
/// (odd block counts put rows at offsets that are not whole words), 1 to 7 rows, and views of
/// a cache (one layer of three; the middle block of every row). Exact: the device must produce
/// the reference's bytes.
fn set_rows_quant_cases(out: &mut Vec<Case>) {
    for dst in [DType::Q8_0, DType::Q4_0] {
        for idx_t in [DType::I32, DType::I64] {
            for (ne0, rows) in [(32u64, 1u64), (64, 4), (96, 7)] {
                let name =
                    format!("SET_ROWS f32 [{ne0},{rows},2] into {dst} [{ne0},9,2] by {idx_t}");
                out.push(case("SET_ROWS", name, EXACT, move |g, rng| {
                    let mut b = Built::default();
                    let s = g.state("s", dst, [ne0, 9, 2, 1])?;
                    b.states
                        .push((s, random_bytes(rng, dst, ne0 * 18, -1.0, 1.0)?));
                    let src = input(g, rng, &mut b, DType::F32, [ne0, rows, 2, 1], -3.0, 3.0)?;
                    let idx = g.input("idx", idx_t, [rows, 2, 1, 1])?;
                    let mut ids = distinct_rows(rng, 9, rows as usize, idx_t);
                    ids.extend(distinct_rows(rng, 9, rows as usize, idx_t));
                    b.inputs.push((idx, ids));
                    let r = g.set_rows(s, src, idx)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
            let name = format!("SET_ROWS f32 [32,3] into {dst} view [32,9] of [96,9,3] by {idx_t}");
            out.push(case("SET_ROWS", name, EXACT, move |g, rng| {
                let mut b = Built::default();
                let s = g.state("s", dst, [96, 9, 3, 1])?;
                b.states
                    .push((s, random_bytes(rng, dst, 96 * 27, -1.0, 1.0)?));
                let nb = g.node(s).layout.nb;
                let layer = g.view(s, [96, 9, 1, 1], nb, nb[2])?;
                let mid = g.view(s, [32, 9, 1, 1], nb, nb[2] + nb[0])?;
                let src = input(g, rng, &mut b, DType::F32, [32, 3, 1, 1], -3.0, 3.0)?;
                let idx = g.input("idx", idx_t, [3, 1, 1, 1])?;
                b.inputs.push((idx, distinct_rows(rng, 9, 3, idx_t)));
                let w = g.set_rows(mid, src, idx)?;
                g.mark_output(w)?;
                let src2 = input(g, rng, &mut b, DType::F32, [96, 2, 1, 1], -3.0, 3.0)?;
                let idx2 = g.input("idx2", idx_t, [2, 1, 1, 1])?;
                b.inputs.push((idx2, distinct_rows(rng, 9, 2, idx_t)));
                let w2 = g.set_rows(layer, src2, idx2)?;
                g.mark_output(w2)?;
                Ok(b)
            }));
        }
    }
    // Values the rounding rules disagree on: exact halves, zeros, one large value, tiny values
    // whose scale is an f16 subnormal.
    out.push(case(
        "SET_ROWS",
        "SET_ROWS f32 [32,4] into q8_0 edge values".into(),
        EXACT,
        |g, _rng| {
            let mut b = Built::default();
            let s = g.state("s", DType::Q8_0, [32, 4, 1, 1])?;
            let src = g.input("src", DType::F32, [32, 4, 1, 1])?;
            let mut v = Vec::new();
            v.extend((0..32).map(|j| j as f32 - 15.5));
            v.extend([0.0f32; 32]);
            v.extend((0..32).map(|j| if j == 5 { 1e4 } else { j as f32 * 0.5 - 8.0 }));
            v.extend((0..32).map(|j| (j as f32 - 16.0) * 1e-7));
            b.inputs
                .push((src, v.iter().flat_map(|x| x.to_le_bytes()).collect()));
            let idx = g.input("idx", DType::I32, [4, 1, 1, 1])?;
            b.inputs.push((
                idx,
                [2i32, 0, 3, 1]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect(),
            ));
            let r = g.set_rows(s, src, idx)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
}

/// Every weight dtype a matrix product takes: the floats and each GGUF block format.
fn weight_dtypes() -> impl Iterator<Item = DType> {
    [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
}

fn mul_mat_cases(out: &mut Vec<Case>) {
    for wt in weight_dtypes() {
        let k0 = match wt.block_size() {
            1 => 33,
            32 => 64,
            bs => bs as u64,
        };
        // (k, m, n, weight dims 2-3, activation dims 2-3)
        // Long rows for the mat-vec kernel: more units of 32 than a row has lanes.
        let kv = match wt.block_size() {
            256 => 1280,
            _ => 1088,
        };
        let shapes = [
            (k0, 33, 1, [1, 1], [1, 1]),
            (k0, 7, 5, [2, 1], [4, 3]),
            (2 * k0, 17, 9, [1, 1], [1, 1]),
            (kv, 13, 1, [1, 1], [1, 1]),
            (kv, 6, 3, [2, 1], [2, 3]),
            (kv, 5, 8, [1, 1], [1, 1]),
            // Tiled: several 64 × 64 tiles with ragged edges, and broadcast batches.
            (kv, 70, 67, [1, 1], [1, 1]),
            (kv, 33, 20, [2, 1], [4, 3]),
        ];
        for (k, m, n, wa, wb) in shapes {
            let name = format!("MUL_MAT {wt} x f32 k={k} m={m} n={n} batch {wa:?} x {wb:?}");
            out.push(case("MUL_MAT", name, product_tol(n), move |g, rng| {
                let mut b = Built::default();
                let a = weight(g, rng, wt, [k, m, wa[0], wa[1]])?;
                let x = input(g, rng, &mut b, DType::F32, [k, n, wb[0], wb[1]], -1.0, 1.0)?;
                let r = g.mul_mat(a, x)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
    prefill_cases(out);
    // Activations the int8 rounding of the mat-vec's int8 path (WebGpuConfig::int8_activations)
    // keeps exact (multiples of 1/128, each 4 values reaching ±127/128), so its decoders are
    // held to the f32 tolerance there too: an error in a weight's small offset (q4_1's m) would
    // hide below the int8 tolerance with random activations.
    for wt in QUANTS
        .into_iter()
        .filter(|&d| crate::kernels::int8_activations(d))
    {
        let k = wt.block_size() as u64 * 2;
        for n in [1u64, 3] {
            let name = format!("MUL_MAT {wt} x f32 k={k} m=33 n={n} int8-exact activations");
            out.push(case("MUL_MAT", name, MATMUL, move |g, rng| {
                let mut b = Built::default();
                let a = weight(g, rng, wt, [k, 33, 1, 1])?;
                let x = g.input("x", DType::F32, [k, n, 1, 1])?;
                let mut vals = Vec::new();
                // A peak in every vec4, so every group the int8 rounding scales (32 values)
                // has max |x| = 127/128 and a scale of exactly 1/128.
                for _ in 0..k * n / 4 {
                    let peak = rng.below(4);
                    for j in 0..4 {
                        let q = match j == peak {
                            true => [127.0, -127.0][rng.below(2) as usize],
                            false => rng.below(255) as f32 - 127.0,
                        };
                        vals.push(q / 128.0);
                    }
                }
                b.inputs
                    .push((x, vals.iter().flat_map(|v| v.to_le_bytes()).collect()));
                let r = g.mul_mat(a, x)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
    // Weight views: q4_K's int8 jobs read 16-byte aligned rows as vec4s, others word by word
    // (a view 8 bytes in takes the word path); the coop product loads f16 weights as
    // vec4<f16>, so a view 8 bytes in takes it at an offset and one 4 bytes in the tiled
    // kernel (`matmul::coop_reads`). (dtype, k, the weight's row, m, n, offsets)
    for (wt, k, row, m, n, offsets) in [
        (DType::Q4_K, 512, 512, 9, 2, [0u64, 8]),
        (DType::F16, 128, 136, 130, 33, [4, 8]),
    ] {
        for offset in offsets {
            let name = format!("MUL_MAT {wt} (a view {offset} bytes in) x f32 k={k} m={m} n={n}");
            // The coop product (f16 operands) may take the view 8 bytes in; the one 4 bytes in
            // runs on the tiled kernel (f32) everywhere.
            let tol = match offset % 8 {
                0 => product_tol(n),
                _ => MATMUL,
            };
            out.push(case("MUL_MAT", name, tol, move |g, rng| {
                let mut b = Built::default();
                let a = weight(g, rng, wt, [row, m + 1, 1, 1])?;
                let nb = g.node(a).layout.nb;
                let a = g.view(a, [k, m, 1, 1], nb, offset)?;
                let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
                let r = g.mul_mat(a, x)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
    // Many rows: the mat-vec groups up to 4 rows per workgroup (a partial last group here);
    // rows of more than 256 units take 256 lanes.
    for wt in [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q8_0,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
    ] {
        let k = wt.block_size().max(32) as u64 * 2;
        for (k, m, n) in [
            (k, 1100, 1),
            (k, 8300, 1),
            (k, 8300, 2),
            (k, 2100, 5),
            (8448, 7, 1),
            (8448, 3, 3),
        ] {
            let name = format!("MUL_MAT {wt} x f32 k={k} m={m} n={n}");
            out.push(case("MUL_MAT", name, MATMUL, move |g, rng| {
                let mut b = Built::default();
                let a = weight(g, rng, wt, [k, m, 1, 1])?;
                let x = input(g, rng, &mut b, DType::F32, [k, n, 1, 1], -1.0, 1.0)?;
                let r = g.mul_mat(a, x)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
    out.push(case(
        "MUL_MAT",
        "MUL_MAT f32 x transposed f32 k=33 m=7 n=5".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let a = weight(g, rng, DType::F32, [33, 7, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [5, 33, 1, 1], -1.0, 1.0)?;
            let xt = g.transpose(x)?;
            let r = g.mul_mat(a, xt)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
    out.push(case(
        "MUL_MAT",
        "MUL_MAT f16 x f16 k=64 m=9 n=3 batch [1,1] x [2,1]".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let a = weight(g, rng, DType::F16, [64, 9, 1, 1])?;
            let x = input(g, rng, &mut b, DType::F16, [64, 3, 2, 1], -1.0, 1.0)?;
            let r = g.mul_mat(a, x)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
}

/// Prefill-shaped products (16 to 100 activation columns) of every weight dtype: the
/// cooperative-matrix kernel's 128-row tiles where the device has it (edge tiles in m and n,
/// whole tiles stored directly, broadcast batches, an odd number of 32-deep steps), the tiled
/// kernel elsewhere; enough tiles (through batches) for their wider variants; and products the
/// coop kernel splits along k.
fn prefill_cases(out: &mut Vec<Case>) {
    for wt in weight_dtypes() {
        let k = match wt.block_size() {
            256 => 256,
            _ => 96,
        };
        let shapes = [
            (k, 200, 16, [1, 1], [1, 1]),
            (k, 45, 33, [1, 1], [1, 1]),
            (k, 256, 64, [1, 1], [1, 1]),
            (k, 130, 100, [2, 1], [2, 3]),
        ];
        for (k, m, n, wa, wb) in shapes {
            out.push(mat_case(wt, [k, m, n], wa, wb));
        }
    }
    // Enough tiles (through batches) for the wide variants: the coop kernel's 128 × 128 and the
    // tiled kernel's 128 × 64.
    for (wt, k) in [(DType::F16, 64), (DType::Q4_0, 64), (DType::Q4_K, 256)] {
        out.push(mat_case(wt, [k, 130, 130], [1, 1], [8, 8]));
    }
    // Few tiles over long rows, which the coop kernel splits along k: in two with edge tiles,
    // in four with whole ones.
    for wt in [DType::F16, DType::Q4_0, DType::Q4_K] {
        out.push(mat_case(wt, [2048, 200, 40], [1, 1], [1, 1]));
        out.push(mat_case(wt, [4096, 256, 64], [1, 1], [1, 1]));
    }
}

/// `w [k, m, wa] × x [k, n, wb]` with random weights of `wt` and activations, at the f16
/// operand tolerance.
fn mat_case(wt: DType, [k, m, n]: [u64; 3], wa: [u64; 2], wb: [u64; 2]) -> Case {
    let name = format!("MUL_MAT {wt} x f32 k={k} m={m} n={n} batch {wa:?} x {wb:?} (prefill)");
    case("MUL_MAT", name, MATMUL_F16, move |g, rng| {
        let mut b = Built::default();
        let a = weight(g, rng, wt, [k, m, wa[0], wa[1]])?;
        let x = input(g, rng, &mut b, DType::F32, [k, n, wb[0], wb[1]], -1.0, 1.0)?;
        let r = g.mul_mat(a, x)?;
        g.mark_output(r)?;
        Ok(b)
    })
}

/// Every case of the op table.
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    binary_cases(&mut out);
    unary_cases(&mut out);
    map_cases(&mut out);
    copy_cases(&mut out);
    get_rows_cases(&mut out);
    set_rows_cases(&mut out);
    set_rows_quant_cases(&mut out);
    mul_mat_cases(&mut out);
    super::nn_cases::add(&mut out);
    super::attn_cases::add(&mut out);
    super::shape_cases::add(&mut out);
    super::reduce_cases::add(&mut out);
    super::sample_cases::add(&mut out);
    super::seq_cases::add(&mut out);
    super::fuse_cases::add(&mut out);
    out
}
