//! Request bodies sent compressed. Codex with a ChatGPT login and pi's Codex fallback send theirs with
//! `content-encoding: zstd`, and gzip and br are legal too. Keymux reads a body's markers, facts and
//! affinity, so it decodes the body before anything reads it, and what it forwards is the body it read:
//! decoded, with no `content-encoding` (`upstream` never forwards the header) and its length set anew
//! (the provider reads uncompressed bodies). The cap on bodies holds for the decoded size too, and
//! decoding stops there: a few kilobytes that decode to gigabytes cost no more than a body at the cap.
//!
//! One coding is read (`zstd`, `gzip` or its alias `x-gzip`, `br`), or none (`identity`). Anything
//! else is refused with a 415, a body that is not what its header says with a 400, one that decodes
//! past the cap with a 413; each says what to do.

use std::io::{BufRead, Read};

use axum::http::{header, HeaderMap};
use bytes::Bytes;

/// A content coding Keymux decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// Zstandard (RFC 8878): what Codex and pi send.
    Zstd,
    /// gzip (RFC 1952); `x-gzip` is the same.
    Gzip,
    /// Brotli (RFC 7932).
    Brotli,
}

impl Coding {
    /// Its name in `content-encoding`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Zstd => "zstd",
            Self::Gzip => "gzip",
            Self::Brotli => "br",
        }
    }

    fn named(name: &str) -> Option<Self> {
        [("zstd", Self::Zstd), ("gzip", Self::Gzip), ("x-gzip", Self::Gzip), ("br", Self::Brotli)]
            .into_iter()
            .find_map(|(known, coding)| name.eq_ignore_ascii_case(known).then_some(coding))
    }
}

/// Why a body's `content-encoding` could not be undone (`error` says what the client is told). This
/// layer's own error: `error::ApiError` folds it in, so this module needs nothing from that one.
#[derive(Debug, thiserror::Error)]
pub enum EncodingError {
    /// It decodes to more than the cap: decoding stopped there.
    #[error("request body decodes to over {limit} bytes")]
    TooLarge { coding: &'static str, limit: usize },
    /// A coding Keymux does not read, or several.
    #[error("content-encoding {coding} not read")]
    Unsupported { coding: String },
    /// The bytes are not what the header says.
    #[error("request body is not valid {coding}: {detail}")]
    Malformed { coding: &'static str, detail: String },
    /// Keymux itself failed while decoding (the task that decodes panicked); the client is told it as
    /// any internal failure.
    #[error("internal error")]
    Failed { detail: String },
}

/// The longest coding name an error quotes back.
const QUOTED_NAME: usize = 40;

/// The coding a request's `content-encoding` names: `None` for none or `identity` alone. Several
/// codings, or one Keymux does not read, are refused.
pub fn coding(headers: &HeaderMap) -> Result<Option<Coding>, EncodingError> {
    let mut found = None;
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let text = value.to_str().map_err(|_| unsupported("(not text)"))?;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty() && !n.eq_ignore_ascii_case("identity")) {
            let coding = Coding::named(name).ok_or_else(|| unsupported(name))?;
            if found.replace(coding).is_some() {
                return Err(unsupported(text));
            }
        }
    }
    Ok(found)
}

fn unsupported(name: &str) -> EncodingError {
    // Header text is visible ASCII: any byte is a char boundary.
    let coding = name.get(..QUOTED_NAME).map_or_else(|| name.to_owned(), |cut| format!("{cut}…"));
    EncodingError::Unsupported { coding }
}

/// The body a request sent, decoded when its `content-encoding` says it is compressed, and at most
/// `limit` bytes once decoded. Without `content-encoding` (the common case) it costs one header look-up
/// and hands back the same bytes.
pub async fn decoded(headers: &HeaderMap, raw: Bytes, limit: usize) -> Result<Bytes, EncodingError> {
    if !headers.contains_key(header::CONTENT_ENCODING) {
        return Ok(raw);
    }
    let Some(coding) = coding(headers)? else { return Ok(raw) };
    if raw.is_empty() {
        // Nothing was sent, so there is nothing to decode (a GET with a stray header).
        return Ok(raw);
    }
    // Up to the cap is milliseconds of work: not on the threads that serve connections.
    let decoding = tokio::task::spawn_blocking(move || decode(coding, &raw[..], limit));
    match decoding.await {
        Ok(decoded) => decoded,
        Err(e) => Err(EncodingError::Failed { detail: format!("decoding a request body failed: {e}") }),
    }
}

/// Brotli's input buffer.
const BROTLI_BUFFER: usize = 8 * 1024;

/// Decodes what `input` holds, compressed with `coding`, into at most `limit` bytes: it reads no further
/// than those need (and one more, which tells a body at the cap from one over it).
fn decode<R: BufRead>(coding: Coding, input: R, limit: usize) -> Result<Bytes, EncodingError> {
    let bad = |e: std::io::Error| EncodingError::Malformed { coding: coding.name(), detail: e.to_string() };
    let reader: Box<dyn Read + '_> = match coding {
        // Every frame, as HTTP allows a body of several.
        Coding::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input).map_err(bad)?),
        Coding::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
        Coding::Brotli => Box::new(brotli_decompressor::Decompressor::new(input, BROTLI_BUFFER)),
    };
    let mut out = Vec::new();
    let read = reader.take(limit as u64 + 1).read_to_end(&mut out).map_err(bad)?;
    if read > limit {
        return Err(EncodingError::TooLarge { coding: coding.name(), limit });
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests;
