//! The desktop's services the tray uses: notifications (the freedesktop notification service),
//! start at login (an autostart entry), the clipboard, dialogs, and one instance per session (a name
//! on the session bus). The same crates Tauri's plugins use, called directly, so the tray's program
//! needs no webview.

use std::sync::mpsc;

use gtk::prelude::*;

use crate::state::App;

/// The app's name where the desktop shows it (notifications, the autostart entry).
const APP_NAME: &str = "Keymux";

/// Shows a desktop notification, off the calling thread (the service is called over the bus).
pub fn notify(app: &App, title: &str, body: &str) {
    let (title, body) = (title.to_owned(), body.to_owned());
    app.spawn(async move {
        let shown = tokio::task::spawn_blocking(move || {
            notify_rust::Notification::new().appname(APP_NAME).summary(&title).body(&body).show().map(|_| ())
        })
        .await;
        match shown {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the desktop notification could not be shown: {e}"),
            Err(e) => tracing::warn!("the desktop notification could not be shown: {e}"),
        }
    });
}

/// Start at login: an entry that launches this program with `--hidden`.
fn launcher() -> Result<auto_launch::AutoLaunch, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    auto_launch::AutoLaunchBuilder::new()
        .set_app_name(APP_NAME)
        .set_app_path(&exe.display().to_string())
        .set_args(&["--hidden"])
        .build()
        .map_err(|e| e.to_string())
}

/// Whether Keymux starts at login.
pub fn autostart_enabled() -> bool {
    launcher().and_then(|l| l.is_enabled().map_err(|e| e.to_string())).unwrap_or(false)
}

/// Turns start at login on or off.
pub fn set_autostart(on: bool) -> Result<(), String> {
    let launcher = launcher()?;
    let done = if on { launcher.enable() } else { launcher.disable() };
    done.map_err(|e| e.to_string())
}

/// Puts `text` on the clipboard. On the main thread (GTK serves it from there).
pub fn copy(text: &str) {
    gtk::Clipboard::get(&gtk::gdk::SELECTION_CLIPBOARD).set_text(text);
}

/// What a dialog looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Info,
    Error,
}

/// Shows a message and waits until it is dismissed. In a task on the runtime (it waits on the main thread).
pub fn say(app: &App, title: &str, text: &str, kind: Kind) {
    let kind = match kind {
        Kind::Info => gtk::MessageType::Info,
        Kind::Error => gtk::MessageType::Error,
    };
    dialog(app, title, text, kind, &[("OK", gtk::ResponseType::Ok)]);
}

/// Asks a yes-or-no question and waits for the answer (Return chooses `yes`). In a task on the runtime.
pub fn ask(app: &App, title: &str, text: &str, yes: &str, no: &str) -> bool {
    let buttons = [(no, gtk::ResponseType::Cancel), (yes, gtk::ResponseType::Ok)];
    dialog(app, title, text, gtk::MessageType::Question, &buttons) == gtk::ResponseType::Ok
}

fn dialog(
    app: &App,
    title: &str,
    text: &str,
    kind: gtk::MessageType,
    buttons: &[(&str, gtk::ResponseType)],
) -> gtk::ResponseType {
    let (title, text) = (title.to_owned(), text.to_owned());
    let buttons: Vec<(String, gtk::ResponseType)> = buttons.iter().map(|(l, r)| ((*l).to_owned(), *r)).collect();
    let (answer, answered) = mpsc::channel();
    app.on_main(move || {
        let dialog =
            gtk::MessageDialog::new(None::<&gtk::Window>, gtk::DialogFlags::MODAL, kind, gtk::ButtonsType::None, &text);
        dialog.set_title(&title);
        for (label, response) in &buttons {
            dialog.add_button(label, *response);
        }
        if let Some((_, last)) = buttons.last() {
            dialog.set_default_response(*last);
        }
        dialog.set_keep_above(true);
        dialog.connect_response(move |dialog, response| {
            let _ = answer.send(response);
            dialog.close();
        });
        dialog.show_all();
        dialog.present();
    });
    // The runtime moves its other work off this thread while the user reads.
    tokio::task::block_in_place(|| answered.recv()).unwrap_or(gtk::ResponseType::Cancel)
}

/// The session bus name one running tray holds.
const INSTANCE_NAME: &str = "dev.keymux.tray.SingleInstance";
const INSTANCE_PATH: &str = "/dev/keymux/tray/SingleInstance";

/// Held by the first instance for its whole life.
pub struct Instance(
    #[expect(dead_code, reason = "held: the bus name goes with it")] Option<zbus::blocking::Connection>,
);

/// What a later launch asks the first.
struct Handover(App);

#[zbus::interface(name = "dev.keymux.tray.Handover")]
impl Handover {
    fn open_window(&self) {
        tracing::info!("another launch of Keymux asked for the window");
        let app = self.0.clone();
        self.0.on_main(move || crate::window::open_dashboard(&app));
    }
}

/// Takes this session's instance name. `None`: another Keymux holds it and was asked to show its
/// window, so this launch is done. Without a session bus, every launch runs (none can be found).
pub fn single_instance(app: &App) -> Option<Instance> {
    let built = zbus::blocking::connection::Builder::session()
        .and_then(|b| b.name(INSTANCE_NAME))
        .map(|b| b.replace_existing_names(false).allow_name_replacements(false))
        .and_then(|b| b.serve_at(INSTANCE_PATH, Handover(app.clone())))
        .and_then(zbus::blocking::connection::Builder::build);
    match built {
        Ok(connection) => Some(Instance(Some(connection))),
        Err(zbus::Error::NameTaken) => {
            let asked = zbus::blocking::Connection::session().and_then(|bus| {
                bus.call_method(Some(INSTANCE_NAME), INSTANCE_PATH, Some("dev.keymux.tray.Handover"), "OpenWindow", &())
                    .map(|_| ())
            });
            if let Err(e) = asked {
                tracing::warn!("another Keymux is running but did not answer: {e}");
            }
            None
        }
        Err(e) => {
            tracing::warn!("the session bus is not reachable ({e}): a second launch will not find this one");
            Some(Instance(None))
        }
    }
}
