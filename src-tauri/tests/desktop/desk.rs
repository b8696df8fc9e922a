//! The running tray app as a test drives it: its icon on the tray host, its menu opened by a click and
//! chosen from the keyboard, its dialogs answered, pictures of what it shows, and the gateway's
//! control API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use keymux::api::types::StatusBody;
use keymux::desktop::menu::{self, Action, IconState, MenuInput};

use super::x11::{self, Rect};
use super::xwd::Image;
use super::Xvfb;

/// Generous: the machines are shared and slow; these only catch real breakage.
pub const WAIT: Duration = Duration::from_secs(120);

/// Where the tray tests keep their pictures (`tray-shots/` in the test's temporary directory).
pub fn shots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tray-shots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The app's arguments as start at login gives them (hidden), with secrets from the environment only,
/// `config`, a port of its own and `upstream` as the provider.
pub fn hidden_app_args(config: &Path, upstream: &str) -> Vec<String> {
    let config = config.display().to_string();
    ["--ephemeral", "--hidden", "--config", &config, "--listen", "127.0.0.1:0", "--upstream", upstream]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

/// The running app as the test drives it: its display, its icon's place, the gateway's API.
pub struct Desk<'a> {
    pub xvfb: &'a Xvfb,
    pub icon: Rect,
    /// The control API's root (`…/keymux/api`) and the admin token it takes.
    pub api: String,
    pub admin: String,
    pub http: reqwest::Client,
    /// Where the pictures go.
    pub shots: PathBuf,
    /// What the menu's shape depends on besides the gateway's status.
    pub codex_undo: bool,
    pub notifications: bool,
    pub autostart: bool,
}

impl<'a> Desk<'a> {
    /// The app whose gateway answers at `base` (`…/v1`), its icon docked on `xvfb`'s tray, with the
    /// menu as a fresh start shows it (notifications on, no Undo, not started at login).
    pub async fn new(xvfb: &'a Xvfb, base: &str, admin: &str) -> Self {
        let icon = x11::docked_icon(&xvfb.display, WAIT).await;
        println!("the icon docked at {icon:?}");
        Desk {
            xvfb,
            icon,
            api: format!("{}/keymux/api", base.trim_end_matches("/v1")),
            admin: admin.to_owned(),
            http: reqwest::Client::new(),
            shots: shots(),
            codex_undo: false,
            notifications: true,
            autostart: false,
        }
    }
}

impl Desk<'_> {
    pub async fn status(&self) -> StatusBody {
        let r = self.http.get(format!("{}/status", self.api)).bearer_auth(&self.admin).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    pub async fn wait_status(&self, what: &str, ok: impl Fn(&StatusBody) -> bool) -> StatusBody {
        let started = std::time::Instant::now();
        loop {
            let s = self.status().await;
            if ok(&s) {
                return s;
            }
            assert!(started.elapsed() < WAIT, "{what}: the gateway never got there");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the tray shows `want`, and keeps a picture of it.
    pub async fn expect_icon(&self, want: IconState) {
        let started = std::time::Instant::now();
        loop {
            let screen = self.xvfb.screen();
            let (shown, distances) = x11::icon_shown(&screen, self.icon);
            if shown == want {
                let crop = screen.crop(Rect { x: 0, y: 0, w: 200, h: 34 });
                crop.write_png(&self.shots.join(format!("icon-{}.png", want.name())));
                return;
            }
            assert!(started.elapsed() < WAIT, "the tray never showed {want:?}; nearest now: {distances:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The menu the tray draws now, from the same pure function the app uses.
    pub async fn menu(&self) -> menu::Menu {
        let status = self.status().await;
        menu::menu(&MenuInput {
            status: Some(&status),
            problem: None,
            notifications: self.notifications,
            notices_off: Vec::new(),
            autostart: self.autostart,
            codex_undo: self.codex_undo,
            pi_undo: false,
        })
    }

    /// Clicks the icon and waits for the menu to open; returns its window.
    pub async fn open_menu(&self) -> x11::Window {
        assert!(x11::popups(&self.xvfb.display).is_empty(), "nothing else is open");
        let (x, y) = (self.icon.x + self.icon.w / 2, self.icon.y + self.icon.h / 2);
        x11::xdotool(&self.xvfb.display, &["mousemove", &x.to_string(), &y.to_string(), "click", "1"]);
        x11::until("the menu opens", WAIT, || x11::popups(&self.xvfb.display).into_iter().next()).await
    }

    /// Opens the menu, keeps a picture of it (the tray and the menu) as `name`, and closes it again.
    pub async fn picture_of_menu(&self, name: &str) {
        let menu = self.open_menu().await;
        // Like a dialog, a menu is black from when it is mapped until GTK paints it.
        self.drawn("the menu", menu.rect).await;
        let r = menu.rect;
        self.xvfb
            .screen()
            .crop(Rect { x: 0, y: 0, w: r.x + r.w + 8, h: r.y + r.h + 8 })
            .write_png(&self.shots.join(name));
        x11::xdotool(&self.xvfb.display, &["key", "Escape"]);
        self.gone("the menu closes", &menu).await;
    }

    /// Waits until the window at `rect` is painted, and returns its picture: GTK maps a window (a
    /// menu, a dialog) black and paints it a moment later. Painted means a third of its pixels lit.
    pub async fn drawn(&self, what: &str, rect: Rect) -> Image {
        x11::until(&format!("{what} is drawn"), WAIT, || {
            let shot = self.xvfb.screen().crop(rect);
            let lit = shot.pixels().chunks(3).filter(|px| px.iter().any(|&c| c > 24)).count();
            (lit * 3 > shot.pixels().len() / 3).then_some(shot)
        })
        .await
    }

    /// Waits until `window` is off the screen.
    pub async fn gone(&self, what: &str, window: &x11::Window) {
        x11::until(what, WAIT, || (!x11::viewable(&self.xvfb.display, &window.id)).then_some(())).await;
    }

    /// Opens the menu and chooses `action` from the keyboard; waits for the menu to close.
    pub async fn choose(&self, action: Action) {
        let keys = x11::keys_for(&self.menu().await, &action);
        let menu = self.open_menu().await;
        for key in keys {
            x11::xdotool(&self.xvfb.display, &["key", key]);
        }
        self.gone("the menu closes", &menu).await;
    }

    /// Waits for the dialog titled `title`, keeps a picture of it, and presses its default button.
    pub async fn answer_dialog(&self, title: &str, picture: Option<&str>) {
        let needle = format!("\"{title}\": (\"keymux-tray\"");
        let dialog = x11::until(&format!("the {title:?} dialog opens"), WAIT, || {
            x11::shown(&self.xvfb.display, &needle).into_iter().next()
        })
        .await;
        if let Some(name) = picture {
            self.drawn(&format!("the {title:?} dialog"), dialog.rect).await.write_png(&self.shots.join(name));
        }
        x11::xdotool(&self.xvfb.display, &["windowfocus", "--sync", &dialog.id]);
        x11::xdotool(&self.xvfb.display, &["key", "Return"]);
        self.gone(&format!("the {title:?} dialog closes"), &dialog).await;
    }
}
