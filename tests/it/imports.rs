//! Imports are streamed and stored in bounded chunks that never hold up other principals,
//! are all-or-nothing (a bad line, a full store, a client that goes away, a crash), and are
//! capped per principal together with exports.

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::bodies::rest_as;
use crate::common::*;
use crate::refused::{export_of, import_head};
use crate::security::{TOKENS, connect_as, server_with};

/// How long a test waits for an import (or its failure) to finish.
const IMPORT_WAIT: Duration = Duration::from_secs(180);

/// Posts an import as `token`; `(status, body)`.
pub async fn import(
    server: &TestServer,
    token: &str,
    agent_id: &str,
    body: String,
) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(server.url(&format!("/api/sessions/import?agent_id={agent_id}")))
        .bearer_auth(token)
        .header("content-type", "application/x-ndjson")
        .body(body)
        .timeout(IMPORT_WAIT)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Frames the server has committed to its store so far (`agentmux_stored_frames_total`):
/// imports store theirs in chunks of 1,000 as they arrive.
async fn stored_frames(server: &TestServer) -> u64 {
    metric(server, "agentmux_stored_frames_total").await
}

/// Waits until the server has committed at least `frames` frames.
async fn wait_stored(server: &TestServer, frames: u64) {
    let deadline = tokio::time::Instant::now() + IMPORT_WAIT;
    while stored_frames(server).await < frames {
        assert!(tokio::time::Instant::now() < deadline, "the import starts");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The row id of `agent_id`'s conversation in the database file, visible or not.
async fn row_of(db: &sqlx::AnyPool, agent_id: &str) -> Option<i64> {
    sqlx::query_scalar("select id from session_info where agent_id = $1")
        .bind(agent_id)
        .fetch_optional(db)
        .await
        .unwrap()
}

/// Messages stored under no conversation, or under `agent_id`'s.
async fn rows_left(db: &sqlx::AnyPool, agent_id: &str) -> (Option<i64>, i64) {
    let orphans: i64 = sqlx::query_scalar(
        "select count(*) from messages where session_pk not in (select id from session_info)
           or session_pk in (select id from session_info where agent_id = $1)",
    )
    .bind(agent_id)
    .fetch_one(db)
    .await
    .unwrap();
    (row_of(db, agent_id).await, orphans)
}

/// Stops `server` and checks that its store holds nothing of the import of `agent_id` (no row,
/// visible or not, and no message of it or of no conversation), then starts it again.
async fn nothing_left(server: &mut TestServer, agent_id: &str) {
    let db = server.stop_and_open_db().await;
    assert_eq!(rows_left(&db, agent_id).await, (None, 0), "{agent_id}");
    db.close().await;
    server.restart().await;
}

/// While a big import is being stored, another principal's chat is acked: the ack arrives
/// while the import has stored only part of its rows, and the import then completes.
#[tokio::test]
async fn a_big_import_does_not_hold_another_principals_ack() {
    // Storing (and indexing) 300,000 rows while other tests run can take longer than the
    // default 30 s the body may take to arrive.
    let (server, _cfg) = server_with(&format!("{TOKENS}[socket]\nbody_timeout_secs = 180\n")).await;
    let lines = 300_000;
    let body = export_of(lines);
    let server_url = server.url("/api/sessions/import?agent_id=big");
    let upload = tokio::spawn(async move {
        let resp = reqwest::Client::new()
            .post(server_url)
            .bearer_auth("tok-alice")
            .header("content-type", "application/x-ndjson")
            .body(body)
            .timeout(IMPORT_WAIT)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json::<Value>().await.unwrap_or(Value::Null))
    });
    // A first chunk of the import is stored.
    wait_stored(&server, 1_000).await;
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    let ack = chat_ack(&mut bob, "b", "hello").await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    // Bob's own frames are among them: a handful beside the import's.
    let stored = stored_frames(&server).await;
    eprintln!("bob's ack came with {stored} of {lines} imported rows stored");
    assert!(
        stored < lines as u64,
        "bob's ack waited until the whole import ({stored} rows) was stored"
    );
    let (status, imported) = upload.await.unwrap();
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["message_count"], lines + 1);
    assert_eq!(imported["title"], "question 1");
}

/// An import that fails half-way — a bad line in the middle, or a store that fills up —
/// answers a typed error and leaves no conversation and no message behind; the same
/// `agent_id` imports fine afterwards.
#[tokio::test]
async fn a_failed_import_leaves_nothing_behind() {
    let (mut server, _cfg) = server_with("[store]\nmax_page_count = 2000\n").await;

    let mut body = export_of(5_000);
    let cut = body.match_indices('\n').nth(2_999).unwrap().0 + 1;
    body.insert_str(
        cut,
        "{\"seq\": 3001, \"message_type\": \"user\", \"payload\": 7}\n",
    );
    let (status, err) = import(&server, "none", "bad-line", body).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request"))
    );
    assert!(
        err["error"].as_str().unwrap().contains("line 3001"),
        "{err}"
    );
    nothing_left(&mut server, "bad-line").await;

    // 2,000 pages of 4 KiB hold far less than this (a size limit only SQLite has).
    let mut failed = vec!["bad-line"];
    if !on_postgres() {
        let (status, err) = import(&server, "none", "too-big", export_of(200_000)).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (503, Some("store_unavailable")),
            "{err}"
        );
        let rest = reqwest::get(server.url("/api/sessions/too-big"))
            .await
            .unwrap();
        assert_eq!(rest.status(), 404);
        nothing_left(&mut server, "too-big").await;
        failed.push("too-big");
    }

    for agent_id in &failed {
        let (status, imported) = import(&server, "none", agent_id, export_of(10)).await;
        assert_eq!(status, 201, "{imported}");
        assert_eq!(imported["message_count"], 11);
    }
    // In the store: only what the imports done afresh stored, nothing of the failed ones.
    let db = server.stop_and_open_db().await;
    let conversations: i64 = sqlx::query_scalar("select count(*) from session_info")
        .fetch_one(&db)
        .await
        .unwrap();
    let messages: i64 = sqlx::query_scalar("select count(*) from messages")
        .fetch_one(&db)
        .await
        .unwrap();
    let n = failed.len() as i64;
    assert_eq!((conversations, messages), (n, 11 * n));
}

/// An import under way when the server is killed leaves nothing behind after the restart.
#[tokio::test]
async fn an_import_cut_by_a_crash_is_gone_after_restart() {
    let mut server = TestServer::start().await;
    let url = server.url("/api/sessions/import?agent_id=cut");
    let body = export_of(300_000);
    let upload = tokio::spawn(async move {
        let _ = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await;
    });
    wait_stored(&server, 1_000).await;
    server.kill9().await;
    let _ = upload.await;
    let mut server = TestServer::start_in(&server.data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let rest = reqwest::get(server.url("/api/sessions/cut")).await.unwrap();
    assert_eq!(rest.status(), 404);
    let db = server.stop_and_open_db().await;
    assert_eq!(rows_left(&db, "cut").await, (None, 0));
}

/// Starts imports `held-0` and `held-1` as `token` whose bodies never end, and waits until
/// both hold their places (an export as `token` is refused for want of one). The probing
/// export takes a place for a moment itself, so a held import that arrives meanwhile may be
/// refused: such an import (one the server has answered) is started again.
async fn hold_two_imports(server: &TestServer, token: &str) -> Vec<TcpStream> {
    let first = export_of(1);
    let mut held: Vec<Option<TcpStream>> = vec![None, None];
    let deadline = tokio::time::Instant::now() + IMPORT_WAIT;
    loop {
        for (i, slot) in held.iter_mut().enumerate() {
            let answered = slot.as_ref().is_some_and(|s| {
                let mut buf = [0u8; 64];
                !matches!(s.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            if slot.is_none() || answered {
                let mut s = TcpStream::connect(&server.addr).await.unwrap();
                let head = import_head(&server.addr, &format!("held-{i}"), token, 1 << 20);
                s.write_all(head.as_bytes()).await.unwrap();
                s.write_all(first.as_bytes()).await.unwrap();
                *slot = Some(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        if rest_as(server, token, "GET", "/api/sessions/none/export")
            .await
            .0
            == 429
        {
            return held.into_iter().flatten().collect();
        }
        assert!(tokio::time::Instant::now() < deadline, "the imports start");
    }
}

/// Imports and exports are capped per principal (`session.max_transfers_per_principal`):
/// beyond, 429 `limit_exceeded` at once; another principal is unaffected; an import whose
/// client goes away leaves nothing behind and gives its place back.
#[tokio::test]
async fn concurrent_transfers_are_capped_per_principal() {
    let (mut server, _cfg) = server_with(&format!(
        "{TOKENS}\n[session]\nmax_transfers_per_principal = 2\n"
    ))
    .await;
    let held = hold_two_imports(&server, "tok-alice").await;
    let (status, err) = import(&server, "tok-alice", "third", export_of(10)).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (429, Some("limit_exceeded"))
    );
    let (status, _) = rest_as(&server, "tok-alice", "GET", "/api/sessions/none/export").await;
    assert_eq!(status, 429);
    let (status, _) = import(&server, "tok-bob", "bobs", export_of(10)).await;
    assert_eq!(status, 201);
    // An invisible import is not listed, fetched or exported.
    let (status, list) = rest_as(&server, "tok-alice", "GET", "/api/sessions?total=true").await;
    assert_eq!((status, list["total"].as_i64()), (200, Some(0)));
    drop(held);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, _) = import(&server, "tok-alice", "third", export_of(10)).await;
        if status == 201 {
            break;
        }
        assert_eq!(status, 429);
        assert!(tokio::time::Instant::now() < deadline, "the places free up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Abandoned imports are removed: their names take an import again (`busy` while one is
    // still there), and the store holds only what these imports stored.
    for agent_id in ["held-0", "held-1"] {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, body) = import(&server, "tok-alice", agent_id, export_of(10)).await;
            if status == 201 {
                break;
            }
            assert_eq!(
                (status, body["code"].as_str()),
                (409, Some("busy")),
                "{body}"
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "abandoned imports are removed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let db = server.stop_and_open_db().await;
    for agent_id in ["held-0", "held-1"] {
        let (row, messages) = rows_left(&db, agent_id).await;
        assert!(row.is_some());
        assert_eq!(messages, 11, "{agent_id}: only the new import's messages");
    }
}

/// A line over 16 MiB is refused before it is held, with `invalid_request` naming the line
/// and the limit, and nothing is stored: in an import, and in a CLI session's transcript
/// (whose listing counts what comes before it). Listing a project's CLI sessions reads every
/// transcript, so it takes one of the principal's places for imports and exports, and so does
/// the projects' listing, which counts them: beyond them, 429 `limit_exceeded`, while another
/// principal is served.
#[tokio::test]
async fn long_lines_are_refused_and_cli_listings_share_the_transfer_places() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (app, home) = (base.join("app"), base.join("home"));
    std::fs::create_dir_all(&app).unwrap();
    let (mut server, _cfg) = server_with(&format!(
        "{TOKENS}\n[session]\nmax_transfers_per_principal = 2\n[projects]\nroots = [{{ path = {} }}]\n[claude]\nconfig_dir = {}\n",
        toml_string(&app.to_string_lossy()),
        toml_string(&home.to_string_lossy())
    ))
    .await;
    let long = format!("question {}", "x".repeat(16 << 20));

    let mut body = export_of(1);
    body.push_str(
        &serde_json::json!({"seq": 2, "message_type": "user",
            "payload": {"type": "user", "message": {"role": "user", "content": long}}})
        .to_string(),
    );
    body.push('\n');
    let (status, err) = import(&server, "tok-alice", "long", body).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request")),
        "{err}"
    );
    let text = err["error"].as_str().unwrap();
    assert!(text.contains("line 2 is longer than 16 MiB"), "{text}");

    let id = "7b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    let line = |content: &str| {
        crate::projects::transcript_line("user", "u", id, &app, serde_json::json!(content))
    };
    let transcript = format!("{}\n{}\n", line("first"), line(&long));
    crate::projects::write_transcript(&home, &app, id, &transcript);
    let list = format!("/api/projects/cli-sessions?cwd={}", app.to_string_lossy());
    let (status, listed) = rest_as(&server, "tok-alice", "GET", &list).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["sessions"][0]["message_count"], 1, "{listed}");
    let resp = reqwest::Client::new()
        .post(server.url("/api/projects/cli-sessions/import"))
        .bearer_auth("tok-alice")
        .json(&serde_json::json!({"cwd": app, "cli_session_id": id}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let err: Value = resp.json().await.unwrap();
    let text = err["error"].as_str().unwrap();
    assert!(text.contains("line 2 is longer than 16 MiB"), "{text}");

    // The projects' listing counts CLI sessions by reading the start of every transcript: the
    // long line after the first is never reached.
    let (status, projects) = rest_as(&server, "tok-alice", "GET", "/api/projects").await;
    assert_eq!(status, 200, "{projects}");
    assert_eq!(projects["projects"][0]["cli_sessions"], 1, "{projects}");

    let held = hold_two_imports(&server, "tok-alice").await;
    for path in [list.as_str(), "/api/projects"] {
        let (status, err) = rest_as(&server, "tok-alice", "GET", path).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (429, Some("limit_exceeded")),
            "{path}: {err}"
        );
        let (status, _) = rest_as(&server, "tok-bob", "GET", path).await;
        assert_eq!(status, 200, "{path}");
    }
    drop(held);
    let db = server.stop_and_open_db().await;
    assert_eq!(rows_left(&db, "long").await, (None, 0));
    assert_eq!(rows_left(&db, id).await, (None, 0));
}
