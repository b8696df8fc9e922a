//! Figures per measured window, their medians over repetitions, and the markdown the reader sees.

use std::fmt::Write as _;

use serde::Serialize;

use crate::args::{Mode, Target};

/// Latency percentiles of one window, in milliseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of microsecond samples; `None` when there are none.
    pub fn of(mut micros: Vec<u32>) -> Option<Self> {
        if micros.is_empty() {
            return None;
        }
        micros.sort_unstable();
        let at =
            |q: f64| f64::from(micros[((micros.len() as f64 * q).ceil() as usize).clamp(1, micros.len()) - 1]) / 1000.0;
        Some(Self { p50_ms: at(0.50), p90_ms: at(0.90), p99_ms: at(0.99), max_ms: at(1.0) })
    }
}

/// The gateway process during one window.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct GatewayFigures {
    /// CPU clock ticks (user + system) spent in the window.
    pub cpu_ticks: u64,
    /// CPU seconds (user + system) spent in the window.
    pub cpu_s: f64,
    /// `VmRSS` right after the warm-up.
    pub rss_after_warmup_kb: u64,
    /// `VmHWM` at the end of the window.
    pub peak_kb: u64,
    /// Whether that peak is the window's own (the kernel let us reset it) or since the process started.
    pub peak_is_window: bool,
    /// `VmRSS` at the end of the window.
    pub rss_end_kb: u64,
}

/// One measured window: one (mode, concurrency, target, repetition).
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub mode: Mode,
    pub conc: usize,
    pub target: Target,
    pub rep: usize,
    pub window_s: f64,
    /// Requests (or WebSocket turns) completed in the window.
    pub requests: u64,
    /// Failures in the warm-up and the window.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Keep-alive connections the target closed between requests.
    pub reconnects: u64,
    /// Whole answer (JSON, SSE) or turn (WebSocket).
    pub latency: Option<Percentiles>,
    /// Time to the first body byte (SSE only).
    pub ttfb: Option<Percentiles>,
    /// The gateway process (none for `direct`).
    pub gateway: Option<GatewayFigures>,
    /// CPU seconds of the fake upstream's thread in the window.
    pub upstream_cpu_s: f64,
    /// CPU seconds of the load generator's thread in the window.
    pub generator_cpu_s: f64,
}

impl Run {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.window_s
    }

    /// CPU microseconds per completed request, if any completed.
    fn per_request_us(&self, cpu_s: f64) -> Option<f64> {
        (self.requests > 0).then(|| cpu_s * 1e6 / self.requests as f64)
    }
}

/// The median of some values (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 0 { (values[mid - 1] + values[mid]) / 2.0 } else { values[mid] })
}

/// Below this many clock ticks in a window, ±1 tick is more than 1 % of the gateway's CPU figure.
pub const PRECISE_TICKS: u64 = 100;

/// One table row: a target's medians over its repetitions.
struct Row {
    target: Target,
    rps: Option<f64>,
    latency: [Option<f64>; 2],
    ttfb: [Option<f64>; 2],
    cpu_ms: Option<f64>,
    /// Some repetition's CPU figure rests on fewer than `PRECISE_TICKS` clock ticks.
    cpu_coarse: bool,
    /// One clock tick per request, in ms: what a zero CPU figure really means ("less than this").
    cpu_tick_ms: Option<f64>,
    upstream_us: Option<f64>,
    generator_us: Option<f64>,
    /// Share of a CPU the fake upstream and the generator used together.
    bench_busy: Option<f64>,
    /// Share of a CPU the gateway used.
    gateway_busy: Option<f64>,
    rss_warm_mb: Option<f64>,
    peak_mb: Option<f64>,
    rss_by_rep: Vec<f64>,
    errors: u64,
}

impl Row {
    fn of(target: Target, runs: &[&Run]) -> Self {
        let med = |f: &dyn Fn(&Run) -> Option<f64>| median(runs.iter().filter_map(|r| f(r)).collect());
        let gateway =
            |f: fn(&GatewayFigures) -> f64| median(runs.iter().filter_map(|r| r.gateway.as_ref().map(f)).collect());
        Self {
            target,
            rps: med(&|r| Some(r.rps())),
            latency: [med(&|r| r.latency.map(|p| p.p50_ms)), med(&|r| r.latency.map(|p| p.p99_ms))],
            ttfb: [med(&|r| r.ttfb.map(|p| p.p50_ms)), med(&|r| r.ttfb.map(|p| p.p99_ms))],
            cpu_ms: med(&|r| r.gateway.and_then(|g| r.per_request_us(g.cpu_s)).map(|us| us / 1000.0)),
            cpu_tick_ms: med(&|r| {
                r.gateway.and(r.per_request_us(1.0 / crate::procs::clock_ticks() as f64)).map(|us| us / 1000.0)
            }),
            cpu_coarse: runs.iter().any(|r| r.gateway.is_some_and(|g| g.cpu_ticks < PRECISE_TICKS)),
            upstream_us: med(&|r| r.per_request_us(r.upstream_cpu_s)),
            generator_us: med(&|r| r.per_request_us(r.generator_cpu_s)),
            bench_busy: med(&|r| Some((r.upstream_cpu_s + r.generator_cpu_s) / r.window_s)),
            gateway_busy: med(&|r| r.gateway.map(|g| g.cpu_s / r.window_s)),
            rss_warm_mb: gateway(|g| mb(g.rss_after_warmup_kb)),
            // The highest peak of any repetition, not a median: a peak is a worst case.
            peak_mb: runs.iter().filter_map(|r| r.gateway.map(|g| mb(g.peak_kb))).reduce(f64::max),
            rss_by_rep: runs.iter().filter_map(|r| r.gateway.map(|g| mb(g.rss_end_kb))).collect(),
            errors: runs.iter().map(|r| r.errors).sum(),
        }
    }
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "–".into(), |v| format!("{v:.3}"))
}

fn added(value: Option<f64>, base: Option<f64>, target: Target) -> String {
    match (value, base) {
        _ if target == Target::Direct => "–".into(),
        // Rounding to the shown precision first keeps "-0.000" out of the table.
        (Some(v), Some(b)) => format!("{:+.3}", ((v - b) * 1000.0).round() / 1000.0 + 0.0),
        _ => "–".into(),
    }
}

/// The gateway's CPU per request, scaled (1 for ms, 1000 for µs): `~` when it rests on few clock
/// ticks, a `<` bound when on none.
fn cpu_cell(row: &Row, scale: f64, decimals: usize) -> String {
    match (row.cpu_ms, row.cpu_tick_ms) {
        (Some(0.0), Some(tick)) => format!("<{:.*}", decimals, tick * scale),
        (Some(v), _) if row.cpu_coarse => format!("~{:.*}", decimals, v * scale),
        (Some(v), _) => format!("{:.*}", decimals, v * scale),
        (None, _) => "–".into(),
    }
}

fn errors(count: u64) -> String {
    if count == 0 {
        "0".into()
    } else {
        format!("**{count}**")
    }
}

/// The runs of one (mode, concurrency), grouped per target in the order the targets ran.
fn rows(runs: &[Run], mode: Mode, conc: usize, targets: &[Target]) -> Vec<Row> {
    targets
        .iter()
        .filter_map(|target| {
            let mine: Vec<&Run> =
                runs.iter().filter(|r| r.mode == mode && r.conc == conc && r.target == *target).collect();
            (!mine.is_empty()).then(|| Row::of(*target, &mine))
        })
        .collect()
}

/// The markdown table of one mode, every concurrency, every target.
pub fn mode_table(runs: &[Run], mode: Mode, concs: &[usize], targets: &[Target]) -> String {
    let sse = mode == Mode::Sse;
    let mut out = String::new();
    let latency_cols = if sse {
        "TTFB p50 | TTFB p99 | +TTFB p50 | +TTFB p99 | total p50 | total p99 | +total p50 | +total p99"
    } else {
        "p50 | p99 | +p50 | +p99"
    };
    let _ = writeln!(
        out,
        "| c | target | req/s | {latency_cols} | CPU ms/req | RSS MB | peak MB | RSS MB by rep | errors |"
    );
    let columns = 8 + if sse { 8 } else { 4 };
    let _ = writeln!(out, "|---:|---|{}", "---:|".repeat(columns - 2));
    for &conc in concs {
        let rows = rows(runs, mode, conc, targets);
        let base = rows.iter().find(|r| r.target == Target::Direct);
        for row in &rows {
            let mut cells =
                vec![conc.to_string(), row.target.to_string(), row.rps.map_or("–".into(), |r| format!("{r:.0}"))];
            let mut push_latency = |values: [Option<f64>; 2], base: Option<[Option<f64>; 2]>| {
                cells.extend(values.iter().map(|v| ms(*v)));
                for (i, v) in values.iter().enumerate() {
                    cells.push(added(*v, base.and_then(|b| b[i]), row.target));
                }
            };
            if sse {
                push_latency(row.ttfb, base.map(|b| b.ttfb));
            }
            push_latency(row.latency, base.map(|b| b.latency));
            cells.push(cpu_cell(row, 1.0, 3));
            cells.push(row.rss_warm_mb.map_or("–".into(), |v| format!("{v:.1}")));
            cells.push(row.peak_mb.map_or("–".into(), |v| format!("{v:.1}")));
            let by_rep: Vec<String> = row.rss_by_rep.iter().map(|v| format!("{v:.1}")).collect();
            cells.push(if by_rep.is_empty() { "–".into() } else { by_rep.join(" / ") });
            cells.push(errors(row.errors));
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    out
}

/// CPU per request of this process's two threads (the fake upstream and the load generator) next to
/// the gateway's, so the reader sees how small the upstream's share is.
pub fn cost_table(runs: &[Run], modes: &[Mode], concs: &[usize], targets: &[Target]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| mode | c | target | upstream µs/req | generator µs/req | gateway µs/req | bench CPU busy | gateway CPU busy |"
    );
    let _ = writeln!(out, "|---|---:|---|---:|---:|---:|---:|---:|");
    let us = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    let busy = |v: Option<f64>| v.map_or("–".into(), |v| format!("{:.0} %", v * 100.0));
    for &mode in modes {
        for &conc in concs {
            for row in rows(runs, mode, conc, targets) {
                let _ = writeln!(
                    out,
                    "| {mode} | {conc} | {} | {} | {} | {} | {} | {} |",
                    row.target,
                    us(row.upstream_us),
                    us(row.generator_us),
                    cpu_cell(&row, 1000.0, 1),
                    busy(row.bench_busy),
                    busy(row.gateway_busy)
                );
            }
        }
    }
    out
}

/// One sentence per mode: the fake upstream's CPU per request in direct mode next to each gateway's,
/// as ranges over the concurrency levels.
pub fn cost_summary(runs: &[Run], modes: &[Mode], concs: &[usize], targets: &[Target]) -> String {
    let range = |values: Vec<f64>| -> String {
        let lo = values.iter().copied().reduce(f64::min);
        let hi = values.iter().copied().reduce(f64::max);
        match (lo, hi) {
            (Some(lo), Some(hi)) if (hi - lo).abs() < 0.05 => format!("{lo:.1}"),
            (Some(lo), Some(hi)) => format!("{lo:.1}–{hi:.1}"),
            _ => "–".into(),
        }
    };
    let mut out = String::new();
    for &mode in modes {
        let per = |target: Target, f: fn(&Row) -> Option<f64>| {
            range(concs.iter().flat_map(|&c| rows(runs, mode, c, &[target])).filter_map(|r| f(&r)).collect())
        };
        let mut line = format!("* {mode}: fake upstream {} µs/req (direct)", per(Target::Direct, |r| r.upstream_us));
        for &target in targets.iter().filter(|t| **t != Target::Direct) {
            // A window with no clock tick at all says nothing about the cost: leave it out of the range.
            let _ = write!(
                line,
                ", {target} {} µs/req",
                per(target, |r| r.cpu_ms.filter(|ms| *ms > 0.0).map(|ms| ms * 1000.0))
            );
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Cells where the target closed keep-alive connections (not failures, but a cost the reader should
/// know about: each one is a new TCP connection).
pub fn reconnect_list(runs: &[Run]) -> String {
    let mut out = String::new();
    for run in runs.iter().filter(|r| r.reconnects > 0) {
        let _ = writeln!(
            out,
            "* {} c={} {} rep {}: {} reconnects for {} requests",
            run.mode,
            run.conc,
            run.target,
            run.rep + 1,
            run.reconnects,
            run.requests
        );
    }
    out
}

/// The first failure of every cell that had failures.
pub fn error_list(runs: &[Run]) -> String {
    let mut out = String::new();
    for run in runs.iter().filter(|r| r.errors > 0) {
        let _ = writeln!(
            out,
            "* {} c={} {} rep {}: {} failed; first: {}",
            run.mode,
            run.conc,
            run.target,
            run.rep + 1,
            run.errors,
            run.first_error.as_deref().unwrap_or("?").replace('\n', " ")
        );
    }
    out
}
