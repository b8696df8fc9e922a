//! Unit and property tests of the marker format, the scanner and both directions.

use super::*;
use crate::secrets::Secret;
use proptest::prelude::*;
use serde_json::json;
use serde_json::Value;
use std::borrow::Cow;

fn markers() -> Markers {
    Markers::new(&Secret::new("install-secret-for-tests"))
}

fn key() -> KeyId {
    KeyId::new("k_0123456789")
}

#[test]
fn content_round_trips_and_pins() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let wrapped = m.wrap_content(&key(), org, "gAAAAABoriginal==").expect("wrapped");
    assert!(wrapped.starts_with("km1") && wrapped.ends_with("gAAAAABoriginal=="));
    let (pin, original) = m.unwrap_content(&wrapped).expect("valid").expect("a marker");
    assert_eq!(original, "gAAAAABoriginal==");
    let pin = pin.expect("ours");
    assert_eq!(pin.key, key());
    assert_eq!(pin.org, org);
    assert_eq!(m.unwrap_content("gAAAAABplain").expect("valid"), None);
    assert_eq!(m.wrap_content(&key(), org, &wrapped), None, "never wrapped twice");
    // What only looks like a marker (another install's, or odd provider text) is wrapped like any
    // value, so strip gives it back whole (found by fuzzing).
    for odd in ["km15OT\0garbage", "km1", &format!("{}x", &wrapped[..20])] {
        let again = m.wrap_content(&key(), org, odd).expect("wrapped");
        assert_eq!(m.unwrap_content(&again).expect("valid").expect("a marker").1, odd);
    }
}

#[test]
fn ids_keep_their_type_prefix() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let tagged = m.tag_id(&key(), org, "rs_68ab12cd").expect("tagged");
    assert!(tagged.starts_with("rs_km1") && tagged.ends_with("68ab12cd"), "{tagged}");
    let (pin, original) = m.untag_id(&tagged).expect("valid").expect("a marker");
    assert_eq!(original, "rs_68ab12cd");
    assert_eq!(pin.expect("ours").field, Field::ItemId);
    assert_eq!(m.tag_id(&key(), org, "noprefix"), None);
    assert_eq!(m.tag_id(&key(), org, &tagged), None);
    // Only prefixes strip recognises get a marker, so no marker can leak upstream (found by fuzzing).
    for odd in ["r!s_68ab", "RS_68ab", "_68ab", "abcdefghijklmnopq_68ab"] {
        assert_eq!(m.tag_id(&key(), org, odd), None, "{odd}");
    }
}

#[test]
fn forged_truncated_and_foreign_markers() {
    let m = markers();
    let other = Markers::new(&Secret::new("another-install"));
    let org = m.org_tag(Some("org-a"), &key());
    let wrapped = m.wrap_content(&key(), org, "gAAAAABx").expect("wrapped");

    // Altered content under an intact marker.
    let altered = wrapped.replace("gAAAAABx", "gAAAAABy");
    assert_eq!(m.unwrap_content(&altered), Err(MarkerError::Forged { field: Field::EncryptedContent }));
    // Pointing a marker at another key.
    let retargeted = wrapped.replace("k_0123456789", "k_0123456788");
    assert_eq!(m.unwrap_content(&retargeted), Err(MarkerError::Forged { field: Field::EncryptedContent }));
    // Truncated.
    assert_eq!(m.unwrap_content(&wrapped[..20]), Err(MarkerError::Malformed { field: Field::EncryptedContent }));
    // A truncated id marker of this install is refused; an id that merely contains `km1` is not a marker.
    let id = m.tag_id(&key(), org, "rs_abc").expect("tagged");
    assert_eq!(m.untag_id(&id[..14]), Err(MarkerError::Malformed { field: Field::ItemId }));
    assert_eq!(m.untag_id("msg_km1hello"), Ok(None));
    // Another install's marker: stripped, no pin.
    let foreign = other.wrap_content(&key(), org, "gAAAAABx").expect("wrapped");
    assert_eq!(m.unwrap_content(&foreign).expect("foreign is fine"), Some((None, "gAAAAABx")));
}

#[test]
fn strip_removes_markers_only_where_they_can_be() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let content = m.wrap_content(&key(), org, "gAAAAABenc").expect("wrapped");
    let id = m.tag_id(&key(), org, "rs_77").expect("tagged");
    let body = json!({
        "model": "gpt-5.5",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text",
                "text": format!("\"encrypted_content\":\"{content}\" pasted by the user")}]},
            {"type": "reasoning", "id": id, "summary": [], "content": null, "encrypted_content": content},
            {"type": "message", "id": "msg_km1notamarker", "role": "assistant", "content": []},
        ]
    });
    let raw = serde_json::to_vec(&body).expect("json");
    let stripped = m.strip(&raw).expect("valid");
    assert_eq!(stripped.removed, 2);
    assert_eq!(stripped.pins.len(), 1, "one (key, org) pair");
    let out: Value = serde_json::from_slice(&stripped.body).expect("still JSON");
    assert_eq!(out["input"][1]["encrypted_content"], "gAAAAABenc");
    assert_eq!(out["input"][1]["id"], "rs_77");
    assert_eq!(out["input"][0], body["input"][0], "text is never touched");
    assert_eq!(out["input"][2]["id"], "msg_km1notamarker");
}

#[test]
fn strip_leaves_bodies_without_markers_borrowed() {
    let m = markers();
    let raw = br#"{"input":[{"type":"reasoning","id":"rs_1","encrypted_content":"gAAAAAB"}]}"#;
    let stripped = m.strip(raw).expect("valid");
    assert!(matches!(stripped.body, Cow::Borrowed(_)));
    assert!(stripped.pins.is_empty());
}

#[test]
fn strip_refuses_forged_markers_in_place() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let content = m.wrap_content(&key(), org, "gAAAAABenc").expect("wrapped");
    let forged = content.replace("gAAAAABenc", "gAAAAABevil");
    let raw = serde_json::to_vec(&json!({"input":[{"type":"reasoning","encrypted_content": forged}]})).expect("json");
    assert_eq!(m.strip(&raw).err(), Some(MarkerError::Forged { field: Field::EncryptedContent }));
    let truncated =
        serde_json::to_vec(&json!({"input":[{"type":"reasoning","encrypted_content": &content[..30]}]})).expect("json");
    assert_eq!(m.strip(&truncated).err(), Some(MarkerError::Malformed { field: Field::EncryptedContent }));
}

#[test]
fn tagging_a_response_tree() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let mut event = json!({
        "type": "response.output_item.done",
        "item": {"id": "rs_abc", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAABz"}
    });
    assert_eq!(m.tag_tree(&mut event, &key(), org), 2);
    let item = &event["item"];
    assert!(item["id"].as_str().expect("id").starts_with("rs_km1"));
    let mut message = json!({"type":"message","id":"msg_1","content":[{"type":"output_text","text":"hi"}]});
    assert_eq!(m.tag_tree(&mut message, &key(), org), 0, "plain messages stay as they are");
    let mut delta = json!({"type":"response.reasoning_summary_text.delta","item_id":"rs_abc","delta":"x"});
    m.tag_tree(&mut delta, &key(), org);
    assert_eq!(delta["item_id"], item["id"], "references match the tagged item");
    // Tagging is idempotent.
    assert_eq!(m.tag_tree(&mut event, &key(), org), 0);
}

#[test]
fn ids_the_provider_reports_dropped_keep_the_form_the_client_sent() {
    let m = markers();
    let org = m.org_tag(Some("org-b"), &key());
    let completed = json!({"type": "response.completed", "response": {
        "output": [{"id": "rs_new", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAABz"}],
        "input_transformations": [
            {"type": "reasoning", "id": "rs_old", "action": "removed", "reason": "organization_mismatch"},
            {"type": "reasoning", "id": "rs_older", "action": "removed", "reason": "organization_mismatch"}
        ]
    }});
    let text = serde_json::to_vec(&completed).expect("json");
    let RawTag::Tagged(raw) = m.tag_raw(&text, &key(), org) else { panic!("the new item is tagged in place") };
    let mut tree = completed.clone();
    assert_eq!(m.tag_tree(&mut tree, &key(), org), 2, "the new item's id and content, nothing else");
    let raw: Value = serde_json::from_slice(&raw).expect("json");
    for tagged in [&raw, &tree] {
        let response = &tagged["response"];
        assert!(response["output"][0]["id"].as_str().is_some_and(|id| id.starts_with("rs_km1")), "{tagged}");
        assert_eq!(response["input_transformations"][0]["id"], "rs_old", "{tagged}");
        assert_eq!(response["input_transformations"][1]["id"], "rs_older", "{tagged}");
    }
}

#[test]
fn legitimate_openai_values_are_never_markers() {
    let m = markers();
    for v in ["gAAAAABnmY3v", "km1", "km1xyz", "kmx", ""] {
        let raw =
            serde_json::to_vec(&json!({"input":[{"encrypted_content": v, "id": format!("rs_{v}")}]})).expect("json");
        match m.strip(&raw) {
            Ok(s) => assert_eq!(s.removed, 0, "{v}"),
            // Only values that start like a marker but are not one are refused.
            Err(_) => assert!(v.starts_with("km1"), "{v}"),
        }
    }
}

#[test]
fn raw_tagging_matches_tree_tagging() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let events = [
        json!({"type":"response.output_item.done","output_index":0,"item":{"id":"rs_abc","type":"reasoning","summary":[],"encrypted_content":"gAAAAAB/x+y=="}}),
        json!({"type":"response.output_item.added","item":{"id":"rs_abc","type":"reasoning","summary":[]}}),
        json!({"type":"response.reasoning_summary_text.delta","item_id":"rs_abc","delta":"\"id\":\"rs_fake\""}),
        json!({"type":"response.completed","response":{"id":"resp_1","output":[
            {"id":"rs_1","type":"reasoning","encrypted_content":"gAAAAAB1"},
            {"id":"msg_1","type":"message","content":[{"type":"output_text","text":"the id is \"rs_2\""}]},
            {"id":"cmp_3","type":"compaction","encrypted_content":"gAAAAAB3"}]}}),
        json!({"choices":[{"delta":{"reasoning_items":[{"type":"reasoning","id":"rs_9","encrypted_content":"gAAAAAB9","summary":[]}]}}]}),
        json!({"type":"response.output_text.delta","item_id":"msg_1","delta":"encrypted_content"}),
    ];
    for event in events {
        let text = serde_json::to_vec(&event).expect("json");
        let mut tree = event.clone();
        let tagged = m.tag_tree(&mut tree, &key(), org);
        match m.tag_raw(&text, &key(), org) {
            RawTag::Tagged(raw) => {
                assert_eq!(serde_json::from_slice::<Value>(&raw).expect("json"), tree, "{event}")
            }
            RawTag::Unchanged => assert_eq!(tagged, 0, "{event}"),
            RawTag::NeedsTree => panic!("needlessly fell back for {event}"),
        }
    }
    // An encrypted item whose id is not org-bound (a future type) or that has no id: the tree decides.
    for event in [
        json!({"item":{"id":"x_1","type":"future","encrypted_content":"gAAAAAB"}}),
        json!({"item":{"type":"reasoning","encrypted_content":"gAAAAAB"}}),
    ] {
        let text = serde_json::to_vec(&event).expect("json");
        assert_eq!(m.tag_raw(&text, &key(), org), RawTag::NeedsTree, "{event}");
    }
}

proptest! {
    #[test]
    fn wrap_unwrap_is_exact(content in "\\PC{0,200}", rest in "[a-f0-9]{1,48}", key_id in "[A-Za-z0-9_-]{1,64}", org in "\\PC{0,40}") {
        let m = markers();
        let key = KeyId::new(key_id);
        let tag = m.org_tag(Some(&org), &key);
        prop_assume!(!content.starts_with("km1"));
        let wrapped = m.wrap_content(&key, tag, &content).expect("wrapped");
        let (pin, original) = m.unwrap_content(&wrapped).expect("valid").expect("marker");
        prop_assert_eq!(original, content.as_str());
        prop_assert_eq!(pin.expect("ours").key, key.clone());
        let id = format!("rs_{rest}");
        let tagged = m.tag_id(&key, tag, &id).expect("tagged");
        let (_, back) = m.untag_id(&tagged).expect("valid").expect("marker");
        prop_assert_eq!(back, id.clone());
        // Through a JSON body, including escapes and Unicode.
        let body = serde_json::to_vec(&json!({"input":[{"type":"reasoning","id": tagged, "encrypted_content": wrapped, "note": content}]})).expect("json");
        let stripped = m.strip(&body).expect("valid");
        let original: Value = serde_json::to_value(json!({"input":[{"type":"reasoning","id": id, "encrypted_content": content, "note": content}]})).expect("json");
        prop_assert_eq!(serde_json::from_slice::<Value>(&stripped.body).expect("json"), original);
    }

    #[test]
    fn random_base64_is_never_taken_for_a_marker(value in "[A-Za-z0-9_=-]{0,300}") {
        let m = markers();
        prop_assume!(!value.starts_with("km1"));
        let body = serde_json::to_vec(&json!({"input":[{"encrypted_content": value, "id": format!("rs_{value}")}]})).expect("json");
        let stripped = m.strip(&body).expect("no marker, no error");
        prop_assert_eq!(stripped.removed, 0);
        prop_assert!(matches!(stripped.body, Cow::Borrowed(_)));
    }
}

/// Spells each character of `s` either plainly or as a `\uXXXX` escape, by the bits of `mask`.
fn escaped(s: &str, mask: u64) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| if mask >> (i % 64) & 1 == 1 { format!("\\u{:04x}", c as u32) } else { c.to_string() })
        .collect()
}

#[test]
fn escaped_keys_cannot_smuggle_a_forged_marker() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let content = m.wrap_content(&key(), org, "gAAAAABenc").expect("wrapped");
    let forged = content.replace("gAAAAABenc", "gAAAAABevil");
    let body = format!(r#"{{"input":[{{"type":"reasoning","encrypted\u005fcontent":"{forged}"}}]}}"#);
    assert_eq!(m.strip(body.as_bytes()).err(), Some(MarkerError::Forged { field: Field::EncryptedContent }));
    // A genuine marker under an escaped key is verified and removed like any other.
    let body = format!(r#"{{"input":[{{"type":"reasoning","encrypted\u005fcontent":"{content}"}}]}}"#);
    let stripped = m.strip(body.as_bytes()).expect("valid");
    assert_eq!(stripped.pins.len(), 1);
    let out: Value = serde_json::from_slice(&stripped.body).expect("json");
    assert_eq!(out["input"][0]["encrypted_content"], "gAAAAABenc");
}

proptest! {
    #[test]
    fn markers_are_found_however_keys_and_values_are_spelled(
        key_mask in any::<u64>(),
        value_mask in 0u64..8,
        forge in any::<bool>(),
        field in 0usize..3,
    ) {
        let m = markers();
        let org = m.org_tag(Some("org-a"), &key());
        let (name, value) = match field {
            0 => ("encrypted_content", m.wrap_content(&key(), org, "gAAAAABenc").expect("wrapped")),
            1 => ("id", m.tag_id(&key(), org, "rs_77ab").expect("tagged")),
            _ => ("previous_response_id", m.tag_id(&key(), org, "resp_99cd").expect("tagged")),
        };
        let value = if forge { value.replace("enc", "evil").replace("77ab", "66ab").replace("99cd", "88cd") } else { value };
        // Escape some of the key's characters, and maybe the first characters of the value too.
        let spelled_value = match value.split_once('_') {
            Some((prefix, rest)) if field != 0 => format!("{prefix}_{}", escaped(rest, value_mask)),
            _ => escaped(&value, value_mask),
        };
        let body = format!(r#"{{"input":[{{"type":"reasoning","{}":"{spelled_value}"}}]}}"#, escaped(name, key_mask));
        match m.strip(body.as_bytes()) {
            Err(e) => prop_assert!(forge, "a genuine marker was refused: {e}"),
            Ok(stripped) => {
                prop_assert!(!forge, "a forged marker went through");
                prop_assert_eq!(stripped.pins.len(), 1);
                let out: Value = serde_json::from_slice(&stripped.body).expect("json");
                let sent = out["input"][0][name].as_str().expect("string").to_owned();
                prop_assert!(!sent.contains("km1"), "a marker reached the provider: {}", sent);
            }
        }
    }
}

#[test]
fn unmarked_encrypted_content_is_told_from_marked_empty_and_null() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let marked = m.wrap_content(&key(), org, "gAAAAABmarked==").expect("wrapped");
    let body = |content: &str| format!(r#"{{"input":[{{"type":"reasoning","encrypted_content":{content}}}]}}"#);
    assert!(has_unmarked_encrypted(body("\"gAAAAABplain==\"").as_bytes()));
    assert!(has_unmarked_encrypted(body(" \"gAAAAABplain==\"").replace(':', " : ").as_bytes()));
    assert!(!has_unmarked_encrypted(body(&format!("\"{marked}\"")).as_bytes()), "a marked value");
    assert!(!has_unmarked_encrypted(body("null").as_bytes()), "null carries nothing");
    assert!(!has_unmarked_encrypted(body("\"\"").as_bytes()), "nor does an empty string");
    let in_text = r#"{"input":[{"role":"user","content":"\"encrypted_content\":\"gAAAAAB\""}]}"#;
    assert!(!has_unmarked_encrypted(in_text.as_bytes()), "text inside a string is not a key");
}

#[test]
fn dropping_unmarked_items_keeps_marked_ones_and_everything_else() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    let marked = m.wrap_content(&key(), org, "gAAAAABmarked==").expect("wrapped");
    let body = json!({"input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "encrypted_content": "gAAAAABplain=="},
        {"type": "reasoning", "encrypted_content": marked},
        {"type": "reasoning", "encrypted_content": null},
        {"type": "compaction", "encrypted_content": "gAAAAABcompacted=="},
    ]});
    let (out, dropped) = m.drop_unreadable(body.to_string().as_bytes(), &[], true).expect("JSON");
    assert_eq!(dropped, 2);
    let out: Value = serde_json::from_slice(&out).expect("JSON");
    let kept = out["input"].as_array().expect("input");
    assert_eq!(kept.len(), 3);
    assert_eq!(kept[1]["encrypted_content"], json!(marked));
    assert!(m.drop_unreadable(b"not json", &[], true).is_none());
}

fn markers_writing(kind: MarkerMac) -> Markers {
    Markers::with_key(InstallKey::writing(&Secret::new("install-secret-for-tests"), kind))
}

#[test]
fn a_marker_written_with_either_mac_is_read_by_an_install_that_writes_the_other() {
    let org = markers().org_tag(Some("org-a"), &key());
    for (writer, reader) in [(MarkerMac::Sha256, MarkerMac::Blake3), (MarkerMac::Blake3, MarkerMac::Sha256)] {
        let (writer, reader) = (markers_writing(writer), markers_writing(reader));
        let wrapped = writer.wrap_content(&key(), org, "gAAAAABsealed").expect("wrapped");
        let (pin, original) = reader.unwrap_content(&wrapped).expect("valid").expect("a marker");
        assert_eq!((pin.expect("ours").key, original), (key(), "gAAAAABsealed"));
        assert_eq!(reader.wrap_content(&key(), org, &wrapped), None, "not wrapped again");
        let id = writer.tag_id(&key(), org, "rs_0123").expect("tagged");
        assert_eq!(reader.untag_id(&id).expect("valid").expect("a marker").1, "rs_0123");
    }
    let [sha, blake] = [MarkerMac::Sha256, MarkerMac::Blake3]
        .map(|kind| markers_writing(kind).wrap_content(&key(), org, "gAAAAABsealed").expect("wrapped"));
    assert_ne!(sha, blake, "the two MACs differ");
}

#[test]
fn marker_macs_are_pinned_and_a_mac_under_neither_is_refused() {
    let m = markers();
    let org = m.org_tag(Some("org-a"), &key());
    // Pinned: a marker written today is read the same way tomorrow, on any CPU.
    let mac = |kind| m.digest.marker_mac_as(kind, b'c', "k_1", org, b"gAAAAABsealed");
    assert_eq!(std::str::from_utf8(&mac(MarkerMac::Sha256)).expect("base64url"), "t5OX5HG9OJRij65J");
    assert_eq!(std::str::from_utf8(&mac(MarkerMac::Blake3)).expect("base64url"), "4_XFwW8LbocWxy2t");
    let wrapped = m.wrap_content(&key(), org, "gAAAAABsealed").expect("wrapped");
    let mut forged = wrapped.into_bytes();
    let at = FIXED_LEN + key().as_str().len() - 1;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).expect("ascii");
    assert_eq!(m.unwrap_content(&forged), Err(MarkerError::Forged { field: Field::EncryptedContent }));
}

/// What `may_need_tagging` must answer: whether any of the four needles is in the text.
fn holds_a_needle(text: &[u8]) -> bool {
    [b"encrypted_content".as_slice(), b"\"rs_", b"\"cmp_", b"\"resp_"]
        .iter()
        .any(|needle| memchr::memmem::find(text, needle).is_some())
}

proptest! {
    #[test]
    fn may_need_tagging_is_true_exactly_when_a_needle_is_there(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("encrypted_content"), Just("encrypted_"), Just("_content"), Just("\"rs_"), Just("\"rs"),
                Just("rs_"), Just("\"cmp_"), Just("\"resp_"), Just("\"res_"), Just("\"msg_"), Just("_"),
                Just("\""), Just("item_id"), Just("x"), Just("encrypted"), Just("content"),
            ],
            0..12,
        )
    ) {
        let text = parts.concat();
        prop_assert_eq!(Markers::may_need_tagging(text.as_bytes()), holds_a_needle(text.as_bytes()), "{:?}", text);
    }
}
