use http::HeaderValue;

use super::*;

/// The client a request with these headers comes from.
fn kind(pairs: &[(&str, &str)]) -> ClientKind {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(http::HeaderName::from_bytes(k.as_bytes()).expect("name"), HeaderValue::from_str(v).expect("value"));
    }
    ClientKind::from_headers(&h)
}

/// pi 1.6.0's `user-agent` (`@earendil-works/pi-ai`'s `formatUserAgent`, as captured under node 20).
const PI_1_6: &str = "pi/1.6.0 (linux; node/v20.20.2; x64)";

#[test]
fn clients_are_told_apart_by_their_headers() {
    let cases: &[(&[(&str, &str)], ClientKind)] = &[
        (&[("originator", "codex_exec"), ("user-agent", "codex_exec/0.171.0")], ClientKind::CodexExec),
        (&[("user-agent", "codex_exec/0.171.0 (Ubuntu 24.4.0; x86_64)")], ClientKind::CodexExec),
        (&[("originator", "codex-tui")], ClientKind::CodexTui),
        (&[("originator", "codex_cli_rs")], ClientKind::CodexTui),
        (&[("originator", "codex_vscode")], ClientKind::CodexVscode),
        // pi 1.x on Responses (with its session headers) and on Chat Completions (without).
        (&[("user-agent", PI_1_6), ("session-id", "s"), ("x-client-request-id", "s")], ClientKind::Pi),
        (&[("user-agent", PI_1_6)], ClientKind::Pi),
        (&[("user-agent", "pi/1.7.2 (darwin; bun/1.3.0; arm64)")], ClientKind::Pi),
        (&[("user-agent", "pi")], ClientKind::Pi),
        (&[("user-agent", "pi/2.0.0 (browser)")], ClientKind::Pi),
        // pi 1.x's Codex provider: Codex's `originator` header, named `pi`.
        (&[("originator", "pi"), ("user-agent", PI_1_6), ("session-id", "s")], ClientKind::Pi),
        (&[("originator", "pi")], ClientKind::Pi),
        // pi 0.73: the OpenAI JS SDK with pi's session headers.
        (&[("user-agent", "OpenAI/JS 6.26.0"), ("session_id", "x")], ClientKind::Pi),
        (&[("user-agent", "OpenAI/JS 6.26.0"), ("x-session-affinity", "x")], ClientKind::Pi),
        // What only looks like them.
        (&[("user-agent", "OpenAI/JS 6.26.0")], ClientKind::Other),
        (&[("user-agent", "OpenAI/JS 7.59.0"), ("session-id", "x")], ClientKind::Other),
        (&[("user-agent", "pip/24.0")], ClientKind::Other),
        (&[("user-agent", "pino 9")], ClientKind::Other),
        (&[("user-agent", "curl/8")], ClientKind::Other),
        (&[("originator", "pipeline")], ClientKind::Other),
        (&[], ClientKind::Other),
    ];
    for (pairs, want) in cases {
        assert_eq!(kind(pairs), *want, "{pairs:?}");
    }
}

#[test]
fn every_sign_in_the_table_is_reached() {
    // Each sign alone names its own client: no earlier row of another client takes it.
    for (sign, want) in CLIENTS {
        let found = match *sign {
            Sign::Named(name) => [kind(&[("originator", name)]), kind(&[("user-agent", name)])],
            Sign::Originator(name) => [kind(&[("originator", name)]); 2],
            Sign::Product(name) => [kind(&[("user-agent", name)]), kind(&[("user-agent", &format!("{name}/1.0"))])],
            Sign::JsSdkWith(header) => [kind(&[("user-agent", "OpenAI/JS 1.0"), (header, "x")]); 2],
        };
        assert_eq!(found, [*want; 2], "{sign:?}");
    }
}
