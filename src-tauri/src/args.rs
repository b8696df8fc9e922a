//! The tray app's command line: the gateway flags of `keymux serve`, and `--hidden` for starting at
//! login without opening the window.

use std::net::SocketAddr;
use std::path::PathBuf;

/// What the command line asked for.
#[derive(Clone, Debug, Default)]
pub struct Args {
    /// `--config PATH`.
    pub config: Option<PathBuf>,
    /// `--listen IP:PORT`.
    pub listen: Option<SocketAddr>,
    /// `--upstream URL`.
    pub upstream: Option<String>,
    /// `--ephemeral`: secrets from the environment only, never the keychain.
    pub ephemeral: bool,
    /// `--hidden`: start in the tray without opening the window (how start at login launches it).
    pub hidden: bool,
}

pub const USAGE: &str =
    "usage: keymux-tray [--config PATH] [--listen IP:PORT] [--upstream URL] [--ephemeral] [--hidden]\n\
The tray app runs the Keymux gateway and shows it in the system tray; `keymux serve` runs it headless.";

impl Args {
    /// Parses the arguments after the program name.
    pub fn parse(raw: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut args = Self::default();
        let mut raw = raw.into_iter();
        while let Some(arg) = raw.next() {
            let mut value = |flag: &str| raw.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
            match arg.as_str() {
                "--config" => args.config = Some(PathBuf::from(value("--config")?)),
                "--listen" => {
                    let v = value("--listen")?;
                    args.listen = Some(v.parse().map_err(|e| format!("--listen {v:?}: {e}\n{USAGE}"))?);
                }
                "--upstream" => args.upstream = Some(value("--upstream")?),
                "--ephemeral" => args.ephemeral = true,
                "--hidden" => args.hidden = true,
                "--help" | "-h" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        Ok(args)
    }
}
