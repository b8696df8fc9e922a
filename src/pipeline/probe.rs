//! Probing keys: `GET /models`, a free call that teaches the pool each key's organization (so pinned
//! sessions can use all of an organization's keys from the first request) and flags keys the provider
//! rejects before a client meets them; the models it lists are kept for the model catalog. A probe is a third transport through the same attempt step as
//! client requests, so it is judged and learned from exactly as they are.

use axum::http::HeaderMap;
use bytes::Bytes;

use super::attempt::attempt_key;
use super::{AttemptFor, Reply, Transport};
use crate::classify::Heard;
use crate::clock::Clock;
use crate::gateway::Gateway;
use crate::keys::{KeyId, KeyTest};
use crate::pool::{Begin, InFlight};
use crate::upstream::Upstream;

/// `GET /models` with the key.
struct Probe<'a> {
    gateway: &'a Gateway,
    upstream: &'a Upstream,
    clock: &'a Clock,
}

impl Transport for Probe<'_> {
    type Accepted = ();
    type Declined = ();

    /// A probe sends no body.
    fn rescue(&mut self, _body: Bytes) {}

    async fn attempt(&mut self, guard: &InFlight) -> Reply<(), ()> {
        let fresh = crate::refresh::fresh(self.gateway, guard.entry()).await;
        let entry = fresh.as_ref().unwrap_or(guard.entry());
        let path = entry.provider.get().probe_path();
        let sent = self.upstream.send(entry, http::Method::GET, path, HeaderMap::new(), Bytes::new()).await;
        match sent {
            Ok(response) => {
                let heard =
                    Heard::from_headers(response.status().as_u16(), response.headers(), self.clock, entry.provider);
                if response.status().is_success() {
                    let list = response.bytes_within(crate::pool::MAX_LIST_BYTES).await;
                    if let Some(models) = list.as_deref().and_then(crate::pool::listed_models) {
                        self.gateway.pool().learn_models(&entry.id, models);
                    }
                    Reply::Accepted(heard, ())
                } else {
                    Reply::Declined(heard.with_body(&response.bytes().await.unwrap_or_default()), ())
                }
            }
            Err(error) => Reply::Failed(error),
        }
    }
}

/// Probes every key at once.
pub async fn probe_keys(gw: &Gateway) {
    let probes = gw.pool().ids().into_iter().map(|key| probe(gw, key));
    futures::future::join_all(probes).await;
}

/// Probes one key (`GET /models`, judged by the one classifier, applied to the pool); `None` when it is
/// not in the pool.
pub async fn probe(gw: &Gateway, key: KeyId) -> Option<KeyTest> {
    let started = gw.clock().now();
    let guard = gw.pool().begin(&key, Begin::default(), started)?;
    let label = guard.entry().label.clone();
    let mut transport = Probe { gateway: gw, upstream: gw.upstream(), clock: gw.clock() };
    let (reply, verdict) = attempt_key(gw, &guard, &mut transport, AttemptFor::default()).await;
    drop(guard);
    let duration_ms = gw.clock().elapsed_ms(started);
    let heard = match reply {
        Reply::Accepted(heard, ()) | Reply::Declined(heard, ()) => heard,
        Reply::Failed(e) => {
            tracing::warn!(key = %key, label = %label, error = %e, "could not probe key");
            let message = format!("key '{label}' could not be tested: {e}");
            return Some(KeyTest { ok: false, status: None, org: None, message, duration_ms });
        }
    };
    tracing::info!(key = %key, label = %label, status = heard.status, org = heard.org.as_deref().unwrap_or("-"), "probed key");
    let ok = verdict.failure.is_none();
    let message = match ok {
        true => format!("the provider accepted key '{label}'"),
        false => format!("the provider answered {} to key '{label}'", heard.status),
    };
    Some(KeyTest { ok, status: Some(heard.status), org: heard.org, message, duration_ms })
}
