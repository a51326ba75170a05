//! Faults: the server killed with -9 under load, and a store that runs out of room.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

/// Three cycles of the `kill -9` harness: load on many sessions, a kill at a random moment, a
/// restart on the same data dir; nothing a client saw may be lost or differ, seqs stay
/// gap-free, the database stays sound and every session answers again.
#[cfg_attr(
    test_store_postgres,
    ignore = "SQLite only: the kill -9 harness of agentmux bench runs its own server on SQLite"
)]
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

/// A store at its size limit answers chats with typed `store_unavailable` errors while the
/// server keeps serving; the database stays sound, and once there is room again (a restart
/// with a higher limit) the same conversation carries on with gap-free seqs.
#[cfg_attr(
    test_store_postgres,
    ignore = "SQLite only: the store's size limit is SQLite's max_page_count"
)]
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

    assert!(server.terminate().await.success());
    assert_eq!(server.integrity().await.as_deref(), Some("ok"));
    let db = server.db().await;
    let prompts: i64 =
        sqlx::query_scalar("select prompt_count from session_info where agent_id = 'big'")
            .fetch_one(&db)
            .await
            .unwrap();
    db.close().await;
    let big_args = args(&big);
    let big_args: Vec<&str> = big_args.iter().map(String::as_str).collect();
    let mut server = TestServer::start_in(data.path(), &big_args, &[]).await;
    let mut c = server.client().await;
    c.chat("big", "room again").await;
    let frames = c.until_result("big").await;
    assert_eq!(
        reply_text(&frames),
        format!("Echo: room again (turn {})", prompts + 1),
        "the agent remembers every stored turn"
    );
    let db = server.stop_and_open_db().await;
    assert_eq!(server.integrity().await.as_deref(), Some("ok"));
    let (count, last_seq, max_seq): (i64, i64, i64) = sqlx::query_as(
        "select count(*), s.last_seq, max(m.seq) from messages m join session_info s on s.id = m.session_pk
         where s.agent_id = 'big'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!((count, max_seq), (last_seq, last_seq));
}

/// On a full disk (the server's files can't grow: a commit's write to the WAL fails), chats
/// fail with `store_unavailable`, a chat to a new conversation too (over the socket, and 503
/// over REST), never `busy` as though an import held its name; the server keeps serving, and
/// the database stays sound.
#[cfg_attr(
    test_store_postgres,
    ignore = "SQLite only: the disk in question holds the SQLite file"
)]
#[tokio::test]
async fn a_full_disk_fails_new_conversations_with_store_unavailable() {
    let data = tempfile::tempdir().unwrap();
    let args = ["--demo-delay-ms", "0"];
    let limit = 2 << 20;
    let mut server = TestServer::start_in_limited(data.path(), &args, &[], Some(limit)).await;
    let mut c = server.client().await;
    // Full means that no write fits anywhere: neither in the database file, which the
    // checkpointer fills from the WAL (after which the WAL starts over and takes writes
    // again), nor at the end of the WAL, where a smaller write may fit after a bigger one
    // failed. So: 60 KB turns until the database file can't grow by a page, then turns of one
    // letter until one fails too.
    let db_len = || {
        std::fs::metadata(data.path().join("agentmux.db"))
            .unwrap()
            .len()
    };
    let mut full = None;
    // Set once a checkpoint could not grow the database file: it can't take the WAL's pages.
    let mut db_stuck = false;
    for _ in 0..1000 {
        let db_full = db_stuck || db_len() + 4096 > limit;
        let content = if db_full {
            "x".to_owned()
        } else {
            "x".repeat(20_000)
        };
        c.chat("big", &content).await;
        let frames = c
            .recv_until(|v| {
                v["agent_id"] == "big"
                    && (v["message_type"] == "result" || v["message_type"] == "error")
            })
            .await;
        let last = frames.last().unwrap().clone();
        if last["message_type"] != "error" {
            continue;
        }
        assert_eq!(last["code"], "store_unavailable", "{last}");
        if db_full {
            full = Some(last);
            break;
        }
        // The WAL is full: the checkpointer copies it into the database file, which grows,
        // unless the file can't grow by what the copy needs (then it is full as well).
        let before = db_len();
        let deadline = tokio::time::Instant::now() + WAIT;
        while db_len() == before && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        db_stuck = db_len() == before;
    }
    full.expect("the disk filled up within 1000 turns");

    // The last turn of "big" may still be streaming (only its output failed to be stored),
    // and its result may fail too: only "new-one"'s frames count here.
    c.chat("new-one", "hello").await;
    let new_one = c
        .recv_until(|v| {
            v["agent_id"] == "new-one"
                && (v["message_type"] == "error" || v["message_type"] == "result")
        })
        .await;
    let last = new_one.last().unwrap();
    assert_eq!(
        (&last["code"], &last["agent_id"]),
        (&json!("store_unavailable"), &json!("new-one")),
        "{last}"
    );
    let rest = crate::rest::Rest::new(&server);
    let (status, body) = rest
        .post(
            "/api/sessions/new-two/messages",
            json!({"content": "hello"}),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("store_unavailable")),
        "{body}"
    );
    c.send(json!({"type": "ping", "ts": 7})).await;
    let pong = c.recv_until(|v| v["message_type"] == "pong").await;
    assert_eq!(pong.last().unwrap()["ts"], 7);
    server.terminate().await;
    assert_eq!(server.integrity().await.as_deref(), Some("ok"));
}

/// Another process truncating the store's `-shm` file and making it unreadable doesn't end the
/// server (SQLite's WAL index is not a memory-mapped file, whose truncation would end it with
/// `SIGBUS` at its next read): chats, a new conversation and history pages go on, and the
/// server stops cleanly when asked.
#[cfg_attr(test_store_postgres, ignore = "SQLite only: the -shm file is SQLite's")]
#[tokio::test]
async fn a_truncated_shm_file_does_not_end_the_server() {
    use std::os::unix::fs::PermissionsExt;
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    chat_ack(&mut c, "before", "one").await;
    c.until_result("before").await;
    let shm = server.data_dir.join("agentmux.db-shm");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&shm)
        .unwrap();
    std::fs::set_permissions(&shm, std::fs::Permissions::from_mode(0o000)).unwrap();

    let rest = crate::rest::Rest::new(&server);
    for (agent, text, turn) in [("before", "two", 2), ("after", "three", 1)] {
        let (status, page) = rest.get("/api/sessions/before/messages").await;
        assert_eq!(status, 200, "{page}");
        chat_ack(&mut c, agent, text).await;
        assert_eq!(
            reply_text(&c.until_result(agent).await),
            format!("Echo: {text} (turn {turn})")
        );
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "the server is still running"
        );
    }
    assert_eq!(turns_of(&rest, "before").await, (2, 2, 0));
    let status = server.terminate().await;
    assert!(status.success(), "a clean stop, not a signal: {status:?}");
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
    assert_eq!(reply_text(&frames), "Echo: again (turn 3)");
    assert!(server.terminate().await.success());

    let server = TestServer::start_in(data.path(), &["--demo-delay-ms", "0"], &[]).await;
    let rest = crate::rest::Rest::new(&server);
    assert_eq!(turns_of(&rest, "run").await, (3, 2, 1));
    assert_eq!(turns_of(&rest, "rw").await, (1, 1, 0));
    let (_, imp) = rest.get("/api/sessions/imp").await;
    assert_eq!(imp["message_count"], 2001);
}

/// Clients of the load in [`kill9_loses_no_frame_a_client_saw`].
const KILL9_CLIENTS: usize = 4;
/// Stored frames every client must have received before the kill.
const KILL9_MIN_FRAMES: usize = 12;

/// One load client: chats in turn on `sessions` until the server dies, and returns the text of
/// every frame it received, verbatim. It must connect: a client that can't is a failure.
async fn load_client(
    addr: String,
    n: usize,
    sessions: Vec<String>,
    seen: Arc<AtomicUsize>,
) -> Vec<String> {
    let mut c = Client::connect(&addr).await;
    let mut frames = Vec::new();
    for round in 0.. {
        for agent in &sessions {
            let chat = json!({"type": "chat", "agent_id": agent, "content": format!("client {n} round {round}")});
            if c.ws.send(Message::text(chat.to_string())).await.is_err() {
                // The server was killed.
                return frames;
            }
            loop {
                let msg = match tokio::time::timeout(WAIT, c.ws.next()).await {
                    Ok(Some(Ok(msg))) => msg,
                    // The server was killed.
                    Ok(None | Some(Err(_))) => return frames,
                    Err(_) => panic!("client {n}: no frame in time"),
                };
                let Message::Text(text) = msg else { continue };
                let v: Value = serde_json::from_str(text.as_str()).unwrap();
                if v["seq"].is_i64() && v["message_type"] != "ack" {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
                frames.push(text.as_str().to_owned());
                if v["message_type"] == "result" && v["agent_id"] == agent.as_str() {
                    break;
                }
            }
        }
    }
    unreachable!()
}

/// A conversation's stored frames as a fresh subscriber gets them: `seq` to the frame's text.
async fn replay_raw(addr: &str, agent_id: &str) -> BTreeMap<i64, String> {
    let mut c = Client::connect(addr).await;
    c.send(json!({"type": "subscribe", "agent_id": agent_id, "since_seq": 0}))
        .await;
    c.send(json!({"type": "ping", "ts": "replayed"})).await;
    let mut stored = BTreeMap::new();
    loop {
        let msg = tokio::time::timeout(WAIT, c.ws.next())
            .await
            .expect("the replay in time")
            .expect("socket open")
            .expect("no socket error");
        let Message::Text(text) = msg else { continue };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        if v["message_type"] == "pong" {
            return stored;
        }
        assert_eq!(v["agent_id"], agent_id, "{v}");
        let seq = v["seq"].as_i64().expect("a replayed frame has a seq");
        assert!(
            stored.insert(seq, text.as_str().to_owned()).is_none(),
            "seq {seq} twice"
        );
    }
}

/// Kill -9 under load, twice: clients chat on shared conversations, the server is killed once
/// every client has seen frames, and restarted on the same data dir. Every client connected and
/// is counted; every stored frame any client received is in the store afterwards, byte for
/// byte as that client got it; seqs have no gaps; unfinished turns are closed; the database is
/// sound; every conversation takes a new turn with the agent remembering every stored one.
#[tokio::test]
async fn kill9_loses_no_frame_a_client_saw() {
    let data = tempfile::tempdir().unwrap();
    let args = ["--demo-delay-ms", "5"];
    // Each conversation is shared by two clients.
    let sessions_of =
        |n: usize| -> Vec<String> { (0..3).map(|j| format!("k9-{}-{j}", n % 2)).collect() };
    let all_sessions: Vec<String> = (0..2).flat_map(sessions_of).collect();
    for cycle in 0..2 {
        let mut server = TestServer::start_in(data.path(), &args, &[]).await;
        let counters: Vec<Arc<AtomicUsize>> = (0..KILL9_CLIENTS).map(|_| Arc::default()).collect();
        let clients: Vec<_> = counters
            .iter()
            .enumerate()
            .map(|(n, seen)| {
                tokio::spawn(load_client(
                    server.addr.clone(),
                    n,
                    sessions_of(n),
                    seen.clone(),
                ))
            })
            .collect();
        let deadline = tokio::time::Instant::now() + WAIT;
        while counters
            .iter()
            .any(|c| c.load(Ordering::Relaxed) < KILL9_MIN_FRAMES)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "cycle {cycle}: load did not start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Somewhere within the next few turns.
        let jitter = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
            % 200;
        tokio::time::sleep(std::time::Duration::from_millis(jitter.into())).await;
        server.kill9().await;
        let mut received = Vec::new();
        for (n, client) in clients.into_iter().enumerate() {
            let frames = client.await.unwrap_or_else(|e| panic!("client {n}: {e}"));
            received.push(frames);
        }
        assert_eq!(received.len(), KILL9_CLIENTS);

        let server = TestServer::start_in(data.path(), &args, &[]).await;
        let mut store: HashMap<String, BTreeMap<i64, String>> = HashMap::new();
        for agent in &all_sessions {
            let replay = replay_raw(&server.addr, agent).await;
            let seqs: Vec<i64> = replay.keys().copied().collect();
            assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "{agent}");
            store.insert(agent.clone(), replay);
        }
        for (n, frames) in received.iter().enumerate() {
            let mut checked = 0;
            for text in frames {
                let v: Value = serde_json::from_str(text).unwrap();
                let Some(seq) = v["seq"].as_i64() else {
                    continue;
                };
                if v["message_type"] == "ack" {
                    continue;
                }
                let agent = v["agent_id"].as_str().unwrap();
                assert_eq!(
                    store[agent].get(&seq),
                    Some(text),
                    "cycle {cycle}, client {n}: {agent} seq {seq} lost or changed after kill -9"
                );
                checked += 1;
            }
            assert!(
                checked >= KILL9_MIN_FRAMES,
                "cycle {cycle}, client {n}: {checked} frames"
            );
        }
        // Every turn ended: the last stored frame of each conversation is a result. (A
        // conversation whose first chat the kill came before has nothing stored: the clients
        // take their conversations in turn, and the kill waits only for frames on some.)
        for (agent, replay) in &store {
            let Some((_, last)) = replay.last_key_value() else {
                continue;
            };
            let last: Value = serde_json::from_str(last).unwrap();
            assert_eq!(last["message_type"], "result", "{agent}: {last}");
        }
        let mut c = server.client().await;
        for agent in &all_sessions {
            let prompts = store[agent]
                .values()
                .map(|t| serde_json::from_str::<Value>(t).unwrap())
                .filter(|v| {
                    v["message_type"] == "user" && v["message"]["message"]["content"].is_string()
                })
                .count();
            chat_ack(&mut c, agent, "after the kill").await;
            assert_eq!(
                reply_text(&c.until_result(agent).await),
                format!("Echo: after the kill (turn {})", prompts + 1)
            );
        }
        drop(c);
        let mut server = server;
        assert!(server.terminate().await.success());
        if let Some(check) = server.integrity().await {
            assert_eq!(check, "ok");
        }
    }
}
