//! Which events deserve a desktop notification, worded for a person, and how often: a pure policy the
//! tray shell feeds with the event stream. Each kind can be switched off, and each is throttled so a
//! flapping key or a busy session cannot flood the desktop.

use std::collections::HashMap;

use crate::api::types::StatusBody;
use crate::budget::BudgetState;
use crate::events::BudgetOf;
use crate::events::{Envelope, Event, KeyChange};
use crate::pool::HealthState;
use crate::router::decision::Refusal;

use super::words::countdown;

/// The kinds of notification, each switchable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// No key is usable: every key cooling, out of quota, rejected or off.
    AllKeysBlocked,
    /// The provider rejected a key (revoked or mistyped).
    KeyRejected,
    /// A session was refused, or rescued by dropping what it replayed, because its organization has no
    /// usable key left.
    SessionLost,
    /// A key's budget in money reserved or stopped it, or it is open again at its period's end.
    Budget,
    /// An installed client (Codex, pi) was checked through Keymux, because its version changed or
    /// Keymux started: whether it works.
    ClientCheck,
    /// The ChatGPT plan is used up (new sessions go to the API keys), or back after its reset.
    Plan,
}

impl NoticeKind {
    /// Every kind.
    pub const ALL: [NoticeKind; 6] =
        [Self::AllKeysBlocked, Self::KeyRejected, Self::SessionLost, Self::Budget, Self::ClientCheck, Self::Plan];

    /// The kind in words, as the menu lists it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::AllKeysBlocked => "No key can serve",
            Self::KeyRejected => "A key is rejected",
            Self::SessionLost => "A session is refused or rescued",
            Self::Budget => "A budget is reached or resets",
            Self::ClientCheck => "A client update is checked",
            Self::Plan => "The ChatGPT plan runs out or is back",
        }
    }

    /// The least time between two notifications of this kind about the same thing.
    pub fn quiet_ms(self) -> u64 {
        match self {
            Self::AllKeysBlocked => 5 * 60_000,
            Self::KeyRejected => 30 * 60_000,
            Self::SessionLost => 10 * 60_000,
            // The gateway tells each budget state once per period already.
            Self::Budget => 60_000,
            // Checked once per version: each is told.
            Self::ClientCheck => 0,
            // A plan runs out and comes back at most a few times a day.
            Self::Plan => 60_000,
        }
    }
}

/// A notification to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Its kind.
    pub kind: NoticeKind,
    /// The title.
    pub title: String,
    /// The body: what happened and what to do.
    pub body: String,
}

/// The policy, with what it has already said.
#[derive(Debug)]
pub struct Notifier {
    /// Kinds switched off.
    off: Vec<NoticeKind>,
    /// When each (kind, subject) was last notified, Unix milliseconds.
    last: HashMap<(NoticeKind, String), u64>,
    /// "Every key blocked" was said and no key has been usable since.
    blocked_said: bool,
}

/// Most (kind, subject) pairs remembered; the oldest are forgotten past it.
const MAX_REMEMBERED: usize = 256;

impl Default for Notifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Notifier {
    /// Every kind on.
    pub fn new() -> Self {
        Self { off: Vec::new(), last: HashMap::new(), blocked_said: false }
    }

    /// Switches one kind on or off.
    pub fn set(&mut self, kind: NoticeKind, on: bool) {
        self.off.retain(|k| *k != kind);
        if !on {
            self.off.push(kind);
        }
    }

    /// Whether a kind is on.
    pub fn is_on(&self, kind: NoticeKind) -> bool {
        !self.off.contains(&kind)
    }

    /// What to show for `event`, if anything. `status` gives the gateway's status just after it; it is
    /// only asked for key events, so the many finished requests cost nothing to look at.
    pub fn consider(
        &mut self,
        event: &Envelope,
        status: impl FnOnce() -> StatusBody,
        now_unix_ms: u64,
    ) -> Option<Notice> {
        let notice = match &event.event {
            Event::Key(k) => {
                let status = status();
                let usable = status.keys.iter().any(|k| k.status.health == HealthState::Ready);
                if usable {
                    self.blocked_said = false;
                }
                plan_notice(k, status.gateway.rescues_lost_sessions, now_unix_ms)
                    .or_else(|| self.key_notice(k, &status, usable))
            }
            Event::Finished(record) => session_lost(record),
            Event::Gateway(crate::events::GatewayEvent::Budget { of, label, state }) => {
                Some(budget(of, label, state, now_unix_ms))
            }
            Event::Gateway(crate::events::GatewayEvent::ClientChecked(checked)) => Some(client_checked(checked)),
            _ => None,
        }?;
        let subject = match &event.event {
            Event::Gateway(crate::events::GatewayEvent::Budget { of, state, .. }) => match of {
                BudgetOf::Key { key } => format!("{key}:{}", budget_word(state)),
                BudgetOf::Pool { pool } => format!("pool {pool}:{}", budget_word(state)),
            },
            Event::Key(k) if notice.kind == NoticeKind::KeyRejected => k.key.to_string(),
            Event::Key(k) if notice.kind == NoticeKind::Plan => format!("{}:{}", k.key, notice.title),
            Event::Gateway(crate::events::GatewayEvent::ClientChecked(c)) => {
                format!("{} {}", c.name, c.version.as_deref().unwrap_or(""))
            }
            // One pool blocked is told once per quiet period, whatever the other pools do.
            Event::Key(_) if notice.kind == NoticeKind::AllKeysBlocked => notice.title.clone(),
            _ => String::new(),
        };
        self.allow(notice, subject, now_unix_ms)
    }

    fn key_notice(&self, k: &crate::events::KeyEvent, status: &StatusBody, usable: bool) -> Option<Notice> {
        match k.change {
            KeyChange::Rejected => Some(rejected(&k.label)),
            KeyChange::CoolingStarted { .. }
            | KeyChange::QuotaExhausted { .. }
            | KeyChange::Unreachable { .. }
            | KeyChange::Disabled
            | KeyChange::Removed
                if !usable && !status.keys.is_empty() && !self.blocked_said =>
            {
                Some(blocked(status))
            }
            KeyChange::CoolingStarted { .. }
            | KeyChange::QuotaExhausted { .. }
            | KeyChange::Unreachable { .. }
            | KeyChange::Disabled
            | KeyChange::Removed
                if usable =>
            {
                pool_blocked(status)
            }
            _ => None,
        }
    }

    fn allow(&mut self, notice: Notice, subject: String, now_unix_ms: u64) -> Option<Notice> {
        if !self.is_on(notice.kind) {
            return None;
        }
        let key = (notice.kind, subject);
        if self.last.get(&key).is_some_and(|at| now_unix_ms.saturating_sub(*at) < notice.kind.quiet_ms()) {
            return None;
        }
        if self.last.len() >= MAX_REMEMBERED {
            if let Some(oldest) = self.last.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone()) {
                self.last.remove(&oldest);
            }
        }
        self.last.insert(key, now_unix_ms);
        if notice.kind == NoticeKind::AllKeysBlocked {
            self.blocked_said = true;
        }
        Some(notice)
    }
}

/// The ChatGPT plan ran out (by its 429, or by a window its answer reported used up) or is back.
fn plan_notice(k: &crate::events::KeyEvent, rescues: bool, now_unix_ms: u64) -> Option<Notice> {
    let (title, body) = match k.change {
        KeyChange::PlanUsedUp { until_unix_ms } => (
            "Your ChatGPT plan is used up".to_owned(),
            format!(
                "New sessions go to your API keys until your plan ({}) resets in {}; {}",
                k.label,
                countdown(until_unix_ms.saturating_sub(now_unix_ms)),
                if rescues {
                    "sessions on it go on with an API key, without the reasoning only the plan can read."
                } else {
                    "sessions on it get a 429 until then (lost_org = \"fail\")."
                }
            ),
        ),
        KeyChange::PlanBack => (
            "Your ChatGPT plan is back".to_owned(),
            format!("Its window reset: new sessions go to {} first again.", k.label),
        ),
        _ => return None,
    };
    Some(Notice { kind: NoticeKind::Plan, title, body })
}

/// A client's check: `pi 1.7.0 works through Keymux`, or that it does not, with the first failure.
fn client_checked(checked: &crate::events::ClientChecked) -> Notice {
    if checked.ok {
        return Notice { kind: NoticeKind::ClientCheck, title: checked.summary.clone(), body: String::new() };
    }
    let name = if checked.name == "codex" { "Codex" } else { checked.name.as_str() };
    let named = match &checked.version {
        Some(v) => format!("{name} {v}"),
        None => name.to_owned(),
    };
    Notice {
        kind: NoticeKind::ClientCheck,
        title: format!("{named} does not work through Keymux"),
        body: format!(
            "{} The dashboard's Connect view shows it; `keymux clients check` runs it again.",
            checked.summary
        ),
    }
}

fn rejected(label: &str) -> Notice {
    Notice {
        kind: NoticeKind::KeyRejected,
        title: format!("Key '{label}' was rejected"),
        body: "The provider refused it (revoked or mistyped). Keymux no longer sends requests to it; replace \
               or remove it in the dashboard."
            .to_owned(),
    }
}

fn blocked(status: &StatusBody) -> Notice {
    let g = &status.gateway;
    let body = match g.next_reset_unix_ms {
        Some(at) => format!(
            "Every key is cooling or out of quota. Requests get 429 until the first one frees in {}.",
            countdown(at.saturating_sub(g.now_unix_ms))
        ),
        None => "No key can serve: each is rejected, switched off or unreachable. Fix one in the dashboard.".to_owned(),
    };
    Notice { kind: NoticeKind::AllKeysBlocked, title: "No key can serve requests".to_owned(), body }
}

/// A pool of the user's (with tokens bound to it, so someone's requests are refused) whose keys can
/// all not serve while other keys can: its requests get its 429, never another pool's key.
fn pool_blocked(status: &StatusBody) -> Option<Notice> {
    let g = &status.gateway;
    let pool = status.pools.iter().find(|p| !p.builtin && p.usable == 0 && !p.tokens.is_empty())?;
    let frees = status
        .keys
        .iter()
        .filter(|k| pool.key_ids.contains(&k.status.id))
        .filter(|k| matches!(k.status.health, HealthState::Cooling | HealthState::QuotaExhausted))
        .filter_map(|k| k.until_unix_ms)
        .min();
    let body = match frees {
        Some(at) => format!(
            "Its requests get 429 until its first key frees in {}; Keymux does not send them to keys outside \
             the pool.",
            countdown(at.saturating_sub(g.now_unix_ms))
        ),
        None => "Each of its keys is rejected or switched off: fix one, or add a key to the pool, in the \
                 dashboard."
            .to_owned(),
    };
    Some(Notice { kind: NoticeKind::AllKeysBlocked, title: format!("{}: no key can serve", pool.name), body })
}

/// A session refused, or rescued (its unreadable items dropped: by the decision, for an organization
/// with no usable key left, or on the way, for a ChatGPT plan that ran out under it).
fn session_lost(record: &crate::events::RequestRecord) -> Option<Notice> {
    let decision = &record.routed.decision;
    let rescued = !decision.rescued_orgs.is_empty() || record.rescued_items > 0;
    let plan_ran_out = decision.reasons.iter().any(|r| matches!(r, crate::router::Reason::PlanExhausted { .. }));
    let (title, body) = match &decision.refusal {
        Some(Refusal::LostOrg { .. }) => (
            "A session was refused",
            "It replays encrypted reasoning that only an organization with no usable key left can read. \
             Re-enable or re-add one of its keys, or start a new session.",
        ),
        Some(Refusal::BareResponseId { .. }) => (
            "A session was refused",
            "It names a stored response without Keymux's marker, and its pool shares an organization with \
             another pool, so Keymux cannot tell which pool made it. Continue it with the id Keymux returned, \
             or start a new session.",
        ),
        Some(Refusal::PoolMismatch { .. }) => (
            "A session was refused",
            "It replays what a key of another pool made, and Keymux never crosses a pool's boundary. Continue \
             it with a token of that pool, or start a new session.",
        ),
        Some(Refusal::ContinuityLost { .. }) => (
            "A session was refused",
            "It continues a stored response held by a key that is gone. Resend the full history or start a \
             new session.",
        ),
        _ if rescued && plan_ran_out => (
            "A session was rescued",
            "Your ChatGPT plan ran out under it, so Keymux dropped the reasoning only the plan can read and \
             sent it on to an API key; the session goes on there.",
        ),
        _ if rescued => (
            "A session was rescued",
            "Its encrypted reasoning came from an organization with no usable key left, so Keymux dropped \
             those items and sent it on; the session goes on without them.",
        ),
        _ => return None,
    };
    Some(Notice { kind: NoticeKind::SessionLost, title: title.to_owned(), body: body.to_owned() })
}

fn budget_word(state: &BudgetState) -> &'static str {
    match state {
        BudgetState::Open => "open",
        BudgetState::Reserved { .. } => "reserved",
        BudgetState::Stopped { .. } => "stopped",
    }
}

fn budget(of: &BudgetOf, label: &str, state: &BudgetState, now_unix_ms: u64) -> Notice {
    // A pool's budget holds its keys together: the pool's requests (its tokens) are what it limits.
    let (who, on_it) = match of {
        BudgetOf::Key { .. } => (format!("'{label}'"), "the sessions already on it go on"),
        BudgetOf::Pool { .. } => (format!("Pool '{label}'"), "the sessions already in it go on"),
    };
    let resets = |at: u64| countdown(at.saturating_sub(now_unix_ms));
    let (title, body) = match *state {
        BudgetState::Reserved { period, limit, used_permille, resets_unix_ms } => (
            format!("{who} is past {}% of its budget", used_permille / 10),
            format!(
                "Its {limit} {} budget: it takes no new sessions until it resets in {}; {on_it}.",
                period.adjective(),
                resets(resets_unix_ms)
            ),
        ),
        BudgetState::Stopped { period, limit, resets_unix_ms } => (
            format!("{who} reached its budget and stopped"),
            format!(
                "Its {limit} {} budget is spent and it is set to stop there: it serves nothing, its sessions \
                 included, until it resets in {}.",
                period.adjective(),
                resets(resets_unix_ms)
            ),
        ),
        BudgetState::Open => {
            (format!("{who} is open again"), "Its budget's period ended: it takes new sessions again.".to_owned())
        }
    };
    Notice { kind: NoticeKind::Budget, title, body }
}
