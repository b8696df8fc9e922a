//! Pointing Codex CLI and pi at Keymux by editing their own config files, for the tray's "Set up
//! Codex…" and "Set up pi…" and for `keymux setup`. Both take one path, [`preview_with`] (with the
//! person's [`Choices`]) then [`Preview::confirm`] (`flow`): the change is shown with a stand-in token,
//! the real token is made once the user agrees, and nothing is written if a file changed since the
//! preview.
//!
//! What is set up is a [`Target`] (`target`): the client's own file for the built-in pool `all`, or
//! for one pool a Codex profile file (`keymux-work.config.toml`, used with `codex -p keymux-work`) or a
//! pi provider plus one project's `.pi/settings.json` (`pi_project`). Codex for the pool `all` keeps its
//! history: one `openai_base_url` line points its built-in provider at Keymux (`codex_history`) and the
//! client token goes into its `auth.json` (`codex_auth`), so sessions stay under the provider `openai`;
//! [`Choices::custom_provider`] writes a provider of Keymux's own instead (`codex`). Underneath, three
//! steps, each a call, per file:
//!
//! * [`plan`] reads the file and works out the new text and a preview (a small diff with the token
//!   masked, `mask`). It writes nothing, so the change can be shown before it is made.
//! * [`apply`] keeps a backup of the file first (`files`), then writes the new text atomically,
//!   readable by the user only when it holds a client token, and records what it did in a state
//!   directory (`record`).
//! * [`undo`] takes out exactly the line Keymux added to a file it edits in place (Codex's
//!   `config.toml`), keeping whatever Codex or the user wrote since; any other file gets its backup
//!   back byte for byte (or is deleted when Keymux created it), unless it was changed since Keymux wrote
//!   it. Backups are never deleted. Undo of a pi project leaves the pool's provider in `models.json`,
//!   where other projects may select it.
//!
//! Only the gateway's base URL and a local client token are written, never an OpenAI key (an API key
//! found in Codex's `auth.json` is handed to the caller to import, and kept in the backup). Everything
//! else in the file stays as it was: Codex's TOML is edited in place, pi's JSON keeps every other
//! provider and the order of keys (`pi`), `auth.json` loses only its key's string. The record holds
//! paths, URLs, digests and a time; nothing secret. Where each client's file is: `client`; why a step
//! is refused: `error`; previews the dashboard made, waiting for a yes: `pending` (bounded).

mod apply;
mod client;
mod codex;
mod codex_auth;
mod codex_history;
mod diff;
mod edited;
mod error;
mod files;
mod flow;
mod mask;
mod pending;
mod pi;
mod pi_project;
mod plan;
mod record;
mod target;

pub use apply::{apply, status, undo, Applied, Status, Undone};
pub use client::{default_state_dir, Client};
pub(crate) use codex_auth::string_end;
pub use codex_history::resume_command;
pub use edited::Remedy;
pub use error::SetupError;
pub(crate) use files::{keep_backup, mode_of, read_limited, real_path};
pub use flow::{preview, preview_with, ConfirmError, Preview};
pub use mask::mask;
pub use pending::{Offer, Pending, MAX_PENDING, PENDING_FOR};
pub use plan::{plan, Choices, Plan};
pub use record::Restore;
pub use target::Target;

/// The name of Keymux's provider entry in both clients' files.
const PROVIDER: &str = "keymux";

/// The provider id for a pool (`None`: the pool `all`), as every client module and the target name it.
fn provider_id(pool: Option<&str>) -> String {
    match pool {
        None => PROVIDER.to_owned(),
        Some(pool) => format!("{PROVIDER}-{pool}"),
    }
}

/// The provider's name as the client shows it.
fn provider_name(pool: Option<&str>) -> String {
    match pool {
        None => "Keymux".to_owned(),
        Some(pool) => format!("Keymux (pool {pool})"),
    }
}
/// The largest client file Keymux rewrites.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The permissions of a file that holds a client token.
const PRIVATE: u32 = 0o600;

#[cfg(test)]
mod tests;
