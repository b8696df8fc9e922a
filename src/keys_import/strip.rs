//! Taking a key's plaintext copy out of the file it was found in, once it is in the keychain: a
//! backup next to the file first, then the file with only that value gone. Codex's `auth.json` keeps
//! its `OPENAI_API_KEY` field, set to `null` (Codex 0.171 then says "API key auth is missing a key"
//! until `keymux setup codex` puts a client token there, or the user logs in again); pi's `auth.json`
//! loses the provider's entry; `models.json` loses the provider's `apiKey`. Every other byte stays:
//! the edit is made in the text, then checked by parsing both texts. A file reached through a link
//! (kept in a dotfiles repository) is edited where it is and the link stays; its backup goes next to
//! the link, out of that repository.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Origin, ENV_VAR};
use crate::clock::Clock;
use crate::config_file::write_atomically_with_mode;
use crate::secrets::Secret;
use crate::setup::{keep_backup, mode_of, read_limited, real_path};

/// A plaintext copy taken out of a file.
#[derive(Debug)]
pub struct Removed {
    /// The file, now without the key (links followed).
    pub path: PathBuf,
    /// The link the client reads the file through, when it is one (it is kept).
    pub link: Option<PathBuf>,
    /// The file as it was (the key included), kept next to the name the client reads it by.
    pub backup: PathBuf,
}

impl Removed {
    /// The file that changed, for a person: its path, and the link that names it.
    pub fn file(&self) -> String {
        match &self.link {
            Some(link) => format!("{}, which {} links to", self.path.display(), link.display()),
            None => self.path.display().to_string(),
        }
    }
}

/// Takes `secret` out of the file `origin` names (the file a link names, the link kept), after keeping
/// a backup; refused (nothing written) when the file no longer holds that key there, the edit would
/// change anything else, or the file cannot be rewritten whole.
pub fn remove_plaintext(origin: &Origin, secret: &Secret) -> Result<Removed, String> {
    let named = origin.file().ok_or_else(|| format!("{} is not a file Keymux edits", origin.describe()))?;
    let path = &real_path(named);
    let by_hand = |why: String| format!("{}: {why}; remove the key by hand (it is in Keymux now)", path.display());
    let bytes = read_limited(path).map_err(|e| e.to_string())?.ok_or_else(|| format!("{} is gone", path.display()))?;
    rewritable(path).map_err(by_hand)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    let new = stripped(&text, origin, secret).map_err(by_hand)?;
    let now = Clock::system().unix_ms() / 1000;
    let mode = mode_of(path);
    let backup = keep_backup(named, "keymux-backup", text.as_bytes(), mode, now).map_err(|e| e.to_string())?;
    write_atomically_with_mode(path, new.as_bytes(), mode)
        .map_err(|e| format!("cannot write {}: {e} (the backup {} is kept)", path.display(), backup.display()))?;
    let link = std::path::absolute(named).is_ok_and(|named| named != *path).then(|| named.to_owned());
    Ok(Removed { path: path.to_owned(), link, backup })
}

/// Refuses a file that a new text renamed over it would not take the key out of: one that is not a
/// regular file, or one with other names (hard links), which would go on holding the key.
fn rewritable(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("it cannot be read ({e})"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    #[cfg(unix)]
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err("it has other names (hard links), which would keep the key".into());
    }
    Ok(())
}

/// The text without the key, checked: the parsed result is the parsed original with only that change.
fn stripped(text: &str, origin: &Origin, secret: &Secret) -> Result<String, String> {
    let original: Value = serde_json::from_str(text).map_err(|e| format!("it is no longer JSON ({e})"))?;
    let (at, held): (Vec<&str>, Option<&Value>) = match origin {
        Origin::CodexAuth(_) => (vec![ENV_VAR], original.get(ENV_VAR)),
        Origin::PiAuth(_, provider) => (vec![provider.as_str()], original.get(provider).and_then(|e| e.get("key"))),
        Origin::PiModels(_, provider) => {
            let at = vec!["providers", provider.as_str(), "apiKey"];
            let held = at.iter().try_fold(&original, |v, k| v.get(*k));
            (at, held)
        }
        Origin::Env(_) | Origin::Pasted(..) | Origin::CodexChatgpt(..) => return Err("not a file Keymux edits".into()),
    };
    if held.and_then(Value::as_str) != Some(secret.expose()) {
        return Err("it no longer holds that key there".into());
    }
    let (start, end) = member(text, &at).ok_or("the key could not be found in the text")?;
    let mut expected = original.clone();
    let new = match origin {
        Origin::CodexAuth(_) => {
            expected[ENV_VAR] = Value::Null;
            let value = value_start(text, start).ok_or("the key could not be found in the text")?;
            format!("{}null{}", &text[..value], &text[end..])
        }
        Origin::PiAuth(..) | Origin::PiModels(..) | Origin::Env(_) | Origin::Pasted(..) | Origin::CodexChatgpt(..) => {
            remove_at(&mut expected, &at);
            cut_member(text, start, end)
        }
    };
    let parsed: Value = serde_json::from_str(&new).map_err(|_| "the key could not be taken out on its own")?;
    if parsed != expected {
        return Err("the key could not be taken out on its own".into());
    }
    Ok(new)
}

fn remove_at(root: &mut Value, at: &[&str]) {
    let Some((last, parents)) = at.split_last() else { return };
    let parent = parents.iter().try_fold(root, |v, k| v.get_mut(*k));
    if let Some(object) = parent.and_then(Value::as_object_mut) {
        object.shift_remove(*last);
    }
}

/// The text without the member at `start..end`, with the comma that separated it.
fn cut_member(text: &str, start: usize, end: usize) -> String {
    let after = &text[end..];
    let trimmed = after.trim_start();
    if let Some(rest) = trimmed.strip_prefix(',') {
        // Not the last member: the next one moves up into its place (and its indentation).
        let next = text.len() - rest.trim_start().len();
        return format!("{}{}", &text[..start], &text[next..]);
    }
    let before = text[..start].trim_end();
    match before.strip_suffix(',') {
        Some(kept) => format!("{kept}{after}"),
        // The only member: the object is left empty.
        None => format!("{before}{}", after.trim_start()),
    }
}

/// Where the value of the member that starts (at its name) at `start` begins.
fn value_start(text: &str, start: usize) -> Option<usize> {
    let name_end = scan::string_end(text.as_bytes(), start)?;
    let colon = name_end + text[name_end..].find(':')?;
    Some(colon + 1 + (text[colon + 1..].len() - text[colon + 1..].trim_start().len()))
}

/// The span of the member at `at` (from its name's opening quote to its value's end), found by
/// walking the JSON text.
fn member(text: &str, at: &[&str]) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut object = scan::skip_ws(bytes, 0);
    let mut span = None;
    for name in at {
        let (start, value, end) = scan::members(bytes, object)?.into_iter().find(|(s, _, _)| {
            let end = scan::string_end(bytes, *s).unwrap_or(*s);
            serde_json::from_str::<String>(&text[*s..end]).is_ok_and(|n| n == *name)
        })?;
        span = Some((start, end));
        object = value;
    }
    span
}

/// A small scanner over JSON text that only finds where things are (the text is known to be JSON).
mod scan {
    pub(super) fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
        while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        at
    }

    pub(super) use crate::setup::string_end;

    /// The byte just past the value that starts at `at`.
    pub(super) fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
        match bytes.get(at)? {
            b'"' => string_end(bytes, at),
            open @ (b'{' | b'[') => {
                let close = if *open == b'{' { b'}' } else { b']' };
                let mut at = skip_ws(bytes, at + 1);
                if bytes.get(at) == Some(&close) {
                    return Some(at + 1);
                }
                loop {
                    if *open == b'{' {
                        at = skip_ws(bytes, string_end(bytes, at)?);
                        at = skip_ws(bytes, at + 1);
                    }
                    at = skip_ws(bytes, value_end(bytes, at)?);
                    match bytes.get(at)? {
                        b',' => at = skip_ws(bytes, at + 1),
                        c if *c == close => return Some(at + 1),
                        _ => return None,
                    }
                }
            }
            _ => {
                let len = bytes[at..].iter().position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace());
                Some(at + len.unwrap_or(bytes.len() - at))
            }
        }
    }

    /// The members of the object at `at`: (name start, value start, value end).
    pub(super) fn members(bytes: &[u8], at: usize) -> Option<Vec<(usize, usize, usize)>> {
        if bytes.get(at) != Some(&b'{') {
            return None;
        }
        let mut found = Vec::new();
        let mut at = skip_ws(bytes, at + 1);
        while bytes.get(at) == Some(&b'"') {
            let name = at;
            at = skip_ws(bytes, string_end(bytes, at)?);
            let value = skip_ws(bytes, at + 1);
            let end = value_end(bytes, value)?;
            found.push((name, value, end));
            at = skip_ws(bytes, end);
            if bytes.get(at) == Some(&b',') {
                at = skip_ws(bytes, at + 1);
            }
        }
        Some(found)
    }
}

#[cfg(test)]
pub(super) fn check(text: &str, origin: &Origin, secret: &str) -> Result<String, String> {
    stripped(text, origin, &Secret::new(secret))
}
