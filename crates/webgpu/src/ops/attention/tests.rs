//! Tests of the attention planner: kernel choice, workgroup shapes and memory, splits.

use wgllm_core::{DType, Graph};

use crate::kernels::Kernel;
use crate::ops::SCRATCH;

/// The dispatches of an attention of `n_q` query rows over `n_kv` keys (32/8 heads of `d`,
/// f16 cache) on a device with `wg_bytes` of workgroup memory.
fn plan(d: u64, n_q: u64, n_kv: u64, wg_bytes: u32) -> Vec<crate::ops::Dispatch> {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [d, n_q, 32, 1]).unwrap();
    let k = g.input("k", DType::F16, [d, n_kv, 8, 1]).unwrap();
    let v = g.input("v", DType::F16, [d, n_kv, 8, 1]).unwrap();
    let m = g.input("m", DType::F16, [n_kv, n_q, 1, 1]).unwrap();
    let a = g
        .flash_attn_ext(q, k, v, Some(m), None, 0.088, 0.0, 0.0)
        .unwrap();
    let caps = super::super::matmul::tests::caps(false, 32, wg_bytes);
    super::super::plan_node(&g, a, &caps).unwrap()
}

/// Llama 8B's decode attention over a cache of `n_kv` keys.
fn planned(n_kv: u64) -> Vec<crate::ops::Dispatch> {
    plan(128, 1, n_kv, 49152)
}

/// The workgroup memory WebGPU counts for a variant: every workgroup variable naga finds in
/// its source, each rounded up to 16 bytes. naga lists every declared variable: without a
/// mask the key range's three are unused, which WebGPU leaves out, so the prefill kernels'
/// formulas are then over by 48 bytes.
fn workgroup_bytes(key: &crate::kernels::PipelineKey) -> u64 {
    use wgpu::naga;
    let src = crate::kernels::source(key).unwrap();
    let module = naga::front::wgsl::parse_str(&src).unwrap();
    module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .map(|(_, v)| u64::from(module.types[v.ty].inner.size(module.to_ctx())))
        .map(|size| size.next_multiple_of(16))
        .sum()
}

/// `coop_storage` likewise for `flash_attn_coop.wgsl`.
#[test]
fn coop_storage_is_the_kernels_workgroup_memory() {
    for (d, dv) in [(64, 64), (128, 128), (128, 64), (16, 112)] {
        let key = super::coop_key(Some(DType::F16), true, (d, dv));
        let formula = super::coop_storage(d.into(), dv.into());
        assert_eq!(workgroup_bytes(&key), formula, "d {d}, dv {dv}");
    }
}

/// `tile_storage` is what WebGPU counts for the tile kernel's workgroup variables (under
/// would fail pipelines on devices with exactly that much).
#[test]
fn tile_storage_is_the_kernels_workgroup_memory() {
    for (d, dv, bq) in [
        (64, 64, 32),
        (128, 128, 16),
        (40, 80, 8),
        (192, 128, 8),
        (256, 256, 8),
    ] {
        for mask in [Some(DType::F16), None] {
            let key = super::tile_key(DType::F16, DType::F16, mask, true, (d, dv), bq);
            let used = workgroup_bytes(&key);
            let formula = super::tile_storage(bq.into(), d.into(), dv.into());
            assert_eq!(used, formula, "d {d}, dv {dv}, {bq} rows, mask {mask:?}");
        }
    }
}

/// On a CPU adapter attention runs the vec kernel at one octet of lanes a workgroup,
/// prompts included, and splits long caches into two dispatches (the splits and their
/// combine) aiming at 64 workgroups in all.
#[test]
fn cpu_adapters_run_the_vec_kernel_on_one_octet_at_any_row_count() {
    let caps = crate::device::Capabilities {
        cpu_shapes: true,
        ..super::super::matmul::tests::caps(false, 8, 16384)
    };
    for (n_q, n_kv, dispatches) in [(1, 600, 1), (37, 600, 1), (1, 8192, 2)] {
        let mut g = Graph::new();
        let q = g.input("q", DType::F32, [64, n_q, 8, 1]).unwrap();
        let k = g.input("k", DType::F16, [64, n_kv, 2, 1]).unwrap();
        let v = g.input("v", DType::F16, [64, n_kv, 2, 1]).unwrap();
        let m = g.input("m", DType::F16, [n_kv, n_q, 1, 1]).unwrap();
        let a = g
            .flash_attn_ext(q, k, v, Some(m), None, 0.125, 0.0, 0.0)
            .unwrap();
        let p = super::super::plan_node(&g, a, &caps).unwrap();
        assert_eq!(p.len(), dispatches, "{n_q} rows, {n_kv} keys");
        assert!(
            matches!(p[0].key.kernel, Kernel::FlashAttnVec { keys: 1, .. }),
            "{:?}",
            p[0].key.kernel
        );
        assert_eq!(p[0].key.wg, 8);
        assert!(p[0].groups.iter().product::<u32>() <= 64 * 2 * n_q as u32);
    }
}

#[test]
fn prefill_runs_the_tile_kernel_with_the_rows_its_memory_allows() {
    let kernel = |d, n_q, wg_bytes| {
        let p = plan(d, n_q, 600, wg_bytes);
        assert_eq!(p.len(), 1);
        let name = match p[0].key.kernel {
            Kernel::FlashAttnTile { .. } => "tile",
            Kernel::FlashAttn { .. } => "rows",
            Kernel::FlashAttnVec { .. } => "vec",
            ref other => panic!("{other:?}"),
        };
        (name, p[0].key.wg)
    };
    // Llama 8B's pp512: blocks of 32 rows with 48 KiB, 16 with lavapipe's 32 KiB.
    assert_eq!(kernel(128, 512, 49152), ("tile", 128));
    assert_eq!(kernel(128, 512, 32768), ("tile", 64));
    assert_eq!(kernel(128, 9, 49152), ("tile", 128));
    assert_eq!(kernel(128, 8, 49152).0, "vec");
    // Heads of 256 (Gemma 3) fit blocks of 8 rows in 48 KiB, none in 32 KiB.
    assert_eq!(kernel(256, 512, 49152), ("tile", 32));
    assert_eq!(kernel(256, 512, 32768).0, "rows");
    // Rows of K are read as vec4s.
    assert_eq!(kernel(42, 512, 49152).0, "rows");
    // With cooperative matrices, f16 K/V of heads of 64 and 128 (and of 32 over 600 keys) take
    // 64 rows a workgroup; heads of 256 the tiled kernel.
    let coop = |d, n_q| {
        let mut g = Graph::new();
        let q = g.input("q", DType::F32, [d, n_q, 32, 1]).unwrap();
        let k = g.input("k", DType::F16, [d, 600, 8, 1]).unwrap();
        let a = g
            .flash_attn_ext(q, k, k, None, None, 0.1, 0.0, 0.0)
            .unwrap();
        let caps = super::super::matmul::tests::caps(true, 32, 49152);
        let p = super::super::plan_node(&g, a, &caps).unwrap();
        (p[0].key.kernel, p[0].items)
    };
    assert!(matches!(
        coop(128, 512),
        (Kernel::FlashAttnCoop { d: 128, .. }, 256)
    ));
    assert!(matches!(coop(256, 512).0, Kernel::FlashAttnTile { .. }));
    assert!(matches!(
        coop(64, 512),
        (Kernel::FlashAttnCoop { d: 64, .. }, 256)
    ));
    assert!(matches!(
        coop(32, 512).0,
        Kernel::FlashAttnCoop { d: 32, .. }
    ));
    assert!(matches!(coop(128, 8).0, Kernel::FlashAttnVec { .. }));
    // f32 K/V (an encoder's) are rounded into f16 scratch first, V after K.
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [64, 1500, 6, 1]).unwrap();
    let k = g.input("k", DType::F32, [64, 1500, 6, 1]).unwrap();
    let a = g
        .flash_attn_ext(q, k, k, None, None, 0.1, 0.0, 0.0)
        .unwrap();
    let caps = super::super::matmul::tests::caps(true, 32, 49152);
    let p = super::super::plan_node(&g, a, &caps).unwrap();
    let kernels: Vec<Kernel> = p.iter().map(|d| d.key.kernel).collect();
    assert!(matches!(
        kernels[..],
        [
            Kernel::Map { .. },
            Kernel::Map { .. },
            Kernel::FlashAttnCoop { d: 64, .. }
        ]
    ));
    let (k16, v16) = (&p[2].operands[1], &p[2].operands[2]);
    assert_eq!(
        (k16.tensor, k16.dtype, k16.layout.offset),
        (SCRATCH, DType::F16, 0)
    );
    assert_eq!(
        v16.layout.offset,
        (64 * 1500 * 6 * 2u64).next_multiple_of(256)
    );
    assert_eq!(crate::ops::scratch_bytes(&p), 2 * 64 * 1500 * 6 * 2);
    // A block takes 32 rows: 512 rows of 32 heads are 16 · 32 workgroups.
    assert_eq!(plan(128, 512, 600, 49152)[0].items, 16 * 32);
}

/// Query heads per workgroup of that attention.
fn vec_heads(n_kv: u64) -> u32 {
    match planned(n_kv)[0].key.kernel {
        Kernel::FlashAttnVec { heads, .. } => heads,
        ref other => panic!("{other:?}"),
    }
}

/// `vec_storage` likewise for `flash_attn_vec.wgsl`.
#[test]
fn vec_storage_is_the_kernels_workgroup_memory() {
    for (lanes, heads, (d, dv)) in [(512, 1, (128, 128)), (256, 4, (64, 64)), (128, 3, (40, 24))] {
        for (mask, mask_heads) in [
            (None, false),
            (Some(DType::F16), false),
            (Some(DType::F32), true),
        ] {
            let o = super::VecOpts {
                heads,
                lanes,
                keys: 2,
                split: false,
                mask_heads,
                softcap: false,
                q8x: false,
                subgroups: heads != 4,
            };
            let key = super::vec_key(DType::F16, DType::F16, mask, false, (d, dv), o);
            let formula = super::vec_storage(&o, (d.into(), dv.into()), mask.is_some());
            assert_eq!(
                workgroup_bytes(&key),
                formula,
                "{lanes} lanes, {heads} heads, d {d}, mask {mask:?}"
            );
        }
    }
}

/// The vec kernel's (invocations, keys an octet takes a step) for a decode attention of
/// heads of `d` over `n_kv` keys, on a device of `lanes` invocations and `wg_bytes` of
/// workgroup memory.
fn vec_shape(d: u64, n_kv: u64, lanes: u32, wg_bytes: u32) -> (u32, u32) {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [d, 1, 32, 1]).unwrap();
    let k = g.input("k", DType::F16, [d, n_kv, 8, 1]).unwrap();
    let m = g.input("m", DType::F16, [n_kv, 1, 1, 1]).unwrap();
    let a = g
        .flash_attn_ext(q, k, k, Some(m), None, 0.088, 0.0, 0.0)
        .unwrap();
    let mut caps = super::super::matmul::tests::caps(false, 32, wg_bytes);
    caps.limits.max_compute_invocations_per_workgroup = lanes;
    match super::super::plan_node(&g, a, &caps).unwrap()[0].key {
        crate::kernels::PipelineKey {
            kernel: Kernel::FlashAttnVec { keys, .. },
            wg,
            ..
        } => (wg, keys),
        ref other => panic!("{other:?}"),
    }
}

#[test]
fn unsplit_walks_take_the_most_lanes_the_device_has_room_for() {
    // Llama 8B (heads of 128) on 1,024 invocations and 48 KiB, on WebGPU's default 256
    // invocations, and on lavapipe's 32 KiB; Gemma 3's heads of 256 need 64 KiB for 512.
    assert_eq!(vec_shape(128, 640, 1024, 49152), (512, 1));
    assert_eq!(vec_shape(128, 640, 256, 49152), (256, 2));
    assert_eq!(vec_shape(128, 640, 1024, 32768), (256, 2));
    assert_eq!(vec_shape(256, 640, 1024, 49152), (256, 2));
    assert_eq!(vec_shape(64, 640, 1024, 32768), (512, 1));
    // Split walks take 128 lanes, of 4 keys for heads over 64 up to 4,096 keys.
    assert_eq!(vec_shape(128, 4096, 1024, 49152), (128, 4));
}

/// Llama 8B's decode attention over `n_kv` keys on a device with or without `subgroups`
/// and `wg_bytes` of workgroup memory: the vec kernel's (lanes, query heads a workgroup,
/// keys an octet takes a step, subgroup flag) and the dispatch count.
fn vec_plan(n_kv: u64, subgroups: bool, wg_bytes: u32) -> ((u32, u32, u32, bool), usize) {
    vec_plan_heads((128, 32, 8), n_kv, subgroups, wg_bytes)
}

/// The dispatches of one decode query of `n_head` heads of `d` over `n_head_kv` K/V heads
/// and `n_kv` keys (f16 cache, a mask), with or without `subgroups`, on a device with
/// `wg_bytes` of workgroup memory.
fn decode_plan(
    (d, n_head, n_head_kv): (u64, u64, u64),
    n_kv: u64,
    subgroups: bool,
    wg_bytes: u32,
) -> Vec<crate::ops::Dispatch> {
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, [d, 1, n_head, 1]).unwrap();
    let k = g.input("k", DType::F16, [d, n_kv, n_head_kv, 1]).unwrap();
    let m = g.input("m", DType::F16, [n_kv, 1, 1, 1]).unwrap();
    let a = g
        .flash_attn_ext(q, k, k, Some(m), None, 0.088, 0.0, 0.0)
        .unwrap();
    let mut caps = super::super::matmul::tests::caps(false, 32, wg_bytes);
    caps.subgroups = subgroups;
    caps.limits.max_compute_invocations_per_workgroup = 1024;
    super::super::plan_node(&g, a, &caps).unwrap()
}

/// `vec_plan` for heads of `d` and `n_head` query heads over `n_head_kv` K/V heads.
fn vec_plan_heads(
    heads: (u64, u64, u64),
    n_kv: u64,
    subgroups: bool,
    wg_bytes: u32,
) -> ((u32, u32, u32, bool), usize) {
    let p = decode_plan(heads, n_kv, subgroups, wg_bytes);
    match p[0].key.kernel {
        Kernel::FlashAttnVec {
            heads,
            keys,
            subgroups: s,
            ..
        } => ((p[0].key.wg, heads, keys, s), p.len()),
        ref other => panic!("{other:?}"),
    }
}

/// Without subgroups (browsers) decode still takes the vec kernel, its octet sums through
/// workgroup memory: unsplit over short caches, split over long ones with one key an octet
/// and at most 4 heads (`VEC_SUMS_WITHOUT_SUBGROUPS`), fewer heads where those sums leave
/// too little memory for more.
#[test]
fn decode_without_subgroups_takes_the_vec_kernel() {
    assert_eq!(vec_plan(640, true, 49152), ((512, 1, 1, true), 1));
    assert_eq!(vec_plan(640, false, 49152), ((512, 1, 1, false), 1));
    assert_eq!(vec_plan(640, false, 16384), ((128, 1, 4, false), 1));
    assert_eq!(vec_plan(4096, true, 49152), ((128, 4, 4, true), 2));
    assert_eq!(vec_plan(4096, false, 49152), ((128, 4, 1, false), 2));
    // Past 4,096 keys split walks take 2 keys an octet with subgroups (`split_keys`).
    assert_eq!(vec_plan(4097, true, 49152), ((128, 4, 2, true), 2));
    assert_eq!(vec_plan(4097, false, 49152), ((128, 4, 1, false), 2));
    // 4 heads need 14,880 bytes without subgroups, 12,832 with; 2 heads 12,576.
    assert_eq!(vec_plan(4096, true, 13000), ((128, 4, 4, true), 2));
    assert_eq!(vec_plan(4096, false, 13000), ((128, 2, 1, false), 2));
    // 8 query heads of 64 a K/V head: 8 a workgroup with subgroups (2 keys an octet:
    // heads of 64), 4 without.
    let mqa = |subgroups| vec_plan_heads((64, 8, 1), 2100, subgroups, 49152);
    assert_eq!(mqa(true), ((128, 8, 2, true), 2));
    assert_eq!(mqa(false), ((128, 4, 1, false), 2));
}

/// The splits of Llama 8B's decode attention over `n_kv` keys (the partials' op word 9),
/// with or without `subgroups`.
fn splits(n_kv: u64, subgroups: bool) -> u32 {
    decode_plan((128, 32, 8), n_kv, subgroups, 49152)[0].op_words[9]
}

/// Split walks are cut in their own steps: 64 keys with 4 keys an octet, 32 with 2, at
/// least two steps a split and at most SPLIT_TARGET_GROUPS workgroups (8 head groups).
#[test]
fn split_walks_are_cut_in_their_own_steps() {
    assert_eq!(splits(4096, true), 32);
    assert_eq!(splits(8064, true), 126);
    assert_eq!(splits(32768, true), 128);
    // Without subgroups (16-key steps) they are cut in VEC_STEP units, two at least.
    assert_eq!(splits(8064, false), 63);
}

#[test]
fn short_caches_run_unsplit() {
    assert_eq!(planned(640).len(), 1);
    assert_eq!(planned(640)[0].key.wg, super::VEC_UNSPLIT_SHAPES[1].0);
    assert_eq!(planned(super::VEC_UNSPLIT_KV + 1)[0].key.wg, super::WG_VEC);
    assert_eq!(planned(super::VEC_UNSPLIT_KV).len(), 1);
    assert_eq!(planned(super::VEC_UNSPLIT_KV + 1).len(), 2);
    assert_eq!(planned(32768).len(), 2);
}

#[test]
fn short_caches_take_fewer_heads_a_workgroup() {
    assert_eq!(vec_heads(640), 1);
    assert_eq!(vec_heads(super::VEC_UNSPLIT_KV), 1);
    assert_eq!(vec_heads(super::VEC_UNSPLIT_KV + 1), 2);
    assert_eq!(vec_heads(2048), 2);
    assert_eq!(vec_heads(2049), 4);
    assert_eq!(vec_heads(32768), 4);
}
