//! Renders `keymux::desktop::menu::Menu` into the system tray and acts on its items. The model decides
//! every label, check and icon; this file only maps it onto the tray icon and its menu (the same
//! `tray-icon` and `muda` objects Tauri's tray is made of). They live on the main thread.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use keymux::api::views;
use keymux::desktop::menu::{self, changes, Action, Change, IconState, Item, Menu, MenuInput};
use keymux::pool::HealthState;
use muda::{
    CheckMenuItem, IsMenuItem, Menu as TrayMenu, MenuEvent, MenuItem, MenuItemKind, PredefinedMenuItem, Submenu,
};
use tray_icon::{Icon, TrayIcon, TrayIconBuilder};

use crate::desk;
use crate::quit::quit;
use crate::state::{lock, App};
use crate::{clients, window};

const TRAY_ID: &str = "keymux";

/// What the tray shows now: the icon, the model it was built from, and the items by id for in-place
/// updates.
struct Rendered {
    tray: TrayIcon,
    model: Menu,
    items: ById,
}

/// Menu items by id.
type ById = HashMap<String, MenuItemKind>;

thread_local! {
    /// The tray, on the main thread (its objects are GTK's and stay there).
    static TRAY: RefCell<Option<Rendered>> = const { RefCell::new(None) };
}

/// The icon of a state (the 64 px files; the tray scales them down).
fn icon(state: IconState) -> Option<Icon> {
    let bytes: &'static [u8] = match state {
        IconState::Healthy => include_bytes!("../../icons/tray-healthy@2x.png"),
        IconState::Degraded => include_bytes!("../../icons/tray-degraded@2x.png"),
        IconState::Blocked => include_bytes!("../../icons/tray-blocked@2x.png"),
        IconState::Paused => include_bytes!("../../icons/tray-paused@2x.png"),
        IconState::Down => include_bytes!("../../icons/tray-down@2x.png"),
    };
    let (rgba, width, height) = rgba_of(bytes)?;
    Icon::from_rgba(rgba, width, height).ok()
}

/// A PNG's pixels as RGBA.
fn rgba_of(png_bytes: &[u8]) -> Option<(Vec<u8>, u32, u32)> {
    let mut decoder = png::Decoder::new(png_bytes);
    decoder.set_transformations(png::Transformations::normalize_to_color8() | png::Transformations::ALPHA);
    let mut reader = decoder.read_info().ok()?;
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).ok()?;
    pixels.truncate(frame.buffer_size());
    if frame.color_type != png::ColorType::Rgba {
        return None;
    }
    Some((pixels, frame.width, frame.height))
}

/// The menu model for the app's state now.
fn model(app: &App) -> Menu {
    let shell = &app.shell;
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

/// Builds menu items for `items`, noting each entry by id.
fn build_items(items: &[Item], by_id: &mut ById) -> muda::Result<Vec<Box<dyn IsMenuItem>>> {
    let mut out: Vec<Box<dyn IsMenuItem>> = Vec::new();
    for item in items {
        match item {
            Item::Entry { action, label, checked: Some(checked), enabled } => {
                let entry = CheckMenuItem::with_id(action.id(), label, *enabled, *checked, None);
                by_id.insert(action.id(), MenuItemKind::Check(entry.clone()));
                out.push(Box::new(entry));
            }
            Item::Entry { action, label, checked: None, enabled } => {
                let entry = MenuItem::with_id(action.id(), label, *enabled, None);
                by_id.insert(action.id(), MenuItemKind::MenuItem(entry.clone()));
                out.push(Box::new(entry));
            }
            Item::Submenu { label, items } => {
                let children = build_items(items, by_id)?;
                let refs: Vec<&dyn IsMenuItem> = children.iter().map(AsRef::as_ref).collect();
                out.push(Box::new(Submenu::with_items(label, true, &refs)?));
            }
            Item::Separator => out.push(Box::new(PredefinedMenuItem::separator())),
        }
    }
    Ok(out)
}

fn build(model: &Menu) -> muda::Result<(TrayMenu, ById)> {
    let mut by_id = HashMap::new();
    let items = build_items(&model.items, &mut by_id)?;
    let refs: Vec<&dyn IsMenuItem> = items.iter().map(AsRef::as_ref).collect();
    Ok((TrayMenu::with_items(&refs)?, by_id))
}

/// Puts the tray icon up with the menu for the state now. On the main thread.
pub fn create(app: &App) -> Result<(), String> {
    let model = model(app);
    let (menu, items) = build(&model).map_err(|e| e.to_string())?;
    let mut builder = TrayIconBuilder::new().with_id(TRAY_ID).with_menu(Box::new(menu)).with_tooltip(&model.tooltip);
    if let Some(image) = icon(model.icon) {
        builder = builder.with_icon(image);
    }
    let tray = builder.build().map_err(|e| e.to_string())?;
    TRAY.with(|t| *t.borrow_mut() = Some(Rendered { tray, model, items }));
    let acting = app.clone();
    MenuEvent::set_event_handler(Some(move |event: MenuEvent| {
        let app = acting.clone();
        acting.on_main(move || act(&app, event.id().as_ref()));
    }));
    Ok(())
}

/// Brings the tray up to date with the state: in place when only labels, checks or the icon changed.
/// From any thread; the work is done on the main thread, where the tray lives.
pub fn refresh(app: &App) {
    let handle = app.clone();
    app.on_main(move || refresh_here(&handle));
}

fn refresh_here(app: &App) {
    let new = model(app);
    TRAY.with(|t| {
        let mut rendered = t.borrow_mut();
        let Some(current) = rendered.as_mut() else { return };
        for change in changes(&current.model, &new) {
            if let Err(e) = apply(current, change, &new) {
                tracing::debug!("the tray could not be updated: {e}");
            }
        }
        current.model = new;
    });
}

fn apply(current: &mut Rendered, change: Change, new: &Menu) -> Result<(), String> {
    match change {
        Change::Rebuild => {
            let (menu, items) = build(new).map_err(|e| e.to_string())?;
            current.items = items;
            current.tray.set_menu(Some(Box::new(menu)));
        }
        Change::Label(action, text) => match current.items.get(&action.id()) {
            Some(MenuItemKind::MenuItem(i)) => i.set_text(&text),
            Some(MenuItemKind::Check(c)) => c.set_text(&text),
            _ => {}
        },
        Change::Checked(action, on) => {
            if let Some(MenuItemKind::Check(c)) = current.items.get(&action.id()) {
                c.set_checked(on);
            }
        }
        Change::Enabled(action, on) => match current.items.get(&action.id()) {
            Some(MenuItemKind::MenuItem(i)) => i.set_enabled(on),
            Some(MenuItemKind::Check(c)) => c.set_enabled(on),
            _ => {}
        },
        Change::Icon(state) => current.tray.set_icon(icon(state)).map_err(|e| e.to_string())?,
        Change::Tooltip(text) => current.tray.set_tooltip(Some(text)).map_err(|e| e.to_string())?,
    }
    Ok(())
}

/// The action behind a menu item id, from the menu on display.
fn action_of(id: &str) -> Option<Action> {
    TRAY.with(|t| {
        let rendered = t.borrow();
        menu::entries(&rendered.as_ref()?.model.items).into_iter().find_map(|item| match item {
            Item::Entry { action, .. } if action.id() == id => Some(action.clone()),
            _ => None,
        })
    })
}

/// Does what a menu item says. On the main thread.
fn act(app: &App, id: &str) {
    let Some(action) = action_of(id) else { return };
    let shell = app.shell.clone();
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
            // Through the private login page, as `keymux dashboard --open`; off the main thread, as
            // the opener is waited on for a few seconds.
            let link = g.login_link();
            std::thread::spawn(move || {
                if let Err(e) = keymux::login_page::open(&link) {
                    tracing::warn!("the dashboard could not be opened in a browser: {e}");
                }
            });
        }
        (Action::CopyBaseUrl, Some(g)) => desk::copy(&g.base_url()),
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
        (Action::ToggleAutostart, _) => toggle_autostart(&shell),
        (Action::Status, _) | (_, None) => {}
    }
    refresh(app);
}

/// "Test now": probes the key (a cooldown or quota rest ends if the provider answers, as through the
/// dashboard) and says what the provider answered: the user asked, so it is shown whatever the
/// notification switches say.
fn test_now(app: &App, gateway: Arc<keymux::gateway::Gateway>, key: keymux::keys::KeyId) {
    let app = app.clone();
    let testing = app.clone();
    testing.spawn(async move {
        let label = views::key(&gateway, &key).map_or_else(|| key.to_string(), |k| k.status.label);
        let (title, body) = match gateway.test_key(&key).await {
            Ok(test) if test.ok => (format!("'{label}' answered"), test.message),
            Ok(test) => (format!("'{label}' did not answer"), test.message),
            Err(e) => (format!("'{label}' could not be tested"), e.to_string()),
        };
        tracing::info!(%title, %body, "key tested from the tray");
        desk::notify(&app, &title, &body);
        refresh(&app);
    });
}

fn toggle_autostart(shell: &crate::state::Shell) {
    let on = shell.autostart.load(Ordering::Relaxed);
    match desk::set_autostart(!on) {
        Ok(()) => shell.autostart.store(!on, Ordering::Relaxed),
        Err(e) => tracing::warn!("start at login could not be changed: {e}"),
    }
}
