//! Finding the OpenAI API keys a user already has in plaintext, for `keymux keys import` (and later
//! the tray's and dashboard's first-run offer): `OPENAI_API_KEY`, Codex's `auth.json` (API-key mode),
//! pi's `auth.json` and the literal `apiKey`s of its `models.json` (literal by the rule of the pi
//! installed, [`PiRule`]: pi 1.x reads `$NAME` as a variable, pi 0.x a bare `NAME`), or a pasted list. Reading only:
//! what is found is a [`Candidate`] (a secret, where it came from, the label it would get), what is
//! passed over is a note, and a source that cannot be read is a refusal naming the file and the fix.
//! How pi's files are read is `pi`; taking a key's plaintext copy out of its file afterwards is `strip`.

mod pi;
mod strip;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::keys::{validate_label, validate_secret};
use crate::secrets::Secret;

pub use pi::PiRule;
pub use strip::{remove_plaintext, Removed};

use pi::{pi_auth_keys, pi_model_keys};

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
