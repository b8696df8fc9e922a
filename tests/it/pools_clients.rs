//! Pools per project with the real clients: Codex CLI 0.171 and pi 1.6, set up by the real
//! `keymux setup … --pool`, run in two projects with interleaved sessions (new ones, then resumed and
//! continued, so their history and encrypted reasoning are replayed) while one key of each pool fails
//! and cools, and while every key of the work pool cools. The simulator's request log is the judge:
//! no request of the work project reaches a key outside the work pool, none of the other project's
//! reaches a work key, and the work clients get a 429 rather than a personal key.
//!
//! The two projects are told apart by what the clients send: both put their working directory into
//! every request (Codex's environment context, pi's system prompt), and every prompt is tagged too.
#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests print the figures they measure")]

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keymux_sim::{Fault, LogEntry, Sim, SimConfig};
use support::*;

/// The work project's directory name (and prompt tag): it appears in every request of that project.
const WORK: &str = "acme-work-repo";
/// The other project's.
const HOBBY: &str = "hobby-repo";
/// The work organization's keys, as (label, secret).
const WORK_KEYS: [(&str, &str); 2] = [("work-1", "sk-pc-work-1"), ("work-2", "sk-pc-work-2")];
/// The personal organization's keys.
const HOME_KEYS: [(&str, &str); 2] = [("home-1", "sk-pc-home-1"), ("home-2", "sk-pc-home-2")];

/// Which project a request the simulator saw came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Project {
    Work,
    Hobby,
}

/// The project of a client request, from its body; `None` when it names neither or both.
fn project_of(entry: &LogEntry) -> Option<Project> {
    let body = entry.body.as_ref().map(ToString::to_string).unwrap_or_default();
    match (body.contains(WORK), body.contains(HOBBY)) {
        (true, false) => Some(Project::Work),
        (false, true) => Some(Project::Hobby),
        (true, true) | (false, false) => None,
    }
}

/// Everything one user has: a home with Codex's and pi's files, a Keymux config with its own keychain
/// service, and the two projects.
struct Desk {
    _dir: tempfile::TempDir,
    home: PathBuf,
    codex_home: PathBuf,
    config: String,
    env: Vec<(String, String)>,
    work: PathBuf,
    hobby: PathBuf,
}

impl Desk {
    fn new(sim: &Sim) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_owned();
        let config = home.join("keymux.toml");
        let service = format!("keymux-pools-clients-{}", std::process::id());
        let text = format!("keychain_service = \"{service}\"\nupstream = \"{}\"\n", sim.base_url());
        std::fs::write(&config, text).unwrap();
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(codex_home.join("config.toml"), EXISTING_CODEX_CONFIG_HEAD).unwrap();
        let mut env: Vec<(String, String)> =
            base_env(&home).into_iter().filter(|(k, _)| k != "XDG_DATA_HOME").collect();
        env.push(("XDG_DATA_HOME".into(), home.join("data").display().to_string()));
        env.push(("CODEX_HOME".into(), codex_home.display().to_string()));
        let (work, hobby) = (home.join("projects").join(WORK), home.join("projects").join(HOBBY));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&hobby).unwrap();
        Self { _dir: dir, home, codex_home, config: config.display().to_string(), env, work, hobby }
    }

    /// `keymux --config … ARGS` with `stdin`; its output. Fails the test when it fails.
    async fn keymux(&self, args: &[&str], stdin: &str) -> String {
        let (ok, out, err) = self.try_keymux(args, stdin).await;
        assert!(ok, "keymux {args:?} failed:\n{out}{err}");
        out + &err
    }

    async fn try_keymux(&self, args: &[&str], stdin: &str) -> (bool, String, String) {
        let mut all = vec!["--config", self.config.as_str()];
        all.extend_from_slice(args);
        run_keymux(&all, &self.env, stdin).await
    }

    /// Runs a real client in `dir` with nothing in its environment but PATH, HOME and what it needs:
    /// (succeeded, everything it printed).
    async fn client(&self, bin: PathBuf, dir: &Path, args: &[&str]) -> (bool, String) {
        let (home, codex_home) = (self.home.to_str().unwrap(), self.codex_home.to_str().unwrap());
        run_client(bin, dir, &[("HOME", home), ("CODEX_HOME", codex_home), ("PI_OFFLINE", "1")], args).await
    }

    async fn codex(&self, dir: &Path, args: &[&str]) -> (bool, String) {
        self.client(codex_bin(), dir, args).await
    }

    async fn pi(&self, dir: &Path, args: &[&str]) -> (bool, String) {
        self.client(pi_bin(), dir, args).await
    }
}

/// One turn of each client in each project: Codex with `-p keymux-work` in the work project and with
/// its default provider elsewhere; pi in each directory. `resume` continues the last session.
struct Turns<'a> {
    desk: &'a Desk,
}

impl Turns<'_> {
    async fn codex(&self, project: Project, n: u32, resume: bool) -> (bool, String) {
        let (dir, tag) = self.place(project);
        let prompt = format!("[{tag}] Codex turn {n}: continue the task.");
        let mut args: Vec<&str> = match project {
            Project::Work => vec!["-p", "keymux-work", "exec", "--skip-git-repo-check"],
            Project::Hobby => vec!["exec", "--skip-git-repo-check"],
        };
        if resume {
            args.extend(["resume", "--last"]);
        }
        args.push(&prompt);
        self.desk.codex(dir, &args).await
    }

    async fn pi(&self, project: Project, n: u32, resume: bool) -> (bool, String) {
        let (dir, tag) = self.place(project);
        let prompt = format!("[{tag}] pi turn {n}: continue the task.");
        let mut args = vec!["-p", prompt.as_str()];
        if resume {
            args.insert(0, "-c");
        }
        // pi 1.x reads a project's `.pi/settings.json` only once the project is trusted; with no prompt
        // to ask on (`-p`), a one-off `--approve` is how a run trusts it (`/trust` saves the decision).
        if project == Project::Work {
            args.insert(0, "--approve");
        }
        self.desk.pi(dir, &args).await
    }

    fn place(&self, project: Project) -> (&Path, &str) {
        match project {
            Project::Work => (&self.desk.work, WORK),
            Project::Hobby => (&self.desk.hobby, HOBBY),
        }
    }
}

/// Asserts that a turn was refused with a 429 (what the pool's cooling gives).
fn refused(what: &str, (ok, output): (bool, String)) {
    assert!(!ok && output.contains("429"), "{what} should have got 429 while its pool cools:\n{output}");
}

/// Asserts that a turn succeeded, with the provider's answer printed.
fn served(what: &str, (ok, output): (bool, String)) {
    assert!(ok && output.contains("SIM-REPLY"), "{what} should have been served:\n{output}");
}

/// Keys in the Keymux keychain, pools, a running gateway. The pools are made with the real CLI before
/// the gateway starts, as a user would.
async fn gateway(desk: &Desk) -> Keymux {
    for (label, secret) in WORK_KEYS.iter().chain(&HOME_KEYS) {
        desk.keymux(&["keys", "add", "--label", label], &format!("{secret}\n")).await;
    }
    desk.keymux(&["pool", "create", "work", "--keys", "work-1,work-2"], "").await;
    desk.keymux(&["pool", "create", "personal", "--keys", "home-1,home-2"], "").await;
    Keymux::spawn(&["--config", &desk.config], &desk.env).await
}

/// Sets both clients up: the default setups (bound to the personal pool afterwards) for every
/// directory, and the work pool for the work project. The work pool's Codex and pi tokens.
async fn set_up_clients(desk: &Desk) -> [String; 2] {
    // An unknown pool is refused before anything is written or made.
    let (ok, out, err) = desk.try_keymux(&["setup", "codex", "--pool", "acme", "--yes"], "").await;
    assert!(!ok && err.contains("keymux pool create acme"), "{out}{err}");
    assert!(!desk.codex_home.join("keymux-acme.config.toml").exists());

    // The custom-provider form, over HTTP like the pool's profile: the built-in provider's WebSocket
    // opens each session with a prewarm frame that names no project, which the tally could not place.
    desk.keymux(&["setup", "codex", "--custom-provider", "--yes"], "").await;
    desk.keymux(&["token", "set", "codex", "--pool", "personal"], "").await;
    let out = desk.keymux(&["setup", "codex", "--pool", "work", "--yes"], "").await;
    assert!(out.contains("codex -p keymux-work") && out.contains("client token 'codex-work'"), "{out}");
    let mut printed = out;
    let profile = std::fs::read_to_string(desk.codex_home.join("keymux-work.config.toml")).unwrap();
    assert!(profile.starts_with("model_provider = \"keymux-work\"\n"), "{profile}");

    desk.keymux(&["setup", "pi", "--yes"], "").await;
    desk.keymux(&["token", "set", "pi", "--pool", "personal"], "").await;
    let work = desk.work.display().to_string();
    let out = desk.keymux(&["setup", "pi", "--pool", "work", "--project", &work, "--yes"], "").await;
    assert!(out.contains("exactly") && out.contains("client token 'pi-work'"), "{out}");
    printed.push_str(&out);
    let chosen = std::fs::read_to_string(desk.work.join(".pi/settings.json")).unwrap();
    assert_eq!(chosen, "{\n  \"defaultProvider\": \"keymux-work\",\n  \"defaultModel\": \"gpt-5.5\"\n}\n");
    // What the commands printed shows the tokens masked, never whole.
    let models: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(desk.home.join(".pi/agent/models.json")).unwrap()).unwrap();
    let codex_token = toml::from_str::<toml::Value>(&profile).unwrap()["model_providers"]["keymux-work"]
        ["experimental_bearer_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let pi_token = models["providers"]["keymux-work"]["apiKey"].as_str().unwrap().to_owned();
    assert!(codex_token.starts_with("km-") && pi_token.starts_with("km-") && codex_token != pi_token);
    assert_no_secrets("what keymux setup printed", &printed, &[&codex_token, &pi_token]);
    // The user's own pi settings: Keymux's provider everywhere else, and no client-side retries, so a
    // refused turn is one request.
    let settings = r#"{"defaultProvider": "keymux", "defaultModel": "gpt-5.5",
        "retry": {"enabled": false, "provider": {"maxRetries": 0}}}"#;
    std::fs::write(desk.home.join(".pi/agent/settings.json"), settings).unwrap();
    [codex_token, pi_token]
}

/// The key that served the latest request of `project`.
fn last_key(sim: &Sim, project: Project) -> String {
    let log = sim.log();
    let last = log.iter().rev().find(|e| e.status == 200 && e.method == "POST" && project_of(e) == Some(project));
    last.and_then(|e| e.key.clone()).expect("the project has been served")
}

/// The client requests the simulator saw after `since`, per project, key and status.
fn tally(sim: &Sim, since: u64) -> BTreeMap<(Project, String, u16), usize> {
    let mut counts = BTreeMap::new();
    for e in sim.log().into_iter().filter(|e| e.seq > since && e.method != "GET") {
        let project = project_of(&e).unwrap_or_else(|| panic!("a client request of no one project: {e:?}"));
        *counts.entry((project, e.key.clone().unwrap_or_default(), e.status)).or_default() += 1;
    }
    counts
}

fn seq(sim: &Sim) -> u64 {
    sim.log().last().map_or(0, |e| e.seq)
}

/// The boundary, judged by the simulator: requests of each project on keys outside its pool.
fn outside(counts: &BTreeMap<(Project, String, u16), usize>) -> (usize, usize) {
    let in_pool = |keys: &[(&str, &str); 2], key: &str| keys.iter().any(|(_, s)| *s == key);
    let work_out: usize =
        counts.iter().filter(|((p, k, _), _)| *p == Project::Work && !in_pool(&WORK_KEYS, k)).map(|(_, n)| n).sum();
    let hobby_out: usize =
        counts.iter().filter(|((p, k, _), _)| *p == Project::Hobby && in_pool(&WORK_KEYS, k)).map(|(_, n)| n).sum();
    (work_out, hobby_out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_project_stays_in_its_pool_with_real_codex_and_pi_under_faults() {
    let sim = Sim::start(
        SimConfig::new()
            .org("org-work", &[WORK_KEYS[0].1, WORK_KEYS[1].1])
            .org("org-home", &[HOME_KEYS[0].1, HOME_KEYS[1].1]),
    )
    .await
    .unwrap();
    let desk = Desk::new(&sim);
    let keymux = gateway(&desk).await;
    let tokens = set_up_clients(&desk).await;
    let start = seq(&sim);
    let turns = Turns { desk: &desk };

    // A: every key healthy; new sessions, interleaved.
    served("Codex, work, turn 1", turns.codex(Project::Work, 1, false).await);
    served("pi, hobby, turn 1", turns.pi(Project::Hobby, 1, false).await);
    served("Codex, hobby, turn 1", turns.codex(Project::Hobby, 1, false).await);
    served("pi, work, turn 1", turns.pi(Project::Work, 1, false).await);

    // B: the key that serves each project fails: the work key is rate limited (it cools), the
    // personal one answers 500. The sessions are resumed, their state replayed.
    let (work_failing, home_failing) = (last_key(&sim, Project::Work), last_key(&sim, Project::Hobby));
    sim.set_standing(&work_failing, Fault::RateLimited { retry_after_secs: 3600 }, None);
    sim.set_standing(&home_failing, Fault::Status500, None);
    let b = seq(&sim);
    served("Codex, work, turn 2", turns.codex(Project::Work, 2, true).await);
    served("pi, hobby, turn 2", turns.pi(Project::Hobby, 2, true).await);
    served("Codex, hobby, turn 2", turns.codex(Project::Hobby, 2, true).await);
    served("pi, work, turn 2", turns.pi(Project::Work, 2, true).await);
    let phase_b = tally(&sim, b);
    assert!(phase_b.contains_key(&(Project::Work, work_failing.clone(), 429)), "the work key failed: {phase_b:?}");
    assert!(phase_b.contains_key(&(Project::Hobby, home_failing.clone(), 500)), "the home key failed: {phase_b:?}");

    // C: every work key cools. The work clients get 429, for the sessions bound to the work
    // organization by their state and for new ones that could go anywhere; the other project goes on.
    sim.set_standing_org("org-work", Fault::RateLimited { retry_after_secs: 1 }, None);
    let c = seq(&sim);
    refused("Codex, work, turn 3", turns.codex(Project::Work, 3, true).await);
    served("Codex, hobby, turn 3", turns.codex(Project::Hobby, 3, true).await);
    refused("Codex, work, a new session", turns.codex(Project::Work, 30, false).await);
    let (ok, output) = turns.pi(Project::Work, 3, true).await;
    assert!(output.contains("pool 'work'"), "pi shows Keymux's answer, which names the pool:\n{output}");
    refused("pi, work, turn 3", (ok, output));
    served("pi, hobby, turn 3", turns.pi(Project::Hobby, 3, true).await);
    refused("pi, work, a new session", turns.pi(Project::Work, 30, false).await);
    let phase_c = tally(&sim, c);
    let work_c: Vec<_> = phase_c.iter().filter(|((p, _, _), _)| *p == Project::Work).collect();
    assert!(!work_c.is_empty() && work_c.iter().all(|((_, _, status), _)| *status == 429), "{phase_c:?}");

    // D: the work organization recovers; Codex waits out the pool's retry-after by itself, and once it
    // is served the pool is usable for pi too. Both continue their latest session.
    sim.clear_standing_org("org-work");
    served("Codex, work, turn 4", turns.codex(Project::Work, 4, true).await);
    served("pi, work, turn 4", turns.pi(Project::Work, 4, true).await);

    judge(&sim, start, &keymux).await;
    undo_the_project(&desk).await;
    let output = keymux.stop().await;
    let secrets: Vec<&str> =
        WORK_KEYS.iter().chain(&HOME_KEYS).map(|(_, s)| *s).chain(tokens.iter().map(String::as_str)).collect();
    assert_no_secrets("the gateway's output", &output, &secrets);
}

/// The simulator's verdict over the whole run, printed, and Keymux's own records checked against it.
async fn judge(sim: &Sim, start: u64, keymux: &Keymux) {
    let counts = tally(sim, start);
    println!("client requests in the simulator's log, per project, key and status:");
    for ((project, key, status), n) in &counts {
        println!("  {project:?} {key} {status}: {n}");
    }
    let (work_out, hobby_out) = outside(&counts);
    assert_eq!(work_out, 0, "work requests on keys outside the work pool: {counts:?}");
    assert_eq!(hobby_out, 0, "personal requests on work keys: {counts:?}");
    let per_project = |p| counts.iter().filter(|((q, _, s), _)| *q == p && *s == 200).map(|(_, n)| n).sum::<usize>();
    // Turns 1, 2 and 4 of both clients in the work project, turns 1 to 3 in the other.
    assert!(per_project(Project::Work) >= 6 && per_project(Project::Hobby) >= 6, "{counts:?}");
    for client in ["Codex", "pi"] {
        let replayed = sim.log().into_iter().filter(|e| e.seq > start && e.status == 200).any(|e| {
            let body = e.body.map(|b| b.to_string()).unwrap_or_default();
            let turns =
                body.contains(&format!("[{WORK}] {client} turn 1")) && body.contains(&format!("{client} turn 2"));
            turns && body.contains("encrypted_content")
        });
        assert!(replayed, "{client}'s resumed work session replayed its history and reasoning");
    }

    keymux_agrees(&keymux.root).await;
}

/// Keymux's own records say the same, per token: each token's pool, and every key it tried in that
/// pool (the pools API names their key ids). The work tokens also met the pool's 429.
async fn keymux_agrees(root: &str) {
    let pools = Admin::new(root).get_json("/pools").await;
    let keys_of = |name: &str| -> Vec<String> {
        let pool = pools.as_array().unwrap().iter().find(|p| p["name"] == name).unwrap();
        pool["key_ids"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_owned()).collect()
    };
    let records = decisions_api(root).await;
    let mut per_token: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for record in records["data"].as_array().unwrap() {
        let token = record["token"].as_str().unwrap();
        let pool = if token.ends_with("-work") { "work" } else { "personal" };
        assert_eq!(record["pool"], pool, "{record}");
        let keys = keys_of(pool);
        let tried = record["attempts"].as_array().unwrap().iter().map(|a| a["key"].as_str().unwrap().to_owned());
        assert!(tried.into_iter().all(|k| keys.contains(&k)), "a key outside the pool {pool}: {record}");
        let entry = per_token.entry(token.to_owned()).or_default();
        entry.0 += 1;
        entry.1 += usize::from(record["status"] == 429);
    }
    println!("Keymux's records per token (requests, answered 429): {per_token:?}");
    let names: Vec<&String> = per_token.keys().collect();
    assert_eq!(names, ["codex", "codex-work", "pi", "pi-work"], "each client used the token of its project");
    assert!(per_token["codex-work"].1 >= 1 && per_token["pi-work"].1 >= 1, "{per_token:?}");
    assert_eq!(per_token["codex"].1 + per_token["pi"].1, 0, "the other project was never refused: {per_token:?}");
}

/// Undo of the pi project takes its settings back and leaves the provider for other projects.
async fn undo_the_project(desk: &Desk) {
    let work = desk.work.display().to_string();
    let out = desk.keymux(&["setup", "pi", "--pool", "work", "--project", &work, "--undo"], "").await;
    assert!(out.contains("deleted") && out.contains("keymux-work stays"), "{out}");
    assert!(!desk.work.join(".pi/settings.json").exists());
    let models = std::fs::read_to_string(desk.home.join(".pi/agent/models.json")).unwrap();
    assert!(models.contains("\"keymux-work\"") && models.contains("\"keymux\""), "{models}");
}
