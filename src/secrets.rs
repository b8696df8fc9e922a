//! Where secrets live: the `SecretStore` trait, the OS keychain store and an in-memory store for tests
//! and headless (ephemeral) runs. The `Secret` newtype and masking are `keymux_core::secrets`,
//! re-exported here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use keymux_core::secrets::*;

/// Why a secret could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// No keychain service could be reached at all.
    #[error(
        "the OS keychain is not reachable ({detail}). On Linux, start a Secret Service provider \
         (for example gnome-keyring in a D-Bus session) and unlock it; for headless use run \
         `keymux serve --ephemeral` with KEYMUX_KEY_<LABEL>=sk-... and KEYMUX_CLIENT_TOKEN in the environment"
    )]
    Unavailable { detail: String },
    /// The keychain is there but refused access (locked collection, denied prompt).
    #[error("the OS keychain refused access ({detail}); unlock your keychain (login keyring) and try again")]
    Locked { detail: String },
    /// Anything else the keychain reported.
    #[error("the OS keychain failed: {detail}")]
    Other { detail: String },
}

/// Account names used in the store. One place, so nothing else spells them.
pub mod account {
    /// The per-install secret that keys every HMAC (markers, fingerprints, affinity keys).
    pub const INSTALL_SECRET: &str = "install-secret";

    /// The admin credential with which the CLI talks to a running gateway.
    pub const ADMIN_TOKEN: &str = "admin-token";

    /// The account holding an upstream API key (by the key's id).
    pub fn key(id: &str) -> String {
        format!("key:{id}")
    }

    /// The account holding a local client token.
    pub fn token(id: &str) -> String {
        format!("token:{id}")
    }

    /// The account holding the `user:password` of a pool's proxy (by the pool's name, lower-cased).
    pub fn proxy(pool: &str) -> String {
        format!("proxy:{}", pool.to_ascii_lowercase())
    }
}

/// A place to keep secrets. Implementations may block: call them from `spawn_blocking`.
pub trait SecretStore: Send + Sync + 'static {
    /// Reads a secret; `Ok(None)` when the account does not exist.
    fn get(&self, account: &str) -> Result<Option<Secret>, SecretsError>;
    /// Creates or replaces a secret.
    fn set(&self, account: &str, value: &Secret) -> Result<(), SecretsError>;
    /// Deletes a secret; deleting a missing account is not an error.
    fn delete(&self, account: &str) -> Result<(), SecretsError>;
    /// A short name for messages ("OS keychain", "memory").
    fn describe(&self) -> &'static str;
    /// Whether what it holds outlives the process (the keychain does; memory does not). A gateway
    /// whose secrets live in memory keeps its runtime changes in memory too: a config entry for a
    /// secret stored nowhere would outlive it.
    fn persistent(&self) -> bool {
        true
    }
}

/// The OS keychain: macOS Keychain, Windows Credential Manager, Secret Service on Linux.
pub struct KeychainStore {
    service: String,
}

impl KeychainStore {
    /// A store whose entries all live under `service`.
    pub fn new(service: impl Into<String>) -> Self {
        Self { service: service.into() }
    }

    fn entry(&self, account: &str) -> Result<keyring::Entry, SecretsError> {
        keyring::Entry::new(&self.service, account).map_err(classify)
    }
}

fn classify(err: keyring::Error) -> SecretsError {
    use keyring::Error as E;
    let detail = match &err {
        // The platform error carries the backend's text; keep it short and secret-free (it never
        // contains the value, only the failure).
        E::PlatformFailure(inner) => inner.to_string(),
        E::NoStorageAccess(inner) => inner.to_string(),
        other => other.to_string(),
    };
    let lower = detail.to_ascii_lowercase();
    match err {
        E::NoStorageAccess(_) if lower.contains("locked") => SecretsError::Locked { detail },
        E::PlatformFailure(_) if lower.contains("locked") => SecretsError::Locked { detail },
        E::NoStorageAccess(_) | E::PlatformFailure(_) => SecretsError::Unavailable { detail },
        _ => SecretsError::Other { detail },
    }
}

/// Whether a keychain call failed because the service went away while it was answering (on Linux,
/// the Secret Service's daemon ended mid-call: D-Bus says `NoReply`). The session bus starts the
/// service again for the next caller, so the call is worth making once more.
fn service_went_away(err: &keyring::Error) -> bool {
    match err {
        keyring::Error::PlatformFailure(inner) | keyring::Error::NoStorageAccess(inner) => {
            inner.to_string().contains("org.freedesktop.DBus.Error.NoReply")
        }
        _ => false,
    }
}

/// Runs a keychain call, and once more if the service went away while answering it. Every call
/// made through it is idempotent: a read, writing the same value, deleting (an absent entry is
/// already deleted).
fn once_more_if_restarted<T>(call: impl Fn() -> Result<T, keyring::Error>) -> Result<T, keyring::Error> {
    match call() {
        Err(err) if service_went_away(&err) => {
            tracing::warn!("the keychain's service went away during a call; asking it again");
            call()
        }
        done => done,
    }
}

impl SecretStore for KeychainStore {
    fn get(&self, account: &str) -> Result<Option<Secret>, SecretsError> {
        let entry = self.entry(account)?;
        match once_more_if_restarted(|| entry.get_password()) {
            Ok(value) => Ok(Some(Secret::new(value))),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(err) => Err(classify(err)),
        }
    }

    fn set(&self, account: &str, value: &Secret) -> Result<(), SecretsError> {
        let entry = self.entry(account)?;
        once_more_if_restarted(|| entry.set_password(value.expose())).map_err(classify)
    }

    fn delete(&self, account: &str) -> Result<(), SecretsError> {
        let entry = self.entry(account)?;
        match once_more_if_restarted(|| entry.delete_credential()) {
            Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
            Err(err) => Err(classify(err)),
        }
    }

    fn describe(&self) -> &'static str {
        "OS keychain"
    }
}

/// Secrets held in process memory only: never written anywhere, gone when the process ends.
#[derive(Default)]
pub struct MemoryStore {
    // Bounded by what the user configures (keys, tokens): it never grows with traffic.
    entries: Mutex<HashMap<String, Secret>>,
}

impl SecretStore for MemoryStore {
    fn get(&self, account: &str) -> Result<Option<Secret>, SecretsError> {
        Ok(lock(&self.entries).get(account).cloned())
    }

    fn set(&self, account: &str, value: &Secret) -> Result<(), SecretsError> {
        lock(&self.entries).insert(account.to_owned(), value.clone());
        Ok(())
    }

    fn delete(&self, account: &str) -> Result<(), SecretsError> {
        lock(&self.entries).remove(account);
        Ok(())
    }

    fn describe(&self) -> &'static str {
        "memory"
    }

    fn persistent(&self) -> bool {
        false
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned map of secrets is still a valid map: no invariant spans the panic.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs a blocking store call off the async runtime.
pub async fn blocking<T, F>(store: Arc<dyn SecretStore>, f: F) -> Result<T, SecretsError>
where
    T: Send + 'static,
    F: FnOnce(&dyn SecretStore) -> Result<T, SecretsError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .unwrap_or_else(|join| Err(SecretsError::Other { detail: format!("keychain call did not finish: {join}") }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_the_service_left_unanswered_is_made_once_more_and_no_other_failure_is() {
        use std::cell::Cell;
        let failure = |text: &str| keyring::Error::PlatformFailure(text.to_owned().into());
        let went_away =
            "org.freedesktop.DBus.Error.NoReply: Message recipient disconnected from message bus without replying";
        let calls = Cell::new(0);
        let got = once_more_if_restarted(|| {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                Err(failure(went_away))
            } else {
                Ok("value")
            }
        });
        assert_eq!(got.ok(), Some("value"));
        assert_eq!(calls.get(), 2, "asked again once");

        calls.set(0);
        let got: Result<(), _> = once_more_if_restarted(|| {
            calls.set(calls.get() + 1);
            Err(failure(went_away))
        });
        assert!(got.is_err() && calls.get() == 2, "asked once more, not in a loop");

        calls.set(0);
        let got: Result<(), _> = once_more_if_restarted(|| {
            calls.set(calls.get() + 1);
            Err(failure("Object does not exist at path: the collection is locked"))
        });
        assert!(got.is_err() && calls.get() == 1, "a locked keychain is not asked again");
        calls.set(0);
        let got: Result<(), _> = once_more_if_restarted(|| {
            calls.set(calls.get() + 1);
            Err(keyring::Error::NoEntry)
        });
        assert!(matches!(got, Err(keyring::Error::NoEntry)) && calls.get() == 1);
    }

    #[test]
    fn memory_store_round_trips() {
        let store = MemoryStore::default();
        assert!(store.get("a").expect("get").is_none());
        store.set("a", &Secret::new("v")).expect("set");
        assert_eq!(store.get("a").expect("get"), Some(Secret::new("v")));
        store.delete("a").expect("delete");
        store.delete("a").expect("delete twice is fine");
        assert!(store.get("a").expect("get").is_none());
    }
}
