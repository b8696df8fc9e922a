//! Setups previewed through the control API (the dashboard's "Set up Codex") that wait for the
//! person's yes. A preview is held under a random id the page sends back with its yes; the yes then
//! applies exactly what was shown, or is refused when a file changed since.
//!
//! Bound: at most [`MAX_PENDING`] previews, each for at most [`PENDING_FOR`]. A new preview pushes out
//! the oldest; an old or unknown id is refused with "make a new preview". Nothing held is secret
//! beyond what the preview shows: the client token is made only at the yes, and an API key found in
//! `auth.json` stays in memory only, as it does in the file.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Client, Preview};

/// A preview and the label the person chose for the API key it imports (if they chose to).
#[derive(Debug)]
pub struct Offer {
    /// What was shown.
    pub preview: Preview,
    /// The label the key from Codex's `auth.json` gets in Keymux's pool.
    pub import_label: Option<String>,
}

/// The most previews held at once.
pub const MAX_PENDING: usize = 8;
/// How long a preview waits for its yes.
pub const PENDING_FOR: Duration = Duration::from_secs(15 * 60);

/// One preview waiting for its yes.
struct Held {
    id: String,
    client: Client,
    made: Instant,
    offer: Offer,
}

/// The previews waiting for a yes (see the module's header for the bound).
#[derive(Default)]
pub struct Pending {
    held: Mutex<VecDeque<Held>>,
}

impl Pending {
    /// Keeps `offer` of `client`'s setup until its yes; returns the id the yes names.
    pub fn hold(&self, client: Client, offer: Offer, now: Instant) -> String {
        let id = preview_id();
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.retain(|h| now.saturating_duration_since(h.made) < PENDING_FOR);
        while held.len() >= MAX_PENDING {
            held.pop_front();
        }
        held.push_back(Held { id: id.clone(), client, made: now, offer });
        id
    }

    /// The preview `id` of `client`'s setup, taken out (a yes is given once); `None` when there is no
    /// such preview for that client, or it waited longer than [`PENDING_FOR`].
    pub fn take(&self, client: Client, id: &str, now: Instant) -> Option<Offer> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = held.iter().position(|h| h.id == id && h.client == client)?;
        let one = held.remove(at)?;
        (now.saturating_duration_since(one.made) < PENDING_FOR).then_some(one.offer)
    }

    /// How many previews are held.
    pub fn len(&self) -> usize {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Whether no preview is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("held", &self.len()).finish()
    }
}

/// A random id (128 bits), so a page's old id never names another preview, across restarts too.
fn preview_id() -> String {
    use rand::RngCore as _;
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preview(dir: &std::path::Path) -> Offer {
        let path = dir.join("models.json");
        let preview =
            super::super::preview_with(Client::Pi, &path, "http://127.0.0.1:9/v1", None, Default::default(), Some(dir))
                .expect("preview");
        Offer { preview, import_label: None }
    }

    #[test]
    fn the_table_holds_at_most_its_bound_and_pushes_out_the_oldest() {
        let dir = tempfile::tempdir().expect("dir");
        let pending = Pending::default();
        let now = crate::clock::Clock::system().now();
        let ids: Vec<String> =
            (0..MAX_PENDING + 3).map(|_| pending.hold(Client::Pi, preview(dir.path()), now)).collect();
        assert_eq!(pending.len(), MAX_PENDING);
        assert!(pending.take(Client::Pi, &ids[0], now).is_none(), "the oldest was pushed out");
        assert!(pending.take(Client::Pi, &ids[MAX_PENDING + 2], now).is_some(), "the newest is held");
        assert_eq!(pending.len(), MAX_PENDING - 1, "a taken preview is gone");
    }

    #[test]
    fn a_preview_is_given_once_to_its_own_client_and_not_after_it_expired() {
        let dir = tempfile::tempdir().expect("dir");
        let pending = Pending::default();
        let now = crate::clock::Clock::system().now();
        let id = pending.hold(Client::Pi, preview(dir.path()), now);
        assert!(pending.take(Client::Codex, &id, now).is_none(), "another client's id");
        assert!(pending.take(Client::Pi, &id, now).is_some());
        assert!(pending.take(Client::Pi, &id, now).is_none(), "a yes is given once");
        let old = pending.hold(Client::Pi, preview(dir.path()), now);
        assert!(pending.take(Client::Pi, &old, now + PENDING_FOR).is_none(), "expired");
        assert!(pending.is_empty());
    }
}
