//! The mat-vec's workgroup shape (`mul_mat_vec.wgsl`): lanes and rows a workgroup, by the
//! product's shape and the device (a GPU, or a CPU adapter: [`crate::KernelShapes`]).

use crate::device::Capabilities;

/// The workgroup memory of the mat-vec's reduction: one f32 per lane and sum (rows × columns ×
/// weights), 16 KiB in all, the WebGPU default limit.
const VEC_RED_FLOATS: u32 = 4096;
/// Workgroups a mat-vec keeps (when it has the rows) before it groups rows further: several
/// per compute unit of a large GPU.
const VEC_MIN_GROUPS: u64 = 1024;
/// Mat-vec shapes on a CPU adapter ([`crate::KernelShapes`]): most rows a workgroup, and the
/// workgroups kept before rows are grouped (a few per core of a large CPU); its lanes are
/// [`cpu_lanes`].
const CPU_VEC_RPW: u32 = 8;
const CPU_VEC_MIN_GROUPS: u64 = 64;

/// The lanes of a mat-vec workgroup on a CPU adapter, `None` on a GPU: one SIMD vector, the
/// adapter's subgroup size (4 on SwiftShader, 8 on lavapipe with 256-bit vectors; 8 where the
/// adapter does not say), so that a workgroup is one coroutine (bench/results/HISTORY.md,
/// "mat-vec lanes on CPU adapters").
pub(super) fn cpu_lanes(caps: &Capabilities) -> Option<u32> {
    let simd = match caps.subgroup_max_size {
        0 => 8,
        s => s.clamp(4, 8),
    };
    caps.cpu_shapes.then_some(simd)
}

/// Mat-vec workgroup shape for `m` rows of `units` units of 32, `nc` columns and `nw` weights:
/// (invocations, rows per workgroup). Four lanes share a unit: 128 lanes (32 units a step), 256
/// past 256 units. Rows per workgroup share each activation load, but fewer workgroups then
/// fill the GPU: up to 4 rows while at least [`VEC_MIN_GROUPS`] workgroups remain, within the
/// reduction's memory. Short rows are latency bound: one step of mostly idle 128 lanes costs
/// less than two of 64 or 32, and many workgroups less than half as many of twice the rows.
///
/// With int8 activations a lane takes a whole unit (`upj` = 1): the same 128 or 256 lanes, but
/// 32 for rows of at most 64 units, two units a lane (Llama 3.2 1B's rows of 2,048: its ffn
/// gate/up and output head). Lanes whose jobs are two units (the K formats: `upj` = 2) take one
/// step over rows of up to 128 jobs (32-128 lanes) and 128 lanes beyond. These lane counts are
/// set by decode steps, whose weights come from memory: a benchmark whose weights stay in L2
/// ranks them differently. Jobs take up to 2 rows a workgroup, not 4: a job's 16-byte loads
/// already keep a lane's memory requests in flight, and the 4-row workgroups' registers hold
/// fewer of them resident; unit lanes keep up to 4 (measurements: bench/results/HISTORY.md,
/// "mat-vec workgroup shape").
///
/// The reduction holds one f32 per lane and sum (`nw` per row, plus `extra` of the norm
/// prologue, per column) in [`VEC_RED_FLOATS`]: a shape that would not fit at `min_rpw` rows
/// takes fewer lanes (wide rows with a norm and 5-8 columns).
///
/// A CPU adapter (`cpu` lanes, [`cpu_lanes`]) takes up to [`CPU_VEC_RPW`] rows while
/// [`CPU_VEC_MIN_GROUPS`] workgroups remain: its cost is per lane, not per byte.
pub(super) fn vec_shape(
    (units, upj): (u64, Option<u64>),
    (m, cpu): (u64, Option<u32>),
    nc: u32,
    nw: u32,
    extra: u32,
    min_rpw: u32,
) -> (u32, u32) {
    if let Some(lanes) = cpu {
        let mut rpw = min_rpw;
        while rpw < CPU_VEC_RPW && m / u64::from(rpw * 2) >= CPU_VEC_MIN_GROUPS {
            rpw *= 2;
        }
        return (lanes, rpw);
    }
    let fits = |wg: u32, rpw: u32| (nw * rpw + extra) * nc * wg <= VEC_RED_FLOATS;
    let mut wg = match (upj, units) {
        (Some(1), 0..=64) => 32,
        (Some(j), _) if j > 1 => (units / j).next_power_of_two().clamp(32, 128) as u32,
        (_, 0..=256) => 128,
        _ => 256,
    };
    while wg > 32 && !fits(wg, min_rpw) {
        wg /= 2;
    }
    let max_rpw = match upj {
        Some(j) if j > 1 => 2,
        _ => 4,
    };
    let mut rpw = min_rpw;
    while rpw * 2 <= max_rpw && fits(wg, rpw * 2) && m / u64::from(rpw * 2) >= VEC_MIN_GROUPS {
        rpw *= 2;
    }
    (wg, rpw)
}
