//! Token sampling from logits, in llama.cpp's default order: repetition/presence/frequency
//! penalties over recent tokens, then top-k, top-p, min-p, temperature, and a seeded draw.
//! A temperature of 0 (or below) is greedy argmax.
//!
//! What a step must read back for this sampler ([`Sampler::readback`]), so that sampling from it
//! gives exactly what sampling from the whole logits row gives:
//! - greedy without penalties: the backend's argmax ([`Readback::Argmax`]);
//! - temperature > 0 with `1 <= top_k <= candidates` and no penalties: the backend's top-K
//!   candidates ([`Readback::TopK`]); top-k keeps only those, and top-p, min-p and temperature
//!   then work on them alone, so the draw is the same;
//! - anything else (`top_k = 0` or above the candidates, a repetition/presence/frequency penalty,
//!   which can reorder the whole vocabulary, or log-probabilities, which need the whole row's
//!   normalizer): the whole row ([`Readback::Logits`]).
//!
//! With [`Readback::TopK`] the backend can also make the draw itself (`Graph::sample`, the same
//! cuts and running sums in f32): [`Sampler::draw`] takes the uniform the host would have taken
//! and returns the parameters of that draw, so a step can be queued before the host has read
//! its predecessor. The tokens so drawn are the *reference* tokens of `generate` for such
//! samplers, on every backend: on the CPU backend they equal [`Sampler::sample_row`]'s exactly
//! (one arithmetic); a GPU's exp and division round differently, so its token differs from the
//! host's only where `r` or a cut lies within rounding of a running sum.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use wgllm_core::op::SampleParams;

use crate::error::ModelError;
use crate::session::{Readback, RowOut};

/// Sampling parameters (llama.cpp's defaults where it has them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    /// 0 or below: greedy.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one (0: none).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of recent tokens by this (1: off).
    pub repeat_penalty: f32,
    /// Subtract from the logit of every recent token (0: off).
    pub presence_penalty: f32,
    /// Subtract this × the count of each recent token (0: off).
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding.
    pub fn greedy() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        }
    }
}

/// A sampler with its random state (a clone continues the same stream of draws).
#[derive(Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: StdRng,
}

/// Index of the largest value (the first one on ties).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    /// A sampler seeded from `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Sampler {
        Sampler {
            cfg,
            rng: StdRng::seed_from_u64(cfg.seed),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// True when the sampler is plain argmax (the GPU can pick the token).
    pub fn is_greedy(&self) -> bool {
        self.cfg.temperature <= 0.0 && !self.has_penalties()
    }

    fn has_penalties(&self) -> bool {
        self.cfg.repeat_penalty != 1.0
            || self.cfg.presence_penalty != 0.0
            || self.cfg.frequency_penalty != 0.0
    }

    /// What a step must read back for this sampler, when the backend returns `candidates`
    /// top-K candidates (see the module documentation).
    pub fn readback(&self, candidates: usize) -> Readback {
        if self.has_penalties() {
            Readback::Logits
        } else if self.cfg.temperature <= 0.0 {
            Readback::Argmax
        } else if (1..=candidates).contains(&self.cfg.top_k) {
            Readback::TopK
        } else {
            Readback::Logits
        }
    }

    /// The parameters of the backend's draw of the next token (`Graph::sample`), taking the
    /// one uniform that [`Sampler::sample_row`] would take: for samplers whose
    /// [`Sampler::readback`] is [`Readback::TopK`].
    pub fn draw(&mut self) -> SampleParams {
        let c = self.cfg;
        SampleParams {
            r: self.rng.random(),
            temperature: c.temperature,
            top_p: c.top_p,
            min_p: c.min_p,
            top_k: c.top_k.min(u32::MAX as usize) as u32,
        }
    }

    /// Picks the next token from a step's output row, which must hold what
    /// [`Sampler::readback`] asked for (or more).
    pub fn sample_row(&mut self, row: &RowOut, history: &[u32]) -> Result<u32, ModelError> {
        // The least the sampler needs, though the step may have read more for other rows.
        match (
            self.readback(row.top.as_ref().map_or(0, Vec::len)),
            &row.top,
            &row.logits,
        ) {
            (Readback::Argmax, _, _) => Ok(row.argmax),
            (Readback::TopK, Some(top), _) => Ok(self.pick(top.clone())),
            (_, _, Some(logits)) => Ok(self.sample(logits, history)),
            _ => Err(ModelError::BadSession(
                "the step read back less than the sampler needs".into(),
            )),
        }
    }

    /// Picks the next token from `logits`, given the tokens so far (`history`).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let c = self.cfg;
        let mut logits = std::borrow::Cow::Borrowed(logits);
        if self.has_penalties() {
            let logits = logits.to_mut();
            let recent = &history[history.len().saturating_sub(c.penalty_last_n)..];
            let mut counts = std::collections::HashMap::<u32, u32>::new();
            for &t in recent {
                *counts.entry(t).or_default() += 1;
            }
            for (&t, &n) in &counts {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l > 0.0 {
                        *l / c.repeat_penalty
                    } else {
                        *l * c.repeat_penalty
                    };
                    *l -= c.presence_penalty + c.frequency_penalty * n as f32;
                }
            }
        }
        if c.temperature <= 0.0 {
            return argmax(&logits);
        }
        // Candidates sorted by logit, largest first.
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        self.pick(cand)
    }

    /// Top-k, top-p, min-p, temperature and the draw over `cand`, sorted by logit, largest
    /// first: [`SampleParams::pick`] under [`Sampler::draw`]'s parameters, the arithmetic of the
    /// backends' SAMPLE.
    fn pick(&mut self, cand: Vec<(u32, f32)>) -> u32 {
        let vals: Vec<f32> = cand.iter().map(|x| x.1).collect();
        cand[self.draw().pick(&vals)].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_the_first_maximum() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, 3.0, -1.0], &[]), 1);
        assert!(s.is_greedy());
    }

    #[test]
    fn top_k_one_is_greedy_and_seeds_repeat() {
        let cfg = SamplerConfig {
            top_k: 1,
            ..SamplerConfig::default()
        };
        let mut s = Sampler::new(cfg);
        let logits = [0.5, 0.2, 2.0, 1.9];
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[]), 2);
        }
        let cfg = SamplerConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 42,
            ..SamplerConfig::default()
        };
        let draw = |cfg| {
            let mut s = Sampler::new(cfg);
            (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        let a = draw(cfg);
        assert_eq!(a, draw(cfg), "same seed, same draws");
        assert!(
            a.iter().any(|&t| t != 2),
            "temperature 1.5 over close logits draws more than the argmax"
        );
        assert_ne!(a, draw(SamplerConfig { seed: 43, ..cfg }));
    }

    #[test]
    fn min_p_and_top_p_cut_unlikely_tokens() {
        // p ≈ [0.66, 0.24, 0.09, 0.004]
        let logits = [3.0, 2.0, 1.0, -2.0];
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.2,
            seed: 1,
            ..SamplerConfig::default()
        };
        let mut s = Sampler::new(cfg);
        for _ in 0..200 {
            assert!(
                s.sample(&logits, &[]) <= 1,
                "min_p 0.2 keeps only tokens 0 and 1"
            );
        }
        let mut s = Sampler::new(SamplerConfig {
            min_p: 0.0,
            top_p: 0.5,
            ..cfg
        });
        for _ in 0..200 {
            assert_eq!(s.sample(&logits, &[]), 0, "top_p 0.5 keeps only token 0");
        }
    }

    /// On the CPU backend the step's draw (`Graph::sample`, given `Sampler::draw`'s parameters)
    /// is the host's draw from the candidates read back with it, token for token: one
    /// arithmetic, one stream of uniforms.
    #[test]
    fn the_cpu_backend_draws_what_the_host_draws() {
        use crate::session::{SeqChunk, Session, SessionConfig};
        use crate::synth::{llama_gguf, LlamaShape};
        use wgllm_core::DType;
        use wgllm_gguf::GgufFile;

        let bytes = llama_gguf(&LlamaShape::TINY, DType::Q8_0, 3).unwrap();
        let f = GgufFile::from_bytes(bytes::Bytes::from(bytes)).unwrap();
        let cfg = SessionConfig {
            n_ctx: 64,
            ubatch: 4,
            ..SessionConfig::default()
        };
        let mut s = Session::new(&wgllm_cpu::CpuBackend, &f, cfg).unwrap();
        let configs = [
            SamplerConfig::default(),
            SamplerConfig {
                temperature: 1.5,
                top_p: 0.9,
                min_p: 0.1,
                seed: 5,
                ..SamplerConfig::default()
            },
            SamplerConfig {
                temperature: 3.0,
                top_k: 5,
                top_p: 1.0,
                min_p: 0.0,
                seed: 9,
                ..SamplerConfig::default()
            },
        ];
        for c in configs {
            s.reset();
            let mut device = Sampler::new(c);
            let mut host = device.clone();
            assert_eq!(device.readback(s.candidates()), Readback::TopK);
            let (mut tok, mut seen) = (1, std::collections::HashSet::new());
            for _ in 0..16 {
                let chunk = [SeqChunk {
                    seq: 0,
                    tokens: &[tok],
                    output: true,
                }];
                let row = s
                    .step_drawn(&chunk, Readback::TopK, &[device.draw()])
                    .unwrap()
                    .remove(0);
                tok = host.sample_row(&row, &[]).unwrap();
                assert_eq!(row.sampled, Some(tok), "{c:?}");
                seen.insert(tok);
            }
            assert!(seen.len() > 2, "{c:?} drew only {seen:?}");
        }
    }

    #[test]
    fn penalties_push_recent_tokens_down() {
        let cfg = SamplerConfig {
            temperature: 0.0,
            repeat_penalty: 2.0,
            ..SamplerConfig::default()
        };
        let mut s = Sampler::new(cfg);
        assert_eq!(s.sample(&[2.0, 1.5], &[0]), 1, "2.0 / 2 < 1.5");
        let cfg = SamplerConfig {
            temperature: 0.0,
            presence_penalty: 1.0,
            ..SamplerConfig::default()
        };
        let mut s = Sampler::new(cfg);
        assert_eq!(s.sample(&[2.0, 1.5], &[0]), 1);
        assert_eq!(s.sample(&[2.0, 1.5], &[1]), 0);
    }
}
