//! The live state of the ChatGPT plan the simulator serves (see `chatgpt` for its endpoints): the
//! login it issued and rotates, the access tokens still accepted, and its two usage windows, counted in
//! requests. Part of the shared state, so it imports nothing that serves requests.

use std::sync::Mutex;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::config::PlanSpec;
use crate::util::{lock, random_hex};

/// Where a token's ChatGPT claims are.
const AUTH_CLAIMS: &str = "https://api.openai.com/auth";
/// Access tokens still accepted after a refresh issued newer ones (they live until their `exp`).
const KEPT_TOKENS: usize = 4;
/// Logins remembered for [`PlanState::issued`].
const KEPT_LOGINS: usize = 64;
/// The windows' lengths, minutes.
const PRIMARY_MINUTES: u64 = 300;
const SECONDARY_MINUTES: u64 = 7 * 24 * 60;

/// A login the plan issued.
#[derive(Clone, Debug)]
pub struct Tokens {
    /// The OpenID token.
    pub id_token: String,
    /// The bearer token.
    pub access_token: String,
    /// The token that gets new ones.
    pub refresh_token: String,
    /// The account.
    pub account_id: String,
}

/// One usage window, counted in requests from its start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) minutes: u64,
    limit: u64,
    pub(crate) used: u64,
    start_unix: u64,
}

impl Window {
    fn new(minutes: u64, limit: u64) -> Self {
        Window { minutes, limit, used: 0, start_unix: 0 }
    }

    /// Starts it again when its time is up (a window starts at its first use).
    fn roll(&mut self, now: u64) {
        if self.used == 0 || now >= self.resets_at() {
            self.used = 0;
            self.start_unix = now;
        }
    }

    pub(crate) fn resets_at(&self) -> u64 {
        self.start_unix + self.minutes * 60
    }

    pub(crate) fn exhausted(&self) -> bool {
        self.used >= self.limit
    }

    pub(crate) fn percent(&self) -> f64 {
        (self.used as f64 * 100.0 / self.limit.max(1) as f64).min(100.0)
    }
}

/// The plan's live state: its login and its windows.
#[derive(Debug)]
pub(crate) struct PlanState {
    pub spec: PlanSpec,
    /// The organization its requests are served in.
    pub org: usize,
    login: Mutex<Login>,
    windows: Mutex<[Window; 2]>,
}

#[derive(Debug)]
struct Login {
    current: Tokens,
    /// Issued access tokens and their expiry (the newest last), bounded.
    access: Vec<(String, u64)>,
    /// Refreshes granted, and refresh requests made (granted or not).
    refreshes: u64,
    asked: u64,
    /// Every login issued, the first included (bounded: the latest `KEPT_LOGINS`).
    issued: Vec<Tokens>,
}

impl PlanState {
    pub(crate) fn new(spec: PlanSpec, org: usize, now_unix: u64) -> Self {
        let (tokens, exp) = issue(&spec, now_unix);
        let windows = [
            Window::new(PRIMARY_MINUTES, spec.primary_requests),
            Window::new(SECONDARY_MINUTES, spec.secondary_requests),
        ];
        let login = Login {
            access: vec![(tokens.access_token.clone(), exp)],
            issued: vec![tokens.clone()],
            current: tokens,
            refreshes: 0,
            asked: 0,
        };
        PlanState { spec, org, login: Mutex::new(login), windows: Mutex::new(windows) }
    }

    /// The login as it stands (what a test writes into Codex's `auth.json`).
    pub(crate) fn tokens(&self) -> Tokens {
        lock(&self.login).current.clone()
    }

    /// Every login issued (the latest 64), so a test can look for each of their tokens.
    pub(crate) fn issued(&self) -> Vec<Tokens> {
        lock(&self.login).issued.clone()
    }

    /// How many refreshes were granted, and how many were asked for.
    pub(crate) fn refreshes(&self) -> (u64, u64) {
        let login = lock(&self.login);
        (login.refreshes, login.asked)
    }

    /// When an access token the plan issued (and still accepts) expires; `None` for any other token.
    pub(crate) fn expiry(&self, access_token: &str) -> Option<u64> {
        lock(&self.login).access.iter().find(|(t, _)| t == access_token).map(|(_, exp)| *exp)
    }

    /// A refresh asked for with `refresh_token`: new tokens when it is the current one (the old access
    /// tokens stay accepted until they expire, the latest few), `None` when it is not (already used).
    /// Every request counts as asked.
    pub(crate) fn rotate(&self, refresh_token: &str, now: u64) -> Option<Tokens> {
        let mut login = lock(&self.login);
        login.asked += 1;
        if refresh_token != login.current.refresh_token {
            return None;
        }
        let (tokens, exp) = issue(&self.spec, now);
        login.access.push((tokens.access_token.clone(), exp));
        if login.access.len() > KEPT_TOKENS {
            login.access.remove(0);
        }
        login.current = tokens.clone();
        login.refreshes += 1;
        if login.issued.len() == KEPT_LOGINS {
            login.issued.remove(0);
        }
        login.issued.push(tokens.clone());
        Some(tokens)
    }

    /// The windows as they stand, nothing counted.
    pub(crate) fn windows(&self) -> [Window; 2] {
        *lock(&self.windows)
    }

    /// Counts one request in both windows, or says they are used up (nothing counted).
    pub(crate) fn take_use(&self, now: u64) -> Result<[Window; 2], [Window; 2]> {
        let mut windows = lock(&self.windows);
        windows.iter_mut().for_each(|w| w.roll(now));
        if windows.iter().any(Window::exhausted) {
            return Err(*windows);
        }
        windows.iter_mut().for_each(|w| w.used += 1);
        Ok(*windows)
    }

    /// Uses up the short window now (a test's shortcut to an exhausted plan).
    pub(crate) fn exhaust(&self, now: u64) {
        let mut windows = lock(&self.windows);
        windows[0].roll(now);
        windows[0].used = windows[0].limit;
    }
}

/// A JWT with these claims (signed with nothing a client checks).
fn jwt(claims: &Value) -> String {
    let part = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.{}", part(&json!({"alg": "RS256", "typ": "JWT"})), part(claims), random_hex(16))
}

/// A new login, and its access token's expiry.
fn issue(spec: &PlanSpec, now_unix: u64) -> (Tokens, u64) {
    let exp = now_unix + spec.token_lifetime.as_secs();
    let auth = json!({"chatgpt_account_id": spec.account_id, "chatgpt_plan_type": spec.plan_type});
    let tokens = Tokens {
        id_token: jwt(&json!({"exp": exp, "email": "plan@example.com", AUTH_CLAIMS: auth, "jti": random_hex(8)})),
        access_token: jwt(&json!({"exp": exp, AUTH_CLAIMS: auth, "jti": random_hex(8)})),
        refresh_token: format!("rt_{}", random_hex(24)),
        account_id: spec.account_id.clone(),
    };
    (tokens, exp)
}
