//! Reviewing the current conversation's own git worktree: `/changes` (its files with their
//! counts, then the coloured diff), `/commit`, `/merge` and `/discard`, and what each outcome
//! says.

use crate::render::say;
use crate::rest::{Changes, Refused, Rest, Worktree};

const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const CYAN: &str = "\x1b[36m";
const RESET: &str = "\x1b[0m";

/// The arguments of `/merge`: `--squash` first (`--` ends the options), then the message.
/// Anything else is the message, a leading `-` included.
#[derive(Debug, PartialEq, Eq)]
pub struct MergeArgs<'a> {
    pub squash: bool,
    /// The merge commit's message; the server's default when `None`.
    pub message: Option<&'a str>,
}

impl<'a> MergeArgs<'a> {
    pub fn parse(arg: &'a str) -> Self {
        let mut rest = arg.trim();
        let mut squash = false;
        loop {
            let (word, after) = rest
                .split_once(char::is_whitespace)
                .map_or((rest, ""), |(word, after)| (word, after.trim_start()));
            match word {
                "--squash" if !squash => squash = true,
                "--" => {
                    rest = after;
                    break;
                }
                _ => break,
            }
            rest = after;
        }
        MergeArgs {
            squash,
            message: (!rest.is_empty()).then_some(rest),
        }
    }
}

/// `text` with control characters shown in caret notation (`^[` for escape), so a file's
/// content can't drive the terminal; tabs stay.
fn visible(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\t' => c.to_string(),
            '\u{0}'..='\u{1f}' => format!("^{}", char::from(c as u8 + 64)),
            '\u{7f}' => "^?".to_owned(),
            c if c.is_control() => '\u{fffd}'.to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The lines of a unified diff, control characters made visible; with `colour`, file headers
/// bold, hunk headers cyan, added lines green and removed lines red.
pub fn diff_lines(diff: &str, colour: bool) -> Vec<String> {
    let mut in_header = false;
    diff.lines()
        .map(|line| {
            let text = visible(line);
            if line.starts_with("diff --git ") {
                in_header = true;
            } else if line.starts_with("@@") {
                in_header = false;
            }
            let paint = match line.as_bytes().first() {
                _ if !colour => None,
                _ if in_header => Some(BOLD),
                Some(b'@') => Some(CYAN),
                Some(b'+') => Some(GREEN),
                Some(b'-') => Some(RED),
                _ => None,
            };
            match paint {
                Some(code) => format!("{code}{text}{RESET}"),
                None => text,
            }
        })
        .collect()
}

/// "1 file", "2 files".
fn file_count(n: usize) -> String {
    match n {
        1 => "1 file".to_owned(),
        n => format!("{n} files"),
    }
}

/// What `/changes` prints: the branch and base, whether anything is uncommitted, each file
/// with its status and counts (or `binary`), then the diff, and a note when the server cut it.
pub fn changes_lines(changes: &Changes, colour: bool) -> Vec<String> {
    let (branch, base) = (visible(&changes.branch), visible(&changes.base));
    if changes.files.is_empty() {
        return vec![format!("No changes on {branch} against {base}.")];
    }
    let count = file_count(changes.files.len());
    let state = if changes.uncommitted {
        "with uncommitted changes (/commit <message> commits them)"
    } else {
        "all committed"
    };
    let mut lines = vec![format!(
        "Changes on {branch} against {base}: {count}, {state}"
    )];
    let width = changes.files.iter().map(|f| f.status.len()).max();
    for file in &changes.files {
        let counts = if file.binary {
            "binary".to_owned()
        } else {
            format!("+{} -{}", file.additions, file.deletions)
        };
        lines.push(format!(
            "  {:<width$}  {}  {counts}",
            file.status,
            visible(&file.path),
            width = width.unwrap_or(0)
        ));
    }
    lines.push(String::new());
    lines.extend(diff_lines(&changes.diff, colour));
    if changes.truncated {
        lines.push(
            "[the diff is cut here: the server sends at most worktrees.max_diff_bytes of it]"
                .to_owned(),
        );
    }
    lines
}

/// Why `what` failed: the server's error and the conflicting paths it names; a conversation
/// the server doesn't know yet has sent no message.
fn refusal_lines(what: &str, err: &anyhow::Error) -> Vec<String> {
    match err.downcast_ref::<Refused>() {
        Some(refusal) if refusal.status == reqwest::StatusCode::NOT_FOUND => {
            vec![format!(
                "{what}: {} (a new session has none until its first message)",
                visible(&refusal.to_string())
            )]
        }
        Some(refusal) => std::iter::once(format!("{what}: {}", visible(&refusal.to_string())))
            .chain(
                refusal
                    .paths
                    .iter()
                    .map(|path| format!("  conflict: {}", visible(path))),
            )
            .collect(),
        None => vec![format!("{what}: {err:#}")],
    }
}

/// Prints why `what` failed.
fn refused(what: &str, err: &anyhow::Error) {
    for line in refusal_lines(what, err) {
        say(&line);
    }
}

/// The branch and base of `agent_id`'s worktree, for saying what happened to them.
async fn names(rest: &Rest, agent_id: &str) -> Worktree {
    let known = rest.session(agent_id).await.ok().and_then(|s| s.worktree);
    let Worktree { branch, base } = known.unwrap_or_else(|| Worktree {
        branch: "the branch".to_owned(),
        base: "the base".to_owned(),
    });
    Worktree {
        branch: visible(&branch),
        base: visible(&base),
    }
}

/// `/changes`.
pub async fn show(rest: &Rest, agent_id: &str, colour: bool) {
    match rest.changes(agent_id).await {
        Ok(changes) => {
            for line in changes_lines(&changes, colour) {
                say(&line);
            }
        }
        Err(err) => refused("cannot show the changes", &err),
    }
}

/// `/commit <message>`.
pub async fn commit(rest: &Rest, agent_id: &str, message: &str) {
    match rest.commit(agent_id, message).await {
        Ok(Some(commit)) => {
            let Worktree { branch, .. } = names(rest, agent_id).await;
            say(&format!("Committed {commit} on {branch}"));
        }
        Ok(None) => say("Nothing to commit: the worktree has no uncommitted changes"),
        Err(err) => refused("cannot commit", &err),
    }
}

/// `/merge [--squash] [message]`.
pub async fn merge(rest: &Rest, agent_id: &str, args: &MergeArgs<'_>) {
    match rest.merge(agent_id, args.squash, args.message).await {
        Ok(merged) => {
            let Worktree { branch, base } = names(rest, agent_id).await;
            let commit = merged.commit;
            say(&match (merged.changed, args.squash) {
                (false, _) => format!(
                    "Nothing to merge: {base} has everything on {branch} already (at {commit})"
                ),
                (true, false) => format!("Merged {branch} into {base}: {base} is now at {commit}"),
                (true, true) => {
                    format!("Squash-merged {branch} into {base}: {base} is now at {commit}")
                }
            });
        }
        Err(err) => refused("cannot merge", &err),
    }
}

/// `/discard`, first half: shows what would be dropped and asks; the worktree to discard when
/// there is something to, for [`discard`] with the answer.
pub async fn ask_discard(rest: &Rest, agent_id: &str) -> Option<Worktree> {
    let changes = match rest.changes(agent_id).await {
        Ok(changes) => changes,
        Err(err) => {
            refused("cannot discard", &err);
            return None;
        }
    };
    let (branch, base) = (visible(&changes.branch), visible(&changes.base));
    if changes.files.is_empty() {
        say(&format!(
            "Nothing to discard: {branch} has no changes against {base}"
        ));
        return None;
    }
    let count = file_count(changes.files.len());
    say(&format!(
        "Discard every change on {branch} ({count}), committed or not, and return it to {base}? [y/N]"
    ));
    Some(Worktree { branch, base })
}

/// `/discard`, second half: drops every change of the worktree when `answer` is yes.
pub async fn discard(rest: &Rest, agent_id: &str, worktree: &Worktree, answer: &str) {
    if !matches!(answer.to_ascii_lowercase().as_str(), "y" | "yes") {
        say("Nothing discarded.");
        return;
    }
    match rest.discard(agent_id).await {
        Ok(()) => say(&format!(
            "Discarded: {} is back at {}",
            worktree.branch, worktree.base
        )),
        Err(err) => refused("cannot discard", &err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::ChangedFile;

    #[test]
    fn merge_takes_squash_first_and_the_rest_as_its_message() {
        let parse = MergeArgs::parse;
        let args = |squash, message| MergeArgs { squash, message };
        assert_eq!(parse(""), args(false, None));
        assert_eq!(parse("--squash"), args(true, None));
        assert_eq!(parse(" --squash  Land it "), args(true, Some("Land it")));
        assert_eq!(parse("Land it"), args(false, Some("Land it")));
        assert_eq!(parse("-m x"), args(false, Some("-m x")));
        assert_eq!(parse("--force"), args(false, Some("--force")));
        assert_eq!(parse("--squash --squash"), args(true, Some("--squash")));
        assert_eq!(parse("-- --squash"), args(false, Some("--squash")));
        assert_eq!(parse("--squash -- -x"), args(true, Some("-x")));
    }

    #[test]
    fn diffs_are_coloured_by_line_kind_and_control_characters_shown() {
        let diff =
            "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-old\n+new\n same\n+\x1b[2Jx\r";
        let plain = diff_lines(diff, false);
        assert_eq!(plain[4], "-old");
        assert_eq!(plain[7], "+^[[2Jx^M");
        let coloured = diff_lines(diff, true);
        assert_eq!(coloured[0], format!("{BOLD}diff --git a/a b/a{RESET}"));
        assert_eq!(coloured[1], format!("{BOLD}--- a/a{RESET}"));
        assert_eq!(coloured[2], format!("{BOLD}+++ b/a{RESET}"));
        assert_eq!(coloured[3], format!("{CYAN}@@ -1 +1 @@{RESET}"));
        assert_eq!(coloured[4], format!("{RED}-old{RESET}"));
        assert_eq!(coloured[5], format!("{GREEN}+new{RESET}"));
        assert_eq!(coloured[6], " same");
        assert!(!coloured[7].contains("\x1b[2J"), "{:?}", coloured[7]);
    }

    #[test]
    fn refusals_name_the_conflicting_paths() {
        let refusal = |status: u16, paths: &[&str]| {
            anyhow::Error::from(Refused {
                status: reqwest::StatusCode::from_u16(status).unwrap(),
                error: Some((
                    "conflict".into(),
                    "merging would conflict in a.txt, b/c.txt; nothing was changed".into(),
                )),
                paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            })
        };
        assert_eq!(
            refusal_lines("cannot merge", &refusal(409, &["a.txt", "b/c.txt"])),
            [
                "cannot merge: merging would conflict in a.txt, b/c.txt; nothing was changed (conflict)",
                "  conflict: a.txt",
                "  conflict: b/c.txt",
            ]
        );
        assert_eq!(
            refusal_lines("cannot merge", &refusal(409, &[])).len(),
            1,
            "without paths the error text alone names them"
        );
        let unknown = anyhow::Error::new(Refused {
            status: reqwest::StatusCode::NOT_FOUND,
            error: Some((
                "unknown_agent".into(),
                "no conversation with agent_id `x`".into(),
            )),
            paths: Vec::new(),
        });
        assert_eq!(
            refusal_lines("cannot commit", &unknown),
            [
                "cannot commit: no conversation with agent_id `x` (unknown_agent) (a new session has none until its first message)"
            ]
        );
    }

    #[test]
    fn changes_list_each_file_and_say_when_the_diff_was_cut() {
        let file = |path: &str, status: &str, binary| ChangedFile {
            path: path.into(),
            status: status.into(),
            additions: 3,
            deletions: 1,
            binary,
        };
        let mut changes = Changes {
            branch: "agentmux/x".into(),
            base: "main".into(),
            uncommitted: true,
            files: vec![
                file("a.txt", "modified", false),
                file("logo.png", "added", true),
            ],
            diff: "diff --git a/a.txt b/a.txt\n".into(),
            truncated: true,
        };
        let lines = changes_lines(&changes, false);
        assert_eq!(
            lines[..3],
            [
                "Changes on agentmux/x against main: 2 files, with uncommitted changes (/commit <message> commits them)",
                "  modified  a.txt  +3 -1",
                "  added     logo.png  binary",
            ]
        );
        assert!(lines.last().unwrap().contains("the diff is cut here"));
        changes.files.clear();
        assert_eq!(
            changes_lines(&changes, false),
            ["No changes on agentmux/x against main."]
        );
    }
}
