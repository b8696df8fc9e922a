//! `keymux-window`: Keymux's dashboard window, a program of its own. The tray (`keymux-tray`) starts it
//! when the user opens the window and tells it what to show, one `keymux::desktop::window::Command`
//! per line on its standard input (so the login link is on no command line). It ends when its window
//! closes, and closes its window when its input ends (the tray quit or died). Everything of WebKit
//! lives and dies with this process: a tray whose window is closed holds none of it.
//!
//! Rooms:
//! * `view`: the window (the dashboard through its link, or why the gateway is down; never left blank:
//!   it says why it cannot show the dashboard).
//! * `webkit`: what WebKitGTK is told before the first webview: software rendering where no GPU is
//!   usable, and the window's languages.
//! * `gl`: drawing in software, no GL driver in the window's own process (its web process draws).

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

#[cfg(target_os = "linux")]
mod gl;
mod view;
mod webkit;

use std::io::BufRead;
use std::process::ExitCode;

use keymux::desktop::window::Command;
use tauri::{AppHandle, RunEvent};

fn main() -> ExitCode {
    keymux::logging::init();
    let mut input = std::io::stdin().lock();
    let first = match read_command(&mut input) {
        Some(Ok(first @ (Command::Show { .. } | Command::Down { .. }))) => first,
        Some(Ok(other)) => return refuse(&format!("the first line must say what to show, not {other:?}")),
        Some(Err(e)) => return refuse(&e),
        None => return refuse("it is started by the tray app (keymux-tray), which says what to show"),
    };
    drop(input);
    webkit::prepare();
    let built = tauri::Builder::default()
        .plugin(tauri_plugin_window_state::Builder::default().build())
        .setup(move |app| {
            let handle = app.handle().clone();
            view::open(&handle, &first);
            std::thread::spawn(move || follow(&handle));
            Ok(())
        })
        .build(tauri::generate_context!());
    let app = match built {
        Ok(app) => app,
        Err(e) => {
            tracing::warn!("the dashboard window could not start its window system ({e}); use Open in browser");
            return ExitCode::from(1);
        }
    };
    // The window closed (the last one): the process ends, and the window-state plugin keeps its place.
    let code = app.run_return(|_app, event| {
        if let RunEvent::ExitRequested { .. } = event {
            tracing::info!("dashboard window closed");
        }
    });
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn refuse(why: &str) -> ExitCode {
    eprintln!("keymux-window: {why}");
    ExitCode::from(2)
}

/// The next command on the input, `None` at its end.
fn read_command(input: &mut impl BufRead) -> Option<Result<Command, String>> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(Command::parse(&line)),
    }
}

/// Carries out the tray's later commands on the main thread; closes the window when the input ends.
fn follow(app: &AppHandle) {
    let mut input = std::io::stdin().lock();
    while let Some(command) = read_command(&mut input) {
        match command {
            Ok(command) => {
                let handle = app.clone();
                let _ = app.run_on_main_thread(move || view::apply(&handle, command));
            }
            Err(e) => tracing::warn!("{e}"),
        }
    }
    tracing::debug!("the tray closed the dashboard window");
    app.exit(0);
}
