//! Keymux's black-box tests, in one test binary (one link of the gateway and its dependencies instead
//! of one per file): each module is one concern, run against the real binary or an in-process gateway
//! in front of the simulator. `cargo test --test it MODULE::` runs one of them. `tests/limits.rs` is
//! a binary of its own because it changes the process's descriptor limit.

mod support;

mod affinity;
mod budgets;
mod budgets_clients;
mod chaos;
mod chatgpt;
mod chatgpt_clients;
mod cli;
mod client_kinds;
mod clients_check;
mod codex_threads;
mod compaction;
mod config_live;
mod continuity;
mod control;
mod dashboard;
mod docs;
mod fuzz_corpora;
mod gateway;
mod gateway_login;
mod hostile;
mod hygiene;
mod key_settings;
mod keychain;
mod keys_import;
mod login;
mod model_catalog;
mod passthrough;
mod pool_policies;
mod pools;
mod pools_cli;
mod pools_clients;
mod pre_keymux;
mod prompt_cache;
mod quota;
mod reasoning_drops;
mod reasoning_drops_clients;
mod request_encoding;
mod rescued;
mod rescued_clients;
mod responses_lite;
mod runtime;
mod security;
mod setup;
mod setup_api;
mod setup_history;
mod spend;
mod spread_clients;
mod store;
mod transports;
mod unreachable;
mod upstream_direct;
mod usage;
mod websocket;
