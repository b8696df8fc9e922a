//! The JSON byte scanner markers are read and written with: finding where an object key's string value
//! starts and ends without parsing the document into a tree.
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
}
