//! Builds the dashboard (`ui/`, TypeScript with Vite) when its sources change, and embeds the built
//! files in the binary. Without Node.js (or with `KEYMUX_SKIP_UI=1`) the gateway still builds; its `/`
//! then says why there is no dashboard and how to get one.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let ui = root.join("ui");
    for watched in
        ["src", "index.html", "package.json", "package-lock.json", "vite.config.ts", "tsconfig.json", "public"]
    {
        println!("cargo:rerun-if-changed=ui/{watched}");
    }
    println!("cargo:rerun-if-env-changed=KEYMUX_SKIP_UI");
    let note = match build_ui(&ui) {
        Ok(()) => "built".to_owned(),
        Err(why) => {
            println!("cargo:warning=the dashboard was not built: {why}");
            why
        }
    };
    let assets = if note == "built" { list(&ui.join("dist")) } else { Vec::new() };
    write_assets(&assets, &ui.join("dist"));
    println!("cargo:rustc-env=KEYMUX_UI_BUILD_NOTE={}", note.replace('\n', " "));
}

fn build_ui(ui: &Path) -> Result<(), String> {
    if std::env::var_os("KEYMUX_SKIP_UI").is_some() {
        return Err("it was built with KEYMUX_SKIP_UI set".into());
    }
    if !ui.join("package.json").exists() {
        return Err("the ui/ sources are missing".into());
    }
    let npm = if cfg!(windows) { "npm.cmd" } else { "npm" };
    if !ui.join("node_modules").exists() {
        run(Command::new(npm).args(["ci", "--no-audit", "--no-fund"]).current_dir(ui), "npm ci")?;
    }
    run(Command::new(npm).args(["run", "build"]).current_dir(ui), "npm run build")
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    match command.output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
            Err(format!("`{what}` failed: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | ")))
        }
        Err(e) => Err(format!("`{what}` could not run ({e}); Node.js 20 or later must be on the PATH")),
    }
}

fn list(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn write_assets(files: &[PathBuf], dist: &Path) {
    let mut code = String::from("/// Every file of the built dashboard.\npub static ASSETS: &[Asset] = &[\n");
    for file in files {
        let Ok(relative) = file.strip_prefix(dist) else { continue };
        let path = format!("/{}", relative.to_string_lossy().replace('\\', "/"));
        code.push_str(&format!(
            "    Asset {{ path: {path:?}, bytes: include_bytes!({:?}) }},\n",
            file.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("ui_assets.rs");
    if let Err(e) = std::fs::write(&out, code) {
        println!("cargo:warning=could not write {}: {e}", out.display());
    }
}
