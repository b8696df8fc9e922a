//! A faithful multi-organization simulator of the OpenAI API, used as the upstream of
//! Keymux's black-box tests.
//!
//! Each organization has its own secret, response store and prompt cache, shared by its
//! keys; reasoning and compaction items carry real authenticated encryption bound to the
//! organization, so replaying them to another organization fails exactly like OpenAI does: by
//! default with 400 `invalid_encrypted_content`, or, in the mode newer models behave in
//! ([`ForeignReasoning::Drop`], chosen per simulator in [`SimConfig::foreign_reasoning`] or with
//! `--drop-foreign-reasoning`), by a 200 whose response reports each reasoning item it removed in
//! `input_transformations` (`organization_mismatch`), the items unused (no tokens, no cache hit).
//! A `response.create` whose last input item is `{"type":"compaction_trigger"}` (Codex's
//! remote compaction) is answered with one such compaction item, which stands in for the
//! whole history before it when replayed. Rate limits apply per key. Tests queue one-shot
//! faults per key, set standing faults on a key or an organization for a while, read a log
//! of every request, and advance the simulator's clock instead of waiting.
//!
//! # Layout
//! Three layers: the server at the top, the handlers of each surface below it, and the state and
//! the types they share at the bottom. Modules are listed from the top of the import graph down; each
//! imports only modules listed after it.
//! - `sim`: the [`Sim`] handle that starts the server and exposes the log, counts, faults and
//!   the clock.
//! - `server`: the HTTP front: authentication, and dispatch to the surfaces below.
//! - `chatgpt`: the ChatGPT Codex backend of one plan (what it requires and refuses, its usage
//!   windows' headers, the token endpoint), serving through `endpoints` in an organization of its own.
//! - `ws`: Responses over WebSocket, with connection-local state and the connection age limit.
//! - `control`: the `/__sim/` control surface.
//! - `endpoints`: the `/v1` route table and the HTTP endpoint handlers: faults drawn, models, stored
//!   responses, and the endpoints that run the model.
//! - `sse`: server-sent event bodies, pumped with the stream-shaping faults.
//! - `exchange`: one exchange with a client: log facts, fault errors and stream shaping, and
//!   the HTTP request context (rate-limit admission, the common OpenAI headers, rendering).
//! - `responses`: the Responses engine (output items, remote compaction, usage, event
//!   sequence, store effects) and `POST /v1/responses/compact`.
//! - `chat`: Chat Completions, JSON and SSE, with organization-bound `reasoning_items`.
//! - `embeddings`: deterministic hash-derived embeddings.
//! - `body`: request bodies, read under the cap with a `content-encoding` of gzip or zstd undone
//!   (as OpenAI does).
//! - `state`: the shared server state (organizations, key table, the plan, clock, log, faults,
//!   limiter, connections).
//! - `plan`: the ChatGPT plan's live state: its login (issued, rotated), the access tokens it
//!   accepts, its usage windows.
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

mod body;
mod cache;
mod chat;
mod chatgpt;
mod clock;
pub mod config;
mod connections;
mod control;
mod crypto;
mod embeddings;
mod endpoints;
mod error;
mod exchange;
pub mod fault;
pub mod log;
pub mod models;
mod plan;
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

pub use config::{ForeignReasoning, KeyAuth, KeySpec, Limits, OrgSpec, PlanSpec, SimConfig};
pub use fault::Fault;
pub use log::{LogEntry, Transport, LOG_CAPACITY};
pub use models::MODELS;
pub use plan::Tokens as ChatgptTokens;
pub use sim::Sim;
