//! A ChatGPT plan as a pool member, against the simulator's ChatGPT Codex backend: imported from
//! Codex's `auth.json` through the real binary and the real keychain (listed with its account and plan,
//! no token in any output, log or file), its requests sent to the backend in the shape it takes, and
//! its access token refreshed ahead of expiry, once, with no request failing.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

use crate::support;

use std::path::Path;
use std::time::Duration;

use keymux::events::{Envelope, Event, KeyChange};
use keymux::keys::ProviderId;
use keymux::secrets::account;
use keymux_sim::{ChatgptTokens, PlanSpec, Sim, SimConfig};
use serde_json::{json, Value};
use support::disk::{contains, every_file};
use support::*;

pub(crate) const ACCOUNT: &str = "acct-plan-7f3a";
const PLAN_KEY: &str = "chatgpt-acct-plan-7f3a";
pub(crate) const API_KEY: &str = "sk-plan-test-a1";

pub(crate) fn sim_config(spec: PlanSpec) -> SimConfig {
    SimConfig::new().org("org-a", &[API_KEY]).chatgpt_plan(spec)
}

/// Every secret a login holds, and each part of its JWTs (a part alone is as telling).
pub(crate) fn token_parts(tokens: &ChatgptTokens) -> Vec<String> {
    let mut parts = vec![tokens.refresh_token.clone()];
    for jwt in [&tokens.access_token, &tokens.id_token] {
        parts.push(jwt.clone());
        parts.extend(jwt.split('.').skip(1).map(str::to_owned));
    }
    parts
}

pub(crate) fn assert_no_token(what: &str, text: &[u8], secrets: &[String]) {
    for secret in secrets {
        assert!(!contains(text, secret), "{what} holds a token ({}…)", &secret[..secret.len().min(8)]);
    }
}

/// Codex's `auth.json` holding the plan's login.
pub(crate) fn codex_auth(dir: &Path, tokens: &ChatgptTokens) -> std::path::PathBuf {
    let path = dir.join("auth.json");
    let auth = json!({
        "auth_mode": "chatgpt",
        "OPENAI_API_KEY": null,
        "tokens": {"id_token": tokens.id_token, "access_token": tokens.access_token,
                   "refresh_token": tokens.refresh_token, "account_id": tokens.account_id},
        "last_refresh": "2026-12-01T00:00:00Z",
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&path, auth.to_string()).unwrap();
    path
}

/// A streamed Responses turn as Codex sends one, with what the backend refuses or requires otherwise.
fn turn(input: &str) -> Value {
    json!({"model": "gpt-5.5", "input": input, "stream": true, "store": true, "max_output_tokens": 256,
           "include": ["reasoning.encrypted_content"], "prompt_cache_key": "plan-session-1"})
}

async fn send_turn(base: &str, input: &str) -> (u16, String) {
    let r = post(&client(), &format!("{base}/responses"), &[], &turn(input)).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// A user's machine for the CLI: the simulator with the plan, a home with Codex's directory
/// (`CODEX_HOME`), a config naming a keychain service of the test's own, and the environment every
/// `keymux` run of the test gets (with the gateway's client token when `client_token`).
struct CliHome {
    sim: Sim,
    home: tempfile::TempDir,
    codex_home: std::path::PathBuf,
    cfg: std::path::PathBuf,
    env: Vec<(String, String)>,
}

impl CliHome {
    async fn start(name: &str, client_token: bool) -> Self {
        assert!(
            std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(),
            "the keychain tests need a Secret Service in a D-Bus session: run them through `scripts/test`"
        );
        let sim = Sim::start(sim_config(PlanSpec::new(ACCOUNT))).await.unwrap();
        let home = tempfile::tempdir().unwrap();
        let codex_home = home.path().join("codex");
        let cfg = home.path().join("config.toml");
        let service = format!("keymux-chatgpt-{name}-{}", std::process::id());
        std::fs::write(&cfg, format!("keychain_service = \"{service}\"\nupstream = \"{}\"\n", sim.base_url())).unwrap();
        let mut env = base_env(home.path());
        env.push(("CODEX_HOME".into(), codex_home.display().to_string()));
        env.push(("KEYMUX_CHATGPT_BASE_URL".into(), sim.chatgpt_base_url()));
        env.push(("KEYMUX_CHATGPT_AUTH_URL".into(), sim.chatgpt_auth_url()));
        if client_token {
            env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
        }
        CliHome { sim, home, codex_home, cfg, env }
    }

    /// `keymux --config CFG ARGS…`: (succeeded, stdout, stderr).
    async fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let mut all = vec!["--config", self.cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        run_keymux(&all, &self.env, "").await
    }

    /// The gateway, as `keymux --config CFG` runs it.
    async fn gateway(&self) -> Keymux {
        Keymux::spawn(&["--config", self.cfg.to_str().unwrap()], &self.env).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_is_imported_from_codex_listed_with_its_account_and_no_token_is_written_or_printed() {
    let m = CliHome::start("import", true).await;
    let (sim, home) = (&m.sim, &m.home);
    let tokens = sim.chatgpt_tokens().unwrap();
    let secrets = token_parts(&tokens);
    let auth = codex_auth(&m.codex_home, &tokens);
    let mut printed = Vec::new();

    let (ok, out, err) = m.cli(&["keys", "import", "--chatgpt", "--yes"]).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(ok, "{out}{err}");
    assert!(out.contains(ACCOUNT) && out.contains("plus") && out.contains("imported the plan as 'chatgpt'"), "{out}");

    let (ok, list, err) = m.cli(&["keys", "list"]).await;
    printed.extend_from_slice((list.clone() + &err).as_bytes());
    assert!(ok && list.contains("chatgpt") && list.contains(&format!("{ACCOUNT} (plus)")), "{list}{err}");
    let (ok, listed, err) = m.cli(&["keys", "list", "--json"]).await;
    printed.extend_from_slice((listed.clone() + &err).as_bytes());
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let plan = listed.as_array().unwrap().iter().find(|k| k["label"] == "chatgpt").expect("the plan is listed");
    assert_eq!(
        (&plan["provider"], &plan["account_id"], &plan["plan_type"]),
        (&json!("chatgpt"), &json!(ACCOUNT), &json!("plus"))
    );

    // A second import of the same login is the plan already in the pool.
    let (ok, again, err) = m.cli(&["keys", "import", "--chatgpt", "--yes", "--label", "plan2"]).await;
    printed.extend_from_slice((again.clone() + &err).as_bytes());
    assert!(ok && again.contains("chatgpt"), "{again}{err}");

    // Served by the real binary: the turn goes to the plan's backend.
    let keymux = m.gateway().await;
    let (status, body) = send_turn(&keymux.base, "hello plan").await;
    printed.extend_from_slice(body.as_bytes());
    assert_eq!(status, 200, "{body}");
    let served: Vec<_> = sim.log().into_iter().filter(|e| e.path.ends_with("/responses")).collect();
    assert_eq!(served.last().and_then(|e| e.key.clone()).as_deref(), Some(PLAN_KEY), "{served:?}");
    let keys = Admin::new(&keymux.root).get_json("/keys").await;
    printed.extend_from_slice(keys.to_string().as_bytes());
    printed.extend_from_slice(keymux.stop().await.as_bytes());
    assert_no_token("the output", &printed, &secrets);
    let mut files = Vec::new();
    every_file(home.path(), &mut files);
    for (name, bytes) in files.iter().filter(|(name, _)| Path::new(name) != auth) {
        assert_no_token(name, bytes, &secrets);
    }
    let (ok, _, err) = m.cli(&["keys", "remove", "chatgpt"]).await;
    assert!(ok, "{err}");
}

/// Once imported, Keymux owns the login: `keymux setup codex --import-key` hands the ChatGPT login in
/// Codex's `auth.json` to Keymux as the plan and puts Keymux's client token in its place, so Codex no
/// longer spends the refresh token Keymux now refreshes with. Nothing prints a token; only Codex's file
/// as it was (the backup Undo restores) still holds one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_codex_hands_the_login_to_keymux_and_codex_gets_the_client_token() {
    let m = CliHome::start("setup", false).await;
    let (sim, home) = (&m.sim, &m.home);
    let tokens = sim.chatgpt_tokens().unwrap();
    let secrets = token_parts(&tokens);
    let auth = codex_auth(&m.codex_home, &tokens);
    let mut printed = Vec::new();

    // Without --import-key the login stays, and the refusal says how to hand it over.
    let (ok, out, err) = m.cli(&["setup", "codex", "--yes"]).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(!ok && err.contains("--import-key"), "{out}{err}");

    let (ok, out, err) = m.cli(&["setup", "codex", "--import-key", "--yes"]).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(ok, "{out}{err}");
    assert!(out.contains("as your plan as 'chatgpt'"), "{out}");
    let (ok, listed, err) = m.cli(&["keys", "list", "--json"]).await;
    printed.extend_from_slice((listed.clone() + &err).as_bytes());
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let plan = listed.as_array().unwrap().iter().find(|k| k["label"] == "chatgpt").expect("the plan is listed");
    assert_eq!((&plan["provider"], &plan["account_id"]), (&json!("chatgpt"), &json!(ACCOUNT)));

    let now: Value = serde_json::from_slice(&std::fs::read(&auth).unwrap()).unwrap();
    assert_eq!(now["auth_mode"], "apikey", "{now}");
    let token = now["OPENAI_API_KEY"].as_str().unwrap_or_default().to_owned();
    assert!(token.starts_with("km-"), "Codex holds Keymux's client token: {now}");
    assert!(now.get("tokens").is_none(), "the login left Codex's file: {now}");

    // Codex's next turn, with what its file holds now, is served on the plan.
    let keymux = m.gateway().await;
    let r = post_as(&client(), &format!("{}/responses", keymux.base), &token, &[], &turn("hello from codex"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    printed.extend_from_slice(body.as_bytes());
    assert_eq!(status, 200, "{body}");
    let served: Vec<_> = sim.log().into_iter().filter(|e| e.path.ends_with("/responses")).collect();
    assert_eq!(served.last().and_then(|e| e.key.clone()).as_deref(), Some(PLAN_KEY), "{served:?}");
    printed.extend_from_slice(keymux.stop().await.as_bytes());

    assert_no_token("the output", &printed, &secrets);
    let mut files = Vec::new();
    every_file(home.path(), &mut files);
    let backups = files.iter().filter(|(name, _)| name.contains("auth.json.")).count();
    assert_eq!(backups, 1, "Codex's file as it was is kept once, for Undo");
    for (name, bytes) in files.iter().filter(|(name, _)| !name.contains("auth.json.")) {
        assert_no_token(name, bytes, &secrets);
    }
    let (ok, _, err) = m.cli(&["keys", "remove", "chatgpt"]).await;
    assert!(ok, "{err}");
}

/// A login of the plan's account as Codex keeps it, its access token expiring at `exp` (claims read,
/// never verified, as Keymux reads them).
fn login_at(dir: &Path, exp: u64, refresh: &str) -> Vec<String> {
    use base64::Engine as _;
    let part = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let auth = json!({"chatgpt_account_id": ACCOUNT, "chatgpt_plan_type": "plus"});
    let jwt = |claims: Value| format!("{}.{}.sig{exp}", part(&json!({"alg": "RS256"})), part(&claims));
    let tokens = ChatgptTokens {
        id_token: jwt(json!({"exp": exp, "https://api.openai.com/auth": auth})),
        access_token: jwt(json!({"exp": exp, "https://api.openai.com/auth": auth, "n": refresh})),
        refresh_token: refresh.to_owned(),
        account_id: ACCOUNT.to_owned(),
    };
    codex_auth(dir, &tokens);
    token_parts(&tokens)
}

/// Logging in to Codex again is how a plan whose login was refused comes back (the refusal says so):
/// importing the newer login of the same account renews the plan's in place, through the keychain
/// alone and through a running gateway; an older copy (Codex's file from before, whose refresh token
/// Keymux has spent since) changes nothing and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_login_of_the_plan_renews_it_and_an_older_copy_changes_nothing() {
    let m = CliHome::start("renew", true).await;
    let codex_home = &m.codex_home;
    let import = ["keys", "import", "--chatgpt", "--yes"];
    let (mut secrets, mut printed) = (Vec::new(), Vec::new());
    let t = 4_000_000_000;

    secrets.extend(login_at(codex_home, t, "rt-first-login-0001"));
    let (ok, out, err) = m.cli(&import).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(ok && out.contains("imported the plan as 'chatgpt'"), "{out}{err}");

    secrets.extend(login_at(codex_home, t + 3600, "rt-second-login-0002"));
    let (ok, out, err) = m.cli(&import).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(ok && out.contains("renewed the login of the plan 'chatgpt'"), "{out}{err}");

    // The first login again: older than the one kept now, so the plan keeps the second.
    login_at(codex_home, t, "rt-first-login-0001");
    let (ok, out, err) = m.cli(&import).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(ok && out.contains("as new or newer") && !out.contains("renewed"), "{out}{err}");

    // Through a running gateway: its refusal names the plan, and the renewal goes through it.
    let keymux = m.gateway().await;
    secrets.extend(login_at(codex_home, t + 7200, "rt-third-login-0003"));
    let (ok, out, err) = m.cli(&import).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(ok && out.contains("renewed the login of the plan 'chatgpt'"), "{out}{err}");
    let (ok, out, err) = m.cli(&import).await;
    printed.extend_from_slice((out.clone() + &err).as_bytes());
    assert!(ok && out.contains("as new or newer"), "the running gateway kept the third login: {out}{err}");
    let keys = Admin::new(&keymux.root).get_json("/keys").await;
    assert_eq!(keys.as_array().map(Vec::len), Some(1), "one plan, renewed in place: {keys}");
    printed.extend_from_slice(keys.to_string().as_bytes());
    printed.extend_from_slice(keymux.stop().await.as_bytes());

    assert_no_token("the output", &printed, &secrets);
    let (ok, _, err) = m.cli(&["keys", "remove", "chatgpt"]).await;
    assert!(ok, "{err}");
}

/// The harness's plan key: its login in the memory store, the backend and auth server the simulator's.
pub(crate) async fn harness_with_plan(spec: PlanSpec) -> (Harness, ChatgptTokens) {
    harness_with_plan_and(spec, |_| {}).await
}

async fn harness_with_plan_and(
    spec: PlanSpec,
    tweak: impl FnOnce(&mut keymux::config::Config),
) -> (Harness, ChatgptTokens) {
    harness_with_keys(spec, true, tweak).await
}

/// The plan, and the API key `a1` when `api`.
async fn harness_with_keys(
    spec: PlanSpec,
    api: bool,
    tweak: impl FnOnce(&mut keymux::config::Config),
) -> (Harness, ChatgptTokens) {
    let sim = Sim::start(sim_config(spec)).await.unwrap();
    let tokens = sim.chatgpt_tokens().unwrap();
    let login = keymux_core::provider::chatgpt::Login {
        id_token: tokens.id_token.clone(),
        access_token: tokens.access_token.clone(),
        refresh_token: tokens.refresh_token.clone(),
        account_id: tokens.account_id.clone(),
    };
    let plan = TestKey { provider: ProviderId::Chatgpt, ..key("plan", login.to_secret().expose()) };
    let (base, auth) = (sim.chatgpt_base_url(), sim.chatgpt_auth_url());
    let keys = if api { vec![plan, key("a1", API_KEY)] } else { vec![plan] };
    let h = Harness::start_on(sim, &keys, |c| {
        c.chatgpt_base_url = base;
        c.chatgpt_auth_url = auth;
        tweak(c);
    })
    .await;
    (h, tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_on_the_plan_reaches_the_backend_in_the_shape_it_takes() {
    let (h, _) = harness_with_plan(PlanSpec::new(ACCOUNT)).await;
    let mut feed = h.gateway.events().subscribe();
    let (status, body) = send_turn(&h.base, "hello").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("response.completed"), "{body}");
    // The subscription includes what the plan serves: it costs nothing more, and is not "unpriced".
    let record = next_record(&mut feed).await;
    assert!(record.usage.is_some(), "the plan's answer reported its usage");
    assert_eq!((record.cost_usd, record.unpriced), (Some(keymux::spend::Usd::ZERO), None));
    let entry = h.sim.log().into_iter().rev().find(|e| e.path.ends_with("/responses")).unwrap();
    assert_eq!((entry.path.as_str(), entry.key.as_deref()), ("/backend-api/codex/responses", Some(PLAN_KEY)));
    let header = |name: &str| entry.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(header("chatgpt-account-id").as_deref(), Some(ACCOUNT));
    let plan = h.status().into_iter().find(|k| k.label == "plan").unwrap();
    assert_eq!(plan.org.as_deref(), Some("chatgpt-acct-plan-7f3a"), "the plan is an organization of its own");
    assert_eq!(plan.plan.map(|p| p.account_id).as_deref(), Some(ACCOUNT));
    // Chat Completions never go to the plan: its backend has no such endpoint.
    let chat = json!({"model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&client(), &format!("{}/chat/completions", h.base), &[], &chat).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let last = h.sim.log().into_iter().last().unwrap();
    assert_eq!(last.key.as_deref(), Some(API_KEY));
    let record = next_record(&mut feed).await;
    assert!(record.cost_usd.is_some_and(|c| c > keymux::spend::Usd::ZERO), "an API key's answer is priced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_token_is_refreshed_once_ahead_of_expiry_and_no_request_fails() {
    let lifetime = Duration::from_secs(3600);
    let (h, first) = harness_with_plan(PlanSpec::new(ACCOUNT).token_lifetime(lifetime)).await;
    assert_eq!(send_turn(&h.base, "before").await.0, 200);
    assert_eq!(h.sim.chatgpt_refreshes(), 0, "a token with an hour left is not refreshed");

    // Four minutes before it expires: inside the refresh margin, the token still valid upstream.
    h.advance(lifetime - Duration::from_secs(240));
    let turns = (0..4).map(|n| {
        let base = h.base.clone();
        async move { send_turn(&base, &format!("turn {n}")).await }
    });
    for (status, body) in futures::future::join_all(turns).await {
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(h.sim.chatgpt_refresh_requests(), 1, "four requests at once asked for one refresh");
    assert_eq!(h.sim.chatgpt_refreshes(), 1);
    let stored = h.gateway.settings().store().get(&account::key("k_plan")).unwrap().expect("the login is kept");
    let kept = keymux_core::provider::chatgpt::Login::from_secret(&stored).unwrap();
    let now = h.sim.chatgpt_tokens().unwrap();
    assert_eq!(kept.access_token, now.access_token, "the new tokens are written back to the store");
    assert_ne!(kept.refresh_token, first.refresh_token);

    // Past the first token's expiry: the new one serves, with no failed attempt on the way.
    h.advance(Duration::from_secs(600));
    let mut feed = h.gateway.events().subscribe();
    assert_eq!(send_turn(&h.base, "after").await.0, 200);
    let record = next_record(&mut feed).await;
    assert!(record.attempts.iter().all(|a| a.failure.is_none()), "{:?}", record.attempts);
    assert_eq!(h.sim.chatgpt_refreshes(), 1);
}

/// A plan in a pool with a proxy goes out through it for everything: its turns, and the refresh of its
/// login (the auth server is as much the plan's provider as its backend is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_in_a_pool_with_a_proxy_refreshes_its_login_through_the_proxy_too() {
    let proxy = support::egress::TestProxy::start().await;
    let lifetime = Duration::from_secs(3600);
    let pool = format!("name = \"work\"\nkeys = [\"plan\"]\nproxy = \"{}\"", proxy.url());
    let pool: keymux::pools::PoolConfig = toml::from_str(&pool).unwrap();
    let spec = PlanSpec::new(ACCOUNT).token_lifetime(lifetime);
    let (h, _) = harness_with_keys(spec, false, move |c| c.pools = vec![pool]).await;
    assert_eq!(send_turn(&h.base, "before").await.0, 200);
    h.advance(lifetime - Duration::from_secs(240));
    assert_eq!(send_turn(&h.base, "after").await.0, 200);
    assert_eq!(h.sim.chatgpt_refreshes(), 1, "the login was refreshed");
    let log = proxy.log();
    let token_url = format!("{}/oauth/token", h.sim.chatgpt_auth_url().trim_end_matches('/'));
    assert!(log.iter().any(|p| p.method == "POST" && p.target == token_url), "the refresh went through it: {log:?}");
    let turns = log.iter().filter(|p| p.target.ends_with("/backend-api/codex/responses")).count();
    assert_eq!(turns, 2, "both turns went through the proxy");
    // (The simulator's log holds the backend's requests; the token endpoint's are counted apart.)
    let backend = log.iter().filter(|p| p.target != token_url).count();
    assert_eq!(h.sim.log().len(), backend, "nothing reached the backend but through the proxy");
}

/// The next change a ChatGPT plan went through (used up, back) on an event feed.
async fn next_plan_change(feed: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<Envelope>>) -> KeyChange {
    let wait = async {
        loop {
            match feed.recv().await {
                Ok(envelope) => match &envelope.event {
                    Event::Key(k) if matches!(k.change, KeyChange::PlanUsedUp { .. } | KeyChange::PlanBack) => {
                        return k.change;
                    }
                    _ => {}
                },
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => panic!("event feed closed: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait).await.expect("a plan change within 30 s")
}

/// The key the simulator saw serve the latest turn of `session`.
fn served_by(sim: &Sim, session: &Session) -> Option<String> {
    let turn = format!("{}:{}", session.id, session.turn);
    let seen = sim.log().into_iter().rev().find(|e| e.headers.iter().any(|(k, v)| k == "x-test-turn" && *v == turn));
    seen.and_then(|e| (e.status == 200).then_some(e.key).flatten())
}

async fn turn_on(h: &Harness, session: &mut Session) -> Option<String> {
    let result = session.turn(&client(), &h.base, false).await;
    assert_eq!((result.status, result.error_code.as_deref()), (200, None), "{}", result.body);
    served_by(&h.sim, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_first_then_api_keys_while_it_is_used_up_then_the_plan_again_with_no_failed_turn() {
    let spec = PlanSpec::new(ACCOUNT).token_lifetime(Duration::from_secs(30 * 86_400));
    let (h, _) = harness_with_plan(spec).await;
    let mut on_plan = Session::new(Shape::Codex, 1, true);
    for _ in 0..2 {
        assert_eq!(turn_on(&h, &mut on_plan).await.as_deref(), Some(PLAN_KEY), "new sessions start on the plan");
    }

    // The plan's 5-hour window runs out: the session on it goes on with an API key (its plan-bound
    // reasoning dropped), and new sessions start on the API keys.
    h.sim.exhaust_plan();
    let mut feed = h.gateway.events().subscribe();
    assert_eq!(turn_on(&h, &mut on_plan).await.as_deref(), Some(API_KEY), "rescued onto an API key");
    let record = next_record(&mut feed).await;
    let reasons = serde_json::to_value(&record.routed.decision.reasons).unwrap().to_string();
    assert!(reasons.contains("rescued") && reasons.contains("plan_exhausted"), "{reasons}");
    assert_eq!(turn_on(&h, &mut on_plan).await.as_deref(), Some(API_KEY), "and stays there");
    let record = next_record(&mut feed).await;
    let reasons = serde_json::to_value(&record.routed.decision.reasons).unwrap().to_string();
    assert!(reasons.contains("still_rescued") && reasons.contains("pinned_to_org"), "{reasons}");
    let mut overflow = Session::new(Shape::Codex, 2, true);
    assert_eq!(turn_on(&h, &mut overflow).await.as_deref(), Some(API_KEY), "a new session overflows");
    let record = next_record(&mut feed).await;
    let reasons = serde_json::to_value(&record.routed.decision.reasons).unwrap().to_string();
    assert!(reasons.contains("plan_exhausted"), "{reasons}");

    // The window resets: new sessions go to the plan again; a session that began on an API key stays.
    h.advance(Duration::from_secs(5 * 3600));
    let mut back = Session::new(Shape::Codex, 3, true);
    assert_eq!(turn_on(&h, &mut back).await.as_deref(), Some(PLAN_KEY), "back on the plan after the reset");
    assert_eq!(turn_on(&h, &mut overflow).await.as_deref(), Some(API_KEY), "never moved to the plan");
    let unreadable =
        h.sim.log().iter().filter(|e| e.error_code.as_deref() == Some("invalid_encrypted_content")).count();
    assert_eq!(unreadable, 0, "no request reached an organization that could not read it");
}

/// The backend's headers say when the plan is used up before any 429 does: the answer that used the
/// 5-hour window's last request reports it at 100 % with its reset, and from then on new sessions go
/// straight to the API keys (`plan_exhausted`), the plan not tried for a refusal first, until the reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_reported_used_up_sends_new_sessions_to_api_keys_without_trying_the_plan() {
    let spec = PlanSpec::new(ACCOUNT).windows(2, 1_000_000).token_lifetime(Duration::from_secs(30 * 86_400));
    let (h, _) = harness_with_plan(spec).await;
    let plan_requests = || h.sim.log().iter().filter(|e| e.key.as_deref() == Some(PLAN_KEY)).count();
    let mut first = Session::new(Shape::Codex, 11, true);
    assert_eq!(turn_on(&h, &mut first).await.as_deref(), Some(PLAN_KEY));
    let mut feed = h.gateway.events().subscribe();
    let mut second = Session::new(Shape::Codex, 12, true);
    assert_eq!(turn_on(&h, &mut second).await.as_deref(), Some(PLAN_KEY), "the window's last request");
    let tried = plan_requests();
    // Told once, as the answer reports it, with the window's reset (the tray's notification).
    let until = match next_plan_change(&mut feed).await {
        KeyChange::PlanUsedUp { until_unix_ms } => until_unix_ms,
        other => panic!("the plan's running out was not told: {other:?}"),
    };
    let left = until.saturating_sub(h.gateway.clock().unix_ms());
    assert!((4 * 3_600_000..=5 * 3_600_000).contains(&left), "told with its reset: {left} ms");

    let mut feed = h.gateway.events().subscribe();
    let mut third = Session::new(Shape::Codex, 13, true);
    assert_eq!(turn_on(&h, &mut third).await.as_deref(), Some(API_KEY), "a new session overflows");
    let record = next_record(&mut feed).await;
    let reasons = serde_json::to_value(&record.routed.decision.reasons).unwrap().to_string();
    assert!(reasons.contains("plan_exhausted"), "{reasons}");
    assert_eq!(plan_requests(), tried, "the plan was not tried for its 429 first");

    h.advance(Duration::from_secs(5 * 3600 + 1));
    h.gateway.tick();
    assert_eq!(next_plan_change(&mut feed).await, KeyChange::PlanBack, "its coming back is told");
    let mut fourth = Session::new(Shape::Codex, 14, true);
    assert_eq!(turn_on(&h, &mut fourth).await.as_deref(), Some(PLAN_KEY), "back on the plan after the reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lost_org_fail_a_session_on_a_used_up_plan_gets_a_429_with_its_reset() {
    let spec = PlanSpec::new(ACCOUNT).token_lifetime(Duration::from_secs(30 * 86_400));
    let (h, _) = harness_with_plan_and(spec, |c| c.affinity.lost_org = keymux::router::LostOrgPolicy::Fail).await;
    let mut on_plan = Session::new(Shape::Codex, 4, true);
    assert_eq!(turn_on(&h, &mut on_plan).await.as_deref(), Some(PLAN_KEY));
    h.sim.exhaust_plan();
    let body = on_plan.next_body(false);
    let r = post(&client(), &format!("{}/responses", h.base), &[], &body).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).unwrap();
    assert!((4 * 3600..=5 * 3600).contains(&retry), "retry-after is the plan's reset: {retry}");
    let text = r.text().await.unwrap();
    assert!(!text.contains("invalid_encrypted_content"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_run_offer_of_the_dashboard_and_tray_includes_the_plan() {
    assert!(
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(),
        "the keychain tests need a Secret Service in a D-Bus session: run them through `scripts/test`"
    );
    let sim = Sim::start(sim_config(PlanSpec::new(ACCOUNT))).await.unwrap();
    let tokens = sim.chatgpt_tokens().unwrap();
    let secrets = token_parts(&tokens);
    let home = tempfile::tempdir().unwrap();
    codex_auth(&home.path().join(".codex"), &tokens);
    let cfg = home.path().join("config.toml");
    let service = format!("keymux-chatgpt-offer-{}", std::process::id());
    std::fs::write(&cfg, format!("keychain_service = \"{service}\"\nupstream = \"{}\"\n", sim.base_url())).unwrap();
    let mut env = base_env(home.path());
    env.push(("KEYMUX_CHATGPT_BASE_URL".into(), sim.chatgpt_base_url()));
    env.push(("KEYMUX_CHATGPT_AUTH_URL".into(), sim.chatgpt_auth_url()));
    env.push(("KEYMUX_CLIENT_TOKEN".into(), TOKEN.into()));
    let keymux = Keymux::spawn(&["--config", cfg.to_str().unwrap()], &env).await;
    let admin = Admin::new(&keymux.root);
    let mut printed = Vec::new();

    let offer = admin.get_json("/import").await;
    printed.extend_from_slice(offer.to_string().as_bytes());
    let plan = offer["keys"].as_array().unwrap().iter().find(|k| k["label"] == "chatgpt").expect("the plan is offered");
    assert_eq!(plan["masked"], "ChatGPT plan", "{offer}");
    assert!(plan["source"].as_str().unwrap().contains(&format!("{ACCOUNT} (plus)")), "{offer}");
    assert!(plan["file"].is_null(), "Codex's login stays in its file: {offer}");
    let (status, done) = admin.post_json("/import", Some(json!({ "fingerprints": [plan["fingerprint"]] }))).await;
    printed.extend_from_slice(done.to_string().as_bytes());
    assert_eq!((status, &done["imported"]), (200, &json!(["chatgpt"])), "{done}");
    let keys = admin.get_json("/keys").await;
    printed.extend_from_slice(keys.to_string().as_bytes());
    let pooled = keys.as_array().unwrap().iter().find(|k| k["label"] == "chatgpt").expect("pooled");
    assert_eq!((&pooled["provider"], &pooled["plan"]["account_id"]), (&json!("chatgpt"), &json!(ACCOUNT)));
    let again = admin.get_json("/import").await;
    let offered = again["keys"].as_array().unwrap().iter().find(|k| k["source"] == plan["source"]).unwrap().clone();
    assert_eq!(offered["pooled_as"], "chatgpt", "the plan is known to be pooled: {again}");

    let (status, body) = send_turn(&keymux.base, "hello").await;
    printed.extend_from_slice(body.as_bytes());
    assert_eq!(status, 200, "{body}");
    let last = sim.log().into_iter().rev().find(|e| e.path.ends_with("/responses")).unwrap();
    assert_eq!(last.key.as_deref(), Some(PLAN_KEY));
    let id = pooled["id"].as_str().unwrap().to_owned();
    assert_eq!(admin.call(reqwest::Method::DELETE, &format!("/keys/{id}"), None).await.0, 204);
    printed.extend_from_slice(keymux.stop().await.as_bytes());
    assert_no_token("what the gateway answered and printed", &printed, &secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_only_the_plan_could_take_but_cannot_is_refused_with_what_to_do() {
    let (h, _) = harness_with_keys(PlanSpec::new(ACCOUNT), false, |_| {}).await;
    let whole = json!({"model": "gpt-5.5", "input": "hi", "stream": false});
    let chat = json!({"model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]});
    for (path, body) in [("responses", &whole), ("chat/completions", &chat)] {
        let r = post(&client(), &format!("{}/{path}", h.base), &[], body).send().await.unwrap();
        assert_eq!(r.status(), 503, "{path}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "keymux_plan_cannot_serve", "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("keymux keys add"), "{answer}");
    }
    assert_eq!(send_turn(&h.base, "streamed").await.0, 200, "a streamed turn is the plan's to serve");
    assert!(h.sim.log().iter().all(|e| !e.path.starts_with("/v1/")), "nothing went to the API");
}
