//! Branch names and commits a client may name: git's own rules for a branch name
//! (`git check-ref-format --branch`), plus none that could be read as an option, and default
//! names made valid from an `agent_id`.

/// Longest branch name accepted, in bytes.
pub const MAX_BRANCH_BYTES: usize = 200;

/// Why `name` is not a branch name a client may give, or None when it is one.
pub fn branch_error(name: &str) -> Option<String> {
    let bad = |why: &str| Some(format!("`{name}` is not a valid branch name: {why}"));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_BRANCH_BYTES {
        return bad(&format!("longer than {MAX_BRANCH_BYTES} bytes"));
    }
    if name.starts_with('-') {
        return bad("it starts with `-`");
    }
    if name == "@" || name == "HEAD" || name.starts_with("refs/") {
        return bad("it names a reference, not a branch");
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_ascii_control() || " ~^:?*[\\".contains(*c))
    {
        return bad(&format!("it contains {c:?}"));
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") {
        return bad("it contains `..`, `@{` or `//`");
    }
    if name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return bad("it starts or ends with `/`, or ends with `.`");
    }
    if name
        .split('/')
        .any(|part| part.starts_with('.') || part.ends_with(".lock"))
    {
        return bad("a part starts with `.` or ends with `.lock`");
    }
    None
}

/// Whether `text` is a full or abbreviated commit id (hexadecimal, 7 to 64 digits).
pub fn is_commit_id(text: &str) -> bool {
    (7..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A valid branch name made from `agent_id` under `agentmux/`: every character git refuses or
/// that could read as a path trick becomes `-`.
pub fn default_branch(agent_id: &str) -> String {
    let mut name: String = agent_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(MAX_BRANCH_BYTES - "agentmux/".len() - 8)
        .collect();
    if name.is_empty() {
        name.push('-');
    }
    let name = format!("agentmux/{name}");
    debug_assert!(branch_error(&name).is_none(), "{name}");
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_branch_names_are_refused() {
        for name in [
            "",
            "--upload-pack=x",
            "-b",
            "a..b",
            "refs/heads/../../x",
            "refs/heads/main",
            "HEAD",
            "@",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[1]",
            "a\\b",
            "a@{1}",
            "/a",
            "a/",
            "a//b",
            "a.",
            ".hidden",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "a\u{7f}",
            "a\nb",
            &"x".repeat(MAX_BRANCH_BYTES + 1),
        ] {
            assert!(branch_error(name).is_some(), "{name:?} was accepted");
        }
        for name in [
            "main",
            "feature/x",
            "agentmux/a-1",
            "fix_2.0",
            "a.b/c-d",
            "ünï",
        ] {
            assert_eq!(branch_error(name), None, "{name:?}");
        }
    }

    #[test]
    fn commit_ids_are_hexadecimal_only() {
        assert!(is_commit_id("0123abc"));
        assert!(is_commit_id(&"a".repeat(40)));
        assert!(!is_commit_id("abc"));
        assert!(!is_commit_id("HEAD~1"));
        assert!(!is_commit_id("main"));
        assert!(!is_commit_id("0123abg"));
    }

    #[test]
    fn default_branches_are_valid_whatever_the_agent_id() {
        assert_eq!(default_branch("task-1"), "agentmux/task-1");
        assert_eq!(default_branch("a..b/../x"), "agentmux/a--b----x");
        assert_eq!(default_branch("-rf"), "agentmux/-rf");
        assert_eq!(default_branch("x.lock"), "agentmux/x-lock");
        assert_eq!(default_branch("ü"), "agentmux/-");
        let long = default_branch(&"y".repeat(500));
        assert!(long.len() <= MAX_BRANCH_BYTES - 8, "{}", long.len());
        assert_eq!(branch_error(&long), None);
    }
}
