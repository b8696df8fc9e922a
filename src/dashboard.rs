//! The dashboard's files, served at `/`: built from `ui/` by `build.rs` and embedded in the binary, with
//! caching headers (hashed assets forever, the page never) and a content security policy that allows
//! only the page's own origin. `KEYMUX_UI_DIR` serves a directory instead (for working on the UI).
//! When the UI was not built, `/` says so and how to build it, rather than showing a blank page.

use std::borrow::Cow;

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode, Uri};

/// One embedded file: its path under the site root and its bytes.
pub struct Asset {
    /// The path, as requested (`/index.html`, `/assets/index-3f2a.js`).
    pub path: &'static str,
    /// The contents.
    pub bytes: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

/// Why the UI is missing, when it is (set by `build.rs`).
const UI_BUILD_NOTE: &str = env!("KEYMUX_UI_BUILD_NOTE");

/// Only the page's own origin, for everything; no inline script, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
                   frame-ancestors 'none'";

/// Answers `GET` for a dashboard path: the file, or the page itself for the app's own routes.
pub fn serve(uri: &Uri) -> Response<Body> {
    let path = uri.path();
    let (bytes, name): (Option<Cow<'static, [u8]>>, &str) = match find(path) {
        // `/` is the page itself: its type comes from `index.html`, not from the bare path (which has
        // no extension and would go out as a download).
        Some(found) if path == "/" => (Some(found), "/index.html"),
        Some(found) => (Some(found), path),
        // The app routes on the client (`/keys`, `/usage`…): they all get the page.
        None if !path.starts_with("/assets/") => (find("/index.html"), "/index.html"),
        None => (None, path),
    };
    match bytes {
        Some(bytes) => file(name, bytes),
        None if ASSETS.is_empty() && std::env::var_os("KEYMUX_UI_DIR").is_none() => not_built(),
        None => (StatusCode::NOT_FOUND, "not found").into_response_plain(),
    }
}

fn find(path: &str) -> Option<Cow<'static, [u8]>> {
    let path = if path == "/" { "/index.html" } else { path };
    if let Some(dir) = std::env::var_os("KEYMUX_UI_DIR") {
        let relative = path.trim_start_matches('/');
        if relative.split('/').any(|s| s == ".." || s.is_empty()) {
            return None;
        }
        return std::fs::read(std::path::Path::new(&dir).join(relative)).ok().map(Cow::Owned);
    }
    ASSETS.iter().find(|a| a.path == path).map(|a| Cow::Borrowed(a.bytes))
}

fn file(name: &str, bytes: Cow<'static, [u8]>) -> Response<Body> {
    let mut response = Response::new(Body::from(bytes.into_owned()));
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(name)));
    // Hashed assets never change under their name; the page must always be fresh.
    let cache = if name.starts_with("/assets/") { "public, max-age=31536000, immutable" } else { "no-cache" };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    response
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "webmanifest" => "application/json",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// The page shown when the binary was built without the dashboard.
fn not_built() -> Response<Body> {
    let page = format!(
        "<!doctype html><meta charset=utf-8><title>Keymux</title>\
         <h1>Keymux is running</h1><p>The gateway works, but this build has no dashboard: {UI_BUILD_NOTE}</p>\
         <p>Install Node.js 20 or later and build again (<code>cargo build --release</code> builds the dashboard \
         from <code>ui/</code>), or run <code>npm ci &amp;&amp; npm run build</code> in <code>ui/</code> and start \
         Keymux with <code>KEYMUX_UI_DIR=ui/dist</code>.</p>"
    );
    let mut response = Response::new(Body::from(page));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

trait Plain {
    fn into_response_plain(self) -> Response<Body>;
}

impl Plain for (StatusCode, &'static str) {
    fn into_response_plain(self) -> Response<Body> {
        let mut response = Response::new(Body::from(self.1));
        *response.status_mut() = self.0;
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The login link redirects to `/`: it must be a page, whether the dashboard was built or not.
    #[test]
    fn the_root_is_served_as_html() {
        for path in ["/", "/keys", "/index.html"] {
            let response = serve(&Uri::from_static(path));
            let kind = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            assert!(kind.starts_with("text/html"), "{path} went out as {kind:?}");
        }
    }
}
