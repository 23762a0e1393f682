//! Fused attention: ggml_flash_attn_ext (`flash_attn.wgsl`, K/V readers in
//! `flash_attn_kv.wgsl`).

use wgllm_core::{DType, Result};

use super::{words, Ctx, Dispatch, Operand};
use crate::shaders::{Kernel, PipelineKey, OP_WORDS};

/// Invocations per workgroup, and keys per tile.
const WG_ATTN: u32 = 64;
/// Workgroups a split attention aims for: enough to fill a large GPU several times over.
const SPLIT_TARGET_GROUPS: u64 = 1024;
/// Largest K/V head size: q sits in workgroup memory (4 KiB at 1024) and each invocation keeps
/// `dv / 64` accumulators.
const MAX_HEAD: u64 = 1024;
/// K/V dtypes the kernel reads.
const KV: [DType; 5] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
];

fn flash_attn_key(
    k: DType,
    v: DType,
    mask: Option<DType>,
    sinks: bool,
    d: u32,
    dv: u32,
    split: bool,
) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::FlashAttn {
            mask: mask.is_some(),
            sinks,
            d,
            dv,
            split,
        },
        dtypes: vec![
            DType::F32,
            k,
            v,
            mask.unwrap_or(DType::F32),
            DType::F32,
            DType::F32,
        ],
        wg: WG_ATTN,
    }
}

/// ggml_flash_attn_ext: `srcs = [q, k, v, mask?, sinks?]`, one workgroup per query row and head.
pub(super) fn flash_attn_ext(
    ctx: &Ctx,
    scale: f32,
    max_bias: f32,
    softcap: f32,
) -> Result<Vec<Dispatch>> {
    let (q, k, v, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.src(2)?, ctx.out());
    let mask = ctx.node.opt_src(3).map(|_| ctx.src(3)).transpose()?;
    let sinks = ctx.node.opt_src(4).map(|_| ctx.src(4)).transpose()?;
    ctx.require(
        q.dtype == DType::F32
            && KV.contains(&k.dtype)
            && KV.contains(&v.dtype)
            && mask
                .as_ref()
                .is_none_or(|m| matches!(m.dtype, DType::F32 | DType::F16))
            && sinks.as_ref().is_none_or(|s| s.dtype == DType::F32)
            && dst.dtype == DType::F32,
        "f32 q and sinks; f32, f16, bf16, q8_0 or q4_0 K/V; f32 or f16 mask",
    )?;
    let mut dtypes = vec![k.dtype, v.dtype];
    dtypes.extend(mask.as_ref().map(|m| m.dtype));
    ctx.require_f16(&dtypes)?;
    let (d, dv) = (k.layout.ne[0], v.layout.ne[0]);
    let whole_blocks = |o: &Operand, n: u64| n.is_multiple_of(o.dtype.block_size() as u64);
    if d > MAX_HEAD || dv > MAX_HEAD || !whole_blocks(&k, d) || !whole_blocks(&v, dv) {
        return Err(ctx.unsupported(format!(
            "head sizes d = {d}, dv = {dv}: at most {MAX_HEAD}, whole blocks for quantized K/V"
        )));
    }
    let n_head = q.layout.ne[2];
    let n_head_log2 = 1u64 << n_head.max(1).ilog2();
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    // As ggml: the scale folds in 1/softcap, and the kernel multiplies tanh by softcap.
    let scale = if softcap != 0.0 {
        scale / softcap
    } else {
        scale
    };
    let mut op = words(&[scale, max_bias, m0, m1, 0.0, softcap]);
    op[4] = ctx.items(n_head_log2)?;
    op[6] = ctx.items(n_head / k.layout.ne[2].max(1))?;
    op[7] = ctx.items(n_head / v.layout.ne[2].max(1))?;
    let rows = q.layout.ne[1] * n_head * q.layout.ne[3];
    let n_kv = k.layout.ne[1];
    let tiles = n_kv.div_ceil(u64::from(WG_ATTN));
    // Few rows with many keys (decode): cut the keys into splits of whole tiles.
    let want = (SPLIT_TARGET_GROUPS / rows.max(1)).min(tiles);
    let mask_dtype = mask.as_ref().map(|m| m.dtype);
    let (d, dv) = (ctx.items(d)?, ctx.items(dv)?);
    if want < 2 {
        let key = flash_attn_key(k.dtype, v.dtype, mask_dtype, sinks.is_some(), d, dv, false);
        let operands = vec![
            q.clone(),
            k,
            v,
            mask.unwrap_or_else(|| Operand::absent(0)),
            sinks.unwrap_or_else(|| Operand::absent(1)),
            dst,
        ];
        return Ok(vec![Dispatch {
            key,
            operands,
            op_words: op,
            items: ctx.items(rows)?,
            groups: ctx.grid(rows, 1)?,
        }]);
    }
    let per = tiles.div_ceil(want) * u64::from(WG_ATTN);
    let splits = n_kv.div_ceil(per);
    op[8] = ctx.items(per)?;
    op[9] = ctx.items(splits)?;
    let scratch = Operand::scratch(DType::F32, rows * splits * (u64::from(dv) + 2))?;
    let partials = Dispatch {
        key: flash_attn_key(k.dtype, v.dtype, mask_dtype, false, d, dv, true),
        operands: vec![
            q.clone(),
            k,
            v,
            mask.unwrap_or_else(|| Operand::absent(0)),
            Operand::absent(1),
            scratch.clone(),
        ],
        op_words: op,
        items: ctx.items(rows)?,
        groups: ctx.grid(rows * splits, 1)?,
    };
    let mut cop = [0u32; OP_WORDS];
    cop[0] = ctx.items(n_head)?;
    cop[1] = ctx.items(q.layout.ne[1])?;
    cop[2] = ctx.items(splits)?;
    let combine = Dispatch {
        key: combine_key(sinks.is_some(), dv),
        operands: vec![scratch, sinks.unwrap_or_else(|| Operand::absent(0)), dst],
        op_words: cop,
        items: ctx.items(rows)?,
        groups: ctx.grid(rows, 1)?,
    };
    Ok(vec![partials, combine])
}

fn combine_key(sinks: bool, dv: u32) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::FlashAttnCombine { sinks, dv },
        dtypes: vec![DType::F32; 3],
        wg: WG_ATTN,
    }
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let mut keys = Vec::new();
    for k in KV {
        for v in KV {
            keys.push(flash_attn_key(k, v, Some(DType::F16), false, 64, 64, false));
            keys.push(flash_attn_key(k, v, Some(DType::F16), false, 64, 64, true));
        }
    }
    for mask in [None, Some(DType::F32)] {
        for sinks in [false, true] {
            for (d, dv) in [(40, 40), (128, 128), (256, 256), (192, 128), (1024, 1024)] {
                keys.push(flash_attn_key(
                    DType::F32,
                    DType::F16,
                    mask,
                    sinks,
                    d,
                    dv,
                    false,
                ));
                keys.push(flash_attn_key(
                    DType::F32,
                    DType::F16,
                    mask,
                    false,
                    d,
                    dv,
                    true,
                ));
                keys.push(combine_key(sinks, dv));
            }
        }
    }
    keys
}
