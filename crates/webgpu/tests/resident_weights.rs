//! Resident weights (`WebGpuBackend::upload_weight`, `Graph::resident_weight`): uploaded in
//! pieces split at any byte, they compute bit for bit what the same weights uploaded from bytes
//! compute, through the same binding windows; a graph naming a weight that is missing,
//! incomplete or of another shape is refused when compiled (and by the CPU backend, which
//! needs host bytes).
//!
//! The binding limit is lowered to 4 KiB (as in `binding_windows.rs`) so the q4_0 matrix needs
//! two windows; the q8_0 table's 102 bytes end inside a word.

use bytes::Bytes;
use wgllm_core::{Backend, DType, Executable, Graph, TensorId};
use wgllm_cpu::CpuBackend;
use wgllm_webgpu::testing::{random_bytes, Rng};
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

const MAT: (DType, [u64; 4]) = (DType::Q4_0, [64, 130, 1, 1]);
const TABLE: (DType, [u64; 4]) = (DType::Q8_0, [32, 3, 1, 1]);

fn backend() -> WebGpuBackend {
    let config = WebGpuConfig {
        max_binding_bytes: Some(4096),
        ..WebGpuConfig::default()
    };
    WebGpuBackend::new(config).unwrap_or_else(|e| panic!("{e}"))
}

struct Model {
    mat: Vec<u8>,
    table: Vec<u8>,
    x: Vec<u8>,
    idx: Vec<u8>,
}

fn model() -> Model {
    let mut rng = Rng::new(3);
    let n = |ne: [u64; 4]| ne.iter().product();
    Model {
        mat: random_bytes(&mut rng, MAT.0, n(MAT.1), -1.0, 1.0).unwrap(),
        table: random_bytes(&mut rng, TABLE.0, n(TABLE.1), -1.0, 1.0).unwrap(),
        x: random_bytes(&mut rng, DType::F32, 64 * 3, -1.0, 1.0).unwrap(),
        idx: [2i32, 0, 1, 2]
            .iter()
            .flat_map(|i| i.to_le_bytes())
            .collect(),
    }
}

/// `mat · x` and `table[idx]`, with weights from bytes or (when `resident`) named resident.
fn graph(m: &Model, resident: bool) -> (Graph, [TensorId; 4]) {
    let mut g = Graph::new();
    let weight = |g: &mut Graph, name: &str, (dtype, ne): (DType, [u64; 4]), data: &[u8]| {
        if resident {
            g.resident_weight(name, dtype, ne).unwrap()
        } else {
            g.weight(name, dtype, ne, Bytes::copy_from_slice(data))
                .unwrap()
        }
    };
    let mat = weight(&mut g, "mat", MAT, &m.mat);
    let table = weight(&mut g, "table", TABLE, &m.table);
    let x = g.input("x", DType::F32, [64, 3, 1, 1]).unwrap();
    let idx = g.input("idx", DType::I32, [4, 1, 1, 1]).unwrap();
    let y = g.mul_mat(mat, x).unwrap();
    let rows = g.get_rows(table, idx).unwrap();
    g.mark_output(y).unwrap();
    g.mark_output(rows).unwrap();
    (g, [x, idx, y, rows])
}

fn run(gpu: &WebGpuBackend, m: &Model, resident: bool) -> (Vec<u8>, Vec<u8>) {
    let (g, [x, idx, y, rows]) = graph(m, resident);
    let mut exe = gpu.compile_webgpu(&g).unwrap_or_else(|e| panic!("{e}"));
    exe.run(&[(x, &m.x), (idx, &m.idx)]).unwrap();
    (exe.read(y).unwrap(), exe.read(rows).unwrap())
}

/// Uploads `data` as `name` in pieces of the sizes `sizes` cycles through.
fn upload(
    gpu: &WebGpuBackend,
    name: &str,
    (dtype, ne): (DType, [u64; 4]),
    data: &[u8],
    sizes: &[usize],
) {
    let mut at = 0;
    for &n in sizes.iter().cycle() {
        if at == data.len() {
            break;
        }
        let end = (at + n).min(data.len());
        gpu.upload_weight(name, dtype, ne, at as u64, &data[at..end])
            .unwrap_or_else(|e| panic!("{e}"));
        at = end;
    }
}

#[test]
fn resident_weights_uploaded_in_pieces_compute_what_bytes_compute() {
    let gpu = backend();
    let m = model();
    let want = run(&gpu, &m, false);
    for sizes in [&[1usize][..], &[3, 1, 2, 7, 5], &[13, 4, 1], &[100_000]] {
        upload(&gpu, "mat", MAT, &m.mat, sizes);
        upload(&gpu, "table", TABLE, &m.table, sizes);
        assert_eq!(run(&gpu, &m, true), want, "pieces of {sizes:?}");
    }
    let (count, bytes) = gpu.resident_weights();
    assert_eq!(count, 2);
    // Each buffer: the data, a word of decoder slack, padded to a word.
    let span = |len: usize| (len as u64 + 4).div_ceil(4) * 4;
    assert_eq!(bytes, span(m.mat.len()) + span(m.table.len()));

    // Counted once in the memory reports of executables compiled together.
    let (g, _) = graph(&m, true);
    let exes = gpu.compile_shared_webgpu(&[&g, &g]).unwrap();
    let weights: Vec<u64> = exes.iter().map(|e| e.memory_report().weights).collect();
    assert_eq!(weights, [bytes, 0]);

    // A compiled executable keeps its weights when the backend forgets them.
    let (g, [x, idx, y, _]) = graph(&m, true);
    let mut exe = gpu.compile_webgpu(&g).unwrap();
    gpu.drop_resident_weights();
    assert_eq!(gpu.resident_weights(), (0, 0));
    exe.run(&[(x, &m.x), (idx, &m.idx)]).unwrap();
    assert_eq!(exe.read(y).unwrap(), want.0);
}

#[track_caller]
fn compile_error(gpu: &WebGpuBackend, m: &Model) -> String {
    match gpu.compile_webgpu(&graph(m, true).0) {
        Ok(_) => panic!("compiled"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_incomplete_or_mismatched_resident_weights_are_refused() {
    let gpu = backend();
    let m = model();
    upload(&gpu, "table", TABLE, &m.table, &[1000]);
    let e = compile_error(&gpu, &m);
    assert!(
        e.contains("weight 'mat' names resident weight 'mat', which was not uploaded"),
        "{e}"
    );

    upload(&gpu, "mat", MAT, &m.mat[..1000], &[999]);
    let e = compile_error(&gpu, &m);
    assert!(e.contains("only 1000 of the 4680 bytes"), "{e}");

    let (dtype, ne) = MAT;
    upload(
        &gpu,
        "mat",
        (DType::Q8_0, ne),
        &vec![0; 64 / 32 * 34 * 130],
        &[4096],
    );
    let e = compile_error(&gpu, &m);
    assert!(
        e.contains(
            "weight 'mat' is q4_0 [64, 130, 1, 1] in the graph, but resident weight 'mat' is q8_0"
        ),
        "{e}"
    );

    // Pieces out of order, of another shape, past the end, or continuing nothing.
    gpu.upload_weight("mat", dtype, ne, 0, &m.mat[..10])
        .unwrap();
    let e = gpu
        .upload_weight("mat", dtype, ne, 12, &m.mat[12..20])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("a piece at byte 12, but 10 bytes were uploaded"),
        "{e}"
    );
    let e = gpu
        .upload_weight("mat", DType::F32, ne, 10, &m.mat[10..20])
        .unwrap_err();
    assert!(e.to_string().contains("a piece of f32"), "{e}");
    let e = gpu
        .upload_weight("mat", dtype, ne, 10, &vec![0; 4680])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("reaching byte 4690 of a 4680-byte tensor"),
        "{e}"
    );
    let e = gpu
        .upload_weight("other", dtype, ne, 8, &[0; 8])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("a piece at byte 8 before the piece at byte 0"),
        "{e}"
    );

    // The CPU backend computes from host bytes, which a resident weight does not have.
    let e = CpuBackend.compile(&graph(&m, true).0).err().unwrap();
    assert!(
        e.to_string()
            .contains("weight 'mat' is resident on a device"),
        "{e}"
    );

    // Completed, the same graph compiles.
    upload(&gpu, "mat", MAT, &m.mat, &[777]);
    assert_eq!(run(&gpu, &m, true), run(&gpu, &m, false));
}

#[test]
fn the_counters_follow_weights_buffers_and_kernels() {
    let gpu = backend();
    let m = model();
    let c = gpu.counters();
    assert_eq!((c.weight_bytes(), c.kernels()), (0, 0));
    let both = (m.mat.len() + m.table.len()) as u64;
    // From bytes: the weights are written as the graph compiles.
    let _ = run(&gpu, &m, false);
    assert_eq!(c.weight_bytes(), both);
    let kernels = c.kernels();
    assert!(kernels >= 2, "{kernels}");
    assert!(c.allocated_bytes() >= both);
    // Resident: written as uploaded; compiling again compiles no kernel twice.
    upload(&gpu, "mat", MAT, &m.mat, &[7, 100]);
    upload(&gpu, "table", TABLE, &m.table, &[5]);
    assert_eq!(c.weight_bytes(), 2 * both);
    let _ = run(&gpu, &m, true);
    assert_eq!((c.weight_bytes(), c.kernels()), (2 * both, kernels));
}
