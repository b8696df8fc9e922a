//! The logins under way, in one bounded table: browser requests waiting for the person's yes in the
//! dashboard, the codes issued for them waiting for the client's exchange, and device codes waiting
//! for a user code to be entered. Codes, device codes and user codes are held as SHA-256 digests only.
//!
//! Bound: [`MAX_PENDING`] entries; a new one pushes out the oldest, and each goes at its expiry.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Most logins under way at once (browser requests, codes and device codes together).
pub const MAX_PENDING: usize = 32;
/// How long a browser request waits for the person's yes (Codex itself waits 180 s).
pub const REQUEST_TTL: Duration = Duration::from_secs(5 * 60);
/// How long an issued code may be exchanged.
pub const CODE_TTL: Duration = Duration::from_secs(60);
/// How long a device code waits for its user code to be entered.
pub const DEVICE_TTL: Duration = Duration::from_secs(10 * 60);
/// The least time between two polls of one device code (RFC 8628 `interval`).
pub const DEVICE_INTERVAL: Duration = Duration::from_secs(5);

pub(crate) type Digest32 = [u8; 32];

/// The SHA-256 digest every code and token of a login is kept as.
pub fn digest(value: &str) -> Digest32 {
    Sha256::digest(value.as_bytes()).into()
}

fn same(a: &Digest32, b: &Digest32) -> bool {
    a.ct_eq(b).into()
}

/// What a client asked for: who it is and where its answer goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    /// The client id (`codex`).
    pub client: String,
    /// The loopback `redirect_uri` (browser flow; empty for the device flow).
    pub redirect: String,
    /// The PKCE S256 challenge (browser flow).
    pub challenge: String,
}

/// What the person decided about a device code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decided {
    /// Not yet.
    Waiting,
    /// Approved, for this pool.
    Approved(String),
    /// Refused.
    Denied,
}

#[derive(Debug)]
enum Kind {
    /// A browser request, by its id (not a secret: only a dashboard session can approve it).
    Request { id: String, state: String },
    /// An approved request's code, for this pool.
    Code { code: Digest32, pool: String },
    /// A device code and its user code.
    Device { device: Digest32, user: Digest32, decided: Decided, polled: Option<Instant> },
}

#[derive(Debug)]
struct Entry {
    asked: Asked,
    kind: Kind,
    expires: Instant,
}

/// What a device code's poll finds (RFC 8628 section 3.5).
#[derive(Debug, PartialEq, Eq)]
pub enum Poll {
    /// Approved: the login is issued for this pool (the device code is gone).
    Approved(Asked, String),
    /// Still waiting.
    Pending,
    /// Polled again before [`DEVICE_INTERVAL`].
    SlowDown,
    /// The person refused (the device code is gone).
    Denied,
    /// Unknown, used, or expired.
    Expired,
}

/// The table.
#[derive(Debug, Default)]
pub struct Pending {
    entries: VecDeque<Entry>,
}

impl Pending {
    /// How many logins are under way.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn push(&mut self, entry: Entry, now: Instant) {
        self.entries.retain(|e| e.expires > now);
        if self.entries.len() >= MAX_PENDING {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
    }

    /// Holds a browser request under `id` until the person decides.
    pub fn request(&mut self, id: &str, state: &str, asked: Asked, now: Instant) {
        let kind = Kind::Request { id: id.to_owned(), state: state.to_owned() };
        self.push(Entry { asked, kind, expires: crate::clock::later(now, REQUEST_TTL) }, now);
    }

    /// The browser request `id`, while it waits: what was asked.
    pub fn requested(&self, id: &str, now: Instant) -> Option<&Asked> {
        self.entries
            .iter()
            .find(|e| e.expires > now && matches!(&e.kind, Kind::Request { id: i, .. } if i == id))
            .map(|e| &e.asked)
    }

    /// Takes the browser request `id` off the table (the person decided): what was asked and its state.
    pub fn take_request(&mut self, id: &str, now: Instant) -> Option<(Asked, String)> {
        let at = self.entries.iter().position(|e| matches!(&e.kind, Kind::Request { id: i, .. } if i == id))?;
        let entry = self.entries.remove(at)?;
        match entry.kind {
            Kind::Request { state, .. } if entry.expires > now => Some((entry.asked, state)),
            _ => None,
        }
    }

    /// Holds an issued code for `pool`.
    pub fn code(&mut self, code: &str, asked: Asked, pool: &str, now: Instant) {
        let kind = Kind::Code { code: digest(code), pool: pool.to_owned() };
        self.push(Entry { asked, kind, expires: crate::clock::later(now, CODE_TTL) }, now);
    }

    /// Takes a code off the table, once, whatever follows: what was asked and the pool, if it had not
    /// expired.
    pub fn take_code(&mut self, code: &str, now: Instant) -> Option<(Asked, String)> {
        let wanted = digest(code);
        let at = self.entries.iter().position(|e| matches!(&e.kind, Kind::Code { code, .. } if same(code, &wanted)))?;
        let entry = self.entries.remove(at)?;
        match entry.kind {
            Kind::Code { pool, .. } if entry.expires > now => Some((entry.asked, pool)),
            _ => None,
        }
    }

    /// Holds a device code and its user code.
    pub fn device(&mut self, device: &str, user: &str, asked: Asked, now: Instant) {
        let kind = Kind::Device { device: digest(device), user: digest(user), decided: Decided::Waiting, polled: None };
        self.push(Entry { asked, kind, expires: crate::clock::later(now, DEVICE_TTL) }, now);
    }

    /// Records the person's decision on the device code whose user code is `user`: the client that
    /// asked, when one waits.
    pub fn decide(&mut self, user: &str, decision: Decided, now: Instant) -> Option<String> {
        let wanted = digest(normalize_user_code(user).as_str());
        let entry = self.entries.iter_mut().find(|e| {
            e.expires > now
                && matches!(&e.kind, Kind::Device { user, decided: Decided::Waiting, .. } if same(user, &wanted))
        })?;
        if let Kind::Device { decided, .. } = &mut entry.kind {
            *decided = decision;
        }
        Some(entry.asked.client.clone())
    }

    /// A client's poll with `device`.
    pub fn poll(&mut self, device: &str, now: Instant) -> Poll {
        let wanted = digest(device);
        let Some(at) =
            self.entries.iter().position(|e| matches!(&e.kind, Kind::Device { device, .. } if same(device, &wanted)))
        else {
            return Poll::Expired;
        };
        let entry = &mut self.entries[at];
        if entry.expires <= now {
            self.entries.remove(at);
            return Poll::Expired;
        }
        let Kind::Device { decided, polled, .. } = &mut entry.kind else { return Poll::Expired };
        match decided.clone() {
            Decided::Waiting => {
                let early = polled.is_some_and(|last| now.saturating_duration_since(last) < DEVICE_INTERVAL);
                *polled = Some(now);
                if early {
                    Poll::SlowDown
                } else {
                    Poll::Pending
                }
            }
            Decided::Approved(pool) => self.entries.remove(at).map_or(Poll::Expired, |e| Poll::Approved(e.asked, pool)),
            Decided::Denied => {
                self.entries.remove(at);
                Poll::Denied
            }
        }
    }
}

/// A user code as a person types it: upper case, without spaces or dashes.
pub fn normalize_user_code(typed: &str) -> String {
    typed.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_uppercase()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> Asked {
        Asked { client: "codex".into(), redirect: "http://127.0.0.1:1/callback".into(), challenge: "c".into() }
    }

    #[test]
    fn a_code_is_taken_once_and_not_after_it_expired() {
        let (mut table, now) = (Pending::default(), crate::clock::Clock::system().now());
        table.code("one", asked(), "work", now);
        assert_eq!(table.take_code("one", now).map(|(_, pool)| pool), Some("work".into()));
        assert!(table.take_code("one", now).is_none(), "single use");
        table.code("two", asked(), "work", now);
        assert!(table.take_code("two", now + CODE_TTL).is_none(), "expired");
        assert!(table.is_empty(), "and gone");
    }

    #[test]
    fn the_table_keeps_at_most_its_bound_and_pushes_out_the_oldest() {
        let (mut table, now) = (Pending::default(), crate::clock::Clock::system().now());
        for i in 0..MAX_PENDING + 5 {
            table.request(&format!("r{i}"), "s", asked(), now);
        }
        assert_eq!(table.len(), MAX_PENDING);
        assert!(table.requested("r0", now).is_none(), "the oldest went");
        assert!(table.requested(&format!("r{}", MAX_PENDING + 4), now).is_some());
    }

    #[test]
    fn a_device_code_waits_slows_down_then_is_approved_once() {
        let (mut table, now) = (Pending::default(), crate::clock::Clock::system().now());
        table.device("dev", "ABCDEFGH", Asked { redirect: String::new(), ..asked() }, now);
        assert_eq!(table.poll("dev", now), Poll::Pending);
        assert_eq!(table.poll("dev", now + Duration::from_secs(1)), Poll::SlowDown);
        assert_eq!(table.decide("abcd-efgh", Decided::Approved("work".into()), now), Some("codex".into()));
        assert!(matches!(table.poll("dev", now + DEVICE_INTERVAL * 2), Poll::Approved(_, pool) if pool == "work"));
        assert_eq!(table.poll("dev", now + DEVICE_INTERVAL * 3), Poll::Expired, "used");
        table.device("late", "ZZZZZZZZ", asked(), now);
        assert_eq!(table.poll("late", now + DEVICE_TTL), Poll::Expired);
    }
}
