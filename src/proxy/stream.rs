//! How an accepted answer goes back to the client: whole at once (a tagged JSON answer), or streamed as
//! it arrives, event by event with markers spliced in, what has already arrived gathered into one
//! write, the idle timeout reset at every chunk, and the request's record finished when the stream ends
//! or breaks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Response;
use bytes::{Bytes, BytesMut};
use futures::{FutureExt as _, StreamExt as _};

use super::{content_type, Accepted, AcceptedBody};
use crate::gateway::Gateway;
use crate::pipeline::record::End;
use crate::pipeline::{self, Completion, Trace};
use crate::pool::InFlight;
use crate::relay::{AnswerEnd, JsonTail, SseRewriter, Tagger};
use crate::spend::Usage;
use crate::upstream::{BodyError, Chunks};

/// Relays an accepted answer: whole (tagged) at once, or as a stream whose record is finished when it
/// ends.
pub(super) fn relay(
    gateway: &Arc<Gateway>,
    accepted: Accepted,
    guard: InFlight,
    tagger: Option<Tagger>,
    completion: Completion,
    mut trace: Trace,
) -> Response<Body> {
    let Accepted { status, headers, body } = accepted;
    trace.serving(&completion.key);
    trace.answered();
    let body = match body {
        AcceptedBody::Whole(bytes) => {
            // A complete 2xx JSON answer is a successful terminal state.
            let end = AnswerEnd::from_body(&bytes);
            let usage = end.usage;
            if let Some(dropped) = end.dropped {
                trace.reasoning_dropped(dropped);
            }
            pipeline::completed(gateway, &completion, end);
            let tagged = tagger.and_then(|t| t.tag_json(&bytes)).map_or(bytes, Bytes::from);
            drop(guard);
            trace.finish(End { served_by: Some(completion.key), status: status.as_u16(), error: None, usage });
            Body::from(tagged)
        }
        AcceptedBody::Stream(chunks) => {
            let mode = match tagger {
                Some(t) if content_type(&headers).starts_with("text/event-stream") => {
                    Mode::Sse(Box::new(SseRewriter::new(t)))
                }
                None if content_type(&headers).contains("json") => Mode::Json(Box::default()),
                _ => Mode::Pass,
            };
            let ended = Arc::new(AtomicBool::new(false));
            let state = RelayState {
                chunks,
                idle: gateway.upstream().idle_timeout(),
                mode,
                gateway: gateway.clone(),
                completion,
                status: status.as_u16(),
                trace: Some(trace),
                usage: None,
                learned: false,
                over: false,
                idle_timer: Box::pin(tokio::time::sleep(gateway.upstream().idle_timeout())),
                held: None,
                ended: ended.clone(),
                started: false,
                _guard: guard,
            };
            let pieces = futures::stream::unfold(state, |mut state| async move {
                let next = state.next().await?;
                Some((next, state))
            });
            Body::new(Relayed { pieces: Box::pin(pieces), ended })
        }
    };
    let mut out = Response::new(body);
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

enum Mode {
    Pass,
    /// A JSON answer passed through as it arrives; its tail is kept for the usage it ends with.
    Json(Box<JsonTail>),
    Sse(Box<SseRewriter>),
}

/// A streamed answer on its way to the client. The key stays in flight until the stream ends or the
/// client goes away (which drops this, the upstream request with it, and publishes the record as
/// cancelled).
struct RelayState {
    // Dropped first: the key's in-flight count falls before the record is published.
    _guard: InFlight,
    chunks: Chunks,
    idle: Duration,
    mode: Mode,
    gateway: Arc<Gateway>,
    completion: Completion,
    status: u16,
    /// Finished once, when the stream ends (successfully or not).
    trace: Option<Trace>,
    usage: Option<Usage>,
    /// What the stream's terminal event teaches has been learned (it is learned once).
    learned: bool,
    /// The stream has ended or broken: nothing more is read.
    over: bool,
    /// The idle timer, moved on at every chunk rather than made anew (one timer per stream).
    idle_timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// The end (or break) found while gathering chunks, for the call after the piece gathered.
    held: Option<Option<Result<Bytes, std::io::Error>>>,
    /// Set when the provider's stream ended whole: the piece handed on then is the last.
    ended: Arc<AtomicBool>,
    /// A piece has been handed on (the first is never held back to gather more).
    started: bool,
}

/// A relayed stream as the client's answer body. It says it has ended as soon as its last piece is
/// out, so the end of the chunked answer goes in the same write as the last events, not one of its own.
struct Relayed {
    pieces: std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, std::io::Error>> + Send>>,
    ended: Arc<AtomicBool>,
}

impl hyper::body::Body for Relayed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        self.pieces.poll_next_unpin(cx).map(|piece| piece.map(|piece| piece.map(hyper::body::Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

/// Most bytes gathered into one piece for the client before it is handed on.
const GATHER_LIMIT: usize = 64 * 1024;

/// How many times the relay gives way for the provider's next chunk to come through (`arrived`): two
/// turns are what a chunk read together with the one before takes through reqwest and hyper.
const GATHER_TURNS: usize = 2;

/// One item of the provider's stream, settled (`RelayState::settle`).
enum Item {
    Piece(Bytes),
    Over(Option<Result<Bytes, std::io::Error>>),
}

/// The stream's next item if it has already arrived. The provider's connection hands its chunks on
/// one at a time, each once the relay took the one before, through a few tasks' turns: the relay gives
/// way up to `GATHER_TURNS` times for a chunk already read to come through, and never waits for the
/// network.
async fn arrived<S: futures::Stream + Unpin>(chunks: &mut S) -> Option<Option<S::Item>> {
    for turn in 0..=GATHER_TURNS {
        if let Some(next) = chunks.next().now_or_never() {
            return Some(next);
        }
        if turn < GATHER_TURNS {
            tokio::task::yield_now().await;
        }
    }
    None
}

/// Pieces gathered into one (a write to the client, or a whole answer): the first kept as it came, the
/// later ones copied after it once each (never the whole gathered run again for every chunk).
#[derive(Default)]
pub(super) struct Gathered {
    first: Bytes,
    more: Option<BytesMut>,
}

impl Gathered {
    pub(super) fn push(&mut self, piece: Bytes) {
        if piece.is_empty() {
            return;
        }
        if self.first.is_empty() {
            self.first = piece;
            return;
        }
        let first = &self.first;
        let more = self.more.get_or_insert_with(|| {
            let mut more = BytesMut::with_capacity(first.len() + piece.len());
            more.extend_from_slice(first);
            more
        });
        more.extend_from_slice(&piece);
    }

    pub(super) fn len(&self) -> usize {
        self.more.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    pub(super) fn into_bytes(self) -> Bytes {
        self.more.map_or(self.first, BytesMut::freeze)
    }
}

impl RelayState {
    /// The next piece for the client: `None` at the end, an error to abort the response.
    ///
    /// Everything that has already arrived goes out as one piece: one read from the provider often
    /// holds several chunks (events written together), and each piece handed on is a write to the
    /// client, so gathering them saves a system call and a wake-up of the client per chunk without
    /// waiting for anything. An end or a break found while gathering is held for the next call, after
    /// what came before it.
    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if let Some(held) = self.held.take() {
            return held;
        }
        if self.over {
            return None;
        }
        loop {
            self.idle_timer.as_mut().reset(crate::clock::timer_deadline(self.idle));
            let next = tokio::select! {
                biased;
                next = self.chunks.next() => next,
                () = self.idle_timer.as_mut() => return self.broke("upstream_idle", "upstream stream went idle"),
            };
            let mut out = Gathered::default();
            match self.settle(next) {
                Item::Piece(piece) => out.push(piece),
                Item::Over(end) => return end,
            }
            // The first piece goes at once: the answer's head waits in the same write for it, and giving
            // way now would send the head on its own.
            let gather = std::mem::replace(&mut self.started, true);
            while gather && out.len() < GATHER_LIMIT {
                let Some(next) = arrived(&mut self.chunks).await else { break };
                match self.settle(next) {
                    Item::Piece(more) => out.push(more),
                    Item::Over(end) => {
                        match end {
                            Some(Ok(tail)) => out.push(tail),
                            end => self.held = Some(end),
                        }
                        break;
                    }
                }
            }
            if out.len() > 0 {
                return Some(Ok(out.into_bytes()));
            }
            if let Some(held) = self.held.take() {
                return held;
            }
            if self.over {
                return None;
            }
        }
    }

    /// What one item of the provider's stream comes to: a piece for the client (maybe empty), or the
    /// end of the stream (its last piece, or the error it broke with).
    fn settle(&mut self, next: Option<Result<Bytes, BodyError>>) -> Item {
        let bytes = match next {
            Some(Err(e)) => return Item::Over(self.broke("upstream_cut", &format!("upstream stream failed: {e}"))),
            Some(Ok(bytes)) => bytes,
            None => return Item::Over(self.ended()),
        };
        let rw = match &mut self.mode {
            Mode::Sse(rw) => rw,
            Mode::Json(tail) => {
                tail.push(&bytes);
                return Item::Piece(bytes);
            }
            Mode::Pass => return Item::Piece(bytes),
        };
        let pushed = rw.push(&bytes);
        let ending = rw.end();
        // Learn once: a stream has one terminal event (`response.completed`, or `response.incomplete`,
        // whose tokens are billed too).
        let dropped = ending.dropped.filter(|_| !self.learned);
        if let (Some(dropped), Some(trace)) = (dropped, self.trace.as_mut()) {
            trace.reasoning_dropped(dropped);
        }
        if ending.completed && !self.learned {
            self.learned = true;
            self.usage = ending.usage;
            pipeline::completed(&self.gateway, &self.completion, AnswerEnd { usage: ending.usage, dropped });
        } else if ending.incomplete && !self.learned {
            self.learned = true;
            self.usage = ending.usage;
            pipeline::incomplete(&self.gateway, &self.completion, AnswerEnd { usage: ending.usage, dropped });
        }
        match pushed {
            Ok(out) => Item::Piece(out),
            Err(e) => Item::Over(self.broke("event_too_large", &e.to_string())),
        }
    }

    /// The upstream stream ended: flush what is left and finish the record.
    fn ended(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        self.over = true;
        self.ended.store(true, Ordering::Release);
        let tail = match &mut self.mode {
            Mode::Sse(rw) => rw.finish(),
            Mode::Json(tail) => {
                self.usage = tail.usage();
                pipeline::completed(&self.gateway, &self.completion, AnswerEnd { usage: self.usage, dropped: None });
                Bytes::new()
            }
            Mode::Pass => Bytes::new(),
        };
        self.mode = Mode::Pass;
        if let Some(trace) = self.trace.take() {
            let end = End {
                served_by: Some(self.completion.key.clone()),
                status: self.status,
                error: None,
                usage: self.usage,
            };
            trace.finish(end);
        }
        (!tail.is_empty()).then_some(Ok(tail))
    }

    /// The stream broke after its start: nothing can be retried now, so the client's stream is aborted
    /// and the record says why.
    fn broke(&mut self, label: &'static str, detail: &str) -> Option<Result<Bytes, std::io::Error>> {
        self.over = true;
        let trace = self.trace.take()?;
        let end =
            End { served_by: Some(self.completion.key.clone()), status: self.status, error: Some(label), usage: None };
        trace.finish(end);
        Some(Err(std::io::Error::other(detail.to_owned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_pieces_come_out_in_order_as_one() {
        let mut out = Gathered::default();
        for piece in ["", "a", "", "bc", "d"] {
            out.push(Bytes::from_static(piece.as_bytes()));
        }
        assert_eq!(out.len(), 4);
        assert_eq!(out.into_bytes(), Bytes::from_static(b"abcd"));
        let mut one = Gathered::default();
        one.push(Bytes::from_static(b"only"));
        assert_eq!(one.into_bytes(), Bytes::from_static(b"only"), "a single piece goes out as it came");
    }

    /// A chunk that the provider's side hands on within the turns given is gathered; one that is
    /// not there yet is not waited for.
    #[tokio::test(flavor = "current_thread")]
    async fn chunks_already_read_are_gathered_and_nothing_is_waited_for() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let mut rx = rx;
        // Hands its item on after `GATHER_TURNS - 1` turns of its own, as hyper's connection does.
        let handed = tokio::spawn(async move {
            for _ in 1..GATHER_TURNS {
                tokio::task::yield_now().await;
            }
            tx.unbounded_send(7).expect("the receiver is open");
            tx
        });
        assert_eq!(arrived(&mut rx).await, Some(Some(7)), "the chunk handed on within the turns is gathered");
        let _tx = handed.await.expect("the handing task ends");
        assert_eq!(arrived(&mut rx).await, None, "nothing more has arrived: the relay goes on without waiting");
    }
}
