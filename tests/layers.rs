//! The crate's layering, checked from its own source: every module imports only modules
//! of its own layer or below, the only import circle is `error` ↔ `id`, and production
//! files hold no test machinery.
//!
//! The layers, bottom to top (a module may use its own layer and every layer below):
//!
//! | layer | modules | what they model |
//! |---|---|---|
//! | 0 | `id`, `error`, `clock`, `json` | names, errors, time, strict JSON |
//! | 1 | `transcript`, `usage` | what a conversation holds |
//! | 2 | `redact`, `engine`, `compactor` | what touches messages: redaction, the model, its summaries |
//! | 3 | `snapshot` | a session's stored state |
//! | 4 | `store`, `session` | where snapshots are kept; a live session |
//! | 5 | `lifecycle` | workflows over any store: fork, prune, export, import |
//! | 6 | `harness`, `testing` | the application's entry point; the store contract suite |
//!
//! A reference is any `crate::module` path (in a `use`, an expression or a type, braced
//! groups included) or a `super::` path that climbs to the crate root, in code: comments,
//! doc links, strings, `#[cfg(doc)]` imports and test code are not dependencies. Test
//! code is a `tests.rs`, `*_tests.rs` or `tests/` file, or a `#[cfg(test)] mod` block.
//!
//! The last test is the negative control: the same analysis on a small made-up source tree
//! with one upward import hidden among comments and strings finds exactly that import.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module and its layer.
const LAYERS: &[(&str, u8)] = &[
    ("id", 0),
    ("error", 0),
    ("clock", 0),
    ("json", 0),
    ("lease", 0),
    // Spans (feature `tracing`): ids, kinds, sizes; the types above trace themselves.
    ("telemetry", 1),
    ("transcript", 1),
    ("usage", 1),
    ("redact", 2),
    ("engine", 2),
    ("compactor", 2),
    ("snapshot", 3),
    ("store", 4),
    ("session", 4),
    ("lifecycle", 5),
    ("harness", 6),
    ("testing", 6),
    // Feature-gated conversions to other crates' types, over the whole public API.
    ("adapters", 7),
];

/// The one circle the layout keeps: an error names a session ([`SessionId`], in `id`) and
/// parsing an id reports an error.
const ALLOWED_CIRCLE: &[&str] = &["error", "id"];

/// What the analysis of a source tree found.
#[derive(Debug, Default)]
struct Analysis {
    /// Module → the other top-level modules its production code references.
    imports: BTreeMap<String, BTreeSet<String>>,
    /// Where each edge was seen first (file), for the failure messages.
    seen_in: BTreeMap<(String, String), PathBuf>,
    /// Production files with test-only items left after removing test modules.
    test_code_in_production: Vec<PathBuf>,
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let analysis = analyse(&source_root());
    let layer = layers();
    // The graph, for `cargo test --test layers -- --nocapture`.
    for (from, tos) in &analysis.imports {
        let tos: Vec<&str> = tos.iter().map(String::as_str).collect();
        println!(
            "{from} (layer {}) -> {}",
            layer[from.as_str()],
            tos.join(", ")
        );
    }
    let mut upward = Vec::new();
    for (from, tos) in &analysis.imports {
        for to in tos {
            if layer[to.as_str()] > layer[from.as_str()] {
                let file = &analysis.seen_in[&(from.clone(), to.clone())];
                upward.push(format!(
                    "{from} (layer {}) imports {to} (layer {}) in {}",
                    layer[from.as_str()],
                    layer[to.as_str()],
                    file.display()
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run up the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_only_import_circle_is_error_and_id() {
    let analysis = analyse(&source_root());
    let circles = circles(&analysis.imports);
    let allowed: BTreeSet<String> = ALLOWED_CIRCLE.iter().map(|m| (*m).to_owned()).collect();
    assert_eq!(
        circles,
        vec![allowed],
        "the modules in each import circle (the only one allowed is error <-> id)"
    );
}

#[test]
fn the_bottom_and_middle_layers_import_what_the_layout_says() {
    let analysis = analyse(&source_root());
    let imports = |module: &str| analysis.imports.get(module).cloned().unwrap_or_default();
    // The three walls the layout renovation moved, named as they were.
    assert!(
        !imports("store").contains("lifecycle"),
        "store imports lifecycle"
    );
    for above in ["store", "session", "lifecycle", "harness"] {
        assert!(
            !imports("snapshot").contains(above),
            "snapshot imports {above}"
        );
    }
    let error_imports: Vec<String> = imports("error").into_iter().collect();
    assert!(
        error_imports.iter().all(|m| m == "id"),
        "error imports {error_imports:?}: nothing above id"
    );
    // Every module the crate has is placed in a layer (analyse panics otherwise), and
    // every layer is used, so the table stays the crate's real map.
    let modules: BTreeSet<&str> = analysis.imports.keys().map(String::as_str).collect();
    for (module, _) in LAYERS {
        assert!(
            modules.contains(module),
            "{module} is in LAYERS but not in src/"
        );
    }
}

#[test]
fn production_files_hold_no_test_machinery() {
    let analysis = analyse(&source_root());
    assert!(
        analysis.test_code_in_production.is_empty(),
        "production files with test-only items outside a `#[cfg(test)] mod` (move them into \
         the module's tests, a `*_tests.rs` file or a `tests/` folder): {:?}",
        analysis.test_code_in_production
    );
}

/// The negative control: an upward import and a test-only item, hidden among comments,
/// strings, doc links and test modules that must not count, are found, and nothing else.
#[test]
fn the_analysis_finds_an_upward_import_and_nothing_that_is_not_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    write(
        "lib.rs",
        "mod id;\nmod error;\nmod snapshot;\nmod store;\nmod transcript;\n\
         pub use store::{Store as PublicStore, nested::Other};\n",
    );
    // Through a root re-export, still the store.
    write(
        "transcript.rs",
        "fn t() -> crate::PublicStore { todo!() }\n",
    );
    write("id.rs", "use crate::error::Error;\n");
    write("error.rs", "use crate::id::SessionId;\n");
    write(
        "snapshot/mod.rs",
        r##"//! Links to [`crate::store::Store`] in docs are not imports.
mod codec;
/* a block comment: crate::harness::Harness /* nested: crate::lifecycle */ */
const TEXT: &str = "crate::session::Session";
const RAW: &str = r#"crate::lifecycle "quoted" "#;
const CH: char = '"';
fn f<'a>(x: &'a str) -> &'a str { x }
#[cfg(doc)]
use crate::store::Documented;
#[cfg(test)]
pub(crate) mod tests {
    use crate::store::OnlyInTests;
}
"##,
    );
    write(
        "snapshot/codec.rs",
        "use crate::{id::SessionId, error::{Error, Result}};\nfn g() { let _ = super::super::store::open(); }\n",
    );
    write("snapshot/codec_tests.rs", "use crate::store::Fine;\n");
    // After an escaped quote and a quote as characters, a path still counts.
    write(
        "store/mod.rs",
        "use crate::snapshot::Snapshot;\n#[cfg(test)]\nfn hook() {}\n\
         fn quote(c: char) -> bool { matches!(c, '\\''|'\"') }\n\
         type T = crate::id::SessionId;\n",
    );

    let analysis = analyse(src);
    let edges: Vec<(String, String)> = analysis
        .imports
        .iter()
        .flat_map(|(from, tos)| tos.iter().map(move |to| (from.clone(), to.clone())))
        .collect();
    let expected: Vec<(String, String)> = [
        ("error", "id"),
        ("id", "error"),
        ("snapshot", "error"),
        ("snapshot", "id"),
        ("snapshot", "store"),
        ("store", "id"),
        ("store", "snapshot"),
        ("transcript", "store"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(edges, expected);
    assert_eq!(
        analysis.seen_in[&("snapshot".to_owned(), "store".to_owned())],
        src.join("snapshot/codec.rs"),
        "the one upward import is the super::super path in codec.rs"
    );
    assert_eq!(
        analysis.test_code_in_production,
        vec![src.join("store/mod.rs")]
    );
    // And the circle check sees snapshot <-> store.
    let circles = circles(&analysis.imports);
    assert!(circles
        .iter()
        .any(|c| c.contains("snapshot") && c.contains("store")));
}

// ---------------------------------------------------------------------------------------
// The analysis.
// ---------------------------------------------------------------------------------------

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn layers() -> BTreeMap<&'static str, u8> {
    LAYERS.iter().copied().collect()
}

/// Reads every production `.rs` file under `src` and collects its references to other
/// top-level modules.
fn analyse(src: &Path) -> Analysis {
    let layer = layers();
    let mut analysis = Analysis::default();
    let exports = root_exports(src);
    let modules: BTreeSet<String> = rust_files(src)
        .iter()
        .filter_map(|file| module_path(file.strip_prefix(src).ok()?))
        .map(|path| path[0].clone())
        .collect();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).expect("under src");
        let Some(module_path) = module_path(relative) else {
            continue; // lib.rs: the root re-exports every layer
        };
        if is_test_file(relative) {
            continue;
        }
        let top = module_path[0].clone();
        assert!(
            layer.contains_key(top.as_str()) || src != source_root(),
            "module `{top}` ({}) has no layer: add it to LAYERS in tests/layers.rs",
            relative.display()
        );
        let text = fs::read_to_string(&file).expect("read a source file");
        let code = without_test_and_doc_items(&strip_comments_and_literals(&text));
        if code.contains("cfg(test)") || code.contains("cfg(any(test") {
            analysis.test_code_in_production.push(file.clone());
        }
        let entry = analysis.imports.entry(top.clone()).or_default();
        for head in referenced_heads(&code, module_path.len()) {
            // `crate::store` is the module; `crate::SessionStore` is a root re-export,
            // which counts as the module it comes from.
            assert!(
                head != "*",
                "{} imports the crate root with a glob (crate::* or super::*), which hides \
                 what it uses: import by name",
                relative.display()
            );
            let referenced = if layer.contains_key(head.as_str()) || modules.contains(&head) {
                head
            } else if let Some(module) = exports.get(&head) {
                module.clone()
            } else {
                panic!(
                    "{} names crate::{head}, which is neither a module nor a re-export of lib.rs",
                    relative.display()
                )
            };
            if referenced != top {
                analysis
                    .seen_in
                    .entry((top.clone(), referenced.clone()))
                    .or_insert_with(|| file.clone());
                entry.insert(referenced);
            }
        }
    }
    analysis
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("read a source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module path of a file relative to `src` (`store/file/mod.rs` → `store::file`), or
/// `None` for the crate root.
fn module_path(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?.to_owned();
    if stem != "mod" && !(parts.is_empty() && stem == "lib") {
        parts.push(stem);
    }
    (!parts.is_empty()).then_some(parts)
}

fn is_test_file(relative: &Path) -> bool {
    let name = relative
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || relative
            .parent()
            .is_some_and(|p| p.iter().any(|part| part == "tests"))
}

/// The source with comments removed and every string and character literal emptied, so
/// paths inside them do not count; line structure is irrelevant here.
fn strip_comments_and_literals(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if bytes[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if bytes[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some((prefix, hashes)) =
            raw_string_start(rest).filter(|_| i == 0 || !is_ident_byte(bytes[i - 1]))
        {
            // r"..." or r#"..."#: ends at a quote followed by as many hashes.
            i += prefix + 1;
            let end: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while i < bytes.len() && !bytes[i..].starts_with(&end) {
                i += 1;
            }
            i += end.len();
            out.push_str("\"\"");
        } else if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if bytes[i] == b'\'' {
            // A character literal ('x', '\n', '\u{1F600}', '"'), or a lifetime ('a).
            let literal_end = if rest.get(1) == Some(&b'\\') {
                // The quote that ends it comes after the escaped character: '\'' is 4
                // bytes, '\u{1F600}' 11.
                rest.iter().skip(3).position(|&b| b == b'\'').map(|p| p + 4)
            } else {
                let width = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + width) == Some(&b'\'')).then_some(2 + width)
            };
            if let Some(len) = literal_end {
                i += len;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            let width = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + width]);
            i += width;
        }
    }
    out
}

/// `Some((prefix length, number of #))` if `rest` starts a raw string literal: `r"`,
/// `r#"`, `br"`, `br#"` ... (the prefix is everything before the opening quote).
fn raw_string_start(rest: &[u8]) -> Option<(usize, usize)> {
    let b = usize::from(rest.first() == Some(&b'b'));
    let after_r = rest[b..].strip_prefix(b"r")?;
    let hashes = after_r.iter().take_while(|&&c| c == b'#').count();
    (after_r.get(hashes) == Some(&b'"')).then_some((b + 1 + hashes, hashes))
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The code without `#[cfg(test)] mod NAME { ... }` / `#[cfg(test)] mod NAME;` items (unit
/// tests, which may use anything) and `#[cfg(doc)]` items (imports for doc links only).
fn without_test_and_doc_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    loop {
        let next = ["#[cfg(test)]", "#[cfg(doc)]"]
            .iter()
            .filter_map(|attr| rest.find(attr).map(|at| (at, *attr)))
            .min();
        let Some((at, attr)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        let after = &rest[at + attr.len()..];
        let item = skip_attributes(after);
        let removable = attr == "#[cfg(doc)]" || without_visibility(item).starts_with("mod ");
        if !removable {
            // A test-only item that is not a module: kept, so it is reported.
            out.push_str(attr);
            rest = after;
            continue;
        }
        rest = &item[item_len(item)..];
    }
}

/// `text` after any further attributes (`#[path = "..."]`) and whitespace.
fn skip_attributes(text: &str) -> &str {
    let mut text = text.trim_start();
    while text.starts_with("#[") {
        let end = text.find(']').map_or(text.len(), |e| e + 1);
        text = text[end..].trim_start();
    }
    text
}

/// `item` without a leading `pub`, `pub(crate)`, `pub(super)` or `pub(in path)`.
fn without_visibility(item: &str) -> &str {
    let Some(rest) = item.strip_prefix("pub") else {
        return item;
    };
    let rest = rest.trim_start();
    match rest.strip_prefix('(') {
        Some(inner) => inner
            .find(')')
            .map_or(rest, |end| inner[end + 1..].trim_start()),
        None => rest,
    }
}

/// The length of the item `text` starts with: up to its `;`, or its matching `}`.
fn item_len(text: &str) -> usize {
    let mut depth = 0usize;
    for (i, byte) in text.bytes().enumerate() {
        match byte {
            b';' if depth == 0 => return i + 1,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// What lib.rs re-exports at the root: each exported name and the top-level module it
/// comes from (`pub use store::{FileSessionStore, SessionStore};`).
fn root_exports(src: &Path) -> BTreeMap<String, String> {
    let Ok(text) = fs::read_to_string(src.join("lib.rs")) else {
        return BTreeMap::new();
    };
    let code = strip_comments_and_literals(&text);
    let mut exports = BTreeMap::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("pub use ") {
        let item = &rest[at + "pub use ".len()..];
        let end = item.find(';').unwrap_or(item.len());
        let tokens = tokens(&item[..end]);
        if let (Some(module), Some(&"::")) = (tokens.first(), tokens.get(1)) {
            for (i, token) in tokens.iter().enumerate().skip(2) {
                let is_segment = tokens.get(i + 1) == Some(&"::");
                if token.chars().all(|c| c.is_alphanumeric() || c == '_')
                    && !is_segment
                    && *token != "as"
                    && *token != "self"
                {
                    exports.insert((*token).to_owned(), (*module).to_owned());
                }
            }
        }
        rest = &item[end..];
    }
    exports
}

/// The first segment of every path `code` starts at the crate root: `crate::` paths, and
/// `super::` paths that climb all the way up from a module `depth` levels deep.
fn referenced_heads(code: &str, depth: usize) -> BTreeSet<String> {
    let tokens = tokens(code);
    let mut found = BTreeSet::new();
    // For each open brace, whether it opened an inline `mod name { ... }`, inside which
    // `super` climbs one level less far.
    let mut braces: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let start = i;
        match tokens[i] {
            "{" => braces.push(i >= 2 && tokens[i - 2] == "mod"),
            "}" => {
                braces.pop();
            }
            _ => {}
        }
        let depth = depth + braces.iter().filter(|&&inline_mod| inline_mod).count();
        let at_root = if tokens[i] == "crate" {
            i += 1;
            true
        } else if tokens[i] == "super" && (i == 0 || tokens[i - 1] != "::") {
            let mut supers = 0;
            while tokens.get(i) == Some(&"super") {
                supers += 1;
                i += 1;
                if tokens.get(i) == Some(&"::") && tokens.get(i + 1) == Some(&"super") {
                    i += 1;
                }
            }
            supers >= depth
        } else {
            false
        };
        if at_root && tokens.get(i) == Some(&"::") {
            i += 1;
            collect_heads(&tokens, &mut i, &mut found);
        }
        i = i.max(start + 1);
    }
    found
}

/// After `crate::`: the head of a path (`store`), or of each path in a braced group
/// (`{error::{Error, Result}, id::SessionId}`).
fn collect_heads(tokens: &[&str], i: &mut usize, found: &mut BTreeSet<String>) {
    match tokens.get(*i) {
        Some(&"{") => {
            *i += 1;
            let mut depth = 1;
            let mut expect_head = true;
            while *i < tokens.len() && depth > 0 {
                match tokens[*i] {
                    "{" => depth += 1,
                    "}" => depth -= 1,
                    "," if depth == 1 => expect_head = true,
                    token if expect_head && depth == 1 => {
                        if is_name(token) || token == "*" {
                            found.insert(token.to_owned());
                        }
                        expect_head = false;
                    }
                    _ => {}
                }
                *i += 1;
            }
        }
        Some(token) if is_name(token) || *token == "*" => {
            found.insert((*token).to_owned());
            *i += 1;
        }
        _ => {}
    }
}

/// A name a path can start with at the root (not `self`, not punctuation).
fn is_name(token: &str) -> bool {
    token != "self" && token.bytes().all(is_ident_byte)
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_alphanumeric() || b == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            tokens.push(&code[start..i]);
        } else if bytes[i..].starts_with(b"::") {
            tokens.push("::");
            i += 2;
        } else if b.is_ascii_whitespace() || !b.is_ascii() {
            i += 1;
        } else {
            tokens.push(&code[i..=i]);
            i += 1;
        }
    }
    tokens
}

/// The sets of modules that import each other in a circle (strongly connected components
/// with more than one module), each sorted, in order.
fn circles(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reaches = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.to_owned()];
        while let Some(module) = pending.pop() {
            for next in imports.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    pending.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        imports.keys().map(|m| (m, reaches(m))).collect();
    let mut circles: Vec<BTreeSet<String>> = Vec::new();
    for module in imports.keys() {
        let circle: BTreeSet<String> = imports
            .keys()
            .filter(|other| {
                *other == module
                    || (reach[module].contains(*other) && reach[*other].contains(module))
            })
            .cloned()
            .collect();
        if circle.len() > 1 && !circles.contains(&circle) {
            circles.push(circle);
        }
    }
    circles
}
