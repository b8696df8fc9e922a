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
//! The MAC is HMAC-SHA256 under the per-install secret over the field, the key id, the org tag and the
//! original value, truncated to 96 bits. The install tag tells this install's markers from another
//! install's: a foreign marker is stripped and the request routed unpinned; a marker of this install
//! that fails its MAC, or one that is cut short, is refused.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Serialize, Serializer};
use serde_json::Value;
use sha2::Sha256;

use crate::keys::KeyId;
use crate::secrets::Secret;

const VERSION: &[u8] = b"km1";
const INSTALL_LEN: usize = 6;
const LEN_LEN: usize = 2;
const ORG_LEN: usize = 8;
const MAC_LEN: usize = 16;
const FIXED_LEN: usize = VERSION.len() + INSTALL_LEN + LEN_LEN + ORG_LEN + MAC_LEN;
const MAX_KEY_ID: usize = 64;
/// Most distinct pins reported for one request (a request naming more keys is refused anyway).
pub const MAX_PINS: usize = 16;

type HmacSha256 = Hmac<Sha256>;
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A short keyed digest of an organization (or, for a key whose organization is unknown, of the key).
/// Markers carry it so a session survives the removal of the key that started it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrgTag([u8; ORG_LEN]);

impl OrgTag {
    fn as_str(&self) -> &str {
        // Built only from base64url output.
        std::str::from_utf8(&self.0).unwrap_or("????????")
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

/// A keyed digest identifying a client session (never the raw value).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey([u8; 16]);

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session:{}", hex::encode(&self.0[..4]))
    }
}

/// Which field a marker was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

/// A request body with every marker removed.
#[derive(Debug)]
pub struct Stripped<'a> {
    /// The body to send upstream.
    pub body: Cow<'a, [u8]>,
    /// Distinct (key, org) pairs named by valid markers, in order of appearance (at most `MAX_PINS`).
    pub pins: Vec<Pin>,
    /// Markers of another install that were removed without routing on them.
    pub foreign: usize,
    /// Markers of this install that were removed.
    pub removed: usize,
}

enum Parsed<'a> {
    Ours { key: &'a str, org: OrgTag, mac: &'a [u8], len: usize },
    Foreign { len: usize },
}

/// Writes and reads markers under one install secret.
#[derive(Clone)]
pub struct Markers {
    keyed: HmacSha256,
    install: [u8; INSTALL_LEN],
}

impl fmt::Debug for Markers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Markers(*****)")
    }
}

impl Markers {
    /// Markers keyed by the per-install secret.
    pub fn new(install_secret: &Secret) -> Self {
        let keyed = <HmacSha256 as Mac>::new_from_slice(install_secret.expose().as_bytes())
            .expect("HMAC accepts keys of any length");
        let mut mac = keyed.clone();
        mac.update(b"keymux/install-tag/v1");
        let digest = B64.encode(mac.finalize().into_bytes());
        let mut install = [0u8; INSTALL_LEN];
        install.copy_from_slice(&digest.as_bytes()[..INSTALL_LEN]);
        Self { keyed, install }
    }

    /// The tag of an organization; a key whose organization is unknown is its own organization.
    pub fn org_tag(&self, org: Option<&str>, key: &KeyId) -> OrgTag {
        let mut mac = self.keyed.clone();
        match org {
            Some(org) => {
                mac.update(b"keymux/org/v1\0org\0");
                mac.update(org.as_bytes());
            }
            None => {
                mac.update(b"keymux/org/v1\0key\0");
                mac.update(key.as_str().as_bytes());
            }
        }
        let digest = B64.encode(&mac.finalize().into_bytes()[..6]);
        let mut tag = [0u8; ORG_LEN];
        tag.copy_from_slice(&digest.as_bytes()[..ORG_LEN]);
        OrgTag(tag)
    }

    fn mac(&self, field: Field, key: &str, org: OrgTag, original: &[u8]) -> [u8; MAC_LEN] {
        let mut mac = self.keyed.clone();
        mac.update(b"keymux/marker/v1\0");
        mac.update(&[field.domain()]);
        mac.update(key.as_bytes());
        mac.update(&[0]);
        mac.update(&org.0);
        mac.update(original);
        let digest = B64.encode(&mac.finalize().into_bytes()[..12]);
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(digest.as_bytes());
        out
    }

    fn mark(&self, field: Field, key: &KeyId, org: OrgTag, original: &[u8], out: &mut String) {
        debug_assert!(KeyId::is_well_formed(key.as_str()));
        out.push_str("km1");
        out.push_str(std::str::from_utf8(&self.install).unwrap_or(""));
        out.push_str(&format!("{:02x}", key.as_str().len()));
        out.push_str(key.as_str());
        out.push_str(org.as_str());
        let mac = self.mac(field, key.as_str(), org, original);
        out.push_str(std::str::from_utf8(&mac).unwrap_or(""));
    }

    /// A keyed digest of a client-chosen session value (a `prompt_cache_key`), scoped by `scope`. The
    /// raw value is never kept; only this digest is.
    pub fn session_digest(&self, scope: &str, value: &str) -> SessionKey {
        let mut mac = self.keyed.clone();
        mac.update(b"keymux/session/v1\0");
        mac.update(scope.as_bytes());
        mac.update(&[0]);
        mac.update(value.as_bytes());
        let mut out = [0u8; 16];
        out.copy_from_slice(&mac.finalize().into_bytes()[..16]);
        SessionKey(out)
    }

    /// A keyed digest for the soft-affinity table: `namespace` keeps explicit keys and prompt prefixes
    /// apart, `scope` (client, protocol, model, operation) keeps clients and endpoints apart. Every part
    /// is length-prefixed, so no two different inputs hash alike. Only the digest is ever kept.
    pub fn affinity_digest(&self, namespace: &str, scope: &[&str], value: &[u8]) -> SessionKey {
        let mut mac = self.keyed.clone();
        mac.update(b"keymux/affinity/v1\0");
        for part in std::iter::once(namespace.as_bytes())
            .chain(scope.iter().map(|s| s.as_bytes()))
            .chain(std::iter::once(value))
        {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&mac.finalize().into_bytes()[..16]);
        SessionKey(out)
    }

    /// A key's short fingerprint: the same value as `keys::fingerprint` under this install's secret.
    pub fn key_fingerprint(&self, secret: &Secret) -> String {
        let mut mac = self.keyed.clone();
        mac.update(b"keymux/fingerprint/v1\0");
        mac.update(secret.expose().as_bytes());
        hex::encode(&mac.finalize().into_bytes()[..4])
    }

    /// Wraps an `encrypted_content` value. A value that already carries a marker is returned as it is.
    pub fn wrap_content(&self, key: &KeyId, org: OrgTag, content: &str) -> Option<String> {
        if !KeyId::is_well_formed(key.as_str()) || content.as_bytes().starts_with(VERSION) {
            return None;
        }
        let mut out = String::with_capacity(FIXED_LEN + key.as_str().len() + content.len());
        self.mark(Field::EncryptedContent, key, org, content.as_bytes(), &mut out);
        out.push_str(content);
        Some(out)
    }

    /// Tags an item id, keeping its type prefix (`rs_…`). `None` for ids with no `_`, ids already
    /// tagged, or keys whose id cannot travel in a marker.
    pub fn tag_id(&self, key: &KeyId, org: OrgTag, id: &str) -> Option<String> {
        let (prefix, rest) = id.split_once('_')?;
        if prefix.is_empty() || rest.as_bytes().starts_with(VERSION) || !KeyId::is_well_formed(key.as_str()) {
            return None;
        }
        let mut out = String::with_capacity(id.len() + FIXED_LEN + key.as_str().len());
        out.push_str(prefix);
        out.push('_');
        self.mark(id_field(prefix.as_bytes()), key, org, id.as_bytes(), &mut out);
        out.push_str(rest);
        Some(out)
    }

    fn parse<'a>(&self, s: &'a [u8]) -> Option<Parsed<'a>> {
        if !s.starts_with(VERSION) || s.len() < FIXED_LEN {
            return None;
        }
        let install = &s[3..3 + INSTALL_LEN];
        let len_hex = &s[3 + INSTALL_LEN..3 + INSTALL_LEN + LEN_LEN];
        if !install.iter().all(|b| is_b64(*b)) || !len_hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let n = usize::from_str_radix(std::str::from_utf8(len_hex).ok()?, 16).ok()?;
        let len = FIXED_LEN + n;
        if n == 0 || n > MAX_KEY_ID || s.len() < len {
            return None;
        }
        let key_start = 3 + INSTALL_LEN + LEN_LEN;
        let key = &s[key_start..key_start + n];
        let org = &s[key_start + n..key_start + n + ORG_LEN];
        let mac = &s[key_start + n + ORG_LEN..len];
        if !key.iter().chain(org).chain(mac).all(|b| is_b64(*b)) {
            return None;
        }
        if install != self.install {
            return Some(Parsed::Foreign { len });
        }
        let mut tag = [0u8; ORG_LEN];
        tag.copy_from_slice(org);
        Some(Parsed::Ours { key: std::str::from_utf8(key).ok()?, org: OrgTag(tag), mac, len })
    }

    /// Whether text that does not parse as a marker still starts like one of ours (a truncated marker).
    /// Ids are free-form, so an id that merely contains `km1` is left alone.
    fn claims_ours(&self, s: &[u8]) -> bool {
        s.len() >= VERSION.len() + INSTALL_LEN && s[VERSION.len()..VERSION.len() + INSTALL_LEN] == self.install
    }

    fn verify(&self, field: Field, key: &str, org: OrgTag, mac: &[u8], original: &[u8]) -> bool {
        use subtle::ConstantTimeEq as _;
        self.mac(field, key, org, original).ct_eq(mac).into()
    }

    /// Reads a wrapped `encrypted_content` value: `Ok(None)` when it carries no marker.
    pub fn unwrap_content<'a>(&self, value: &'a str) -> Result<Option<(Option<Pin>, &'a str)>, MarkerError> {
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
    pub fn untag_id(&self, value: &str) -> Result<Option<(Option<Pin>, String)>, MarkerError> {
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

    /// Removes every marker from a JSON request body in one pass over its bytes, without parsing it into
    /// a tree. Markers are recognised only where they can be: at the start of a JSON string that is the
    /// value of an `encrypted_content` key, or right after the type prefix of an `id` value. Text inside
    /// other strings is never touched (its quotes are escaped, so it cannot match).
    pub fn strip<'a>(&self, body: &'a [u8]) -> Result<Stripped<'a>, MarkerError> {
        let mut out: Option<Vec<u8>> = None;
        let mut cursor = 0;
        let mut stripped = Stripped { body: Cow::Borrowed(body), pins: Vec::new(), foreign: 0, removed: 0 };
        for at in memchr::memmem::find_iter(body, VERSION) {
            if at < cursor {
                continue;
            }
            let Some((field, value_start)) = context(body, at) else {
                continue;
            };
            let Some(value_end) = string_end(body, at) else {
                continue;
            };
            let len = match self.parse(&body[at..value_end]) {
                None if field != Field::EncryptedContent && !self.claims_ours(&body[at..value_end]) => continue,
                None => return Err(MarkerError::Malformed { field }),
                Some(Parsed::Foreign { len }) => {
                    stripped.foreign += 1;
                    len
                }
                Some(Parsed::Ours { key, org, mac, len }) => {
                    let rest = &body[at + len..value_end];
                    let original: Cow<'_, [u8]> = match field {
                        Field::EncryptedContent => json_string_bytes(rest),
                        Field::ItemId | Field::ResponseId => {
                            let mut id = body[value_start..at].to_vec();
                            id.extend_from_slice(&json_string_bytes(rest));
                            Cow::Owned(id)
                        }
                    };
                    if !self.verify(field, key, org, mac, &original) {
                        return Err(MarkerError::Forged { field });
                    }
                    stripped.removed += 1;
                    let pin = Pin { key: KeyId::new(key), org, field };
                    if stripped.pins.len() < MAX_PINS
                        && !stripped.pins.iter().any(|p| p.key == pin.key && p.org == pin.org)
                    {
                        stripped.pins.push(pin);
                    }
                    len
                }
            };
            let buf = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
            buf.extend_from_slice(&body[cursor..at]);
            cursor = at + len;
        }
        if let Some(mut buf) = out {
            buf.extend_from_slice(&body[cursor..]);
            stripped.body = Cow::Owned(buf);
        }
        Ok(stripped)
    }

    /// Tags a JSON text by splicing markers into its bytes, without parsing it into a tree: every
    /// `encrypted_content` string value, and every `id` / `item_id` whose value has an org-bound type
    /// prefix (`rs_`, `cmp_`). Gives the same result as `tag_tree` whenever every item that carries
    /// encrypted content has an org-bound id; otherwise it answers `NeedsTree` and the caller uses
    /// `tag_tree` (future item types, items without ids).
    pub fn tag_raw(&self, text: &[u8], key: &KeyId, org: OrgTag) -> RawTag {
        if !KeyId::is_well_formed(key.as_str()) {
            return RawTag::Unchanged;
        }
        let mut inserts: Vec<(usize, String)> = Vec::new();
        let mut contents = 0usize;
        let mut bound_ids = 0usize;
        for at in memchr::memmem::find_iter(text, b"\"encrypted_content\"") {
            let Some(start) = value_start(text, at, b"encrypted_content".len()) else {
                continue;
            };
            let Some(end) = string_end(text, start) else {
                return RawTag::NeedsTree;
            };
            contents += 1;
            let value = &text[start..end];
            if value.starts_with(VERSION) {
                continue;
            }
            let mut mark = String::with_capacity(FIXED_LEN + key.as_str().len());
            self.mark(Field::EncryptedContent, key, org, &json_string_bytes(value), &mut mark);
            inserts.push((start, mark));
        }
        for needle in [&b"\"id\""[..], &b"\"item_id\""[..], &b"\"previous_response_id\""[..]] {
            for at in memchr::memmem::find_iter(text, needle) {
                let Some(start) = value_start(text, at, needle.len() - 2) else {
                    continue;
                };
                let Some(end) = string_end(text, start) else {
                    return RawTag::NeedsTree;
                };
                let value = &text[start..end];
                let Some(split) = value.iter().position(|b| *b == b'_') else {
                    continue;
                };
                let prefix = &value[..split];
                let wanted = match needle {
                    b"\"id\"" => matches!(prefix, b"rs" | b"cmp" | b"resp"),
                    b"\"item_id\"" => matches!(prefix, b"rs" | b"cmp"),
                    _ => prefix == b"resp",
                };
                if !wanted {
                    continue;
                }
                if needle == b"\"id\"" && prefix != b"resp" {
                    bound_ids += 1;
                }
                if value[split + 1..].starts_with(VERSION) {
                    continue;
                }
                let mut mark = String::with_capacity(FIXED_LEN + key.as_str().len());
                self.mark(id_field(prefix), key, org, &json_string_bytes(value), &mut mark);
                inserts.push((start + split + 1, mark));
            }
        }
        if contents > bound_ids {
            return RawTag::NeedsTree;
        }
        if inserts.is_empty() {
            return RawTag::Unchanged;
        }
        inserts.sort_by_key(|(at, _)| *at);
        let mut out = Vec::with_capacity(text.len() + inserts.iter().map(|(_, m)| m.len()).sum::<usize>());
        let mut cursor = 0;
        for (at, mark) in inserts {
            out.extend_from_slice(&text[cursor..at]);
            out.extend_from_slice(mark.as_bytes());
            cursor = at;
        }
        out.extend_from_slice(&text[cursor..]);
        RawTag::Tagged(out)
    }

    /// Whether a JSON text may hold something to tag: the cheap test that lets most streaming events
    /// pass through without being parsed.
    pub fn may_need_tagging(text: &[u8]) -> bool {
        const NEEDLES: [&[u8]; 4] = [b"encrypted_content", b"\"rs_", b"\"cmp_", b"\"resp_"];
        NEEDLES.iter().any(|n| memchr::memmem::find(text, n).is_some())
    }

    /// Tags every org-bound value in a response JSON tree for `key`: `encrypted_content` anywhere, the
    /// `id` of any item that carries encrypted content or is of an org-bound kind (`rs_`, `cmp_`), and
    /// `item_id` references to such items. Returns how many values were tagged.
    pub fn tag_tree(&self, value: &mut Value, key: &KeyId, org: OrgTag) -> usize {
        match value {
            Value::Object(map) => {
                let mut tagged = 0;
                let mut bound = false;
                if let Some(Value::String(content)) = map.get_mut("encrypted_content") {
                    bound = true;
                    if let Some(wrapped) = self.wrap_content(key, org, content) {
                        *content = wrapped;
                        tagged += 1;
                    }
                }
                if let Some(Value::String(id)) = map.get_mut("id") {
                    if bound || is_bound_id(id) || id.starts_with("resp_") {
                        if let Some(t) = self.tag_id(key, org, id) {
                            *id = t;
                            tagged += 1;
                        }
                    }
                }
                if let Some(Value::String(id)) = map.get_mut("previous_response_id") {
                    if id.starts_with("resp_") {
                        if let Some(t) = self.tag_id(key, org, id) {
                            *id = t;
                            tagged += 1;
                        }
                    }
                }
                if let Some(Value::String(id)) = map.get_mut("item_id") {
                    if is_bound_id(id) {
                        if let Some(t) = self.tag_id(key, org, id) {
                            *id = t;
                            tagged += 1;
                        }
                    }
                }
                for (name, child) in map.iter_mut() {
                    if matches!(child, Value::Object(_) | Value::Array(_)) && name != "encrypted_content" {
                        tagged += self.tag_tree(child, key, org);
                    }
                }
                tagged
            }
            Value::Array(items) => items.iter_mut().map(|v| self.tag_tree(v, key, org)).sum(),
            _ => 0,
        }
    }

    /// Whether a JSON value carries a valid marker of this install naming `org` (used by rescue to drop
    /// items no usable key can read).
    pub fn names_org(&self, value: &Value, org: OrgTag) -> bool {
        let Value::Object(map) = value else {
            return false;
        };
        let by_content = match map.get("encrypted_content") {
            Some(Value::String(s)) => {
                matches!(self.unwrap_content(s), Ok(Some((Some(pin), _))) if pin.org == org)
            }
            _ => false,
        };
        by_content
            || match map.get("id") {
                Some(Value::String(s)) => {
                    matches!(self.untag_id(s), Ok(Some((Some(pin), _))) if pin.org == org)
                }
                _ => false,
            }
    }
}

impl Markers {
    /// Rescue: removes from a request body every array element that carries a valid marker naming one
    /// of `orgs` (reasoning and compaction items in `input`, entries of a Chat message's `reasoning_items`).
    /// Returns the new body and how many elements were dropped, or `None` if the body is not JSON.
    pub fn drop_org_items(&self, body: &[u8], orgs: &[OrgTag]) -> Option<(Vec<u8>, usize)> {
        let mut value: Value = serde_json::from_slice(body).ok()?;
        let dropped = self.drop_in(&mut value, orgs);
        Some((serde_json::to_vec(&value).ok()?, dropped))
    }

    fn drop_in(&self, value: &mut Value, orgs: &[OrgTag]) -> usize {
        match value {
            Value::Array(items) => {
                let before = items.len();
                items.retain(|item| !orgs.iter().any(|org| self.names_org(item, *org)));
                let mut dropped = before - items.len();
                for item in items.iter_mut() {
                    dropped += self.drop_in(item, orgs);
                }
                dropped
            }
            Value::Object(map) => map.values_mut().map(|v| self.drop_in(v, orgs)).sum(),
            _ => 0,
        }
    }
}

/// The result of `Markers::tag_raw`.
#[derive(Debug, PartialEq, Eq)]
pub enum RawTag {
    /// Markers were spliced in.
    Tagged(Vec<u8>),
    /// Nothing needed a marker.
    Unchanged,
    /// The text holds an encrypted item without an org-bound id: tag the parsed tree instead.
    NeedsTree,
}

/// For a key string starting at `at` (its opening quote) of `key_len` bytes, the index where its string
/// value's text starts: `"key" ws : ws "` and the key itself preceded by `{` or `,`. `None` when this is
/// not an object key with a string value (or sits inside a string, whose quotes are escaped).
fn value_start(text: &[u8], at: usize, key_len: usize) -> Option<usize> {
    let mut before = at;
    while before > 0 && matches!(text[before - 1], b' ' | b'\t' | b'\n' | b'\r') {
        before -= 1;
    }
    if before == 0 || !matches!(text[before - 1], b'{' | b',') {
        return None;
    }
    let mut i = at + key_len + 2;
    let skip = |mut i: usize| {
        while i < text.len() && matches!(text[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    };
    i = skip(i);
    if text.get(i) != Some(&b':') {
        return None;
    }
    i = skip(i + 1);
    (text.get(i) == Some(&b'"')).then_some(i + 1)
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
fn is_bound_id(id: &str) -> bool {
    id.starts_with("rs_") || id.starts_with("cmp_")
}

fn is_b64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Where a `km1` at `at` sits: right after the opening quote of an `encrypted_content` value, or right
/// after `"prefix_` of an `id` value. Returns the field and where the JSON string's text starts.
fn context(body: &[u8], at: usize) -> Option<(Field, usize)> {
    if at >= 1 && body[at - 1] == b'"' && preceded_by_key(body, at - 1, b"encrypted_content") {
        return Some((Field::EncryptedContent, at));
    }
    // `"id":"rs_km1…`: walk back over the type prefix.
    if at >= 2 && body[at - 1] == b'_' {
        let mut start = at - 1;
        while start > 0 && body[start - 1].is_ascii_lowercase() && at - start <= 16 {
            start -= 1;
        }
        if start < at - 1 && start >= 1 && body[start - 1] == b'"' {
            let field = id_field(&body[start..at - 1]);
            if preceded_by_key(body, start - 1, b"id")
                || (field == Field::ResponseId && preceded_by_key(body, start - 1, b"previous_response_id"))
            {
                return Some((field, start));
            }
        }
    }
    None
}

/// Whether the JSON string whose opening quote is at `quote` is the value of the object key `key`:
/// `[{,] ws "key" ws : ws "`. In valid JSON this cannot match inside a string, whose quotes are escaped.
fn preceded_by_key(body: &[u8], quote: usize, key: &[u8]) -> bool {
    let mut i = quote;
    let skip_ws = |mut i: usize| {
        while i > 0 && matches!(body[i - 1], b' ' | b'\t' | b'\n' | b'\r') {
            i -= 1;
        }
        i
    };
    i = skip_ws(i);
    if i == 0 || body[i - 1] != b':' {
        return false;
    }
    i = skip_ws(i - 1);
    let needed = key.len() + 2;
    if i < needed || body[i - 1] != b'"' || &body[i - 1 - key.len()..i - 1] != key || body[i - needed] != b'"' {
        return false;
    }
    i = skip_ws(i - needed);
    i > 0 && matches!(body[i - 1], b'{' | b',')
}

/// The index of the closing quote of the JSON string that contains `from`.
fn string_end(body: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        let q = i + memchr::memchr(b'"', &body[i..])?;
        let mut backslashes = 0;
        while q > backslashes && body[q - 1 - backslashes] == b'\\' {
            backslashes += 1;
        }
        if backslashes % 2 == 0 {
            return Some(q);
        }
        i = q + 1;
    }
}

/// The decoded bytes of a JSON string's text (borrowed when it has no escapes).
fn json_string_bytes(raw: &[u8]) -> Cow<'_, [u8]> {
    if !raw.contains(&b'\\') {
        return Cow::Borrowed(raw);
    }
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    match serde_json::from_slice::<String>(&quoted) {
        Ok(s) => Cow::Owned(s.into_bytes()),
        Err(_) => Cow::Borrowed(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn markers() -> Markers {
        Markers::new(&Secret::new("install-secret-for-tests"))
    }

    fn key() -> KeyId {
        KeyId::new("k_0123456789")
    }

    #[test]
    fn content_round_trips_and_pins() {
        let m = markers();
        let org = m.org_tag(Some("org-a"), &key());
        let wrapped = m.wrap_content(&key(), org, "gAAAAABoriginal==").expect("wrapped");
        assert!(wrapped.starts_with("km1") && wrapped.ends_with("gAAAAABoriginal=="));
        let (pin, original) = m.unwrap_content(&wrapped).expect("valid").expect("a marker");
        assert_eq!(original, "gAAAAABoriginal==");
        let pin = pin.expect("ours");
        assert_eq!(pin.key, key());
        assert_eq!(pin.org, org);
        assert_eq!(m.unwrap_content("gAAAAABplain").expect("valid"), None);
        assert_eq!(m.wrap_content(&key(), org, &wrapped), None, "never wrapped twice");
    }

    #[test]
    fn ids_keep_their_type_prefix() {
        let m = markers();
        let org = m.org_tag(Some("org-a"), &key());
        let tagged = m.tag_id(&key(), org, "rs_68ab12cd").expect("tagged");
        assert!(tagged.starts_with("rs_km1") && tagged.ends_with("68ab12cd"), "{tagged}");
        let (pin, original) = m.untag_id(&tagged).expect("valid").expect("a marker");
        assert_eq!(original, "rs_68ab12cd");
        assert_eq!(pin.expect("ours").field, Field::ItemId);
        assert_eq!(m.tag_id(&key(), org, "noprefix"), None);
        assert_eq!(m.tag_id(&key(), org, &tagged), None);
    }

    #[test]
    fn forged_truncated_and_foreign_markers() {
        let m = markers();
        let other = Markers::new(&Secret::new("another-install"));
        let org = m.org_tag(Some("org-a"), &key());
        let wrapped = m.wrap_content(&key(), org, "gAAAAABx").expect("wrapped");

        // Altered content under an intact marker.
        let altered = wrapped.replace("gAAAAABx", "gAAAAABy");
        assert_eq!(m.unwrap_content(&altered), Err(MarkerError::Forged { field: Field::EncryptedContent }));
        // Pointing a marker at another key.
        let retargeted = wrapped.replace("k_0123456789", "k_0123456788");
        assert_eq!(m.unwrap_content(&retargeted), Err(MarkerError::Forged { field: Field::EncryptedContent }));
        // Truncated.
        assert_eq!(m.unwrap_content(&wrapped[..20]), Err(MarkerError::Malformed { field: Field::EncryptedContent }));
        // A truncated id marker of this install is refused; an id that merely contains `km1` is not a marker.
        let id = m.tag_id(&key(), org, "rs_abc").expect("tagged");
        assert_eq!(m.untag_id(&id[..14]), Err(MarkerError::Malformed { field: Field::ItemId }));
        assert_eq!(m.untag_id("msg_km1hello"), Ok(None));
        // Another install's marker: stripped, no pin.
        let foreign = other.wrap_content(&key(), org, "gAAAAABx").expect("wrapped");
        assert_eq!(m.unwrap_content(&foreign).expect("foreign is fine"), Some((None, "gAAAAABx")));
    }

    #[test]
    fn strip_removes_markers_only_where_they_can_be() {
        let m = markers();
        let org = m.org_tag(Some("org-a"), &key());
        let content = m.wrap_content(&key(), org, "gAAAAABenc").expect("wrapped");
        let id = m.tag_id(&key(), org, "rs_77").expect("tagged");
        let body = json!({
            "model": "gpt-5.5",
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text",
                    "text": format!("\"encrypted_content\":\"{content}\" pasted by the user")}]},
                {"type": "reasoning", "id": id, "summary": [], "content": null, "encrypted_content": content},
                {"type": "message", "id": "msg_km1notamarker", "role": "assistant", "content": []},
            ]
        });
        let raw = serde_json::to_vec(&body).expect("json");
        let stripped = m.strip(&raw).expect("valid");
        assert_eq!(stripped.removed, 2);
        assert_eq!(stripped.pins.len(), 1, "one (key, org) pair");
        let out: Value = serde_json::from_slice(&stripped.body).expect("still JSON");
        assert_eq!(out["input"][1]["encrypted_content"], "gAAAAABenc");
        assert_eq!(out["input"][1]["id"], "rs_77");
        assert_eq!(out["input"][0], body["input"][0], "text is never touched");
        assert_eq!(out["input"][2]["id"], "msg_km1notamarker");
    }

    #[test]
    fn strip_leaves_bodies_without_markers_borrowed() {
        let m = markers();
        let raw = br#"{"input":[{"type":"reasoning","id":"rs_1","encrypted_content":"gAAAAAB"}]}"#;
        let stripped = m.strip(raw).expect("valid");
        assert!(matches!(stripped.body, Cow::Borrowed(_)));
        assert!(stripped.pins.is_empty());
    }

    #[test]
    fn strip_refuses_forged_markers_in_place() {
        let m = markers();
        let org = m.org_tag(Some("org-a"), &key());
        let content = m.wrap_content(&key(), org, "gAAAAABenc").expect("wrapped");
        let forged = content.replace("gAAAAABenc", "gAAAAABevil");
        let raw =
            serde_json::to_vec(&json!({"input":[{"type":"reasoning","encrypted_content": forged}]})).expect("json");
        assert_eq!(m.strip(&raw).err(), Some(MarkerError::Forged { field: Field::EncryptedContent }));
        let truncated =
            serde_json::to_vec(&json!({"input":[{"type":"reasoning","encrypted_content": &content[..30]}]}))
                .expect("json");
        assert_eq!(m.strip(&truncated).err(), Some(MarkerError::Malformed { field: Field::EncryptedContent }));
    }

    #[test]
    fn tagging_a_response_tree() {
        let m = markers();
        let org = m.org_tag(Some("org-a"), &key());
        let mut event = json!({
            "type": "response.output_item.done",
            "item": {"id": "rs_abc", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAABz"}
        });
        assert_eq!(m.tag_tree(&mut event, &key(), org), 2);
        let item = &event["item"];
        assert!(item["id"].as_str().expect("id").starts_with("rs_km1"));
        let mut message = json!({"type":"message","id":"msg_1","content":[{"type":"output_text","text":"hi"}]});
        assert_eq!(m.tag_tree(&mut message, &key(), org), 0, "plain messages stay as they are");
        let mut delta = json!({"type":"response.reasoning_summary_text.delta","item_id":"rs_abc","delta":"x"});
        m.tag_tree(&mut delta, &key(), org);
        assert_eq!(delta["item_id"], item["id"], "references match the tagged item");
        // Tagging is idempotent.
        assert_eq!(m.tag_tree(&mut event, &key(), org), 0);
    }

    #[test]
    fn legitimate_openai_values_are_never_markers() {
        let m = markers();
        for v in ["gAAAAABnmY3v", "km1", "km1xyz", "kmx", ""] {
            let raw = serde_json::to_vec(&json!({"input":[{"encrypted_content": v, "id": format!("rs_{v}")}]}))
                .expect("json");
            match m.strip(&raw) {
                Ok(s) => assert_eq!(s.removed, 0, "{v}"),
                // Only values that start like a marker but are not one are refused.
                Err(_) => assert!(v.starts_with("km1"), "{v}"),
            }
        }
    }

    #[test]
    fn raw_tagging_matches_tree_tagging() {
        let m = markers();
        let org = m.org_tag(Some("org-a"), &key());
        let events = [
            json!({"type":"response.output_item.done","output_index":0,"item":{"id":"rs_abc","type":"reasoning","summary":[],"encrypted_content":"gAAAAAB/x+y=="}}),
            json!({"type":"response.output_item.added","item":{"id":"rs_abc","type":"reasoning","summary":[]}}),
            json!({"type":"response.reasoning_summary_text.delta","item_id":"rs_abc","delta":"\"id\":\"rs_fake\""}),
            json!({"type":"response.completed","response":{"id":"resp_1","output":[
                {"id":"rs_1","type":"reasoning","encrypted_content":"gAAAAAB1"},
                {"id":"msg_1","type":"message","content":[{"type":"output_text","text":"the id is \"rs_2\""}]},
                {"id":"cmp_3","type":"compaction","encrypted_content":"gAAAAAB3"}]}}),
            json!({"choices":[{"delta":{"reasoning_items":[{"type":"reasoning","id":"rs_9","encrypted_content":"gAAAAAB9","summary":[]}]}}]}),
            json!({"type":"response.output_text.delta","item_id":"msg_1","delta":"encrypted_content"}),
        ];
        for event in events {
            let text = serde_json::to_vec(&event).expect("json");
            let mut tree = event.clone();
            let tagged = m.tag_tree(&mut tree, &key(), org);
            match m.tag_raw(&text, &key(), org) {
                RawTag::Tagged(raw) => {
                    assert_eq!(serde_json::from_slice::<Value>(&raw).expect("json"), tree, "{event}")
                }
                RawTag::Unchanged => assert_eq!(tagged, 0, "{event}"),
                RawTag::NeedsTree => panic!("needlessly fell back for {event}"),
            }
        }
        // An encrypted item whose id is not org-bound (a future type) or that has no id: the tree decides.
        for event in [
            json!({"item":{"id":"x_1","type":"future","encrypted_content":"gAAAAAB"}}),
            json!({"item":{"type":"reasoning","encrypted_content":"gAAAAAB"}}),
        ] {
            let text = serde_json::to_vec(&event).expect("json");
            assert_eq!(m.tag_raw(&text, &key(), org), RawTag::NeedsTree, "{event}");
        }
    }

    proptest! {
        #[test]
        fn wrap_unwrap_is_exact(content in "\\PC{0,200}", rest in "[a-f0-9]{1,48}", key_id in "[A-Za-z0-9_-]{1,64}", org in "\\PC{0,40}") {
            let m = markers();
            let key = KeyId::new(key_id);
            let tag = m.org_tag(Some(&org), &key);
            prop_assume!(!content.starts_with("km1"));
            let wrapped = m.wrap_content(&key, tag, &content).expect("wrapped");
            let (pin, original) = m.unwrap_content(&wrapped).expect("valid").expect("marker");
            prop_assert_eq!(original, content.as_str());
            prop_assert_eq!(pin.expect("ours").key, key.clone());
            let id = format!("rs_{rest}");
            let tagged = m.tag_id(&key, tag, &id).expect("tagged");
            let (_, back) = m.untag_id(&tagged).expect("valid").expect("marker");
            prop_assert_eq!(back, id.clone());
            // Through a JSON body, including escapes and Unicode.
            let body = serde_json::to_vec(&json!({"input":[{"type":"reasoning","id": tagged, "encrypted_content": wrapped, "note": content}]})).expect("json");
            let stripped = m.strip(&body).expect("valid");
            let original: Value = serde_json::to_value(json!({"input":[{"type":"reasoning","id": id, "encrypted_content": content, "note": content}]})).expect("json");
            prop_assert_eq!(serde_json::from_slice::<Value>(&stripped.body).expect("json"), original);
        }

        #[test]
        fn random_base64_is_never_taken_for_a_marker(value in "[A-Za-z0-9_=-]{0,300}") {
            let m = markers();
            prop_assume!(!value.starts_with("km1"));
            let body = serde_json::to_vec(&json!({"input":[{"encrypted_content": value, "id": format!("rs_{value}")}]})).expect("json");
            let stripped = m.strip(&body).expect("no marker, no error");
            prop_assert_eq!(stripped.removed, 0);
            prop_assert!(matches!(stripped.body, Cow::Borrowed(_)));
        }
    }
}
