//! The Debian package as a user installs it: `dpkg -i`, then the app started from its desktop entry's
//! `Exec` line under Xvfb with a real tray host (tint2), serving requests; "Start at login", chosen
//! from the tray menu, writes an autostart entry that launches the installed binary; `dpkg -r` takes
//! the app away and leaves the user's data (config, metrics, tray settings) where it was.
//!
//! It installs a package system-wide, so it runs only when asked: `scripts/test --full` (CI, as root)
//! builds the .deb with `scripts/package` and runs this test with `KEYMUX_DEB` naming it. The package
//! is removed again whatever happens.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::disallowed_methods, reason = "tests")]

mod desktop;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use desktop::x11::{self, TrayHost};
use desktop::{App, Xvfb};
use keymux::api::types::StatusBody;
use keymux::desktop::menu::{self, Action, MenuInput};
use keymux_sim::{Sim, SimConfig};

const TOKEN: &str = "km-package-test-token-0123456789abcdef";
const ADMIN: &str = "kma-package-test-admin-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(120);

/// A field of the package's control file.
fn control_field(deb: &Path, field: &str) -> String {
    let out = Command::new("dpkg-deb").arg("--field").arg(deb).arg(field).output().expect("dpkg-deb runs");
    assert!(out.status.success(), "dpkg-deb --field {field}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Removes the package when the test ends, passed or not, so the machine is left as it was.
struct Installed {
    name: String,
    removed: bool,
}

impl Installed {
    fn install(deb: &Path, name: &str) -> Self {
        let out = Command::new("dpkg").arg("-i").arg(deb).output().expect("dpkg runs");
        assert!(
            out.status.success(),
            "dpkg -i {} (the test installs system-wide: run it as root)\n{}{}",
            deb.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Self { name: name.to_owned(), removed: false }
    }

    /// The files the package put on the system.
    fn files(&self) -> Vec<PathBuf> {
        let out = Command::new("dpkg").arg("-L").arg(&self.name).output().expect("dpkg -L runs");
        String::from_utf8(out.stdout).unwrap().lines().map(PathBuf::from).collect()
    }

    fn remove(&mut self) -> bool {
        self.removed = Command::new("dpkg").arg("-r").arg(&self.name).status().is_ok_and(|s| s.success());
        self.removed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.remove();
        }
    }
}

/// The command of a desktop entry's `Exec` line: its words, field codes (`%U`, `%f`…) left out, the
/// program found on `PATH` as a launcher would.
fn exec_of(entry: &str) -> (PathBuf, Vec<String>) {
    let line = entry.lines().find_map(|l| l.strip_prefix("Exec=")).expect("the desktop entry has an Exec line");
    let mut words = line.split_whitespace().filter(|w| !w.starts_with('%')).map(str::to_owned);
    let program = words.next().expect("Exec names a program");
    let program = if program.starts_with('/') {
        PathBuf::from(program)
    } else {
        std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(|dir| Path::new(dir).join(&program))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{program} is not on PATH"))
    };
    (program, words.collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "installs a package system-wide: scripts/test --full runs it with KEYMUX_DEB set"]
async fn the_deb_installs_starts_from_its_desktop_entry_and_leaves_the_users_data_when_removed() {
    let deb = PathBuf::from(std::env::var("KEYMUX_DEB").expect("KEYMUX_DEB names the .deb (scripts/package)"));
    let name = control_field(&deb, "Package");
    let xvfb = Xvfb::start().await.expect("the package test needs Xvfb (scripts/test installs it)");
    assert!(std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(), "run it through scripts/test --full");
    let _host = TrayHost::start(&xvfb);
    let sim = Sim::start(SimConfig::new().org("org-a", &["sk-a1"])).await.unwrap();

    let mut installed = Installed::install(&deb, &name);
    let files = installed.files();
    let entry_file = files
        .iter()
        .find(|f| f.starts_with("/usr/share/applications") && f.extension().is_some_and(|x| x == "desktop"))
        .unwrap_or_else(|| panic!("the package has no desktop entry: {files:?}"));
    let entry = std::fs::read_to_string(entry_file).unwrap();
    let (program, args) = exec_of(&entry);
    assert!(files.contains(&program), "Exec runs the packaged binary {program:?}, one of {files:?}");
    let window = program.with_file_name("keymux-window");
    assert!(files.contains(&window), "the window's program is packaged beside the tray's: {files:?}");
    println!("installed {name}: {} runs {}", entry_file.display(), program.display());

    // The user's own settings, where the app looks for them: any free port, the simulator upstream.
    let home = tempfile::tempdir().unwrap();
    let config_dir = home.path().join(".config/keymux");
    std::fs::create_dir_all(&config_dir).unwrap();
    let config = config_dir.join("config.toml");
    let metrics = home.path().join(".local/share/keymux/metrics");
    let settings = format!(
        "listen = \"127.0.0.1:0\"\nupstream = \"{}\"\nmetrics_dir = \"{}\"\n",
        sim.base_url(),
        metrics.display()
    );
    std::fs::write(&config, &settings).unwrap();
    let env = desktop::env(home.path(), &xvfb, &[("KEYMUX_KEY_A1", "sk-a1")], TOKEN, ADMIN);

    let mut app = App::spawn_program(&program, &args, &env).await;
    let base = app.base_url(WAIT).await;
    let http = reqwest::Client::new();
    let body = serde_json::json!({"model": "gpt-5.5", "input": "from the installed app", "store": false});
    let answer = http.post(format!("{base}/responses")).bearer_auth(TOKEN).json(&body).send().await.unwrap();
    assert_eq!(answer.status(), 200, "the installed app serves");

    // Start at login, from the tray menu as a user chooses it.
    let api = format!("{}/keymux/api", base.trim_end_matches("/v1"));
    let status: StatusBody =
        http.get(format!("{api}/status")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let shown = menu::menu(&MenuInput { status: Some(&status), notifications: true, ..MenuInput::default() });
    let icon = x11::docked_icon(&xvfb.display, WAIT).await;
    let (x, y) = (icon.x + icon.w / 2, icon.y + icon.h / 2);
    x11::xdotool(&xvfb.display, &["mousemove", &x.to_string(), &y.to_string(), "click", "1"]);
    let open = x11::until("the menu opens", WAIT, || x11::popups(&xvfb.display).into_iter().next()).await;
    for key in x11::keys_for(&shown, &Action::ToggleAutostart) {
        x11::xdotool(&xvfb.display, &["key", key]);
    }
    x11::until("the menu closes", WAIT, || (!x11::viewable(&xvfb.display, &open.id)).then_some(())).await;
    let autostart = x11::until("an autostart entry is written", WAIT, || {
        let dir = home.path().join(".config/autostart");
        let file =
            std::fs::read_dir(dir).ok()?.flatten().find(|e| e.path().extension().is_some_and(|x| x == "desktop"))?;
        std::fs::read_to_string(file.path()).ok()
    })
    .await;
    let (starts, _) = exec_of(&autostart);
    assert_eq!(starts, program, "the autostart entry launches the installed binary:\n{autostart}");

    assert!(app.terminate(WAIT).await.success(), "{}", app.output());
    let kept_prefs = std::fs::read_to_string(config_dir.join("desktop.json")).unwrap_or_default();

    // Removed: the app and its desktop entry go; the user's data stays as it was.
    assert!(installed.remove(), "dpkg -r {name}");
    assert!(!program.exists() && !entry_file.exists(), "the package's files are gone");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), settings, "the config is the user's");
    assert!(std::fs::read_dir(&metrics).is_ok_and(|mut d| d.next().is_some()), "the metrics store stays");
    assert_eq!(std::fs::read_to_string(config_dir.join("desktop.json")).unwrap_or_default(), kept_prefs);
    for secret in ["sk-a1", TOKEN, ADMIN] {
        assert!(!app.output().contains(secret), "the app's output shows a secret");
    }
}
