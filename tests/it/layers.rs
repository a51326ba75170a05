//! The layering rules of `src/`, checked on the source so they stay true: HTTP stays in
//! `src/http/` (no other layer names `axum` or `hyper`), which reaches conversations only
//! through `session`; `session` never reaches up into `http`; `protocol` is a leaf; the store
//! and the agents never reach up into `session` or `http`, and the agents never into the
//! store; only the store speaks SQL (names `sqlx` or `rusqlite`), and `config` holds no store
//! code (no `crate::store`); `worktrees` (git) uses nothing above it; `push` (Web Push) is
//! below `session`, which feeds it, and `http`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
pub fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

/// The code of a file without comments (doc comments mention paths freely).
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate modules a file names (`crate::x`), and the external crates it names among
/// `names`.
fn mentions(code: &str, names: &[&str]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| word(c)) {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        let module: String = rest.chars().take_while(|c| word(*c)).collect();
        found.insert(format!("crate::{module}"));
    }
    for name in names {
        for (i, _) in code.match_indices(name) {
            let before = code[..i].chars().next_back();
            let after = code[i + name.len()..].chars().next();
            if !before.is_some_and(word) && after == Some(':') {
                found.insert((*name).to_owned());
            }
        }
    }
    found
}

#[test]
fn the_layering_rules_hold() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    let files = sources(&src);
    assert!(files.len() > 10, "found the sources");
    for file in files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let layer = rel.split('/').next().unwrap().trim_end_matches(".rs");
        let named = mentions(
            &code(&file),
            &[
                "axum",
                "hyper",
                "hyper_util",
                "http_body",
                "utoipa_axum",
                "sqlx",
                "rusqlite",
            ],
        );
        let forbidden: &[&str] = match layer {
            "http" => &["crate::store", "crate::agent"],
            "protocol" => &[
                "crate::http",
                "crate::session",
                "crate::store",
                "crate::agent",
                "crate::config",
                "crate::limits",
                "crate::metrics",
            ],
            "store" => &["crate::session", "crate::http"],
            "agent" => &["crate::session", "crate::http", "crate::store"],
            "session" => &["crate::http"],
            "push" => &["crate::session", "crate::http", "crate::agent"],
            "config" => &[
                "crate::store",
                "crate::session",
                "crate::http",
                "crate::agent",
            ],
            "worktrees" => &[
                "crate::session",
                "crate::http",
                "crate::store",
                "crate::agent",
            ],
            _ => &[],
        };
        for name in &named {
            let web_stack = matches!(
                name.as_str(),
                "axum" | "hyper" | "hyper_util" | "http_body" | "utoipa_axum"
            );
            let sql = matches!(name.as_str(), "sqlx" | "rusqlite");
            if (web_stack && layer != "http")
                || (sql && layer != "store")
                || forbidden.contains(&name.as_str())
            {
                broken.push(format!("src/{rel} uses {name}"));
            }
        }
    }
    assert!(broken.is_empty(), "layering broken:\n{}", broken.join("\n"));
}

#[test]
fn the_checker_sees_a_violation() {
    let named = mentions(
        "use axum::Router;\nfn f() { crate::store::open(); }\nlet a = my_axum::x;",
        &["axum"],
    );
    assert!(named.contains("axum"));
    assert!(named.contains("crate::store"));
    assert_eq!(named.len(), 2, "{named:?}");
}
