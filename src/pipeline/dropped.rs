//! What a served answer teaches at its end: its tokens and the key that warmed its prompt cache
//! (`completed`), and, when the provider says it dropped reasoning from the request's input
//! (`input_transformations`, read by the relay on the walk that reads the usage), that the turn lost
//! part of its session's reasoning (`dropped`).
//!
//! A drop other than at a turn boundary is counted on the serving key (its status, and the metrics
//! through the record's decision). A drop for `organization_mismatch` means the turn reached an
//! organization where the session's reasoning does not live, as a 400 `invalid_encrypted_content`
//! did before providers dropped such items quietly. When Keymux placed the turn without a pin there
//! (finding the organization of a session begun before Keymux, a session hint, the balancer), it
//! learns the session's organization again: the organization is remembered as one the session was
//! moved off (`gateway.rescued()`, the owner of that memory, bounded and expiring), so the next
//! turn drops the reasoning that organization made (one turn's, unusable where the rest lives) instead
//! of being pinned back to it, and as one that does not hold its reasoning (`gateway.misplaced()`),
//! so the unmarked reasoning it could not read is kept, the search for the session's organization
//! leaves it out (`admit`), and a socket bound to it is reconnected (`ws`); the session hint that
//! points there is forgotten. Nothing crosses a pool boundary: every
//! key tried is one the request's pool reaches. A turn that was pinned there by its markers is only
//! counted: the provider disagrees with Keymux's markers, which nothing learned can correct.

use super::Completion;
use crate::drops::ReasoningDropped;
use crate::gateway::Gateway;
use crate::pool::Learned;
use crate::relay::AnswerEnd;

/// A relayed answer reached a successful end: remember which key served its signal (unless the
/// answer says the turn was in the wrong organization), count its tokens, and learn from what it
/// dropped.
pub fn completed(gw: &Gateway, completion: &Completion, end: AnswerEnd) {
    let misplaced = end.dropped.is_some_and(|d| d.wrong_organization());
    if let (Some(signal), false) = (completion.signal, misplaced) {
        gw.soft().insert(signal, completion.key.clone(), gw.clock().now());
    }
    if let Some(usage) = end.usage {
        gw.apply(Learned::Usage { key: completion.key.clone(), usage, day: gw.today() });
    }
    if let Some(dropped) = end.dropped {
        self::dropped(gw, completion, dropped);
    }
}

/// A relayed answer ended incomplete (`response.incomplete`, over SSE or a WebSocket turn): its tokens
/// are counted (they are billed) and what it dropped is learned from, but nothing is learned of the
/// key that served it: it is no success.
pub fn incomplete(gw: &Gateway, completion: &Completion, end: AnswerEnd) {
    if let Some(usage) = end.usage {
        gw.apply(Learned::Usage { key: completion.key.clone(), usage, day: gw.today() });
    }
    if let Some(dropped) = end.dropped {
        self::dropped(gw, completion, dropped);
    }
}

/// The provider dropped reasoning from a served request's input (at its successful end, or in a
/// `response.incomplete`): counted on the key, and for `organization_mismatch` on a turn Keymux did
/// not pin there, the session's organization is learned again.
pub fn dropped(gw: &Gateway, completion: &Completion, dropped: ReasoningDropped) {
    gw.apply(Learned::ReasoningDropped { key: completion.key.clone() });
    tracing::info!(
        key = %completion.key,
        items = dropped.count,
        reasons = %dropped.reasons_text(),
        "the provider dropped reasoning from a request's input"
    );
    if !dropped.wrong_organization() || completion.pinned {
        return;
    }
    let (Some(session), Some(org)) = (completion.session, gw.pool().org_tag(&completion.key)) else { return };
    let now = gw.clock().now();
    super::admit::remember_rescued(gw, session, &[org], now);
    super::admit::remember_in(gw.misplaced(), session, &[org], now);
    if gw.hints().get(&session, now).is_some_and(|hint| gw.pool().org_tag(&hint) == Some(org)) {
        gw.hints().remove(&session);
    }
}
