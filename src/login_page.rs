//! The dashboard opened in the user's browser without its one-time login code on a command line.
//!
//! An opener (`xdg-open`, `open`, `explorer`) and the browser it starts keep their arguments in the
//! process list (`/proc/PID/cmdline`), which every local user can read: a login link passed there can
//! be redeemed by another user first. So the link goes into a small page that only this user can read
//! (0600, in a 0700 directory under [`crate::runfile::runtime_base`]), which sends the browser on to
//! it, and the opener is handed the page's `file://` URL: a path, no code. `keymux dashboard --open`
//! and the tray's Open in browser both open the dashboard through [`open`].
//!
//! A page is named by its code's label (`access::code_label`), so the gateway that issued the code
//! removes it once the code is used, expires or is pushed out ([`remove_spent`]);
//! pages older than a code lives are removed at each open and at each gateway's start ([`sweep`]),
//! where a gateway that stopped left them.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::access::{code_label, Access, LOGIN_CODE_TTL};
use crate::clock::Clock;

/// Why the dashboard could not be opened in a browser. The link is never part of it.
#[derive(Debug, thiserror::Error)]
pub enum NotOpened {
    /// The link is not a gateway's login link (`http://HOST:PORT/login?code=…`).
    #[error("the dashboard link is not a Keymux login link")]
    NotALoginLink,
    /// The private page could not be written (where, and why); nothing was opened.
    #[error("the login page could not be written ({0})")]
    Page(String),
    /// No opener ran, or it failed.
    #[error("no browser could be opened here")]
    NoBrowser,
}

/// Opens the dashboard's login `link` in the default browser through a private page. Waits a few
/// seconds for the opener to fail; a page no browser was opened for is removed at once.
pub fn open(link: &str) -> Result<(), NotOpened> {
    let page = write(link)?;
    if run_opener(&file_url(&page)) {
        Ok(())
    } else {
        let _ = std::fs::remove_file(&page);
        Err(NotOpened::NoBrowser)
    }
}

/// Writes the page that sends a browser on to `link` (0600, in the private directory, after the
/// [`sweep`] of old pages there), and says where.
pub fn write(link: &str) -> Result<PathBuf, NotOpened> {
    let code = code_of(link).ok_or(NotOpened::NotALoginLink)?;
    let dir = dir().ok_or_else(|| NotOpened::Page("no runtime or cache directory".into()))?;
    let failed = |e: std::io::Error| NotOpened::Page(format!("{}: {e}", dir.display()));
    make_private_dir(&dir).map_err(failed)?;
    sweep(&Clock::system());
    let path = dir.join(file_name(&code_label(code)));
    write_private(&path, page(link).as_bytes()).map_err(failed)?;
    Ok(path)
}

/// Removes the pages of the login codes that stopped waiting (used, expired, pushed out) since last
/// asked: the gateway does at each tick and as soon as a code is used.
pub fn remove_spent(access: &Access, now: Instant) {
    let spent = access.take_spent_codes(now);
    let Some(dir) = dir().filter(|_| !spent.is_empty()) else { return };
    for label in spent {
        let _ = std::fs::remove_file(dir.join(file_name(&label)));
    }
}

/// Removes the pages older than a login code lives: their codes no longer work.
pub fn sweep(clock: &Clock) {
    let Some(entries) = dir().and_then(|dir| std::fs::read_dir(dir).ok()) else { return };
    let ttl_ms = u64::try_from(LOGIN_CODE_TTL.as_millis()).unwrap_or(u64::MAX);
    let oldest = std::time::UNIX_EPOCH + std::time::Duration::from_millis(clock.unix_ms().saturating_sub(ttl_ms));
    for entry in entries.flatten() {
        let ours = entry.file_name().to_str().is_some_and(|n| n.starts_with("login-") && n.ends_with(".html"));
        let meta = entry.metadata().ok().filter(std::fs::Metadata::is_file);
        let old = meta.and_then(|m| m.modified().ok()).is_some_and(|written| written < oldest);
        if ours && old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The directory of the login pages (made by `write` only).
fn dir() -> Option<PathBuf> {
    Some(crate::runfile::runtime_base()?.join("keymux").join("login"))
}

fn file_name(label: &str) -> String {
    format!("login-{label}.html")
}

/// The code of a gateway's login link, when the link is one: `http://` and a host and port, then
/// `/login?code=` and the code. Nothing else is let into the page, so nothing in it needs escaping.
pub(crate) fn code_of(link: &str) -> Option<&str> {
    let (root, code) = link.split_once("/login?code=")?;
    let authority = root.strip_prefix("http://")?;
    let host_ok = |b: u8| b.is_ascii_alphanumeric() || b".:[]-".contains(&b);
    let code_ok = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    let ok = !authority.is_empty() && authority.bytes().all(host_ok) && !code.is_empty() && code.bytes().all(code_ok);
    ok.then_some(code)
}

/// The page: a refresh for a browser without scripts, `location.replace` (no history entry) for one
/// with them, and words that say what it is when neither goes on.
fn page(link: &str) -> String {
    let target = serde_json::to_string(link).unwrap_or_default();
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Cache-Control" content="no-store">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0; url={link}">
<title>Keymux: opening the dashboard</title>
<script>location.replace({target});</script>
</head>
<body>
<p>This page opens the Keymux dashboard with a one-time login link. Only you can read it, and Keymux
removes it once the link is used. If your browser does not go on by itself,
<a href="{link}">open the dashboard</a>. The link works once, within ten minutes;
<code>keymux dashboard --open</code> makes a fresh one.</p>
</body>
</html>
"#
    )
}

/// Makes `dir` (its parents as usual) and makes sure it is a directory of this user's, mode 0700, not
/// a link: a directory someone else made or can enter is refused, not used.
#[cfg(unix)]
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != rustix::process::getuid().as_raw() {
        return Err(std::io::Error::other("it is not a directory of this user's"));
    }
    if meta.mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Writes a new file (never one already there, nor through a link) that only this user can read.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// `path` as a `file://` URL, every byte but the unreserved ones and `/` percent-encoded.
fn file_url(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    let mut url = String::from(if text.starts_with('/') { "file://" } else { "file:///" });
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~:".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// Runs the platform's opener on `url`; whether it opened something. Its own messages (`xdg-open`
/// without a browser prints several) are not passed on: the caller says it in one line.
fn run_opener(url: &str) -> bool {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else if cfg!(windows) {
        "explorer"
    } else {
        "xdg-open"
    };
    let child = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    // An opener that starts the browser itself may keep running as long as the browser does: still
    // running after a few seconds means it opened one.
    for _ in 0..50 {
        match child.try_wait() {
            Ok(Some(status)) => return status.success() || cfg!(windows),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(100)),
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_login_link_makes_a_page_and_nothing_in_it_is_markup() {
        assert_eq!(code_of("http://127.0.0.1:8787/login?code=Ab-9_z"), Some("Ab-9_z"));
        assert_eq!(code_of("http://[::1]:8787/login?code=abc"), Some("abc"));
        for bad in [
            "https://127.0.0.1:8787/login?code=abc",
            "http://127.0.0.1:8787/login?code=",
            "http://127.0.0.1:8787/login?code=a\"><script>",
            "http://evil\"/login?code=abc",
            "javascript:alert(1)//login?code=abc",
            "http:///login?code=abc",
        ] {
            assert_eq!(code_of(bad), None, "{bad}");
        }
        let text = page("http://127.0.0.1:8787/login?code=abc");
        assert!(text.contains("location.replace(\"http://127.0.0.1:8787/login?code=abc\");"), "{text}");
        assert!(text.contains("content=\"0; url=http://127.0.0.1:8787/login?code=abc\""), "{text}");
    }

    #[test]
    fn a_page_path_is_a_file_url() {
        assert_eq!(
            file_url(Path::new("/run/user/1000/keymux/login/login-ab.html")),
            "file:///run/user/1000/keymux/login/login-ab.html"
        );
        assert_eq!(file_url(Path::new("/home/a b/x#y")), "file:///home/a%20b/x%23y");
    }
}
