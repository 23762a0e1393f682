//! Element-wise ops: every unary op, scale, clamp, fill and cpy/cont conversions (all
//! `unary.wgsl`, dense same-dtype copies as 16-byte words through `copy.wgsl`), and binary
//! add/sub/mul/div with broadcast (`binary.wgsl`).

use wgllm_core::op::{BinaryOp, UnaryOp};
use wgllm_core::{DType, Layout, Result};

use super::{words, Ctx, Dispatch, Operand, WG_ELEMENTWISE};
use crate::kernels::{Kernel, PipelineKey, OP_WORDS};

const FLOATS: [DType; 2] = [DType::F32, DType::F16];

pub(super) fn map_key(expr: &'static str, src: DType, dst: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Map { expr },
        dtypes: vec![src, dst],
        wg: WG_ELEMENTWISE,
    }
}

fn binary_key(op: BinaryOp, dtype: DType) -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Binary {
            op: binary_symbol(op),
        },
        dtypes: vec![dtype; 3],
        wg: WG_ELEMENTWISE,
    }
}

fn binary_symbol(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
    }
}

/// The WGSL f32 expression of `x` for a unary op (helpers in `unary.wgsl`) and its parameters.
pub(super) fn unary_expr(op: UnaryOp) -> (&'static str, Vec<f32>) {
    let e = match op {
        UnaryOp::Abs => "abs(x)",
        UnaryOp::Sgn => "sign(x)",
        UnaryOp::Neg => "-x",
        UnaryOp::Step => "select(0.0, 1.0, x > 0.0)",
        UnaryOp::Tanh => "tanh_safe(x)",
        UnaryOp::Elu => "select(expm1(x), x, x > 0.0)",
        UnaryOp::Relu => "max(x, 0.0)",
        UnaryOp::Sigmoid => "sigmoid(x)",
        UnaryOp::Gelu => "gelu(x)",
        UnaryOp::GeluQuick => "x * sigmoid(1.702 * x)",
        UnaryOp::GeluErf => "0.5 * x * (1.0 + erf(x * 0.70710678118654752))",
        UnaryOp::Silu => "x / (1.0 + exp(-x))",
        UnaryOp::Hardswish => "x * clamp((x + 3.0) / 6.0, 0.0, 1.0)",
        UnaryOp::Hardsigmoid => "clamp((x + 3.0) / 6.0, 0.0, 1.0)",
        UnaryOp::Exp => "exp(x)",
        UnaryOp::Expm1 => "expm1(x)",
        UnaryOp::Softplus => "select(log(1.0 + exp(x)), x, x > 20.0)",
        UnaryOp::Floor => "floor(x)",
        UnaryOp::Ceil => "ceil(x)",
        UnaryOp::Round => "round_away(x)",
        UnaryOp::Trunc => "trunc(x)",
        UnaryOp::Xielu {
            alpha_n,
            alpha_p,
            beta,
            eps,
        } => {
            return (
                "select((expm1(min(x, op_f(3u))) - x) * op_f(0u) + op_f(2u) * x, \
                 op_f(1u) * x * x + op_f(2u) * x, x > 0.0)",
                vec![alpha_n, alpha_p, beta, eps],
            )
        }
        UnaryOp::Log => "log(x)",
        UnaryOp::Sqr => "x * x",
        UnaryOp::Sqrt => "sqrt(x)",
        UnaryOp::Sin => "sin(x)",
        UnaryOp::Cos => "cos(x)",
    };
    (e, vec![])
}

const SCALE: &str = "x * op_f(0u) + op_f(1u)";
const CLAMP: &str = "min(max(x, op_f(0u)), op_f(1u))";
const FILL: &str = "op_f(0u)";
pub(super) const COPY: &str = "x";

/// `dst = expr(src)` for a same-dtype float op on source 0.
fn float_map(ctx: &Ctx, expr: &'static str, params: &[f32]) -> Result<Vec<Dispatch>> {
    let src = ctx.src(0)?;
    let dst = ctx.out();
    ctx.require(
        FLOATS.contains(&dst.dtype) && src.dtype == dst.dtype,
        "f32 or f16, same for source and result",
    )?;
    ctx.require_f16(&[dst.dtype])?;
    let n = dst.layout.nelements();
    let key = map_key(expr, src.dtype, dst.dtype);
    Ok(vec![ctx.per_item(key, vec![src, dst], words(params), n)?])
}

pub(super) fn unary(ctx: &Ctx, op: UnaryOp) -> Result<Vec<Dispatch>> {
    let (expr, params) = unary_expr(op);
    float_map(ctx, expr, &params)
}

pub(super) fn scale(ctx: &Ctx, scale: f32, bias: f32) -> Result<Vec<Dispatch>> {
    float_map(ctx, SCALE, &[scale, bias])
}

pub(super) fn clamp(ctx: &Ctx, min: f32, max: f32) -> Result<Vec<Dispatch>> {
    float_map(ctx, CLAMP, &[min, max])
}

pub(super) fn fill(ctx: &Ctx, value: f32) -> Result<Vec<Dispatch>> {
    float_map(ctx, FILL, &[value])
}

/// True for the conversions cpy/cont support: among f32/f16/bf16 into f32/f16, f32 to i32
/// (truncating, as ggml), and i32 to i32.
fn convertible(src: DType, dst: DType) -> bool {
    matches!(src, DType::F32 | DType::F16 | DType::BF16) && FLOATS.contains(&dst)
        || (src, dst) == (DType::F32, DType::I32)
        || (src, dst) == (DType::I32, DType::I32)
}

const CONVERSIONS: &str = "f32/f16/bf16 -> f32/f16, f32 -> i32, i32 -> i32";

/// 16-byte words each invocation of `copy.wgsl` moves: several loads in flight per lane.
const WORDS_PER_INVOCATION: u64 = 4;

fn word_copy_key() -> PipelineKey {
    PipelineKey {
        kernel: Kernel::Copy {
            per: WORDS_PER_INVOCATION as u32,
        },
        dtypes: vec![DType::I32; 2],
        wg: WG_ELEMENTWISE,
    }
}

/// A same-dtype copy between dense layouts as 16-byte words (`copy.wgsl`), when both starts are
/// 16-byte aligned and the size is whole words. Windows start at the byte offset rounded down
/// to the storage offset alignment (the arena places tensors on it too), so that alignment must
/// keep 16-byte starts. The operands are passed as i32 words, whose descriptor offsets `copy.wgsl`
/// turns into vec4 indices.
fn word_copy(ctx: &Ctx, src: &Operand, dst: &Operand) -> Result<Option<Dispatch>> {
    let bytes = dst.layout.span_bytes(dst.dtype);
    let align16 = |x: u64| x.is_multiple_of(16);
    let ok = src.dtype == dst.dtype
        && src.layout.is_contiguous(src.dtype)
        && dst.layout.is_contiguous(dst.dtype)
        && align16(bytes)
        && align16(src.layout.offset)
        && align16(dst.layout.offset)
        && align16(u64::from(
            ctx.caps.limits.min_storage_buffer_offset_alignment,
        ));
    if !ok {
        return Ok(None);
    }
    let words = |o: &Operand| -> Result<Operand> {
        let mut layout = Layout::contiguous(DType::I32, [bytes / 4, 1, 1, 1])?;
        layout.offset = o.layout.offset;
        Ok(Operand {
            tensor: o.tensor,
            dtype: DType::I32,
            layout,
        })
    };
    let vec4s = bytes / 16;
    let per_group = u64::from(WG_ELEMENTWISE) * WORDS_PER_INVOCATION;
    Ok(Some(Dispatch {
        key: word_copy_key(),
        operands: vec![words(src)?, words(dst)?],
        op_words: [0; OP_WORDS],
        items: ctx.items(vec4s)?,
        groups: ctx.grid(vec4s.div_ceil(per_group), 1)?,
    }))
}

fn copy(ctx: &Ctx, src_index: usize) -> Result<Vec<Dispatch>> {
    let src = ctx.src(src_index)?;
    let dst = ctx.out();
    ctx.require(convertible(src.dtype, dst.dtype), CONVERSIONS)?;
    ctx.require_f16(&[src.dtype, dst.dtype])?;
    if let Some(d) = word_copy(ctx, &src, &dst)? {
        return Ok(vec![d]);
    }
    let n = src.layout.nelements();
    let key = map_key(COPY, src.dtype, dst.dtype);
    Ok(vec![ctx.per_item(key, vec![src, dst], [0; OP_WORDS], n)?])
}

/// ggml_cpy: `srcs = [dst, src]`, written into the destination view in place.
pub(super) fn cpy(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    copy(ctx, 1)
}

/// ggml_cont / ggml_cast.
pub(super) fn cont(ctx: &Ctx) -> Result<Vec<Dispatch>> {
    copy(ctx, 0)
}

pub(super) fn binary(ctx: &Ctx, op: BinaryOp) -> Result<Vec<Dispatch>> {
    let (a, b, dst) = (ctx.src(0)?, ctx.src(1)?, ctx.out());
    ctx.require(
        FLOATS.contains(&dst.dtype) && a.dtype == dst.dtype && b.dtype == dst.dtype,
        "f32 or f16, the same for both sources and the result",
    )?;
    ctx.require_f16(&[dst.dtype])?;
    let n = dst.layout.nelements();
    let key = binary_key(op, dst.dtype);
    Ok(vec![ctx.per_item(
        key,
        vec![a, b, dst],
        [0; OP_WORDS],
        n,
    )?])
}

#[cfg(test)]
pub(super) fn keys() -> Vec<PipelineKey> {
    let unary = [
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
            alpha_n: 0.0,
            alpha_p: 0.0,
            beta: 0.0,
            eps: 0.0,
        },
        UnaryOp::Log,
        UnaryOp::Sqr,
        UnaryOp::Sqrt,
        UnaryOp::Sin,
        UnaryOp::Cos,
    ];
    let mut keys = Vec::new();
    for d in FLOATS {
        for op in unary {
            keys.push(map_key(unary_expr(op).0, d, d));
        }
        for e in [SCALE, CLAMP, FILL] {
            keys.push(map_key(e, d, d));
        }
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            keys.push(binary_key(op, d));
        }
    }
    let all = [DType::F32, DType::F16, DType::BF16, DType::I32];
    for s in all {
        for d in all {
            if convertible(s, d) {
                keys.push(map_key(COPY, s, d));
            }
        }
    }
    keys.push(word_copy_key());
    keys
}

#[cfg(test)]
mod tests {
    use wgllm_core::{Graph, TensorId};

    use super::*;
    use crate::device::Capabilities;

    fn caps(storage_align: u32) -> Capabilities {
        Capabilities {
            shader_f16: true,
            subgroups: false,
            subgroup_min_size: 0,
            subgroup_max_size: 0,
            timestamp_query: false,
            timestamp_query_inside_passes: false,
            immediates: false,
            cooperative_matrix_offered: false,
            cooperative_matrix: false,
            cooperative_matrix_failure: None,
            cooperative_matrix_configs: Vec::new(),
            int8_activations: crate::Int8Activations::Off,
            cpu_shapes: false,
            limits: wgpu::Limits {
                min_storage_buffer_offset_alignment: storage_align,
                ..wgpu::Limits::default()
            },
            binding_limit: 1 << 27,
        }
    }

    fn plan(g: &Graph, t: TensorId, storage_align: u32) -> Dispatch {
        let mut d = super::super::plan_node(g, t, &caps(storage_align)).unwrap();
        assert_eq!(d.len(), 1);
        d.remove(0)
    }

    /// A cont of `[n]` f32 seen from byte `offset` of a `[n + 8]` input, as `dtype`.
    fn cont_view(n: u64, offset: u64, dtype: DType) -> (Graph, TensorId) {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [n + 8, 1, 1, 1]).unwrap();
        let nb = g.node(x).layout.nb;
        let v = g.view(x, [n, 1, 1, 1], nb, offset).unwrap();
        let r = g.cont(v, dtype).unwrap();
        (g, r)
    }

    #[test]
    fn dense_aligned_same_dtype_copies_move_16_byte_words() {
        let (g, r) = cont_view(2056, 32, DType::F32);
        let d = plan(&g, r, 256);
        assert_eq!(d.key, word_copy_key());
        assert_eq!(d.items, 2056 / 4);
        assert_eq!(d.groups, [1, 1, 1]);
        let (src, dst) = (&d.operands[0], &d.operands[1]);
        assert_eq!(
            (src.dtype, src.layout.ne, src.layout.offset),
            (DType::I32, [2056, 1, 1, 1], 32)
        );
        assert_eq!((dst.dtype, dst.layout.offset), (DType::I32, 0));
    }

    #[test]
    fn other_copies_take_the_element_path() {
        let element = map_key(COPY, DType::F32, DType::F32);
        // Partial word, misaligned start, conversion, storage alignment below 16.
        let (g, r) = cont_view(6, 0, DType::F32);
        assert_eq!(plan(&g, r, 256).key, element);
        let (g, r) = cont_view(8, 4, DType::F32);
        assert_eq!(plan(&g, r, 256).key, element);
        let (g, r) = cont_view(8, 0, DType::F16);
        assert_eq!(plan(&g, r, 256).key, map_key(COPY, DType::F32, DType::F16));
        let (g, r) = cont_view(8, 0, DType::F32);
        assert_eq!(plan(&g, r, 8).key, element);
        // Not dense: a transpose.
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [8, 4, 1, 1]).unwrap();
        let t = g.transpose(x).unwrap();
        let r = g.cont(t, DType::F32).unwrap();
        assert_eq!(plan(&g, r, 256).key, element);
    }
}
