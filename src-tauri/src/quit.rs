//! The one way out, for Quit in the menu and for SIGTERM and SIGINT alike.

use std::sync::atomic::Ordering;

use crate::state::App;

/// The one way out: close the window, stop accepting, let streams in flight finish (bounded), flush
/// the metrics, leave the main loop (the program then exits 0).
pub fn quit(app: &App) {
    if app.shell.quitting.swap(true, Ordering::SeqCst) {
        return;
    }
    let done = app.clone();
    app.spawn(async move {
        crate::window::close(&done).await;
        if let Some(runtime) = done.shell.runtime.lock().await.take() {
            let stopped = runtime.shutdown().await;
            let drained = match stopped.drained {
                Some(d) if d.clean => "every request in flight finished".to_owned(),
                Some(d) => format!("{} connection(s) cut after the drain allowance", d.connections_cut),
                None => "the server had already stopped".to_owned(),
            };
            match stopped.metrics {
                Ok(()) => tracing::info!("Keymux stopped: {drained}; metrics flushed"),
                Err(e) => tracing::warn!("Keymux stopped: {drained}; the metrics could not be flushed: {e}"),
            }
        }
        done.on_main(gtk::main_quit);
    });
}
