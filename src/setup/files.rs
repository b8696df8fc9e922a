//! Reading and writing client files with care: a size cap, links followed, permissions kept, copies
//! that never replace a file.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::error::io;
use super::{SetupError, MAX_FILE_BYTES, PRIVATE};

/// The file's bytes (`None`: it does not exist), refused past `MAX_FILE_BYTES`.
pub(crate) fn read_limited(path: &Path) -> Result<Option<Vec<u8>>, SetupError> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(cannot_read(path)(source)),
    };
    let size = file.metadata().map_err(cannot_read(path))?.len();
    let too_large = |size| SetupError::TooLarge { path: path.to_owned(), size };
    if size > MAX_FILE_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(cannot_read(path))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

fn cannot_read(path: &Path) -> impl FnOnce(std::io::Error) -> SetupError + '_ {
    move |source| SetupError::CannotRead { path: path.to_owned(), source }
}

/// The file a path names, links followed (so a config kept in a dotfiles repository stays a link),
/// made absolute so records compare.
pub(crate) fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir).map_or(absolute.clone(), |dir| dir.join(name)),
        _ => absolute,
    }
}

/// The Unix permissions of a file (`None` elsewhere, or when it cannot be read).
pub(crate) fn mode_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path).ok().map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Keeps a backup (`bytes`, the file as it was) of the file `named` names, beside that name: when
/// `named` is a link (a config kept in a dotfiles repository), beside the link, not in the directory
/// the link points into, so a copy that may hold an API key stays out of that repository. Setup and
/// key import both keep their backups through here.
pub(crate) fn keep_backup(
    named: &Path,
    label: &str,
    bytes: &[u8],
    mode: Option<u32>,
    now: u64,
) -> Result<PathBuf, SetupError> {
    let beside = std::path::absolute(named).unwrap_or_else(|_| named.to_owned());
    keep_copy(&beside, label, bytes, mode, now)
}

/// Keeps `bytes` next to `path` as `<file>.<label>-<unix seconds>` with `mode`, never replacing a file.
pub(crate) fn keep_copy(
    path: &Path,
    label: &str,
    bytes: &[u8],
    mode: Option<u32>,
    now: u64,
) -> Result<PathBuf, SetupError> {
    use std::io::Write as _;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for n in 0..100u32 {
        let suffix = if n == 0 { String::new() } else { format!("-{n}") };
        let copy = path.with_file_name(format!("{name}.{label}-{now}{suffix}"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode.unwrap_or(PRIVATE));
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = match options.open(&copy) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(SetupError::Io { path: copy, source }),
        };
        #[cfg(unix)]
        if let Some(mode) = mode {
            file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(io(&copy))?;
        }
        file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io(&copy))?;
        return Ok(copy);
    }
    Err(SetupError::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "too many copies made in one second"),
    })
}
