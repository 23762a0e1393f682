//! The preprocessor every kernel source goes through: `#unroll` blocks, `#if` / `#else` /
//! `#endif` line blocks and `{{NAME}}` placeholders, and the [`Spec`] a family's configuration
//! fills for it.

/// What a family's configuration sets: the `#if` flags and `{{NAME}}` values of its variant,
/// and which shared helpers its body needs.
#[derive(Default)]
pub(super) struct Spec {
    pub flags: Vec<&'static str>,
    pub vars: Vec<(&'static str, String)>,
    /// `activations.wgsl` (the expressions of unary maps and GLUs).
    pub activations: bool,
    /// `rope_angle.wgsl`.
    pub rope: bool,
    /// The weight part decoders `quant_unit.wgsl` and `quant_part.wgsl`.
    pub units: bool,
    /// `mul_mat_routes.wgsl` (expert-routed columns).
    pub routes: bool,
    /// `flash_attn_range.wgsl` (the key range of a block of query rows).
    pub range: bool,
    /// `wg_reduce.wgsl` (workgroup reductions).
    pub wg_reduce: bool,
    /// Sources appended after the body (attention's K/V readers).
    pub readers: String,
}

impl Spec {
    pub fn flag(&mut self, name: &'static str) {
        self.flags.push(name);
    }

    /// Sets each flag whose switch is on.
    pub fn flags_if(&mut self, switches: &[(bool, &'static str)]) {
        self.flags
            .extend(switches.iter().filter(|s| s.0).map(|s| s.1));
    }

    pub fn var(&mut self, name: &'static str, value: impl ToString) {
        self.vars.push((name, value.to_string()));
    }
}

/// Expands `#unroll NAME COUNT` … `#endunroll` line blocks: the block repeated COUNT times (a
/// number, or a `vars` name whose value is one), with `$NAME` replaced by 0, 1, … in each copy;
/// blocks nest. WGSL has no unroll attribute, and drivers leave loops over private arrays rolled
/// often enough that such arrays go to slow local memory: kernels unroll by hand with this.
fn unroll(src: &str, vars: &[(&str, String)]) -> Result<String, String> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < lines.len() {
        let Some(spec) = lines[i].trim_start().strip_prefix("#unroll ") else {
            if lines[i].trim_start().starts_with("#endunroll") {
                return Err("#endunroll without #unroll".into());
            }
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
            continue;
        };
        let mut words = spec.split_whitespace();
        let (Some(name), Some(count), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!("malformed '#unroll {spec}' (want NAME COUNT)"));
        };
        let count: usize = match vars.iter().find(|(n, _)| *n == count) {
            Some((_, v)) => v.parse(),
            None => count.parse(),
        }
        .map_err(|_| format!("'#unroll {spec}': COUNT is not a number"))?;
        let (mut depth, mut end) = (1, i + 1);
        while end < lines.len() {
            let t = lines[end].trim_start();
            if t.starts_with("#unroll ") {
                depth += 1;
            } else if t.starts_with("#endunroll") {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            end += 1;
        }
        if depth != 0 {
            return Err(format!("'#unroll {spec}' without #endunroll"));
        }
        let body = unroll(&lines[i + 1..end].join("\n"), vars)?;
        for k in 0..count {
            out.push_str(&body.replace(&format!("${name}"), &k.to_string()));
        }
        i = end + 1;
    }
    Ok(out)
}

/// Expands `#unroll` blocks ([`unroll`]), keeps or drops `#if NAME` / `#else` / `#endif` line
/// blocks (NAME is set when it is among `flags`), then substitutes every `{{NAME}}` of `vars`.
/// Fails on unbalanced blocks, a placeholder left unset, or a flag that no `#if` names (a
/// misspelt flag would otherwise take every `#else` branch unseen).
pub(crate) fn specialize(
    src: &str,
    flags: &[&str],
    vars: &[(&str, String)],
) -> Result<String, String> {
    let src = &unroll(src, vars)?;
    if let Some(f) = flags.iter().find(|f| !names_flag(src, f)) {
        return Err(format!("the flag {f} is named by no #if of the source"));
    }
    let mut out = String::with_capacity(src.len());
    // For each open block: (this branch is kept, the enclosing context is kept).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let active = |stack: &[(bool, bool)]| stack.last().is_none_or(|&(on, outer)| on && outer);
    for line in src.lines() {
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("#if ") {
            let outer = active(&stack);
            stack.push((flags.contains(&name.trim()), outer));
        } else if t.starts_with("#else") {
            let top = stack.last_mut().ok_or("#else without #if")?;
            top.0 = !top.0;
        } else if t.starts_with("#endif") {
            stack.pop().ok_or("#endif without #if")?;
        } else if active(&stack) {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !stack.is_empty() {
        return Err("#if without #endif".into());
    }
    for (name, value) in vars {
        out = out.replace(&format!("{{{{{name}}}}}"), value);
    }
    match out.find("{{") {
        Some(i) => Err(format!(
            "unset placeholder {}",
            out[i..].split("}}").next().unwrap_or("")
        )),
        None => Ok(out),
    }
}

/// Whether an `#if FLAG` line of `src` names `flag`.
pub(super) fn names_flag(src: &str, flag: &str) -> bool {
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix("#if "))
        .any(|name| name.trim() == flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_nest_and_placeholders_must_be_set() {
        let src = "a\n#if X\nb {{V}}\n#if Y\nc\n#else\nd\n#endif\n#else\ne\n#endif\nf\n";
        let v = vec![("V", "1".to_string())];
        assert_eq!(specialize(src, &["X"], &v).unwrap(), "a\nb 1\nd\nf\n");
        assert_eq!(specialize(src, &["X", "Y"], &v).unwrap(), "a\nb 1\nc\nf\n");
        assert_eq!(specialize(src, &["Y"], &v).unwrap(), "a\ne\nf\n");
        assert!(specialize(src, &["X"], &[]).unwrap_err().contains("{{V"));
        assert!(specialize("#if X\n", &[], &[]).is_err());
        assert!(specialize(src, &["X", "Z"], &v).unwrap_err().contains("Z"));
        assert!(specialize("#endif\n", &[], &[]).is_err());
    }

    #[test]
    fn unroll_repeats_blocks_with_their_index() {
        let v = [("N", "2".to_string())];
        let src = "a\n#unroll r N\n#unroll c 3\nx_$r_$c\n#endunroll\ny$r\n#endunroll\nb\n";
        assert_eq!(
            specialize(src, &[], &v).unwrap(),
            "a\nx_0_0\nx_0_1\nx_0_2\ny0\nx_1_0\nx_1_1\nx_1_2\ny1\nb\n"
        );
        assert!(specialize("#unroll r 2\nx\n", &[], &[]).is_err());
        assert!(specialize("#endunroll\n", &[], &[]).is_err());
        assert!(specialize("#unroll r M\nx\n#endunroll\n", &[], &[]).is_err());
        assert!(specialize("#unroll r\nx\n#endunroll\n", &[], &[]).is_err());
    }
}
