//! The check a running gateway makes by itself: the installed clients' versions looked at when it
//! starts and every hour, and each client whose version changed since (or that was not seen yet)
//! checked through Keymux, so the tray's notification and the Connect view say whether it works before
//! the user's first real turn with it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::events::ClientChecked;
use crate::gateway::Gateway;

/// How often the installed clients' versions are looked at.
pub const EVERY: Duration = Duration::from_secs(60 * 60);

/// Looks at the clients on `path` now and every `every`, checking each whose version changed.
pub async fn watch(gateway: Arc<Gateway>, path: String, every: Duration) {
    // Per client, the version last checked (two clients at most).
    let mut checked: HashMap<&'static str, Option<String>> = HashMap::new();
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        for found in super::installed(&path).await {
            let name = found.client.name();
            if checked.get(name) == Some(&found.version) {
                continue;
            }
            let report = super::check_client(&found, &path).await;
            tracing::info!(client = name, ok = report.ok, "{}", report.summary());
            checked.insert(name, found.version.clone());
            gateway.client_checked(ClientChecked {
                name: name.to_owned(),
                version: report.version.clone(),
                ok: report.ok,
                summary: report.summary(),
            });
        }
    }
}
