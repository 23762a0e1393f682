//! Fusions: node patterns planned as one dispatch instead of one per node. The graph is not
//! rewritten; [`plan_graph`] emits the fused dispatch at the pattern's last node (its anchor),
//! writing the anchor's tensor, and nothing for the nodes it absorbed. A node is absorbed only
//! when its one consumer is the anchor and it is not a graph output, so no other dispatch can
//! read the tensor that is never written — except the q/k/v siblings below, whose results the
//! anchor does write, late: no dispatch between them and the anchor may read them. The CPU
//! backend runs the unfused graph, so every fusion is checked against it by the op cases that
//! contain its pattern.
//!
//! - norm × weight: `mul(rms_norm(x) | norm(x), w)` with `w` one f32 row of x's width → `norm.wgsl`
//!   with MUL_W (every pre-norm block has two, QK-norm models four); paired with the latest
//!   earlier one of the same kind and eps when nothing between reads it → `norm.wgsl` with
//!   PAIR, anchored at the second, writing both (a QK-norm model's q and k norms).
//! - mat-vec + residual: `add(mul_mat(W, x), r)` (either order) with r of the product's shape,
//!   when the product takes the mat-vec path → `mul_mat_vec.wgsl` with ADD (the attention
//!   output and FFN down projections of every block).
//! - coop product + addends: `add(mul_mat(W, x), b)` with b one f32 row of the result's rows
//!   (a bias), `add(mul_mat(W, x), r)` with r of the result's shape (a residual), or both
//!   (`add(add(mul_mat(W, x), b), r)`), when the product takes the coop tiles →
//!   `mul_mat_coop.wgsl` with INIT: the sums start from the addends (every linear layer of an
//!   encoder, and a prefill's attention output and FFN down projections).
//! - coop product + activation: `act(mul_mat(W, x))` or `act(add(mul_mat(W, x), b))` (a
//!   bias row), `act` a unary op without parameters, when the product takes the coop tiles →
//!   `mul_mat_coop.wgsl` with ACT (and INIT): an encoder FFN's first layer and its GELU.
//! - expert sum: `add(… add(view(x, 0), view(x, 1)) …, view(x, n - 1))`, the views slot i of
//!   `x = mul(outputs, weights)` ([e, n, t] times [1, n, t]), each add and view read only by
//!   the next add and x only by the views, and a residual added to it or not →
//!   `moe_sum.wgsl` (a mixture-of-experts FFN's weighted sum and residual: n + 1 dispatches
//!   become one).
//! - expert router: `get_rows(reshape(p), top_k(p, k))` with `p = soft_max(logits)` (no mask,
//!   sinks or scale), the weights, or those reshaped and divided by their `sum_rows`
//!   (renormalized) → `moe_router.wgsl`, anchored at the weights, writing the top-k ids too:
//!   nothing between the top_k and the anchor may read them (a mixture-of-experts FFN's
//!   router: five dispatches become one).
//! - gate/up GLU: `glu_split(mul_mat(Wg, x), mul_mat(Wu, x))` with the same x, weight shape and
//!   dtype → `mul_mat_vec.wgsl` with GLU, both rows decoded by the same lanes (FFN of every
//!   block: three dispatches become one). Likewise two mul_mat_id products of the same
//!   activations and ids that take the mat-vec (decode) → `mul_mat_vec.wgsl` with ID and GLU
//!   (a mixture-of-experts FFN: five dispatches with the activations' rounding become two).
//! - q/k/v: three mat-vec products of one activation (`mul_mat(Wq, x)`, `mul_mat(Wk, x)`,
//!   `mul_mat(Wv, x)`, nothing reading the first two before the third) → `mul_mat_vec.wgsl` with
//!   QKV, anchored at the third (attention input of every block: three dispatches become one).
//! - q/k rope: two f32 ropes at the same positions with the same parameters (normal or neox),
//!   nothing reading the first before the second → `rope.wgsl` with PAIR, anchored at the second.
//! - norm into mat-vec: `mul(rms_norm(h), w)` read only by the products of a q/k/v or gate/up
//!   fusion, or by one mat-vec product → `mul_mat_vec.wgsl` with NORM: the products read h and
//!   compute the norm themselves (every pre-norm block's two norms and the output norm: the
//!   norm's dispatch disappears). It takes over the norm × weight fusion above, whose nodes it
//!   absorbs, when both match.
//! - KV store: a q/k rope pair whose k result only a set_rows into the K cache reads, and the
//!   set_rows of v into the V cache at the same rows → `rope.wgsl` with PAIR and KV, anchored at
//!   the v store, taking over the rope pair (the attention input of every block: three
//!   dispatches become one). Needs 9 storage bindings per kernel (not WebGPU's default 8).
//! - attention input: the KV store above whose ropes rotate (reshaped) q and k products of a
//!   q/k/v pattern, v's product being the one stored, with or without the norm into the products
//!   → `mul_mat_vec.wgsl` with QKV and ROPE, anchored at the v store: the products, the rotation
//!   and the cache stores in one dispatch (every block of the plain decoders: two dispatches
//!   become one). It takes over the q/k/v, rope pair and KV store fusions. Needs 9 storage
//!   bindings per kernel, one more with the norm, one more with frequency factors.
//! - attention output: `add(mul_mat(Wo, reshape(flash_attn_ext(..))), r)`, the attention and
//!   its reshape read only by the next, where the product takes int8 activations and the
//!   attention runs as one vec dispatch (decode over caches of up to 1,024 keys) →
//!   `flash_attn_vec.wgsl` with Q8X storing its result rounded to int8, then the mat-vec with
//!   ADD reading it: the product's own rounding dispatch goes (every block: three dispatches
//!   become two; bench/results/HISTORY.md, "attention output fusion").

use wgllm_core::op::BinaryOp;
use wgllm_core::{DType, Graph, Op, Result, TensorId};

use super::matmul::VecNorm;
use super::{attention, matmul, moe, nn, plan_node, validate, Ctx, Dispatch};
use crate::device::Capabilities;
use crate::kernels::NormKind;

/// A graph's dispatches and what the memory planner must know of the fusions among them.
pub(crate) struct Planned {
    pub dispatches: Vec<Dispatch>,
    /// `(tensor, anchor)`: a source of an absorbed node, read when its anchor runs.
    pub late_reads: Vec<(TensorId, TensorId)>,
}

/// Every dispatch of `graph`, in order, with the fusions applied.
pub(crate) fn plan_graph(graph: &Graph, caps: &Capabilities) -> Result<Planned> {
    let mut uses = vec![0usize; graph.nodes().len()];
    for n in graph.nodes() {
        for s in n.srcs.iter().flatten() {
            uses[s.index()] += 1;
        }
    }
    for t in graph.outputs() {
        uses[t.index()] += 1;
    }
    // Find every pattern first: absorbed nodes come before their anchor. A later pattern may
    // take over an earlier one whole (a norm × weight fused into the products that read it):
    // each of its parts is free, or an anchor all of whose parts it takes too, or absorbed by
    // such an anchor.
    let mut absorber: Vec<Option<TensorId>> = vec![None; uses.len()];
    let mut anchored = vec![None; uses.len()];
    let mut parts_of: Vec<Vec<TensorId>> = vec![Vec::new(); uses.len()];
    let mut late_reads = Vec::new();
    for t in graph.ids() {
        let ctx = ctx(graph, t, caps)?;
        let Some((parts, dispatches)) = fused(&ctx, &uses)? else {
            continue;
        };
        let free = |p: &TensorId| match (absorber[p.index()], &anchored[p.index()]) {
            (Some(by), _) => parts.contains(&by),
            (None, Some(_)) => parts_of[p.index()].iter().all(|q| parts.contains(q)),
            (None, None) => true,
        };
        if !parts.iter().all(free) {
            continue;
        }
        validate(&ctx, &dispatches)?;
        for &p in &parts {
            anchored[p.index()] = None;
            absorber[p.index()] = Some(t);
            let srcs = graph.node(p).srcs.iter().flatten();
            late_reads.extend(srcs.map(|&s| (s, t)));
        }
        anchored[t.index()] = Some(dispatches);
        parts_of[t.index()] = parts;
    }
    let mut out = Vec::new();
    for t in graph.ids() {
        if absorber[t.index()].is_some() {
            continue;
        }
        match anchored[t.index()].take() {
            Some(dispatches) => out.extend(dispatches),
            None => out.extend(plan_node(graph, t, caps)?),
        }
    }
    Ok(Planned {
        dispatches: out,
        late_reads,
    })
}

fn ctx<'a>(graph: &'a Graph, t: TensorId, caps: &'a Capabilities) -> Result<Ctx<'a>> {
    Ok(Ctx {
        graph,
        node: graph.try_node(t)?,
        id: t,
        caps,
    })
}

/// The fused dispatches anchored at `anchor` and the nodes they absorb, if a pattern matches.
fn fused(anchor: &Ctx, uses: &[usize]) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = anchor.graph;
    // A source computed by a node that only the anchor consumes.
    let private = |t: TensorId| only(g, uses, t, 1);
    if let Op::Glu { op, swapped: false } = anchor.node.op {
        let (expr, params) = nn::glu_expr(op);
        let (Ok(a), Ok(b)) = (anchor.node.src(0), anchor.node.src(1)) else {
            return Ok(None);
        };
        let experts = [a, b]
            .iter()
            .all(|&t| g.node(t).op == Op::MulMatId && private(t));
        if params.is_empty() && experts {
            // Decode only: a prefill's routed tiles read each expert once per 64 columns.
            let (gate, up) = (ctx(g, a, anchor.caps)?, ctx(g, b, anchor.caps)?);
            if moe::routes_tiled(&gate)? {
                return Ok(None);
            }
            let d = matmul::mul_mat_vec_id(&gate, Some((&up, expr, anchor.out())))?;
            return Ok(d.map(|d| (vec![a, b], d)));
        }
        let products = [a, b]
            .iter()
            .all(|&t| g.node(t).op == Op::MulMat && private(t));
        if !params.is_empty() || !products {
            return Ok(None);
        }
        let (gate, up) = (ctx(g, a, anchor.caps)?, ctx(g, b, anchor.caps)?);
        if let Some((mut parts, norm)) = norm_input(&gate, &[a, b], uses)? {
            if let Some(d) = matmul::mul_mat_vec_glu(&gate, &up, expr, anchor.out(), Some(&norm))? {
                parts.extend([a, b]);
                return Ok(Some((parts, d)));
            }
        }
        let d = matmul::mul_mat_vec_glu(&gate, &up, expr, anchor.out(), None)?;
        return Ok(d.map(|d| (vec![a, b], d)));
    }
    if anchor.node.op == Op::MulMat {
        if let Some(found) = qkv(anchor, uses)? {
            return Ok(Some(found));
        }
        // A lone product of a norm × weight that nothing else reads (the output head).
        let Some((parts, norm)) = norm_input(anchor, &[anchor.id], uses)? else {
            return Ok(None);
        };
        let d = matmul::mul_mat_vec_norm(anchor, &norm)?;
        return Ok(d.map(|d| (parts, d)));
    }
    if let Op::Unary(op) = anchor.node.op {
        return coop_activation(anchor, op, uses);
    }
    if let Op::Rope(p) = &anchor.node.op {
        return rope_pair(anchor, p);
    }
    if let Op::GetRows | Op::Binary(BinaryOp::Div) = anchor.node.op {
        if let Some(found) = expert_router(anchor, uses)? {
            return Ok(Some(found));
        }
    }
    if anchor.node.op == Op::SetRows {
        if let Some(found) = attention_input(anchor, uses)? {
            return Ok(Some(found));
        }
        return kv_store(anchor, uses);
    }
    let Op::Binary(op) = anchor.node.op else {
        return Ok(None);
    };
    let (Ok(s0), Ok(s1)) = (anchor.node.src(0), anchor.node.src(1)) else {
        return Ok(None);
    };
    let dst = anchor.out();
    match op {
        BinaryOp::Mul => {
            let Some((norm, kind, eps)) = norm_weight(g, anchor.id, &private) else {
                return Ok(None);
            };
            let nctx = ctx(g, norm, anchor.caps)?;
            let w = anchor.src(1)?;
            // The latest earlier norm × weight: paired when of the same kind and eps and
            // nothing between reads it.
            let first = g
                .ids()
                .take(anchor.id.index())
                .filter_map(|t| {
                    norm_weight(g, t, &private).map(|(n, k, e)| (t, n, k == kind && e == eps))
                })
                .last();
            if let Some((first, fnorm, true)) = first {
                if !read_before(g, &[fnorm, first], anchor.id) {
                    let fm = ctx(g, first, anchor.caps)?;
                    let a = (&ctx(g, fnorm, anchor.caps)?, fm.src(1)?, fm.out());
                    let b = (&nctx, w.clone(), dst.clone());
                    if let Some(d) = nn::norm_mul_pair(a, b, kind, eps)? {
                        return Ok(Some((vec![fnorm, first, norm], d)));
                    }
                }
            }
            let d = nn::norm_mul(&nctx, kind, eps, w, dst)?;
            Ok(Some((vec![norm], d)))
        }
        BinaryOp::Add => {
            if let Some(found) = expert_sum(anchor, uses)? {
                return Ok(Some(found));
            }
            for (mm, r) in [(s0, 1), (s1, 0)] {
                if g.node(mm).op != Op::MulMat || !private(mm) {
                    continue;
                }
                let mctx = ctx(g, mm, anchor.caps)?;
                let out = (anchor.src(r)?, dst.clone());
                if let Some(found) = attention_output(&mctx, out, &private)? {
                    return Ok(Some(found));
                }
                if let Some(d) = matmul::mul_mat_vec_add(&mctx, anchor.src(r)?, dst.clone(), None)?
                {
                    return Ok(Some((vec![mm], d)));
                }
            }
            coop_addends(anchor, uses)
        }
        _ => Ok(None),
    }
}

/// A coop product's addends: `add(mul_mat(W, x), t)` (either order), `t` a bias row or a
/// residual, or `add(add(mul_mat(W, x), bias), residual)` (either order at each add), the
/// inner add read only by the outer → `mul_mat_coop.wgsl` with INIT (every linear layer of an
/// encoder adds a bias; pre-norm blocks add a residual to two products).
fn coop_addends(anchor: &Ctx, uses: &[usize]) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = anchor.graph;
    let private = |t: TensorId| only(g, uses, t, 1);
    let is_add = |t: TensorId| g.node(t).op == Op::Binary(BinaryOp::Add);
    let dst = anchor.out();
    let row = |t: TensorId| g.node(t).layout.ne == [dst.layout.ne[0], 1, 1, 1];
    let (s0, s1) = (anchor.node.src(0)?, anchor.node.src(1)?);
    // (product, bias, residual, the inner add when there are two).
    let mut found = None;
    for (p, t) in [(s0, s1), (s1, s0)] {
        if g.node(p).op == Op::MulMat && private(p) {
            found = Some(match row(t) {
                true => (p, Some(t), None, None),
                false => (p, None, Some(t), None),
            });
            break;
        }
        if is_add(p) && private(p) && !row(t) {
            let inner = g.node(p);
            let (i0, i1) = (inner.src(0)?, inner.src(1)?);
            for (q, b) in [(i0, i1), (i1, i0)] {
                if g.node(q).op == Op::MulMat && private(q) && row(b) {
                    found = Some((q, Some(b), Some(t), Some(p)));
                }
            }
            if found.is_some() {
                break;
            }
        }
    }
    let Some((mm, bias, residual, inner)) = found else {
        return Ok(None);
    };
    let operand = |t: Option<TensorId>| -> Result<Option<super::Operand>> {
        t.map(|t| Ok(ctx(g, t, anchor.caps)?.out())).transpose()
    };
    let add = matmul::CoopEpilogue {
        bias: operand(bias)?,
        residual: operand(residual)?,
        act: None,
    };
    let d = matmul::mul_mat_coop_epilogue(&ctx(g, mm, anchor.caps)?, &add, dst)?;
    Ok(d.map(|d| (std::iter::once(mm).chain(inner).collect(), d)))
}

/// A coop product's activation: `act(mul_mat(W, x))` or `act(add(mul_mat(W, x), b))` with b
/// a bias row, the product (and add) read only by the next, `act` a unary op without
/// parameters → `mul_mat_coop.wgsl` with ACT (and INIT): an encoder FFN's first linear layer
/// and its GELU in one dispatch.
fn coop_activation(
    anchor: &Ctx,
    op: wgllm_core::op::UnaryOp,
    uses: &[usize],
) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = anchor.graph;
    let private = |t: TensorId| only(g, uses, t, 1);
    let (expr, params) = super::elementwise::unary_expr(op);
    let x = anchor.node.src(0)?;
    if !params.is_empty() || !private(x) || anchor.node.dtype != DType::F32 {
        return Ok(None);
    }
    let (mm, bias) = match g.node(x).op {
        Op::MulMat => (x, None),
        Op::Binary(BinaryOp::Add) => {
            let (p, b) = (g.node(x).src(0)?, g.node(x).src(1)?);
            let row = g.node(b).layout.ne == [anchor.node.layout.ne[0], 1, 1, 1];
            if g.node(p).op != Op::MulMat || !private(p) || !row {
                return Ok(None);
            }
            (p, Some(ctx(g, b, anchor.caps)?.out()))
        }
        _ => return Ok(None),
    };
    let epi = matmul::CoopEpilogue {
        bias,
        residual: None,
        act: Some(expr),
    };
    let d = matmul::mul_mat_coop_epilogue(&ctx(g, mm, anchor.caps)?, &epi, anchor.out())?;
    let parts = match mm == x {
        true => vec![mm],
        false => vec![mm, x],
    };
    Ok(d.map(|d| (parts, d)))
}

/// The norm of node `t` when it is `mul(norm(x), w)` (the norm × weight pattern): an RMS or
/// plain norm that only the mul reads, and `w` one f32 row of its width; with its kind and eps.
fn norm_weight(
    g: &Graph,
    t: TensorId,
    private: &dyn Fn(TensorId) -> bool,
) -> Option<(TensorId, NormKind, f32)> {
    let n = g.node(t);
    if n.op != Op::Binary(BinaryOp::Mul) {
        return None;
    }
    let (norm, w) = (n.src(0).ok()?, n.src(1).ok()?);
    let (kind, eps) = match g.node(norm).op {
        Op::RmsNorm { eps } => (NormKind::Rms, eps),
        Op::Norm { eps } => (NormKind::Norm, eps),
        _ => return None,
    };
    let (wn, width) = (g.node(w), g.ne(norm)[0]);
    let row = wn.layout.ne == [width, 1, 1, 1] && wn.dtype == DType::F32;
    (private(norm) && row && g.ne(norm) == n.layout.ne).then_some((norm, kind, eps))
}

/// The expert sum pattern anchored at its last add, or at the add of a residual to it (see
/// the module's list).
fn expert_sum(anchor: &Ctx, uses: &[usize]) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = anchor.graph;
    let private = |t: TensorId| only(g, uses, t, 1);
    let (residual, (mut parts, x)) = match expert_chain(g, anchor.id, uses)? {
        Some(chain) => (None, chain),
        None => {
            let (s0, s1) = (anchor.node.src(0)?, anchor.node.src(1)?);
            let mut found = None;
            for (sum, r) in [(s0, 1), (s1, 0)] {
                let add = g.node(sum).op == Op::Binary(BinaryOp::Add) && private(sum);
                if let (true, Some((mut parts, x))) = (add, expert_chain(g, sum, uses)?) {
                    parts.push(sum);
                    found = Some((Some(anchor.src(r)?), (parts, x)));
                    break;
                }
            }
            match found {
                Some(f) => f,
                None => return Ok(None),
            }
        }
    };
    let d = moe::expert_sum(&ctx(g, x, anchor.caps)?, residual, anchor.out())?;
    parts.push(x);
    Ok(d.map(|d| (parts, d)))
}

/// The chain of adds of the slot views of `x = mul(outputs, weights)` that ends at the add
/// `last`: the adds before it and the views (the nodes it absorbs), and x.
fn expert_chain(
    g: &Graph,
    last: TensorId,
    uses: &[usize],
) -> Result<Option<(Vec<TensorId>, TensorId)>> {
    let private = |t: TensorId| only(g, uses, t, 1);
    // Down the chain's left operands, the slot views from the last.
    let (mut views, mut parts) = (Vec::new(), Vec::new());
    let mut t = last;
    while let Op::Binary(BinaryOp::Add) = g.node(t).op {
        if t != last {
            if !private(t) {
                return Ok(None);
            }
            parts.push(t);
        }
        views.push(g.node(t).src(1)?);
        t = g.node(t).src(0)?;
    }
    if g.node(t).op != Op::View {
        return Ok(None);
    }
    views.push(t);
    views.reverse();
    let x = g.node(t).src(0)?;
    let (lx, n) = (&g.node(x).layout, views.len());
    let slot_of_x = |(i, &v): (usize, &TensorId)| {
        let (node, lv) = (g.node(v), &g.node(v).layout);
        node.op == Op::View
            && node.srcs[0] == Some(x)
            && private(v)
            && lv.ne == [lx.ne[0], lx.ne[2], 1, 1]
            && lv.nb[..2] == [lx.nb[0], lx.nb[2]]
            && lv.offset == lx.offset + i as u64 * lx.nb[1]
    };
    let slots = views.iter().enumerate().all(slot_of_x);
    let mul = g.node(x).op == Op::Binary(BinaryOp::Mul);
    let x_read = only(g, uses, x, n);
    if !slots || !mul || !x_read || lx.ne[1] != n as u64 {
        return Ok(None);
    }
    parts.extend(views);
    Ok(Some((parts, x)))
}

/// The expert router pattern anchored at its weights (see the module's list).
fn expert_router(anchor: &Ctx, uses: &[usize]) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = anchor.graph;
    let (mut parts, mut rows) = (Vec::new(), anchor.id);
    let norm = anchor.node.op == Op::Binary(BinaryOp::Div);
    if norm {
        let (w, s) = (anchor.node.src(0)?, anchor.node.src(1)?);
        let sum =
            g.node(s).op == Op::SumRows && g.node(s).srcs[0] == Some(w) && only(g, uses, s, 1);
        if g.node(w).op != Op::Reshape || !only(g, uses, w, 2) || !sum {
            return Ok(None);
        }
        rows = g.node(w).src(0)?;
        if !only(g, uses, rows, 1) {
            return Ok(None);
        }
        parts.extend([rows, w, s]);
    }
    if g.node(rows).op != Op::GetRows {
        return Ok(None);
    }
    let (pr, picked) = (g.node(rows).src(0)?, g.node(rows).src(1)?);
    if g.node(pr).op != Op::Reshape || !only(g, uses, pr, 1) {
        return Ok(None);
    }
    let probs = g.node(pr).src(0)?;
    let (Op::TopK { k }, Op::SoftMax { scale, max_bias }) = (&g.node(picked).op, &g.node(probs).op)
    else {
        return Ok(None);
    };
    let plain =
        *scale == 1.0 && *max_bias == 0.0 && g.node(probs).srcs[1..].iter().all(Option::is_none);
    if g.node(picked).src(0)? != probs || !plain || !only(g, uses, probs, 2) {
        return Ok(None);
    }
    parts.extend([probs, pr, picked]);
    if read_before(g, &parts, anchor.id) {
        return Ok(None);
    }
    let ids = ctx(g, picked, anchor.caps)?.out();
    let d = moe::router(&ctx(g, probs, anchor.caps)?, ids, anchor.out(), (*k, norm))?;
    Ok(d.map(|d| (parts, d)))
}

/// The attention output pattern: the product `mm` of a reshaped flash attention result (each
/// read only by the next), plus a residual (`out`: the residual and the sum), where the
/// attention can store its result rounded to int8 for the product: two dispatches instead of
/// three (the product's own rounding dispatch goes).
fn attention_output(
    mm: &Ctx,
    (residual, dst): (super::Operand, super::Operand),
    private: &dyn Fn(TensorId) -> bool,
) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = mm.graph;
    let x = mm.node.src(1)?;
    if g.node(x).op != Op::Reshape || !private(x) {
        return Ok(None);
    }
    let att = g.node(x).src(0)?;
    let Op::FlashAttnExt {
        scale,
        max_bias,
        logit_softcap,
    } = g.node(att).op
    else {
        return Ok(None);
    };
    if !private(att) {
        return Ok(None);
    }
    let b = mm.src(1)?;
    let pre = matmul::q8x_scratch(b.layout.ne[0] / 32, b.layout.ne[1], false)?;
    let actx = ctx(g, att, mm.caps)?;
    let params = (scale, max_bias, logit_softcap);
    let Some(mut d) = attention::flash_attn_ext_q8x(&actx, params, &pre)? else {
        return Ok(None);
    };
    let Some(product) = matmul::mul_mat_vec_add(mm, residual, dst, Some(pre))? else {
        return Ok(None);
    };
    d.extend(product);
    Ok(Some((vec![att, x, mm.id], d)))
}

/// The q/k/v pattern anchored at the product `v`: exactly two earlier products of the same
/// activation, which no dispatch between the first of them and `v` reads; with the norm ×
/// weight computing that activation when nothing else reads it.
fn qkv(v: &Ctx, uses: &[usize]) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = v.graph;
    let x = v.node.src(1)?;
    let earlier: Vec<TensorId> = g
        .ids()
        .take(v.id.index())
        .filter(|&t| g.node(t).op == Op::MulMat && g.node(t).src(1).ok() == Some(x))
        .collect();
    let [q, k] = earlier[..] else {
        return Ok(None);
    };
    if read_before(g, &[q, k], v.id) {
        return Ok(None);
    }
    let (qc, kc) = (ctx(g, q, v.caps)?, ctx(g, k, v.caps)?);
    if let Some((mut parts, norm)) = norm_input(v, &[q, k, v.id], uses)? {
        if let Some(d) = matmul::mul_mat_vec_qkv(&qc, &kc, v, Some(&norm))? {
            parts.extend([q, k]);
            return Ok(Some((parts, d)));
        }
    }
    let d = matmul::mul_mat_vec_qkv(&qc, &kc, v, None)?;
    Ok(d.map(|d| (vec![q, k], d)))
}

/// The RMS norm × weight that computes the activations of product `mm` (its context), when
/// the `products` (`mm` among them, each reading it once) are all that read it: the nodes it
/// absorbs (the mul and the norm) and the norm to fuse into the products.
fn norm_input(
    mm: &Ctx,
    products: &[TensorId],
    uses: &[usize],
) -> Result<Option<(Vec<TensorId>, VecNorm)>> {
    let g = mm.graph;
    let x = mm.node.src(1)?;
    let (Op::Binary(BinaryOp::Mul), Ok(norm)) = (&g.node(x).op, g.node(x).src(0)) else {
        return Ok(None);
    };
    let Op::RmsNorm { eps } = g.node(norm).op else {
        return Ok(None);
    };
    if !only(g, uses, x, products.len()) || !only(g, uses, norm, 1) {
        return Ok(None);
    }
    let mul = ctx(g, x, mm.caps)?;
    let h = ctx(g, norm, mm.caps)?.src(0)?;
    let w = mul.src(1)?;
    if h.dtype != DType::F32 || mul.out().layout.ne != h.layout.ne {
        return Ok(None);
    }
    Ok(Some((vec![norm, x], VecNorm { h, g: w, eps })))
}

/// The rope pair anchored at the rope `k`: the latest earlier rope at the same positions, which
/// no dispatch between them reads.
fn rope_pair(
    k: &Ctx,
    p: &wgllm_core::op::RopeParams,
) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = k.graph;
    let pos = k.node.src(1)?;
    let q = g
        .ids()
        .take(k.id.index())
        .filter(|&t| matches!(g.node(t).op, Op::Rope(_)) && g.node(t).src(1).ok() == Some(pos))
        .last();
    let Some(q) = q else {
        return Ok(None);
    };
    if read_before(g, &[q], k.id) {
        return Ok(None);
    }
    let d = nn::rope_pair(&ctx(g, q, k.caps)?, k, p)?;
    Ok(d.map(|d| (vec![q], d)))
}

/// The KV store anchored at the set_rows `cv` of v into the V cache: the latest earlier
/// set_rows `ck` with the same row indices stores a rope `rk` (through a reshape, nothing else
/// reading either), which pairs with the latest earlier rope `rq` at the same positions; no
/// dispatch between `rq` and `cv` reads `rq` or `ck`. Returns `(rq, rk, ck)`.
fn kv_parts(cv: &Ctx, uses: &[usize]) -> Result<Option<(TensorId, TensorId, TensorId)>> {
    let g = cv.graph;
    let idx = cv.node.src(2)?;
    let ck = g
        .ids()
        .take(cv.id.index())
        .filter(|&t| g.node(t).op == Op::SetRows && g.node(t).src(2).ok() == Some(idx))
        .last();
    let Some(ck) = ck else {
        return Ok(None);
    };
    let rows = g.node(ck).src(1)?;
    let rk = g.root(rows);
    if !matches!(g.node(rk).op, Op::Rope(_)) {
        return Ok(None);
    }
    let private = |t: TensorId| only(g, uses, t, 1);
    if !private(rk) || !private(rows) || g.node(rows).op != Op::Reshape {
        return Ok(None);
    }
    let pos = g.node(rk).src(1)?;
    let rq = g
        .ids()
        .take(rk.index())
        .filter(|&t| matches!(g.node(t).op, Op::Rope(_)) && g.node(t).src(1).ok() == Some(pos))
        .last();
    let Some(rq) = rq else {
        return Ok(None);
    };
    if read_before(g, &[rq, ck], cv.id) {
        return Ok(None);
    }
    Ok(Some((rq, rk, ck)))
}

/// The attention input anchored at the set_rows `cv` ([`kv_parts`]): one dispatch rotates q,
/// and writes k's rotated rows and v's rows into the caches.
fn kv_store(cv: &Ctx, uses: &[usize]) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = cv.graph;
    let Some((rq, rk, ck)) = kv_parts(cv, uses)? else {
        return Ok(None);
    };
    let Op::Rope(p) = &g.node(rk).op else {
        return Ok(None);
    };
    let (q, k) = (ctx(g, rq, cv.caps)?, ctx(g, rk, cv.caps)?);
    let d = nn::rope_kv(&q, &k, &ctx(g, ck, cv.caps)?, cv, p)?;
    Ok(d.map(|d| (vec![rq, rk, ck], d)))
}

/// The whole attention input anchored at the set_rows `cv`: the KV store of [`kv_parts`] whose
/// ropes (of the same parameters, positions and frequency factors, over heads of one size and
/// the same tokens: the kernel pairs k's rows as q's) rotate reshaped products q and k, and
/// whose v is a product, of one activation (a q/k/v pattern), each read only there; with the
/// norm × weight computing the activation when nothing else reads it. One mat-vec dispatch
/// computes q, k and v, rotates q and k, and stores k and v into the caches.
fn attention_input(cv: &Ctx, uses: &[usize]) -> Result<Option<(Vec<TensorId>, Vec<Dispatch>)>> {
    let g = cv.graph;
    let Some((rq, rk, ck)) = kv_parts(cv, uses)? else {
        return Ok(None);
    };
    let Op::Rope(p) = g.node(rk).op else {
        return Ok(None);
    };
    let private = |t: TensorId| only(g, uses, t, 1);
    let product = |t: TensorId| g.node(t).op == Op::MulMat && private(t);
    // A rope's input: a reshape (read only by it) of a product (read only by the reshape).
    let reshaped = |rope: TensorId| {
        let r = g.node(rope).src(0).ok()?;
        let mm = g.node(r).src(0).ok()?;
        (g.node(r).op == Op::Reshape && private(r) && product(mm)).then_some(mm)
    };
    let (nq, nk) = (g.node(rq), g.node(rk));
    let v = cv.node.src(1)?;
    let (Some(q), Some(k)) = (reshaped(rq), reshaped(rk)) else {
        return Ok(None);
    };
    let (eq, ek) = (nq.layout.ne, nk.layout.ne);
    let same = nq.op == nk.op
        && nq.src(1).ok() == nk.src(1).ok()
        && nq.opt_src(2) == nk.opt_src(2)
        && eq[0] == ek[0]
        && eq[2..] == ek[2..];
    if !same || !product(v) || read_before(g, &[q, k, v, rq, rk, ck], cv.id) {
        return Ok(None);
    }
    let c = |t: TensorId| ctx(g, t, cv.caps);
    let (qc, kc, vc, rqc) = (c(q)?, c(k)?, c(v)?, c(rq)?);
    let store = || -> Result<matmul::QkvRope> {
        Ok(matmul::QkvRope {
            p,
            pos: rqc.src(1)?,
            ff: rqc.node.opt_src(2).map(|_| rqc.src(2)).transpose()?,
            idx: cv.src(2)?,
            q_out: rqc.out(),
            cache_k: c(ck)?.out(),
            cache_v: cv.out(),
        })
    };
    let parts = [q, k, v, rq, rk, ck];
    if let Some((mut normed, norm)) = norm_input(&vc, &[q, k, v], uses)? {
        if let Some(d) = matmul::mul_mat_vec_qkv_rope(&qc, &kc, &vc, Some(&norm), store()?)? {
            normed.extend(parts);
            return Ok(Some((normed, d)));
        }
    }
    let d = matmul::mul_mat_vec_qkv_rope(&qc, &kc, &vc, None, store()?)?;
    Ok(d.map(|d| (parts.to_vec(), d)))
}

/// Whether exactly `n` nodes read `t` (the counts of `plan_graph`'s `uses`) and it is not an
/// output: a fusion that absorbs those readers may absorb `t`.
fn only(g: &Graph, uses: &[usize], t: TensorId, n: usize) -> bool {
    uses[t.index()] == n && !g.outputs().contains(&t)
}

/// Whether a dispatch after the first of `parts` and before `anchor`, other than the parts
/// themselves, reads one of them (directly or through a view): their results are written only
/// when the anchor runs.
fn read_before(g: &Graph, parts: &[TensorId], anchor: TensorId) -> bool {
    let first = parts
        .iter()
        .map(|t| t.index())
        .min()
        .unwrap_or(anchor.index());
    g.ids()
        .skip(first + 1)
        .take(anchor.index().saturating_sub(first + 1))
        .any(|t| {
            let n = g.node(t);
            let view = matches!(
                n.op,
                Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose
            );
            !parts.contains(&t)
                && !view
                && n.srcs.iter().flatten().any(|&s| parts.contains(&g.root(s)))
        })
}

#[cfg(test)]
mod tests {
    use wgllm_core::{DType, Graph};

    use crate::kernels::Kernel;
    use crate::ops::planned_kernels;

    /// A QK-norm layer's q and k norms × weights plan as one `norm.wgsl` PAIR dispatch; with
    /// other epsilons, as two.
    #[test]
    fn q_and_k_norms_pair_into_one_dispatch() {
        let plan = |eps_k: f32| {
            let mut g = Graph::new();
            let q = g.input("q", DType::F32, [128, 8, 3, 1]).unwrap();
            let k = g.input("k", DType::F32, [128, 2, 3, 1]).unwrap();
            let wq = g.input("wq", DType::F32, [128, 1, 1, 1]).unwrap();
            let wk = g.input("wk", DType::F32, [128, 1, 1, 1]).unwrap();
            let qn = g.rms_norm(q, 1e-6).unwrap();
            let qn = g.mul(qn, wq).unwrap();
            let kn = g.rms_norm(k, eps_k).unwrap();
            let kn = g.mul(kn, wk).unwrap();
            g.mark_output(qn).unwrap();
            g.mark_output(kn).unwrap();
            planned_kernels(&g)
        };
        let paired = plan(1e-6);
        assert_eq!(paired.len(), 1);
        assert!(matches!(paired[0], Kernel::Norm { pair: true, .. }));
        assert_eq!(plan(1e-5).len(), 2);
    }
}
