//! Shared black-box test support: the gateway on 127.0.0.1:0 (in-process or as the real binary) in front
//! of the multi-organization simulator, plus request shapes taken from captured Codex and pi traffic.
#![allow(dead_code, unused_imports, reason = "each test binary uses a different part of the support module")]
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "test support")]

pub mod admin;
pub mod clients;
pub mod disk;
pub mod egress;
pub mod harness;
pub mod http;
pub mod login;
pub mod process;
pub mod session;
pub mod tui;
pub mod ws;

pub use admin::Admin;
pub use clients::*;
pub use egress::*;
pub use harness::*;
pub use http::*;
pub use login::*;
pub use process::*;
pub use session::*;
pub use ws::*;

use std::time::Duration;

/// The local client token every test client sends.
pub const TOKEN: &str = "km-test-local-token-4d2c7a91e0b35f68";
/// The admin credential tests call the control API with (as the CLI does).
pub const ADMIN: &str = "kma-test-admin-credential-7f3e9b2c5a1d8e46";

/// Waits until `ok` holds for what `read` returns, reading again every 100 ms: how a test waits on state
/// it can only read, never on a guess at how long something takes. Fails after a generous minute.
pub async fn until<T, F, R>(what: &str, read: R, ok: impl Fn(&T) -> bool) -> T
where
    R: Fn() -> F,
    F: std::future::Future<Output = T>,
{
    let wait = async {
        loop {
            let value = read().await;
            if ok(&value) {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: not seen within a minute"))
}
