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
    /// Keys the BLAKE3 marker MACs, derived from the install secret under its own domain.
    blake3: blake3::Hasher,
    /// The marker MAC this install writes.
    written: MarkerMac,
}

/// The two MACs a marker may carry, over the same parts (its field's domain byte, the key id, the
/// organization tag and the original value), truncated to 96 bits. Both are accepted when reading;
/// markers are written with the one this CPU computes faster. A marker's MAC covers the whole
/// `encrypted_content` of every reasoning item a session replays, so this is the one digest whose input
/// grows with the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerMac {
    /// HMAC-SHA256 under the install secret: the faster on CPUs with SHA instructions (x86's SHA
    /// extensions, ARMv8's SHA2), and what every marker written before BLAKE3 carries.
    Sha256,
    /// Keyed BLAKE3: several times faster than SHA-256 in software, on CPUs without those instructions.
    Blake3,
}

impl MarkerMac {
    /// The faster of the two on the CPU this runs on.
    pub fn for_this_cpu() -> Self {
        if sha_in_hardware() {
            Self::Sha256
        } else {
            Self::Blake3
        }
    }

    fn other(self) -> Self {
        match self {
            Self::Sha256 => Self::Blake3,
            Self::Blake3 => Self::Sha256,
        }
    }
}

/// Whether this CPU computes SHA-256 in hardware (what the `sha2` crate then uses).
fn sha_in_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sha") && std::arch::is_x86_feature_detected!("sse4.1")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("sha2")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

impl fmt::Debug for InstallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InstallKey(*****)")
    }
}

impl InstallKey {
    /// Keys digests with the install secret.
    pub fn new(install_secret: &Secret) -> Self {
        Self::writing(install_secret, MarkerMac::for_this_cpu())
    }

    /// Keys digests with the install secret; markers are written with `written`.
    pub fn writing(install_secret: &Secret, written: MarkerMac) -> Self {
        let keyed = <HmacSha256 as Mac>::new_from_slice(install_secret.expose().as_bytes())
            .expect("HMAC accepts keys of any length");
        let mut mac = keyed.clone();
        mac.update(b"keymux/marker-key/v2\0");
        let blake3 = blake3::Hasher::new_keyed(&mac.finalize().into_bytes().into());
        Self { keyed, blake3, written }
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

    /// The MAC of one marker (see [`MarkerMac`]), as this install writes it.
    pub fn marker_mac(&self, domain: u8, key: &str, org: OrgTag, original: &[u8]) -> [u8; MARKER_MAC_LEN] {
        self.marker_mac_as(self.written, domain, key, org, original)
    }

    /// Whether `mac` is the MAC of a marker over these parts, under either [`MarkerMac`] (the one this
    /// install writes first). Compared in constant time.
    pub fn marker_mac_matches(&self, domain: u8, key: &str, org: OrgTag, original: &[u8], mac: &[u8]) -> bool {
        use subtle::ConstantTimeEq as _;
        [self.written, self.written.other()]
            .into_iter()
            .any(|kind| bool::from(self.marker_mac_as(kind, domain, key, org, original).ct_eq(mac)))
    }

    /// The MAC of one marker under `kind`.
    pub fn marker_mac_as(
        &self,
        kind: MarkerMac,
        domain: u8,
        key: &str,
        org: OrgTag,
        original: &[u8],
    ) -> [u8; MARKER_MAC_LEN] {
        let parts: [&[u8]; 5] = [&[domain], key.as_bytes(), &[0], &org.0, original];
        match kind {
            MarkerMac::Sha256 => {
                let mut mac = self.mac(b"keymux/marker/v1\0");
                parts.iter().for_each(|part| mac.update(part));
                marker_text(&mac.finalize().into_bytes()[..12])
            }
            MarkerMac::Blake3 => {
                let mut mac = self.blake3.clone();
                parts.iter().for_each(|part| {
                    mac.update(part);
                });
                marker_text(&mac.finalize().as_bytes()[..12])
            }
        }
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

/// 96 bits of a MAC as a marker carries them: 16 base64url characters.
fn marker_text(mac: &[u8]) -> [u8; MARKER_MAC_LEN] {
    let mut out = [0u8; MARKER_MAC_LEN];
    let written = B64.encode_slice(mac, &mut out);
    debug_assert_eq!(written.ok(), Some(MARKER_MAC_LEN));
    out
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
