//! The registry of open WebSocket connections, through which tests count them and drop them
//! abruptly.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::util::lock;

/// Open connections by id.
#[derive(Debug, Default)]
pub(crate) struct WsRegistry {
    next: AtomicU64,
    /// Bound: one entry per open connection (each holds a socket, so the OS bounds them).
    open: Mutex<HashMap<u64, (String, Arc<Notify>)>>,
}

impl WsRegistry {
    /// Adds a connection of `key`; returns its id and the signal that kills it.
    pub(crate) fn register(&self, key: &str) -> (u64, Arc<Notify>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let kill = Arc::new(Notify::new());
        lock(&self.open).insert(id, (key.to_owned(), kill.clone()));
        (id, kill)
    }

    pub(crate) fn deregister(&self, id: u64) {
        lock(&self.open).remove(&id);
    }

    /// Drops every open connection of `key` without a close frame.
    pub(crate) fn kill(&self, key: &str) -> usize {
        let mut open = lock(&self.open);
        let ids: Vec<u64> = open.iter().filter(|(_, (k, _))| k == key).map(|(id, _)| *id).collect();
        for id in &ids {
            if let Some((_, kill)) = open.remove(id) {
                kill.notify_one();
            }
        }
        ids.len()
    }

    pub(crate) fn kill_all(&self) -> usize {
        let drained: Vec<_> = lock(&self.open).drain().collect();
        for (_, (_, kill)) in &drained {
            kill.notify_one();
        }
        drained.len()
    }

    pub(crate) fn count(&self) -> usize {
        lock(&self.open).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_only_the_keys_connections() {
        let registry = WsRegistry::default();
        let (a1, _) = registry.register("k1");
        registry.register("k1");
        registry.register("k2");
        assert_eq!(registry.count(), 3);
        registry.deregister(a1);
        assert_eq!(registry.kill("k1"), 1);
        assert_eq!(registry.count(), 1);
        assert_eq!(registry.kill_all(), 1);
        assert_eq!(registry.count(), 0);
    }
}
