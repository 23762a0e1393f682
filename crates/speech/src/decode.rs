//! Whisper's decoding as whisper.cpp does it (`whisper_full`): the audio is read in 30 s windows
//! from a seek position; each window is decoded from `[<|startofprev|> past text]
//! <|startoftranscript|> [<|lang|> <|task|>]` with the logit rules of openai/whisper
//! (timestamps in pairs and increasing, the first one at most 1 s, special tokens suppressed, a
//! timestamp whenever their summed probability beats every text token), greedily at temperature
//! 0 and, when a window's decoding fails (a repetition loop, a low average log-probability),
//! again by sampling `best_of` candidates at each higher temperature. The window's timestamp
//! tokens cut it into segments, and the seek moves to the last timestamp.

use std::future::Future;

use rand::distr::{weighted::WeightedIndex, Distribution};
use rand::SeedableRng;

use crate::error::SpeechError;
use crate::mel::WINDOW_FRAMES;
use crate::model::Vocab;

/// What runs the model for the decoding loop (its reads are awaited: in the browser they
/// complete on a later turn of the event loop).
pub trait Runner {
    /// Encodes the 30 s window of mel frames starting at frame `seek`.
    fn encode(&mut self, seek: usize) -> impl Future<Output = Result<(), SpeechError>>;
    /// Runs `tokens` at positions `n_past..` of the current decoding (earlier positions keep
    /// what the previous calls wrote) and returns the last token's logits.
    fn decode(
        &mut self,
        tokens: &[u32],
        n_past: usize,
    ) -> impl Future<Output = Result<Vec<f32>, SpeechError>>;
}

/// How to decode (whisper.cpp's `whisper_full_params`, with its defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeOptions {
    /// Language index ([`crate::lang`]); `None` detects it (multilingual models only).
    pub language: Option<usize>,
    /// Translate to English instead of transcribing.
    pub translate: bool,
    /// First temperature; each failed window retries at `+ temperature_inc` up to 1.
    pub temperature: f32,
    /// 0 turns the fallback off.
    pub temperature_inc: f32,
    /// Candidates sampled at a temperature above 0.
    pub best_of: usize,
    /// A window whose last 32 tokens have less entropy than this is a repetition loop.
    pub entropy_thold: f32,
    /// A window whose average token log-probability is below this falls back.
    pub logprob_thold: f32,
    /// A window whose no-speech probability is above this (and log-probability low) is silence.
    pub no_speech_thold: f32,
    /// Text to condition the first window on.
    pub initial_prompt: Option<String>,
    /// Previous text tokens given to each window (at most half the text context).
    pub max_context: usize,
    /// Transcribe without timestamps (one segment per window).
    pub no_timestamps: bool,
    /// Seed of the fallback's sampling.
    pub seed: u64,
}

impl Default for DecodeOptions {
    fn default() -> DecodeOptions {
        DecodeOptions {
            language: None,
            translate: false,
            temperature: 0.0,
            temperature_inc: 0.2,
            best_of: 5,
            entropy_thold: 2.4,
            logprob_thold: -1.0,
            no_speech_thold: 0.6,
            initial_prompt: None,
            max_context: 16_384,
            no_timestamps: false,
            seed: 0,
        }
    }
}

/// A piece of text between two timestamps.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Segment {
    /// Start and end in centiseconds of the audio (whisper.cpp's unit).
    pub t0: i64,
    pub t1: i64,
    /// Start of the 30 s window it was decoded in, in centiseconds (mel frames).
    pub seek: i64,
    pub text: String,
    /// The segment's tokens, timestamp tokens included.
    pub tokens: Vec<u32>,
    /// Average log-probability of the window's tokens.
    pub avg_logprob: f32,
    /// Probability the window holds no speech.
    pub no_speech_prob: f32,
    /// Temperature the window was decoded at.
    pub temperature: f32,
}

/// A transcription.
#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    pub segments: Vec<Segment>,
    /// Language index used (detected or given); `None` for English-only models.
    pub language: Option<usize>,
    /// Probability of the detected language, when it was detected.
    pub language_prob: Option<f32>,
}

impl Transcript {
    /// All segments' text.
    pub fn text(&self) -> String {
        self.segments.iter().map(|s| s.text.as_str()).collect()
    }
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    id: u32,
    /// Most probable timestamp token at this step (the token itself when it is one).
    tid: u32,
    plog: f32,
}

#[derive(Clone, Debug)]
struct Decoder {
    tokens: Vec<Tok>,
    result_len: usize,
    sum_logprobs_all: f64,
    avg_logprobs: f64,
    score: f64,
    entropy: f64,
    seek_delta: i64,
    has_ts: bool,
    failed: bool,
    completed: bool,
}

impl Decoder {
    fn new() -> Decoder {
        Decoder {
            tokens: Vec::new(),
            result_len: 0,
            sum_logprobs_all: 0.0,
            avg_logprobs: f64::NEG_INFINITY,
            score: f64::NEG_INFINITY,
            entropy: 0.0,
            seek_delta: 100 * 30,
            has_ts: false,
            failed: false,
            completed: false,
        }
    }

    /// whisper.cpp's `whisper_sequence_score` (no length penalty).
    fn score(&mut self) {
        if self.result_len == 0 {
            return;
        }
        let toks = &self.tokens[..self.result_len];
        let sum: f64 = toks.iter().map(|t| f64::from(t.plog)).sum();
        self.avg_logprobs = sum / self.result_len as f64;
        self.score = self.avg_logprobs;
        let last = &toks[self.result_len.saturating_sub(32)..];
        let mut counts = std::collections::BTreeMap::new();
        for t in last {
            *counts.entry(t.id).or_insert(0usize) += 1;
        }
        self.entropy = counts
            .values()
            .map(|&c| {
                let p = c as f64 / last.len() as f64;
                -p * p.ln()
            })
            .sum();
    }
}

/// `log_softmax` over the finite logits.
fn logprobs(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits
        .iter()
        .filter(|l| **l > f32::NEG_INFINITY)
        .map(|l| (l - max).exp())
        .sum();
    let lse = sum.ln() + max;
    logits
        .iter()
        .map(|&l| {
            if l > f32::NEG_INFINITY {
                l - lse
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect()
}

/// The rules of whisper.cpp's `whisper_process_logits` applied to `logits`; returns the
/// filtered logits' log-probabilities and probabilities.
fn process_logits(
    v: &Vocab,
    mut logits: Vec<f32>,
    d: &Decoder,
    temperature: f32,
    opts: &DecodeOptions,
    max_initial_ts_tokens: u32,
) -> (Vec<f32>, Vec<f32>) {
    let ninf = f32::NEG_INFINITY;
    let n = logits.len();
    let beg = v.beg as usize;
    if temperature > 0.0 {
        for l in &mut logits {
            *l /= temperature;
        }
    }
    let initial = d.tokens.is_empty();
    if initial {
        logits[v.eot as usize] = ninf;
        if let Some(&space) = v.space() {
            logits[space as usize] = ninf;
        }
    }
    logits[v.not as usize] = ninf;
    if opts.no_timestamps {
        logits[beg..].fill(ninf);
    }
    for id in [v.sot, v.nosp, v.solm, v.translate, v.transcribe, v.prev] {
        logits[id as usize] = ninf;
    }
    for i in 0..v.n_languages {
        logits[v.lang_token(i) as usize] = ninf;
    }
    // Timestamps come in pairs, except directly before the end.
    let k = d.tokens.len();
    let last_ts = k > 0 && d.tokens[k - 1].id >= v.beg;
    let penultimate_ts = k < 2 || d.tokens[k - 2].id >= v.beg;
    if last_ts {
        if penultimate_ts {
            logits[beg..].fill(ninf);
        } else {
            logits[..v.eot as usize].fill(ninf);
        }
    }
    if initial {
        let first = (beg + max_initial_ts_tokens as usize + 1).min(n);
        logits[first..].fill(ninf);
    }
    // Timestamps only go forward.
    if d.has_ts {
        let tid0 = (d.seek_delta / 2) as usize;
        logits[beg..(beg + tid0).min(n)].fill(ninf);
    }
    let mut lp = logprobs(&logits);
    let ts_max = lp[beg..].iter().copied().fold(ninf, f32::max);
    let sum: f32 = lp[beg..]
        .iter()
        .filter(|l| **l > ninf)
        .map(|l| (l - ts_max).exp())
        .sum();
    let ts_logprob = if sum > 0.0 { sum.ln() + ts_max } else { ninf };
    let text_max = lp[..beg].iter().copied().fold(ninf, f32::max);
    if ts_logprob > text_max {
        logits[..beg].fill(ninf);
        lp[..beg].fill(ninf);
    }
    let probs = logits
        .iter()
        .zip(&lp)
        .map(|(&l, &p)| if l == ninf { 0.0 } else { p.exp() })
        .collect();
    (lp, probs)
}

/// The next token: the most probable (first of equals) or one drawn from `probs`.
fn sample(v: &Vocab, lp: &[f32], probs: &[f32], rng: Option<&mut rand::rngs::StdRng>) -> Tok {
    let beg = v.beg as usize;
    let mut tid = 0u32;
    let mut max_ts = 0f32;
    for (i, &p) in probs.iter().enumerate().skip(beg) {
        if max_ts < p {
            max_ts = p;
            tid = i as u32;
        }
    }
    let id = match rng {
        None => {
            let mut best = (0usize, 0f32);
            for (i, &p) in probs.iter().enumerate() {
                if best.1 < p {
                    best = (i, p);
                }
            }
            best.0
        }
        Some(rng) => match WeightedIndex::new(probs) {
            Ok(dist) => dist.sample(rng),
            Err(_) => 0,
        },
    };
    let tid = if id >= beg { id as u32 } else { tid };
    Tok {
        id: id as u32,
        tid,
        plog: lp[id],
    }
}

/// Transcribes `n_frames` mel frames (the audio's, from whisper.cpp's `n_len`) through `r`.
/// `on_progress` hears the fraction of the audio done after each window.
pub async fn transcribe<R: Runner>(
    r: &mut R,
    v: &Vocab,
    n_text_ctx: usize,
    n_audio_ctx: usize,
    n_frames: usize,
    opts: &DecodeOptions,
    mut on_progress: impl FnMut(f32),
) -> Result<Transcript, SpeechError> {
    const DELTA_MIN: i64 = 10;
    let seek_end = n_frames as i64;
    let mut out = Transcript {
        segments: Vec::new(),
        language: None,
        language_prob: None,
    };
    if seek_end < DELTA_MIN {
        return Ok(out);
    }
    if v.multilingual {
        match opts.language {
            Some(l) if l < v.n_languages => out.language = Some(l),
            Some(l) => {
                return Err(SpeechError::UnknownLanguage(format!(
                    "{} (this model knows {} languages)",
                    crate::lang::code(l.min(crate::lang::LANGUAGES.len() - 1)),
                    v.n_languages
                )))
            }
            None => {
                let (l, p) = detect_language(r, v).await?;
                out.language = Some(l);
                out.language_prob = Some(p);
            }
        }
    }
    let mut temperatures = vec![opts.temperature];
    if opts.temperature_inc > 0.0 {
        let mut t = opts.temperature + opts.temperature_inc;
        while t < 1.0 + 1e-6 {
            temperatures.push(t);
            t += opts.temperature_inc;
        }
    }
    let max_prompt = opts.max_context.min(n_text_ctx / 2);
    let mut past: Vec<u32> = match &opts.initial_prompt {
        Some(p) => v.tokenize(p),
        None => Vec::new(),
    };
    let mut prompt_init = vec![v.sot];
    if let Some(l) = out.language {
        prompt_init.push(v.lang_token(l));
        prompt_init.push(if opts.translate {
            v.translate
        } else {
            v.transcribe
        });
    }
    if opts.no_timestamps {
        prompt_init.push(v.not);
    }
    // The first timestamp is at most 1 s: 50 steps of 20 ms over a 1500-position window.
    let precision = 30.0 / n_audio_ctx as f32;
    let max_initial_ts = (1.0 / precision).round() as u32;
    let n_max = n_text_ctx / 2 - 4;
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);

    let mut seek = 0i64;
    while seek + DELTA_MIN < seek_end {
        r.encode(seek as usize).await?;
        if seek > 0 && seek + 500 >= seek_end {
            past.clear();
        }
        let mut best: Option<(Decoder, f32)> = None;
        let mut no_speech_prob = 0f32;
        let mut prompt = Vec::new();
        for (it, &t) in temperatures.iter().enumerate() {
            let n_dec = if t > 0.0 { opts.best_of.max(1) } else { 1 };
            prompt.clear();
            if max_prompt > 0 && t < 0.5 && !past.is_empty() {
                prompt.push(v.prev);
                let take = (max_prompt - 1).min(past.len());
                prompt.extend_from_slice(&past[past.len() - take..]);
            }
            prompt.extend_from_slice(&prompt_init);
            let mut decoders = Vec::with_capacity(n_dec);
            for _ in 0..n_dec {
                let mut d = Decoder::new();
                let logits = r.decode(&prompt, 0).await?;
                let lp = logprobs(&logits);
                no_speech_prob = lp[v.nosp as usize].exp();
                let (mut lp, mut probs) = process_logits(v, logits, &d, t, opts, max_initial_ts);
                for i in 0..n_max {
                    let tok = sample(v, &lp, &probs, (t > 0.0).then_some(&mut rng));
                    d.tokens.push(tok);
                    d.sum_logprobs_all += f64::from(tok.plog);
                    if tok.id > v.beg {
                        let new = 2 * i64::from(tok.id - v.beg);
                        if d.has_ts && d.seek_delta > new && d.result_len < i {
                            d.failed = true;
                            break;
                        }
                        d.seek_delta = new;
                        d.result_len = i + 1;
                        d.has_ts = true;
                    }
                    if tok.id == v.eot || (d.has_ts && seek + d.seek_delta + DELTA_MIN >= seek_end)
                    {
                        if d.result_len == 0 && !opts.no_timestamps {
                            if seek + d.seek_delta + DELTA_MIN >= seek_end {
                                d.result_len = i + 1;
                            } else {
                                d.failed = true;
                                break;
                            }
                        }
                        if opts.no_timestamps {
                            d.result_len = i + 1;
                            d.seek_delta = 100 * 30;
                        }
                        d.completed = true;
                        break;
                    }
                    if i == n_max - 1 && (d.result_len == 0 || d.seek_delta < 100 * 30 / 2) {
                        d.failed = true;
                        break;
                    }
                    let logits = r.decode(&[tok.id], prompt.len() + i).await?;
                    (lp, probs) = process_logits(v, logits, &d, t, opts, max_initial_ts);
                }
                decoders.push(d);
            }
            let mut best_j = None;
            let mut best_score = f64::NEG_INFINITY;
            for (j, d) in decoders.iter_mut().enumerate() {
                if d.failed {
                    continue;
                }
                d.tokens.truncate(d.result_len);
                d.score();
                if d.result_len > 32 && d.entropy < f64::from(opts.entropy_thold) {
                    d.failed = true;
                    continue;
                }
                if best_score < d.score {
                    best_score = d.score;
                    best_j = Some(j);
                }
            }
            let last = it == temperatures.len() - 1;
            let chosen = best_j.map(|j| decoders.swap_remove(j));
            let success = match &chosen {
                None => false,
                Some(d) => {
                    !(d.avg_logprobs < f64::from(opts.logprob_thold)
                        && no_speech_prob < opts.no_speech_thold)
                }
            };
            if let Some(d) = chosen {
                best = Some((d, t));
            } else if best.is_none() && last {
                // Every candidate failed: the first is kept, as whisper.cpp does, scored over
                // all its tokens.
                best = decoders.into_iter().next().map(|mut d| {
                    d.avg_logprobs = d.sum_logprobs_all / d.tokens.len().max(1) as f64;
                    (d, t)
                });
            }
            if success || last {
                break;
            }
        }
        let Some((d, t)) = best else {
            break;
        };
        let mut seek_delta = d.seek_delta;
        let is_no_speech =
            no_speech_prob > opts.no_speech_thold && d.avg_logprobs < f64::from(opts.logprob_thold);
        // The next window's context: this window's context and its text.
        let mut next_past = Vec::new();
        if prompt.first() == Some(&v.prev) {
            next_past.extend_from_slice(&prompt[1..prompt.len() - prompt_init.len()]);
        }
        let toks = &d.tokens;
        if !is_no_speech {
            next_past.extend(toks.iter().take(d.result_len).map(|t| t.id));
        }
        past = next_past;
        if !toks.is_empty() && !is_no_speech {
            let seg = |t0: i64, t1: i64, ids: &[Tok]| Segment {
                t0,
                t1,
                seek,
                text: v.text(&ids.iter().map(|t| t.id).collect::<Vec<_>>()),
                tokens: ids.iter().map(|t| t.id).collect(),
                avg_logprob: d.avg_logprobs as f32,
                no_speech_prob,
                temperature: t,
            };
            let mut i0 = 0;
            let mut t0 = seek + 2 * (i64::from(toks[0].tid) - i64::from(v.beg));
            let mut has_text = false;
            let mut i = 0;
            while i < toks.len() {
                has_text |= toks[i].id < v.eot && !v.tokens[toks[i].id as usize].is_empty();
                if toks[i].id > v.beg && !opts.no_timestamps {
                    let t1 = seek + 2 * (i64::from(toks[i].tid) - i64::from(v.beg));
                    if has_text {
                        out.segments.push(seg(t0, t1, &toks[i0..=i]));
                    }
                    has_text = false;
                    t0 = t1;
                    while i + 1 < toks.len() && toks[i + 1].id > v.beg {
                        i += 1;
                        t0 = seek + 2 * (i64::from(toks[i].tid) - i64::from(v.beg));
                    }
                    i0 = i + 1;
                }
                i += 1;
            }
            if has_text {
                out.segments.push(seg(t0, seek + seek_delta, &toks[i0..]));
            }
        }
        let n = toks.len();
        if n > 1 && toks[n - 2].id < v.beg && toks[n - 1].id > v.beg {
            seek_delta = (seek_end - seek).min(WINDOW_FRAMES as i64);
        }
        seek += seek_delta;
        on_progress((seek.min(seek_end) as f32) / seek_end as f32);
    }
    Ok(out)
}

/// The most probable language of the encoded window and its probability (whisper.cpp's
/// `whisper_lang_auto_detect`: the language tokens' logits after `<|startoftranscript|>`).
pub async fn detect_language<R: Runner>(r: &mut R, v: &Vocab) -> Result<(usize, f32), SpeechError> {
    if !v.multilingual {
        return Err(SpeechError::Unsupported(
            "language detection needs a multilingual model; this one is English-only".into(),
        ));
    }
    r.encode(0).await?;
    let logits = r.decode(&[v.sot], 0).await?;
    let ls: Vec<f32> = (0..v.n_languages)
        .map(|i| logits[v.lang_token(i) as usize])
        .collect();
    let max = ls.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = ls.iter().map(|&l| f64::from(l - max).exp()).sum();
    let (best, &l) =
        ls.iter().enumerate().fold(
            (0, &f32::NEG_INFINITY),
            |a, b| if b.1 > a.1 { b } else { a },
        );
    Ok((best, (f64::from(l - max).exp() / sum) as f32))
}
