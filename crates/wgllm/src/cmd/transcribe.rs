//! `wgllm transcribe`: speech to text with a Whisper model (like whisper.cpp's whisper-cli):
//! audio files in (WAV, FLAC, MP3, Ogg/Vorbis, any rate), text or subtitles out.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use wgllm_speech::decode::DecodeOptions;
use wgllm_speech::format::{write, Format};
use wgllm_speech::{audio, lang, Transcriber, WhisperModel};

use super::backend::BackendArgs;

/// `-o`: the output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Plain text, one segment a line.
    Txt,
    /// SubRip subtitles.
    Srt,
    /// WebVTT subtitles.
    Vtt,
    /// Segments with times, tokens and scores (OpenAI's verbose_json).
    Json,
}

impl OutputFormat {
    fn format(self) -> Format {
        match self {
            OutputFormat::Txt => Format::Text,
            OutputFormat::Srt => Format::Srt,
            OutputFormat::Vtt => Format::Vtt,
            OutputFormat::Json => Format::VerboseJson,
        }
    }

    fn ext(self) -> &'static str {
        match self {
            OutputFormat::Txt => "txt",
            OutputFormat::Srt => "srt",
            OutputFormat::Vtt => "vtt",
            OutputFormat::Json => "json",
        }
    }
}

/// Arguments of `wgllm transcribe`.
#[derive(ClapArgs, Debug)]
#[command(after_help = "Examples:\n  \
    wgllm transcribe -m ggml-tiny.en.bin jfk.wav\n  \
    wgllm transcribe -m whisper-tiny.en talk.mp3 -o srt > talk.srt\n  \
    wgllm transcribe -m ggml-small.bin interview.flac --language auto --translate\n  \
    wgllm transcribe -m model.gguf a.wav b.ogg -o vtt --output-dir subs/   (subs/a.vtt, subs/b.vtt)")]
pub struct Args {
    /// Whisper model: whisper.cpp's ggml-*.bin, a GGUF of architecture whisper, or a known model
    /// name (`whisper-tiny.en`).
    #[arg(short = 'm', long = "model")]
    pub model: String,
    #[command(flatten)]
    pub hub: super::pull::HubArgs,
    /// Audio files to transcribe.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Txt)]
    pub output: OutputFormat,
    /// Write `<DIR>/<file stem>.<format>` for each input instead of printing to stdout.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Spoken language (a code such as en, de, ja, or an English name); `auto` detects it from
    /// the first 30 s. English-only models (*.en) always transcribe English.
    #[arg(short = 'l', long, default_value = "auto")]
    pub language: String,
    /// Translate the speech into English text (multilingual models).
    #[arg(long)]
    pub translate: bool,
    /// Text the transcription follows on from (names, spelling, style).
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Sampling temperature of the first try of each 30 s window (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Never retry a window at a higher temperature when its decoding fails.
    #[arg(long)]
    pub no_fallback: bool,
    /// Candidates sampled at each fallback temperature.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub best_of: usize,
    /// Previous text tokens each window is conditioned on (0: none).
    #[arg(long, default_value_t = 16_384, value_name = "N")]
    pub max_context: usize,
    /// Plain text without timestamp tokens (one segment per 30 s window).
    #[arg(long)]
    pub no_timestamps: bool,
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// Decoding options from the flags.
fn options(args: &Args, multilingual: bool) -> Result<DecodeOptions> {
    let language = match args.language.as_str() {
        "auto" => None,
        s => Some(lang::find(s).with_context(|| {
            format!("unknown language '{s}' (a code such as en, de, fr, or auto)")
        })?),
    };
    if !multilingual && args.translate {
        bail!("--translate needs a multilingual model; this one is English-only");
    }
    if !multilingual && language.is_some_and(|l| l != 0) {
        bail!(
            "this model is English-only; --language {} needs a multilingual one",
            args.language
        );
    }
    Ok(DecodeOptions {
        language,
        translate: args.translate,
        temperature: args.temperature,
        temperature_inc: if args.no_fallback { 0.0 } else { 0.2 },
        best_of: args.best_of.max(1),
        initial_prompt: args.prompt.clone(),
        max_context: args.max_context,
        no_timestamps: args.no_timestamps,
        ..DecodeOptions::default()
    })
}

/// Transcribes each file and prints or writes its transcript.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let path = super::pull::resolve_model(Some(&args.model), &args.hub)?;
    let model = WhisperModel::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let opts = options(args, model.vocab.multilingual)?;
    let (backend, desc) = args.backend.open()?;
    let t_load = Instant::now();
    let mut t = Transcriber::new(Arc::new(model), backend.as_ref())?;
    let load_s = t_load.elapsed().as_secs_f64();
    if let Some(dir) = &args.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let task = if args.translate {
        "translate"
    } else {
        "transcribe"
    };
    let (mut audio_s, mut work_s) = (0f64, 0f64);
    for file in &args.files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let ext = file.extension().and_then(|e| e.to_str());
        let a = audio::decode(bytes, ext, None)
            .with_context(|| format!("decoding {}", file.display()))?;
        let bar = ProgressBar::new(1000).with_style(
            ProgressStyle::with_template("wgllm: {msg} [{bar:40}] {percent}%, {eta} left")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message(file.display().to_string());
        let t0 = Instant::now();
        let tr = t
            .transcribe(&a, &opts, |f| bar.set_position((f * 1000.0) as u64))
            .with_context(|| format!("transcribing {}", file.display()))?;
        bar.finish_and_clear();
        work_s += t0.elapsed().as_secs_f64();
        audio_s += a.seconds();
        if let (Some(l), Some(p)) = (tr.language, tr.language_prob) {
            eprintln!(
                "wgllm transcribe: {}: detected language {} (p = {p:.3})",
                file.display(),
                lang::code(l)
            );
        }
        let text = write(&tr, args.output.format(), task, a.seconds());
        match &args.output_dir {
            Some(dir) => {
                let stem = file
                    .file_stem()
                    .map_or("audio".into(), |s| s.to_string_lossy().into_owned());
                let dest = dir.join(format!("{stem}.{}", args.output.ext()));
                std::fs::write(&dest, text)
                    .with_context(|| format!("writing {}", dest.display()))?;
                eprintln!("wgllm transcribe: wrote {}", dest.display());
            }
            None => out.write_all(text.as_bytes())?,
        }
    }
    eprintln!(
        "wgllm transcribe: {audio_s:.1} s of audio in {work_s:.2} s (real-time factor {:.3}, {:.1}x real time), model compiled in {load_s:.2} s, on {desc}",
        work_s / audio_s.max(1e-9),
        audio_s / work_s.max(1e-9),
    );
    Ok(())
}
