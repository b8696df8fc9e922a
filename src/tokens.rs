//! Local client tokens: what Codex (`env_key`) and pi (`apiKey`) send as `Authorization: Bearer`. Only
//! SHA-256 digests are held in memory for checking; comparison is constant-time.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::secrets::Secret;

/// The prefix of every token Keymux generates, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "km-";

/// The set of accepted tokens.
#[derive(Default, Clone)]
pub struct TokenSet {
    // One digest per configured token: bounded by what the user creates.
    digests: Vec<[u8; 32]>,
}

impl TokenSet {
    /// Accepts these tokens.
    pub fn new<'a>(tokens: impl IntoIterator<Item = &'a Secret>) -> Self {
        Self { digests: tokens.into_iter().map(|t| digest(t.expose())).collect() }
    }

    /// Whether no token is configured (then every request is refused).
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Checks a presented token and names the client it belongs to (a short digest, never the token),
    /// which scopes that client's affinity tables.
    pub fn client_of(&self, presented: &str) -> Option<ClientScope> {
        self.accepts(presented).then(|| ClientScope(hex::encode(&digest(presented)[..6])))
    }

    /// Checks a presented token.
    pub fn accepts(&self, presented: &str) -> bool {
        let d = digest(presented);
        // Check every digest, so timing does not reveal which one matched.
        self.digests.iter().fold(0u8, |hit, known| hit | known.ct_eq(&d).unwrap_u8()) == 1
    }
}

/// Which local client token a request came with (a short digest of it).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClientScope(pub String);

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
    fn parses_bearer() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
