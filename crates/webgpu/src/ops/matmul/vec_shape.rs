//! The mat-vec's workgroup shape (`mul_mat_vec.wgsl`): lanes and rows a workgroup, by the
//! product's shape and the device (a GPU, or a CPU adapter: [`crate::KernelShapes`]).

use crate::device::Capabilities;

/// The workgroup memory of the mat-vec's reduction: one f32 per lane and sum (rows × columns ×
/// weights), 16 KiB in all, the WebGPU default limit.
const VEC_RED_FLOATS: u32 = 4096;
/// Workgroups a mat-vec keeps (when it has the rows) before it groups rows further: several
/// per compute unit of a large GPU (an H200 has 132).
const VEC_MIN_GROUPS: u64 = 1024;
/// Mat-vec shapes on a CPU adapter ([`crate::KernelShapes`]): most rows a workgroup, and the
/// workgroups kept before rows are grouped (a few per core of a large CPU); its lanes are
/// [`cpu_lanes`].
const CPU_VEC_RPW: u32 = 8;
const CPU_VEC_MIN_GROUPS: u64 = 64;

/// The lanes of a mat-vec workgroup on a CPU adapter, `None` on a GPU: one SIMD vector, the
/// adapter's subgroup size (4 on SwiftShader, 8 on lavapipe with 256-bit vectors; 8 where the
/// adapter does not say), so that a workgroup is one coroutine. SmolLM2-135M (2 cores, against
/// 128 lanes and up to 4 rows, prompts tiled): lavapipe tg8 and pp32 0.55 to 2.41 and 1.70 to
/// 8.46 t/s with 8 lanes (4: 2.28, 7.74); SwiftShader tg4 and pp32 0.64 and 2.99 with 8 lanes,
/// 0.74 and 3.39 with 4 (at the GPU shapes tg4 0.03, pp16 0.40).
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
/// reduction's memory. On an H200 (issue 6's `wgllm ops --large`) 2-4 rows and 128 lanes for
/// 4096-long rows, 256 for 14336, were best; 8 or 16 rows were slower. Short rows are latency
/// bound: one step of idle-heavy 128 lanes beat two of 64 or 32, and 1,024 workgroups beat
/// 512 of twice the rows. tg128 on the H200 (ctx 640) went from 785 to 821 t/s for the
/// SmolLM2 shape (rows of 576 and 1,536 units: 128 lanes instead of 64) and from 641 to 765
/// for Llama 3.2 1B (also 2 rows a workgroup instead of 4 for its 2,048 rows); the 8B's went
/// from 217 to 215 (its 4,096 rows keep 4, its 1,024 k/v rows drop to 1).
///
/// With int8 activations a lane takes a whole unit (`upj` = 1): the same 128 or 256 lanes, but
/// 32 for rows of at most 64 units, two units a lane (Llama 3.2 1B's rows of 2,048: its ffn
/// gate/up and output head). On an H200 that took the 1B's tg128 from 925 to 980 t/s with 64
/// lanes and to 1,020 with 32; 64 lanes for the 8B's 128-unit rows lost 6% (322 to 301),
/// though `ops --large` timed them faster (its weights stay in L2; a decode step's come from
/// memory). Lanes whose jobs are two units (the K formats: `upj` = 2) take one step over rows of
/// up to 128 jobs (32-128 lanes) and 128 lanes beyond: on an H200 the 8B shape's tg128 went
/// from 303.7 to 307.7 t/s (q4_K) and from 200.1 to 205.6 (q6_K) against the unit rule's 32 for
/// 4,096-wide rows and 128 for 14,336; 256 lanes for 14,336 took the down projection from 17.5
/// to 19.2 µs. Jobs take up to 2 rows a workgroup, not 4: a job's 16-byte loads already keep a
/// lane's memory requests in flight, and the 4-row workgroups' registers held fewer of them
/// resident. On an H200 that took the 8B q4_K shape's tg128 from 308.5 to 316.0 t/s and its
/// 8-layer chain of 4096² products from 115.2 to 105.3 µs (q6_K: 122.7 to 119.6); the unit
/// path lost with 2 (8B q4_0 331.0 to 324.0, SmolLM2 q4_1 944 to 937), and 1 row lost for all
/// (8B q4_K 289.2).
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
