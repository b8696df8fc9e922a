//! Request bodies as OpenAI reads them: read under a cap, and a `content-encoding` of gzip or zstd
//! undone. Shared by the API's endpoints and the ChatGPT backend's.

use axum::http::HeaderMap;

/// Largest accepted request body.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// A request body, decoded (`decoded`) under the cap; `None` when it cannot be read.
pub(crate) async fn read_body(headers: &HeaderMap, body: axum::body::Body) -> Option<bytes::Bytes> {
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.ok()?;
    decoded(headers, bytes)
}

/// The body with its `content-encoding` undone, as OpenAI reads it: gzip and zstd, which OpenAI's
/// backend is known to take (Codex sends zstd, and proxies in front of it send gzip), under the same
/// cap as a plain body. `None` for any other coding, several, or bytes that are not what the header
/// says: what OpenAI answers then is not known, so the simulator answers as it does to a body it cannot
/// parse, and never reads the bytes as if they were plain.
fn decoded(headers: &HeaderMap, bytes: bytes::Bytes) -> Option<bytes::Bytes> {
    use std::io::Read as _;
    let mut codings = headers
        .get_all("content-encoding")
        .iter()
        .map(|v| v.to_str().unwrap_or("?"))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
    let Some(coding) = codings.next() else { return Some(bytes) };
    if codings.next().is_some() {
        return None;
    }
    let reader: Box<dyn std::io::Read + '_> = if coding.eq_ignore_ascii_case("gzip") {
        Box::new(flate2::bufread::MultiGzDecoder::new(&bytes[..]))
    } else if coding.eq_ignore_ascii_case("zstd") {
        Box::new(zstd::stream::read::Decoder::with_buffer(&bytes[..]).ok()?)
    } else {
        return None;
    };
    let mut out = Vec::new();
    reader.take(MAX_BODY as u64 + 1).read_to_end(&mut out).ok()?;
    (out.len() <= MAX_BODY).then(|| out.into())
}
