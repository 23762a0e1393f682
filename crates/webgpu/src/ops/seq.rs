//! Sequence and convolution ops (`seq.wgsl`): ssm_conv (f32), conv_2d and im2col (f32 or f16
//! sources and results, as ggml's WebGPU table), solve_tri (f32, all eight forms); the
//! recurrent scans (`scan.wgsl`): ssm_scan (Mamba-1 and Mamba-2) and gated_delta_net (f32).

use wgllm_core::{DType, Layout, Result};

use super::{Ctx, Dispatch, Operand, WG_ELEMENTWISE};
use crate::kernels::SeqKind;
use crate::kernels::{Kernel, PipelineKey, OP_WORDS};

fn key(kind: SeqKind, dtypes: Vec<DType>) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Seq(kind),
        dtypes,
        wg: WG_ELEMENTWISE,
    }
}

fn float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16)
}

/// ggml_ssm_conv: `srcs = [conv_x, conv_w]`.
pub(super) fn ssm_conv(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let (x, w, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    ctx.require(
        [x.dtype, w.dtype, dst.dtype]
            .iter()
            .all(|&d| d == DType::F32),
        "f32",
    )?;
    let n = dst.layout.nelements();
    let k = key(SeqKind::SsmConv, vec![DType::F32; 3]);
    Ok(vec![ctx.per_item(k, vec![x, w, dst], [0; OP_WORDS], n)?])
}

/// Stride, padding and dilation as op words 0..6.
fn conv_words(stride: [u32; 2], pad: [u32; 2], dilation: [u32; 2]) -> [u32; OP_WORDS] {
    let mut op = [0; OP_WORDS];
    op[..6].copy_from_slice(&[
        stride[0],
        stride[1],
        pad[0],
        pad[1],
        dilation[0],
        dilation[1],
    ]);
    op
}

/// ggml_conv_2d_direct: `srcs = [kernel, input]`.
pub(super) fn conv_2d(
    ctx: &Ctx,
    stride: [u32; 2],
    pad: [u32; 2],
    dilation: [u32; 2],
) -> Result<Vec<Dispatch>> {
    let (k, x, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    ctx.require(
        float(k.dtype) && float(x.dtype) && float(dst.dtype),
        "f32 or f16 kernel, input and result",
    )?;
    ctx.require_f16(&[k.dtype, x.dtype, dst.dtype])?;
    let n = dst.layout.nelements();
    let pk = key(SeqKind::Conv2d, vec![k.dtype, x.dtype, dst.dtype]);
    let op = conv_words(stride, pad, dilation);
    Ok(vec![ctx.per_item(pk, vec![k, x, dst], op, n)?])
}

/// `o` seen with a dim of extent 1 inserted at `dim` (dims above shift up; dim 3 must be 1).
fn insert_unit_dim(o: Operand, dim: usize) -> Operand {
    let (mut ne, mut nb) = (o.layout.ne, o.layout.nb);
    for d in (dim + 1..4).rev() {
        ne[d] = ne[d - 1];
        nb[d] = nb[d - 1];
    }
    ne[dim] = 1;
    Operand {
        layout: Layout { ne, nb, ..o.layout },
        ..o
    }
}

/// ggml_im2col: `srcs = [kernel, input]`; the kernel only gives its extents, the 1-D form runs
/// as 2-D with one row.
pub(super) fn im2col(
    ctx: &Ctx,
    stride: [u32; 2],
    pad: [u32; 2],
    dilation: [u32; 2],
    is_2d: bool,
) -> Result<Vec<Dispatch>> {
    let (k, x, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    ctx.require(
        float(x.dtype) && float(dst.dtype),
        "f32 or f16 input and result",
    )?;
    ctx.require_f16(&[x.dtype, dst.dtype])?;
    let ke = k.layout.ne;
    let (x, dst, kw, kh, c) = match is_2d {
        true => (x, dst, ke[0], ke[1], ke[2]),
        false => (
            insert_unit_dim(x, 1),
            insert_unit_dim(dst, 2),
            ke[0],
            1,
            ke[1],
        ),
    };
    let mut op = conv_words(stride, pad, dilation);
    op[6] = ctx.items(kw)?;
    op[7] = ctx.items(kh)?;
    op[8] = ctx.items(c)?;
    let n = dst.layout.nelements();
    let pk = key(SeqKind::Im2Col, vec![x.dtype, dst.dtype]);
    Ok(vec![ctx.per_item(pk, vec![x, dst], op, n)?])
}

/// ggml_solve_tri: `srcs = [a, b]`, one invocation per system.
pub(super) fn solve_tri(ctx: &Ctx, left: bool, lower: bool, uni: bool) -> Result<Vec<Dispatch>> {
    let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    ctx.require(
        [a.dtype, b.dtype, dst.dtype]
            .iter()
            .all(|&d| d == DType::F32),
        "f32",
    )?;
    let be = b.layout.ne;
    let systems = if left { be[0] } else { be[1] };
    let mut op = [0; OP_WORDS];
    op[0] = u32::from(left);
    op[1] = u32::from(lower);
    op[2] = u32::from(uni);
    op[3] = ctx.items(systems)?;
    let n = systems * be[2] * be[3];
    let pk = key(SeqKind::SolveTri, vec![DType::F32; 3]);
    Ok(vec![ctx.per_item(pk, vec![a, b, dst], op, n)?])
}

/// Invocations per workgroup of ssm_scan (channels of one sequence).
const WG_SCAN: u32 = 64;

/// ggml_ssm_scan: `srcs = [s, x, dt, A, B, C, ids]`, one workgroup per block of `WG_SCAN`
/// channels (head, row) and sequence.
pub(super) fn ssm_scan(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let srcs = (0..7).map(|i| ctx.src(i)).collect::<Result<Vec<_>>>()?;
    let dst = ctx.out();
    ctx.require(
        srcs[..6]
            .iter()
            .chain([&dst])
            .all(|o| o.dtype == DType::F32)
            && srcs[6].dtype == DType::I32,
        "f32 with i32 ids",
    )?;
    let [d_state, _, _, n_rs] = srcs[0].layout.ne;
    let [head_dim, n_head, n_tokens, n_seqs] = srcs[1].layout.ne;
    let n_group = srcs[4].layout.ne[1];
    let y_len = srcs[1].layout.nelements();
    let mut op = [0; OP_WORDS];
    for (w, v) in op.iter_mut().zip([
        head_dim,
        n_head,
        d_state,
        n_tokens,
        n_head / n_group.max(1),
        y_len,
        n_rs,
    ]) {
        *w = ctx.items(v)?;
    }
    let channels = head_dim * n_head;
    let mut operands = srcs;
    operands.push(dst);
    Ok(vec![Dispatch {
        key: ssm_scan_key(),
        operands,
        op_words: op,
        items: ctx.items(channels)?,
        groups: ctx.grid(channels.div_ceil(u64::from(WG_SCAN)), n_seqs)?,
    }])
}

/// Seven sources and the result, all f32 but the i32 ids.
fn ssm_scan_key() -> PipelineKey {
    let mut dtypes = vec![DType::F32; 8];
    dtypes[6] = DType::I32;
    PipelineKey {
        kernel: Kernel::Seq(SeqKind::SsmScan),
        dtypes,
        wg: WG_SCAN,
    }
}

fn gdn_key(s: u32) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Seq(SeqKind::GatedDeltaNet),
        dtypes: vec![DType::F32; 7],
        wg: s,
    }
}

/// ggml_gated_delta_net: `srcs = [q, k, v, g, beta, state]`, one workgroup of S invocations
/// (one per state column) per value head and sequence.
pub(super) fn gated_delta_net(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    let srcs = (0..6).map(|i| ctx.src(i)).collect::<Result<Vec<_>>>()?;
    let dst = ctx.out();
    ctx.require(
        srcs.iter().chain([&dst]).all(|o| o.dtype == DType::F32),
        "f32",
    )?;
    let [s, n_head, n_tokens, n_seqs] = srcs[2].layout.ne;
    let (eq, ek) = (srcs[0].layout.ne, srcs[1].layout.ne);
    let l = &ctx.caps.limits;
    let max_s = u64::from(
        l.max_compute_invocations_per_workgroup
            .min(l.max_compute_workgroup_size_x),
    );
    if s == 0 || s > max_s {
        return Err(ctx.unsupported(format!(
            "head size {s} must be within this device's {max_s} invocations per workgroup"
        )));
    }
    let mut op = [0; OP_WORDS];
    for (w, v) in op.iter_mut().zip([
        n_head,
        n_tokens,
        n_seqs,
        u64::from(srcs[3].layout.ne[0] == s && s > 1),
        eq[1],
        ek[1],
        n_seqs / eq[3].max(1),
        n_seqs / ek[3].max(1),
    ]) {
        *w = ctx.items(v)?;
    }
    let mut operands = srcs;
    operands.push(dst);
    Ok(vec![Dispatch {
        key: gdn_key(ctx.items(s)?),
        operands,
        op_words: op,
        items: ctx.items(n_head * n_seqs)?,
        groups: ctx.grid(n_head, n_seqs)?,
    }])
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys = vec![
        key(SeqKind::SsmConv, vec![DType::F32; 3]),
        key(SeqKind::SolveTri, vec![DType::F32; 3]),
        ssm_scan_key(),
        gdn_key(1),
        gdn_key(33),
        gdn_key(128),
    ];
    let floats = [DType::F32, DType::F16];
    for x in floats {
        for d in floats {
            keys.push(key(SeqKind::Im2Col, vec![x, d]));
            for k in floats {
                keys.push(key(SeqKind::Conv2d, vec![k, x, d]));
            }
        }
    }
    keys
}
