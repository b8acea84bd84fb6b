//! Timing and the Markdown tables every scenario prints.

use std::time::{Duration, Instant};

/// Median of `runs` timings of `f` (after one warm-up call), in nanoseconds.
pub fn median_ns(runs: usize, f: impl FnMut()) -> f64 {
    median_ns_settled(runs, || {}, f)
}

/// [`median_ns`] with `settle` run, untimed, before each call of `f` (waiting for the GPU, say).
pub fn median_ns_settled(runs: usize, mut settle: impl FnMut(), mut f: impl FnMut()) -> f64 {
    settle();
    f();
    let mut samples: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            settle();
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2].as_nanos() as f64
}

/// Human units for a duration in nanoseconds.
pub fn time(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

/// `baseline / measured`, formatted as a speed-up.
pub fn ratio(baseline_ns: f64, measured_ns: f64) -> String {
    format!("{:.1}×", baseline_ns / measured_ns.max(1e-9))
}

pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, header: &[&str]) -> Self {
        Self { title: title.into(), header: header.iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) {
        println!("\n### {}\n", self.title);
        println!("| {} |", self.header.join(" | "));
        println!("|{}", " --- |".repeat(self.header.len()));
        for r in &self.rows {
            println!("| {} |", r.join(" | "));
        }
    }
}
