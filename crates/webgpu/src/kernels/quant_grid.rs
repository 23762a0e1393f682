//! The codebooks of the IQ formats (`quant_grid.wgsl`), their grids emitted from
//! `wgllm_core::quant::iq_grid` at template time, never copied by hand.

use wgllm_core::quant::iq_grid;
use wgllm_core::DType;

const QUANT_GRID: &str = include_str!("quant_grid.wgsl");

/// Words per codebook table (see [`grid_source`]).
const GRID_CHUNK: usize = 64;

/// For a codebook format, its grid in WGSL: `GRID_LEVELS`, the distinct values, and `GRID`, every
/// row as 16 bits of level indices (`16 / width` bits per value, lowest first, as ggml's packed
/// grids), two rows to a word; then an accessor and the codebook decoders. Empty for every other
/// dtype. Packed rows and chunks of [`GRID_CHUNK`] words keep each table small: lavapipe's
/// compiler spends time superlinear in the size of a dynamically indexed array (a 1024-word
/// table took 14 s to compile, sixteen 64-word ones under 3 s).
pub(super) fn grid_source(dtype: DType) -> Result<String, String> {
    let Some((width, values)) = iq_grid(dtype) else {
        return Ok(String::new());
    };
    let mut levels: Vec<u8> = values.clone();
    levels.sort_by_key(|&v| v as i8);
    levels.dedup();
    let bits = 16 / width;
    if levels.len() > 1 << bits || values.len() % (2 * width) != 0 {
        return Err(format!("{dtype} grid does not pack into 16-bit rows"));
    }
    let index = |v: u8| levels.iter().position(|&l| l == v).unwrap_or(0) as u32;
    let rows: Vec<u32> = values
        .chunks(width)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold(0, |w, (i, &v)| w | index(v) << (bits * i))
        })
        .collect();
    let words: Vec<String> = rows
        .chunks(2)
        .map(|p| format!("0x{:08x}u", p[0] | p[1] << 16))
        .collect();
    let level_list: Vec<String> = levels.iter().map(|&l| format!("{l}u")).collect();
    let mut out = format!(
        "// {dtype} codebook: {} rows of {width} values.\n\
         var<private> GRID_LEVELS: array<u32, {n}> = array<u32, {n}>({});\n\n",
        rows.len(),
        level_list.join(", "),
        n = levels.len(),
    );
    let mut select = String::new();
    for (c, chunk) in words.chunks(GRID_CHUNK).enumerate() {
        out.push_str(&format!(
            "var<private> GRID{c}: array<u32, {m}> = array<u32, {m}>(\n",
            m = chunk.len()
        ));
        for line in chunk.chunks(8) {
            out.push_str("    ");
            out.push_str(&line.join(", "));
            out.push_str(",\n");
        }
        out.push_str(");\n");
        select.push_str(&format!(
            "        case {c}u: {{ return GRID{c}[w % {GRID_CHUNK}u]; }}\n"
        ));
    }
    out.push_str(&format!(
        "\nfn grid_word(w: u32) -> u32 {{\n    switch w / {GRID_CHUNK}u {{\n{select}        \
         default: {{ return 0u; }}\n    }}\n}}\n\n\
         // Value i of grid row r, as a byte.\nfn grid_byte(r: u32, i: u32) -> u32 {{\n    \
         let row = (grid_word(r >> 1u) >> ((r & 1u) * 16u)) & 0xffffu;\n    \
         return GRID_LEVELS[(row >> ({bits}u * i)) & {mask}u];\n}}\n\n",
        mask = (1u32 << bits) - 1
    ));
    out.push_str(QUANT_GRID);
    Ok(out)
}
