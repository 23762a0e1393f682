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
    /// Where requests spend their time.
    pub latency: Latencies,
}

/// Requests the HTTP layer refused before any route saw them ([`crate::guard`] and the
/// connection cap), by status: shared by every kind of server, and appended to its `/metrics`.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: [AtomicU64; REFUSED.len()],
}

/// The statuses the HTTP layer answers itself, and why, as the metric's labels.
const REFUSED: [(u16, &str); 7] = [
    (401, "unauthorized"),
    (403, "forbidden"),
    (408, "body_timeout"),
    (413, "too_large"),
    (415, "unsupported_media_type"),
    (503, "too_many_connections"),
    (504, "request_timeout"),
];

impl Refusals {
    /// Counts one refusal answered with `status` (other statuses are not the layer's own).
    pub fn count(&self, status: u16) {
        if let Some(i) = REFUSED.iter().position(|r| r.0 == status) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The exposition text of the counter.
    pub fn render(&self) -> String {
        let name = "wgllm_http_refused_total";
        let mut s = format!(
            "# HELP {name} Requests refused before a route saw them, by reason.\n# TYPE {name} counter\n"
        );
        for ((status, why), c) in REFUSED.iter().zip(&self.counts) {
            let n = c.load(Ordering::Relaxed);
            let _ = writeln!(s, "{name}{{reason=\"{why}\",status=\"{status}\"}} {n}");
        }
        s
    }
}

/// Histograms of request timing.
#[derive(Debug)]
pub struct Latencies {
    /// Seconds from a request's submission to its admission into a slot.
    pub queue_time: Histogram<21>,
    /// Seconds from a request's submission to its first generated token.
    pub time_to_first_token: Histogram<22>,
    /// Seconds between a request's consecutive tokens.
    pub inter_token_latency: Histogram<19>,
    /// Seconds from a request's submission to its end.
    pub request_latency: Histogram<21>,
}

/// vLLM's bucket bounds, so dashboards made for it read these histograms unchanged.
const TTFT_BOUNDS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BOUNDS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const LATENCY_BOUNDS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A Prometheus histogram of seconds over `N` fixed upper bounds (and `+Inf`).
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    bounds: &'static [f64; N],
    /// Observations at most each bound (not cumulative; summed when rendered).
    counts: [AtomicU64; N],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    const fn new(bounds: &'static [f64; N]) -> Histogram<N> {
        Histogram {
            bounds,
            counts: [const { AtomicU64::new(0) }; N],
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Records `secs`.
    pub fn observe(&self, secs: f64) {
        if let Some(k) = self.bounds.iter().position(|&b| secs <= b) {
            self.counts[k].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((secs.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    /// The exposition lines of histogram `name`.
    fn render(&self, s: &mut String, name: &str, help: &str) {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut below = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            below += c.load(Ordering::Relaxed);
            let _ = writeln!(s, "{name}_bucket{{le=\"{b}\"}} {below}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(s, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(s, "{name}_sum {sum}\n{name}_count {count}");
    }
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies {
            queue_time: Histogram::new(&LATENCY_BOUNDS),
            time_to_first_token: Histogram::new(&TTFT_BOUNDS),
            inter_token_latency: Histogram::new(&ITL_BOUNDS),
            request_latency: Histogram::new(&LATENCY_BOUNDS),
        }
    }
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
        self.latency.queue_time.render(
            &mut s,
            "wgllm_request_queue_time_seconds",
            "Seconds a request waited for a slot.",
        );
        self.latency.time_to_first_token.render(
            &mut s,
            "wgllm_time_to_first_token_seconds",
            "Seconds from a request's arrival to its first generated token.",
        );
        self.latency.inter_token_latency.render(
            &mut s,
            "wgllm_inter_token_latency_seconds",
            "Seconds between a request's consecutive generated tokens.",
        );
        self.latency.request_latency.render(
            &mut s,
            "wgllm_e2e_request_latency_seconds",
            "Seconds from a request's arrival to its end.",
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_count_the_layers_own_statuses_only() {
        let r = Refusals::default();
        r.count(401);
        r.count(401);
        r.count(504);
        r.count(400);
        let text = r.render();
        assert!(text.contains("wgllm_http_refused_total{reason=\"unauthorized\",status=\"401\"} 2"));
        assert!(text.contains("{reason=\"request_timeout\",status=\"504\"} 1"));
        assert!(text.contains("{reason=\"forbidden\",status=\"403\"} 0"));
        assert!(!text.contains("\"400\""));
    }

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

    #[test]
    fn histograms_count_cumulatively_on_vllms_bounds() {
        let m = Metrics::default();
        for secs in [0.003, 0.03, 0.03, 3000.0] {
            m.latency.time_to_first_token.observe(secs);
        }
        let text = m.render();
        let ttft = "wgllm_time_to_first_token_seconds";
        for (le, n) in [
            ("0.001", 0),
            ("0.005", 1),
            ("0.02", 1),
            ("0.04", 3),
            ("2560", 3),
        ] {
            let line = format!("{ttft}_bucket{{le=\"{le}\"}} {n}\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(
            text.contains(&format!("{ttft}_bucket{{le=\"+Inf\"}} 4\n")),
            "{text}"
        );
        assert!(text.contains(&format!("{ttft}_count 4\n")), "{text}");
        assert!(text.contains(&format!("{ttft}_sum 3000.063\n")), "{text}");
        assert!(text.contains("# TYPE wgllm_inter_token_latency_seconds histogram"));
    }
}
