//! pi's files, read as the pi installed reads them: which version is on PATH ([`PiRule`]), what a
//! credential value is by its rule (pi 1.x reads `$NAME` as a variable, pi 0.x a bare `NAME`, both run
//! `!command`), and the OpenAI keys its `auth.json` and `models.json` hold literally.

use std::path::Path;

use serde_json::Value;

use super::{looks_like_key, parse_json, Origin, Read};

/// How the installed pi reads a credential value (`apiKey` in `models.json`, `key` in `auth.json`),
/// which changed with pi 1.0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PiRule {
    /// pi 1.x (`@earendil-works/pi-coding-agent`), this version: `!command` is a command's output,
    /// `$NAME` and `${NAME}` are environment variables (`$$` and `$!` a literal `$` and `!`), anything
    /// else the key itself (a bare `NAME` too).
    V1(String),
    /// pi 0.x (`@mariozechner/pi-coding-agent`), this version: `!command` is a command's output, the
    /// name of a variable that is set is that variable, anything else the key itself.
    V0(String),
    /// No pi found on PATH: a value that either version reads as a command or a variable is passed
    /// over.
    Unknown,
}

/// The names pi's package has had on npm.
const PI_PACKAGES: [&str; 2] = ["@earendil-works/pi-coding-agent", "@mariozechner/pi-coding-agent"];

impl PiRule {
    /// The rule of the first `pi` on `path` (a PATH value): its `package.json`, found above the file
    /// the `pi` link leads to, gives the version. Nothing is run.
    pub fn installed(path: &str) -> Self {
        let version = std::env::split_paths(path)
            .map(|dir| dir.join("pi"))
            .find(|bin| bin.is_file())
            .and_then(|bin| std::fs::canonicalize(bin).ok())
            .and_then(|cli| cli.ancestors().skip(1).take(6).find_map(pi_package_version));
        version.map_or(Self::Unknown, |v| Self::of_version(&v))
    }

    /// The rule of pi `version` (`1.6.0`, `0.73.1`).
    pub fn of_version(version: &str) -> Self {
        match version.split('.').next().and_then(|major| major.parse::<u32>().ok()) {
            Some(0) => Self::V0(version.to_owned()),
            Some(_) => Self::V1(version.to_owned()),
            None => Self::Unknown,
        }
    }

    /// Which rule, in words, for the note that says how pi's files were read.
    pub fn describe(&self) -> String {
        match self {
            Self::V1(v) => format!(
                "as pi {v} reads them: \"$NAME\" or \"${{NAME}}\" is an environment variable, \"!command\" a \
                 command's output, anything else the key itself"
            ),
            Self::V0(v) => format!(
                "as pi {v} reads them: the name of a variable that is set is that variable, \"!command\" a \
                 command's output, anything else the key itself"
            ),
            Self::Unknown => "by both pi 0.x's and 1.x's rules (no pi found on PATH): a value either reads as an \
                              environment variable or a command is passed over"
                .into(),
        }
    }

    /// The key `value` is by this rule, or why it is not one.
    pub(super) fn key(&self, value: &str, env_names: &[String]) -> Result<String, String> {
        if value.starts_with('!') {
            return Err("it is a command pi runs, not a key".into());
        }
        let key = match self {
            Self::V1(_) => v1_literal(value)?,
            Self::V0(_) => v0_literal(value, env_names)?,
            Self::Unknown => {
                v0_literal(value, env_names)?;
                v1_literal(value)?
            }
        };
        looks_like_key(&key)?;
        Ok(key)
    }
}

/// The version in `dir/package.json` when it is pi's package.
fn pi_package_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
    let package: Value = serde_json::from_str(&text).ok()?;
    let name = package.get("name")?.as_str()?;
    PI_PACKAGES.contains(&name).then(|| package.get("version")?.as_str().map(str::to_owned))?
}

/// pi 0.x: a value naming a variable is that variable (an UPPER_CASE name that is not set here is
/// taken for one too: it is no key); anything else is literal.
fn v0_literal(value: &str, env_names: &[String]) -> Result<String, String> {
    if env_names.iter().any(|n| n == value) {
        return Err(format!("it names the environment variable {value}"));
    }
    if !value.is_empty() && value.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
        return Err(format!("it names an environment variable ({value}) that is not set here"));
    }
    Ok(value.to_owned())
}

/// pi 1.x: `$NAME` and `${NAME}` anywhere are environment variables; `$$` and `$!` are a literal `$`
/// and `!`; a `$` before anything else stays. The literal, or the variables it reads.
fn v1_literal(value: &str) -> Result<String, String> {
    let name_start = |c: char| c.is_ascii_alphabetic() || c == '_';
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (mut literal, mut names) = (String::new(), Vec::new());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        literal.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match after.chars().next() {
            Some(c @ ('$' | '!')) => {
                literal.push(c);
                rest = &after[1..];
            }
            Some('{') => match after.find('}') {
                Some(end) if after[1..end].starts_with(name_start) && after[1..end].chars().all(name_char) => {
                    names.push(after[1..end].to_owned());
                    rest = &after[end + 1..];
                }
                Some(end) => {
                    literal.push_str(&rest[at..at + 2 + end]);
                    rest = &after[end + 1..];
                }
                None => {
                    literal.push('$');
                    rest = after;
                }
            },
            Some(c) if name_start(c) => {
                let end = after.find(|c: char| !name_char(c)).unwrap_or(after.len());
                names.push(after[..end].to_owned());
                rest = &after[end..];
            }
            _ => {
                literal.push('$');
                rest = after;
            }
        }
    }
    literal.push_str(rest);
    match names.as_slice() {
        [] => Ok(literal),
        [one] => Err(format!("it reads the environment variable {one}")),
        many => Err(format!("it reads the environment variables {}", many.join(", "))),
    }
}

/// pi's `auth.json`: `{"openai": {"type": "api_key", "key": "sk-…"}}`; OAuth logins and other
/// providers' keys are passed over.
pub(super) fn pi_auth_keys(text: &str, path: &Path, rule: &PiRule, env_names: &[String]) -> Result<Read, String> {
    let mut read = Read::default();
    let root = parse_json(text, path)?;
    let Some(entries) = root.as_object() else {
        return Err(format!("{} must hold a JSON object; fix it, or move it aside", path.display()));
    };
    for (provider, entry) in entries {
        if entry.get("type").and_then(Value::as_str) != Some("api_key") || !provider.starts_with("openai") {
            continue;
        }
        let Some(value) = entry.get("key").and_then(Value::as_str) else { continue };
        match rule.key(value, env_names) {
            Ok(key) => read.key(&key, Origin::PiAuth(path.to_owned(), provider.clone())),
            Err(why) => read.notes.push(format!("{} (provider {provider}) passed over: {why}", path.display())),
        }
    }
    Ok(read)
}

/// pi's `models.json`: the literal `apiKey` of each provider that talks to OpenAI (no `baseUrl`, or
/// one at api.openai.com). Keymux's own provider holds a client token and is passed over.
pub(super) fn pi_model_keys(text: &str, path: &Path, rule: &PiRule, env_names: &[String]) -> Result<Read, String> {
    let mut read = Read::default();
    let root = parse_json(text, path)?;
    let Some(providers) = root.get("providers").and_then(Value::as_object) else { return Ok(read) };
    for (name, provider) in providers {
        let Some(key) = provider.get("apiKey").and_then(Value::as_str) else { continue };
        let openai = provider.get("baseUrl").and_then(Value::as_str).is_none_or(|url| url.contains("api.openai.com"));
        if key.starts_with(crate::tokens::TOKEN_PREFIX) || !openai {
            continue;
        }
        match rule.key(key, env_names) {
            Ok(key) => read.key(&key, Origin::PiModels(path.to_owned(), name.clone())),
            Err(why) => read.notes.push(format!("{} (provider {name}) passed over: {why}", path.display())),
        }
    }
    Ok(read)
}
