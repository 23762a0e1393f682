//! A subset of the WebGPU op table (`wgllm_webgpu::testing`) run against the CPU reference, with
//! awaited readbacks so it runs in the browser exactly as `wgllm ops` runs natively.

use wgllm_core::Backend;
use wgllm_cpu::CpuBackend;
use wgllm_webgpu::testing::{cases, run_case_async, CaseResult, Outcome};

/// The ops the browser tests and the page's self-check run: every op a llama/qwen/gemma step
/// graph uses, at the op table's small shapes.
pub const MODEL_OPS: &[&str] = &[
    "ADD",
    "MUL",
    "SCALE",
    "RMS_NORM",
    "ROPE",
    "SOFT_MAX",
    "GET_ROWS",
    "SET_ROWS",
    "CPY",
    "MUL_MAT",
    "GLU",
    "FLASH_ATTN_EXT",
    "ARGMAX",
];

/// Counts of one op-table run, and a line per case that neither passed nor was unsupported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpSummary {
    pub passed: usize,
    pub unsupported: usize,
    /// `"<case>: <why>"` for every failed or erroring case.
    pub problems: Vec<String>,
}

/// Runs every case whose op is one of `ops` (all when empty) and whose name contains `filter`,
/// on `backend` against the CPU reference; `on_case` sees each result as it comes.
pub async fn run_ops(
    backend: &dyn Backend,
    ops: &[&str],
    filter: &str,
    mut on_case: impl FnMut(&CaseResult),
) -> OpSummary {
    let mut summary = OpSummary::default();
    let chosen = cases()
        .into_iter()
        .filter(|c| (ops.is_empty() || ops.contains(&c.op)) && c.name.contains(filter));
    for case in chosen {
        let r = run_case_async(&CpuBackend, backend, &case, 7000).await;
        on_case(&r);
        match &r.outcome {
            Outcome::Pass { .. } => summary.passed += 1,
            Outcome::Unsupported(_) => summary.unsupported += 1,
            Outcome::Fail { nmse, max_nmse } => summary
                .problems
                .push(format!("{}: NMSE {nmse:e} > {max_nmse:e}", r.name)),
            Outcome::Error(e) => summary.problems.push(format!("{}: {e}", r.name)),
        }
    }
    summary
}
