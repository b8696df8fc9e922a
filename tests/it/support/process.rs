//! The real `keymux` binary run as a child process, and what it leaves behind.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

use super::*;

/// Every `.jsonl` file under `dir`, where Codex and pi record their sessions, sorted (Codex names its
/// files by the time a session began).
pub fn session_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "jsonl") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The `keymux` binary run as a child process.
pub struct Keymux {
    pub child: tokio::process::Child,
    pub base: String,
    pub root: String,
    /// Everything the process wrote to stdout and stderr.
    pub output: Arc<Mutex<Vec<u8>>>,
    /// The tasks copying its stdout and stderr into `output`; each ends when its pipe closes.
    readers: Vec<tokio::task::JoinHandle<()>>,
}

pub fn keymux_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_keymux"))
}

/// Environment for a child `keymux`: nothing from the test process but PATH and what is given.
pub fn base_env(home: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), home.display().to_string()),
        ("XDG_CONFIG_HOME".to_owned(), home.join(".config").display().to_string()),
        ("KEYMUX_LOG".to_owned(), "debug".to_owned()),
        ("KEYMUX_ADMIN_TOKEN".to_owned(), ADMIN.to_owned()),
    ];
    for var in ["DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XDG_DATA_HOME"] {
        if let Ok(v) = std::env::var(var) {
            env.push((var.to_owned(), v));
        }
    }
    env
}

impl Keymux {
    /// Starts `keymux serve --listen 127.0.0.1:0 ARGS` and waits for its "listening on" line.
    pub async fn spawn(args: &[&str], env: &[(String, String)]) -> Self {
        Self::spawn_under(&[], args, env).await
    }

    /// `spawn`, run through `wrapper` (a program and its arguments that ends by running the command
    /// it is given, as `prlimit --nofile=N:N --` does).
    pub async fn spawn_under(wrapper: &[&str], args: &[&str], env: &[(String, String)]) -> Self {
        let mut cmd = match wrapper.split_first() {
            None => tokio::process::Command::new(keymux_bin()),
            Some((program, rest)) => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(rest).arg(keymux_bin());
                cmd
            }
        };
        cmd.arg("serve");
        if !args.contains(&"--listen") {
            cmd.arg("--listen").arg("127.0.0.1:0");
        }
        cmd.args(args);
        cmd.env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().expect("keymux starts");
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut stderr = child.stderr.take().expect("stderr");
        let sink = output.clone();
        let stderr_reader = tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("keymux printed its address in time")
            .expect("stdout readable");
        let Some(line) = line else {
            let _ = child.wait().await;
            panic!("keymux exited early: {}", String::from_utf8_lossy(&output.lock().unwrap()));
        };
        output.lock().unwrap().extend_from_slice(format!("{line}\n").as_bytes());
        let sink = output.clone();
        let stdout_reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                sink.lock().unwrap().extend_from_slice(format!("{line}\n").as_bytes());
            }
        });
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://") && w.ends_with("/v1"))
            .expect("listening line names the base URL")
            .to_owned();
        let root = base.trim_end_matches("/v1").to_owned();
        Self { child, base, root, output, readers: vec![stderr_reader, stdout_reader] }
    }

    pub fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits for a line of its log (or output) that holds `needle`.
    pub async fn wait_for_log(&self, needle: &str) {
        let read = || async { self.output_text() };
        super::until(&format!("{needle:?} in the log"), read, |text| text.contains(needle)).await;
    }

    pub async fn stop(mut self) -> String {
        if let Some(pid) = self.child.id() {
            // SIGTERM, so the graceful shutdown path runs.
            let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        // Everything it wrote, up to both pipes' end (not whatever the copying tasks had got to).
        for reader in std::mem::take(&mut self.readers) {
            let _ = tokio::time::timeout(Duration::from_secs(10), reader).await;
        }
        self.output_text()
    }
}

/// Runs `keymux ARGS` to completion with `stdin`; returns (success, stdout, stderr).
pub async fn run_keymux(args: &[&str], env: &[(String, String)], stdin: &str) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt as _;
    let mut cmd = tokio::process::Command::new(keymux_bin());
    cmd.args(args).env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("keymux runs");
    let mut input = child.stdin.take().expect("stdin");
    // A command may end without reading its input (a refusal before it asks for a secret): the pipe
    // is then closed under the write, which is its answer, not the test's failure.
    if let Err(e) = input.write_all(stdin.as_bytes()).await {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("keymux finished in time")
        .expect("output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts that none of `secrets` occurs in `text`.
pub fn assert_no_secrets(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "{what} contains a secret ({}…)", &s[..s.len().min(5)]);
    }
}
