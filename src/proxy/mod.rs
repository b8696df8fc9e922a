//! The HTTP transport: one `/v1/*` request through the pipeline, and its answer relayed back.
//!
//! Only what is particular to HTTP lives here: reading the body under the cap (and decoding it when it
//! came compressed, `encoding`), how an attempt is sent and read (`send`: a success is held until its
//! first chunk, or whole for a JSON answer that needs markers, so a cut answer can still fail over), and
//! how the answer goes back (`stream`: streamed event by event, with markers spliced in, the record
//! finished when the stream ends).

mod send;
mod stream;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, request, HeaderMap, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;

use crate::error::ApiError;
use crate::events::Wire;
use crate::facts::{Incoming, Operation};
use crate::gateway::Gateway;
use crate::limits::RequestLimits;
use crate::pipeline::record::End;
use crate::pipeline::{self, Admitted, Entry, Fallback, Settled, Trace};
use crate::tokens::ClientScope;
use crate::upstream::{self, Chunks};
use send::Http;
use stream::relay;

/// Largest upstream error body Keymux relays (error bodies are small JSON); a larger one is replaced
/// by a well-formed error that says so.
pub const MAX_ERROR_BODY: usize = 256 * 1024;

/// An accepted answer: held whole (a JSON answer to tag), or with its first chunk read (a stream).
pub struct Accepted {
    status: StatusCode,
    headers: HeaderMap,
    body: AcceptedBody,
}

enum AcceptedBody {
    Whole(Bytes),
    Stream(Chunks),
}

/// An error answer, read whole (bounded), to relay if nothing better comes.
pub struct ErrorAnswer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl ErrorAnswer {
    fn into_response(self) -> Response<Body> {
        let mut out = Response::new(Body::from(self.body));
        *out.status_mut() = self.status;
        *out.headers_mut() = self.headers;
        out
    }
}

/// Proxies one authenticated `/v1/*` request.
pub async fn forward(gateway: &Arc<Gateway>, parts: request::Parts, body: Body) -> Response<Body> {
    let operation = Operation::classify(&parts.method, parts.uri.path());
    let mut trace = Trace::new(gateway, gateway.next_seq(), operation, Wire::Http);
    match admit(gateway, &parts, body, operation, &mut trace).await {
        Ok(admitted) => attempt(gateway, &parts, admitted, trace).await,
        Err(error) => refuse(trace, error),
    }
}

/// Answers a request while routing is paused (503 with `retry-after`), and records it.
pub fn refuse_paused(gateway: &Arc<Gateway>, parts: &request::Parts) -> Response<Body> {
    let operation = Operation::classify(&parts.method, parts.uri.path());
    let trace = Trace::new(gateway, gateway.next_seq(), operation, Wire::Http);
    refuse(trace, ApiError::Paused)
}

/// Reads the body under the cap, decodes it if it came compressed, and admits the request.
async fn admit(
    gateway: &Gateway,
    parts: &request::Parts,
    body: Body,
    operation: Operation,
    trace: &mut Trace,
) -> Result<Admitted, ApiError> {
    if has_dot_segments(parts.uri.path()) {
        return Err(ApiError::BadPath);
    }
    let deadline = parts.extensions.get::<RequestLimits>().copied().unwrap_or_default().body_read_timeout;
    let raw = crate::limits::read_body(&parts.headers, body, gateway.max_body_bytes(), deadline).await?;
    // Everything below reads the body, and what goes upstream is what was read: decoded.
    let raw = crate::encoding::decoded(&parts.headers, raw, gateway.max_body_bytes()).await?;
    let scope = parts.extensions.get::<ClientScope>().cloned().unwrap_or_default();
    trace.client(&scope);
    let incoming = Incoming {
        seq: trace.seq(),
        operation,
        scope: &scope.tag,
        pool: &scope.pool,
        path: parts.uri.path(),
        headers: &parts.headers,
        body: &raw,
    };
    pipeline::admit(gateway, &incoming, Entry::Request, trace)
}

/// Walks the candidates and relays what came of it.
async fn attempt(
    gateway: &Arc<Gateway>,
    parts: &request::Parts,
    admitted: Admitted,
    mut trace: Trace,
) -> Response<Body> {
    let operation = admitted.facts.operation;
    let mut path_and_query = admitted.path.strip_prefix("/v1").unwrap_or("/").to_owned();
    if let Some(query) = parts.uri.query() {
        path_and_query.push('?');
        path_and_query.push_str(query);
    }
    let mut http = Http {
        gateway,
        upstream: gateway.upstream(),
        method: parts.method.clone(),
        path_and_query,
        headers: upstream::forward_request_headers(&parts.headers),
        body: admitted.body.clone(),
        tagged: operation.carries_org_state(),
        clock: gateway.clock(),
    };
    match pipeline::attempt_all(gateway, &admitted, &mut http, &mut trace).await {
        Settled::Served { key, guard, accepted } => {
            let completion = pipeline::completion(&admitted, &key);
            let tagger = pipeline::tagger_for(gateway, operation, &guard);
            relay(gateway, accepted, guard, tagger, completion, trace)
        }
        Settled::Relayed { key, declined } => {
            let status = declined.status.as_u16();
            trace.finish(End { served_by: Some(key), status, error: None, usage: None });
            declined.into_response()
        }
        Settled::Failed(Fallback::Upstream(declined)) => {
            trace.finish(End { status: declined.status.as_u16(), ..End::default() });
            declined.into_response()
        }
        Settled::Failed(Fallback::Keymux(error)) => refuse(trace, error),
    }
}

/// Answers with Keymux's own error, and records it.
fn refuse(trace: Trace, error: ApiError) -> Response<Body> {
    trace.finish(End { status: error.status().as_u16(), error: Some(error.label()), ..End::default() });
    error.into_response()
}

/// Whether a path has `.` or `..` segments, plain or percent-encoded. URL parsing would resolve them,
/// and a key's credentials could then reach a path outside its base URL.
pub fn has_dot_segments(path: &str) -> bool {
    path.split('/').any(|segment| is_dot_segment(segment.as_bytes()))
}

/// Whether a segment is `.` or `..`, each dot plain or as `%2e`/`%2E` (read in place: every request's
/// path goes through this).
fn is_dot_segment(mut segment: &[u8]) -> bool {
    let mut dots = 0;
    while !segment.is_empty() {
        segment = match segment {
            [b'.', rest @ ..] | [b'%', b'2', b'e' | b'E', rest @ ..] => rest,
            _ => return false,
        };
        dots += 1;
    }
    matches!(dots, 1 | 2)
}

fn content_type(headers: &HeaderMap) -> String {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_found_however_spelled() {
        for bad in [
            "/v1/x/../other",
            "/v1/x/%2e%2e/%2e%2e/other/collect",
            "/v1/./models",
            "/v1/%2E%2e/x",
            "/v1/..",
            "/%2e/x",
            "/v1/.%2E",
        ] {
            assert!(has_dot_segments(bad), "{bad}");
        }
        for ok in [
            "/v1/responses",
            "/v1/files/file-1.jsonl",
            "/v1/x..y/z",
            "/v1/.well",
            "/v1/...",
            "/v1/%2e%2",
            "/v1//x",
            "/v1/%2f",
        ] {
            assert!(!has_dot_segments(ok), "{ok}");
        }
    }
}
