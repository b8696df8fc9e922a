//! Cost of Keymux's markers on a 1 MiB Codex-like history: tagging every org-bound item as it streams
//! back (the `output_item.done` events a client turned into its history) and stripping every marker from
//! the replayed body. Prints figures; asserts nothing about speed.
//!
//! Run: `cargo bench --bench markers`
#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::disallowed_methods,
    reason = "a benchmark binary that prints what it measures"
)]

use std::time::{Duration, Instant};

use base64::Engine as _;
use keymux::keys::KeyId;
use keymux::markers::Markers;
use keymux::relay::Tagger;
use keymux::secrets::Secret;
use rand::{RngCore as _, SeedableRng as _};
use serde_json::{json, Value};

const TARGET_BYTES: usize = 1024 * 1024;

/// Output items as the upstream sends them, and the history a client builds from them (a Codex turn-1
/// prefix, then reasoning, assistant, tool call and tool output per turn, until 1 MiB).
fn history() -> (Vec<Value>, Value) {
    let fixture: Value = serde_json::from_slice(
        &std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/codex/http-turn1.json")).unwrap(),
    )
    .unwrap();
    let mut body = fixture["body"].clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut outputs = Vec::new();
    let mut turn = 0;
    while serde_json::to_vec(&body).unwrap().len() < TARGET_BYTES {
        turn += 1;
        let mut sealed = vec![0u8; 3000];
        rng.fill_bytes(&mut sealed);
        let reasoning = json!({"type":"reasoning","id":format!("rs_{:048x}", turn),"summary":[],"encrypted_content":format!("gAAAAA{}", base64::engine::general_purpose::URL_SAFE.encode(&sealed))});
        let message = json!({"type":"message","id":format!("msg_{:048x}", turn),"status":"completed","role":"assistant","content":[{"type":"output_text","text":"Working on it. ".repeat(20),"annotations":[],"logprobs":[]}]});
        let call = json!({"type":"function_call","id":format!("fc_{:048x}", turn),"call_id":format!("call_{turn}"),"name":"exec_command","arguments":"{\"cmd\":\"cargo test\"}","status":"completed"});
        outputs.extend([reasoning, message, call]);
        let input = body["input"].as_array_mut().unwrap();
        input.extend(outputs[outputs.len() - 3..].iter().cloned());
        input.push(json!({"type":"function_call_output","id":format!("fco_{turn}"),"call_id":format!("call_{turn}"),"output":"test result: ok. 12 passed; 0 failed\n".repeat(8)}));
    }
    (outputs, body)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let markers = Markers::new(&Secret::new("bench-install-secret"));
    let key = KeyId::new("k_0123456789");
    let org = markers.org_tag(Some("org-bench"), &key);
    let tagger = Tagger::new(markers.clone(), key.clone(), org);
    let (outputs, plain_body) = history();

    // The events the client received, one `output_item.done` per output item.
    let events: Vec<Vec<u8>> = outputs
        .iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::to_vec(
                &json!({"type":"response.output_item.done","sequence_number":i,"output_index":0,"item":item}),
            )
            .unwrap()
        })
        .collect();
    let event_bytes: usize = events.iter().map(Vec::len).sum();

    // The replayed body, as the client sends it back: every org-bound item carries its marker.
    let mut tagged_body = plain_body.clone();
    markers.tag_tree(&mut tagged_body["input"], &key, org);
    let tagged_bytes = serde_json::to_vec(&tagged_body).unwrap();
    let plain_bytes = serde_json::to_vec(&plain_body).unwrap();

    let runs = 60;
    let mut tag_times = Vec::with_capacity(runs);
    let mut strip_times = Vec::with_capacity(runs);
    let mut plain_strip_times = Vec::with_capacity(runs);
    let mut tagged_out = 0;
    for _ in 0..runs {
        let t = Instant::now();
        for e in &events {
            tagged_out += tagger.tag_json(e).map_or(e.len(), |v| v.len());
        }
        tag_times.push(t.elapsed());

        let t = Instant::now();
        let stripped = markers.strip(&tagged_bytes).unwrap();
        strip_times.push(t.elapsed());
        assert_eq!(stripped.body.as_ref(), &plain_bytes[..], "stripping restores the exact bytes");

        let t = Instant::now();
        let untouched = markers.strip(&plain_bytes).unwrap();
        plain_strip_times.push(t.elapsed());
        assert_eq!(untouched.removed, 0);
    }
    std::hint::black_box(tagged_out);

    let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
    let per_mib = |d: Duration, bytes: usize| d.as_secs_f64() * 1000.0 / mib(bytes);
    let (tag, strip, plain) = (median(tag_times), median(strip_times), median(plain_strip_times));
    println!(
        "history: {:.2} MiB replayed body, {} output items ({} reasoning), {:.2} MiB of output_item.done events",
        mib(tagged_bytes.len()),
        outputs.len(),
        outputs.len() / 3,
        mib(event_bytes)
    );
    println!(
        "tag   (output_item.done events, markers spliced in)  : {:>7.3} ms  = {:.3} ms/MiB",
        tag.as_secs_f64() * 1000.0,
        per_mib(tag, event_bytes)
    );
    println!(
        "strip (replayed body, {} markers removed):          {:>7.3} ms  = {:.3} ms/MiB",
        markers.strip(&tagged_bytes).unwrap().removed,
        strip.as_secs_f64() * 1000.0,
        per_mib(strip, tagged_bytes.len())
    );
    println!(
        "strip (body without markers, nothing to do):        {:>7.3} ms  = {:.3} ms/MiB",
        plain.as_secs_f64() * 1000.0,
        per_mib(plain, plain_bytes.len())
    );
    println!(
        "tag + strip per MiB of history: {:.3} ms (target: under 2 ms)",
        per_mib(tag, event_bytes) + per_mib(strip, tagged_bytes.len())
    );
}
