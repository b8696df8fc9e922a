//! Who may call what. Three credentials, three jobs, none working in another's place:
//!
//! * a **client token** spends keys on `/v1` and nothing else (`tokens`), in `authorization` or, for a
//!   client's login, in `x-keymux-token` (`oauth`, which issues it);
//! * a **dashboard session**: a token the page gets once for the code of a one-time login link
//!   (`keymux serve` prints one, `keymux dashboard` asks a running gateway for another, the tray opens
//!   one; a browser is handed it through a private page, `login_page`, which a code's `code_label`
//!   names and which goes when the code stops waiting: `take_spent_codes`; the tray's window waits on
//!   `watch_code` for its page to use its code), keeps in its tab's `sessionStorage` and sends in the `x-keymux-session` header. There is no
//!   cookie: a browser would send one to every port of 127.0.0.1, so any local dev server's page could
//!   use it. Storage is per origin, port included, and a foreign page cannot send the header without
//!   a CORS preflight, which Keymux never grants (so the header is also the CSRF proof). A session
//!   ends at logout, after `SESSION_IDLE` unused, and `SESSION_LIFETIME` after login however used,
//!   and what it opened ends with it (`SessionWatch`: the live event stream);
//! * an **admin credential**, kept in the keychain, with which the CLI talks to a running gateway, after
//!   it has made sure the gateway is Keymux: the gateway proves it knows the credential by answering a
//!   challenge with a keyed MAC, before the credential itself is ever sent. The MAC covers the address
//!   the connection reached (the gateway's own), so a relay on another port that forwards the challenge
//!   gets a proof for the wrong address, which the CLI rejects.
//!
//! The control API answers only to loopback `Host` names, and to no browser `Origin` but the gateway's
//! own and the Tauri webview's. Every table here is bounded.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use axum::http::{header, HeaderMap};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::time::Instant;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::secrets::Secret;

/// How long a login link works.
pub const LOGIN_CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// How long a dashboard session lasts without being used.
pub const SESSION_IDLE: Duration = Duration::from_secs(8 * 3600);
/// How long a dashboard session lasts at most, however much it is used.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Most login links not yet used.
pub const MAX_LOGIN_CODES: usize = 16;
/// Most codes no longer waiting whose login pages are yet to be removed (`take_spent_codes`).
const MAX_SPENT: usize = 4 * MAX_LOGIN_CODES;
/// Most dashboard sessions at once (one per browser or tray window).
pub const MAX_SESSIONS: usize = 32;
/// The header that carries the dashboard session.
pub const SESSION_HEADER: &str = "x-keymux-session";
/// The prefix of the admin credential.
pub const ADMIN_PREFIX: &str = "kma-";

/// Origins of the Tauri webview, which may call the control API like the gateway's own page.
const TAURI_ORIGINS: [&str; 3] = ["tauri://localhost", "http://tauri.localhost", "https://tauri.localhost"];

type Digest32 = [u8; 32];

fn digest(value: &str) -> Digest32 {
    Sha256::digest(value.as_bytes()).into()
}

/// What a login code is called where it must not be shown (its login page's file name, `login_page`):
/// the first half of its SHA-256, as this table knows it, in hex.
pub fn code_label(code: &str) -> String {
    label(&digest(code))
}

fn label(digest: &Digest32) -> String {
    hex::encode(&digest[..16])
}

struct Code {
    digest: Digest32,
    expires: Instant,
    /// Told whether a page used the code, when it stops waiting (`watch_code`).
    told: Option<tokio::sync::oneshot::Sender<bool>>,
}

/// What became of a login code, for whoever handed its link to a page (the tray's window waits on it
/// for its page to log in): `Access::watch_code`.
pub struct CodeWatch(tokio::sync::oneshot::Receiver<bool>);

impl CodeWatch {
    /// Resolves when the code stops waiting: true when a page used it, false when it expired (told
    /// when the table next looks: a new code, the gateway's sweep), was pushed out, or the gateway went.
    pub async fn used(self) -> bool {
        self.0.await.unwrap_or(false)
    }
}

struct Session {
    digest: Digest32,
    started: Instant,
    last_used: Instant,
    /// Cancelled when the session leaves the table, however it goes (logout, pushed out, expired).
    ended: CancellationToken,
}

impl Session {
    fn new(digest: Digest32, now: Instant) -> Self {
        Self { digest, started: now, last_used: now, ended: CancellationToken::new() }
    }

    fn live(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_used) < SESSION_IDLE
            && now.saturating_duration_since(self.started) < SESSION_LIFETIME
    }

    /// When the session ends unless it is used again before.
    fn ends_at(&self) -> Instant {
        crate::clock::later(self.last_used, SESSION_IDLE).min(crate::clock::later(self.started, SESSION_LIFETIME))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.ended.cancel();
    }
}

/// A dashboard session as something a request opened watches, to end when the session does: at
/// logout, when it is pushed out, or when it expires. It holds no credential.
pub struct SessionWatch {
    digest: Digest32,
    ended: CancellationToken,
}

impl SessionWatch {
    /// Resolves when the session is over: at once when it leaves the table, and at its expiry on
    /// `clock`, looked at again then (a session used meanwhile lasts longer). Never polls.
    pub async fn over(&self, access: &Access, clock: &Clock) {
        let expired = async {
            while let Some(ends_at) = access.session_ends(&self.digest, clock.now()) {
                clock.sleep_until(ends_at).await;
            }
        };
        tokio::select! {
            () = self.ended.cancelled() => {}
            () = expired => {}
        }
    }
}

/// Who a request came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The CLI (or a tool) with the admin credential.
    Admin,
    /// A dashboard session.
    Dashboard,
}

/// Why a caller was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No credential for the control API.
    NoCredential,
    /// A `/v1` client token was presented to the control API.
    ClientToken,
    /// The credential is not (or no longer) valid.
    Invalid,
}

/// The gateway's access state.
pub struct Access {
    admin: ArcSwapOption<Digest32>,
    /// Keys the challenge MAC.
    admin_secret: ArcSwapOption<Secret>,
    codes: Mutex<VecDeque<Code>>,
    /// Codes no longer waiting (used, expired, pushed out), until `take_spent_codes` says which.
    spent: Mutex<VecDeque<Digest32>>,
    sessions: Mutex<VecDeque<Session>>,
}

impl Default for Access {
    fn default() -> Self {
        Self {
            admin: ArcSwapOption::empty(),
            admin_secret: ArcSwapOption::empty(),
            codes: Mutex::default(),
            spent: Mutex::default(),
            sessions: Mutex::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Access {
    /// Accepts `admin` as the admin credential (none: the CLI cannot reach this gateway).
    pub fn set_admin(&self, admin: Option<&Secret>) {
        self.admin.store(admin.map(|a| std::sync::Arc::new(digest(a.expose()))));
        self.admin_secret.store(admin.map(|a| std::sync::Arc::new(a.clone())));
    }

    /// Whether `presented` is the admin credential.
    pub fn is_admin(&self, presented: &str) -> bool {
        self.admin.load().as_deref().is_some_and(|known| known.ct_eq(&digest(presented)).into())
    }

    /// Answers a client's challenge that reached this gateway at `reached` (the address the connection
    /// was accepted on): a MAC of both nonces and that address under the admin credential, which only a
    /// gateway that knows the credential can make. `None` when there is no admin credential.
    pub fn answer_challenge(&self, client_nonce: &str, reached: SocketAddr) -> Option<(String, String)> {
        let secret = self.admin_secret.load_full()?;
        let server_nonce = crate::secrets::generate("").expose().to_owned();
        let mac = challenge_mac(&secret, client_nonce, &server_nonce, reached);
        Some((server_nonce, mac))
    }

    /// A fresh one-time login code (the secret part of a login link).
    pub fn issue_login(&self, now: Instant) -> Secret {
        let code = crate::secrets::generate("");
        let mut codes = lock(&self.codes);
        self.spend_expired(&mut codes, now);
        if codes.len() == MAX_LOGIN_CODES {
            codes.pop_front().into_iter().for_each(|oldest| self.spend(oldest, false));
        }
        let expires = crate::clock::later(now, LOGIN_CODE_TTL);
        codes.push_back(Code { digest: digest(code.expose()), expires, told: None });
        code
    }

    /// A watch on a waiting login code (`None` if it does not wait): what became of it, once it stops
    /// waiting. A second watch on the same code takes the first one's place.
    pub fn watch_code(&self, code: &str, now: Instant) -> Option<CodeWatch> {
        let wanted = digest(code);
        let mut codes = lock(&self.codes);
        let found = codes.iter_mut().find(|c| bool::from(c.digest.ct_eq(&wanted)) && c.expires > now)?;
        let (tell, watch) = tokio::sync::oneshot::channel();
        found.told = Some(tell);
        Some(CodeWatch(watch))
    }

    /// The codes that stopped waiting (used, expired, pushed out) since last asked, by their labels
    /// (`code_label`): their login pages can go.
    pub fn take_spent_codes(&self, now: Instant) -> Vec<String> {
        self.spend_expired(&mut lock(&self.codes), now);
        lock(&self.spent).drain(..).map(|d| label(&d)).collect()
    }

    /// Moves the expired codes out of `codes` (locked by the caller) to the spent ones.
    fn spend_expired(&self, codes: &mut VecDeque<Code>, now: Instant) {
        if codes.iter().all(|c| c.expires > now) {
            return;
        }
        let (waiting, expired): (VecDeque<Code>, VecDeque<Code>) =
            std::mem::take(codes).into_iter().partition(|c| c.expires > now);
        *codes = waiting;
        expired.into_iter().for_each(|c| self.spend(c, false));
    }

    /// Keeps a code that stopped waiting until `take_spent_codes` (the oldest go past `MAX_SPENT`:
    /// their pages wait for the sweep of old pages), and tells its watch whether it was `used`.
    fn spend(&self, code: Code, used: bool) {
        if let Some(told) = code.told {
            let _ = told.send(used);
        }
        let mut spent = lock(&self.spent);
        if spent.len() == MAX_SPENT {
            spent.pop_front();
        }
        spent.push_back(code.digest);
    }

    /// Whether a login code is waiting to be used (without using it).
    pub fn code_waiting(&self, code: &str, now: Instant) -> bool {
        let wanted = digest(code);
        lock(&self.codes).iter().any(|c| bool::from(c.digest.ct_eq(&wanted)) && c.expires > now)
    }

    /// Exchanges a login code, once, for a dashboard session token.
    pub fn redeem(&self, code: &str, now: Instant) -> Option<Secret> {
        let wanted = digest(code);
        {
            let mut codes = lock(&self.codes);
            let at = codes.iter().position(|c| bool::from(c.digest.ct_eq(&wanted)))?;
            let found = codes.remove(at)?;
            let expired = found.expires <= now;
            self.spend(found, !expired);
            if expired {
                return None;
            }
        }
        let token = crate::secrets::generate("");
        let mut sessions = lock(&self.sessions);
        sessions.retain(|s| s.live(now));
        if sessions.len() == MAX_SESSIONS {
            sessions.pop_front();
        }
        sessions.push_back(Session::new(digest(token.expose()), now));
        Some(token)
    }

    /// The live session a request carries, to watch while what it opened lasts (`None` without one:
    /// the admin credential's calls end only with the gateway).
    pub fn watch_session(&self, headers: &HeaderMap, now: Instant) -> Option<SessionWatch> {
        let wanted = digest(session_token(headers)?);
        let sessions = lock(&self.sessions);
        let found = sessions.iter().find(|s| bool::from(s.digest.ct_eq(&wanted)) && s.live(now))?;
        Some(SessionWatch { digest: found.digest, ended: found.ended.clone() })
    }

    /// When the session with `digest` ends unless used again, if it is still live.
    fn session_ends(&self, digest: &Digest32, now: Instant) -> Option<Instant> {
        let sessions = lock(&self.sessions);
        sessions.iter().find(|s| s.digest == *digest && s.live(now)).map(Session::ends_at)
    }

    /// Whether a session token is live, refreshing its idle time if it is.
    fn session_live(&self, token: &str, now: Instant) -> bool {
        let wanted = digest(token);
        let mut sessions = lock(&self.sessions);
        let found = sessions.iter_mut().find(|s| bool::from(s.digest.ct_eq(&wanted)) && s.live(now));
        found.map(|s| s.last_used = now).is_some()
    }

    /// Ends the session a request carries (logout); whether there was one.
    pub fn end_session(&self, headers: &HeaderMap) -> bool {
        let Some(token) = session_token(headers) else { return false };
        let wanted = digest(token);
        let mut sessions = lock(&self.sessions);
        let before = sessions.len();
        sessions.retain(|s| !bool::from(s.digest.ct_eq(&wanted)));
        sessions.len() < before
    }

    /// Who is calling the control API, if anyone may.
    pub fn caller(
        &self,
        headers: &HeaderMap,
        tokens: &crate::tokens::TokenSet,
        now: Instant,
    ) -> Result<Caller, Refused> {
        if let Some(bearer) = bearer(headers) {
            if self.is_admin(bearer) {
                return Ok(Caller::Admin);
            }
            return Err(if tokens.accepts(bearer) { Refused::ClientToken } else { Refused::Invalid });
        }
        let Some(token) = session_token(headers) else {
            return Err(Refused::NoCredential);
        };
        if self.session_live(token, now) {
            Ok(Caller::Dashboard)
        } else {
            Err(Refused::Invalid)
        }
    }

    /// Whether a `/v1` request carries a control-API credential instead of a client token.
    pub fn is_control_credential(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|b| self.is_admin(b))
    }
}

/// The MAC a gateway answers a challenge with (the CLI computes the same to check it): both nonces and
/// the address the challenge reached, as the gateway saw it and as the CLI dialled it.
pub fn challenge_mac(admin: &Secret, client_nonce: &str, server_nonce: &str, reached: SocketAddr) -> String {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(admin.expose().as_bytes()).expect("HMAC accepts any key length");
    mac.update(b"keymux/challenge/v2\0");
    mac.update(client_nonce.as_bytes());
    mac.update(&[0]);
    mac.update(server_nonce.as_bytes());
    mac.update(&[0]);
    mac.update(reached.to_string().as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Checks, in constant time, a challenge's answer from the gateway the CLI dialled at `dialled`.
pub fn challenge_ok(admin: &Secret, client_nonce: &str, server_nonce: &str, dialled: SocketAddr, mac: &str) -> bool {
    challenge_mac(admin, client_nonce, server_nonce, dialled).as_bytes().ct_eq(mac.as_bytes()).into()
}

/// Whether a request's `Host` names exactly the address its connection reached: a relay that forwards
/// a challenge unchanged names its own port, not the gateway's.
pub fn host_is(headers: &HeaderMap, reached: SocketAddr) -> bool {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    host.and_then(|h| h.parse::<SocketAddr>().ok()).is_some_and(|h| h == reached)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(crate::tokens::bearer)
}

fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())
}

/// Whether a `Host` (or origin authority) names this machine by a loopback name.
pub fn is_loopback_authority(authority: &str) -> bool {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The control API answers only to loopback host names, so a DNS-rebound page cannot reach it.
pub fn host_ok(headers: &HeaderMap) -> bool {
    headers.get(header::HOST).and_then(|v| v.to_str().ok()).is_some_and(is_loopback_authority)
}

/// A request with an `Origin` came from a browser: only the gateway's own page (same loopback host and
/// port as the request) and the Tauri webview may call. Codex, pi and the CLI send no `Origin`.
pub fn origin_ok(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let origin = origin.to_str().unwrap_or("");
    if TAURI_ORIGINS.contains(&origin) {
        return true;
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    origin.strip_prefix("http://").is_some_and(|authority| authority == host && is_loopback_authority(authority))
}

#[cfg(test)]
mod tests;
