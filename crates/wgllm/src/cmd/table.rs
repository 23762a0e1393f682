//! Plain-text tables of aligned columns, as `wgllm info` and `wgllm list` print them.

use std::io::{self, Write};

/// Writes `head` and `rows` in columns two spaces apart, each line after `indent`; a column is
/// right-aligned where `right` says so, and the last column is not padded.
pub fn write(
    out: &mut impl Write,
    indent: &str,
    head: &[&str],
    right: &[bool],
    rows: &[Vec<String>],
) -> io::Result<()> {
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (wi, c) in w.iter_mut().zip(r) {
            *wi = (*wi).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(
                |(i, c)| match (i == last, right.get(i).copied().unwrap_or(false)) {
                    (_, true) => format!("{c:>0$}", w[i]),
                    (true, false) => c.to_string(),
                    (false, false) => format!("{c:<0$}", w[i]),
                },
            )
            .collect();
        format!("{indent}{}", parts.join("  "))
    };
    writeln!(out, "{}", line(head.to_vec()))?;
    for r in rows {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}
