//! The user guide (`docs/`, an mdBook) and the README cannot drift from Keymux: every link and image
//! they show resolves, every page is in the book's table of contents, and every `keymux` command line,
//! config key and refusal code they name is one the code has: commands and flags read from the CLI's
//! definition (`keymux::cli::definition`), config keys parsed by the config's own parser (which refuses
//! unknown fields), refusal codes found in the source that answers with them.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README and every page of the guide, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let mut found = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/src is there") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found.into_iter().map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap())).collect()
}

/// `[text](target)` and `![alt](target)` targets of a page, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    out
}

/// The page's lines outside fenced code blocks, with inline code spans removed.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line.split('`').step_by(2).collect::<Vec<_>>().join(""));
        }
    }
    out
}

/// Headings' anchors as mdBook and GitHub make them.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            let heading = l.trim_start_matches('#').trim().to_lowercase();
            heading.chars().filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ').collect::<String>()
        })
        .map(|h| h.replace(' ', "-"))
        .collect()
}

#[test]
fn every_link_and_image_in_the_readme_and_the_guide_resolves() {
    let mut dead = Vec::new();
    for (page, text) in pages() {
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !resolved.exists() {
                dead.push(format!("{}: {target} (no such file)", page.display()));
            } else if !anchor.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                let there = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&there).contains(anchor) {
                    dead.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(dead.is_empty(), "dead links or missing images:\n{}", dead.join("\n"));
}

#[test]
fn every_page_of_the_guide_is_in_its_table_of_contents() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary).iter().map(|l| src.join(l)).collect();
    let orphans: Vec<_> = pages()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md") && !listed.contains(p))
        .collect();
    assert!(orphans.is_empty(), "pages no reader can reach from SUMMARY.md: {orphans:?}");
    let images: Vec<_> = std::fs::read_dir(src.join("images")).unwrap().map(|e| e.unwrap().path()).collect();
    let shown: String = pages().into_iter().map(|(_, t)| t).collect();
    let unused: Vec<_> = images.iter().filter(|i| !shown.contains(i.file_name().unwrap().to_str().unwrap())).collect();
    assert!(unused.is_empty(), "images no page shows (take them out of docs/src/images): {unused:?}");
}

/// Every `keymux …` command line in code: fenced lines and inline spans that start with `keymux `.
fn command_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let code = line.split(" #").next().unwrap_or_default().trim();
            if code.starts_with("keymux ") || code == "keymux" {
                out.push(code.to_owned());
            }
            if let Some((_, piped)) = code.split_once("| keymux ") {
                out.push(format!("keymux {piped}"));
            }
        } else {
            out.extend(line.split('`').skip(1).step_by(2).filter(|s| s.starts_with("keymux ")).map(str::to_owned));
        }
    }
    out
}

/// What is wrong with one command line against the CLI's definition, if anything.
fn check_command(cli: &clap::Command, line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let mut command = cli;
    let mut path = vec!["keymux"];
    let mut flags: BTreeSet<String> = cli.get_arguments().filter_map(|a| a.get_long()).map(str::to_owned).collect();
    let mut descending = true;
    for (i, word) in words.iter().enumerate() {
        let word = word.trim_end_matches([',', ';', ')']);
        if let Some(flag) = word.strip_prefix("--") {
            let flag = flag.split('=').next().unwrap_or_default();
            if flag.is_empty() || !flag.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                continue;
            }
            if !flags.contains(flag) && flag != "help" && flag != "version" {
                return Some(format!("`{line}`: `{}` has no flag --{flag}", path.join(" ")));
            }
            descending = false;
            continue;
        }
        if !descending || word.starts_with('-') {
            continue;
        }
        match command.find_subcommand(word) {
            Some(sub) => {
                command = sub;
                path.push(word);
                flags.extend(sub.get_arguments().filter_map(|a| a.get_long()).map(str::to_owned));
            }
            None if command.has_subcommands()
                && i == path.len() - 1
                && word.chars().all(|c| c.is_ascii_lowercase()) =>
            {
                return Some(format!("`{line}`: `{}` has no command {word}", path.join(" ")));
            }
            None => descending = false,
        }
    }
    None
}

#[test]
fn every_keymux_command_line_in_the_guide_is_one_the_cli_takes() {
    let cli = keymux::cli::definition();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (page, text) in pages() {
        for line in command_lines(&text) {
            seen += 1;
            if let Some(why) = check_command(&cli, &line) {
                wrong.push(format!("{}: {why}", page.display()));
            }
        }
    }
    assert!(seen > 50, "the guide shows only {seen} command lines: is the reader of command lines broken?");
    assert!(wrong.is_empty(), "the guide names what the CLI does not have:\n{}", wrong.join("\n"));
}

#[test]
fn the_drift_checks_catch_a_renamed_flag_and_an_unknown_command() {
    let cli = keymux::cli::definition();
    assert_eq!(check_command(&cli, "keymux keys set work --priority 1"), None);
    assert!(check_command(&cli, "keymux keys set work --prio 1").is_some_and(|w| w.contains("--prio")));
    assert!(check_command(&cli, "keymux keyz list").is_some_and(|w| w.contains("keyz")));
    assert!(unknown_config_keys("[affinity]\nno_such_setting = 1\n").contains(&"no_such_setting".to_owned()));
}

/// The keys of a TOML sample, each with its table, as `(table header, key, value)`; commented-out
/// lines (`# key = value`) count, as the reference shows optional keys that way.
fn config_entries(sample: &str) -> Vec<(String, String, String)> {
    let mut table = String::new();
    let mut out = Vec::new();
    for line in sample.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            table = line.split(" #").next().unwrap_or_default().trim().to_owned();
            continue;
        }
        let line = line.trim_start_matches('#').trim();
        let Some((key, value)) = line.split_once(" = ") else { continue };
        if !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') || key.is_empty() {
            continue;
        }
        let value = value.split(" #").next().unwrap_or_default().trim().to_owned();
        out.push((table.clone(), key.to_owned(), value));
    }
    out
}

/// The keys of `toml` that the config's own parser says it does not know.
fn unknown_config_keys(toml: &str) -> Vec<String> {
    let mut unknown = Vec::new();
    for (table, key, value) in config_entries(toml) {
        let doc = format!("{table}\n{key} = {value}\n");
        if let Err(e) = keymux::config::Config::parse(&doc, Path::new("reference.toml")) {
            if e.to_string().contains("unknown field") {
                unknown.push(key);
            }
        }
    }
    unknown
}

#[test]
fn every_config_key_the_reference_shows_is_one_the_config_reads() {
    let reference = std::fs::read_to_string(root().join("docs/src/reference/configuration.md")).unwrap();
    let sample: String = reference.split("```toml").skip(1).filter_map(|b| b.split("```").next()).collect();
    let entries = config_entries(&sample);
    assert!(entries.len() > 20, "the reference's sample shows only {} keys", entries.len());
    let unknown = unknown_config_keys(&sample);
    assert!(unknown.is_empty(), "the configuration reference names keys the config does not have: {unknown:?}");
}

/// Every string literal in Keymux's sources.
fn source_literals() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut dirs = vec![root().join("src"), root().join("crates/core/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.extend(text.split('"').skip(1).step_by(2).map(str::to_owned));
            }
        }
    }
    out
}

/// The codes in the first column of the troubleshooting page's tables.
fn documented_codes(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

#[test]
fn every_refusal_code_is_in_the_troubleshooting_page_and_every_code_there_is_real() {
    let page = std::fs::read_to_string(root().join("docs/src/guide/troubleshooting.md")).unwrap();
    let documented = documented_codes(&page);
    let literals = source_literals();
    let invented: Vec<_> = documented.iter().filter(|c| !literals.contains(*c)).collect();
    assert!(invented.is_empty(), "troubleshooting names codes Keymux never answers with: {invented:?}");
    // The files that turn every refusal into its code: each code of Keymux's own there is documented.
    let mut missing = Vec::new();
    for file in ["src/error.rs", "src/error/messages.rs", "src/control/error.rs", "src/upstream/error.rs"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for literal in text.split('"').skip(1).step_by(2) {
            // Keymux's own codes; the upstream error's labels are its codes too.
            let own = literal.starts_with("keymux_") || literal.starts_with("setup_");
            let code = own || (file.starts_with("src/upstream") && literal.starts_with("upstream_"));
            if code && literal.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !documented.contains(literal) {
                missing.push(format!("{file}: {literal}"));
            }
        }
    }
    assert!(missing.is_empty(), "refusal codes the troubleshooting page does not explain: {missing:?}");
}
