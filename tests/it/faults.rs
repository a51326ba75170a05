//! Faults: the server killed with -9 under load, and a store that runs out of room.

use serde_json::{Value, json};

use crate::common::*;

/// Three cycles of the `kill -9` harness: load on many sessions, a kill at a random moment, a
/// restart on the same data dir; nothing a client saw may be lost or differ, seqs stay
/// gap-free, the database stays sound and every session answers again.
#[tokio::test]
async fn kill9_under_load_loses_nothing() {
    sibling("agentmux-bench");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("kill9.json");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(300),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args([
                "bench",
                "kill9",
                "--cycles",
                "3",
                "--clients",
                "3",
                "--sessions",
                "4",
            ])
            .arg("--json")
            .arg(&report)
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the harness finishes in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "harness failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outcome: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(outcome["cycles"], 3, "{outcome}");
    assert_eq!(outcome["sessions"], 12);
    assert_eq!(outcome["clients"], 3);
    assert!(
        outcome["frames_received"].as_u64().unwrap() > 0,
        "{outcome}"
    );
    for key in [
        "clients_failed",
        "frames_lost",
        "frames_differing",
        "seq_gaps",
        "orphan_rows",
        "integrity_errors",
        "not_resumable",
    ] {
        assert_eq!(outcome[key], 0, "{key}: {outcome}");
    }
}

async fn integrity(server: &TestServer) -> String {
    let db = server.db().await;
    let verdict: String = sqlx::query_scalar("pragma integrity_check")
        .fetch_one(&db)
        .await
        .unwrap();
    db.close().await;
    verdict
}

/// A store at its size limit answers chats with typed `store_unavailable` errors while the
/// server keeps serving; the database stays sound, and once there is room again (a restart
/// with a higher limit) the same conversation carries on with gap-free seqs.
#[tokio::test]
async fn a_full_store_fails_chats_cleanly_and_recovers() {
    let conf = tempfile::tempdir().unwrap();
    let small = conf.path().join("small.toml");
    std::fs::write(&small, "[store]\nmax_page_count = 64\n").unwrap();
    let big = conf.path().join("big.toml");
    std::fs::write(&big, "[store]\nmax_page_count = 0\n").unwrap();
    let data = tempfile::tempdir().unwrap();
    let args = |config: &std::path::Path| {
        vec![
            "--demo-delay-ms".to_owned(),
            "0".to_owned(),
            "--config".to_owned(),
            config.to_str().unwrap().to_owned(),
        ]
    };
    let small_args = args(&small);
    let small_args: Vec<&str> = small_args.iter().map(String::as_str).collect();
    let mut server = TestServer::start_in(data.path(), &small_args, &[]).await;
    let mut c = server.client().await;
    let content = "x".repeat(20_000);
    let mut full = None;
    for _ in 0..40 {
        c.chat("big", &content).await;
        let frames = c
            .recv_until(|v| {
                v["agent_id"] == "big"
                    && (v["message_type"] == "result" || v["message_type"] == "error")
            })
            .await;
        let last = frames.last().unwrap().clone();
        if last["message_type"] == "error" {
            full = Some(last);
            break;
        }
    }
    let full = full.expect("the store filled up within 40 turns of 60 KB");
    assert_eq!(full["code"], "store_unavailable", "{full}");

    // Still serving: pings, and further chats fail with the same typed error.
    c.send(json!({"type": "ping", "ts": 7})).await;
    let pong = c.recv_until(|v| v["message_type"] == "pong").await;
    assert_eq!(pong.last().unwrap()["ts"], 7);
    c.chat("big", &content).await;
    let again = c
        .recv_until(|v| v["message_type"] == "error" || v["message_type"] == "result")
        .await;
    assert_eq!(again.last().unwrap()["code"], "store_unavailable");
    assert_eq!(integrity(&server).await, "ok");

    assert!(server.terminate().await.success());
    let big_args = args(&big);
    let big_args: Vec<&str> = big_args.iter().map(String::as_str).collect();
    let server = TestServer::start_in(data.path(), &big_args, &[]).await;
    let mut c = server.client().await;
    c.chat("big", "room again").await;
    let frames = c.until_result("big").await;
    assert!(
        reply_text(&frames).starts_with("Echo: room again (turn "),
        "{frames:?}"
    );
    assert_eq!(integrity(&server).await, "ok");
    let db = server.db().await;
    let (count, last_seq, max_seq): (i64, i64, i64) = sqlx::query_as(
        "select count(*), s.last_seq, max(m.seq) from messages m join session_info s on s.id = m.session_pk
         where s.agent_id = 'big'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!((count, max_seq), (last_seq, last_seq));
}

/// `(prompts, results)` among a conversation's stored messages, and how many results say
/// `server_restart`.
async fn turns_of(rest: &crate::rest::Rest, agent_id: &str) -> (usize, usize, usize) {
    let (status, page) = rest
        .get(&format!("/api/sessions/{agent_id}/messages?limit=1000"))
        .await;
    assert_eq!(status, 200, "{page}");
    let messages = page["messages"].as_array().unwrap();
    let prompts = messages
        .iter()
        .filter(|m| m["message_type"] == "user" && m["message"]["message"]["content"].is_string())
        .count();
    let results: Vec<&Value> = messages
        .iter()
        .filter(|m| m["message_type"] == "result")
        .collect();
    let restarts = results
        .iter()
        .filter(|m| m["message"]["terminal_reason"] == "server_restart")
        .count();
    (prompts, results.len(), restarts)
}

/// After a `kill -9`, the next start closes exactly the turn that was running, with one
/// `server_restart` result. Prompts that never ran get no result and stay as they were: the
/// one queued behind the running turn, and an imported transcript's unanswered prompts (no
/// matter how many). Conversations rewound or forked to an earlier turn get nothing either. A
/// later restart adds nothing.
#[tokio::test]
async fn a_restart_closes_only_the_turn_that_was_running() {
    let data = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(data.path(), &["--demo-delay-ms", "20"], &[]).await;
    let rest = crate::rest::Rest::new(&server);
    let mut c = server.client().await;
    // Two turns, the second queued behind the first; a rewind and a fork back to the end of
    // the first drop the second turn, prompt and all, so nothing is left open there.
    assert_eq!(chat_ack(&mut c, "rw", "first").await["queue_position"], 0);
    assert_eq!(chat_ack(&mut c, "rw", "second").await["queue_position"], 1);
    let frames = c
        .recv_until(|v| v["message_type"] == "status" && v["status"] == "idle")
        .await;
    let first_result = frames
        .iter()
        .find(|v| v["message_type"] == "result")
        .unwrap()["seq"]
        .as_i64()
        .unwrap();
    let (status, _) = rest
        .post("/api/sessions/rw/rewind", json!({"to_seq": first_result}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = rest
        .post(
            "/api/sessions/rw/fork",
            json!({"new_agent_id": "fk", "at_seq": first_result}),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(turns_of(&rest, "rw").await, (1, 1, 0));
    assert_eq!(turns_of(&rest, "fk").await, (1, 1, 0));
    // An imported transcript of prompts without results.
    let export: String = (0..2000)
        .map(|i| {
            let line = json!({"seq": i + 1, "message_type": "user", "payload":
                {"type": "user", "message": {"role": "user", "content": format!("p{i}")}}});
            format!("{line}\n")
        })
        .collect();
    let imported = rest
        .http
        .post(server.url("/api/sessions/import?agent_id=imp"))
        .header("content-type", "application/x-ndjson")
        .body(export)
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status(), 201);
    server.kill9().await;

    // A turn running (its agent slow) with another queued behind it when the server dies.
    let mut server = TestServer::start_in(data.path(), &["--demo-delay-ms", "60000"], &[]).await;
    let mut c = server.client().await;
    assert_eq!(chat_ack(&mut c, "run", "slow").await["queue_position"], 0);
    assert_eq!(chat_ack(&mut c, "run", "queued").await["queue_position"], 1);
    server.kill9().await;

    let mut server = TestServer::start_in(data.path(), &["--demo-delay-ms", "0"], &[]).await;
    let rest = crate::rest::Rest::new(&server);
    assert_eq!(turns_of(&rest, "run").await, (2, 1, 1));
    assert_eq!(turns_of(&rest, "rw").await, (1, 1, 0));
    assert_eq!(turns_of(&rest, "fk").await, (1, 1, 0));
    let (_, imp) = rest.get("/api/sessions/imp").await;
    assert_eq!(
        (&imp["message_count"], &imp["turn_count"]),
        (&json!(2001), &json!(2000))
    );
    // The conversations carry on.
    let mut c = server.client().await;
    chat_ack(&mut c, "run", "again").await;
    let frames = c.until_result("run").await;
    assert!(reply_text(&frames).starts_with("Echo: again"), "{frames:?}");
    assert!(server.terminate().await.success());

    let server = TestServer::start_in(data.path(), &["--demo-delay-ms", "0"], &[]).await;
    let rest = crate::rest::Rest::new(&server);
    assert_eq!(turns_of(&rest, "run").await, (3, 2, 1));
    assert_eq!(turns_of(&rest, "rw").await, (1, 1, 0));
    let (_, imp) = rest.get("/api/sessions/imp").await;
    assert_eq!(imp["message_count"], 2001);
}
