//! Shared server state: organizations (secret, store, cache), the key table, the ChatGPT plan, the
//! clock, the log, the faults, the rate limiter and the open WebSocket connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rand::RngCore;

use crate::cache::PromptCache;
use crate::clock::Clock;
use crate::config::{ForeignReasoning, KeyAuth, SimConfig};
use crate::connections::WsRegistry;
use crate::crypto::OrgCipher;
use crate::fault::{Fault, FaultBook};
use crate::log::LogBook;
use crate::plan::PlanState;
use crate::ratelimit::RateLimiter;
use crate::store::ResponseStore;

/// One organization's private state, shared by all its keys.
#[derive(Debug)]
pub(crate) struct OrgState {
    pub id: String,
    pub cipher: OrgCipher,
    pub store: Mutex<ResponseStore>,
    pub cache: Mutex<PromptCache>,
    /// The models its keys may use, in the simulator's order.
    pub models: Vec<&'static str>,
    replies: AtomicU64,
}

impl OrgState {
    /// The next reply number of this organization, starting at 1.
    pub(crate) fn next_reply(&self) -> u64 {
        self.replies.fetch_add(1, Ordering::Relaxed) + 1
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyInfo {
    pub org: usize,
    pub auth: KeyAuth,
}

/// The key a request authenticated with.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub secret: String,
    pub org: usize,
}

#[derive(Debug)]
pub(crate) struct State {
    pub orgs: Vec<OrgState>,
    /// The ChatGPT plan, if one is configured (its organization is the last of `orgs`).
    pub plan: Option<PlanState>,
    /// Bound: the configured keys.
    pub keys: HashMap<String, KeyInfo>,
    pub gzip_json: bool,
    /// What a replay of another organization's reasoning gets.
    pub foreign_reasoning: ForeignReasoning,
    pub ws_connection_limit: Duration,
    pub clock: Clock,
    pub log: LogBook,
    pub faults: FaultBook,
    pub limiter: RateLimiter,
    pub ws: WsRegistry,
    /// When the last event of the latest streamed response was handed to the connection (real time,
    /// not the advanceable clock): what a latency test compares a client's arrival time with.
    pub last_stream_end: Mutex<Option<std::time::Instant>>,
}

impl State {
    /// Notes that a stream's last event goes out now.
    pub(crate) fn stream_ends_now(&self) {
        #[expect(clippy::disallowed_methods, reason = "a real-time stamp for latency tests, not simulated time")]
        let now = std::time::Instant::now();
        *self.last_stream_end.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
    }

    pub(crate) fn new(config: &SimConfig) -> std::io::Result<Self> {
        let mut orgs = Vec::with_capacity(config.orgs.len());
        let mut keys = HashMap::new();
        for (index, spec) in config.orgs.iter().enumerate() {
            if orgs.iter().any(|o: &OrgState| o.id == spec.id) {
                return Err(invalid(format!("organization {} is configured twice", spec.id)));
            }
            orgs.push(org_state(spec.id.clone(), spec.models.as_deref(), config)?);
            for key in &spec.keys {
                if key.secret.is_empty() {
                    return Err(invalid(format!("organization {} has an empty key", spec.id)));
                }
                let info = KeyInfo { org: index, auth: key.auth };
                if keys.insert(key.secret.clone(), info).is_some() {
                    return Err(invalid("a key secret is configured twice".to_owned()));
                }
            }
        }
        let clock = Clock::default();
        let plan = match config.plan.clone() {
            Some(spec) => {
                orgs.push(org_state(spec.org_id(), spec.models.as_deref(), config)?);
                Some(PlanState::new(spec, orgs.len() - 1, clock.unix_secs()))
            }
            None => None,
        };
        Ok(State {
            orgs,
            plan,
            keys,
            gzip_json: config.gzip_json,
            foreign_reasoning: config.foreign_reasoning,
            ws_connection_limit: config.ws_connection_limit,
            clock,
            log: LogBook::default(),
            faults: FaultBook::default(),
            limiter: RateLimiter::new(config.limits),
            ws: WsRegistry::default(),
            last_stream_end: Mutex::new(None),
        })
    }

    pub(crate) fn org(&self, index: usize) -> &OrgState {
        &self.orgs[index]
    }

    /// The fault a request of `caller` shows now: a queued one first, then a standing one.
    pub(crate) fn draw_fault(&self, caller: &Caller) -> Option<Fault> {
        self.faults.draw(&caller.secret, &self.org(caller.org).id, self.clock.now())
    }

    /// The standing fault of `caller` now, leaving queued faults for later requests.
    pub(crate) fn standing_fault(&self, caller: &Caller) -> Option<Fault> {
        self.faults.standing(&caller.secret, &self.org(caller.org).id, self.clock.now())
    }

    /// The ciphers of every organization except `index`.
    pub(crate) fn other_ciphers(&self, index: usize) -> Vec<&OrgCipher> {
        self.orgs.iter().enumerate().filter(|(i, _)| *i != index).map(|(_, o)| &o.cipher).collect()
    }
}

/// A new organization with a secret of its own, serving `models` (all of them when `None`).
fn org_state(id: String, models: Option<&[String]>, config: &SimConfig) -> std::io::Result<OrgState> {
    let mut secret = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut secret);
    let models = match models {
        None => crate::models::MODELS.to_vec(),
        Some(names) => {
            if let Some(unknown) = names.iter().find(|m| !crate::models::MODELS.contains(&m.as_str())) {
                return Err(invalid(format!("organization {id} names the unknown model {unknown}")));
            }
            crate::models::MODELS.iter().copied().filter(|m| names.iter().any(|n| n == m)).collect()
        }
    };
    Ok(OrgState {
        id,
        cipher: OrgCipher::new(&secret),
        store: Mutex::new(ResponseStore::default()),
        cache: Mutex::new(PromptCache::new(config.cache_ttl)),
        models,
        replies: AtomicU64::new(0),
    })
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}
