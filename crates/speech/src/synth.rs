//! Synthetic Whisper models: the GGUF form with random weights at a real model's shapes (for
//! speed measurements and tests where the real weights cannot be had), the real mel filter
//! bank, and a placeholder vocabulary of the real size and special-token layout.

use wgllm_core::DType;
use wgllm_gguf::{Array, GgufWriter, Value};
use wgllm_models::synth::random_tensor;
use wgllm_models::tokenizer::encode_byte_level;

use crate::error::SpeechError;
use crate::mel::MelFilters;
use crate::model::{keys, WhisperConfig};

/// Adds one random tensor: name, dtype, shape, (mean, std).
type AddTensor<'a> = dyn FnMut(&str, DType, &[u64], (f32, f32)) -> Result<(), SpeechError> + 'a;

/// The shapes of the released models (and a small one for tests).
pub fn preset(name: &str) -> Option<WhisperConfig> {
    let c = |n_vocab, state, head, layer_a, layer_t, mels| WhisperConfig {
        n_vocab,
        n_audio_ctx: 1500,
        n_audio_state: state,
        n_audio_head: head,
        n_audio_layer: layer_a,
        n_text_ctx: 448,
        n_text_state: state,
        n_text_head: head,
        n_text_layer: layer_t,
        n_mels: mels,
    };
    Some(match name {
        "whisper-tiny" => c(51_865, 384, 6, 4, 4, 80),
        "whisper-tiny.en" => c(51_864, 384, 6, 4, 4, 80),
        "whisper-base" => c(51_865, 512, 8, 6, 6, 80),
        "whisper-small" => c(51_865, 768, 12, 12, 12, 80),
        "whisper-medium" => c(51_865, 1024, 16, 24, 24, 80),
        "whisper-large-v3" => c(51_866, 1280, 20, 32, 32, 128),
        "whisper-large-v3-turbo" => c(51_866, 1280, 20, 32, 4, 128),
        // Tests: a multilingual vocabulary, 64 wide, short contexts.
        "whisper-test" => WhisperConfig {
            n_audio_ctx: 1500,
            n_audio_state: 64,
            n_audio_head: 4,
            n_audio_layer: 2,
            n_text_ctx: 64,
            n_text_state: 64,
            n_text_head: 4,
            n_text_layer: 2,
            ..c(51_865, 64, 4, 2, 2, 80)
        },
        _ => return None,
    })
}

/// The preset names, for `--help` and errors.
pub const PRESETS: &[&str] = &[
    "whisper-tiny",
    "whisper-tiny.en",
    "whisper-base",
    "whisper-small",
    "whisper-medium",
    "whisper-large-v3",
    "whisper-large-v3-turbo",
    "whisper-test",
];

/// A GGUF Whisper model of shape `c` with random weights: matrices in `dtype` (f32, f16 or a
/// quantized type), norms, biases and positions in f32.
pub fn whisper_gguf(c: &WhisperConfig, dtype: DType, seed: u64) -> Result<Vec<u8>, SpeechError> {
    let mut w = GgufWriter::new();
    let u = |v: u64| Value::U32(v as u32);
    w.add_metadata(keys::ARCH, Value::String("whisper".into()))?;
    w.add_metadata(
        "general.name",
        Value::String("wgllm synthetic whisper".into()),
    )?;
    for (k, v) in [
        (keys::AUDIO_CTX, c.n_audio_ctx),
        (keys::AUDIO_STATE, c.n_audio_state),
        (keys::AUDIO_HEAD, c.n_audio_head),
        (keys::AUDIO_LAYER, u64::from(c.n_audio_layer)),
        (keys::TEXT_CTX, c.n_text_ctx),
        (keys::TEXT_STATE, c.n_text_state),
        (keys::TEXT_HEAD, c.n_text_head),
        (keys::TEXT_LAYER, u64::from(c.n_text_layer)),
        (keys::MELS, c.n_mels),
    ] {
        w.add_metadata(k, u(v))?;
    }
    w.add_metadata(keys::TOKENIZER, Value::String("whisper".into()))?;
    // The regular tokens: the 256 bytes, then placeholder words; the special ones are implied.
    let n_regular = if c.n_vocab >= 51_865 { 50_257 } else { 50_256 } + 1;
    let tokens: Vec<String> = (0..n_regular)
        .map(|i| match i {
            0..256 => encode_byte_level(&[i as u8]),
            i => encode_byte_level(format!("w{i}").as_bytes()),
        })
        .collect();
    w.add_metadata(keys::TOKENS, Value::Array(Array::String(tokens)))?;
    let f = MelFilters::slaney(c.n_mels as usize);
    let filt: Vec<u8> = f.data.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor(
        keys::MEL_FILTERS,
        DType::F32,
        &[f.n_freq as u64, c.n_mels],
        filt,
    )?;

    let mut add =
        |name: &str, dt: DType, shape: &[u64], dist: (f32, f32)| -> Result<(), SpeechError> {
            Ok(random_tensor(&mut w, name, dt, shape, dist, seed)?)
        };
    let e = c.n_audio_state;
    let std = 1.0 / (e as f32).sqrt();
    let ones = (1.0, 0.1);
    let small = (0.0, 0.1);
    let conv_dt = if dtype.is_quantized() {
        DType::F16
    } else {
        dtype
    };
    add(
        "encoder.conv1.weight",
        conv_dt,
        &[3, c.n_mels, e],
        (0.0, 1.0 / (3.0 * c.n_mels as f32).sqrt()),
    )?;
    add("encoder.conv1.bias", DType::F32, &[e], small)?;
    add(
        "encoder.conv2.weight",
        conv_dt,
        &[3, e, e],
        (0.0, 1.0 / (3.0 * e as f32).sqrt()),
    )?;
    add("encoder.conv2.bias", DType::F32, &[e], small)?;
    add(
        "encoder.positional_embedding",
        DType::F32,
        &[e, c.n_audio_ctx],
        small,
    )?;
    let block = |add: &mut AddTensor, p: &str, cross: bool| -> Result<(), SpeechError> {
        let mut attn = |a: &str| -> Result<(), SpeechError> {
            add(&format!("{p}.{a}_ln.weight"), DType::F32, &[e], ones)?;
            add(&format!("{p}.{a}_ln.bias"), DType::F32, &[e], small)?;
            for (t, bias) in [
                ("query", true),
                ("key", false),
                ("value", true),
                ("out", true),
            ] {
                add(&format!("{p}.{a}.{t}.weight"), dtype, &[e, e], (0.0, std))?;
                if bias {
                    add(&format!("{p}.{a}.{t}.bias"), DType::F32, &[e], small)?;
                }
            }
            Ok(())
        };
        attn("attn")?;
        if cross {
            attn("cross_attn")?;
        }
        add(&format!("{p}.mlp_ln.weight"), DType::F32, &[e], ones)?;
        add(&format!("{p}.mlp_ln.bias"), DType::F32, &[e], small)?;
        add(&format!("{p}.mlp.0.weight"), dtype, &[e, 4 * e], (0.0, std))?;
        add(&format!("{p}.mlp.0.bias"), DType::F32, &[4 * e], small)?;
        add(
            &format!("{p}.mlp.2.weight"),
            dtype,
            &[4 * e, e],
            (0.0, std / 2.0),
        )?;
        add(&format!("{p}.mlp.2.bias"), DType::F32, &[e], small)?;
        Ok(())
    };
    for il in 0..c.n_audio_layer {
        block(&mut add, &format!("encoder.blocks.{il}"), false)?;
    }
    add("encoder.ln_post.weight", DType::F32, &[e], ones)?;
    add("encoder.ln_post.bias", DType::F32, &[e], small)?;
    add(
        "decoder.token_embedding.weight",
        dtype,
        &[e, c.n_vocab],
        (0.0, 1.0),
    )?;
    add(
        "decoder.positional_embedding",
        DType::F32,
        &[e, c.n_text_ctx],
        small,
    )?;
    for il in 0..c.n_text_layer {
        block(&mut add, &format!("decoder.blocks.{il}"), true)?;
    }
    add("decoder.ln.weight", DType::F32, &[e], ones)?;
    add("decoder.ln.bias", DType::F32, &[e], small)?;
    Ok(w.to_vec())
}
