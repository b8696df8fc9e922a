//! What each fuzz target does with its input. Shared by the `cargo fuzz` targets (nightly, libFuzzer)
//! and by `tests/fuzz_corpora.rs`, which runs every seed on stable, so the targets never rot.
//!
//! Besides "no panic", each states a property: a marker tagged by Keymux strips back to the very
//! value, and a body that passes strip has no valid marker of this install left in it.

use bytes::Bytes;
use http::{HeaderMap, Method};
use keymux_core::facts::{Incoming, Operation};
use keymux_core::keys::KeyId;
use keymux_core::markers::Markers;
use keymux_core::relay::{SseRewriter, Tagger};
use keymux_core::secrets::Secret;

fn tagger() -> (Markers, Tagger) {
    let markers = Markers::new(&Secret::new("fuzz-install-secret"));
    let key = KeyId::new("k_fuzz");
    let org = markers.org_tag(Some("org-fuzz"), &key);
    (markers.clone(), Tagger::new(markers, key, org))
}

/// Marker parsing: strip any body; what passes holds no valid marker of this install any more. (It
/// may hold what only looks like one: strip gives back each original value whole, and an original
/// may itself begin with `km1`. A second strip then refuses it, which is what a client replaying it
/// would get.)
pub fn markers(data: &[u8]) {
    let (markers, _) = tagger();
    if let Ok(stripped) = markers.strip(data) {
        if let Ok(again) = markers.strip(&stripped.body) {
            assert_eq!(again.removed, 0, "no valid marker of this install is left after strip");
        }
    }
}

/// Request facts: any body on any operation is read or refused, never a panic.
pub fn facts(data: &[u8]) {
    let (markers, _) = tagger();
    let Some((&pick, body)) = data.split_first() else { return };
    let (method, path) = match pick % 8 {
        0 => (Method::POST, "/v1/responses".to_owned()),
        1 => (Method::POST, "/v1/chat/completions".to_owned()),
        2 => (Method::POST, "/v1/responses/compact".to_owned()),
        3 => (Method::POST, "/v1/embeddings".to_owned()),
        4 => (Method::GET, format!("/v1/responses/{}", String::from_utf8_lossy(body))),
        5 => (Method::POST, format!("/v1/responses/{}/cancel", String::from_utf8_lossy(body))),
        6 => (Method::GET, "/v1/models".to_owned()),
        _ => (Method::POST, "/v1/other".to_owned()),
    };
    let body = Bytes::copy_from_slice(body);
    let headers = HeaderMap::new();
    let incoming = Incoming {
        seq: 1,
        operation: Operation::classify(&method, &path),
        scope: "fuzz",
        pool: "all",
        path: &path,
        headers: &headers,
        body: &body,
    };
    let _ = keymux_core::facts::extract(&incoming, &markers);
}

/// SSE rewriting: any stream, cut into chunks anywhere, is rewritten without a panic; an event that
/// needed no marker passes unchanged, so a stream with no org-bound value comes out byte for byte.
pub fn sse(data: &[u8]) {
    let (_, tagger) = tagger();
    let Some((&cut, stream)) = data.split_first() else { return };
    let step = usize::from(cut).max(1);
    let mut rewriter = SseRewriter::new(tagger);
    let mut out = Vec::new();
    for chunk in stream.chunks(step) {
        match rewriter.push(chunk) {
            Ok(bytes) => out.extend_from_slice(&bytes),
            Err(_) => return,
        }
    }
    let untouched = !Markers::may_need_tagging(stream);
    if untouched {
        assert!(stream.starts_with(&out), "events that need no marker pass as they came");
    }
}

/// WebSocket frames (and JSON bodies): tagging any text then stripping it gives the text back. Text
/// that is not JSON may be tagged too (the byte splicer does not validate what the provider sends),
/// but then only strip's success is checked: there is no value to compare.
pub fn frames(data: &[u8]) {
    let (markers, tagger) = tagger();
    let Some(tagged) = tagger.tag_json(data) else { return };
    let stripped = markers.strip(&tagged).expect("Keymux's own markers strip");
    let Ok(before) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let after: serde_json::Value = serde_json::from_slice(&stripped.body).expect("stripped JSON is JSON");
    assert_eq!(before, after, "tag then strip is the identity");
}

/// The config file: any text is parsed or refused with an error, never a panic.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = keymux_core::config::Config::parse(text, std::path::Path::new("fuzz.toml"));
    }
}
