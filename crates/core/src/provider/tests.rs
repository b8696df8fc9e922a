use super::*;

#[test]
fn every_provider_is_registered_once_under_its_name() {
    for &id in ALL {
        assert_eq!(ProviderId::parse(id.as_str()), Some(id));
        assert_eq!(serde_json::to_value(id).expect("json"), serde_json::json!(id.as_str()));
    }
    assert_eq!(ProviderId::parse(" Azure-OpenAI "), Some(ProviderId::Azure));
    assert_eq!(ProviderId::parse("anthropic"), None);
}

#[test]
fn an_api_key_goes_as_a_bearer_marked_sensitive_and_its_body_as_it_is() {
    let mut headers = HeaderMap::new();
    let method = Method::POST;
    let body = Bytes::from_static(b"{\"max_output_tokens\":5}");
    let mut out = Outgoing { method: &method, path_and_query: "/responses", headers: &mut headers, body: body.clone() };
    ProviderId::Openai.get().prepare(&Secret::new("sk-abc"), &mut out).expect("prepared");
    assert_eq!(out.body, body);
    let value = headers.get("authorization").expect("set");
    assert_eq!(value.as_bytes(), b"Bearer sk-abc");
    assert!(value.is_sensitive());
}

#[test]
fn what_each_provider_serves() {
    let ask = |operation, stream, transport| Ask { operation, stream, transport };
    let cases = [
        (ask(Operation::ResponsesCreate, true, Transport::Http), [true, true, true]),
        (ask(Operation::ResponsesCreate, false, Transport::Http), [true, true, false]),
        (ask(Operation::ResponsesCreate, true, Transport::WebSocket), [true, true, false]),
        (ask(Operation::ResponsesCompact, false, Transport::Http), [true, true, true]),
        (ask(Operation::ChatCompletions, true, Transport::Http), [true, true, false]),
        (ask(Operation::Embeddings, false, Transport::Http), [true, true, false]),
        (ask(Operation::ResponsesGet, false, Transport::Http), [true, true, false]),
    ];
    for (ask, expected) in cases {
        let served: Vec<bool> = ALL.iter().map(|id| id.get().serves(ask)).collect();
        assert_eq!(served, expected, "{ask:?}");
    }
    let plans: Vec<ProviderId> = ALL.iter().copied().filter(|id| id.get().is_plan()).collect();
    assert_eq!(plans, [ProviderId::Chatgpt]);
}

#[test]
fn each_provider_picks_its_base_url() {
    let endpoints =
        Endpoints { api: "http://api".into(), chatgpt: "http://plan".into(), chatgpt_auth: "http://auth".into() };
    let bases: Vec<Option<&str>> = ALL.iter().map(|id| id.get().default_base(&endpoints)).collect();
    assert_eq!(bases, [Some("http://api"), None, Some("http://plan")]);
}

#[test]
fn an_api_key_is_never_refreshed_and_is_its_own_identity() {
    let secret = Secret::new("sk-abc");
    for id in [ProviderId::Openai, ProviderId::Azure] {
        assert!(id.get().refresh_call(&secret, &Endpoints::public(), u64::MAX).is_none());
        assert_eq!(id.get().identity(&secret).expose(), "sk-abc");
        assert!(id.get().plan(&secret).is_none());
    }
}
