use super::*;
use crate::budget::{MoneyBudget, OnLimit};
use crate::key_settings::KeySettings;
use crate::keys::{KeyId, ProviderId};

const COMMENTED: &str = r#"# My Keymux setup
listen = "127.0.0.1:8787"   # the usual port

[affinity]
lost_org = "rescue"  # keep sessions going

# work keys first
[[keys]]
id = "k_work"
label = "work"
priority = 0 # tier 0
"#;

fn key(id: &str, label: &str) -> KeyConfig {
    KeyConfig {
        id: KeyId::new(id),
        label: label.into(),
        provider: ProviderId::Openai,
        base_url: None,
        org: None,
        disabled: false,
        imported: false,
        settings: KeySettings {
            priority: 1,
            daily_token_budget: Some(5),
            reserve_window_pct: Some(20),
            ..KeySettings::default()
        },
        money: MoneyBudget::default(),
    }
}

/// "None" is not zero: a budget taken away is no budget after a restart, not a budget of 0; a key
/// switched off stays off; pools follow a renamed or removed key.
#[test]
fn what_the_user_set_reads_back_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = ConfigFile::new(dir.path().join("config.toml"));
    std::fs::write(file.path(), COMMENTED).expect("write");
    let mut work = key("k_work", "work");
    work.settings.models = vec!["gpt-5.5".into()];
    file.edit(|doc| update_key(doc, &work)).expect("budget and models set");
    work.settings = KeySettings { reserve_window_pct: Some(20), ..KeySettings::default() };
    work.disabled = true;
    let config = file.edit(|doc| update_key(doc, &work)).expect("cleared");
    assert_eq!(config.keys[0], work, "{}", std::fs::read_to_string(file.path()).unwrap_or_default());
    let mut pool = PoolConfig { name: "team".into(), keys: vec!["work".into()], ..PoolConfig::default() };
    file.edit(|doc| set_pool(doc, &pool)).expect("pool");
    pool.policies.money = MoneyBudget { reserve_at: Some(80), on_limit: OnLimit::Stop, ..MoneyBudget::default() };
    let config = file.edit(|doc| set_pool(doc, &pool)).expect("a pool's budget changed");
    assert_eq!(config.pools[0], pool, "a changed pool's budget is written, not only its keys");
    let office = KeyConfig { label: "office".into(), ..work.clone() };
    let renamed = file.edit(|doc| {
        update_key(doc, &office)?;
        rename_in_pools(doc, &["WORK"], Some("office"))
    });
    assert_eq!(renamed.expect("renamed").pools[0].keys, ["office"]);
    let removed = file.edit(|doc| {
        remove_key(doc, "k_work")?;
        rename_in_pools(doc, &["k_work", "office"], None)
    });
    assert!(removed.expect("removed").pools[0].keys.is_empty());
    let token =
        TokenConfig { id: "t_1".into(), name: "codex".into(), created_unix: 7, pool: "all".into(), login: false };
    file.edit(|doc| add_token(doc, &token)).expect("token");
    let config = file.edit(|doc| set_token_pool(doc, "t_1", "team")).expect("moved");
    assert_eq!(config.tokens[0].pool, "team");
    let config = file.edit(|doc| remove_pool(doc, "TEAM")).expect_err("a token still uses it");
    assert!(config.to_string().contains("no pool named 'team'"), "{config}");
}

#[test]
fn edits_keep_the_users_comments_and_are_valid_configs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = ConfigFile::new(dir.path().join("config.toml"));
    std::fs::write(file.path(), COMMENTED).expect("write");
    let config = file.edit(|doc| add_key(doc, &key("k_home", "home"))).expect("added");
    assert_eq!(config.keys.len(), 2);
    let mut renamed = key("k_work", "office");
    renamed.settings.priority = 0;
    let config = file.edit(|doc| update_key(doc, &renamed)).expect("updated");
    assert_eq!(config.keys[0].label, "office");
    let config = file.edit(|doc| remove_key(doc, "k_home")).expect("removed");
    assert_eq!(config.keys.len(), 1);
    let text = std::fs::read_to_string(file.path()).expect("read");
    for comment in ["# My Keymux setup", "# the usual port", "# keep sessions going", "# work keys first", "# tier 0"] {
        assert!(text.contains(comment), "{comment} lost:\n{text}");
    }
    let token =
        TokenConfig { id: "t_1".into(), name: "codex".into(), created_unix: 7, pool: "all".into(), login: false };
    let config = file.edit(|doc| add_token(doc, &token)).expect("token");
    assert_eq!(config.tokens, [token]);
    let config = file.edit(|doc| remove_token(doc, "t_1")).expect("revoked");
    assert!(config.tokens.is_empty());
}

#[cfg(unix)]
#[test]
fn a_file_written_with_a_mode_is_never_readable_by_others() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("models.json");
    std::fs::write(&path, "old").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    // A temporary file a crash left behind, readable by everyone.
    let stale = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&stale, "stale").expect("write");
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    write_atomically_with_mode(&path, b"new", Some(0o600)).expect("written");
    assert_eq!(std::fs::read(&path).expect("read"), b"new");
    let mode = std::fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    assert!(!stale.exists(), "the temporary file became the file");
}

#[test]
fn an_edit_that_breaks_the_config_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = ConfigFile::new(dir.path().join("config.toml"));
    std::fs::write(file.path(), COMMENTED).expect("write");
    let duplicate = key("k_other", "work");
    assert!(file.edit(|doc| add_key(doc, &duplicate)).is_err(), "two keys labelled work");
    assert_eq!(std::fs::read_to_string(file.path()).expect("read"), COMMENTED);
    // A file an earlier Keymux wrote, with empty inline lists, takes tables.
    std::fs::write(file.path(), "keys = []\ntokens = []\n").expect("write");
    let config = file.edit(|doc| add_key(doc, &key("k_a", "a"))).expect("added");
    assert_eq!(config.keys.len(), 1);
}
