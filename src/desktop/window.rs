//! What the tray's dashboard window shows when it cannot show the dashboard, instead of a blank page:
//! why, and what to do. The window opens the gateway's page with a one-time login link and waits for
//! the page to use it ([`report_in`]): a page whose script never ran (a blank window) never does. The
//! tray also tells of the webview's own failures (a load that failed, a web process that ended); the
//! words and the page for all of them are here ([`Unshown`], [`page`]).

use std::time::{Duration, Instant};

use crate::access::{Access, CodeWatch};
use crate::clock::Clock;

/// How long the window waits for the dashboard's page to log in with the window's link. It takes
/// under a second on a desktop and a few under load; a page that has not by then will not.
pub const REPORT_IN: Duration = Duration::from_secs(30);

/// Why the window does not show the dashboard.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unshown {
    /// The page did not log in within [`REPORT_IN`]: its script did not run (or stopped), or it could
    /// not reach the gateway.
    NoReport,
    /// The window's login link stopped working before the page used it.
    LinkSpent,
    /// The page could not be loaded, in the webview's words (which never carry the link).
    LoadFailed(String),
    /// The webview's web process, which draws the page, ended: how.
    WebProcessEnded(String),
}

impl Unshown {
    /// One sentence for the log and the window.
    pub fn reason(&self) -> String {
        match self {
            Self::NoReport => format!(
                "the dashboard's page did not start within {} seconds (its script did not run, or it could \
                 not reach Keymux)",
                REPORT_IN.as_secs()
            ),
            Self::LinkSpent => "the window's one-time login link stopped working before the page used it".to_owned(),
            Self::LoadFailed(error) => format!("the dashboard's page could not be loaded: {error}"),
            Self::WebProcessEnded(how) => format!("the part of the window that draws the page stopped ({how})"),
        }
    }
}

/// What the tray tells its window process, one JSON line each on the window's standard input (so the
/// login link is on no command line). The window process ends when its window closes, and closes
/// its window when its input ends (the tray quit or died).
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Show the dashboard: the gateway's one-time login link. The first line a window gets, or
    /// [`Command::Down`].
    Show { link: String },
    /// Show why the gateway is not running instead.
    Down { why: String },
    /// Bring the open window to the front.
    Focus,
    /// Say in the window why it does not show the dashboard (the tray saw the page never log in).
    Say(Unshown),
}

/// Never the link: its code logs the dashboard in.
impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Show { .. } => f.write_str("Show { link: <one-time login link> }"),
            Self::Down { why } => f.debug_struct("Down").field("why", why).finish(),
            Self::Focus => f.write_str("Focus"),
            Self::Say(why) => f.debug_tuple("Say").field(why).finish(),
        }
    }
}

impl Command {
    /// The command as the line the window reads.
    pub fn line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// Reads a line written by [`Command::line`].
    pub fn parse(line: &str) -> Result<Self, String> {
        serde_json::from_str(line.trim()).map_err(|e| format!("the tray sent the window a line it cannot read: {e}"))
    }
}

/// A watch on the window's login `link` (a gateway's `/login?code=…`), to wait on with [`report_in`];
/// `None` if the link is not one or its code no longer waits.
pub fn watch_link(access: &Access, link: &str, now: Instant) -> Option<CodeWatch> {
    access.watch_code(crate::login_page::code_of(link)?, now)
}

/// Waits for the window's page to log in with its link (watched by [`watch_link`]): `None` when it did, else why the window does
/// not show the dashboard. Waits on the code itself and on `clock`, so it never polls, and a test
/// that moves the clock on passes the deadline.
pub async fn report_in(watch: CodeWatch, clock: &Clock) -> Option<Unshown> {
    let deadline = crate::clock::later(clock.now(), REPORT_IN);
    tokio::select! {
        used = watch.used() => (!used).then_some(Unshown::LinkSpent),
        () = clock.sleep_until(deadline) => Some(Unshown::NoReport),
    }
}

/// The page the window shows instead: the reason, that Keymux itself runs on, and what to do. Whole
/// in itself (no script, no request), so it shows whatever failed.
pub fn page(unshown: &Unshown) -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Keymux: the dashboard could not be shown</title>
<style>
:root {{ color-scheme: light dark; font-family: system-ui, sans-serif; }}
body {{ margin: 0; display: grid; place-items: center; min-height: 100vh; background: Canvas; color: CanvasText; }}
main {{ max-width: 36rem; padding: 2rem; line-height: 1.5; }}
h1 {{ font-size: 1.3rem; margin: 0 0 1rem; }}
#why {{ padding: .75rem 1rem; border-left: 4px solid #dc2626; background: color-mix(in srgb, #dc2626 10%, Canvas); }}
code {{ font-family: ui-monospace, monospace; }}
</style>
</head>
<body>
<main>
  <h1>The dashboard could not be shown in this window</h1>
  <p id="why">{why}.</p>
  <p>Keymux itself is running: it serves your requests, and its tray menu works.</p>
  <ul>
    <li>Choose <b>Open in browser</b> in the tray menu to see the dashboard in your web browser.</li>
    <li>Or close this window and choose <b>Open dashboard</b> to try again.</li>
  </ul>
  <p>Keymux's log has the same line. To see more, start <code>keymux-tray</code> from a terminal with
    <code>KEYMUX_LOG=debug</code>.</p>
</main>
</body>
</html>
"#,
        why = escape(&capitalised(&unshown.reason())),
    )
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// Text as HTML: the webview's words may hold anything.
fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '&' => "&amp;".to_owned(),
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '"' => "&quot;".to_owned(),
            '\'' => "&#39;".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(access: &Access, clock: &Clock) -> String {
        format!("http://127.0.0.1:8787/login?code={}", access.issue_login(clock.now()).expose())
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_that_logs_in_reports_in() {
        let (access, clock) = (Access::default(), Clock::system());
        let link = link(&access, &clock);
        let watch = watch_link(&access, &link, clock.now()).expect("its code waits");
        let code = link.rsplit('=').next().expect("a code");
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move { report_in(watch, &clock).await }
        });
        tokio::time::advance(REPORT_IN / 2).await;
        access.redeem(code, clock.now()).expect("redeemed");
        assert_eq!(waiting.await.expect("joined"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_that_never_logs_in_is_told_at_the_deadline() {
        let (access, clock) = (Access::default(), Clock::system());
        let watch = watch_link(&access, &link(&access, &clock), clock.now()).expect("its code waits");
        let started = clock.now();
        assert_eq!(report_in(watch, &clock).await, Some(Unshown::NoReport));
        assert!(clock.now().duration_since(started) >= REPORT_IN, "not before the deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn a_link_pushed_out_unused_is_told_at_once() {
        let (access, clock) = (Access::default(), Clock::system());
        let watch = watch_link(&access, &link(&access, &clock), clock.now()).expect("its code waits");
        (0..crate::access::MAX_LOGIN_CODES).for_each(|_| drop(access.issue_login(clock.now())));
        let started = clock.now();
        assert_eq!(report_in(watch, &clock).await, Some(Unshown::LinkSpent));
        assert_eq!(clock.now(), started, "without waiting for the deadline");
    }

    #[test]
    fn only_a_waiting_login_link_is_watched() {
        let (access, clock) = (Access::default(), Clock::system());
        assert!(watch_link(&access, "http://127.0.0.1:8787/", clock.now()).is_none());
        assert!(watch_link(&access, "http://127.0.0.1:8787/login?code=unknown", clock.now()).is_none());
    }

    #[test]
    fn the_page_says_why_and_what_to_do_and_holds_no_markup_from_the_reason() {
        let page = page(&Unshown::LoadFailed("<script>alert(1)</script> & more".to_owned()));
        assert!(page.contains(
            "The dashboard&#39;s page could not be loaded: &lt;script&gt;alert(1)&lt;/script&gt; &amp; more."
        ));
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("Open in browser") && page.contains("Open dashboard"), "{page}");
        let page = super::page(&Unshown::NoReport);
        assert!(page.contains("did not start within 30 seconds"), "{page}");
        assert!(Unshown::WebProcessEnded("it crashed".into()).reason().ends_with("(it crashed)"));
    }
}
