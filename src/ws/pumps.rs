//! The two pumps of a bound socket: client to upstream (markers stripped, each `response.create` a
//! turn with its own record) and upstream to client (org-bound values tagged, each turn finished at its
//! terminal event). Each awaits the other side's send, so at most one frame per direction is in Keymux
//! at a time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::ws::{CloseFrame as AxumClose, Message as AxumMessage, WebSocket};
use bytes::Bytes;
use futures::{FutureExt as _, SinkExt as _, StreamExt as _};
use http::HeaderMap;
use std::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame as UpClose;
use tokio_tungstenite::tungstenite::Message as UpMessage;

use super::{error_frame, lost_state_frame, turn_end, Bound, Turn, TurnEnd, Upstream, MAX_PENDING_TURNS};
use crate::budget::BudgetState;
use crate::error::ApiError;
use crate::events::Wire;
use crate::facts::{self, Incoming, Operation, RequestFacts};
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::markers::OrgTag;
use crate::pipeline::record::End;
use crate::pipeline::{self, Completion, Trace};
use crate::relay::Tagger;
use crate::router::{Decision, Reason};
use crate::tokens::ClientScope;

/// Why the inbound pump stopped early.
enum Stop {
    /// The session's state lives with another organization (or socket): the client must reconnect.
    Misbound(KeyId),
    /// The frame carries a marker that must not be used.
    Refused(String),
    /// The frame replays encrypted content without a marker on a socket that was bound before any
    /// such content came (Codex opens a resumed session with a prewarm frame that carries none): the
    /// client must reconnect and send it first, so its organization is found.
    Unfound,
    /// The socket's key reached its budget in money, set to stop there.
    Budget(ApiError),
    /// The client sent a binary frame (`ws::binary_refused_frame`).
    Binary,
    /// The turn is Responses-Lite and the socket is not (or the other way round): the provider reads
    /// the header as the connection's, so the turn cannot go on this socket. The client must reconnect.
    LiteMismatch,
}

/// The two pumps, until either side closes or the gateway shuts down.
pub(super) async fn relay(
    gateway: Arc<Gateway>,
    client: WebSocket,
    bound: Bound,
    headers: HeaderMap,
    scope: ClientScope,
) {
    let Bound { upstream, guard, tagger, key, turns, answer, found } = bound;
    let (client_tx, client_rx) = client.split();
    let (up_tx, up_rx) = upstream.split();
    // An answer already read (while finding the session's organization) is relayed first.
    let up_rx = futures::stream::iter(answer.map(Ok)).chain(up_rx);
    let (notice_tx, notice_rx) = tokio::sync::mpsc::channel::<AxumMessage>(1);
    let lite = crate::upstream::is_responses_lite(&headers);
    let inbound =
        Inbound { gateway: gateway.clone(), key: key.clone(), turns: turns.clone(), headers, scope, found, lite };
    let outbound = Outbound { gateway: gateway.clone(), key: key.clone(), tagger, turns };
    let inbound = inbound.pump(client_rx, up_tx);
    let outbound = outbound.pump(up_rx, client_tx, notice_rx);
    tokio::pin!(inbound);
    tokio::pin!(outbound);
    let closing = gateway.closing();
    tokio::select! {
        result = &mut inbound => {
            let notice = match result {
                Ok(()) => None,
                Err(Stop::Misbound(other)) => {
                    tracing::info!(key = %key, other = %other, "session belongs to another organization; asking the client to reconnect");
                    Some(lost_state_frame())
                }
                Err(Stop::Unfound) => {
                    tracing::info!(key = %key, "a session begun before Keymux; asking the client to reconnect so its organization is found");
                    Some(lost_state_frame())
                }
                Err(Stop::Budget(error)) => {
                    tracing::info!(key = %key, "closing websocket: its key reached its budget");
                    Some(super::api_error_frame(&error))
                }
                Err(Stop::Refused(message)) => {
                    tracing::warn!(key = %key, "closing websocket: {message}");
                    Some(error_frame(400, "keymux_invalid_marker", &message, None))
                }
                Err(Stop::LiteMismatch) => {
                    tracing::info!(key = %key, "a turn's Responses-Lite setting differs from its socket's; asking the client to reconnect");
                    Some(lost_state_frame())
                }
                Err(Stop::Binary) => {
                    tracing::warn!(key = %key, "closing websocket: the client sent a binary frame");
                    Some(super::binary_refused_frame())
                }
            };
            if let Some(notice) = notice {
                let _ = notice_tx.send(notice).await;
            }
            // Let the upstream's answer to a close (or the notice) reach the client, briefly.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), outbound).await;
        }
        () = &mut outbound => {}
        () = closing.cancelled() => {
            let close = AxumClose { code: 1001, reason: "Keymux is shutting down".into() };
            let _ = notice_tx.send(AxumMessage::Close(Some(close))).await;
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), outbound).await;
        }
    }
    drop(guard);
}

type ClientRx = futures::stream::SplitStream<WebSocket>;
type ClientTx = futures::stream::SplitSink<WebSocket, AxumMessage>;
type UpRx = futures::stream::Chain<
    futures::stream::Iter<std::option::IntoIter<Result<UpMessage, tokio_tungstenite::tungstenite::Error>>>,
    futures::stream::SplitStream<Upstream>,
>;
type UpTx = futures::stream::SplitSink<Upstream, UpMessage>;

/// Client → upstream: markers stripped, each `response.create` a turn with its own record.
struct Inbound {
    gateway: Arc<Gateway>,
    key: KeyId,
    turns: Arc<Mutex<VecDeque<Turn>>>,
    headers: HeaderMap,
    scope: ClientScope,
    /// The socket was opened by finding the organization of unmarked encrypted content: such content
    /// may come again on it.
    found: bool,
    /// The socket is Responses-Lite (its handshake said so): only such turns go on it.
    lite: bool,
}

impl Inbound {
    async fn pump(self, mut client_rx: ClientRx, mut up_tx: UpTx) -> Result<(), Stop> {
        while let Some(message) = client_rx.next().await {
            let forwarded = match message {
                Ok(AxumMessage::Text(text)) => self.turn(&text)?,
                Ok(AxumMessage::Binary(_)) => return Err(Stop::Binary),
                Ok(AxumMessage::Ping(p)) => UpMessage::Ping(p),
                Ok(AxumMessage::Pong(p)) => UpMessage::Pong(p),
                Ok(AxumMessage::Close(frame)) => {
                    let close =
                        frame.map(|f| UpClose { code: CloseCode::from(f.code), reason: f.reason.as_str().into() });
                    let _ = up_tx.send(UpMessage::Close(close)).await;
                    return Ok(());
                }
                Err(_) => return Ok(()),
            };
            if up_tx.send(forwarded).await.is_err() {
                return Ok(());
            }
        }
        let _ = up_tx.close().await;
        Ok(())
    }

    /// One frame on the bound socket: its facts, a check that this socket's key can serve it, and its
    /// record (finished when its answer ends).
    fn turn(&self, text: &str) -> Result<UpMessage, Stop> {
        let gateway = &self.gateway;
        let raw = Bytes::copy_from_slice(text.as_bytes());
        let mut trace = Trace::new(gateway, gateway.next_seq(), Operation::ResponsesCreate, Wire::WebSocket);
        trace.client(&self.scope);
        let incoming = Incoming {
            seq: trace.seq(),
            operation: Operation::ResponsesCreate,
            scope: &self.scope.tag,
            pool: &self.scope.pool,
            path: "/v1/responses",
            headers: &self.headers,
            body: &raw,
        };
        let extracted =
            facts::extract(&incoming, gateway.markers()).map_err(|e| Stop::Refused(format!("Keymux: {e}.")))?;
        let facts = &extracted.facts;
        self.check_pool(facts)?;
        if facts.lite_turn.unwrap_or(self.lite) != self.lite {
            trace.facts(facts);
            trace.finish(End { served_by: None, status: 409, error: Some("responses_lite_mismatch"), usage: None });
            return Err(Stop::LiteMismatch);
        }
        if let Some(error) = self.budget_stop() {
            trace.facts(facts);
            trace.finish(End { served_by: None, status: 429, error: Some("budget_stopped"), usage: None });
            return Err(Stop::Budget(error));
        }
        let now = gateway.clock().now();
        let org = gateway.pool().org_tag(&self.key);
        // Items of organizations this session was rescued from stay dropped, on this socket too.
        let stale: Vec<OrgTag> =
            pipeline::rescued_from(gateway, facts, now).into_iter().filter(|o| Some(*o) != org).collect();
        if let Err(stop) = self.check_bound(facts, org, &stale, now) {
            if matches!(stop, Stop::Unfound) {
                // Recorded as what it is: the client is asked to reconnect, not a client that left.
                trace.facts(facts);
                trace.finish(End { served_by: None, status: 409, error: Some("reconnect_to_find_org"), usage: None });
            }
            return Err(stop);
        }
        if let Some(session) = facts.session {
            gateway.hints().insert(session, self.key.clone(), now);
        }
        trace.facts(facts);
        let mut decision = Decision::bound_to_socket(trace.seq(), &self.key);
        if !stale.is_empty() {
            decision.reasons.push(Reason::StillRescued { orgs: stale.len() });
            decision.rescued_orgs.clone_from(&stale);
        }
        let tier_changed = pipeline::tier_change(&gateway.pools(), &self.scope.pool, facts);
        decision.reasons.extend(tier_changed.clone());
        trace.decided(decision);
        trace.serving(&self.key);
        let (session, pinned) = (facts.session, !facts.pins.is_empty());
        let completion =
            Completion { key: self.key.clone(), operation: Operation::ResponsesCreate, signal: None, session, pinned };
        self.push(Turn { trace, completion });
        let mut body = if stale.is_empty() { extracted.body.to_vec() } else { drop_again(gateway, &raw, &stale)? };
        if let Some(Reason::TierChanged { sent, .. }) = &tier_changed {
            let unreadable = |e: ApiError| Stop::Refused(e.spec().message.into_owned());
            body = pipeline::with_tier(&body, sent).map_err(unreadable)?.to_vec();
        }
        Ok(UpMessage::Text(String::from_utf8_lossy(&body).into_owned().into()))
    }

    /// A frame that replays state made by a key outside the token's pool is refused, and so is one
    /// naming a response by its bare id when this socket's key shares its organization outside the pool.
    fn check_pool(&self, facts: &RequestFacts) -> Result<(), Stop> {
        let pools = self.gateway.pools();
        let reach = pools.reach(&self.scope.pool);
        let bare = || facts.unmarked_response_id.then(|| pipeline::bare_id_refusal(&self.gateway, &reach, &self.key));
        match pipeline::pool_mismatch(&self.gateway, &reach, facts).or_else(|| bare().flatten()) {
            Some(refusal) => {
                let error = pipeline::refusal_error(&self.gateway, refusal, &reach);
                Err(Stop::Refused(error.spec().message.into_owned()))
            }
            None => Ok(()),
        }
    }

    /// The refusal when this socket's key reached its budget, set to stop there: the user chose
    /// money over continuity, so even this bound session's next turn waits for the reset.
    fn budget_stop(&self) -> Option<ApiError> {
        let gateway = &self.gateway;
        let (state, pool) = crate::budgets::holding(gateway, &self.key, &self.scope.pool)?;
        match state {
            BudgetState::Stopped { period, limit, resets_unix_ms } => {
                let left = resets_unix_ms.saturating_sub(gateway.clock().unix_ms());
                let retry_after_secs = left.div_ceil(1000).max(1);
                let label = gateway.pool().label(&self.key);
                Some(ApiError::BudgetStopped { label, pool, period, limit, retry_after_secs })
            }
            BudgetState::Open | BudgetState::Reserved { .. } => None,
        }
    }

    /// Bound to this socket: markers of another organization cannot be read here (except those of an
    /// organization the session was rescued from: `stale`, dropped again), and a response made on
    /// another socket's key cannot be continued here, and encrypted content without a marker cannot be
    /// sent on a socket that was bound before it showed (its organization is unknown). Remember where
    /// the session belongs and make the client reconnect (on `previous_response_not_found` Codex
    /// reconnects and resends all).
    fn check_bound(
        &self,
        facts: &RequestFacts,
        org: Option<OrgTag>,
        stale: &[OrgTag],
        now: Instant,
    ) -> Result<(), Stop> {
        if facts.unmarked_encrypted && facts.pins.is_empty() && !self.found && self.gateway.policy().encrypted_affinity
        {
            return Err(Stop::Unfound);
        }
        // This socket's organization dropped the session's reasoning (`pipeline::dropped`): found again.
        if facts.unmarked_encrypted && org.is_some_and(|o| self.moved_off(facts, o, now)) {
            return Err(Stop::Unfound);
        }
        let misbound = facts
            .pins
            .iter()
            .find(|p| Some(p.org) != org && p.key != self.key && !stale.contains(&p.org))
            .or(facts.continuity.as_ref().filter(|c| c.key != self.key));
        let Some(pin) = misbound else { return Ok(()) };
        if let Some(session) = facts.session {
            self.gateway.hints().insert(session, pin.key.clone(), now);
        }
        Err(Stop::Misbound(pin.key.clone()))
    }

    /// Whether organization `org` dropped this session's reasoning as another organization's.
    fn moved_off(&self, facts: &RequestFacts, org: OrgTag, now: Instant) -> bool {
        let moved = facts.session.and_then(|s| self.gateway.misplaced().get(&s, now));
        moved.is_some_and(|orgs| orgs.contains(&org))
    }

    fn push(&self, turn: Turn) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.len() == MAX_PENDING_TURNS {
            // A client that never waits for answers: the oldest turn's record closes unanswered.
            if let Some(old) = turns.pop_front() {
                old.trace.finish(End {
                    served_by: Some(self.key.clone()),
                    status: 200,
                    error: Some("unanswered"),
                    usage: None,
                });
            }
        }
        turns.push_back(turn);
    }
}

/// Upstream → client: frames tagged with the key's markers; a turn's record finishes at its end.
struct Outbound {
    gateway: Arc<Gateway>,
    key: KeyId,
    tagger: Option<Tagger>,
    turns: Arc<Mutex<VecDeque<Turn>>>,
}

/// A frame with the items of `orgs` dropped and the remaining markers stripped.
fn drop_again(gateway: &Gateway, raw: &[u8], orgs: &[OrgTag]) -> Result<Vec<u8>, Stop> {
    let unreadable = || Stop::Refused("Keymux: the frame could not be re-read to drop unreadable items.".into());
    let (rescued, _) = gateway.markers().drop_unreadable(raw, orgs, false).ok_or_else(unreadable)?;
    let stripped = gateway.markers().strip(&rescued).map_err(|e| Stop::Refused(format!("Keymux: {e}.")))?;
    Ok(stripped.body.into_owned())
}

impl Outbound {
    async fn pump(
        self,
        mut up_rx: UpRx,
        mut client_tx: ClientTx,
        mut notice_rx: tokio::sync::mpsc::Receiver<AxumMessage>,
    ) {
        loop {
            let message = tokio::select! {
                notice = notice_rx.recv() => {
                    if let Some(notice) = notice {
                        let closing = matches!(notice, AxumMessage::Close(_));
                        let _ = client_tx.send(notice).await;
                        if !closing {
                            let _ = client_tx.send(AxumMessage::Close(None)).await;
                        }
                    }
                    self.close_turns("client_gone");
                    return;
                }
                message = up_rx.next() => match message {
                    Some(message) => message,
                    None => break,
                },
            };
            // Frames that are already here go out in one write: feed them all, flush once.
            let mut lost = false;
            let mut next = Some(message);
            while let Some(message) = next.take() {
                match self.forward(message) {
                    Forward::Frame(frame) => {
                        if client_tx.feed(frame).await.is_err() {
                            self.close_turns("client_gone");
                            return;
                        }
                    }
                    Forward::Skip => {}
                    Forward::Closed(close) => {
                        let _ = client_tx.send(AxumMessage::Close(close)).await;
                        self.close_turns("upstream_closed");
                        return;
                    }
                    Forward::Lost => {
                        lost = true;
                        break;
                    }
                    Forward::Binary => {
                        tracing::warn!(key = %self.key, "closing websocket: the provider sent a binary frame");
                        let _ = client_tx.send(super::upstream_binary_frame()).await;
                        let _ = client_tx.send(AxumMessage::Close(None)).await;
                        self.close_turns("upstream_binary_frame");
                        return;
                    }
                }
                next = up_rx.next().now_or_never().flatten();
            }
            if client_tx.flush().await.is_err() {
                self.close_turns("client_gone");
                return;
            }
            if lost {
                break;
            }
        }
        // The upstream went away without a close: its state is gone.
        let _ = client_tx.send(lost_state_frame()).await;
        let _ = client_tx.send(AxumMessage::Close(None)).await;
        self.close_turns("upstream_cut");
    }

    /// What one upstream message becomes for the client.
    fn forward(&self, message: Result<UpMessage, tokio_tungstenite::tungstenite::Error>) -> Forward {
        match message {
            Ok(UpMessage::Text(text)) => Forward::Frame(AxumMessage::Text(self.frame(text.as_str()).into())),
            Ok(UpMessage::Binary(_)) => Forward::Binary,
            Ok(UpMessage::Ping(p)) => Forward::Frame(AxumMessage::Ping(p)),
            Ok(UpMessage::Pong(p)) => Forward::Frame(AxumMessage::Pong(p)),
            Ok(UpMessage::Close(frame)) => {
                Forward::Closed(frame.map(|f| AxumClose { code: u16::from(f.code), reason: f.reason.as_str().into() }))
            }
            Ok(UpMessage::Frame(_)) => Forward::Skip,
            Err(_) => Forward::Lost,
        }
    }

    /// One upstream text frame: noted against the current turn, any key an error quotes masked, tagged
    /// for the client.
    fn frame(&self, text: &str) -> String {
        self.observe(text);
        let masked = crate::relay::mask_failed_event(text.as_bytes());
        let text = masked.as_deref().map_or(std::borrow::Cow::Borrowed(text), String::from_utf8_lossy);
        match self.tagger.as_ref().and_then(|t| t.tag_json(text.as_bytes())) {
            // Tagging splices ASCII markers into UTF-8 text: it stays UTF-8, checked, not copied again.
            Some(tagged) => {
                String::from_utf8(tagged).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
            }
            None => text.into_owned(),
        }
    }

    /// The current turn's first frame is its time to first byte; `response.completed` ends it with its
    /// usage, an `error` or `response.failed` ends it as failed.
    fn observe(&self, text: &str) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        let Some(turn) = turns.front_mut() else { return };
        turn.trace.answered();
        let kind = turn_end(text);
        if kind == TurnEnd::Open {
            return;
        }
        let Some(turn) = turns.pop_front() else { return };
        drop(turns);
        let mut trace = turn.trace;
        let (error, usage) = match kind {
            TurnEnd::Completed(end) => {
                end.dropped.into_iter().for_each(|d| trace.reasoning_dropped(d));
                pipeline::completed(&self.gateway, &turn.completion, end);
                (None, end.usage)
            }
            // As over HTTP: an incomplete turn's tokens are billed, and what it dropped counts.
            TurnEnd::Incomplete(end) => {
                end.dropped.into_iter().for_each(|d| trace.reasoning_dropped(d));
                pipeline::incomplete(&self.gateway, &turn.completion, end);
                (None, end.usage)
            }
            _ => (Some("upstream_error"), None),
        };
        trace.finish(End { served_by: Some(self.key.clone()), status: 200, error, usage });
    }

    /// Closes the records of turns that will get no answer now.
    fn close_turns(&self, why: &'static str) {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        for turn in turns.drain(..) {
            turn.trace.finish(End { served_by: Some(self.key.clone()), status: 200, error: Some(why), usage: None });
        }
    }
}

/// What an upstream message becomes.
enum Forward {
    /// A frame for the client.
    Frame(AxumMessage),
    /// Nothing (a raw frame tungstenite hands up only when asked to).
    Skip,
    /// The upstream closed the socket.
    Closed(Option<AxumClose>),
    /// The upstream socket failed: its state is gone.
    Lost,
    /// The upstream sent a binary frame (`ws::upstream_binary_frame`).
    Binary,
}
