//! The house rules, read from the source of every crate of the workspace (its libraries, programs,
//! benchmarks and build scripts; test code left out), so that no merge can break them unseen:
//!
//! * **No import circles**, between files and between a crate's top-level modules (a file with the
//!   directory of its children, as `crate::NAME` names it). No two files import each other, and no
//!   longer ring of files exists; the same holds for the modules the files belong to. A file
//!   imports another when it names an item the other file defines: through `use`, a path in code or
//!   types, or a path in a macro's arguments (`crate::…`, `super::…`, `self::…`, or a name a `use` or a
//!   child module brought in). A name is followed through re-exports (`pub use`) to the file that
//!   defines it, so a `mod.rs` that re-exports a child is not where its users point.
//! * **No non-test source file over 500 lines**, counted as `wc -l` counts them.
//! * **No non-test function over 80 lines**, counted as clippy's `too_many_lines` counts them: the lines
//!   between its body's braces that hold code (blank lines and comment-only lines left out).
//!
//! One rule that Rust itself suggests: a file may use what the modules around it define (its parent
//! `mod.rs`, the crate root). Private items of a module are visible to its children for that purpose,
//! and a child is inside its parent's room, not a neighbour of it. So a name that resolves to a file of
//! an enclosing module draws no arrow; a ring between neighbours through that file is still found,
//! because names re-exported there are followed to the neighbour that defines them.
//!
//! Test code is what compiles only under `cfg(test)` (an item or module marked so, and the files such
//! modules are), plus each crate's `tests/` directory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 80;

#[test]
fn no_import_circles_between_files() {
    let house = House::read(&workspace_root());
    let rings = house.rings();
    assert!(rings.is_empty(), "import circles (each file names what it takes from the next):\n{}", rings.join("\n"));
}

/// The same rule one level up: no two top-level modules of a crate (a file and the directory of its
/// children taken as one room, as `crate::NAME` names them) import each other, or stand in a longer
/// ring, through any of their non-test files.
#[test]
fn no_import_circles_between_modules() {
    let house = House::read(&workspace_root());
    let rings = house.module_rings();
    assert!(rings.is_empty(), "module circles (with a file edge that ties each step):\n{}", rings.join("\n"));
}

#[test]
fn no_source_file_over_500_lines() {
    let house = House::read(&workspace_root());
    let mut long: Vec<String> = house
        .files
        .iter()
        .filter(|f| f.lines > MAX_FILE_LINES)
        .map(|f| format!("  {} ({} lines)", house.shown(&f.path), f.lines))
        .collect();
    long.sort();
    assert!(long.is_empty(), "non-test files over {MAX_FILE_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn no_function_over_80_lines() {
    let house = House::read(&workspace_root());
    let mut long = Vec::new();
    for file in &house.files {
        for (name, line, count) in &file.functions {
            if *count > MAX_FN_LINES {
                long.push(format!("  {}:{line} fn {name} ({count} lines of code)", house.shown(&file.path)));
            }
        }
    }
    long.sort();
    assert!(long.is_empty(), "non-test functions over {MAX_FN_LINES} lines:\n{}", long.join("\n"));
}

/// The rules hold the reader to what they say: a ring, a long file and a long function made up here
/// are each found, and the child-to-parent and re-export cases draw the arrows the header describes.
#[test]
fn the_rules_find_what_they_describe() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("room")).expect("dirs");
    let write = |path: &str, text: &str| std::fs::write(src.join(path), text).expect("write");
    write("lib.rs", "pub mod a;\npub mod b;\npub mod room;\n#[cfg(test)]\nmod tests;\n");
    write("a.rs", "use crate::b::Bee;\npub struct Ay;\n");
    write("b.rs", "pub struct Bee;\npub fn make() -> crate::a::Ay { crate::a::Ay }\n");
    write("tests.rs", "use crate::a::Ay;\n");
    // A parent that uses its child and re-exports it, and a child that uses its parent's own item.
    let body = "    let _ = 1;\n".repeat(MAX_FN_LINES + 1);
    write(
        "room/mod.rs",
        &format!("mod inner;\npub use inner::Thing;\npub struct Shared;\npub fn long() {{\n{body}}}\n"),
    );
    write("room/inner.rs", &format!("pub struct Thing(super::Shared);\n{}", "// filler\n".repeat(MAX_FILE_LINES)));
    let house = House::read_crates(dir.path(), &[dir.path().to_path_buf()]);
    let rings = house.rings();
    assert_eq!(rings.len(), 1, "{rings:?}");
    assert!(rings[0].contains("src/a.rs") && rings[0].contains("src/b.rs"), "{rings:?}");
    assert!(!rings[0].contains("room"), "a child using its parent is no circle: {rings:?}");
    assert!(house.files.iter().all(|f| !f.path.ends_with("tests.rs")), "test files are left out");
    let module_rings = house.module_rings();
    assert_eq!(module_rings.len(), 1, "{module_rings:?}");
    assert!(module_rings[0].contains("src/lib.rs a <-> src/lib.rs b"), "{module_rings:?}");
    let long: Vec<_> = house.files.iter().filter(|f| f.lines > MAX_FILE_LINES).map(|f| house.shown(&f.path)).collect();
    assert_eq!(long, ["src/room/inner.rs"]);
    let fns: Vec<_> = house.files.iter().flat_map(|f| &f.functions).filter(|f| f.2 > MAX_FN_LINES).collect();
    assert_eq!(fns.len(), 1, "{fns:?}");
    assert_eq!(fns[0].0, "long");

    // A user of the re-exported name points at the file that defines it.
    write("b.rs", "pub struct Bee(crate::room::Thing);\n");
    let house = House::read_crates(dir.path(), &[dir.path().to_path_buf()]);
    let b = house.files.iter().position(|f| f.path.ends_with("src/b.rs")).expect("b.rs");
    let targets: Vec<_> = house.edges[b].keys().map(|&t| house.shown(&house.files[t].path)).collect();
    assert_eq!(targets, ["src/room/inner.rs"]);
    assert!(house.rings().is_empty(), "{:?}", house.rings());
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// Every crate's non-test source, as files with their import arrows.
struct House {
    root: PathBuf,
    files: Vec<SourceFile>,
    /// Per file: the top-level module it belongs to, as its crate's root file and its name (a root file
    /// belongs to none).
    tops: Vec<Option<(usize, String)>>,
    /// Per file: the files it imports, each with the first name that ties them.
    edges: Vec<BTreeMap<usize, String>>,
}

struct SourceFile {
    path: PathBuf,
    lines: usize,
    /// Name, first line, lines of code.
    functions: Vec<(String, usize, usize)>,
}

impl House {
    fn read(root: &Path) -> Self {
        let manifest: toml::Value =
            toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml")).expect("toml");
        let members = manifest["workspace"]["members"].as_array().expect("workspace members");
        let dirs: Vec<PathBuf> = members.iter().map(|m| root.join(m.as_str().expect("member"))).collect();
        assert!(dirs.len() >= 4, "the workspace's crates: {dirs:?}");
        Self::read_crates(root, &dirs)
    }

    fn read_crates(root: &Path, dirs: &[PathBuf]) -> Self {
        let mut modules = Modules::default();
        for dir in dirs {
            for target in crate_roots(dir) {
                modules.read_crate(&target);
            }
        }
        let files: Vec<SourceFile> = modules
            .files
            .iter()
            .map(|(path, parsed)| SourceFile {
                path: path.clone(),
                lines: parsed.text.lines().count(),
                functions: functions(&parsed.ast, &parsed.text),
            })
            .collect();
        let edges = modules.edges();
        let tops = (0..files.len()).map(|f| modules.top_of_file(f)).collect();
        Self { root: root.to_path_buf(), files, tops, edges }
    }

    /// Each strongly connected set of top-level modules (of one crate), with one file edge per step.
    fn module_rings(&self) -> Vec<String> {
        // A room: a crate's root file and the name of one of its top-level modules.
        let mut rooms: Vec<(usize, String)> = Vec::new();
        let mut room_of = |file: usize| {
            let room = self.tops[file].clone()?;
            Some(rooms.iter().position(|r| *r == room).unwrap_or_else(|| {
                rooms.push(room);
                rooms.len() - 1
            }))
        };
        let mut steps: Vec<(usize, usize, String)> = Vec::new();
        for (from, targets) in self.edges.iter().enumerate() {
            for (&to, name) in targets {
                if let (Some(a), Some(b)) = (room_of(from), room_of(to)) {
                    let why = format!(
                        "{} -> {} ({name})",
                        self.shown(&self.files[from].path),
                        self.shown(&self.files[to].path)
                    );
                    steps.push((a, b, why));
                }
            }
        }
        let mut edges: Vec<BTreeMap<usize, String>> = vec![BTreeMap::new(); rooms.len()];
        for (a, b, why) in steps.into_iter().filter(|(a, b, _)| a != b) {
            edges[a].entry(b).or_insert(why);
        }
        let named = |m: usize| format!("{} {}", self.shown(&self.files[rooms[m].0].path), rooms[m].1);
        strongly_connected(&edges)
            .into_iter()
            .map(|component| {
                let names: Vec<String> = component.iter().map(|&m| named(m)).collect();
                let inside = |(to, _): &(&usize, &String)| component.contains(to);
                let ties: Vec<String> = component
                    .iter()
                    .flat_map(|&m| edges[m].iter().filter(inside).map(|(_, why)| format!("    {why}")))
                    .collect();
                format!("  {}:\n{}", names.join(" <-> "), ties.join("\n"))
            })
            .collect()
    }

    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).unwrap_or(path).display().to_string()
    }

    /// Each strongly connected set of files, as one ring through all of them where the arrows allow,
    /// with the names that tie each step.
    fn rings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for component in strongly_connected(&self.edges) {
            let ring = ring_through(&self.edges, &component);
            let steps: Vec<String> = ring
                .windows(2)
                .map(|w| {
                    let name = &self.edges[w[0]][&w[1]];
                    format!(
                        "  {} -> {} ({name})",
                        self.shown(&self.files[w[0]].path),
                        self.shown(&self.files[w[1]].path)
                    )
                })
                .collect();
            let others: BTreeSet<_> =
                component.iter().filter(|f| !ring.contains(f)).map(|&f| self.shown(&self.files[f].path)).collect();
            let also = if others.is_empty() { String::new() } else { format!("\n  and in the same knot: {others:?}") };
            out.push(format!("{} files:\n{}{also}", component.len(), steps.join("\n")));
        }
        out
    }
}

/// A crate's root files: its library, programs, benchmarks and build script.
fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let manifest: toml::Value = toml::from_str(&std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default())
        .unwrap_or(toml::Value::Table(Default::default()));
    let mut roots = BTreeSet::new();
    for default in ["src/lib.rs", "src/main.rs", "build.rs"] {
        roots.insert(dir.join(default));
    }
    if let Some(path) = manifest.get("lib").and_then(|l| l.get("path")).and_then(|p| p.as_str()) {
        roots.insert(dir.join(path));
    }
    for kind in ["bin", "bench"] {
        for target in manifest.get(kind).and_then(|b| b.as_array()).into_iter().flatten() {
            let path = target.get("path").and_then(|p| p.as_str()).map(String::from);
            let name = target.get("name").and_then(|n| n.as_str()).unwrap_or_default();
            let default = if kind == "bench" { format!("benches/{name}.rs") } else { format!("src/bin/{name}.rs") };
            roots.insert(dir.join(path.unwrap_or(default)));
        }
    }
    roots.into_iter().filter(|p| p.is_file()).collect()
}

struct Parsed {
    text: String,
    ast: syn::File,
}

/// One module: a file, or a `mod name { … }` inside one.
struct Module {
    file: usize,
    parent: Option<usize>,
    /// Names this module holds: child modules, items it defines, and what its `use`s bring in.
    names: HashMap<String, Name>,
    /// `use path::*` of this module.
    globs: Vec<Vec<String>>,
}

#[derive(Clone)]
enum Name {
    Module(usize),
    Item,
    /// Brought in by `use`: the path, read from this module.
    Use(Vec<String>),
}

/// A reference to a name from a module: where it was written, and the path.
struct Reference {
    from: usize,
    path: Vec<String>,
}

#[derive(Default)]
struct Modules {
    files: Vec<(PathBuf, Parsed)>,
    modules: Vec<Module>,
    references: Vec<Reference>,
}

impl Modules {
    fn read_crate(&mut self, root: &Path) {
        if self.files.iter().any(|(p, _)| p == root) {
            return;
        }
        self.read_file(root, None, root.parent().expect("dir").to_path_buf());
    }

    /// Reads a module's file; `dir` is where its child modules' files are.
    fn read_file(&mut self, path: &Path, parent: Option<usize>, dir: PathBuf) -> usize {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let items = ast.items.clone();
        self.files.push((path.to_path_buf(), Parsed { text, ast }));
        let file = self.files.len() - 1;
        let module = self.new_module(file, parent);
        self.read_items(module, &items, &dir, path);
        module
    }

    fn new_module(&mut self, file: usize, parent: Option<usize>) -> usize {
        self.modules.push(Module { file, parent, names: HashMap::new(), globs: Vec::new() });
        self.modules.len() - 1
    }

    fn read_items(&mut self, module: usize, items: &[syn::Item], dir: &Path, file_path: &Path) {
        for item in items {
            if is_test(item_attrs(item)) {
                continue;
            }
            match item {
                syn::Item::Mod(m) => self.read_mod(module, m, dir, file_path),
                syn::Item::Use(u) => {
                    let mut paths = Vec::new();
                    use_paths(&u.tree, &mut Vec::new(), &mut paths);
                    for (name, path) in paths {
                        match name {
                            Some(name) => {
                                self.modules[module].names.insert(name, Name::Use(path.clone()));
                            }
                            None => self.modules[module].globs.push(path.clone()),
                        }
                        self.references.push(Reference { from: module, path });
                    }
                }
                other => {
                    if let Some(name) = item_name(other) {
                        self.modules[module].names.entry(name).or_insert(Name::Item);
                    }
                    let mut paths = PathCollector::default();
                    paths.visit_item(other);
                    let from = module;
                    self.references.extend(paths.paths.into_iter().map(|path| Reference { from, path }));
                    self.read_nested(module, other);
                }
            }
        }
    }

    /// Items inside functions and impls are part of the module (their `use`s import for the file).
    fn read_nested(&mut self, module: usize, item: &syn::Item) {
        let mut uses = UseCollector::default();
        uses.visit_item(item);
        for path in uses.paths {
            self.references.push(Reference { from: module, path });
        }
    }

    fn read_mod(&mut self, module: usize, m: &syn::ItemMod, dir: &Path, file_path: &Path) {
        let name = m.ident.to_string();
        let child = match &m.content {
            Some((_, items)) => {
                let file = self.modules[module].file;
                let child = self.new_module(file, Some(module));
                let items = items.clone();
                self.read_items(child, &items, &dir.join(&name), file_path);
                child
            }
            None => {
                let (path, child_dir) = match path_attr(&m.attrs) {
                    Some(p) => {
                        let path = file_path.parent().expect("dir").join(p);
                        let child_dir = path.with_extension("");
                        (path, child_dir)
                    }
                    None if dir.join(format!("{name}.rs")).is_file() => {
                        (dir.join(format!("{name}.rs")), dir.join(&name))
                    }
                    None => (dir.join(&name).join("mod.rs"), dir.join(&name)),
                };
                self.read_file(&path, Some(module), child_dir)
            }
        };
        self.modules[module].names.insert(name, Name::Module(child));
    }

    fn root_of(&self, mut module: usize) -> usize {
        while let Some(parent) = self.modules[module].parent {
            module = parent;
        }
        module
    }

    /// The file that defines what `path`, written in `from`, names; `None` outside the crate.
    fn resolve(&self, from: usize, path: &[String], depth: usize) -> Option<usize> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let (mut at, rest) = match path[0].as_str() {
            "crate" => (self.root_of(from), &path[1..]),
            "self" => (from, &path[1..]),
            "super" => {
                let mut at = from;
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    at = self.modules[at].parent?;
                    rest = &rest[1..];
                }
                (at, rest)
            }
            _ => (from, path),
        };
        let first_is_local = !matches!(path[0].as_str(), "crate" | "self" | "super");
        for (i, segment) in rest.iter().enumerate() {
            match self.lookup(at, segment, depth) {
                Some(Found::Module(m)) => at = m,
                Some(Found::File(file)) => return Some(file),
                Some(Found::Path(via, target)) => {
                    let mut whole = target;
                    whole.extend(rest[i + 1..].iter().cloned());
                    return self.resolve(via, &whole, depth + 1);
                }
                // A name the module does not hold: outside the crate when the path began there (an
                // external crate, a prelude name), else in this module (a variant, a macro's item).
                None if i == 0 && first_is_local => return None,
                None => return Some(self.modules[at].file),
            }
        }
        Some(self.modules[at].file)
    }

    fn lookup(&self, module: usize, name: &str, depth: usize) -> Option<Found> {
        match self.modules[module].names.get(name) {
            Some(Name::Module(m)) => Some(Found::Module(*m)),
            Some(Name::Item) => Some(Found::File(self.modules[module].file)),
            Some(Name::Use(path)) => Some(Found::Path(module, path.clone())),
            None => self.modules[module].globs.iter().find_map(|glob| {
                let mut whole = glob.clone();
                whole.push(name.to_owned());
                let file = self.resolve(module, &whole, depth + 1)?;
                // Only where the glob's module really holds the name.
                let source = self.resolve_module(module, glob, depth + 1)?;
                self.modules[source].names.contains_key(name).then_some(Found::File(file))
            }),
        }
    }

    fn resolve_module(&self, from: usize, path: &[String], depth: usize) -> Option<usize> {
        let mut at = from;
        for segment in path {
            at = match segment.as_str() {
                "crate" => self.root_of(at),
                "self" => at,
                "super" => self.modules[at].parent?,
                name => match self.lookup(at, name, depth)? {
                    Found::Module(m) => m,
                    Found::Path(via, target) => self.resolve_module(via, &target, depth + 1)?,
                    Found::File(_) => return None,
                },
            };
        }
        Some(at)
    }

    /// The top-level module `file` belongs to, as its crate's root file and its name (`None` for a
    /// crate's root file).
    fn top_of_file(&self, file: usize) -> Option<(usize, String)> {
        let mut at = self.modules.iter().position(|m| m.file == file)?;
        loop {
            let parent = self.modules[at].parent?;
            if self.modules[parent].parent.is_none() {
                let mut named = self.modules[parent].names.iter();
                let name = named.find(|(_, n)| matches!(n, Name::Module(m) if *m == at)).map(|(name, _)| name.clone());
                return name.map(|name| (self.modules[parent].file, name));
            }
            at = parent;
        }
    }

    /// Whether `file` is the file of a module that encloses `module`.
    fn encloses(&self, file: usize, module: usize) -> bool {
        let mut at = self.modules[module].parent;
        while let Some(m) = at {
            if self.modules[m].file == file {
                return true;
            }
            at = self.modules[m].parent;
        }
        false
    }

    fn edges(&self) -> Vec<BTreeMap<usize, String>> {
        let mut edges = vec![BTreeMap::new(); self.files.len()];
        for reference in &self.references {
            let from_file = self.modules[reference.from].file;
            let Some(to) = self.resolve(reference.from, &reference.path, 0) else { continue };
            if to == from_file || self.encloses(to, reference.from) {
                continue;
            }
            edges[from_file].entry(to).or_insert_with(|| reference.path.join("::"));
        }
        edges
    }
}

enum Found {
    Module(usize),
    File(usize),
    Path(usize, Vec<String>),
}

/// The names a `use` tree brings in (`None` for a glob), each with its whole path.
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Option<String>, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                out.push((prefix.last().cloned(), prefix.clone()));
            } else {
                out.push((Some(name.clone()), [prefix.as_slice(), &[name]].concat()));
            }
        }
        syn::UseTree::Rename(r) => {
            let name = r.ident.to_string();
            let path = if name == "self" { prefix.clone() } else { [prefix.as_slice(), &[name]].concat() };
            out.push((Some(r.rename.to_string()), path));
        }
        syn::UseTree::Glob(_) => out.push((None, prefix.clone())),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_paths(tree, prefix, out);
            }
        }
    }
}

/// Every path in an item (types, expressions, patterns, and paths inside macro arguments), test code
/// left out. `use`s inside function bodies are found by [`UseCollector`].
#[derive(Default)]
struct PathCollector {
    paths: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 || path.segments.first().is_some_and(|s| s.ident == "crate" || s.ident == "super") {
            self.paths.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        macro_paths(mac.tokens.clone(), &mut self.paths);
    }

    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test(item_attrs(item)) && !matches!(item, syn::Item::Use(_) | syn::Item::Mod(_)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
}

/// The `use`s inside an item's functions and blocks.
#[derive(Default)]
struct UseCollector {
    paths: Vec<Vec<String>>,
    depth: usize,
}

impl<'ast> Visit<'ast> for UseCollector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test(item_attrs(item)) || matches!(item, syn::Item::Mod(_)) {
            return;
        }
        if let (syn::Item::Use(u), true) = (item, self.depth > 0) {
            let mut found = Vec::new();
            use_paths(&u.tree, &mut Vec::new(), &mut found);
            self.paths.extend(found.into_iter().map(|(_, path)| path));
            return;
        }
        self.depth += 1;
        syn::visit::visit_item(self, item);
        self.depth -= 1;
    }
}

/// Paths written inside a macro's arguments: `crate::a::b`, `super::a`, `self::a`, `a::b`.
fn macro_paths(tokens: proc_macro2::TokenStream, out: &mut Vec<Vec<String>>) {
    use proc_macro2::TokenTree;
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) => macro_paths(g.stream(), out),
            TokenTree::Ident(ident) => {
                let mut path = vec![ident.to_string()];
                let mut j = i + 1;
                while j + 2 < tokens.len() && is_path_sep(&tokens[j], &tokens[j + 1]) {
                    match &tokens[j + 2] {
                        TokenTree::Ident(next) => path.push(next.to_string()),
                        _ => break,
                    }
                    j += 3;
                }
                if path.len() > 1 || path[0] == "crate" || path[0] == "super" {
                    out.push(path);
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

fn is_path_sep(a: &proc_macro2::TokenTree, b: &proc_macro2::TokenTree) -> bool {
    use proc_macro2::{Spacing, TokenTree};
    matches!((a, b), (TokenTree::Punct(p), TokenTree::Punct(q))
        if p.as_char() == ':' && p.spacing() == Spacing::Joint && q.as_char() == ':')
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Whether attributes mark test code: `#[cfg(test)]`, or a `cfg` that holds `test` outside a `not`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if !a.path().is_ident("cfg") {
            return false;
        }
        let text = quote::ToTokens::to_token_stream(&a.meta).to_string();
        text.split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| w == "test") && !text.contains("not")
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Each non-test function of a file: its name, first line, and the lines of its body that hold code.
fn functions(ast: &syn::File, text: &str) -> Vec<(String, usize, usize)> {
    struct Functions<'a> {
        code: &'a [bool],
        out: Vec<(String, usize, usize)>,
    }
    impl Functions<'_> {
        fn measure(&mut self, name: &syn::Ident, block: &syn::Block) {
            use syn::spanned::Spanned as _;
            let span = block.span();
            let (first, last) = (span.start().line, span.end().line);
            // Between the braces, as clippy counts.
            let count = (first + 1..last).filter(|l| self.code.get(l - 1).copied().unwrap_or(false)).count();
            self.out.push((name.to_string(), name.span().start().line, count));
        }
    }
    impl<'ast> Visit<'ast> for Functions<'_> {
        fn visit_item(&mut self, item: &'ast syn::Item) {
            if !is_test(item_attrs(item)) {
                syn::visit::visit_item(self, item);
            }
        }
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            self.measure(&f.sig.ident, &f.block);
            syn::visit::visit_item_fn(self, f);
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            if !is_test(&f.attrs) {
                self.measure(&f.sig.ident, &f.block);
                syn::visit::visit_impl_item_fn(self, f);
            }
        }
        fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
            if let Some(block) = &f.default {
                self.measure(&f.sig.ident, block);
            }
            syn::visit::visit_trait_item_fn(self, f);
        }
    }
    let code = code_lines(text);
    let mut visitor = Functions { code: &code, out: Vec::new() };
    visitor.visit_file(ast);
    visitor.out
}

/// Per line: whether it holds code (not blank, not only a comment), as clippy's `too_many_lines`
/// decides it.
fn code_lines(text: &str) -> Vec<bool> {
    let mut in_block = false;
    text.lines()
        .map(|line| {
            let mut rest = line.trim();
            let mut code = false;
            while !rest.is_empty() {
                if in_block {
                    match rest.find("*/") {
                        Some(end) => {
                            in_block = false;
                            rest = rest[end + 2..].trim_start();
                        }
                        None => rest = "",
                    }
                } else if rest.starts_with("//") {
                    rest = "";
                } else if let Some(after) = rest.strip_prefix("/*") {
                    in_block = true;
                    rest = after;
                } else {
                    code = true;
                    rest = "";
                }
            }
            code
        })
        .collect()
}

/// Tarjan's strongly connected components with more than one file.
fn strongly_connected(edges: &[BTreeMap<usize, String>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeMap<usize, String>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].keys() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(i) if s.on_stack[w] => s.low[v] = s.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                s.out.push(component);
            }
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

/// A shortest ring from the component's first file back to itself, inside the component.
fn ring_through(edges: &[BTreeMap<usize, String>], component: &[usize]) -> Vec<usize> {
    let start = component[0];
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let mut came_from: HashMap<usize, usize> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in edges[v].keys().filter(|w| inside.contains(w)) {
            if w == start {
                let mut ring = vec![start, v];
                let mut at = v;
                while at != start {
                    at = came_from[&at];
                    ring.push(at);
                }
                ring.reverse();
                return ring;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    vec![start, start]
}
