//! A rescued session stays rescued: once Keymux moved a session off an organization (its last key was
//! removed or switched off), that organization's items stay dropped on later turns even when the
//! organization is back, so the session lives on where it was moved instead of dying on
//! `keymux_mixed_organizations`. A mix Keymux did not cause still gets the clear 400.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::*;

/// Switches every key of organization b and c off (`on = false`) or on.
async fn others(admin: &Admin, on: bool) {
    for key in ["k_b1", "k_b2", "k_c1"] {
        let action = if on { "enable" } else { "disable" };
        let (status, _) = admin.post_json(&format!("/keys/{key}/{action}"), None).await;
        assert_eq!(status, 200);
    }
}

/// Adds a key back through the control API (a new id, the same secret, so the same organization).
async fn add_back(admin: &Admin, label: &str, secret: &str) {
    let (status, body) = admin.post_json("/keys", Some(json!({"label": label, "secret": secret}))).await;
    assert_eq!(status, 201, "{body}");
}

/// One WebSocket turn as Codex takes it: on `previous_response_not_found` (or a closed socket) it opens
/// a new socket and sends the whole history again.
async fn ws_turn(base: &str, ws: &mut Option<WsClient>, s: &mut Session) -> Result<(), Value> {
    let body = s.next_body(false);
    for _ in 0..2 {
        if ws.is_none() {
            *ws = Some(WsClient::connect(base, &s.id).await.map_err(|e| json!(e.to_string()))?);
        }
        let answer = ws.as_mut().unwrap().create(&body).await;
        match (&answer.error, answer.closed) {
            (None, false) => {
                s.absorb(answer.output_items());
                return Ok(());
            }
            (Some(e), _) if e["error"]["code"] != "previous_response_not_found" => return Err(e.clone()),
            _ => *ws = None,
        }
    }
    Err(json!("no answer after a reconnect"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_moved_off_an_organization_survive_its_return() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let c = client();
    // Every session starts on organization a.
    others(&admin, false).await;
    let mut http: Vec<Session> = vec![
        Session::new(Shape::Codex, 1, true),
        Session::new(Shape::Codex, 2, false),
        Session::new(Shape::Pi, 3, true),
        Session::new(Shape::Pi, 4, false),
    ];
    let mut sockets: Vec<(Session, Option<WsClient>)> =
        (5..7).map(|n| (Session::new(Shape::Codex, n, true), None)).collect();
    for phase in ["start", "serving key removed", "organization's last key removed", "keys back", "after"] {
        match phase {
            "serving key removed" => {
                others(&admin, true).await;
                assert_eq!(admin.call(Method::DELETE, "/keys/k_a1", None).await.0, 204);
                h.sim.kill_ws_connections("sk-a1");
            }
            "organization's last key removed" => {
                assert_eq!(admin.call(Method::DELETE, "/keys/k_a2", None).await.0, 204);
                h.sim.kill_ws_connections("sk-a2");
            }
            "keys back" => {
                add_back(&admin, "a1", "sk-a1").await;
                add_back(&admin, "a2", "sk-a2").await;
            }
            _ => {}
        }
        for s in &mut http {
            let r = s.turn(&c, &h.base, false).await;
            assert_eq!(r.status, 200, "{phase}: {} {}", s.id, r.body);
        }
        for (s, ws) in &mut sockets {
            if let Err(e) = ws_turn(&h.base, ws, s).await {
                panic!("{phase}: websocket {}: {e}", s.id);
            }
        }
    }
    let still: usize = decisions_api(&h.root).await["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["decision"]["reasons"].as_array().unwrap().iter().any(|x| x["rule"] == "still_rescued"))
        .count();
    println!("turns whose decision dropped a rescued organization again: {still}");
    assert!(still >= http.len(), "the decision says so");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mix_keymux_did_not_cause_is_still_refused() {
    let h = Harness::start(three_orgs(), &five_keys()).await;
    let admin = Admin::new(&h.root);
    let c = client();
    // Two sessions, one per organization, spliced by the client into one history.
    others(&admin, false).await;
    let mut on_a = Session::new(Shape::Pi, 1, false);
    assert_eq!(on_a.turn(&c, &h.base, false).await.status, 200);
    others(&admin, true).await;
    for key in ["k_a1", "k_a2", "k_c1"] {
        admin.post_json(&format!("/keys/{key}/disable"), None).await;
    }
    let mut on_b = Session::new(Shape::Pi, 1, false);
    on_b.id = on_a.id.clone();
    assert_eq!(on_b.turn(&c, &h.base, false).await.status, 200);
    for key in ["k_a1", "k_a2", "k_c1"] {
        admin.post_json(&format!("/keys/{key}/enable"), None).await;
    }
    on_a.history.extend(on_b.history.into_iter().skip(2));
    let mixed = on_a.turn(&c, &h.base, false).await;
    assert_eq!(
        (mixed.status, mixed.error_code.as_deref()),
        (400, Some("keymux_mixed_organizations")),
        "{}",
        mixed.body
    );
}
