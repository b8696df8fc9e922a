//! The control plane against an attacker on the same machine: another local process, a server on
//! another loopback port, a web page the user opens. Each test reproduces one way in and shows it shut.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use keymux_sim::SimConfig;
use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

fn addr_of(h: &Harness) -> SocketAddr {
    h.root.trim_start_matches("http://").parse().unwrap()
}

/// A squatter on a loopback port that relays every byte to `target` and keeps what clients sent it.
struct Squatter {
    addr: SocketAddr,
    heard: Arc<Mutex<Vec<u8>>>,
}

impl Squatter {
    async fn relaying_to(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let sink = sink.clone();
                tokio::spawn(async move {
                    let Ok(upstream) = TcpStream::connect(target).await else { return };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_upstream, mut to_upstream) = upstream.into_split();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_upstream, &mut to_client).await;
                    });
                    let mut buf = [0_u8; 4096];
                    while let Ok(n) = from_client.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        sink.lock().unwrap().extend_from_slice(&buf[..n]);
                        if to_upstream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self { addr, heard }
    }

    fn heard(&self) -> String {
        String::from_utf8_lossy(&self.heard.lock().unwrap()).into_owned()
    }
}

/// Point 1: a relay on the port the CLI tries (the run file's, else the config's `listen`) forwards
/// the challenge to the real gateway. The gateway's proof names the address it was reached at, so
/// the CLI sees a proof for another address and sends nothing: no admin credential, no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_where_the_cli_looks_gets_a_proof_the_cli_rejects_and_no_credential() {
    let h = Harness::start(SimConfig::new().org("org-a", &["sk-a1"]), &[key("a1", "sk-a1")]).await;
    let squatter = Squatter::relaying_to(addr_of(&h)).await;
    let home = tempfile::tempdir().unwrap();
    let runtime_dir = home.path().join("run");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(&config, "keychain_service = \"keymux-relay-test\"\n").unwrap();
    // A forged run file in the user's runtime directory names the squatter.
    let run_file = keymux::runfile::path_in(&runtime_dir, &config);
    std::fs::create_dir_all(run_file.parent().unwrap()).unwrap();
    std::fs::write(&run_file, json!({"addr": squatter.addr, "pid": 1}).to_string()).unwrap();
    let mut env: Vec<(String, String)> = base_env(home.path())
        .into_iter()
        .filter(|(k, _)| k != "XDG_RUNTIME_DIR" && k != "DBUS_SESSION_BUS_ADDRESS")
        .collect();
    env.push(("XDG_RUNTIME_DIR".into(), runtime_dir.display().to_string()));
    // No keychain either: nothing may fall back to storing the key offline.
    env.push(("DBUS_SESSION_BUS_ADDRESS".into(), format!("unix:path={}/no-bus", home.path().display())));
    let secret = "sk-relayed-secret-0123456789abcdef";
    let cfg = config.to_str().unwrap();
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "add", "--label", "relayed"], &env, secret).await;
    assert!(!ok, "the CLI went on through the relay: {out}{err}");
    assert!(err.contains("could not prove"), "{err}");
    assert!(squatter.heard().contains("/keymux/api/challenge"), "the squatter relayed the challenge");

    // The same squatter where the config's `listen` points, with no run file.
    std::fs::remove_file(&run_file).unwrap();
    std::fs::write(&config, format!("keychain_service = \"keymux-relay-test\"\nlisten = \"{}\"\n", squatter.addr))
        .unwrap();
    let (ok, out, err) = run_keymux(&["--config", cfg, "keys", "add", "--label", "relayed"], &env, secret).await;
    assert!(!ok, "the CLI went on through the relay: {out}{err}");
    assert!(err.contains("could not prove"), "{err}");

    let heard = squatter.heard();
    assert_no_secrets("what the squatter heard", &heard, &[ADMIN, secret]);
    assert!(h.status().iter().all(|k| k.label != "relayed"), "no key was added through the relay");
}
