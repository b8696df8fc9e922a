//! Small helpers: poison-tolerant locking, id generation, text splitting and duration
//! formatting.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::RngCore;

/// Locks a mutex, carrying on with the data if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `n` random bytes as lowercase hex.
pub(crate) fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

/// An OpenAI-style object id: prefix, underscore, 48 hex digits (`resp_…`, `rs_…`, `msg_…`).
pub(crate) fn object_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_hex(24))
}

/// A request id as in `x-request-id`: `req_` and 32 hex digits.
pub(crate) fn request_id() -> String {
    format!("req_{}", random_hex(16))
}

/// Formats a duration the way OpenAI's rate-limit headers and messages do:
/// `0s`, `12ms`, `1s`, `1.2s`, `6m0s`, `1m30.5s`, `1h2m3s`.
pub(crate) fn format_reset(d: Duration) -> String {
    let total_ms = d.as_millis();
    if total_ms == 0 {
        return "0s".to_owned();
    }
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let hours = total_ms / 3_600_000;
    let minutes = (total_ms / 60_000) % 60;
    let secs_ms = total_ms % 60_000;
    let whole = secs_ms / 1000;
    let frac = secs_ms % 1000;
    let seconds = if frac == 0 {
        format!("{whole}s")
    } else {
        let digits = format!("{frac:03}");
        format!("{whole}.{}s", digits.trim_end_matches('0'))
    };
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&seconds);
    out
}

/// Whole seconds, rounded up, at least one.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    ms.div_ceil(1000).max(1)
}

/// Milliseconds, rounded up, at least one.
pub(crate) fn ceil_millis(d: Duration) -> u64 {
    let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    micros.div_ceil(1000).max(1)
}

/// Masks a presented key like OpenAI does in its 401 message: a short prefix, then `***`.
/// Never shows more than half of the key.
pub(crate) fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let shown = (chars.len() / 2).min(5);
    let prefix: String = chars.iter().take(shown).collect();
    format!("{prefix}***")
}

/// Truncates to at most `max` characters.
pub(crate) fn truncate_chars(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// Splits `text` into `parts` pieces of nearly equal character counts (none empty unless
/// the text is), as a reply is streamed in deltas.
pub(crate) fn split_deltas(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let parts = parts.clamp(1, chars.len());
    let size = chars.len().div_ceil(parts);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_format_matches_openai_style() {
        assert_eq!(format_reset(Duration::ZERO), "0s");
        assert_eq!(format_reset(Duration::from_millis(12)), "12ms");
        assert_eq!(format_reset(Duration::from_secs(1)), "1s");
        assert_eq!(format_reset(Duration::from_millis(1200)), "1.2s");
        assert_eq!(format_reset(Duration::from_secs(360)), "6m0s");
        assert_eq!(format_reset(Duration::from_millis(90_500)), "1m30.5s");
        assert_eq!(format_reset(Duration::from_millis(17_280)), "17.28s");
        assert_eq!(format_reset(Duration::from_secs(3723)), "1h2m3s");
    }

    #[test]
    fn masks_never_reveal_a_whole_key() {
        assert_eq!(mask_key("sk-a1"), "sk***");
        assert_eq!(mask_key("sk-wrong-key-123"), "sk-wr***");
        assert_eq!(mask_key(""), "***");
        assert!(!mask_key("abcdef").contains("abcdef"));
    }

    #[test]
    fn ceilings() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ceil_secs(Duration::ZERO), 1);
        assert_eq!(ceil_millis(Duration::from_micros(1500)), 2);
    }

    #[test]
    fn deltas_rebuild_the_text() {
        let text = "SIM-REPLY #1 from org-a: hello";
        let parts = split_deltas(text, 4);
        assert_eq!(parts.len(), 4);
        assert_eq!(parts.concat(), text);
        assert_eq!(split_deltas("ab", 4).len(), 2);
    }

    #[test]
    fn ids_have_openai_shape() {
        let id = object_id("resp");
        assert_eq!(id.len(), 5 + 48);
        assert!(id[5..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(request_id().len(), 4 + 32);
    }
}
