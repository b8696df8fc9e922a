//! Where a running gateway says where it listens, so the CLI finds it even on a port chosen at start
//! (`--listen 127.0.0.1:0`). One small file per config file, in the user's runtime directory, holding
//! the address and the process id: nothing secret. The CLI still makes the gateway prove who it is
//! before it sends any credential (`remote`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What the file says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    /// The gateway's process.
    pub pid: u32,
}

/// The user's directory for what lasts no longer than a session: the runtime directory, or the cache
/// directory where there is none, as on macOS. The run file and the login pages (`login_page`) are kept
/// under its `keymux/`.
pub fn runtime_base() -> Option<PathBuf> {
    dirs::runtime_dir().or_else(dirs::cache_dir)
}

/// The file for the gateway of `config`, under [`runtime_base`].
pub fn path_for(config: &Path) -> Option<PathBuf> {
    Some(path_in(&runtime_base()?, config))
}

/// The file for the gateway of `config`, under the runtime directory `base`.
pub fn path_in(base: &Path, config: &Path) -> PathBuf {
    let canonical = config.canonicalize().unwrap_or_else(|_| config.to_owned());
    let digest = Sha256::digest(canonical.to_string_lossy().as_bytes());
    base.join("keymux").join(format!("gateway-{}.json", hex::encode(&digest[..6])))
}

/// Writes the file (readable by the user only). A failure costs only discovery, so it is reported, not
/// fatal.
pub fn write(config: &Path, addr: SocketAddr) -> Result<PathBuf, String> {
    let path = path_for(config).ok_or("no runtime directory")?;
    let running = Running { addr, pid: std::process::id() };
    let text = serde_json::to_vec(&running).map_err(|e| e.to_string())?;
    crate::config_file::write_atomically_with_mode(&path, &text, Some(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Reads the file, if a gateway wrote one.
pub fn read(config: &Path) -> Option<Running> {
    let text = std::fs::read(path_for(config)?).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Removes the file this process wrote (another gateway may have taken over since).
pub fn remove(config: &Path) {
    if let (Some(path), Some(running)) = (path_for(config), read(config)) {
        if running.pid == std::process::id() {
            let _ = std::fs::remove_file(path);
        }
    }
}
