//! The JSON byte scanner: where an object key's string value starts and ends, and a document's
//! top-level values, found without parsing the document into a tree. Markers are read and written
//! with it, and relayed events and answers are read with it (their type, usage and tier); it depends
//! on nothing else of the crate.
//!
//! The scanner relies on one property of valid JSON: a `"` inside a string is always escaped, so a
//! pattern such as `,"id":"` can only match real structure, never text inside a string. Keys spelled
//! with escapes (`"encrypted\u005fcontent"`) are the one thing it cannot see; `has_ascii_escape` finds
//! the bodies that might contain them, and those take the tree walk instead.

use std::borrow::Cow;

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// For an object key whose opening quote is at `at` and whose text is `key_len` bytes, the index where its
/// string value's text starts: `[{,] ws "key" ws : ws "`. `None` when this is not an object key with a
/// string value (or sits inside a string, whose quotes are escaped).
pub fn value_start(text: &[u8], at: usize, key_len: usize) -> Option<usize> {
    let mut before = at;
    while before > 0 && is_ws(text[before - 1]) {
        before -= 1;
    }
    if before == 0 || !matches!(text[before - 1], b'{' | b',') {
        return None;
    }
    let skip = |mut i: usize| {
        while i < text.len() && is_ws(text[i]) {
            i += 1;
        }
        i
    };
    let i = skip(at + key_len + 2);
    if text.get(i) != Some(&b':') {
        return None;
    }
    let i = skip(i + 1);
    (text.get(i) == Some(&b'"')).then_some(i + 1)
}

/// Whether the JSON string whose opening quote is at `quote` is the value of the object key `key`:
/// `[{,] ws "key" ws : ws "`.
pub fn preceded_by_key(body: &[u8], quote: usize, key: &[u8]) -> bool {
    let skip_ws = |mut i: usize| {
        while i > 0 && is_ws(body[i - 1]) {
            i -= 1;
        }
        i
    };
    let mut i = skip_ws(quote);
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
pub fn string_end(body: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        let q = i + memchr::memchr(b'"', &body[i..])?;
        if !escaped(body, q) {
            return Some(q);
        }
        i = q + 1;
    }
}

/// Whether the byte at `at` is escaped (preceded by an odd number of backslashes).
fn escaped(body: &[u8], at: usize) -> bool {
    let mut backslashes = 0;
    while at > backslashes && body[at - 1 - backslashes] == b'\\' {
        backslashes += 1;
    }
    backslashes % 2 == 1
}

/// The decoded bytes of a JSON string's text (borrowed when it has no escapes).
pub fn json_string_bytes(raw: &[u8]) -> Cow<'_, [u8]> {
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

/// Whether the text holds a `\uXXXX` escape of a printable ASCII character. Real clients never write
/// one (serde_json and `JSON.stringify` escape only quotes, backslashes and control characters), but a
/// hostile body can use one to spell a key or a marker the byte scan would not recognise.
pub fn has_ascii_escape(text: &[u8]) -> bool {
    static ESCAPE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\\u"));
    ESCAPE.find_iter(text).any(|at| {
        !escaped(text, at)
            && text
                .get(at + 2..at + 6)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .is_some_and(|c| (0x20..0x7f).contains(&c))
    })
}

/// A walked value (one of [`top_level_values`]) that must be a string when present: `Some(None)` when
/// absent or null, `None` when it is something else (the text is then not read, as a parser would
/// refuse it).
pub fn string_value(raw: Option<&[u8]>) -> Option<Option<String>> {
    match raw {
        None | Some(b"null") => Some(None),
        Some(raw) => serde_json::from_slice::<String>(raw).ok().map(Some),
    }
}

/// The raw text of the values of `keys` among the members of the JSON object `body` (its top level
/// only; the first member of each name), found by walking the text without building anything:
/// strings are jumped over with `memchr`, nested objects and arrays by their depth. `None` when
/// `body` is not an object the walk can read to its end. Keys are compared as written, so a body that
/// spells keys with escapes (`has_ascii_escape`) needs a real parser instead.
pub fn top_level_values<'a, const N: usize>(body: &'a [u8], keys: [&[u8]; N]) -> Option<[Option<&'a [u8]>; N]> {
    let mut found = [None; N];
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(body, i + 1);
    if body.get(i) == Some(&b'}') {
        return Some(found);
    }
    loop {
        if body.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(body, i + 1)?;
        let key = &body[i + 1..key_end];
        i = skip_ws(body, key_end + 1);
        if body.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(body, i + 1);
        let end = value_end(body, start)?;
        if let Some(slot) = keys.iter().position(|k| *k == key) {
            found[slot].get_or_insert(&body[start..end]);
        }
        i = skip_ws(body, end);
        match body.get(i) {
            Some(b',') => i = skip_ws(body, i + 1),
            Some(b'}') => return Some(found),
            _ => return None,
        }
    }
}

fn skip_ws(body: &[u8], mut i: usize) -> usize {
    while body.get(i).is_some_and(|b| is_ws(*b)) {
        i += 1;
    }
    i
}

/// The bytes a walk over a container stops at outside its strings: quotes and brackets.
const STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 5 {
        table[b"\"{}[]"[i] as usize] = true;
        i += 1;
    }
    table
};

/// Where the JSON value starting at `start` ends (one past its last byte).
fn value_end(body: &[u8], start: usize) -> Option<usize> {
    match body.get(start)? {
        b'"' => Some(string_end(body, start + 1)? + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            loop {
                // Between strings only brackets and quotes matter: the walk jumps to the next one.
                i += body.get(i..)?.iter().position(|b| STRUCTURAL[usize::from(*b)])?;
                match body[i] {
                    b'"' => i = string_end(body, i + 1)?,
                    b'{' | b'[' => depth += 1,
                    _ => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                }
                i += 1;
            }
        }
        _ => {
            let len = body[start..].iter().position(|b| matches!(b, b',' | b'}' | b']') || is_ws(*b));
            let end = start + len.unwrap_or(body.len() - start);
            (end > start).then_some(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_only_in_key_position() {
        let text = br#"{"id" : "rs_1","text":"\"id\":\"rs_2\""}"#;
        assert_eq!(value_start(text, 1, 2), Some(9));
        let inner = text.windows(5).position(|w| w == b"\\\"id\\").map(|i| i + 1).expect("inner");
        assert_eq!(value_start(text, inner, 2), None, "a quoted key inside a string is text");
        assert_eq!(string_end(text, 9), Some(13));
        assert!(preceded_by_key(text, 8, b"id"));
        assert!(!preceded_by_key(text, 8, b"text"));
    }

    #[test]
    fn escapes() {
        assert_eq!(string_end(br#"a\"b\\"x"#, 0), Some(6));
        assert_eq!(&*json_string_bytes(br"a\u005fb"), b"a_b");
        assert!(has_ascii_escape(br#"{"encrypted\u005fcontent":1}"#));
        assert!(!has_ascii_escape(br#"{"text":"\\u005f is literal"}"#), "an escaped backslash, then text");
        assert!(!has_ascii_escape(br#"{"text":"caf\u00e9 \u2019"}"#), "non-ASCII escapes are ordinary");
        assert!(!has_ascii_escape(br#"{"text":"\u0007"}"#), "control characters must be escaped");
    }

    #[test]
    fn top_level_values_skip_nested_members_and_text() {
        let body = br#" { "output" : [{"usage":1,"t":"\"usage\":2 }]"}], "meta":{"usage":{"a":[3]}},
            "usage" : {"input_tokens": 4} , "n": -1.5e3, "tier":"flex", "usage": 5 } "#;
        let [usage, tier, n, none] = top_level_values(body, [b"usage", b"tier", b"n", b"none"]).expect("an object");
        assert_eq!(usage, Some(&br#"{"input_tokens": 4}"#[..]), "the top-level member, the first of its name");
        assert_eq!(tier, Some(&br#""flex""#[..]));
        assert_eq!(n, Some(&b"-1.5e3"[..]));
        assert_eq!(none, None);
        assert_eq!(top_level_values(b"{}", [b"usage"]), Some([None]));
        for broken in [&b"[1]"[..], b"", b"{", br#"{"usage":{"a":1}"#, br#"{"usage" 1}"#, br#"{"a":"x}"#, b"{,}"] {
            assert_eq!(top_level_values(broken, [b"usage"]), None, "{}", String::from_utf8_lossy(broken));
        }
    }

    /// Any JSON value: nested containers, and strings that quote brackets, quotes and backslashes.
    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z{}\\[\\]\"\\\\ ,:]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{1,3}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The walk finds each top-level member's text, compact or pretty, as a parser reads it.
        #[test]
        fn the_walk_reads_top_level_members_as_a_parser_does(
            members in proptest::collection::btree_map("[a-c]", any_json(), 0..4),
            pretty in proptest::bool::ANY,
        ) {
            let object = serde_json::Value::Object(members.clone().into_iter().collect());
            let text = if pretty { serde_json::to_vec_pretty(&object) } else { serde_json::to_vec(&object) };
            let text = text.expect("serialized");
            let found = top_level_values(&text, [b"a", b"b", b"c"]).expect("an object");
            for (name, raw) in ["a", "b", "c"].iter().zip(found) {
                let read = raw.map(|r| serde_json::from_slice::<serde_json::Value>(r).expect("a value"));
                proptest::prop_assert_eq!(read.as_ref(), members.get(*name));
            }
        }
    }
}
