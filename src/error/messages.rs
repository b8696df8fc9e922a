//! The words of each refusal: what happened and what to do, for the person reading a client's error.

pub(super) const MISSING_TOKEN: &str = "Keymux needs a local client token: send `Authorization: Bearer <token>`. Run \
    `keymux token create` (or `keymux token show NAME`) and put the token in the variable your client reads \
    (Codex `env_key`, pi `apiKey`).";
pub(super) const UNKNOWN_TOKEN: &str =
    "Keymux did not recognise this local client token. Send an OpenAI key to Keymux? Use a \
    Keymux token instead: `keymux token list` shows the valid ones.";
pub(super) const WRONG_CREDENTIAL: &str =
    "The Keymux admin credential and dashboard session work only on the control API \
    (/keymux/api). Clients spend keys with a client token: `keymux token create`.";
pub(super) const PAUSED: &str =
    "Keymux routing is paused, so no request goes to the provider. Resume it from the dashboard, \
    the tray or `keymux resume`; streams already running finish.";

pub(super) fn control_denied(reason: crate::access::Refused) -> &'static str {
    use crate::access::Refused;
    match reason {
        Refused::NoCredential => {
            "The Keymux control API needs the dashboard session (open the login link `keymux serve` printed, or \
             run `keymux dashboard`) or the admin credential (the `keymux` CLI uses it by itself)."
        }
        Refused::ClientToken => {
            "Client tokens spend keys on /v1 and cannot call the Keymux control API. Use the dashboard (`keymux \
             dashboard` prints a login link) or the `keymux` CLI."
        }
        Refused::Invalid => {
            "This Keymux control credential is not valid (expired, revoked, or from another install). Run \
             `keymux dashboard` for a fresh login link."
        }
    }
}

pub(super) const DOT_SEGMENTS: &str =
    "The request path has `.` or `..` segments; Keymux forwards only paths that stay under \
    the provider's /v1. Send the path without them.";
pub(super) const NO_KEYS: &str = "Keymux has no API keys to use. Add one with `keymux keys add --label NAME`, or set \
    KEYMUX_KEY_<LABEL>=sk-... for a headless run.";
pub(super) const PLAN_CANNOT_SERVE: &str = "The only key this request may use is your ChatGPT plan, and its backend \
    takes only streamed Responses requests over HTTP (POST /v1/responses with \"stream\": true, and \
    /v1/responses/compact). Add an API key (`keymux keys add --label NAME`) to serve the others.";
pub(super) const NO_WEBSOCKET: &str =
    "Keymux cannot open a Responses WebSocket for this request now (only GET /v1/responses \
    upgrades, and only while some key is usable); use HTTP. Codex falls back to HTTP by itself on this answer.";
pub(super) const FORBIDDEN_ORIGIN: &str =
    "Keymux refuses requests from web pages and from non-local host names. Call it from \
    a local client at http://127.0.0.1.";

pub(super) fn mixed_orgs(labels: &[String]) -> String {
    format!(
        "This request replays encrypted reasoning from more than one organization (Keymux keys {}), and no single \
         key can read all of it. Start a new session, or remove the items from one of them.",
        labels.iter().map(|l| format!("'{l}'")).collect::<Vec<_>>().join(" and ")
    )
}

pub(super) fn lost_org(label: &str) -> String {
    format!(
        "This session's encrypted reasoning can only be read by the organization of Keymux key '{label}', which \
         has no usable key now. Re-add or re-enable that key to continue the session as it is, or set \
         `[affinity] lost_org = \"rescue\"` to continue without the unreadable reasoning."
    )
}

pub(super) fn unreadable(tried: usize) -> String {
    format!(
        "This session's encrypted reasoning was made before Keymux, and none of the {tried} organizations of your \
         keys can read it. Add a key of the organization the session began with (`keymux keys add`) to continue \
         it as it is, or set `[affinity] lost_org = \"rescue\"` to continue without the unreadable reasoning."
    )
}

pub(super) fn continuity_lost(label: &str) -> String {
    format!(
        "The stored response this request continues lives only with Keymux key '{label}', which cannot serve now \
         (removed, rejected by the provider, or disabled). Resend the full conversation history without \
         previous_response_id, or restore that key."
    )
}

pub(super) fn token(missing: bool) -> &'static str {
    if missing {
        MISSING_TOKEN
    } else {
        UNKNOWN_TOKEN
    }
}

pub(super) fn marker_label(e: &crate::markers::MarkerError) -> &'static str {
    match e {
        crate::markers::MarkerError::Malformed { .. } => "marker_malformed",
        crate::markers::MarkerError::Forged { .. } => "marker_forged",
    }
}

pub(super) fn body_too_large(limit: usize) -> String {
    format!(
        "The request body is larger than Keymux's limit of {limit} bytes. Compact the conversation, or raise \
         `max_body_bytes` in the Keymux config."
    )
}

pub(super) fn decoded_too_large(coding: &str, limit: usize) -> String {
    format!(
        "The request body, sent with content-encoding {coding}, decodes to more than Keymux's limit of {limit} \
         bytes, so Keymux stopped decoding it. Compact the conversation, or raise `max_body_bytes` in the Keymux \
         config."
    )
}

pub(super) fn unsupported_encoding(coding: &str) -> String {
    format!(
        "Keymux cannot read a request body sent with content-encoding '{coding}': it reads a body compressed once, \
         with zstd, gzip or br, or one sent uncompressed. Send the body uncompressed, or compressed with one of \
         those."
    )
}

pub(super) fn bad_encoding(coding: &str, detail: &str) -> String {
    format!(
        "The request body is not valid {coding}, as its content-encoding says it is ({detail}), so Keymux cannot \
         read it. Send the body uncompressed, or compressed whole with {coding}."
    )
}

pub(super) fn body_timeout(secs: u64) -> String {
    format!(
        "The request body did not arrive within {secs} s, so Keymux stopped waiting for it. Send the request again."
    )
}

pub(super) fn body_read(detail: &str) -> String {
    format!("Keymux could not read the request body ({detail}). Send the request again.")
}

pub(super) fn bad_json(detail: &str) -> String {
    format!("Keymux cannot use this request body: {detail}. This endpoint takes a JSON object.")
}

pub(super) fn answer_too_large(status: u16, limit: usize) -> String {
    format!(
        "The provider answered {status} with an error body larger than Keymux relays ({limit} bytes), so it was \
         left out. Retry; if it repeats, check the provider's status."
    )
}

pub(super) fn all_cooling(retry_after_secs: u64, cooling: usize, pool: &Option<String>) -> String {
    match pool {
        None => format!(
            "All {cooling} Keymux key(s) are cooling down or at their rate limits (or keep the rest of their window \
             for the sessions already on them); the first one frees in \
             {retry_after_secs}s. Retry after that, or add another key."
        ),
        Some(pool) => format!(
            "All {cooling} key(s) of the Keymux pool '{pool}' are cooling down or at their rate limits (or keep the \
             rest of their window for the sessions already on them); the first one frees in {retry_after_secs}s. \
             Keymux never sends this token's requests outside the pool: retry after that, add a key to the pool \
             (`keymux pool set {pool} --keys ...`), or give it a fallback pool (`keymux pool set {pool} --fallback \
             OTHER`)."
        ),
    }
}

/// A wait in words: `3h 12m`, `45m`, `20s`.
pub(super) fn wait_words(secs: u64) -> String {
    match (secs / 3600, (secs % 3600) / 60) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m"),
        (h, m) => format!("{h}h {m}m"),
    }
}

pub(super) fn budget_reached(retry_after_secs: u64, keys: usize, pool: &Option<String>) -> String {
    let which = pool.as_ref().map_or_else(|| "Keymux's".to_owned(), |p| format!("the Keymux pool '{p}''s"));
    format!(
        "All {keys} of {which} keys a new session may use are past the budget in money you set for them \
         (reserved for the sessions already on them, or stopped). The first budget resets in {}: new sessions \
         start then. To go on now, raise a budget (`keymux keys set LABEL --daily-budget-usd N`) or its \
         reserve threshold (`--reserve-at`), in the dashboard's Keys view or with `keymux keys set`.",
        wait_words(retry_after_secs)
    )
}

/// `whose`: what reached its budget (`key` or `pool`), its name, and the command that changes it.
/// `pool` when the pool's budget is the one stopped, else the key's (`label`).
pub(super) fn budget_stopped(
    label: &str,
    pool: &Option<String>,
    period: crate::budget::Period,
    limit: crate::spend::Usd,
    secs: u64,
) -> String {
    let whose = match pool {
        Some(pool) => ("pool", pool.as_str(), "pool set"),
        None => ("key", label, "keys set"),
    };
    let budget = period.adjective();
    let (noun, name, command) = whose;
    format!(
        "Keymux {noun} '{name}' reached its {limit} {budget} budget, and it is set to stop there: Keymux refuses its \
         requests, this session's included (only that key's organization can continue it), until the budget \
         resets in {}. To go on now, raise it (`keymux {command} {name} --{budget}-budget-usd N`) or let it \
         keep serving the sessions already started (`--on-limit reserve`).",
        wait_words(secs)
    )
}

pub(super) fn no_usable_key(unusable: usize, pool: &Option<String>) -> String {
    let which = pool.as_ref().map_or_else(
        || format!("Keymux's {unusable} key(s)"),
        |p| format!("the {unusable} key(s) of the Keymux pool '{p}'"),
    );
    format!(
        "None of {which} is usable right now (rejected by the provider, switched off, or unreachable). \
         Check `keymux keys list` and fix the keys it flags."
    )
}

pub(super) fn proxy_unreachable(pool: &str, proxy: &str) -> String {
    format!(
        "The keys of the Keymux pool '{pool}' go out through the proxy {proxy}, which could not be reached (or \
         could not reach the provider); they are tried again through it in the background. The request was not \
         sent direct: start the proxy, or change the pool's (`keymux pool set {pool} --proxy URL` or \
         `--no-proxy`), then retry."
    )
}

pub(super) fn pool_empty(pool: &str) -> String {
    format!(
        "The Keymux pool '{pool}' has no keys, and this token may only use that pool. Add keys to it with \
         `keymux pool set {pool} --keys LABEL,...` (or in the dashboard's Pools view), or use a token of another pool."
    )
}

pub(super) fn pool_mismatch(label: &str, pool: &str, owner: &str) -> String {
    format!(
        "This request replays state made by Keymux key '{label}' of the pool '{owner}', but its token belongs to \
         the pool '{pool}', and Keymux never crosses a pool's boundary. Continue the session with a token of \
         '{owner}', or start a new session."
    )
}

pub(super) fn bare_response_id(pool: &str, shared_with: &str) -> String {
    format!(
        "This request names a stored response by its bare id, without the marker Keymux adds to the ids it \
         returns, and every key of the pool '{pool}' shares its organization with a key of the pool \
         '{shared_with}': Keymux cannot tell which pool made that response, and never crosses a pool's \
         boundary. Send the id as Keymux returned it, or continue with a token of the pool that made it."
    )
}

pub(super) fn key_rejected(label: &str, status: u16) -> String {
    format!(
        "The provider rejected Keymux key '{label}' ({status}) and no other key could take the request. Replace \
         the key with `keymux keys remove {label}` and `keymux keys add`."
    )
}

pub(super) fn too_many_streams(max: usize) -> String {
    format!(
        "Keymux already has {max} event-stream subscribers, its limit. Close a dashboard tab (or another \
         subscriber) and retry."
    )
}

pub(super) fn too_many_sockets(max: usize) -> String {
    format!(
        "Keymux already has {max} WebSockets open, its limit; use HTTP for this session (Codex falls back to it on \
         its own). Close idle sessions to free one."
    )
}

pub(super) fn internal(detail: &str) -> String {
    format!("Keymux failed internally ({detail}). It keeps serving; retry, and report this if it repeats.")
}

/// The `retry-after` a paused gateway answers with.
pub const PAUSED_RETRY_AFTER_SECS: u64 = 30;
