//! Programs the settings name (agents, git): a bare name (`claude`, no `/`) is looked up in the
//! server's `PATH` the way a shell would, except that empty and relative entries are skipped,
//! so a file where the server happens to start is never picked up by name.

use std::path::{Component, Path, PathBuf};

/// Whether `program` is a name alone (`claude`), to be looked up in `PATH`.
pub fn is_bare_name(program: &Path) -> bool {
    let mut parts = program.components();
    matches!(
        (parts.next(), parts.next()),
        (Some(Component::Normal(_)), None)
    ) && !program.as_os_str().as_encoded_bytes().contains(&b'/')
}

/// The first executable file named `name` in the absolute directories of the server's `PATH`.
pub fn find_in_path(name: &Path) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| unrunnable(candidate).is_none())
}

/// Why `path` can't be run (missing, unreadable, not a file, not executable); None when it can.
pub fn unrunnable(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("does not exist".to_owned()),
        Err(e) => Some(format!("cannot be read ({e})")),
        Ok(meta) if !meta.is_file() => Some("is not a file".to_owned()),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => Some("is not executable".to_owned()),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_name_alone_is_looked_up() {
        for bare in ["claude", "git", "my-agent.sh"] {
            assert!(is_bare_name(Path::new(bare)), "{bare}");
        }
        for path in [
            "./claude",
            "bin/claude",
            "/usr/bin/claude",
            "claude/",
            "..",
            ".",
            "",
        ] {
            assert!(!is_bare_name(Path::new(path)), "{path}");
        }
    }
}
