//! The check a running gateway makes by itself: the installed clients' versions looked at when it
//! starts and every hour, and each client whose version changed since (or that was not seen yet)
//! checked through Keymux, so the tray's notification and the Connect view say whether it works before
//! the user's first real turn with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::events::ClientChecked;
use crate::gateway::Gateway;
use crate::runtime::Runtime;

/// How often the installed clients' versions are looked at.
pub const EVERY: Duration = Duration::from_secs(60 * 60);

/// Watches the clients on this process's PATH beside `runtime` (`keymux serve` and the tray start it),
/// unless `KEYMUX_CLIENT_CHECK=off`. The record is kept in Keymux's data directory, or for an
/// `ephemeral` gateway in memory only.
pub fn start(runtime: &mut Runtime, ephemeral: bool) {
    if std::env::var("KEYMUX_CLIENT_CHECK").is_ok_and(|v| v == "off") {
        return;
    }
    let path = std::env::var("PATH").unwrap_or_default();
    let watching = watch(runtime.gateway().clone(), path, EVERY, record_path(ephemeral));
    runtime.run_alongside(watching);
}

/// Where the checks are kept between runs, so that a start checks only a client whose version changed
/// since the last check (a check runs each client for a few real turns): `client-checks.json` in
/// Keymux's data directory. None for an ephemeral gateway, which keeps them in memory only.
pub fn record_path(ephemeral: bool) -> Option<PathBuf> {
    if ephemeral {
        return None;
    }
    crate::setup::default_state_dir().map(|dir| dir.join("client-checks.json"))
}

/// What the record holds: each client's last check (its name, version, whether it passed, the summary;
/// nothing else, and the summary is masked like every message).
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Record {
    checks: Vec<ClientChecked>,
}

fn load(record: Option<&Path>) -> Vec<ClientChecked> {
    let Some(path) = record else { return Vec::new() };
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    match serde_json::from_str::<Record>(&text) {
        Ok(record) => record.checks.into_iter().take(MAX_CLIENTS).collect(),
        Err(e) => {
            tracing::debug!("{} is not a record of client checks ({e}); the clients are checked again", path.display());
            Vec::new()
        }
    }
}

fn save(record: Option<&Path>, checks: &[ClientChecked]) {
    let Some(path) = record else { return };
    let text = match serde_json::to_string_pretty(&Record { checks: checks.to_vec() }) {
        Ok(text) => text,
        Err(e) => return tracing::debug!("the client checks could not be kept: {e}"),
    };
    let written = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| {
        let fresh = path.with_extension("json.new");
        std::fs::write(&fresh, text)?;
        std::fs::rename(&fresh, path)
    });
    if let Err(e) = written {
        tracing::warn!(
            "the client checks could not be kept in {} ({e}); they run again at the next start",
            path.display()
        );
    }
}

/// The most clients a record keeps (Keymux knows two).
const MAX_CLIENTS: usize = 8;

/// Looks at the clients on `path` now and every `every`, checking each whose version changed since
/// its last check (in `record`, kept across runs, or this run's).
pub async fn watch(gateway: Arc<Gateway>, path: String, every: Duration, record: Option<PathBuf>) {
    let mut kept = load(record.as_deref());
    for check in &kept {
        gateway.remember_client_check(check.clone());
    }
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        let mut looked = Vec::new();
        for found in super::installed(&path).await {
            let name = found.client.name();
            let shown = format!("{name} {}", found.version.as_deref().unwrap_or("(no version)"));
            if kept.iter().any(|c| c.name == name && c.version == found.version) {
                looked.push(format!("{shown}, checked before"));
                continue;
            }
            looked.push(format!("{shown}, checked now"));
            let report = super::check_client(&found, &path).await;
            tracing::info!(client = name, ok = report.ok, "{}", report.summary());
            let checked = ClientChecked {
                name: name.to_owned(),
                version: report.version.clone(),
                ok: report.ok,
                summary: report.summary(),
            };
            kept.retain(|c| c.name != name);
            kept.push(checked.clone());
            save(record.as_deref(), &kept);
            gateway.client_checked(checked);
        }
        if looked.is_empty() {
            looked.push("none installed".to_owned());
        }
        tracing::info!("the installed clients were looked at: {}", looked.join("; "));
    }
}
