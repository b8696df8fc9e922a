//! The control API as the CLI calls it: every request under `/keymux/api`, with the admin credential.

use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;

use super::{client, ADMIN};

/// A caller of one gateway's control API with the harness's admin credential.
pub struct Admin {
    client: reqwest::Client,
    /// `http://127.0.0.1:PORT/keymux/api`
    api: String,
}

impl Admin {
    /// The control API of the gateway at `root` (`http://127.0.0.1:PORT`).
    pub fn new(root: &str) -> Self {
        Self { client: client(), api: format!("{}/keymux/api", root.trim_end_matches('/')) }
    }

    /// A request to `path` (under `/keymux/api`), credential attached, for a test to add to and send.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, format!("{}{path}", self.api)).bearer_auth(ADMIN)
    }

    /// `GET path`, the answer as it came.
    pub async fn get(&self, path: &str) -> Response {
        self.request(Method::GET, path).send().await.expect("the control API answers")
    }

    /// `GET path`, the answer read as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.json().await.expect("the control API answers JSON")
    }

    /// `GET path`, the answer read as text.
    pub async fn get_text(&self, path: &str) -> String {
        self.get(path).await.text().await.expect("the control API answers")
    }

    /// `method path` with an optional JSON body: the status, and the answer as JSON (`Null` for none).
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.expect("the control API answers");
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    /// `POST path` with an optional JSON body: the status and the answer as JSON.
    pub async fn post_json(&self, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call(Method::POST, path, body).await
    }

    /// `PATCH path` with a JSON body: the status and the answer as JSON.
    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(Method::PATCH, path, Some(body)).await
    }

    /// `DELETE path`: the status.
    pub async fn delete(&self, path: &str) -> u16 {
        self.call(Method::DELETE, path, None).await.0
    }
}
