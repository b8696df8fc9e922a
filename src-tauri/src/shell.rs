//! The running app: starting the gateway, following its events, the menu tick, signals. What it keeps
//! is in `state`.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use keymux::api::views;
use keymux::config::EnvSecrets;
use keymux::events::{Envelope, Event};
use keymux::gateway::Gateway;
use keymux::startup::{self, ConfigSource, StartOptions};
use keymux::Runtime;
use tauri::{AppHandle, Manager, RunEvent};
use tauri_plugin_autostart::{MacosLauncher, ManagerExt as _};
use tauri_plugin_notification::NotificationExt as _;

use crate::args::Args;
use crate::state::{lock, quit, Shell};
use crate::{tray, window};

/// How often the menu is brought up to date when nothing happens (its countdowns).
const TICK: Duration = Duration::from_secs(1);

/// The app from start to exit.
pub fn run(args: Args) -> ExitCode {
    let shell = Arc::new(Shell::new(args));
    let built = tauri::Builder::default()
        // First: a second launch hands over to this one and exits.
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| {
            tracing::info!("another launch of Keymux asked for the window");
            window::open_dashboard(app);
        }))
        .plugin(tauri_plugin_window_state::Builder::default().build())
        .plugin(tauri_plugin_autostart::init(MacosLauncher::LaunchAgent, Some(vec!["--hidden"])))
        .plugin(tauri_plugin_notification::init())
        .plugin(tauri_plugin_clipboard_manager::init())
        .plugin(tauri_plugin_dialog::init())
        .manage(shell.clone())
        .setup(|app| {
            // GTK is up and no webview exists yet.
            crate::webkit::set_languages();
            let handle = app.handle().clone();
            let shell = handle.state::<Arc<Shell>>().inner().clone();
            shell.autostart.store(handle.autolaunch().is_enabled().unwrap_or(false), Ordering::Relaxed);
            tray::create(&handle)?;
            tauri::async_runtime::spawn(start(handle));
            Ok(())
        })
        .build(tauri::generate_context!());
    let app = match built {
        Ok(app) => app,
        Err(e) => {
            eprintln!(
                "Keymux's tray app could not start its window system ({e}). `keymux serve` runs the gateway headless."
            );
            return ExitCode::from(1);
        }
    };
    let code = app.run_return(move |_app, event| {
        if let RunEvent::ExitRequested { code: None, api, .. } = event {
            // The last window closed: Keymux lives on in the tray until Quit.
            if !shell.quitting.load(Ordering::Relaxed) {
                api.prevent_exit();
            }
        }
    });
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Starts the gateway as `keymux serve` does; on failure the tray and the window say why.
async fn start(app: AppHandle) {
    let shell = app.state::<Arc<Shell>>().inner().clone();
    match launch(&shell.args).await {
        Ok(runtime) => {
            let gateway = runtime.gateway().clone();
            // The same first line as `keymux serve`, for whoever started it from a terminal.
            let line = format!("keymux listening on {} with {} key(s)", gateway.base_url(), gateway.pool().len());
            let _ = writeln!(std::io::stdout(), "{line}");
            *lock(&shell.gateway) = Some(gateway.clone());
            *shell.runtime.lock().await = Some(runtime);
            if gateway.pool().is_empty() && shell.args.hidden {
                // Started at login with an empty pool: the tray offers the keys found on this machine
                // (an open window shows the same offer on its first-run screen).
                crate::clients::offer_import(&app, &gateway, tray::refresh);
            }
            tauri::async_runtime::spawn(follow(app.clone(), gateway));
            tauri::async_runtime::spawn(tick(app.clone()));
        }
        Err(problem) => {
            tracing::error!("the gateway did not start: {problem}");
            *lock(&shell.problem) = Some(problem);
        }
    }
    tray::refresh(&app);
    if !shell.args.hidden {
        window::open_dashboard(&app);
    }
    tauri::async_runtime::spawn(on_signal(app));
}

async fn launch(args: &Args) -> Result<Runtime, String> {
    let env = EnvSecrets::from_vars(std::env::vars())?;
    let options = StartOptions {
        config: ConfigSource::File(args.config.clone()),
        listen: args.listen,
        upstream: args.upstream.clone(),
        ephemeral: args.ephemeral,
        env,
        watch_clients: true,
        ..StartOptions::default()
    };
    for done in startup::first_run(&options).await.map_err(|e| e.to_string())? {
        tracing::info!("{done}");
    }
    let runtime = Runtime::start(options).await.map_err(|e| e.to_string())?;
    for notice in runtime.notices() {
        tracing::warn!("{notice}");
    }
    Ok(runtime)
}

/// Follows the event stream: key and gateway events refresh the menu at once, and some become
/// desktop notifications.
async fn follow(app: AppHandle, gateway: Arc<Gateway>) {
    let mut events = gateway.events().subscribe();
    loop {
        match events.recv().await {
            Ok(envelope) => on_event(&app, &gateway, &envelope),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn on_event(app: &AppHandle, gateway: &Arc<Gateway>, envelope: &Envelope) {
    if matches!(envelope.event, Event::Key(_) | Event::Gateway(_)) {
        tray::refresh(app);
    }
    let shell = app.state::<Arc<Shell>>();
    if !lock(&shell.settings).notifications {
        return;
    }
    let now = gateway.clock().unix_ms();
    let notice = lock(&shell.notifier).consider(envelope, || views::status(gateway), now);
    if let Some(notice) = notice {
        tracing::info!(title = %notice.title, "desktop notification");
        if let Err(e) = app.notification().builder().title(&notice.title).body(&notice.body).show() {
            tracing::warn!("the desktop notification could not be shown: {e}");
        }
    }
}

async fn tick(app: AppHandle) {
    let mut ticks = tokio::time::interval(TICK);
    loop {
        ticks.tick().await;
        tray::refresh(&app);
    }
}

/// SIGTERM (logout, system shutdown) and SIGINT (Ctrl-C) take the menu's Quit path.
async fn on_signal(app: AppHandle) {
    #[cfg(unix)]
    {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("signal received: shutting down");
    quit(&app);
}
