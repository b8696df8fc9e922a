//! Standing faults: every request of a key (or of a whole organization) shows the fault
//! until it is cleared or its time, on the simulator's clock, runs out.

mod common;

use std::time::Duration;

use anyhow::bail;
use common::*;
use futures::SinkExt;
use keymux_sim::{Fault, Sim};
use serde_json::{json, Value};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

fn hi() -> Value {
    json!({"model": "gpt-5.5", "input": "hi", "store": false})
}

async fn status(sim: &Sim, key: &str) -> anyhow::Result<u16> {
    Ok(post(sim, key, "/responses", &hi()).await?.status)
}

/// The status and body of a refused WebSocket handshake.
async fn refused_upgrade(sim: &Sim, key: &str) -> anyhow::Result<(u16, Option<String>, Value)> {
    let mut req = ws_url(sim).into_client_request()?;
    req.headers_mut().insert("authorization", HeaderValue::from_str(&format!("Bearer {key}"))?);
    match connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let retry = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let body = serde_json::from_slice(resp.body().as_deref().unwrap_or(b"{}"))?;
            Ok((resp.status().as_u16(), retry, body))
        }
        Err(e) => bail!("expected an HTTP refusal, got {e}"),
        Ok(_) => bail!("the handshake succeeded"),
    }
}

#[tokio::test]
async fn a_standing_fault_shows_on_every_request_until_cleared() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    sim.set_standing("sk-a1", Fault::Status500, None);
    for _ in 0..3 {
        assert_eq!(status(&sim, "sk-a1").await?, 500);
    }
    assert_eq!(status(&sim, "sk-a2").await?, 200, "another key of the organization is unaffected");

    // A queued one-shot fault comes first, then the standing one again.
    sim.inject("sk-a1", Fault::RateLimited { retry_after_secs: 7 });
    let r = post(&sim, "sk-a1", "/responses", &hi()).await?;
    assert_eq!((r.status, r.header("retry-after")), (429, Some("7")));
    assert_eq!(status(&sim, "sk-a1").await?, 500);

    // Queued faults are cleared apart from standing ones.
    sim.inject("sk-a1", Fault::InvalidKey);
    sim.clear_faults();
    assert_eq!(status(&sim, "sk-a1").await?, 500);
    sim.clear_standing("sk-a1");
    assert_eq!(status(&sim, "sk-a1").await?, 200);
    assert_eq!(sim.count_by_key().get("sk-a1"), Some(&7));
    Ok(())
}

#[tokio::test]
async fn a_standing_fault_expires_with_the_clock() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    sim.set_standing("sk-a1", Fault::Status503 { retry_after_secs: Some(2) }, Some(Duration::from_secs(30)));
    sim.set_standing_org("org-b", Fault::InsufficientQuota, Some(Duration::from_secs(60)));
    let r = post(&sim, "sk-a1", "/responses", &hi()).await?;
    assert_eq!((r.status, r.header("retry-after")), (503, Some("2")));
    assert_eq!(post(&sim, "sk-b1", "/responses", &hi()).await?.body["error"]["code"], "insufficient_quota");

    sim.advance(Duration::from_secs(25));
    assert_eq!(status(&sim, "sk-a1").await?, 503);
    sim.advance(Duration::from_secs(5));
    assert_eq!(status(&sim, "sk-a1").await?, 200);
    assert_eq!(status(&sim, "sk-b1").await?, 429);
    sim.advance(Duration::from_secs(30));
    assert_eq!(status(&sim, "sk-b1").await?, 200);
    Ok(())
}

#[tokio::test]
async fn an_organization_wide_fault_covers_each_of_its_keys_and_handshakes() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    sim.set_standing_org("org-a", Fault::InvalidKey, None);
    for key in ["sk-a1", "sk-a2"] {
        let r = post(&sim, key, "/responses", &hi()).await?;
        assert_eq!((r.status, r.body["error"]["code"].clone()), (401, json!("invalid_api_key")), "{key}");
        let (status, _, body) = refused_upgrade(&sim, key).await?;
        assert_eq!((status, body["error"]["code"].clone()), (401, json!("invalid_api_key")), "{key}");
    }
    assert_eq!(status(&sim, "sk-b1").await?, 200);
    connect_key(&sim, "sk-b1").await?;

    // A key's own standing fault wins over its organization's.
    sim.set_standing("sk-a2", Fault::Status503 { retry_after_secs: Some(4) }, None);
    assert_eq!(status(&sim, "sk-a2").await?, 503);
    let (status_a2, retry, _) = refused_upgrade(&sim, "sk-a2").await?;
    assert_eq!((status_a2, retry.as_deref()), (503, Some("4")));
    assert_eq!(status(&sim, "sk-a1").await?, 401);

    sim.clear_standing_org("org-a");
    assert_eq!(status(&sim, "sk-a1").await?, 200);
    connect_key(&sim, "sk-a1").await?;
    assert_eq!(status(&sim, "sk-a2").await?, 503);
    Ok(())
}

#[tokio::test]
async fn standing_faults_reach_open_websockets() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let body = codex_body(vec![user("hi")]);
    let mut ws = connect_key(&sim, "sk-a1").await?;
    assert_eq!(last_response(&exchange(&mut ws, &body).await?)["status"], "completed");

    // An error fault answers every frame with an error frame; the connection stays usable.
    sim.set_standing("sk-a1", Fault::Status500, None);
    for _ in 0..2 {
        let frames = exchange(&mut ws, &body).await?;
        assert_eq!((frames[0]["type"].clone(), frames[0]["status"].clone()), (json!("error"), json!(500)));
    }

    // A cut breaks off every stream, on the open connection and on new ones.
    sim.set_standing("sk-a1", Fault::CutAfterEvents(2), None);
    let mut frame = body.clone();
    frame["type"] = json!("response.create");
    for fresh in [false, true] {
        if fresh {
            ws = connect_key(&sim, "sk-a1").await?;
        }
        ws.send(Message::text(frame.to_string())).await?;
        assert_eq!(next_json(&mut ws).await?["type"], "response.created");
        assert_eq!(next_json(&mut ws).await?["type"], "response.in_progress");
        assert!(next_json(&mut ws).await.is_err(), "the connection must drop (fresh: {fresh})");
    }

    sim.clear_standing("sk-a1");
    let mut ws = connect_key(&sim, "sk-a1").await?;
    assert_eq!(last_response(&exchange(&mut ws, &body).await?)["status"], "completed");
    Ok(())
}

#[tokio::test]
async fn standing_faults_over_the_control_surface() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let root = sim.base_url().trim_end_matches("/v1").to_owned();
    let control = |path: &str, body: Value| client().post(format!("{root}/__sim/{path}")).json(&body).send();

    let r = control("standing", json!({"key": "sk-a1", "fault": {"type": "status500"}, "ms": 30_000})).await?;
    assert_eq!(r.status(), 200);
    let r =
        control("standing", json!({"org": "org-b", "fault": {"type": "rate_limited", "retry_after_secs": 5}})).await?;
    assert_eq!(r.status(), 200);
    assert_eq!(status(&sim, "sk-a1").await?, 500);
    assert_eq!(status(&sim, "sk-a1").await?, 500);
    let b = post(&sim, "sk-b1", "/responses", &hi()).await?;
    assert_eq!((b.status, b.header("retry-after")), (429, Some("5")));

    control("advance", json!({"ms": 30_000})).await?;
    assert_eq!(status(&sim, "sk-a1").await?, 200);
    assert_eq!(status(&sim, "sk-b1").await?, 429, "an organization's fault without ms stands");
    assert_eq!(control("standing/clear", json!({"org": "org-b"})).await?.status(), 200);
    assert_eq!(status(&sim, "sk-b1").await?, 200);

    control("standing", json!({"key": "sk-a2", "fault": {"type": "model_not_found"}})).await?;
    assert_eq!(status(&sim, "sk-a2").await?, 404);
    control("standing/clear", json!({"key": "sk-a2"})).await?;
    assert_eq!(status(&sim, "sk-a2").await?, 200);

    let neither = control("standing", json!({"fault": {"type": "status500"}})).await?;
    assert_eq!(neither.status(), 400);
    let both = control("standing/clear", json!({"key": "sk-a1", "org": "org-a"})).await?;
    assert_eq!(both.status(), 400);
    Ok(())
}
