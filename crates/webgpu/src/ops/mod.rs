//! Host side of the kernels: each node becomes zero or more [`Dispatch`]es (pipeline key,
//! operands in binding order, op parameters, grid), or an `Unsupported` error saying why.
//! One module per op family; [`plan_node`] routes every op with an exhaustive match, so it is
//! also the backend's `supports` table.
//!
//! # Kernel selection
//!
//! Which kernel runs a node depends on its shapes and on the device's [`Capabilities`]; the
//! choices live in the op modules, next to the constants they measured. In short:
//!
//! - **mul_mat** (`matmul.rs`): f32 activations whose columns are whole vec4s (`unit_path`)
//!   take `mul_mat_vec.wgsl` for up to 8 columns (1 for formats decoded value by value): decode,
//!   with `vec_shape` picking lanes and rows a workgroup (at least 128 lanes, 256 past 256 units
//!   of 32, up to 4 rows while 1,024 workgroups remain). More columns (prefill) take
//!   `mul_mat_tiled.wgsl`, or `mul_mat_coop.wgsl` when the device has cooperative matrices
//!   enabled (the default; `--coop off` turns them off) with a 16×16×16 f16→f32
//!   configuration and subgroups of 32, and they passed the check at open (`selfcheck.rs`)
//!   (`coop_tile`: 128 × 128 tiles when the product has enough of them, else 128 × 64).
//!   Integer weight formats take int8 activations in the mat-vec with `int8_activations` in
//!   the config. Anything else takes `mul_mat.wgsl`. A weight past the binding limit runs as
//!   windows of rows (`windows.rs`).
//! - **flash_attn_ext** (`attention.rs`): up to 8 query rows whose K/V rows are whole 16-byte
//!   parts take `flash_attn_vec.wgsl` (octet sums through subgroups of 8..128 lanes, else
//!   through workgroup memory, as in browsers): over caches of at most 1,024 keys unsplit, one
//!   query head and up to 512 lanes a workgroup; over longer ones split along the keys
//!   (`flash_attn_combine.wgsl` merges), the query heads that share a K/V head grouped up to
//!   256 output values a workgroup through 2,048 keys (2 heads of 128), 512 beyond, fewer
//!   where workgroup memory is short (without subgroups 1 key an octet and at most 4 heads). More rows (prefill) take `flash_attn_coop.wgsl` on cooperative
//!   matrices for f16 K/V with K heads of 128, else `flash_attn_tile.wgsl` (blocks of 32, 16
//!   or 8 rows by workgroup memory, heads a multiple of 4); both skip the key tiles the mask
//!   hides from a whole block. Other shapes and devices take `flash_attn.wgsl`, split the same
//!   way for few rows.
//! - **argmax / top_k** (`top_k.rs`): a subgroup (else workgroup) reduction for k = 1, a radix
//!   select beyond; vocabulary-long rows first per chunk, then merged.
//! - **Fusions** (`fuse.rs`): patterns planned as one dispatch (norm into the products, q/k/v,
//!   gate/up, residual adds, the rope pair with the K/V cache stores, and the whole attention
//!   input: q/k/v products rotated and stored by one mat-vec); the K/V store fusion needs 9
//!   storage bindings and the attention input 9-11 (with the norm, with frequency factors), so
//!   devices at WebGPU's default 8 (browsers) run the rope and stores unfused.

mod attention;
mod elementwise;
mod fuse;
mod matmul;
#[cfg(test)]
pub(crate) use matmul::tests::{caps as test_caps, planned_kernels};
pub(crate) use matmul::{coop_f16, COOP_MIN_N};
mod moe;
mod nn;
mod reduce;
mod rows;
mod sample;
mod seq;
mod shape;
mod top_k;
mod windows;

use wgllm_core::graph::dtypes_str;
use wgllm_core::{DType, Error, Graph, Layout, Node, Op, Result, TensorId};

use crate::device::Capabilities;
use crate::kernels::{unit_bytes, wgsl_elem, NormKind, PipelineKey, OP_WORDS};

/// Invocations per workgroup of the element-wise kernels.
const WG_ELEMENTWISE: u32 = 256;
/// Workgroups per grid dimension (WebGPU's guaranteed minimum, and every device's).
const MAX_GROUPS_PER_DIM: u64 = 65535;

/// The operand id of an executable's scratch buffer: working memory that one node's dispatches
/// pass between each other (split-K partial results, top-k candidates, int8 activations). Nodes run in order, so one
/// buffer, as large as the largest need, serves every node.
pub(crate) const SCRATCH: TensorId = TensorId(u32::MAX);

/// The operand id of a small buffer bound where a kernel variant has no such input (no mask, no
/// sinks, no frequency factors). Binding another operand there instead would bind one range twice
/// with one binding writable, which browsers (Dawn) reject.
pub(crate) const ABSENT: TensorId = TensorId(u32::MAX - 1);
/// Absent slots per dispatch, and their spacing (WebGPU's largest storage offset alignment).
pub(crate) const ABSENT_SLOTS: u64 = 4;
pub(crate) const ABSENT_STRIDE: u64 = 256;

/// One storage binding: the bytes of `tensor`'s storage seen as `dtype` through `layout`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Operand {
    pub tensor: TensorId,
    pub dtype: DType,
    pub layout: Layout,
}

impl Operand {
    /// The placeholder of the `slot`-th (0..ABSENT_SLOTS) input of a dispatch that the kernel
    /// variant does not read: distinct slots of one dispatch never overlap.
    pub fn absent(slot: u64) -> Operand {
        let mut layout = Layout::contiguous(DType::F32, [1, 1, 1, 1]).expect("one f32");
        layout.offset = slot * ABSENT_STRIDE;
        Operand {
            tensor: ABSENT,
            dtype: DType::F32,
            layout,
        }
    }

    /// `n` values of `dtype` in the scratch buffer.
    pub fn scratch(dtype: DType, n: u64) -> Result<Operand> {
        Operand::scratch_of(dtype, [n.max(1), 1, 1, 1], 0)
    }

    /// A contiguous `ne` of `dtype` in the scratch buffer, `offset` bytes in.
    pub fn scratch_of(dtype: DType, ne: [u64; 4], offset: u64) -> Result<Operand> {
        let mut layout = Layout::contiguous(dtype, ne)?;
        layout.offset = offset;
        Ok(Operand {
            tensor: SCRATCH,
            dtype,
            layout,
        })
    }
}

/// Bytes of scratch the dispatches need.
pub(crate) fn scratch_bytes(dispatches: &[Dispatch]) -> u64 {
    dispatches
        .iter()
        .flat_map(|d| &d.operands)
        .filter(|o| o.tensor == SCRATCH)
        .map(|o| o.layout.offset + o.layout.span_bytes(o.dtype))
        .max()
        .unwrap_or(0)
}

/// One kernel launch of a node.
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub key: PipelineKey,
    /// Storage bindings in order; the last is written.
    pub operands: Vec<Operand>,
    /// The op's own parameters (words `OP_WORD..` of the slot).
    pub op_words: [u32; OP_WORDS],
    /// Work items (word `ITEMS_WORD` of the slot).
    pub items: u32,
    pub groups: [u32; 3],
}

/// What a planner sees: the node, the graph, the device's capabilities.
pub(crate) struct Ctx<'a> {
    pub graph: &'a Graph,
    pub node: &'a Node,
    pub id: TensorId,
    pub caps: &'a Capabilities,
}

impl Ctx<'_> {
    /// Source `i` as an operand with its own dtype and layout.
    pub fn src(&self, i: usize) -> Result<Operand> {
        let t = self.node.src(i)?;
        let n = self.graph.try_node(t)?;
        Ok(Operand {
            tensor: t,
            dtype: n.dtype,
            layout: n.layout,
        })
    }

    /// The node's own result as an operand.
    pub fn out(&self) -> Operand {
        Operand {
            tensor: self.id,
            dtype: self.node.dtype,
            layout: self.node.layout,
        }
    }

    /// The `Unsupported` error for this node.
    pub fn unsupported(&self, why: impl Into<String>) -> Error {
        Error::Unsupported {
            backend: "webgpu".into(),
            op: self.node.op.name(),
            dtypes: dtypes_str(self.graph, self.node),
            why: why.into(),
        }
    }

    /// Fails unless `ok`, with the usual dtype message.
    pub fn require(&self, ok: bool, supported: &str) -> Result<()> {
        match ok {
            true => Ok(()),
            false => Err(self.unsupported(format!("supported: {supported}"))),
        }
    }

    /// Fails when an f16 binding is needed but the device has no SHADER_F16.
    pub fn require_f16(&self, dtypes: &[DType]) -> Result<()> {
        match dtypes.contains(&DType::F16) && !self.caps.shader_f16 {
            true => {
                Err(self.unsupported("f16 needs the SHADER_F16 feature, which this device lacks"))
            }
            false => Ok(()),
        }
    }

    /// A dispatch with one invocation per item, in `WG_ELEMENTWISE`-wide workgroups.
    pub fn per_item(
        &self,
        key: PipelineKey,
        operands: Vec<Operand>,
        op_words: [u32; OP_WORDS],
        items: u64,
    ) -> Result<Dispatch> {
        let groups = self.grid(items.div_ceil(u64::from(key.wg)), 1)?;
        Ok(Dispatch {
            key,
            operands,
            op_words,
            items: self.items(items)?,
            groups,
        })
    }

    /// Work items as u32, or an error for tensors that large.
    pub fn items(&self, n: u64) -> Result<u32> {
        u32::try_from(n).map_err(|_| self.unsupported(format!("{n} elements exceed 2^32")))
    }

    /// Op-parameter words 0, 1, … holding the counts `vals` ([`Ctx::items`] each), the rest 0.
    pub fn item_words(&self, vals: &[u64]) -> Result<[u32; OP_WORDS]> {
        let mut op = [0; OP_WORDS];
        for (w, &v) in op.iter_mut().zip(vals) {
            *w = self.items(v)?;
        }
        Ok(op)
    }

    /// A grid of `n` workgroups folded into x and y (each at most 65535), times `z`.
    pub fn grid(&self, n: u64, z: u64) -> Result<[u32; 3]> {
        let x = n.clamp(1, MAX_GROUPS_PER_DIM);
        let y = n.div_ceil(x).max(1);
        if n == 0 {
            return Ok([0, 0, 0]);
        }
        match (y <= MAX_GROUPS_PER_DIM, z <= MAX_GROUPS_PER_DIM) {
            (true, true) => Ok([x as u32, y as u32, z as u32]),
            _ => Err(self.unsupported(format!(
                "{n} x {z} workgroups exceed the 65535 x 65535 x 65535 grid"
            ))),
        }
    }
}

/// Turns `f32` values into op-parameter words.
pub(crate) fn words(vals: &[f32]) -> [u32; OP_WORDS] {
    let mut w = [0u32; OP_WORDS];
    for (d, v) in w.iter_mut().zip(vals) {
        *d = v.to_bits();
    }
    w
}

/// The dispatches of node `t`, or why the backend cannot run it.
pub(crate) fn plan_node(graph: &Graph, t: TensorId, caps: &Capabilities) -> Result<Vec<Dispatch>> {
    let node = graph.try_node(t)?;
    let ctx = Ctx {
        graph,
        node,
        id: t,
        caps,
    };
    let dispatches = match &node.op {
        Op::Input | Op::Weight | Op::State => vec![],
        Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => vec![],
        Op::Cpy => elementwise::cpy(&ctx)?,
        Op::Cont => elementwise::cont(&ctx)?,
        Op::Fill { value } => elementwise::fill(&ctx, *value)?,
        Op::Binary(op) => elementwise::binary(&ctx, *op)?,
        Op::Unary(op) => elementwise::unary(&ctx, *op)?,
        Op::Clamp { min, max } => elementwise::clamp(&ctx, *min, *max)?,
        Op::Scale { scale, bias } => elementwise::scale(&ctx, *scale, *bias)?,
        Op::GetRows => rows::get_rows(&ctx)?,
        Op::SetRows => rows::set_rows(&ctx)?,
        Op::MulMat => matmul::mul_mat(&ctx)?,
        Op::Glu { op, swapped } => nn::glu(&ctx, *op, *swapped)?,
        Op::RmsNorm { eps } => nn::norm(&ctx, NormKind::Rms, *eps)?,
        Op::Norm { eps } => nn::norm(&ctx, NormKind::Norm, *eps)?,
        Op::L2Norm { eps } => nn::norm(&ctx, NormKind::L2, *eps)?,
        Op::SoftMax { scale, max_bias } => nn::soft_max(&ctx, *scale, *max_bias)?,
        Op::Rope(p) => nn::rope(&ctx, p)?,
        Op::FlashAttnExt {
            scale,
            max_bias,
            logit_softcap,
        } => attention::flash_attn_ext(&ctx, *scale, *max_bias, *logit_softcap)?,
        Op::ArgMax => top_k::argmax(&ctx)?,
        Op::TopK { k } => top_k::top_k(&ctx, *k)?,
        Op::Sample => sample::sample(&ctx)?,
        Op::Set { nb, offset } => shape::set(&ctx, *nb, *offset)?,
        Op::Concat { dim } => shape::concat(&ctx, *dim)?,
        Op::Repeat => shape::repeat(&ctx)?,
        Op::Pad { lp, circular, .. } => shape::pad(&ctx, *lp, *circular)?,
        Op::Diag => shape::diag(&ctx)?,
        Op::Tri { kind } => shape::tri(&ctx, *kind)?,
        Op::AddId => shape::add_id(&ctx)?,
        Op::Upscale { mode } => shape::upscale(&ctx, *mode)?,
        Op::Sum => reduce::sum(&ctx)?,
        Op::SumRows => reduce::sum_rows(&ctx)?,
        Op::CumSum => reduce::cumsum(&ctx)?,
        Op::ArgSort { order } => reduce::argsort(&ctx, *order)?,
        Op::MulMatId => moe::mul_mat_id(&ctx)?,
        Op::SolveTri { left, lower, uni } => seq::solve_tri(&ctx, *left, *lower, *uni)?,
        Op::Conv2d {
            stride,
            pad,
            dilation,
        } => seq::conv_2d(&ctx, *stride, *pad, *dilation)?,
        Op::Im2Col {
            stride,
            pad,
            dilation,
            is_2d,
        } => seq::im2col(&ctx, *stride, *pad, *dilation, *is_2d)?,
        Op::SsmConv => seq::ssm_conv(&ctx)?,
        Op::SsmScan => seq::ssm_scan(&ctx)?,
        Op::GatedDeltaNet => seq::gated_delta_net(&ctx)?,
    };
    validate(&ctx, &dispatches)?;
    Ok(dispatches)
}

pub(crate) use fuse::{plan_graph, Planned};

/// Checks every dispatch's binding count and operands against the device.
fn validate(ctx: &Ctx, dispatches: &[Dispatch]) -> Result<()> {
    let max_bindings = ctx.caps.limits.max_storage_buffers_per_shader_stage as usize;
    for d in dispatches {
        if d.operands.len() > max_bindings {
            return Err(ctx.unsupported(format!(
                "{} storage bindings, over this device's max_storage_buffers_per_shader_stage of {max_bindings}",
                d.operands.len()
            )));
        }
        for o in &d.operands {
            check_operand(ctx, o)?;
        }
    }
    Ok(())
}

/// Whether the rows of `l` (its offset, and its strides over every dimension past the first
/// with more than one element) start on multiples of `n` bytes within their bindings too:
/// bindings start at an offset rounded down to the storage offset alignment (the arena places
/// tensors on it as well), so that alignment must be a multiple of `n`.
pub(super) fn rows_on(ctx: &Ctx, l: &Layout, n: u64) -> bool {
    l.offset.is_multiple_of(n)
        && (1..4).all(|d| l.ne[d] == 1 || l.nb[d].is_multiple_of(n))
        && u64::from(ctx.caps.limits.min_storage_buffer_offset_alignment).is_multiple_of(n)
}

/// Checks that an operand can be bound: a WGSL element type, offsets and strides in whole
/// units, contiguous blocks for quantized data, and a window within the device's binding limit.
fn check_operand(ctx: &Ctx, o: &Operand) -> Result<()> {
    if wgsl_elem(o.dtype).is_none() {
        return Err(ctx.unsupported(format!("no kernel binding for {}", o.dtype)));
    }
    let unit = unit_bytes(o.dtype);
    let l = &o.layout;
    if !l.offset.is_multiple_of(unit)
        || l.nb
            .iter()
            .zip(&l.ne)
            .any(|(nb, ne)| *ne > 1 && !nb.is_multiple_of(unit))
    {
        return Err(ctx.unsupported(format!(
            "{} view with offset {} and strides {:?} is not in whole elements",
            o.dtype, l.offset, l.nb
        )));
    }
    if o.dtype.is_quantized()
        && l.ne[0] > o.dtype.block_size() as u64
        && l.nb[0] != o.dtype.type_size() as u64
    {
        return Err(ctx.unsupported(format!("{} rows must be contiguous", o.dtype)));
    }
    let max = ctx.caps.binding_limit;
    if !windows::fits(ctx, o) || l.span_bytes(o.dtype) > u64::from(u32::MAX) {
        let name = match o.tensor {
            SCRATCH => "scratch",
            ABSENT => "absent",
            t => &ctx.graph.node(t).name,
        };
        return Err(ctx.unsupported(format!(
            "tensor '{name}' spans {} bytes, over the binding limit of {max} (max_storage_buffer_binding_size, or WebGpuConfig::max_binding_bytes); only get_rows tables and mul_mat weights are split into windows",
            l.span_bytes(o.dtype)
        )));
    }
    if l.ne.iter().any(|&n| n > u64::from(u32::MAX)) {
        return Err(ctx.unsupported(format!("extents {:?} exceed u32", l.ne)));
    }
    Ok(())
}

/// Every pipeline variant the planners can emit (for the naga validation test).
#[cfg(test)]
pub(crate) fn all_pipeline_keys() -> Vec<PipelineKey> {
    let mut keys = elementwise::keys();
    keys.extend(rows::keys());
    keys.extend(matmul::keys());
    keys.extend(nn::keys());
    keys.extend(attention::keys());
    keys.extend(top_k::keys());
    keys.extend(sample::keys());
    keys.extend(shape::keys());
    keys.extend(reduce::keys());
    keys.extend(moe::keys());
    keys.extend(seq::keys());
    keys
}
