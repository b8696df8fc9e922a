//! A faithful multi-organization simulator of the OpenAI API, used as the upstream of
//! Keymux's black-box tests.
//!
//! Each organization has its own secret, response store and prompt cache, shared by its
//! keys; reasoning and compaction items carry real authenticated encryption bound to the
//! organization, so replaying them to another organization fails exactly like OpenAI does.
//! A `response.create` whose last input item is `{"type":"compaction_trigger"}` (Codex's
//! remote compaction) is answered with one such compaction item, which stands in for the
//! whole history before it when replayed. Rate limits apply per key. Tests queue one-shot
//! faults per key, set standing faults on a key or an organization for a while, read a log
//! of every request, and advance the simulator's clock instead of waiting.
//!
//! # Layout
//! Modules are listed from the top of the import graph down; each imports only modules
//! listed after it.
//! - `sim`: the [`Sim`] handle that starts the server and exposes the log, counts, faults and
//!   the clock.
//! - `server`: routing, authentication, request bodies (a `content-encoding` of gzip or zstd
//!   undone, as OpenAI does), drawing faults and the HTTP endpoint handlers.
//! - `chatgpt`: the ChatGPT Codex backend of one plan (its login, token refresh, usage windows, what
//!   it requires and refuses), serving through `server` in an organization of its own.
//! - `ws`: Responses over WebSocket, with connection-local state and the connection age limit.
//! - `control`: the `/__sim/` control surface.
//! - `sse`: server-sent event bodies, pumped with the stream-shaping faults.
//! - `exchange`: one exchange with a client: log facts, fault errors and stream shaping, and
//!   the HTTP request context (rate-limit admission, the common OpenAI headers, rendering).
//! - `responses`: the Responses engine (output items, remote compaction, usage, event
//!   sequence, store effects) and `POST /v1/responses/compact`.
//! - `chat`: Chat Completions, JSON and SSE, with organization-bound `reasoning_items`.
//! - `embeddings`: deterministic hash-derived embeddings.
//! - `state`: the shared server state (organizations, key table, clock, log, faults, limiter,
//!   connections).
//! - `connections`: the registry of open WebSocket connections and their abrupt kills.
//! - `clock`: the one clock, real time plus the skew tests advance.
//! - `cache`: the per-organization prompt cache.
//! - `store`: the per-organization store of responses.
//! - `prompt`: canonical prompt rendering, token estimates and prefix block hashes.
//! - `crypto`: organization-bound `encrypted_content` sealing and validation.
//! - [`models`]: the model catalogue.
//! - `ratelimit`: per-key windows and the `x-ratelimit-*` headers.
//! - `error`: OpenAI-shaped error bodies and WebSocket error frames.
//! - [`fault`]: the [`Fault`] kinds, the per-key FIFO queues and the standing faults.
//! - [`log`]: [`LogEntry`] records and the bounded log.
//! - [`config`]: the configuration types (organizations, keys, limits).
//! - `util`: locking, ids, text splitting and duration formatting.

mod cache;
mod chat;
mod chatgpt;
mod clock;
pub mod config;
mod connections;
mod control;
mod crypto;
mod embeddings;
mod error;
mod exchange;
pub mod fault;
pub mod log;
pub mod models;
mod prompt;
mod ratelimit;
mod responses;
mod server;
mod sim;
mod sse;
mod state;
mod store;
mod util;
mod ws;

pub use chatgpt::Tokens as ChatgptTokens;
pub use config::{KeyAuth, KeySpec, Limits, OrgSpec, PlanSpec, SimConfig};
pub use fault::Fault;
pub use log::{LogEntry, Transport, LOG_CAPACITY};
pub use sim::Sim;
