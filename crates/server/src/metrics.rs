//! Counters and gauges for `GET /metrics`, in Prometheus' text exposition format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Server-wide counters; the scheduler and the handlers update them.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests accepted into the queue.
    pub requests: AtomicU64,
    /// Requests answered with a 4xx error.
    pub rejected_bad: AtomicU64,
    /// Requests answered 503 because the queue was full.
    pub rejected_busy: AtomicU64,
    /// Requests that ended by a stop string or an end-of-generation token.
    pub finished_stop: AtomicU64,
    /// Requests that ended at `max_tokens`.
    pub finished_length: AtomicU64,
    /// Requests whose client went away before the end.
    pub cancelled: AtomicU64,
    /// Requests that failed on the backend.
    pub failed: AtomicU64,
    pub prompt_tokens: AtomicU64,
    /// Of those, tokens kept in a slot's cache from its earlier request (not run again).
    pub prompt_tokens_cached: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Graph steps run, and the time spent in them.
    pub steps: AtomicU64,
    pub step_micros: AtomicU64,
    /// Of those, decode steps of a lone slot queued on the device ahead of the step being read.
    pub steps_ahead: AtomicU64,
    /// Requests waiting for a slot.
    pub queue_depth: AtomicU64,
    /// Slots holding a request.
    pub slots_busy: AtomicU64,
    pub slots_total: AtomicU64,
    /// Generated tokens per second over the last steps (f64 bits, an exponential average).
    tokens_per_second: AtomicU64,
}

/// Weight of the newest step in the tokens/s average.
const EMA: f64 = 0.1;

impl Metrics {
    /// Adds one.
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a step that generated `tokens` in `secs`.
    pub fn step(&self, tokens: usize, secs: f64) {
        Metrics::inc(&self.steps);
        self.step_micros
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
        self.generated_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
        if tokens > 0 && secs > 0.0 {
            let now = tokens as f64 / secs;
            let old = f64::from_bits(self.tokens_per_second.load(Ordering::Relaxed));
            let avg = if old == 0.0 {
                now
            } else {
                old + EMA * (now - old)
            };
            self.tokens_per_second
                .store(avg.to_bits(), Ordering::Relaxed);
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, rows: &[(&str, f64)]| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, v) in rows {
                let _ = writeln!(s, "{name}{labels} {v}");
            }
        };
        metric(
            "wgllm_requests_total",
            "counter",
            "Generation requests accepted.",
            &[("", g(&self.requests) as f64)],
        );
        metric(
            "wgllm_requests_rejected_total",
            "counter",
            "Requests refused: bad input (4xx) or a full queue (503).",
            &[
                ("{reason=\"bad_request\"}", g(&self.rejected_bad) as f64),
                ("{reason=\"overloaded\"}", g(&self.rejected_busy) as f64),
            ],
        );
        metric(
            "wgllm_requests_finished_total",
            "counter",
            "Requests that left their slot, by why.",
            &[
                ("{reason=\"stop\"}", g(&self.finished_stop) as f64),
                ("{reason=\"length\"}", g(&self.finished_length) as f64),
                ("{reason=\"cancelled\"}", g(&self.cancelled) as f64),
                ("{reason=\"error\"}", g(&self.failed) as f64),
            ],
        );
        metric(
            "wgllm_prompt_tokens_total",
            "counter",
            "Prompt tokens of the requests admitted.",
            &[("", g(&self.prompt_tokens) as f64)],
        );
        metric(
            "wgllm_prompt_tokens_cached_total",
            "counter",
            "Of those, tokens found in a slot's prompt cache and not run again.",
            &[("", g(&self.prompt_tokens_cached) as f64)],
        );
        metric(
            "wgllm_generated_tokens_total",
            "counter",
            "Tokens generated.",
            &[("", g(&self.generated_tokens) as f64)],
        );
        metric(
            "wgllm_steps_total",
            "counter",
            "Batched graph steps run.",
            &[("", g(&self.steps) as f64)],
        );
        metric(
            "wgllm_steps_queued_ahead_total",
            "counter",
            "Graph steps that decoded a lone request one step queued ahead on the device.",
            &[("", g(&self.steps_ahead) as f64)],
        );
        metric(
            "wgllm_step_seconds_total",
            "counter",
            "Time spent in graph steps.",
            &[("", g(&self.step_micros) as f64 / 1e6)],
        );
        metric(
            "wgllm_queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            &[("", g(&self.queue_depth) as f64)],
        );
        metric(
            "wgllm_slots_busy",
            "gauge",
            "Slots holding a request.",
            &[("", g(&self.slots_busy) as f64)],
        );
        metric(
            "wgllm_slots_total",
            "gauge",
            "Slots (--parallel).",
            &[("", g(&self.slots_total) as f64)],
        );
        metric(
            "wgllm_tokens_per_second",
            "gauge",
            "Generated tokens per second of step time, averaged over recent steps.",
            &[("", f64::from_bits(g(&self.tokens_per_second)))],
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_the_rate() {
        let m = Metrics::default();
        Metrics::inc(&m.requests);
        m.step(8, 0.5);
        m.step(8, 0.5);
        let text = m.render();
        assert!(text.contains("wgllm_requests_total 1\n"), "{text}");
        assert!(text.contains("wgllm_generated_tokens_total 16\n"), "{text}");
        assert!(text.contains("wgllm_tokens_per_second 16\n"), "{text}");
        assert!(text.contains("# TYPE wgllm_queue_depth gauge"), "{text}");
        assert!(
            text.contains("wgllm_requests_finished_total{reason=\"cancelled\"} 0"),
            "{text}"
        );
    }
}
