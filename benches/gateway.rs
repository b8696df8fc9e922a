//! Side-by-side gateway benchmark: the same closed-loop load sent straight to a fast fake provider
//! (`direct`), through `keymux serve`, and through nginx as a plain reverse proxy when installed. It
//! prints a markdown table of throughput, latency (and what each gateway adds over direct), the
//! gateway's CPU per request and its resident memory. Asserts nothing about speed.
//!
//! Run: `cargo bench --bench gateway` (3 repetitions of 1 + 6 s per cell: about 9 minutes, 13 with
//! nginx), or a smoke run:
//! `cargo bench --bench gateway -- --secs 1 --reps 1 --modes json,sse --conc 1,16`.
//!
//! Layout (files in `benches/gateway/`):
//! * `args`: the command line and the command that reruns it.
//! * `canned`: the fake provider's answers and the generator's prompts, built once as bytes.
//! * `upstream`: the fake provider (hyper, on its own thread so its CPU can be read apart).
//! * `load`: the load generator's workers and what they record.
//! * `gateways`: Keymux and nginx as pinned child processes.
//! * `procs`: `/proc` readings (CPU ticks, RSS), the machine, pinning.
//! * `report`: medians over repetitions and the markdown tables.
//! * `soak`: `--soak SECS`, Keymux alone under mixed traffic for a long time, its memory over time.
//! * `count`: `--instructions N`, instructions per request under valgrind's callgrind (the figure a
//!   change is judged by, since seconds on a shared machine are noisy; `scripts/perf-gate`).
#![expect(clippy::print_stdout, reason = "a benchmark binary that prints its table")]

#[path = "gateway/args.rs"]
mod args;
#[path = "gateway/canned.rs"]
mod canned;
#[path = "gateway/count.rs"]
mod count;
#[path = "gateway/gateways.rs"]
mod gateways;
#[path = "gateway/load.rs"]
mod load;
#[path = "gateway/procs.rs"]
mod procs;
#[path = "gateway/report.rs"]
mod report;
#[path = "gateway/soak.rs"]
mod soak;
#[path = "gateway/upstream.rs"]
mod upstream;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use hyper::header::HeaderValue;
use tokio::time::{Duration, Instant};

use args::{Args, Mode, Target};
use gateways::Gateway;
use load::Endpoint;
use procs::{Machine, Pinning};
use report::{GatewayFigures, Percentiles, Run};
use upstream::Upstream;

/// How long workers may take to finish their last request after the window closes before they
/// count as hung.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The one place this bench reads the clock. The workspace sends every clock read through a clock
/// that tests can move on; a benchmark measures real time, so it reads the real clock, here only.
#[expect(clippy::disallowed_methods, reason = "a benchmark measures real time")]
fn now() -> Instant {
    Instant::from_std(std::time::Instant::now())
}

/// Real time since `start`.
fn since(start: Instant) -> Duration {
    now().saturating_duration_since(start)
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let machine = Machine::detect();
    // Before the runtime exists: every thread started later inherits this CPU mask.
    let pinning = procs::pin(&machine);
    // One thread for the generator; the fake upstream gets its own (see `upstream`).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("gateway bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args, &machine, &pinning)) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failed) => {
            eprintln!(
                "gateway bench: {failed} requests failed (see the errors column); the figures are not trustworthy"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("gateway bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The targets that run, with their processes, and what the header says about the others.
struct Lineup {
    targets: Vec<Target>,
    gateways: Vec<Gateway>,
    notes: Vec<String>,
}

/// Runs everything; returns the number of failed requests.
async fn run(args: &Args, machine: &Machine, pinning: &Pinning) -> Result<u64, String> {
    let canned = canned::answers();
    let upstream = upstream::start(canned)?;
    let token = format!("km-bench-{}", gateways::random(40));
    if let Some(total) = args.soak {
        return soak::run(args, &upstream, pinning, &token, total).await;
    }
    if args.instructions_only {
        let counts = count::run(args, &upstream, pinning, &token, args.instructions, 0).await?;
        println!("{}", count::table(&counts));
        return Ok(0);
    }
    let mut lineup = start_targets(args, &upstream, pinning, &token).await?;
    print_header(args, machine, pinning, &lineup, canned);
    let windows = args.modes.len() * args.conc.len() * args.reps * lineup.targets.len();
    eprintln!(
        "gateway bench: {windows} windows of {} + {} s, about {:.0} minutes",
        args.warmup,
        args.secs,
        windows as f64 * (args.warmup + args.secs) / 60.0
    );
    let auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| format!("token header: {e}"))?;
    let measured = measure_all(args, &upstream, &mut lineup, &auth).await;
    for gateway in lineup.gateways.drain(..) {
        let target = gateway.target;
        eprintln!("{target}: {}", gateway.stop().await);
    }
    let runs = measured?;
    print_report(args, &lineup.targets, &runs);
    if args.instructions > 0 {
        let started = lineup.targets.iter().filter(|t| matches!(t, Target::Keymux | Target::Baseline)).count();
        let counts = count::run(args, &upstream, pinning, &token, args.instructions, started).await?;
        println!("{}", count::table(&counts));
    }
    if let Some(path) = &args.json {
        write_json(path, args, machine, pinning, &runs)?;
    }
    Ok(runs.iter().map(|r| r.errors).sum())
}

async fn start_targets(args: &Args, upstream: &Upstream, pinning: &Pinning, token: &str) -> Result<Lineup, String> {
    let mut lineup = Lineup { targets: Vec::new(), gateways: Vec::new(), notes: Vec::new() };
    for &target in &args.targets {
        match target {
            Target::Direct => {}
            Target::Keymux | Target::Baseline => {
                let binary = match (target, &args.baseline) {
                    (Target::Baseline, Some(path)) => path,
                    (Target::Baseline, None) => {
                        lineup.notes.push("baseline: no --baseline PATH given, so it was skipped".into());
                        continue;
                    }
                    _ => &args.keymux,
                };
                let gateway = gateways::start_keymux(target, binary, upstream.addr, pinning.gateway_cpu, token).await?;
                lineup.notes.push(match gateway.runtime_threads() {
                    Some(n) => format!("{}: {n} runtime thread(s), one per CPU it may use", target.name()),
                    None => format!("{}: a build that does not say how many runtime threads it runs", target.name()),
                });
                let started = lineup.gateways.iter().filter(|g| g.target != Target::Nginx).count() + 1;
                wait_for_probes(upstream, started, &mut lineup.notes).await;
                lineup.gateways.push(gateway);
            }
            Target::Nginx if !std::path::Path::new(gateways::NGINX).exists() => {
                lineup.notes.push(format!("nginx: not found at {}, so the nginx target was skipped", gateways::NGINX));
                continue;
            }
            Target::Nginx => lineup.gateways.push(gateways::start_nginx(upstream.addr, pinning.gateway_cpu).await?),
        }
        lineup.targets.push(target);
    }
    Ok(lineup)
}

/// Keymux asks `GET /v1/models` once per key right after it starts listening; measuring before those
/// answers are in would mix start-up work into the first window.
pub(crate) async fn wait_for_probes(upstream: &Upstream, gateways_started: usize, notes: &mut Vec<String>) {
    let started = now();
    while upstream.models_seen.load(Ordering::Relaxed) < (gateways::KEYS * gateways_started) as u64 {
        if since(started) > Duration::from_secs(5) {
            notes.push(format!("keymux: did not probe all {} keys within 5 s of starting", gateways::KEYS));
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every (mode, concurrency), then every repetition, then every target: A B A B, so that a slow
/// drift of the machine (thermal, a neighbour) spreads over all targets instead of favouring one.
async fn measure_all(
    args: &Args,
    upstream: &Upstream,
    lineup: &mut Lineup,
    auth: &HeaderValue,
) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    for &mode in &args.modes {
        for &conc in &args.conc {
            for rep in 0..args.reps {
                for &target in &lineup.targets {
                    let gateway = lineup.gateways.iter_mut().find(|g| g.target == target);
                    let addr = gateway.as_ref().map_or(upstream.addr, |g| g.addr);
                    let host = HeaderValue::from_str(&addr.to_string()).map_err(|e| format!("host header: {e}"))?;
                    let endpoint = Endpoint { addr, host, auth: auth.clone() };
                    let cell = Cell { mode, conc, target, rep };
                    let run = measure(args, cell, &endpoint, upstream, gateway).await?;
                    eprintln!("{}", progress(&run, args.reps));
                    runs.push(run);
                }
            }
        }
    }
    Ok(runs)
}

fn progress(run: &Run, reps: usize) -> String {
    let latency =
        run.latency.map_or("no answers".into(), |p| format!("p50 {:.3} ms, p99 {:.3} ms", p.p50_ms, p.p99_ms));
    let reconnects = if run.reconnects > 0 { format!(", {} reconnects", run.reconnects) } else { String::new() };
    format!(
        "{} c={} rep {}/{} {:<6}: {:>8.0} req/s, {latency}, {} errors{reconnects}",
        run.mode,
        run.conc,
        run.rep + 1,
        reps,
        run.target.name(),
        run.requests as f64 / run.window_s,
        run.errors
    )
}

#[derive(Clone, Copy)]
struct Cell {
    mode: Mode,
    conc: usize,
    target: Target,
    rep: usize,
}

/// CPU counters at one moment: the gateway (if any), the fake upstream's thread, the generator's.
struct Counters {
    gateway: Option<gateways::Sample>,
    upstream_s: f64,
    generator_s: f64,
}

impl Counters {
    fn read(gateway: Option<&Gateway>, upstream: &Upstream, generator_tid: i32) -> Result<Self, String> {
        Ok(Self {
            gateway: gateway.map(Gateway::sample).transpose()?,
            upstream_s: procs::thread_cpu_s(upstream.tid)?,
            generator_s: procs::thread_cpu_s(generator_tid)?,
        })
    }
}

/// One window: warm up, open the window, read the counters on both sides of it, drain the workers.
async fn measure(
    args: &Args,
    cell: Cell,
    endpoint: &Endpoint,
    upstream: &Upstream,
    mut gateway: Option<&mut Gateway>,
) -> Result<Run, String> {
    let generator_tid = rustix::thread::gettid().as_raw_nonzero().get();
    let phase = Arc::new(AtomicU8::new(load::WARMUP));
    let workers = load::spawn(endpoint, cell.mode, cell.conc, &phase);
    tokio::time::sleep(args.warmup()).await;
    let after_warmup = gateway.as_deref().map(Gateway::sample).transpose()?;
    let peak_is_window = gateway.as_deref().is_some_and(Gateway::reset_peak);
    let before = Counters::read(gateway.as_deref(), upstream, generator_tid)?;
    phase.store(load::MEASURE, Ordering::Relaxed);
    let opened = now();
    tokio::time::sleep(args.window()).await;
    phase.store(load::STOP, Ordering::Relaxed);
    let window_s = since(opened).as_secs_f64();
    // A gateway that died says so itself, rather than through a failed `/proc` read.
    if let Some(gateway) = gateway.as_deref_mut() {
        gateway.check_alive()?;
    }
    let after = Counters::read(gateway.as_deref(), upstream, generator_tid)?;
    let tally = drain(workers).await;
    let gateway = match (after_warmup, before.gateway, after.gateway) {
        (Some(warm), Some(start), Some(end)) => Some(GatewayFigures {
            cpu_ticks: end.ticks.saturating_sub(start.ticks),
            cpu_s: end.ticks.saturating_sub(start.ticks) as f64 / procs::clock_ticks() as f64,
            rss_after_warmup_kb: warm.memory.rss_kb,
            peak_kb: end.memory.peak_kb,
            peak_is_window,
            rss_end_kb: end.memory.rss_kb,
        }),
        _ => None,
    };
    Ok(Run {
        mode: cell.mode,
        conc: cell.conc,
        target: cell.target,
        rep: cell.rep,
        window_s,
        requests: tally.latency_us.len() as u64,
        errors: tally.errors,
        first_error: tally.first_error,
        reconnects: tally.reconnects,
        latency: Percentiles::of(tally.latency_us),
        ttfb: Percentiles::of(tally.ttfb_us),
        gateway,
        upstream_cpu_s: after.upstream_s - before.upstream_s,
        generator_cpu_s: after.generator_s - before.generator_s,
    })
}

/// Collects the workers' tallies; a worker still waiting for an answer long after the window closed
/// is a failure of the target, counted as such.
async fn drain(workers: Vec<tokio::task::JoinHandle<load::Tally>>) -> load::Tally {
    let deadline = now() + DRAIN_TIMEOUT;
    let mut total = load::Tally::default();
    for mut worker in workers {
        match tokio::time::timeout_at(deadline, &mut worker).await {
            Ok(Ok(tally)) => total.merge(tally),
            Ok(Err(e)) => total.merge(load::Tally::failed(format!("worker failed: {e}"))),
            Err(_) => {
                worker.abort();
                total.merge(load::Tally::failed("no answer 30 s after the window closed".into()));
            }
        }
    }
    total
}

fn print_header(args: &Args, machine: &Machine, pinning: &Pinning, lineup: &Lineup, canned: &canned::Canned) {
    let keymux = args.keymux.display();
    let built = std::fs::metadata(&args.keymux)
        .map(|m| format!("{:.1} MB", m.len() as f64 / 1e6))
        .unwrap_or_else(|e| format!("unreadable: {e}"));
    println!("# Keymux gateway benchmark\n");
    println!("* machine: {} usable CPUs ({}), Linux {}", machine.cpus.len(), machine.cpu_model, machine.kernel);
    println!("* pinning: {}", pinning.note);
    println!(
        "* keymux: `{keymux}` ({built}), `serve --ephemeral`, {} keys from the environment, `KEYMUX_LOG=info`",
        gateways::KEYS
    );
    if let (true, Some(baseline)) = (lineup.targets.contains(&Target::Baseline), &args.baseline) {
        println!("* baseline: `{}`, another keymux build run the same way", baseline.display());
    }
    for note in &lineup.notes {
        println!("* {note}");
    }
    if lineup.targets.contains(&Target::Nginx) {
        println!(
            "* nginx: `{}`, worker_processes 1, keep-alive HTTP/1.1 upstream, proxy_buffering off, access_log off",
            gateways::NGINX
        );
    }
    println!(
        "* fake upstream (in this process, own thread): json {:.1} KB; sse {:.1} KB in {} events over {} ms; ws the same events \
         as frames, unpaced; chat {:.1} KB. Prompts 2 KB, one prompt_cache_key per worker",
        canned.json.len() as f64 / 1024.0,
        canned.sse_bytes as f64 / 1024.0,
        canned.events,
        canned::SSE_SPAN_MS,
        canned.chat.len() as f64 / 1024.0
    );
    println!(
        "* load: closed loop, c workers each on one keep-alive connection; {} s warm-up, then {} s measured, {} repetitions \
         alternating targets; medians over repetitions. Gateway CPU from /proc/PID/stat at {} ticks/s (`~`: under {} \
         ticks in some window, so coarse); this process's threads from schedstat (ns)",
        args.warmup,
        args.secs,
        args.reps,
        procs::clock_ticks(),
        report::PRECISE_TICKS
    );
    println!("* rerun: `{}`\n", args.command_line());
}

fn print_report(args: &Args, targets: &[Target], runs: &[Run]) {
    for &mode in &args.modes {
        let what = match mode {
            Mode::Json => "POST /v1/responses, JSON answer; latency = whole answer",
            Mode::Sse => "POST /v1/responses streamed; TTFB = first body byte, total = last byte",
            Mode::Ws => "response.create over one WebSocket per worker; latency = frame sent → response.completed",
            Mode::Chat => "POST /v1/chat/completions, JSON answer; latency = whole answer",
        };
        println!("## {mode}: {what}\n\nLatencies in ms; `+` columns are added over direct.\n");
        println!("{}", report::mode_table(runs, mode, &args.conc, targets));
    }
    println!("## CPU per request on each side\n");
    println!(
        "The fake upstream and the generator share the bench CPU; `gateway` is the gateway process alone. A busy share \
         near 100 % says which side limited the throughput.\n"
    );
    println!("{}", report::cost_table(runs, &args.modes, &args.conc, targets));
    println!("Fake upstream against gateway, CPU per request (range over concurrency):\n");
    println!("{}", report::cost_summary(runs, &args.modes, &args.conc, targets));
    let peaks_are_windows = runs.iter().filter_map(|r| r.gateway).all(|g| g.peak_is_window);
    if !peaks_are_windows {
        println!("Note: the kernel refused to reset VmHWM, so `peak MB` is the peak since the gateway started.\n");
    }
    let reconnects = report::reconnect_list(runs);
    if !reconnects.is_empty() {
        println!(
            "Keep-alive connections the target closed between requests (the workers reconnected):\n\n{reconnects}"
        );
    }
    let failures = report::error_list(runs);
    if !failures.is_empty() {
        println!("## ERRORS: some requests failed, so these figures are not trustworthy\n\n{failures}");
    }
}

fn write_json(
    path: &std::path::Path,
    args: &Args,
    machine: &Machine,
    pinning: &Pinning,
    runs: &[Run],
) -> Result<(), String> {
    let document = serde_json::json!({
        "command": args.command_line(),
        "machine": {"cpus": machine.cpus, "cpu_model": machine.cpu_model, "kernel": machine.kernel},
        "pinning": pinning.note,
        "keymux": args.keymux.display().to_string(),
        "clock_ticks_per_s": procs::clock_ticks(),
        "runs": runs,
    });
    let text = serde_json::to_string_pretty(&document).map_err(|e| format!("JSON: {e}"))?;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
