//! Tests of the matmul planner: workgroup shapes, kernel choice, weight bindings.

use bytes::Bytes;
use wgllm_core::{DType, Graph};

use super::Capabilities;
use crate::kernels::{Kernel, VecEpilogue};

/// A device with cooperative matrices (16 × 16 × 16, f16 × f16 + f32) enabled or not,
/// subgroups of `sg` and `wg_bytes` of workgroup memory.
pub(crate) fn caps(coop: bool, sg: u32, wg_bytes: u32) -> Capabilities {
    let f16_16 = wgpu::CooperativeMatrixProperties {
        m_size: 16,
        n_size: 16,
        k_size: 16,
        ab_type: wgpu::CooperativeScalarType::F16,
        cr_type: wgpu::CooperativeScalarType::F32,
        saturating_accumulation: false,
    };
    Capabilities {
        shader_f16: true,
        subgroups: true,
        subgroup_min_size: sg,
        subgroup_max_size: sg,
        timestamp_query: false,
        timestamp_query_inside_passes: false,
        immediates: false,
        cooperative_matrix_offered: true,
        cooperative_matrix: coop,
        cooperative_matrix_failure: None,
        cooperative_matrix_configs: vec![f16_16],
        int8_activations: crate::Int8Activations::Off,
        cpu_shapes: false,
        limits: wgpu::Limits {
            max_compute_workgroup_storage_size: wg_bytes,
            ..wgpu::Limits::default()
        },
        binding_limit: 1 << 27,
    }
}

/// The kernel and the workgroup count of q4_0 [64, m] × f32 [64, n, batches].
fn planned(caps: &Capabilities, m: u64, n: u64, batches: u64) -> (Kernel, u32) {
    let d = plan(caps, m, n, batches);
    (d.key.kernel, d.groups.iter().product())
}

/// The dispatch of q4_0 [64, m] × f32 [64, n, batches].
fn plan(caps: &Capabilities, m: u64, n: u64, batches: u64) -> super::Dispatch {
    let mut g = Graph::new();
    let bytes = Bytes::from(vec![0u8; m as usize * 36]);
    let w = g.weight("w", DType::Q4_0, [64, m, 1, 1], bytes).unwrap();
    let x = g.input("x", DType::F32, [64, n, batches, 1]).unwrap();
    let r = g.mul_mat(w, x).unwrap();
    let mut d = super::super::plan_node(&g, r, caps).unwrap();
    assert_eq!(d.len(), 1);
    d.remove(0)
}

#[test]
fn int8_mat_vecs_give_short_rows_32_lanes_and_jobs_2_rows() {
    // Lanes a workgroup for rows of 64, 128 and 448 units with f32 activations and int8
    // ones in jobs of one and two units (one column, one weight, no norm, 8,192 rows).
    let lanes = |units, upj| super::vec_shape::vec_shape((units, upj), (8192, None), 1, 1, 0, 1).0;
    assert_eq!([64, 128, 448].map(|u| lanes(u, Some(1))), [32, 128, 256]);
    assert_eq!([64, 128, 448].map(|u| lanes(u, None)), [128, 128, 256]);
    assert_eq!([64, 128, 448].map(|u| lanes(u, Some(2))), [32, 64, 128]);
    // Rows a workgroup: up to 4 for units, 2 for jobs (and 2 for a rotated pair either way).
    let rows = |upj, min| super::vec_shape::vec_shape((128, upj), (8192, None), 1, 1, 0, min).1;
    assert_eq!([None, Some(1), Some(2)].map(|j| rows(j, 1)), [4, 4, 2]);
    assert_eq!([None, Some(1), Some(2)].map(|j| rows(j, 2)), [4, 4, 2]);
}

/// On a CPU adapter (`cpu_shapes`) a mat-vec takes one SIMD group of lanes (the adapter's
/// subgroup size, 4 to 8, else 8) and up to 8 rows while 64 workgroups remain, and a product of
/// more than 8 columns runs through it 8 columns a dispatch, each at its own columns of the
/// activations and the result; a GPU tiles that product.
#[test]
fn cpu_adapters_take_a_simd_group_of_lanes_and_prompts_through_the_mat_vec() {
    let cpu = |sg: u32| Capabilities {
        cpu_shapes: true,
        ..caps(false, sg, 16384)
    };
    let shape = |c: &Capabilities, m: u64| {
        let d = plan(c, m, 1, 1);
        match d.key.kernel {
            Kernel::MulMatVec { rpw, .. } => (d.key.wg, rpw, d.groups.iter().product::<u32>()),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(shape(&cpu(8), 1024), (8, 8, 128));
    assert_eq!(shape(&cpu(4), 1024), (4, 8, 128));
    assert_eq!(shape(&cpu(0), 100), (8, 1, 100));
    assert_eq!(shape(&cpu(8), 256), (8, 4, 64));
    // The GPU shape of the same product: 128 lanes.
    assert_eq!(shape(&caps(false, 32, 16384), 1024).0, 128);

    let mut g = Graph::new();
    let w = g
        .weight(
            "w",
            DType::Q4_0,
            [64, 300, 1, 1],
            vec![0u8; 300 * 36].into(),
        )
        .unwrap();
    let x = g.input("x", DType::F32, [64, 20, 1, 1]).unwrap();
    let r = g.mul_mat(w, x).unwrap();
    let d = super::super::plan_node(&g, r, &cpu(8)).unwrap();
    let chunks: Vec<(u32, u64, u64, u64)> = d
        .iter()
        .map(|d| match d.key.kernel {
            Kernel::MulMatVec { nc, .. } => {
                let (x, dst) = (&d.operands[1].layout, &d.operands[2].layout);
                (nc, x.ne[1], x.offset / x.nb[1], dst.offset / dst.nb[1])
            }
            ref other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(chunks, [(8, 8, 0, 0), (8, 8, 8, 8), (4, 4, 16, 16)]);
    let gpu = super::super::plan_node(&g, r, &caps(false, 32, 16384)).unwrap();
    assert!(matches!(gpu[0].key.kernel, Kernel::MulMatTiled { .. }));
}

/// q4_K's and q5_K's int8 mat-vecs bind their weights as vec4s when every row starts on 16
/// bytes, and only then; q6_K (210-byte blocks) and q4_0 never.
#[test]
fn q4_k_int8_weights_bind_as_vec4s_when_aligned() {
    let wv4 = |dtype: DType, k: u64, offset: u64| {
        let mut g = Graph::new();
        let rows = 64 + offset.div_ceil(dtype.row_bytes(k).unwrap());
        let bytes = Bytes::from(vec![
            0u8;
            dtype.row_bytes(k).unwrap() as usize * rows as usize
        ]);
        let w = g.weight("w", dtype, [k, rows, 1, 1], bytes).unwrap();
        let nb = g.node(w).layout.nb;
        let w = g.view(w, [k, 64, 1, 1], nb, offset).unwrap();
        let x = g.input("x", DType::F32, [k, 1, 1, 1]).unwrap();
        let r = g.mul_mat(w, x).unwrap();
        let mut c = caps(false, 32, 16384);
        c.int8_activations = crate::Int8Activations::All;
        let d = super::super::plan_node(&g, r, &c).unwrap();
        let q8x = |d: &super::Dispatch| matches!(d.key.kernel, Kernel::MulMatVec { q8x: true, .. });
        assert!(d.iter().any(q8x), "{dtype} takes int8 activations");
        d.iter()
            .any(|d| matches!(d.key.kernel, Kernel::MulMatVec { wv4: true, .. }))
    };
    assert!(wv4(DType::Q4_K, 256, 0));
    assert!(wv4(DType::Q4_K, 512, 288));
    // Rows of 144 bytes keep a 16-byte start; a view 8 bytes in does not.
    assert!(wv4(DType::Q4_K, 256, 144));
    assert!(!wv4(DType::Q4_K, 256, 8));
    assert!(wv4(DType::Q5_K, 256, 176));
    assert!(!wv4(DType::Q6_K, 256, 0));
    assert!(!wv4(DType::Q4_0, 256, 0));
}

/// `mul_mat_coop.wgsl` binds f16 weights as vec4<f16>: views whose rows start on 8-byte
/// boundaries take it, views 4 bytes in (a 2-value column offset) or with rows 68 bytes apart
/// take the tiled kernel; q4_0, read as words, takes it at a 2-byte offset (one block in).
/// (`coop_reads`' storage-alignment term cannot decide alone: the f32 activations already
/// need a multiple of 16.)
#[test]
fn coop_f16_weights_need_rows_on_8_bytes() {
    let kernel = |dtype: DType, col_offset: u64, row_stride: Option<u64>| {
        let mut g = Graph::new();
        let k = 64;
        let row = dtype.row_bytes(k).unwrap();
        let bytes = Bytes::from(vec![0u8; row as usize * 201]);
        let w = g.weight("w", dtype, [k, 201, 1, 1], bytes).unwrap();
        let mut nb = g.node(w).layout.nb;
        nb[1] = row_stride.unwrap_or(nb[1]);
        let w = g.view(w, [32, 180, 1, 1], nb, col_offset).unwrap();
        let x = g.input("x", DType::F32, [32, 33, 1, 1]).unwrap();
        let r = g.mul_mat(w, x).unwrap();
        let d = super::super::plan_node(&g, r, &caps(true, 32, 49152)).unwrap();
        d[0].key.kernel
    };
    let coop = Kernel::MulMatCoop {
        bn: 64,
        id: false,
        bias: false,
        res: false,
        act: None,
    };
    let tiled = Kernel::MulMatTiled { bm: 64, id: false };
    // f16 rows of 128 bytes: 0, 8 and 64 bytes in stay on 8 bytes; 4 and 68 do not.
    for (offset, want) in [
        (0, &coop),
        (8, &coop),
        (64, &coop),
        (4, &tiled),
        (68, &tiled),
    ] {
        assert_eq!(
            &kernel(DType::F16, offset, None),
            want,
            "f16 view {offset} bytes in"
        );
    }
    assert_eq!(kernel(DType::F16, 0, Some(136)), coop);
    assert_eq!(kernel(DType::F16, 0, Some(68)), tiled);
    assert_eq!(kernel(DType::Q4_0, 0, None), coop);
    assert_eq!(kernel(DType::Q4_0, 18, None), coop);
}

/// Every mat-vec pipeline's reduction fits WebGPU's default 16 KiB of workgroup memory
/// (a norm prologue's sum included), and a rotated q/k/v keeps its pairs together.
#[test]
fn mat_vec_reductions_fit_the_default_workgroup_memory() {
    let mut seen = 0;
    for key in super::keys() {
        let Kernel::MulMatVec {
            nc,
            rpw,
            epilogue,
            norm,
            ..
        } = key.kernel
        else {
            continue;
        };
        let nw = match epilogue {
            VecEpilogue::Glu { .. } | VecEpilogue::IdGlu { .. } => 2,
            _ => 1,
        };
        let bytes = 4 * (nw * rpw + u32::from(norm)) * nc * key.wg;
        assert!(bytes <= 16384, "{key:?}: {bytes} bytes of reduction");
        if let VecEpilogue::QkvRope { .. } = epilogue {
            assert!(rpw >= 2 && rpw % 2 == 0, "{key:?}");
        }
        seen += 1;
    }
    assert!(seen > 100, "only {seen} mat-vec keys");
}

/// The kernels of `wt` [k, m] × f32 [k, n] under the int8 policy `int8`: "round" (the
/// activations to int8), "q8x" (a mat-vec taking them), "mat-vec" (with f32 ones) or
/// "other".
fn int8_plan(
    int8: crate::Int8Activations,
    wt: DType,
    (k, m, n): (u64, u64, u64),
) -> Vec<&'static str> {
    let mut g = Graph::new();
    let bytes = Bytes::from(vec![0u8; (wt.row_bytes(k).unwrap() * m) as usize]);
    let w = g.weight("w", wt, [k, m, 1, 1], bytes).unwrap();
    let x = g.input("x", DType::F32, [k, n, 1, 1]).unwrap();
    let r = g.mul_mat(w, x).unwrap();
    let caps = Capabilities {
        int8_activations: int8,
        ..caps(false, 32, 49152)
    };
    let plan = super::super::plan_node(&g, r, &caps).unwrap();
    plan.iter()
        .map(|d| match d.key.kernel {
            Kernel::QuantAct { .. } => "round",
            Kernel::MulMatVec { q8x: true, .. } => "q8x",
            Kernel::MulMatVec { .. } => "mat-vec",
            _ => "other",
        })
        .collect()
}

/// `Large` rounds the activations of products of at least 4 MiB of integer weights but
/// q8_0's (one more dispatch), `All` of every one, `Off` of none; prefill never.
#[test]
fn int8_activations_follow_the_policy_and_the_weight_size() {
    use crate::Int8Activations::{All, Large, Off};
    let (int8, f32) = (vec!["round", "q8x"], vec!["mat-vec"]);
    // 4096 x 2048 q4_0 is 4.5 MiB, 4096 x 1024 2.25 MiB.
    assert_eq!(int8_plan(Large, DType::Q4_0, (4096, 2048, 1)), int8);
    assert_eq!(int8_plan(Large, DType::Q4_0, (4096, 2048, 8)), int8);
    assert_eq!(int8_plan(Large, DType::Q4_0, (4096, 1024, 1)), f32);
    assert_eq!(int8_plan(Large, DType::Q8_0, (4096, 2048, 1)), f32);
    assert_eq!(int8_plan(Large, DType::F16, (4096, 2048, 1)), f32);
    assert_eq!(int8_plan(All, DType::Q4_0, (64, 8, 1)), int8);
    assert_eq!(int8_plan(All, DType::Q8_0, (64, 8, 1)), int8);
    assert_eq!(int8_plan(Off, DType::Q4_0, (4096, 2048, 1)), f32);
    assert_eq!(int8_plan(All, DType::Q4_0, (4096, 2048, 16)), vec!["other"]);
}

#[test]
fn prefill_takes_cooperative_matrices_where_the_device_has_them() {
    let on = caps(true, 32, 49152);
    // Tiles of 128 rows: one of 128 × 64 for 100 rows and 33 columns, two for 200; 2 × 2 ×
    // 64 tiles of 128 × 128 are enough for the wide ones, 1 × 1 × 127 are not.
    assert_eq!(
        planned(&on, 100, 33, 1),
        (
            Kernel::MulMatCoop {
                bn: 64,
                id: false,
                bias: false,
                res: false,
                act: None
            },
            1
        )
    );
    assert_eq!(
        planned(&on, 200, 33, 1),
        (
            Kernel::MulMatCoop {
                bn: 64,
                id: false,
                bias: false,
                res: false,
                act: None
            },
            2
        )
    );
    assert_eq!(plan(&on, 200, 33, 1).key.wg, 128);
    assert_eq!(
        planned(&on, 130, 130, 64),
        (
            Kernel::MulMatCoop {
                bn: 128,
                id: false,
                bias: false,
                res: false,
                act: None
            },
            2 * 2 * 64
        )
    );
    assert_eq!(
        planned(&on, 128, 128, 127),
        (
            Kernel::MulMatCoop {
                bn: 64,
                id: false,
                bias: false,
                res: false,
                act: None
            },
            2 * 127
        )
    );
    // Tiles along n first (op word 6: their count) up to 8 of them, along m beyond.
    assert_eq!(plan(&on, 600, 512, 1).op_words[6], 8);
    assert_eq!(plan(&on, 15000, 512, 1).op_words[6], 4);
    assert_eq!(plan(&on, 600, 513, 1).op_words[6], 0);
    // Up to 8 columns the mat-vec, then the tiled kernel up to 15.
    assert!(matches!(
        planned(&on, 200, 8, 1).0,
        Kernel::MulMatVec { .. }
    ));
    assert_eq!(
        planned(&on, 200, 15, 1),
        (Kernel::MulMatTiled { bm: 64, id: false }, 4)
    );
    // Not enabled, other subgroup sizes, or too little workgroup memory for either tile
    // (128 × 64 takes 19,456 bytes).
    for c in [
        caps(false, 32, 49152),
        caps(true, 64, 49152),
        caps(true, 32, 19452),
    ] {
        assert_eq!(
            planned(&c, 200, 33, 1),
            (Kernel::MulMatTiled { bm: 64, id: false }, 4)
        );
    }
    // Memory for the 128 × 64 tiles only (128 × 128 takes 24,576 bytes).
    let narrow = caps(true, 32, 24572);
    assert_eq!(
        planned(&narrow, 130, 130, 64),
        (
            Kernel::MulMatCoop {
                bn: 64,
                id: false,
                bias: false,
                res: false,
                act: None
            },
            2 * 3 * 64
        )
    );
}

/// Without cooperative matrices, products of 128 tiles of 128 × 64 or more take those tiles
/// where the device has 24 KiB of workgroup memory; the rest take 64 × 64.
#[test]
fn tiled_products_take_128_row_tiles_when_there_are_enough() {
    let off = caps(false, 32, 32768);
    let tiled = |bm| Kernel::MulMatTiled { bm, id: false };
    // A 512-token prefill through 4,096 rows: 32 × 8 tiles of 128 rows.
    assert_eq!(planned(&off, 4096, 512, 1), (tiled(128), 32 * 8));
    assert_eq!(planned(&off, 130, 130, 64), (tiled(128), 2 * 3 * 64));
    // 126 tiles of 128 rows, or 16 KiB of workgroup memory: 64-row tiles.
    assert_eq!(planned(&off, 130, 64, 63), (tiled(64), 3 * 63));
    assert_eq!(planned(&off, 130, 64, 64), (tiled(128), 2 * 64));
    assert_eq!(
        planned(&caps(false, 32, 24572), 4096, 512, 1),
        (tiled(64), 64 * 8)
    );
}

/// Coop products with few output tiles over long rows split along k into scratch, and a
/// second dispatch adds the splits into the result.
#[test]
fn coop_products_with_few_tiles_split_along_k() {
    let on = caps(true, 32, 1 << 16);
    // (kernels, splits, workgroups of the product) of f16 [k, m] × f32 [k, n, batches].
    let plan = |k: u64, m: u64, n: u64, batches: u64| {
        let mut g = Graph::new();
        let bytes = Bytes::from(vec![0u8; (k * m * 2) as usize]);
        let w = g.weight("w", DType::F16, [k, m, 1, 1], bytes).unwrap();
        let x = g.input("x", DType::F32, [k, n, batches, 1]).unwrap();
        let r = g.mul_mat(w, x).unwrap();
        let d = super::super::plan_node(&g, r, &on).unwrap();
        // The profile counts the product's FLOPs once, on the product's dispatch.
        let flops: Vec<u64> = d
            .iter()
            .map(|d| crate::profile::DispatchInfo::new(d).flops)
            .collect();
        assert_eq!(flops[0], 2 * k * m * n * batches);
        assert!(flops[1..].iter().all(|&f| f == 0));
        let kernels: Vec<Kernel> = d.iter().map(|d| d.key.kernel).collect();
        let groups: u32 = d[0].groups.iter().product();
        (kernels, d[0].op_words[7], groups)
    };
    let split = |bn| {
        vec![
            Kernel::MulMatCoop {
                bn,
                id: false,
                bias: false,
                res: false,
                act: None,
            },
            Kernel::MulMatSplit,
        ]
    };
    // A 512-token prefill through q and o of a 4096-wide layer (128 tiles): 2 splits; k and
    // v's 1,024 rows (64 tiles of 128 × 64): 4; the down projection's rows of 14,336: 2.
    assert_eq!(plan(4096, 4096, 512, 1), (split(128), 2, 256));
    assert_eq!(plan(4096, 1024, 512, 1), (split(64), 4, 256));
    assert_eq!(plan(14336, 4096, 512, 1), (split(128), 2, 256));
    // Enough tiles (4096³, the gate and up projections), rows too short for 32 steps a split,
    // or batches: no split.
    let whole = |bn| {
        (
            vec![Kernel::MulMatCoop {
                bn,
                id: false,
                bias: false,
                res: false,
                act: None,
            }],
            0,
        )
    };
    let no_split = |p: (Vec<Kernel>, u32, u32)| (p.0, p.1);
    assert_eq!(no_split(plan(4096, 4096, 4096, 1)), whole(128));
    assert_eq!(no_split(plan(4096, 14336, 512, 1)), whole(128));
    assert_eq!(no_split(plan(1024, 4096, 512, 1)), whole(128));
    assert_eq!(no_split(plan(4096, 200, 40, 2)), whole(64));
    // Rows of 2,048 (64 steps) split in two at most, 3,072 (96 steps) in two too.
    assert_eq!(plan(2048, 200, 40, 1).1, 2);
    assert_eq!(plan(3072, 200, 40, 1).1, 2);
}

/// A graph of one mul_mat_id: `experts` zero weights of `dtype` [k, m], activations [k, 1,
/// tokens], ids [used, tokens]; and its result.
fn expert_product(
    dtype: DType,
    (k, m, experts): (u64, u64, u64),
    (used, tokens): (u64, u64),
) -> (Graph, wgllm_core::TensorId) {
    let mut g = Graph::new();
    let row = dtype.row_bytes(k).unwrap();
    let bytes = Bytes::from(vec![0u8; (row * m * experts) as usize]);
    let a = g
        .weight("experts", dtype, [k, m, experts, 1], bytes)
        .unwrap();
    let x = g.input("x", DType::F32, [k, 1, tokens, 1]).unwrap();
    let ids = g.input("ids", DType::I32, [used, tokens, 1, 1]).unwrap();
    let r = g.mul_mat_id(a, x, ids).unwrap();
    (g, r)
}

/// The kernels `g` plans, fusions applied, on a device without cooperative matrices.
pub(crate) fn planned_kernels(g: &Graph) -> Vec<Kernel> {
    let p = super::super::plan_graph(g, &caps(false, 32, 32768)).unwrap();
    p.dispatches.iter().map(|d| d.key.kernel).collect()
}

/// mul_mat_id takes the mat-vec's ID where mul_mat would (whole units, vec4 activations), one
/// workgroup column per (expert slot, token); rows of 33 keep the plain kernel.
#[test]
fn mul_mat_id_runs_the_mat_vec_per_expert_column() {
    let plan = |dtype: DType, k: u64| {
        let (g, r) = expert_product(dtype, (k, 64, 8), (2, 3));
        let p = super::super::plan_node(&g, r, &caps(false, 32, 32768)).unwrap();
        assert_eq!(p.len(), 1);
        (p[0].key.kernel, p[0].groups[2])
    };
    assert!(matches!(
        plan(DType::Q4_K, 256),
        (
            Kernel::MulMatVec {
                epilogue: VecEpilogue::Id,
                nc: 1,
                ..
            },
            6
        )
    ));
    assert!(matches!(
        plan(DType::F16, 64).0,
        Kernel::MulMatVec {
            epilogue: VecEpilogue::Id,
            ..
        }
    ));
    assert!(matches!(plan(DType::F32, 33).0, Kernel::MulMatId));
}

/// mul_mat_id rounds its activations to int8 as mul_mat does, by the bytes of the experts a
/// step reads: 8 of 128 experts of 768 × 2048 q4_K (Qwen3-30B-A3B's, 7 MB) for one token,
/// not 2 of them; the ids-addressed columns then read the rounded matrix's columns.
#[test]
fn mul_mat_id_rounds_activations_by_the_experts_read() {
    let plan = |used: u64, tokens: u64| {
        let (g, r) = expert_product(DType::Q4_K, (2048, 768, 128), (used, tokens));
        let mut c = caps(false, 32, 32768);
        c.int8_activations = crate::Int8Activations::Large;
        let p = super::super::plan_node(&g, r, &c).unwrap();
        let names: Vec<&str> = p
            .iter()
            .map(|d| match d.key.kernel {
                Kernel::QuantAct { .. } => "round",
                Kernel::MulMatVec { q8x: true, .. } => "q8x",
                _ => "f32",
            })
            .collect();
        (
            names,
            p.last().unwrap().op_words[5],
            p.last().unwrap().op_words[6],
        )
    };
    assert_eq!(plan(8, 1), (vec!["round", "q8x"], 1, 1));
    assert_eq!(plan(8, 4), (vec!["round", "q8x"], 1, 4));
    assert_eq!(plan(2, 1).0, vec!["f32"]);
}

/// mul_mat_id routes a prefill's columns by expert to the tiled kernels once they average 8
/// per expert: the coop kernel's 128 × 64 tiles where the device has cooperative matrices,
/// else the tiled kernel's 64 × 64. Workgroup z covers the experts and the bucket of ids
/// outside them, the tiles along n the tokens. Fewer columns stay on the mat-vec.
#[test]
fn mul_mat_id_routes_prefill_columns_to_the_tiled_kernels() {
    let plan = |coop: bool, tokens: u64| {
        let (g, r) = expert_product(DType::Q4_K, (256, 200, 16), (4, tokens));
        let p = super::super::plan_node(&g, r, &caps(coop, 32, 32768)).unwrap();
        p.iter()
            .map(|d| (d.key.kernel, d.groups))
            .collect::<Vec<_>>()
    };
    let route = (Kernel::MoeRoute, [17, 1, 1]);
    let coop = Kernel::MulMatCoop {
        bn: 64,
        id: true,
        bias: false,
        res: false,
        act: None,
    };
    assert_eq!(plan(true, 32), vec![route, (coop, [2, 1, 17])]);
    let tiled = Kernel::MulMatTiled { bm: 64, id: true };
    assert_eq!(plan(false, 100), vec![route, (tiled, [4 * 2, 1, 17])]);
    assert!(matches!(
        plan(true, 31).last(),
        Some((
            Kernel::MulMatVec {
                epilogue: VecEpilogue::Id,
                ..
            },
            _
        ))
    ));
}

/// A prefill product's bias add, and the residual add after it, plan into its coop dispatch;
/// a decode product keeps its bias add (the mat-vec fuses only a residual).
#[test]
fn coop_products_start_from_their_bias_and_residual() {
    let on = caps(true, 32, 49152);
    let kernels = |n: u64, bias: bool, res: bool| {
        let mut g = Graph::new();
        let w = Bytes::from(vec![0u8; 64 * 256 * 2]);
        let w = g.weight("w", DType::F16, [64, 256, 1, 1], w).unwrap();
        let b = Bytes::from(vec![0u8; 256 * 4]);
        let b = g.weight("b", DType::F32, [256, 1, 1, 1], b).unwrap();
        let x = g.input("x", DType::F32, [64, n, 1, 1]).unwrap();
        let r = g.input("r", DType::F32, [256, n, 1, 1]).unwrap();
        let mut y = g.mul_mat(w, x).unwrap();
        if bias {
            y = g.add(y, b).unwrap();
        }
        if res {
            y = g.add(r, y).unwrap();
        }
        g.mark_output(y).unwrap();
        let planned = super::super::plan_graph(&g, &on).unwrap();
        let kernels: Vec<Kernel> = planned.dispatches.iter().map(|d| d.key.kernel).collect();
        kernels
    };
    let coop = |bias, res| Kernel::MulMatCoop {
        bn: 64,
        id: false,
        bias,
        res,
        act: None,
    };
    assert_eq!(kernels(64, true, true), vec![coop(true, true)]);
    assert_eq!(kernels(64, true, false), vec![coop(true, false)]);
    assert_eq!(kernels(64, false, true), vec![coop(false, true)]);
    let ffn = {
        let mut g = Graph::new();
        let w = Bytes::from(vec![0u8; 64 * 256 * 2]);
        let w = g.weight("w", DType::F16, [64, 256, 1, 1], w).unwrap();
        let b = g.input("b", DType::F32, [256, 1, 1, 1]).unwrap();
        let x = g.input("x", DType::F32, [64, 64, 1, 1]).unwrap();
        let y = g.mul_mat(w, x).unwrap();
        let y = g.add(y, b).unwrap();
        let y = g.unary(y, wgllm_core::op::UnaryOp::Gelu).unwrap();
        g.mark_output(y).unwrap();
        super::super::plan_graph(&g, &on).unwrap().dispatches
    };
    assert_eq!(ffn.len(), 1);
    assert!(matches!(
        ffn[0].key.kernel,
        Kernel::MulMatCoop {
            bias: true,
            res: false,
            act: Some(_),
            ..
        }
    ));
    let decode = kernels(4, true, false);
    assert_eq!(decode.len(), 2);
    assert!(matches!(decode[0], Kernel::MulMatVec { .. }));
}
