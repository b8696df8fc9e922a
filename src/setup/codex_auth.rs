//! Codex's `auth.json`, beside `config.toml`: with the built-in `openai` provider Codex sends what it
//! holds as `Authorization: Bearer`, so the history-keeping setup puts the Keymux client token there.
//! Codex 0.171 writes `{"auth_mode": "apikey", "OPENAI_API_KEY": "sk-…"}` for an API key (`codex login
//! --with-api-key`), and `tokens` (with `OPENAI_API_KEY` null or absent) for a ChatGPT login.
//!
//! * No file: Keymux creates it with the token (Undo deletes it while it still holds that token).
//! * An API key: only that string is replaced, every other byte stays; the key itself is kept in the
//!   backup, and can be imported into Keymux's keychain (Undo puts the file back byte for byte).
//! * No key (`OPENAI_API_KEY` null, as `keymux keys import --remove-plaintext` leaves it, or missing):
//!   the token goes in its place, every other member stays.
//! * A ChatGPT login: with `--import-key` it joins Keymux's keys as the plan (Keymux refreshes it from
//!   then on, so Codex must not go on spending the same refresh token) and the file becomes
//!   `{"auth_mode": "apikey", "OPENAI_API_KEY": "<token>"}`, the login kept in the backup for Undo.
//!   Without it, refused: the custom-provider form leaves the login where it is.

use serde_json::Value;

use super::edited::{sha256, Surgical};
use super::edited::{Edited, Refusal, Remedy};

/// The field Codex reads an API key from.
const FIELD: &str = "OPENAI_API_KEY";

/// What `auth.json` holds now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Held {
    /// No file (or an empty one).
    Nothing,
    /// A file without a key and without a login: `OPENAI_API_KEY` null, empty or missing.
    NoKey,
    /// An API key (not one of Keymux's tokens): it may be imported.
    ApiKey,
    /// A Keymux client token.
    Token,
    /// A ChatGPT login.
    ChatGpt,
}

/// What the file holds, and the API key's text when it holds one.
pub(super) fn held(text: &str) -> Result<(Held, Option<String>), Refusal> {
    if text.trim().is_empty() {
        return Ok((Held::Nothing, None));
    }
    let root: Value = serde_json::from_str(text).map_err(|e| Refusal::Syntax(e.to_string()))?;
    let object = root.as_object().ok_or_else(|| Refusal::Shape("it must hold a JSON object".into()))?;
    let field = object.get(FIELD);
    let key = field.and_then(Value::as_str).filter(|k| !k.is_empty());
    let chatgpt = object.get("tokens").is_some_and(|t| !t.is_null())
        || object.get("auth_mode").and_then(Value::as_str).is_some_and(|m| m.eq_ignore_ascii_case("chatgpt"));
    Ok(match key {
        _ if chatgpt => (Held::ChatGpt, None),
        Some(key) if key.starts_with(crate::tokens::TOKEN_PREFIX) => (Held::Token, None),
        Some(key) => (Held::ApiKey, Some(key.to_owned())),
        None if field.is_none_or(|v| v.is_null() || v.as_str().is_some()) => (Held::NoKey, None),
        None => {
            return Err(Refusal::Shape(format!(
                "its {FIELD} is neither an API key nor null; run `codex logout` or move it aside"
            )))
        }
    })
}

/// The file holding `token`: created, or put in the API key's place (or the place of none); with
/// `take_login`, in the place of a ChatGPT login too.
pub(super) fn edit(text: &str, token: &str, take_login: bool) -> Result<Edited, Refusal> {
    let surgical = Some(Surgical::AuthKey { key_sha256: sha256(token.as_bytes()) });
    let (held, _) = held(text)?;
    let text = match held {
        Held::Nothing => api_key_file(token),
        Held::ChatGpt if take_login => api_key_file(token),
        Held::ApiKey | Held::Token | Held::NoKey => put_key(text, token)?,
        Held::ChatGpt => {
            return Err(Refusal::Conflict(
                "it holds a ChatGPT login, not an API key. With --import-key the login joins Keymux's keys as \
                 your plan (used first, then your API keys) and Keymux's client token takes its place; or set \
                 Codex up with --custom-provider, which leaves the login where it is (Codex's sessions then \
                 live under the provider `keymux`, apart from the ones you have now)"
                    .into(),
                Remedy::CustomProvider,
            ))
        }
    };
    let notes = match held {
        Held::ApiKey => vec![format!(
            "auth.json holds an OpenAI API key: Keymux's client token takes its place (the file as it is now is \
             backed up, and Undo puts it back); add the key to Keymux's pool with --import-key"
        )],
        Held::ChatGpt => vec![format!(
            "auth.json holds your ChatGPT login: it joins Keymux's keys as your plan and Keymux's client token \
             takes its place. Keymux refreshes the login from now on; the file as it is now is backed up and \
             Undo puts it back (then log in to Codex again: the login in the backup will have been refreshed \
             away)"
        )],
        Held::Nothing | Held::NoKey | Held::Token => Vec::new(),
    };
    Ok(Edited { text, notes, surgical })
}

/// A new `auth.json` holding `token` as its API key.
fn api_key_file(token: &str) -> String {
    format!("{{\n  \"auth_mode\": \"apikey\",\n  \"{FIELD}\": \"{token}\"\n}}")
}

/// Whether the file still holds the token with this digest.
pub(super) fn holds(text: &str, key_sha256: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|root| root.get(FIELD).and_then(Value::as_str).map(|k| sha256(k.as_bytes())))
        .is_some_and(|digest| digest == key_sha256)
}

/// The text with only the top-level `OPENAI_API_KEY` changed to `token`: its value (a string or
/// `null`) replaced where it is, or the member put first when there is none. Found by its position in
/// the text, then checked by parsing both texts, so nothing else can have moved.
fn put_key(text: &str, token: &str) -> Result<String, Refusal> {
    let unchanged = || Refusal::Shape(format!("{FIELD} could not be replaced on its own; move the file aside"));
    let mut before: Value = serde_json::from_str(text).map_err(|e| Refusal::Syntax(e.to_string()))?;
    let new = match before.get(FIELD) {
        Some(_) => value_span(text).map(|(open, close)| format!("{}\"{token}\"{}", &text[..open], &text[close..])),
        None => first_member(text, &format!("\"{FIELD}\": \"{token}\"")),
    };
    let new = new.ok_or_else(unchanged)?;
    let mut after: Value = serde_json::from_str(&new).map_err(|_| unchanged())?;
    if after.get(FIELD).and_then(Value::as_str) != Some(token) {
        return Err(unchanged());
    }
    before.as_object_mut().map(|o| o.remove(FIELD));
    after.as_object_mut().map(|o| o.remove(FIELD));
    if before != after {
        return Err(unchanged());
    }
    Ok(new)
}

/// Where the value of the first member named `OPENAI_API_KEY` is in the text, when it is a string or
/// `null`.
fn value_span(text: &str) -> Option<(usize, usize)> {
    let name = format!("\"{FIELD}\"");
    let start = text.find(&name)? + name.len();
    let rest = &text[start..];
    let colon = rest.find(':').filter(|&at| rest[..at].trim().is_empty())?;
    let open = start + colon + 1 + (rest[colon + 1..].len() - rest[colon + 1..].trim_start().len());
    let close = if text[open..].starts_with("null") { open + "null".len() } else { string_end(text.as_bytes(), open)? };
    Some((open, close))
}

/// The text with `member` first in its top-level object, laid out as the member it goes before.
fn first_member(text: &str, member: &str) -> Option<String> {
    let open = text.find('{')? + 1;
    let rest = &text[open..];
    let space = &rest[..rest.len() - rest.trim_start().len()];
    let comma = if rest.trim_start().starts_with('}') { "" } else { "," };
    Some(format!("{}{space}{member}{comma}{rest}", &text[..open]))
}

/// The byte just past the JSON string that opens at `open`.
pub(crate) fn string_end(bytes: &[u8], open: usize) -> Option<usize> {
    if bytes.get(open) != Some(&b'"') {
        return None;
    }
    let mut at = open + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]
    use super::*;

    const TOKEN: &str = "km-unit-test-token-5c1e0a97d3b2";

    #[test]
    fn a_new_file_holds_the_token_as_codex_writes_an_api_key() {
        let edited = edit("", TOKEN, false).unwrap();
        let parsed: Value = serde_json::from_str(&edited.text).unwrap();
        assert_eq!(parsed, serde_json::json!({"auth_mode": "apikey", "OPENAI_API_KEY": TOKEN}));
        assert!(holds(&edited.text, &sha256(TOKEN.as_bytes())));
    }

    #[test]
    fn an_api_key_is_replaced_and_every_other_byte_stays() {
        let text =
            "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\" :  \"sk-proj-a\\\"b\",\n  \"last_refresh\": null\n}";
        assert_eq!(held(text).unwrap(), (Held::ApiKey, Some("sk-proj-a\"b".into())));
        let edited = edit(text, TOKEN, false).unwrap();
        assert_eq!(edited.text, text.replace("\"sk-proj-a\\\"b\"", &format!("\"{TOKEN}\"")));
        assert!(edited.notes.iter().any(|n| n.contains("--import-key")), "{:?}", edited.notes);
        assert!(!edited.notes.iter().any(|n| n.contains("sk-proj")), "the key is never in a note");
    }

    #[test]
    fn a_file_without_a_key_gets_the_token_in_its_place_and_keeps_every_other_member() {
        let null = "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": null,\n  \"last_refresh\": null\n}\n";
        assert_eq!(held(null).unwrap(), (Held::NoKey, None));
        assert_eq!(edit(null, TOKEN, false).unwrap().text, null.replacen("null", &format!("\"{TOKEN}\""), 1));
        let missing = "{\n  \"auth_mode\": \"apikey\"\n}";
        let expected = format!("{{\n  \"{FIELD}\": \"{TOKEN}\",\n  \"auth_mode\": \"apikey\"\n}}");
        assert_eq!(edit(missing, TOKEN, false).unwrap().text, expected);
        assert_eq!(edit("{}", TOKEN, false).unwrap().text, format!("{{\"{FIELD}\": \"{TOKEN}\"}}"));
    }

    #[test]
    fn a_chatgpt_login_is_refused_with_the_custom_provider_offered() {
        let text =
            r#"{"OPENAI_API_KEY": null, "tokens": {"id_token": "x", "access_token": "y"}, "last_refresh": "2026"}"#;
        assert_eq!(held(text).unwrap().0, Held::ChatGpt);
        let Err(Refusal::Conflict(why, Remedy::CustomProvider)) = edit(text, TOKEN, false) else { panic!("refused") };
        assert!(why.contains("not an API key") && why.contains("--custom-provider"), "{why}");
        assert!(why.contains("--import-key"), "the refusal names the way to hand the login to Keymux: {why}");
    }

    #[test]
    fn a_chatgpt_login_handed_to_keymux_leaves_only_the_token() {
        let text = r#"{"auth_mode": "chatgpt", "OPENAI_API_KEY": null, "tokens": {"id_token": "eyJ-id", "access_token": "eyJ-access", "refresh_token": "rt-refresh", "account_id": "acct-1"}, "last_refresh": "2026"}"#;
        let edited = edit(text, TOKEN, true).unwrap();
        let root: Value = serde_json::from_str(&edited.text).unwrap();
        assert_eq!(root, serde_json::json!({"auth_mode": "apikey", FIELD: TOKEN}));
        for part in ["eyJ-id", "eyJ-access", "rt-refresh"] {
            assert!(!edited.text.contains(part), "the login is out of the file: {}", edited.text);
        }
        assert!(edited.notes.iter().any(|n| n.contains("plan") && n.contains("Undo")), "{:?}", edited.notes);
        assert!(holds(&edited.text, &sha256(TOKEN.as_bytes())), "Undo finds its token there");
    }

    #[test]
    fn files_that_are_not_json_or_hold_nothing_usable_are_refused() {
        assert!(matches!(edit("{\"OPENAI_API_KEY\": ", TOKEN, false), Err(Refusal::Syntax(_))));
        assert!(matches!(edit("[1]", TOKEN, false), Err(Refusal::Shape(_))));
        assert!(matches!(edit("{\"OPENAI_API_KEY\": 3}", TOKEN, false), Err(Refusal::Shape(_))));
    }
}
