//! What the tray app keeps (its preferences, the notifier, the runtime it started, why the gateway is
//! down if it is, the window's process). The gateway's own state stays in the gateway; the shell, the
//! menu and the window all read this.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use keymux::desktop::notices::Notifier;
use keymux::desktop::settings::DesktopSettings;
use keymux::gateway::Gateway;
use keymux::Runtime;

use crate::args::Args;
use crate::window_process::WindowProcess;

/// How every part of the tray reaches the app: its state, the async runtime, and the main thread (GTK's,
/// where the tray, its menu and dialogs live).
#[derive(Clone)]
pub struct App {
    pub shell: Arc<Shell>,
    runtime: tokio::runtime::Handle,
}

impl App {
    pub fn new(shell: Shell, runtime: tokio::runtime::Handle) -> Self {
        Self { shell: Arc::new(shell), runtime }
    }

    /// Runs `task` on the async runtime.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(task);
    }

    /// Runs `work` on the main thread: at once when called there, else queued to its loop.
    pub fn on_main(&self, work: impl FnOnce() + Send + 'static) {
        gtk::glib::MainContext::default().invoke(work);
    }
}

/// Everything the shell keeps; the gateway's own state stays in the gateway.
pub struct Shell {
    pub args: Args,
    pub(crate) gateway: Mutex<Option<Arc<Gateway>>>,
    pub(crate) runtime: tokio::sync::Mutex<Option<Runtime>>,
    pub(crate) problem: Mutex<Option<String>>,
    pub settings: Mutex<DesktopSettings>,
    settings_path: Option<PathBuf>,
    pub(crate) notifier: Mutex<Notifier>,
    pub autostart: AtomicBool,
    pub(crate) quitting: AtomicBool,
    /// The window's process while the window is open.
    pub(crate) window: Mutex<Option<WindowProcess>>,
}

/// A lock that survives a panic elsewhere (the values stay usable).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shell {
    pub(crate) fn new(args: Args) -> Self {
        let settings_path = DesktopSettings::default_path();
        let settings = match &settings_path {
            Some(path) => {
                let (settings, problem) = DesktopSettings::load(path);
                if let Some(problem) = problem {
                    tracing::warn!("{problem}");
                }
                settings
            }
            None => DesktopSettings::default(),
        };
        let mut notifier = Notifier::new();
        for kind in &settings.notices_off {
            notifier.set(*kind, false);
        }
        Self {
            args,
            gateway: Mutex::new(None),
            runtime: tokio::sync::Mutex::new(None),
            problem: Mutex::new(None),
            settings: Mutex::new(settings),
            settings_path,
            notifier: Mutex::new(notifier),
            autostart: AtomicBool::new(false),
            quitting: AtomicBool::new(false),
            window: Mutex::new(None),
        }
    }

    /// The running gateway, if it started.
    pub fn gateway(&self) -> Option<Arc<Gateway>> {
        lock(&self.gateway).clone()
    }

    /// Why the gateway is not running, if it is not.
    pub fn problem(&self) -> Option<String> {
        lock(&self.problem).clone()
    }

    /// Changes the preferences, keeps the notifier in step and saves them.
    pub fn change_settings(&self, change: impl FnOnce(&mut DesktopSettings)) {
        let mut settings = lock(&self.settings);
        change(&mut settings);
        let mut notifier = lock(&self.notifier);
        for kind in keymux::desktop::notices::NoticeKind::ALL {
            notifier.set(kind, !settings.notices_off.contains(&kind));
        }
        if let Some(path) = &self.settings_path {
            if let Err(e) = settings.save(path) {
                tracing::warn!("the tray settings could not be saved: {e}");
            }
        }
    }
}
