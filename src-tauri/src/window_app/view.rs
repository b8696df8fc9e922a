//! The dashboard window. It is made when opened and freed when closed (closing it leaves Keymux in the
//! tray), so a hidden dashboard costs no webview. Its size and place are remembered by the window-state
//! plugin. It shows the gateway's own dashboard, logged in through a fresh one-time link; when the
//! gateway is not running it shows why.
//!
//! It is never left blank: when the page does not log in with the window's link in time
//! (`keymux::desktop::window::report_in`), when the load fails, or when the web process that draws it
//! ends, the window shows why and what to do (`desktop::window::page`), and the log says the same.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use keymux::clock::Clock;
use keymux::desktop::window::{self as unshown, Unshown};
use tauri::{AppHandle, Manager, WebviewUrl, WebviewWindow, WebviewWindowBuilder, WindowEvent};

use crate::state::{lock, Shell};

const LABEL: &str = "main";

/// Shows the dashboard window, making it if it is not open.
pub fn open_dashboard(app: &AppHandle) {
    if let Some(window) = app.get_webview_window(LABEL) {
        let _ = window.unminimize();
        let _ = window.show();
        let _ = window.set_focus();
        return;
    }
    let shell = app.state::<Arc<Shell>>().inner().clone();
    let (url, report) = match shell.gateway() {
        Some(gateway) => {
            let link = gateway.login_link();
            let watch = unshown::watch_link(gateway.access(), &link, gateway.clock().now());
            match link.parse() {
                Ok(url) => (WebviewUrl::External(url), watch.map(|w| (w, gateway.clock().clone()))),
                Err(e) => {
                    tracing::warn!("the dashboard link is not a URL: {e}");
                    return;
                }
            }
        }
        None => {
            let why = shell.problem().unwrap_or_else(|| "the gateway is starting".to_owned());
            (WebviewUrl::App(format!("index.html#{}", encode(&why)).into()), None)
        }
    };
    let built = WebviewWindowBuilder::new(app, LABEL, url)
        .title("Keymux")
        .inner_size(1180.0, 780.0)
        .min_inner_size(420.0, 480.0)
        .build();
    match built {
        Ok(window) => {
            let _ = window.set_focus();
            tracing::info!("dashboard window opened");
            let said = Arc::new(AtomicBool::new(false));
            #[cfg(any(
                target_os = "linux",
                target_os = "dragonfly",
                target_os = "freebsd",
                target_os = "openbsd",
                target_os = "netbsd"
            ))]
            webkit::watch(&window, &said);
            if let Some((watch, clock)) = report {
                wait_for_page(window, watch, clock, said);
            }
        }
        Err(e) => tracing::warn!("the dashboard window could not be opened: {e}; use Open in browser"),
    }
}

/// Waits, off the main thread, for the window's page to log in with the window's link; if it does
/// not, the window says why. Ends with the window.
fn wait_for_page(window: WebviewWindow, watch: keymux::access::CodeWatch, clock: Clock, said: Arc<AtomicBool>) {
    let (closed, on_close) = tokio::sync::oneshot::channel::<()>();
    let closed = Mutex::new(Some(closed));
    window.on_window_event(move |event| {
        if matches!(event, WindowEvent::Destroyed) {
            lock(&closed).take();
        }
    });
    tauri::async_runtime::spawn(async move {
        tokio::select! {
            why = unshown::report_in(watch, &clock) => match why {
                None => tracing::debug!("the dashboard's page logged in with the window's link"),
                Some(why) => say(&window, &said, &why),
            },
            _ = on_close => {}
        }
    });
}

/// Shows why the window cannot show the dashboard, and logs it: once per window (the first reason).
fn say(window: &WebviewWindow, said: &Arc<AtomicBool>, why: &Unshown) {
    #[cfg(any(
        target_os = "linux",
        target_os = "dragonfly",
        target_os = "freebsd",
        target_os = "openbsd",
        target_os = "netbsd"
    ))]
    {
        let (said, why) = (said.clone(), why.clone());
        let _ = window.with_webview(move |webview| webkit::say(&webview.inner(), &said, &why));
    }
    #[cfg(not(any(
        target_os = "linux",
        target_os = "dragonfly",
        target_os = "freebsd",
        target_os = "openbsd",
        target_os = "netbsd"
    )))]
    {
        if !said.swap(true, std::sync::atomic::Ordering::SeqCst) {
            logged(why);
            let page = serde_json::to_string(&unshown::page(why)).unwrap_or_default();
            let _ = window.eval(format!("document.open();document.write({page});document.close();"));
        }
    }
}

fn logged(why: &Unshown) {
    tracing::warn!(
        "the dashboard window cannot show the dashboard: {}; the window says so (Open in browser shows the same dashboard)",
        why.reason()
    );
}

/// WebKitGTK's own signals, which Tauri does not pass on: a load that failed, a web process that ended.
#[cfg(any(
    target_os = "linux",
    target_os = "dragonfly",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
))]
mod webkit {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use keymux::desktop::window::{self as unshown, Unshown};
    use tauri::WebviewWindow;
    use webkit2gtk::{LoadEvent, NetworkError, PolicyError, WebProcessTerminationReason, WebView, WebViewExt as _};

    /// Where the window's own page is said to come from: nowhere (it has no script, loads nothing).
    const SAID_URI: &str = "about:blank";

    /// Follows the window's webview for the failures that leave it blank.
    pub fn watch(window: &WebviewWindow, said: &Arc<AtomicBool>) {
        let said = said.clone();
        let _ = window.with_webview(move |webview| {
            let view = webview.inner();
            let on_failure = said.clone();
            view.connect_load_failed(move |view, _event, _uri, error| {
                // A load replaced by another (ours included) is no failure.
                if error.matches(NetworkError::Cancelled)
                    || error.matches(PolicyError::FrameLoadInterruptedByPolicyChange)
                {
                    return false;
                }
                say(view, &on_failure, &Unshown::LoadFailed(error.message().to_owned()));
                true
            });
            let on_end = said.clone();
            view.connect_web_process_terminated(move |view, reason| {
                let how = match reason {
                    WebProcessTerminationReason::Crashed => "it crashed",
                    WebProcessTerminationReason::ExceededMemoryLimit => "it used more memory than allowed",
                    // Only the app ends it through the API, and Keymux never does.
                    _ => return,
                };
                say(view, &on_end, &Unshown::WebProcessEnded(how.to_owned()));
            });
            view.connect_load_changed(move |view, event| {
                if event == LoadEvent::Finished
                    && said.load(Ordering::SeqCst)
                    && view.uri().as_deref() == Some(SAID_URI)
                {
                    tracing::info!("the dashboard window shows why it cannot show the dashboard");
                }
            });
        });
    }

    /// Shows why in the webview, once; on the main thread.
    pub fn say(view: &WebView, said: &AtomicBool, why: &Unshown) {
        if said.swap(true, Ordering::SeqCst) {
            return;
        }
        super::logged(why);
        view.load_alternate_html(&unshown::page(why), SAID_URI, None);
    }
}

/// Percent-encodes text for a URL fragment.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
