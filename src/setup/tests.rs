#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};

#[cfg(unix)]
use super::files::mode_of;
use super::record::record_path;
use super::*;
use crate::secrets::Secret;

const BASE: &str = "http://127.0.0.1:8787/v1";
const TOKEN: &str = "km-unit-test-token-5c1e0a97d3b2";

fn token() -> Secret {
    Secret::new(TOKEN)
}

/// A Codex config a user already has: comments, settings, the built-in provider chosen, and another
/// provider whose own bearer token sits right where Keymux's table will follow it.
const CODEX: &str = r#"# my Codex settings
model = "gpt-5.5"
model_provider = "openai"   # the usual
approval_policy = "never"

[analytics]
enabled = false

# a provider I use elsewhere
[model_providers.other]
name = "Other"
base_url = "http://127.0.0.1:9/v1"
experimental_bearer_token = "sk-proj-other-provider-key-0123456789"
"#;

/// A state directory and a client file in a temporary directory.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join("client").join(name)
    }
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.file(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    mode_of(path).unwrap() & 0o777
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_codex_preview_shows_the_change_names_the_old_provider_and_masks_every_secret() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let plan = plan(Client::Codex, &path, BASE, &token()).unwrap();
    let preview = plan.preview();
    assert!(preview.contains("-model_provider = \"openai\"   # the usual\n"), "{preview}");
    assert!(preview.contains("+model_provider = \"keymux\"   # the usual\n"), "{preview}");
    assert!(preview.contains("+[model_providers.keymux]\n"), "{preview}");
    assert!(preview.contains("note: model_provider was \"openai\""), "the old provider is named: {preview}");
    assert!(preview.contains("+experimental_bearer_token = \"km-…d3b2\""), "the token, masked: {preview}");
    assert!(!preview.contains(TOKEN) && !preview.contains(&TOKEN[..20]), "{preview}");
    assert!(preview.contains(" experimental_bearer_token = \"sk-…6789\""), "the other key, as context: {preview}");
    assert!(!preview.contains("sk-proj-other-provider"), "{preview}");
    assert!(format!("{plan:?}").find(TOKEN).is_none(), "Debug never shows the text");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CODEX, "planning writes nothing");
    assert!(!place.state().exists());
}

#[test]
fn applying_and_planning_again_says_there_is_nothing_to_do() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    apply(&plan(Client::Codex, &path, BASE, &token()).unwrap(), &place.state()).unwrap();
    let again = plan(Client::Codex, &path, BASE, &token()).unwrap();
    assert!(!again.changes_anything());
    assert!(again.preview().contains("nothing to change"), "{}", again.preview());
    assert!(matches!(apply(&again, &place.state()), Err(SetupError::NothingToDo { .. })));
    let other_port = plan(Client::Codex, &path, "http://127.0.0.1:9999/v1/", &token()).unwrap();
    assert!(other_port.changes_anything(), "another base URL is a change");
    assert!(other_port.text().contains("base_url = \"http://127.0.0.1:9999/v1\""), "no trailing slash");
}

#[test]
fn undo_restores_the_file_byte_for_byte_with_its_permissions_and_keeps_the_backup() {
    let place = Place::new();
    // No final newline and a CRLF line: bytes a careless rewrite would change.
    let original =
        CODEX.replace("approval_policy = \"never\"\n", "approval_policy = \"never\"\r\n").trim_end().to_owned();
    let path = place.write("config.toml", &original);
    #[cfg(unix)]
    set_mode(&path, 0o640);
    let applied = apply(&plan(Client::Codex, &path, BASE, &token()).unwrap(), &place.state()).unwrap();
    let Some(Restore::Backup(backup)) = &applied.restore else { panic!("a backup: {applied:?}") };
    assert_eq!(applied.backup.as_ref(), Some(backup), "made now");
    assert!(backup.file_name().unwrap().to_string_lossy().starts_with("config.toml.keymux-backup-"), "{backup:?}");
    assert_eq!(std::fs::read(backup).unwrap(), original.as_bytes());
    #[cfg(unix)]
    {
        assert_eq!(mode(backup), 0o640, "the backup has the file's permissions");
        assert_eq!(mode(&path), 0o600, "the file holds a token now");
    }
    let record = std::fs::read_to_string(record_path(&place.state(), "codex")).unwrap();
    assert!(!record.contains(&TOKEN[3..]), "the record holds nothing secret: {record}");
    assert!(status(Client::Codex, &place.state()).unwrap().is_some_and(|s| !s.edited_since));

    let undone = undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), original.as_bytes(), "byte for byte");
    #[cfg(unix)]
    assert_eq!(mode(&path), 0o640);
    assert_eq!(Some(undone.restored), applied.restore);
    assert!(backup.exists(), "the backup is never deleted");
    assert!(status(Client::Codex, &place.state()).unwrap().is_none());
    assert!(matches!(undo(Client::Codex, &place.state(), false), Err(SetupError::NothingToUndo { .. })));
}

#[test]
fn a_file_keymux_created_is_deleted_by_undo() {
    let place = Place::new();
    let path = place.file("models.json");
    let plan = plan(Client::Pi, &path, BASE, &token()).unwrap();
    assert!(plan.preview().starts_with("--- /dev/null\n"), "{}", plan.preview());
    let applied = apply(&plan, &place.state()).unwrap();
    assert_eq!(applied.restore, Some(Restore::Delete));
    assert!(path.exists());
    undo(Client::Pi, &place.state(), false).unwrap();
    assert!(!path.exists());
    assert!(path.parent().unwrap().exists(), "the directory stays");
}

#[test]
fn a_file_changed_since_is_refused_by_undo_and_kept_when_forced() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    apply(&plan(Client::Codex, &path, BASE, &token()).unwrap(), &place.state()).unwrap();
    let edited = format!("{}model_reasoning_effort = \"high\"\n", std::fs::read_to_string(&path).unwrap());
    std::fs::write(&path, &edited).unwrap();
    assert!(status(Client::Codex, &place.state()).unwrap().is_some_and(|s| s.edited_since));
    let refused = undo(Client::Codex, &place.state(), false).unwrap_err();
    assert!(matches!(refused, SetupError::EditedSince { .. }), "{refused}");
    assert!(refused.to_string().contains("--force"), "{refused}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), edited, "nothing touched");

    let undone = undo(Client::Codex, &place.state(), true).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CODEX);
    let kept = undone.kept.unwrap();
    assert_eq!(std::fs::read_to_string(kept).unwrap(), edited, "the user's version is kept");
}

#[test]
fn a_file_changed_between_preview_and_apply_is_not_written() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let plan = plan(Client::Codex, &path, BASE, &token()).unwrap();
    std::fs::write(&path, format!("{CODEX}# added meanwhile\n")).unwrap();
    assert!(matches!(apply(&plan, &place.state()), Err(SetupError::ChangedSincePreview { .. })));
    assert!(std::fs::read_to_string(&path).unwrap().ends_with("# added meanwhile\n"));
}

/// A `make_token` for [`Preview::confirm`] that counts its calls and can edit the file first.
fn maker<'a>(
    calls: &'a std::cell::Cell<u32>,
    edit: Option<(&'a Path, &'a str)>,
) -> impl FnOnce() -> std::future::Ready<Result<Secret, std::convert::Infallible>> + 'a {
    move || {
        calls.set(calls.get() + 1);
        if let Some((path, text)) = edit {
            std::fs::write(path, text).unwrap();
        }
        std::future::ready(Ok(token()))
    }
}

#[tokio::test]
async fn a_confirmed_preview_writes_the_token_made_after_the_stand_in_was_shown() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let custom = Choices { custom_provider: true, ..Choices::default() };
    let shown = preview_with(Client::Codex, &path, BASE, None, custom, Some(&place.state())).unwrap();
    assert!(shown.makes_token() && shown.text().contains("+experimental_bearer_token = \"km-…"));
    assert!(!shown.plans()[0].text().contains(TOKEN), "the preview holds a stand-in");
    let calls = std::cell::Cell::new(0);
    let applied = shown.confirm(&place.state(), maker(&calls, None)).await.unwrap();
    assert_eq!(calls.get(), 1);
    assert!(std::fs::read_to_string(&applied[0].path).unwrap().contains(TOKEN), "the real token is written");
}

#[tokio::test]
async fn a_file_changed_since_the_preview_is_not_written_whenever_it_changed() {
    let edited = format!("{CODEX}# added meanwhile\n");
    // While the preview was shown (no token made), while the token was made, and with a token that
    // existed already (no token to make).
    for (existing, edit_in_maker, made) in [(None, false, 0), (None, true, 1), (Some(token()), false, 0)] {
        let place = Place::new();
        let path = place.write("config.toml", CODEX);
        let shown =
            preview_with(Client::Codex, &path, BASE, existing, Choices::default(), Some(&place.state())).unwrap();
        if !edit_in_maker {
            std::fs::write(&path, &edited).unwrap();
        }
        let calls = std::cell::Cell::new(0);
        let edit = edit_in_maker.then_some((path.as_path(), edited.as_str()));
        let refused = shown.confirm(&place.state(), maker(&calls, edit)).await.unwrap_err();
        assert!(matches!(refused, ConfirmError::Setup(SetupError::ChangedSincePreview { .. })), "{refused}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), edited, "the edit stays");
        assert_eq!(calls.get(), made, "a token is made only while the file is as previewed");
        assert!(status(Client::Codex, &place.state()).unwrap().is_none(), "nothing to undo");
    }
}

#[test]
fn setting_up_again_with_a_new_token_still_undoes_to_the_file_from_before_keymux() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let first = apply(&plan(Client::Codex, &path, BASE, &token()).unwrap(), &place.state()).unwrap();
    let new_token = Secret::new("km-the-next-token-8a7b6c5d4e3f");
    let second = apply(&plan(Client::Codex, &path, BASE, &new_token).unwrap(), &place.state()).unwrap();
    assert!(second.backup.is_none(), "Keymux's own text needs no backup");
    assert_eq!(second.restore, first.restore);
    assert!(std::fs::read_to_string(&path).unwrap().contains("km-the-next-token"));
    undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CODEX);
}

#[test]
fn a_setup_elsewhere_that_can_still_be_undone_is_not_forgotten() {
    let place = Place::new();
    let first = place.write("config.toml", CODEX);
    let second = place.write("other.toml", CODEX);
    apply(&plan(Client::Codex, &first, BASE, &token()).unwrap(), &place.state()).unwrap();
    let refused = apply(&plan(Client::Codex, &second, BASE, &token()).unwrap(), &place.state()).unwrap_err();
    assert!(matches!(refused, SetupError::OtherSetup { .. }), "{refused}");
    undo(Client::Codex, &place.state(), false).unwrap();
    apply(&plan(Client::Codex, &second, BASE, &token()).unwrap(), &place.state()).unwrap();
}

#[test]
fn files_keymux_cannot_read_are_refused_with_what_to_do() {
    let place = Place::new();
    let broken = place.write("config.toml", "model = \"gpt-5.5\n[oops");
    let refused = plan(Client::Codex, &broken, BASE, &token()).unwrap_err();
    assert!(matches!(refused, SetupError::Unreadable { .. }), "{refused}");
    assert!(refused.to_string().contains("not valid TOML") && refused.to_string().contains("Fix or move it"));
    let json = place.write("models.json", "{\"providers\": {\"x\": }");
    assert!(plan(Client::Pi, &json, BASE, &token()).unwrap_err().to_string().contains("not valid JSON"));
    let shape = place.write("shape.json", "[1, 2]");
    assert!(matches!(plan(Client::Pi, &shape, BASE, &token()), Err(SetupError::Unexpected { .. })));
    let latin1 = place.file("latin1.toml");
    std::fs::write(&latin1, b"name = \"caf\xe9\"\n").unwrap();
    assert!(plan(Client::Codex, &latin1, BASE, &token()).unwrap_err().to_string().contains("UTF-8"));
    let huge = place.write("huge.toml", &format!("# {}\n", "x".repeat(MAX_FILE_BYTES as usize)));
    assert!(matches!(plan(Client::Codex, &huge, BASE, &token()), Err(SetupError::TooLarge { .. })));
}

#[test]
fn only_a_client_token_is_ever_written() {
    let place = Place::new();
    let path = place.file("config.toml");
    for bad in ["sk-proj-an-openai-api-key-0123456789", "km-2little", "km-has a space in it 0123456789"] {
        let refused = plan(Client::Codex, &path, BASE, &Secret::new(bad)).unwrap_err();
        assert!(matches!(refused, SetupError::Invalid(_)), "{bad}: {refused}");
        assert!(!refused.to_string().contains(bad), "the message never repeats it");
    }
    assert!(plan(Client::Codex, &path, "127.0.0.1:8787/v1", &token()).is_err(), "a URL needs its scheme");
}

#[test]
fn the_pi_plan_keeps_other_providers_in_order_and_masks_their_keys() {
    let place = Place::new();
    // Compact, so every line is rewritten and the other provider's literal key is in the diff.
    let mine = r#"{"providers":{"work":{"baseUrl":"https://example.test/v1","api":"openai-responses","apiKey":"sk-work-literal-key-abcdefgh1234","models":[{"id":"m"}]},"local":{"baseUrl":"http://127.0.0.1:11434/v1","api":"openai-completions","apiKey":"OLLAMA_KEY","models":[]}}}"#;
    let path = place.write("models.json", mine);
    let plan = plan(Client::Pi, &path, BASE, &token()).unwrap();
    let after: serde_json::Value = serde_json::from_str(plan.text()).unwrap();
    let names: Vec<&String> = after["providers"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["work", "local", "keymux"]);
    assert_eq!(after["providers"]["work"]["apiKey"], "sk-work-literal-key-abcdefgh1234");
    let preview = plan.preview();
    assert!(!preview.contains("sk-work-literal-key") && preview.contains("\"sk-…1234\""), "{preview}");
    assert!(!preview.contains(TOKEN) && preview.contains("\"apiKey\": \"km-…d3b2\""), "{preview}");
    assert!(preview.contains("\"OLLAMA_KEY\""), "a variable's name is not a secret: {preview}");
}

#[cfg(unix)]
#[test]
fn a_linked_config_stays_a_link() {
    let place = Place::new();
    let target = place.write("dotfiles-config.toml", CODEX);
    let link = place.file("config.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let applied = apply(&plan(Client::Codex, &link, BASE, &token()).unwrap(), &place.state()).unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(&target).unwrap().contains("[model_providers.keymux]"));
    assert_eq!(applied.path, std::fs::canonicalize(&target).unwrap());
    undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), CODEX);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
}

#[test]
fn each_client_file_is_where_the_client_looks() {
    let home = Some(PathBuf::from("/home/u"));
    let at = |client: Client, dir: Option<&str>| client.path_in(dir.map(PathBuf::from), home.clone()).unwrap();
    assert_eq!(at(Client::Codex, None), Path::new("/home/u/.codex/config.toml"));
    assert_eq!(at(Client::Codex, Some("/etc/codex")), Path::new("/etc/codex/config.toml"));
    assert_eq!(at(Client::Codex, Some("")), Path::new("/home/u/.codex/config.toml"), "empty is unset");
    assert_eq!(at(Client::Pi, None), Path::new("/home/u/.pi/agent/models.json"));
    assert_eq!(at(Client::Pi, Some("/srv/pi")), Path::new("/srv/pi/models.json"));
    assert_eq!(at(Client::Pi, Some("~/agents/pi")), Path::new("/home/u/agents/pi/models.json"), "pi expands ~");
    assert!(Client::Codex.path_in(None, None).is_none());
}

#[test]
fn masks_keep_only_a_prefix_and_four_characters() {
    assert_eq!(mask(TOKEN), "km-…d3b2");
    assert_eq!(mask("sk-proj-abcdefghijklmnop"), "sk-…mnop");
    assert_eq!(mask("abcdefghijklmnopqrst"), "…qrst");
    assert_eq!(mask("short-secret"), "…");
}

/// Previews and confirms `target` with the client's file at `path`, the token made on confirming.
async fn set_up(target: &Target, path: &Path, state: &Path) -> Vec<Applied> {
    let shown = preview_with(target.clone(), path, BASE, None, Choices::default(), Some(state)).unwrap();
    let calls = std::cell::Cell::new(0);
    shown.confirm(state, maker(&calls, None)).await.unwrap()
}

#[tokio::test]
async fn a_codex_pool_gets_a_profile_file_of_its_own_and_config_toml_stays() {
    let place = Place::new();
    let config = place.write("config.toml", CODEX);
    let target = Target::new(Client::Codex, "work", None).unwrap();
    let profile = config.with_file_name("keymux-work.config.toml");
    let applied = set_up(&target, &profile, &place.state()).await;
    assert_eq!(applied.len(), 1);
    assert_eq!(applied[0].restore, Some(Restore::Delete));
    assert_eq!(
        std::fs::read_to_string(&profile).unwrap(),
        format!(
            "model_provider = \"keymux-work\"\n\n[model_providers.keymux-work]\nname = \"Keymux (pool work)\"\n\
             base_url = \"{BASE}\"\nwire_api = \"responses\"\nexperimental_bearer_token = \"{TOKEN}\"\n\
             model_catalog_url = \"{BASE}/keymux/model-catalog\"\n\n[features]\napi_key_model_discovery = true\n"
        )
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CODEX, "config.toml is not touched");
    #[cfg(unix)]
    assert_eq!(mode(&profile), 0o600, "it holds a token");
    assert!(status(Client::Codex, &place.state()).unwrap().is_none(), "the default setup is another record");
    undo(target, &place.state(), false).unwrap();
    assert!(!profile.exists(), "Undo deletes exactly the profile file");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CODEX);
}

#[test]
fn a_legacy_profile_of_that_name_in_config_toml_is_pointed_out() {
    let place = Place::new();
    let config = place.write("config.toml", &format!("{CODEX}\n[profiles.keymux-work]\nmodel = \"gpt-5.5\"\n"));
    let target = Target::new(Client::Codex, "work", None).unwrap();
    let shown = preview(target, &config.with_file_name("keymux-work.config.toml"), BASE, Some(token())).unwrap();
    assert!(shown.text().contains("note: config.toml still has a legacy"), "{}", shown.text());
    let other = Target::new(Client::Codex, "personal", None).unwrap();
    let clean = preview(other, &config.with_file_name("keymux-personal.config.toml"), BASE, Some(token())).unwrap();
    assert!(!clean.text().contains("legacy"), "{}", clean.text());
}

/// A pi agent directory with the default setup's provider, and a project with settings of its own.
fn pi_place(place: &Place) -> (PathBuf, PathBuf) {
    let models = place.file("models.json");
    apply(&plan(Client::Pi, &models, BASE, &token()).unwrap(), &place.state()).unwrap();
    let project = place.dir.path().join("acme");
    std::fs::create_dir_all(project.join(".pi")).unwrap();
    std::fs::write(project.join(".pi/settings.json"), "{\"theme\": \"light\"}\n").unwrap();
    (models, project)
}

#[tokio::test]
async fn a_pi_pool_adds_its_provider_and_the_project_selects_it_and_undo_takes_only_the_project_back() {
    let place = Place::new();
    let (models, project) = pi_place(&place);
    let target = Target::new(Client::Pi, "work", Some(&project)).unwrap();
    let applied = set_up(&target, &models, &place.state()).await;
    assert_eq!(applied.len(), 2, "{applied:?}");
    assert_eq!(applied[0].restore, None, "the provider stays when a project is undone");
    assert!(applied[0].backup.is_some(), "but models.json was backed up first");
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&models).unwrap()).unwrap();
    let names: Vec<&String> = written["providers"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["keymux", "keymux-work"]);
    assert_eq!(written["providers"]["keymux-work"]["apiKey"], TOKEN);
    assert_eq!(written["providers"]["keymux-work"]["models"][0]["name"], "gpt-5.5 via Keymux (work)");
    let settings = project.join(".pi/settings.json");
    let chosen: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(
        chosen,
        serde_json::json!({"theme": "light", "defaultProvider": "keymux-work", "defaultModel": "gpt-5.5"})
    );
    #[cfg(unix)]
    assert_ne!(mode(&settings), 0o600, "no secret in the project: its permissions are its own");

    let undone = undo(target.clone(), &place.state(), false).unwrap();
    assert_eq!(undone.path, std::fs::canonicalize(&settings).unwrap());
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), "{\"theme\": \"light\"}\n", "byte for byte");
    assert!(std::fs::read_to_string(&models).unwrap().contains("keymux-work"), "the provider stays");
    assert!(matches!(undo(target, &place.state(), false), Err(SetupError::NothingToUndo { .. })));
}

#[tokio::test]
async fn a_project_names_a_model_its_provider_lists() {
    let place = Place::new();
    let models = place.write(
        "models.json",
        r#"{"providers": {"keymux-work": {"baseUrl": "http://x/v1", "models": [{"id": "gpt-5.5-mini"}]}}}"#,
    );
    let project = place.dir.path().join("acme");
    std::fs::create_dir_all(&project).unwrap();
    let target = Target::new(Client::Pi, "work", Some(&project)).unwrap();
    set_up(&target, &models, &place.state()).await;
    let chosen = std::fs::read_to_string(project.join(".pi/settings.json")).unwrap();
    assert!(chosen.contains("\"defaultModel\": \"gpt-5.5-mini\""), "{chosen}");
    undo(target, &place.state(), false).unwrap();
    assert!(!project.join(".pi").exists(), "the .pi directory Keymux made for the file goes with it");
    assert!(project.exists());
}

#[tokio::test]
async fn a_project_file_changed_since_the_preview_stops_the_whole_setup() {
    let place = Place::new();
    let (models, project) = pi_place(&place);
    let before = std::fs::read_to_string(&models).unwrap();
    let target = Target::new(Client::Pi, "work", Some(&project)).unwrap();
    let shown = preview(target, &models, BASE, None).unwrap();
    let settings = project.join(".pi/settings.json");
    let calls = std::cell::Cell::new(0);
    let refused = shown.confirm(&place.state(), maker(&calls, Some((&settings, "{\"theme\": \"dark\"}\n")))).await;
    assert!(matches!(refused, Err(ConfirmError::Setup(SetupError::ChangedSincePreview { .. }))), "{refused:?}");
    assert_eq!(std::fs::read_to_string(&models).unwrap(), before, "models.json is not written either");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), "{\"theme\": \"dark\"}\n");
}

#[test]
fn a_pool_target_that_cannot_be_set_up_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |client, pool, project: Option<&Path>| Target::new(client, pool, project).unwrap_err().to_string();
    assert!(refused(Client::Codex, "work", Some(dir.path())).contains("codex -p keymux-work"));
    assert!(refused(Client::Pi, "work", None).contains("directory"));
    assert!(refused(Client::Pi, "work", Some(&dir.path().join("nope"))).contains("does not exist"));
    assert!(refused(Client::Pi, "all", Some(dir.path())).contains("--pool"));
    assert!(refused(Client::Codex, "../etc", None).contains("pool name"));
    assert_eq!(Target::new(Client::Codex, "ALL", None).unwrap(), Target::Default(Client::Codex));
    let work = Target::new(Client::Codex, "work", None).unwrap();
    assert_eq!((work.provider(), work.token_name()), ("keymux-work".to_owned(), "codex-work".to_owned()));
}

/// What Codex 0.171 appends to its own config.toml on first run in a directory.
const CODEX_OWN_EDIT: &str =
    "\n[projects.\"/home/me/work\"]\ntrust_level = \"trusted\"\n\n[tui]\nshow_tooltips = false\n";

/// Codex's auth.json as `codex login --with-api-key` writes it (0.171).
const AUTH_WITH_KEY: &str =
    "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"sk-proj-users-own-key-0123456789abcdef\"\n}";

/// Sets Codex up in the history-keeping form with `choices`, the token made on confirming.
async fn set_up_codex(path: &Path, state: &Path, choices: Choices) -> Result<Vec<Applied>, SetupError> {
    let shown = preview_with(Client::Codex, path, BASE, None, choices, Some(state))?;
    let calls = std::cell::Cell::new(0);
    shown.confirm(state, maker(&calls, None)).await.map_err(|e| match e {
        ConfirmError::Setup(e) => e,
        ConfirmError::Token(never) => match never {},
    })
}

#[tokio::test]
async fn codex_gets_one_line_and_a_new_auth_json_and_undo_after_codex_edits_takes_out_only_those() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let auth = path.with_file_name("auth.json");
    let shown = preview_with(Client::Codex, &path, BASE, None, Choices::default(), Some(&place.state())).unwrap();
    assert!(shown.text().contains("+openai_base_url = \"http://127.0.0.1:8787/v1\"\n"), "{}", shown.text());
    assert!(!shown.text().contains("sk-proj-other"), "every secret is masked: {}", shown.text());
    set_up_codex(&path, &place.state(), Choices::default()).await.unwrap();
    let written = std::fs::read_to_string(&path).unwrap();
    let (removed, added) = diff::changed_lines(
        &CODEX.split_inclusive('\n').collect::<Vec<_>>(),
        &written.split_inclusive('\n').collect::<Vec<_>>(),
    );
    assert!(removed.is_empty(), "model_provider and every other line stay: {removed:?}");
    assert_eq!(added, [format!("openai_base_url = \"{BASE}\"\n")]);
    let held: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&auth).unwrap()).unwrap();
    assert_eq!(held["OPENAI_API_KEY"], TOKEN);
    #[cfg(unix)]
    assert_eq!(mode(&auth), 0o600, "auth.json holds the token");
    // Codex writes its own settings, then the user takes Keymux away.
    std::fs::write(&path, format!("{written}{CODEX_OWN_EDIT}")).unwrap();
    assert!(status(Client::Codex, &place.state()).unwrap().is_some_and(|s| !s.edited_since));
    let undone = undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{CODEX}{CODEX_OWN_EDIT}"), "Codex's edits stay");
    assert!(!auth.exists(), "the auth.json Keymux created is gone: {:?}", undone.notes);
    assert!(status(Client::Codex, &place.state()).unwrap().is_none());
}

#[tokio::test]
async fn an_api_key_in_auth_json_is_offered_for_import_replaced_in_place_and_put_back_byte_for_byte() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let auth = place.write("auth.json", AUTH_WITH_KEY);
    let import = Choices { import_key: true, ..Choices::default() };
    let shown = preview_with(Client::Codex, &path, BASE, None, import, Some(&place.state())).unwrap();
    assert_eq!(shown.key_to_import().map(Secret::expose), Some("sk-proj-users-own-key-0123456789abcdef"));
    assert!(!shown.text().contains("users-own-key") && !format!("{shown:?}").contains("users-own-key"));
    let plain = preview_with(Client::Codex, &path, BASE, None, Choices::default(), Some(&place.state())).unwrap();
    assert!(plain.key_to_import().is_none(), "handed out only when asked for");
    assert!(plain.text().contains("--import-key"), "the key is offered: {}", plain.text());
    set_up_codex(&path, &place.state(), import).await.unwrap();
    let expected = AUTH_WITH_KEY.replace("sk-proj-users-own-key-0123456789abcdef", TOKEN);
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), expected, "only the key changed");
    let records =
        std::fs::read_dir(place.state()).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap());
    for record in records {
        assert!(!record.contains(TOKEN) && !record.contains("users-own-key"), "no secret in a record: {record}");
    }
    let undone = undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), AUTH_WITH_KEY, "{:?}", undone.notes);
}

#[test]
fn a_short_api_key_in_auth_json_is_masked_too_and_the_diff_comes_without_its_notes() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    place.write("auth.json", "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\": \"sk-f1\"\n}\n");
    let shown = preview_with(Client::Codex, &path, BASE, None, Choices::default(), Some(&place.state())).unwrap();
    assert!(shown.finds_api_key());
    let auth = &shown.plans()[1];
    assert!(
        !auth.preview().contains("sk-f1") && auth.diff().contains("-  \"OPENAI_API_KEY\": \"…\""),
        "{}",
        auth.diff()
    );
    assert!(!auth.diff().contains("note:") && auth.preview().contains("note:"), "{}", auth.preview());
    assert!(auth.notes().iter().all(|n| auth.preview().contains(n.as_str())));
    assert!(auth.preview().starts_with(auth.diff()));
}

#[tokio::test]
async fn an_auth_json_changed_since_is_left_by_undo_which_says_why() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let auth = place.write("auth.json", AUTH_WITH_KEY);
    set_up_codex(&path, &place.state(), Choices::default()).await.unwrap();
    let relogged = "{\"auth_mode\":\"apikey\",\"OPENAI_API_KEY\":\"sk-proj-a-new-login-0123456789\"}";
    std::fs::write(&auth, relogged).unwrap();
    let undone = undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), relogged, "the new login stays");
    assert!(undone.notes.iter().any(|n| n.contains("no longer holds Keymux's client token")), "{:?}", undone.notes);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CODEX);
}

#[tokio::test]
async fn a_chatgpt_login_is_refused_and_the_custom_provider_form_still_sets_it_up() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let login = "{\"OPENAI_API_KEY\":null,\"tokens\":{\"access_token\":\"eyJ-access-0123456789\"}}";
    let auth = place.write("auth.json", login);
    let refused = set_up_codex(&path, &place.state(), Choices::default()).await.unwrap_err().to_string();
    assert!(refused.contains("ChatGPT login") && refused.contains("--custom-provider"), "{refused}");
    assert!(refused.contains("sessions then live under the provider `keymux`"), "{refused}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CODEX, "nothing written");
    let custom = Choices { custom_provider: true, ..Choices::default() };
    set_up_codex(&path, &place.state(), custom).await.unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().contains("model_provider = \"keymux\""));
    assert_eq!(std::fs::read_to_string(&auth).unwrap(), login, "the login is not touched");
}

#[tokio::test]
async fn another_base_url_is_refused_by_name_and_forcing_keeps_it_for_undo() {
    let place = Place::new();
    let theirs = format!("openai_base_url = \"https://proxy.example/v1\"\n{CODEX}");
    let path = place.write("config.toml", &theirs);
    let refused = set_up_codex(&path, &place.state(), Choices::default()).await.unwrap_err().to_string();
    assert!(refused.contains("https://proxy.example/v1") && refused.contains("--force"), "{refused}");
    assert!(!path.with_file_name("auth.json").exists(), "nothing written");
    let force = Choices { force: true, ..Choices::default() };
    set_up_codex(&path, &place.state(), force).await.unwrap();
    let record = std::fs::read_to_string(record_path(&place.state(), "codex")).unwrap();
    assert!(!record.contains("proxy.example"), "their URL stays in the backup, not the record: {record}");
    // The gateway moves: its own earlier line is recognised, no --force needed, the original kept.
    let moved = "http://127.0.0.1:9999/v1";
    let shown = preview_with(Client::Codex, &path, moved, Some(token()), Choices::default(), Some(&place.state()));
    shown.unwrap().confirm(&place.state(), maker(&std::cell::Cell::new(0), None)).await.unwrap();
    undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), theirs, "their URL is back");
}

#[tokio::test]
async fn the_old_form_is_moved_over_keeping_the_table_for_sessions_recorded_under_keymux() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    apply(&plan(Client::Codex, &path, BASE, &token()).unwrap(), &place.state()).unwrap();
    let old = std::fs::read_to_string(&path).unwrap();
    let shown = preview_with(Client::Codex, &path, BASE, Some(token()), Choices::default(), Some(&place.state()));
    let shown = shown.unwrap();
    assert!(shown.text().contains("codex resume -c model_provider=keymux"), "{}", shown.text());
    shown.confirm(&place.state(), maker(&std::cell::Cell::new(0), None)).await.unwrap();
    let moved = std::fs::read_to_string(&path).unwrap();
    assert!(!moved.contains("model_provider = \"keymux\""), "{moved}");
    assert!(moved.contains("[model_providers.keymux]") && moved.contains("openai_base_url"), "{moved}");
    let undone = undo(Client::Codex, &place.state(), false).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), moved.replace(&format!("openai_base_url = \"{BASE}\"\n"), ""));
    assert!(old.contains("[model_providers.keymux]"));
    assert!(undone.notes.iter().any(|n| n.contains("model_provider=keymux")), "{:?}", undone.notes);
}

#[tokio::test]
async fn undo_refuses_when_keymuxs_own_line_was_changed_and_force_leaves_the_file() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    set_up_codex(&path, &place.state(), Choices::default()).await.unwrap();
    let changed = std::fs::read_to_string(&path).unwrap().replace(BASE, "http://127.0.0.1:1234/v1");
    std::fs::write(&path, &changed).unwrap();
    assert!(status(Client::Codex, &place.state()).unwrap().is_some_and(|s| s.edited_since));
    let refused = undo(Client::Codex, &place.state(), false).unwrap_err().to_string();
    assert!(refused.contains("it says \"http://127.0.0.1:1234/v1\" now") && refused.contains("--force"), "{refused}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), changed);
    let undone = undo(Client::Codex, &place.state(), true).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), changed, "left as it is: {:?}", undone.notes);
    assert!(!path.with_file_name("auth.json").exists(), "auth.json still goes");
}

#[tokio::test]
async fn a_bad_auth_json_or_an_unreadable_one_is_refused_naming_it_and_nothing_is_written() {
    let place = Place::new();
    let path = place.write("config.toml", CODEX);
    let auth = place.write("auth.json", "{\"OPENAI_API_KEY\": ");
    let refused = set_up_codex(&path, &place.state(), Choices::default()).await.unwrap_err().to_string();
    assert!(refused.contains("auth.json is not valid JSON") && refused.contains("Fix or move it"), "{refused}");
    std::fs::remove_file(&auth).unwrap();
    std::fs::create_dir(&auth).unwrap();
    let refused = set_up_codex(&path, &place.state(), Choices::default()).await.unwrap_err().to_string();
    assert!(
        refused.contains("cannot read") && refused.contains("auth.json") && refused.contains("move it aside"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), CODEX, "nothing written");
    assert!(status(Client::Codex, &place.state()).unwrap().is_none());
}
