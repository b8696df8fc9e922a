//! The soak: Keymux alone, pinned like in the table, under mixed traffic for a long time (JSON, SSE and
//! Chat Completions workers whose every request is a new session out of 50,000, so that the affinity
//! table, the session hints, the sessions view and the rings all fill past their bounds, plus
//! WebSocket workers). It prints throughput and resident memory every `--every` seconds, then whether
//! memory stayed flat after warm-up. Asserts nothing; the figures are for reading.
//!
//! `cargo bench --bench gateway -- --soak 1800 --every 60` is the 30-minute run.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use hyper::header::HeaderValue;
use tokio::time::Duration;

use crate::args::{Args, Mode, Target};
use crate::gateways;
use crate::load::{self, Endpoint, COMPLETED, STOP, WARMUP};
use crate::procs::Pinning;
use crate::upstream::Upstream;

/// Distinct sessions the rotating workers cycle through: more than any of Keymux's session tables
/// holds (the largest is 10,000).
const SESSIONS: u64 = 50_000;

/// One reading.
struct Reading {
    secs: f64,
    requests: u64,
    rss_kib: u64,
}

/// Runs the soak; returns the number of failed requests.
pub async fn run(args: &Args, upstream: &Upstream, pinning: &Pinning, token: &str, total: f64) -> Result<u64, String> {
    let gateway =
        gateways::start_keymux(Target::Keymux, &args.keymux, upstream.addr, pinning.gateway_cpu, token).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| format!("token header: {e}"))?;
    let host = HeaderValue::from_str(&gateway.addr.to_string()).map_err(|e| format!("host header: {e}"))?;
    let endpoint = Endpoint { addr: gateway.addr, host, auth };
    let conc = args.conc.iter().copied().max().unwrap_or(16).max(4);
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let mut workers = Vec::new();
    for mode in [Mode::Json, Mode::Sse, Mode::Chat] {
        workers.extend(load::spawn_rotating(&endpoint, mode, conc / 4, SESSIONS, &phase));
    }
    workers.extend(load::spawn(&endpoint, Mode::Ws, conc - 3 * (conc / 4), &phase));
    println!("# Keymux soak: {total:.0} s, {conc} workers (JSON, SSE and chat with a new session each request, out of {SESSIONS}; WebSocket turns)\n");
    if cfg!(debug_assertions) {
        // CI's slice runs the tests' dev-profile build: it checks for failures and memory growth.
        println!(
            "A dev-profile build: the request rates are not Keymux's speed (`cargo bench` builds it optimized).\n"
        );
    }
    println!("| time s | requests | req/s since last | RSS MB |\n|---:|---:|---:|---:|");
    let start = crate::now();
    let mut readings: Vec<Reading> = Vec::new();
    loop {
        let elapsed = crate::since(start).as_secs_f64();
        let next = (readings.len() as f64 + 1.0) * args.every;
        if next > total + 1e-9 {
            break;
        }
        tokio::time::sleep(Duration::from_secs_f64(next - elapsed)).await;
        let rss_kib = gateway.sample()?.memory.rss_kb;
        let reading = Reading { secs: next, requests: COMPLETED.load(Ordering::Relaxed), rss_kib };
        let before = readings.last().map_or(0, |r| r.requests);
        let rate = (reading.requests - before) as f64 / args.every;
        println!("| {:.0} | {} | {rate:.0} | {:.1} |", reading.secs, reading.requests, reading.rss_kib as f64 / 1024.0);
        readings.push(reading);
    }
    phase.store(STOP, Ordering::Relaxed);
    let mut errors = 0;
    let mut first_error = None;
    for worker in workers {
        if let Ok(Ok(tally)) = tokio::time::timeout(crate::DRAIN_TIMEOUT, worker).await {
            errors += tally.errors;
            first_error = first_error.or(tally.first_error);
        }
    }
    eprintln!("keymux: {}", gateway.stop().await);
    print_verdict(&readings, errors, first_error);
    Ok(errors)
}

/// Memory after warm-up (the first tenth) against the rest of the run.
fn print_verdict(readings: &[Reading], errors: u64, first_error: Option<String>) {
    let warm = readings.len().div_ceil(10).max(1);
    let Some(after_warmup) = readings.get(warm - 1) else {
        println!("\nno readings: make --soak longer than --every");
        return;
    };
    let later = &readings[warm..];
    let max = later.iter().map(|r| r.rss_kib).max().unwrap_or(after_warmup.rss_kib);
    let last = readings.last().map_or(0, |r| r.rss_kib);
    let growth = (max as f64 / after_warmup.rss_kib.max(1) as f64 - 1.0) * 100.0;
    println!(
        "\nRSS after warm-up ({:.0} s): {:.1} MB; highest later: {:.1} MB ({growth:+.1} %); at the end: {:.1} MB. \
         {} requests, {errors} failed{}.",
        after_warmup.secs,
        after_warmup.rss_kib as f64 / 1024.0,
        max as f64 / 1024.0,
        last as f64 / 1024.0,
        readings.last().map_or(0, |r| r.requests),
        first_error.map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
}
