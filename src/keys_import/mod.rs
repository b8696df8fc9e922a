//! Finding the OpenAI API keys a user already has in plaintext, for `keymux keys import` (and later
//! the tray's and dashboard's first-run offer): `OPENAI_API_KEY`, Codex's `auth.json` (API-key mode),
//! pi's `auth.json` and the literal `apiKey`s of its `models.json` (literal by the rule of the pi
//! installed, [`PiRule`]: pi 1.x reads `$NAME` as a variable, pi 0.x a bare `NAME`), or a pasted list. Reading only:
//! what is found is a [`Candidate`] (a secret, where it came from, the label it would get), what is
//! passed over is a note, and a source that cannot be read is a refusal naming the file and the fix.
//! Taking a key's plaintext copy out of its file afterwards is `strip`.

mod strip;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::keys::{validate_label, validate_secret};
use crate::secrets::Secret;

pub use strip::{remove_plaintext, Removed};

/// The variable OpenAI's tools (and Codex) read a key from.
pub const ENV_VAR: &str = "OPENAI_API_KEY";

/// Where a found key is written in plaintext.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An environment variable of this process.
    Env(String),
    /// Codex's `auth.json`, its `OPENAI_API_KEY`.
    CodexAuth(PathBuf),
    /// pi's `auth.json`, the `api_key` entry of this provider.
    PiAuth(PathBuf, String),
    /// pi's `models.json`, the literal `apiKey` of this provider.
    PiModels(PathBuf, String),
    /// A pasted list (`None`: stdin), this line (from 1).
    Pasted(Option<PathBuf>, usize),
    /// Codex's `auth.json`, its ChatGPT login (`tokens`), of this account and plan (`acct-1 (plus)`).
    CodexChatgpt(PathBuf, String),
}

impl Origin {
    /// Where the key is, in words: a file (and what in it) or a variable.
    pub fn describe(&self) -> String {
        match self {
            Self::Env(var) => format!("environment variable {var}"),
            Self::CodexAuth(path) => format!("{} ({ENV_VAR})", path.display()),
            Self::PiAuth(path, provider) => format!("{} (provider {provider})", path.display()),
            Self::PiModels(path, provider) => format!("{} (provider {provider}, apiKey)", path.display()),
            Self::Pasted(Some(path), line) => format!("{} line {line}", path.display()),
            Self::Pasted(None, line) => format!("stdin line {line}"),
            Self::CodexChatgpt(path, account) => format!("{} (ChatGPT login of {account})", path.display()),
        }
    }

    /// The file Keymux can take the plaintext out of (a pasted list is the user's own to delete).
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::CodexAuth(path) | Self::PiAuth(path, _) | Self::PiModels(path, _) => Some(path),
            // Codex keeps its login: Keymux takes a copy and refreshes it, and leaves Codex's file alone.
            Self::Env(_) | Self::Pasted(..) | Self::CodexChatgpt(..) => None,
        }
    }

    /// The label a key from here gets unless the user gave one.
    fn label(&self) -> String {
        match self {
            Self::Env(_) => "env".into(),
            Self::CodexAuth(_) => "codex".into(),
            Self::PiAuth(_, provider) | Self::PiModels(_, provider) => format!("pi-{provider}"),
            Self::Pasted(..) => "pasted".into(),
            Self::CodexChatgpt(..) => "chatgpt".into(),
        }
    }
}

/// The ChatGPT login in Codex's `auth.json` at `path`, as a candidate for the first-run offer (the
/// dashboard and the tray offer it beside the API keys; `keymux keys import --chatgpt` imports it from
/// the command line). `None` when the file holds none or cannot be read as one.
pub fn chatgpt_login(path: &Path) -> Option<Candidate> {
    let bytes = crate::setup::read_limited(path).ok()??;
    let login = keymux_core::provider::chatgpt::from_codex_auth(&String::from_utf8_lossy(&bytes)).ok()??;
    let info = login.info();
    let account = format!("{} ({})", info.account_id, info.plan_type.as_deref().unwrap_or("plan"));
    Some(Candidate {
        secret: login.to_secret(),
        origin: Origin::CodexChatgpt(path.to_owned(), account),
        label: String::new(),
    })
}

/// A key found in plaintext.
#[derive(Debug)]
pub struct Candidate {
    /// The key (never printed: `Secret`).
    pub secret: Secret,
    /// Where it was found.
    pub origin: Origin,
    /// The label it gets: the user's (`label=`) or one derived from the origin, made unique.
    pub label: String,
}

impl Candidate {
    /// The provider it is a key of: a ChatGPT login is a plan, anything else an OpenAI key.
    pub fn provider(&self) -> crate::keys::ProviderId {
        match self.origin {
            Origin::CodexChatgpt(..) => crate::provider::chatgpt::ID,
            _ => crate::provider::openai::ID,
        }
    }

    /// What the pool's fingerprints are taken of (`Provider::identity`: a plan's account).
    pub fn identity(&self) -> Secret {
        self.provider().get().identity(&self.secret)
    }

    /// How it is shown: the key masked (`sk-…abcd`), or a plan by its name, never a token.
    pub fn shown(&self) -> String {
        match &self.origin {
            Origin::CodexChatgpt(..) => "ChatGPT plan".to_owned(),
            _ => crate::setup::mask(self.secret.expose()),
        }
    }
}

/// What a look through the sources found.
#[derive(Debug, Default)]
pub struct Found {
    /// The keys, in the order the sources were read.
    pub candidates: Vec<Candidate>,
    /// What was passed over and why (a ChatGPT login, a key that is an environment variable's name…).
    pub notes: Vec<String>,
    /// Sources that could not be read, each naming the file and the fix; nothing of them is listed.
    pub refusals: Vec<String>,
}

impl Found {
    fn take(&mut self, read: Result<Read, String>) {
        match read {
            Ok(read) => {
                self.candidates.extend(read.candidates);
                self.notes.extend(read.notes);
            }
            Err(why) => self.refusals.push(why),
        }
    }

    /// Gives every candidate without a label of its own one derived from its origin, unique among
    /// `in_use` and the other candidates (`codex`, then `codex-2`…).
    pub fn label(&mut self, in_use: &[String]) {
        let mut taken: Vec<String> = in_use.iter().map(|l| l.to_ascii_lowercase()).collect();
        for candidate in &mut self.candidates {
            let base = if candidate.label.is_empty() { candidate.origin.label() } else { candidate.label.clone() };
            let mut label = base.clone();
            for n in 2.. {
                if !taken.contains(&label.to_ascii_lowercase()) {
                    break;
                }
                label = format!("{base}-{n}");
            }
            taken.push(label.to_ascii_lowercase());
            candidate.label = label;
        }
    }
}

/// What one source holds.
#[derive(Default)]
struct Read {
    candidates: Vec<Candidate>,
    notes: Vec<String>,
}

impl Read {
    fn key(&mut self, secret: &str, origin: Origin) {
        self.candidates.push(Candidate { secret: Secret::new(secret), origin, label: String::new() });
    }
}

/// Where the default sources are, from the environment as the clients read it.
#[derive(Clone, Debug)]
pub struct Sources {
    /// `OPENAI_API_KEY`'s value, if set.
    pub env_key: Option<String>,
    /// Codex's `auth.json`.
    pub codex_auth: PathBuf,
    /// pi's agent directory (`auth.json`, `models.json`).
    pub pi_dir: PathBuf,
    /// The names of the variables set here: pi 0.x reads a value naming one as that variable.
    pub env_names: Vec<String>,
    /// How the installed pi reads a value in its files (by its version; see [`PiRule`]).
    pub pi_rule: PiRule,
}

impl Sources {
    /// The sources for this environment: `$CODEX_HOME` or `~/.codex`, `$PI_CODING_AGENT_DIR` or
    /// `~/.pi/agent`.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>, home: &Path) -> Self {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        let get = |name: &str| vars.iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.clone());
        Self {
            env_key: get(ENV_VAR),
            codex_auth: get("CODEX_HOME").map_or_else(|| home.join(".codex"), PathBuf::from).join("auth.json"),
            // pi expands a leading `~` itself.
            pi_dir: get("PI_CODING_AGENT_DIR").map_or_else(
                || home.join(".pi/agent"),
                |dir| dir.strip_prefix("~/").map_or_else(|| PathBuf::from(&dir), |rest| home.join(rest)),
            ),
            pi_rule: get("PATH").map_or(PiRule::Unknown, |path| PiRule::installed(&path)),
            env_names: vars.into_iter().filter(|(_, v)| !v.is_empty()).map(|(k, _)| k).collect(),
        }
    }

    /// Every key these sources hold, labels not yet made unique.
    pub fn find(&self) -> Found {
        let mut found = Found::default();
        if let Some(key) = &self.env_key {
            found.take(env_key(key));
        }
        found.take(read_file(&self.codex_auth, codex_auth));
        let pi_auth = self.pi_dir.join("auth.json");
        let read = |text: &str, path: &Path| pi_auth_keys(text, path, &self.pi_rule, &self.env_names);
        found.take(read_file(&pi_auth, read));
        let models = self.pi_dir.join("models.json");
        found.take(read_file(&models, |text, path| pi_model_keys(text, path, &self.pi_rule, &self.env_names)));
        if pi_auth.exists() || models.exists() {
            found.notes.push(format!("pi's files are read {}", self.pi_rule.describe()));
        }
        found
    }
}

/// A pasted list's keys, or why it is refused (naming `path` or stdin, and the line).
pub fn pasted(text: &str, path: Option<&Path>) -> Found {
    let mut found = Found::default();
    found.take(pasted_keys(text, path));
    found
}

/// The file's keys by `parse`; a missing file holds none, an unreadable one is refused.
fn read_file(path: &Path, parse: impl FnOnce(&str, &Path) -> Result<Read, String>) -> Result<Read, String> {
    let bytes = match crate::setup::read_limited(path) {
        Ok(None) => return Ok(Read::default()),
        Ok(Some(bytes)) => bytes,
        Err(e) => return Err(format!("{e}; fix its permissions, or move it aside")),
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("{} is not UTF-8 text; fix it, or move it aside", path.display()))?;
    parse(&text, path)
}

fn env_key(value: &str) -> Result<Read, String> {
    let mut read = Read::default();
    let value = value.trim();
    match looks_like_key(value) {
        Ok(()) => read.key(value, Origin::Env(ENV_VAR.into())),
        Err(why) => read.notes.push(format!("{ENV_VAR} passed over: {why}")),
    }
    Ok(read)
}

/// Whether a value is an OpenAI API key (not a Keymux token, not an Anthropic key).
fn looks_like_key(value: &str) -> Result<(), String> {
    validate_secret(value)?;
    if value.starts_with(crate::tokens::TOKEN_PREFIX) {
        return Err("it is a Keymux client token, not an API key".into());
    }
    if !value.starts_with("sk-") || value.starts_with("sk-ant-") {
        return Err("it does not look like an OpenAI API key (they start with sk-)".into());
    }
    Ok(())
}

fn parse_json(text: &str, path: &Path) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{} is not JSON ({e}); fix it, or move it aside", path.display()))
}

/// Codex's `auth.json`: an API key in `OPENAI_API_KEY`; a ChatGPT login (`tokens`) is passed over.
fn codex_auth(text: &str, path: &Path) -> Result<Read, String> {
    let mut read = Read::default();
    if text.trim().is_empty() {
        return Ok(read);
    }
    let root = parse_json(text, path)?;
    let key = root.get(ENV_VAR).and_then(Value::as_str).filter(|k| !k.is_empty());
    let chatgpt = root.get("tokens").is_some_and(|t| !t.is_null());
    match key {
        Some(key) => match looks_like_key(key) {
            Ok(()) => read.key(key, Origin::CodexAuth(path.to_owned())),
            Err(why) => read.notes.push(format!("{}: {ENV_VAR} passed over: {why}", path.display())),
        },
        None if chatgpt => read.notes.push(format!(
            "{} holds a ChatGPT login, not an API key: import it with `keymux keys import --chatgpt`",
            path.display()
        )),
        None => {}
    }
    Ok(read)
}

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
    fn key(&self, value: &str, env_names: &[String]) -> Result<String, String> {
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
fn pi_auth_keys(text: &str, path: &Path, rule: &PiRule, env_names: &[String]) -> Result<Read, String> {
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
fn pi_model_keys(text: &str, path: &Path, rule: &PiRule, env_names: &[String]) -> Result<Read, String> {
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

/// One key a line, `label=` optional; blank lines and `#` comments are skipped. A line that is not a
/// key refuses the whole list, naming the line.
fn pasted_keys(text: &str, path: Option<&Path>) -> Result<Read, String> {
    let mut read = Read::default();
    let name = path.map_or_else(|| "stdin".to_owned(), |p| p.display().to_string());
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (label, key) = match line.split_once('=') {
            Some((label, key)) if !label.starts_with("sk-") => (label.trim(), key.trim()),
            _ => ("", line),
        };
        let bad = |why: String| {
            format!("{name} line {}: {why}; put one key a line, as KEY or LABEL=KEY (nothing imported from it)", n + 1)
        };
        if !label.is_empty() {
            validate_label(label).map_err(|e| bad(format!("the label: {e}")))?;
        }
        looks_like_key(key).map_err(bad)?;
        read.key(key, Origin::Pasted(path.map(Path::to_owned), n + 1));
        if let Some(candidate) = read.candidates.last_mut() {
            candidate.label = label.to_owned();
        }
    }
    Ok(read)
}

#[cfg(test)]
mod tests;
