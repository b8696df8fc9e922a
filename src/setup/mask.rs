//! Secrets kept out of a preview: the token, every credential the file holds, and any key-shaped
//! word (a key inside a `notify` command or a URL's query string), masked.

/// The secret values a preview must not show: the token, and every credential in the file before and
/// after (a provider's key, an old token), wherever the preview's lines happen to cross them.
pub(super) struct Secrets(Vec<String>);

impl Secrets {
    /// `format` is the file's: "TOML" or "JSON".
    pub(super) fn of(format: &str, old: &str, new: &str, token: &str) -> Self {
        let mut found = vec![token.to_owned()];
        for text in [old, new] {
            // Both formats read into one tree, so one walk finds the credentials.
            let tree = match format {
                "TOML" => toml::from_str::<serde_json::Value>(text).ok(),
                _ => serde_json::from_str::<serde_json::Value>(text).ok(),
            };
            if let Some(tree) = tree {
                collect_secrets("", &tree, &mut found);
            }
        }
        // Longer first, so a secret that contains another is masked whole.
        found.sort_by_key(|s| std::cmp::Reverse(s.len()));
        found.dedup();
        Self(found)
    }

    /// `line` as a preview shows it: a word shaped like a key or token masked wherever it is (first, so
    /// a masked one is not masked again), then every credential the file holds, whatever its shape.
    pub(super) fn mask(&self, line: &str) -> String {
        let line = crate::secrets::mask_words(line, crate::secrets::key_prefixed, mask);
        self.0.iter().fold(line, |line, secret| line.replace(secret.as_str(), &mask(secret)))
    }
}

/// How a secret shows in a preview: its prefix and its last four characters, `km-…abcd`.
pub fn mask(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    if chars.len() < 16 {
        return "…".into();
    }
    let prefix = secret.split_once('-').filter(|(p, _)| p.len() <= 4).map_or(String::new(), |(p, _)| format!("{p}-"));
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{prefix}…{tail}")
}

/// Whether the string `value` under `key` is a credential: an API key or token by its prefix, or any
/// value under a key named for a credential, except the name of an environment variable or a command.
fn is_secret(key: &str, value: &str) -> bool {
    // An OpenAI key or a Keymux credential by its prefix, however short (a test key, a truncated paste).
    if value.len() > 3 && crate::secrets::key_prefixed(value) {
        return true;
    }
    let env_name = value.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if value.len() < 8 || env_name || value.starts_with('!') {
        return false;
    }
    let key = key.to_ascii_lowercase();
    ["key", "token", "secret", "auth", "password"].iter().any(|word| key.contains(word))
}

fn collect_secrets(key: &str, value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) if is_secret(key, s) => out.push(s.clone()),
        serde_json::Value::Object(map) => map.iter().for_each(|(k, v)| collect_secrets(k, v, out)),
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_secrets(key, v, out)),
        _ => {}
    }
}
