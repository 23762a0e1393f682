//! `wgllm ops --support`: the op table run on a backend and summarized as a Markdown support
//! matrix (`docs/ops.md`), one row per op and the type of its first operand, as ggml's
//! `test-backend-ops support` writes its `docs/ops.md`. The output holds no timings, so the same
//! adapter writes the same file.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Result};
use wgllm_core::DType;
use wgllm_cpu::CpuBackend;
use wgllm_webgpu::testing::{cases, run_case, Case, Outcome};

use super::backend::OpenedBackend;

/// Outcomes of the cases of one (op, type) row.
#[derive(Default)]
struct Row {
    passed: usize,
    unsupported: usize,
    failed: usize,
}

/// The row a case counts in: its op and the first type its name gives (`-` when none does).
fn row_key(case: &Case) -> (String, String) {
    let ty = case
        .name
        .split_whitespace()
        .find_map(|w| DType::from_name(w.trim_end_matches(',')))
        .map_or("-", DType::name);
    (case.op.to_string(), ty.to_string())
}

/// Runs every case (those `filter` names, case-insensitive) on `opened` against the CPU
/// reference and writes the matrix; fails when a case failed.
pub fn run(
    opened: &OpenedBackend,
    desc: &str,
    filter: Option<&str>,
    seed: u64,
    out: &mut impl Write,
) -> Result<()> {
    let filter = filter.map(str::to_lowercase);
    let mut rows: BTreeMap<(String, String), Row> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in cases().iter() {
        if filter
            .as_ref()
            .is_some_and(|f| !case.name.to_lowercase().contains(f))
        {
            continue;
        }
        let row = rows.entry(row_key(case)).or_default();
        match run_case(&CpuBackend, opened.as_dyn(), case, seed).outcome {
            Outcome::Pass { .. } => row.passed += 1,
            Outcome::Unsupported(_) => row.unsupported += 1,
            other => {
                row.failed += 1;
                failures.push(format!("{}: {other:?}", case.name));
            }
        }
    }
    writeln!(out, "# Op support\n")?;
    writeln!(
        out,
        "Written by `wgllm ops --support` (do not edit): every case of the op table run on\n\
         {desc}\nand compared with the CPU reference backend, which runs every case. A row is an \
         op and the\ntype of its first operand; ✅ every case passed, 🟡 some are unsupported \
         on this adapter,\n❌ none ran. `wgllm ops` prints the cases themselves.\n"
    )?;
    if let OpenedBackend::WebGpu(g) = opened {
        let c = g.capabilities();
        let yes = |b: bool| if b { "yes" } else { "no" };
        writeln!(
            out,
            "Adapter features: shader-f16 {}, subgroups {}, cooperative matrices {}.\n",
            yes(c.shader_f16),
            yes(c.subgroups),
            yes(c.cooperative_matrix)
        )?;
    }
    writeln!(out, "| op | type | cases | supported |")?;
    writeln!(out, "| --- | --- | ---: | :---: |")?;
    for ((op, ty), r) in &rows {
        let ran = r.passed + r.failed;
        let mark = match (ran, r.unsupported) {
            (0, _) => "❌".to_string(),
            (_, 0) => "✅".to_string(),
            (_, u) => format!("🟡 {u} unsupported"),
        };
        let cases = r.passed + r.unsupported + r.failed;
        writeln!(out, "| {op} | {ty} | {cases} | {mark} |")?;
    }
    if !failures.is_empty() {
        bail!(
            "{} op cases failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}
