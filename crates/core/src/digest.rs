//! Every keyed digest Keymux computes under the per-install secret, in one place: key fingerprints,
//! organization tags, marker MACs, and the digests that stand in for client session values.
//!
//! Each kind has its own domain string, so no digest of one kind can be mistaken for another, and none of
//! them reveals its input without the install secret (which lives in the keychain). Keeping them here
//! means there is exactly one way to compute each: the CLI's fingerprints and the metrics' fingerprints
//! cannot drift apart.

use std::fmt;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Serialize, Serializer};
use sha2::Sha256;

use crate::keys::KeyId;
use crate::secrets::Secret;

type HmacSha256 = Hmac<Sha256>;
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Length of an install tag (the start of every marker of one install).
pub const INSTALL_TAG_LEN: usize = 6;
/// Length of an organization tag.
pub const ORG_TAG_LEN: usize = 8;
/// Length of a marker MAC, in base64url characters (96 bits).
pub const MARKER_MAC_LEN: usize = 16;

/// A short keyed digest of an organization (or, for a key whose organization is unknown, of the key).
/// Markers carry it so a session survives the removal of the key that started it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrgTag(pub(crate) [u8; ORG_TAG_LEN]);

impl OrgTag {
    /// Stands for "the organization that made the request's unmarked encrypted content" in the rescued
    /// table: a session whose reasoning from before Keymux no organization could read keeps having it
    /// dropped. No real tag equals it (`~` is not base64url).
    pub const UNMARKED: Self = Self(*b"~unmarkd");

    /// The tag as text (base64url).
    pub fn as_str(&self) -> &str {
        // Built only from base64url output.
        std::str::from_utf8(&self.0).unwrap_or("????????")
    }

    /// The tag from its text, if it has the tag's shape.
    pub fn from_text(text: &[u8]) -> Option<Self> {
        let tag: [u8; ORG_TAG_LEN] = text.try_into().ok()?;
        tag.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_').then_some(Self(tag))
    }
}

impl fmt::Debug for OrgTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for OrgTag {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A keyed digest identifying a client session or an affinity signal (never the raw value).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey([u8; 16]);

impl SessionKey {
    /// A short form for display (the dashboard's session column): 8 hex digits of the keyed digest, which
    /// say nothing about the raw value without the install secret.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session:{}", self.short())
    }
}

/// The per-install secret, ready to key digests. It never prints itself.
#[derive(Clone)]
pub struct InstallKey {
    keyed: HmacSha256,
}

impl fmt::Debug for InstallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InstallKey(*****)")
    }
}

impl InstallKey {
    /// Keys digests with the install secret.
    pub fn new(install_secret: &Secret) -> Self {
        let keyed = <HmacSha256 as Mac>::new_from_slice(install_secret.expose().as_bytes())
            .expect("HMAC accepts keys of any length");
        Self { keyed }
    }

    fn mac(&self, domain: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(domain);
        mac
    }

    /// The tag every marker of this install starts with (after the version).
    pub fn install_tag(&self) -> [u8; INSTALL_TAG_LEN] {
        let digest = B64.encode(self.mac(b"keymux/install-tag/v1").finalize().into_bytes());
        let mut tag = [0u8; INSTALL_TAG_LEN];
        tag.copy_from_slice(&digest.as_bytes()[..INSTALL_TAG_LEN]);
        tag
    }

    /// The tag of an organization; a key whose organization is unknown is its own organization.
    pub fn org_tag(&self, org: Option<&str>, key: &KeyId) -> OrgTag {
        let mut mac = self.mac(b"keymux/org/v1\0");
        match org {
            Some(org) => {
                mac.update(b"org\0");
                mac.update(org.as_bytes());
            }
            None => {
                mac.update(b"key\0");
                mac.update(key.as_str().as_bytes());
            }
        }
        let digest = B64.encode(&mac.finalize().into_bytes()[..6]);
        let mut tag = [0u8; ORG_TAG_LEN];
        tag.copy_from_slice(&digest.as_bytes()[..ORG_TAG_LEN]);
        OrgTag(tag)
    }

    /// The MAC of one marker: its field's domain byte, the key id, the organization and the original value.
    pub fn marker_mac(&self, domain: u8, key: &str, org: OrgTag, original: &[u8]) -> [u8; MARKER_MAC_LEN] {
        let mut mac = self.mac(b"keymux/marker/v1\0");
        mac.update(&[domain]);
        mac.update(key.as_bytes());
        mac.update(&[0]);
        mac.update(&org.0);
        mac.update(original);
        let mut out = [0u8; MARKER_MAC_LEN];
        let written = B64.encode_slice(&mac.finalize().into_bytes()[..12], &mut out);
        debug_assert_eq!(written.ok(), Some(MARKER_MAC_LEN));
        out
    }

    /// A client-chosen session value (a `prompt_cache_key`) scoped by protocol: the session hints' key.
    pub fn session(&self, scope: &str, value: &str) -> SessionKey {
        let mut mac = self.mac(b"keymux/session/v1\0");
        mac.update(scope.as_bytes());
        mac.update(&[0]);
        mac.update(value.as_bytes());
        SessionKey(first_16(mac))
    }

    /// The soft-affinity table's key: `namespace` keeps explicit keys and prompt prefixes apart, `scope`
    /// (client, protocol, model, operation) keeps clients and endpoints apart. Every part is
    /// length-prefixed, so no two different inputs hash alike.
    pub fn affinity(&self, namespace: &str, scope: &[&str], value: &[u8]) -> SessionKey {
        let mut mac = self.mac(b"keymux/affinity/v1\0");
        for part in std::iter::once(namespace.as_bytes())
            .chain(scope.iter().map(|s| s.as_bytes()))
            .chain(std::iter::once(value))
        {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        SessionKey(first_16(mac))
    }

    /// A key's short fingerprint (8 hex digits): how listings and metrics name a key without revealing
    /// anything about its secret.
    pub fn fingerprint(&self, secret: &Secret) -> String {
        let mut mac = self.mac(b"keymux/fingerprint/v1\0");
        mac.update(secret.expose().as_bytes());
        hex::encode(&mac.finalize().into_bytes()[..4])
    }
}

fn first_16(mac: HmacSha256) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&mac.finalize().into_bytes()[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(s: &str) -> InstallKey {
        InstallKey::new(&Secret::new(s))
    }

    #[test]
    fn fingerprints_are_keyed_short_and_stable() {
        let key = Secret::new("sk-test-123");
        let a = install("install-a").fingerprint(&key);
        assert_eq!(a.len(), 8);
        assert_eq!(a, install("install-a").fingerprint(&key));
        assert_ne!(a, install("install-b").fingerprint(&key));
        // Pinned: a fingerprint shown yesterday names the same key today.
        assert_eq!(install("install-a").fingerprint(&Secret::new("sk-a1")), "cbb7cd4c");
    }

    #[test]
    fn every_kind_lives_in_its_own_domain() {
        let k = install("install-a");
        let id = KeyId::new("k_1");
        assert_ne!(k.org_tag(Some("k_1"), &id), k.org_tag(None, &id), "an org named like a key is not that key");
        assert_ne!(k.session("responses", "abc"), k.affinity("prompt_cache_key", &[], b"abc"));
        assert_ne!(k.affinity("a", &["bc"], b""), k.affinity("ab", &["c"], b""), "parts are length-prefixed");
        assert!(OrgTag::from_text(k.org_tag(None, &id).as_str().as_bytes()).is_some());
        assert!(OrgTag::from_text(b"short").is_none());
        assert!(!format!("{k:?}").contains("install-a"));
    }
}
