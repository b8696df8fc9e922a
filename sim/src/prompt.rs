//! Prompt rendering: a canonical, prefix-stable serialization of tools, instructions and input
//! items, token estimates (≈ 4 bytes a token) and the chained block hashes the prompt cache uses.
//!
//! A compaction item stands in for the whole history before it: OpenAI documents that clients
//! may drop what precedes the latest compaction item, so the model must not need it.

use std::sync::Arc;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// Bytes per estimated token.
pub(crate) const BYTES_PER_TOKEN: usize = 4;
/// Cacheable prefixes grow in steps of this many tokens.
pub(crate) const CACHE_STEP_TOKENS: u64 = 128;
/// The shortest cacheable prefix, in tokens.
pub(crate) const MIN_CACHE_TOKENS: u64 = 1024;
const BLOCK_BYTES: usize = CACHE_STEP_TOKENS as usize * BYTES_PER_TOKEN;

/// Estimated tokens of `bytes` bytes of rendered prompt.
pub(crate) fn tokens_of(bytes: usize) -> u64 {
    u64::try_from(bytes / BYTES_PER_TOKEN).unwrap_or(u64::MAX)
}

/// Sorts object keys and drops nulls, recursively.
pub(crate) fn canonical_value(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                let child = &map[k];
                if child.is_null() {
                    continue;
                }
                let empty_array = child.as_array().is_some_and(Vec::is_empty);
                if empty_array && (k == "annotations" || k == "logprobs") {
                    continue;
                }
                out.insert(k.clone(), canonical_value(child));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical_value).collect()),
        other => other.clone(),
    }
}

/// The model-visible form of one input or output item: ids, statuses and cosmetic empty
/// fields are dropped, and shorthand messages (`{"role","content":"text"}`) are expanded, so
/// that an item replayed by a client renders exactly like the item the server produced.
pub(crate) fn canonical_item(item: &Value) -> Value {
    let Value::Object(map) = item else {
        return canonical_value(item);
    };
    let mut m = map.clone();
    m.remove("id");
    m.remove("status");
    let is_message = match m.get("type") {
        Some(Value::String(t)) => t == "message",
        None => m.contains_key("role"),
        _ => false,
    };
    if is_message {
        m.insert("type".into(), Value::String("message".into()));
        if let Some(Value::String(text)) = m.get("content") {
            let part_type =
                if m.get("role").and_then(Value::as_str) == Some("assistant") { "output_text" } else { "input_text" };
            let mut part = Map::new();
            part.insert("type".into(), Value::String(part_type.into()));
            part.insert("text".into(), Value::String(text.clone()));
            m.insert("content".into(), Value::Array(vec![Value::Object(part)]));
        }
    }
    canonical_value(&Value::Object(m))
}

/// Whether `item` is a compaction item (`{"type":"compaction","encrypted_content":…}`).
pub(crate) fn is_compaction(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("compaction")
}

/// The conversation after `items` follow `parent`. From the latest compaction item among
/// `items` on, the history before it (the parent included) is no longer rendered.
pub(crate) fn conversation(parent: Option<Arc<Transcript>>, items: &[Value]) -> Arc<Transcript> {
    match items.iter().rposition(is_compaction) {
        Some(at) => Transcript::extend(None, items[at..].iter().map(item_line).collect()),
        None => Transcript::extend(parent, items.iter().map(item_line).collect()),
    }
}

/// One rendered line per item.
pub(crate) fn item_line(item: &Value) -> String {
    let mut line = canonical_item(item).to_string();
    line.push('\n');
    line
}

/// A chat message renders like any other item, keeping its role and content.
pub(crate) fn message_line(message: &Value) -> String {
    let mut line = canonical_value(message).to_string();
    line.push('\n');
    line
}

/// The `input` of a request as a list of items (a bare string is one user message).
pub(crate) fn input_items(input: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    match input {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![serde_json::json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })]),
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(_) => Err(ApiError::invalid_type(
            "input",
            "Invalid type for 'input': expected one of a string or an array of input items.".to_owned(),
        )),
    }
}

/// The part of the prompt that precedes the conversation: tools, then instructions.
pub(crate) fn header(tools: Option<&Value>, instructions: Option<&Value>) -> String {
    let mut out = String::new();
    if let Some(tools) = tools.filter(|t| t.as_array().is_some_and(|a| !a.is_empty())) {
        out.push_str("tools:");
        out.push_str(&canonical_value(tools).to_string());
        out.push('\n');
    }
    match instructions {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            out.push_str("instructions:");
            out.push_str(s);
            out.push('\n');
        }
        Some(other) => {
            out.push_str("instructions:");
            out.push_str(&canonical_value(other).to_string());
            out.push('\n');
        }
    }
    out
}

/// The rendered conversation of a response chain. Each node adds the lines of one response
/// (its input items, then its output items) to its parent's, so a chain shares its prefix.
#[derive(Debug)]
pub(crate) struct Transcript {
    parent: Option<Arc<Transcript>>,
    lines: Vec<String>,
    total_bytes: usize,
}

impl Transcript {
    pub(crate) fn extend(parent: Option<Arc<Transcript>>, lines: Vec<String>) -> Arc<Transcript> {
        let own: usize = lines.iter().map(String::len).sum();
        let total_bytes = parent.as_ref().map_or(0, |p| p.total_bytes) + own;
        Arc::new(Transcript { parent, lines, total_bytes })
    }

    pub(crate) fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// Every line of the chain, oldest first.
    fn for_each_line(&self, mut f: impl FnMut(&str)) {
        let mut nodes = vec![self];
        let mut cur = self.parent.as_deref();
        while let Some(node) = cur {
            nodes.push(node);
            cur = node.parent.as_deref();
        }
        for node in nodes.into_iter().rev() {
            for line in &node.lines {
                f(line);
            }
        }
    }
}

impl Drop for Transcript {
    // Unlinks long chains iteratively so that dropping one never recurses deeply.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(node) = next {
            match Arc::try_unwrap(node) {
                Ok(mut owned) => next = owned.parent.take(),
                Err(_) => break,
            }
        }
    }
}

/// A full prompt: header plus conversation.
#[derive(Debug)]
pub(crate) struct Prompt {
    pub header: String,
    pub conversation: Arc<Transcript>,
}

impl Prompt {
    pub(crate) fn bytes(&self) -> usize {
        self.header.len() + self.conversation.total_bytes()
    }

    pub(crate) fn tokens(&self) -> u64 {
        tokens_of(self.bytes())
    }

    /// A short digest of the whole rendered prompt, sealed into encrypted items.
    pub(crate) fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.header.as_bytes());
        self.conversation.for_each_line(|line| h.update(line.as_bytes()));
        hex::encode(&h.finalize()[..8])
    }

    /// Chained hashes of every whole 128-token block: element `k` identifies the prefix of
    /// `(k + 1) * 128` tokens under `cache_key`.
    pub(crate) fn block_hashes(&self, cache_key: &str) -> Vec<[u8; 32]> {
        let mut hasher = BlockHasher::new(cache_key);
        hasher.feed(self.header.as_bytes());
        self.conversation.for_each_line(|line| hasher.feed(line.as_bytes()));
        hasher.hashes
    }
}

struct BlockHasher {
    chain: [u8; 32],
    block: Vec<u8>,
    hashes: Vec<[u8; 32]>,
}

impl BlockHasher {
    fn new(cache_key: &str) -> Self {
        let mut seed = Sha256::new();
        seed.update(b"keymux-sim prompt cache\0");
        seed.update((cache_key.len() as u64).to_le_bytes());
        seed.update(cache_key.as_bytes());
        BlockHasher { chain: seed.finalize().into(), block: Vec::with_capacity(BLOCK_BYTES), hashes: Vec::new() }
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = (BLOCK_BYTES - self.block.len()).min(bytes.len());
            self.block.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.block.len() == BLOCK_BYTES {
                let mut h = Sha256::new();
                h.update(self.chain);
                h.update(&self.block);
                self.chain = h.finalize().into();
                self.hashes.push(self.chain);
                self.block.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replayed_items_render_like_produced_items() {
        let produced = json!({"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"hi"}],"role":"assistant"});
        let codex = json!({"type":"message","status":"completed","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[],"logprobs":[]}]});
        let pi = json!({"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}],"status":"completed","id":"msg_1"});
        assert_eq!(item_line(&produced), item_line(&codex));
        assert_eq!(item_line(&produced), item_line(&pi));
        let rs_codex = json!({"type":"reasoning","id":"rs_1","summary":[],"content":null,"encrypted_content":"x"});
        let rs_pi = json!({"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"x"});
        assert_eq!(item_line(&rs_codex), item_line(&rs_pi));
        let short = json!({"role":"user","content":"hello"});
        let long = json!({"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]});
        assert_eq!(item_line(&short), item_line(&long));
    }

    #[test]
    fn extended_prompts_share_block_hashes() {
        let t1 = Transcript::extend(None, vec!["a".repeat(5000)]);
        let p1 = Prompt { header: "tools:[]\n".into(), conversation: t1.clone() };
        let t2 = Transcript::extend(Some(t1), vec!["b".repeat(3000)]);
        let p2 = Prompt { header: "tools:[]\n".into(), conversation: t2 };
        let h1 = p1.block_hashes("k");
        let h2 = p2.block_hashes("k");
        assert_eq!(h1.len(), p1.bytes() / BLOCK_BYTES);
        assert_eq!(&h2[..h1.len()], &h1[..]);
        assert_ne!(p1.block_hashes("other")[0], h1[0]);
    }

    #[test]
    fn a_compaction_item_stands_in_for_the_history_before_it() {
        let history = conversation(None, &[json!({"role": "user", "content": "x".repeat(8000)})]);
        let cmp = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAAsealed"});
        let after = json!({"role": "user", "content": "next"});
        // Chained by previous_response_id, or replayed after the full history: the same prompt.
        let chained = conversation(Some(history.clone()), &[cmp.clone(), after.clone()]);
        let replayed = conversation(None, &[json!({"role": "developer", "content": "old"}), cmp.clone(), after]);
        let expected = item_line(&cmp).len() + item_line(&json!({"role": "user", "content": "next"})).len();
        assert_eq!(chained.total_bytes(), expected);
        assert_eq!(replayed.total_bytes(), expected);
        // Without an id it renders the same.
        let bare = json!({"type": "compaction", "encrypted_content": "gAAAAAsealed"});
        assert_eq!(item_line(&bare), item_line(&cmp));
        // Only the latest compaction item counts; without one, the history stays.
        let newer = json!({"type": "compaction", "encrypted_content": "gAAAAAnewer"});
        let twice = conversation(None, &[cmp.clone(), json!({"role": "user", "content": "mid"}), newer.clone()]);
        assert_eq!(twice.total_bytes(), item_line(&newer).len());
        let kept = conversation(Some(history.clone()), &[json!({"role": "user", "content": "more"})]);
        assert!(kept.total_bytes() > history.total_bytes());
    }

    #[test]
    fn digests_cover_the_whole_prompt() {
        let a = Prompt { header: String::new(), conversation: Transcript::extend(None, vec!["ab\n".into()]) };
        let b = Prompt { header: String::new(), conversation: Transcript::extend(None, vec!["ba\n".into()]) };
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest().len(), 16);
    }

    #[test]
    fn long_chains_drop_without_recursion() {
        let mut t = Transcript::extend(None, vec!["x\n".into()]);
        for _ in 0..200_000 {
            t = Transcript::extend(Some(t), vec!["x\n".into()]);
        }
        assert_eq!(t.total_bytes(), 2 * 200_001);
        drop(t);
    }
}
