//! Logging: one setup for the CLI and the tray app.
//!
//! `KEYMUX_LOG` sets the filter (default `info`). At `info`, Keymux logs what needs attention (keys
//! probed, rejected or cooling, store failures, start and stop), never a line per request: the
//! dashboard and `/keymux/api/decisions` carry each request, and a per-request line would cost more than
//! the routing itself. `debug` adds a line per request.
//!
//! Whatever the filter says, other crates are capped at `warn`: at `trace`, the WebSocket and HTTP
//! libraries would log handshake headers (`authorization: Bearer sk-…`) and frame payloads with raw
//! prompts. Only Keymux's own events, which never carry a secret, go below `warn`.
//!
//! Requests refused before any credential is known ([`refused`]) come from anyone who can open a
//! socket, so their lines are bounded: the path cut to [`REFUSED_PATH_CHARS`], and at most
//! [`REFUSED_PER_WINDOW`] lines per [`REFUSED_WINDOW`], the rest counted in one line.

use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::Duration;

use std::time::Instant;

use tracing::Level;
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// The variable that sets the filter.
pub const ENV: &str = "KEYMUX_LOG";

/// Keymux's own crates: the gateway library and binary, and the tray app's two programs.
const OWN: [&str; 3] = ["keymux", "keymux_tray", "keymux_window"];

/// Whether an event may be logged at all, before the user's filter: Keymux's own at any level, other
/// crates' only at `warn` and `error`.
pub fn allowed(target: &str, level: Level) -> bool {
    let own = OWN.iter().any(|c| target == *c || target.strip_prefix(c).is_some_and(|rest| rest.starts_with("::")));
    own || level <= Level::WARN
}

/// Logs to stderr, filtered by `KEYMUX_LOG` (default `info`). Colour only on a terminal. Does nothing
/// if logging was set up already.
pub fn init() {
    let filter = EnvFilter::try_from_env(ENV).unwrap_or_else(|_| EnvFilter::new("info"));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_filter(filter)
        .with_filter(filter_fn(|meta| allowed(meta.target(), *meta.level())));
    let _ = tracing_subscriber::registry().with(layer).try_init();
    // Records of the `log` crate come only from other crates (Keymux logs through `tracing`), and those
    // are capped at `warn`: the libraries' own `trace!` and `debug!` calls (tungstenite has one per
    // frame) stop at the `log` macro's level check instead of being formatted, bridged and filtered
    // out one by one.
    log::set_max_level(log::LevelFilter::Warn);
}

/// Longest part of a refused request's path that is logged.
pub const REFUSED_PATH_CHARS: usize = 64;
/// Most lines about refused requests in one window.
pub const REFUSED_PER_WINDOW: u32 = 10;
/// The window.
pub const REFUSED_WINDOW: Duration = Duration::from_secs(10);

/// The refused requests of the current window.
#[derive(Default)]
struct Refusals {
    started: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

/// What to log for one more refused request.
#[derive(Debug, PartialEq, Eq)]
struct Note {
    /// Requests left out of the previous window's lines, to report first.
    left_out: u64,
    /// Whether this one gets its line.
    line: bool,
    /// Whether this is the window's last line, after which the rest are only counted.
    last: bool,
}

impl Refusals {
    fn note(&mut self, now: Instant) -> Note {
        let mut left_out = 0;
        if self.started.is_none_or(|s| now.saturating_duration_since(s) >= REFUSED_WINDOW) {
            left_out = self.suppressed;
            *self = Self { started: Some(now), logged: 0, suppressed: 0 };
        }
        if self.logged < REFUSED_PER_WINDOW {
            self.logged += 1;
            Note { left_out, line: true, last: self.logged == REFUSED_PER_WINDOW }
        } else {
            self.suppressed += 1;
            Note { left_out, line: false, last: false }
        }
    }
}

static REFUSALS: Mutex<Refusals> = Mutex::new(Refusals { started: None, logged: 0, suppressed: 0 });

/// Logs a request refused before any credential was known, bounded in size and rate.
pub fn refused(path: &str, error: &'static str) {
    let now = crate::clock::Clock::system().now();
    let note = REFUSALS.lock().unwrap_or_else(|p| p.into_inner()).note(now);
    if note.left_out > 0 {
        tracing::warn!("{} more refused requests were suppressed", note.left_out);
    }
    if note.line {
        let mut shown: String = path.chars().take(REFUSED_PATH_CHARS).collect();
        if shown.len() < path.len() {
            shown.push('…');
        }
        tracing::warn!(path = %shown, error, "refused");
    }
    if note.last {
        tracing::warn!(
            "further refused requests are suppressed for up to {} s; a count follows",
            REFUSED_WINDOW.as_secs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn refused_requests_get_a_few_lines_per_window_and_then_a_count() {
        let mut refusals = Refusals::default();
        let now = || crate::clock::Clock::system().now();
        let notes: Vec<Note> = (0..25).map(|_| refusals.note(now())).collect();
        assert_eq!(notes.iter().filter(|n| n.line).count(), REFUSED_PER_WINDOW as usize);
        assert!(notes[REFUSED_PER_WINDOW as usize - 1].last);
        tokio::time::advance(REFUSED_WINDOW).await;
        assert_eq!(refusals.note(now()), Note { left_out: 15, line: true, last: false }, "the count comes first");
    }

    #[test]
    fn other_crates_never_log_below_warn() {
        for target in ["tungstenite::handshake::client", "tokio_tungstenite", "hyper::proto::h1", "reqwest"] {
            assert!(!allowed(target, Level::TRACE), "{target}");
            assert!(!allowed(target, Level::DEBUG), "{target}");
            assert!(!allowed(target, Level::INFO), "{target}");
            assert!(allowed(target, Level::WARN), "{target}");
        }
        assert!(allowed("keymux::ws", Level::TRACE));
        assert!(allowed("keymux_tray::shell", Level::INFO));
        assert!(allowed("keymux_window::view::webkit", Level::INFO));
        assert!(allowed("keymux", Level::DEBUG));
        assert!(!allowed("keymuxevil", Level::DEBUG));
    }
}
