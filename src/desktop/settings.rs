//! The tray app's own preferences (notifications), kept in a small JSON file beside the config. Start
//! at login is not kept here: the operating system's own autostart entry is the truth for that.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::notices::NoticeKind;

/// What the user chose in the tray menu.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DesktopSettings {
    /// Desktop notifications at all.
    pub notifications: bool,
    /// The kinds switched off.
    pub notices_off: Vec<NoticeKind>,
}

impl Default for DesktopSettings {
    fn default() -> Self {
        Self { notifications: true, notices_off: Vec::new() }
    }
}

impl DesktopSettings {
    /// Where they live: `desktop.json` in Keymux's config directory.
    pub fn default_path() -> Option<PathBuf> {
        dirs::config_dir().map(|d| d.join("keymux").join("desktop.json"))
    }

    /// Reads them; a missing or unreadable file gives the defaults (and says why, for the log).
    pub fn load(path: &Path) -> (Self, Option<String>) {
        match std::fs::read(path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(settings) => (settings, None),
                Err(e) => (Self::default(), Some(format!("{} is not valid ({e}); using the defaults", path.display()))),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Self::default(), None),
            Err(e) => {
                (Self::default(), Some(format!("{} could not be read ({e}); using the defaults", path.display())))
            }
        }
    }

    /// Writes them atomically.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        crate::config_file::write_atomically(path, &text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Switches one kind on or off.
    pub fn set_notice(&mut self, kind: NoticeKind, on: bool) {
        self.notices_off.retain(|k| *k != kind);
        if !on {
            self.notices_off.push(kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_bad_files_fall_back_to_defaults() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("keymux").join("desktop.json");
        assert_eq!(DesktopSettings::load(&path), (DesktopSettings::default(), None));
        let mut s = DesktopSettings::default();
        s.set_notice(NoticeKind::SessionLost, false);
        s.notifications = false;
        s.save(&path).expect("saved");
        assert_eq!(DesktopSettings::load(&path).0, s);
        std::fs::write(&path, b"{not json").expect("write");
        let (loaded, why) = DesktopSettings::load(&path);
        assert_eq!(loaded, DesktopSettings::default());
        assert!(why.expect("a reason").contains("not valid"));
    }
}
