//! The interactive Codex TUI inside tmux, a real terminal emulator: it answers the terminal queries
//! the TUI waits on at start (a bare pty does not). Tests read its screen and wait on what it draws.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::codex_bin;

/// An interactive Codex TUI running in its own tmux server (a socket in a temporary directory), with
/// nothing in its environment but PATH, HOME and CODEX_HOME. Dropping it stops the server and the TUI.
pub struct Tui {
    socket: tempfile::TempDir,
}

impl Tui {
    /// Starts `codex ARGS` in `work`, each argument quoted for the shell tmux runs it with.
    pub fn start(codex_home: &Path, work: &Path, args: &[&str]) -> Self {
        let socket = tempfile::tempdir().unwrap();
        let home = format!("HOME={}", codex_home.display());
        let codex_home_var = format!("CODEX_HOME={}", codex_home.display());
        let quoted: Vec<String> = args.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect();
        let command = format!("{} {}", codex_bin().display(), quoted.join(" "));
        let tui = Self { socket };
        let status = tui
            .tmux()
            .args(["new-session", "-d", "-x", "160", "-y", "48", "-c"])
            .arg(work)
            .args(["-e", &home, "-e", &codex_home_var, &command])
            .status()
            .expect("tmux runs (scripts/test installs it)");
        assert!(status.success(), "tmux started the Codex TUI");
        tui
    }

    fn tmux(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(self.socket.path().join("tmux")).env_clear();
        command.env("PATH", std::env::var("PATH").unwrap_or_default()).env("TERM", "xterm-256color");
        command
    }

    /// What the TUI shows now.
    pub fn screen(&self) -> String {
        let out = self.tmux().args(["capture-pane", "-p", "-t", "0"]).output().expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until a line of the screen holds every one of `parts`: the TUI drew it. A generous two
    /// minutes that only a hung client exceeds; the screen is checked on every step of a ticker, not
    /// after a fixed sleep.
    pub async fn wait_for(&self, parts: &[&str]) {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        for _ in 0..1200 {
            tick.tick().await;
            if self.screen().lines().any(|line| parts.iter().all(|part| line.contains(part))) {
                return;
            }
        }
        panic!("the Codex TUI never showed {parts:?} on one line; its screen:\n{}", self.screen());
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}
