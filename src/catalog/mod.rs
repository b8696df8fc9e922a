//! The model catalog Codex loads from a provider's `model_catalog_url` (`GET /v1/keymux/model-catalog`,
//! with the client token like every `/v1` call): the models the caller's pool can reach, as Codex
//! describes a model (`codex`), with the tiers the pool's policies allow.
//!
//! Where the models come from: each key's provider lists them on `GET /models`, the free call a key
//! is probed with (`pipeline::probe`: when Keymux starts, when a key is added, replaced or tested); the
//! list is kept per key in the pool (`pool::Pool::learn_models`), read here through what the key may
//! serve (its `models` / `exclude_models` settings, models answered as unavailable since). An OpenAI
//! key's list is `{"data":[{"id":…}]}`; a ChatGPT plan's (`/backend-api/codex/models`) is Codex's own
//! `{"models":[{"slug":…}]}`. A key of the pool whose list is not known yet is probed before the
//! catalog answers.
//!
//! What it answers: `{"models":[…]}`, one entry per model any key the pool reaches (its fallbacks
//! included) may serve, each slug once, the models Codex bundles first in Codex's order, then the
//! others by name; embedding, audio, image and other models no Codex turn can use are left out
//! (`codex::is_text_model`). `client_version` (Codex sends its version) is not needed: the table is
//! that of the Codex version Keymux was built against.
//!
//! Bounds: a provider's list is read and kept within `pool::MAX_LIST_BYTES`, `pool::MAX_MODELS_PER_KEY`
//! and `pool::MAX_SLUG_BYTES` (`pool::listed_models`); the catalog's body stays under [`MAX_CATALOG_BYTES`] (Codex refuses a
//! body over 1 MiB), the entries that do not fit left out, last first, and counted in a warning.

pub mod codex;

use std::collections::BTreeSet;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Response};
use axum::response::IntoResponse;
use serde_json::Value;

use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::keys::KeyId;
use crate::pools::Reach;

/// The largest catalog body: under Codex's 1 MiB cap, with room to spare.
pub const MAX_CATALOG_BYTES: usize = 1024 * 1024 - 4096;
/// How long the catalog waits for keys whose list is not known yet (Codex gives up after 5 s).
const PROBE_WAIT: Duration = Duration::from_secs(3);

/// The keys a request of pool `pool` may reach: every key for `all`, else the pool's and its
/// fallbacks', each once.
fn reached_keys(gw: &Gateway, pool: &str) -> Vec<KeyId> {
    let pools = gw.pools();
    let mut keys: Vec<KeyId> = match pools.reach(pool) {
        Reach::All => gw.pool().ids(),
        reach => reach.tiers().iter().flat_map(|t| t.keys.iter().cloned()).collect(),
    };
    let mut seen = BTreeSet::new();
    keys.retain(|k| seen.insert(k.clone()));
    keys
}

/// The models pool `pool` can serve, each once, sorted by name; keys whose list is not known yet are
/// probed first (for at most [`PROBE_WAIT`]).
pub async fn pool_models(gw: &Gateway, pool: &str) -> BTreeSet<String> {
    let keys = reached_keys(gw, pool);
    let unknown = keys.iter().filter(|k| gw.pool().servable_models(k).is_none()).cloned();
    let probes = futures::future::join_all(unknown.map(|k| crate::pipeline::probe(gw, k)));
    let _ = tokio::time::timeout(PROBE_WAIT, probes).await;
    keys.iter().filter_map(|k| gw.pool().servable_models(k)).flatten().collect()
}

/// The catalog's body for pool `pool`: `{"models":[…]}` under [`MAX_CATALOG_BYTES`].
pub async fn catalog(gw: &Gateway, pool: &str) -> Vec<u8> {
    let models = pool_models(gw, pool).await;
    let policies = gw.pools().policies(pool);
    let mut ranked: Vec<(i64, &String)> = Vec::new();
    let mut others = 0;
    for slug in &models {
        match codex::bundled_rank(slug) {
            Some(rank) => ranked.push((rank, slug)),
            None if codex::is_text_model(slug) => {
                others += 1;
                ranked.push((1000 + others, slug));
            }
            None => {}
        }
    }
    ranked.sort();
    let entries = ranked.into_iter().map(|(rank, slug)| codex::entry(slug, &policies, rank));
    let (body, left_out) = bounded(entries, MAX_CATALOG_BYTES);
    if left_out > 0 {
        tracing::warn!(pool, left_out, "the model catalog left out models past its size bound");
    }
    body
}

/// `{"models":[…]}` with as many of `entries` as fit in `limit` bytes, in order, and how many did not.
pub fn bounded(entries: impl Iterator<Item = Value>, limit: usize) -> (Vec<u8>, usize) {
    const OPEN: &[u8] = b"{\"models\":[";
    const CLOSE: &[u8] = b"]}";
    let mut body = OPEN.to_vec();
    let (mut count, mut left_out) = (0, 0);
    for entry in entries {
        let bytes = serde_json::to_vec(&entry).unwrap_or_default();
        let comma = usize::from(count > 0);
        if left_out > 0 || body.len() + comma + bytes.len() + CLOSE.len() > limit {
            left_out += 1;
            continue;
        }
        if comma == 1 {
            body.push(b',');
        }
        body.extend_from_slice(&bytes);
        count += 1;
    }
    body.extend_from_slice(CLOSE);
    (body, left_out)
}

/// Answers `GET /v1/keymux/model-catalog` for a client of pool `pool` (authenticated by the caller);
/// any other method is an endpoint Keymux does not have.
pub async fn serve(gw: &Gateway, method: &axum::http::Method, path: &str, pool: &str) -> Response<Body> {
    if method != axum::http::Method::GET {
        return ApiError::NotFound { path: format!("{method} {path}") }.into_response();
    }
    let body = catalog(gw, pool).await;
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests;
