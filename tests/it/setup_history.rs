//! Setting Codex up keeps the user's history, with real Codex 0.171: a session recorded before Keymux
//! (Codex pointed straight at one simulator organization, its key in `auth.json` as `codex login
//! --with-api-key` writes it) is still the one Codex resumes after setup, recorded under the built-in
//! `openai` provider, and it continues through Keymux on the organization that made it, among keys of
//! three (Keymux finds which can read its reasoning). Undo, after Codex's own edits to `config.toml`,
//! takes out only Keymux's line and gives `auth.json` back byte for byte, and Codex goes straight to
//! the provider again. pi (1.6) keeps sessions per directory whatever the provider, so nothing is
//! stranded there: an old session continues through Keymux once its provider is named.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::path::Path;
use std::process::Stdio;

use keymux::secrets::Secret;
use keymux::setup::{self, Choices, Client, SetupError};
use support::tui::Tui;
use support::*;

/// What the user had: settings, and the simulator's organization as their OpenAI.
const SETTINGS: &str = "# my Codex settings\nmodel = \"gpt-5.5\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\ncheck_for_update_on_startup = false\n";

/// `codex login --with-api-key`, the key read from stdin as a user pipes it in.
async fn codex_login(codex_home: &Path, key: &str) {
    use tokio::io::AsyncWriteExt as _;
    let home = codex_home.to_str().unwrap();
    let mut child = tokio::process::Command::new(codex_bin())
        .args(["login", "--with-api-key"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs([("HOME", home), ("CODEX_HOME", home)])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(key.as_bytes()).await.unwrap();
    assert!(child.wait().await.unwrap().success(), "codex login --with-api-key");
}

/// Runs `codex exec` with `args` in `work`: (succeeded, what it printed).
async fn codex(codex_home: &Path, work: &Path, args: &[&str]) -> (bool, String) {
    let home = codex_home.to_str().unwrap();
    let mut all = vec!["exec", "--skip-git-repo-check"];
    all.extend_from_slice(args);
    run_client(codex_bin(), work, &[("HOME", home), ("CODEX_HOME", home)], &all).await
}

/// The session id Codex printed.
fn session_id(output: &str) -> String {
    let line = output.lines().find_map(|l| l.strip_prefix("session id: ")).unwrap_or_else(|| panic!("{output}"));
    line.trim().to_owned()
}

/// Every session Codex recorded, with the provider it recorded it under.
fn recorded(codex_home: &Path) -> Vec<(String, String)> {
    let first_lines = session_files(&codex_home.join("sessions"))
        .into_iter()
        .map(|path| std::fs::read_to_string(path).unwrap().lines().next().unwrap().to_owned());
    first_lines
        .map(|line| {
            let meta: serde_json::Value = serde_json::from_str(&line).unwrap();
            let payload = &meta["payload"];
            (payload["id"].as_str().unwrap().to_owned(), payload["model_provider"].to_string())
        })
        .collect()
}

async fn requests_through_keymux(h: &Harness) -> usize {
    decisions_api(&h.root).await["data"].as_array().unwrap().len()
}

/// Whether a request through Keymux was placed by finding the organization of reasoning made before
/// Keymux, and served there (on org-b, where the sessions begin).
async fn found_its_organization(h: &Harness) -> bool {
    let decisions = decisions_api(&h.root).await;
    decisions["data"].as_array().unwrap().iter().any(|r| {
        r["decision"]["route"] == "finding_org" && r["served_by"].as_str().is_some_and(|k| k.starts_with("k_b"))
    })
}

/// A gateway with five keys in three organizations (the sessions start on one of them, whose reasoning
/// the others cannot read), and a directory for the client's files.
async fn three_organizations() -> (Harness, tempfile::TempDir) {
    (Harness::start(three_orgs(), &five_keys()).await, tempfile::tempdir().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_before_keymux_continues_through_it_and_undo_keeps_codexs_own_edits() {
    let (h, dir) = three_organizations().await;
    let (codex_home, work, state) = (dir.path().join("codex"), dir.path().join("work"), dir.path().join("state"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&codex_home).unwrap();
    let config_path = codex_home.join("config.toml");
    // What Codex itself wrote on its first interactive run (the directory trusted, the notices seen).
    let tui = format!(
        "\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n\n[tui]\nscreen_reader_detection_done = true\n\n[notice.model_migrations]\n\"gpt-5.5\" = \"gpt-6-sol\"\n",
        work.display()
    );
    let original =
        format!("{SETTINGS}openai_base_url = \"{}\"\n\n[analytics]\nenabled = false\n{tui}", h.sim.base_url());
    std::fs::write(&config_path, &original).unwrap();
    codex_login(&codex_home, "sk-b1").await;
    let auth_path = codex_home.join("auth.json");
    let auth_before = std::fs::read(&auth_path).unwrap();

    // An interactive session (the TUI's `codex resume` lists only those), then one from `codex exec`.
    let before = Tui::start(&codex_home, &work, &["Before Keymux, in the TUI."]);
    before.wait_for(&["SIM-REPLY #", "Before Keymux, in the TUI."]).await;
    before.wait_for(&["Worked for"]).await;
    drop(before);
    let (ok, out) = codex(&codex_home, &work, &["Before Keymux."]).await;
    assert!(ok && out.contains("from org-b: Before Keymux."), "{out}");
    let id = session_id(&out);
    assert_eq!(requests_through_keymux(&h).await, 0, "straight to the provider");

    // Their own base URL is named and refused; the person chooses to replace it and import the key.
    let token = Some(Secret::new(TOKEN));
    let refused =
        setup::preview_with(Client::Codex, &config_path, &h.base, token.clone(), Choices::default(), Some(&state));
    let refused = refused.unwrap_err();
    assert!(
        matches!(refused, SetupError::Refused { .. }) && refused.to_string().contains(&h.sim.base_url()),
        "{refused}"
    );
    let choices = Choices { force: true, import_key: true, ..Choices::default() };
    let shown = setup::preview_with(Client::Codex, &config_path, &h.base, token, choices, Some(&state)).unwrap();
    assert_eq!(shown.key_to_import().map(Secret::expose), Some("sk-b1"), "the key is offered for import");
    assert_no_secrets("the preview", &shown.text(), &[TOKEN]);
    let never = || std::future::ready(Err::<Secret, &str>("the client token exists already"));
    shown.confirm(&state, never).await.unwrap();

    // The TUI's `codex resume` picker lists the interactive session from before Keymux.
    let picker = Tui::start(&codex_home, &work, &["resume"]);
    picker.wait_for(&["Before Keymux, in the TUI."]).await;
    drop(picker);
    let (ok, out) = codex(&codex_home, &work, &["resume", "--last", "Through Keymux."]).await;
    assert!(ok, "{out}");
    assert_eq!(session_id(&out), id, "the session from before Keymux is the one Codex resumes:\n{out}");
    assert!(out.contains("from org-b: Through Keymux."), "it continues:\n{out}");
    assert!(requests_through_keymux(&h).await > 0, "through Keymux");
    assert!(found_its_organization(&h).await, "Keymux found the organization of its reasoning");
    let sessions = recorded(&codex_home);
    assert!(sessions.iter().any(|(one, _)| *one == id), "{sessions:?}");
    assert!(
        sessions.iter().all(|(_, provider)| provider == "\"openai\""),
        "all under the built-in provider: {sessions:?}"
    );

    // Codex records a project's trust itself, then Keymux is taken away.
    let with_keymux = std::fs::read_to_string(&config_path).unwrap();
    let codex_edit = format!("\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n", dir.path().join("other").display());
    std::fs::write(&config_path, format!("{with_keymux}{codex_edit}")).unwrap();
    let undone = setup::undo(Client::Codex, &state, false).unwrap();
    // Everything Codex wrote since stays (the TUI adds a table of its own on its first turn, too); only
    // Keymux's line goes, and the user's own base URL comes back in its place.
    let after = std::fs::read_to_string(&config_path).unwrap();
    assert_eq!(after, format!("{}{codex_edit}", with_keymux.replace(&h.base, &h.sim.base_url())), "{:?}", undone.notes);
    assert!(after.starts_with(&original[..original.find("[projects").unwrap()]), "{after}");
    assert_eq!(std::fs::read(&auth_path).unwrap(), auth_before, "auth.json byte for byte");

    // Codex goes straight to the provider again. (Not by resuming the session: its later turns hold
    // reasoning Keymux tagged, which the provider cannot read without Keymux.)
    let through = requests_through_keymux(&h).await;
    let (ok, out) = codex(&codex_home, &work, &["After undo."]).await;
    assert!(ok && out.contains("from org-b: After undo.") && session_id(&out) != id, "{out}");
    assert_eq!(requests_through_keymux(&h).await, through, "straight to the provider again");
}

/// Every session pi recorded (it keeps them per directory), with the provider of each of its turns.
fn pi_sessions(agent: &Path) -> Vec<Vec<String>> {
    let providers = |text: String| {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|e| e["message"]["provider"].as_str().map(str::to_owned))
            .collect()
    };
    session_files(&agent.join("sessions")).into_iter().map(|p| providers(std::fs::read_to_string(p).unwrap())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pi_session_from_before_keymux_continues_through_it_when_its_provider_is_named() {
    let (h, dir) = three_organizations().await;
    let (agent, work, state) = (dir.path().join("agent"), dir.path().join("work"), dir.path().join("state"));
    std::fs::create_dir_all(&work).unwrap();
    // pi's built-in `openai` provider, pointed at the simulator as the user's OpenAI.
    let models = agent.join("models.json");
    let original = format!("{{\"providers\": {{\"openai\": {{\"baseUrl\": \"{}\"}}}}}}\n", h.sim.base_url());
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(&models, &original).unwrap();
    let env = [
        ("HOME", dir.path().to_str().unwrap()),
        ("PI_CODING_AGENT_DIR", agent.to_str().unwrap()),
        ("OPENAI_API_KEY", "sk-b1"),
    ];
    let pi = |args: &'static [&'static str]| run_client(pi_bin(), &work, &env, args);

    let (ok, out) = pi(&["--provider", "openai", "--model", "gpt-5.5", "-p", "Before Keymux."]).await;
    assert!(ok && out.contains("from org-b: Before Keymux."), "{out}");

    let shown =
        setup::preview_with(Client::Pi, &models, &h.base, Some(Secret::new(TOKEN)), Choices::default(), Some(&state));
    let never = || std::future::ready(Err::<Secret, &str>("the client token exists already"));
    shown.unwrap().confirm(&state, never).await.unwrap();

    // Continued as it was made: with `openai`, around Keymux.
    let (ok, out) = pi(&["-c", "-p", "Continued plainly."]).await;
    assert!(ok && out.contains("from org-b: Continued plainly."), "{out}");
    assert_eq!(requests_through_keymux(&h).await, 0, "the session's own provider, not Keymux");
    // Naming Keymux's provider continues the same session through Keymux.
    // pi replays no encrypted reasoning here, so any organization may answer.
    let (ok, out) = pi(&["-c", "--provider", "keymux", "--model", "gpt-5.5", "-p", "Through Keymux."]).await;
    assert!(ok && out.contains(": Through Keymux."), "{out}");
    assert!(requests_through_keymux(&h).await > 0, "through Keymux");
    let sessions = pi_sessions(&agent);
    assert_eq!(sessions.len(), 1, "one session: {sessions:?}");
    assert_eq!(sessions[0].last().map(String::as_str), Some("keymux"), "{sessions:?}");
    assert!(sessions[0].iter().any(|p| p == "openai"), "{sessions:?}");

    setup::undo(Client::Pi, &state, false).unwrap();
    assert_eq!(std::fs::read_to_string(&models).unwrap(), original, "models.json byte for byte");
}
