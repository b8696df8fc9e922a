//! # Keymux
//!
//! A localhost gateway that pools a developer's OpenAI API keys (kept in the OS keychain) behind one
//! base URL, spreads traffic over them, and never sends a request to a key that cannot serve it.
//!
//! # Layout
//!
//! Running it:
//! * [`runtime`]: the embeddable runtime (`Runtime::start`, `shutdown`): binding, key probing, the
//!   metrics flusher. The CLI, the tests and the tray app all start a gateway through it.
//! * [`startup`]: assembles a gateway from config, keychain and environment, without side effects;
//!   `first_run` makes the first run's writes explicitly.
//! * [`server`]: serves the HTTP surface on a bound socket (no-delay, connection cap, header timeout,
//!   bounded drain).
//! * [`http`]: the axum routes: `/v1/*` for clients, `/keymux/api/*` for tools.
//! * [`cli`]: the `keymux` command line.
//!
//! One request's way through:
//! * [`proxy`] (HTTP) and [`ws`] (Responses over WebSocket): the two transports. Each reads what is
//!   particular to it and hands the rest to the pipeline.
//! * [`pipeline`]: the steps both transports share: admit (facts, memory, decision, rescue), attempt
//!   with failover (judged by the one classifier), record.
//! * [`facts`]: classifies a request into an `Operation` and reads the few body facts routing needs,
//!   markers stripped.
//! * [`router`]: the pure `decide(facts, pool view, memory, now) -> Decision`.
//! * [`upstream`]: the one provider HTTP client, header policy, timeouts and rate-limit hints.
//! * [`relay`]: tags org-bound values in relayed SSE events, JSON bodies and WebSocket frames.
//!
//! State:
//! * [`gateway`]: the shared state of a running gateway, and publishing records.
//! * [`pool`]: live per-key state (health, cooldowns, windows, in-flight, recent starts), changed
//!   through three doors: `begin`, `apply`, and the user's changes.
//! * [`quota`]: rate-limit windows from `x-ratelimit-*` headers, counted down between answers.
//! * [`affinity`]: bounded in-memory session tables (soft affinity and WebSocket session hints).
//! * [`events`]: the records of finished requests, in a bounded ring and a live feed.
//! * [`metrics`]: hashed per-day counters (key fingerprints only), aggregated in memory, kept in sled.
//!
//! Identity and secrets:
//! * [`markers`]: every marker format (format, byte scanner, strip, tag, rescue).
//! * [`digest`]: every keyed digest under the install secret (fingerprints, org tags, marker MACs,
//!   session digests).
//! * [`keys`]: key identity (`KeyId`), providers (OpenAI, Azure), the runtime `KeyEntry`.
//! * [`secrets`]: the `Secret` newtype that never prints itself, the keychain and memory stores.
//! * [`tokens`]: local client tokens and their constant-time check.
//! * [`config`]: the TOML config file (ids and labels, never secrets) and the `KEYMUX_*` variables.
//!
//! Foundations:
//! * [`clock`]: the one place time is read (and advanced, in tests).
//! * [`error`]: the OpenAI-shaped error every layer folds into.

pub mod affinity;
pub mod cli;
pub mod clock;
pub mod config;
pub mod digest;
pub mod error;
pub mod events;
pub mod facts;
pub mod gateway;
pub mod http;
pub mod keys;
pub mod markers;
pub mod metrics;
pub mod pipeline;
pub mod pool;
pub mod proxy;
pub mod quota;
pub mod relay;
pub mod router;
pub mod runtime;
pub mod secrets;
pub mod server;
pub mod startup;
pub mod tokens;
pub mod upstream;
pub mod ws;

pub use gateway::Gateway;
pub use runtime::Runtime;
pub use server::serve;
