//! whisper.cpp's decoding rules on a scripted model: a runner whose logits peak at the next
//! token of a script, so the segments, the seek through windows, the prompts, language
//! detection and the temperature fallback can be checked exactly.

use wgllm_gguf::{Array, GgufFile, GgufWriter, Value};
use wgllm_models::session::now;
use wgllm_models::tokenizer::encode_byte_level;
use wgllm_speech::decode::{self, DecodeOptions, Runner};
use wgllm_speech::model::{keys, Vocab};
use wgllm_speech::SpeechError;

/// A vocabulary of `n_vocab` tokens whose first 256 are the bytes.
fn vocab(n_vocab: u64) -> Vocab {
    let mut w = GgufWriter::new();
    let tokens = (0..256u32).map(|b| encode_byte_level(&[b as u8])).collect();
    w.add_metadata(keys::TOKENS, Value::Array(Array::String(tokens)))
        .unwrap();
    let f = GgufFile::from_bytes(w.to_vec().into()).unwrap();
    Vocab::from_gguf(&f, n_vocab).unwrap()
}

/// Logits peaking at each window's next scripted token; records what it was asked.
struct Scripted {
    n_vocab: usize,
    /// Per window, the tokens the model "wants" in order.
    windows: Vec<Vec<u32>>,
    /// Logits answering a lone `<|startoftranscript|>` before any window (language detection).
    detect: Option<Vec<f32>>,
    window: usize,
    prompt_len: usize,
    seeks: Vec<usize>,
    prompts: Vec<Vec<u32>>,
}

impl Scripted {
    fn new(n_vocab: usize, windows: Vec<Vec<u32>>) -> Scripted {
        Scripted {
            n_vocab,
            windows,
            detect: None,
            window: 0,
            prompt_len: 0,
            seeks: Vec::new(),
            prompts: Vec::new(),
        }
    }
}

impl Runner for Scripted {
    async fn encode(&mut self, seek: usize) -> Result<(), SpeechError> {
        self.seeks.push(seek);
        Ok(())
    }

    async fn decode(&mut self, tokens: &[u32], n_past: usize) -> Result<Vec<f32>, SpeechError> {
        if n_past == 0 {
            if let (Some(d), true) = (&self.detect, self.prompts.is_empty() && tokens.len() == 1) {
                self.prompts.push(tokens.to_vec());
                return Ok(d.clone());
            }
            self.prompts.push(tokens.to_vec());
            self.prompt_len = tokens.len();
            self.window = self.seeks.len() - 1;
        }
        let step = if n_past == 0 {
            0
        } else {
            n_past + 1 - self.prompt_len
        };
        let script = &self.windows[self.window.min(self.windows.len() - 1)];
        let next = script[step.min(script.len() - 1)];
        let mut logits = vec![0f32; self.n_vocab];
        logits[next as usize] = 20.0;
        Ok(logits)
    }
}

#[test]
fn timestamps_cut_segments_and_seek_through_windows() {
    let v = vocab(51_864);
    // English-only: whisper.cpp's ids, no language shift.
    assert_eq!(
        (v.eot, v.sot, v.prev, v.nosp, v.not, v.beg),
        (50_256, 50_257, 50_360, 50_361, 50_362, 50_363)
    );
    let (b, eot) = (v.beg, v.eot);
    let t = |c: char| c as u32;
    let w1 = vec![
        b,
        t('H'),
        t('i'),
        b + 100,
        b + 150,
        t('Y'),
        t('o'),
        b + 1400,
        eot,
    ];
    let w2 = vec![b, t('O'), t('k'), b + 250, eot];
    let mut r = Scripted::new(51_864, vec![w1, w2]);
    // 40 s of frames.
    let tr = now(decode::transcribe(
        &mut r,
        &v,
        448,
        1500,
        4000,
        &DecodeOptions::default(),
        |_| {},
    ))
    .unwrap();
    let segs: Vec<(i64, i64, &str)> = tr
        .segments
        .iter()
        .map(|s| (s.t0, s.t1, s.text.as_str()))
        .collect();
    assert_eq!(
        segs,
        [(0, 200, "Hi"), (300, 2800, "Yo"), (3000, 3500, "Ok")]
    );
    // A window ending on a lone timestamp moves the seek a whole window.
    assert_eq!(r.seeks, [0, 3000]);
    assert_eq!(r.prompts[0], [v.sot]);
    // The second window is conditioned on the first one's tokens.
    let mut want = vec![
        v.prev,
        b,
        t('H'),
        t('i'),
        b + 100,
        b + 150,
        t('Y'),
        t('o'),
        b + 1400,
    ];
    want.push(v.sot);
    assert_eq!(r.prompts[1], want);
    assert_eq!(tr.segments[0].tokens, [b, t('H'), t('i'), b + 100]);
    assert_eq!(tr.language, None);
}

#[test]
fn a_window_ending_on_a_timestamp_pair_seeks_to_it() {
    let v = vocab(51_864);
    let (b, eot) = (v.beg, v.eot);
    // Text, then a closing and an opening timestamp at 10 s, then the end: seek to 10 s.
    let w1 = vec![b, 'A' as u32, b + 500, b + 500, eot];
    let w2 = vec![b, 'B' as u32, b + 100, eot];
    let mut r = Scripted::new(51_864, vec![w1, w2]);
    let tr = now(decode::transcribe(
        &mut r,
        &v,
        448,
        1500,
        2000,
        &DecodeOptions::default(),
        |_| {},
    ))
    .unwrap();
    assert_eq!(r.seeks, [0, 1000]);
    let segs: Vec<(i64, i64, &str)> = tr
        .segments
        .iter()
        .map(|s| (s.t0, s.t1, s.text.as_str()))
        .collect();
    assert_eq!(segs, [(0, 1000, "A"), (1000, 1200, "B")]);
}

#[test]
fn language_is_detected_and_translation_asked_for() {
    let v = vocab(51_865);
    assert!(v.multilingual);
    assert_eq!(
        (v.eot, v.sot, v.translate, v.beg),
        (50_257, 50_258, 50_358, 50_364)
    );
    let mut detect = vec![0f32; 51_865];
    let de = wgllm_speech::lang::find("de").unwrap();
    detect[v.lang_token(de) as usize] = 9.0;
    detect[v.lang_token(0) as usize] = 4.0;
    let mut r = Scripted::new(51_865, vec![vec![v.beg, 'J' as u32, v.beg + 50, v.eot]]);
    r.detect = Some(detect);
    let opts = DecodeOptions {
        translate: true,
        ..DecodeOptions::default()
    };
    let tr = now(decode::transcribe(
        &mut r,
        &v,
        448,
        1500,
        300,
        &opts,
        |_| {},
    ))
    .unwrap();
    assert_eq!(tr.language, Some(de));
    // e^9 against e^4 and 97 languages at e^0.
    let p = tr.language_prob.unwrap();
    assert!(
        (p - 8103.08 / (8103.08 + 54.598 + 97.0)).abs() < 1e-3,
        "{p}"
    );
    assert_eq!(r.prompts[1], [v.sot, v.lang_token(de), v.translate]);
    assert_eq!(tr.text(), "J");
    // A given language is used as it is.
    let mut r = Scripted::new(51_865, vec![vec![v.beg, 'J' as u32, v.beg + 50, v.eot]]);
    let opts = DecodeOptions {
        language: Some(6),
        ..DecodeOptions::default()
    };
    now(decode::transcribe(
        &mut r,
        &v,
        448,
        1500,
        300,
        &opts,
        |_| {},
    ))
    .unwrap();
    assert_eq!(r.prompts[0], [v.sot, v.lang_token(6), v.transcribe]);
}

#[test]
fn a_repetition_loop_falls_back_through_the_temperatures() {
    let v = vocab(51_864);
    // The model never stops repeating one token and never gives a timestamp.
    let mut r = Scripted::new(51_864, vec![vec!['a' as u32]]);
    let tr = now(decode::transcribe(
        &mut r,
        &v,
        448,
        1500,
        1000,
        &DecodeOptions::default(),
        |_| {},
    ))
    .unwrap();
    // Temperature 0 once, then 0.2 ... 1.0 with 5 candidates each.
    assert_eq!(r.prompts.len(), 1 + 5 * 5);
    assert!(tr
        .segments
        .iter()
        .all(|s| (s.temperature - 1.0).abs() < 1e-4));
    // Without the fallback, one try.
    let mut r = Scripted::new(51_864, vec![vec!['a' as u32]]);
    let opts = DecodeOptions {
        temperature_inc: 0.0,
        ..DecodeOptions::default()
    };
    now(decode::transcribe(
        &mut r,
        &v,
        448,
        1500,
        1000,
        &opts,
        |_| {},
    ))
    .unwrap();
    assert_eq!(r.prompts.len(), 1);
}

#[test]
fn prompts_tokenize_by_longest_pieces() {
    let v = vocab(51_864);
    let ids = v.tokenize("Hi!");
    assert_eq!(ids, ['H' as u32, 'i' as u32, '!' as u32]);
    assert_eq!(v.text(&ids), "Hi!");
}
