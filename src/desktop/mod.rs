//! What the tray app shows, computed from the gateway's state: the menu, the icon and the desktop
//! notifications, as pure functions. The tray shell (`src-tauri/`) only renders them and calls the
//! gateway; the state stays here, in the library, where it is tested without a display.
//!
//! * `locale`: the languages the window announces to the dashboard, as BCP 47 tags from the user's
//!   locale (WebKitGTK's own reading turns `C.UTF-8` into `C`, which blanks the window).
//! * `menu`: the tray menu, its status line and icon, and the in-place changes between two menus.
//! * `notices`: which events become notifications, worded for a person, switchable and throttled.
//! * `settings`: the tray's own preferences (which notifications), in a small JSON file.
//! * `window`: what the dashboard window shows when it cannot show the dashboard (the page did not
//!   log in with the window's link in time, a load failed, the web process ended), the wait for it,
//!   and the commands the tray sends the window's own process (`window::Command`).
//! * `words`: how durations are put in words, for the menu and the notifications alike.

pub mod locale;
pub mod menu;
pub mod notices;
pub mod settings;
pub mod window;
pub mod words;

#[cfg(test)]
mod tests;
