//! Codex's `config.toml`: the top-level `model_provider = "keymux"` and a `[model_providers.keymux]`
//! table with the base URL and the client token (`experimental_bearer_token`, which Codex sends as
//! `Authorization: Bearer`, so no environment variable is needed), and Keymux's model catalog: the
//! provider's `model_catalog_url` (`<base URL>/keymux/model-catalog`, fetched with the same token, so
//! Codex's model picker shows the models the token's pool serves, see `catalog`) with
//! `[features] api_key_model_discovery = true`, without which Codex 0.171 does not fetch it. A pool's
//! profile file (`keymux-work.config.toml`) gets the same for `keymux-work`. Edited with `toml_edit`,
//! so every other key, table, comment and blank line stays byte for byte as it was.

use toml_edit::{DocumentMut, InlineTable, Item, Table, TableLike, Value};

use super::edited::{Edited, Refusal};
use super::{provider_id, provider_name};

/// The feature Codex 0.171 needs to fetch a custom provider's `model_catalog_url` with an API key.
const CATALOG_FEATURE: &str = "api_key_model_discovery";

/// Keys of a provider that say where its credential comes from. Keymux's own provider takes the token
/// from this file, so any other source is removed rather than left to compete with it.
const OTHER_CREDENTIALS: [&str; 3] = ["env_key", "auth", "requires_openai_auth"];

/// The client id Codex logs in to Keymux with (`oauth::CLIENTS`).
const LOGIN_CLIENT: &str = "codex";

/// How Codex proves itself to Keymux: the client token in this file, or a login (`gateway_oauth`).
#[derive(Clone, Copy, Debug)]
pub(super) enum Credential<'a> {
    /// `experimental_bearer_token`.
    Token(&'a str),
    /// A `[model_providers.<id>.gateway_oauth]` table: Codex (0.171 and later) logs in through Keymux
    /// and keeps its token in its own encrypted store; no token is written.
    Login,
}

/// The file with Codex pointed at Keymux: the provider `keymux` for the pool `all` (in config.toml),
/// or `keymux-<pool>` (in that pool's profile file).
pub(super) fn edit(text: &str, pool: Option<&str>, base_url: &str, token: &str) -> Result<Edited, Refusal> {
    edit_with(text, pool, base_url, Credential::Token(token))
}

/// [`edit`] with either credential.
pub(super) fn edit_with(
    text: &str,
    pool: Option<&str>,
    base_url: &str,
    credential: Credential<'_>,
) -> Result<Edited, Refusal> {
    let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| Refusal::Syntax(e.to_string()))?;
    let provider = provider_id(pool);
    let mut notes = Vec::new();
    let previous = doc.get("model_provider").map(|item| item.as_str().map_or_else(|| item.to_string(), str::to_owned));
    if let Some(previous) = previous.filter(|p| *p != provider) {
        notes.push(format!(
            "model_provider was \"{previous}\"; Codex now uses Keymux instead (Undo puts \"{previous}\" back)"
        ));
    }
    // A root key is always written before the first table, wherever the tables are.
    set_str(doc.as_table_mut(), "model_provider", &provider);
    notes.extend(profile_note(&doc, &provider));
    let table = keymux_table(&mut doc, &provider)?;
    let name = provider_name(pool);
    for (key, value) in [("name", name.as_str()), ("base_url", base_url), ("wire_api", "responses")] {
        set_str(table, key, value);
    }
    let (why, replaced) = match credential {
        Credential::Token(token) => {
            set_str(table, "experimental_bearer_token", token);
            ("the token is now in this file", "gateway_oauth")
        }
        Credential::Login => {
            login_table(table, base_url)?;
            ("Codex logs in to Keymux instead", "experimental_bearer_token")
        }
    };
    set_str(table, "model_catalog_url", &catalog_url(base_url));
    for key in OTHER_CREDENTIALS.into_iter().chain([replaced]) {
        if table.remove(key).is_some() {
            notes.push(format!("removed `{key}` from [model_providers.{provider}]: {why}"));
        }
    }
    notes.extend(enable_catalog(&mut doc)?);
    if matches!(credential, Credential::Login) {
        notes.push(
            "Codex opens Keymux's dashboard to log in on its first request: pick the pool there and approve".into(),
        );
    }
    Ok(Edited::whole(doc.to_string(), notes))
}

/// Keymux's model catalog under the base URL `base_url` (`…/v1`).
pub(super) fn catalog_url(base_url: &str) -> String {
    format!("{}/keymux/model-catalog", base_url.trim_end_matches('/'))
}

/// `[features] api_key_model_discovery = true` (the table made when missing, its other features
/// kept); a note when the user had turned it off.
fn enable_catalog(doc: &mut DocumentMut) -> Result<Option<String>, Refusal> {
    let root = doc.as_table_mut();
    if !root.contains_key("features") {
        let mut table = Table::new();
        table.decor_mut().set_prefix("\n");
        root.insert("features", Item::Table(table));
    }
    let features = root
        .get_mut("features")
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| Refusal::Shape("`features` must be a table".into()))?;
    let was = features.get(CATALOG_FEATURE).map(|item| item.as_bool());
    match was {
        Some(Some(true)) => Ok(None),
        Some(Some(false)) => {
            if let Some(Item::Value(old)) = features.get_mut(CATALOG_FEATURE) {
                let decor = old.decor().clone();
                *old = Value::from(true);
                *old.decor_mut() = decor;
            }
            Ok(Some(format!("{CATALOG_FEATURE} was off; Keymux turns it on so Codex lists the models your keys serve")))
        }
        _ => {
            features.insert(CATALOG_FEATURE, toml_edit::value(true));
            Ok(None)
        }
    }
}

/// The provider's `gateway_oauth` table: Keymux's endpoints beside `base_url` (`oauth`), the client
/// id, and the header Codex sends the token in. No `redirect_port`: Codex listens on a free port.
fn login_table(provider: &mut dyn TableLike, base_url: &str) -> Result<(), Refusal> {
    let root = base_url.trim_end_matches('/').trim_end_matches("/v1");
    if !provider.contains_key("gateway_oauth") {
        provider.insert("gateway_oauth", Item::Table(Table::new()));
    }
    let table = provider
        .get_mut("gateway_oauth")
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| Refusal::Shape("`gateway_oauth` must be a table".into()))?;
    for (key, path) in [
        ("authorization_url", "/oauth/authorize"),
        ("token_url", "/oauth/token"),
        ("device_authorization_url", "/oauth/device"),
    ] {
        set_str(table, key, &format!("{root}{path}"));
    }
    set_str(table, "client_id", LOGIN_CLIENT);
    let mut delivery = InlineTable::new();
    delivery.insert("kind", "header".into());
    delivery.insert("name", crate::oauth::TOKEN_HEADER.into());
    delivery.insert("scheme", "Bearer".into());
    let same = table
        .get("delivery")
        .and_then(Item::as_inline_table)
        .is_some_and(|d| d.len() == 3 && d.iter().all(|(k, v)| delivery.get(k).and_then(Value::as_str) == v.as_str()));
    if !same {
        table.insert("delivery", Item::Value(Value::InlineTable(delivery)));
    }
    // A port the user chose for the redirect stays; everything else is Keymux's.
    Ok(())
}

/// A warning when config.toml still defines the profile `profile` the old way (`profile = "…"` or a
/// `[profiles.…]` table): Codex 0.171 then refuses `codex -p` with that name.
pub(super) fn legacy_profile(config: &str, profile: &str) -> Option<String> {
    let doc: DocumentMut = config.parse().ok()?;
    let selected = doc.get("profile").and_then(Item::as_str) == Some(profile);
    let table = doc.get("profiles").and_then(Item::as_table_like).is_some_and(|p| p.contains_key(profile));
    (selected || table).then(|| {
        format!(
            "config.toml still has a legacy `profile = \"{profile}\"` or `[profiles.{profile}]`: Codex refuses \
             `codex -p {profile}` until you remove it from config.toml"
        )
    })
}

/// Sets `key` to the string `value`, leaving it untouched when it already is (so an unchanged file
/// stays byte-identical) and keeping the comment after a replaced value.
pub(super) fn set_str(table: &mut dyn TableLike, key: &str, value: &str) {
    match table.get_mut(key) {
        Some(item) if item.as_str() == Some(value) => {}
        Some(Item::Value(old)) => {
            let decor = old.decor().clone();
            *old = Value::from(value);
            *old.decor_mut() = decor;
        }
        _ => {
            table.insert(key, toml_edit::value(value));
        }
    }
}

/// The `[model_providers.<provider>]` table (or inline table), created after the other providers when
/// missing.
fn keymux_table<'d>(doc: &'d mut DocumentMut, provider: &str) -> Result<&'d mut dyn TableLike, Refusal> {
    let root = doc.as_table_mut();
    if !root.contains_key("model_providers") {
        let mut providers = Table::new();
        providers.set_implicit(true);
        root.insert("model_providers", Item::Table(providers));
    }
    let not_a_table = || Refusal::Shape("`model_providers` must be a table of providers".into());
    let providers = root.get_mut("model_providers").ok_or_else(not_a_table)?;
    let fresh = match providers {
        Item::Table(_) => {
            let mut table = Table::new();
            table.decor_mut().set_prefix("\n");
            Item::Table(table)
        }
        Item::Value(Value::InlineTable(_)) => Item::Value(Value::InlineTable(InlineTable::new())),
        _ => return Err(not_a_table()),
    };
    let providers = providers.as_table_like_mut().ok_or_else(not_a_table)?;
    if !providers.contains_key(provider) {
        providers.insert(provider, fresh);
    }
    providers
        .get_mut(provider)
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| Refusal::Shape(format!("`model_providers.{provider}` must be a table")))
}

/// A warning when the active profile names another provider: a profile's settings win over the top
/// level, so Codex would not use Keymux while it is active. Keymux does not change profiles.
fn profile_note(doc: &DocumentMut, provider: &str) -> Option<String> {
    let profile = doc.get("profile")?.as_str()?;
    let theirs = doc
        .get("profiles")
        .and_then(Item::as_table_like)
        .and_then(|profiles| profiles.get(profile))
        .and_then(Item::as_table_like)
        .and_then(|p| p.get("model_provider"))
        .and_then(Item::as_str)?;
    (theirs != provider).then(|| {
        format!(
            "the active profile \"{profile}\" sets model_provider = \"{theirs}\", which wins over the top level: \
             Codex uses Keymux only without that profile (or once you change that line)"
        )
    })
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]
    use super::*;

    const BASE: &str = "http://127.0.0.1:8787/v1";
    const TOKEN: &str = "km-unit-test-token-5c1e0a97d3b2";

    /// A config a user already has: comments everywhere, settings, another provider, a profile.
    const SAMPLE: &str = r#"# my Codex settings
model = "gpt-5.5"            # the default model
approval_policy = "never"

# keep it quiet
check_for_update_on_startup = false

[analytics]
enabled = false

# a provider I use elsewhere
[model_providers.other]
name = "Other"
base_url = "http://127.0.0.1:9/v1"   # local
wire_api = "responses"

[profiles.fast]
model = "gpt-5.5-mini"
"#;

    /// The lines of `old` missing from `new`, and the lines of `new` not in `old`, each with its line
    /// ending, so a changed comment or space would show.
    fn line_changes(old: &str, new: &str) -> (Vec<String>, Vec<String>) {
        let (a, b): (Vec<&str>, Vec<&str>) = (old.split_inclusive('\n').collect(), new.split_inclusive('\n').collect());
        super::super::diff::changed_lines(&a, &b)
    }

    #[test]
    fn every_other_line_stays_byte_identical_and_the_provider_comes_before_the_tables() {
        let edited = edit(SAMPLE, None, BASE, TOKEN).unwrap();
        let (removed, added) = line_changes(SAMPLE, &edited.text);
        assert!(removed.is_empty(), "no line of the user's was changed or dropped: {removed:?}");
        assert_eq!(
            added,
            [
                "model_provider = \"keymux\"\n",
                "[model_providers.keymux]\n",
                "name = \"Keymux\"\n",
                "base_url = \"http://127.0.0.1:8787/v1\"\n",
                "wire_api = \"responses\"\n",
                &format!("experimental_bearer_token = \"{TOKEN}\"\n"),
                "model_catalog_url = \"http://127.0.0.1:8787/v1/keymux/model-catalog\"\n",
                // The diff pairs one of the user's blank lines with the one before the new provider table.
                "\n",
                "\n",
                "[features]\n",
                "api_key_model_discovery = true\n",
            ]
        );
        let provider_at = edited.text.find("model_provider =").unwrap();
        assert!(provider_at < edited.text.find("\n[").unwrap(), "a root key, before every table:\n{}", edited.text);
        assert!(edited.notes.is_empty(), "nothing to warn about: {:?}", edited.notes);
        let parsed: toml::Value = toml::from_str(&edited.text).unwrap();
        assert_eq!(parsed["model_provider"].as_str(), Some("keymux"));
        assert_eq!(parsed["model_providers"]["keymux"]["experimental_bearer_token"].as_str(), Some(TOKEN));
        assert_eq!(parsed["model_providers"]["other"]["name"].as_str(), Some("Other"));
        assert!(parsed["model_providers"]["keymux"].get("supports_websockets").is_none());
        assert_eq!(parsed["features"]["api_key_model_discovery"].as_bool(), Some(true));
    }

    #[test]
    fn the_users_features_stay_and_a_discovery_turned_off_is_turned_on_with_a_note() {
        let text = format!("{SAMPLE}\n[features]\nweb_search = true # mine\napi_key_model_discovery = false # off\n");
        let edited = edit(&text, None, BASE, TOKEN).unwrap();
        let (removed, added) = line_changes(&text, &edited.text);
        assert_eq!(removed, ["api_key_model_discovery = false # off\n"]);
        assert!(added.contains(&"api_key_model_discovery = true # off\n".to_owned()), "{added:?}");
        assert!(edited.text.contains("web_search = true # mine"));
        assert!(edited.notes.iter().any(|n| n.contains("api_key_model_discovery was off")), "{:?}", edited.notes);
        assert!(matches!(edit("features = 3\n", None, BASE, TOKEN), Err(Refusal::Shape(_))));
    }

    #[test]
    fn another_model_provider_is_replaced_in_place_and_named_in_a_note() {
        let text = SAMPLE.replace("approval_policy", "model_provider = \"openai\" # usual\napproval_policy");
        let edited = edit(&text, None, BASE, TOKEN).unwrap();
        let (removed, added) = line_changes(&text, &edited.text);
        assert_eq!(removed, ["model_provider = \"openai\" # usual\n"]);
        assert_eq!(added[0], "model_provider = \"keymux\" # usual\n", "same place, same comment");
        assert!(edited.notes.iter().any(|n| n.contains("was \"openai\"")), "{:?}", edited.notes);
    }

    #[test]
    fn an_existing_keymux_provider_gets_the_new_values_and_loses_other_credentials() {
        let text = format!(
            "{SAMPLE}\n[model_providers.keymux]\nname = \"Keymux\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
             wire_api = \"responses\"\nenv_key = \"KEYMUX_TOKEN\" # exported\nsupports_websockets = true\n"
        );
        let edited = edit(&text, None, BASE, TOKEN).unwrap();
        let (removed, added) = line_changes(&text, &edited.text);
        assert_eq!(removed, ["base_url = \"http://127.0.0.1:1/v1\"\n", "env_key = \"KEYMUX_TOKEN\" # exported\n"]);
        assert!(added.iter().any(|l| l.starts_with("experimental_bearer_token")), "{added:?}");
        assert!(edited.text.contains("supports_websockets = true"), "the user's own choice stays");
        assert!(edited.notes.iter().any(|n| n.contains("env_key")), "{:?}", edited.notes);
    }

    #[test]
    fn a_login_writes_gateway_oauth_and_no_token() {
        let with_token = edit(SAMPLE, None, BASE, TOKEN).unwrap().text;
        let edited = edit_with(&with_token, None, BASE, Credential::Login).unwrap();
        assert!(!edited.text.contains(TOKEN), "the token is taken out:\n{}", edited.text);
        let parsed: toml::Value = toml::from_str(&edited.text).unwrap();
        let oauth = &parsed["model_providers"]["keymux"]["gateway_oauth"];
        assert_eq!(oauth["authorization_url"].as_str(), Some("http://127.0.0.1:8787/oauth/authorize"));
        assert_eq!(oauth["token_url"].as_str(), Some("http://127.0.0.1:8787/oauth/token"));
        assert_eq!(oauth["device_authorization_url"].as_str(), Some("http://127.0.0.1:8787/oauth/device"));
        assert_eq!(oauth["client_id"].as_str(), Some("codex"));
        assert_eq!(oauth["delivery"]["name"].as_str(), Some("x-keymux-token"));
        assert_eq!(oauth["delivery"]["scheme"].as_str(), Some("Bearer"));
        assert!(oauth.get("redirect_port").is_none(), "an ephemeral port");
        assert_eq!(edit_with(&edited.text, None, BASE, Credential::Login).unwrap().text, edited.text, "stable");
        let back = edit(&edited.text, None, BASE, TOKEN).unwrap().text;
        assert!(!back.contains("gateway_oauth"), "the token form takes the login out again:\n{back}");
    }

    #[test]
    fn editing_again_changes_nothing() {
        let once = edit(SAMPLE, None, BASE, TOKEN).unwrap().text;
        assert_eq!(edit(&once, None, BASE, TOKEN).unwrap().text, once);
    }

    #[test]
    fn an_empty_file_and_an_inline_provider_table_are_set_up() {
        let edited = edit("", None, BASE, TOKEN).unwrap();
        assert!(edited.text.starts_with("model_provider = \"keymux\"\n"), "{}", edited.text);
        let inline = "model_providers = { other = { name = \"x\" } }\n";
        let parsed: toml::Value = toml::from_str(&edit(inline, None, BASE, TOKEN).unwrap().text).unwrap();
        assert_eq!(parsed["model_providers"]["keymux"]["base_url"].as_str(), Some(BASE));
        assert_eq!(parsed["model_providers"]["other"]["name"].as_str(), Some("x"));
    }

    #[test]
    fn files_keymux_cannot_read_are_refused() {
        assert!(matches!(edit("model = \"gpt-5.5\n[oops", None, BASE, TOKEN), Err(Refusal::Syntax(_))));
        assert!(matches!(edit("model_providers = \"x\"\n", None, BASE, TOKEN), Err(Refusal::Shape(_))));
        assert!(matches!(edit("[model_providers]\nkeymux = 3\n", None, BASE, TOKEN), Err(Refusal::Shape(_))));
    }

    #[test]
    fn a_profile_that_names_another_provider_is_pointed_out() {
        let text = format!("profile = \"work\"\n{SAMPLE}\n[profiles.work]\nmodel_provider = \"openai\"\n");
        let notes = edit(&text, None, BASE, TOKEN).unwrap().notes;
        assert!(notes.iter().any(|n| n.contains("profile \"work\"")), "{notes:?}");
        let notes = edit(&text.replace("\"work\"\n", "\"fast\"\n"), None, BASE, TOKEN).unwrap().notes;
        assert!(notes.is_empty(), "the fast profile keeps the top-level provider: {notes:?}");
    }
}
