//! Local client tokens: what Codex (`env_key`) and pi (`apiKey`) send as `Authorization: Bearer`. Only
//! SHA-256 digests are held in memory for checking; comparison is constant-time.

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::secrets::Secret;

/// The prefix of every token Keymux generates, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "km-";
/// The shortest client token Keymux accepts: anything shorter could be guessed by any local process.
pub const MIN_TOKEN_LEN: usize = 24;
/// The pool a token is bound to unless the user binds it to one of theirs: the built-in pool that
/// holds every key (`pools::ALL`, the same). Declared with the tokens, so that what reads a request's
/// token scope (its facts) need not know the pools.
pub const ALL_POOL: &str = "all";

/// Checks a client token a user supplies (`KEYMUX_CLIENT_TOKEN`). The message never repeats it.
pub fn check_strength(token: &str) -> Result<(), String> {
    let distinct = token.chars().collect::<std::collections::BTreeSet<_>>().len();
    if token.len() < MIN_TOKEN_LEN || distinct < 8 {
        return Err(format!(
            "a client token must be at least {MIN_TOKEN_LEN} characters of a random value (for example \
             `openssl rand -hex 16`); any local process could guess a shorter one"
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a client token must not contain spaces or control characters".into());
    }
    Ok(())
}

/// One accepted token: its id, its name, its pool, and its digest (the token itself is never kept).
#[derive(Clone)]
struct Entry {
    id: String,
    name: String,
    pool: String,
    digest: [u8; 32],
    /// Unix milliseconds from which the token is refused (a login's access token); `None`: never.
    expires_ms: Option<u64>,
}

/// The set of accepted tokens. Replaced whole when a token is created or revoked.
#[derive(Default, Clone)]
pub struct TokenSet {
    // One entry per configured token: bounded by what the user creates.
    entries: Vec<Entry>,
}

impl TokenSet {
    /// Accepts these tokens (unnamed, in the pool `all`).
    pub fn new<'a>(tokens: impl IntoIterator<Item = &'a Secret>) -> Self {
        let entries = tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| Entry {
                id: format!("t{i}"),
                name: String::new(),
                pool: ALL_POOL.to_owned(),
                digest: digest(t.expose()),
                expires_ms: None,
            })
            .collect();
        Self { entries }
    }

    /// This set, and `token` under `id` and `name`, bound to `pool`.
    pub fn with(&self, id: &str, name: &str, pool: &str, token: &Secret) -> Self {
        self.with_entry(id, name, pool, digest(token.expose()), None)
    }

    /// This set, and `token` under `id` and `name`, bound to `pool`, refused from `expires_ms` (Unix
    /// milliseconds) on: a login's access token, which takes the place of the one `id` had.
    pub fn with_expiring(&self, id: &str, name: &str, pool: &str, token: &Secret, expires_ms: u64) -> Self {
        self.with_entry(id, name, pool, digest(token.expose()), Some(expires_ms))
    }

    /// This set, and `id` listed under `name` and `pool` with no token it accepts: a login whose access
    /// token is gone (the gateway restarted) until its client refreshes it.
    pub fn awaiting(&self, id: &str, name: &str, pool: &str) -> Self {
        self.with_entry(id, name, pool, [0; 32], Some(0))
    }

    fn with_entry(&self, id: &str, name: &str, pool: &str, digest: [u8; 32], expires_ms: Option<u64>) -> Self {
        let mut entries = self.entries.clone();
        entries.retain(|e| e.id != id);
        entries.push(Entry { id: id.to_owned(), name: name.to_owned(), pool: pool.to_owned(), digest, expires_ms });
        Self { entries }
    }

    /// This set, with token `id` bound to `pool`.
    pub fn moved(&self, id: &str, pool: &str) -> Self {
        let mut entries = self.entries.clone();
        entries.iter_mut().filter(|e| e.id == id).for_each(|e| pool.clone_into(&mut e.pool));
        Self { entries }
    }

    /// This set without token `id`.
    pub fn without(&self, id: &str) -> Self {
        Self { entries: self.entries.iter().filter(|e| e.id != id).cloned().collect() }
    }

    /// The ids and names of the tokens (never the tokens).
    pub fn names(&self) -> Vec<(String, String)> {
        self.entries.iter().map(|e| (e.id.clone(), e.name.clone())).collect()
    }

    /// Whether no token is configured (then every request is refused).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The pools tokens are bound to, by token id.
    pub fn pools(&self) -> Vec<(String, String)> {
        self.entries.iter().map(|e| (e.id.clone(), e.pool.clone())).collect()
    }

    /// Checks a presented token at `now_ms` (Unix milliseconds; an expired login token is refused) and
    /// names the client it belongs to: a short digest (never the token), which scopes that client's
    /// affinity tables, its name and its pool.
    pub fn client_of(&self, presented: &str, now_ms: u64) -> Option<ClientScope> {
        let d = digest(presented);
        // Check every digest, so timing does not reveal which one matched.
        let (mut index, mut any) = (0u32, subtle::Choice::from(0));
        for (i, known) in self.entries.iter().enumerate() {
            let hit = known.digest.ct_eq(&d);
            index.conditional_assign(&u32::try_from(i).unwrap_or(u32::MAX), hit);
            any |= hit;
        }
        let entry = bool::from(any).then(|| &self.entries[index as usize])?;
        if entry.expires_ms.is_some_and(|at| at <= now_ms) {
            return None;
        }
        Some(ClientScope { tag: hex::encode(&d[..6]), token: entry.name.clone(), pool: entry.pool.clone() })
    }

    /// Checks a presented token, whether or not it expired (a login's access token is a client token
    /// all the same, never a control credential).
    pub fn accepts(&self, presented: &str) -> bool {
        self.client_of(presented, 0).is_some()
    }
}

/// Which local client token a request came with: a short digest of it (never the token), its name and
/// the pool it is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientScope {
    /// A short digest of the token: scopes the client's affinity digests.
    pub tag: String,
    /// The token's name (empty for `KEYMUX_CLIENT_TOKEN`).
    pub token: String,
    /// The pool its requests may reach.
    pub pool: String,
}

impl Default for ClientScope {
    fn default() -> Self {
        Self { tag: String::new(), token: String::new(), pool: ALL_POOL.to_owned() }
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Extracts the bearer token from an `Authorization` header value.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_known_tokens() {
        let set = TokenSet::new(&[Secret::new("km-one"), Secret::new("km-two")]);
        assert!(set.accepts("km-one"));
        assert!(set.accepts("km-two"));
        assert!(!set.accepts("km-three"));
        assert!(!set.accepts(""));
        assert!(!TokenSet::default().accepts("km-one"));
    }

    #[test]
    fn tokens_come_and_go_without_a_restart() {
        let set = TokenSet::default().with("t_1", "codex", "all", &Secret::new("km-one-aaaaaaaaaaaaaaaaaaaaaaaa"));
        assert!(set.accepts("km-one-aaaaaaaaaaaaaaaaaaaaaaaa"));
        let set = set.with("t_2", "pi", "work", &Secret::new("km-two-bbbbbbbbbbbbbbbbbbbbbbbb"));
        assert_eq!(set.names().len(), 2);
        let set = set.without("t_1");
        assert!(!set.accepts("km-one-aaaaaaaaaaaaaaaaaaaaaaaa"), "revoked at once");
        assert!(set.accepts("km-two-bbbbbbbbbbbbbbbbbbbbbbbb"));
        let pi = set.client_of("km-two-bbbbbbbbbbbbbbbbbbbbbbbb", 0).expect("accepted");
        assert_eq!((pi.token.as_str(), pi.pool.as_str()), ("pi", "work"), "a token carries its pool");
        let moved = set.moved("t_2", "personal").client_of("km-two-bbbbbbbbbbbbbbbbbbbbbbbb", 0).expect("accepted");
        assert_eq!(moved.pool, "personal");
    }

    #[test]
    fn a_login_token_works_until_it_expires_and_its_next_one_takes_its_place() {
        let one = Secret::new("km-login-one-aaaaaaaaaaaaaaaaaaaa");
        let set = TokenSet::default().with_expiring("t_l", "codex-login", "work", &one, 1_000);
        assert_eq!(set.client_of(one.expose(), 999).map(|c| c.pool), Some("work".to_owned()));
        assert!(set.client_of(one.expose(), 1_000).is_none(), "refused from its expiry on");
        let two = Secret::new("km-login-two-bbbbbbbbbbbbbbbbbbbb");
        let set = set.with_expiring("t_l", "codex-login", "work", &two, 5_000);
        assert!(set.client_of(one.expose(), 0).is_none(), "the refreshed token replaces the old one");
        assert!(set.client_of(two.expose(), 4_999).is_some());
        let waiting = set.awaiting("t_l", "codex-login", "work");
        assert_eq!(waiting.names().len(), 1, "still listed");
        assert!(waiting.client_of(two.expose(), 0).is_none() && waiting.client_of("", 0).is_none());
    }

    #[test]
    fn weak_tokens_are_refused_without_being_repeated() {
        for weak in ["q1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "short-token-123"] {
            let message = check_strength(weak).expect_err("weak");
            assert!(!message.contains(weak), "{message}");
        }
        assert!(check_strength("km-test-local-token-4d2c7a91e0b35f68").is_ok());
    }

    #[test]
    fn parses_bearer() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
