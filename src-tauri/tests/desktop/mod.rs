//! The real desktop pieces the tray tests run against: an X server (Xvfb, whose framebuffer is read
//! back for screenshots), a tray host and clicks on it (`x11`), a notification server on the D-Bus
//! session bus, and the app as a process.
#![allow(dead_code, reason = "each tray test binary uses its own part of these")]

pub mod desk;
pub mod x11;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};

/// An Xvfb server of this test's own, with its framebuffer in a file.
pub struct Xvfb {
    child: std::process::Child,
    pub display: String,
    fb: tempfile::TempDir,
}

impl Xvfb {
    /// Starts Xvfb on the first free display from :90; `None` if Xvfb is not installed.
    pub async fn start() -> Option<Self> {
        let fb = tempfile::tempdir().ok()?;
        for n in 90..200 {
            // A display whose lock names a running server is taken; a stale lock (its server killed)
            // is Xvfb's to take over, as every X server does.
            let holder = std::fs::read_to_string(format!("/tmp/.X{n}-lock")).ok();
            if holder.is_some_and(|pid| Path::new(&format!("/proc/{}", pid.trim())).exists()) {
                continue;
            }
            let child = std::process::Command::new("Xvfb")
                .arg(format!(":{n}"))
                .args(["-screen", "0", "1280x800x24", "-nolisten", "tcp", "-noreset", "-fbdir"])
                .arg(fb.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut child = child.ok()?;
            let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
            let lock = PathBuf::from(format!("/tmp/.X{n}-lock"));
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                // The display is ours only if the lock names our server: two tests starting at once
                // can both try the same display, and the loser's framebuffer file exists too.
                let ours = std::fs::read_to_string(&lock).is_ok_and(|pid| pid.trim() == child.id().to_string());
                if ours && socket.exists() && fb.path().join("Xvfb_screen0").exists() {
                    return Some(Self { child, display: format!(":{n}"), fb });
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break; // lost the race for this display: try the next
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = child.kill();
        }
        None
    }

    /// What the screen shows now.
    pub fn screen(&self) -> xwd::Image {
        xwd::read(&self.fb.path().join("Xvfb_screen0")).expect("the framebuffer is readable")
    }

    /// Waits until the screen shows a drawn page (a blank root window is one colour, a page of text
    /// and badges hundreds) and has stopped changing for a second, then writes it as a PNG; returns
    /// how many colours it has.
    pub async fn screenshot_when_drawn(&self, png: &Path, within: Duration) -> usize {
        let started = Instant::now();
        let mut last: Option<Vec<u8>> = None;
        loop {
            let shot = xwd::read(&self.fb.path().join("Xvfb_screen0"));
            let colours = shot.as_ref().map_or(0, xwd::Image::colours);
            let settled = shot.as_ref().is_some_and(|s| last.as_deref() == Some(s.pixels()));
            last = shot.as_ref().map(|s| s.pixels().to_vec());
            if (colours > 64 && settled) || started.elapsed() > within {
                let shot = shot.expect("the framebuffer is readable");
                shot.write_png(png);
                assert!(colours > 64, "the window never drew the dashboard ({colours} colours on screen)");
                return colours;
            }
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
    }
}

impl Drop for Xvfb {
    /// SIGTERM first, so the server removes its lock and socket (killed, it leaves them, and a
    /// machine that ran the tests many times had every display from :90 locked); SIGKILL if it has
    /// not ended in 10 s.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reading Xvfb's framebuffer file (X Window Dump format, version 7).
pub mod xwd {
    use std::path::Path;

    pub struct Image {
        width: usize,
        height: usize,
        rgb: Vec<u8>,
    }

    fn u32_at(b: &[u8], field: usize) -> Option<u32> {
        let at = field * 4;
        Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    /// Reads a 24/32-bit true-colour dump; `None` for anything else.
    pub fn read(path: &Path) -> Option<Image> {
        let b = std::fs::read(path).ok()?;
        let header = u32_at(&b, 0)? as usize;
        let (width, height) = (u32_at(&b, 4)? as usize, u32_at(&b, 5)? as usize);
        let lsb_first = u32_at(&b, 7)? == 0;
        let (bpp, line) = (u32_at(&b, 11)? as usize, u32_at(&b, 12)? as usize);
        let masks = [u32_at(&b, 14)?, u32_at(&b, 15)?, u32_at(&b, 16)?];
        let ncolours = u32_at(&b, 19)? as usize;
        if bpp != 32 {
            return None;
        }
        let data = b.get(header + ncolours * 12..)?;
        let mut rgb = Vec::with_capacity(width * height * 3);
        for y in 0..height {
            for x in 0..width {
                let px = data.get(y * line + x * 4..y * line + x * 4 + 4)?;
                let px: [u8; 4] = px.try_into().ok()?;
                let v = if lsb_first { u32::from_le_bytes(px) } else { u32::from_be_bytes(px) };
                for mask in masks {
                    rgb.push(((v & mask) >> mask.trailing_zeros()) as u8);
                }
            }
        }
        Some(Image { width, height, rgb })
    }

    impl Image {
        pub fn pixels(&self) -> &[u8] {
            &self.rgb
        }

        /// Distinct colours (capped at a few hundred: enough to tell a drawn page from a blank one).
        pub fn colours(&self) -> usize {
            let mut seen = std::collections::HashSet::new();
            for px in self.rgb.chunks(3).step_by(7) {
                seen.insert([px[0], px[1], px[2]]);
                if seen.len() > 500 {
                    break;
                }
            }
            seen.len()
        }

        pub fn from_rgb(width: usize, height: usize, rgb: Vec<u8>) -> Self {
            assert_eq!(rgb.len(), width * height * 3);
            Self { width, height, rgb }
        }

        pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
            let at = (y * self.width + x) * 3;
            [self.rgb[at], self.rgb[at + 1], self.rgb[at + 2]]
        }

        /// The part of the picture inside `r`.
        pub fn crop(&self, r: super::x11::Rect) -> Self {
            let mut rgb = Vec::with_capacity(r.w * r.h * 3);
            for y in r.y..r.y + r.h {
                rgb.extend_from_slice(&self.rgb[(y * self.width + r.x) * 3..(y * self.width + r.x + r.w) * 3]);
            }
            Self { width: r.w, height: r.h, rgb }
        }

        /// The sum of squared differences from a picture of the same size.
        pub fn distance(&self, other: &Self) -> u64 {
            assert_eq!((self.width, self.height), (other.width, other.height));
            self.rgb.iter().zip(&other.rgb).map(|(a, b)| u64::from(a.abs_diff(*b)).pow(2)).sum()
        }

        pub fn write_png(&self, path: &Path) {
            let file = std::fs::File::create(path).expect("screenshot file");
            let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), self.width as u32, self.height as u32);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            encoder.write_header().and_then(|mut w| w.write_image_data(&self.rgb)).expect("PNG written");
        }
    }
}

/// A desktop notification server (`org.freedesktop.Notifications`) on the session bus, recording what
/// it is asked to show.
pub struct Notifications {
    seen: Arc<Mutex<Vec<String>>>,
    _connection: zbus::Connection,
}

struct Server {
    seen: Arc<Mutex<Vec<String>>>,
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Server {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        _app_name: &str,
        _replaces_id: u32,
        _app_icon: &str,
        summary: &str,
        body: &str,
        _actions: Vec<&str>,
        _hints: HashMap<&str, zbus::zvariant::Value<'_>>,
        _expire_timeout: i32,
    ) -> u32 {
        let mut seen = self.seen.lock().unwrap();
        seen.push(format!("{summary}: {body}"));
        seen.len() as u32
    }

    fn get_capabilities(&self) -> Vec<&str> {
        vec!["body"]
    }

    fn get_server_information(&self) -> (&str, &str, &str, &str) {
        ("keymux-test", "keymux", "1", "1.2")
    }

    fn close_notification(&self, _id: u32) {}
}

impl Notifications {
    pub async fn serve() -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connection = zbus::connection::Builder::session()
            .and_then(|b| b.name("org.freedesktop.Notifications"))
            .and_then(|b| b.serve_at("/org/freedesktop/Notifications", Server { seen: seen.clone() }))
            .expect("a notification server on the session bus")
            .build()
            .await
            .expect("the session bus takes the notification server");
        Self { seen, _connection: connection }
    }

    pub fn received(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    pub async fn wait_for(&self, needle: &str, within: Duration) -> String {
        let started = Instant::now();
        loop {
            if let Some(found) = self.received().into_iter().find(|n| n.contains(needle)) {
                return found;
            }
            assert!(started.elapsed() < within, "no notification with {needle:?}; got {:?}", self.received());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Whether `name` is one of the variables that choose a locale (`LANG`, `LANGUAGE`, `LC_*`).
pub fn is_locale_var(name: &str) -> bool {
    name == "LANG" || name == "LANGUAGE" || name.starts_with("LC_")
}

/// The environment for the app: nothing of the test process's but PATH, the bus, the display, and
/// the locale (`LANG`, `LANGUAGE`, `LC_*`), which the app gets as a user's session would give it.
pub fn env(home: &Path, xvfb: &Xvfb, keys: &[(&str, &str)], token: &str, admin: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), home.display().to_string()),
        ("XDG_CONFIG_HOME".into(), home.join(".config").display().to_string()),
        ("XDG_DATA_HOME".into(), home.join(".local/share").display().to_string()),
        ("XDG_CACHE_HOME".into(), home.join(".cache").display().to_string()),
        ("DISPLAY".into(), xvfb.display.clone()),
        // Info, as users run it, and the control API's debug lines the test waits on.
        ("KEYMUX_LOG".into(), "info,keymux::api=debug".into()),
        ("KEYMUX_CLIENT_TOKEN".into(), token.into()),
        ("KEYMUX_ADMIN_TOKEN".into(), admin.into()),
        // No GPU under Xvfb: the app itself must notice and have WebKit draw in software.
    ];
    for var in ["DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"] {
        if let Ok(v) = std::env::var(var) {
            env.push((var.into(), v));
        }
    }
    env.extend(std::env::vars().filter(|(name, _)| is_locale_var(name)));
    env.extend(keys.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    env
}

/// `env` with the locale chosen by `locale` alone: the inherited locale variables are dropped.
pub fn with_locale(mut env: Vec<(String, String)>, locale: &[(&str, &str)]) -> Vec<(String, String)> {
    env.retain(|(name, _)| !is_locale_var(name));
    env.extend(locale.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    env
}

/// `env` with another value for `name`.
pub fn with_var(mut env: Vec<(String, String)>, name: &str, value: &str) -> Vec<(String, String)> {
    env.retain(|(n, _)| n != name);
    env.push((name.to_owned(), value.to_owned()));
    env
}

/// The locales this system has (`locale -a`), in its spelling (`en_US.utf8`).
pub fn installed_locales() -> Vec<String> {
    let out = std::process::Command::new("locale").arg("-a").output().expect("locale -a runs");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

/// Whether `locale` (`de_AT.UTF-8`) is among `installed` (`de_AT.utf8`): glibc spells the codeset in
/// lower case without its dash.
pub fn locale_installed(installed: &[String], locale: &str) -> bool {
    let norm = |l: &str| match l.split_once('.') {
        Some((name, codeset)) => format!("{name}.{}", codeset.to_ascii_lowercase().replace('-', "")),
        None => l.to_owned(),
    };
    installed.iter().any(|i| norm(i) == norm(locale))
}

/// A D-Bus session bus of a test's own: apps started on it do not hand over to (or take over from)
/// another test's app, which the single-instance plugin would do on a shared bus.
pub struct SessionBus {
    child: std::process::Child,
    pub address: String,
}

impl SessionBus {
    pub fn start() -> Self {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon starts (apt: dbus)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("dbus-daemon's address");
        assert!(!line.trim().is_empty(), "dbus-daemon printed no address");
        Self { child, address: line.trim().to_owned() }
    }
}

impl Drop for SessionBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tray app as a child process, with everything it printed.
/// What [`App::memory_kib`] read.
#[derive(Debug, Default)]
pub struct Memory {
    pub pss_kib: u64,
    pub rss_sum_kib: u64,
    pub each: Vec<String>,
}

pub struct App {
    child: tokio::process::Child,
    output: Arc<Mutex<String>>,
}

fn collect(stream: impl AsyncRead + Unpin + Send + 'static, sink: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut out = sink.lock().unwrap();
            out.push_str(&line);
            out.push('\n');
        }
    });
}

fn command(args: &[String], env: &[(String, String)]) -> tokio::process::Command {
    command_of(Path::new(env!("CARGO_BIN_EXE_keymux-tray")), args, env)
}

fn command_of(program: &Path, args: &[String], env: &[(String, String)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    cmd
}

impl App {
    pub async fn spawn(args: &[String], env: &[(String, String)]) -> Self {
        Self::started(command(args, env))
    }

    /// Another program than the one this build made: the installed app, say.
    pub async fn spawn_program(program: &Path, args: &[String], env: &[(String, String)]) -> Self {
        Self::started(command_of(program, args, env))
    }

    fn started(mut command: tokio::process::Command) -> Self {
        let mut child = command.spawn().expect("keymux-tray starts");
        let output = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().unwrap(), output.clone());
        collect(child.stderr.take().unwrap(), output.clone());
        Self { child, output }
    }

    /// Runs another launch to its end.
    pub async fn run_to_end(args: &[String], env: &[(String, String)], within: Duration) -> std::process::Output {
        let out = command(args, env).output();
        tokio::time::timeout(within, out).await.expect("the second launch ended").expect("it ran")
    }

    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    pub async fn wait_for_line(&mut self, needle: &str, within: Duration) -> String {
        self.wait_for_line_unless(needle, None, within).await
    }

    /// Waits for a line with `needle`, failing at once on a line with `failure` first.
    pub async fn wait_for_line_unless(&mut self, needle: &str, failure: Option<&str>, within: Duration) -> String {
        let started = Instant::now();
        loop {
            let out = self.output();
            if let Some(line) = out.lines().find(|l| l.contains(needle)) {
                return line.to_owned();
            }
            if let Some(line) = failure.and_then(|f| out.lines().find(|l| l.contains(f))) {
                panic!("{line}\n(before {needle:?}):\n{out}");
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("keymux-tray exited ({status}) before {needle:?}:\n{out}");
            }
            assert!(started.elapsed() < within, "no {needle:?} within {within:?}:\n{out}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The processes the app started, and theirs.
    pub fn descendants(&self) -> Vec<u32> {
        let parent_of = |pid: u32| -> Option<u32> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`: the name may hold spaces and parentheses, so read after the last `)`.
            stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
        };
        let Some(app) = self.child.id() else { return Vec::new() };
        let pids: Vec<u32> = std::fs::read_dir("/proc")
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        let from_app = |mut pid: u32| loop {
            match parent_of(pid) {
                Some(p) if p == app => return true,
                Some(p) if p > 1 => pid = p,
                _ => return false,
            }
        };
        pids.into_iter().filter(|pid| from_app(*pid)).collect()
    }

    /// The processes the app started, and theirs, named `name` (as `/proc/PID/comm` has it: its first
    /// 15 bytes).
    pub fn descendants_named(&self, name: &str) -> Vec<u32> {
        let named = |pid: &u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name);
        self.descendants().into_iter().filter(named).collect()
    }

    /// The memory the app and every process it started hold, in KiB: their proportional set sizes
    /// (each shared page counted once across them, split between its sharers, so the sum is what the
    /// group holds; a sum of resident sizes would count WebKit's libraries once per process), with
    /// each process's `name pid pss=KiB rss=KiB`, and the sum of resident sizes.
    pub fn memory_kib(&self) -> Memory {
        let read = |pid: u32| -> Option<(String, u64, u64)> {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim().to_owned();
            let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
            let field = |key: &str| -> Option<u64> {
                rollup.lines().find_map(|l| l.strip_prefix(key))?.trim().trim_end_matches("kB").trim().parse().ok()
            };
            Some((name, field("Pss:")?, field("Rss:")?))
        };
        let mut pids = self.descendants();
        pids.extend(self.child.id());
        let mut memory = Memory::default();
        for (pid, (name, pss, rss)) in pids.into_iter().filter_map(|pid| read(pid).map(|m| (pid, m))) {
            memory.pss_kib += pss;
            memory.rss_sum_kib += rss;
            memory.each.push(format!("{name} {pid} pss={pss} rss={rss}"));
        }
        memory
    }

    /// The gateway's base URL, from the app's first line.
    pub async fn base_url(&mut self, within: Duration) -> String {
        let line = self.wait_for_line("keymux listening on", within).await;
        line.split_whitespace().find(|w| w.starts_with("http://")).expect("a URL").to_owned()
    }

    /// Waits for the app to exit by itself (after the menu's Quit).
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.child.wait()).await.expect("exited in time").expect("waited")
    }

    /// Sends SIGTERM and waits for the exit.
    pub async fn terminate(&mut self, within: Duration) -> ExitStatus {
        let pid = self.child.id().expect("running");
        let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
        tokio::time::timeout(within, self.child.wait()).await.expect("exited in time").expect("waited")
    }
}
