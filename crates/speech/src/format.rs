//! A transcript written out: plain text, SubRip (SRT), WebVTT and OpenAI's `verbose_json`.

use serde_json::json;

use crate::decode::Transcript;

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The text alone (OpenAI's `text`).
    Text,
    /// `{"text": ...}` (OpenAI's `json`).
    Json,
    /// Segments with times, tokens and scores (OpenAI's `verbose_json`).
    VerboseJson,
    Srt,
    Vtt,
}

impl Format {
    /// The format named `s` (OpenAI's `response_format` names; `txt` for text).
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "text" | "txt" => Format::Text,
            "json" => Format::Json,
            "verbose_json" => Format::VerboseJson,
            "srt" => Format::Srt,
            "vtt" => Format::Vtt,
            _ => return None,
        })
    }

    /// The MIME type of the written form.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text | Format::Srt => "text/plain; charset=utf-8",
            Format::Vtt => "text/vtt; charset=utf-8",
            Format::Json | Format::VerboseJson => "application/json",
        }
    }
}

/// `hh:mm:ss<sep>mmm` of `t` centiseconds.
fn stamp(t: i64, sep: char) -> String {
    let ms = t.max(0) * 10;
    format!(
        "{:02}:{:02}:{:02}{sep}{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// `t` writes `tr` in format `f`; `duration` is the audio's length in seconds.
pub fn write(tr: &Transcript, f: Format, task: &str, duration: f64) -> String {
    match f {
        Format::Text => {
            let mut s: String = tr
                .segments
                .iter()
                .map(|s| format!("{}\n", s.text.trim()))
                .collect();
            if s.is_empty() {
                s.push('\n');
            }
            s
        }
        Format::Json => json!({ "text": tr.text().trim() }).to_string(),
        Format::VerboseJson => {
            let segments: Vec<_> = tr
                .segments
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    json!({
                        "id": i,
                        "seek": s.seek,
                        "start": s.t0 as f64 / 100.0,
                        "end": s.t1 as f64 / 100.0,
                        "text": s.text,
                        "tokens": s.tokens,
                        "temperature": s.temperature,
                        "avg_logprob": s.avg_logprob,
                        "no_speech_prob": s.no_speech_prob,
                    })
                })
                .collect();
            let language = tr
                .language
                .map_or("english", |l| crate::lang::LANGUAGES[l].1);
            json!({
                "task": task,
                "language": language,
                "duration": duration,
                "text": tr.text().trim(),
                "segments": segments,
            })
            .to_string()
        }
        Format::Srt => tr
            .segments
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "{}\n{} --> {}\n{}\n\n",
                    i + 1,
                    stamp(s.t0, ','),
                    stamp(s.t1, ','),
                    s.text.trim()
                )
            })
            .collect(),
        Format::Vtt => {
            let mut out = String::from("WEBVTT\n\n");
            for s in &tr.segments {
                out += &format!(
                    "{} --> {}\n{}\n\n",
                    stamp(s.t0, '.'),
                    stamp(s.t1, '.'),
                    s.text.trim()
                );
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Segment;

    fn transcript() -> Transcript {
        let seg = |t0, t1, text: &str| Segment {
            t0,
            t1,
            seek: 0,
            text: text.into(),
            tokens: vec![1, 2],
            avg_logprob: -0.25,
            no_speech_prob: 0.01,
            temperature: 0.0,
        };
        Transcript {
            segments: vec![
                seg(0, 250, " Hello there."),
                seg(250, 366_012, " General Kenobi."),
            ],
            language: None,
            language_prob: None,
        }
    }

    #[test]
    fn subtitles_have_their_times() {
        let t = transcript();
        assert_eq!(
            write(&t, Format::Srt, "transcribe", 1.0),
            "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n\
             2\n00:00:02,500 --> 01:01:00,120\nGeneral Kenobi.\n\n"
        );
        let vtt = write(&t, Format::Vtt, "transcribe", 1.0);
        assert!(
            vtt.starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n"),
            "{vtt}"
        );
        assert_eq!(
            write(&t, Format::Text, "transcribe", 1.0),
            "Hello there.\nGeneral Kenobi.\n"
        );
        let v: serde_json::Value =
            serde_json::from_str(&write(&t, Format::VerboseJson, "transcribe", 3.5)).unwrap();
        assert_eq!(v["text"], "Hello there. General Kenobi.");
        assert_eq!(v["segments"][1]["start"], 2.5);
        assert_eq!(v["duration"], 3.5);
    }
}
