//! The liveness memory planner: every computed tensor gets an offset in one arena, and tensors
//! whose lifetimes do not overlap share bytes.
//!
//! A tensor is live from the node that computes it to the last node that reads it or any view of
//! it. Outputs live to the end. Leaves (inputs, weights, state) are not in the arena. Views and
//! in-place writes share their root's bytes. A node's result never overlaps its own sources,
//! because a tensor is freed only after its last reader has been allocated.

use crate::graph::{Graph, TensorId};

/// Where each computed tensor lives in the arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Arena byte offset per node id; `Some` only for computed roots (not leaves, not views).
    pub offsets: Vec<Option<u64>>,
    /// Bytes the arena needs.
    pub arena_bytes: u64,
    /// Bytes all computed roots would take without reuse (each aligned).
    pub naive_bytes: u64,
}

impl MemoryPlan {
    /// Arena offset of the storage `t` lives in, plus `t`'s own layout offset, or `None` when
    /// `t` lives in a leaf.
    pub fn offset_of(&self, graph: &Graph, t: TensorId) -> Option<u64> {
        let root = graph.root(t);
        self.offsets[root.index()].map(|o| o + graph.node(t).layout.offset)
    }
}

fn align_up(x: u64, align: u64) -> u64 {
    x.div_ceil(align) * align
}

/// A first-fit-by-size (best fit) allocator over one growing arena.
struct Arena {
    free: Vec<(u64, u64)>, // (offset, size), sorted by offset, coalesced
    end: u64,
}

impl Arena {
    fn alloc(&mut self, size: u64) -> u64 {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, &(_, s))| s >= size)
            .min_by_key(|(_, &(_, s))| s)
            .map(|(i, _)| i);
        if let Some(i) = best {
            let (off, s) = self.free[i];
            if s == size {
                self.free.remove(i);
            } else {
                self.free[i] = (off + size, s - size);
            }
            return off;
        }
        // Grow: reuse a free block that touches the end.
        if let Some(&(off, s)) = self.free.last() {
            if off + s == self.end {
                self.free.pop();
                self.end = off + size;
                return off;
            }
        }
        let off = self.end;
        self.end += size;
        off
    }

    fn release(&mut self, off: u64, size: u64) {
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, size));
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

/// Plans the arena for `graph`, aligning every tensor's start to `align` bytes.
pub fn plan_memory(graph: &Graph, align: u64) -> MemoryPlan {
    plan_memory_with(graph, align, &[], &|_| false)
}

/// [`plan_memory`] for a backend that runs some nodes later than their place in the graph
/// (a fused kernel reads the sources of the nodes it absorbed at its own node): each
/// `(tensor, node)` of `late_reads` keeps `tensor` alive until `node` has run. Computed roots
/// for which `apart` holds are left out of the arena (their offset `None`): the backend gives
/// them storage of their own.
pub fn plan_memory_with(
    graph: &Graph,
    align: u64,
    late_reads: &[(TensorId, TensorId)],
    apart: &dyn Fn(TensorId) -> bool,
) -> MemoryPlan {
    let n = graph.nodes().len();
    let align = align.max(1);
    let is_arena_root = |t: TensorId| {
        let node = graph.node(t);
        !node.op.is_leaf() && !node.op.aliases_src0() && !apart(t)
    };
    // Last reader of each root.
    let mut last_use: Vec<usize> = (0..n).collect();
    for t in graph.ids() {
        for s in graph.node(t).srcs.iter().flatten() {
            let r = graph.root(*s);
            last_use[r.index()] = last_use[r.index()].max(t.index());
        }
        // A view keeps its root alive as long as the view itself is live.
        let r = graph.root(t);
        last_use[r.index()] = last_use[r.index()].max(t.index());
    }
    for &(t, at) in late_reads {
        let r = graph.root(t);
        last_use[r.index()] = last_use[r.index()].max(at.index());
    }
    for &o in graph.outputs() {
        last_use[graph.root(o).index()] = usize::MAX;
    }
    let mut frees_at: Vec<Vec<TensorId>> = vec![Vec::new(); n];
    for t in graph.ids() {
        if is_arena_root(t) && last_use[t.index()] != usize::MAX {
            frees_at[last_use[t.index()]].push(t);
        }
    }
    let size_of = |t: TensorId| align_up(graph.node(t).span_bytes(), align);
    let mut arena = Arena {
        free: Vec::new(),
        end: 0,
    };
    let mut offsets = vec![None; n];
    let mut naive = 0;
    for t in graph.ids() {
        if is_arena_root(t) {
            let size = size_of(t);
            naive += size;
            offsets[t.index()] = Some(if size == 0 { 0 } else { arena.alloc(size) });
        }
        for &f in &frees_at[t.index()] {
            let size = size_of(f);
            if size > 0 {
                arena.release(offsets[f.index()].expect("allocated before freed"), size);
            }
        }
    }
    MemoryPlan {
        offsets,
        arena_bytes: arena.end,
        naive_bytes: naive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::graph::Graph;

    #[test]
    fn late_reads_keep_a_tensor_alive_until_its_reader() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [64, 1, 1, 1]).unwrap();
        let a = g.scale(x, 2.0, 0.0).unwrap();
        let b = g.scale(a, 2.0, 0.0).unwrap();
        let c = g.scale(b, 2.0, 0.0).unwrap();
        let d = g.scale(c, 2.0, 0.0).unwrap();
        g.mark_output(d).unwrap();
        let at = |p: &MemoryPlan, t: TensorId| p.offsets[t.index()].unwrap();
        // Without late reads `c` reuses `a`'s bytes (a dies at b).
        let p = plan_memory(&g, 16);
        assert_eq!(at(&p, a), at(&p, c));
        // A fused kernel at `d` that reads `a`: `a` overlaps neither `c` nor `d`.
        let p = plan_memory_with(&g, 16, &[(a, d)], &|_| false);
        for t in [b, c, d] {
            assert_ne!(at(&p, a), at(&p, t));
        }
        // `b` apart: no arena offset, and the arena holds the others only.
        let whole = plan_memory(&g, 16);
        let p = plan_memory_with(&g, 16, &[], &|t| t == b);
        assert_eq!(p.offsets[b.index()], None);
        assert!(p.offsets[c.index()].is_some());
        assert!(p.naive_bytes < whole.naive_bytes);
    }
    use crate::op::UnaryOp;

    /// Live ranges of distinct arena roots that overlap in time must not overlap in bytes.
    fn assert_no_conflicts(g: &Graph, plan: &MemoryPlan, align: u64) {
        let n = g.nodes().len();
        let mut last = vec![0usize; n];
        for t in g.ids() {
            for s in g.node(t).srcs.iter().flatten() {
                let r = g.root(*s).index();
                last[r] = last[r].max(t.index());
            }
        }
        for &o in g.outputs() {
            last[g.root(o).index()] = n;
        }
        let roots: Vec<usize> = (0..n).filter(|&i| plan.offsets[i].is_some()).collect();
        for &a in &roots {
            for &b in &roots {
                if a >= b {
                    continue;
                }
                let live_overlap = a.max(b) <= last[a].max(a).min(last[b].max(b));
                let sa = align_up(g.nodes()[a].span_bytes(), align);
                let sb = align_up(g.nodes()[b].span_bytes(), align);
                let (oa, ob) = (plan.offsets[a].unwrap(), plan.offsets[b].unwrap());
                let byte_overlap = sa > 0 && sb > 0 && oa < ob + sb && ob < oa + sa;
                assert!(!(live_overlap && byte_overlap), "nodes {a} and {b} overlap");
            }
        }
    }

    #[test]
    fn a_chain_reuses_memory() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [1024, 1, 1, 1]).unwrap();
        let mut t = x;
        for _ in 0..10 {
            t = g.unary(t, UnaryOp::Exp).unwrap();
        }
        g.mark_output(t).unwrap();
        let plan = plan_memory(&g, 256);
        assert_eq!(plan.naive_bytes, 10 * 4096);
        // Ping-pong: two buffers suffice for a chain.
        assert_eq!(plan.arena_bytes, 2 * 4096, "{plan:?}");
        assert_no_conflicts(&g, &plan, 256);
    }

    #[test]
    fn views_keep_their_root_alive() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, [64, 4, 1, 1]).unwrap();
        let a = g.unary(x, UnaryOp::Exp).unwrap();
        let v = g.transpose(a).unwrap();
        let b = g.unary(x, UnaryOp::Neg).unwrap();
        let c = g.cont(v, DType::F32).unwrap();
        let d = g.add(b, b).unwrap();
        g.mark_output(c).unwrap();
        g.mark_output(d).unwrap();
        let plan = plan_memory(&g, 32);
        assert_no_conflicts(&g, &plan, 32);
        assert_ne!(plan.offsets[a.index()], plan.offsets[b.index()]);
        assert_eq!(plan.offset_of(&g, v), plan.offsets[a.index()]);
        assert_eq!(plan.offset_of(&g, x), None);
    }

    #[test]
    fn random_graphs_never_conflict_and_report_reuse() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..50 {
            let mut g = Graph::new();
            let x = g.input("x", DType::F32, [16, 4, 1, 1]).unwrap();
            let mut pool = vec![x];
            for _ in 0..rng.random_range(5..40) {
                let a = pool[rng.random_range(0..pool.len())];
                let t = if rng.random_bool(0.5) {
                    let b = pool[rng.random_range(0..pool.len())];
                    g.add(a, b).unwrap()
                } else {
                    g.unary(a, UnaryOp::Tanh).unwrap()
                };
                pool.push(t);
            }
            for _ in 0..2 {
                let o = pool[rng.random_range(1..pool.len())];
                g.mark_output(o).unwrap();
            }
            let plan = plan_memory(&g, 64);
            assert_no_conflicts(&g, &plan, 64);
            assert!(plan.arena_bytes <= plan.naive_bytes);
        }
    }
}
