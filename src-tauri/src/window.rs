//! The dashboard window's process, `keymux-window`: started when the window is opened, told what to
//! show on its standard input (the login link never on a command line), ended when the window closes
//! or at Quit. Only one at a time: opening it again brings it to the front.
//!
//! The tray runs the gateway, so it is the tray that sees whether the window's page logged in with
//! its link in time (`keymux::desktop::window::report_in`); if not, it tells the window to say why.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use keymux::desktop::window::{self as unshown, Command};
use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};

use crate::window_process::{Order, WindowProcess};

use crate::state::{lock, App};

/// How long a closing window's process has to end before it is stopped.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// The user's own `GDK_GL`, which the window's process gets back (the tray turns GTK's GL off for
/// itself: it draws nothing with it, and loading the GL driver would cost it tens of MB).
static USER_GDK_GL: OnceLock<Option<OsString>> = OnceLock::new();

/// Turns GTK's GL off for the tray's own process. Call first in `main`, before any thread starts.
pub fn keep_gl_for_the_window() {
    let user = std::env::var_os("GDK_GL");
    if user.is_none() {
        // Edition 2021: `set_var` is safe; this runs on the main thread before any other thread starts.
        std::env::set_var("GDK_GL", "disable");
    }
    let _ = USER_GDK_GL.set(user);
}

/// Shows the dashboard window: brings it to the front if it is open, else starts its process.
pub fn open_dashboard(app: &App) {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    if app.shell.quitting.load(Ordering::SeqCst) {
        return;
    }
    let mut slot = lock(&app.shell.window);
    if let Some(open) = slot.as_ref() {
        if open.orders.send(Order::Tell(Command::Focus)).is_ok() {
            return;
        }
    }
    let (orders, inbox) = mpsc::unbounded_channel();
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let first = match app.shell.gateway() {
        Some(gateway) => {
            let link = gateway.login_link();
            if let Some(watch) = unshown::watch_link(gateway.access(), &link, gateway.clock().now()) {
                let (clock, orders) = (gateway.clock().clone(), orders.clone());
                app.spawn(async move {
                    tokio::select! {
                        why = unshown::report_in(watch, &clock) => match why {
                            None => tracing::debug!("the dashboard's page logged in with the window's link"),
                            Some(why) => { let _ = orders.send(Order::Tell(Command::Say(why))); }
                        },
                        () = orders.closed() => {}
                    }
                });
            }
            Command::Show { link }
        }
        None => Command::Down { why: app.shell.problem().unwrap_or_else(|| "the gateway is starting".to_owned()) },
    };
    *slot = Some(WindowProcess { id, orders });
    app.spawn(run(app.clone(), id, first, inbox));
}

/// Closes the window if it is open and waits (bounded) for its process to end.
pub async fn close(app: &App) {
    let open = lock(&app.shell.window).take();
    let Some(open) = open else { return };
    let (done, closed) = oneshot::channel();
    if open.orders.send(Order::Close(done)).is_ok() {
        let _ = closed.await;
    }
}

/// The window's process from start to end.
async fn run(app: App, id: u64, first: Command, mut inbox: mpsc::UnboundedReceiver<Order>) {
    let mut child = match start() {
        Ok(child) => child,
        Err(e) => {
            tracing::warn!("the dashboard window could not be opened: {e}; use Open in browser");
            forget(&app, id);
            return;
        }
    };
    let mut input = child.stdin.take();
    tell(&mut input, &first).await;
    let closing = loop {
        tokio::select! {
            status = child.wait() => {
                match status {
                    Ok(status) if !status.success() => tracing::warn!("the dashboard window's process ended: {status}"),
                    Err(e) => tracing::warn!("the dashboard window's process could not be waited on: {e}"),
                    Ok(_) => {}
                }
                break None;
            }
            order = inbox.recv() => match order {
                Some(Order::Tell(command)) => tell(&mut input, &command).await,
                Some(Order::Close(done)) => break Some(done),
                None => break None,
            },
        }
    };
    if let Some(done) = closing {
        end(&mut child, input).await;
        let _ = done.send(());
    }
    forget(&app, id);
}

/// Starts `keymux-window`, from beside this program.
fn start() -> std::io::Result<Child> {
    let name = format!("keymux-window{}", std::env::consts::EXE_SUFFIX);
    let program = std::env::current_exe()?.with_file_name(&name);
    if !program.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is missing (build both programs: cargo build -p keymux-tray --bins)", program.display()),
        ));
    }
    let mut command = tokio::process::Command::new(program);
    command.stdin(Stdio::piped());
    match USER_GDK_GL.get().cloned().flatten() {
        Some(user) => command.env("GDK_GL", user),
        None => command.env_remove("GDK_GL"),
    };
    command.spawn()
}

async fn tell(input: &mut Option<ChildStdin>, command: &Command) {
    let Some(pipe) = input.as_mut() else { return };
    if let Err(e) = pipe.write_all(command.line().as_bytes()).await {
        tracing::debug!("the dashboard window did not take {command:?}: {e}");
        *input = None;
    }
}

/// Closes the window's input (it keeps its place and exits), and stops it if it has not in time.
async fn end(child: &mut Child, input: Option<ChildStdin>) {
    drop(input);
    if tokio::time::timeout(CLOSE_WITHIN, child.wait()).await.is_err() {
        tracing::warn!("the dashboard window did not close in time; stopping it");
        let _ = child.kill().await;
    }
}

/// Clears the slot if it still holds this window.
fn forget(app: &App, id: u64) {
    let mut slot = lock(&app.shell.window);
    if slot.as_ref().is_some_and(|open| open.id == id) {
        *slot = None;
    }
}
