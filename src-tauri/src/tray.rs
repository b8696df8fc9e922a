//! Renders `keymux::desktop::menu::Menu` into the system tray and acts on its items. The model decides
//! every label, check and icon; this file only maps it onto Tauri's menu and tray objects.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use keymux::api::views;
use keymux::desktop::menu::{self, changes, Action, Change, IconState, Item, Menu, MenuInput};
use keymux::pool::HealthState;
use tauri::image::Image;
use tauri::menu::{CheckMenuItem, IsMenuItem, Menu as TauriMenu, MenuItem, MenuItemKind, PredefinedMenuItem, Submenu};
use tauri::tray::{MouseButton, MouseButtonState, TrayIconBuilder, TrayIconEvent};
use tauri::{AppHandle, Manager, Wry};
use tauri_plugin_autostart::ManagerExt as _;
use tauri_plugin_clipboard_manager::ClipboardExt as _;
use tauri_plugin_notification::NotificationExt as _;

use crate::state::{lock, quit, Shell};
use crate::{clients, window};

const TRAY_ID: &str = "keymux";

/// What the tray shows now: the model it was built from, and the items by id for in-place updates.
struct Rendered {
    model: Menu,
    items: ById,
}

/// Menu items by id.
type ById = HashMap<String, MenuItemKind<Wry>>;

/// The rendered menu, kept between refreshes.
#[derive(Default)]
struct Tray(Mutex<Option<Rendered>>);

/// The icon of a state (the 64 px files; the tray scales them down).
fn icon(state: IconState) -> Option<Image<'static>> {
    let bytes: &'static [u8] = match state {
        IconState::Healthy => include_bytes!("../../icons/tray-healthy@2x.png"),
        IconState::Degraded => include_bytes!("../../icons/tray-degraded@2x.png"),
        IconState::Blocked => include_bytes!("../../icons/tray-blocked@2x.png"),
        IconState::Paused => include_bytes!("../../icons/tray-paused@2x.png"),
        IconState::Down => include_bytes!("../../icons/tray-down@2x.png"),
    };
    Image::from_bytes(bytes).ok()
}

/// The menu model for the app's state now.
fn model(app: &AppHandle) -> Menu {
    let shell = app.state::<Arc<Shell>>();
    let status = shell.gateway().map(|g| views::status(&g));
    let problem = shell.problem();
    let settings = lock(&shell.settings).clone();
    let (codex_undo, pi_undo) = clients::undo_available();
    menu::menu(&MenuInput {
        status: status.as_ref(),
        problem: problem.as_deref(),
        notifications: settings.notifications,
        notices_off: settings.notices_off,
        autostart: shell.autostart.load(Ordering::Relaxed),
        codex_undo,
        pi_undo,
    })
}

/// Builds Tauri menu items for `items`, noting each entry by id.
fn build_items(app: &AppHandle, items: &[Item], by_id: &mut ById) -> tauri::Result<Vec<Box<dyn IsMenuItem<Wry>>>> {
    let mut out: Vec<Box<dyn IsMenuItem<Wry>>> = Vec::new();
    for item in items {
        match item {
            Item::Entry { action, label, checked: Some(checked), enabled } => {
                let entry = CheckMenuItem::with_id(app, action.id(), label, *enabled, *checked, None::<&str>)?;
                by_id.insert(action.id(), MenuItemKind::Check(entry.clone()));
                out.push(Box::new(entry));
            }
            Item::Entry { action, label, checked: None, enabled } => {
                let entry = MenuItem::with_id(app, action.id(), label, *enabled, None::<&str>)?;
                by_id.insert(action.id(), MenuItemKind::MenuItem(entry.clone()));
                out.push(Box::new(entry));
            }
            Item::Submenu { label, items } => {
                let children = build_items(app, items, by_id)?;
                let refs: Vec<&dyn IsMenuItem<Wry>> = children.iter().map(AsRef::as_ref).collect();
                out.push(Box::new(Submenu::with_items(app, label, true, &refs)?));
            }
            Item::Separator => out.push(Box::new(PredefinedMenuItem::separator(app)?)),
        }
    }
    Ok(out)
}

fn build(app: &AppHandle, model: &Menu) -> tauri::Result<(TauriMenu<Wry>, ById)> {
    let mut by_id = HashMap::new();
    let items = build_items(app, &model.items, &mut by_id)?;
    let refs: Vec<&dyn IsMenuItem<Wry>> = items.iter().map(AsRef::as_ref).collect();
    Ok((TauriMenu::with_items(app, &refs)?, by_id))
}

/// Puts the tray icon up with the menu for the state now.
pub fn create(app: &AppHandle) -> tauri::Result<()> {
    let model = model(app);
    let (menu, items) = build(app, &model)?;
    let mut builder = TrayIconBuilder::with_id(TRAY_ID)
        .menu(&menu)
        .tooltip(&model.tooltip)
        .show_menu_on_left_click(false)
        .on_menu_event(|app, event| act(app, event.id().as_ref()))
        .on_tray_icon_event(|tray, event| {
            // macOS and Windows: a left click opens the window (Linux trays send no clicks).
            if let TrayIconEvent::Click { button: MouseButton::Left, button_state: MouseButtonState::Up, .. } = event {
                window::open_dashboard(tray.app_handle());
            }
        });
    if let Some(image) = icon(model.icon) {
        builder = builder.icon(image);
    }
    builder.build(app)?;
    app.manage(Tray(Mutex::new(Some(Rendered { model, items }))));
    Ok(())
}

/// Brings the tray up to date with the state: in place when only labels, checks or the icon changed.
/// Always done on the main thread: a tray call made from another thread waits for the main thread, so
/// a refresh there holding the tray's lock while a menu click's refresh waited for that lock on the
/// main thread would stop both, and the icon would never change again.
pub fn refresh(app: &AppHandle) {
    let handle = app.clone();
    if let Err(e) = app.run_on_main_thread(move || refresh_here(&handle)) {
        tracing::debug!("the tray could not be refreshed: {e}");
    }
}

fn refresh_here(app: &AppHandle) {
    let new = model(app);
    let Some(tray_state) = app.try_state::<Tray>() else { return };
    let mut rendered = lock(&tray_state.0);
    let Some(current) = rendered.as_mut() else { return };
    let Some(tray) = app.tray_by_id(TRAY_ID) else { return };
    for change in changes(&current.model, &new) {
        let applied = match change {
            Change::Rebuild => match build(app, &new) {
                Ok((menu, items)) => {
                    current.items = items;
                    tray.set_menu(Some(menu))
                }
                Err(e) => Err(e),
            },
            Change::Label(action, text) => {
                with_item(&current.items, &action, |i| i.set_text(&text), |c| c.set_text(&text))
            }
            Change::Checked(action, on) => match current.items.get(&action.id()) {
                Some(MenuItemKind::Check(c)) => c.set_checked(on),
                _ => Ok(()),
            },
            Change::Enabled(action, on) => {
                with_item(&current.items, &action, |i| i.set_enabled(on), |c| c.set_enabled(on))
            }
            Change::Icon(state) => tray.set_icon(icon(state)),
            Change::Tooltip(text) => tray.set_tooltip(Some(text)),
        };
        if let Err(e) = applied {
            tracing::debug!("the tray could not be updated: {e}");
        }
    }
    current.model = new;
}

fn with_item(
    items: &ById,
    action: &Action,
    plain: impl FnOnce(&MenuItem<Wry>) -> tauri::Result<()>,
    check: impl FnOnce(&CheckMenuItem<Wry>) -> tauri::Result<()>,
) -> tauri::Result<()> {
    match items.get(&action.id()) {
        Some(MenuItemKind::MenuItem(i)) => plain(i),
        Some(MenuItemKind::Check(c)) => check(c),
        _ => Ok(()),
    }
}

/// The action behind a menu item id, from the menu on display.
fn action_of(app: &AppHandle, id: &str) -> Option<Action> {
    let tray_state = app.try_state::<Tray>()?;
    let rendered = lock(&tray_state.0);
    menu::entries(&rendered.as_ref()?.model.items).into_iter().find_map(|item| match item {
        Item::Entry { action, .. } if action.id() == id => Some(action.clone()),
        _ => None,
    })
}

/// Does what a menu item says.
fn act(app: &AppHandle, id: &str) {
    let Some(action) = action_of(app, id) else { return };
    let shell = app.state::<Arc<Shell>>().inner().clone();
    let gateway = shell.gateway();
    match (action, gateway) {
        (Action::Quit, _) => quit(app),
        (Action::OpenDashboard, _) => window::open_dashboard(app),
        (Action::TogglePause, Some(g)) => {
            if g.paused() {
                g.resume();
            } else {
                g.pause();
            }
        }
        (Action::ToggleKey(key), Some(g)) => {
            let on = views::key(&g, &key).is_some_and(|k| k.status.health != HealthState::Disabled);
            if let Err(e) = g.set_enabled(&key, !on) {
                tracing::warn!("{e}");
            }
        }
        (Action::TestKey(key), Some(g)) => test_now(app, g, key),
        (Action::OpenInBrowser, Some(g)) => {
            // Through the private login page, as `keymux dashboard --open`; off the menu's thread, as
            // the opener is waited on for a few seconds.
            let link = g.login_link();
            std::thread::spawn(move || {
                if let Err(e) = keymux::login_page::open(&link) {
                    tracing::warn!("the dashboard could not be opened in a browser: {e}");
                }
            });
        }
        (Action::CopyBaseUrl, Some(g)) => {
            if let Err(e) = app.clipboard().write_text(g.base_url()) {
                tracing::warn!("the base URL could not be copied: {e}");
            }
        }
        (Action::SetUpCodex, Some(g)) => clients::set_up(app, &g, keymux::setup::Client::Codex, refresh),
        (Action::SetUpPi, Some(g)) => clients::set_up(app, &g, keymux::setup::Client::Pi, refresh),
        (Action::UndoCodex, _) => clients::undo(app, keymux::setup::Client::Codex, refresh),
        (Action::UndoPi, _) => clients::undo(app, keymux::setup::Client::Pi, refresh),
        (Action::ToggleNotifications, _) => shell.change_settings(|s| s.notifications = !s.notifications),
        (Action::ToggleNotice(kind), _) => {
            shell.change_settings(|s| {
                let on = s.notices_off.contains(&kind);
                s.set_notice(kind, on);
            });
        }
        (Action::ToggleAutostart, _) => toggle_autostart(app, &shell),
        (Action::Status, _) | (_, None) => {}
    }
    refresh(app);
}

/// "Test now": probes the key (a cooldown or quota rest ends if the provider answers, as through the
/// dashboard) and says what the provider answered: the user asked, so it is shown whatever the
/// notification switches say.
fn test_now(app: &AppHandle, gateway: Arc<keymux::gateway::Gateway>, key: keymux::keys::KeyId) {
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let label = views::key(&gateway, &key).map_or_else(|| key.to_string(), |k| k.status.label);
        let (title, body) = match gateway.test_key(&key).await {
            Ok(test) if test.ok => (format!("'{label}' answered"), test.message),
            Ok(test) => (format!("'{label}' did not answer"), test.message),
            Err(e) => (format!("'{label}' could not be tested"), e.to_string()),
        };
        tracing::info!(%title, %body, "key tested from the tray");
        if let Err(e) = app.notification().builder().title(&title).body(&body).show() {
            tracing::warn!("the desktop notification could not be shown: {e}");
        }
        refresh(&app);
    });
}

fn toggle_autostart(app: &AppHandle, shell: &Shell) {
    let launcher = app.autolaunch();
    let on = shell.autostart.load(Ordering::Relaxed);
    let done = if on { launcher.disable() } else { launcher.enable() };
    match done {
        Ok(()) => shell.autostart.store(!on, Ordering::Relaxed),
        Err(e) => tracing::warn!("start at login could not be changed: {e}"),
    }
}
