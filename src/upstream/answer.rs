//! A provider's answer as the client gives it: status, headers, and a body read as it arrives (decoded
//! from gzip or zstd).

use std::pin::Pin;

use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use http_body_util::{BodyDataStream, BodyExt as _};

/// Why a body could not be read to its end.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A body's pieces as they arrive.
pub type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, BodyError>> + Send>>;

/// One answer.
pub struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: tower_http::decompression::DecompressionBody<hyper::body::Incoming>,
}

impl From<super::client::Answered> for Answer {
    fn from(answer: super::client::Answered) -> Self {
        let (head, body) = answer.into_parts();
        Self { status: head.status, headers: head.headers, body }
    }
}

impl Answer {
    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.headers
    }

    /// The body's length when it is known before reading it (a decoded body's never is).
    pub fn content_length(&self) -> Option<u64> {
        use hyper::body::Body as _;
        self.body.size_hint().exact()
    }

    /// The body's pieces, as they arrive.
    pub fn chunks(self) -> Chunks {
        Box::pin(BodyDataStream::new(self.body))
    }

    /// The whole body (for answers that are small by design: probes, errors read elsewhere whole).
    pub async fn bytes(self) -> Result<Bytes, BodyError> {
        Ok(self.body.collect().await?.to_bytes())
    }

    /// The whole body, or `None` when it is longer than `limit` bytes or cannot be read.
    pub async fn bytes_within(self, limit: usize) -> Option<Bytes> {
        Some(http_body_util::Limited::new(self.body, limit).collect().await.ok()?.to_bytes())
    }
}

/// A stream with its first piece put back in front.
pub fn put_back(first: Bytes, rest: Chunks) -> Chunks {
    Box::pin(futures::stream::once(async move { Ok(first) }).chain(rest))
}
