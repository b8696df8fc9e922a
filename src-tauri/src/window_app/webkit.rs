//! What WebKitGTK is told before the first webview exists.
//!
//! * Rendering: without a usable GPU (virtual machines, remote desktops, Xvfb) WebKit's accelerated
//!   compositing and its DMA-BUF renderer draw nothing, and the dashboard window stays blank. Where no
//!   render node can be opened, Keymux turns both off, as WebKit's own documentation advises. A value
//!   the user set is never overridden.
//! * Languages: WebKit makes its language (`navigator.language`, `Accept-Language`, the page's `Intl`
//!   default) of `LC_CTYPE` with the codeset cut off, so `C.UTF-8` gives `C`, no language tag, and the
//!   dashboard's script stops on it before it logs in. The window gives WebKit the list
//!   `keymux::desktop::locale` makes of the user's locale instead.
//! * Memory: drawing in software, the window's process needs no GL driver (`crate::gl`).

use std::path::Path;

/// The variables WebKitGTK reads at start, and the value that turns each fallback on.
const FALLBACKS: [(&str, &str); 2] =
    [("WEBKIT_DISABLE_COMPOSITING_MODE", "1"), ("WEBKIT_DISABLE_DMABUF_RENDERER", "1")];

/// What the machine looks like, for the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// A DRM render node (`/dev/dri/renderD*`) could be opened for reading and writing.
    pub render_node: bool,
    /// The user asked Mesa for software rendering (`LIBGL_ALWAYS_SOFTWARE`).
    pub software_gl: bool,
}

/// The variables to set: none when the GPU is usable, else each fallback the user has not set.
pub fn fallbacks(machine: Machine, is_set: impl Fn(&str) -> bool) -> Vec<(&'static str, &'static str)> {
    if machine.render_node && !machine.software_gl {
        return Vec::new();
    }
    FALLBACKS.into_iter().filter(|(name, _)| !is_set(name)).collect()
}

/// Reads the machine and sets the fallbacks it needs. Call before any thread or webview starts.
pub fn prepare() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let machine = Machine {
        render_node: render_node_usable(Path::new("/dev/dri")),
        software_gl: std::env::var_os("LIBGL_ALWAYS_SOFTWARE").is_some_and(|v| !v.is_empty() && v != "0"),
    };
    let set = fallbacks(machine, |name| std::env::var_os(name).is_some());
    if set.is_empty() {
        tracing::debug!("WebKit renders with the GPU ({machine:?})");
        return;
    }
    for (name, value) in &set {
        // Edition 2021: `set_var` is safe; this runs on the main thread before any other thread starts.
        std::env::set_var(name, value);
    }
    let names: Vec<&str> = set.iter().map(|(n, _)| *n).collect();
    tracing::debug!("no usable GPU ({machine:?}): WebKit draws in software ({} set)", names.join(", "));
    #[cfg(target_os = "linux")]
    crate::gl::leave_to_the_web_process();
}

/// Gives WebKit the window's languages. Call on the main thread before the webview: WebKit keeps the
/// list for the whole process (every context's web and network processes start with it), so it is set
/// once, on the default context.
pub fn set_languages() {
    let languages = keymux::desktop::locale::web_languages(|name| std::env::var(name).ok());
    #[cfg(webkitgtk)]
    {
        use webkit2gtk::WebContextExt as _;
        let Some(context) = webkit2gtk::WebContext::default() else {
            tracing::warn!("WebKit has no default context: the window's languages are WebKit's own");
            return;
        };
        let tags: Vec<&str> = languages.iter().map(String::as_str).collect();
        context.set_preferred_languages(&tags);
        tracing::debug!("the window's languages: {}", languages.join(", "));
    }
    // WKWebView and WebView2 take the languages from the system's own settings.
    #[cfg(not(webkitgtk))]
    let _ = languages;
}

/// Whether any `renderD*` node under `dri` opens for reading and writing.
fn render_node_usable(dri: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dri) else { return false };
    entries.flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with("renderD")
            && std::fs::OpenOptions::new().read(true).write(true).open(e.path()).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: Machine = Machine { render_node: true, software_gl: false };

    #[test]
    fn a_usable_gpu_needs_no_fallback() {
        assert!(fallbacks(GPU, |_| false).is_empty());
    }

    #[test]
    fn no_render_node_turns_both_fallbacks_on() {
        let none = Machine { render_node: false, software_gl: false };
        assert_eq!(fallbacks(none, |_| false), FALLBACKS.to_vec());
    }

    #[test]
    fn software_gl_turns_them_on_even_with_a_render_node() {
        let soft = Machine { render_node: true, software_gl: true };
        assert_eq!(fallbacks(soft, |_| false).len(), 2);
    }

    #[test]
    fn a_value_the_user_set_is_left_alone() {
        let none = Machine { render_node: false, software_gl: false };
        let got = fallbacks(none, |name| name == "WEBKIT_DISABLE_COMPOSITING_MODE");
        assert_eq!(got, vec![("WEBKIT_DISABLE_DMABUF_RENDERER", "1")]);
    }

    #[test]
    fn only_a_render_node_that_opens_counts() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(!render_node_usable(&dir.path().join("absent")));
        assert!(!render_node_usable(dir.path()));
        std::fs::write(dir.path().join("card0"), b"").expect("write");
        assert!(!render_node_usable(dir.path()), "a card node is not a render node");
        std::fs::write(dir.path().join("renderD128"), b"").expect("write");
        assert!(render_node_usable(dir.path()));
    }
}
