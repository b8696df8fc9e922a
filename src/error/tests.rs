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
