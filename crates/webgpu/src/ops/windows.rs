//! Operands larger than one storage binding: a matrix whose bytes exceed the device's binding
//! limit (Gemma 3's 262144-row embedding in Q8_0 is ~178 MB; lavapipe binds at most 128 MiB) is
//! cut into windows of whole rows, and the op becomes one dispatch per window, each binding only
//! its window of the same buffer. Nothing is copied or allocated: the weight stays one buffer
//! (within `max_buffer_size`) and each window is a binding range of it.
//!
//! Activations and results are cut the other way where they outgrow a binding: a product's
//! columns (its activations' rows and its result's, one token each) into slices that each
//! fit, each slice its own product against the whole weight ([`column_windows`]).
//!
//! A window starts at its first row's byte offset; the executable binds from that offset rounded
//! down to `min_storage_buffer_offset_alignment` and passes the remainder to the kernel (see
//! `executable.rs`), so a window's rows plus one alignment unit (and word padding) must fit.

use wgllm_core::{Layout, Result};

use super::{Ctx, Operand};

/// One window: its first row in the whole operand, and the operand restricted to its rows.
pub(super) struct Window {
    pub first_row: u64,
    pub operand: Operand,
}

/// Whether binding `o` fits this device's (or the config's lowered) binding limit, counting the
/// alignment remainder and word padding the executable may add.
pub(super) fn fits(ctx: &Ctx, o: &Operand) -> bool {
    o.layout.span_bytes(o.dtype) + slack(ctx) <= ctx.caps.binding_limit
}

fn slack(ctx: &Ctx) -> u64 {
    u64::from(ctx.caps.limits.min_storage_buffer_offset_alignment) + 4
}

/// `o` cut along dim 1 into windows that each fit one binding, or `o` whole when it fits (or is
/// not a single matrix, which `check_operand` then reports).
pub(super) fn row_windows(ctx: &Ctx, o: &Operand) -> Result<Vec<Window>> {
    let l = o.layout;
    let whole = || {
        vec![Window {
            first_row: 0,
            operand: o.clone(),
        }]
    };
    if fits(ctx, o) || l.ne[2] * l.ne[3] != 1 || l.ne[1] < 2 || l.nb[1] == 0 {
        return Ok(whole());
    }
    let row = Layout {
        ne: [l.ne[0], 1, 1, 1],
        ..l
    };
    let row_span = row.span_bytes(o.dtype);
    let room = ctx.caps.binding_limit.saturating_sub(slack(ctx));
    if row_span > room {
        return Err(ctx.unsupported(format!(
            "one row of '{}' spans {row_span} bytes, over the binding limit of {}",
            ctx.graph.node(o.tensor).name,
            ctx.caps.binding_limit
        )));
    }
    let per = (room - row_span) / l.nb[1] + 1;
    let mut out = Vec::new();
    let mut r0 = 0;
    while r0 < l.ne[1] {
        let n = per.min(l.ne[1] - r0);
        out.push(Window {
            first_row: r0,
            operand: Operand {
                layout: Layout {
                    ne: [l.ne[0], n, 1, 1],
                    offset: l.offset + r0 * l.nb[1],
                    ..l
                },
                ..o.clone()
            },
        });
        r0 += n;
    }
    Ok(out)
}

/// The columns of a product's activations `b` and result `dst` (dim 1 of both, one token each)
/// in slices whose bindings fit, `(b, dst)` of each; both whole when they fit, or when they are
/// not single matrices (which `check_operand` then reports). Slices are a multiple of 64
/// columns (a tile of the tiled kernels) where more than 64 fit.
pub(super) fn column_windows(
    ctx: &Ctx,
    b: &Operand,
    dst: &Operand,
) -> Result<Vec<(Operand, Operand)>> {
    let single = |o: &Operand| o.layout.ne[2] * o.layout.ne[3] == 1 && o.layout.nb[1] != 0;
    let n = b.layout.ne[1];
    if fits(ctx, b) && fits(ctx, dst) || !single(b) || !single(dst) || n < 2 {
        return Ok(vec![(b.clone(), dst.clone())]);
    }
    let room = ctx.caps.binding_limit.saturating_sub(slack(ctx));
    let per_operand = |o: &Operand| -> Result<u64> {
        let col = Layout {
            ne: [o.layout.ne[0], 1, 1, 1],
            ..o.layout
        };
        let span = col.span_bytes(o.dtype);
        match span <= room {
            true => Ok((room - span) / o.layout.nb[1] + 1),
            false => Err(ctx.unsupported(format!(
                "one column of '{}' spans {span} bytes, over the binding limit of {}",
                ctx.graph.node(o.tensor).name,
                ctx.caps.binding_limit
            ))),
        }
    };
    let mut per = per_operand(b)?.min(per_operand(dst)?);
    if per > 64 {
        per -= per % 64;
    }
    let slice = |o: &Operand, c0: u64, c: u64| Operand {
        layout: Layout {
            ne: [o.layout.ne[0], c, 1, 1],
            offset: o.layout.offset + c0 * o.layout.nb[1],
            ..o.layout
        },
        ..o.clone()
    };
    let mut out = Vec::new();
    let mut c0 = 0;
    while c0 < n {
        let c = per.min(n - c0);
        out.push((slice(b, c0, c), slice(dst, c0, c)));
        c0 += c;
    }
    Ok(out)
}
