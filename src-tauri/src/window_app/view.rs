//! The dashboard window: the gateway's own dashboard, logged in through the one-time link the tray
//! sent, or why the gateway is not running. Its size and place are remembered by the window-state
//! plugin.
//!
//! It is never left blank: when the tray sees that the page did not log in with the window's link in
//! time (`keymux::desktop::window::report_in`, in the tray, which runs the gateway), when the load
//! fails, or when the web process that draws it ends, the window shows why and what to do
//! (`desktop::window::page`), and the log says the same.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use keymux::desktop::window::{Command, Unshown};
use tauri::{AppHandle, Manager, WebviewUrl, WebviewWindow, WebviewWindowBuilder};

const LABEL: &str = "main";

/// Whether the window already said why it cannot show the dashboard (it says the first reason only).
struct Said(Arc<AtomicBool>);

/// Opens the window on what the first command says.
pub fn open(app: &AppHandle, first: &Command) {
    let url = match first {
        Command::Show { link } => match link.parse() {
            Ok(url) => WebviewUrl::External(url),
            Err(e) => {
                tracing::warn!("the dashboard link is not a URL: {e}");
                return;
            }
        },
        Command::Down { why } => WebviewUrl::App(format!("index.html#{}", encode(why)).into()),
        Command::Focus | Command::Say(_) => return,
    };
    // On the main thread, before the webview: the languages WebKit announces to the page.
    crate::webkit::set_languages();
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
            #[cfg(webkitgtk)]
            {
                webkit::watch(&window, &said);
                webkit::close_on_ctrl_w(&window);
            }
            app.manage(Said(said));
        }
        Err(e) => {
            tracing::warn!("the dashboard window could not be opened: {e}; use Open in browser");
            app.exit(1);
        }
    }
}

/// Carries out a later command from the tray. On the main thread.
pub fn apply(app: &AppHandle, command: Command) {
    let Some(window) = app.get_webview_window(LABEL) else { return };
    match command {
        Command::Focus => {
            let _ = window.unminimize();
            let _ = window.show();
            let _ = window.set_focus();
        }
        Command::Say(why) => {
            if let Some(said) = app.try_state::<Said>() {
                say(&window, &said.0, &why);
            }
        }
        Command::Show { .. } | Command::Down { .. } => {
            tracing::debug!("the dashboard window is already open");
        }
    }
}

/// Shows why the window cannot show the dashboard, and logs it: once per window (the first reason).
fn say(window: &WebviewWindow, said: &Arc<AtomicBool>, why: &Unshown) {
    #[cfg(webkitgtk)]
    {
        let (said, why) = (said.clone(), why.clone());
        let _ = window.with_webview(move |webview| webkit::say(&webview.inner(), &said, &why));
    }
    #[cfg(not(webkitgtk))]
    {
        if !said.swap(true, std::sync::atomic::Ordering::SeqCst) {
            logged(why);
            let page = serde_json::to_string(&keymux::desktop::window::page(why)).unwrap_or_default();
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
#[cfg(webkitgtk)]
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

    /// Ctrl+W closes the window, as in a browser (the dashboard's page has no use for it). Caught on the
    /// window, before the page sees the key.
    pub fn close_on_ctrl_w(window: &WebviewWindow) {
        use gtk::gdk::{keys::constants as key, ModifierType};
        use gtk::glib::Propagation;
        use gtk::prelude::WidgetExt as _;
        let Ok(gtk_window) = window.gtk_window() else { return };
        let closing = window.clone();
        gtk_window.connect_key_press_event(move |_, event| {
            let ctrl = event.state().contains(ModifierType::CONTROL_MASK);
            if ctrl && (event.keyval() == key::w || event.keyval() == key::W) {
                let _ = closing.close();
                return Propagation::Stop;
            }
            Propagation::Proceed
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
