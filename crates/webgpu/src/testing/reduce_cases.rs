//! Op-table cases of the reductions (sum, sum_rows, cumsum), argsort and mul_mat_id.
//!
//! Tolerances: the CPU reference accumulates sums in f64 and rounds once; the kernels accumulate
//! in f32 (strided partial sums, then a tree), so each result carries rounding of order
//! `sqrt(n) * 2^-24` relative to the partial sums. With n up to a few thousand values in
//! `[-1, 1)` that is an NMSE well below `SUMS = 1e-9` (measured ~1e-14). argsort results are
//! indices and must match exactly, ties and NaNs included; mul_mat_id is a matrix product, so it
//! shares mul_mat's 1e-9 (summation order differs), and its prefills, whose routed columns run
//! on f16 operands where cooperative matrices do, mul_mat's prefill tolerance `MATMUL_F16`.

use wgllm_core::op::SortOrder;
use wgllm_core::{DType, Graph, Result, TensorId};

use super::cases::{case, input, weight, EXACT, MATMUL, MATMUL_F16, QUANTS};
use super::shape_cases::expert_ids;
use super::{Built, Case, Rng};

const SUMS: f64 = 1e-9;

/// Shapes with odd sizes, batches, and one transposed (non-contiguous) source each.
const SHAPES: [[u64; 4]; 4] = [[1, 1, 1, 1], [7, 3, 2, 1], [257, 2, 1, 3], [3000, 2, 1, 1]];

type ReduceFn = fn(&mut Graph, TensorId) -> Result<TensorId>;

fn sum_cases(out: &mut Vec<Case>) {
    let ops: [(&'static str, ReduceFn); 3] = [
        ("SUM", |g, x| g.sum(x)),
        ("SUM_ROWS", |g, x| g.sum_rows(x)),
        ("CUMSUM", |g, x| g.cumsum(x)),
    ];
    for (name, f) in ops {
        for ne in SHAPES {
            out.push(case(
                name,
                format!("{name} f32 {ne:?}"),
                SUMS,
                move |g, rng| {
                    let mut b = Built::default();
                    let x = input(g, rng, &mut b, DType::F32, ne, -1.0, 1.0)?;
                    let r = f(g, x)?;
                    g.mark_output(r)?;
                    Ok(b)
                },
            ));
        }
        out.push(case(
            name,
            format!("{name} f32 transposed [33,5,2]"),
            SUMS,
            move |g, rng| {
                let mut b = Built::default();
                let x = input(g, rng, &mut b, DType::F32, [5, 33, 2, 1], -1.0, 1.0)?;
                let xt = g.transpose(x)?;
                let r = f(g, xt)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
}

/// `n` values from a few levels (many ties), with -0.0 next to 0.0 and, with `nans`, some NaNs.
fn tied_values(rng: &mut Rng, n: u64, nans: bool) -> Vec<u8> {
    (0..n)
        .flat_map(|_| {
            let v = match rng.below(12) {
                0 => -0.0,
                1 if nans => f32::NAN,
                r => (r as f32 - 6.0) * 0.25,
            };
            v.to_le_bytes()
        })
        .collect()
}

fn argsort_cases(out: &mut Vec<Case>) {
    for order in [SortOrder::Asc, SortOrder::Desc] {
        for ne in SHAPES {
            for ties in [false, true] {
                let desc = format!("ARGSORT f32 {order:?} {ne:?} ties+NaN={ties}");
                out.push(case("ARGSORT", desc, EXACT, move |g, rng| {
                    let mut b = Built::default();
                    let x = match ties {
                        false => input(g, rng, &mut b, DType::F32, ne, -1.0, 1.0)?,
                        true => {
                            let x = g.input("x", DType::F32, ne)?;
                            b.inputs
                                .push((x, tied_values(rng, ne.iter().product(), true)));
                            x
                        }
                    };
                    let r = g.argsort(x, order)?;
                    g.mark_output(r)?;
                    Ok(b)
                }));
            }
        }
        out.push(case(
            "ARGSORT",
            format!("ARGSORT f32 {order:?} transposed [33,5]"),
            EXACT,
            move |g, rng| {
                let mut b = Built::default();
                let x = g.input("x", DType::F32, [5, 33, 1, 1])?;
                b.inputs.push((x, tied_values(rng, 5 * 33, false)));
                let xt = g.transpose(x)?;
                let r = g.argsort(xt, order)?;
                g.mark_output(r)?;
                Ok(b)
            },
        ));
    }
}

/// `mul_mat_id` of experts `[k, m, n_expert]` of `wt` with activations of `xt`
/// `[k, b.ne1, n_tokens]` routed to `n_used` experts a token.
fn id_case(
    (wt, xt): (DType, DType),
    (k, m, n_expert): (u64, u64, u64),
    used: (u64, u64, u64),
) -> Case {
    let (n_used, b1, n_tokens) = used;
    let desc = format!(
        "MUL_MAT_ID {wt} x {xt} k={k} m={m} experts={n_expert} used={n_used} b.ne1={b1} tokens={n_tokens}"
    );
    let tol = match n_tokens >= 16 {
        true => MATMUL_F16,
        false => MATMUL,
    };
    case("MUL_MAT_ID", desc, tol, move |g, rng| {
        let mut b = Built::default();
        let a = weight(g, rng, wt, [k, m, n_expert, 1])?;
        let x = input(g, rng, &mut b, xt, [k, b1, n_tokens, 1], -1.0, 1.0)?;
        let ids = g.input("ids", DType::I32, [n_used, n_tokens, 1, 1])?;
        b.inputs
            .push((ids, expert_ids(rng, n_used * n_tokens, n_expert)));
        let r = g.mul_mat_id(a, x, ids)?;
        g.mark_output(r)?;
        Ok(b)
    })
}

fn mul_mat_id_cases(out: &mut Vec<Case>) {
    let weights = [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS);
    // Float weights once with rows of 33 (the plain kernel) and once of 64 (the mat-vec's ID,
    // as the block formats take it).
    let shapes = weights.flat_map(|wt| match wt.block_size() {
        1 => vec![(wt, 33), (wt, 64)],
        bs => vec![(wt, bs as u64)],
    });
    for (wt, k) in shapes {
        for (m, n_expert, used) in [(9, 4, (2, 1, 3)), (5, 3, (2, 2, 1))] {
            out.push(id_case((wt, DType::F32), (k, m, n_expert), used));
        }
    }
    // Prefills, whose columns are routed to the tiled kernels by expert: every weight dtype
    // with an edge tile of rows; then activations per slot (b.ne1 = n_used), and buckets of
    // more columns than the tiles along n (2 experts for 100 tokens, a token picking one
    // expert twice at times).
    for wt in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .chain(QUANTS)
    {
        let k = (wt.block_size() as u64).max(64);
        out.push(id_case((wt, DType::F32), (k, 70, 4), (2, 1, 40)));
    }
    for wt in [DType::F16, DType::Q4_0, DType::Q4_K] {
        out.push(id_case((wt, DType::F32), (256, 200, 8), (4, 4, 64)));
        out.push(id_case((wt, DType::F32), (256, 130, 2), (2, 1, 100)));
    }
    // A decode step of a mixture-of-experts layer (8 of 32 experts for one token), and f16
    // activations (the plain kernel's f16 x f16).
    out.push(id_case((DType::Q4_K, DType::F32), (512, 72, 32), (8, 1, 1)));
    out.push(id_case((DType::F16, DType::F16), (64, 7, 3), (2, 2, 2)));
    out.push(case(
        "MUL_MAT_ID",
        "MUL_MAT_ID f32 x transposed f32 k=33 m=6 experts=3 used=2 tokens=1".into(),
        MATMUL,
        |g, rng| {
            let mut b = Built::default();
            let a = weight(g, rng, DType::F32, [33, 6, 3, 1])?;
            let x = input(g, rng, &mut b, DType::F32, [2, 33, 1, 1], -1.0, 1.0)?;
            let xt = g.transpose(x)?;
            let ids = g.input("ids", DType::I32, [2, 1, 1, 1])?;
            b.inputs.push((ids, expert_ids(rng, 2, 3)));
            let r = g.mul_mat_id(a, xt, ids)?;
            g.mark_output(r)?;
            Ok(b)
        },
    ));
}

/// Adds the reduction, sorting and mul_mat_id cases.
pub(super) fn add(out: &mut Vec<Case>) {
    sum_cases(out);
    argsort_cases(out);
    mul_mat_id_cases(out);
}
