//! How the modules of `src/` are kept readable, checked on the source: each opens with a
//! comment saying what it owns, and a file longer than [`MAX_LINES`] (its unit tests aside)
//! says in that comment that it is one job, and why.

use std::path::{Component, Path};

use crate::layers::sources;

/// Most lines a file under `src/` has, up to its unit tests, unless its opening comment says
/// it is one job (and why it is that long).
const MAX_LINES: usize = 550;

/// A file's opening comment (its `//!` lines, joined) and how many lines it has before its unit
/// tests (a `#[cfg(test)]` on the line before a `mod`).
fn opening_and_length(text: &str) -> (String, usize) {
    let opening = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect::<Vec<_>>()
        .join(" ");
    let lines: Vec<&str> = text.lines().collect();
    let length = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod "))
        .unwrap_or(lines.len());
    (opening, length)
}

/// Whether `rel` is a module of unit tests (`tests.rs`, or a file under a `tests` folder).
fn is_tests(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel
            .components()
            .any(|c| c == Component::Normal("tests".as_ref()))
}

#[test]
fn every_module_says_what_it_owns_and_long_ones_are_one_job() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for file in sources(&src) {
        let rel = file.strip_prefix(&src).unwrap();
        let (opening, length) = opening_and_length(&std::fs::read_to_string(&file).unwrap());
        let shown = rel.display();
        if opening.is_empty() {
            broken.push(format!("src/{shown} has no opening `//!` comment"));
        } else if length > MAX_LINES
            && !is_tests(rel)
            && !opening.to_lowercase().contains("one job")
        {
            broken.push(format!(
                "src/{shown} is {length} lines and its opening comment does not say it is one job"
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_length_check_reads_the_opening_and_stops_at_the_tests_module() {
    let text = "//! Owns a thing.\n//! One\n//! job.\n\nfn a() {}\n#[cfg(test)]\nimpl A {}\n\
                #[cfg(test)]\nmod tests {}\n";
    assert_eq!(
        opening_and_length(text),
        ("Owns a thing. One job.".to_owned(), 7)
    );
    assert_eq!(opening_and_length("fn a() {}\n").0, "");
    assert!(is_tests(Path::new("protocol/tests.rs")));
    assert!(is_tests(Path::new("worktrees/tests/mod.rs")));
    assert!(!is_tests(Path::new("session/contests.rs")));
    assert!(!is_tests(Path::new("session/my_tests/mod.rs")));
}
