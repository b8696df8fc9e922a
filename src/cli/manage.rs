//! `keymux dashboard` and `keymux pause|resume`: acting on the running gateway.

use std::path::PathBuf;

use super::control;
use super::loaded::{load, usage};
use super::out;

use crate::startup::StartError;

/// Without `--open`, prints a fresh login link on the user's own terminal (standard output is no
/// command line). With it, opens the dashboard through a private page (`login_page`): the link is
/// printed only when no browser could be opened.
pub(super) async fn dashboard(config_path: Option<PathBuf>, open: bool) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    let url = control::open(&loaded).await?.login_link().await.map_err(usage)?;
    if !open {
        out(&url);
        return Ok(());
    }
    let link = url.clone();
    let opened = tokio::task::spawn_blocking(move || crate::login_page::open(&link))
        .await
        .unwrap_or(Err(crate::login_page::NotOpened::NoBrowser));
    match opened {
        Ok(()) => out("the dashboard is opening in your browser"),
        Err(why) => {
            // The link is printed: the user can still open it, so this is said, not failed on.
            out(&url);
            eprintln!("{why}; open the link above in a browser yourself");
        }
    }
    Ok(())
}

pub(super) async fn pause(config_path: Option<PathBuf>, paused: bool) -> Result<(), StartError> {
    let loaded = load(config_path)?;
    control::open(&loaded).await?.pause(paused).await.map_err(usage)?;
    out(if paused { "routing paused: new requests get 503 until `keymux resume`" } else { "routing resumed" });
    Ok(())
}
