//! The two kinds of series the gateway exports, lock-free to record: a [`Histogram`] with fixed
//! buckets, and [`Labelled`] series keyed by a label value from a bounded set. Plus the text
//! exposition format (Prometheus 0.0.4) they render to.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Bucket upper bounds in seconds for policy evaluations and audit commits: microseconds
/// matter there (an evaluation takes 5–30 µs, a commit 150–300 µs on a fast disk).
pub const MICROS: &[f64] = &[
    5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0,
];

/// Bucket upper bounds in seconds for whole calls and sandbox starts: from a `stat_path`
/// (well under a millisecond) to a `submit_job` that waits for its job.
pub const CALLS: &[f64] = &[
    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 300.0, 900.0,
];

/// Bucket upper bounds for the number of records in one audit batch.
pub const RECORDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// A histogram with fixed bucket bounds. Recording is a few relaxed atomic adds; the buckets are
/// kept per bucket and made cumulative when rendered.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, plus `+Inf`.
    buckets: Box<[AtomicU64]>,
    /// In units of 1e-9 (nanoseconds for durations): integer adds, exact enough for a sum.
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: f64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = (value.max(0.0) * 1e9) as u64;
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(elapsed.as_secs_f64());
    }

    /// The `_bucket`, `_sum` and `_count` lines of this histogram under `name{labels}`.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let separator = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = match self.bounds.get(i) {
                Some(bound) => format_float(*bound),
                None => "+Inf".to_owned(),
            };
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{separator}le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = |labels: &str| {
            if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), format_float(sum));
        // The count is the +Inf bucket: the two never disagree in a scrape.
        let _ = writeln!(out, "{name}_count{} {cumulative}", braces(labels));
    }
}

/// Series keyed by one label value (a tool or policy name), created on first use. The set of
/// values is bounded: past `capacity` distinct values, new ones share the series of
/// `overflow`, so no caller can grow the exposition without bound. Values `reserved` says
/// are the site's own (a finite set, such as the builtin tools) always get a series of their
/// own: names others brought in first cannot push them into `overflow`.
#[derive(Debug)]
pub struct Labelled<T> {
    series: RwLock<HashMap<String, Arc<T>>>,
    capacity: usize,
    overflow: &'static str,
    make: fn() -> T,
    reserved: fn(&str) -> bool,
}

impl<T> Labelled<T> {
    pub fn new(capacity: usize, overflow: &'static str, make: fn() -> T) -> Labelled<T> {
        Labelled {
            series: RwLock::new(HashMap::new()),
            capacity,
            overflow,
            make,
            reserved: |_| false,
        }
    }

    /// The same set, with `reserved` values always given a series of their own.
    pub fn reserving(self, reserved: fn(&str) -> bool) -> Labelled<T> {
        Labelled { reserved, ..self }
    }

    /// The series of `label` (or of the overflow label once the set is full).
    pub fn get(&self, label: &str) -> Arc<T> {
        if let Some(series) = self.read().get(label) {
            return series.clone();
        }
        let mut series = self.series.write().unwrap_or_else(|e| e.into_inner());
        let key =
            if series.len() < self.capacity || series.contains_key(label) || (self.reserved)(label)
            {
                label
            } else {
                self.overflow
            };
        series
            .entry(key.to_owned())
            .or_insert_with(|| Arc::new((self.make)()))
            .clone()
    }

    /// Every series, sorted by label (a stable exposition order).
    pub fn sorted(&self) -> Vec<(String, Arc<T>)> {
        let mut all: Vec<_> = self
            .read()
            .iter()
            .map(|(label, series)| (label.clone(), series.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<T>>> {
        self.series.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// One metric family being written: `# HELP` and `# TYPE` once, then its samples.
pub struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl<'a> Family<'a> {
    pub fn new(
        out: &'a mut String,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
    ) -> Self {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out, name }
    }

    /// One sample: `labels` are (name, value) pairs, values escaped here.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: u64) {
        let _ = writeln!(self.out, "{}{} {value}", self.name, braces(labels));
    }

    pub fn histogram(&mut self, labels: &[(&str, &str)], histogram: &Histogram) {
        histogram.render(self.out, self.name, &label_list(labels));
    }
}

fn braces(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", label_list(labels))
    }
}

fn label_list(labels: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{name}=\"{}\"", escape(value));
    }
    out
}

/// A label value in the text format: backslash, double quote and newline escaped.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A float as the text format writes it (`0.000005`, `1`, `2.5`): Rust's shortest round-trip
/// form, which Prometheus parses.
fn format_float(value: f64) -> String {
    format!("{value}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_count_is_the_last_bucket() {
        let h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 3.0, 7.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert_eq!(
            out,
            "x_bucket{a=\"b\",le=\"1\"} 2\nx_bucket{a=\"b\",le=\"2\"} 3\nx_bucket{a=\"b\",le=\"+Inf\"} 5\nx_sum{a=\"b\"} 13\nx_count{a=\"b\"} 5\n"
        );
    }

    #[test]
    fn a_full_label_set_sends_new_values_to_the_overflow_series() {
        let set: Labelled<AtomicU64> = Labelled::new(2, "other", || AtomicU64::new(0));
        for label in ["a", "b", "c", "d", "a"] {
            set.get(label).fetch_add(1, Ordering::Relaxed);
        }
        let counts: Vec<_> = set
            .sorted()
            .into_iter()
            .map(|(label, n)| (label, n.load(Ordering::Relaxed)))
            .collect();
        assert_eq!(
            counts,
            [("a".into(), 2), ("b".into(), 1), ("other".into(), 2)]
        );
    }

    #[test]
    fn reserved_values_are_never_sent_to_the_overflow_series() {
        let set: Labelled<AtomicU64> =
            Labelled::new(2, "other", || AtomicU64::new(0)).reserving(|l| l.starts_with("site"));
        for label in ["x", "y", "z", "site_a", "site_b"] {
            set.get(label).fetch_add(1, Ordering::Relaxed);
        }
        let labels: Vec<_> = set.sorted().into_iter().map(|(label, _)| label).collect();
        assert_eq!(labels, ["other", "site_a", "site_b", "x", "y"]);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
