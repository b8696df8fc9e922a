//! Keymux's tray app: a thin shell over the gateway library. It starts the gateway in-process through
//! `keymux::Runtime`, renders the tray menu and icon that `keymux::desktop` computes from the gateway's
//! state, shows desktop notifications, and opens the dashboard (the gateway's own page) in a window.
//! Quit, SIGTERM and SIGINT all take one path: close the window, drain, flush the metrics, exit 0.
//!
//! The tray is light: this program links no WebKit. The window is a second program, `keymux-window`
//! (`src/window_app`), started when the window is opened and ended when it is closed, so a tray whose
//! window is closed holds GTK, the tray icon and the gateway, nothing more.
//!
//! Rooms:
//! * `args`: the command line (the same gateway flags as `keymux serve`).
//! * `state`: what the app keeps (preferences, notifier, runtime, why the gateway is down, the window's
//!   process), and the handle every part reaches it by (`App`: the state, the async runtime, the main
//!   thread).
//! * `quit`: the one way out (Quit, SIGTERM, SIGINT).
//! * `shell`: starting the gateway, following its events, the menu tick, signals, the main loop.
//! * `tray`: rendering a `desktop::menu::Menu` into the tray and acting on its items.
//! * `window`: the window's process: started on Open dashboard, told what to show, ended at Quit
//!   (`window_process`: the handle on it that `state` keeps, below both).
//! * `desk`: the desktop's services: notifications, start at login, the clipboard, dialogs, and one
//!   instance per session.
//! * `clients`: "Set up Codex / pi" and their undo.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod args;
mod clients;
mod desk;
mod quit;
mod shell;
mod state;
mod tray;
mod window;
mod window_process;

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
