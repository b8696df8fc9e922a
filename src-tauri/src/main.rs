//! Keymux's tray app: a thin Tauri shell over the gateway library. It starts the gateway in-process
//! through `keymux::Runtime`, renders the tray menu and icon that `keymux::desktop` computes from the
//! gateway's state, shows desktop notifications, and opens the dashboard (the gateway's own page) in a
//! window. Quit, SIGTERM and SIGINT all take one path: drain, flush the metrics, exit 0.
//!
//! Rooms:
//! * `args`: the command line (the same gateway flags as `keymux serve`).
//! * `state`: what the app keeps (preferences, notifier, runtime, why the gateway is down), and quitting.
//! * `shell`: starting the gateway, following its events, the menu tick, signals.
//! * `tray`: rendering a `desktop::menu::Menu` into the tray and acting on its items.
//! * `window`: the dashboard window (made when opened, freed when closed; never left blank: it says why
//!   it cannot show the dashboard).
//! * `clients`: "Set up Codex / pi" and their undo.
//! * `webkit`: what WebKitGTK is told before the first webview: software rendering where no GPU is usable,
//!   and the window's languages.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod args;
mod clients;
mod shell;
mod state;
mod tray;
mod webkit;
mod window;

use std::process::ExitCode;

fn main() -> ExitCode {
    keymux::logging::init();
    let args = match args::Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Some(missing) = no_display() {
        eprintln!(
            "Keymux's tray app needs a desktop session, and {missing}. On a server or over SSH, run the same \
             gateway headless with `keymux serve`."
        );
        return ExitCode::from(3);
    }
    webkit::prepare();
    shell::run(args)
}

/// Why there is no display to open a window on, if there is none (Linux and the BSDs only; macOS and
/// Windows always have one in a user session).
fn no_display() -> Option<&'static str> {
    if !cfg!(any(target_os = "linux", target_os = "freebsd", target_os = "openbsd", target_os = "netbsd")) {
        return None;
    }
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    (!set("DISPLAY") && !set("WAYLAND_DISPLAY"))
        .then_some("no display was found (DISPLAY and WAYLAND_DISPLAY are unset)")
}
