//! A Whisper model compiled on a backend: audio in, a timestamped transcript out.
//!
//! One encoder graph and decoder graphs of a few token counts are compiled together
//! (`Backend::compile_shared`), so they share the cross-attention and self-attention caches. A
//! prompt runs in the smallest decoder graph that holds it; its padding tokens write cache rows
//! past the prompt that no real token sees (the mask) and that the next tokens overwrite.

use std::sync::Arc;

use wgllm_core::{Backend, DType, Executable};

use crate::audio::Audio;
use crate::decode::{self, DecodeOptions, Runner, Transcript};
use crate::error::SpeechError;
use crate::graph::{build_decoder, build_encoder, DecoderGraph, EncoderGraph, CACHE_DTYPE};
use crate::mel::{log_mel, Mel};
use crate::model::WhisperModel;
use wgllm_models::session::now;

struct Compiled<G> {
    graph: G,
    exe: Box<dyn Executable>,
}

/// A Whisper model ready to transcribe on one backend.
pub struct Transcriber {
    model: Arc<WhisperModel>,
    backend: String,
    encoder: Compiled<EncoderGraph>,
    /// Decoder graphs by token count, smallest first.
    decoders: Vec<Compiled<DecoderGraph>>,
}

/// The token counts decoder graphs are compiled for: single steps, and prompts up to the
/// longest (half the text context of past text, plus the task tokens).
fn decoder_sizes(n_text_ctx: u64) -> Vec<u32> {
    let longest = (n_text_ctx / 2 + 4).min(n_text_ctx) as u32;
    let top = longest.next_multiple_of(32).min(n_text_ctx as u32);
    let mut sizes: Vec<u32> = [1, 8, 32, 128].into_iter().filter(|&s| s < top).collect();
    sizes.push(top);
    sizes
}

fn le_bytes<T: Copy, const N: usize>(
    xs: impl Iterator<Item = T>,
    f: impl Fn(T) -> [u8; N],
) -> Vec<u8> {
    xs.flat_map(f).collect()
}

impl Transcriber {
    /// Compiles `model` on `backend`, with f16 caches, or f32 ones where the backend has no
    /// f16 (a browser without `shader-f16`).
    pub fn new(
        model: Arc<WhisperModel>,
        backend: &dyn Backend,
    ) -> Result<Transcriber, SpeechError> {
        match Transcriber::with_cache(Arc::clone(&model), backend, CACHE_DTYPE) {
            Err(SpeechError::Graph(wgllm_core::Error::Unsupported { .. })) => {
                Transcriber::with_cache(model, backend, DType::F32)
            }
            r => r,
        }
    }

    /// Compiles `model` on `backend` with caches of dtype `cache`.
    pub fn with_cache(
        model: Arc<WhisperModel>,
        backend: &dyn Backend,
        cache: DType,
    ) -> Result<Transcriber, SpeechError> {
        let c = &model.config;
        let encoder = build_encoder(c, &model.file, cache)?;
        let decoders = decoder_sizes(c.n_text_ctx)
            .into_iter()
            .map(|n| build_decoder(c, &model.file, n, cache))
            .collect::<Result<Vec<_>, _>>()?;
        let mut graphs = vec![&encoder.graph];
        graphs.extend(decoders.iter().map(|d| &d.graph));
        let mut exes = backend.compile_shared(&graphs)?.into_iter();
        let encoder = Compiled {
            exe: exes.next().expect("one executable per graph"),
            graph: encoder,
        };
        let decoders = decoders
            .into_iter()
            .zip(exes)
            .map(|(graph, exe)| Compiled { graph, exe })
            .collect();
        Ok(Transcriber {
            model,
            backend: backend.name(),
            encoder,
            decoders,
        })
    }

    /// The model.
    pub fn model(&self) -> &WhisperModel {
        &self.model
    }

    /// The name of the backend the graphs run on.
    pub fn backend_name(&self) -> &str {
        &self.backend
    }

    /// The log-mel spectrogram of `audio`.
    pub fn mel(&self, audio: &Audio) -> Mel {
        log_mel(&audio.samples, &self.model.filters)
    }

    /// Transcribes `audio`; `on_progress` hears the fraction done after each 30 s window.
    /// Natively the reads complete at once; in the browser, use [`Transcriber::transcribe_async`].
    pub fn transcribe(
        &mut self,
        audio: &Audio,
        opts: &DecodeOptions,
        on_progress: impl FnMut(f32),
    ) -> Result<Transcript, SpeechError> {
        now(self.transcribe_async(audio, opts, on_progress))
    }

    /// [`Transcriber::transcribe`] with its reads awaited.
    pub async fn transcribe_async(
        &mut self,
        audio: &Audio,
        opts: &DecodeOptions,
        on_progress: impl FnMut(f32),
    ) -> Result<Transcript, SpeechError> {
        if audio.samples.is_empty() {
            return Err(SpeechError::Audio("the audio is empty".into()));
        }
        let mel = self.mel(audio);
        let model = Arc::clone(&self.model);
        let c = &model.config;
        let mut run = Run { t: self, mel: &mel };
        decode::transcribe(
            &mut run,
            &model.vocab,
            c.n_text_ctx as usize,
            c.n_audio_ctx as usize,
            mel.n_audio,
            opts,
            on_progress,
        )
        .await
    }

    /// The most probable language of `audio`'s first 30 s and its probability.
    pub fn detect_language(&mut self, audio: &Audio) -> Result<(usize, f32), SpeechError> {
        let mel = self.mel(audio);
        let model = Arc::clone(&self.model);
        let mut run = Run { t: self, mel: &mel };
        now(decode::detect_language(&mut run, &model.vocab))
    }

    /// The encoder states of the window at frame `seek` of `mel` (`[n_audio_state,
    /// n_audio_ctx]`, state-major), for tests.
    pub fn encoder_states(&mut self, mel: &Mel, seek: usize) -> Result<Vec<f32>, SpeechError> {
        now(Run { t: self, mel }.encode(seek))?;
        let bytes = self.encoder.exe.read(self.encoder.graph.states)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// One transcription's runner: the transcriber and the audio's spectrogram.
struct Run<'a> {
    t: &'a mut Transcriber,
    mel: &'a Mel,
}

impl Runner for Run<'_> {
    async fn encode(&mut self, seek: usize) -> Result<(), SpeechError> {
        let n_frames = 2 * self.t.model.config.n_audio_ctx as usize;
        let mut window = self.mel.window(seek);
        if n_frames < crate::mel::WINDOW_FRAMES {
            // A model of a shorter audio context reads the first frames of each mel row.
            let n_mel = self.mel.n_mel;
            window = (0..n_mel)
                .flat_map(|m| window[m * crate::mel::WINDOW_FRAMES..][..n_frames].to_vec())
                .collect();
        }
        let bytes = le_bytes(window.into_iter(), f32::to_le_bytes);
        let e = &mut self.t.encoder;
        e.exe.run(&[(e.graph.mel, &bytes)])?;
        Ok(())
    }

    async fn decode(&mut self, tokens: &[u32], n_past: usize) -> Result<Vec<f32>, SpeechError> {
        let ctx = self.t.model.config.n_text_ctx as usize;
        let n = tokens.len();
        if n == 0 || n_past + n > ctx {
            return Err(SpeechError::Unsupported(format!(
                "decoding {n} tokens after {n_past} in a text context of {ctx}"
            )));
        }
        let d = self
            .t
            .decoders
            .iter_mut()
            .find(|d| d.graph.n_tokens as usize >= n)
            .ok_or_else(|| SpeechError::Unsupported(format!("a prompt of {n} tokens")))?;
        let size = d.graph.n_tokens as usize;
        // Padding tokens repeat the last one at the following positions (clamped in range).
        let pos: Vec<usize> = (0..size).map(|i| (n_past + i).min(ctx - 1)).collect();
        let toks: Vec<u32> = (0..size).map(|i| tokens[i.min(n - 1)]).collect();
        let tokens_b = le_bytes(toks.iter(), |&t| (t as i32).to_le_bytes());
        let pos_b = le_bytes(pos.iter(), |&p| (p as i32).to_le_bytes());
        let slots_b = le_bytes(pos.iter(), |&p| (p as i64).to_le_bytes());
        let mut mask = vec![f32::NEG_INFINITY; ctx * size];
        for (i, &p) in pos.iter().enumerate() {
            mask[i * ctx..i * ctx + p + 1].fill(0.0);
        }
        let mask_b = le_bytes(mask.into_iter(), f32::to_le_bytes);
        let out_b = ((n - 1) as i32).to_le_bytes();
        let g = &d.graph;
        d.exe.run(&[
            (g.tokens, &tokens_b),
            (g.positions, &pos_b),
            (g.kv_slots, &slots_b),
            (g.mask, &mask_b),
            (g.out_row, &out_b),
        ])?;
        let bytes = d.exe.read_async(g.logits).await?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decoder_sizes_cover_the_longest_prompt() {
        assert_eq!(super::decoder_sizes(448), [1, 8, 32, 128, 256]);
        assert_eq!(super::decoder_sizes(16), [1, 8, 16]);
    }
}
