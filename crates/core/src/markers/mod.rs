//! Every marker format Keymux writes, and the only code that reads them.
//!
//! Org-bound state that leaves Keymux carries a marker naming the key that produced it, so the next
//! request that replays it can be routed to a key that can read it. Every marker is removed before a
//! request goes upstream.
//!
//! A marker (`MARK`) is ASCII from `[A-Za-z0-9_-]` and has this layout:
//!
//! ```text
//! "km1" | install tag (6) | key-id length (2 hex) | key id | org tag (8) | MAC (16)
//! ```
//!
//! * `encrypted_content` becomes `MARK + original` (OpenAI's values start with `gAAAAA`; no base64 value
//!   starts with `km1` followed by a valid MAC under this install's secret).
//! * ids of org-bound items keep their type prefix: `rs_68ab…` becomes `rs_` + `MARK` + `68ab…`.
//!
//! The MAC is over the field, the key id, the org tag and the original value, truncated to 96 bits:
//! HMAC-SHA256 under the per-install secret, or keyed BLAKE3 under a key derived from it. Both are
//! accepted when reading; a marker is written with the one this CPU computes faster (SHA-256 where the
//! CPU has SHA instructions, BLAKE3 elsewhere: `digest::MarkerMac`). The install tag tells this
//! install's markers from another install's: a foreign marker is stripped and the request routed
//! unpinned; a marker of this install that fails its MAC, or one that is cut short, is refused.
//!
//! Rooms:
//! * this file: the format (write, parse, verify one value);
//! * [`scan`]: the JSON byte scanner both directions use (where a key's string value starts and ends);
//! * `strip`: inbound, removing markers from request bodies (a byte scan, with a tree walk for bodies
//!   that spell keys with escapes);
//! * `tag`: outbound, splicing markers into answers (byte splicing, with a tree walk as the fallback);
//! * `rescue`: dropping the items of an organization no usable key can read.

use std::fmt;

use serde::Serialize;

pub use crate::digest::MarkerMac;
use crate::digest::{InstallKey, INSTALL_TAG_LEN, MARKER_MAC_LEN, ORG_TAG_LEN};
use crate::keys::KeyId;
use crate::secrets::Secret;

pub use crate::digest::{OrgTag, SessionKey};

mod rescue;
mod strip;
mod tag;

pub use rescue::has_unmarked_encrypted;
pub use strip::Stripped;
pub use tag::RawTag;

const VERSION: &[u8] = b"km1";
const LEN_LEN: usize = 2;
const FIXED_LEN: usize = VERSION.len() + INSTALL_TAG_LEN + LEN_LEN + ORG_TAG_LEN + MARKER_MAC_LEN;
const MAX_KEY_ID: usize = 64;
/// Most distinct pins reported for one request (a request naming more keys is refused anyway).
pub const MAX_PINS: usize = 16;

/// Which field a marker was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    /// `encrypted_content`.
    EncryptedContent,
    /// The `id` of an org-bound item.
    ItemId,
    /// A response id (`resp_…`): in `id`, in `previous_response_id` and in `/v1/responses/{id}` paths.
    /// Stored responses live with one key, so it binds to that key.
    ResponseId,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Self::EncryptedContent => "encrypted_content",
            Self::ItemId => "id",
            Self::ResponseId => "previous_response_id",
        }
    }

    fn domain(self) -> u8 {
        match self {
            Self::EncryptedContent => b'c',
            Self::ItemId => b'i',
            Self::ResponseId => b'r',
        }
    }
}

/// A key named by a valid marker of this install.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pin {
    /// The key that produced the value.
    pub key: KeyId,
    /// Its organization at that time.
    pub org: OrgTag,
    /// Where the marker was.
    pub field: Field,
}

/// A marker that must not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// Cut short or not in the marker format.
    #[error(
        "a Keymux marker in `{}` is truncated or malformed; the item was altered after Keymux sent it. \
         Replay the item exactly as it was received, or start a new session",
        .field.name()
    )]
    Malformed {
        /// The field.
        field: Field,
    },
    /// Well-formed, from this install, but its MAC does not match: altered or forged.
    #[error(
        "a Keymux marker in `{}` failed its authenticity check (the value was altered or forged), so \
         Keymux cannot tell which key may read it. Replay the item exactly as it was received, or start a \
         new session",
        .field.name()
    )]
    Forged {
        /// The field.
        field: Field,
    },
}

enum Parsed<'a> {
    Ours { key: &'a str, org: OrgTag, mac: &'a [u8], len: usize },
    Foreign { len: usize },
}

/// What reading one value found.
type Read<T> = Result<Option<(Option<Pin>, T)>, MarkerError>;

/// Writes and reads markers under one install secret.
#[derive(Clone)]
pub struct Markers {
    digest: InstallKey,
    install: [u8; INSTALL_TAG_LEN],
}

impl fmt::Debug for Markers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Markers(*****)")
    }
}

impl Markers {
    /// Markers keyed by the per-install secret.
    pub fn new(install_secret: &Secret) -> Self {
        Self::with_key(InstallKey::new(install_secret))
    }

    /// Markers keyed by an install key already made.
    pub fn with_key(digest: InstallKey) -> Self {
        Self { install: digest.install_tag(), digest }
    }

    /// The keyed digests of this install.
    pub fn digest(&self) -> &InstallKey {
        &self.digest
    }

    /// The tag of an organization; a key whose organization is unknown is its own organization.
    pub fn org_tag(&self, org: Option<&str>, key: &KeyId) -> OrgTag {
        self.digest.org_tag(org, key)
    }

    fn mark(&self, field: Field, key: &KeyId, org: OrgTag, original: &[u8], out: &mut String) {
        debug_assert!(KeyId::is_well_formed(key.as_str()));
        out.push_str("km1");
        out.push_str(std::str::from_utf8(&self.install).unwrap_or(""));
        push_hex_byte(out, key.as_str().len());
        out.push_str(key.as_str());
        out.push_str(org.as_str());
        let mac = self.digest.marker_mac(field.domain(), key.as_str(), org, original);
        out.push_str(std::str::from_utf8(&mac).unwrap_or(""));
    }

    fn marked(&self, field: Field, key: &KeyId, org: OrgTag, original: &[u8]) -> String {
        let mut mark = String::with_capacity(FIXED_LEN + key.as_str().len());
        self.mark(field, key, org, original, &mut mark);
        mark
    }

    /// Wraps an `encrypted_content` value. A value that already carries a marker is returned as it is.
    pub fn wrap_content(&self, key: &KeyId, org: OrgTag, content: &str) -> Option<String> {
        if !KeyId::is_well_formed(key.as_str()) || self.content_is_marked(content.as_bytes()) {
            return None;
        }
        let mut out = String::with_capacity(FIXED_LEN + key.as_str().len() + content.len());
        self.mark(Field::EncryptedContent, key, org, content.as_bytes(), &mut out);
        out.push_str(content);
        Some(out)
    }

    /// Tags an item id, keeping its type prefix (`rs_…`). `None` for ids with no `_`, a prefix strip
    /// would not recognise (so every marker written is one strip removes), ids already tagged, or keys
    /// whose id cannot travel in a marker.
    pub fn tag_id(&self, key: &KeyId, org: OrgTag, id: &str) -> Option<String> {
        let (prefix, rest) = id.split_once('_')?;
        if !is_type_prefix(prefix.as_bytes())
            || self.id_is_marked(prefix.as_bytes(), rest.as_bytes())
            || !KeyId::is_well_formed(key.as_str())
        {
            return None;
        }
        let mut out = String::with_capacity(id.len() + FIXED_LEN + key.as_str().len());
        out.push_str(prefix);
        out.push('_');
        self.mark(id_field(prefix.as_bytes()), key, org, id.as_bytes(), &mut out);
        out.push_str(rest);
        Some(out)
    }

    /// Whether an `encrypted_content` value already carries a valid marker of this install, and so is
    /// not wrapped again. Anything else that merely starts with `km1` (another install's marker, or
    /// text a provider happens to send) is wrapped like any value, so that strip gives it back whole.
    pub(crate) fn content_is_marked(&self, value: &[u8]) -> bool {
        value.starts_with(VERSION)
            && matches!(self.parse(value), Some(Parsed::Ours { key, org, mac, len })
                if self.verify(Field::EncryptedContent, key, org, mac, &value[len..]))
    }

    /// Like `content_is_marked`, for the part of an id after its type prefix.
    pub(crate) fn id_is_marked(&self, prefix: &[u8], rest: &[u8]) -> bool {
        if !rest.starts_with(VERSION) {
            return false;
        }
        let Some(Parsed::Ours { key, org, mac, len }) = self.parse(rest) else { return false };
        let mut original = Vec::with_capacity(prefix.len() + 1 + rest.len() - len);
        original.extend_from_slice(prefix);
        original.push(b'_');
        original.extend_from_slice(&rest[len..]);
        self.verify(id_field(prefix), key, org, mac, &original)
    }

    fn parse<'a>(&self, s: &'a [u8]) -> Option<Parsed<'a>> {
        if !s.starts_with(VERSION) || s.len() < FIXED_LEN {
            return None;
        }
        let install = &s[3..3 + INSTALL_TAG_LEN];
        let len_hex = &s[3 + INSTALL_TAG_LEN..3 + INSTALL_TAG_LEN + LEN_LEN];
        if !install.iter().all(|b| is_b64(*b)) || !len_hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let n = usize::from_str_radix(std::str::from_utf8(len_hex).ok()?, 16).ok()?;
        let len = FIXED_LEN + n;
        if n == 0 || n > MAX_KEY_ID || s.len() < len {
            return None;
        }
        let key_start = 3 + INSTALL_TAG_LEN + LEN_LEN;
        let key = &s[key_start..key_start + n];
        let org = &s[key_start + n..key_start + n + ORG_TAG_LEN];
        let mac = &s[key_start + n + ORG_TAG_LEN..len];
        if !key.iter().chain(mac).all(|b| is_b64(*b)) {
            return None;
        }
        let org = OrgTag::from_text(org)?;
        if install != self.install {
            return Some(Parsed::Foreign { len });
        }
        Some(Parsed::Ours { key: std::str::from_utf8(key).ok()?, org, mac, len })
    }

    /// Whether text that does not parse as a marker still starts like one of ours (a truncated marker).
    /// Ids are free-form, so an id that merely contains `km1` is left alone.
    fn claims_ours(&self, s: &[u8]) -> bool {
        s.len() >= VERSION.len() + INSTALL_TAG_LEN && s[VERSION.len()..VERSION.len() + INSTALL_TAG_LEN] == self.install
    }

    fn verify(&self, field: Field, key: &str, org: OrgTag, mac: &[u8], original: &[u8]) -> bool {
        self.digest.marker_mac_matches(field.domain(), key, org, original, mac)
    }

    /// Reads a wrapped `encrypted_content` value: `Ok(None)` when it carries no marker.
    pub fn unwrap_content<'a>(&self, value: &'a str) -> Read<&'a str> {
        let field = Field::EncryptedContent;
        if !value.as_bytes().starts_with(VERSION) {
            return Ok(None);
        }
        match self.parse(value.as_bytes()) {
            None => Err(MarkerError::Malformed { field }),
            Some(Parsed::Foreign { len }) => Ok(Some((None, &value[len..]))),
            Some(Parsed::Ours { key, org, mac, len }) => {
                let original = &value[len..];
                if self.verify(field, key, org, mac, original.as_bytes()) {
                    Ok(Some((Some(Pin { key: KeyId::new(key), org, field }), original)))
                } else {
                    Err(MarkerError::Forged { field })
                }
            }
        }
    }

    /// Reads a tagged id: `Ok(None)` when it carries no marker.
    pub fn untag_id(&self, value: &str) -> Read<String> {
        let Some((prefix, rest)) = value.split_once('_') else {
            return Ok(None);
        };
        let field = id_field(prefix.as_bytes());
        if !rest.as_bytes().starts_with(VERSION) {
            return Ok(None);
        }
        match self.parse(rest.as_bytes()) {
            None if !self.claims_ours(rest.as_bytes()) => Ok(None),
            None => Err(MarkerError::Malformed { field }),
            Some(Parsed::Foreign { len }) => Ok(Some((None, format!("{prefix}_{}", &rest[len..])))),
            Some(Parsed::Ours { key, org, mac, len }) => {
                let original = format!("{prefix}_{}", &rest[len..]);
                if self.verify(field, key, org, mac, original.as_bytes()) {
                    Ok(Some((Some(Pin { key: KeyId::new(key), org, field }), original)))
                } else {
                    Err(MarkerError::Forged { field })
                }
            }
        }
    }

    /// Whether a JSON text may hold something to tag: the cheap test that lets most streaming events
    /// pass through without being parsed. True when it holds `encrypted_content`, `"rs_`, `"cmp_` or
    /// `"resp_`: every one of them has an `_`, so one pass over the text's underscores (a few per
    /// event: `item_id`, `output_index`, `msg_…`) looks at each place they could be, where four
    /// substring searches would read the whole text four times.
    pub fn may_need_tagging(text: &[u8]) -> bool {
        memchr::memchr_iter(b'_', text).any(|at| {
            let before = &text[..at];
            before.ends_with(b"\"rs")
                || before.ends_with(b"\"cmp")
                || before.ends_with(b"\"resp")
                || (before.ends_with(b"encrypted") && text[at + 1..].starts_with(b"content"))
        })
    }
}

/// The field an id's marker is made for, by its type prefix.
fn id_field(prefix: &[u8]) -> Field {
    if prefix == b"resp" {
        Field::ResponseId
    } else {
        Field::ItemId
    }
}

/// Item ids whose items are bound to the organization that made them.
/// A type prefix as markers use one (`rs`, `cmp`, `resp`): 1 to 16 lowercase letters. Tagging and
/// the byte scan that strips share it.
fn is_type_prefix(prefix: &[u8]) -> bool {
    (1..=16).contains(&prefix.len()) && prefix.iter().all(u8::is_ascii_lowercase)
}

fn is_bound_id(id: &str) -> bool {
    id.starts_with("rs_") || id.starts_with("cmp_")
}

fn is_b64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Appends `len` (under 256: a key id's length) as two lowercase hex digits, as `{:02x}` would.
fn push_hex_byte(out: &mut String, len: usize) {
    let mut digits = [0u8; 2];
    let written = hex::encode_to_slice([u8::try_from(len).unwrap_or(u8::MAX)], &mut digits);
    debug_assert!(written.is_ok());
    out.push_str(std::str::from_utf8(&digits).unwrap_or("ff"));
}

#[cfg(test)]
mod tests;
