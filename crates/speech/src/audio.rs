//! Audio files to Whisper's input: any container and codec symphonia reads (WAV, FLAC, MP3,
//! Ogg/Vorbis), mixed down to mono by averaging the channels (as whisper.cpp does) and resampled
//! to 16 kHz with a band-limited FFT resampler.

use std::io::Cursor;

use rubato::{FftFixedIn, Resampler};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use crate::error::SpeechError;

/// Whisper's sample rate.
pub const SAMPLE_RATE: u32 = 16_000;

/// Mono samples at [`SAMPLE_RATE`], in [-1, 1].
#[derive(Clone, Debug, PartialEq)]
pub struct Audio {
    pub samples: Vec<f32>,
}

impl Audio {
    /// Duration in seconds.
    pub fn seconds(&self) -> f64 {
        self.samples.len() as f64 / f64::from(SAMPLE_RATE)
    }
}

/// Decodes an audio file's bytes. `ext` (a file name's extension) helps the format probe;
/// `max_seconds` refuses longer audio as soon as decoding passes it.
pub fn decode(
    bytes: Vec<u8>,
    ext: Option<&str>,
    max_seconds: Option<f64>,
) -> Result<Audio, SpeechError> {
    let bad = |why: String| SpeechError::Audio(why);
    if bytes.is_empty() {
        return Err(bad("the file is empty".into()));
    }
    let mut hint = Hint::new();
    if let Some(ext) = ext {
        hint.with_extension(ext);
    }
    let stream = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let probed = symphonia::default::get_probe()
        .format(
            &hint,
            stream,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .map_err(|e| {
            bad(format!(
                "not an audio file this build reads (WAV, FLAC, MP3, Ogg/Vorbis): {e}"
            ))
        })?;
    let mut format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| bad("the file has no audio track".into()))?;
    let track_id = track.id;
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(|e| bad(format!("unsupported codec: {e}")))?;
    let mut rate = track.codec_params.sample_rate;
    let mut mono: Vec<f32> = Vec::new();
    let mut buf: Option<SampleBuffer<f32>> = None;
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break
            }
            Err(SymphoniaError::ResetRequired) => break,
            Err(e) => return Err(bad(format!("reading the audio stream: {e}"))),
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            // A corrupt frame is skipped, as players do; the rest of the stream still decodes.
            Err(SymphoniaError::DecodeError(_)) => continue,
            Err(e) => return Err(bad(format!("decoding the audio: {e}"))),
        };
        let spec = *decoded.spec();
        rate = Some(spec.rate);
        let channels = spec.channels.count().max(1);
        let b = match &mut buf {
            Some(b) if b.capacity() >= decoded.capacity() * channels => b,
            _ => buf.insert(SampleBuffer::new(decoded.capacity() as u64, spec)),
        };
        b.copy_interleaved_ref(decoded);
        let inv = 1.0 / channels as f32;
        mono.extend(
            b.samples()
                .chunks_exact(channels)
                .map(|f| f.iter().sum::<f32>() * inv),
        );
        if let (Some(max), Some(r)) = (max_seconds, rate) {
            if mono.len() as f64 / f64::from(r) > max {
                return Err(SpeechError::TooLong { max_seconds: max });
            }
        }
    }
    let rate = rate.ok_or_else(|| bad("the stream states no sample rate".into()))?;
    if mono.is_empty() {
        return Err(bad("the file holds no audio samples".into()));
    }
    Ok(Audio {
        samples: resample(&mono, rate)?,
    })
}

/// `x` sampled at `rate` Hz, at [`SAMPLE_RATE`].
pub fn resample(x: &[f32], rate: u32) -> Result<Vec<f32>, SpeechError> {
    if rate == SAMPLE_RATE {
        return Ok(x.to_vec());
    }
    if rate == 0 {
        return Err(SpeechError::Audio("a sample rate of 0 Hz".into()));
    }
    const CHUNK: usize = 1024;
    let err =
        |e: &dyn std::fmt::Display| SpeechError::Audio(format!("resampling from {rate} Hz: {e}"));
    let mut r = FftFixedIn::<f32>::new(rate as usize, SAMPLE_RATE as usize, CHUNK, 2, 1)
        .map_err(|e| err(&e))?;
    let want = (x.len() as u64 * u64::from(SAMPLE_RATE)).div_ceil(u64::from(rate)) as usize;
    let delay = r.output_delay();
    let mut out = Vec::with_capacity(want + delay + CHUNK);
    let mut pos = 0;
    while pos < x.len() {
        let need = r.input_frames_next();
        let block = if pos + need <= x.len() {
            r.process(&[&x[pos..pos + need]], None)
        } else {
            r.process_partial(Some(&[&x[pos..]]), None)
        }
        .map_err(|e| err(&e))?;
        out.extend_from_slice(&block[0]);
        pos += need;
    }
    // Flush the filter's delay line until the delayed tail is out.
    while out.len() < want + delay {
        let block = r
            .process_partial::<&[f32]>(None, None)
            .map_err(|e| err(&e))?;
        if block[0].is_empty() {
            break;
        }
        out.extend_from_slice(&block[0]);
    }
    let end = (delay + want).min(out.len());
    Ok(out[delay.min(end)..end].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit PCM WAV file of `samples` (interleaved) at `rate` Hz.
    pub(crate) fn wav(samples: &[i16], rate: u32, channels: u16) -> Vec<u8> {
        let data = samples.len() as u32 * 2;
        let mut v = Vec::new();
        v.extend_from_slice(b"RIFF");
        v.extend_from_slice(&(36 + data).to_le_bytes());
        v.extend_from_slice(b"WAVEfmt ");
        v.extend_from_slice(&16u32.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&channels.to_le_bytes());
        v.extend_from_slice(&rate.to_le_bytes());
        v.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
        v.extend_from_slice(&(channels * 2).to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(b"data");
        v.extend_from_slice(&data.to_le_bytes());
        for s in samples {
            v.extend_from_slice(&s.to_le_bytes());
        }
        v
    }

    #[test]
    fn stereo_wav_is_averaged_to_mono() {
        let frames: Vec<i16> = (0..1600)
            .flat_map(|i| [i as i16, -(i as i16) + 200])
            .collect();
        let a = decode(wav(&frames, 16_000, 2), Some("wav"), None).unwrap();
        assert_eq!(a.samples.len(), 1600);
        for s in &a.samples {
            assert!((s - 100.0 / 32768.0).abs() < 1e-6, "{s}");
        }
    }

    #[test]
    fn resampling_keeps_a_tone_and_the_length() {
        // A 440 Hz tone at 44.1 kHz for 0.5 s.
        let x: Vec<f32> = (0..22_050)
            .map(|i| (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 44_100.0).sin() * 0.5)
            .collect();
        let y = resample(&x, 44_100).unwrap();
        assert_eq!(y.len(), 8000);
        // Away from the edges, the tone at 16 kHz.
        let mut worst = 0f32;
        for (i, &v) in y.iter().enumerate().skip(400).take(7000) {
            let want = (2.0 * std::f32::consts::PI * 440.0 * i as f32 / 16_000.0).sin() * 0.5;
            worst = worst.max((v - want).abs());
        }
        assert!(worst < 0.01, "worst error {worst}");
    }

    #[test]
    fn bad_input_is_named() {
        let e = decode(Vec::new(), None, None).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = decode(
            b"this is not audio at all, just text".to_vec(),
            Some("txt"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not an audio file"), "{e}");
        let long = wav(&vec![0; 16_000 * 3], 16_000, 1);
        let e = decode(long, Some("wav"), Some(2.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than"), "{e}");
    }
}
