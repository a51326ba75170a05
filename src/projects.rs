//! Project roots: which directories a principal's conversations may work in, and the projects
//! under them.
//!
//! Every path a client names is checked by [`resolve_dir`] alone (the session layer calls it
//! for `options.cwd`, `options.add_dirs` and the project routes), so that one rule decides.

use std::path::{Path, PathBuf};

use crate::config::ProjectRoot;

/// Most projects listed under one root.
pub const MAX_PROJECTS_PER_ROOT: usize = 1000;

/// Resolves `raw`, a path a client named, to the canonical path of an existing directory
/// inside a root `principal` may use (`roots` are canonical, see
/// [`crate::config::ProjectsConfig::canonicalize`]).
///
/// # Errors
/// A message for the client when the path is relative, does not exist, is not a directory, or
/// resolves (through `..` or a symbolic link) outside every root the principal may use. The
/// message is the same whether or not a path outside the roots exists.
pub async fn resolve_dir(
    roots: &[ProjectRoot],
    principal: &str,
    raw: &str,
) -> Result<PathBuf, String> {
    if roots.is_empty() {
        return Err(
            "this server has no project roots; conversations run in their own \
                    workspace (ask the operator for --project-root)"
                .into(),
        );
    }
    let outside = || format!("`{raw}` is not a directory inside a project root you may use");
    let path = Path::new(raw);
    if !path.is_absolute() {
        return Err(format!("`{raw}` is not an absolute path"));
    }
    let canonical = tokio::fs::canonicalize(path).await.map_err(|_| outside())?;
    if !roots
        .iter()
        .any(|root| root.allows(principal) && canonical.starts_with(&root.path))
    {
        return Err(outside());
    }
    match tokio::fs::metadata(&canonical).await {
        Ok(meta) if meta.is_dir() => Ok(canonical),
        _ => Err(outside()),
    }
}

/// The roots `principal` may use.
pub fn roots_of<'a>(roots: &'a [ProjectRoot], principal: &'a str) -> Vec<&'a Path> {
    roots
        .iter()
        .filter(|r| r.allows(principal))
        .map(|r| r.path.as_path())
        .collect()
}

/// Whether a conversation in `dir` gets a worktree of its own unless its first chat says
/// `worktree: false`: a root `principal` may use that holds it says `worktrees = true`.
pub fn worktrees_by_default(roots: &[ProjectRoot], principal: &str, dir: &Path) -> bool {
    roots
        .iter()
        .any(|r| r.worktrees && r.allows(principal) && dir.starts_with(&r.path))
}

/// One project directory as [`list`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its canonical path.
    pub path: PathBuf,
    /// Whether it is in a git repository that lies in its root: it has a `.git` entry, or it
    /// is directly under a root that has one. Git itself is not asked.
    pub git: bool,
}

/// Whether `dir` has a `.git` entry (a directory, or the file of a linked worktree).
async fn has_git(dir: &Path) -> bool {
    tokio::fs::symlink_metadata(dir.join(".git")).await.is_ok()
}

/// The projects of `principal`: each root it may use and each directory directly under one
/// (not hidden, and inside the root once symbolic links are resolved), at most
/// [`MAX_PROJECTS_PER_ROOT`] per root, sorted.
pub async fn list(roots: &[ProjectRoot], principal: &str) -> Vec<Listed> {
    let mut projects = Vec::new();
    for root in roots_of(roots, principal) {
        let root_git = has_git(root).await;
        projects.push(Listed {
            path: root.to_path_buf(),
            git: root_git,
        });
        let Ok(mut entries) = tokio::fs::read_dir(root).await else {
            continue;
        };
        let mut under = Vec::new();
        while let Ok(Some(entry)) = entries.next_entry().await {
            if under.len() >= MAX_PROJECTS_PER_ROOT {
                break;
            }
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(canonical) = tokio::fs::canonicalize(entry.path()).await else {
                continue;
            };
            if canonical.starts_with(root)
                && canonical != root
                && tokio::fs::metadata(&canonical)
                    .await
                    .is_ok_and(|m| m.is_dir())
            {
                under.push(canonical);
            }
        }
        under.sort();
        for path in under {
            let git = root_git || has_git(&path).await;
            projects.push(Listed { path, git });
        }
    }
    projects.dedup_by(|a, b| a.path == b.path);
    projects
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_directories_inside_an_allowed_root_resolve() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("root");
        let other = base.join("other");
        std::fs::create_dir_all(root.join("proj")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        // A sibling whose name begins with the root's: inside by string prefix, not by path.
        let evil = base.join("root-evil");
        std::fs::create_dir_all(&evil).unwrap();
        std::os::unix::fs::symlink(&evil, root.join("to-evil")).unwrap();
        std::fs::write(root.join("file"), b"").unwrap();
        std::os::unix::fs::symlink(&other, root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("proj"), root.join("in")).unwrap();
        let roots = [ProjectRoot {
            principals: vec!["alice".into()],
            ..ProjectRoot::open(root.clone())
        }];
        let ok = |p: PathBuf| p.to_string_lossy().into_owned();
        assert_eq!(
            resolve_dir(&roots, "alice", &ok(root.join("proj")))
                .await
                .unwrap(),
            root.join("proj")
        );
        assert_eq!(
            resolve_dir(&roots, "alice", &ok(root.join("in")))
                .await
                .unwrap(),
            root.join("proj"),
            "a link inside the root resolves to its target"
        );
        for bad in [
            ok(root.join("out")),
            ok(root.join("proj/../../other")),
            ok(root.join("file")),
            ok(root.join("missing")),
            "proj".to_owned(),
            ok(other.clone()),
            ok(evil.clone()),
            ok(root.join("to-evil")),
            ok(root.join("../root-evil")),
        ] {
            assert!(resolve_dir(&roots, "alice", &bad).await.is_err(), "{bad}");
        }
        assert!(
            resolve_dir(&roots, "bob", &ok(root.join("proj")))
                .await
                .is_err(),
            "another principal's root"
        );
        assert!(resolve_dir(&[], "alice", &ok(root.clone())).await.is_err());
        assert_eq!(
            list(&roots, "alice")
                .await
                .into_iter()
                .map(|p| p.path)
                .collect::<Vec<_>>(),
            [root.clone(), root.join("proj")],
            "the root, and the directories under it that stay inside"
        );
        assert!(list(&roots, "bob").await.is_empty());
    }
}
