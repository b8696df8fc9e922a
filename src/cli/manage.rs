//! `keymux dashboard` and `keymux pause|resume`: acting on the running gateway.

use std::path::PathBuf;

use super::control;
use super::loaded::{load, usage};
use super::out;

use crate::startup::StartError;

pub(super) async fn dashboard(config_path: Option<PathBuf>, open: bool) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let url = control::open(&loaded).await?.login_link().await.map_err(usage)?;
    out(&url);
    if open && !open_browser(&url) {
        // The link is printed: the user can still open it, so this is said, not failed on.
        eprintln!("no browser could be opened here; open the link above in one yourself");
    }
    Ok(())
}

pub(super) async fn pause(config_path: Option<PathBuf>, paused: bool) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    control::open(&loaded).await?.pause(paused).await.map_err(usage)?;
    out(if paused { "routing paused: new requests get 503 until `keymux resume`" } else { "routing resumed" });
    Ok(())
}

/// Opens `url` in the default browser; whether one could be. The opener's own messages (`xdg-open`
/// without a browser prints several) are not passed on: the one line above says it all.
fn open_browser(url: &str) -> bool {
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
