//! Pointing Codex CLI and pi at Keymux by editing their own config files, for the tray's "Set up
//! Codex…" and "Set up pi…" and for `keymux setup`. Both take one path, [`preview`] then
//! [`Preview::confirm`] (`flow`): the change is shown with a stand-in token, the real token is made
//! once the user agrees, and nothing is written if the file changed since the preview. Underneath,
//! three steps, each a call:
//!
//! * [`plan`] reads the file and works out the new text and a preview (a small diff with the token
//!   masked, `mask`). It writes nothing, so the change can be shown before it is made.
//! * [`apply`] keeps a backup of the file first (`files`), then writes the new text atomically,
//!   readable by the user only (it now holds a client token), and records what it did in a state
//!   directory (`record`).
//! * [`undo`] puts the backup back byte for byte (or deletes a file Keymux created), unless the file
//!   was changed since Keymux wrote it. Backups are never deleted.
//!
//! Only the gateway's base URL and a local client token are written, never an OpenAI key. Everything
//! else in the file stays as it was: Codex's TOML is edited in place (`codex`), pi's JSON keeps every
//! other provider and the order of keys (`pi`). The record holds paths, a digest and a time; nothing
//! secret. Where each client's file is: `client`; why a step is refused: `error`.

mod apply;
mod client;
mod codex;
mod diff;
mod error;
mod files;
mod flow;
mod mask;
mod pi;
mod plan;
mod record;

pub use apply::{apply, status, undo, Applied, Status, Undone};
pub use client::{default_state_dir, Client};
pub use error::SetupError;
pub use flow::{preview, ConfirmError, Preview};
pub use mask::mask;
pub use plan::{plan, Plan};
pub use record::Restore;

/// The name of Keymux's provider entry in both clients' files.
const PROVIDER: &str = "keymux";
/// The largest client file Keymux rewrites.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The permissions of a file that holds a client token.
const PRIVATE: u32 = 0o600;

#[cfg(test)]
mod tests;
