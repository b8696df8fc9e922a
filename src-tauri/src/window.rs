//! The dashboard window. It is made when opened and freed when closed (closing it leaves Keymux in the
//! tray), so a hidden dashboard costs no webview. Its size and place are remembered by the window-state
//! plugin. It shows the gateway's own dashboard, logged in through a fresh one-time link; when the
//! gateway is not running it shows why.

use std::sync::Arc;

use tauri::{AppHandle, Manager, WebviewUrl, WebviewWindowBuilder};

use crate::state::Shell;

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
    let url = match shell.gateway() {
        Some(gateway) => match gateway.login_link().parse() {
            Ok(url) => WebviewUrl::External(url),
            Err(e) => {
                tracing::warn!("the dashboard link is not a URL: {e}");
                return;
            }
        },
        None => {
            let why = shell.problem().unwrap_or_else(|| "the gateway is starting".to_owned());
            WebviewUrl::App(format!("index.html#{}", encode(&why)).into())
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
        }
        Err(e) => tracing::warn!("the dashboard window could not be opened: {e}; use Open in browser"),
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
