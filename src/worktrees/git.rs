//! Running the real `git` program: argument arrays (never a shell), no prompts, no signing,
//! no repository hooks unless allowed, no fsmonitor, no git variables of the server's own
//! environment nor its system-wide settings, output read up to a cap, and a deadline.
//!
//! A repository's own settings and attributes (clean filters, merge drivers) still run what
//! they name, as the agent working in it could itself: it runs as the server's user too.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::WorktreeError;

/// The oldest git that has everything used here (`merge-tree --write-tree`).
pub const MIN_VERSION: (u32, u32) = (2, 38);

/// How long one git command may run before it is stopped.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// What a git command printed and how it ended.
#[derive(Debug)]
pub struct Output {
    /// Exit code (None when ended by a signal).
    pub code: Option<i32>,
    /// Standard output, at most the cap asked for.
    pub stdout: Vec<u8>,
    /// Whether standard output went on past the cap.
    pub truncated: bool,
    /// Standard error, at most 4 KiB.
    pub stderr: String,
}

impl Output {
    /// Standard output as text (lossy), without the trailing newline.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout)
            .trim_end_matches('\n')
            .to_owned()
    }
}

/// The git program and how it is run.
#[derive(Debug, Clone)]
pub struct Git {
    program: PathBuf,
    run_hooks: bool,
}

/// Most bytes of standard error kept.
const STDERR_CAP: usize = 4096;

impl Git {
    /// `program` is run as given (an absolute path); hooks run only if `run_hooks`.
    pub fn new(program: PathBuf, run_hooks: bool) -> Self {
        Git { program, run_hooks }
    }

    /// Runs `git args` in `dir` and reads at most `cap` bytes of its output.
    ///
    /// # Errors
    /// `Git` when the program can't be started.
    pub async fn run_capped(
        &self,
        dir: &Path,
        args: &[&str],
        env: &[(&str, &Path)],
        cap: usize,
    ) -> Result<Output, WorktreeError> {
        let mut cmd = Command::new(&self.program);
        // Every git variable of the server's own environment would point git elsewhere or
        // change what it reads.
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("GIT_")) {
                cmd.env_remove(name);
            }
        }
        cmd.env_remove("SSH_ASKPASS");
        cmd.current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("LC_ALL", "C");
        for (name, value) in env {
            cmd.env(name, value);
        }
        // Settings a repository's own config could use to run programs of its choosing.
        cmd.args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.pager=cat",
            "-c",
            "commit.gpgSign=false",
        ]);
        if !self.run_hooks {
            cmd.args(["-c", "core.hooksPath=/dev/null"]);
        }
        cmd.args(args);
        let mut child = cmd
            .spawn()
            .map_err(|e| WorktreeError::Git(format!("cannot run git: {e}")))?;
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        // Owns stdout, so that a cut stops reading and closes the pipe: git, writing on, ends.
        let read_out = async move {
            let mut out = Vec::new();
            // On the heap: every git command's future would carry it, and they nest.
            let mut buf = vec![0u8; 16 * 1024];
            let mut truncated = false;
            loop {
                match stdout.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) if out.len() + n > cap => {
                        out.extend_from_slice(&buf[..cap - out.len()]);
                        truncated = true;
                        break;
                    }
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                }
            }
            (out, truncated)
        };
        // Keeps the start and reads the rest to its end, so git never waits on a full pipe.
        let read_err = async {
            let mut err = Vec::new();
            let _ = (&mut stderr)
                .take(STDERR_CAP as u64)
                .read_to_end(&mut err)
                .await;
            let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            err
        };
        let ran = tokio::time::timeout(DEADLINE, async {
            let ((stdout, truncated), stderr) = tokio::join!(read_out, read_err);
            (stdout, truncated, stderr, child.wait().await)
        })
        .await;
        let Ok((stdout, truncated, stderr, status)) = ran else {
            let _ = child.start_kill();
            return Err(WorktreeError::Git(format!(
                "git {} took longer than {DEADLINE:?} and was stopped",
                command_name(args)
            )));
        };
        let status = status.map_err(|e| WorktreeError::Git(format!("git did not end: {e}")))?;
        Ok(Output {
            code: status.code(),
            stdout,
            truncated,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    /// Runs `git args` in `dir` with no cap worth speaking of on small outputs (16 MiB).
    ///
    /// # Errors
    /// `Git` when the program can't be started.
    pub async fn run(&self, dir: &Path, args: &[&str]) -> Result<Output, WorktreeError> {
        self.run_capped(dir, args, &[], 16 << 20).await
    }

    /// Runs `git args` in `dir` and returns its output as text when it exits 0.
    ///
    /// # Errors
    /// `Git` naming the command and what git said when it fails.
    pub async fn ok(&self, dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
        let out = self.run(dir, args).await?;
        expect_ok(args, out)
    }

    /// The version of the program, as (major, minor).
    ///
    /// # Errors
    /// `Git` when it can't be run or its version is not understood.
    pub async fn version(&self) -> Result<(u32, u32), WorktreeError> {
        let text = self.ok(Path::new("/"), &["--version"]).await?;
        parse_version(&text)
            .ok_or_else(|| WorktreeError::Git(format!("unrecognised git version `{text}`")))
    }
}

/// The first `git` executable on `PATH`, looked up once when worktrees are set up.
pub fn find_on_path() -> Option<PathBuf> {
    crate::programs::find_in_path(Path::new("git"))
}

/// `out`'s text when the command exited 0, else a `Git` error naming it.
///
/// # Errors
/// `Git` with the command's first word and what git said.
pub fn expect_ok(args: &[&str], out: Output) -> Result<String, WorktreeError> {
    if out.code == Some(0) {
        Ok(out.text())
    } else {
        Err(failure(args, &out))
    }
}

/// The error of a git command `args` that failed with `out`.
pub fn failure(args: &[&str], out: &Output) -> WorktreeError {
    WorktreeError::Git(format!(
        "git {} failed: {}",
        command_name(args),
        out.stderr.trim()
    ))
}

/// The git command `args` run (`commit`), past options and their `-c` values.
fn command_name<'a>(args: &[&'a str]) -> &'a str {
    let mut words = args.iter();
    while let Some(word) = words.next() {
        if *word == "-c" {
            words.next();
        } else if !word.starts_with('-') {
            return word;
        }
    }
    "git"
}

/// `git version 2.47.3` → (2, 47).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let number = text.strip_prefix("git version ")?;
    let mut parts = number.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_what_git_prints() {
        assert_eq!(parse_version("git version 2.47.3"), Some((2, 47)));
        assert_eq!(
            parse_version("git version 2.39.5 (Apple Git-154)"),
            Some((2, 39))
        );
        assert_eq!(parse_version("git version 3.0.0.windows.1"), Some((3, 0)));
        assert_eq!(parse_version("hg 6"), None);
    }
}
