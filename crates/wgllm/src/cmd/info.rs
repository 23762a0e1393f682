//! `wgllm info FILE`: what a GGUF file holds, readable at a glance.
//!
//! Prints the format version and layout, every metadata pair (arrays show their length, type and
//! first few elements; long strings are cut), a table of tensors, and totals per dtype.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use wgllm_core::DType;
use wgllm_gguf::{Array, GgufFile, Value};

/// Array elements shown before `…`.
const MAX_ITEMS: usize = 4;
/// Characters of a string shown before `…`.
const MAX_CHARS: usize = 64;

/// Arguments of `wgllm info`.
#[derive(clap::Args)]
pub struct Args {
    /// The .gguf file to describe.
    pub file: PathBuf,
}

/// Opens and validates the file, then prints its report.
pub fn run(args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.file)?;
    writeln!(out, "file: {}", args.file.display())?;
    report(&file, out)?;
    Ok(())
}

/// `s` quoted with Rust escapes, cut after [`MAX_CHARS`] characters.
fn quote(s: &str) -> String {
    match s.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}… ({} bytes)", &s[..cut], s.len()),
        None => format!("{s:?}"),
    }
}

/// One array as `[N × type] a, b, c, …`.
fn preview_array(a: &Array) -> String {
    let mut s = format!("[{} × {}]", a.len(), a.elem_type());
    let shown: Vec<String> = (0..a.len().min(MAX_ITEMS))
        .filter_map(|i| a.get(i))
        .map(|v| preview(&v))
        .collect();
    if !shown.is_empty() {
        s.push(' ');
        s.push_str(&shown.join(", "));
    }
    if a.len() > MAX_ITEMS {
        s.push_str(", …");
    }
    s
}

/// A value shortened for one line.
fn preview(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        Value::Array(a) => preview_array(a),
        scalar => scalar.to_string(),
    }
}

/// `n` with thousands separators: `98,362,432`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` bytes in binary units: `93.8 MiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Extents joined as `576 × 49152`, innermost (ne[0]) first.
fn shape(dims: &[u64]) -> String {
    dims.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" × ")
}

/// Tensors, parameters and bytes of one dtype.
#[derive(Default)]
struct Totals {
    tensors: u64,
    params: u64,
    bytes: u64,
}

/// Writes the report of an already-parsed file.
pub fn report(file: &GgufFile, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "GGUF v{}, {} bytes ({}), alignment {}, tensor data from offset {}",
        file.version(),
        grouped(file.file_len()),
        human_bytes(file.file_len()),
        file.alignment(),
        file.data_offset()
    )?;

    let meta = file.metadata();
    writeln!(out, "\nmetadata: {} keys", meta.len())?;
    let key_w = meta.keys().map(String::len).max().unwrap_or(0);
    for (k, v) in meta {
        let ty = match v {
            Value::Array(_) => "array".to_owned(),
            v => v.value_type().to_string(),
        };
        writeln!(out, "  {k:<key_w$}  {ty:<6}  {}", preview(v))?;
    }

    let tensors = file.tensors();
    writeln!(out, "\ntensors: {}", tensors.len())?;
    let rows: Vec<Vec<String>> = tensors
        .iter()
        .map(|t| {
            vec![
                t.name().to_owned(),
                t.dtype().to_string(),
                shape(t.shape()),
                grouped(t.size()),
                grouped(t.offset()),
            ]
        })
        .collect();
    let head = ["name", "dtype", "shape (ne0 first)", "bytes", "offset"];
    if !rows.is_empty() {
        let right = [false, false, false, true, true];
        super::table::write(out, "  ", &head, &right, &rows)?;
    }

    let mut by_dtype: BTreeMap<DType, Totals> = BTreeMap::new();
    let mut all = Totals::default();
    for t in tensors {
        for tot in [by_dtype.entry(t.dtype()).or_default(), &mut all] {
            tot.tensors += 1;
            tot.params += t.nelements();
            tot.bytes += t.size();
        }
    }
    writeln!(
        out,
        "\ntotal: {} tensors, {} parameters, {} bytes ({})",
        all.tensors,
        grouped(all.params),
        grouped(all.bytes),
        human_bytes(all.bytes)
    )?;
    for (dtype, tot) in &by_dtype {
        writeln!(
            out,
            "  {:<7} {:>5} tensors  {:>15} parameters  {:>15} bytes",
            dtype.name(),
            tot.tensors,
            grouped(tot.params),
            grouped(tot.bytes)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgllm_gguf::GgufWriter;

    #[test]
    fn numbers_are_grouped_and_sized() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(98_362_432), "98,362,432");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(98_362_432), "93.8 MiB");
    }

    #[test]
    fn long_values_are_abbreviated() {
        let tokens: Vec<String> = (0..151_936).map(|i| format!("t{i}")).collect();
        assert_eq!(
            preview(&Value::Array(Array::String(tokens))),
            r#"[151936 × string] "t0", "t1", "t2", "t3", …"#
        );
        assert_eq!(preview(&Value::Array(Array::U8(vec![]))), "[0 × u8]");
        assert_eq!(
            preview(&Value::Array(Array::Array(vec![Array::I32(vec![1, 2])]))),
            "[1 × array] [2 × i32] 1, 2"
        );
        let long = "é".repeat(100);
        assert_eq!(
            preview(&Value::String(long)),
            format!("{:?}… (200 bytes)", "é".repeat(64))
        );
        assert_eq!(preview(&Value::String("a\nb".into())), r#""a\nb""#);
        assert_eq!(preview(&Value::F32(0.5)), "0.5");
    }

    #[test]
    fn report_lists_metadata_tensors_and_totals() {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", Value::String("llama".into()))
            .unwrap()
            .add_tensor("a", DType::F32, &[2, 3], vec![0u8; 24])
            .unwrap()
            .add_tensor("b", DType::Q8_0, &[32], vec![0u8; 34])
            .unwrap();
        let file = GgufFile::from_bytes(w.to_vec().into()).unwrap();
        let mut out = Vec::new();
        report(&file, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("GGUF v3, "), "{text}");
        assert!(
            text.contains("general.architecture  string  \"llama\""),
            "{text}"
        );
        assert!(text.contains("  a     f32    2 × 3"), "{text}");
        assert!(
            text.contains("total: 2 tensors, 38 parameters, 58 bytes"),
            "{text}"
        );
        assert!(text.contains("  q8_0        1 tensors"), "{text}");
    }
}
