//! `--instructions N`: the instructions Keymux executes per request, counted by valgrind's callgrind.
//! Seconds on a shared 2-core machine move by tens of percent from run to run; a count of executed
//! instructions for the same requests moves by well under one percent, so it is what a change on the
//! request path is judged by (and what `scripts/perf-gate` holds against a committed baseline).
//!
//! Per build (the `keymux` under test and `--baseline PATH` when given): `keymux serve` starts under
//! callgrind, pinned like the timed targets; the probes of its keys are answered; then per mode one
//! client on one connection sends `WARM_UP` requests, callgrind's counters are zeroed
//! (`callgrind_control --zero`), the client sends N more, and the counters are dumped
//! (`callgrind_control --dump`). The dump's total over N is the figure. Everything the gateway does
//! in that window counts: the request path, its logging and bookkeeping, and any background work
//! that happened to run then (its share is small next to N requests; the spread between two runs is
//! printed so a reader can see it).

use std::path::{Path, PathBuf};
use std::process::Command;

use hyper::header::HeaderValue;

use crate::args::{Args, Mode, Target};
use crate::gateways::{self, Gateway};
use crate::load::{Endpoint, Sequential};
use crate::procs::Pinning;
use crate::upstream::Upstream;

/// Requests sent before the counters are zeroed: connections, caches, session tables and the
/// allocator warm.
const WARM_UP: usize = 20;

/// One build's count for one mode.
pub struct Count {
    pub target: Target,
    pub mode: Mode,
    pub requests: usize,
    pub instructions: u64,
}

impl Count {
    pub fn per_request(&self) -> u64 {
        self.instructions / self.requests as u64
    }
}

/// Counts every build in `args` over `n` requests per mode. `earlier`: how many Keymux processes this
/// run started before (the upstream counts every process's key probes).
pub async fn run(
    args: &Args,
    upstream: &Upstream,
    pinning: &Pinning,
    token: &str,
    n: usize,
    earlier: usize,
) -> Result<Vec<Count>, String> {
    tools_present()?;
    let mut builds = vec![(Target::Keymux, args.keymux.clone())];
    builds.extend(args.baseline.clone().map(|path| (Target::Baseline, path)));
    let auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| format!("token header: {e}"))?;
    let mut counts = Vec::new();
    for (started, (target, binary)) in builds.into_iter().enumerate() {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        // `--keep-dumps DIR`: the dumps stay there for `callgrind_annotate DIR/<target>.out.<n>`.
        let out = match &args.keep_dumps {
            Some(kept) => {
                std::fs::create_dir_all(kept).map_err(|e| format!("{}: {e}", kept.display()))?;
                kept.join(format!("{target}.out"))
            }
            None => dir.path().join("callgrind.out"),
        };
        let gateway =
            gateways::start_keymux_under(target, &binary, upstream.addr, pinning.gateway_cpu, token, Some(&out))
                .await?;
        let mut notes = Vec::new();
        crate::wait_for_probes(upstream, earlier + started + 1, &mut notes).await;
        notes.iter().for_each(|note| eprintln!("{note}"));
        let counted = count_modes(args, &gateway, &auth, &out, n).await;
        eprintln!("{target} under callgrind: {}", gateway.stop().await);
        for count in counted? {
            eprintln!("{} {}: {} instructions per request", count.target, count.mode, count.per_request());
            counts.push(count);
        }
    }
    Ok(counts)
}

async fn count_modes(
    args: &Args,
    gateway: &Gateway,
    auth: &HeaderValue,
    out: &Path,
    n: usize,
) -> Result<Vec<Count>, String> {
    let host = HeaderValue::from_str(&gateway.addr.to_string()).map_err(|e| format!("host header: {e}"))?;
    let endpoint = Endpoint { addr: gateway.addr, host, auth: auth.clone() };
    let mut counts = Vec::new();
    for (dumps, &mode) in args.modes.iter().enumerate() {
        let body = crate::canned::prompt(mode, &format!("count-{mode}"));
        let mut client = Sequential::connect(&endpoint, mode).await?;
        client.send(&endpoint, mode, &body, WARM_UP).await?;
        callgrind_control(gateway.pid, "--zero")?;
        client.send(&endpoint, mode, &body, n).await?;
        callgrind_control(gateway.pid, "--dump")?;
        client.close().await;
        let dump = PathBuf::from(format!("{}.{}", out.display(), dumps + 1));
        let instructions = totals(&dump)?;
        counts.push(Count { target: gateway.target, mode, requests: n, instructions });
    }
    Ok(counts)
}

/// valgrind and callgrind_control, or the command that installs them.
fn tools_present() -> Result<(), String> {
    let found = |tool: &str| Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if found("valgrind") && Command::new("callgrind_control").arg("-h").output().is_ok() {
        return Ok(());
    }
    Err("--instructions needs valgrind (with callgrind_control): `sudo apt-get install valgrind`".into())
}

/// Sends a command to the callgrind of process `pid` and waits for it to be carried out.
fn callgrind_control(pid: i32, command: &str) -> Result<(), String> {
    let done = Command::new("callgrind_control")
        .arg(command)
        .arg(pid.to_string())
        .output()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    let said = String::from_utf8_lossy(&done.stdout);
    if done.status.success() && said.contains("OK.") {
        return Ok(());
    }
    Err(format!("callgrind_control {command} {pid} failed: {said}{}", String::from_utf8_lossy(&done.stderr)))
}

/// The `totals:` of a callgrind dump: instructions executed since the counters were zeroed.
fn totals(dump: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(dump).map_err(|e| format!("{}: {e}", dump.display()))?;
    let line = text.lines().find_map(|l| l.strip_prefix("totals:"));
    line.and_then(|l| l.trim().parse().ok()).ok_or_else(|| format!("{}: no totals line", dump.display()))
}

/// The counts as a markdown table, the baseline beside the build when both ran.
pub fn table(counts: &[Count]) -> String {
    let mut text = String::from(
        "## Instructions per request (callgrind, one client, one connection)\n\n\
         | mode | requests | keymux | baseline | change |\n|---|---:|---:|---:|---:|\n",
    );
    let modes = counts.iter().map(|c| c.mode).fold(Vec::new(), |mut modes, m| {
        if !modes.contains(&m) {
            modes.push(m);
        }
        modes
    });
    for mode in modes {
        let of = |target| counts.iter().find(|c| c.mode == mode && c.target == target);
        let (keymux, baseline) = (of(Target::Keymux), of(Target::Baseline));
        let cell = |c: Option<&Count>| c.map_or("–".to_owned(), |c| c.per_request().to_string());
        let change = match (keymux, baseline) {
            (Some(k), Some(b)) if b.per_request() > 0 => {
                format!("{:+.1} %", (k.per_request() as f64 / b.per_request() as f64 - 1.0) * 100.0)
            }
            _ => "–".to_owned(),
        };
        let requests = keymux.or(baseline).map_or(0, |c| c.requests);
        text.push_str(&format!("| {mode} | {requests} | {} | {} | {change} |\n", cell(keymux), cell(baseline)));
    }
    text
}
