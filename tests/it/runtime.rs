//! The embeddable runtime: gateways started and stopped in-process the way `keymux serve` and the tray
//! app do it, with their metrics flushed and their streams drained for a bounded time.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::time::Duration;

use futures::StreamExt as _;
use keymux::metrics::Metrics;
use keymux_sim::{Fault, SimConfig};
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_in_one_process_shut_down_cleanly_with_metrics_flushed() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut harnesses = Vec::new();
    for dir in &dirs {
        let path = dir.path().join("metrics");
        let h = Harness::start_with(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")], |c| {
            c.metrics_dir = Some(path)
        })
        .await;
        harnesses.push(h);
    }
    assert_ne!(harnesses[0].base, harnesses[1].base, "each on a port of its own");
    for (n, h) in harnesses.iter().enumerate() {
        for _ in 0..=n {
            assert_eq!(small_request(&client(), &h.base).await, 200);
        }
    }
    let days = [harnesses[0].gateway.today(), harnesses[1].gateway.today()];
    for h in harnesses {
        let stopped = h.shutdown().await;
        assert_eq!(stopped.metrics, Ok(()), "the last flush reached sled");
        assert_eq!(stopped.error, None);
        assert!(stopped.drained.unwrap().clean, "nothing was in flight");
    }
    // Reopened after the shutdown: the counts are on disk, one gateway's apart from the other's.
    for (n, dir) in dirs.iter().enumerate() {
        let metrics = Metrics::open(&dir.path().join("metrics"), 90);
        let requests: u64 = metrics.rows(1, days[n]).iter().map(|r| r.counters.requests).sum();
        assert_eq!(requests, n as u64 + 1, "gateway {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_stream_in_flight_then_stops() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    h.sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_millis(30)));
    let body = json!({"model":"gpt-5.5","input":"stream for a while","stream":true});
    let response = post(&client(), &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let _first = stream.next().await.unwrap().unwrap();
    let reading = tokio::spawn(async move {
        let mut text = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            text.extend_from_slice(&chunk);
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    let base = h.base.clone();
    let stopped = h.shutdown().await;
    assert!(stopped.drained.unwrap().clean, "the stream finished within the drain allowance");
    let rest = reading.await.unwrap();
    assert!(rest.contains("response.completed"), "the client got the whole stream");
    assert!(reqwest::get(format!("{base}/models")).await.is_err(), "no longer accepting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_longer_than_the_drain_allowance_is_cut() {
    let sim = keymux_sim::Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();
    let options = support::options_for(&sim, &[key("a1", "sk-a1")], |_| {});
    let serve = keymux::server::ServeOptions { drain: Duration::from_millis(200), ..Default::default() };
    let runtime = keymux::Runtime::start_with(options, serve).await.unwrap();
    runtime.probed().await;
    sim.inject("sk-a1", Fault::SlowDeltas(Duration::from_secs(30)));
    let body = json!({"model":"gpt-5.5","input":"a very slow stream","stream":true});
    let base = format!("http://{}/v1", runtime.addr());
    let response = post(&client(), &format!("{base}/responses"), &[], &body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let _first = stream.next().await.unwrap().unwrap();
    let stopped = runtime.shutdown().await;
    let drained = stopped.drained.unwrap();
    assert!(!drained.clean);
    assert_eq!(drained.connections_cut, 1);
    assert_eq!(stopped.metrics, Ok(()));
    // The client's stream ends (cut), rather than hanging on.
    while let Some(Ok(_)) = stream.next().await {}
}
