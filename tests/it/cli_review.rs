//! `agentmux chat` reviewing a conversation's own git worktree, against the real git: in a
//! terminal (tmux), `/changes` lists what the agent's files changed and shows the diff,
//! `/commit` and `/merge` land it on the base, a conflict names its file and changes nothing,
//! `/discard` asks and acts only on `y`; piped, `--worktree` gives a new session a worktree and
//! a session without one says so. Messages starting with `-` are messages.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli_chat::{Terminal, chat_piped, have_tmux};
use crate::repos::{Fixture, git};
use crate::security::connect_as;

/// Starts conversation `agent_id` as alice in the fixture's repository (`worktree` as its
/// option), waits until its first turn ended and it is idle, and returns its summary.
async fn started(fx: &Fixture, agent_id: &str, worktree: bool) -> Value {
    let mut c = connect_as(&fx.server.addr, "tok-alice").await;
    let options = json!({"cwd": fx.repo.to_string_lossy(), "worktree": worktree});
    c.send(json!({"type": "chat", "agent_id": agent_id, "content": "hi", "options": options}))
        .await;
    c.recv_until(|f| {
        f["agent_id"] == agent_id && f["message_type"] == "status" && f["status"] == "idle"
    })
    .await;
    let (status, summary) = fx
        .api(
            "tok-alice",
            "GET",
            &format!("/api/sessions/{agent_id}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{summary}");
    summary
}

/// The conversation's worktree, as REST reports its `cwd`, and its branch.
fn worktree_of(summary: &Value) -> (PathBuf, String) {
    let branch = summary["worktree"]["branch"].as_str().unwrap().to_owned();
    (PathBuf::from(summary["cwd"].as_str().unwrap()), branch)
}

/// `agentmux chat` as alice, resuming `agent_id`, in a terminal.
async fn resumed(fx: &Fixture, agent_id: &str) -> Terminal {
    let url = format!("ws://{}/ws", fx.server.addr);
    let term = Terminal::open_in(&url, &["--token", "tok-alice", "--resume", agent_id], None);
    term.wait_for(&format!("Resumed session: {agent_id}"), 1)
        .await;
    term
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// What the agent's tools wrote into its worktree shows in `/changes` (counts, binary, the
/// coloured diff with a control character made visible); a merge of uncommitted work is
/// refused; `/commit` commits it on the branch, `/merge` lands it on `main` (a second one has
/// nothing to merge), and `/merge --squash` lands the next change as one commit whose message
/// starts with `-`.
#[tokio::test]
async fn terminal_client_reviews_commits_and_merges_a_worktree() {
    if !have_tmux() {
        return;
    }
    let fx = Fixture::new("").await;
    let summary = started(&fx, "review", true).await;
    let (wt, branch) = worktree_of(&summary);
    assert_eq!(branch, "agentmux/review");
    std::fs::write(wt.join("a.txt"), "one\nTWO\n").unwrap();
    std::fs::write(wt.join("notes.txt"), "alpha\nbeta\n").unwrap();
    std::fs::write(wt.join("logo.bin"), [0u8, 1, 2, 0, 255]).unwrap();
    std::fs::write(wt.join("esc.txt"), "\x1b[2Jwiped\n").unwrap();

    let term = resumed(&fx, "review").await;
    term.wait_for(
        "It works in a worktree on agentmux/review (from main): /changes",
        1,
    )
    .await;
    term.type_line("/changes");
    // The last line of the diff: notes.txt comes last.
    let screen = term.wait_for("+beta", 1).await;
    for line in [
        "Changes on agentmux/review against main: 4 files, with uncommitted changes",
        "  modified  a.txt  +1 -1",
        "  added     esc.txt  +1 -0",
        "  added     logo.bin  binary",
        "  added     notes.txt  +2 -0",
        "+TWO",
        "+^[[2Jwiped",
    ] {
        assert!(screen.contains(line), "{line:?} in:\n{screen}");
    }
    let coloured = term.tmux(&["capture-pane", "-p", "-e", "-J", "-S", "-200", "-t", "chat"]);
    let coloured = String::from_utf8_lossy(&coloured.stdout);
    assert!(coloured.contains("\x1b[32m+TWO"), "{coloured}");
    assert!(coloured.contains("\x1b[31m-two"), "{coloured}");

    let main_before = git(&fx.repo, &["rev-parse", "main"]);
    term.type_line("/merge");
    term.wait_for("cannot merge: ", 1).await;
    term.wait_for("has uncommitted changes", 1).await;
    assert_eq!(git(&fx.repo, &["rev-parse", "main"]), main_before);

    term.type_line("/commit -m is just a message");
    term.wait_for("Committed ", 1).await;
    let committed = git(&fx.repo, &["rev-parse", "agentmux/review"]);
    term.wait_for(&format!("Committed {committed} on agentmux/review"), 1)
        .await;
    assert_eq!(
        git(&fx.repo, &["log", "-1", "--format=%s", "agentmux/review"]),
        "-m is just a message"
    );

    term.type_line("/merge");
    term.wait_for("Merged agentmux/review into main: main is now at ", 1)
        .await;
    let merged = git(&fx.repo, &["rev-parse", "main"]);
    term.wait_for(&format!("main is now at {merged}"), 1).await;
    assert_ne!(merged, main_before);
    assert_eq!(git(&fx.repo, &["show", "main:notes.txt"]), "alpha\nbeta");
    // The base's checkout was clean, so it moved with its branch.
    assert_eq!(read(&fx.repo.join("a.txt")), "one\nTWO\n");
    term.type_line("/merge");
    term.wait_for(
        "Nothing to merge: main has everything on agentmux/review already",
        1,
    )
    .await;
    assert_eq!(git(&fx.repo, &["rev-parse", "main"]), merged);

    std::fs::write(wt.join("squash.txt"), "s\n").unwrap();
    term.type_line("/commit add squash.txt");
    term.wait_for("Committed ", 2).await;
    term.type_line("/merge --squash --theirs");
    term.wait_for(
        "Squash-merged agentmux/review into main: main is now at ",
        1,
    )
    .await;
    assert_eq!(
        git(&fx.repo, &["log", "-1", "--format=%s", "main"]),
        "--theirs"
    );
    // One commit with one parent: squashed, not merged.
    let parents = git(&fx.repo, &["rev-list", "--parents", "-n", "1", "main"]);
    assert_eq!(parents.split_whitespace().count(), 2, "{parents}");
    assert_eq!(git(&fx.repo, &["show", "main:squash.txt"]), "s");
}

/// A merge that conflicts names the file and changes nothing; `/discard` shows what it would
/// drop and asks: any answer but `y` keeps everything, `y` returns the worktree to its base.
#[tokio::test]
async fn terminal_client_shows_conflicts_and_discards_only_on_yes() {
    if !have_tmux() {
        return;
    }
    let fx = Fixture::new("").await;
    let summary = started(&fx, "clash", true).await;
    let (wt, _) = worktree_of(&summary);
    std::fs::write(fx.repo.join("a.txt"), "one\nmain\n").unwrap();
    git(&fx.repo, &["commit", "-q", "-am", "main edit"]);
    std::fs::write(wt.join("a.txt"), "one\nbranch\n").unwrap();

    let term = resumed(&fx, "clash").await;
    term.type_line("/commit branch edit");
    term.wait_for("Committed ", 1).await;
    let (main, branch) = (
        git(&fx.repo, &["rev-parse", "main"]),
        git(&fx.repo, &["rev-parse", "agentmux/clash"]),
    );
    term.type_line("/merge --squash");
    term.wait_for("cannot merge: merging would conflict in a.txt", 1)
        .await;
    assert_eq!(git(&fx.repo, &["rev-parse", "main"]), main);
    assert_eq!(read(&fx.repo.join("a.txt")), "one\nmain\n");

    let question = "Discard every change on agentmux/clash (1 file), committed or not, and \
                    return it to main? [y/N]";
    for answer in ["n", "", "yes please"] {
        term.type_line("/discard");
        term.type_line(answer);
    }
    term.wait_for(question, 3).await;
    term.wait_for("Nothing discarded.", 3).await;
    assert_eq!(git(&fx.repo, &["rev-parse", "agentmux/clash"]), branch);
    assert_eq!(read(&wt.join("a.txt")), "one\nbranch\n");

    term.type_line("/discard");
    term.wait_for(question, 4).await;
    term.type_line("y");
    term.wait_for("Discarded: agentmux/clash is back at main", 1)
        .await;
    assert_eq!(git(&fx.repo, &["rev-parse", "agentmux/clash"]), main);
    assert_eq!(read(&wt.join("a.txt")), "one\nmain\n");
    term.type_line("/changes");
    term.wait_for("No changes on agentmux/clash against main.", 1)
        .await;
    term.type_line("/discard");
    term.wait_for(
        "Nothing to discard: agentmux/clash has no changes against main",
        1,
    )
    .await;
}

/// Piped: `--worktree` gives a new session a worktree of its own; a session without one says
/// so once; before the first message there is nothing to review; `/commit` needs a message.
#[tokio::test]
async fn chat_without_a_worktree_or_a_message_says_so() {
    let fx = Fixture::new("").await;
    let url = format!("ws://{}/ws", fx.server.addr);
    let repo = fx.repo.to_string_lossy().into_owned();
    let alice = ["--url", url.as_str(), "--token", "tok-alice"];

    let (code, out, _) = chat_piped(
        &[&alice[..], &["--cwd", &repo, "--worktree"]].concat(),
        "/changes\n/commit tidy\n/commit\nhello\n",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(" in a worktree of its own"), "{out}");
    for said in [
        "cannot show the changes: no conversation with agent_id",
        "cannot commit: no conversation with agent_id",
        "(a new session has none until its first message)",
        "usage: /commit <message>",
        "Echo: hello",
    ] {
        assert!(out.contains(said), "{said:?} in:\n{out}");
    }
    let (_, list) = fx.api("tok-alice", "GET", "/api/sessions", None).await;
    let (wt, branch) = worktree_of(&list["sessions"][0]);
    assert!(branch.starts_with("agentmux/chat-"), "{list}");
    assert!(
        wt.starts_with(fx.server.data_dir.join("worktrees")),
        "{list}"
    );

    started(&fx, "plain", false).await;
    let (code, out, _) = chat_piped(
        &[&alice[..], &["--resume", "plain"]].concat(),
        "/changes\n/merge\n",
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.matches("has no worktree").count(), 2, "{out}");
    assert!(
        out.contains("cannot show the changes: conversation `plain` has no worktree"),
        "{out}"
    );
    assert!(!out.contains("It works in a worktree"), "{out}");
    assert!(!out.contains("Changes on"), "{out}");
}
