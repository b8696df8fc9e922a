//! A conversation turn by turn, as Codex and pi hold one (replayed items, response ids).

use serde_json::Value;

use super::*;

/// How a simulated client replays reasoning items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Codex: `{"type":"reasoning","id",…,"content":null,"encrypted_content"}`, developer/user items with
    /// `msg_<uuid>` ids, tool outputs with `fco_` ids.
    Codex,
    /// pi: the exact JSON of `output_item.done.item`, no ids on its own items.
    Pi,
    /// A client that drops item ids when it replays reasoning.
    NoIds,
}

/// A conversation driven the way Codex and pi drive one: every turn re-sends the whole history plus the
/// new items, with every reasoning item replayed byte for byte.
pub struct Session {
    pub shape: Shape,
    pub id: String,
    pub history: Vec<Value>,
    pub turn: usize,
    pub stream: bool,
    /// The client token it sends (the harness token unless a test says otherwise).
    pub token: String,
}

/// What one turn produced.
pub struct TurnResult {
    pub status: u16,
    pub error_code: Option<String>,
    pub body: String,
}

impl Session {
    pub fn new(shape: Shape, n: usize, stream: bool) -> Self {
        let id = format!("01a227d7-ed08-7e52-9dfa-{n:012x}");
        let system = "You are a coding agent. ".repeat(60);
        let developer = match shape {
            Shape::Codex => {
                serde_json::json!({"type":"message","id":format!("msg_{id}-dev"),"role":"developer","content":[{"type":"input_text","text":system}]})
            }
            Shape::Pi | Shape::NoIds => serde_json::json!({"role":"developer","content":system}),
        };
        Self { shape, id, history: vec![developer], turn: 0, stream, token: TOKEN.to_owned() }
    }

    fn user(&self, text: String) -> Value {
        match self.shape {
            Shape::Codex => {
                serde_json::json!({"type":"message","id":format!("msg_{}-{}", self.id, self.turn),"role":"user","content":[{"type":"input_text","text":text}]})
            }
            Shape::Pi | Shape::NoIds => {
                serde_json::json!({"role":"user","content":[{"type":"input_text","text":text}]})
            }
        }
    }

    /// The body of the next turn.
    pub fn next_body(&mut self, tool_call: bool) -> Value {
        self.turn += 1;
        if tool_call && self.turn > 1 {
            // A tool call inside the turn: the model's call and the client's output are appended.
            let call_id = format!("call_{}_{}", self.turn, self.id.len());
            self.history.push(serde_json::json!({"type":"function_call","id":format!("fc_{}{}", self.turn, &self.id[24..]),"call_id":call_id,"name":"exec_command","arguments":"{\"cmd\":\"ls\"}","status":"completed"}));
            let mut out =
                serde_json::json!({"type":"function_call_output","call_id":call_id,"output":"README.md\nsrc\n"});
            if self.shape == Shape::Codex {
                out["id"] = Value::String(format!("fco_{}-{}", self.id, self.turn));
            }
            self.history.push(out);
        } else {
            let text = format!("Turn {} of session {}: please continue.", self.turn, self.id);
            let user = self.user(text);
            self.history.push(user);
        }
        let mut body = serde_json::json!({
            "model": "gpt-5.5",
            "input": self.history,
            "stream": self.stream,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": self.id,
        });
        match self.shape {
            Shape::Codex => {
                body["reasoning"] = serde_json::json!({"effort":"medium"});
                body["tool_choice"] = "auto".into();
                body["parallel_tool_calls"] = true.into();
                body["client_metadata"] = serde_json::json!({"thread_id": self.id, "turn_id": self.turn});
            }
            Shape::Pi | Shape::NoIds => {
                body["reasoning"] = serde_json::json!({"effort":"medium","summary":"auto"});
                body["max_output_tokens"] = 32000.into();
            }
        }
        body
    }

    /// Appends what the client keeps from a response's output items.
    pub fn absorb(&mut self, items: Vec<Value>) {
        for mut item in items {
            if item["type"] == "reasoning" {
                match self.shape {
                    Shape::Codex => {
                        item["content"] = Value::Null;
                    }
                    Shape::Pi => {}
                    Shape::NoIds => {
                        item.as_object_mut().unwrap().remove("id");
                    }
                }
            }
            self.history.push(item);
        }
    }

    /// Sends the next turn through `base` and absorbs its output.
    pub async fn turn(&mut self, client: &reqwest::Client, base: &str, tool_call: bool) -> TurnResult {
        let body = self.next_body(tool_call);
        let headers = match self.shape {
            Shape::Codex => {
                vec![("session-id".to_owned(), self.id.clone()), ("originator".to_owned(), "codex_exec".to_owned())]
            }
            Shape::Pi | Shape::NoIds => vec![("session_id".to_owned(), self.id.clone())],
        };
        let mut headers = headers;
        headers.push(("x-test-turn".to_owned(), format!("{}:{}", self.id, self.turn)));
        let url = format!("{base}/responses");
        let response = post_as(client, &url, &self.token, &headers, &body).send().await.expect("request sent");
        let status = response.status().as_u16();
        if status != 200 {
            let text = response.text().await.unwrap_or_default();
            let code =
                serde_json::from_str::<Value>(&text).ok().and_then(|v| v["error"]["code"].as_str().map(str::to_owned));
            return TurnResult { status, error_code: code, body: text };
        }
        let items: Vec<Value> = if self.stream {
            read_sse(response)
                .await
                .into_iter()
                .filter(|e| e.data["type"] == "response.output_item.done")
                .map(|e| e.data["item"].clone())
                .collect()
        } else {
            let v: Value = response.json().await.expect("json");
            v["output"].as_array().cloned().unwrap_or_default()
        };
        self.absorb(items);
        TurnResult { status, error_code: None, body: String::new() }
    }
}

/// Every `encrypted_content` value and item id in a JSON tree (to check the upstream never saw a marker).
pub fn marker_like_values(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if let Value::String(s) = v {
                    if (k == "encrypted_content" && s.starts_with("km1"))
                        || ((k == "id" || k == "item_id") && s.contains("_km1"))
                    {
                        out.push(s.chars().take(24).collect());
                    }
                }
                marker_like_values(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| marker_like_values(v, out)),
        _ => {}
    }
}
