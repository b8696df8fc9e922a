//! How one attempt goes to the provider over HTTP and how its answer is read: an error answer whole
//! (bounded, any key it quotes masked), a JSON answer that needs markers whole, anything else up to its
//! first chunk, so that an answer cut before its first byte can still fail over to another key.

use std::time::Duration;

use axum::http::{HeaderMap, Method, StatusCode};
use bytes::{Bytes, BytesMut};
use futures::StreamExt as _;

use super::stream::Gathered;
use super::{content_type, Accepted, AcceptedBody, ErrorAnswer, MAX_ERROR_BODY};
use crate::classify::Heard;
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::pipeline::{Reply, Transport};
use crate::pool::InFlight;
use crate::relay::MAX_EVENT_BYTES;
use crate::upstream::{self, Answer, Chunks, Upstream, UpstreamError};

/// How one request reaches the upstream.
pub(super) struct Http<'a> {
    pub(super) gateway: &'a Gateway,
    pub(super) upstream: &'a Upstream,
    pub(super) method: Method,
    pub(super) path_and_query: String,
    pub(super) headers: HeaderMap,
    /// The body to send (cheap to clone for each attempt).
    pub(super) body: Bytes,
    /// The answer will get markers, so a JSON answer is read whole before it is accepted.
    pub(super) tagged: bool,
    pub(super) clock: &'a crate::clock::Clock,
}

impl Transport for Http<'_> {
    type Accepted = Accepted;
    type Declined = ErrorAnswer;

    fn rescue(&mut self, body: Bytes) {
        self.body = body;
    }

    async fn attempt(&mut self, guard: &InFlight) -> Reply<Accepted, ErrorAnswer> {
        // A key's credential refreshed first when its provider says it is due (a plan's token about to
        // expire).
        let fresh = crate::refresh::fresh(self.gateway, guard.entry()).await;
        let entry = fresh.as_ref().unwrap_or(guard.entry());
        let sent = self
            .upstream
            .send(entry, self.method.clone(), &self.path_and_query, self.headers.clone(), self.body.clone())
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => return Reply::Failed(error),
        };
        let status = response.status();
        let heard = Heard::from_headers(status.as_u16(), response.headers(), self.clock, entry.provider);
        let mut headers = upstream::forward_response_headers(response.headers_mut());
        let base = guard.entry().label.as_str();
        if !status.is_success() {
            let body = read_error(response, self.upstream.idle_timeout()).await;
            // A provider may quote the key it was sent: the client never holds one, so it never sees one.
            let body = crate::secrets::mask_error_body(&body, guard.entry().secret.expose());
            upstream::mask_error_headers(&mut headers, guard.entry().secret.expose());
            let heard = heard.with_body(&body);
            return Reply::Declined(heard, ErrorAnswer { status, headers, body });
        }
        let is_json = content_type(&headers).contains("json");
        let body = if self.tagged && is_json {
            read_whole(response, self.upstream.idle_timeout(), base).await.map(AcceptedBody::Whole)
        } else {
            first_chunk(response, self.upstream.idle_timeout(), base).await.map(AcceptedBody::Stream)
        };
        match body {
            Ok(body) => Reply::Accepted(heard, Accepted { status, headers, body }),
            Err(error) => Reply::Failed(error),
        }
    }
}

/// Reads a small error body. One over `MAX_ERROR_BODY` is replaced by a well-formed error that says
/// so, so the client never gets JSON cut in half.
async fn read_error(response: Answer, idle: Duration) -> Bytes {
    let status = response.status().as_u16();
    let mut bytes = BytesMut::new();
    let mut chunks = response.chunks();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(idle, chunks.next()).await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_ERROR_BODY {
            let error = ApiError::UpstreamAnswerTooLarge { status, limit: MAX_ERROR_BODY };
            return Bytes::from(error.to_json().to_string());
        }
    }
    bytes.freeze()
}

/// Reads a JSON answer whole, so it can be tagged and, if it is cut, another key tried.
async fn read_whole(response: Answer, idle: Duration, key: &str) -> Result<Bytes, UpstreamError> {
    let cut = |detail: String| UpstreamError::Cut { base: format!("key '{key}'"), detail };
    // An answer that arrives in one piece (most do) is kept as it came, not copied.
    let mut bytes = Gathered::default();
    let mut chunks = response.chunks();
    loop {
        match tokio::time::timeout(idle, chunks.next()).await {
            Err(_) => return Err(cut("the answer went idle before its end".into())),
            Ok(Some(Err(e))) => return Err(cut(format!("the answer broke off: {e}"))),
            Ok(Some(Ok(chunk))) => bytes.push(chunk),
            Ok(None) => return Ok(bytes.into_bytes()),
        }
        if bytes.len() > MAX_EVENT_BYTES {
            return Err(cut(format!("the answer is larger than {MAX_EVENT_BYTES} bytes")));
        }
    }
}

/// Reads a streamed answer's first chunk, so a stream cut before its first byte can still fail over.
/// An answer that is empty by design (204, `content-length: 0`) has none to wait for.
async fn first_chunk(response: Answer, idle: Duration, key: &str) -> Result<Chunks, UpstreamError> {
    let empty = response.status() == StatusCode::NO_CONTENT
        || response.status() == StatusCode::RESET_CONTENT
        || response.content_length() == Some(0);
    let mut chunks = response.chunks();
    if empty {
        return Ok(chunks);
    }
    match tokio::time::timeout(idle, chunks.next()).await {
        Ok(Some(Ok(first))) => Ok(crate::upstream::put_back(first, chunks)),
        Ok(None) | Ok(Some(Err(_))) | Err(_) => Err(UpstreamError::Cut {
            base: format!("key '{key}'"),
            detail: "the answer ended before its first byte".into(),
        }),
    }
}
