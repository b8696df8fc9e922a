//! Access's own tests: codes, sessions and what they opened, credentials, hosts and origins.

use super::*;
use crate::tokens::TokenSet;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, v.parse().expect("header"));
    }
    h
}

fn now() -> Instant {
    crate::clock::Clock::system().now()
}

#[tokio::test(start_paused = true)]
async fn a_login_code_works_once_and_expires_and_a_session_ends_idle_or_old() {
    let access = Access::default();
    let code = access.issue_login(now());
    assert!(access.code_waiting(code.expose(), now()));
    let token = access.redeem(code.expose(), now()).expect("redeemed");
    assert!(!access.code_waiting(code.expose(), now()));
    assert!(access.redeem(code.expose(), now()).is_none(), "never twice");
    let late = access.issue_login(now());
    tokio::time::advance(LOGIN_CODE_TTL + Duration::from_secs(1)).await;
    assert!(access.redeem(late.expose(), now()).is_none(), "expired");
    let tokens = TokenSet::default();
    let with = headers(&[(SESSION_HEADER, token.expose())]);
    assert_eq!(access.caller(&with, &tokens, now()), Ok(Caller::Dashboard));
    let as_cookie = headers(&[("cookie", &format!("keymux_session={}", token.expose()))]);
    assert_eq!(access.caller(&as_cookie, &tokens, now()), Err(Refused::NoCredential));
    tokio::time::advance(SESSION_IDLE).await;
    assert_eq!(access.caller(&with, &tokens, now()), Err(Refused::Invalid), "idle too long");
    let busy = headers(&[(
        SESSION_HEADER,
        access.redeem(access.issue_login(now()).expose(), now()).expect("redeemed").expose(),
    )]);
    for _ in 0..23 {
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(access.caller(&busy, &tokens, now()), Ok(Caller::Dashboard));
    }
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(access.caller(&busy, &tokens, now()), Err(Refused::Invalid), "a day old, however busy");
    let live = headers(&[(
        SESSION_HEADER,
        access.redeem(access.issue_login(now()).expose(), now()).expect("redeemed").expose(),
    )]);
    assert!(access.end_session(&live), "logged out");
    assert_eq!(access.caller(&live, &tokens, now()), Err(Refused::Invalid), "over at once");
}

#[tokio::test(start_paused = true)]
async fn codes_that_stop_waiting_are_told_once_by_label() {
    let access = Access::default();
    let used = access.issue_login(now());
    let left = access.issue_login(now());
    assert!(access.take_spent_codes(now()).is_empty(), "both wait");
    access.redeem(used.expose(), now()).expect("redeemed");
    assert_eq!(access.take_spent_codes(now()), vec![code_label(used.expose())], "used");
    assert!(access.take_spent_codes(now()).is_empty(), "told once");
    tokio::time::advance(LOGIN_CODE_TTL).await;
    assert_eq!(access.take_spent_codes(now()), vec![code_label(left.expose())], "expired");
    let first = access.issue_login(now());
    (1..MAX_LOGIN_CODES).for_each(|_| drop(access.issue_login(now())));
    assert!(access.take_spent_codes(now()).is_empty());
    drop(access.issue_login(now()));
    assert_eq!(access.take_spent_codes(now()), vec![code_label(first.expose())], "pushed out");
    assert_eq!(code_label(first.expose()).len(), 32);
}

#[tokio::test(start_paused = true)]
async fn a_watched_code_says_whether_a_page_used_it() {
    let access = Access::default();
    let used = access.issue_login(now());
    let watch = access.watch_code(used.expose(), now()).expect("it waits");
    access.redeem(used.expose(), now()).expect("redeemed");
    assert!(watch.used().await, "used");
    assert!(access.watch_code(used.expose(), now()).is_none(), "a used code waits no more");
    let late = access.issue_login(now());
    let watch = access.watch_code(late.expose(), now()).expect("it waits");
    tokio::time::advance(LOGIN_CODE_TTL).await;
    drop(access.take_spent_codes(now()));
    assert!(!watch.used().await, "expired unused");
    let first = access.issue_login(now());
    let watch = access.watch_code(first.expose(), now()).expect("it waits");
    (0..MAX_LOGIN_CODES).for_each(|_| drop(access.issue_login(now())));
    assert!(!watch.used().await, "pushed out unused");
    let left = access.issue_login(now());
    let watch = access.watch_code(left.expose(), now()).expect("it waits");
    drop(access);
    assert!(!watch.used().await, "the gateway went");
}

#[tokio::test]
async fn what_a_session_opened_ends_when_the_session_is_logged_out_or_pushed_out() {
    use futures::FutureExt as _;
    let (access, clock) = (Access::default(), Clock::system());
    let login = || {
        let token = access.redeem(access.issue_login(now()).expose(), now()).expect("redeemed");
        headers(&[(SESSION_HEADER, token.expose())])
    };
    let (oldest, other) = (login(), login());
    let pushed = access.watch_session(&oldest, now()).expect("live");
    let logged_out = access.watch_session(&other, now()).expect("live");
    assert!(pushed.over(&access, &clock).now_or_never().is_none(), "live: still open");
    assert!(access.end_session(&other));
    assert!(logged_out.over(&access, &clock).now_or_never().is_some(), "over at logout");
    for _ in 0..MAX_SESSIONS {
        login();
    }
    assert!(pushed.over(&access, &clock).now_or_never().is_some(), "over when pushed out");
    assert!(access.watch_session(&oldest, now()).is_none());
}

#[test]
fn credentials_do_not_stand_in_for_each_other() {
    let access = Access::default();
    let admin = Secret::new("kma-admin-credential-for-tests-1234567890");
    access.set_admin(Some(&admin));
    let tokens = TokenSet::new(&[Secret::new("km-client-token-for-tests-1234567890")]);
    let bearer = |t: &str| headers(&[("authorization", &format!("Bearer {t}"))]);
    assert_eq!(access.caller(&bearer(admin.expose()), &tokens, now()), Ok(Caller::Admin));
    assert_eq!(
        access.caller(&bearer("km-client-token-for-tests-1234567890"), &tokens, now()),
        Err(Refused::ClientToken)
    );
    assert_eq!(access.caller(&bearer("nonsense"), &tokens, now()), Err(Refused::Invalid));
    assert_eq!(access.caller(&HeaderMap::new(), &tokens, now()), Err(Refused::NoCredential));
    assert!(access.is_control_credential(&bearer(admin.expose())));
    let gateway: SocketAddr = "127.0.0.1:8787".parse().expect("addr");
    let relay: SocketAddr = "127.0.0.1:8788".parse().expect("addr");
    let (server, mac) = access.answer_challenge("client-nonce", gateway).expect("answers");
    assert!(challenge_ok(&admin, "client-nonce", &server, gateway, &mac));
    assert!(!challenge_ok(&Secret::new("another"), "client-nonce", &server, gateway, &mac));
    assert!(!challenge_ok(&admin, "client-nonce", &server, relay, &mac), "a proof for another address");
    assert!(host_is(&headers(&[("host", "127.0.0.1:8787")]), gateway));
    assert!(!host_is(&headers(&[("host", "127.0.0.1:8788")]), gateway));
    assert!(!host_is(&headers(&[("host", "localhost:8787")]), gateway));
}

#[test]
fn hosts_and_origins() {
    for ok in ["127.0.0.1:8787", "localhost:1", "[::1]:8787", "127.9.9.9", "LOCALHOST"] {
        assert!(is_loopback_authority(ok), "{ok}");
    }
    for bad in ["evil.example:8787", "10.0.0.1:8787", "127.0.0.1.evil.example", "", "[::2]:1"] {
        assert!(!is_loopback_authority(bad), "{bad}");
    }
    let page = |origin: &str| headers(&[("host", "127.0.0.1:8787"), ("origin", origin)]);
    assert!(origin_ok(&headers(&[("host", "127.0.0.1:8787")])));
    assert!(origin_ok(&page("http://127.0.0.1:8787")));
    assert!(origin_ok(&page("tauri://localhost")));
    for evil in ["https://evil.example", "http://127.0.0.1:3000", "null", "http://localhost:8787"] {
        assert!(!origin_ok(&page(evil)), "{evil}");
    }
}
