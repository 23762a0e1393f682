//! Whisper's log-mel spectrogram, computed as whisper.cpp computes it: a 400-point periodic
//! Hann window every 160 samples (25 ms every 10 ms at 16 kHz) over the audio with 200 samples
//! reflected before it and 30 s of silence after it, the power spectrum through the model's mel
//! filter bank, `log10` clamped at 8 below the maximum, then `(x + 4) / 4`.

use rayon::prelude::*;
use realfft::RealFftPlanner;

/// FFT length.
pub const N_FFT: usize = 400;
/// Samples between frames.
pub const HOP: usize = 160;
/// Frames in one 30 s window.
pub const WINDOW_FRAMES: usize = 3000;
/// Frames per second.
pub const FRAMES_PER_SECOND: usize = 100;

/// A mel filter bank: `n_mel` rows of `n_freq` (`N_FFT / 2 + 1`) weights.
#[derive(Clone, Debug, PartialEq)]
pub struct MelFilters {
    pub n_mel: usize,
    pub n_freq: usize,
    pub data: Vec<f32>,
}

impl MelFilters {
    /// librosa's Slaney-normalised filter bank over 0..8 kHz (`librosa.filters.mel(sr=16000,
    /// n_fft=400, n_mels, norm="slaney")`), which is what Whisper was trained with.
    pub fn slaney(n_mel: usize) -> MelFilters {
        let sr = 16_000.0f64;
        let n_freq = N_FFT / 2 + 1;
        let (f_sp, min_log_hz) = (200.0 / 3.0, 1000.0);
        let min_log_mel = min_log_hz / f_sp;
        let logstep = 6.4f64.ln() / 27.0;
        let hz_to_mel = |f: f64| {
            if f >= min_log_hz {
                min_log_mel + (f / min_log_hz).ln() / logstep
            } else {
                f / f_sp
            }
        };
        let mel_to_hz = |m: f64| {
            if m >= min_log_mel {
                min_log_hz * (logstep * (m - min_log_mel)).exp()
            } else {
                f_sp * m
            }
        };
        let top = hz_to_mel(sr / 2.0);
        let mel_f: Vec<f64> = (0..n_mel + 2)
            .map(|i| mel_to_hz(top * i as f64 / (n_mel + 1) as f64))
            .collect();
        let fft_f: Vec<f64> = (0..n_freq)
            .map(|i| sr / 2.0 * i as f64 / (n_freq - 1) as f64)
            .collect();
        let mut data = vec![0f32; n_mel * n_freq];
        for m in 0..n_mel {
            let enorm = 2.0 / (mel_f[m + 2] - mel_f[m]);
            for (k, &f) in fft_f.iter().enumerate() {
                let lower = (f - mel_f[m]) / (mel_f[m + 1] - mel_f[m]);
                let upper = (mel_f[m + 2] - f) / (mel_f[m + 2] - mel_f[m + 1]);
                data[m * n_freq + k] = (lower.min(upper).max(0.0) * enorm) as f32;
            }
        }
        MelFilters {
            n_mel,
            n_freq,
            data,
        }
    }
}

/// A log-mel spectrogram, mel-major: `data[m * n_len + t]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Mel {
    pub n_mel: usize,
    /// Frames, including the 30 s of silence after the audio.
    pub n_len: usize,
    /// Frames that hold audio (whisper.cpp's `n_len_org`).
    pub n_audio: usize,
    pub data: Vec<f32>,
}

impl Mel {
    /// The `WINDOW_FRAMES` frames from `seek`, time-major within each mel row (`[3000, n_mel]`
    /// as the encoder reads them); frames past the end are 0.
    pub fn window(&self, seek: usize) -> Vec<f32> {
        let mut out = vec![0f32; WINDOW_FRAMES * self.n_mel];
        let (i0, i1) = (seek.min(self.n_len), (seek + WINDOW_FRAMES).min(self.n_len));
        for m in 0..self.n_mel {
            let row = &self.data[m * self.n_len..(m + 1) * self.n_len];
            out[m * WINDOW_FRAMES..m * WINDOW_FRAMES + (i1 - i0)].copy_from_slice(&row[i0..i1]);
        }
        out
    }
}

/// The log-mel spectrogram of 16 kHz `samples`.
pub fn log_mel(samples: &[f32], filters: &MelFilters) -> Mel {
    let (n_mel, n_freq) = (filters.n_mel, filters.n_freq);
    let pad = N_FFT / 2;
    let n = samples.len();
    // [reflection of samples 1..=200, samples, 30 s + 200 of silence].
    let mut padded = vec![0f32; pad + n + 30 * 16_000 + pad];
    for (i, p) in padded[..pad].iter_mut().enumerate() {
        let src = pad - i;
        *p = if src < n { samples[src] } else { 0.0 };
    }
    padded[pad..pad + n].copy_from_slice(samples);
    let n_len = (padded.len() - N_FFT) / HOP;
    let n_audio = (n + pad).saturating_sub(N_FFT) / HOP + 1;
    // Frames from here on see only silence: log10 of the floor.
    let n_live = ((n + pad) / HOP + 1).min(n_len);
    let hann: Vec<f32> = (0..N_FFT)
        .map(|i| {
            (0.5 * (1.0 - (2.0 * std::f64::consts::PI * i as f64 / N_FFT as f64).cos())) as f32
        })
        .collect();
    let fft = RealFftPlanner::<f32>::new().plan_fft_forward(N_FFT);
    let live_end = n + pad;
    let frames: Vec<Vec<f32>> = (0..n_live)
        .into_par_iter()
        .map_init(
            || {
                (
                    fft.make_input_vec(),
                    fft.make_output_vec(),
                    vec![0f32; n_freq],
                )
            },
            |(input, spec, power), t| {
                let off = t * HOP;
                for (j, x) in input.iter_mut().enumerate() {
                    *x = if off + j < live_end {
                        hann[j] * padded[off + j]
                    } else {
                        0.0
                    };
                }
                fft.process(input, spec).expect("buffers made by the plan");
                for (p, c) in power.iter_mut().zip(spec.iter()) {
                    *p = c.re * c.re + c.im * c.im;
                }
                (0..n_mel)
                    .map(|m| {
                        let w = &filters.data[m * n_freq..(m + 1) * n_freq];
                        let s: f64 = w
                            .iter()
                            .zip(power.iter())
                            .map(|(&a, &b)| f64::from(a * b))
                            .sum();
                        s.max(1e-10).log10() as f32
                    })
                    .collect()
            },
        )
        .collect();
    let mut data = vec![-10f32; n_mel * n_len];
    for (t, f) in frames.iter().enumerate() {
        for (m, &v) in f.iter().enumerate() {
            data[m * n_len + t] = v;
        }
    }
    let floor = data.iter().copied().fold(f32::NEG_INFINITY, f32::max) - 8.0;
    for v in &mut data {
        *v = (v.max(floor) + 4.0) / 4.0;
    }
    Mel {
        n_mel,
        n_len,
        n_audio,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slaney_filters_are_triangles_of_unit_area_in_hz() {
        let f = MelFilters::slaney(80);
        assert_eq!((f.n_mel, f.n_freq), (80, 201));
        // Slaney normalisation: each triangle's area over Hz is 1 (bins are 40 Hz apart).
        for m in 1..79 {
            let area: f32 = f.data[m * 201..(m + 1) * 201].iter().sum::<f32>() * 40.0;
            assert!((area - 1.0).abs() < 0.2, "filter {m}: area {area}");
        }
        // whisper's mel_filters.npz (as whisper.cpp's model files hold it): row 0 peaks at bin 1.
        assert!((f.data[1] - 0.024_862_59).abs() < 1e-7, "{}", f.data[1]);
    }

    #[test]
    fn a_tone_lights_its_mel_band() {
        let x: Vec<f32> = (0..16_000)
            .map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / 16_000.0).sin())
            .collect();
        let f = MelFilters::slaney(80);
        let mel = log_mel(&x, &f);
        assert_eq!(mel.n_len, (200 + 16_000 + 480_000 + 200 - 400) / 160);
        assert_eq!(mel.n_audio, 99);
        let frame = 50;
        let col: Vec<f32> = (0..80).map(|m| mel.data[m * mel.n_len + frame]).collect();
        let peak = (0..80).max_by(|&a, &b| col[a].total_cmp(&col[b])).unwrap();
        // 1 kHz is mel 15 of 45.2 over 81 steps: band 26 or 27.
        assert!((25..=28).contains(&peak), "peak band {peak}");
        // The silence after the audio sits at the clamp floor.
        let last = mel.data[mel.n_len - 1];
        let max = mel.data.iter().copied().fold(f32::MIN, f32::max);
        assert!((last - (max - 2.0)).abs() < 1e-5, "{last} vs {max}");
        let w = mel.window(mel.n_len - 10);
        assert_eq!(w.len(), 3000 * 80);
        assert_eq!(w[10], 0.0);
    }
}
