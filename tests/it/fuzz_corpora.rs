//! The fuzz targets (`fuzz/`, run with `scripts/fuzz` on nightly) as ordinary tests of their seed
//! corpora, on stable: every seed goes through every target's checks. The seeds come from the captured
//! Codex and pi requests in `tests/fixtures`, tagged and untagged, as bodies, SSE streams and frames.
//! With `KEYMUX_WRITE_CORPUS=DIR`, the seeds are also written to `DIR/<target>/` for `cargo fuzz`.
#![allow(clippy::unwrap_used, clippy::disallowed_methods, reason = "tests")]

#[path = "../../fuzz/entries.rs"]
mod entries;

use std::path::{Path, PathBuf};

use keymux::keys::KeyId;
use keymux::markers::Markers;
use keymux::relay::Tagger;
use keymux::secrets::Secret;
use serde_json::{json, Value};

/// Every captured request body, as sent.
fn bodies() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<PathBuf> = Vec::new();
    for client in ["codex", "pi"] {
        for entry in std::fs::read_dir(root.join(client)).unwrap().flatten() {
            files.push(entry.path());
        }
    }
    files.sort();
    files
        .iter()
        .filter_map(|f| {
            let capture: Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
            capture.get("body").filter(|b| b.is_object()).map(|b| serde_json::to_vec(b).unwrap())
        })
        .collect()
}

fn tagger() -> (Markers, Tagger) {
    let markers = Markers::new(&Secret::new("fuzz-install-secret"));
    let key = KeyId::new("k_fuzz");
    let org = markers.org_tag(Some("org-fuzz"), &key);
    (markers.clone(), Tagger::new(markers, key, org))
}

/// The org-bound items of a body (reasoning and compaction), as a provider would send them out.
fn items(body: &[u8]) -> Vec<Value> {
    let v: Value = serde_json::from_slice(body).unwrap();
    let list = v.get("input").and_then(Value::as_array).cloned().unwrap_or_default();
    list.into_iter().filter(|i| i.get("encrypted_content").is_some()).collect()
}

fn stream_of(items: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    out.push_str(&format!(
        "event: response.created\ndata: {}\n\n",
        json!({"type":"response.created","response":{"id":"resp_1"}})
    ));
    for item in items {
        let event = json!({"type":"response.output_item.done","item":item});
        out.push_str(&format!("event: response.output_item.done\ndata: {event}\n\n"));
    }
    let done = json!({"type":"response.completed","response":{"id":"resp_1","output":items,
        "usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}});
    out.push_str(&format!("event: response.completed\ndata: {done}\n\n"));
    out.into_bytes()
}

const CONFIGS: [&str; 4] = [
    "",
    "listen = \"127.0.0.1:8787\"\nmax_attempts = 3\n[affinity]\nlost_org = \"rescue\"\n",
    "[[keys]]\nid = \"k_work\"\nlabel = \"work\"\npriority = 1\ndaily_token_budget = 5000000\nmodels = [\"gpt-5.5\"]\n",
    "[[keys]]\nid = \"k_az\"\nlabel = \"azure-eu\"\nprovider = \"azure\"\nbase_url = \"https://r.openai.azure.com/openai/v1\"\n[[tokens]]\nid = \"t_1\"\nname = \"codex\"\n",
];

/// Each target's seeds.
fn seeds() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let (_, tagger) = tagger();
    let bodies = bodies();
    let tagged: Vec<Vec<u8>> = bodies.iter().filter_map(|b| tagger.tag_json(b)).collect();
    assert!(!tagged.is_empty(), "the captures hold org-bound items to tag");
    let all: Vec<Vec<u8>> = bodies.iter().chain(&tagged).cloned().collect();
    let streams: Vec<Vec<u8>> = bodies.iter().map(|b| stream_of(&items(b))).collect();
    let frames: Vec<Vec<u8>> = bodies
        .iter()
        .flat_map(|b| items(b))
        .map(|item| serde_json::to_vec(&json!({"type":"response.output_item.done","item":item})).unwrap())
        .chain(bodies.iter().cloned())
        .collect();
    vec![
        ("markers", all.clone()),
        ("facts", all.iter().enumerate().map(|(n, b)| [&[n as u8][..], b].concat()).collect()),
        ("sse", streams.iter().enumerate().map(|(n, s)| [&[(n * 37 % 251) as u8 + 1][..], s].concat()).collect()),
        ("frames", frames),
        ("config", CONFIGS.iter().map(|c| c.as_bytes().to_vec()).collect()),
    ]
}

fn run(target: &str, data: &[u8]) {
    match target {
        "markers" => entries::markers(data),
        "facts" => entries::facts(data),
        "sse" => entries::sse(data),
        "frames" => entries::frames(data),
        "config" => entries::config(data),
        other => panic!("no target {other}"),
    }
}

#[test]
fn every_seed_passes_every_fuzz_target() {
    let out = std::env::var_os("KEYMUX_WRITE_CORPUS").map(PathBuf::from);
    for (target, seeds) in seeds() {
        assert!(!seeds.is_empty(), "{target} has seeds");
        for (n, seed) in seeds.iter().enumerate() {
            run(target, seed);
            if let Some(dir) = &out {
                std::fs::create_dir_all(dir.join(target)).unwrap();
                std::fs::write(dir.join(target).join(format!("seed-{n:03}")), seed).unwrap();
            }
        }
        // A crash found by `cargo fuzz` and saved under `fuzz/regressions/<target>/` stays fixed.
        let regressions = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
        if let Ok(entries) = std::fs::read_dir(regressions) {
            for entry in entries.flatten() {
                run(target, &std::fs::read(entry.path()).unwrap());
            }
        }
    }
}

#[test]
fn the_targets_check_what_they_claim() {
    // A tagged frame strips back to itself; the property check would catch a lossy tag or strip.
    let (markers, tagger) = tagger();
    let item = json!({"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAABsealed"});
    let frame = serde_json::to_vec(&json!({"type":"response.output_item.done","item":item})).unwrap();
    let tagged = tagger.tag_json(&frame).expect("an org-bound item gets a marker");
    assert_ne!(tagged, frame);
    assert_eq!(markers.strip(&tagged).unwrap().removed, 2, "the id and the encrypted content");
    entries::frames(&frame);
    entries::markers(&tagged);
    entries::sse(&[&[7][..], &stream_of(&[item])].concat());
}
