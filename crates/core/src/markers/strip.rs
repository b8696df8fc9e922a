//! Inbound: removing every marker from a request body before it goes upstream, and reporting the keys
//! the valid ones name.

use std::borrow::Cow;

use serde_json::Value;

use super::{id_field, is_type_prefix, Field, MarkerError, Markers, Parsed, Pin, MAX_PINS, VERSION};
use crate::keys::KeyId;
use crate::scan::{has_ascii_escape, json_string_bytes, preceded_by_key, string_end};

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

impl Stripped<'_> {
    fn note(&mut self, pin: Option<Pin>) {
        let Some(pin) = pin else {
            self.foreign += 1;
            return;
        };
        self.removed += 1;
        if self.pins.len() < MAX_PINS && !self.pins.iter().any(|p| p.key == pin.key && p.org == pin.org) {
            self.pins.push(pin);
        }
    }
}

impl Markers {
    /// Removes every marker from a JSON request body. Markers are recognised only where they can be: at
    /// the start of the string value of an `encrypted_content` key, or right after the type prefix of an
    /// `id` (or `previous_response_id`) value. Text inside other strings is never touched.
    ///
    /// Bodies are scanned as bytes, without building a tree. A body that spells something with escapes
    /// of plain ASCII characters (which no real client does, but which could hide a key such as
    /// `"encrypted\u005fcontent"` from a byte scan) is walked as a tree instead, so a forged marker cannot
    /// slip past by being spelled differently.
    pub fn strip<'a>(&self, body: &'a [u8]) -> Result<Stripped<'a>, MarkerError> {
        if has_ascii_escape(body) {
            if let Ok(mut value) = serde_json::from_slice::<Value>(body) {
                return self.strip_tree(&mut value);
            }
        }
        self.strip_bytes(body)
    }

    fn strip_bytes<'a>(&self, body: &'a [u8]) -> Result<Stripped<'a>, MarkerError> {
        let mut out: Option<Vec<u8>> = None;
        let mut cursor = 0;
        let mut stripped = Stripped { body: Cow::Borrowed(body), pins: Vec::new(), foreign: 0, removed: 0 };
        static MARKER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(VERSION));
        for at in MARKER.find_iter(body) {
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
                    stripped.note(None);
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
                    stripped.note(Some(Pin { key: KeyId::new(key), org, field }));
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

    /// The tree walk: the same rules as the byte scan, on decoded keys and values.
    fn strip_tree<'a>(&self, value: &mut Value) -> Result<Stripped<'a>, MarkerError> {
        let mut stripped = Stripped { body: Cow::Borrowed(&[]), pins: Vec::new(), foreign: 0, removed: 0 };
        self.strip_value(value, &mut stripped)?;
        let bytes = serde_json::to_vec(value).map_err(|_| MarkerError::Malformed { field: Field::EncryptedContent })?;
        stripped.body = Cow::Owned(bytes);
        Ok(stripped)
    }

    fn strip_value(&self, value: &mut Value, stripped: &mut Stripped<'_>) -> Result<(), MarkerError> {
        match value {
            Value::Object(map) => {
                for (name, child) in map.iter_mut() {
                    match (name.as_str(), &mut *child) {
                        ("encrypted_content", Value::String(s)) => {
                            if let Some((pin, original)) = self.unwrap_content(s)? {
                                stripped.note(pin);
                                *s = original.to_owned();
                            }
                        }
                        ("id" | "previous_response_id", Value::String(s)) => {
                            let prefix_ok = s.split_once('_').is_some_and(|(p, _)| is_type_prefix(p.as_bytes()));
                            let response = id_field(s.split_once('_').map_or(b"", |(p, _)| p.as_bytes()));
                            if prefix_ok && (name == "id" || response == Field::ResponseId) {
                                if let Some((pin, original)) = self.untag_id(s)? {
                                    stripped.note(pin);
                                    *s = original;
                                }
                            }
                        }
                        _ => self.strip_value(child, stripped)?,
                    }
                }
                Ok(())
            }
            Value::Array(items) => items.iter_mut().try_for_each(|v| self.strip_value(v, stripped)),
            _ => Ok(()),
        }
    }
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
