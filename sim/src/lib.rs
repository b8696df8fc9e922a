//! A faithful multi-organization simulator of the OpenAI API, used as the upstream of
//! Keymux's black-box tests.
//!
//! Each organization has its own secret, response store and prompt cache, shared by its
//! keys; reasoning and compaction items carry real authenticated encryption bound to the
//! organization, so replaying them to another organization fails exactly like OpenAI does.
//! Rate limits apply per key. Tests inject faults per key and read a log of every request.
//!
//! # Layout
//! - [`config`]: the configuration types (organizations, keys, limits).
//! - `sim`: the [`Sim`] handle that starts the server and exposes the log, counts and faults.
//! - [`fault`]: the [`Fault`] kinds and the per-key FIFO queues.
//! - [`log`]: [`LogEntry`] records and the bounded log.
//! - `state`: the shared server state (organizations, key table, limiter, connections).
//! - `server`: routing, authentication, common headers and the HTTP endpoint handlers.
//! - `ws`: Responses over WebSocket, with connection-local state and abrupt kills.
//! - `responses`: the Responses engine (output items, usage, event sequence, store effects).
//! - `chat`: Chat Completions, JSON and SSE, with organization-bound `reasoning_items`.
//! - `embeddings`: deterministic hash-derived embeddings.
//! - [`models`]: the model catalogue.
//! - `prompt`: canonical prompt rendering, token estimates and prefix block hashes.
//! - `cache`: the per-organization prompt cache.
//! - `store`: the per-organization store of responses.
//! - `crypto`: organization-bound `encrypted_content` sealing and validation.
//! - `ratelimit`: per-key windows and the `x-ratelimit-*` headers.
//! - `error`: OpenAI-shaped error bodies and WebSocket error frames.
//! - `control`: the `/__sim/` control surface.
//! - `util`: locking, ids, clocks and duration formatting.

mod cache;
mod chat;
pub mod config;
mod control;
mod crypto;
mod embeddings;
mod error;
pub mod fault;
pub mod log;
pub mod models;
mod prompt;
mod ratelimit;
mod responses;
mod server;
mod sim;
mod state;
mod store;
mod util;
mod ws;

pub use config::{KeyAuth, KeySpec, Limits, OrgSpec, SimConfig};
pub use fault::Fault;
pub use log::{LogEntry, Transport, LOG_CAPACITY};
pub use sim::Sim;
