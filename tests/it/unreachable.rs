//! Honest health: a key whose base URL cannot be reached (refused here; DNS, TLS and connect timeouts
//! alike) is `unreachable`. It takes no first choices and costs no client request a failed attempt; a
//! background probe tries it again after a back-off, and it serves once it can be reached.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::time::Duration;

use keymux::events::{Event, KeyChange};
use keymux::pool::HealthState;
use keymux_sim::{Sim, SimConfig};
use support::*;

/// A loopback port nothing listens on (bound, then let go).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn health(h: &Harness, label: &str) -> HealthState {
    h.status().into_iter().find(|k| k.label == label).unwrap().health
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_key_is_left_alone_and_tried_again_in_the_background() {
    let port = closed_port();
    let keys = [key("a1", "sk-a1"), key("b1", "sk-b1"), key("far", "sk-far")];
    let h = Harness::start_with(three_orgs(), &keys, |config| {
        let far = config.keys.iter_mut().find(|k| k.label == "far").unwrap();
        far.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
    })
    .await;
    assert_eq!(health(&h, "far"), HealthState::Unreachable, "the start-up probe could not reach it");
    let c = client();
    for _ in 0..10 {
        assert_eq!(small_request(&c, &h.base).await, 200);
    }
    let decisions = decisions_api(&h.root).await;
    let tried_far = decisions["data"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["attempts"].as_array().unwrap().iter())
        .filter(|a| a["key"] == "k_far")
        .count();
    assert_eq!(tried_far, 0, "no client request paid an attempt on the unreachable key");
    let skipped = decisions["data"].as_array().unwrap().iter().any(|r| {
        let reasons = r["decision"]["reasons"].as_array().unwrap();
        reasons.iter().any(|x| x["key"] == "k_far" && x["why"]["kind"] == "unreachable")
    });
    assert!(skipped, "the decisions say why it was left out");

    // The provider comes back at that address: the background probe finds it once the back-off passed.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let _far = Sim::serve(listener, SimConfig::new().org("org-far", &["sk-far"])).await.unwrap();
    let mut feed = h.gateway.events().subscribe();
    h.advance(keymux::pool::unreachable_backoff(1));
    let recovered = async {
        loop {
            if let Ok(envelope) = feed.recv().await {
                if let Event::Key(k) = &envelope.event {
                    if k.label == "far" && k.change == KeyChange::Recovered {
                        return;
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), recovered).await.expect("recovered by the background probe");
    assert_eq!(health(&h, "far"), HealthState::Ready);
}

#[tokio::test]
async fn the_back_off_doubles_up_to_five_minutes() {
    let steps: Vec<u64> = (1..=9).map(|n| keymux::pool::unreachable_backoff(n).as_secs()).collect();
    assert_eq!(steps, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
}
