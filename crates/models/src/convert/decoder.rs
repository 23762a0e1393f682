//! The decoder families wgllm runs (`LlamaForCausalLM`, `Qwen2ForCausalLM`,
//! `Qwen3ForCausalLM`) as llama.cpp's converter writes them: `{arch}.*` hyperparameters, Llama
//! 3's RoPE frequency factors (`rope_freqs.weight`), the byte-level BPE vocabulary
//! (`super::bpe`), and for `llama` the Q and K rows permuted from Hugging Face's half-split
//! RoPE layout into GGUF's interleaved one (`LlamaModel.permute`).

use serde_json::Value as Json;
use wgllm_gguf::{GgufWriter, Value};

use super::{Checkpoint, ConvertError, Mapped, Result};

/// A decoder family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    Llama,
    Qwen2,
    Qwen3,
}

impl Family {
    pub(super) fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
        }
    }
}

/// The GGUF name of checkpoint tensor `hf`.
pub(super) fn tensor_name(f: Family, hf: &str) -> Result<Mapped> {
    let unknown = || ConvertError::UnknownTensor(hf.to_string());
    // RoPE's inverse frequencies are recomputed from the config.
    if hf.ends_with("rotary_emb.inv_freq") {
        return Ok(Mapped::Skip);
    }
    // A bare `Qwen3Model` (sentence-transformers' Qwen3-Embedding) has no `model.` prefix.
    let name = hf.strip_prefix("model.").unwrap_or(hf);
    let (stem, suffix) = name.rsplit_once('.').ok_or_else(unknown)?;
    if suffix != "weight" && suffix != "bias" {
        return Err(unknown());
    }
    let gguf = match stem {
        "embed_tokens" => "token_embd".to_string(),
        "norm" => "output_norm".to_string(),
        "lm_head" => "output".to_string(),
        _ => {
            let rest = stem.strip_prefix("layers.").ok_or_else(unknown)?;
            let (il, part) = rest.split_once('.').ok_or_else(unknown)?;
            let il: u32 = il.parse().map_err(|_| unknown())?;
            let part = match part {
                "input_layernorm" => "attn_norm",
                "self_attn.q_proj" => "attn_q",
                "self_attn.k_proj" => "attn_k",
                "self_attn.v_proj" => "attn_v",
                "self_attn.o_proj" => "attn_output",
                "self_attn.q_norm" if f == Family::Qwen3 => "attn_q_norm",
                "self_attn.k_norm" if f == Family::Qwen3 => "attn_k_norm",
                "post_attention_layernorm" => "ffn_norm",
                "mlp.gate_proj" => "ffn_gate",
                "mlp.up_proj" => "ffn_up",
                "mlp.down_proj" => "ffn_down",
                _ => return Err(unknown()),
            };
            format!("blk.{il}.{part}")
        }
    };
    // Biases only where the family has them (Qwen2's q/k/v).
    if suffix == "bias" && !(f == Family::Qwen2 && gguf.starts_with("blk.") && is_qkv(&gguf)) {
        return Err(unknown());
    }
    Ok(Mapped::Keep(format!("{gguf}.{suffix}")))
}

fn is_qkv(gguf: &str) -> bool {
    ["attn_q", "attn_k", "attn_v"]
        .iter()
        .any(|p| gguf.ends_with(&format!(".{p}")))
}

/// The attention shape the permutation and the metadata need.
#[derive(Clone, Copy, Debug)]
pub(super) struct Heads {
    pub n_head: u64,
    pub n_head_kv: u64,
}

/// Reads the head counts.
pub(super) fn heads(ck: &Checkpoint) -> Result<Heads> {
    let n_head = ck.cfg_u64("num_attention_heads")?;
    let n_head_kv = ck
        .config
        .get("num_key_value_heads")
        .and_then(Json::as_u64)
        .unwrap_or(n_head);
    if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
        return Err(ConvertError::Config {
            key: "num_key_value_heads".into(),
            why: format!("{n_head_kv} must divide num_attention_heads ({n_head})"),
        });
    }
    Ok(Heads { n_head, n_head_kv })
}

/// Llama's Q (`n_head` heads) or K (`n_head_kv`) rows, `[n_in, rows]` innermost first,
/// reordered from Hugging Face's half-split RoPE layout (each head's first half of rows rotates
/// with its second half) into the interleaved pairs GGUF's `llama` RoPE takes: within each
/// head, row `j` of the first half goes to `2j`, of the second half to `2j + 1`.
pub(super) fn permute_rope_rows(values: &[f32], ne: &[u64], heads: u64) -> Result<Vec<f32>> {
    let n_in = ne[0] as usize;
    let rows: usize = ne[1..].iter().product::<u64>() as usize;
    let heads = heads as usize;
    if heads == 0 || !rows.is_multiple_of(2 * heads) {
        return Err(ConvertError::TensorShape {
            name: "attn_q / attn_k".into(),
            why: format!("{rows} rows are not {heads} heads of pairs"),
        });
    }
    let per = rows / heads;
    let half = per / 2;
    let mut out = vec![0f32; values.len()];
    for h in 0..heads {
        for j in 0..half {
            for (from, to) in [(j, 2 * j), (half + j, 2 * j + 1)] {
                let src = (h * per + from) * n_in;
                let dst = (h * per + to) * n_in;
                out[dst..dst + n_in].copy_from_slice(&values[src..src + n_in]);
            }
        }
    }
    Ok(out)
}

/// Llama 3's RoPE frequency factors (`rope_scaling.rope_type = llama3`), one per rotated pair,
/// as llama.cpp's converter computes them.
fn llama3_rope_factors(scaling: &Json, base: f64, dim: u64) -> Result<Vec<f32>> {
    let num = |k: &str, default: f64| scaling.get(k).and_then(Json::as_f64).unwrap_or(default);
    let factor = num("factor", 8.0);
    let low = num("low_freq_factor", 1.0);
    let high = num("high_freq_factor", 4.0);
    let old = num("original_max_position_embeddings", 8192.0);
    if high <= low {
        return Err(ConvertError::Config {
            key: "rope_scaling".into(),
            why: "high_freq_factor must exceed low_freq_factor".into(),
        });
    }
    let (low_wavelen, high_wavelen) = (old / low, old / high);
    Ok((0..dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf(2.0 * i as f64 / dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect())
}

/// A tensor the config implies: its GGUF name, extents and values.
pub(super) type Implied = (String, Vec<u64>, Vec<f32>);

/// Writes the hyperparameters; returns the extra tensors the config implies (Llama 3's
/// `rope_freqs.weight`).
pub(super) fn metadata(f: Family, ck: &Checkpoint, w: &mut GgufWriter) -> Result<Vec<Implied>> {
    let a = f.name();
    let h = heads(ck)?;
    let n_embd = ck.cfg_u64("hidden_size")?;
    let head_dim = ck
        .config
        .get("head_dim")
        .and_then(Json::as_u64)
        .unwrap_or(n_embd / h.n_head);
    let u32_of = |key: &str, v: u64| -> Result<Value> {
        u32::try_from(v)
            .map(Value::U32)
            .map_err(|_| ConvertError::Config {
                key: key.into(),
                why: format!("{v} is too large"),
            })
    };
    let base = ck
        .config
        .get("rope_theta")
        .and_then(Json::as_f64)
        .unwrap_or(10_000.0);
    let ctx = ck.cfg_u64("max_position_embeddings")?;
    w.add_metadata(
        format!("{a}.context_length"),
        u32_of("max_position_embeddings", ctx)?,
    )?;
    w.add_metadata(
        format!("{a}.embedding_length"),
        u32_of("hidden_size", n_embd)?,
    )?;
    w.add_metadata(
        format!("{a}.feed_forward_length"),
        u32_of("intermediate_size", ck.cfg_u64("intermediate_size")?)?,
    )?;
    w.add_metadata(
        format!("{a}.block_count"),
        u32_of("num_hidden_layers", ck.cfg_u64("num_hidden_layers")?)?,
    )?;
    w.add_metadata(
        format!("{a}.attention.head_count"),
        u32_of("num_attention_heads", h.n_head)?,
    )?;
    w.add_metadata(
        format!("{a}.attention.head_count_kv"),
        u32_of("num_key_value_heads", h.n_head_kv)?,
    )?;
    w.add_metadata(format!("{a}.rope.freq_base"), Value::F32(base as f32))?;
    w.add_metadata(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(ck.cfg_f32("rms_norm_eps")?),
    )?;
    if f == Family::Qwen3 || head_dim * h.n_head != n_embd {
        w.add_metadata(
            format!("{a}.attention.key_length"),
            u32_of("head_dim", head_dim)?,
        )?;
        w.add_metadata(
            format!("{a}.attention.value_length"),
            u32_of("head_dim", head_dim)?,
        )?;
    }
    if f == Family::Llama {
        w.add_metadata(
            format!("{a}.rope.dimension_count"),
            u32_of("head_dim", head_dim)?,
        )?;
    }
    // An embedding model states its pooling (sentence-transformers' Pooling module).
    if let Some(p) = super::bert::pooling_of(ck)? {
        w.add_metadata(
            format!("{a}.pooling_type"),
            Value::U32(super::bert::pooling_id(p)),
        )?;
    }
    let mut extra = Vec::new();
    match ck.config.get("rope_scaling") {
        None | Some(Json::Null) => {}
        Some(s) => {
            let kind = s
                .get("rope_type")
                .or_else(|| s.get("type"))
                .and_then(Json::as_str)
                .unwrap_or("");
            match kind {
                "linear" => {
                    let factor = s.get("factor").and_then(Json::as_f64).unwrap_or(1.0);
                    w.add_metadata(
                        format!("{a}.rope.scaling.type"),
                        Value::String("linear".into()),
                    )?;
                    w.add_metadata(
                        format!("{a}.rope.scaling.factor"),
                        Value::F32(factor as f32),
                    )?;
                }
                "llama3" if f == Family::Llama => {
                    let factors = llama3_rope_factors(s, base, head_dim)?;
                    extra.push((
                        "rope_freqs.weight".into(),
                        vec![factors.len() as u64],
                        factors,
                    ));
                }
                other => {
                    return Err(ConvertError::Config {
                        key: "rope_scaling".into(),
                        why: format!(
                            "type {other:?} is not supported for {a} (none, linear{})",
                            if f == Family::Llama { ", llama3" } else { "" }
                        ),
                    })
                }
            }
        }
    }
    Ok(extra)
}

/// Checks that every tensor the model needs was written.
pub(super) fn check_tensors<'a>(
    f: Family,
    ck: &Checkpoint,
    names: impl Iterator<Item = &'a str>,
) -> Result<()> {
    let have: std::collections::HashSet<&str> = names.collect();
    let mut need = vec![
        "token_embd.weight".to_string(),
        "output_norm.weight".to_string(),
    ];
    let mut parts = vec![
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_norm",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ];
    if f == Family::Qwen3 {
        parts.extend(["attn_q_norm", "attn_k_norm"]);
    }
    for il in 0..ck.cfg_u64("num_hidden_layers")? {
        need.extend(parts.iter().map(|p| format!("blk.{il}.{p}.weight")));
        if f == Family::Qwen2 {
            need.extend(["attn_q", "attn_k", "attn_v"].map(|p| format!("blk.{il}.{p}.bias")));
        }
    }
    match need.into_iter().find(|n| !have.contains(n.as_str())) {
        Some(missing) => Err(ConvertError::MissingTensor(missing)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_rows_go_from_halves_to_pairs() {
        // One input column, 2 heads of 4 rows: [a0 a1 b0 b1] per head → [a0 b0 a1 b1].
        let v: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let p = permute_rope_rows(&v, &[1, 8], 2).unwrap();
        assert_eq!(p, [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
        assert!(permute_rope_rows(&v, &[1, 8], 3).is_err());
    }

    #[test]
    fn llama3_factors_leave_high_frequencies_and_scale_low_ones() {
        let s = serde_json::json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192});
        let f = llama3_rope_factors(&s, 500_000.0, 128).unwrap();
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[63], 8.0);
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
    }

    #[test]
    fn names_map_and_biases_only_where_qwen2_has_them() {
        let keep = |f, n| match tensor_name(f, n).unwrap() {
            Mapped::Keep(g) => g,
            Mapped::Skip => panic!("{n} skipped"),
        };
        assert_eq!(
            keep(Family::Llama, "model.layers.3.mlp.down_proj.weight"),
            "blk.3.ffn_down.weight"
        );
        assert_eq!(
            keep(Family::Qwen2, "model.layers.0.self_attn.k_proj.bias"),
            "blk.0.attn_k.bias"
        );
        assert_eq!(
            keep(Family::Qwen3, "model.layers.1.self_attn.q_norm.weight"),
            "blk.1.attn_q_norm.weight"
        );
        assert_eq!(keep(Family::Llama, "lm_head.weight"), "output.weight");
        assert!(tensor_name(Family::Llama, "model.layers.0.self_attn.k_proj.bias").is_err());
        assert!(tensor_name(Family::Llama, "model.layers.1.self_attn.q_norm.weight").is_err());
    }
}
