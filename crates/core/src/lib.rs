//! # Keymux's core
//!
//! What one request means and where it may go, as pure functions and plain data: no async runtime, no
//! sockets, no storage, no keychain. The gateway crate (`keymux`) reads requests and answers, keeps the
//! live state and calls into this crate; it re-exports every module here under the same name, so
//! `keymux::markers` is `keymux_core::markers`.
//!
//! # Layout
//!
//! Identity and secrets:
//! * [`secrets`]: the `Secret` newtype that never prints itself, fresh secrets, masking of key-shaped text.
//! * [`digest`]: every keyed digest under the install secret (fingerprints, org tags, marker MACs,
//!   session digests).
//! * [`markers`]: every marker format (format, strip, tag, rescue).
//! * [`scan`]: the JSON byte scanner that markers, relayed events and usage are read with.
//! * [`keys`]: key identity (`KeyId`), the runtime `KeyEntry`, the checks of a key's label, models,
//!   organization, base URL and secret.
//! * [`provider`]: what differs between providers, each one type behind the one `Provider` interface
//!   (OpenAI, Azure, and the ChatGPT plan in `provider::chatgpt`: its login, the body its backend
//!   takes, the usage windows it reports), registered in `ProviderId::get`.
//! * [`key_settings`]: a key's settings declared once (`KeySettings`, beside `budget::MoneyBudget`),
//!   their typed change (`KeySettingsChange`), and which settings the config file leaves out.
//! * [`change`]: how a typed change reads (a field left out stays, `null` clears), and the refusal
//!   of an unknown field or a wrong value in words that name it.
//! * [`flat`]: flattening a group of settings that flattens another (a pool's policies hold its
//!   budget) into a struct that refuses unknown fields.
//! * [`tokens`]: local client tokens and their constant-time check.
//!
//! One request:
//! * [`facts`]: the words for a request that routing, events and metrics share (`Operation`,
//!   `ClientKind`, `RequestFacts`); `facts::extract` reads them from a request, markers stripped
//!   (`facts::body` its body's fields, `facts::session` its session and affinity signal).
//! * [`router`]: the pure `decide(facts, pool view, memory, now) -> Decision`, and `decide_within` a pool.
//! * [`pool`]: what the router reads of the pool (`KeyView`, `PoolView`) and key health with its pure
//!   transitions.
//! * [`pools`]: the user's boundaries: named sets of keys, checked and resolved to key ids; each
//!   pool's settings declared once (`pools::PoolPolicies`: the priority tier, the proxy, a budget in
//!   money) with their typed change.
//! * [`quota`]: rate-limit windows from `x-ratelimit-*` headers, counted down between answers.
//! * [`relay`]: tags org-bound values in relayed SSE events, JSON bodies and WebSocket frames, and
//!   reads how an answer ended (`relay::AnswerEnd`: its usage and what the provider dropped).
//! * [`drops`]: what the provider says it dropped from a request's input (`input_transformations`:
//!   reasoning removed, and why).
//!
//! Money and time:
//! * [`spend`]: the embedded price table, the user's `[prices]` over it, what one answer used (`Usage`,
//!   one type from the relay to the bill) and what it cost.
//! * [`budget`]: budgets in money per key and where a key stands against them.
//! * [`clock`]: deadlines that never overflow and the local day and month spend is counted in (time is
//!   read by the gateway's `clock::Clock`, which hands `now` to everything here).
//!
//! Settings:
//! * [`config`]: the TOML config file (ids and labels, never secrets); `config::env`, the `KEYMUX_*`
//!   variables.

pub mod budget;
pub mod change;
pub mod clock;
pub mod config;
pub mod digest;
pub mod drops;
pub mod facts;
pub mod flat;
pub mod key_settings;
pub mod keys;
pub mod markers;
pub mod pool;
pub mod pools;
pub mod provider;
pub mod quota;
pub mod relay;
pub mod router;
pub mod scan;
pub mod secrets;
pub mod spend;
pub mod tokens;
