//! The tray as a user sees it: a real tray host (tint2, an XEmbed system tray) on the test's X server,
//! the docked icon's place and pixels, and clicks and key presses sent with xdotool.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keymux::desktop::menu::{Action, IconState, Item, Menu};

use super::xwd::Image;
use super::Xvfb;

/// The class the tray icon's window has (tray-icon's XEmbed fallback).
const ICON_CLASS: &str = "tray-icon tray app";

/// A rectangle on the screen, in absolute pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    pub x: usize,
    pub y: usize,
    pub w: usize,
    pub h: usize,
}

/// tint2 showing only its system tray, along the top of the screen.
pub struct TrayHost {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl TrayHost {
    /// Starts tint2 on `xvfb`'s display; panics with the install command if it is missing.
    pub fn start(xvfb: &Xvfb) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let rc = dir.path().join("tint2rc");
        std::fs::write(
            &rc,
            "panel_items = S\npanel_position = top left horizontal\npanel_size = 100% 30\n\
             panel_background_id = 0\nsystray_padding = 4 4 4\nsystray_icon_size = 24\n",
        )
        .expect("tint2rc");
        let child = Command::new("tint2")
            .arg("-c")
            .arg(&rc)
            .env("DISPLAY", &xvfb.display)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tint2 starts (apt-get install tint2; scripts/test installs it)");
        Self { child, _dir: dir }
    }
}

impl Drop for TrayHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line of `xwininfo -root -tree`: a window's id, name, class and absolute place.
#[derive(Clone, Debug)]
pub struct Window {
    pub id: String,
    pub line: String,
    pub rect: Rect,
}

/// Every window on the display.
pub fn windows(display: &str) -> Vec<Window> {
    let out = Command::new("xwininfo")
        .args(["-root", "-tree"])
        .env("DISPLAY", display)
        .output()
        .expect("xwininfo runs (apt-get install x11-utils)");
    String::from_utf8_lossy(&out.stdout).lines().filter_map(parse_window).collect()
}

/// `0x400026 "name": ("class" "Class")  22x22+0+0  +4+4`: the last two fields are the size with the
/// place in the parent, then the absolute place.
fn parse_window(line: &str) -> Option<Window> {
    let line = line.trim();
    let id = line.split_whitespace().next().filter(|w| w.starts_with("0x"))?.to_owned();
    let mut words = line.split_whitespace().rev();
    let abs = words.next()?;
    let size = words.next()?;
    let (w, h) = size.split_once('+').map(|(s, _)| s)?.split_once('x')?;
    let mut at = abs.trim_start_matches('+').split('+');
    let (x, y) = (at.next()?.parse::<i64>().ok()?, at.next()?.parse::<i64>().ok()?);
    let rect = Rect { x: x.max(0) as usize, y: y.max(0) as usize, w: w.parse().ok()?, h: h.parse().ok()? };
    Some(Window { id, line: line.to_owned(), rect })
}

/// Runs xdotool on the display.
pub fn xdotool(display: &str, args: &[&str]) {
    let status = Command::new("xdotool")
        .args(args)
        .env("DISPLAY", display)
        .status()
        .expect("xdotool runs (apt-get install xdotool)");
    assert!(status.success(), "xdotool {args:?} failed");
}

/// Polls `check` every 200 ms until it gives a value, for at most `within` (a bound for broken
/// builds only: every wait is on a state the app reaches, never on a pause of a set length).
pub async fn until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The docked icon's place: its window sits inside tint2 (an undocked one stays at 0,0).
pub async fn docked_icon(display: &str, within: Duration) -> Rect {
    until("the tray icon docks in tint2", within, || {
        windows(display)
            .into_iter()
            .find(|w| w.line.contains(ICON_CLASS) && (w.rect.x, w.rect.y) != (0, 0))
            .map(|w| w.rect)
    })
    .await
}

/// Whether a window is on screen now (a closed menu stays in the tree, unmapped).
pub fn viewable(display: &str, id: &str) -> bool {
    let out = Command::new("xwininfo").args(["-id", id]).env("DISPLAY", display).output().expect("xwininfo runs");
    String::from_utf8_lossy(&out.stdout).contains("Map State: IsViewable")
}

/// The app's windows on screen now whose line contains `needle`.
pub fn shown(display: &str, needle: &str) -> Vec<Window> {
    windows(display).into_iter().filter(|w| w.line.contains(needle) && viewable(display, &w.id)).collect()
}

/// The app's pop-up windows on screen now (menus and dialogs; not the dashboard window).
pub fn popups(display: &str) -> Vec<Window> {
    shown(display, "(\"keymux-tray\" \"Keymux-tray\")")
        .into_iter()
        .filter(|w| w.rect.w > 40 && w.rect.h > 40 && !w.line.contains("\"Keymux\":"))
        .collect()
}

/// The state icon drawn at `rect`: the one of the five whose picture, scaled to the docked size over
/// the panel's background, is nearest to the pixels on screen; with the distances, for messages.
pub fn icon_shown(screen: &Image, rect: Rect) -> (IconState, Vec<(IconState, u64)>) {
    let shown = screen.crop(rect);
    let background = screen.pixel(rect.x, rect.y);
    let mut distances: Vec<(IconState, u64)> = IconState::ALL
        .iter()
        .map(|&state| (state, shown.distance(&reference(state, rect.w, rect.h, background))))
        .collect();
    distances.sort_by_key(|(_, d)| *d);
    (distances[0].0, distances)
}

/// A state's icon file, scaled by area to `w`×`h` and laid over `background`.
fn reference(state: IconState, w: usize, h: usize, background: [u8; 3]) -> Image {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../icons/tray-{}.png", state.name()));
    let decoder = png::Decoder::new(std::fs::File::open(&path).expect("icon file"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut rgba = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut rgba).expect("its pixels");
    assert_eq!(info.color_type, png::ColorType::Rgba, "{}", path.display());
    let (sw, sh) = (info.width as usize, info.height as usize);
    let mut rgb = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let (x0, x1) = (x * sw / w, ((x + 1) * sw).div_ceil(w));
            let (y0, y1) = (y * sh / h, ((y + 1) * sh).div_ceil(h));
            let mut sum = [0u64; 3];
            let mut n = 0u64;
            for sy in y0..y1 {
                for sx in x0..x1 {
                    let p = &rgba[(sy * sw + sx) * 4..][..4];
                    let a = u64::from(p[3]);
                    for c in 0..3 {
                        sum[c] += (u64::from(p[c]) * a + u64::from(background[c]) * (255 - a)) / 255;
                    }
                    n += 1;
                }
            }
            rgb.extend(sum.map(|s| (s / n) as u8));
        }
    }
    Image::from_rgb(w, h, rgb)
}

/// What keys choose `action` from the menu, as a user would: the status line and separators are
/// skipped by the keyboard, so `Down` moves through the enabled entries and submenus; `Right` opens a
/// submenu at its first item.
pub fn keys_for(menu: &Menu, action: &Action) -> Vec<&'static str> {
    fn path(items: &[Item], action: &Action) -> Option<Vec<usize>> {
        let focusable = items.iter().filter(|i| match i {
            Item::Entry { enabled, .. } => *enabled,
            Item::Submenu { .. } => true,
            Item::Separator => false,
        });
        for (n, item) in focusable.enumerate() {
            match item {
                Item::Entry { action: a, .. } if a == action => return Some(vec![n]),
                Item::Submenu { items, .. } => {
                    if let Some(mut rest) = path(items, action) {
                        rest.insert(0, n);
                        return Some(rest);
                    }
                }
                _ => {}
            }
        }
        None
    }
    let steps = path(&menu.items, action).unwrap_or_else(|| panic!("{action:?} is not in the menu"));
    let mut keys = Vec::new();
    for (depth, n) in steps.iter().enumerate() {
        if depth > 0 {
            keys.push("Right");
        }
        // At the top the menu opens with nothing selected; a submenu opens on its first item.
        let downs = if depth == 0 { n + 1 } else { *n };
        keys.extend(std::iter::repeat_n("Down", downs));
    }
    keys.push("Return");
    keys
}
