//! The tray menu as a pure function of the gateway's state: labels, checks and the icon. The tray shell
//! renders a `Menu` and applies the `Change`s between two of them; nothing here touches a window.
//!
//! Linux tray icons get no click events and no tooltip, so the first line of the menu is a status line,
//! updated in place: routing or paused, keys ready of total, and when the next cooling key frees.

use super::notices::NoticeKind;
use super::words::countdown;
use crate::api::types::{KeyInfo, StatusBody};
use crate::keys::KeyId;
use crate::pool::HealthState;

/// What the icon shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IconState {
    /// Every key usable.
    Healthy,
    /// Some keys cooling, out of quota, rejected or off; at least one usable.
    Degraded,
    /// No key usable: every key cooling, out of quota, rejected or off (or no keys at all).
    Blocked,
    /// Routing paused by the user.
    Paused,
    /// The gateway is not running (the port is taken, the keychain cannot be reached…).
    Down,
}

impl IconState {
    /// Every state, in the order the icon files are listed.
    pub const ALL: [IconState; 5] = [Self::Healthy, Self::Degraded, Self::Blocked, Self::Paused, Self::Down];

    /// The icon file's stem (`icons/tray-<name>.png`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Degraded => "degraded",
            Self::Blocked => "blocked",
            Self::Paused => "paused",
            Self::Down => "down",
        }
    }
}

/// What a menu item does when chosen.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The status line (does nothing).
    Status,
    /// Pause or resume routing.
    TogglePause,
    /// Switch a key on or off.
    ToggleKey(KeyId),
    /// Probe a key that is not ready now; a cooldown or quota rest ends if the provider answers.
    TestKey(KeyId),
    /// Show the dashboard window.
    OpenDashboard,
    /// Open the dashboard in the default browser.
    OpenInBrowser,
    /// Copy the base URL.
    CopyBaseUrl,
    /// Set up Codex (shows the change first).
    SetUpCodex,
    /// Undo the Codex setup.
    UndoCodex,
    /// Set up pi.
    SetUpPi,
    /// Undo the pi setup.
    UndoPi,
    /// Desktop notifications on or off (all kinds).
    ToggleNotifications,
    /// One kind of notification on or off.
    ToggleNotice(NoticeKind),
    /// Start at login on or off.
    ToggleAutostart,
    /// Shut the gateway down gracefully and exit.
    Quit,
}

impl Action {
    /// A stable id for the shell's menu item (`key:<id>` for keys).
    pub fn id(&self) -> String {
        match self {
            Self::ToggleKey(key) => format!("key:{key}"),
            Self::TestKey(key) => format!("test:{key}"),
            Self::ToggleNotice(kind) => format!("notice:{kind:?}").to_lowercase(),
            other => format!("{other:?}").to_lowercase(),
        }
    }
}

/// One line of the menu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A choice.
    Entry {
        /// What it does.
        action: Action,
        /// Its text.
        label: String,
        /// `Some` for a check item.
        checked: Option<bool>,
        /// Whether it can be chosen.
        enabled: bool,
    },
    /// A submenu.
    Submenu {
        /// Its text.
        label: String,
        /// Its items.
        items: Vec<Item>,
    },
    /// A separator.
    Separator,
}

/// The whole tray: icon, tooltip and menu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Menu {
    /// The icon.
    pub icon: IconState,
    /// The tooltip (macOS and Windows), the same words as the status line.
    pub tooltip: String,
    /// The items, top to bottom.
    pub items: Vec<Item>,
}

/// Everything the menu depends on.
#[derive(Clone, Debug, Default)]
pub struct MenuInput<'a> {
    /// The gateway's status, or `None` when it is not running.
    pub status: Option<&'a StatusBody>,
    /// Why the gateway is not running (shown instead of the status).
    pub problem: Option<&'a str>,
    /// Desktop notifications are on.
    pub notifications: bool,
    /// The kinds of notification switched off.
    pub notices_off: Vec<NoticeKind>,
    /// Start at login is on.
    pub autostart: bool,
    /// A Codex setup can be undone.
    pub codex_undo: bool,
    /// A pi setup can be undone.
    pub pi_undo: bool,
}

/// How the shell brings its menu up to date.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The items changed shape (a key added or removed, an undo appeared): build the menu anew. The
    /// icon and tooltip changes of the same refresh follow it in the list.
    Rebuild,
    /// An item's text changed.
    Label(Action, String),
    /// An item's check changed.
    Checked(Action, bool),
    /// An item became choosable or not.
    Enabled(Action, bool),
    /// The icon changed.
    Icon(IconState),
    /// The tooltip changed.
    Tooltip(String),
}

/// The icon for a gateway state.
pub fn icon(input: &MenuInput<'_>) -> IconState {
    let Some(status) = input.status else { return IconState::Down };
    if status.gateway.paused {
        return IconState::Paused;
    }
    let ready = status.keys.iter().filter(|k| k.status.health == HealthState::Ready).count();
    match ready {
        0 => IconState::Blocked,
        n if n == status.keys.len() => IconState::Healthy,
        _ => IconState::Degraded,
    }
}

/// The status line: routing or paused, keys ready of total, when the next cooling key frees, and each
/// of the user's pools with its usable keys and its policies when they are not the default ("work 2/2",
/// "work 2/2 (no priority tier, via proxy.example:3128)").
pub fn status_line(input: &MenuInput<'_>) -> String {
    let Some(status) = input.status else {
        return format!("Keymux is not running: {}", input.problem.unwrap_or("starting…"));
    };
    let g = &status.gateway;
    let state = if g.paused { "Paused" } else { "Routing" };
    let mut line = format!("{state} · {} of {} keys ready", g.keys_healthy, g.keys_total);
    if g.keys_total == 0 {
        line = format!("{state} · no keys yet: add one in the dashboard");
    }
    if let Some(reset) = g.next_reset_unix_ms {
        line.push_str(&format!(" · next frees in {}", countdown(reset.saturating_sub(g.now_unix_ms))));
    }
    line.push_str(&plan_line(status));
    for pool in status.pools.iter().filter(|p| !p.builtin) {
        line.push_str(&format!(" · {} {}/{}", pool.name, pool.usable, pool.key_ids.len()));
        let policies = pool.policies.departures();
        if !policies.is_empty() {
            line.push_str(&format!(" ({})", policies.join(", ")));
        }
    }
    line
}

/// " · ChatGPT plan first", or " · ChatGPT plan used up, API keys for 2h 5m": where new sessions go
/// while a ChatGPT plan is in the pool. Empty without one.
fn plan_line(status: &crate::api::types::StatusBody) -> String {
    let Some(plan) = status.keys.iter().find(|k| k.status.plan.is_some()) else { return String::new() };
    match (plan.plan_used_up_until_unix_ms, plan.status.health) {
        (Some(until), _) => {
            let left = countdown(until.saturating_sub(status.gateway.now_unix_ms));
            format!(" · ChatGPT plan used up, API keys for {left}")
        }
        (None, HealthState::Ready) => " · ChatGPT plan first".to_owned(),
        (None, _) => " · ChatGPT plan unavailable, API keys serve".to_owned(),
    }
}

/// A ChatGPT plan's windows as the menu shows them: " · 5h 42% used (resets in 3h 1m), week 10% used".
fn plan_windows(key: &KeyInfo, now_unix_ms: u64) -> String {
    let Some(windows) = key.status.plan_windows else { return String::new() };
    let part = |name: &str, w: Option<keymux_core::provider::chatgpt::UsageWindow>| {
        let w = w?;
        let reset =
            w.resets_unix.map(|r| format!(" (resets in {})", countdown((r * 1000).saturating_sub(now_unix_ms))));
        Some(format!("{name} {:.0}% used{}", w.used_percent, reset.unwrap_or_default()))
    };
    let parts: Vec<String> =
        [part("5h", windows.primary), part("week", windows.secondary)].into_iter().flatten().collect();
    if parts.is_empty() {
        return String::new();
    }
    format!(" · {}", parts.join(", "))
}

/// A key's state in the menu: headroom when it is usable, else why not and until when. A ChatGPT plan
/// says where new sessions go instead of headroom (its windows follow).
fn key_state(key: &KeyInfo, now_unix_ms: u64) -> String {
    if let Some(back) = key.plan_used_up_until_unix_ms {
        return format!("used up, API keys for {}", countdown(back.saturating_sub(now_unix_ms)));
    }
    let until = key.until_unix_ms.map(|u| countdown(u.saturating_sub(now_unix_ms))).unwrap_or_default();
    match key.status.health {
        HealthState::Ready if key.status.plan.is_some() => "takes new sessions first".to_owned(),
        HealthState::Ready if key.status.window_reserved => {
            format!("{:.0}% headroom, kept for its sessions", key.status.headroom * 100.0)
        }
        HealthState::Ready => format!("{:.0}% headroom", key.status.headroom * 100.0),
        HealthState::Cooling => format!("cooling, frees in {until}"),
        HealthState::QuotaExhausted => format!("out of quota, retried in {until}"),
        HealthState::Rejected => "rejected by the provider".to_owned(),
        HealthState::Disabled => "off".to_owned(),
        HealthState::Unreachable => format!("unreachable, tried again in {until}"),
    }
}

/// A key's menu text: its label, organization, pools and state (headroom when it is usable), then its
/// spend against its budget and when a budget or its rate window runs out at the current pace.
pub fn key_label(key: &KeyInfo, now_unix_ms: u64) -> String {
    let org = key.status.org.as_deref().map(|o| format!(" ({o})")).unwrap_or_default();
    let state = key_state(key, now_unix_ms);
    let pools = if key.pools.is_empty() { String::new() } else { format!(" [{}]", key.pools.join(", ")) };
    let (org, windows) = match &key.status.plan {
        Some(plan) => {
            (format!(" (ChatGPT {} plan)", plan.plan_type.as_deref().unwrap_or("")), plan_windows(key, now_unix_ms))
        }
        None => (org, String::new()),
    };
    format!("{}{org}{pools} · {state}{windows}{}", key.status.label, forecast(key, now_unix_ms))
}

/// " · $1.20 of $5.00 today, out in 2h 5m": spend against the key's budget (daily first), then the
/// sooner of its budget and its rate window running out at the current pace. Empty when neither says
/// anything.
fn forecast(key: &KeyInfo, now_unix_ms: u64) -> String {
    let s = &key.status;
    let spend = match (s.money.daily, s.money.monthly) {
        (Some(limit), _) => Some(format!("{} of {} today", key.spend.spend_today_usd.cents(), limit.cents())),
        (None, Some(limit)) => Some(format!("{} of {} this month", key.spend.spend_month_usd.cents(), limit.cents())),
        (None, None) => None,
    };
    let out = match (key.budget_runs_out_unix_ms, key.window_runs_out_unix_ms) {
        (Some(budget), window) if window.is_none_or(|w| budget <= w) => {
            Some(format!("budget out in {}", countdown(budget.saturating_sub(now_unix_ms))))
        }
        (_, Some(window)) if s.health == HealthState::Ready => {
            Some(format!("window out in {}", countdown(window.saturating_sub(now_unix_ms))))
        }
        _ => None,
    };
    match (spend, out) {
        (Some(spend), Some(out)) => format!(" · {spend}, {out}"),
        (Some(one), None) | (None, Some(one)) => format!(" · {one}"),
        (None, None) => String::new(),
    }
}

/// Whether a key is out for a while that a probe could end early (a cooldown, a quota rest, a
/// rejection or an unreachable base URL): the menu offers "Test now".
fn testable(key: &KeyInfo) -> bool {
    matches!(
        key.status.health,
        HealthState::Cooling | HealthState::QuotaExhausted | HealthState::Rejected | HealthState::Unreachable
    )
}

fn entry(action: Action, label: impl Into<String>, checked: Option<bool>, enabled: bool) -> Item {
    Item::Entry { action, label: label.into(), checked, enabled }
}

/// The menu for a state.
pub fn menu(input: &MenuInput<'_>) -> Menu {
    let line = status_line(input);
    let up = input.status.is_some();
    let mut items = vec![entry(Action::Status, line.clone(), None, false), Item::Separator];
    let paused = input.status.is_some_and(|s| s.gateway.paused);
    items.push(entry(Action::TogglePause, "Pause routing", Some(paused), up));
    if let Some(status) = input.status {
        for key in &status.keys {
            let on = key.status.health != HealthState::Disabled;
            let label = key_label(key, status.gateway.now_unix_ms);
            items.push(entry(Action::ToggleKey(key.status.id.clone()), label, Some(on), true));
            if testable(key) {
                let test = format!("    Test '{}' now", key.status.label);
                items.push(entry(Action::TestKey(key.status.id.clone()), test, None, true));
            }
        }
    }
    items.push(Item::Separator);
    items.push(entry(Action::OpenDashboard, "Open dashboard", None, up));
    items.push(entry(Action::OpenInBrowser, "Open in browser", None, up));
    items.push(entry(Action::CopyBaseUrl, "Copy base URL", None, up));
    items.push(Item::Separator);
    items.push(entry(Action::SetUpCodex, "Set up Codex…", None, up));
    if input.codex_undo {
        items.push(entry(Action::UndoCodex, "Undo Codex setup", None, true));
    }
    items.push(entry(Action::SetUpPi, "Set up pi…", None, up));
    if input.pi_undo {
        items.push(entry(Action::UndoPi, "Undo pi setup", None, true));
    }
    items.push(Item::Separator);
    items.push(notifications(input));
    items.push(entry(Action::ToggleAutostart, "Start at login", Some(input.autostart), true));
    items.push(Item::Separator);
    items.push(entry(Action::Quit, "Quit Keymux", None, true));
    Menu { icon: icon(input), tooltip: format!("Keymux — {line}"), items }
}

/// The notifications submenu: all on or off, and each kind.
fn notifications(input: &MenuInput<'_>) -> Item {
    let mut items = vec![entry(Action::ToggleNotifications, "Show notifications", Some(input.notifications), true)];
    items.push(Item::Separator);
    for kind in NoticeKind::ALL {
        let on = !input.notices_off.contains(&kind);
        items.push(entry(Action::ToggleNotice(kind), kind.describe(), Some(on), input.notifications));
    }
    Item::Submenu { label: "Notifications".into(), items }
}

/// Every entry, submenus flattened, in order.
pub fn entries(items: &[Item]) -> Vec<&Item> {
    let mut out = Vec::new();
    for item in items {
        match item {
            Item::Entry { .. } => out.push(item),
            Item::Submenu { items, .. } => out.extend(entries(items)),
            Item::Separator => {}
        }
    }
    out
}

/// What turns menu `old` into `new`: the few in-place updates, or a rebuild when the shape changed.
pub fn changes(old: &Menu, new: &Menu) -> Vec<Change> {
    fn shape(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                Item::Entry { action, .. } => action.id(),
                Item::Submenu { label, items } => format!("{label}[{}]", shape(items).join(",")),
                Item::Separator => "-".to_owned(),
            })
            .collect()
    }
    // The icon and tooltip are not part of the menu's shape: they change alongside a rebuild too.
    let mut out = Vec::new();
    if shape(&old.items) != shape(&new.items) {
        out.push(Change::Rebuild);
        out.extend(icon_and_tooltip(old, new));
        return out;
    }
    for (a, b) in entries(&old.items).into_iter().zip(entries(&new.items)) {
        let (
            Item::Entry { label: la, checked: ca, enabled: ea, .. },
            Item::Entry { action, label: lb, checked: cb, enabled: eb },
        ) = (a, b)
        else {
            continue;
        };
        if la != lb {
            out.push(Change::Label(action.clone(), lb.clone()));
        }
        if let (Some(x), Some(y)) = (ca, cb) {
            if x != y {
                out.push(Change::Checked(action.clone(), *y));
            }
        }
        if ea != eb {
            out.push(Change::Enabled(action.clone(), *eb));
        }
    }
    out.extend(icon_and_tooltip(old, new));
    out
}

/// The icon and tooltip updates between two menus, whatever happened to the items.
fn icon_and_tooltip(old: &Menu, new: &Menu) -> Vec<Change> {
    let mut out = Vec::new();
    if old.icon != new.icon {
        out.push(Change::Icon(new.icon));
    }
    if old.tooltip != new.tooltip {
        out.push(Change::Tooltip(new.tooltip.clone()));
    }
    out
}
