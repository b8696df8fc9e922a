//! The tray's menu, icon and notifications in every state, and across the transitions between them.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use super::menu::{changes, entries, icon, menu, status_line, Action, Change, IconState, Item, MenuInput};
use super::notices::{NoticeKind, Notifier};
use crate::api::types::{GatewayInfo, KeyInfo, KeychainInfo, StatusBody};
use crate::events::{Envelope, Event, KeyChange, KeyEvent, RequestRecord, Wire};
use crate::facts::Operation;
use crate::keys::{KeyId, KeySource, ProviderId};
use crate::metrics::StoreStatus;
use crate::pool::{HealthState, KeyStatus};
use crate::router::decision::{Decision, Reason, Refusal};

const NOW: u64 = 1_800_000_000_000;

fn key(label: &str, org: &str, health: HealthState, until: Option<u64>) -> KeyInfo {
    KeyInfo {
        status: KeyStatus {
            id: KeyId::new(format!("k_{label}")),
            label: label.to_owned(),
            fingerprint: "0a1b2c3d".into(),
            provider: ProviderId::Openai,
            source: KeySource::Keychain,
            org: Some(org.to_owned()),
            org_learned: true,
            health,
            in_flight: 0,
            settings: crate::key_settings::KeySettings::default(),
            money: crate::budget::MoneyBudget::default(),
            tokens_today: 0,
            window_reserved: false,
            headroom: 0.82,
            served: 0,
            failed: 0,
            last_status: None,
            invalid_encrypted_content: 0,
            reasoning_dropped: 0,
            input_tokens: 0,
            cached_tokens: 0,
            output_tokens: 0,
            cached_ratio: 0.0,
            unavailable_models: Vec::new(),
            base_url: None,
            plan: None,
            plan_windows: None,
            cooldown_ms: 0,
            requests_window: None,
            tokens_window: None,
        },
        budget: crate::budget::BudgetState::Open,
        budget_runs_out_unix_ms: None,
        window_runs_out_unix_ms: None,
        until_unix_ms: until,
        plan_used_up_until_unix_ms: None,
        requests_window: None,
        tokens_window: None,
        pools: Vec::new(),
        proxy: None,
        spend: crate::api::types::PeriodSpend::default(),
    }
}

fn status(keys: Vec<KeyInfo>, paused: bool) -> StatusBody {
    let next_reset_unix_ms = keys
        .iter()
        .filter(|k| matches!(k.status.health, HealthState::Cooling | HealthState::QuotaExhausted))
        .filter_map(|k| k.until_unix_ms)
        .min();
    let gateway = GatewayInfo {
        version: "0".into(),
        base_url: "http://127.0.0.1:8787/v1".into(),
        paused,
        rescues_lost_sessions: true,
        keys_total: keys.len(),
        keys_healthy: keys.iter().filter(|k| k.status.health == HealthState::Ready).count(),
        next_reset_unix_ms,
        requests_last_minute: 0,
        store: StoreStatus { persisted: true, path: None, error: None, notice: None, dropped: 0, pending: 0 },
        keychain: KeychainInfo { kind: "OS keychain".into(), ok: true },
        started_unix_ms: NOW,
        now_unix_ms: NOW,
        last_event_id: 0,
        periods: crate::clock::LocalPeriods {
            zone: "UTC".into(),
            day_start_unix_ms: NOW,
            month_start_unix_ms: NOW,
            day_end_unix_ms: NOW + 86_400_000,
            month_end_unix_ms: NOW + 86_400_000,
        },
    };
    StatusBody { gateway, keys, pools: Vec::new() }
}

fn input(status: &StatusBody) -> MenuInput<'_> {
    MenuInput { status: Some(status), notifications: true, ..MenuInput::default() }
}

fn two(a: HealthState, b: HealthState) -> StatusBody {
    let until = |h| matches!(h, HealthState::Cooling | HealthState::QuotaExhausted).then_some(NOW + 270_000);
    status(vec![key("work", "org-a", a, until(a)), key("home", "org-b", b, until(b))], false)
}

fn label_of(m: &super::menu::Menu, action: &Action) -> String {
    m.items
        .iter()
        .find_map(|i| match i {
            Item::Entry { action: a, label, .. } if a == action => Some(label.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn each_state_has_its_icon() {
    use HealthState::*;
    assert_eq!(icon(&input(&two(Ready, Ready))), IconState::Healthy);
    assert_eq!(icon(&input(&two(Ready, Cooling))), IconState::Degraded);
    assert_eq!(icon(&input(&two(Rejected, Ready))), IconState::Degraded);
    assert_eq!(icon(&input(&two(Cooling, QuotaExhausted))), IconState::Blocked);
    assert_eq!(icon(&input(&two(Disabled, Rejected))), IconState::Blocked);
    assert_eq!(icon(&input(&status(Vec::new(), false))), IconState::Blocked, "no keys: nothing can serve");
    let mut paused = two(Ready, Ready);
    paused.gateway.paused = true;
    assert_eq!(icon(&input(&paused)), IconState::Paused);
    assert_eq!(icon(&MenuInput { problem: Some("port 8787 is taken"), ..MenuInput::default() }), IconState::Down);
}

#[test]
fn the_status_line_says_routing_keys_and_the_next_reset() {
    use HealthState::*;
    assert_eq!(status_line(&input(&two(Ready, Ready))), "Routing · 2 of 2 keys ready");
    assert_eq!(status_line(&input(&two(Ready, Cooling))), "Routing · 1 of 2 keys ready · next frees in 4m 30s");
    let mut paused = two(Ready, Ready);
    paused.gateway.paused = true;
    assert_eq!(status_line(&input(&paused)), "Paused · 2 of 2 keys ready");
    let down = MenuInput { problem: Some("port 8787 is taken by another program"), ..MenuInput::default() };
    assert_eq!(status_line(&down), "Keymux is not running: port 8787 is taken by another program");
    assert!(status_line(&input(&status(Vec::new(), false))).contains("no keys yet"));
}

#[test]
fn the_menu_has_every_item_in_order_with_keys_checked_when_on() {
    use HealthState::*;
    let s = two(Ready, Disabled);
    let m = menu(&MenuInput { autostart: true, codex_undo: true, ..input(&s) });
    let entries: Vec<(String, Option<bool>)> = entries(&m.items)
        .into_iter()
        .filter_map(|i| match i {
            Item::Entry { label, checked, .. } => Some((label.clone(), *checked)),
            _ => None,
        })
        .collect();
    let labels: Vec<&str> = entries.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        labels,
        [
            "Routing · 1 of 2 keys ready",
            "Pause routing",
            "work (org-a) · 82% headroom",
            "home (org-b) · off",
            "Open dashboard",
            "Open in browser",
            "Copy base URL",
            "Set up Codex…",
            "Undo Codex setup",
            "Set up pi…",
            "Show notifications",
            "No key can serve",
            "A key is rejected",
            "A session is refused or rescued",
            "A budget is reached or resets",
            "A client update is checked",
            "The ChatGPT plan runs out or is back",
            "Start at login",
            "Quit Keymux"
        ]
    );
    assert_eq!(entries[2].1, Some(true));
    assert_eq!(entries[3].1, Some(false), "a disabled key is unchecked");
    assert_eq!(entries[10].1, Some(true), "notifications on");
    assert_eq!(entries[15].1, Some(true), "start at login on");
    assert!(m.items.iter().any(|i| matches!(i, Item::Submenu { label, .. } if label == "Notifications")));
    assert_eq!(m.tooltip, "Keymux — Routing · 1 of 2 keys ready");
}

#[test]
fn a_down_gateway_offers_only_what_still_works() {
    let m = menu(&MenuInput { problem: Some("the keychain cannot be reached"), ..MenuInput::default() });
    for item in entries(&m.items) {
        if let Item::Entry { action, enabled, .. } = item {
            let works = matches!(
                action,
                Action::ToggleNotifications | Action::ToggleAutostart | Action::Quit | Action::UndoCodex
            );
            assert_eq!(*enabled, works, "{action:?}");
        }
    }
}

#[test]
fn a_countdown_ticking_changes_labels_in_place() {
    use HealthState::*;
    let before = menu(&input(&two(Ready, Cooling)));
    let mut later = two(Ready, Cooling);
    later.gateway.now_unix_ms += 30_000;
    let after = menu(&input(&later));
    let expected_line = "Routing · 1 of 2 keys ready · next frees in 4m 0s".to_owned();
    assert_eq!(
        changes(&before, &after),
        vec![
            Change::Label(Action::Status, expected_line.clone()),
            Change::Label(Action::ToggleKey(KeyId::new("k_home")), "home (org-b) · cooling, frees in 4m 0s".into()),
            Change::Tooltip(format!("Keymux — {expected_line}")),
        ]
    );
    assert!(changes(&after, &after).is_empty());
}

#[test]
fn transitions_update_checks_and_the_icon_or_rebuild() {
    use HealthState::*;
    let healthy = menu(&input(&two(Ready, Ready)));
    // Cooling, then everything blocked, then back.
    let cooling = menu(&input(&two(Ready, Cooling)));
    assert!(changes(&healthy, &cooling).contains(&Change::Icon(IconState::Degraded)));
    let blocked = menu(&input(&two(Cooling, Cooling)));
    assert!(changes(&cooling, &blocked).contains(&Change::Icon(IconState::Blocked)));
    assert!(changes(&blocked, &healthy).contains(&Change::Icon(IconState::Healthy)));
    // Paused: the check and the icon.
    let mut p = two(Ready, Ready);
    p.gateway.paused = true;
    let paused = menu(&input(&p));
    let c = changes(&healthy, &paused);
    assert!(c.contains(&Change::Checked(Action::TogglePause, true)) && c.contains(&Change::Icon(IconState::Paused)));
    // A key switched off: its check.
    let off = menu(&input(&two(Ready, Disabled)));
    assert!(changes(&healthy, &off).contains(&Change::Checked(Action::ToggleKey(KeyId::new("k_home")), false)));
    // Keys added or removed, an undo appearing, the gateway going down: the shape changes.
    let three = status(
        vec![key("work", "org-a", Ready, None), key("home", "org-b", Ready, None), key("spare", "org-a", Ready, None)],
        false,
    );
    let more = menu(&input(&three));
    // The status line's words change with the count, so the tooltip follows the rebuild.
    assert_eq!(changes(&healthy, &more), vec![Change::Rebuild, Change::Tooltip(more.tooltip.clone())]);
    let s = two(Ready, Ready);
    assert_eq!(changes(&healthy, &menu(&MenuInput { pi_undo: true, ..input(&s) })), vec![Change::Rebuild]);
    let down = menu(&MenuInput { problem: Some("stopped"), ..MenuInput::default() });
    assert_eq!(
        changes(&healthy, &down),
        vec![Change::Rebuild, Change::Icon(IconState::Down), Change::Tooltip(down.tooltip.clone())]
    );
    // Notifications off: the master check, and the kinds can no longer be chosen.
    let quiet = menu(&MenuInput { notifications: false, ..input(&s) });
    let mut expected = vec![Change::Checked(Action::ToggleNotifications, false)];
    expected.extend(NoticeKind::ALL.map(|k| Change::Enabled(Action::ToggleNotice(k), false)));
    assert_eq!(changes(&healthy, &quiet), expected);
    // One kind off: its check only.
    let no_rejects = menu(&MenuInput { notices_off: vec![NoticeKind::KeyRejected], ..input(&s) });
    assert_eq!(
        changes(&healthy, &no_rejects),
        vec![Change::Checked(Action::ToggleNotice(NoticeKind::KeyRejected), false)]
    );
    assert_eq!(label_of(&quiet, &Action::Quit), "Quit Keymux");
}

#[test]
fn a_rebuild_still_carries_the_new_icon_and_tooltip() {
    // The tray starts "down" (no status yet); the first status adds the key items, so the menu is
    // rebuilt, and the icon must still leave "down" in that same refresh.
    let starting = menu(&MenuInput { problem: Some("starting"), ..MenuInput::default() });
    let s = two(HealthState::Ready, HealthState::Ready);
    let routing = menu(&input(&s));
    assert_eq!(starting.icon, IconState::Down);
    let c = changes(&starting, &routing);
    assert_eq!(c.first(), Some(&Change::Rebuild));
    assert!(c.contains(&Change::Icon(IconState::Healthy)), "{c:?}");
    assert!(c.contains(&Change::Tooltip(routing.tooltip.clone())), "{c:?}");
}

fn key_event(id: u64, label: &str, change: KeyChange) -> Envelope {
    let event = Event::Key(KeyEvent { key: KeyId::new(format!("k_{label}")), label: label.into(), change });
    Envelope { id, at_unix_ms: NOW, event }
}

fn finished(id: u64, refusal: Option<Refusal>, rescued: bool) -> Envelope {
    let mut decision = Decision::new(id);
    decision.refusal = refusal;
    if rescued {
        decision.rescued_orgs.push(crate::digest::OrgTag::from_text(b"org_tag1").expect("a tag"));
    }
    let record = RequestRecord::new(NOW, Operation::ResponsesCreate, Wire::Http, decision);
    Envelope { id, at_unix_ms: NOW, event: Event::Finished(Arc::new(record)) }
}

#[test]
fn every_key_blocked_is_said_once_until_a_key_frees() {
    use HealthState::*;
    let mut n = Notifier::new();
    let cooling = KeyChange::CoolingStarted { until_unix_ms: NOW + 270_000 };
    assert_eq!(n.consider(&key_event(1, "work", cooling), || two(Cooling, Ready), NOW), None, "one key still serves");
    let notice = n.consider(&key_event(2, "home", cooling), || two(Cooling, Cooling), NOW).expect("all blocked");
    assert_eq!(notice.kind, NoticeKind::AllKeysBlocked);
    assert!(notice.body.contains("frees in 4m 30s"), "{}", notice.body);
    // Still blocked: no repeat, even after the quiet time.
    let later = NOW + 3_600_000;
    assert_eq!(n.consider(&key_event(3, "work", cooling), || two(Cooling, Cooling), later), None);
    // A key frees, then all block again after the quiet time: said again.
    assert_eq!(n.consider(&key_event(4, "work", KeyChange::CoolingEnded), || two(Ready, Cooling), later), None);
    assert!(n.consider(&key_event(5, "work", cooling), || two(Cooling, Cooling), later).is_some());
}

#[test]
fn a_rejected_key_is_said_once_per_quiet_time_per_key() {
    use HealthState::*;
    let mut n = Notifier::new();
    let first = n.consider(&key_event(1, "work", KeyChange::Rejected), || two(Rejected, Ready), NOW).unwrap();
    assert_eq!(first.kind, NoticeKind::KeyRejected);
    assert!(first.title.contains("'work'"));
    assert_eq!(n.consider(&key_event(2, "work", KeyChange::Rejected), || two(Rejected, Ready), NOW + 60_000), None);
    assert!(n.consider(&key_event(3, "home", KeyChange::Rejected), || two(Rejected, Rejected), NOW + 60_000).is_some());
    let after_quiet = NOW + NoticeKind::KeyRejected.quiet_ms();
    assert!(n.consider(&key_event(4, "work", KeyChange::Rejected), || two(Rejected, Ready), after_quiet).is_some());
}

#[test]
fn refused_and_rescued_sessions_are_said_and_ordinary_requests_are_not() {
    use HealthState::*;
    let s = two(Ready, Ready);
    let mut n = Notifier::new();
    assert_eq!(n.consider(&finished(1, None, false), || s.clone(), NOW), None);
    let refused = Some(Refusal::LostOrg { key: KeyId::new("k_work") });
    let notice = n.consider(&finished(2, refused, false), || s.clone(), NOW).unwrap();
    assert_eq!((notice.kind, notice.title.as_str()), (NoticeKind::SessionLost, "A session was refused"));
    assert_eq!(n.consider(&finished(3, None, true), || s.clone(), NOW + 1_000), None, "throttled");
    let rescued =
        n.consider(&finished(4, None, true), || s.clone(), NOW + NoticeKind::SessionLost.quiet_ms() + 1_000).unwrap();
    assert_eq!(rescued.title, "A session was rescued");
    let cooling = Some(Refusal::AllCooling { retry_after_secs: 5, cooling: 2 });
    assert_eq!(n.consider(&finished(5, cooling, false), || s.clone(), NOW + 99_000_000), None, "not a lost session");
}

#[test]
fn a_session_rescued_because_the_plan_ran_out_under_it_is_said_so() {
    let s = with_plan(HealthState::Cooling);
    let mut decision = Decision::new(6);
    decision.reasons.push(Reason::PlanExhausted { key: KeyId::new("k_chatgpt"), resets_ms: 3_600_000 });
    let mut record = RequestRecord::new(NOW, Operation::ResponsesCreate, Wire::Http, decision);
    // The plan rescue drops the items on the way: the decision's rescued organizations stay empty.
    record.rescued_items = 2;
    let envelope = Envelope { id: 6, at_unix_ms: NOW, event: Event::Finished(Arc::new(record)) };
    let notice = Notifier::new().consider(&envelope, || s.clone(), NOW).expect("told");
    assert_eq!((notice.kind, notice.title.as_str()), (NoticeKind::SessionLost, "A session was rescued"));
    assert!(notice.body.contains("Your ChatGPT plan ran out under it"), "{}", notice.body);
}

#[test]
fn a_kind_switched_off_is_never_said() {
    use HealthState::*;
    let mut n = Notifier::new();
    n.set(NoticeKind::KeyRejected, false);
    assert!(!n.is_on(NoticeKind::KeyRejected));
    assert_eq!(n.consider(&key_event(1, "work", KeyChange::Rejected), || two(Rejected, Ready), NOW), None);
    n.set(NoticeKind::KeyRejected, true);
    assert!(n.consider(&key_event(2, "work", KeyChange::Rejected), || two(Rejected, Ready), NOW).is_some());
}

/// `two(a, b)` with the user's pools `work` (the key `work`, token `acme`) and `home` (the key `home`).
fn pooled(a: HealthState, b: HealthState) -> StatusBody {
    use crate::api::types::PoolInfo;
    let mut s = two(a, b);
    let pool = |name: &str, token: Option<&str>, health: HealthState| PoolInfo {
        name: name.to_owned(),
        builtin: false,
        from_env: false,
        keys: vec![name.to_owned()],
        key_ids: vec![KeyId::new(format!("k_{name}"))],
        fallback: Vec::new(),
        policies: crate::pools::PoolPolicies::default(),
        proxy_login: false,
        tokens: token.map(str::to_owned).into_iter().collect(),
        usable: usize::from(health == HealthState::Ready),
        headroom: 0.5,
        spend: crate::api::types::PeriodSpend::default(),
        budget: crate::budget::BudgetState::Open,
        budget_runs_out_unix_ms: None,
        window_runs_out_unix_ms: None,
    };
    s.pools = vec![pool("work", Some("acme"), a), pool("home", None, b)];
    for k in &mut s.keys {
        k.pools = vec![k.status.label.clone()];
    }
    s
}

#[test]
fn the_tray_pool_line_says_a_pools_policies_when_they_are_not_the_default() {
    use HealthState::*;
    let mut s = pooled(Ready, Ready);
    s.pools[0].policies.allow_priority = false;
    s.pools[0].policies.proxy = Some("http://proxy.example:3128".into());
    s.pools[1].policies.proxy = Some("https://egress.home:8443".into());
    let line = status_line(&input(&s));
    assert!(
        line.ends_with(" · work 1/1 (no priority tier, via proxy.example:3128) · home 1/1 (via egress.home:8443)"),
        "{line}"
    );
}

#[test]
fn the_tray_shows_pools_and_names_a_blocked_one() {
    use HealthState::*;
    let s = pooled(Cooling, Ready);
    assert_eq!(status_line(&input(&s)), "Routing · 1 of 2 keys ready · next frees in 4m 30s · work 0/1 · home 1/1");
    let m = menu(&input(&s));
    assert!(label_of(&m, &Action::ToggleKey(KeyId::new("k_work"))).starts_with("work (org-a) [work] · cooling"));
    let mut n = Notifier::new();
    let cooling = KeyChange::CoolingStarted { until_unix_ms: NOW + 270_000 };
    let notice = n.consider(&key_event(1, "work", cooling), || pooled(Cooling, Ready), NOW).expect("told");
    assert_eq!(notice.title, "work: no key can serve");
    assert!(notice.body.contains("4m 30s") && notice.body.contains("outside"), "{}", notice.body);
    assert_eq!(n.consider(&key_event(2, "work", cooling), || pooled(Cooling, Ready), NOW), None, "once");
    let home = n.consider(&key_event(3, "home", cooling), || pooled(Ready, Cooling), NOW);
    assert_eq!(home, None, "a pool no token uses blocks nobody's requests");
}

#[test]
fn a_budget_state_is_a_notification_with_its_amount_and_its_reset_and_can_be_switched_off() {
    use crate::budget::{BudgetState, Period};
    use crate::events::{BudgetOf, GatewayEvent};
    let budget = |id: u64, state: BudgetState| Envelope {
        id,
        at_unix_ms: NOW,
        event: Event::Gateway(GatewayEvent::Budget {
            of: BudgetOf::Key { key: KeyId::new("k_work") },
            label: "work".into(),
            state,
        }),
    };
    let limit = crate::spend::Usd::from_nanos(5_000_000_000);
    let reserved =
        BudgetState::Reserved { period: Period::Day, limit, used_permille: 812, resets_unix_ms: NOW + 3_600_000 };
    let mut n = Notifier::new();
    let notice = n.consider(&budget(1, reserved), || two(HealthState::Ready, HealthState::Ready), NOW).expect("told");
    assert_eq!(notice.kind, NoticeKind::Budget);
    assert_eq!(notice.title, "'work' is past 81% of its budget");
    assert!(notice.body.contains("$5.00 daily budget") && notice.body.contains("1h"), "{}", notice.body);
    let stopped = BudgetState::Stopped { period: Period::Day, limit, resets_unix_ms: NOW + 60_000 };
    let notice = n.consider(&budget(2, stopped), || two(HealthState::Ready, HealthState::Ready), NOW).expect("told");
    assert!(notice.title.contains("stopped") && notice.body.contains("set to stop there"), "{notice:?}");
    n.set(NoticeKind::Budget, false);
    let later = NOW + 3_600_000;
    assert_eq!(n.consider(&budget(3, BudgetState::Open), || two(HealthState::Ready, HealthState::Ready), later), None);
}

#[test]
fn a_pools_budget_is_told_apart_from_its_keys_and_names_the_pool() {
    use crate::budget::{BudgetState, Period};
    use crate::events::{BudgetOf, GatewayEvent};
    let limit = crate::spend::Usd::from_nanos(20_000_000_000);
    let reserved =
        BudgetState::Reserved { period: Period::Month, limit, used_permille: 903, resets_unix_ms: NOW + 86_400_000 };
    let event = |id: u64, of: BudgetOf| Envelope {
        id,
        at_unix_ms: NOW,
        event: Event::Gateway(GatewayEvent::Budget { of, label: "work".into(), state: reserved }),
    };
    let mut n = Notifier::new();
    let ready = || two(HealthState::Ready, HealthState::Ready);
    let pool = n.consider(&event(1, BudgetOf::Pool { pool: "work".into() }), ready, NOW).expect("told");
    assert_eq!(pool.title, "Pool 'work' is past 90% of its budget");
    assert!(pool.body.contains("$20.00 monthly budget") && pool.body.contains("already in it"), "{}", pool.body);
    // A key labelled like the pool is another subject: its own reservation is told too.
    let key = n.consider(&event(2, BudgetOf::Key { key: KeyId::new("k_work") }), ready, NOW).expect("told");
    assert_eq!(key.title, "'work' is past 90% of its budget");
    // The pool's same state again within the quiet time is not told twice.
    assert_eq!(n.consider(&event(3, BudgetOf::Pool { pool: "work".into() }), ready, NOW + 1_000), None);
}

#[test]
fn a_key_item_shows_its_spend_and_forecast_and_a_resting_key_offers_test_now() {
    use HealthState::*;
    let usd = |dollars: u64| crate::spend::Usd::from_nanos(dollars * 10_000_000);
    let mut work = key("work", "org-a", Ready, None);
    work.status.money.daily = Some(usd(500));
    work.spend.spend_today_usd = usd(120);
    work.budget_runs_out_unix_ms = Some(NOW + 7_500_000);
    work.window_runs_out_unix_ms = Some(NOW + 20_000);
    assert_eq!(
        super::menu::key_label(&work, NOW),
        "work (org-a) · 82% headroom · $1.20 of $5.00 today, window out in 20s",
        "the sooner of the two"
    );
    work.window_runs_out_unix_ms = None;
    assert_eq!(
        super::menu::key_label(&work, NOW),
        "work (org-a) · 82% headroom · $1.20 of $5.00 today, budget out in 2h 5m"
    );
    work.status.window_reserved = true;
    assert!(super::menu::key_label(&work, NOW).contains("82% headroom, kept for its sessions"));
    let mut home = key("home", "org-b", Ready, None);
    home.window_runs_out_unix_ms = Some(NOW + 45_000);
    assert_eq!(super::menu::key_label(&home, NOW), "home (org-b) · 82% headroom · window out in 45s");

    // Only a key that is out for a while a probe could end is offered "Test now", right under it.
    let s = two(Ready, Cooling);
    let m = menu(&input(&s));
    let items = entries(&m.items);
    let home_at = items
        .iter()
        .position(|i| matches!(i, Item::Entry { action: Action::ToggleKey(k), .. } if k.as_str() == "k_home"));
    let test = Action::TestKey(KeyId::new("k_home"));
    assert!(
        matches!(items[home_at.unwrap() + 1], Item::Entry { action, label, .. } if *action == test && label.contains("Test 'home' now"))
    );
    assert!(!items
        .iter()
        .any(|i| matches!(i, Item::Entry { action: Action::TestKey(k), .. } if k.as_str() == "k_work")));
    assert_eq!(test.id(), "test:k_home");
    // The item appearing changes the menu's shape: rebuilt, with the new icon.
    let before = menu(&input(&two(Ready, Ready)));
    let after = changes(&before, &m);
    assert!(after.contains(&Change::Rebuild) && after.contains(&Change::Icon(IconState::Degraded)), "{after:?}");
}

#[test]
fn window_commands_cross_as_one_line_each_and_never_show_the_link_in_debug() {
    use super::window::{Command, Unshown};
    let link = "http://127.0.0.1:8787/login?code=0123456789abcdef0123456789abcdef".to_owned();
    let commands = [
        Command::Show { link: link.clone() },
        Command::Down { why: "port 8787 is taken\nby another program".into() },
        Command::Focus,
        Command::Say(Unshown::LoadFailed("refused".into())),
        Command::Say(Unshown::NoReport),
    ];
    for command in commands {
        let line = command.line();
        assert_eq!(line.matches('\n').count(), 1, "one line: {line:?}");
        assert!(line.ends_with('\n'));
        assert_eq!(Command::parse(&line), Ok(command.clone()));
        assert!(!format!("{command:?}").contains("0123456789abcdef"), "{command:?}");
    }
    assert!(Command::parse("{\"open\":1}").unwrap_err().contains("cannot read"));
}

#[test]
fn a_client_check_is_a_notification_that_says_whether_the_client_works() {
    use crate::events::{ClientChecked, GatewayEvent};
    let checked = |id: u64, version: &str, ok: bool, summary: &str| Envelope {
        id,
        at_unix_ms: NOW,
        event: Event::Gateway(GatewayEvent::ClientChecked(ClientChecked {
            name: if summary.starts_with("pi") { "pi".into() } else { "codex".into() },
            version: Some(version.into()),
            ok,
            summary: summary.into(),
        })),
    };
    let ready = || two(HealthState::Ready, HealthState::Ready);
    let mut n = Notifier::new();
    let works = n.consider(&checked(1, "1.7.0", true, "pi 1.7.0 works through Keymux"), ready, NOW).expect("told");
    assert_eq!((works.kind, works.title.as_str()), (NoticeKind::ClientCheck, "pi 1.7.0 works through Keymux"));
    let summary = "Codex 0.172.0: WebSocket turn failed: codex exited with status 1";
    let fails = n.consider(&checked(2, "0.172.0", false, summary), ready, NOW).expect("told");
    assert_eq!(fails.title, "Codex 0.172.0 does not work through Keymux");
    assert!(fails.body.starts_with(summary) && fails.body.contains("Connect view"), "{}", fails.body);
    n.set(NoticeKind::ClientCheck, false);
    assert_eq!(n.consider(&checked(3, "1.8.0", true, "pi 1.8.0 works through Keymux"), ready, NOW), None);
}

/// A status with an API key and a ChatGPT plan in `plan`'s state (cooling for 2 hours when used up).
fn with_plan(plan: HealthState) -> StatusBody {
    let until = (plan == HealthState::Cooling).then_some(NOW + 7_200_000);
    let mut p = key("chatgpt", "chatgpt-acct", plan, until);
    p.status.provider = ProviderId::Chatgpt;
    p.status.plan = Some(keymux_core::provider::chatgpt::PlanInfo {
        account_id: "acct".into(),
        plan_type: Some("plus".into()),
        expires_unix: None,
    });
    let used = |pct: f32, resets: u64| keymux_core::provider::chatgpt::UsageWindow {
        used_percent: pct,
        window_minutes: None,
        resets_unix: Some(resets),
    };
    p.status.plan_windows = Some(keymux_core::provider::chatgpt::PlanWindows {
        primary: Some(used(42.0, NOW / 1000 + 3_600)),
        secondary: Some(used(10.0, NOW / 1000 + 86_400)),
    });
    p.status.cooldown_ms = until.map_or(0, |u| u - NOW);
    p.plan_used_up_until_unix_ms = p.status.plan_used_up_until_unix_ms(NOW);
    status(vec![key("work", "org-a", HealthState::Ready, None), p], false)
}

#[test]
fn the_tray_says_where_new_sessions_go_and_shows_the_plans_windows() {
    let ready = with_plan(HealthState::Ready);
    assert!(status_line(&input(&ready)).ends_with(" · ChatGPT plan first"), "{}", status_line(&input(&ready)));
    let used_up = with_plan(HealthState::Cooling);
    assert!(
        status_line(&input(&used_up)).contains("ChatGPT plan used up, API keys for 2h"),
        "{}",
        status_line(&input(&used_up))
    );
    // Ready, but its answer reported the weekly window used up: closed to new sessions until that reset.
    let mut reported = with_plan(HealthState::Ready);
    let plan = &mut reported.keys[1];
    if let Some(w) = plan.status.plan_windows.as_mut().and_then(|w| w.secondary.as_mut()) {
        w.used_percent = 100.0;
    }
    plan.plan_used_up_until_unix_ms = plan.status.plan_used_up_until_unix_ms(NOW);
    assert_eq!(plan.plan_used_up_until_unix_ms, Some(NOW + 86_400_000));
    assert!(
        status_line(&input(&reported)).contains("ChatGPT plan used up, API keys for 1d 0h"),
        "{}",
        status_line(&input(&reported))
    );
    let line = super::menu::key_label(&ready.keys[1], NOW);
    assert!(line.starts_with("chatgpt (ChatGPT plus plan) · takes new sessions first"), "{line}");
    let line = super::menu::key_label(&used_up.keys[1], NOW);
    assert!(line.starts_with("chatgpt (ChatGPT plus plan) · used up, API keys for 2h 0m"), "{line}");
    assert!(line.contains("week 10% used (resets in 1d 0h)"), "{line}");
    assert!(line.contains("5h 42% used (resets in 1h") && line.contains("week 10% used"), "{line}");
}

#[test]
fn the_plan_running_out_and_coming_back_are_each_told() {
    let mut n = Notifier::new();
    let used_up = KeyChange::PlanUsedUp { until_unix_ms: NOW + 7_200_000 };
    let out = n.consider(&key_event(1, "chatgpt", used_up), || with_plan(HealthState::Cooling), NOW).expect("told");
    assert_eq!((out.kind, out.title.as_str()), (NoticeKind::Plan, "Your ChatGPT plan is used up"));
    assert!(out.body.contains("API keys") && out.body.contains("2h"), "{}", out.body);
    assert!(out.body.contains("sessions on it go on with an API key"), "{}", out.body);
    let mut failing = with_plan(HealthState::Cooling);
    failing.gateway.rescues_lost_sessions = false;
    let told = Notifier::new().consider(&key_event(7, "chatgpt", used_up), || failing, NOW).expect("told");
    assert!(told.body.contains("sessions on it get a 429 until then"), "{}", told.body);
    let back = n.consider(&key_event(2, "chatgpt", KeyChange::PlanBack), || with_plan(HealthState::Ready), NOW);
    assert_eq!(back.map(|b| b.title), Some("Your ChatGPT plan is back".to_owned()));
    // A key cooling is no plan news (the plan's own running out comes as PlanUsedUp).
    let cooling = KeyChange::CoolingStarted { until_unix_ms: NOW + 7_200_000 };
    let api = n.consider(&key_event(3, "work", cooling), || with_plan(HealthState::Ready), NOW);
    assert!(api.is_none_or(|a| a.kind != NoticeKind::Plan));
    let plan = n.consider(&key_event(4, "chatgpt", cooling), || with_plan(HealthState::Cooling), NOW);
    assert!(plan.is_none_or(|a| a.kind != NoticeKind::Plan));
}
