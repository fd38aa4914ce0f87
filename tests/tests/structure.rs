//! The workspace's shape, checked like behaviour so it does not erode one
//! convenient import at a time: no import circle between the files of a
//! crate, and no source file over 800 lines unless its opening lines say
//! why. Reads the sources as text; needs no Kafka and no build of them.
//!
//! The parser is deliberately small: comments, strings and `#[cfg(test)]`
//! items are blanked out (tests may import their parent), then every `use`
//! tree and every `crate::`/`super::`/`self::` path is resolved to the file
//! of the module it names (`foo.rs` or `foo/mod.rs`). A file re-exporting
//! its own submodules or parent (`pub use`) and `mod` declarations are not
//! dependencies.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// The crates' sources, relative to the workspace root.
const SOURCE_DIRS: &[&str] = &[
    "events/src",
    "store/src",
    "actors/src",
    "bin/src",
    "tests/src",
];
const MAX_LINES: usize = 800;
/// What a longer file says, within its first [`WAIVER_WITHIN`] lines.
const WAIVER: &str = "Longer than 800 lines:";
const WAIVER_WITHIN: usize = 15;

#[test]
fn no_import_circle_between_files() {
    let files = workspace_files();
    let graph = Graph::build(&files);
    assert!(
        files.len() > 40 && graph.edge_count() > 60,
        "the parser found {} files and {} dependencies: it no longer reads the sources",
        files.len(),
        graph.edge_count()
    );
    let circles = graph.circles(&files);
    assert!(
        circles.is_empty(),
        "import circles between files:\n\n{}",
        circles.join("\n\n")
    );
}

#[test]
fn no_long_source_file_without_a_reason() {
    let files = workspace_files();
    let long: Vec<String> = files
        .iter()
        .filter(|f| !f.is_test)
        .filter(|f| f.text.lines().count() > MAX_LINES)
        .filter(|f| {
            !f.text
                .lines()
                .take(WAIVER_WITHIN)
                .any(|l| l.contains(WAIVER))
        })
        .map(|f| format!("{} ({} lines)", f.path, f.text.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines without \"{WAIVER} <why>\" in the first {WAIVER_WITHIN} lines \
         (split by concern, or say why not):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_parser_sees_through_comments_strings_groups_and_tests() {
    let src = r##"
        //! Docs naming [`crate::b`] are no dependency.
        use crate::{a::{self, X}, c::Y as Z};
        use super::*; // not in the root
        fn f() -> &'static str { let _c = '{'; let _q = '\''; let _s = "crate::d::x"; let _r = r#"super::e"#; "}" }
        pub fn g<'a>(x: &'a str) { crate::e::run(x); self::child::go(); }
        /* crate::f:: in a /* nested */ block */
        #[cfg(test)]
        mod tests { use crate::g::H; fn t() { if true { crate::g::run() } } }
        #[cfg(test)]
        mod more_tests;
        pub use child::Thing;
    "##;
    let parsed = parse(src);
    let mut paths: Vec<String> = parsed
        .refs
        .iter()
        .map(|r| {
            format!(
                "{}{}",
                if r.public { "pub " } else { "" },
                r.path.join("::")
            )
        })
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "crate::a::X",
            "crate::a::self",
            "crate::c::Y",
            "crate::e::run",
            "pub child::Thing",
            "self::child::go",
            "super",
        ]
    );
    assert_eq!(parsed.test_children, ["more_tests"]);
}

#[test]
fn a_circle_is_found_and_named() {
    let file = |path: &str, module: &[&str], text: &str| SourceFile {
        path: path.into(),
        krate: "k".into(),
        module: module.iter().map(|s| s.to_string()).collect(),
        text: text.into(),
        is_test: false,
    };
    let files = vec![
        file("k/lib.rs", &[], "pub mod a;\npub mod b;\npub use a::A;\n"),
        file("k/a/mod.rs", &["a"], "mod inner;\npub use inner::I;\n"),
        file(
            "k/a/inner.rs",
            &["a", "inner"],
            "use crate::b::B;\nuse super::helper;\n",
        ),
        file("k/b.rs", &["b"], "fn f() { crate::a::inner::make(); }\n"),
    ];
    let graph = Graph::build(&files);
    let circles = graph.circles(&files);
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert!(
        circles[0].contains("k/a/inner.rs:1")
            && circles[0].contains("k/b.rs:1")
            && !circles[0].contains("mod.rs"),
        "{}",
        circles[0]
    );
}

/// One Rust source file of the workspace.
struct SourceFile {
    /// Relative to the workspace root, for messages.
    path: String,
    /// The crate it belongs to (its source directory, or its `src/bin` file).
    krate: String,
    /// Its module path in that crate (`[]` for the crate root).
    module: Vec<String>,
    text: String,
    /// Compiled only for tests: `tests.rs`, under a `tests` directory, or
    /// declared by a `#[cfg(test)] mod`.
    is_test: bool,
}

fn workspace_files() -> Vec<SourceFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        let src = root.join(dir);
        let mut paths = Vec::new();
        rust_files(&src, &mut paths);
        assert!(!paths.is_empty(), "no Rust sources under {}", src.display());
        for path in paths {
            let rel: Vec<String> = path
                .strip_prefix(&src)
                .unwrap()
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            // `src/bin/x.rs` (or `src/bin/x/main.rs`) is a crate of its own.
            let (krate, in_crate) = if rel.len() > 1 && rel[0] == "bin" {
                (
                    format!("{dir}/bin/{}", rel[1].trim_end_matches(".rs")),
                    &rel[2..],
                )
            } else {
                (dir.to_string(), &rel[..])
            };
            let mut module: Vec<String> = in_crate
                .iter()
                .map(|c| c.trim_end_matches(".rs").to_string())
                .collect();
            if module.last().is_some_and(|m| m == "mod")
                || (module.len() == 1 && (module[0] == "lib" || module[0] == "main"))
            {
                module.pop();
            }
            let is_test = rel.last().is_some_and(|n| n == "tests.rs")
                || rel[..rel.len() - 1].iter().any(|c| c == "tests");
            files.push(SourceFile {
                path: format!("{dir}/{}", rel.join("/")),
                krate,
                module,
                text: fs::read_to_string(&path).unwrap(),
                is_test,
            });
        }
    }
    // Modules declared `#[cfg(test)] mod x;` are test files too.
    let test_modules: BTreeSet<(String, Vec<String>)> = files
        .iter()
        .flat_map(|f| {
            parse(&f.text).test_children.into_iter().map(|c| {
                let mut m = f.module.clone();
                m.push(c);
                (f.krate.clone(), m)
            })
        })
        .collect();
    for f in &mut files {
        if test_modules.contains(&(f.krate.clone(), f.module.clone())) {
            f.is_test = true;
        }
    }
    files
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// A file's dependencies between files, with where each was first seen.
struct Graph {
    /// From file index to file index, with the line that made the edge.
    edges: BTreeMap<usize, BTreeMap<usize, (usize, String)>>,
}

impl Graph {
    fn build(files: &[SourceFile]) -> Graph {
        let modules: BTreeMap<(String, Vec<String>), usize> = files
            .iter()
            .enumerate()
            .map(|(i, f)| ((f.krate.clone(), f.module.clone()), i))
            .collect();
        let key = |f: &SourceFile, m: &[String]| (f.krate.clone(), m.to_vec());
        let mut edges: BTreeMap<usize, BTreeMap<usize, (usize, String)>> = BTreeMap::new();
        for (from, f) in files.iter().enumerate() {
            if f.is_test {
                continue;
            }
            let lines: Vec<&str> = f.text.lines().collect();
            for r in parse(&f.text).refs {
                let Some(target) = resolve(f, &r.path, |m| modules.contains_key(&key(f, m))) else {
                    continue;
                };
                let own = |a: &[String], b: &[String]| a.len() < b.len() && b.starts_with(a);
                if r.public && (own(&f.module, &target) || own(&target, &f.module)) {
                    continue; // re-exporting its own submodule or parent
                }
                let to = modules[&key(f, &target)];
                if to == from || files[to].is_test {
                    continue;
                }
                let line = lines.get(r.line - 1).map_or("", |l| l.trim()).to_string();
                edges
                    .entry(from)
                    .or_default()
                    .entry(to)
                    .or_insert((r.line, line));
            }
        }
        Graph { edges }
    }

    fn edge_count(&self) -> usize {
        self.edges.values().map(BTreeMap::len).sum()
    }

    fn targets(&self, from: usize) -> impl Iterator<Item = usize> + '_ {
        self.edges
            .get(&from)
            .into_iter()
            .flat_map(|m| m.keys().copied())
    }

    /// One circle per strongly connected set of files, each step with the
    /// line that makes it.
    fn circles(&self, files: &[SourceFile]) -> Vec<String> {
        let mut out = Vec::new();
        for component in self.components(files.len()) {
            if component.len() < 2 {
                continue;
            }
            let inside: BTreeSet<usize> = component.iter().copied().collect();
            let start = component[0];
            // The shortest way from `start` back to itself inside the set.
            let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
            let mut queue = VecDeque::from([start]);
            'search: while let Some(n) = queue.pop_front() {
                for t in self.targets(n).filter(|t| inside.contains(t)) {
                    if t == start {
                        came_from.insert(start, n);
                        break 'search;
                    }
                    if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(t) {
                        e.insert(n);
                        queue.push_back(t);
                    }
                }
            }
            let mut path = vec![start];
            let mut n = came_from[&start];
            while n != start {
                path.push(n);
                n = came_from[&n];
            }
            path.reverse();
            path.rotate_right(1);
            let mut text = String::new();
            for (i, &from) in path.iter().enumerate() {
                let to = path[(i + 1) % path.len()];
                let (line, code) = &self.edges[&from][&to];
                text += &format!(
                    "  {}:{line}: {code}\n    -> {}\n",
                    files[from].path, files[to].path
                );
            }
            let others: Vec<&str> = component
                .iter()
                .filter(|c| !path.contains(c))
                .map(|&c| files[c].path.as_str())
                .collect();
            if !others.is_empty() {
                text += &format!("  (in the same tangle: {})\n", others.join(", "));
            }
            out.push(text);
        }
        out
    }

    /// Strongly connected components (Tarjan), each sorted.
    fn components(&self, n: usize) -> Vec<Vec<usize>> {
        struct State {
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            on_stack: Vec<bool>,
            stack: Vec<usize>,
            next: usize,
            out: Vec<Vec<usize>>,
        }
        fn visit(g: &Graph, v: usize, s: &mut State) {
            s.index[v] = Some(s.next);
            s.low[v] = s.next;
            s.next += 1;
            s.stack.push(v);
            s.on_stack[v] = true;
            for w in g.targets(v).collect::<Vec<_>>() {
                match s.index[w] {
                    None => {
                        visit(g, w, s);
                        s.low[v] = s.low[v].min(s.low[w]);
                    }
                    Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(s.low[v]) == s.index[v] {
                let mut c = Vec::new();
                loop {
                    let w = s.stack.pop().unwrap();
                    s.on_stack[w] = false;
                    c.push(w);
                    if w == v {
                        break;
                    }
                }
                c.sort();
                s.out.push(c);
            }
        }
        let mut s = State {
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in 0..n {
            if s.index[v].is_none() {
                visit(self, v, &mut s);
            }
        }
        s.out
    }
}

/// The module a path names, as the longest module prefix of it, or `None`
/// for a path outside the crate.
fn resolve(
    f: &SourceFile,
    path: &[String],
    is_module: impl Fn(&[String]) -> bool,
) -> Option<Vec<String>> {
    let mut full = f.module.clone();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            full.clear();
            rest = &path[1..];
        }
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                full.pop()?;
                rest = &rest[1..];
            }
        }
        Some("self") => rest = &path[1..],
        Some(first) => {
            // A bare path starts at a child module, or is another crate's.
            let mut child = f.module.clone();
            child.push(first.to_string());
            if !is_module(&child) {
                return None;
            }
        }
        None => return None,
    }
    let base = full.len();
    full.extend(rest.iter().filter(|s| *s != "self").cloned());
    (base..=full.len())
        .rev()
        .map(|k| &full[..k])
        .find(|m| is_module(m))
        .map(<[String]>::to_vec)
}

/// A path a file refers to.
#[derive(Debug)]
struct Ref {
    path: Vec<String>,
    /// From a `pub use` (or `pub(crate) use`, …).
    public: bool,
    /// 1-based.
    line: usize,
}

#[derive(Debug)]
struct Parsed {
    refs: Vec<Ref>,
    /// `#[cfg(test)] mod x;` declarations.
    test_children: Vec<String>,
}

fn parse(text: &str) -> Parsed {
    let (code, test_children) = without_test_items(&blank_comments_and_literals(text));
    let chars: Vec<char> = code.chars().collect();
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(
            (0..chars.len())
                .filter(|&k| chars[k] == '\n')
                .map(|k| k + 1),
        )
        .collect();
    let line_at = |i: usize| line_starts.partition_point(|&s| s <= i);
    let word_at = |i: usize, w: &str| {
        let w: Vec<char> = w.chars().collect();
        chars[i..].starts_with(&w)
            && (i == 0 || !is_ident(chars[i - 1]))
            && chars.get(i + w.len()).is_none_or(|&c| !is_ident(c))
    };
    let mut refs = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if word_at(i, "use") {
            let end = (i..chars.len())
                .find(|&j| chars[j] == ';')
                .unwrap_or(chars.len());
            let tree: String = chars[i + 3..end].iter().collect();
            let before: String = chars[i.saturating_sub(64)..i].iter().collect();
            let public = is_visibility(&before);
            for path in expand_use_tree(&tree) {
                refs.push(Ref {
                    path,
                    public,
                    line: line_at(i),
                });
            }
            i = end;
        } else if ["crate", "super", "self"].iter().any(|w| word_at(i, w))
            && chars[i..]
                .iter()
                .skip_while(|c| is_ident(**c))
                .take(2)
                .eq(&[':', ':'])
        {
            let start = i;
            let mut path = Vec::new();
            loop {
                let seg: String = chars[i..].iter().take_while(|c| is_ident(**c)).collect();
                if seg.is_empty() {
                    break;
                }
                i += seg.chars().count();
                path.push(seg);
                if chars[i..].starts_with(&[':', ':'])
                    && chars.get(i + 2).is_some_and(|&c| is_ident(c))
                {
                    i += 2;
                } else {
                    break;
                }
            }
            refs.push(Ref {
                path,
                public: false,
                line: line_at(start),
            });
        } else {
            i += 1;
        }
    }
    Parsed {
        refs,
        test_children,
    }
}

/// Whether `before` ends with `pub` or `pub(…)`.
fn is_visibility(before: &str) -> bool {
    let mut b = before.trim_end();
    if let Some(inner) = b.strip_suffix(')') {
        match inner.rfind('(') {
            Some(k) => b = inner[..k].trim_end(),
            None => return false,
        }
    }
    b.strip_suffix("pub")
        .is_some_and(|rest| !rest.ends_with(is_ident))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `crate::{a::{self, B}, c as d}` → `crate::a::self`, `crate::a::B`, `crate::c`.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = tree.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_ident(c) {
            let w: String = chars[i..].iter().take_while(|c| is_ident(**c)).collect();
            i += w.chars().count();
            tokens.push(w);
        } else {
            if c == ':' && chars.get(i + 1) == Some(&':') {
                tokens.push("::".into());
                i += 1;
            } else if "{},*".contains(c) {
                tokens.push(c.to_string());
            }
            i += 1;
        }
    }
    if tokens.first().is_some_and(|t| t == "::") {
        return Vec::new(); // `::other_crate`
    }
    fn tree_at(t: &[String], i: &mut usize) -> Vec<Vec<String>> {
        let mut prefix: Vec<String> = Vec::new();
        loop {
            match t.get(*i).map(String::as_str) {
                Some("{") => {
                    *i += 1;
                    let mut out = Vec::new();
                    while t.get(*i).is_some_and(|x| x != "}") {
                        for sub in tree_at(t, i) {
                            out.push([prefix.clone(), sub].concat());
                        }
                        if t.get(*i).is_some_and(|x| x == ",") {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return out;
                }
                Some("*") => {
                    *i += 1;
                    return vec![prefix];
                }
                Some(w) if w != "}" && w != "," && w != "::" => {
                    prefix.push(w.to_string());
                    *i += 1;
                    match t.get(*i).map(String::as_str) {
                        Some("::") => *i += 1,
                        Some("as") => {
                            *i += 2;
                            return vec![prefix];
                        }
                        _ => return vec![prefix],
                    }
                }
                _ => return vec![prefix],
            }
        }
    }
    let mut i = 0;
    tree_at(&tokens, &mut i)
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect()
}

/// The source with comments, string and char literals turned to spaces,
/// line breaks kept (so positions still give line numbers).
fn blank_comments_and_literals(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if at(i) == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if at(i) == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if (at(i) == 'r' || (at(i) == 'b' && at(i + 1) == 'r'))
            && (i == 0 || !is_ident(c[i - 1]))
            && {
                let r = if at(i) == 'b' { i + 1 } else { i };
                let hashes = (r + 1..c.len()).take_while(|&k| c[k] == '#').count();
                at(r + 1 + hashes) == '"'
            }
        {
            // A raw string: r"…", r#"…"#, br##"…"##.
            let r = if at(i) == 'b' { i + 1 } else { i };
            let hashes = (r + 1..c.len()).take_while(|&k| c[k] == '#').count();
            out.push('"');
            i = r + 1 + hashes + 1;
            while i < c.len() && !(c[i] == '"' && (1..=hashes).all(|h| at(i + h) == '#')) {
                blank(&mut out, c[i]);
                i += 1;
            }
            out.push('"');
            i += 1 + hashes;
        } else if at(i) == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if at(i) == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A char literal (a lifetime has no closing quote).
            out.push('\'');
            i += 1;
            if at(i) == '\\' {
                out.push_str("  ");
                i += 2; // the backslash and the escaped character
            }
            while i < c.len() && c[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Blanks every item under `#[cfg(test)]` (and a whole file under
/// `#![cfg(test)]`); returns the code and the names of `#[cfg(test)] mod x;`.
fn without_test_items(code: &str) -> (String, Vec<String>) {
    let mut c: Vec<char> = code.chars().collect();
    let mut test_children = Vec::new();
    let squeeze = |from: usize, to: usize, c: &[char]| -> String {
        c[from..to].iter().filter(|c| !c.is_whitespace()).collect()
    };
    let mut i = 0;
    while i < c.len() {
        if c[i] != '#' {
            i += 1;
            continue;
        }
        let Some(close) = (i..c.len()).find(|&k| c[k] == ']') else {
            break;
        };
        let attr = squeeze(i, close + 1, &c);
        if attr == "#![cfg(test)]" {
            return (
                c.iter()
                    .map(|&ch| if ch == '\n' { '\n' } else { ' ' })
                    .collect(),
                Vec::new(),
            );
        }
        if attr != "#[cfg(test)]" {
            i += 1;
            continue;
        }
        // The item: up to a `;` outside brackets, or its closing brace.
        let mut depth = 0i32;
        let mut end = close + 1;
        while end < c.len() {
            match c[end] {
                '{' | '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ';' if depth == 0 => break,
                _ => {}
            }
            end += 1;
        }
        let item = squeeze(close + 1, end.min(c.len()), &c);
        let item = item
            .trim_start_matches("pub(super)")
            .trim_start_matches("pub(crate)")
            .trim_start_matches("pub");
        if let Some(name) = item.strip_prefix("mod") {
            if c.get(end) == Some(&';') {
                test_children.push(name.to_string());
            }
        }
        let stop = (end + 1).min(c.len());
        for ch in &mut c[i..stop] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = end + 1;
    }
    (c.into_iter().collect(), test_children)
}
