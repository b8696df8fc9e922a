//! # Keymux
//!
//! A localhost gateway that pools a developer's OpenAI API keys (kept in the OS keychain) behind one
//! base URL, spreads traffic over them, and never sends a request to a key that cannot serve it.
//!
//! # Layout
//!
//! Two crates. `keymux_core` (`crates/core`) holds the request logic without I/O: markers, digests,
//! facts, the router's decision, pools' resolution, the key settings and the config file, providers,
//! prices and budgets, rate-limit windows, relay tagging. This crate re-exports each of those modules
//! under the same name ([`markers`], [`facts`], [`router`], [`pools`], [`config`], [`keys`],
//! [`provider`], [`key_settings`], [`change`], [`flat`], [`spend`], [`budget`], [`quota`], [`relay`],
//! [`drops`], [`digest`], [`tokens`]), and extends three that are split between the two: [`clock`] (the `Clock`
//! that reads time is here), [`secrets`] (the keychain is here) and [`pool`] (the live pool is here;
//! the router's snapshot and key health are the core's). Everything below that needs a runtime, a
//! socket, storage or the keychain is this crate's.
//!
//! Running it:
//! * [`runtime`]: the embeddable runtime (`Runtime::start`, `shutdown`): binding, key probing, the
//!   metrics flusher. The CLI, the tests and the tray app all start a gateway through it.
//! * [`startup`]: assembles a gateway from config, keychain and environment, without side effects;
//!   `first_run` makes the first run's writes explicitly.
//! * [`server`]: serves the HTTP surface on a bound socket: no-delay, the connection cap (which closes
//!   the oldest idle connection for a new one), the write deadline (`server::write_deadline`), bounded
//!   drain.
//! * [`limits`]: every limit on what clients can hold (timeouts, caps, the descriptor limit raised).
//! * [`http`]: the axum routes: `/v1/*` for clients, `/login`, the dashboard, and the control API.
//! * [`api`]: the control API under `/keymux/api` (typed bodies, the live event stream,
//!   `api::spend`, the spend report per key, pool, token or model that `keymux usage` prints, and
//!   `api::setup`, client setup and key import for the dashboard).
//! * [`oauth`]: Keymux as the authorization server of a client's gateway login (Codex's
//!   `gateway_oauth`): the browser flow approved in the dashboard (PKCE, loopback redirect), the device
//!   flow, refresh; what it issues is a client token bound to the pool the person picked. It holds the
//!   state (the bounded table of logins under way); `http::oauth` serves the client's endpoints,
//!   `api::login` the dashboard's yes, `control::login` issues and refreshes the tokens.
//! * [`access`]: who may call what (client tokens, dashboard sessions, the admin credential).
//! * [`dashboard`]: the dashboard's files, embedded at build time and served at `/`.
//! * [`desktop`]: what the tray app shows (menu, icon, notifications, the window's languages, what the
//!   window says when it cannot show the dashboard) as pure functions of the state.
//! * [`cli`]: the `keymux` command line; its commands change Keymux through one typed interface
//!   (`cli::control::Control`: the running gateway, or the config and keychain when none runs).
//! * [`clients_check`]: `keymux clients check`: each installed client (Codex, pi) runs one real turn per
//!   transport it uses through a gateway of its own, in front of the simulator as a stand-in provider,
//!   with a throwaway key and token in memory; a turn passes when the client exits 0 and the gateway
//!   recorded it. The CLI prints it; `clients_check::watch` runs it in `keymux serve` and the tray when
//!   a client's version changes, for the Connect view and a notification.
//! * [`catalog`]: the model catalog Codex loads from `model_catalog_url` (`GET
//!   /v1/keymux/model-catalog`): the models the caller's pool can reach, learned from each key's
//!   `GET /models`, as Codex describes them (`catalog::codex`, from Keymux's table of the models Codex
//!   bundles), with the tiers the pool's policies allow.
//! * [`logging`]: the one logging setup (`KEYMUX_LOG`; other crates capped at `warn`).
//! * [`remote`] and [`runfile`]: how the CLI finds a running gateway and makes sure it is Keymux.
//! * [`login_page`]: the dashboard opened in a browser (`keymux dashboard --open`, the tray's Open in
//!   browser) through a page only the user can read, so the login code is on no command line.
//!
//! One request's way through:
//! * [`proxy`] (HTTP: `proxy::send`, how one attempt is sent and its answer read; `proxy::stream`, how
//!   the answer goes back) and [`ws`] (Responses over WebSocket, its two pumps in `ws::pumps`): the two
//!   client transports. Each reads what is particular to it and hands the rest to the pipeline.
//! * [`encoding`]: request bodies sent compressed (`content-encoding` zstd, gzip, br), decoded under the
//!   body cap before anything reads them; what goes upstream is the decoded body.
//! * [`pipeline`]: the steps both transports share, as functions over `&Gateway`: admit (facts, memory,
//!   decision, rescue), attempt with failover, record; key probes are a third transport through the
//!   same attempt step. Its header has a glossary of the nouns one attempt's result goes through.
//! * [`classify`]: the one answer classifier: what an upstream answer (or a failure) means for the key
//!   and the request. Pure.
//! * [`facts`]: the words for a request that routing, events and metrics share (`Operation`,
//!   `ClientKind`, `RequestFacts`); `facts::extract` reads them from a request, markers stripped, the
//!   body's fields through `facts::body` and its session and affinity signal through `facts::session`.
//! * [`router`]: the pure `decide(facts, pool view, memory, now) -> Decision`.
//! * [`upstream`]: one attempt with one key: the key's provider sets its credential and adapts the
//!   request, then it goes out the key's way. Its rooms: `upstream::egress` (how a connection leaves:
//!   direct, an HTTP proxy's `CONNECT` tunnel, SOCKS5, the environment's proxy; for HTTP and
//!   WebSockets alike), `upstream::client` (hyper's pooled client over it), `upstream::headers` (the
//!   header policy), `upstream::error`, `upstream::Answer`.
//! * [`provider`]: what differs between providers, each one type (`keymux_core::provider`: OpenAI,
//!   Azure, the ChatGPT plan in `provider::chatgpt`); everything above asks a key's provider and none
//!   branches on which it is.
//! * [`refresh`]: a credential refreshed when its provider says it is due (a plan's token), one refresh
//!   at a time, on the key's own way out, and written back to the keychain.
//! * [`relay`]: tags org-bound values in relayed SSE events, JSON bodies and WebSocket frames, and reads
//!   how an answer ended (`relay::AnswerEnd`: its usage and, in the same walk, [`drops`]: the reasoning
//!   the provider says it removed from the input, `input_transformations`).
//!
//! Changing it:
//! * [`control`]: keys, tokens, pools and routing changed at runtime (and offline, by the CLI);
//!   `control::pools` for pools, `control::live` for hand edits of the config file while it runs,
//!   `control::setup` for setting Codex and pi up from the dashboard and the tray (the same flow as
//!   `keymux setup`), `control::import` for the first-run import of keys found on this machine.
//! * [`pools`]: the user's boundaries: named sets of keys that each client token is bound to, checked
//!   and resolved to key ids; what one request may reach (`pools::Reach`), and the `pool_mismatch`
//!   check; each pool's settings declared once (`pools::PoolPolicies`: the tier a request is sent in,
//!   its keys' proxy, its budget in money), flattened into the config file, the API and the CLI's
//!   flags, with its typed change (`PoolPoliciesChange`); split by concern (`pools::policies`,
//!   `pools::proxy`, `pools::validate`, `pools::reach`).
//! * [`settings`]: where those changes are kept: the secret store, the config file, the config now
//!   and the price table it makes.
//! * [`config_file`]: edits to the config file that keep the user's comments.
//! * [`setup`]: points Codex and pi at Keymux in their own config files, one flow for the CLI and the
//!   tray: a preview first, the token made once the user agrees, nothing written if the file changed
//!   since the preview, a backup, and an Undo that restores the file byte for byte. For one pool, a
//!   Codex profile file (`codex -p keymux-work`) or a pi provider that one project selects.
//!
//! State:
//! * [`gateway`]: the shared state of a running gateway, and publishing records and events
//!   (`gateway/publish.rs`). It imports neither `pipeline` nor `control`, which act on it.
//! * [`notices`]: what has been told (a key's health, a plan used up, a budget's state, a config
//!   problem), so each change is told once.
//! * [`pool`]: live per-key state (health, cooldowns, windows, in-flight, recent starts), changed
//!   through three doors: `begin`, `apply`, and the user's changes. It owns key health (`pool::health`:
//!   `Health` with its deadlines, `HealthState` as shown, the pure transitions), the router's snapshot
//!   (`pool::view`) and the status people see (`pool::status`, which the API's `KeyInfo` embeds), and
//!   the models each key's provider listed (`pool::models`, for the model catalog).
//! * [`quota`]: rate-limit windows from `x-ratelimit-*` headers, counted down between answers, the
//!   share of them a key keeps for its pinned sessions and when they run out.
//! * [`affinity`]: bounded in-memory session tables (soft affinity, WebSocket session hints, and the
//!   organizations each rescued session was moved off).
//! * [`sessions`]: the recent sessions the dashboard shows (bounded, in memory).
//! * [`recency`]: the least-recently-used bookkeeping every bounded table shares.
//! * [`events`]: records of finished requests and every other event, in bounded rings and one lossy live
//!   stream; `events::record` is what a request's record holds, `events::changes` what a key's or the
//!   gateway's change says.
//! * [`spend`]: the embedded price table (`spend/prices.toml`), the user's `[prices]` over it (held by
//!   `settings`), the one `Usage` (token counts and the tier they were billed in, from the answer to
//!   the bill), and what one request cost from it (exact integers; an unknown model is
//!   unpriced, not $0). A record is priced once, when its request finishes (`RequestRecord::price`).
//! * [`budgets`]: budgets in money held against the live pool, once: a pool's state, the rule that holds
//!   a pool's keys to its budget as well as their own, the refusal of a stopped one, the events told
//!   when a state changes. Requests, WebSocket handshakes and bound sockets' turns all ask here.
//! * [`budget`]: budgets in money per key and pool (`MoneyBudget`: per day and month, the reserve
//!   threshold, what happens at the limit), their typed change (`MoneyBudgetChange`), and where a key
//!   stands against them (open, reserved, stopped). Pure.
//! * [`metrics`]: hashed per-hour counters (key fingerprints only), spend included, aggregated in
//!   memory, kept in sled (`metrics::store` owns its failures: idempotent flushes, reopen, corrupt
//!   stores moved aside); the last weeks' spend per key also in memory (`metrics::tally`); counters
//!   name enum values by their serde names (`metrics::variant`, read off the serializer).
//!
//! Identity and secrets:
//! * [`markers`]: every marker format (format, byte scanner, strip, tag, rescue).
//! * [`digest`]: every keyed digest under the install secret (fingerprints, org tags, marker MACs,
//!   session digests).
//! * [`keys`]: key identity (`KeyId`), the runtime `KeyEntry` (its `ProviderId` names its provider).
//! * [`keys_import`]: the API keys a user already has in plaintext (`OPENAI_API_KEY`, Codex's and pi's
//!   files, read by the rule of the pi version installed (`keys_import::pi`), a pasted list), found for
//!   `keymux keys import`, and their plaintext copies taken out after (`keys_import::strip`).
//! * [`secrets`]: the `Secret` newtype that never prints itself, the keychain and memory stores.
//! * [`tokens`]: local client tokens and their constant-time check.
//! * [`config`]: the TOML config file (ids and labels, never secrets); `config::env`, the `KEYMUX_*`
//!   variables.
//!
//! Foundations:
//! * [`clock`]: the one place time is read (and advanced, in tests), with the user's time zone and
//!   the local day and month that spend is counted in.
//! * [`error`]: the OpenAI-shaped error every layer folds into; each variant's status, type, code,
//!   label and message come from one `spec`.

pub mod access;
pub mod affinity;
pub mod api;
pub mod budgets;
pub mod catalog;
pub mod classify;
pub mod cli;
pub mod clients_check;
pub mod clock;
pub mod config_file;
pub mod control;
pub mod dashboard;
pub mod desktop;
pub mod encoding;
pub mod error;
pub mod events;
pub mod gateway;
pub mod http;
pub mod keys_import;
pub mod limits;
pub mod logging;
pub mod login_page;
pub mod metrics;
pub mod notices;
pub mod oauth;
pub mod pipeline;
pub mod pool;
pub mod proxy;
pub mod recency;
pub mod refresh;
pub mod remote;
pub mod runfile;
pub mod runtime;
pub mod secrets;
pub mod server;
pub mod sessions;
pub mod settings;
pub mod setup;
pub mod startup;
pub mod upstream;
pub mod ws;

pub use keymux_core::{
    budget, change, config, digest, drops, facts, flat, key_settings, keys, markers, pools, provider, quota, relay,
    router, spend, tokens,
};

pub use gateway::Gateway;
pub use runtime::Runtime;
pub use server::serve;
