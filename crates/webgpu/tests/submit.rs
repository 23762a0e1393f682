//! Queued runs (`Executable::submit` / `finish`): several runs in flight, inputs fed on the
//! device from the previous run's outputs, and the same results as the CPU backend's blocking
//! provided methods.

use wgllm_core::{Backend, DType, Executable, Graph, TensorId};
use wgllm_cpu::CpuBackend;
use wgllm_webgpu::{WebGpuBackend, WebGpuConfig};

/// `tok` (i32 [1]) picks a row of a table; `next` = argmax(row · 1 + bias) is the next token,
/// as a decode step's head does; `sum` is the picked row's sum. `bias` is an f32 input.
struct Chain {
    graph: Graph,
    tok: TensorId,
    bias: TensorId,
    next: TensorId,
    sum: TensorId,
}

fn chain() -> Chain {
    let mut g = Graph::new();
    let n = 16u64;
    // Row r is a bump at (5 r + 3) mod n, so argmax walks 0 → 3 → 2 → 13 → ...
    let table: Vec<u8> = (0..n * n)
        .flat_map(|i| {
            let (r, c) = (i / n, i % n);
            let v = if c == (5 * r + 3) % n {
                10.0f32
            } else {
                c as f32 * 0.01
            };
            v.to_le_bytes()
        })
        .collect();
    let table = g
        .weight("table", DType::F32, [n, n, 1, 1], table.into())
        .unwrap();
    let tok = g.input("tok", DType::I32, [1, 1, 1, 1]).unwrap();
    let bias = g.input("bias", DType::F32, [n, 1, 1, 1]).unwrap();
    let row = g.get_rows(table, tok).unwrap();
    let row = g.reshape(row, [n, 1, 1, 1]).unwrap();
    let logits = g.add(row, bias).unwrap();
    let next = g.argmax(logits).unwrap();
    let sum = g.sum_rows(logits).unwrap();
    g.mark_output(next).unwrap();
    g.mark_output(sum).unwrap();
    Chain {
        graph: g,
        tok,
        bias,
        next,
        sum,
    }
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn zeros() -> Vec<u8> {
    vec![0u8; 16 * 4]
}

/// Queues five runs, each fed the last one's argmax, before finishing any; returns
/// (argmax, sum bytes) per run.
fn five_in_flight(exe: &mut dyn Executable, c: &Chain) -> Vec<(Vec<i32>, Vec<u8>)> {
    let bias = zeros();
    let first = 0i32.to_le_bytes();
    let mut tickets = vec![exe
        .submit(&[(c.tok, &first), (c.bias, &bias)], &[], &[c.next, c.sum])
        .unwrap()];
    for _ in 0..4 {
        let t = exe
            .submit(&[(c.bias, &bias)], &[(c.tok, c.next)], &[c.next, c.sum])
            .unwrap();
        tickets.push(t);
    }
    tickets
        .into_iter()
        .map(|t| {
            let out = pollster::block_on(exe.finish(t)).unwrap();
            (i32s(&out[0]), out[1].clone())
        })
        .collect()
}

#[test]
fn runs_fed_on_the_device_match_the_cpu_and_the_expected_walk() {
    let c = chain();
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut g = gpu.compile(&c.graph).unwrap();
    let mut cpu = CpuBackend.compile(&c.graph).unwrap();
    let on_gpu = five_in_flight(g.as_mut(), &c);
    let on_cpu = five_in_flight(cpu.as_mut(), &c);
    let walk = |runs: &[(Vec<i32>, Vec<u8>)]| runs.iter().map(|r| r.0[0]).collect::<Vec<_>>();
    assert_eq!(walk(&on_gpu), [3, 2, 13, 4, 7]);
    assert_eq!(walk(&on_cpu), walk(&on_gpu));
    // Each run's sum is of the row its fed token picked (summed in another order on the GPU).
    let f32_of = |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap());
    for (g, c) in on_gpu.iter().zip(&on_cpu) {
        let (g, c) = (f32_of(&g.1), f32_of(&c.1));
        assert!(
            (g - c).abs() <= 1e-5 * c.abs(),
            "sum {g} on the GPU, {c} on the CPU"
        );
    }
}

#[test]
fn tickets_finish_in_any_order() {
    let c = chain();
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut exe = gpu.compile(&c.graph).unwrap();
    let bias = zeros();
    let toks: Vec<[u8; 4]> = [1i32, 6, 2].iter().map(|t| t.to_le_bytes()).collect();
    let tickets: Vec<_> = toks
        .iter()
        .map(|t| {
            exe.submit(&[(c.tok, t), (c.bias, &bias)], &[], &[c.next])
                .unwrap()
        })
        .collect();
    let mut got = Vec::new();
    for t in tickets.into_iter().rev() {
        got.push(i32s(&pollster::block_on(exe.finish(t)).unwrap()[0])[0]);
    }
    // Row r's bump is at (5 r + 3) mod 16.
    assert_eq!(got, [13, 1, 8]);
    // A ticket is redeemed once.
    let t = exe
        .submit(&[(c.tok, &toks[0]), (c.bias, &bias)], &[], &[c.next])
        .unwrap();
    let other = wgllm_core::backend::Ticket::pending(t.id() + 100);
    let err = pollster::block_on(exe.finish(other)).unwrap_err();
    assert!(
        err.to_string().contains("not made by this executable"),
        "{err}"
    );
    pollster::block_on(exe.finish(t)).unwrap();
}

#[test]
fn bad_feeds_and_missing_inputs_are_errors() {
    let c = chain();
    let gpu = WebGpuBackend::new(WebGpuConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut exe = gpu.compile(&c.graph).unwrap();
    let bias = zeros();
    // Bias (16 floats) is not the size of the argmax (one i32).
    let err = exe
        .submit(&[(c.tok, &[0; 4])], &[(c.bias, c.next)], &[c.next])
        .unwrap_err();
    assert!(err.to_string().contains("same size"), "{err}");
    // Feeding a non-input.
    let err = exe
        .submit(
            &[(c.tok, &[0; 4]), (c.bias, &bias)],
            &[(c.sum, c.next)],
            &[],
        )
        .unwrap_err();
    assert!(err.to_string().contains("is not an input"), "{err}");
    // The token neither given nor fed.
    let err = exe.submit(&[(c.bias, &bias)], &[], &[c.next]).unwrap_err();
    assert!(err.to_string().contains("was not given"), "{err}");
}
