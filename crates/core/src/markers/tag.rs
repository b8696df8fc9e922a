//! Outbound: giving every org-bound value in an answer the serving key's marker.

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::Value;

use super::{id_field, is_bound_id, Field, Markers, OrgTag};
use crate::keys::KeyId;
use crate::scan::{json_string_bytes, string_end, value_start};

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

/// What a byte scan of an answer found to splice.
#[derive(Default)]
struct Splices {
    /// (where, marker) pairs.
    inserts: Vec<(usize, String)>,
    /// `encrypted_content` string values seen.
    contents: usize,
    /// `id`s of org-bound items seen.
    bound_ids: usize,
}

/// Whether an id (of an item that carries encrypted content, or not) gets a marker.
type WantsTag = fn(&str, bool) -> bool;

/// The id-like keys tagged in answers, and which type prefixes each carries a marker for.
const ID_KEYS: [(&[u8], &[&[u8]]); 3] = [
    (b"\"id\"", &[b"rs", b"cmp", b"resp"]),
    (b"\"item_id\"", &[b"rs", b"cmp"]),
    (b"\"previous_response_id\"", &[b"resp"]),
];

/// The searches `tag_raw` makes in every event, built once (a searcher costs more to build than to
/// run over a short event).
static CONTENT_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"encrypted_content\""));
static ID_FINDERS: LazyLock<[Finder<'static>; 3]> = LazyLock::new(|| ID_KEYS.map(|(needle, _)| Finder::new(needle)));
static REPORTED_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(REPORTED.as_bytes()));

/// The member of a response that reports input items the provider dropped (`drops`). Its ids name
/// items of the request as the client sent them, made wherever they were made: never the serving
/// key's, so they are not tagged.
const REPORTED: &str = "\"input_transformations\"";

/// Where the `input_transformations` array of `text` lies, if it has one: searched only once an
/// org-bound id was found, so most events never pay for it.
fn reported_span(text: &[u8]) -> Option<std::ops::Range<usize>> {
    let at = REPORTED_KEY.find(text)?;
    let open = at + REPORTED.len() + text[at + REPORTED.len()..].iter().position(|b| *b == b'[')?;
    let (mut depth, mut i) = (0usize, open);
    while i < text.len() {
        match text[i] {
            b'"' => i = string_end(text, i + 1)?,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open..i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

impl Markers {
    /// Tags a JSON text by splicing markers into its bytes, without parsing it into a tree: every
    /// `encrypted_content` string value, and every `id` / `item_id` whose value has an org-bound type
    /// prefix (`rs_`, `cmp_`). Gives the same result as `tag_tree` whenever every item that carries
    /// encrypted content has an org-bound id; otherwise it answers `NeedsTree` and the caller uses
    /// `tag_tree` (future item types, items without ids).
    pub fn tag_raw(&self, text: &[u8], key: &KeyId, org: OrgTag) -> RawTag {
        if !KeyId::is_well_formed(key.as_str()) {
            return RawTag::Unchanged;
        }
        let mut found = Splices::default();
        if self.find_contents(text, key, org, &mut found).is_none()
            || self.find_ids(text, key, org, &mut found).is_none()
        {
            return RawTag::NeedsTree;
        }
        if found.contents > found.bound_ids {
            return RawTag::NeedsTree;
        }
        if found.inserts.is_empty() {
            return RawTag::Unchanged;
        }
        found.inserts.sort_by_key(|(at, _)| *at);
        let extra: usize = found.inserts.iter().map(|(_, m)| m.len()).sum();
        let mut out = Vec::with_capacity(text.len() + extra);
        let mut cursor = 0;
        for (at, mark) in found.inserts {
            out.extend_from_slice(&text[cursor..at]);
            out.extend_from_slice(mark.as_bytes());
            cursor = at;
        }
        out.extend_from_slice(&text[cursor..]);
        RawTag::Tagged(out)
    }

    /// Every `encrypted_content` string value; `None` when one has no end (not valid JSON).
    fn find_contents(&self, text: &[u8], key: &KeyId, org: OrgTag, found: &mut Splices) -> Option<()> {
        for at in CONTENT_KEY.find_iter(text) {
            let Some(start) = value_start(text, at, b"encrypted_content".len()) else {
                continue;
            };
            let end = string_end(text, start)?;
            found.contents += 1;
            let value = &text[start..end];
            let original = json_string_bytes(value);
            if !self.content_is_marked(&original) {
                let mark = self.marked(Field::EncryptedContent, key, org, &original);
                found.inserts.push((start, mark));
            }
        }
        Some(())
    }

    /// Every id of an org-bound item or response; `None` when one has no end (not valid JSON).
    fn find_ids(&self, text: &[u8], key: &KeyId, org: OrgTag, found: &mut Splices) -> Option<()> {
        let mut reported: Option<Option<std::ops::Range<usize>>> = None;
        for ((needle, prefixes), finder) in ID_KEYS.iter().zip(ID_FINDERS.iter()) {
            for at in finder.find_iter(text) {
                let Some(start) = value_start(text, at, needle.len() - 2) else {
                    continue;
                };
                let end = string_end(text, start)?;
                let value = &text[start..end];
                let Some(split) = value.iter().position(|b| *b == b'_') else {
                    continue;
                };
                let prefix = &value[..split];
                if !prefixes.contains(&prefix)
                    || reported.get_or_insert_with(|| reported_span(text)).as_ref().is_some_and(|r| r.contains(&at))
                {
                    continue;
                }
                if needle == b"\"id\"" && prefix != b"resp" {
                    found.bound_ids += 1;
                }
                let original = json_string_bytes(value);
                if !self.id_is_marked(prefix, &original[split + 1..]) {
                    let mark = self.marked(id_field(prefix), key, org, &original);
                    found.inserts.push((start + split + 1, mark));
                }
            }
        }
        Some(())
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
                let wanted: [(&str, WantsTag); 3] = [
                    ("id", |id, bound| bound || is_bound_id(id) || id.starts_with("resp_")),
                    ("previous_response_id", |id, _| id.starts_with("resp_")),
                    ("item_id", |id, _| is_bound_id(id)),
                ];
                for (name, wants) in wanted {
                    if let Some(Value::String(id)) = map.get_mut(name) {
                        if wants(id, bound) {
                            if let Some(t) = self.tag_id(key, org, id) {
                                *id = t;
                                tagged += 1;
                            }
                        }
                    }
                }
                for (name, child) in map.iter_mut() {
                    let reported = name == &REPORTED[1..REPORTED.len() - 1];
                    if matches!(child, Value::Object(_) | Value::Array(_)) && name != "encrypted_content" && !reported {
                        tagged += self.tag_tree(child, key, org);
                    }
                }
                tagged
            }
            Value::Array(items) => items.iter_mut().map(|v| self.tag_tree(v, key, org)).sum(),
            _ => 0,
        }
    }
}
