//! `keymux clients check [--json]`: every installed client runs one real turn through Keymux per
//! transport it uses, against the stand-in provider (`clients_check`); per client its version and each
//! transport's result. Exits 0 only when at least one client was found and every check passed: with no
//! client installed there is nothing that was shown to work, which a script gating on the check should
//! not take for a pass.

use super::out;
use crate::clients_check::{self, Report};
use crate::startup::StartError;

pub(super) async fn check(json: bool) -> Result<(), StartError> {
    let path = std::env::var("PATH").unwrap_or_default();
    let report = clients_check::check(&path).await;
    if json {
        out(&serde_json::to_string(&report).unwrap_or_default());
    } else {
        for line in lines(&report) {
            out(&line);
        }
    }
    match (report.clients.is_empty(), report.ok()) {
        (true, _) => Err(StartError::Usage(
            "no client to check: neither `codex` nor `pi` is on PATH (install one, or run the check where its PATH \
             finds them)"
                .into(),
        )),
        (false, true) => Ok(()),
        (false, false) => {
            let failed: Vec<&str> = report.clients.iter().filter(|c| !c.ok).map(|c| c.name).collect();
            Err(StartError::Usage(format!("{} does not work through Keymux (see above)", failed.join(" and "))))
        }
    }
}

/// The report for a person: per client a line with its name, version and result, then per transport
/// its result and why it failed.
fn lines(report: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    for client in &report.clients {
        let version = client.version.as_deref().unwrap_or("(version unknown)");
        let result = if client.ok { "works through Keymux" } else { "FAILED" };
        lines.push(format!("{} {version}: {result}", client.name));
        for check in &client.checks {
            match &check.error {
                None => lines.push(format!("  {}: ok", check.transport.name())),
                Some(why) => lines.push(format!("  {}: failed: {why}", check.transport.name())),
            }
        }
    }
    lines
}
