use super::*;
use crate::secrets::Secret;
use crate::spend::{CacheRetention, ServiceTier};
use serde_json::json;

fn tagger() -> Tagger {
    let markers = Markers::new(&Secret::new("s"));
    let key = KeyId::new("k_1");
    let org = markers.org_tag(Some("org-a"), &key);
    Tagger::new(markers, key, org)
}

fn event(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

/// The usage `AnswerEnd` reads from a whole answer, walked (as the relay reads it) or parsed.
fn usage_of(body: &[u8]) -> Option<Usage> {
    AnswerEnd::from_body(body).usage
}

fn usage_parsed(body: &[u8]) -> Option<Usage> {
    AnswerEnd::parsed(body).usage
}

#[test]
fn a_whole_answer_yields_its_top_level_usage_only() {
    let body =
        br#"{"id":"resp_1","output":[{"type":"message","content":[{"text":"\"usage\": {\"input_tokens\": 9}"}]}],
        "usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":64},"output_tokens":7},
        "metadata":{"usage":"not this one"}}"#;
    assert_eq!(usage_of(body), Some(Usage { input: 120, cached: 64, output: 7, ..Usage::default() }));
    assert_eq!(usage_of(br#"{"id":"resp_1","usage":null}"#), None);
    assert_eq!(usage_of(b"not json"), None);
}

#[test]
fn walking_an_answer_reads_the_same_usage_as_parsing_it() {
    let usage = r#"{"input_tokens":120,"input_tokens_details":{"cached_tokens":64},"output_tokens":7}"#;
    let bodies = [
        format!(r#"{{"id":"resp_1","service_tier":"flex","output":[{{"usage":1}}],"usage":{usage}}}"#),
        format!(r#" {{ "usage" : {usage} , "service_tier" : "priority" , "metadata" : {{"usage":{{}}}} }} "#),
        format!(r#"{{"choices":[{{"message":{{"content":"[{{\"usage\":3}}]"}}}}],"usage":{usage}}}"#),
        format!(r#"{{"us\u0061ge":{usage},"service_tier":"flex"}}"#),
        format!(r#"{{"usage":{usage},"service_tier":null}}"#),
        format!(r#"{{"usage":{usage},"service_tier":7}}"#),
        r#"{"usage":{"prompt_tokens":5,"completion_tokens":1}}"#.to_owned(),
        r#"{"usage":null,"service_tier":"flex"}"#.to_owned(),
        r#"{"usage":[1],"output":[]}"#.to_owned(),
        r#"{"output":[]}"#.to_owned(),
        r#"{"usage":{"input_tokens":1}"#.to_owned(),
        "[]".to_owned(),
    ];
    for body in &bodies {
        assert_eq!(usage_of(body.as_bytes()), usage_parsed(body.as_bytes()), "{body}");
    }
    assert_eq!(usage_of(bodies[0].as_bytes()).map(|u| (u.input, u.tier)), Some((120, ServiceTier::Flex)));
    assert_eq!(usage_of(bodies[3].as_bytes()).map(|u| u.tier), Some(ServiceTier::Flex), "escaped keys parse");
}

#[test]
fn walking_an_event_reads_what_parsing_it_reads() {
    let usage = r#"{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":3}"#;
    let events = [
        r#"{"type":"response.created","response":{"id":"r","error":null,"usage":null,"output":[]}}"#.to_owned(),
        format!(
            r#"{{"type":"response.completed","sequence_number":9,"response":{{"error":null,"output":[{{"type":"reasoning","error":{{"x":1}}}}],"service_tier":"flex","usage":{usage}}}}}"#
        ),
        r#"{"type":"response.failed","response":{"error":{"code":"server_error","message":"sk-proj-abc"}}}"#.to_owned(),
        r#"{"type":"error","error":{"message":"bad"}}"#.to_owned(),
        r#"{"error":{"message":"key sk-abc"}}"#.to_owned(),
        r#"{"error":null,"choices":[]}"#.to_owned(),
        format!(r#"{{"object":"chat.completion.chunk","choices":[],"service_tier":"priority","usage":{usage}}}"#),
        r#"{"type":"response.output_text.delta","delta":"\"error\": {} and \"usage\":{"}"#.to_owned(),
        r#"{"t\u0079pe":"error","error":{"message":"escaped"}}"#.to_owned(),
        r#"{"type":7,"error":{}}"#.to_owned(),
        r#"{"type":"response.completed","response":null}"#.to_owned(),
        "[DONE]".to_owned(),
        "{".to_owned(),
    ];
    let seen =
        |e: Option<EndEvent<'_>>| e.map(|e| (e.kind().map(str::to_owned), e.is_error(), e.response_usage(), e.usage()));
    for event in &events {
        let (walked, parsed) = (EndEvent::read(event.as_bytes()), EndEvent::read_parsed(event.as_bytes()));
        assert_eq!(seen(walked), seen(parsed), "{event}");
    }
    let completed = EndEvent::read(events[1].as_bytes()).and_then(|e| e.response_usage());
    assert_eq!(completed.map(|u| (u.input, u.cached, u.tier)), Some((10, 4, ServiceTier::Flex)));
    assert!(EndEvent::read(events[4].as_bytes()).is_some_and(|e| e.is_error()), "a chat error chunk");
    assert!(!EndEvent::read(events[5].as_bytes()).is_some_and(|e| e.is_error()), "a null error is none");
    assert!(EndEvent::read(events[8].as_bytes()).is_some_and(|e| e.is_error()), "escaped keys are parsed");
}

#[test]
fn the_service_tier_an_answer_was_billed_in_comes_with_its_usage() {
    let usage = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 4},
        "output_tokens": 3});
    let whole = json!({"object": "response", "service_tier": "priority", "usage": usage});
    let read = usage_of(&serde_json::to_vec(&whole).expect("json")).expect("usage");
    assert_eq!((read.tier, read.cache_write), (ServiceTier::Priority, 4));
    let completed = json!({"type": "response.completed", "response": {"service_tier": "flex", "usage": usage}});
    let mut sse = SseRewriter::new(tagger());
    sse.push(event("response.completed", &completed).as_bytes()).expect("relayed");
    assert_eq!(sse.end().usage.map(|u| u.tier), Some(ServiceTier::Flex));
    let chunk = json!({"object": "chat.completion.chunk", "service_tier": "default", "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1}});
    let mut chat = SseRewriter::new(tagger());
    chat.push(format!("data: {chunk}\n\n").as_bytes()).expect("relayed");
    assert_eq!(chat.end().usage.map(|u| (u.tier, u.input)), Some((ServiceTier::Standard, 5)));
    let bare = EndEvent::read(br#"{"usage":{"prompt_tokens":5}}"#).and_then(|e| e.usage());
    assert_eq!(bare.map(|u| u.tier), Some(ServiceTier::Standard), "no tier reported is the standard one");
}

#[test]
fn an_incomplete_stream_reports_the_usage_it_is_billed_for_without_completing() {
    let usage = json!({"input_tokens": 300, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 16});
    let incomplete = json!({"type": "response.incomplete", "response": {"status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"}, "service_tier": "priority", "usage": usage}});
    let mut sse = SseRewriter::new(tagger());
    sse.push(event("response.incomplete", &incomplete).as_bytes()).expect("relayed");
    let end = sse.end();
    assert!(!end.completed, "an incomplete response is no completion: nothing is learned from it");
    assert!(end.incomplete, "but it ended");
    assert_eq!(end.usage.map(|u| (u.input, u.output, u.tier)), Some((300, 16, ServiceTier::Priority)));
}

#[test]
fn a_passed_through_answer_yields_the_usage_it_ends_with_in_any_chunking() {
    let vectors: Vec<f64> = (0..5000).map(|i| f64::from(i) * 0.001).collect();
    let body = serde_json::to_vec(&json!({"object":"list","data":[{"embedding":vectors,"usage":{"prompt_tokens":9}}],
        "model":"text-embedding-3-small","usage":{"prompt_tokens":12,"total_tokens":12}}))
    .expect("json");
    for size in [1, 7, 100, 4096, body.len()] {
        let mut tail = JsonTail::default();
        body.chunks(size).for_each(|c| tail.push(c));
        assert_eq!(
            tail.usage(),
            Some(Usage { input: 12, cached: 0, output: 0, ..Usage::default() }),
            "chunks of {size}"
        );
    }
    let mut none = JsonTail::default();
    none.push(br#"{"object":"list","data":[]}"#);
    assert_eq!(none.usage(), None);
}

#[test]
fn events_are_split_across_chunks_and_only_org_bound_ones_change() {
    let delta = event("response.output_text.delta", &json!({"type":"response.output_text.delta","delta":"hi"}));
    let done = event(
        "response.output_item.done",
        &json!({"type":"response.output_item.done","item":{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAAABq"}}),
    );
    let stream = format!("{delta}{done}{delta}");
    let mut rw = SseRewriter::new(tagger());
    let mut out = Vec::new();
    // Feed one byte at a time: framing must not depend on chunk boundaries.
    for b in stream.as_bytes() {
        out.extend_from_slice(&rw.push(std::slice::from_ref(b)).expect("fits"));
    }
    out.extend_from_slice(&rw.finish());
    let text = String::from_utf8(out).expect("utf8");
    let frames: Vec<&str> = text.split_inclusive("\n\n").collect();
    assert_eq!(frames.len(), 3);
    assert_eq!(frames[0], delta, "untouched byte for byte");
    assert_eq!(frames[2], delta);
    assert!(frames[1].starts_with("event: response.output_item.done\ndata: "));
    let data: Value = serde_json::from_str(
        frames[1].trim_end().strip_prefix("event: response.output_item.done\ndata: ").expect("data"),
    )
    .expect("json");
    assert!(data["item"]["encrypted_content"].as_str().expect("s").starts_with("km1"));
    assert!(data["item"]["id"].as_str().expect("s").starts_with("rs_km1"));
}

#[test]
fn crlf_framing_and_unterminated_tail() {
    let mut rw = SseRewriter::new(tagger());
    let out = rw.push(b"data: {\"a\":1}\r\n\r\ndata: {\"b\"").expect("fits");
    assert_eq!(&out[..], b"data: {\"a\":1}\r\n\r\n");
    assert_eq!(&rw.finish()[..], b"data: {\"b\"");
}

#[test]
fn an_error_event_that_quotes_a_key_is_masked_mid_stream() {
    let key = "sk-proj-Abc123def456ghi789jkl012mno";
    let error = json!({"type": "error", "error": {"message": format!("Incorrect API key provided: key={key}.")}});
    let failed = json!({"type": "response.failed", "response": {"error": {"message": format!("'{key}' was refused")}}});
    let delta = json!({"type": "response.output_text.delta", "delta": "an error is not a key"});
    let stream = format!(
        "{}{}{}",
        event("response.output_text.delta", &delta),
        event("error", &error),
        event("response.failed", &failed)
    );
    let mut r = SseRewriter::new(tagger());
    let out = String::from_utf8(r.push(stream.as_bytes()).expect("small events").to_vec()).expect("utf-8");
    assert!(!out.contains(key), "{out}");
    assert_eq!(out.matches(crate::secrets::MASKED).count(), 2, "{out}");
    assert!(out.contains("an error is not a key"), "other events pass as they came: {out}");
    assert!(out.contains("event: error\n"), "the event's own lines stay: {out}");
    // The same for a WebSocket frame, which is the event's JSON alone.
    let frame = error.to_string();
    let masked = mask_failed_event(frame.as_bytes()).expect("masked");
    assert!(!String::from_utf8_lossy(&masked).contains(key));
    assert!(mask_failed_event(delta.to_string().as_bytes()).is_none(), "not an error: untouched");
}

#[test]
fn oversized_events_fail_instead_of_passing_untagged() {
    let mut rw = SseRewriter::new(tagger());
    let big = vec![b'x'; MAX_EVENT_BYTES + 1];
    assert!(rw.push(&big).is_err());
}

/// The separator rule `frame_end` keeps, written the plain way: the earliest `\n\n` or `\r\n\r\n` at or
/// after `from` (at one index, the `\n\n`).
fn frame_end_by_search(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let hay = &buf[from.min(buf.len())..];
    let lf = memchr::memmem::find(hay, b"\n\n").map(|i| (i, 2));
    let crlf = memchr::memmem::find(hay, b"\r\n\r\n").map(|i| (i, 4));
    let best = match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    };
    best.map(|(i, n)| (from + i, n))
}

proptest::proptest! {
    /// Over any mix of newlines, carriage returns and text, from any starting point, the one-pass
    /// search finds the separator the plain search finds.
    #[test]
    fn frame_end_finds_the_earliest_separator(
        bytes in proptest::collection::vec(proptest::sample::select(vec![b'\n', b'\r', b'a', b':']), 0..40),
        from in 0usize..44,
    ) {
        proptest::prop_assert_eq!(frame_end(&bytes, from), frame_end_by_search(&bytes, from));
    }

    /// An event's lines are what splitting on `\n` gives, each without a trailing `\r`.
    #[test]
    fn lines_split_like_split(
        bytes in proptest::collection::vec(proptest::sample::select(vec![b'\n', b'\r', b'a', b'd']), 0..40),
    ) {
        let split: Vec<&[u8]> =
            bytes.split(|b| *b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l)).collect();
        proptest::prop_assert_eq!(lines(&bytes).collect::<Vec<_>>(), split);
    }
}

#[test]
fn errors_without_a_type_are_masked_and_successful_events_never_are() {
    let key = "sk-proj-Abc123def456ghi789jkl012mno";
    let untyped = json!({"error": {"message": format!("trace key={key}")}});
    let named = format!("event: error\ndata: {}\n\n", json!({"message": format!("trace {key}"), "code": "x"}));
    let chat = format!("data: {untyped}\n\n");
    // A long word with digits in a successful event is content, not a key: it passes untouched.
    let content =
        json!({"type": "response.output_text.delta", "delta": "hash 0123456789abcdef0123456789abcdef", "error": null});
    let stream = format!("{named}{chat}{}", event("response.output_text.delta", &content));
    let mut r = SseRewriter::new(tagger());
    let out = String::from_utf8(r.push(stream.as_bytes()).expect("small events").to_vec()).expect("utf-8");
    assert!(!out.contains(key), "{out}");
    assert_eq!(out.matches(crate::secrets::MASKED).count(), 2, "{out}");
    assert!(out.contains("0123456789abcdef0123456789abcdef"), "{out}");
    assert!(mask_failed_event(untyped.to_string().as_bytes()).is_some(), "a WebSocket frame alike");
    assert!(mask_failed_event(content.to_string().as_bytes()).is_none(), "`error: null` is no error");
}

#[test]
fn the_answers_cache_retention_and_tier_are_read_with_its_usage() {
    let body = br#"{"id":"resp_1","object":"response","service_tier":"ultrafast","prompt_cache_retention":"24h",
        "usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":2,"cache_write_tokens":4},"output_tokens":3}}"#;
    let read = usage_of(body).expect("a usage");
    assert_eq!((read.tier, read.retention, read.cache_write), (ServiceTier::Ultrafast, CacheRetention::Extended, 4));
    let spelled = br#"{"service_tier":"default","prompt_cache_retention":"in_memory","usage":{"input_tokens":1}}"#;
    let read = usage_of(spelled).expect("a usage");
    assert_eq!((read.tier, read.retention), (ServiceTier::Standard, CacheRetention::Default));
    // With an escape somewhere the body is parsed instead of walked, to the same answer.
    let escaped =
        br#"{"service_tier":"ultrafast","prompt_cache_retention":"12h","x":"\u0041","usage":{"input_tokens":1}}"#;
    let read = usage_of(escaped).expect("a usage");
    assert_eq!((read.tier, read.retention), (ServiceTier::Ultrafast, CacheRetention::Extended));
}
