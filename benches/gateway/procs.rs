//! What `/proc` says about processes and threads (CPU ticks, resident memory), the machine, and CPU
//! pinning. All through files and rustix's safe wrappers: the workspace forbids `unsafe`.

use std::fs;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The machine, as printed in the header.
pub struct Machine {
    /// CPUs this process may use, before pinning.
    pub cpus: Vec<usize>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu_model: String,
}

impl Machine {
    /// Reads the machine; call before pinning.
    pub fn detect() -> Self {
        let cpus = sched_getaffinity(None)
            .map(|set| (0..CpuSet::MAX_CPU).filter(|cpu| set.is_set(*cpu)).collect())
            .unwrap_or_default();
        let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").map(|k| k.trim().to_owned()).unwrap_or_default();
        let cpu_model = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines().find_map(|l| {
                    l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
                })
            })
            .unwrap_or_else(|| "unknown CPU".to_owned());
        Self { cpus, kernel, cpu_model }
    }
}

/// Where the gateway and this process run.
pub struct Pinning {
    /// The CPU the gateway is pinned to with `taskset`, if pinned.
    pub gateway_cpu: Option<usize>,
    /// What the header says about it.
    pub note: String,
}

/// Pins this process (fake upstream and load generator) to the second usable CPU and reserves the
/// first for the gateway, so that neither steals the other's cycles and the gateway's CPU per
/// request is not inflated by contention. Must run before any thread is started: threads inherit
/// the mask of the thread that creates them.
pub fn pin(machine: &Machine) -> Pinning {
    let [gateway, bench, ..] = machine.cpus[..] else {
        return Pinning {
            gateway_cpu: None,
            note: format!("none: only {} usable CPU, so everything runs unpinned", machine.cpus.len()),
        };
    };
    let taskset = std::process::Command::new("taskset").arg("--version").output().is_ok_and(|o| o.status.success());
    if !taskset {
        return Pinning {
            gateway_cpu: None,
            note: "none: `taskset` (util-linux) not found, so everything runs unpinned".into(),
        };
    }
    let mut set = CpuSet::new();
    set.set(bench);
    if let Err(e) = sched_setaffinity(None, &set) {
        return Pinning {
            gateway_cpu: None,
            note: format!("none: cannot pin this process ({e}), so everything runs unpinned"),
        };
    }
    Pinning {
        gateway_cpu: Some(gateway),
        note: format!(
            "gateway (keymux, nginx) on CPU {gateway} (`taskset -c {gateway}`); this process (fake upstream + load generator) on CPU {bench}{}",
            if machine.cpus.len() > 2 { format!("; {} other CPUs left idle", machine.cpus.len() - 2) } else { String::new() }
        ),
    }
}

/// Clock ticks per second, the unit of `utime`/`stime` in `/proc/*/stat`.
pub fn clock_ticks() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// `utime + stime` of a process (all its threads) or a thread, in clock ticks.
pub fn cpu_ticks(stat_path: &str) -> Result<u64, String> {
    let stat = fs::read_to_string(stat_path).map_err(|e| format!("{stat_path}: {e}"))?;
    // The command name may hold spaces and parentheses: fields are counted after its last ')'.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).ok_or(format!("{stat_path}: no ')'"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of proc(5), numbered from 1 with `pid` and `comm` first.
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).ok_or(format!("{stat_path}: field {i}"));
    Ok(field(11)? + field(12)?)
}

/// CPU seconds of one of this process's threads: the scheduler's nanosecond count where the kernel
/// keeps it (`schedstat`), else clock ticks. Nanoseconds matter here: a slow cell (streamed answers at
/// concurrency 1) gives the fake upstream only a few ticks per window.
pub fn thread_cpu_s(tid: i32) -> Result<f64, String> {
    let schedstat = fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok();
    if let Some(ns) = schedstat.and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok()) {
        return Ok(ns as f64 / 1e9);
    }
    Ok(cpu_ticks(&format!("/proc/self/task/{tid}/stat"))? as f64 / clock_ticks() as f64)
}

/// Resident memory of a process, in KiB.
#[derive(Clone, Copy, Default)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_kb: u64,
    /// `VmHWM`: the peak since start or since the last `reset_peak`.
    pub peak_kb: u64,
}

/// Reads `VmRSS` and `VmHWM` of a process.
pub fn memory(pid: i32) -> Result<Memory, String> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let kb = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Memory { rss_kb: kb("VmRSS:"), peak_kb: kb("VmHWM:") })
}

/// Resets a process's `VmHWM` to its current RSS (`clear_refs` value 5), so that the peak read later
/// belongs to the measured window. False where the kernel or permissions do not allow it.
pub fn reset_peak(pid: i32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// A process and its direct children (nginx's worker), by scanning `/proc` for their parent id.
pub fn with_children(pid: i32) -> Vec<i32> {
    let mut pids = vec![pid];
    let Ok(entries) = fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
        if parent == Some(pid) {
            pids.push(child);
        }
    }
    pids
}
