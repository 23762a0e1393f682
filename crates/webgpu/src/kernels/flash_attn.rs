//! Attention: `flash_attn.wgsl` (a workgroup per query row), `flash_attn_tile.wgsl` and
//! `flash_attn_coop.wgsl` (prefill, blocks of query rows), `flash_attn_vec.wgsl` (decode),
//! `flash_attn_combine.wgsl` (merging splits), with the K/V readers of `flash_attn_kv.wgsl`
//! and the key ranges of `flash_attn_range.wgsl`.

use wgllm_core::DType;

use super::specialize::{specialize, Spec};
use super::{Kernel, PipelineKey};

const FLASH_ATTN: &str = include_str!("flash_attn.wgsl");
const FLASH_ATTN_TILE: &str = include_str!("flash_attn_tile.wgsl");
const FLASH_ATTN_COOP: &str = include_str!("flash_attn_coop.wgsl");
pub(super) const FLASH_ATTN_RANGE: &str = include_str!("flash_attn_range.wgsl");
const FLASH_ATTN_KV: &str = include_str!("flash_attn_kv.wgsl");
const FLASH_ATTN_COMBINE: &str = include_str!("flash_attn_combine.wgsl");
const FLASH_ATTN_VEC: &str = include_str!("flash_attn_vec.wgsl");

/// Output columns per workgroup of `flash_attn_combine.wgsl`, and the most splits it merges.
pub(crate) const COMBINE_COLS: u32 = 32;
pub(crate) const COMBINE_MAX_SPLITS: u32 = 512;

/// The flags, placeholders and body of an attention variant.
pub(super) fn configure(key: &PipelineKey, spec: &mut Spec) -> Result<&'static str, String> {
    let wg = key.wg;
    Ok(match key.kernel {
        Kernel::FlashAttn {
            mask,
            sinks,
            d,
            dv,
            split,
        } => {
            spec.flags_if(&[(mask, "MASK"), (split, "SPLIT"), (sinks, "SINKS")]);
            spec.var("D", d);
            spec.var("DV", dv);
            spec.var("DVP", dv.div_ceil(wg));
            spec.readers = readers(&key.dtypes, "DOT")?;
            FLASH_ATTN
        }
        Kernel::FlashAttnTile { mask, sinks, d, dv } => {
            spec.flags_if(&[(mask, "MASK"), (sinks, "SINKS")]);
            let bq = wg / 4;
            if !(d.is_multiple_of(4) && dv.is_multiple_of(4) && bq.is_multiple_of(4) && bq > 0) {
                return Err(format!("flash_attn_tile: d = {d}, dv = {dv}, wg = {wg}"));
            }
            spec.var("D", d);
            spec.var("DV", dv);
            spec.var("BQ", bq);
            // Output vec4s an invocation keeps per row (the `#unroll` count).
            spec.var("NO", (dv / 4).div_ceil(8));
            spec.readers = readers(&key.dtypes, "ROWS")?;
            spec.range = true;
            FLASH_ATTN_TILE
        }
        Kernel::FlashAttnCoop { mask, sinks, d, dv } => {
            spec.flags_if(&[(mask, "MASK"), (sinks, "SINKS")]);
            if !(d.is_multiple_of(16) && dv.is_multiple_of(16) && dv <= 128 && wg == 128) {
                return Err(format!("flash_attn_coop: d = {d}, dv = {dv}, wg = {wg}"));
            }
            spec.var("D", d);
            spec.var("DV", dv);
            // q fragments and output accumulators per subgroup (`#unroll` counts).
            spec.var("NQ", d / 16);
            spec.var("NO", dv / 16);
            // K words (8 halves) an invocation loads a tile: 32 keys of d / 8 over 128.
            spec.var("KL", d.div_ceil(32));
            spec.range = true;
            FLASH_ATTN_COOP
        }
        Kernel::FlashAttnCombine { sinks, dv } => {
            spec.flags_if(&[(sinks, "SINKS")]);
            spec.var("DV", dv);
            spec.var("COLS", COMBINE_COLS);
            spec.var("MAX_SPLITS", COMBINE_MAX_SPLITS);
            spec.wg_reduce = true;
            FLASH_ATTN_COMBINE
        }
        Kernel::FlashAttnVec { .. } => {
            vec(key, spec)?;
            FLASH_ATTN_VEC
        }
        k => return Err(format!("{k:?} is not an attention kernel")),
    })
}

/// `flash_attn_vec.wgsl`'s flags and placeholders.
fn vec(key: &PipelineKey, spec: &mut Spec) -> Result<(), String> {
    let Kernel::FlashAttnVec {
        mask,
        mask_heads,
        softcap,
        sinks,
        d,
        dv,
        heads,
        keys,
        split,
        q8x,
        subgroups,
    } = key.kernel
    else {
        return Err(format!("{:?} is not decode attention", key.kernel));
    };
    let wg = key.wg;
    spec.flags_if(&[
        (mask, "MASK"),
        (softcap, "SOFTCAP"),
        (sinks, "SINKS"),
        (split, "SPLIT"),
        (q8x, "Q8X"),
        (subgroups, "SUBGROUP"),
    ]);
    if q8x && (split || !dv.is_multiple_of(32) || wg < dv / 4) {
        return Err(format!(
            "flash_attn_vec to int8: dv = {dv}, wg = {wg}, split {split}"
        ));
    }
    if ![d, dv, wg].iter().all(|x| x.is_multiple_of(8)) || !(1..=8).contains(&keys) {
        return Err(format!(
            "flash_attn_vec: d = {d}, dv = {dv}, wg = {wg}, {keys} keys an octet"
        ));
    }
    // Octets, keys per octet and step (KB in the kernel).
    let (octets, kb) = (wg / 8, keys);
    spec.var("D", d);
    spec.var("DV", dv);
    spec.var("GQ", heads);
    spec.var("KB", kb);
    spec.var("QV4", heads * d / 4);
    spec.var("RED", octets * dv);
    spec.var("NGQ", octets * heads);
    spec.var("OSUM", vec_octet_sums(wg, heads, kb));
    spec.var("NPK", (d / 8).div_ceil(8));
    spec.var("NPV", (dv / 8).div_ceil(8));
    // q loads a lane; mask rows staged per key, mask terms a lane stages (8 with a row per
    // head, else 4), keys per chunk (all keys in one without a mask).
    spec.var("QPL", (heads * d).div_ceil(wg));
    let mh = if mask_heads { heads } else { 1 };
    let msl = vec_mask_terms(mask_heads);
    let ch = if mask { msl * wg / mh } else { 1 << 30 };
    spec.var("MH", mh);
    spec.var("MSL", msl);
    spec.var("CH", ch);
    spec.var("MSK", msl * wg);
    spec.readers = readers(&key.dtypes, "VEC")?;
    Ok(())
}

/// Mask terms a lane of `flash_attn_vec.wgsl` stages a chunk (MSL): 8 with a mask row per
/// head, else 4.
pub(crate) fn vec_mask_terms(mask_heads: bool) -> u32 {
    if mask_heads {
        8
    } else {
        4
    }
}

/// The partial q·k sums a step of `flash_attn_vec.wgsl` without subgroups exchanges through
/// workgroup memory (OSUM): one per lane, key and head.
pub(crate) fn vec_octet_sums(lanes: u32, heads: u32, keys: u32) -> u32 {
    lanes * heads * keys
}

/// Whether binding `k` of a `flash_attn_vec.wgsl` or `flash_attn_coop.wgsl` variant is a
/// float K/V read as vec4<u32>.
pub(super) fn wide_kv(kernel: &Kernel, k: usize, dtype: DType) -> bool {
    matches!(
        kernel,
        Kernel::FlashAttnVec { .. } | Kernel::FlashAttnCoop { .. }
    ) && (k == 1 || k == 2)
        && matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// The K (src1) and V (src2) readers of `flash_attn_kv.wgsl` specialized for each one's dtype:
/// `kind` "DOT" for `flash_attn.wgsl` (values and q · row), "ROWS" for `flash_attn_tile.wgsl`
/// (values), "VEC" for `flash_attn_vec.wgsl` (parts).
fn readers(dtypes: &[DType], kind: &'static str) -> Result<String, String> {
    let mut out = String::new();
    for (name, k) in [("k", 1usize), ("v", 2)] {
        let dtype = *dtypes.get(k).ok_or("flash_attn needs K and V bindings")?;
        let mut flags = match dtype {
            DType::F32 => vec!["F32"],
            DType::F16 => vec!["F16"],
            DType::BF16 => vec!["BF16"],
            DType::Q8_0 => vec!["BLOCKS", "Q8_0"],
            DType::Q4_0 => vec!["BLOCKS"],
            d => return Err(format!("flash_attn has no {d} K/V reader")),
        };
        if kind != "ROWS" {
            flags.push(kind);
        }
        let vars = [
            ("KV", name.to_string()),
            ("SRC", format!("src{k}")),
            ("BINDING", k.to_string()),
        ];
        out.push_str(&specialize(FLASH_ATTN_KV, &flags, &vars)?);
    }
    Ok(out)
}
