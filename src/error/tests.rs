use super::*;

#[test]
fn all_cooling_is_a_429_with_integer_retry_after() {
    let response = ApiError::AllCooling { retry_after_secs: 7, cooling: 3, pool: None }.into_response();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"7"[..]));
}

#[test]
fn a_pools_all_cooling_message_names_window_reserves_and_the_pools_boundary() {
    let body = ApiError::AllCooling { retry_after_secs: 7, cooling: 2, pool: Some("work".into()) }.to_json();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("keep the rest of their window"), "{message}");
    assert!(message.contains("never sends this token's requests outside the pool"), "{message}");
    assert!(message.contains("`keymux pool set work --fallback OTHER`"), "{message}");
}

#[test]
fn error_bodies_are_openai_shaped() {
    let body = ApiError::BodyTooLarge { limit: 10 }.to_json();
    let err = &body["error"];
    assert!(err["message"].as_str().is_some_and(|m| m.contains("10 bytes")));
    assert_eq!(err["type"], "invalid_request_error");
    assert!(err.get("param").is_some());
    assert_eq!(err["code"], "request_too_large");
}

/// A request body Keymux cannot decode gets the HTTP error a client can act on: 415 for a coding it
/// does not read (the name quoted cut short), 400 `bad_encoding` for bytes that are not what the header
/// says, 413 for one that decodes past the cap, naming the coding and the limit.
#[test]
fn each_refused_request_encoding_becomes_its_http_error() {
    use crate::encoding::EncodingError;
    let unsupported = ApiError::from(EncodingError::Unsupported { coding: format!("{}…", "x".repeat(40)) });
    assert_eq!(unsupported.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let message = unsupported.to_json()["error"]["message"].to_string();
    assert!(message.len() < 400, "{message}");
    let malformed = ApiError::from(EncodingError::Malformed { coding: "gzip", detail: "invalid header".into() });
    assert_eq!((malformed.status(), malformed.label()), (StatusCode::BAD_REQUEST, "bad_encoding"));
    let large = ApiError::from(EncodingError::TooLarge { coding: "zstd", limit: 4096 });
    assert_eq!(large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let message = large.to_json()["error"]["message"].to_string();
    assert!(message.contains("decodes to more than Keymux's limit of 4096 bytes"), "{message}");
    assert!(message.contains("zstd"), "{message}");
}
