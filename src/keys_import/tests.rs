#![expect(clippy::unwrap_used, reason = "tests")]
use super::*;

const KEY: &str = "sk-proj-unit-AAAAbbbbCCCCdddd1111";
const KEY2: &str = "sk-proj-unit-EEEEffffGGGGhhhh2222";

fn keys(found: &Found) -> Vec<(&str, &Origin)> {
    found.candidates.iter().map(|c| (c.secret.expose(), &c.origin)).collect()
}

#[test]
fn codex_api_key_mode_is_found_and_a_chatgpt_login_is_passed_over_with_a_note() {
    let path = Path::new("/h/.codex/auth.json");
    let read = codex_auth(&format!("{{\"auth_mode\":\"apikey\",\"OPENAI_API_KEY\":\"{KEY}\"}}"), path).unwrap();
    assert_eq!(read.candidates.len(), 1);
    assert_eq!(read.candidates[0].secret.expose(), KEY);
    assert_eq!(read.candidates[0].origin, Origin::CodexAuth(path.to_owned()));
    let login = r#"{"OPENAI_API_KEY": null, "tokens": {"id_token": "x", "access_token": "y"}}"#;
    let read = codex_auth(login, path).unwrap();
    assert!(read.candidates.is_empty());
    assert!(read.notes[0].contains("ChatGPT login"), "{:?}", read.notes);
}

#[test]
fn a_file_that_is_not_json_is_refused_by_name_and_the_other_sources_still_list() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".codex")).unwrap();
    std::fs::write(home.path().join(".codex/auth.json"), "{\"OPENAI_API_KEY\": ").unwrap();
    let vars = vec![(ENV_VAR.to_owned(), KEY2.to_owned())];
    let found = Sources::from_vars(vars, home.path()).find();
    assert_eq!(keys(&found), vec![(KEY2, &Origin::Env(ENV_VAR.into()))]);
    assert_eq!(found.refusals.len(), 1);
    assert!(found.refusals[0].contains(".codex/auth.json is not JSON"), "{:?}", found.refusals);
}

#[test]
fn pi_0_keys_are_literal_unless_they_are_a_command_or_name_a_variable() {
    let rule = PiRule::of_version("0.73.1");
    let path = Path::new("/h/.pi/agent/auth.json");
    let text = format!(
        r#"{{"openai": {{"type": "api_key", "key": "{KEY}"}}, "anthropic": {{"type": "api_key", "key": "sk-ant-x1234567890"}},
           "openai-codex": {{"type": "oauth", "access": "tok"}}, "openai-2": {{"type": "api_key", "key": "!op read x"}},
           "openai-3": {{"type": "api_key", "key": "MY_KEY"}}}}"#
    );
    let read = pi_auth_keys(&text, path, &rule, &["MY_KEY".into()]).unwrap();
    assert_eq!(read.candidates.len(), 1);
    assert_eq!(read.candidates[0].origin, Origin::PiAuth(path.to_owned(), "openai".into()));
    assert!(read.notes.iter().any(|n| n.contains("command")), "{:?}", read.notes);
    assert!(read.notes.iter().any(|n| n.contains("names the environment variable MY_KEY")), "{:?}", read.notes);

    let models = format!(
        r#"{{"providers": {{"mine": {{"apiKey": "{KEY2}", "api": "openai-responses"}},
           "keymux": {{"apiKey": "km-local-token-0123456789", "baseUrl": "http://127.0.0.1:8787/v1"}},
           "other": {{"apiKey": "sk-elsewhere-0123456789", "baseUrl": "https://example.com/v1"}},
           "env": {{"apiKey": "OPENAI_API_KEY"}}}}}}"#
    );
    let path = Path::new("/h/.pi/agent/models.json");
    let read = pi_model_keys(&models, path, &rule, &[]).unwrap();
    assert_eq!(read.candidates.len(), 1, "only the literal OpenAI key");
    assert_eq!(read.candidates[0].origin, Origin::PiModels(path.to_owned(), "mine".into()));
    assert!(read.notes.iter().any(|n| n.contains("not set here")), "{:?}", read.notes);
}

/// Each value as pi 0.x, pi 1.x and an unknown pi read it: the key, or the words of the reason it is
/// passed over.
#[test]
fn the_pi_rule_follows_the_installed_version() {
    let (v0, v1, unknown) = (PiRule::of_version("0.73.1"), PiRule::of_version("1.6.0"), PiRule::Unknown);
    assert_eq!(v0, PiRule::V0("0.73.1".into()));
    assert_eq!(v1, PiRule::V1("1.6.0".into()));
    assert_eq!(PiRule::of_version("2.0.0-beta.1"), PiRule::V1("2.0.0-beta.1".into()));
    assert_eq!(PiRule::of_version("nightly"), PiRule::Unknown);
    let env = ["SET_KEY".to_owned()];
    let key = |rule: &PiRule, value: &str| match rule.key(value, &env) {
        Ok(key) => key,
        Err(why) => format!("passed over: {why}"),
    };
    let table: [(&str, &str, &str, &str); 9] = [
        // value, pi 0.x, pi 1.x, unknown
        (KEY, KEY, KEY, KEY),
        ("!op read openai", "command", "command", "command"),
        ("$SET_KEY", "not look like", "variable SET_KEY", "variable SET_KEY"),
        ("${SET_KEY}", "not look like", "variable SET_KEY", "variable SET_KEY"),
        ("SET_KEY", "variable SET_KEY", "not look like", "variable SET_KEY"),
        ("UNSET_KEY", "not set here", "not look like", "not set here"),
        ("sk-$A-${B}", "sk-$A-${B}", "variables A, B", "variables A, B"),
        ("sk-proj-$$x-$!y-${1}-$-", "sk-proj-$$x-$!y-${1}-$-", "sk-proj-$x-!y-${1}-$-", "sk-proj-$x-!y-${1}-$-"),
        ("km-local-token-0123456789", "Keymux client token", "Keymux client token", "Keymux client token"),
    ];
    for (value, want0, want1, want_unknown) in table {
        for (rule, want) in [(&v0, want0), (&v1, want1), (&unknown, want_unknown)] {
            let got = key(rule, value);
            assert!(
                got == want || (got.starts_with("passed over") && got.contains(want)),
                "{value} by {rule:?}: {got}"
            );
        }
    }
    assert!(v1.describe().contains("pi 1.6.0") && v1.describe().contains("\"$NAME\""), "{}", v1.describe());
    assert!(unknown.describe().contains("no pi found"), "{}", unknown.describe());
}

/// The version comes from the package.json above the file the `pi` on PATH leads to (npm's layout:
/// `bin/pi` a link to `lib/node_modules/<package>/dist/…/cli.js`).
#[test]
fn the_installed_pi_is_found_through_its_link_on_path() {
    let root = tempfile::tempdir().unwrap();
    let install = |prefix: &str, package: &str, version: &str, cli: &str| {
        let dir = root.path().join(prefix);
        let package_dir = dir.join("lib/node_modules").join(package);
        std::fs::create_dir_all(package_dir.join(cli).parent().unwrap()).unwrap();
        std::fs::write(package_dir.join(cli), "#!/usr/bin/env node\n").unwrap();
        let manifest = serde_json::json!({"name": package, "version": version, "bin": {"pi": cli}});
        std::fs::write(package_dir.join("package.json"), manifest.to_string()).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::os::unix::fs::symlink(package_dir.join(cli), dir.join("bin/pi")).unwrap();
        dir.join("bin").display().to_string()
    };
    let new = install("new", "@earendil-works/pi-coding-agent", "1.6.0", "dist/bundle/cli.js");
    let old = install("old", "@mariozechner/pi-coding-agent", "0.73.1", "dist/cli.js");
    let empty = root.path().join("empty").display().to_string();
    assert_eq!(PiRule::installed(&format!("{empty}:{new}:{old}")), PiRule::V1("1.6.0".into()));
    assert_eq!(PiRule::installed(&format!("{old}:{new}")), PiRule::V0("0.73.1".into()));
    assert_eq!(PiRule::installed(&empty), PiRule::Unknown);
    let vars = vec![("PATH".to_owned(), new)];
    assert_eq!(Sources::from_vars(vars, root.path()).pi_rule, PiRule::V1("1.6.0".into()));
}

#[test]
fn pi_s_directory_may_start_with_a_tilde() {
    let vars = vec![("PI_CODING_AGENT_DIR".to_owned(), "~/pi-agent".to_owned())];
    assert_eq!(Sources::from_vars(vars, Path::new("/h")).pi_dir, Path::new("/h/pi-agent"));
}

#[test]
fn a_pasted_list_takes_labels_skips_comments_and_names_a_bad_line() {
    let text = format!("# my keys\n\nwork={KEY}\n  {KEY2}  \n");
    let found = pasted(&text, None);
    assert!(found.refusals.is_empty(), "{:?}", found.refusals);
    assert_eq!(keys(&found), vec![(KEY, &Origin::Pasted(None, 3)), (KEY2, &Origin::Pasted(None, 4))]);
    assert_eq!(found.candidates[0].label, "work");

    let found = pasted(&format!("{KEY}\nhello world\n"), Some(Path::new("/tmp/list.txt")));
    assert!(found.candidates.is_empty(), "nothing from a list with a bad line");
    assert!(found.refusals[0].starts_with("/tmp/list.txt line 2:"), "{:?}", found.refusals);
    assert!(!found.refusals[0].contains(KEY));
}

#[test]
fn labels_come_from_the_source_and_never_repeat_one_in_use() {
    let mut found = Found::default();
    for origin in [Origin::CodexAuth("a".into()), Origin::Env(ENV_VAR.into()), Origin::CodexAuth("b".into())] {
        found.candidates.push(Candidate { secret: Secret::new(KEY), origin, label: String::new() });
    }
    found.label(&["Codex".into()]);
    let labels: Vec<&str> = found.candidates.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["codex-2", "env", "codex-3"]);
}

#[test]
fn the_plaintext_goes_and_every_other_byte_stays() {
    let codex = format!("{{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\":  \"{KEY}\",\n  \"x\": 1\n}}\n");
    let origin = Origin::CodexAuth("auth.json".into());
    assert_eq!(
        strip_text(&codex, &origin, KEY),
        "{\n  \"auth_mode\": \"apikey\",\n  \"OPENAI_API_KEY\":  null,\n  \"x\": 1\n}\n"
    );
    let pi = format!("{{\n  \"anthropic\": {{ \"type\": \"api_key\", \"key\": \"a\" }},\n  \"openai\": {{ \"type\": \"api_key\", \"key\": \"{KEY}\" }}\n}}");
    let origin = Origin::PiAuth("auth.json".into(), "openai".into());
    assert_eq!(strip_text(&pi, &origin, KEY), "{\n  \"anthropic\": { \"type\": \"api_key\", \"key\": \"a\" }\n}");
    let models =
        format!("{{\"providers\": {{\"mine\": {{\n  \"apiKey\": \"{KEY}\",\n  \"api\": \"openai-responses\"\n}}}}}}");
    let origin = Origin::PiModels("models.json".into(), "mine".into());
    assert_eq!(strip_text(&models, &origin, KEY), "{\"providers\": {\"mine\": {\n  \"api\": \"openai-responses\"\n}}}");
    assert!(strip::check(&models, &origin, KEY2).is_err(), "another key is not taken out");
    let last = format!("{{\"providers\": {{\"mine\": {{ \"api\": \"x\", \"apiKey\": \"{KEY}\" }}}}}}");
    assert_eq!(strip_text(&last, &origin, KEY), "{\"providers\": {\"mine\": { \"api\": \"x\" }}}");
    let only = format!("{{\n  \"openai\": {{ \"type\": \"api_key\", \"key\": \"{KEY}\" }}\n}}");
    let origin = Origin::PiAuth("auth.json".into(), "openai".into());
    assert_eq!(strip_text(&only, &origin, KEY), "{}");
}

fn strip_text(text: &str, origin: &Origin, key: &str) -> String {
    strip::check(text, origin, key).unwrap()
}
