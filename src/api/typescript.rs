//! The dashboard's TypeScript types (`ui/src/api/types.ts`), generated from the control API's Rust
//! bodies (`api::types`); a test fails when the committed file is out of date.

use ts_rs::TS;

use super::types::*;
use crate::clock::LocalPeriods;
use crate::events::RequestRecord;
use crate::keys::{KeyId, KeySource, ProviderId};
use crate::metrics::StoreStatus;
use crate::pool::{HealthState, KeyStatus};

/// The declaration of a type whose Rust struct flattens `base` into it (its field marked `#[ts(skip)]`):
/// `Base & { ...its own fields }`, so the base's fields are declared once.
fn extending(decl: String, base: &str) -> String {
    match decl.split_once(" = ") {
        Some((name, fields)) => format!("{name} = {base} & {fields}"),
        None => decl,
    }
}

/// Budgets in money, and a ChatGPT plan's account.
fn money_and_plan_decls() -> [String; 6] {
    [
        crate::budget::Period::decl(),
        crate::budget::OnLimit::decl(),
        crate::budget::BudgetState::decl(),
        keymux_core::provider::chatgpt::PlanInfo::decl(),
        keymux_core::provider::chatgpt::UsageWindow::decl(),
        keymux_core::provider::chatgpt::PlanWindows::decl(),
    ]
}

/// The bodies of setting clients up and importing keys (`api::setup`).
/// A client's login waiting for the person's yes (`oauth`).
fn login_decls() -> [String; 3] {
    use super::login::{LoginDecided, LoginDecision, LoginRequest};
    [LoginRequest::decl(), LoginDecision::decl(), LoginDecided::decl()]
}

fn setup_decls() -> [String; 12] {
    [
        crate::setup::Client::decl(),
        ClientSetup::decl(),
        SetupRequest::decl(),
        SetupFile::decl(),
        SetupPreview::decl(),
        SetupDone::decl(),
        SetupUndone::decl(),
        FoundKey::decl(),
        ImportOffer::decl(),
        ImportRequest::decl(),
        NotImported::decl(),
        ImportDone::decl(),
    ]
}

/// The changes to a key and to a pool (each field optional; `null` clears one that may be absent), and
/// the settings they change, declared once in Rust.
fn change_decls() -> [String; 6] {
    use crate::control::pools::PoolChanges;
    use crate::control::KeyChanges;
    [
        crate::pools::PoolPolicies::decl(),
        crate::key_settings::KeySettingsChange::decl(),
        crate::budget::MoneyBudgetChange::decl(),
        crate::pools::PoolPoliciesChange::decl(),
        KeyChanges::decl(),
        PoolChanges::decl(),
    ]
}

/// The settings at their default, as constants the dashboard starts a new key's or pool's form from:
/// each default is written once, in the Rust `Default` of its settings.
fn default_decls() -> [String; 3] {
    let constant = |name: &str, ty: &str, value: serde_json::Result<serde_json::Value>| {
        format!("const {name}: {ty} = {};", value.unwrap_or_default())
    };
    [
        constant(
            "DEFAULT_KEY_SETTINGS",
            "KeySettings",
            serde_json::to_value(crate::key_settings::KeySettings::default()),
        ),
        constant("DEFAULT_MONEY_BUDGET", "MoneyBudget", serde_json::to_value(crate::budget::MoneyBudget::default())),
        constant("DEFAULT_POOL_POLICIES", "PoolPolicies", serde_json::to_value(crate::pools::PoolPolicies::default())),
    ]
}

/// What the provider dropped from a request's input, as a decision records it.
fn drops_decls() -> [String; 2] {
    [crate::drops::DropReason::decl(), crate::drops::ReasoningDropped::decl()]
}

/// The declarations grouped by concern, after the main list.
fn more_decls() -> impl Iterator<Item = String> {
    let groups = drops_decls().into_iter().chain(money_and_plan_decls()).chain(setup_decls());
    groups.chain(change_decls()).chain(default_decls()).chain(clients_decls()).chain(login_decls())
}

/// What the Connect view says of the installed clients' checks.
fn clients_decls() -> [String; 2] {
    [crate::events::ClientChecked::decl(), ClientsBody::decl()]
}

/// The TypeScript of every type the dashboard reads or sends, in one file.
pub fn typescript() -> String {
    use crate::control::NewKey;
    use crate::events::{Attempt, Envelope, Event, FailureKind, GatewayEvent, KeyChange, KeyEvent, Routed, Wire};
    use crate::facts::{AffinitySource, ClientKind, Operation};
    use crate::router::{AffinityState, Decision, PinDecision, Reason, Refusal, Route, SkipWhy};
    use crate::sessions::{Binding, SessionInfo};
    use crate::spend::Usage;
    let decls = [
        KeyId::decl(),
        ProviderId::decl(),
        KeySource::decl(),
        Operation::decl(),
        ClientKind::decl(),
        AffinitySource::decl(),
        AffinityState::decl(),
        Route::decl(),
        SkipWhy::decl(),
        Reason::decl(),
        Refusal::decl(),
        PinDecision::decl(),
        Decision::decl(),
        FailureKind::decl(),
        Attempt::decl(),
        Wire::decl(),
        crate::spend::ServiceTier::decl(),
        Usage::decl(),
        crate::spend::Unpriced::decl(),
        Routed::decl(),
        extending(RequestRecord::decl(), "Routed"),
        KeyChange::decl(),
        KeyEvent::decl(),
        crate::events::BudgetOf::decl(),
        GatewayEvent::decl(),
        Event::decl(),
        Envelope::decl(),
        Binding::decl(),
        SessionInfo::decl(),
        StoreStatus::decl(),
        KeychainInfo::decl(),
        LocalPeriods::decl(),
        GatewayInfo::decl(),
        HealthState::decl(),
        WindowInfo::decl(),
        KeyStatus::decl(),
        PeriodSpend::decl(),
        extending(KeyInfo::decl(), "KeyStatus"),
        PoolInfo::decl(),
        crate::pools::PoolConfig::decl(),
        StatusBody::decl(),
        TokenInfo::decl(),
        TokenChanges::decl(),
        NewSecret::decl(),
        NewToken::decl(),
        CreatedToken::decl(),
        DecisionsBody::decl(),
        SessionsBody::decl(),
        UsagePoint::decl(),
        UsageBody::decl(),
        SpendBy::decl(),
        SpendRow::decl(),
        SpendReport::decl(),
        LoginLink::decl(),
        SessionToken::decl(),
        KeyTestBody::decl(),
        KeyBody::decl(),
        ErrorDetail::decl(),
        ErrorBody::decl(),
        crate::key_settings::KeySettings::decl(),
        crate::budget::MoneyBudget::decl(),
        NewKey::decl(),
    ];

    let mut out = String::from(
        "// Generated from Keymux's Rust types by `api::types::typescript()`; do not edit.\n\
         // Regenerate: KEYMUX_WRITE_TYPES=1 cargo test -p keymux --lib typescript_types\n\n",
    );
    for decl in decls.into_iter().chain(more_decls()) {
        out.push_str("export ");
        // JSON numbers arrive as JavaScript numbers; every integer Keymux sends (counts, milliseconds)
        // stays far below 2^53.
        out.push_str(&decl.replace("bigint", "number"));
        out.push_str("\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    /// The committed `ui/src/api/types.ts` is what the Rust types say. Run with `KEYMUX_WRITE_TYPES=1`
    /// to rewrite it after changing a type.
    #[test]
    fn typescript_types_are_up_to_date() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/src/api/types.ts");
        let want = super::typescript();
        if std::env::var_os("KEYMUX_WRITE_TYPES").is_some() {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("ui/src/api");
            std::fs::write(&path, &want).expect("written");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "ui/src/api/types.ts is out of date with the Rust types: run `KEYMUX_WRITE_TYPES=1 cargo test -p keymux --lib typescript_types`"
        );
    }
}
