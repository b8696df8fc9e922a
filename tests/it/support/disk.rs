//! A small disk of the test's own, to fail the metrics store; a process's memory; every file a run left.

use std::path::{Path, PathBuf};

/// A small tmpfs of our own (root only: CI runs as root). Unmounted when dropped.
pub struct SmallDisk {
    pub dir: PathBuf,
}

impl SmallDisk {
    pub fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap().keep();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self { dir })
    }

    pub fn remount(&self, mode: &str) {
        assert!(self.try_remount(mode), "remount {mode}");
    }

    fn try_remount(&self, mode: &str) -> bool {
        let mut mount = std::process::Command::new("mount");
        mount.args(["-o", &format!("remount,{mode}")]).arg(&self.dir).stderr(std::process::Stdio::null());
        mount.status().is_ok_and(|s| s.success())
    }

    /// Remounts read-only once no file on the disk is open for writing: the kernel refuses it until
    /// then, and a metrics store that has just failed lets its file go on one of sled's own threads a
    /// moment later (and a periodic flush may be trying the store meanwhile).
    pub async fn remount_read_only(&self) {
        super::until("the disk remounted read-only", || async { self.try_remount("ro") }, |done| *done).await;
    }

    /// Fills the disk with one file (whatever fits).
    pub fn fill(&self) {
        use std::io::Write as _;
        let mut f = std::fs::File::create(self.dir.join("filler")).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }

    pub fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The resident memory of a process, in KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or(0)
}

/// Every file under `dir`, as bytes (sled's files included).
pub fn every_file(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            every_file(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
}

pub fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}
