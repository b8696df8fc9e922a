//! Running an installed client: a clean environment (PATH, a throwaway HOME, and what the check
//! names), no stdin, a deadline, and the tail of what it printed.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The longest one client run may take: a hung client fails its check instead of holding it.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(120);

/// Lines of a failed client's output a check quotes.
const TAIL_LINES: usize = 6;
/// Characters of a failed client's output a check quotes, at most.
const TAIL_CHARS: usize = 600;

/// How one run of a client ended.
pub(super) struct Ran {
    /// It exited with status 0.
    pub(super) ok: bool,
    /// Its exit status in words (`exited with status 1`, `was ended by a signal`, `did not finish
    /// within 120 s`, `could not be started: …`).
    pub(super) status: String,
    /// The last lines it printed (stdout, then stderr), unmasked.
    pub(super) tail: String,
    /// Everything it printed on stdout.
    pub(super) stdout: String,
}

/// Runs `bin args` in `dir` with `path` as PATH and `env` besides, nothing else inherited.
pub(super) async fn run(bin: &Path, args: &[&str], dir: &Path, path: &str, env: &[(&str, &str)]) -> Ran {
    let child = tokio::process::Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(CLIENT_DEADLINE, child).await {
        Err(_) => {
            let secs = CLIENT_DEADLINE.as_secs();
            return Ran::failed(format!("did not finish within {secs} s"));
        }
        Ok(Err(e)) => return Ran::failed(format!("could not be started: {e}")),
        Ok(Ok(out)) => out,
    };
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let printed = format!("{stdout}\n{stderr}");
    let status = match out.status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "was ended by a signal".to_owned(),
    };
    Ran { ok: out.status.success(), status, tail: tail(&printed), stdout: stdout.into_owned() }
}

impl Ran {
    fn failed(status: String) -> Self {
        Self { ok: false, status, tail: String::new(), stdout: String::new() }
    }
}

/// The last lines of `text` that are not blank, at most [`TAIL_LINES`] and [`TAIL_CHARS`].
pub(super) fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    let joined = lines[lines.len().saturating_sub(TAIL_LINES)..].join(" | ");
    let chars: Vec<char> = joined.chars().collect();
    if chars.len() <= TAIL_CHARS {
        return joined;
    }
    let kept: String = chars[chars.len() - TAIL_CHARS..].iter().collect();
    format!("…{kept}")
}

/// The version a client prints for `--version` (`codex-cli 0.171.0`, `1.6.0`): its last word that
/// starts with a digit.
pub(super) fn version_in(printed: &str) -> Option<String> {
    printed.split_whitespace().rev().find(|w| w.starts_with(|c: char| c.is_ascii_digit())).map(str::to_owned)
}

/// The first `name` on `path` that is a file (the client a user's shell would start).
pub(super) fn on_path(name: &str, path: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join(name)).find(|bin| bin.is_file())
}
