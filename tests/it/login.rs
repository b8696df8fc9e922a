//! The dashboard's login and its sessions against another user or process on the same machine: the
//! one-time login code reaches the browser through a private page, never on a command line another
//! user can read; a session's live event stream ends when the session does.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::time::Duration;

use keymux_sim::SimConfig;
use support::*;

async fn one_key() -> Harness {
    Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await
}

/// Pauses or resumes routing with the admin credential: an event on every stream still open.
async fn announce(h: &Harness, paused: bool) {
    let (status, _) = Admin::new(&h.root).post_json(if paused { "/pause" } else { "/resume" }, None).await;
    assert_eq!(status, 200);
}

/// Reads `events` to its end: an event it still delivers is one too many.
async fn assert_ends(events: &mut EventFrames, why: &str) {
    if let Some(frame) = events.next_event().await {
        panic!("the event stream outlived its session ({why}) and delivered: {frame}");
    }
}

/// Logging out ends the session's event stream at once: an event announced after the logout never
/// reaches it, and the stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_at_logout() {
    let h = one_key().await;
    let session = dashboard_login(&h).await;
    let mut events = EventFrames::open(&h.root, &session).await;
    announce(&h, true).await;
    let frame = events.next_event().await.expect("the stream is open while the session lasts");
    assert!(frame.contains("event: gateway"), "{frame}");
    let r = plain().post(format!("{}/keymux/api/logout", h.root)).header("x-keymux-session", &session);
    assert_eq!(r.send().await.unwrap().status(), 204);
    announce(&h, false).await;
    assert_ends(&mut events, "logged out").await;
}

/// A stream ends when its session expires, on the gateway's clock (moved on, not waited for): after
/// 8 h unused, and 24 h after login however busy. Used every hour, a session's stream still delivers
/// after 23 h, when that of a session left unused has ended; an hour later it has ended too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_when_its_session_expires() {
    let h = one_key().await;
    let session = dashboard_login(&h).await;
    let mut events = EventFrames::open(&h.root, &session).await;
    let mut unused = EventFrames::open(&h.root, &dashboard_login(&h).await).await;
    let status = format!("{}/keymux/api/status", h.root);
    for _ in 1..24 {
        h.advance(Duration::from_secs(3600));
        let r = plain().get(&status).header("x-keymux-session", &session).send().await.unwrap();
        assert_eq!(r.status(), 200, "used every hour, the session lasts");
    }
    announce(&h, true).await;
    let frame = events.next_event().await.expect("the stream is open while the session lasts");
    assert!(frame.contains("event: gateway"), "{frame}");
    assert_ends(&mut unused, "unused for 8 hours").await;
    h.advance(Duration::from_secs(3600));
    announce(&h, false).await;
    assert_ends(&mut events, "expired").await;
}
