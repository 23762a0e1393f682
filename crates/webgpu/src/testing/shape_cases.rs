//! Op-table cases of the shape family: set, concat, repeat, pad (zeros and circular), diag, tri,
//! upscale (nearest, bilinear, bicubic, with and without align-corners) and add_id, with odd
//! sizes, transposed or permuted sources and batches. Copies and the single add of add_id are
//! exact (tolerance 0); upscale computes in f32 in the reference's order, but a GPU may fuse a
//! multiply-add, so f32 gets `F32_MATH` and f16 results one f16 ulp (`F16_OUT`).

use wgllm_core::op::{ScaleMode, TriKind};
use wgllm_core::{DType, Graph, Result, TensorId};

use super::cases::{case, f16_tol, input, EXACT, F32_MATH};
use super::{Built, Case, Rng};

/// A random input whose values survive i32 and f32 alike.
fn value_input(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    dtype: DType,
    ne: [u64; 4],
) -> Result<TensorId> {
    input(g, rng, b, dtype, ne, -1000.0, 1000.0)
}

/// `x` as given, or a transposed view of an input stored with dims 0 and 1 swapped.
fn maybe_transposed(
    g: &mut Graph,
    rng: &mut Rng,
    b: &mut Built,
    dtype: DType,
    ne: [u64; 4],
    transposed: bool,
) -> Result<TensorId> {
    if !transposed {
        return value_input(g, rng, b, dtype, ne);
    }
    let x = value_input(g, rng, b, dtype, [ne[1], ne[0], ne[2], ne[3]])?;
    g.transpose(x)
}

fn concat_cases(out: &mut Vec<Case>) {
    for dtype in [DType::F32, DType::I32] {
        for dim in 0..4 {
            let mut na = [7u64, 3, 2, 2];
            let mut nb = na;
            na[dim] = 5;
            nb[dim] = 1 + dim as u64;
            for transposed in [false, true] {
                let desc =
                    format!("CONCAT {dtype} {na:?} + {nb:?} dim {dim} transposed={transposed}");
                out.push(case("CONCAT", desc, EXACT, move |g, rng| {
                    let mut b = Built::default();
                    let x = maybe_transposed(g, rng, &mut b, dtype, na, transposed)?;
                    let y = value_input(g, rng, &mut b, dtype, nb)?;
                    let r = g.concat(x, y, dim)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
        }
    }
}

fn repeat_cases(out: &mut Vec<Case>) {
    for dtype in [DType::F32, DType::I32] {
        for (src, to) in [
            ([3u64, 2, 1, 1], [9u64, 4, 2, 3]),
            ([1, 1, 1, 1], [33, 1, 1, 1]),
            ([5, 3, 2, 1], [5, 3, 2, 1]),
        ] {
            out.push(case(
                "REPEAT",
                format!("REPEAT {dtype} {src:?} to {to:?}"),
                EXACT,
                move |g, rng| {
                    let mut b = Built::default();
                    let x = value_input(g, rng, &mut b, dtype, src)?;
                    let r = g.repeat(x, to)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
        out.push(case(
            "REPEAT",
            format!("REPEAT {dtype} transposed [3,4] to [6,8,3]"),
            EXACT,
            move |g, rng| {
                let mut b = Built::default();
                let x = maybe_transposed(g, rng, &mut b, dtype, [3, 4, 1, 1], true)?;
                let r = g.repeat(x, [6, 8, 3, 1])?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
}

fn pad_cases(out: &mut Vec<Case>) {
    let pads: [([u32; 4], [u32; 4]); 3] = [
        ([1, 0, 0, 0], [2, 3, 0, 0]),
        ([0, 2, 1, 1], [3, 0, 1, 0]),
        ([3, 1, 2, 0], [0, 0, 0, 2]),
    ];
    for circular in [false, true] {
        for (lp, rp) in pads {
            for transposed in [false, true] {
                let desc = format!(
                    "PAD f32 [7,5,3,2] lp {lp:?} rp {rp:?} circular={circular} transposed={transposed}"
                );
                out.push(case("PAD", desc, EXACT, move |g, rng| {
                    let mut b = Built::default();
                    let x = maybe_transposed(g, rng, &mut b, DType::F32, [7, 5, 3, 2], transposed)?;
                    let r = g.pad(x, lp, rp, circular)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
        }
    }
}

fn set_cases(out: &mut Vec<Case>) {
    for dtype in [DType::F32, DType::I32] {
        let es = 4u64;
        // a [9,5,3]; b [4,2,2] written at (2,1,1) with a's own strides, or every other row.
        let views = [
            (
                [4u64, 2, 2, 1],
                [9 * es, 45 * es, 135 * es],
                (2 + 9 + 45) * es,
            ),
            ([3, 2, 1, 1], [18 * es, 45 * es, 135 * es], 5 * es),
            ([9, 5, 3, 1], [9 * es, 45 * es, 135 * es], 0),
        ];
        for (nb_ext, nb, offset) in views {
            for transposed in [false, true] {
                let desc = format!(
                    "SET {dtype} [9,5,3] with {nb_ext:?} at {offset} strides {nb:?} transposed={transposed}"
                );
                out.push(case("SET", desc, EXACT, move |g, rng| {
                    let mut b = Built::default();
                    let a = maybe_transposed(g, rng, &mut b, dtype, [9, 5, 3, 1], transposed)?;
                    let y = value_input(g, rng, &mut b, dtype, nb_ext)?;
                    let r = g.set(a, y, nb, offset)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
        }
    }
}

fn diag_tri_cases(out: &mut Vec<Case>) {
    out.push(case(
        "DIAG",
        "DIAG f32 [7,1,3,2]".into(),
        EXACT,
        |g, rng| {
            let mut b = Built::default();
            let x = value_input(g, rng, &mut b, DType::F32, [7, 1, 3, 2])?;
            let r = g.diag(x)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
    out.push(case(
        "DIAG",
        "DIAG f32 permuted [5,1,2,1]".into(),
        EXACT,
        |g, rng| {
            let mut b = Built::default();
            let x = value_input(g, rng, &mut b, DType::F32, [1, 5, 2, 1])?;
            let p = g.permute(x, [1, 0, 2, 3])?;
            let r = g.diag(p)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
    for kind in [
        TriKind::Lower,
        TriKind::LowerDiag,
        TriKind::Upper,
        TriKind::UpperDiag,
    ] {
        for transposed in [false, true] {
            let desc = format!("TRI f32 {kind:?} [9,9,2,3] transposed={transposed}");
            out.push(case("TRI", desc, EXACT, move |g, rng| {
                let mut b = Built::default();
                let x = maybe_transposed(g, rng, &mut b, DType::F32, [9, 9, 2, 3], transposed)?;
                let r = g.tri(x, kind)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
}

fn upscale_cases(out: &mut Vec<Case>) {
    let modes = [
        ScaleMode::Nearest,
        ScaleMode::Bilinear {
            align_corners: false,
        },
        ScaleMode::Bilinear {
            align_corners: true,
        },
        ScaleMode::Bicubic {
            align_corners: false,
        },
        ScaleMode::Bicubic {
            align_corners: true,
        },
    ];
    let sizes: [([u64; 4], [u64; 4]); 3] = [
        ([5, 3, 2, 1], [11, 7, 4, 2]),
        ([9, 8, 3, 1], [4, 3, 3, 1]),
        ([1, 4, 1, 1], [3, 9, 1, 1]),
    ];
    for mode in modes {
        for dtype in [DType::F32, DType::F16] {
            let tol = f16_tol(dtype, F32_MATH);
            for (from, to) in sizes {
                let desc = format!("UPSCALE {dtype} {mode:?} {from:?} to {to:?}");
                out.push(case("UPSCALE", desc, tol, move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, dtype, from, -2.0, 2.0)?;
                    let r = g.upscale(x, to, mode)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
            let desc = format!("UPSCALE {dtype} {mode:?} transposed [6,5] to [13,8]");
            out.push(case("UPSCALE", desc, tol, move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, dtype, [5, 6, 1, 1], -2.0, 2.0)?;
                let xt = g.transpose(x)?;
                let r = g.upscale(xt, [13, 8, 1, 1], mode)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
}

/// Ids uniform in `0..n_expert`, as i32 bytes.
pub(super) fn expert_ids(rng: &mut Rng, n: u64, n_expert: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|_| (rng.below(n_expert) as i32).to_le_bytes())
        .collect()
}

fn add_id_cases(out: &mut Vec<Case>) {
    for (n, n_used, n_tokens, n_expert) in [(33u64, 2u64, 3u64, 5u64), (7, 4, 1, 9)] {
        for transposed in [false, true] {
            let desc = format!(
                "ADD_ID f32 [{n},{n_used},{n_tokens}] + [{n},{n_expert}] transposed={transposed}"
            );
            out.push(case("ADD_ID", desc, EXACT, move |g, rng| {
                let mut b = Built::default();
                let a = maybe_transposed(
                    g,
                    rng,
                    &mut b,
                    DType::F32,
                    [n, n_used, n_tokens, 1],
                    transposed,
                )?;
                let e = input(g, rng, &mut b, DType::F32, [n, n_expert, 1, 1], -1.0, 1.0)?;
                let ids = g.input("ids", DType::I32, [n_used, n_tokens, 1, 1])?;
                b.inputs
                    .push((ids, expert_ids(rng, n_used * n_tokens, n_expert)));
                let r = g.add_id(a, e, ids)?;
                g.mark_output(r)?;
                Ok(b)
            }));
        }
    }
}

/// Adds the shape family's cases.
pub(super) fn add(out: &mut Vec<Case>) {
    concat_cases(out);
    repeat_cases(out);
    pad_cases(out);
    set_cases(out);
    diag_tri_cases(out);
    upscale_cases(out);
    add_id_cases(out);
}
