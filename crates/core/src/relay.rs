//! Rewriting what flows back to clients: SSE events, JSON bodies and WebSocket text frames get the
//! serving key's markers on every org-bound value, and an error event has any key it quotes masked.
//! Events that cannot carry either pass through untouched and unparsed; nothing is ever buffered beyond
//! one event (or one JSON body).

use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use memchr::memmem::Finder;
use serde_json::Value;

use crate::drops::ReasoningDropped;
use crate::keys::KeyId;
use crate::markers::{Markers, OrgTag, RawTag};
use crate::spend::Usage;

mod end;

pub use end::AnswerEnd;

/// Largest single SSE event (or JSON body) Keymux will rewrite. A `response.completed` carries the whole
/// output, so this is generous; past it the stream is failed rather than relayed untagged.
pub const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// Who the relayed values belong to.
#[derive(Clone, Debug)]
pub struct Tagger {
    markers: Markers,
    key: KeyId,
    org: OrgTag,
}

/// A rewrite that cannot be done safely.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// One event grew past `MAX_EVENT_BYTES`.
    #[error("an upstream event is larger than {MAX_EVENT_BYTES} bytes")]
    EventTooLarge,
}

impl Tagger {
    /// Tags values for `key` of organization `org`.
    pub fn new(markers: Markers, key: KeyId, org: OrgTag) -> Self {
        Self { markers, key, org }
    }

    /// Tags a JSON text; `None` when nothing in it needed a marker (the caller keeps the original bytes).
    pub fn tag_json(&self, text: &[u8]) -> Option<Vec<u8>> {
        if !Markers::may_need_tagging(text) {
            return None;
        }
        match self.markers.tag_raw(text, &self.key, self.org) {
            RawTag::Tagged(out) => return Some(out),
            RawTag::Unchanged => return None,
            RawTag::NeedsTree => {}
        }
        let mut value: Value = serde_json::from_slice(text).ok()?;
        if self.markers.tag_tree(&mut value, &self.key, self.org) == 0 {
            return None;
        }
        serde_json::to_vec(&value).ok()
    }
}

/// How much of a passed-through JSON answer is kept to find its `usage`: it comes last in the answers
/// that are not read whole (embeddings, moderations), after what may be megabytes of vectors.
pub const JSON_TAIL_BYTES: usize = 2048;

/// The last bytes of a JSON answer relayed as it arrives, kept to read its `usage` at the end.
#[derive(Default)]
pub struct JsonTail {
    tail: Vec<u8>,
}

impl JsonTail {
    /// Keeps the end of `chunk` (and of what came before) up to [`JSON_TAIL_BYTES`].
    pub fn push(&mut self, chunk: &[u8]) {
        if chunk.len() >= JSON_TAIL_BYTES {
            self.tail.clear();
            self.tail.extend_from_slice(&chunk[chunk.len() - JSON_TAIL_BYTES..]);
            return;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(JSON_TAIL_BYTES);
        self.tail.drain(..overflow);
        self.tail.extend_from_slice(chunk);
    }

    /// The usage object the answer ended with, if its last `"usage"` field is within the tail.
    pub fn usage(&self) -> Option<Usage> {
        let at = memchr::memmem::rfind(&self.tail, b"\"usage\"")?;
        let rest = &self.tail[at + b"\"usage\"".len()..];
        let open = rest.iter().position(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b':'))?;
        let mut values = serde_json::Deserializer::from_slice(&rest[open..]).into_iter::<Value>();
        Usage::from_json(&values.next()?.ok()?)
    }
}

/// How a relayed stream ended, as far as its events tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamEnd {
    /// A successful terminal event arrived (`response.completed`, or `[DONE]` on Chat Completions).
    pub completed: bool,
    /// The response ended incomplete (`response.incomplete`): billed, but no completion.
    pub incomplete: bool,
    /// The usage it reported (a `response.incomplete` reports one too: its tokens are billed).
    pub usage: Option<Usage>,
    /// The reasoning its terminal event (`response.completed` or `response.incomplete`) says the
    /// provider dropped from the input.
    pub dropped: Option<ReasoningDropped>,
}

/// Splits an SSE byte stream into events and tags the `data:` of those that need it.
pub struct SseRewriter {
    tagger: Tagger,
    buf: BytesMut,
    scanned: usize,
    end: StreamEnd,
}

impl SseRewriter {
    /// A rewriter for one response stream.
    pub fn new(tagger: Tagger) -> Self {
        Self { tagger, buf: BytesMut::new(), scanned: 0, end: StreamEnd::default() }
    }

    /// What the stream's events said about its end so far.
    pub fn end(&self) -> StreamEnd {
        self.end
    }

    fn observe(&mut self, frame: &[u8]) {
        if DONE.find(frame).is_some() {
            self.end.completed = true;
            return;
        }
        let completed = COMPLETED.find(frame).is_some();
        if !completed && USAGE.find(frame).is_none() {
            return;
        }
        let Some(data) = event_data(frame) else { return };
        let Some(event) = EndEvent::read(&data) else { return };
        if completed && event.kind() == Some("response.completed") {
            let end = event.response_end();
            self.end.completed = true;
            self.end.usage = end.usage.or(self.end.usage);
            self.end.dropped = end.dropped;
        } else if event.kind() == Some("response.incomplete") {
            // Found by its usage (an incomplete response reports one): the tokens it used are billed
            // like a completed one's, and what it dropped counts too. It is not a completion: nothing
            // is learned from it.
            let end = event.response_end();
            self.end.incomplete = true;
            self.end.usage = end.usage.or(self.end.usage);
            self.end.dropped = end.dropped;
        } else if let Some(usage) = event.usage() {
            // Chat Completions: the usage chunk comes before `[DONE]`.
            self.end.usage = Some(usage);
        }
    }

    /// Feeds a chunk; returns the complete events it finished, rewritten where needed. Events that need
    /// no marker are passed on as the very bytes that arrived (a chunk holding one event is not copied).
    pub fn push(&mut self, chunk: &[u8]) -> Result<Bytes, RelayError> {
        self.buf.extend_from_slice(chunk);
        let mut pieces: Vec<Bytes> = Vec::new();
        loop {
            let Some((end, sep)) = frame_end(&self.buf, self.scanned) else {
                // Resume the search a few bytes back, in case a separator straddles two chunks.
                self.scanned = self.buf.len().saturating_sub(3);
                if self.buf.len() > MAX_EVENT_BYTES {
                    return Err(RelayError::EventTooLarge);
                }
                break;
            };
            let frame = self.buf.split_to(end + sep).freeze();
            self.scanned = 0;
            self.observe(&frame);
            let frame = mask_failed_frame(frame, sep);
            pieces.push(self.rewrite(frame, sep));
        }
        Ok(match pieces.len() {
            0 => Bytes::new(),
            1 => pieces.pop().unwrap_or_default(),
            _ => Bytes::from(pieces.concat()),
        })
    }

    /// Flushes what is left when the stream ends (an unterminated last event passes as it is).
    pub fn finish(&mut self) -> Bytes {
        self.scanned = 0;
        std::mem::take(&mut self.buf).freeze()
    }

    fn rewrite(&self, frame: Bytes, sep: usize) -> Bytes {
        if !Markers::may_need_tagging(&frame) {
            return frame;
        }
        let body = &frame[..frame.len() - sep];
        let Some(tagged) = event_data(body).and_then(|data| self.tagger.tag_json(&data)) else {
            return frame;
        };
        with_data(body, &tagged)
    }
}

/// An SSE event made of `body`'s lines other than `data:` and one `data:` line holding `data`.
fn with_data(body: &[u8], data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + data.len() + 8);
    for line in lines(body).filter(|l| !l.starts_with(b"data:")) {
        out.extend_from_slice(line);
        out.extend_from_slice(b"\n");
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

/// An error event's JSON (`EndEvent::is_error`: `error`, `response.failed`, or a top-level `error`
/// whatever its type) with every key-like word it quotes masked (`secrets::mask_error_body`); `None`
/// for any other event, and for an error that quotes none. A provider may quote the key it was sent
/// in the middle of a stream or on a WebSocket just as in a plain error answer.
pub fn mask_failed_event(json: &[u8]) -> Option<Bytes> {
    if ERROR.find(json).is_none() && FAILED.find(json).is_none() {
        return None;
    }
    if !EndEvent::read(json)?.is_error() {
        return None;
    }
    mask_error_data(json)
}

/// `json` masked as an error body; `None` when that changes nothing.
fn mask_error_data(json: &[u8]) -> Option<Bytes> {
    let masked = crate::secrets::mask_error_body(json, "");
    (masked.as_ref() != json).then_some(masked)
}

/// One SSE event with its data masked when it is an error that quotes a key: an error by its JSON
/// (`mask_failed_event`), or any event named `error`, whatever its data says.
fn mask_failed_frame(frame: Bytes, sep: usize) -> Bytes {
    // One search for `error` finds both a member named `"error"` and a line ending in `error` (an
    // `event: error` line, then read properly); with one for `response.failed`, the common case costs
    // two byte searches, nothing parsed.
    let (mut quoted, mut line_end) = (false, false);
    for at in ERROR_WORD.find_iter(&frame) {
        let (before, after) = (at.checked_sub(1).map(|i| frame[i]), frame.get(at + 5).copied());
        quoted |= before == Some(b'"') && after == Some(b'"');
        line_end |= matches!(after, Some(b'\n' | b'\r'));
    }
    let named_error = line_end && event_name(&frame) == Some(b"error".as_slice());
    if !named_error && !quoted && FAILED.find(&frame).is_none() {
        return frame;
    }
    let masked = event_data(&frame).and_then(|data| match named_error {
        true => mask_error_data(&data),
        false => mask_failed_event(&data),
    });
    let Some(masked) = masked else { return frame };
    with_data(&frame[..frame.len() - sep], &masked)
}

/// The name an SSE event gives itself (its `event:` line), trimmed.
fn event_name(frame: &[u8]) -> Option<&[u8]> {
    lines(frame).take_while(|l| !l.is_empty()).find_map(|l| l.strip_prefix(b"event:")).map(<[u8]>::trim_ascii)
}

static DONE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"[DONE]"));
static ERROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"error\""));
static ERROR_WORD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"error"));
static FAILED: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"response.failed"));
static COMPLETED: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"response.completed"));
static USAGE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\":{"));

/// The few fields of an event that say how a stream (or a WebSocket turn) ended. They are found by
/// walking the event's top level (`scan::top_level_values`), not by parsing it: every `response.*`
/// event quotes `"error": null` and the whole response, and streams are read event by event. The
/// response and usage are kept as raw text and read only when asked for. An event that spells keys
/// with escapes, which no provider writes, is parsed instead.
pub struct EndEvent<'a> {
    kind: Option<String>,
    response: Option<&'a [u8]>,
    usage: Option<&'a [u8]>,
    service_tier: Option<String>,
    /// A top-level `error` that is not null: the error chunk of a Chat Completions stream, or an
    /// error event in a shape without a `type`.
    error: bool,
    /// Whether the event was walked: it spells no key with escapes, so neither does its response.
    walked: bool,
}

/// `EndEvent` by a parser (an event that spells keys with escapes).
#[derive(serde::Deserialize)]
struct ParsedEnd<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(borrow, default)]
    response: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    service_tier: Option<String>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

impl<'a> EndEvent<'a> {
    /// Reads an event's JSON; `None` if it is not a JSON object, or names its `type` or
    /// `service_tier` with something other than a string.
    pub fn read(json: &'a [u8]) -> Option<Self> {
        if crate::scan::has_ascii_escape(json) {
            return Self::read_parsed(json);
        }
        let [kind, response, usage, tier, error] =
            crate::scan::top_level_values(json, [b"type", b"response", b"usage", b"service_tier", b"error"])?;
        let not_null = |raw: Option<&'a [u8]>| raw.filter(|r| *r != b"null");
        Some(Self {
            kind: crate::scan::string_value(kind)?,
            response: not_null(response),
            usage: not_null(usage),
            service_tier: crate::scan::string_value(tier)?,
            error: not_null(error).is_some(),
            walked: true,
        })
    }

    fn read_parsed(json: &'a [u8]) -> Option<Self> {
        let parsed: ParsedEnd<'a> = serde_json::from_slice(json).ok()?;
        Some(Self {
            kind: parsed.kind,
            response: parsed.response.map(|r| r.get().as_bytes()),
            usage: parsed.usage.map(|r| r.get().as_bytes()),
            service_tier: parsed.service_tier,
            error: parsed.error.is_some(),
            walked: false,
        })
    }

    /// Its `type`.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// Whether it reports an error: an `error` or `response.failed` event, or any event with a
    /// top-level `error` that is not null.
    pub fn is_error(&self) -> bool {
        matches!(self.kind(), Some("error" | "response.failed")) || self.error
    }

    /// How a `response.*` event's response ended: its usage, in its service tier, and what the
    /// provider dropped from its input, in one walk.
    pub fn response_end(&self) -> AnswerEnd {
        let Some(response) = self.response else { return AnswerEnd::default() };
        if self.walked {
            AnswerEnd::walked(response)
        } else {
            AnswerEnd::from_body(response)
        }
    }

    /// The usage of a `response.*` event's response, in its service tier.
    pub fn response_usage(&self) -> Option<Usage> {
        self.response_end().usage
    }

    /// A top-level `usage` (a Chat Completions chunk), in the chunk's service tier.
    pub fn usage(&self) -> Option<Usage> {
        Some(Usage::from_text(self.usage?)?.billed_in(self.service_tier.as_deref()))
    }
}

/// The lines of an SSE event, each without its `\r\n` or `\n` (a trailing newline ends with an empty
/// line, as `split` does).
fn lines(frame: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(frame);
    std::iter::from_fn(move || {
        let text = rest?;
        let line = match memchr::memchr(b'\n', text) {
            Some(at) => {
                rest = Some(&text[at + 1..]);
                &text[..at]
            }
            None => {
                rest = None;
                text
            }
        };
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    })
}

/// The `data` of one SSE event (its `data:` lines joined with newlines), borrowed when it is one line.
fn event_data(frame: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let mut lines = lines(frame).filter_map(|l| l.strip_prefix(b"data:")).map(|d| d.strip_prefix(b" ").unwrap_or(d));
    let first = lines.next()?;
    match lines.next() {
        None => Some(std::borrow::Cow::Borrowed(first)),
        Some(second) => {
            let mut joined = [first, second].join(&b'\n');
            for more in lines {
                joined.push(b'\n');
                joined.extend_from_slice(more);
            }
            Some(std::borrow::Cow::Owned(joined))
        }
    }
}

/// Finds the end of the first complete SSE event at or after `from`: (index of the separator, its
/// length), the earliest `\n\n` or `\r\n\r\n`. One pass over the newlines: a separator is found at
/// its first `\n`, and at that `\n` a `\r\n\r\n` begins one byte before a `\n\n` would.
fn frame_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let from = from.min(buf.len());
    let at = |i: usize| buf.get(i).copied();
    for nl in memchr::memchr_iter(b'\n', &buf[from..]).map(|i| from + i) {
        if nl > from && at(nl - 1) == Some(b'\r') && at(nl + 1) == Some(b'\r') && at(nl + 2) == Some(b'\n') {
            return Some((nl - 1, 4));
        }
        if at(nl + 1) == Some(b'\n') {
            return Some((nl, 2));
        }
    }
    None
}

#[cfg(test)]
mod tests;
