//! The running app: the main loop, starting the gateway, following its events, the menu tick, signals.
//! What it keeps is in `state`.

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

use crate::args::Args;
use crate::quit::quit;
use crate::state::{lock, App, Shell};
use crate::{desk, tray, window};

/// How often the menu is brought up to date when nothing happens (its countdowns).
const TICK: Duration = Duration::from_secs(1);

/// The app from start to exit.
pub fn run(args: Args) -> ExitCode {
    window::keep_gl_for_the_window();
    if let Err(e) = gtk::init() {
        eprintln!(
            "Keymux's tray app could not start its window system ({e}). `keymux serve` runs the gateway headless."
        );
        return ExitCode::from(1);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("Keymux's tray app could not start: {e}");
            return ExitCode::from(1);
        }
    };
    let app = App::new(Shell::new(args), runtime.handle().clone());
    // First: a second launch hands over to this one and exits.
    let Some(_instance) = desk::single_instance(&app) else { return ExitCode::SUCCESS };
    app.shell.autostart.store(desk::autostart_enabled(), Ordering::Relaxed);
    if let Err(e) = tray::create(&app) {
        tracing::warn!("the tray icon could not be shown: {e}");
    }
    app.spawn(start(app.clone()));
    gtk::main();
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::SUCCESS
}

/// Starts the gateway as `keymux serve` does; on failure the tray and the window say why.
async fn start(app: App) {
    let shell = app.shell.clone();
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
            app.spawn(follow(app.clone(), gateway));
            app.spawn(tick(app.clone()));
        }
        Err(problem) => {
            tracing::error!("the gateway did not start: {problem}");
            *lock(&shell.problem) = Some(problem);
        }
    }
    tray::refresh(&app);
    if !shell.args.hidden {
        let opening = app.clone();
        app.on_main(move || window::open_dashboard(&opening));
    }
    app.spawn(on_signal(app.clone()));
}

async fn launch(args: &Args) -> Result<Runtime, String> {
    let env = EnvSecrets::from_vars(std::env::vars())?;
    let options = StartOptions {
        config: ConfigSource::File(args.config.clone()),
        listen: args.listen,
        upstream: args.upstream.clone(),
        ephemeral: args.ephemeral,
        env,
        ..StartOptions::default()
    };
    for done in startup::first_run(&options).await.map_err(|e| e.to_string())? {
        tracing::info!("{done}");
    }
    let mut runtime = Runtime::start(options).await.map_err(|e| e.to_string())?;
    keymux::clients_check::watch::start(&mut runtime, args.ephemeral);
    for notice in runtime.notices() {
        tracing::warn!("{notice}");
    }
    Ok(runtime)
}

/// Follows the event stream: key and gateway events refresh the menu at once, and some become
/// desktop notifications.
async fn follow(app: App, gateway: Arc<Gateway>) {
    let mut events = gateway.events().subscribe();
    loop {
        match events.recv().await {
            Ok(envelope) => on_event(&app, &gateway, &envelope),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn on_event(app: &App, gateway: &Arc<Gateway>, envelope: &Envelope) {
    if matches!(envelope.event, Event::Key(_) | Event::Gateway(_)) {
        tray::refresh(app);
    }
    if !lock(&app.shell.settings).notifications {
        return;
    }
    let now = gateway.clock().unix_ms();
    let notice = lock(&app.shell.notifier).consider(envelope, || views::status(gateway), now);
    if let Some(notice) = notice {
        tracing::info!(title = %notice.title, "desktop notification");
        desk::notify(app, &notice.title, &notice.body);
    }
}

async fn tick(app: App) {
    let mut ticks = tokio::time::interval(TICK);
    loop {
        ticks.tick().await;
        tray::refresh(&app);
    }
}

/// SIGTERM (logout, system shutdown) and SIGINT (Ctrl-C) take the menu's Quit path.
async fn on_signal(app: App) {
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
