//! Organization-bound `encrypted_content`: ChaCha20-Poly1305 under the organization's secret,
//! rendered as `gAAAAA` + base64url(nonce ‖ ciphertext ‖ tag), and its validation on replay.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;
use serde_json::Value;

use crate::error::ApiError;

/// Every token starts with this, like OpenAI's.
pub(crate) const TOKEN_PREFIX: &str = "gAAAAA";
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const AAD: &[u8] = b"keymux-sim encrypted_content v1";

const B64: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The authenticated cipher of one organization.
pub(crate) struct OrgCipher {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for OrgCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OrgCipher(..)")
    }
}

impl OrgCipher {
    pub(crate) fn new(secret: &[u8; 32]) -> Self {
        OrgCipher { cipher: ChaCha20Poly1305::new(Key::from_slice(secret)) }
    }

    /// Encrypts `payload` (its JSON text) under a fresh random nonce.
    pub(crate) fn seal(&self, payload: &Value) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::thread_rng().fill_bytes(&mut nonce);
        let plain = payload.to_string();
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: plain.as_bytes(), aad: AAD })
            .unwrap_or_default();
        let mut raw = Vec::with_capacity(NONCE_LEN + sealed.len());
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&sealed);
        format!("{TOKEN_PREFIX}{}", B64.encode(raw))
    }

    /// Decrypts a token; `None` if it is malformed or was not sealed by this organization.
    pub(crate) fn open(&self, token: &str) -> Option<Vec<u8>> {
        let raw = decode(token)?;
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        self.cipher.decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: AAD }).ok()
    }
}

fn decode(token: &str) -> Option<Vec<u8>> {
    let body = token.strip_prefix(TOKEN_PREFIX)?;
    let raw = B64.decode(body).ok()?;
    (raw.len() >= NONCE_LEN + TAG_LEN).then_some(raw)
}

/// Outcome of checking one token against the serving organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Sealed by the serving organization.
    Valid,
    /// Well-formed and sealed by another organization of this deployment.
    OtherOrganization,
    /// Not decryptable by any organization.
    Undecryptable,
}

pub(crate) fn check<'a>(serving: &OrgCipher, others: impl IntoIterator<Item = &'a OrgCipher>, token: &str) -> Verdict {
    if serving.open(token).is_some() {
        return Verdict::Valid;
    }
    if decode(token).is_some() && others.into_iter().any(|c| c.open(token).is_some()) {
        return Verdict::OtherOrganization;
    }
    Verdict::Undecryptable
}

/// The plaintext of a token sealed by one of `ciphers`.
pub(crate) fn open_any(ciphers: &[&OrgCipher], token: &str) -> Option<Vec<u8>> {
    ciphers.iter().find_map(|c| c.open(token))
}

/// Checks every `encrypted_content` string anywhere under `input`.
pub(crate) fn validate_input(serving: &OrgCipher, others: &[&OrgCipher], input: &Value) -> Result<(), ApiError> {
    validate_items(serving, others, std::slice::from_ref(input))
}

/// Checks every `encrypted_content` string anywhere under `items`.
pub(crate) fn validate_items(serving: &OrgCipher, others: &[&OrgCipher], items: &[Value]) -> Result<(), ApiError> {
    let mut found = Vec::new();
    items.iter().for_each(|item| collect_tokens(item, &mut found));
    for (item_id, token) in found {
        let reason = match check(serving, others.iter().copied(), token) {
            Verdict::Valid => continue,
            Verdict::OtherOrganization => "Encrypted content organization_id did not match the target organization_id.",
            Verdict::Undecryptable => "Could not decrypt encrypted content.",
        };
        return Err(ApiError::invalid_encrypted_content(item_id, reason));
    }
    Ok(())
}

fn collect_tokens<'a>(v: &'a Value, out: &mut Vec<(Option<&'a str>, &'a str)>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| collect_tokens(i, out)),
        Value::Object(map) => {
            if let Some(Value::String(token)) = map.get("encrypted_content") {
                let id = map.get("id").and_then(Value::as_str);
                out.push((id, token));
            }
            for (k, child) in map {
                if k != "encrypted_content" {
                    collect_tokens(child, out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_are_bound_to_their_organization() {
        let a = OrgCipher::new(&[1; 32]);
        let b = OrgCipher::new(&[2; 32]);
        let token = a.seal(&json!({"org": "org-a"}));
        assert!(token.starts_with(TOKEN_PREFIX));
        assert_eq!(check(&a, [&b], &token), Verdict::Valid);
        assert_eq!(check(&b, [&a], &token), Verdict::OtherOrganization);
        assert_eq!(check(&b, [&a], &token[..token.len() - 6]), Verdict::Undecryptable);
        let mut tampered = token.clone().into_bytes();
        let i = tampered.len() / 2;
        tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap_or_default();
        assert_eq!(check(&a, [&b], &tampered), Verdict::Undecryptable);
        assert_eq!(check(&a, [&b], "not a token"), Verdict::Undecryptable);
    }

    #[test]
    fn nested_tokens_are_found() {
        let a = OrgCipher::new(&[1; 32]);
        let b = OrgCipher::new(&[2; 32]);
        let good = a.seal(&json!({}));
        let foreign = b.seal(&json!({}));
        let input = json!([
            {"type": "reasoning", "id": "rs_1", "encrypted_content": good},
            {"type": "wrapper", "items": [{"type": "compaction", "id": "cmp_9", "encrypted_content": foreign}]}
        ]);
        let err = validate_input(&a, &[&b], &input).err();
        let err = err.map(|e| e.message.clone()).unwrap_or_default();
        assert!(err.contains("for item cmp_9"), "{err}");
        assert!(err.contains("organization_id did not match"), "{err}");
    }
}
