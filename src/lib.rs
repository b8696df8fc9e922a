//! # Keymux
//!
//! A localhost gateway that pools a developer's OpenAI API keys (kept in the OS keychain) behind one
//! base URL, spreads traffic over them, and never sends a request to a key that cannot serve it.
//!
//! # Layout
//!
//! * [`affinity`]: bounded in-memory session tables (which key served a session's pinned requests).
//! * [`config`]: the TOML config file (ids and labels, never secrets) and the `KEYMUX_*` environment
//!   variables that add ephemeral keys for headless runs.
//! * [`secrets`]: the `Secret` newtype that never prints itself, the `SecretStore` trait, the OS keychain
//!   store and an in-memory store.
//! * [`keys`]: key identity (`KeyId`), providers (OpenAI, Azure), the runtime `KeyEntry` and keyed
//!   fingerprints.
//! * [`markers`]: every marker format: wrapping `encrypted_content`, tagging ids, and stripping them
//!   from request bodies in one pass.
//! * [`tokens`]: local client tokens and their constant-time check.
//! * [`facts`]: classifies a request into an `Operation` and reads the few body facts routing needs.
//! * [`router`]: the pure `decide(facts, pool view, now) -> Decision`.
//! * [`pool`]: live per-key state (health, cooldowns, in-flight, learned org), changed only by `apply`.
//! * [`quota`]: rate-limit windows from `x-ratelimit-*` headers, counted down between answers.
//! * [`upstream`]: the one provider HTTP client, header policy, timeouts and rate-limit hints.
//! * [`relay`]: tags org-bound values in relayed SSE events, JSON bodies and WebSocket frames.
//! * [`gateway`]: one request end to end: body cap, decide, failover before the first byte, relay.
//! * [`ws`]: Responses over WebSocket: one client socket bound to one upstream socket and key.
//! * [`events`]: bounded ring and live feed of finished requests with their decisions.
//! * [`metrics`]: hashed per-day counters (key fingerprints only), aggregated in memory, kept in sled.
//! * [`error`]: the OpenAI-shaped error every layer folds into.
//! * [`http`]: the axum routes and the embeddable `serve(listener, gateway, shutdown)`.
//! * [`startup`]: assembles a gateway from config, keychain and environment (used by the CLI and the tray).
//! * [`cli`]: the `keymux` command line.

pub mod affinity;
pub mod cli;
pub mod config;
pub mod error;
pub mod events;
pub mod facts;
pub mod gateway;
pub mod http;
pub mod keys;
pub mod markers;
pub mod metrics;
pub mod pool;
pub mod quota;
pub mod relay;
pub mod router;
pub mod secrets;
pub mod startup;
pub mod tokens;
pub mod upstream;
pub mod ws;

pub use gateway::Gateway;
pub use http::serve;
