//! Chat Completions, embeddings, models, unknown paths, gzip answers, compressed request bodies, Azure
//! keys, the control surface and the binary.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use anyhow::Context;
use common::*;
use keymux_sim::{Fault, Sim};
use serde_json::{json, Value};

#[tokio::test]
async fn chat_completions_stream_with_usage_and_cache() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let prompt = big_prompt(12_000);
    let body = json!({
        "model": "gpt-5.5",
        "messages": [
            {"role": "developer", "content": prompt},
            {"role": "user", "content": [{"type": "text", "text": "Say hello. This is turn one."}]},
        ],
        "stream": true,
        "stream_options": {"include_usage": true},
        "store": false,
        "max_completion_tokens": 32000,
        "reasoning_effort": "medium",
    });
    let events = stream(&sim, "sk-a1", "/chat/completions", &body).await?;
    assert_eq!(events.last().map(|e| e.data.clone()), Some(json!("[DONE]")));
    assert!(events.iter().all(|e| e.name.is_none()));
    let chunks: Vec<&Value> = events[..events.len() - 1].iter().map(|e| &e.data).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(text.starts_with("SIM-REPLY #1 from org-a: Say hello."), "{text}");
    let reasoning: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str()).collect();
    assert!(!reasoning.is_empty());
    let finish = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("stop"));
    let usage_chunk = chunks[chunks.len() - 1];
    assert_eq!(usage_chunk["choices"], json!([]));
    let prompt_tokens = usage_chunk["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert!(prompt_tokens > 2900, "{prompt_tokens}");
    assert_eq!(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    // Turn 2 replays the assistant message with reasoning_content: the prefix is cached.
    let mut turn2 = body.clone();
    if let Some(messages) = turn2["messages"].as_array_mut() {
        messages.push(json!({"role": "assistant", "content": text, "reasoning_content": reasoning}));
        messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Now say goodbye."}]}));
    }
    let events = stream(&sim, "sk-a2", "/chat/completions", &turn2).await?;
    let usage = &events[events.len() - 2].data["usage"];
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached >= prompt_tokens / 128 * 128, "{cached} vs {prompt_tokens}");
    let events = stream(&sim, "sk-b1", "/chat/completions", &turn2).await?;
    assert_eq!(events[events.len() - 2].data["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    // Without include_usage there is no usage chunk.
    let mut plain = body.clone();
    plain.as_object_mut().map(|m| m.remove("stream_options"));
    let events = stream(&sim, "sk-a1", "/chat/completions", &plain).await?;
    assert!(events.iter().all(|e| e.data.get("usage").is_none()));

    // JSON form.
    let mut json_body = body;
    json_body["stream"] = json!(false);
    let r = post(&sim, "sk-a1", "/chat/completions", &json_body).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["object"], "chat.completion");
    let message = &r.body["choices"][0]["message"];
    assert_eq!(message["role"], "assistant");
    assert!(message["content"].as_str().is_some_and(|c| c.starts_with("SIM-REPLY")));
    assert!(message["reasoning_content"].is_string());
    assert!(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0) > 0);
    Ok(())
}

#[tokio::test]
async fn embeddings_are_deterministic() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let one =
        post(&sim, "sk-a1", "/embeddings", &json!({"model": "text-embedding-3-small", "input": "hello world"})).await?;
    assert_eq!(one.status, 200);
    assert_eq!(one.body["object"], "list");
    assert_eq!(one.body["model"], "text-embedding-3-small");
    let v = one.body["data"][0]["embedding"].as_array().cloned().unwrap_or_default();
    assert_eq!(v.len(), 8);
    assert_eq!(one.body["data"][0]["object"], "embedding");
    let norm: f64 = v.iter().filter_map(Value::as_f64).map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-3);
    assert!(one.body["usage"]["prompt_tokens"].as_u64().unwrap_or(0) > 0);
    assert_eq!(one.body["usage"]["prompt_tokens"], one.body["usage"]["total_tokens"]);

    let many = post(
        &sim,
        "sk-b1",
        "/embeddings",
        &json!({"model": "text-embedding-3-small", "input": ["other", "hello world"]}),
    )
    .await?;
    let data = many.body["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[1]["embedding"], one.body["data"][0]["embedding"]);
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);

    let b64 = post(
        &sim,
        "sk-a1",
        "/embeddings",
        &json!({"model": "text-embedding-3-small", "input": "hello world", "encoding_format": "base64"}),
    )
    .await?;
    assert!(b64.body["data"][0]["embedding"].is_string());

    let missing = post(&sim, "sk-a1", "/embeddings", &json!({"model": "text-embedding-3-small"})).await?;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.body["error"]["code"], "missing_required_parameter");
    Ok(())
}

#[tokio::test]
async fn each_organization_lists_and_serves_only_its_models() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs().org_models("org-b", &["gpt-6-sol", "gpt-4.1"])).await?;
    let ids = |list: &Answer| -> Vec<String> {
        let data = list.body["data"].as_array().cloned().unwrap_or_default();
        data.iter().filter_map(|m| m["id"].as_str().map(str::to_owned)).collect()
    };
    let b = get(&sim, "sk-b1", "/models").await?;
    assert_eq!((b.status, b.body["object"].clone()), (200, json!("list")));
    assert_eq!(ids(&b), ["gpt-6-sol", "gpt-4.1"], "in the simulator's order");
    assert_eq!(ids(&get(&sim, "sk-a1", "/models").await?).len(), keymux_sim::MODELS.len());
    assert_eq!(get(&sim, "sk-b1", "/models/gpt-5.5").await?.status, 404);
    assert_eq!(get(&sim, "sk-b1", "/models/gpt-4.1").await?.status, 200);
    let r = post(&sim, "sk-b1", "/responses", &json!({"model": "gpt-5.5", "input": "x"})).await?;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (404, json!("model_not_found")));
    let r = post(&sim, "sk-a1", "/responses", &json!({"model": "gpt-5.5", "input": "x"})).await?;
    assert_eq!(r.status, 200);
    assert!(Sim::start(two_orgs().org_models("org-b", &["gpt-0"])).await.is_err(), "an unknown model is refused");
    Ok(())
}

#[tokio::test]
async fn models_and_unknown_paths() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let list = get(&sim, "sk-a1", "/models").await?;
    assert_eq!(list.status, 200);
    assert_eq!(list.body["object"], "list");
    let ids: Vec<&str> =
        list.body["data"].as_array().map(|a| a.iter().filter_map(|m| m["id"].as_str()).collect()).unwrap_or_default();
    for m in ["gpt-5.5", "gpt-5.5-mini", "text-embedding-3-small"] {
        assert!(ids.contains(&m), "{m} missing from {ids:?}");
    }
    let one = get(&sim, "sk-a1", "/models/gpt-5.5").await?;
    assert_eq!((one.status, one.body["object"].clone()), (200, json!("model")));
    let none = get(&sim, "sk-a1", "/models/gpt-0").await?;
    assert_eq!(none.status, 404);
    assert_eq!(none.body["error"]["code"], "model_not_found");

    for (method, path, key) in [
        (reqwest::Method::POST, "/xyz", Some("sk-a1")),
        (reqwest::Method::GET, "/responses", Some("sk-a1")),
        (reqwest::Method::POST, "/xyz", None),
    ] {
        let r = send(&sim, method.clone(), key, path, Some(&json!({}))).await?;
        assert_eq!(r.status, 404);
        assert_eq!(
            r.body,
            json!({"error": {"message": format!("Invalid URL ({method} /v1{path})"),
                             "type": "invalid_request_error", "param": null, "code": null}})
        );
    }
    let r = post(&sim, "sk-a1", "/responses", &json!({"model": "gpt-9", "input": "x"})).await?;
    assert_eq!(
        r.body,
        json!({"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.",
                         "type": "invalid_request_error", "param": null, "code": "model_not_found"}})
    );
    assert_eq!(r.status, 404);
    let r = post(&sim, "sk-a1", "/responses", &json!({"input": "x"})).await?;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("model")));
    Ok(())
}

#[tokio::test]
async fn gzip_is_used_when_enabled_and_accepted() -> anyhow::Result<()> {
    let body = json!({"model": "gpt-5.5", "input": "compress me"});
    let raw = reqwest::Client::builder().no_gzip().build()?;
    for enabled in [true, false] {
        let sim = Sim::start(two_orgs().gzip_json(enabled)).await?;
        let resp = raw
            .post(format!("{}/responses", sim.base_url()))
            .bearer_auth("sk-a1")
            .header("accept-encoding", "zstd,gzip")
            .json(&body)
            .send()
            .await?;
        let encoding = resp.headers().get("content-encoding").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let bytes = resp.bytes().await?;
        let text = if enabled {
            assert_eq!(encoding.as_deref(), Some("gzip"));
            let mut out = String::new();
            flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut out)?;
            out
        } else {
            assert_eq!(encoding, None);
            String::from_utf8(bytes.to_vec())?
        };
        let v: Value = serde_json::from_str(&text)?;
        assert_eq!(v["status"], "completed");

        // Not accepted: plain body.
        let resp = raw.post(format!("{}/responses", sim.base_url())).bearer_auth("sk-a1").json(&body).send().await?;
        assert!(resp.headers().get("content-encoding").is_none());
        // A gzip-capable client decodes it transparently.
        let decoded =
            client().post(format!("{}/responses", sim.base_url())).bearer_auth("sk-a1").json(&body).send().await?;
        let v: Value = decoded.json().await?;
        assert_eq!(v["object"], "response");
    }
    Ok(())
}

#[tokio::test]
async fn compressed_request_bodies_are_read_or_refused_never_read_as_plain() -> anyhow::Result<()> {
    use std::io::Write as _;
    let sim = Sim::start(two_orgs()).await?;
    let plain = serde_json::to_vec(&json!({"model": "gpt-5.5", "input": "compressed"}))?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain)?;
    let cases = [
        ("zstd", zstd::encode_all(&plain[..], 3)?, 200),
        ("gzip", gz.finish()?, 200),
        ("identity", plain.clone(), 200),
        // Plain bytes that say they are compressed, a coding OpenAI is not known to read, two codings.
        ("zstd", plain.clone(), 400),
        ("br", plain.clone(), 400),
        ("gzip, zstd", plain.clone(), 400),
    ];
    for (coding, bytes, want) in cases {
        let resp = client()
            .post(format!("{}/responses", sim.base_url()))
            .bearer_auth("sk-a1")
            .header("content-type", "application/json")
            .header("content-encoding", coding)
            .body(bytes)
            .send()
            .await?;
        assert_eq!(resp.status().as_u16(), want, "{coding}");
        let v: Value = resp.json().await?;
        if want == 200 {
            let text = v["output"].as_array().and_then(|o| o.iter().find_map(|i| i["content"][0]["text"].as_str()));
            assert!(text.is_some_and(|t| t.ends_with("from org-a: compressed")), "{coding}: {v}");
        } else {
            assert_eq!(v["error"]["type"], "invalid_request_error", "{coding}: {v}");
        }
    }
    let log = sim.log();
    assert!(log
        .iter()
        .filter(|e| e.status == 200)
        .all(|e| e.body.as_ref().is_some_and(|b| b["input"] == "compressed")));
    Ok(())
}

#[tokio::test]
async fn azure_keys_use_the_api_key_header_only() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs().azure_org("org-c", &["azkey1"])).await?;
    let body = json!({"model": "gpt-5.5", "input": "hi"});
    let url = format!("{}/responses", sim.base_url());
    let ok = client().post(&url).header("api-key", "azkey1").json(&body).send().await?;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers().get("openai-organization").and_then(|v| v.to_str().ok()), Some("org-c"));
    let bearer_azure = client().post(&url).bearer_auth("azkey1").json(&body).send().await?;
    assert_eq!(bearer_azure.status(), 401);
    let v: Value = bearer_azure.json().await?;
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let header_bearer = client().post(&url).header("api-key", "sk-a1").json(&body).send().await?;
    assert_eq!(header_bearer.status(), 401);
    let log = sim.log();
    assert_eq!(log[0].key.as_deref(), Some("azkey1"));
    assert_eq!(log[0].org.as_deref(), Some("org-c"));
    assert!(log[0].headers.iter().any(|(k, v)| k == "api-key" && v == "<redacted>"));
    assert_eq!(sim.count_by_key().get("azkey1"), Some(&1));
    assert_eq!(sim.count_by_key().get("sk-a1"), None);
    Ok(())
}

#[tokio::test]
async fn control_surface_over_http() -> anyhow::Result<()> {
    let sim = Sim::start(two_orgs()).await?;
    let root = sim.base_url().trim_end_matches("/v1").to_owned();
    let c = client();
    let r = c
        .post(format!("{root}/__sim/faults"))
        .json(&json!({"key": "sk-a1", "fault": {"type": "status503", "retry_after_secs": 1}}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let a = post(&sim, "sk-a1", "/responses", &json!({"model": "gpt-5.5", "input": "x"})).await?;
    assert_eq!((a.status, a.header("retry-after")), (503, Some("1")));

    c.post(format!("{root}/__sim/faults"))
        .json(&json!({"key": "sk-a1", "fault": {"type": "status500"}}))
        .send()
        .await?;
    c.post(format!("{root}/__sim/faults/clear")).send().await?;
    let a = post(&sim, "sk-a1", "/responses", &json!({"model": "gpt-5.5", "input": "x"})).await?;
    assert_eq!(a.status, 200);

    let counts: Value = c.get(format!("{root}/__sim/counts")).send().await?.json().await?;
    assert_eq!(counts, json!({"sk-a1": 2}));
    let log: Value = c.get(format!("{root}/__sim/log")).send().await?.json().await?;
    assert_eq!(log.as_array().map(Vec::len), Some(2));
    assert_eq!(log[0]["status"], 503);
    assert_eq!(log[0]["transport"], "Http");

    let bad = c
        .post(format!("{root}/__sim/faults"))
        .json(&json!({"key": "sk-a1", "fault": {"type": "nonsense"}}))
        .send()
        .await?;
    assert_eq!(bad.status(), 400);
    sim.inject("sk-a1", Fault::Status500);
    sim.clear_faults();
    Ok(())
}

#[test]
fn binary_serves_until_killed() -> anyhow::Result<()> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keymux-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--org",
            "org-a=sk-a1,sk-a2",
            "--org",
            "org-b=sk-b1",
            "--azure-key",
            "org-c=azkey1",
            "--rpm",
            "100",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let result = (|| -> anyhow::Result<()> {
        let base = line
            .trim()
            .strip_prefix("keymux-sim listening on ")
            .with_context(|| format!("unexpected line {line:?}"))?
            .to_owned();
        assert!(base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"), "{base}");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let c = client();
            let r = c
                .post(format!("{base}/responses"))
                .header("api-key", "azkey1")
                .json(&json!({"model": "gpt-5.5", "input": "hi", "stream": false}))
                .send()
                .await?;
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers().get("x-ratelimit-limit-requests").and_then(|v| v.to_str().ok()), Some("100"));
            let root = base.trim_end_matches("/v1");
            let counts: Value = c.get(format!("{root}/__sim/counts")).send().await?.json().await?;
            assert_eq!(counts, json!({"azkey1": 1}));
            anyhow::Ok(())
        })
    })();
    child.kill()?;
    child.wait()?;
    result
}
