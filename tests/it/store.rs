//! The metrics store under faults: a disk that fills up, a directory that turns read-only, a process
//! killed with SIGKILL. Proxying goes on untouched, nothing is counted twice, and writes resume when the
//! store recovers.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, clippy::print_stdout, reason = "tests")]

use crate::support;

use std::path::Path;
use std::time::Duration;

use keymux::metrics::Metrics;
use keymux_sim::SimConfig;
use serde_json::json;
use support::disk::{rss_kib, SmallDisk};
use support::*;

async fn requests(h: &Harness, n: usize) {
    for _ in 0..n {
        assert_eq!(small_request(&client(), &h.base).await, 200, "proxying is untouched by the store");
    }
}

fn stored_requests(dir: &Path, today: u32) -> u64 {
    Metrics::open(dir, 90).rows(2, today).iter().map(|r| r.counters.requests).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_then_read_only_disk_loses_and_doubles_nothing() {
    let Some(disk) = SmallDisk::mount("4m") else {
        println!("skipped: mounting a small tmpfs needs root (CI runs as root)");
        return;
    };
    let store = disk.dir.join("metrics");
    let h = Harness::start_with(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")], |c| {
        c.metrics_dir = Some(store.clone())
    })
    .await;
    let today = h.gateway.today();
    let now = || h.gateway.clock().unix_ms();
    requests(&h, 20).await;
    assert_eq!(h.gateway.metrics().flush(now()).0, Ok(()));

    // Full: flushes fail, proxying goes on, counts stay in memory.
    // sled appends to space it has already claimed until that runs out, so a full disk shows within a
    // few flushes, not necessarily the first.
    disk.fill();
    let mut failed = false;
    let mut made = 20;
    for _ in 0..200 {
        requests(&h, 1).await;
        made += 1;
        failed = h.gateway.metrics().flush(now()).0.is_err();
        if failed {
            break;
        }
    }
    println!("a full disk failed a flush after {} more requests", made - 20);
    assert!(failed, "a full disk fails a flush");
    // The store says so, whichever flush (this test's or the periodic one) saw the failure first.
    let status = h.gateway.metrics().status();
    assert!(!status.persisted && status.error.is_some(), "{status:?}");
    requests(&h, 5).await;
    made += 5;
    // Read-only on top of it (still full: the filler goes once it is writable again).
    disk.remount_read_only().await;
    requests(&h, 20).await;
    assert!(h.gateway.metrics().flush(now()).0.is_err(), "a read-only disk fails the flush");
    let status = h.gateway.metrics().status();
    assert!(!status.persisted && status.error.is_some(), "{status:?}");
    made += 20;
    assert_eq!(
        h.gateway.metrics().rows(1, today).iter().map(|r| r.counters.requests).sum::<u64>(),
        made,
        "shown meanwhile"
    );

    // Recovered: writes resume without a restart, and every request is counted exactly once.
    disk.remount("rw");
    disk.free();
    assert_eq!(h.gateway.metrics().flush(now()).0, Ok(()));
    let status = h.gateway.metrics().status();
    assert!(status.persisted && status.error.is_none(), "recovered: {status:?}");
    requests(&h, 5).await;
    let stopped = h.shutdown().await;
    assert_eq!(stopped.metrics, Ok(()));
    assert_eq!(stored_requests(&store, today), made + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_survive_a_kill_9_once_flushed() {
    let sim = keymux_sim::Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join("metrics");
    let config = home.path().join("config.toml");
    std::fs::write(&config, format!("metrics_dir = \"{}\"\n", store.display())).unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_KEY_A1".into(), "sk-a1".into()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let mut gateway =
        Keymux::spawn(&["--ephemeral", "--config", config.to_str().unwrap(), "--upstream", &sim.base_url()], &env)
            .await;
    let c = client();
    for _ in 0..25 {
        let body = json!({"model":"gpt-5.5","input":"hello","store":false});
        assert_eq!(post(&c, &format!("{}/responses", gateway.base), &[], &body).send().await.unwrap().status(), 200);
    }
    // Wait (on the gateway's own report, not a clock) until the periodic flush has written them.
    let api = Admin::new(&gateway.root);
    let flushed =
        |v: &serde_json::Value| v["gateway"]["store"]["pending"] == 0 && v["gateway"]["store"]["persisted"] == true;
    until("the periodic flush", || api.get_json("/status"), flushed).await;
    gateway.child.start_kill().unwrap();
    let _ = gateway.child.wait().await;
    let today = keymux::clock::utc_day(keymux::clock::Clock::system().unix_ms());
    assert_eq!(stored_requests(&store, today), 25, "nothing lost but what was not yet flushed");
}

#[tokio::test]
async fn a_corrupt_store_is_moved_aside_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("metrics");
    std::fs::create_dir_all(&store).unwrap();
    // Not a sled database: a conf file it cannot read.
    std::fs::write(store.join("conf"), b"\xff\xfe garbage that is no sled config").unwrap();
    std::fs::write(store.join("db"), vec![0xAB; 4096]).unwrap();
    let metrics = Metrics::open(&store, 90);
    let status = metrics.status();
    println!("{status:?}");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("metrics.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{status:?}");
    let notice = status.notice.as_deref().unwrap_or_default();
    assert!(notice.contains("moved to"), "{status:?}");
    assert!(status.persisted && status.error.is_none(), "a fresh store took its place: {status:?}");
    let kept = dir.path().join(&aside[0]);
    assert_eq!(std::fs::read(kept.join("db")).unwrap().len(), 4096, "the old files are kept, untouched");
    assert!(std::fs::read(kept.join("conf")).unwrap().starts_with(b"\xff\xfe garbage"));
}

/// Requests from `workers` clients, one after another each, until `stop` is set: (succeeded, failed).
fn load(
    base: String,
    workers: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<(u64, u64)> {
    use std::sync::atomic::Ordering::Relaxed;
    tokio::spawn(async move {
        let tasks: Vec<_> = (0..workers)
            .map(|_| {
                let (base, stop) = (base.clone(), stop.clone());
                tokio::spawn(async move {
                    let c = client();
                    let (mut ok, mut failed) = (0, 0);
                    while !stop.load(Relaxed) {
                        let body = json!({"model":"gpt-5.5","input":"hello","store":false});
                        let served = match post(&c, &format!("{base}/responses"), &[], &body).send().await {
                            Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
                            Err(_) => false,
                        };
                        if served {
                            ok += 1;
                        } else {
                            failed += 1;
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        let mut total = (0, 0);
        for t in tasks {
            let (ok, failed) = t.await.unwrap();
            total = (total.0 + ok, total.1 + failed);
        }
        total
    })
}

/// The store's disk read-only, then full, under steady load through the real binary for 30 s (ten
/// seconds each, so the gateway's own 5 s flushes meet every state), then healthy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_chaos_under_load_fails_no_request_and_resumes() {
    let Some(disk) = SmallDisk::mount("4m") else {
        println!("skipped: mounting a small tmpfs needs root (CI runs as root)");
        return;
    };
    disk.remount("ro");
    let store = disk.dir.join("metrics");
    let sim = keymux_sim::Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(&config, format!("metrics_dir = \"{}\"\n", store.display())).unwrap();
    let mut env = base_env(home.path());
    env.retain(|(k, _)| k != "KEYMUX_LOG");
    env.push(("KEYMUX_KEY_A1".into(), "sk-a1".into()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let gateway =
        Keymux::spawn(&["--ephemeral", "--config", config.to_str().unwrap(), "--upstream", &sim.base_url()], &env)
            .await;
    let pid = gateway.child.id().unwrap();
    let api = Admin::new(&gateway.root);
    let events = collect_events(api.get("/events?after=0").await);
    let store_status = || async { api.get_json("/status").await["gateway"]["store"].clone() };

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let running = load(gateway.base.clone(), 4, stop.clone());
    let phase = Duration::from_secs(10);
    tokio::time::sleep(phase).await;
    let read_only = store_status().await;
    let warm_rss = rss_kib(pid);
    println!("read-only: {read_only}, rss {warm_rss} KiB");
    assert_eq!(read_only["persisted"], false);
    assert!(read_only["error"].as_str().unwrap().contains("Read-only"), "shown in the status: {read_only}");

    disk.remount("rw");
    disk.fill();
    tokio::time::sleep(phase).await;
    let full = store_status().await;
    println!("full: {full}, rss {} KiB", rss_kib(pid));
    assert_eq!(full["persisted"], false, "{full}");
    assert!(full["pending"].as_u64().unwrap() <= 4, "pending rows stay one per hour × key × operation: {full}");

    disk.free();
    tokio::time::sleep(phase).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = running.await.unwrap();
    let end_rss = rss_kib(pid);
    let healthy = store_status().await;
    println!("recovered: {healthy}, {ok} requests, rss {end_rss} KiB");
    assert_eq!(failed, 0, "no client request failed");
    assert_eq!(healthy["persisted"], true, "writes resumed without a restart: {healthy}");
    // Generous: a per-request leak over tens of thousands of requests would blow well past it.
    assert!(end_rss < warm_rss + 64 * 1024, "memory bounded: {warm_rss} KiB then {end_rss} KiB after {ok} requests");

    let seen: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "gateway")
        .map(|e| e["data"]["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    println!("store events: {seen:?}");
    assert_eq!(seen.first().map(String::as_str), Some("store_failed"), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("store_recovered"), "{seen:?}");

    let output = gateway.stop().await;
    let today = keymux::clock::utc_day(keymux::clock::Clock::system().unix_ms());
    assert_eq!(stored_requests(&store, today), ok, "every request counted exactly once");
    assert_no_secrets("keymux output", &output, &["sk-a1", TOKEN, ADMIN]);
}
