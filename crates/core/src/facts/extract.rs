//! Reading a request's facts once from its method, path, headers and body, and the body to forward
//! with Keymux's markers removed. Bodies are otherwise never changed here: clients send fields no
//! schema knows, and they are forwarded as they are. The body's fields are read by `body`, what ties
//! the request to its session by `session`.

use bytes::Bytes;
use http::HeaderMap;

use super::body::{self, FactsError};
use super::session::{self, Sender};
use super::{ClientKind, Operation, RequestFacts};
use crate::markers::{Field, Markers, Pin};

/// The facts, and the path and body to forward (markers removed).
#[derive(Debug)]
pub struct Extracted {
    /// The facts.
    pub facts: RequestFacts,
    /// The path with a marked response id restored to the provider's id.
    pub path: String,
    /// The body with every marker removed; the same bytes when it had none.
    pub body: Bytes,
}

/// A request as it arrived: what `extract` reads.
#[derive(Clone, Copy, Debug)]
pub struct Incoming<'a> {
    /// Gateway-local request number.
    pub seq: u64,
    /// The operation.
    pub operation: Operation,
    /// Which local client token it came with (scopes the affinity digests).
    pub scope: &'a str,
    /// The pool that token is bound to: session digests and affinity are per pool, so what one pool
    /// learned never steers another.
    pub pool: &'a str,
    /// The request path (with `/v1`).
    pub path: &'a str,
    /// The request headers (a WebSocket frame carries its upgrade's).
    pub headers: &'a HeaderMap,
    /// The body as received.
    pub body: &'a Bytes,
}

/// Reads the facts of a request and removes its markers. JSON endpoints must carry a JSON object;
/// everything else passes as it is.
pub fn extract(incoming: &Incoming<'_>, markers: &Markers) -> Result<Extracted, FactsError> {
    let Incoming { seq, operation, path, body, .. } = *incoming;
    let mut facts = RequestFacts::new(seq, operation);
    facts.client = ClientKind::from_headers(incoming.headers);
    facts.prompt_tokens = crate::quota::estimate_tokens(body.len());
    let path = match operation {
        Operation::ResponsesGet
        | Operation::ResponsesDelete
        | Operation::ResponsesCancel
        | Operation::ResponsesInputItems => untag_path(path, markers, &mut facts)?,
        _ => path.to_owned(),
    };
    if !operation.has_json_body() {
        return Ok(Extracted { facts, path, body: body.clone() });
    }
    let peek = body::peek(body)?;
    facts.model = body::model_of(&peek)?;
    facts.stream = matches!(peek.stream, Some(serde_json::Value::Bool(true)));
    facts.service_tier = body::service_tier_of(&peek);
    let sender = Sender { scope: incoming.scope, pool: incoming.pool, headers: incoming.headers };
    session::read(&peek, operation, &sender, markers, &mut facts);
    let stripped = markers.strip(body)?;
    let (continuity, pins): (Vec<Pin>, Vec<Pin>) =
        stripped.pins.into_iter().partition(|p| p.field == Field::ResponseId);
    facts.pins = pins;
    facts.continuity = continuity.into_iter().next();
    facts.unmarked_response_id = facts.continuity.is_none()
        && peek.previous_response_id.as_ref().and_then(serde_json::Value::as_str).is_some_and(|s| !s.is_empty());
    facts.foreign_markers = stripped.foreign;
    facts.unmarked_encrypted = operation.carries_org_state() && crate::markers::has_unmarked_encrypted(body);
    let body = match stripped.body {
        std::borrow::Cow::Borrowed(_) => body.clone(),
        std::borrow::Cow::Owned(v) => Bytes::from(v),
    };
    Ok(Extracted { facts, path, body })
}

/// Restores the provider's id in `/v1/responses/{id}…` and records the key its marker names.
fn untag_path(path: &str, markers: &Markers, facts: &mut RequestFacts) -> Result<String, FactsError> {
    let Some(rest) = path.strip_prefix("/v1/responses/") else {
        return Ok(path.to_owned());
    };
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let original = match markers.untag_id(id)? {
        None => {
            facts.unmarked_response_id = true;
            return Ok(path.to_owned());
        }
        Some((None, original)) => {
            facts.foreign_markers += 1;
            facts.unmarked_response_id = true;
            original
        }
        Some((Some(pin), original)) => {
            facts.continuity = Some(pin);
            original
        }
    };
    Ok(if tail.is_empty() { format!("/v1/responses/{original}") } else { format!("/v1/responses/{original}/{tail}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::body::{MODEL_DISPLAY_CAP, TIER_CAP};
    use crate::facts::{valid_cache_key, AffinitySource, CACHE_MIN_TOKENS};
    use crate::secrets::Secret;
    use http::Method;

    fn extract(seq: u64, op: Operation, body: &[u8]) -> Result<RequestFacts, FactsError> {
        extract_with(seq, op, &[], body)
    }

    fn extract_with(seq: u64, op: Operation, header: &[(&str, &str)], body: &[u8]) -> Result<RequestFacts, FactsError> {
        let markers = Markers::new(&Secret::new("s"));
        let mut headers = HeaderMap::new();
        for (name, value) in header {
            headers.insert(
                http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                http::HeaderValue::from_str(value).expect("value"),
            );
        }
        let body = Bytes::copy_from_slice(body);
        let incoming = Incoming {
            seq,
            operation: op,
            scope: "client",
            pool: "all",
            path: "/v1/x",
            headers: &headers,
            body: &body,
        };
        super::extract(&incoming, &markers).map(|e| e.facts)
    }

    fn message(result: Result<RequestFacts, FactsError>) -> String {
        result.expect_err("refused").to_string()
    }

    #[test]
    fn bad_bodies_get_messages_that_say_what_is_wrong() {
        let op = Operation::ResponsesCreate;
        assert!(message(extract(1, op, br#"{"model":"a","model":"b"}"#)).contains("`model` more than once"));
        assert!(message(extract(1, op, br#"{"model":5}"#)).contains("`model` must be a string"));
        assert!(message(extract(1, op, br#"{"model":["a"]}"#)).contains("not an array"));
        let m = message(extract(1, op, b"[1]"));
        assert!(m.contains("must be a JSON object"), "{m}");
        assert!(message(extract(1, op, b"  ")).contains("empty"));
        assert!(message(extract(1, op, br#"{"model":"a""#)).contains("EOF"));
    }

    #[test]
    fn only_long_prompts_are_cache_eligible() {
        let short = extract(1, Operation::ResponsesCreate, br#"{"model":"m","input":"hi"}"#).expect("valid");
        assert!(!short.cache_eligible());
        let long = format!(r#"{{"model":"m","input":"{}"}}"#, "x".repeat(4 * CACHE_MIN_TOKENS as usize));
        assert!(extract(2, Operation::ResponsesCreate, long.as_bytes()).expect("valid").cache_eligible());
    }

    #[test]
    fn classifies_every_route() {
        let cases = [
            (Method::POST, "/v1/responses", Operation::ResponsesCreate),
            (Method::POST, "/v1/responses/compact", Operation::ResponsesCompact),
            (Method::GET, "/v1/responses/resp_1", Operation::ResponsesGet),
            (Method::DELETE, "/v1/responses/resp_1", Operation::ResponsesDelete),
            (Method::POST, "/v1/responses/resp_1/cancel", Operation::ResponsesCancel),
            (Method::GET, "/v1/responses/resp_1/input_items", Operation::ResponsesInputItems),
            (Method::POST, "/v1/chat/completions", Operation::ChatCompletions),
            (Method::POST, "/v1/embeddings", Operation::Embeddings),
            (Method::GET, "/v1/models", Operation::Models),
            (Method::GET, "/v1/models/gpt-5.5", Operation::Models),
            (Method::POST, "/v1/audio/speech", Operation::Other),
            (Method::GET, "/v1/responses", Operation::Other),
        ];
        for (method, path, want) in cases {
            assert_eq!(Operation::classify(&method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn reads_model_and_stream_from_captured_codex_body() {
        let body = br#"{"model":"gpt-5.5","stream":true,"input":[],"client_metadata":{"x":1}}"#;
        let facts = extract(1, Operation::ResponsesCreate, body).expect("valid");
        assert_eq!(facts.model.as_deref(), Some("gpt-5.5"));
        assert!(facts.stream);
    }

    #[test]
    fn rejects_non_json_and_non_objects_on_json_endpoints() {
        assert!(extract(1, Operation::ResponsesCreate, b"{not json").is_err());
        assert!(extract(1, Operation::ResponsesCreate, b"[1,2]").is_err());
        assert!(extract(1, Operation::ChatCompletions, b"").is_err());
        assert!(extract(1, Operation::Other, b"\x00\x01").is_ok());
    }

    #[test]
    fn cache_keys_are_validated_and_never_kept_raw() {
        use serde_json::json;
        for bad in [json!(" lead"), json!("trail "), json!("a\u{1}b"), json!("x".repeat(257)), json!(42), json!("")] {
            assert_eq!(valid_cache_key(&bad), None, "{bad}");
        }
        assert_eq!(
            valid_cache_key(&json!("01a227d7-ed08-7e52-9dfa-0ea02ef63150")),
            Some("01a227d7-ed08-7e52-9dfa-0ea02ef63150")
        );
        let f = extract(1, Operation::ResponsesCreate, br#"{"prompt_cache_key":"sess-1"}"#).expect("valid");
        let g = extract(2, Operation::ResponsesCreate, br#"{"prompt_cache_key":"sess-1"}"#).expect("valid");
        assert!(f.session.is_some());
        assert_eq!(f.session, g.session);
        assert!(!format!("{f:?}").contains("sess-1"), "debug output shows no raw key");
        let bad =
            extract(3, Operation::ResponsesCreate, br#"{"prompt_cache_key":" sess-1"}"#).expect("still valid request");
        assert_eq!(bad.session, None);
    }

    #[test]
    fn signals_come_from_the_key_or_the_prompt_prefix_in_separate_namespaces() {
        let with_key = extract(1, Operation::ResponsesCreate, br#"{"model":"m","prompt_cache_key":"abc","input":[{"role":"developer","content":"sys"},{"role":"user","content":"hi"}]}"#).expect("valid");
        let signal = with_key.signal.expect("signal");
        assert_eq!(signal.source, AffinitySource::PromptCacheKey);
        // The same prompt without a key: a prefix signal, whatever follows the first user message.
        let a = extract(2, Operation::ResponsesCreate, br#"{"model":"m","input":[{"role":"developer","content":"sys"},{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"role":"assistant","content":"x"}]}"#).expect("valid");
        let b = extract(3, Operation::ResponsesCreate, br#"{"model":"m","input":[{"role":"developer","content":"sys"},{"role":"user","content":"hi"},{"role":"user","content":"more"}]}"#).expect("valid");
        assert_eq!(a.signal.expect("a").source, AffinitySource::PromptPrefix);
        assert_eq!(a.signal.map(|s| s.key), b.signal.map(|s| s.key));
        assert_ne!(a.signal.map(|s| s.key), Some(signal.key));
        // A prefix equal to a key's string never collides with it.
        let k = extract(4, Operation::ResponsesCreate, br#"{"model":"m","prompt_cache_key":"hi","input":"hi"}"#)
            .expect("valid");
        let p = extract(5, Operation::ResponsesCreate, br#"{"model":"m","input":"hi"}"#).expect("valid");
        assert_ne!(k.signal.map(|s| s.key), p.signal.map(|s| s.key));
        // Another model or operation is another signal; an invalid key falls back to the prefix.
        let other_model =
            extract(6, Operation::ResponsesCreate, br#"{"model":"n","prompt_cache_key":"abc"}"#).expect("valid");
        assert_ne!(other_model.signal.map(|s| s.key), Some(signal.key));
        let invalid =
            extract(7, Operation::ResponsesCreate, br#"{"model":"m","prompt_cache_key":" abc","input":"hi"}"#)
                .expect("valid");
        assert_eq!(invalid.signal.map(|s| s.source), Some(AffinitySource::PromptPrefix));
        let none = extract(8, Operation::ResponsesCreate, br#"{"model":"m","prompt_cache_key":7}"#).expect("valid");
        assert_eq!(none.signal, None);
        assert!(extract(9, Operation::Embeddings, br#"{"input":"x"}"#).expect("valid").signal.is_none());
    }

    #[test]
    fn string_instructions_are_part_of_the_prompt_prefix() {
        let key =
            |n: u64, body: &[u8]| extract(n, Operation::ResponsesCreate, body).expect("valid").signal.map(|s| s.key);
        let plain = key(1, br#"{"model":"m","input":"hi"}"#);
        let told = key(2, br#"{"model":"m","instructions":"Be brief.\nAlways.","input":"hi"}"#);
        let again = key(3, br#"{"input":"hi","instructions":"Be brief.\nAlways.","model":"m"}"#);
        let other = key(4, br#"{"model":"m","instructions":"Be long.","input":"hi"}"#);
        assert!(plain.is_some() && told.is_some());
        assert_eq!(told, again, "the same instructions, the same prefix");
        assert_ne!(told, plain, "instructions are part of the prefix");
        assert_ne!(told, other);
        for ignored in [
            &br#"{"model":"m","instructions":null,"input":"hi"}"#[..],
            br#"{"model":"m","instructions":["x"],"input":"hi"}"#,
        ] {
            assert_eq!(key(5, ignored), plain, "instructions that are not a string are not read");
        }
    }

    #[test]
    fn the_requested_service_tier_is_read_when_it_is_a_string() {
        let tier = |body: &[u8]| extract(1, Operation::ResponsesCreate, body).expect("valid").service_tier;
        assert_eq!(tier(br#"{"model":"m","service_tier":"priority"}"#).as_deref(), Some("priority"));
        assert_eq!(tier(br#"{"model":"m","service_tier":null}"#), None);
        assert_eq!(tier(br#"{"model":"m","service_tier":7}"#), None);
        assert_eq!(tier(br#"{"model":"m"}"#), None);
        let long = format!(r#"{{"service_tier":"{}"}}"#, "x".repeat(100));
        assert_eq!(tier(long.as_bytes()).map(|t| t.len()), Some(TIER_CAP));
    }

    #[test]
    fn stream_must_be_literally_true() {
        let facts = extract(1, Operation::ChatCompletions, br#"{"stream":"yes"}"#).expect("valid");
        assert!(!facts.stream);
    }

    #[test]
    fn long_model_names_are_capped_on_a_char_boundary() {
        let model = "é".repeat(100);
        let body = serde_json::to_vec(&serde_json::json!({ "model": model })).expect("json");
        let facts = extract(1, Operation::Embeddings, &body).expect("valid");
        assert!(facts.model.expect("model").len() <= MODEL_DISPLAY_CAP);
    }

    #[test]
    fn a_codex_thread_is_its_own_session_under_the_root_session() {
        let digest = |value: &str| Markers::new(&Secret::new("s")).digest().session("responses", value);
        let create = Operation::ResponsesCreate;
        // Subagents of one session may share its prompt_cache_key; each thread is still a session.
        let body = br#"{"model":"gpt-5.5","input":[],"prompt_cache_key":"root-a"}"#;
        let root = extract_with(1, create, &[("session-id", "root-a"), ("thread-id", "root-a")], body).expect("ok");
        assert_eq!(
            (root.session, root.parent),
            (Some(digest("root-a")), None),
            "a root thread: its cache key's digest"
        );
        let sub = extract_with(2, create, &[("session-id", "root-a"), ("thread-id", "sub-b")], body).expect("ok");
        assert_eq!((sub.session, sub.parent), (Some(digest("sub-b")), Some(digest("root-a"))));
        // Each request's client_metadata says its own thread, over the headers (a WebSocket's handshake).
        let frame = br#"{"model":"gpt-5.5","input":[],"prompt_cache_key":"root-a",
            "client_metadata":{"thread_id":"sub-c","session_id":"root-a","turn_id":"t1"}}"#;
        let per_turn =
            extract_with(3, create, &[("session-id", "root-a"), ("thread-id", "root-a")], frame).expect("ok");
        assert_eq!((per_turn.session, per_turn.parent), (Some(digest("sub-c")), Some(digest("root-a"))));
        // client_metadata of another shape, or ids that are no ids, are ignored and never refused.
        for odd in [
            br#"{"input":[],"prompt_cache_key":"root-a","client_metadata":"x"}"#.as_slice(),
            br#"{"input":[],"prompt_cache_key":"root-a","client_metadata":{"thread_id":7,"session_id":" "}}"#,
        ] {
            let facts = extract_with(4, create, &[], odd).expect("forwarded");
            assert_eq!((facts.session, facts.parent), (Some(digest("root-a")), None));
        }
    }

    #[test]
    fn a_websocket_turn_says_whether_it_is_responses_lite() {
        let lite = |body: &[u8]| extract(1, Operation::ResponsesCreate, body).expect("ok").lite_turn;
        let key = "ws_request_header_x_openai_internal_codex_responses_lite";
        assert_eq!(lite(format!(r#"{{"input":[],"client_metadata":{{"{key}":"true"}}}}"#).as_bytes()), Some(true));
        assert_eq!(lite(br#"{"input":[],"client_metadata":{"turn_id":"t"}}"#), Some(false));
        assert_eq!(lite(br#"{"input":[]}"#), None, "no client_metadata: the socket's handshake decides");
    }
}
