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

use std::io::IsTerminal as _;

use tracing::Level;
use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// The variable that sets the filter.
pub const ENV: &str = "KEYMUX_LOG";

/// Keymux's own crates: the gateway library and binary, and the tray app.
const OWN: [&str; 2] = ["keymux", "keymux_tray"];

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(allowed("keymux", Level::DEBUG));
        assert!(!allowed("keymuxevil", Level::DEBUG));
    }
}
