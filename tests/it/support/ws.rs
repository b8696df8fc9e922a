//! A Responses-over-WebSocket client, as Codex opens one.

use std::time::Duration;

use futures::StreamExt as _;
use serde_json::Value;

use super::*;

/// A Codex-like client of the Responses WebSocket.
pub struct WsClient {
    pub socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
}

/// The frames answering one `response.create`, up to `response.completed` or an error.
pub struct WsAnswer {
    pub events: Vec<Value>,
    pub error: Option<Value>,
    /// Whether the socket closed before the answer was complete.
    pub closed: bool,
    /// Binary frames received (as text, lossily), which the Responses WebSocket never sends.
    pub binary: Vec<String>,
}

impl WsAnswer {
    pub fn response_id(&self) -> Option<String> {
        self.events
            .iter()
            .find(|e| e["type"] == "response.completed")
            .and_then(|e| e["response"]["id"].as_str().map(str::to_owned))
    }
    pub fn output_items(&self) -> Vec<Value> {
        self.events.iter().filter(|e| e["type"] == "response.output_item.done").map(|e| e["item"].clone()).collect()
    }
}

impl WsClient {
    /// Opens `GET /v1/responses` as Codex does (bearer token, `openai-beta`, session headers).
    pub async fn connect(base: &str, session: &str) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        Self::connect_as(base, session, TOKEN).await
    }

    /// Opens the socket with `headers` added to Codex's.
    pub async fn connect_with(
        base: &str,
        session: &str,
        headers: &[(&'static str, &str)],
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        Self::open(base, session, TOKEN, headers).await
    }

    /// Opens the socket with the client token `token`.
    pub async fn connect_as(
        base: &str,
        session: &str,
        token: &str,
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        Self::open(base, session, token, &[]).await
    }

    async fn open(
        base: &str,
        session: &str,
        token: &str,
        headers: &[(&'static str, &str)],
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let mut request = format!("{}/responses", base.replace("http://", "ws://")).into_client_request()?;
        let h = request.headers_mut();
        h.insert("authorization", format!("Bearer {token}").parse().unwrap());
        h.insert("openai-beta", "responses_websockets=2026-02-06".parse().unwrap());
        h.insert("session-id", session.parse().unwrap());
        h.insert("originator", "codex_exec".parse().unwrap());
        for (name, value) in headers {
            h.insert(*name, value.parse().unwrap());
        }
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Self { socket })
    }

    /// Sends a `response.create` frame and reads its answer.
    pub async fn create(&mut self, body: &Value) -> WsAnswer {
        self.create_framed(body, false).await
    }

    /// Sends a `response.create` as a binary frame (not what Codex does) and reads the answer.
    pub async fn create_binary(&mut self, body: &Value) -> WsAnswer {
        self.create_framed(body, true).await
    }

    async fn create_framed(&mut self, body: &Value, binary: bool) -> WsAnswer {
        use futures::SinkExt as _;
        use tokio_tungstenite::tungstenite::Message;
        let mut frame = serde_json::json!({"type": "response.create"});
        for (k, v) in body.as_object().unwrap() {
            frame[k] = v.clone();
        }
        let mut answer = WsAnswer { events: Vec::new(), error: None, closed: false, binary: Vec::new() };
        let message = if binary {
            Message::Binary(frame.to_string().into_bytes().into())
        } else {
            Message::Text(frame.to_string().into())
        };
        if self.socket.send(message).await.is_err() {
            answer.closed = true;
            return answer;
        }
        loop {
            match tokio::time::timeout(Duration::from_secs(20), self.socket.next()).await.expect("an answer in time") {
                Some(Ok(Message::Text(text))) => {
                    let v: Value = serde_json::from_str(&text).expect("JSON frame");
                    if v["type"] == "error" {
                        answer.error = Some(v);
                        return answer;
                    }
                    let done = v["type"] == "response.completed";
                    answer.events.push(v);
                    if done {
                        return answer;
                    }
                }
                Some(Ok(Message::Binary(bytes))) => answer.binary.push(String::from_utf8_lossy(&bytes).into_owned()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    answer.closed = true;
                    return answer;
                }
                Some(Ok(_)) => {}
            }
        }
    }
}
