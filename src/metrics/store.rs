//! The sled store behind the metrics, and the one place its failures are handled.
//!
//! A flush writes every pending row and a generation number in one atomic batch, then syncs. When that
//! fails (disk full, read-only, an I/O error), Keymux cannot tell whether the batch reached the disk,
//! so the rows are held "in doubt" with their generation, the database handle is dropped, and the store
//! is reopened at the next flush: if the stored generation says the batch landed, the rows are dropped;
//! otherwise they go back to pending. So no row is ever counted twice, and nothing is lost while the
//! process lives. sled keeps failing after an I/O error until it is reopened, which is why recovery
//! reopens rather than retries.
//!
//! A store that cannot be opened because it is corrupt is moved aside (never deleted) and a fresh one
//! started; one that cannot be opened for any other reason is retried at each flush.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::counters::Counters;

/// (hour since the epoch, key fingerprint, operation).
pub type RowKey = (u32, String, String);
/// Rows by key.
pub type Rows = BTreeMap<RowKey, Counters>;

/// Where the last written generation is kept.
const GENERATION: &[u8] = b"meta|generation";
/// Rows are `h|HOUR|FINGERPRINT|OPERATION`.
const ROW_PREFIX: &str = "h|";

/// The store, and what it knows about its last writes.
pub struct Store {
    path: PathBuf,
    db: Option<sled::Db>,
    /// The generation of the last batch known to be on disk.
    generation: u64,
    /// A batch whose fate is unknown until the store answers again.
    in_doubt: Option<(u64, Rows)>,
    /// While the handle is closed after a failure: the stored rows as the failing handle still read them
    /// (sled serves reads from memory after a write error), so history stays visible. Empty when open.
    last_known: Rows,
    /// The generation the failing handle had applied (in memory) when it was closed.
    last_known_generation: u64,
}

/// What opening found.
pub struct Opened {
    /// The store (its database may still be closed if it could not be opened).
    pub store: Store,
    /// Why it could not be opened, if it could not.
    pub error: Option<String>,
    /// Something the user should know (a corrupt store moved aside).
    pub notice: Option<String>,
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Opened {
        let mut store = Store {
            path: dir.to_owned(),
            db: None,
            generation: 0,
            in_doubt: None,
            last_known: Rows::new(),
            last_known_generation: 0,
        };
        let mut notice = None;
        let error = match store.reopen() {
            Ok(()) => None,
            Err(Failure::Corrupt(e)) => match store.move_aside(&e) {
                Ok(message) => {
                    notice = Some(message);
                    store.reopen().err().map(|f| f.message(dir))
                }
                Err(message) => Some(message),
            },
            Err(failure) => Some(failure.message(dir)),
        };
        Opened { store, error, notice }
    }

    fn reopen(&mut self) -> Result<(), Failure> {
        std::fs::create_dir_all(&self.path).map_err(|e| Failure::Io(e.to_string()))?;
        let db = open_when_free(&self.path).map_err(Failure::from)?;
        migrate_day_rows(&db).map_err(Failure::from)?;
        self.generation = read_generation(&db).map_err(Failure::from)?;
        self.db = Some(db);
        self.last_known.clear();
        Ok(())
    }

    /// Drops a failing handle (sled must be reopened after an I/O error), keeping what it still reads.
    fn close(&mut self, oldest_hour: u32) {
        if let Some(db) = self.db.take() {
            self.last_known = read_rows(&db, oldest_hour);
            self.last_known_generation = read_generation(&db).unwrap_or(self.generation);
        }
    }

    /// Renames a corrupt store to `<dir>.corrupt-<unix seconds>`, so it can be inspected or restored.
    fn move_aside(&self, detail: &str) -> Result<String, String> {
        let stamp = crate::clock::Clock::system().unix_ms() / 1000;
        let name = format!("{}.corrupt-{stamp}", self.path.file_name().and_then(|n| n.to_str()).unwrap_or("metrics"));
        let aside = self.path.with_file_name(name);
        std::fs::rename(&self.path, &aside).map_err(|e| {
            format!("the metrics store {} is corrupt ({detail}) and could not be moved aside: {e}", self.path.display())
        })?;
        Ok(format!(
            "the metrics store {} was corrupt ({detail}); it was moved to {} and a new one started",
            self.path.display(),
            aside.display()
        ))
    }

    /// The database, reopened if an earlier failure closed it; rows of a batch in doubt that did not
    /// land come back to be written again.
    fn ready(&mut self, rows: &mut Rows) -> Result<(), String> {
        if self.db.is_none() {
            self.reopen().map_err(|f| f.message(&self.path))?;
        }
        if let Some((generation, doubtful)) = self.in_doubt.take() {
            if self.generation < generation {
                for (key, counters) in doubtful {
                    rows.entry(key).or_default().add(&counters);
                }
            }
        }
        Ok(())
    }

    /// Writes `rows` (adding them to what is stored), then deletes rows older than `oldest_hour`. On
    /// failure, the rows that certainly did not reach the store come back, to stay pending.
    pub fn write(&mut self, mut rows: Rows, oldest_hour: u32) -> Result<(), (String, Rows)> {
        if let Err(e) = self.ready(&mut rows) {
            return Err((e, rows));
        }
        let Some(db) = &self.db else {
            return Err(("the metrics store is closed".into(), rows));
        };
        let generation = self.generation + 1;
        let batch = match batch_of(db, &rows, generation) {
            Ok(batch) => batch,
            Err(e) => {
                self.close(oldest_hour);
                return Err((format!("metrics could not be read back ({e})"), rows));
            }
        };
        if let Err(e) = db.apply_batch(batch).and_then(|()| db.flush().map(|_| ())) {
            // Whether it reached the disk is unknown until the store answers again.
            self.in_doubt = Some((generation, rows));
            self.close(oldest_hour);
            return Err((format!("metrics could not be written ({e})"), Rows::new()));
        }
        self.generation = generation;
        prune(db, oldest_hour).map_err(|e| (format!("old metrics could not be deleted ({e})"), Rows::new()))
    }

    /// Every stored row from `since_hour` on, with a batch in doubt (it is either on disk already or
    /// will be written: either way it counts once).
    pub fn read(&self, since_hour: u32) -> Rows {
        let mut rows = match &self.db {
            Some(db) => read_rows(db, since_hour),
            None => self
                .last_known
                .range((since_hour, String::new(), String::new())..)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        // A batch in doubt counts once: it is in `last_known` if the failing handle had applied it.
        let unseen = self
            .in_doubt
            .as_ref()
            .filter(|(generation, _)| self.db.is_some() || self.last_known_generation < *generation);
        if let Some((_, doubtful)) = unseen {
            for (key, counters) in doubtful.iter().filter(|(k, _)| k.0 >= since_hour) {
                rows.entry(key.clone()).or_default().add(counters);
            }
        }
        rows
    }

    /// Whether there is nothing to do without new rows: open, and no batch in doubt.
    pub fn is_settled(&self) -> bool {
        self.db.is_some() && self.in_doubt.is_none()
    }

    #[cfg(test)]
    pub fn generation_for_tests(&self) -> u64 {
        self.generation
    }

    #[cfg(test)]
    pub fn set_in_doubt_for_tests(&mut self, generation: u64, rows: Rows) {
        self.in_doubt = Some((generation, rows));
    }
}

/// Every stored row from `since_hour` on.
fn read_rows(db: &sled::Db, since_hour: u32) -> Rows {
    let mut rows = Rows::new();
    for (key, value) in db.range(row_key(since_hour, "", "")..).flatten() {
        let (Some(key), Ok(counters)) = (parse_key(&key), serde_json::from_slice::<Counters>(&value)) else {
            continue;
        };
        rows.entry(key).or_default().add(&counters.upgrade());
    }
    rows
}

/// The batch that adds `rows` to what is stored and records `generation`.
fn batch_of(db: &sled::Db, rows: &Rows, generation: u64) -> sled::Result<sled::Batch> {
    let mut batch = sled::Batch::default();
    for ((hour, fp, op), counters) in rows {
        let key = row_key(*hour, fp, op);
        let mut total = match db.get(&key)? {
            Some(bytes) => serde_json::from_slice::<Counters>(&bytes).unwrap_or_default().upgrade(),
            None => Counters::default(),
        };
        total.add(counters);
        batch.insert(key, serde_json::to_vec(&total).unwrap_or_default());
    }
    batch.insert(GENERATION, &generation.to_be_bytes());
    Ok(batch)
}

fn prune(db: &sled::Db, oldest_hour: u32) -> sled::Result<()> {
    for entry in db.range(row_key(0, "", "")..row_key(oldest_hour, "", "")) {
        let (key, _) = entry?;
        db.remove(key)?;
    }
    Ok(())
}

fn read_generation(db: &sled::Db) -> sled::Result<u64> {
    Ok(db.get(GENERATION)?.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok()).map_or(0, u64::from_be_bytes))
}

/// Rows written by an earlier version, one per UTC day (`DAY|FINGERPRINT|OPERATION`), become rows of
/// that day's first hour.
fn migrate_day_rows(db: &sled::Db) -> sled::Result<()> {
    let mut batch = sled::Batch::default();
    let mut any = false;
    for entry in db.range(b"0".as_slice()..b"9|".as_slice()) {
        let (key, value) = entry?;
        let text = String::from_utf8_lossy(&key).into_owned();
        let mut parts = text.splitn(3, '|');
        let (Some(day), Some(fp), Some(op)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Ok(day) = day.parse::<u32>() else { continue };
        let counters = serde_json::from_slice::<Counters>(&value).unwrap_or_default().upgrade();
        batch.insert(row_key(day.saturating_mul(24), fp, op), serde_json::to_vec(&counters).unwrap_or_default());
        batch.remove(key);
        any = true;
    }
    if any {
        db.apply_batch(batch)?;
    }
    Ok(())
}

fn row_key(hour: u32, fp: &str, op: &str) -> Vec<u8> {
    if fp.is_empty() && op.is_empty() {
        return format!("{ROW_PREFIX}{hour:010}|").into_bytes();
    }
    format!("{ROW_PREFIX}{hour:010}|{fp}|{op}").into_bytes()
}

fn parse_key(key: &[u8]) -> Option<RowKey> {
    let text = std::str::from_utf8(key).ok()?.strip_prefix(ROW_PREFIX)?;
    let mut parts = text.splitn(3, '|');
    Some((parts.next()?.parse().ok()?, parts.next()?.to_owned(), parts.next()?.to_owned()))
}

/// Why the store could not be opened.
enum Failure {
    Corrupt(String),
    Io(String),
}

impl From<sled::Error> for Failure {
    fn from(e: sled::Error) -> Self {
        match e {
            // Unreadable files, or files of a format this sled cannot read: either way not a store to
            // write into, and not one to delete.
            sled::Error::Corruption { .. } | sled::Error::Unsupported(_) => Self::Corrupt(e.to_string()),
            other => Self::Io(other.to_string()),
        }
    }
}

impl Failure {
    fn message(&self, dir: &Path) -> String {
        let (Self::Corrupt(e) | Self::Io(e)) = self;
        format!("the metrics store {} could not be opened ({e})", dir.display())
    }
}

/// Opens the store, waiting up to two seconds for the directory's lock: a handle just closed is let go
/// on one of sled's own threads a moment later (this process reopening its store, or a Keymux that is
/// exiting), and opening before that fails. Another Keymux that keeps running holds the lock longer,
/// and that is reported as usual.
fn open_when_free(path: &Path) -> sled::Result<sled::Db> {
    let locked =
        |e: &sled::Error| matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"));
    for _ in 0..400 {
        match sled::open(path) {
            Err(e) if locked(&e) => std::thread::sleep(std::time::Duration::from_millis(5)),
            other => return other,
        }
    }
    sled::open(path)
}
