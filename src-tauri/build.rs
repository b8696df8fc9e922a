fn main() {
    tauri_build::build();
    // `webkitgtk`: the targets where Tauri draws with WebKitGTK (Cargo.toml's `webkit2gtk` dependency
    // names the same list), so the code says it once.
    println!("cargo::rustc-check-cfg=cfg(webkitgtk)");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if ["linux", "dragonfly", "freebsd", "openbsd", "netbsd"].contains(&os.as_str()) {
        println!("cargo::rustc-cfg=webkitgtk");
    }
}
