//! The store's identity invariants, on both engines (a real SQLite file and a real PostgreSQL
//! database): NULL detection, capture, resume data, foreign keys and cascades, seq assignment,
//! rewinds, and closing unfinished turns.

use std::sync::Arc;

use agentmux::metrics::Metrics;
use agentmux::store::postgres::{PgSettings, PgStore};
use agentmux::store::sqlite::{SqliteSettings, SqliteStore};
use agentmux::store::{NewMessage, NewSession, RowId, RunningTurn, Store};

use crate::common::{create_database, drop_database, pg_url};

/// One engine's store for one test: a SQLite file in a temporary directory, or a PostgreSQL
/// database of its own (dropped at the end).
struct Fixture {
    dir: tempfile::TempDir,
    /// The test server's URL and this test's database on it, on PostgreSQL.
    pg: Option<(String, String)>,
}

impl Fixture {
    fn sqlite() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            pg: None,
        }
    }

    /// None (after saying so) when no PostgreSQL server is configured outside CI.
    async fn postgres() -> Option<Self> {
        let Some(server) = pg_url() else {
            eprintln!("skipped: AGENTMUX_TEST_PG_URL is not set (see scripts/pg.sh)");
            return None;
        };
        let name = format!("agentmux_store_{}", uuid::Uuid::new_v4().simple());
        create_database(&server, &name).await;
        Some(Fixture {
            dir: tempfile::tempdir().unwrap(),
            pg: Some((server, name)),
        })
    }

    /// The URL of this test's PostgreSQL database.
    fn pg_url(&self) -> Option<String> {
        self.pg
            .as_ref()
            .map(|(server, name)| crate::common::with_database(server, name))
    }

    /// Opens (again) this test's store.
    async fn open(&self) -> Arc<dyn Store> {
        match self.pg_url() {
            Some(url) => Arc::new(
                PgStore::open(&url, PgSettings::default(), Metrics::default())
                    .await
                    .unwrap(),
            ),
            None => Arc::new(
                SqliteStore::open(
                    &self.dir.path().join("agentmux.db"),
                    SqliteSettings::default(),
                    Metrics::default(),
                )
                .await
                .unwrap(),
            ),
        }
    }

    /// A connection to the same database, for checks in SQL both engines take.
    async fn sql(&self) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        let url = self.pg_url().unwrap_or_else(|| {
            format!(
                "sqlite://{}",
                self.dir.path().join("agentmux.db").to_str().unwrap()
            )
        });
        sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .unwrap()
    }

    /// Starts a server on this test's store.
    async fn server(&self) -> crate::common::TestServer {
        let url = self.pg_url().unwrap_or_default();
        crate::common::TestServer::start_in(
            self.dir.path(),
            &["--demo-delay-ms", "0"],
            &[("AGENTMUX_STORE_URL", url.as_str())],
        )
        .await
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some((server, name)) = &self.pg {
            drop_database(server, name);
        }
    }
}

/// Each named `async fn(Fixture)` becomes a module of two tests: `sqlite` and `postgres`.
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    super::$name(super::Fixture::sqlite()).await;
                }

                #[tokio::test]
                async fn postgres() {
                    if let Some(fixture) = super::Fixture::postgres().await {
                        super::$name(fixture).await;
                    }
                }
            }
        )*
    };
}

on_both_engines!(
    sdk_session_id_is_null_until_captured,
    keys_are_per_principal_and_unique,
    seqs_are_per_conversation_and_gap_free,
    foreign_keys_hold_and_delete_cascades,
    only_the_running_turn_is_closed_once,
    rewind_counts_turns_since_the_last_rewind,
    stalled_replays_do_not_block_another_followers_replay,
);

fn new_session(principal: &str, agent_id: &str) -> NewSession {
    NewSession {
        principal: principal.into(),
        agent_id: agent_id.into(),
        session_id: uuid::Uuid::new_v4().to_string(),
        backend: "demo".into(),
        cwd: "/tmp/x".into(),
        model: None,
        permission_mode: None,
        launch_options: Default::default(),
    }
}

fn prompt(text: &str) -> NewMessage {
    let mut m = NewMessage::new(
        "user",
        serde_json::json!({"type": "user", "message": {"role": "user", "content": text}})
            .to_string(),
    );
    m.prompt = true;
    m.title = Some(text.into());
    m
}

/// sdk_session_id is NULL until the agent reports one; then it is captured, unified when equal.
async fn sdk_session_id_is_null_until_captured(fx: Fixture) {
    let store = fx.open().await;
    let s = store
        .create_session(new_session("local", "a"))
        .await
        .unwrap();
    assert_eq!(s.sdk_session_id, None);
    assert!(!s.unified);
    store
        .record_agent_session(s.row, &s.session_id, true)
        .await
        .unwrap();
    let s2 = store.find_session("local", "a").await.unwrap().unwrap();
    assert_eq!(s2.sdk_session_id.as_deref(), Some(s.session_id.as_str()));
    assert!(s2.unified);
    // Another id reported: recorded as not unified; resume must use it.
    store
        .record_agent_session(s.row, "other-id", false)
        .await
        .unwrap();
    let s3 = store.find_session("local", "a").await.unwrap().unwrap();
    assert_eq!(s3.sdk_session_id.as_deref(), Some("other-id"));
    assert!(!s3.unified);
    assert_eq!(s3.session_id, s.session_id, "our id never changes");
    store.close().await;
}

/// The same key twice is one conversation; the same agent_id under two principals is two.
async fn keys_are_per_principal_and_unique(fx: Fixture) {
    let store = fx.open().await;
    let a = store
        .create_session(new_session("alice", "same"))
        .await
        .unwrap();
    let again = store
        .create_session(new_session("alice", "same"))
        .await
        .unwrap();
    assert_eq!(a.session_id, again.session_id);
    let b = store
        .create_session(new_session("bob", "same"))
        .await
        .unwrap();
    assert_ne!(a.session_id, b.session_id);
    assert!(store.find_session("carol", "same").await.unwrap().is_none());
    store.close().await;
}

/// seqs rise by one per conversation, independently, and appends to a vanished conversation fail.
async fn seqs_are_per_conversation_and_gap_free(fx: Fixture) {
    let store = fx.open().await;
    let a = store
        .create_session(new_session("local", "a"))
        .await
        .unwrap();
    let b = store
        .create_session(new_session("local", "b"))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let store = store.clone();
        let id = if i % 2 == 0 { a.row } else { b.row };
        tasks.push(tokio::spawn(async move {
            store
                .append(
                    id,
                    vec![
                        prompt(&format!("m{i}")),
                        NewMessage::new("system", "{}".into()),
                    ],
                )
                .await
                .unwrap()
        }));
    }
    let mut firsts = Vec::new();
    for t in tasks {
        firsts.push(t.await.unwrap());
    }
    for s in [&a, &b] {
        let rows = store.messages_after(s.row, 0, 1000).await.unwrap();
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
    }
    assert!(
        firsts.iter().all(|f| f % 2 == 1),
        "each append's rows are contiguous"
    );
    let missing = store.append(RowId(999_999), vec![prompt("x")]).await;
    assert!(missing.is_err());
    store.close().await;
}

/// Messages can't exist without their conversation, and deleting it deletes them.
async fn foreign_keys_hold_and_delete_cascades(fx: Fixture) {
    let store = fx.open().await;
    let s = store
        .create_session(new_session("local", "fk"))
        .await
        .unwrap();
    store.append(s.row, vec![prompt("hi")]).await.unwrap();
    let other = store
        .create_session(new_session("local", "other"))
        .await
        .unwrap();
    let db = fx.sql().await;
    let pool = &db;
    let orphan = sqlx::query("insert into messages (session_pk, seq, message_type, payload, created_at) values (424242, 1, 'user', '{}', 'now')")
        .execute(pool)
        .await;
    assert!(orphan.is_err(), "an orphan row is refused");
    sqlx::query("delete from session_info where id = $1")
        .bind(s.row.0)
        .execute(pool)
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("select count(*) from messages where session_pk <> $1")
        .bind(other.row.0)
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    if fx.pg.is_none() {
        let violations: Vec<(String,)> = sqlx::query_as("pragma foreign_key_check")
            .fetch_all(pool)
            .await
            .unwrap();
        assert!(violations.is_empty());
    }
    // Appends to the deleted conversation fail alone; another's in the same batches go on.
    let (gone, kept) = tokio::join!(
        store.append(s.row, vec![prompt("late")]),
        store.append(other.row, vec![prompt("fine")]),
    );
    assert!(
        matches!(gone, Err(agentmux::store::StoreError::UnknownSession)),
        "{gone:?}"
    );
    assert_eq!(kept.unwrap(), 1);
    store.close().await;
}

/// A result that ends the running turn, handing over to the queued turn `next`.
fn result_then(next: Option<i64>) -> NewMessage {
    let mut m = NewMessage::new("result", r#"{"type":"result","subtype":"success"}"#.into());
    m.running = Some(RunningTurn::Ends { next });
    m
}

/// The turn that was running when the server died is closed with one server_restart result,
/// once; prompts that never ran (queued behind it, or imported without results) get none. A
/// turn's result hands "running" to the queued turn it names, in the same write.
async fn only_the_running_turn_is_closed_once(fx: Fixture) {
    let store = fx.open().await;
    let s = store
        .create_session(new_session("local", "u"))
        .await
        .unwrap();
    let mut first = prompt("first prompt");
    first.running = Some(RunningTurn::Starts);
    store.append(s.row, vec![first]).await.unwrap();
    store
        .append(s.row, vec![prompt("second prompt")])
        .await
        .unwrap();
    // Imported prompts, never run.
    let imported = store
        .create_session(new_session("local", "imported"))
        .await
        .unwrap();
    store
        .append(
            imported.row,
            (0..500).map(|i| prompt(&format!("p{i}"))).collect(),
        )
        .await
        .unwrap();
    // A turn ended and handed over to the queued one (seq 2), which was running at the crash.
    let handed = store
        .create_session(new_session("local", "handed"))
        .await
        .unwrap();
    let mut one = prompt("one");
    one.running = Some(RunningTurn::Starts);
    store
        .append(handed.row, vec![one, prompt("two")])
        .await
        .unwrap();
    store
        .append(handed.row, vec![result_then(Some(2))])
        .await
        .unwrap();
    // Both turns ended: nothing runs.
    let done = store
        .create_session(new_session("local", "done"))
        .await
        .unwrap();
    let mut one = prompt("one");
    one.running = Some(RunningTurn::Starts);
    store.append(done.row, vec![one]).await.unwrap();
    store
        .append(done.row, vec![prompt("two"), result_then(Some(2))])
        .await
        .unwrap();
    store
        .append(done.row, vec![result_then(None)])
        .await
        .unwrap();
    store.close().await;

    let store = fx.open().await;
    assert_eq!(store.close_unfinished_turns().await.unwrap(), 2);
    assert_eq!(store.close_unfinished_turns().await.unwrap(), 0);
    let types = |id| {
        let store = &store;
        async move {
            let rows = store.messages_after(id, 0, 1000).await.unwrap();
            let types: Vec<String> = rows.iter().map(|r| r.message_type.clone()).collect();
            (types, rows)
        }
    };
    let (kinds, rows) = types(s.row).await;
    assert_eq!(kinds, ["user", "user", "result"]);
    assert!(rows[2].payload.contains("server_restart"));
    let (kinds, rows) = types(handed.row).await;
    assert_eq!(kinds, ["user", "user", "result", "result"]);
    assert!(rows[3].payload.contains("server_restart"));
    assert_eq!(types(imported.row).await.0.len(), 500);
    assert_eq!(types(done.row).await.0.len(), 4);
    let s = store.find_session("local", "u").await.unwrap().unwrap();
    assert_eq!(s.title.as_deref(), Some("first prompt"));
    assert_eq!((s.prompt_count, s.result_count, s.last_seq), (2, 1, 3));
    store.close().await;
}

fn message(message_type: &'static str, payload: serde_json::Value) -> NewMessage {
    NewMessage::new(message_type, payload.to_string())
}

/// The status a rewind stores, for the store's own callers.
fn rewound_status() -> agentmux::store::RewoundStatus {
    Box::new(|dropped: &[i64]| {
        message(
            "status",
            serde_json::json!({"status": "rewound", "dropped_seqs": dropped}),
        )
    })
}

/// A rewind drops the prompts of later turns stored before its point, counting turns from the
/// last stored `rewound` status (nothing ran or waited then): a history that an older rewind
/// left with an unanswered prompt keeps the prompt of the turn it rewinds to.
async fn rewind_counts_turns_since_the_last_rewind(fx: Fixture) {
    let store = fx.open().await;
    let result = || message("result", serde_json::json!({"type": "result"}));
    let s = store
        .create_session(new_session("local", "q"))
        .await
        .unwrap();
    // seq 1 turn 1, seq 2 turn 2 (queued while turn 1 ran), 3 and 4 their results.
    store
        .append(
            s.row,
            vec![prompt("one"), prompt("two"), result(), result()],
        )
        .await
        .unwrap();
    let rewound = store.rewind(s.row, 3, rewound_status()).await.unwrap();
    assert_eq!(rewound.dropped_prompts, [2]);
    assert_eq!((rewound.status_seq, rewound.dropped), (5, 2));

    // As an older server left it: a rewind that kept a queued prompt (seq 7) before its status.
    let t = store
        .create_session(new_session("local", "legacy"))
        .await
        .unwrap();
    store
        .append(
            t.row,
            vec![
                prompt("one"),
                prompt("two"),
                result(),
                message("status", serde_json::json!({"status": "rewound"})),
                prompt("three"),
                result(),
            ],
        )
        .await
        .unwrap();
    let rewound = store.rewind(t.row, 6, rewound_status()).await.unwrap();
    assert_eq!(rewound.dropped_prompts, Vec::<i64>::new());
    let kept: Vec<i64> = store
        .messages_after(t.row, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(kept, [1, 2, 3, 4, 5, 6, 7]);
}

/// Followers that stop reading in the middle of a long replay hold up no one else's: another
/// socket replays the whole conversation while three (more than the replays the server reads at
/// once) sit on megabytes they never read.
async fn stalled_replays_do_not_block_another_followers_replay(fx: Fixture) {
    let store = fx.open().await;
    let record = store
        .create_session(new_session("local", "long"))
        .await
        .unwrap();
    // 3,000 frames of 8 KiB: far more than the socket buffers of a follower that reads nothing.
    let filler = "x".repeat(8 << 10);
    for _ in 0..6 {
        let page: Vec<NewMessage> = (0..500)
            .map(|_| {
                let detail = serde_json::json!({"status": "note", "detail": filler});
                NewMessage::new("status", detail.to_string())
            })
            .collect();
        store.append(record.row, page).await.unwrap();
    }
    store.close().await;
    drop(store);
    let server = fx.server().await;
    let subscribe = serde_json::json!({"type": "subscribe", "agent_id": "long", "since_seq": 0});
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut c = crate::common::Client::connect(&server.addr).await;
        c.send(subscribe.clone()).await;
        stalled.push(c);
    }
    // Let the stalled replays fill their sockets.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let mut reader = crate::common::Client::connect(&server.addr).await;
    reader.send(subscribe).await;
    let frames = reader.recv_until(|f| f["seq"].as_i64() == Some(3000)).await;
    assert_eq!(frames.len(), 3000, "every stored frame, once");
    assert!(
        frames
            .iter()
            .enumerate()
            .all(|(i, f)| f["seq"].as_i64() == Some(i as i64 + 1)),
        "in order"
    );
    drop(stalled);
}
