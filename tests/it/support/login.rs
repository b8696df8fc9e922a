//! The dashboard's login as the page does it, and its live event stream read frame by frame.

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{json, Value};

use super::*;

/// A client that never follows redirects, keeps no cookies, and opens a connection per request.
pub fn plain() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).pool_max_idle_per_host(0).build().unwrap()
}

/// Uses a login link the way a browser and the dashboard page do: the link goes on to the page with
/// the code in its fragment (never sent anywhere), and the page exchanges the code for a session token.
/// The status that refused it otherwise: `403` for the link, `401` for the exchange.
pub async fn redeem_login_link(root: &str, link: &str) -> Result<String, u16> {
    let c = plain();
    let r = c.get(link).send().await.unwrap();
    if r.status() != 303 {
        return Err(r.status().as_u16());
    }
    assert!(r.headers().get("set-cookie").is_none(), "no ambient cookie any page on 127.0.0.1 could ride on");
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let code = location.strip_prefix("/#login=").unwrap_or_else(|| panic!("went to {location}"));
    let r = c.post(format!("{root}/keymux/api/session")).json(&json!({"code": code})).send().await.unwrap();
    if r.status() != 200 {
        return Err(r.status().as_u16());
    }
    Ok(r.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_owned())
}

/// A dashboard session on the harness's gateway, from a fresh login link.
pub async fn dashboard_login(h: &Harness) -> String {
    redeem_login_link(&h.root, &h.gateway.login_link()).await.expect("a fresh login link logs in")
}

/// How long a test waits for the next frame (or the end) of an event stream before it fails: only a
/// stream that hangs takes this long.
pub const FRAME_WAIT: Duration = Duration::from_secs(60);

/// `GET /keymux/api/events` with a dashboard session, read one frame at a time.
pub struct EventFrames {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl EventFrames {
    /// Opens the stream with `session` (the `x-keymux-session` header the page sends).
    pub async fn open(root: &str, session: &str) -> Self {
        let r = plain().get(format!("{root}/keymux/api/events")).header("x-keymux-session", session);
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 200, "the session opens the event stream");
        Self { body: r.bytes_stream().boxed(), buf: String::new() }
    }

    /// The next frame that names an event (heartbeat comments and the retry hint are skipped), or
    /// `None` once the gateway has ended the stream.
    pub async fn next_event(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                if frame.lines().any(|l| l.starts_with("event:")) {
                    return Some(frame);
                }
                continue;
            }
            let chunk = tokio::time::timeout(FRAME_WAIT, self.body.next())
                .await
                .expect("the event stream sent a frame or ended within a minute");
            match chunk {
                Some(Ok(bytes)) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(_)) | None => return None,
            }
        }
    }
}
