//! The `[projects]` and `[worktrees]` settings: the roots conversations may work in (and
//! whether a root gives them worktrees), and how their git worktrees are run.

use std::path::PathBuf;

use serde::Deserialize;

/// Settings of conversations' git worktrees.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorktreesConfig {
    /// The git program; when unset, the first `git` on `PATH` at start.
    pub git: Option<PathBuf>,
    /// Whether the repositories' own hooks run from the server's git commands.
    pub run_hooks: bool,
    /// Most bytes of a diff `GET /api/sessions/{agent_id}/changes` returns (`truncated` beyond).
    pub max_diff_bytes: usize,
    /// Most bytes of changed and new files a turn's checkpoint records: a worktree holding
    /// more skips it (with a warning), and a rewind to that turn leaves its files as they are.
    pub max_checkpoint_bytes: u64,
}

impl Default for WorktreesConfig {
    fn default() -> Self {
        WorktreesConfig {
            git: None,
            run_hooks: false,
            max_diff_bytes: 1 << 20,
            max_checkpoint_bytes: 256 << 20,
        }
    }
}

/// Where conversations may work: the operator's project roots.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectsConfig {
    /// Directories a chat may name (or name a directory inside) as its `options.cwd`. With
    /// none, every conversation runs in its own empty workspace. `--project-root DIR` and
    /// `AGENTMUX_PROJECT_ROOTS` (colon-separated) add more; all are canonicalized at start,
    /// and a missing one refuses to start.
    pub roots: Vec<ProjectRoot>,
}

/// One project root.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectRoot {
    /// The directory.
    pub path: PathBuf,
    /// Principals that may use it; empty (the default) is every principal.
    #[serde(default)]
    pub principals: Vec<String>,
    /// Whether a conversation in a git repository under it gets a worktree of its own unless
    /// its first chat says `worktree: false`.
    #[serde(default)]
    pub worktrees: bool,
}

impl ProjectRoot {
    /// A root every principal may use.
    pub fn open(path: PathBuf) -> Self {
        ProjectRoot {
            path,
            principals: Vec::new(),
            worktrees: false,
        }
    }

    /// Whether `principal` may use this root.
    pub fn allows(&self, principal: &str) -> bool {
        self.principals.is_empty() || self.principals.iter().any(|p| p == principal)
    }
}

impl ProjectsConfig {
    /// Adds roots from a colon-separated list (the form of `AGENTMUX_PROJECT_ROOTS`); empty
    /// entries are skipped.
    pub fn add_root_list(&mut self, list: &str) {
        for entry in list.split(':').filter(|e| !e.trim().is_empty()) {
            self.roots.push(ProjectRoot::open(PathBuf::from(entry)));
        }
    }

    /// Replaces every root by its canonical form (symlinks resolved); roots named twice are
    /// merged (their principals joined, or open to everyone if either is).
    ///
    /// # Errors
    /// When a root does not exist or is not a directory.
    pub fn canonicalize(&mut self) -> anyhow::Result<()> {
        let mut roots: Vec<ProjectRoot> = Vec::new();
        for root in std::mem::take(&mut self.roots) {
            let path = std::fs::canonicalize(&root.path).map_err(|e| {
                anyhow::anyhow!(
                    "project root {} cannot be used: {e} (--project-root, AGENTMUX_PROJECT_ROOTS \
                     or projects.roots in the config file)",
                    root.path.display()
                )
            })?;
            if !path.is_dir() {
                anyhow::bail!("project root {} is not a directory", root.path.display());
            }
            match roots.iter_mut().find(|r| r.path == path) {
                Some(same) if same.principals.is_empty() || root.principals.is_empty() => {
                    same.principals.clear();
                }
                Some(same) => same.principals.extend(root.principals),
                None => roots.push(ProjectRoot { path, ..root }),
            }
        }
        self.roots = roots;
        Ok(())
    }
}
