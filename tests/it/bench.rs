//! `agentmux bench` (which runs `agentmux-bench`) against this build: a short load scenario
//! reports both servers with frames per server CPU-second, and the baseline answers a chat
//! with the frames agentmux's demo agent sends, frame type for frame type and about byte for
//! byte in size.

use std::process::Stdio;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// A short `many-sessions` run: both servers complete turns without errors, and the report
/// has frames per CPU-second for each with the ratio.
#[tokio::test]
async fn a_short_scenario_reports_both_servers_per_cpu_second() {
    let (stdout, report) = run_bench(&[
        "many-sessions",
        "--secs",
        "1",
        "--sessions",
        "8",
        "--sockets",
        "2",
    ])
    .await;
    assert!(stdout.contains("frames/CPU-s"), "{stdout}");
    let row = &report["rows"][0];
    for server in ["baseline", "agentmux"] {
        let m = &row[server];
        assert_eq!(m["server"], server, "{m}");
        assert!(m["turns"].as_u64().unwrap() > 0, "{m}");
        assert_eq!(m["errors"], 0, "{m}");
        assert!(m["server_cpu_secs"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["frames_per_cpu_sec"].as_f64().unwrap() > 0.0, "{m}");
    }
    assert!(row["vs_baseline"]["frames_per_cpu_sec"].as_f64().unwrap() > 0.0);
}

/// A tiny `cli` run: the baseline relaying the fake CLI and agentmux on its Claude backend both
/// complete turns without errors and time stamped lines of both kinds, and the report says what
/// agentmux adds to the relay's latency.
#[tokio::test]
async fn a_tiny_cli_run_reports_what_agentmux_adds_to_a_bare_relay() {
    sibling("fake-claude");
    let (stdout, report) =
        run_bench(&["cli", "--secs", "1", "--sessions", "2", "--words", "5"]).await;
    assert!(stdout.contains("agentmux adds"), "{stdout}");
    for server in ["baseline", "agentmux"] {
        let run = &report[server];
        assert!(run["turns"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(run["errors"], 0, "{run}");
        for kind in ["live", "stored"] {
            assert!(run[kind]["count"].as_u64().unwrap() > 0, "{run}");
        }
    }
    for figure in ["live_p50", "live_p99", "stored_p50", "stored_p99"] {
        assert!(report["added_ms"][figure].is_f64(), "{report}");
    }
}

/// The baseline's `--relay-cli` must name an executable file: a missing path, a directory or a
/// value that reads like a flag is refused before it listens.
#[tokio::test]
async fn the_baseline_refuses_a_relay_cli_that_is_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for value in [
        missing.to_string_lossy().into_owned(),
        dir.path().to_string_lossy().into_owned(),
        "-p".to_owned(),
    ] {
        let out = tokio::process::Command::new(sibling("agentmux-bench"))
            .args(["baseline", &format!("--relay-cli={value}")])
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{value:?} was accepted");
        assert!(stderr.contains("no CLI at"), "{value:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{value:?}: it listened");
    }
}

/// `sweep --fractions` paces only at the fractions asked for, after the closed-loop peak;
/// fractions that are no share of the peak are refused before anything starts.
#[tokio::test]
async fn a_sweep_paces_at_the_fractions_asked_for() {
    let (_, report) = run_bench(&[
        "sweep",
        "--fractions",
        "0.5",
        "--secs",
        "1",
        "--sessions",
        "8",
        "--no-baseline",
    ])
    .await;
    let labels: Vec<&str> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["peak", "50% of peak"], "{report}");
    let paced = &report["rows"][1]["agentmux"];
    assert!(paced["turns"].as_u64().unwrap() > 0, "{paced}");
    for fractions in ["0", "1.5", "-0.5", ""] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args(["bench", "sweep", &format!("--fractions={fractions}")])
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{fractions:?} was accepted");
        assert!(stderr.contains("--fractions"), "{fractions:?}: {stderr}");
    }
}

/// A tiny `cluster` run: one node and three both complete turns without errors; on three nodes
/// every chat went through nodes 2 and 3 to node 1 and its frames came back relayed; the
/// databases the run made are gone afterwards.
#[cfg_attr(
    any(no_test_pg, no_test_nats),
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL) and nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
#[tokio::test]
async fn a_tiny_cluster_run_forwards_every_chat_and_leaves_no_database() {
    let Some(pg) = pg_url() else {
        eprintln!("skipped: AGENTMUX_TEST_PG_URL is not set (see scripts/pg.sh)");
        return;
    };
    let Some(nats) = nats_bin() else { return };
    let (stdout, report) = run_bench(&[
        "cluster",
        "--store-server-url",
        &pg,
        "--nats-bin",
        &nats,
        "--sessions",
        "4",
        "--secs",
        "1",
    ])
    .await;
    assert!(stdout.contains("a forwarded chat adds"), "{stdout}");
    for setup in ["one_node", "three_nodes"] {
        let m = &report[setup];
        assert_eq!(m["sessions"], 4, "{m}");
        assert!(m["turns"].as_u64().unwrap() > 0, "{m}");
        assert!(m["stored_frames"].as_u64().unwrap() > 0, "{m}");
        assert_eq!(m["errors"], 0, "{m}");
    }
    let three = &report["three_nodes"];
    let turns = three["turns"].as_u64().unwrap();
    // One forwarded chat per measured turn, plus the warm-up's one per session.
    assert!(
        report["forwarded_commands"].as_u64().unwrap() >= turns + 4,
        "{report}"
    );
    // Every frame the sockets got was relayed from node 1, but the acks of their chats.
    let delivered = three["delivered_frames"].as_u64().unwrap();
    assert!(
        report["relayed_frames"].as_u64().unwrap() + turns + 4 >= delivered,
        "{report}"
    );
    for figure in ["first_token_p50", "first_token_p99", "result_p99"] {
        assert!(report["added_ms"][figure].is_f64(), "{report}");
    }
    assert!(report["ratio"]["turns_per_sec"].as_f64().unwrap() > 0.0);

    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&pg).await.unwrap();
    for name in report["params"]["databases"].as_array().unwrap() {
        let left: Option<String> =
            sqlx::query_scalar("select datname::text from pg_database where datname = $1")
                .bind(name.as_str().unwrap())
                .fetch_optional(&mut conn)
                .await
                .unwrap();
        assert_eq!(left, None, "the run left database {name}");
    }
    conn.close().await.unwrap();
}

/// Options of `cluster` that can't work are refused before anything starts, without echoing
/// a URL's password.
#[tokio::test]
async fn cluster_options_that_cannot_work_are_refused() {
    sibling("agentmux-bench");
    let url = "postgres://u:secret@127.0.0.1:1/x";
    for (args, expected) in [
        (
            vec!["--store-server-url", "mysql://u:secret@h/db"],
            "must be a postgres:// or postgresql:// URL",
        ),
        (
            vec!["--store-server-url", url, "--nats-bin", "/nonexistent/nats"],
            "cannot run nats-server",
        ),
        (
            vec!["--store-server-url", url, "--sessions", "0"],
            "--sessions must be at least 1",
        ),
        (
            vec!["--store-server-url", url, "--no-baseline"],
            "--no-baseline does not apply",
        ),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .arg("bench")
            .arg("cluster")
            .args(&args)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("secret"), "{args:?}: {stderr}");
    }
}

/// Runs `agentmux bench ARGS --json FILE`, which must succeed: its table and its JSON report.
pub async fn run_bench(args: &[&str]) -> (String, Value) {
    sibling("agentmux-bench");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(180),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .arg("bench")
            .args(args)
            .arg("--json")
            .arg(&report)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the scenario finishes in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    (stdout, report)
}

/// One turn's frames, in order, until its `result`; `status` frames left out (agentmux says
/// `busy` and `idle`, the baseline has no such state).
async fn one_turn(addr: &str) -> Vec<String> {
    let mut c = Client::connect(addr).await;
    let chat = json!({"type": "chat", "agent_id": "same", "content": "the very same words"});
    c.send(chat).await;
    let mut frames = Vec::new();
    loop {
        let msg = tokio::time::timeout(WAIT, c.ws.next())
            .await
            .expect("a frame in time")
            .expect("socket open")
            .unwrap();
        let Message::Text(text) = msg else { continue };
        let text = text.as_str().to_owned();
        let v: Value = serde_json::from_str(&text).unwrap();
        if v["message_type"] == "status" {
            continue;
        }
        frames.push(text);
        if v["message_type"] == "result" {
            return frames;
        }
    }
}

fn kind(text: &str) -> String {
    serde_json::from_str::<Value>(text).unwrap()["message_type"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn the_baseline_sends_agentmuxs_frames() {
    let server = TestServer::start().await;
    let mut baseline = tokio::process::Command::new(sibling("agentmux-bench"))
        .args(["baseline", "--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(baseline.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let baseline_addr = line.strip_prefix("listening on http://").unwrap();

    let ours = one_turn(&server.addr).await;
    let theirs = one_turn(baseline_addr).await;
    let kinds = |frames: &[String]| frames.iter().map(|f| kind(f)).collect::<Vec<_>>();
    assert_eq!(kinds(&theirs), kinds(&ours));
    for (a, b) in ours.iter().zip(&theirs) {
        // Ids and timestamps have the same lengths; numbers (duration, cost) may not.
        assert!(
            a.len().abs_diff(b.len()) <= 24,
            "sizes differ by more than a few digits:\nagentmux: {a}\nbaseline: {b}"
        );
    }
}
