//! The store's identity invariants, on both engines (a real SQLite file and a real PostgreSQL
//! database): NULL detection, capture, resume data, foreign keys and cascades, seq assignment,
//! rewinds, and closing unfinished turns.

use std::sync::Arc;

use agentmux::metrics::Metrics;
use agentmux::protocol::{AgentId, Principal, SessionId};
use agentmux::store::postgres::{PgSettings, PgStore};
use agentmux::store::push::{ActionRow, PushStore, SubscriptionRow};
use agentmux::store::schedules::{ScheduleRow, ScheduleStore};
use agentmux::store::sqlite::{SqliteSettings, SqliteStore};
use agentmux::store::usage::{CapOverride, Caps, TurnUsage};
use agentmux::store::{
    NewMessage, NewSession, PageSize, PageStart, RowId, RunningTurn, SessionQuery, Store,
    StoreError,
};

use crate::common::{create_database, drop_database, pg_url, serve_output};

/// One engine's store for one test: a SQLite file in a temporary directory, or a PostgreSQL
/// database of its own (dropped at the end).
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    /// The test server's URL and this test's database on it, on PostgreSQL.
    pg: Option<(String, String)>,
}

impl Fixture {
    pub(crate) fn sqlite() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            pg: None,
        }
    }

    /// None (after saying so) when no PostgreSQL server is configured outside CI.
    pub(crate) async fn postgres() -> Option<Self> {
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
    pub(crate) fn pg_url(&self) -> Option<String> {
        self.pg
            .as_ref()
            .map(|(server, name)| crate::common::with_database(server, name))
    }

    /// Opens (again) this test's store.
    pub(crate) async fn open(&self) -> Arc<dyn Store> {
        match self.pg_url() {
            Some(_) => Arc::new(self.open_pg(PgSettings::default()).await),
            None => Arc::new(self.open_sqlite(SqliteSettings::default()).await),
        }
    }

    /// Opens this test's SQLite file with `settings`.
    pub(crate) async fn open_sqlite(&self, settings: SqliteSettings) -> SqliteStore {
        SqliteStore::open(
            &self.dir.path().join("agentmux.db"),
            settings,
            Metrics::default(),
        )
        .await
        .unwrap()
    }

    /// Opens this test's PostgreSQL database with `settings` (one node's view of it).
    pub(crate) async fn open_pg(&self, settings: PgSettings) -> PgStore {
        let url = self.pg_url().expect("a PostgreSQL fixture");
        PgStore::open(&url, settings, Metrics::default())
            .await
            .unwrap()
    }

    /// Opens (again) this test's store, as the scheduler sees it.
    async fn open_schedules(&self) -> Box<dyn ScheduleStore> {
        match self.pg_url() {
            Some(_) => Box::new(self.open_pg(PgSettings::default()).await),
            None => Box::new(self.open_sqlite(SqliteSettings::default()).await),
        }
    }

    /// Opens (again) this test's store, as Web Push sees it.
    async fn open_push(&self) -> Box<dyn PushStore> {
        match self.pg_url() {
            Some(_) => Box::new(self.open_pg(PgSettings::default()).await),
            None => Box::new(self.open_sqlite(SqliteSettings::default()).await),
        }
    }

    /// Brings this test's fresh database to the schema an older release left: up to migration
    /// `sqlite` on SQLite, `postgres` on PostgreSQL.
    pub(crate) async fn migrate_to(&self, sqlite: i64, postgres: i64) {
        let (dir, last) = match self.pg_url() {
            Some(_) => ("migrations/postgres", postgres),
            None => ("migrations/sqlite", sqlite),
        };
        let mut old = sqlx::migrate::Migrator::new(std::path::Path::new(dir))
            .await
            .unwrap();
        old.migrations = old
            .migrations
            .iter()
            .filter(|m| m.version <= last)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        match self.pg_url() {
            Some(url) => {
                let pool = sqlx::PgPool::connect(&url).await.unwrap();
                old.run(&pool).await.unwrap();
                pool.close().await;
            }
            None => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(self.dir.path().join("agentmux.db"))
                    .create_if_missing(true);
                let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
                old.run(&pool).await.unwrap();
                pool.close().await;
            }
        }
    }

    /// A connection to the same database, for checks in SQL both engines take.
    pub(crate) async fn sql(&self) -> sqlx::AnyPool {
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
macro_rules! on_both_engines_ {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    super::$name(super::Fixture::sqlite()).await;
                }

                #[tokio::test]
                #[cfg_attr(no_test_pg, ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here")]
                async fn postgres() {
                    if let Some(fixture) = super::Fixture::postgres().await {
                        super::$name(fixture).await;
                    }
                }
            }
        )*
    };
}

pub(crate) use on_both_engines_ as on_both_engines;

on_both_engines!(
    sdk_session_id_is_null_until_captured,
    keys_are_per_principal_and_unique,
    seqs_are_per_conversation_and_gap_free,
    foreign_keys_hold_and_delete_cascades,
    only_the_running_turn_is_closed_once,
    rewind_counts_turns_since_the_last_rewind,
    stalled_replays_do_not_block_another_followers_replay,
    nul_characters_are_stored_and_fail_no_one,
    forks_and_imports_keep_their_rules,
    a_forks_results_keep_their_turn_cost,
    caps_are_read_as_they_were_set,
    what_a_conversation_spent_is_summed_and_kept_through_the_upgrade,
    ids_changed_behind_the_servers_back_are_refused,
    pages_are_bounded_in_rows_and_in_bytes,
    a_pause_keeps_a_change_made_since_the_schedule_was_read,
    push_subscriptions_are_per_principal_and_tokens_are_taken_once,
);

/// A test's literal `agent_id`.
pub(crate) fn agent(id: &str) -> AgentId {
    AgentId::parse(id).unwrap()
}

pub(crate) fn new_session(principal: &str, agent_id: &str) -> NewSession {
    NewSession {
        principal: principal.into(),
        agent_id: AgentId::parse(agent_id).unwrap(),
        session_id: SessionId::new(),
        backend: "demo".into(),
        cwd: "/tmp/x".into(),
        model: None,
        permission_mode: None,
        launch_options: Default::default(),
        worktree: None,
    }
}

pub(crate) fn prompt(text: &str) -> NewMessage {
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
    let s2 = store
        .find_session(&"local".into(), &agent("a"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s2.sdk_session_id.as_deref(), Some(s.session_id.as_str()));
    assert!(s2.unified);
    // Another id reported: recorded as not unified; resume must use it.
    store
        .record_agent_session(s.row, "other-id", false)
        .await
        .unwrap();
    let s3 = store
        .find_session(&"local".into(), &agent("a"))
        .await
        .unwrap()
        .unwrap();
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
    assert!(
        store
            .find_session(&"carol".into(), &agent("same"))
            .await
            .unwrap()
            .is_none()
    );
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
        let rows = store
            .messages_after(s.row, 0, PageSize::rows(1000))
            .await
            .unwrap()
            .rows;
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

/// A page holds at most its rows and its bytes of payload, cut before the first row that
/// would not fit; a row larger than the bytes is a page alone; `more` says whether rows follow,
/// at a cut by bytes, by rows, or exactly at the end.
async fn pages_are_bounded_in_rows_and_in_bytes(fx: Fixture) {
    let store = fx.open().await;
    let s = store
        .create_session(new_session("local", "big"))
        .await
        .unwrap();
    // Payloads of exactly these sizes, seqs 1 to 8.
    let sizes = [10, 10, 100_000, 10, 60_000, 60_000, 10, 150_000];
    let messages = sizes
        .iter()
        .map(|n| NewMessage::new("system", format!(r#"{{"p":"{}"}}"#, "x".repeat(n - 8))))
        .collect();
    store.append(s.row, messages).await.unwrap();
    let page = |after: i64, rows: u32| {
        let store = store.clone();
        async move {
            let page = store
                .messages_after(
                    s.row,
                    after,
                    PageSize {
                        rows,
                        bytes: 100_000,
                    },
                )
                .await
                .unwrap();
            for r in &page.rows {
                assert_eq!(r.payload.len(), sizes[r.seq as usize - 1]);
            }
            (
                page.rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
                page.more,
            )
        }
    };
    // Walking the conversation page by page reads every row once, in order.
    let mut walked = Vec::new();
    let mut after = 0;
    loop {
        let (seqs, more) = page(after, 100).await;
        walked.push((seqs.clone(), more));
        after = *seqs.last().unwrap();
        if !more {
            break;
        }
    }
    assert_eq!(
        walked,
        [
            (vec![1, 2], true),
            (vec![3], true),
            (vec![4, 5], true),
            (vec![6, 7], true),
            (vec![8], false),
        ]
    );
    assert_eq!(page(0, 1).await, (vec![1], true));
    assert_eq!(page(5, 2).await, (vec![6, 7], true));
    assert_eq!(page(6, 1).await, (vec![7], true));
    assert_eq!(page(8, 10).await, (vec![], false));
    let all = store
        .messages_after(s.row, 0, PageSize::rows(8))
        .await
        .unwrap();
    assert_eq!((all.rows.len(), all.more), (8, false));
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
            let rows = store
                .messages_after(id, 0, PageSize::rows(1000))
                .await
                .unwrap()
                .rows;
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
    let s = store
        .find_session(&"local".into(), &agent("u"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.title.as_deref(), Some("first prompt"));
    assert_eq!((s.prompt_count, s.result_count, s.last_seq), (2, 1, 3));
    store.close().await;
}

pub(crate) fn message(message_type: &'static str, payload: serde_json::Value) -> NewMessage {
    NewMessage::new(message_type, payload.to_string())
}

/// The status a rewind stores, for the store's own callers.
pub(crate) fn rewound_status() -> agentmux::store::RewoundStatus {
    Box::new(|dropped: &[i64]| {
        message(
            "status",
            serde_json::json!({"status": "rewound", "dropped_seqs": dropped}),
        )
    })
}

pub(crate) fn result() -> NewMessage {
    message("result", serde_json::json!({"type": "result"}))
}

/// A conversation of two turns: seq 1 turn 1, seq 2 turn 2 (queued while turn 1 ran), 3 and 4
/// their results.
async fn two_turns(store: &Arc<dyn Store>, agent_id: &str) -> agentmux::store::SessionRecord {
    let s = store
        .create_session(new_session("local", agent_id))
        .await
        .unwrap();
    store
        .append(
            s.row,
            vec![prompt("one"), prompt("two"), result(), result()],
        )
        .await
        .unwrap();
    s
}

/// A rewind drops the prompts of later turns stored before its point, counting turns from the
/// last stored `rewound` status (nothing ran or waited then): a history that an older rewind
/// left with an unanswered prompt keeps the prompt of the turn it rewinds to.
async fn rewind_counts_turns_since_the_last_rewind(fx: Fixture) {
    let store = fx.open().await;
    let s = two_turns(&store, "q").await;
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
        .messages_after(t.row, 0, PageSize::rows(100))
        .await
        .unwrap()
        .rows
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
        // Its replay is under way (the first frame is in) before the next one asks; from here
        // on it reads nothing, and its socket fills long before the 3,000 frames are written.
        let first = c.recv_until(|f| f["seq"].as_i64().is_some()).await;
        assert_eq!(first.last().unwrap()["seq"], 1);
        stalled.push(c);
    }
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

/// A NUL character, which PostgreSQL refuses in text, in a prompt's title, an agent's uuid or
/// a payload (escaped, as JSON has it): the rows are stored, the payload byte for byte, and
/// the other conversation whose rows share the batch is not disturbed.
async fn nul_characters_are_stored_and_fail_no_one(fx: Fixture) {
    let store = fx.open().await;
    let a = store
        .create_session(new_session("local", "nul"))
        .await
        .unwrap();
    let b = store
        .create_session(new_session("local", "bystander"))
        .await
        .unwrap();
    let mut hostile = prompt("a\0b");
    hostile.payload =
        serde_json::json!({"type": "user", "message": {"content": "a\0b"}}).to_string();
    let sent = hostile.payload.clone();
    hostile.sdk_uuid = Some("uuid\0".into());
    let (hostile, bystander) = tokio::join!(
        store.append(a.row, vec![hostile]),
        store.append(b.row, vec![prompt("fine")]),
    );
    assert_eq!((hostile.unwrap(), bystander.unwrap()), (1, 1));
    let stored = &store
        .messages_after(a.row, 0, PageSize::rows(10))
        .await
        .unwrap()
        .rows[0];
    assert_eq!(stored.payload, sent);
    assert_eq!(stored.sdk_uuid.as_deref().map(|u| &u[..4]), Some("uuid"));
    let title = store
        .find_session(&"local".into(), &agent("nul"))
        .await
        .unwrap()
        .unwrap()
        .title;
    assert!(title.unwrap().starts_with('a'));
    store.close().await;
}

/// The caps a turn starts under are read as they were set: none at first; an admin's caps
/// that are both unlimited count as set (they replace the configured ones); the conversation's
/// own, and never another conversation's or another principal's.
async fn caps_are_read_as_they_were_set(fx: Fixture) {
    let store = fx.open().await;
    let a = store
        .create_session(new_session("alice", "a"))
        .await
        .unwrap();
    let b = store
        .create_session(new_session("alice", "b"))
        .await
        .unwrap();
    let (alice, bob) = (Principal::new("alice"), Principal::new("bob"));
    assert_eq!(
        store.caps(&alice, Some(a.row)).await.unwrap(),
        Caps::default()
    );
    let unlimited = CapOverride::default();
    store
        .set_cap_override(&alice, Some(unlimited))
        .await
        .unwrap();
    store.set_session_cap(a.row, 2.5).await.unwrap();
    let set = Caps {
        principal: Some(unlimited),
        conversation: Some(2.5),
    };
    assert_eq!(store.caps(&alice, Some(a.row)).await.unwrap(), set);
    let caps = store.caps(&alice, Some(b.row)).await.unwrap();
    assert_eq!(caps.conversation, None);
    let caps = store.caps(&alice, None).await.unwrap();
    assert_eq!((caps.principal, caps.conversation), (Some(unlimited), None));
    assert_eq!(store.caps(&bob, None).await.unwrap().principal, None);
    let daily = CapOverride {
        daily_usd: Some(1.0),
        monthly_usd: None,
    };
    store.set_cap_override(&alice, Some(daily)).await.unwrap();
    assert_eq!(
        store.caps(&alice, None).await.unwrap().principal,
        Some(daily)
    );
    store.set_cap_override(&alice, None).await.unwrap();
    assert_eq!(store.caps(&alice, None).await.unwrap(), Caps::default());
    store.close().await;
}

/// What a conversation spent (for its own cap) is the sum of its turns' costs: carried over
/// from a store written before the sum was kept, added to by each turn stored since, and never
/// another conversation's.
async fn what_a_conversation_spent_is_summed_and_kept_through_the_upgrade(fx: Fixture) {
    fx.migrate_to(19, 12).await;
    let sql = fx.sql().await;
    let ids = [SessionId::new(), SessionId::new()];
    for (n, id) in ids.iter().enumerate() {
        sqlx::query(
            "insert into session_info (principal, agent_id, session_id, backend, cwd,
                created_at, last_active_at)
             values ('alice', $1, $2, 'demo', '/tmp/x', 't', 't')",
        )
        .bind(format!("c{n}"))
        .bind(id.as_str())
        .execute(&sql)
        .await
        .unwrap();
    }
    for (id, cost) in [(&ids[0], 0.25), (&ids[0], 0.5), (&ids[1], 1.0)] {
        sqlx::query(
            "insert into turn_usage (principal, session_id, agent_id, agent, model, at,
                cost_usd, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens)
             values ('alice', $1, 'c', 'demo', 'default', 't', $2, 1, 1, 0, 0)",
        )
        .bind(id.as_str())
        .bind(cost)
        .execute(&sql)
        .await
        .unwrap();
    }
    sql.close().await;
    let store = fx.open().await;
    assert_eq!(store.spent_in_session(ids[0].as_str()).await.unwrap(), 0.75);
    assert_eq!(store.spent_in_session(ids[1].as_str()).await.unwrap(), 1.0);
    assert_eq!(store.spent_in_session("no-such-id").await.unwrap(), 0.0);
    let c0 = store
        .find_session(&"alice".into(), &agent("c0"))
        .await
        .unwrap()
        .unwrap();
    // Two turns of one conversation (often in one batch), then a batch that stores them.
    for cost_usd in [0.125, 0.0625] {
        store
            .record_usage(TurnUsage {
                principal: "alice".into(),
                session_id: ids[0].to_string(),
                agent_id: "c0".into(),
                agent: "demo".into(),
                model: "default".into(),
                at: "t".into(),
                cost_usd,
                input_tokens: 1,
                output_tokens: 1,
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
            })
            .await
            .unwrap();
    }
    store.append(c0.row, vec![prompt("next")]).await.unwrap();
    assert_eq!(
        store.spent_in_session(ids[0].as_str()).await.unwrap(),
        0.9375
    );
    assert_eq!(store.spent_in_session(ids[1].as_str()).await.unwrap(), 1.0);
    store.close().await;
}

/// A fork's copied `result`s keep what their turn cost, so its turn footers show it as the
/// original's do.
async fn a_forks_results_keep_their_turn_cost(fx: Fixture) {
    let store = fx.open().await;
    let s = store
        .create_session(new_session("local", "costly"))
        .await
        .unwrap();
    let mut paid = result();
    paid.totals = Some(agentmux::store::Totals {
        cost_usd: 0.25,
        ..Default::default()
    });
    store
        .append(s.row, vec![prompt("one"), paid])
        .await
        .unwrap();
    let fork = store
        .fork(s.row, Some(2), new_session("local", "costly-fork"))
        .await
        .unwrap();
    for row in [s.row, fork.row] {
        let costs: Vec<Option<f64>> = store
            .messages_after(row, 0, PageSize::rows(100))
            .await
            .unwrap()
            .rows
            .iter()
            .map(|m| m.turn_cost_usd)
            .collect();
        assert_eq!(costs, [None, Some(0.25)]);
    }
    store.close().await;
}

/// A fork copies the history up to its point under the same seqs, leaves a later turn's
/// queued prompt behind and can't take a key in use; an import stays invisible until it is
/// finished, and a discarded one leaves nothing.
async fn forks_and_imports_keep_their_rules(fx: Fixture) {
    let store = fx.open().await;
    let s = two_turns(&store, "src").await;
    let fork = store
        .fork(s.row, Some(3), new_session("local", "fork"))
        .await
        .unwrap();
    let seqs: Vec<i64> = store
        .messages_after(fork.row, 0, PageSize::rows(100))
        .await
        .unwrap()
        .rows
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, [1, 3]);
    assert_eq!(
        (fork.last_seq, fork.message_count, fork.prompt_count),
        (3, 2, 1)
    );
    assert_eq!(fork.title.as_deref(), Some("one"));
    let taken = store.fork(s.row, None, new_session("local", "fork")).await;
    assert!(matches!(
        taken,
        Err(agentmux::store::StoreError::AgentExists)
    ));
    let bad = store.fork(s.row, Some(2), new_session("local", "f2")).await;
    assert!(matches!(
        bad,
        Err(agentmux::store::StoreError::InvalidSeq(_))
    ));
    // The next append to the fork goes on after the copied seqs.
    assert_eq!(
        store.append(fork.row, vec![prompt("three")]).await.unwrap(),
        4
    );

    let import = store
        .begin_import(new_session("local", "imp"))
        .await
        .unwrap();
    assert!(matches!(
        store.begin_import(new_session("local", "imp")).await,
        Err(agentmux::store::StoreError::AgentExists)
    ));
    store
        .append(
            import.row,
            (0..10).map(|i| prompt(&format!("p{i}"))).collect(),
        )
        .await
        .unwrap();
    assert!(
        store
            .find_session(&"local".into(), &agent("imp"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        store.create_session(new_session("local", "imp")).await,
        Err(agentmux::store::StoreError::Importing)
    ));
    store.finish_import(import.row, false).await.unwrap();
    let done = store
        .find_session(&"local".into(), &agent("imp"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((done.message_count, done.memory_from_seq), (10, 10));

    let dropped = store
        .begin_import(new_session("local", "gone"))
        .await
        .unwrap();
    store
        .append(
            dropped.row,
            (0..5000).map(|i| prompt(&format!("p{i}"))).collect(),
        )
        .await
        .unwrap();
    assert_eq!(store.discard_unfinished_imports().await.unwrap(), 1);
    assert!(
        store
            .find_by_session_id(&dropped.session_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .messages_after(dropped.row, 0, PageSize::rows(10))
            .await
            .unwrap()
            .rows
            .is_empty()
    );
    store.close().await;
}

const PASSWORD: &str = "Sup3r-S3cret-pw";

/// A password in the store URL appears nowhere a user or operator can read: not in the
/// debug log of a whole run, nor in `/metrics` or any response.
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_store_password_is_never_shown() {
    let Some(fx) = Fixture::postgres().await else {
        return;
    };
    let (server, name) = fx.pg.clone().unwrap();
    // The test server trusts local logins, so the password is accepted and unused.
    let url = crate::common::with_database(&server, &name).replacen(
        "://agentmux@",
        &format!("://agentmux:{PASSWORD}@"),
        1,
    );
    assert!(url.contains(PASSWORD), "{url}");
    let (listened, output) = serve_output(&[], &[("AGENTMUX_STORE_URL", &url)]).await;
    assert!(listened, "{output}");
    assert!(!output.contains(PASSWORD), "{output}");
    assert!(
        output.contains("agentmux:***@"),
        "the log names the store, without its password: {output}"
    );
}

/// A store that can't be reached, or a URL that is not PostgreSQL's (one that looks like a
/// flag included), refuses to start with a clear message that shows no password: no silent
/// fall-back to the SQLite file.
#[tokio::test]
async fn a_bad_or_unreachable_store_refuses_to_start() {
    let unreachable = format!("postgres://agentmux:{PASSWORD}@127.0.0.1:1/agentmux");
    let cases: [(Vec<String>, &str); 5] = [
        (
            vec![format!("--store-url={unreachable}")],
            "cannot connect to the store",
        ),
        (
            vec![format!(
                "--store-url=postgres://u:{PASSWORD}@localhost/x?host=/nonexistent-agentmux-dir"
            )],
            "cannot connect to the store",
        ),
        (vec!["--store-url=-rf".into()], "not a PostgreSQL URL"),
        (
            vec![format!("--store-url=mysql://u:{PASSWORD}@localhost/x")],
            "not a PostgreSQL URL",
        ),
        (
            vec![format!(
                "--store-url=postgres://u:{PASSWORD}@localhost:99999999/x"
            )],
            "bad store URL",
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (listened, output) = serve_output(&args, &[]).await;
        assert!(!listened, "{args:?}: {output}");
        assert!(output.contains(expected), "{args:?}: {output}");
        assert!(!output.contains(PASSWORD), "{args:?}: {output}");
    }
    // A value that starts with `-` as its own argument is a flag to the parser: refused too.
    let (listened, output) = serve_output(&["--store-url", "-x"], &[]).await;
    assert!(!listened, "{output}");
}

/// Two nodes' stores on one PostgreSQL database: the lease decides which one may write to a
/// conversation, and one that lost it is refused in the very statement that assigns `seq`.
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_node_that_lost_its_lease_can_not_write() {
    let Some(fx) = Fixture::postgres().await else {
        return;
    };
    // Leases long enough that nothing renews or expires them on its own during the test.
    let node = |node: &str| PgSettings {
        node_id: node.to_owned(),
        lease: std::time::Duration::from_secs(600),
        ..PgSettings::default()
    };
    let (a, b) = (
        fx.open_pg(node("node-a")).await,
        fx.open_pg(node("node-b")).await,
    );
    let mut lost_on_a = a.lost_leases().expect("leases are reported");
    let s = a.create_session(new_session("local", "x")).await.unwrap();
    a.take_lease(s.row).await.unwrap();
    let mut one = prompt("one");
    one.running = Some(RunningTurn::Starts);
    assert_eq!(a.append(s.row, vec![one]).await.unwrap(), 1);

    // B can't take it, nor write to it, while A's lease holds.
    assert!(
        matches!(b.take_lease(s.row).await, Err(StoreError::OwnedElsewhere(node)) if node == "node-a")
    );

    // A stalls past its lease: B takes over, closing the turn A left running.
    let sql = fx.sql().await;
    sqlx::query("update session_info set lease_expires_at = now() - interval '1 second'")
        .execute(&sql)
        .await
        .unwrap();
    b.take_lease(s.row).await.unwrap();
    assert_eq!(b.append(s.row, vec![prompt("two")]).await.unwrap(), 3);

    // A's writes are refused and A is told; nothing of them is stored. A's other
    // conversations, in the same batch, are stored as ever.
    let y = a.create_session(new_session("local", "y")).await.unwrap();
    a.take_lease(y.row).await.unwrap();
    let (late, other) = tokio::join!(
        a.append(s.row, vec![prompt("late")]),
        a.append(y.row, vec![prompt("fine")])
    );
    assert!(matches!(late, Err(StoreError::Fenced)), "{late:?}");
    assert_eq!(other.unwrap(), 1);
    // Once A knows it lost the conversation it holds no lease on it: still refused.
    assert!(matches!(
        a.append(s.row, vec![prompt("later")]).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(lost_on_a.recv().await, Some(s.row));
    assert!(matches!(
        a.take_lease(s.row).await,
        Err(StoreError::OwnedElsewhere(node)) if node == "node-b"
    ));
    let rows = b
        .messages_after(s.row, 0, PageSize::rows(100))
        .await
        .unwrap()
        .rows;
    let kinds: Vec<&str> = rows.iter().map(|r| r.message_type.as_str()).collect();
    assert_eq!(kinds, ["user", "result", "user"]);
    assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(rows[1].payload.contains("node_lost"), "{}", rows[1].payload);
    assert!(
        rows.iter()
            .all(|r| !r.payload.contains("late") && !r.payload.contains("later"))
    );

    // Released, it is anyone's at once.
    b.release_lease(s.row).await;
    a.take_lease(s.row).await.unwrap();
    assert_eq!(a.append(s.row, vec![prompt("three")]).await.unwrap(), 4);
    a.close().await;
    b.close().await;
}

/// A node restarted under the same name takes its conversations back at once, and the run
/// before it (paused, not dead) can't write to them any more: the fence is the lease's epoch,
/// not only the node's name.
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn an_earlier_run_under_the_same_name_can_not_write() {
    let Some(fx) = Fixture::postgres().await else {
        return;
    };
    let node_a = || PgSettings {
        node_id: "node-a".to_owned(),
        lease: std::time::Duration::from_secs(600),
        ..PgSettings::default()
    };
    let earlier = fx.open_pg(node_a()).await;
    let s = earlier
        .create_session(new_session("local", "x"))
        .await
        .unwrap();
    earlier.take_lease(s.row).await.unwrap();
    assert_eq!(earlier.append(s.row, vec![prompt("one")]).await.unwrap(), 1);

    let later = fx.open_pg(node_a()).await;
    later.take_lease(s.row).await.unwrap();
    assert!(matches!(
        earlier.append(s.row, vec![prompt("stale")]).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(later.append(s.row, vec![prompt("two")]).await.unwrap(), 2);
    let rows = later
        .messages_after(s.row, 0, PageSize::rows(100))
        .await
        .unwrap()
        .rows;
    assert_eq!(rows.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(rows.iter().all(|r| !r.payload.contains("stale")));
    earlier.close().await;
    later.close().await;
}

/// A conversation whose ids were changed in the database behind the server's back (one that
/// no longer has the form the server checks when it stores one: a path, a flag) is refused as
/// unavailable when it is read, never handed on as an id; other conversations read as before.
async fn ids_changed_behind_the_servers_back_are_refused(fx: Fixture) {
    let store = fx.open().await;
    // `agent` is another principal's, so that the listing below holds no other bad row.
    for (principal, agent_id) in [
        ("local", "session"),
        ("other", "agent"),
        ("local", "bystander"),
    ] {
        store
            .create_session(new_session(principal, agent_id))
            .await
            .unwrap();
    }
    let db = fx.sql().await;
    for sql in [
        "update session_info set session_id = '../../x' where agent_id = 'session'",
        "update session_info set agent_id = '-rf /' where agent_id = 'agent'",
    ] {
        sqlx::query(sql).execute(&db).await.unwrap();
    }
    match store.find_session(&"local".into(), &agent("session")).await {
        Err(StoreError::Unavailable(why)) => assert!(why.contains("session_id"), "{why}"),
        other => panic!("session: {other:?}"),
    }
    // No client can name `-rf /`: the listing is where it would be handed on.
    let listing = SessionQuery {
        limit: 50,
        start: PageStart::Offset(0),
        search: None,
        count: false,
    };
    match store.list_sessions(&"other".into(), &listing).await {
        Err(StoreError::Unavailable(why)) => assert!(why.contains("agent_id"), "{why}"),
        other => panic!("-rf /: {other:?}"),
    }
    let fine = store
        .find_session(&"local".into(), &agent("bystander"))
        .await
        .unwrap();
    assert_eq!(fine.unwrap().agent_id.as_str(), "bystander");
    store.close().await;
}

/// A group commit that PostgreSQL breaks off to resolve a deadlock with another transaction on
/// the same conversations is tried again: nothing is lost and the caller never sees it.
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn a_commit_broken_off_by_a_deadlock_is_tried_again() {
    let Some(fx) = Fixture::postgres().await else {
        return;
    };
    let store = fx.open().await;
    let one = store
        .create_session(new_session("local", "one"))
        .await
        .unwrap();
    let two = store
        .create_session(new_session("local", "two"))
        .await
        .unwrap();
    store.take_lease(one.row).await.unwrap();
    store.take_lease(two.row).await.unwrap();
    let url = fx.pg_url().unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let deadlocks = || async {
        sqlx::query_scalar::<_, i64>(
            "select deadlocks from pg_stat_database where datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let deadlocks_before = deadlocks().await;
    // Another transaction holds conversation two's row, and is never the one PostgreSQL
    // breaks off (it looks for a deadlock only after a minute of waiting)...
    let mut other = pool.begin().await.unwrap();
    sqlx::query("set local deadlock_timeout = '60s'")
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query("select 1 from session_info where id = $1 for update")
        .bind(two.row.0)
        .execute(&mut *other)
        .await
        .unwrap();
    // ...while a group commit takes conversation one's and waits for two's...
    let append = {
        let store = store.clone();
        let (a, b) = (one.row, two.row);
        tokio::spawn(async move {
            let first = store.append(a, vec![prompt("a")]);
            let second = store.append(b, vec![prompt("b")]);
            tokio::join!(first, second)
        })
    };
    crate::common::eventually("the group commit waits for conversation two", || async {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        (waiting > 0).then_some(())
    })
    .await;
    // ...and then wants one's: the group commit is broken off, and tried again once the other
    // transaction is done.
    sqlx::query("update session_info set title = title where id = $1")
        .bind(one.row.0)
        .execute(&mut *other)
        .await
        .expect("the group commit, not this transaction, is broken off");
    other.commit().await.unwrap();
    // PostgreSQL counts it once the broken-off transaction's connection reports its numbers.
    let counted = crate::common::eventually("the deadlock is counted", || async {
        let now = deadlocks().await;
        (now > deadlocks_before).then_some(now)
    })
    .await;
    assert_eq!(counted, deadlocks_before + 1);
    let (a, b) = append.await.unwrap();
    assert_eq!((a.unwrap(), b.unwrap()), (1, 1));
    for row in [one.row, two.row] {
        let kinds: Vec<String> = store
            .messages_after(row, 0, PageSize::rows(10))
            .await
            .unwrap()
            .rows
            .into_iter()
            .map(|m| m.message_type)
            .collect();
        assert_eq!(kinds, ["user"]);
    }
    pool.close().await;
    store.close().await;
}

/// An enabled schedule of `local` every second, with its next tick at `next_run_ms`.
fn schedule(id: &str, next_run_ms: i64) -> ScheduleRow {
    let now = "2026-01-01T00:00:00.000Z".to_owned();
    ScheduleRow {
        id: id.into(),
        principal: "local".into(),
        name: "Tick".into(),
        agent_id: "tick".into(),
        content: "tick".into(),
        cron: None,
        every_secs: Some(1),
        mode: "same".into(),
        options: "{}".into(),
        enabled: true,
        next_run_ms,
        last_run: None,
        created_at: now.clone(),
        updated_at: now,
    }
}

/// A schedule paused (its principal gone) after it was read keeps a change made meanwhile
/// (a `PATCH` of its prompt): only its state and latest run are written.
async fn a_pause_keeps_a_change_made_since_the_schedule_was_read(fx: Fixture) {
    let store = fx.open_schedules().await;
    let read = schedule("s-1", 1_000);
    store.insert_schedule(&read).await.unwrap();
    let patched = ScheduleRow {
        content: "the new prompt".into(),
        updated_at: "2026-01-01T00:00:01.000Z".into(),
        ..read.clone()
    };
    assert!(store.update_schedule(&patched).await.unwrap());
    let paused = r#"{"outcome":"paused"}"#;
    let at = "2026-01-01T00:00:02.000Z";
    assert!(store.pause_schedule(&read.id, at, paused).await.unwrap());
    let now = store
        .find_schedule(&"local".into(), "s-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.content, "the new prompt");
    assert!(!now.enabled);
    assert_eq!(now.last_run.as_deref(), Some(paused));
    assert_eq!(now.updated_at, at);
    // Paused already, or gone: nothing to do.
    assert!(!store.pause_schedule(&read.id, at, paused).await.unwrap());
    assert!(!store.pause_schedule("s-2", at, paused).await.unwrap());
}

/// Each tick of a schedule is claimed by exactly one of the nodes whose schedulers race for it:
/// the claim is a compare-and-set on the tick in the shared database.
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
#[tokio::test]
async fn each_tick_of_a_schedule_is_claimed_by_one_node() {
    let Some(fx) = Fixture::postgres().await else {
        return;
    };
    let node = |node: &str| PgSettings {
        node_id: node.to_owned(),
        ..PgSettings::default()
    };
    let (a, b) = (
        fx.open_pg(node("node-a")).await,
        fx.open_pg(node("node-b")).await,
    );
    let start = 1_000_000;
    a.insert_schedule(&schedule("s-1", start)).await.unwrap();
    for tick in 0..20 {
        let from = start + tick * 1000;
        let (on_a, on_b) = tokio::join!(
            a.claim_tick("s-1", from, from + 1000),
            b.claim_tick("s-1", from, from + 1000)
        );
        assert_eq!(
            u8::from(on_a.unwrap()) + u8::from(on_b.unwrap()),
            1,
            "tick {tick}"
        );
    }
    a.close().await;
    b.close().await;
}

/// A SQLite file written before messages were kept in arrival order is upgraded when the server
/// opens it: every message reads back as it was, in order, and the next append continues its
/// seqs; another conversation's rows stay its own.
#[tokio::test]
async fn an_older_sqlite_file_keeps_its_messages_through_the_upgrade() {
    let fx = Fixture::sqlite();
    fx.migrate_to(10, 0).await;
    {
        let pool = fx.sql().await;
        for (id, agent) in [(1, "a"), (2, "b")] {
            sqlx::query(
                "insert into session_info (id, principal, agent_id, session_id, backend, cwd,
                    created_at, last_active_at, message_count, last_seq, prompt_count)
                 values (?, 'local', ?, ?, 'demo', '/tmp/x', 't', 't', 3, 3, 1)",
            )
            .bind(id)
            .bind(agent)
            .bind(uuid::Uuid::new_v4().to_string())
            .execute(&pool)
            .await
            .unwrap();
            for seq in 1..=3 {
                sqlx::query(
                    "insert into messages (session_pk, seq, message_type, prompt, payload,
                        created_at)
                     values (?, ?, ?, ?, ?, 't')",
                )
                .bind(id)
                .bind(seq)
                .bind(if seq == 1 { "user" } else { "system" })
                .bind(seq == 1)
                .bind(format!(r#"{{"n":"{agent}{seq}"}}"#))
                .execute(&pool)
                .await
                .unwrap();
            }
        }
        pool.close().await;
    }
    let store = fx.open().await;
    let a = store
        .find_session(&"local".into(), &agent("a"))
        .await
        .unwrap()
        .unwrap();
    let payloads = |rows: Vec<agentmux::store::StoredMessage>| {
        rows.iter()
            .map(|r| (r.seq, r.payload.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        payloads(
            store
                .messages_after(a.row, 0, PageSize::rows(100))
                .await
                .unwrap()
                .rows
        ),
        [
            (1, r#"{"n":"a1"}"#.to_string()),
            (2, r#"{"n":"a2"}"#.to_string()),
            (3, r#"{"n":"a3"}"#.to_string()),
        ]
    );
    assert_eq!(store.append(a.row, vec![prompt("next")]).await.unwrap(), 4);
    let b = store
        .find_session(&"local".into(), &agent("b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        payloads(
            store
                .messages_after(b.row, 1, PageSize::rows(100))
                .await
                .unwrap()
                .rows
        ),
        [
            (2, r#"{"n":"b2"}"#.to_string()),
            (3, r#"{"n":"b3"}"#.to_string()),
        ]
    );
    assert_eq!(
        store
            .messages_after(a.row, 0, PageSize::rows(100))
            .await
            .unwrap()
            .rows
            .len(),
        4
    );
    store.close().await;
}

/// Under writes that never pause, the SQLite WAL still starts over: its file stays under about
/// twice `store.wal_restart_mib` (16 here), however slow the checkpoint passes are on a busy
/// machine, instead of growing with everything ever written (a passive checkpoint alone never
/// lets a WAL restart while commits keep arriving). About 260 MiB pass through it here; 48 MiB
/// leaves room for the frame headers and the batch that crossed the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_bounded_under_continuous_writes() {
    let fx = Fixture::sqlite();
    let store: Arc<dyn Store> = Arc::new(
        fx.open_sqlite(SqliteSettings {
            wal_restart_pages: 16 * 256,
            ..SqliteSettings::default()
        })
        .await,
    );
    let wal = fx.dir.path().join("agentmux.db-wal");
    let payload = format!(r#"{{"text":"{}"}}"#, "x".repeat(3_000));
    let mut writers = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        let payload = payload.clone();
        writers.push(tokio::spawn(async move {
            let s = store
                .create_session(new_session("local", &format!("w{w}")))
                .await
                .unwrap();
            for _ in 0..900 {
                let rows = (0..12)
                    .map(|_| NewMessage::new("assistant", payload.clone()))
                    .collect();
                store.append(s.row, rows).await.unwrap();
            }
        }));
    }
    let mut largest = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for w in writers {
        w.await.unwrap();
    }
    let written = 8 * 900 * 12 * payload.len() as u64;
    assert!(written > 240 << 20, "{written}");
    eprintln!("the WAL's largest size: {largest} bytes of {written} written");
    assert!(
        largest < 48 << 20,
        "the WAL grew to {largest} bytes while {written} bytes were stored"
    );
    store.close().await;
}

/// A WAL restart size too small to be sensible, too large (its size in bytes would overflow),
/// or negative refuses to start with a message naming the setting.
#[tokio::test]
async fn a_bad_wal_restart_size_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    for (value, expected) in [
        ("1", "wal_restart_mib must be at least 16"),
        ("-5", "wal_restart_mib"),
        ("9223372036854775807", "at most 65536"),
    ] {
        let config = dir.path().join("bad.toml");
        std::fs::write(&config, format!("[store]\nwal_restart_mib = {value}\n")).unwrap();
        let (listened, output) = serve_output(&["--config", config.to_str().unwrap()], &[]).await;
        assert!(!listened, "{value}: {output}");
        assert!(output.contains(expected), "{value}: {output}");
    }
}

/// A push subscription is its principal's (the same endpoint again updates it, another
/// principal may hold the same endpoint as its own); an action token is taken once, and not
/// after it expired.
async fn push_subscriptions_are_per_principal_and_tokens_are_taken_once(fx: Fixture) {
    let store = fx.open_push().await;
    let sub = |id: &str, principal: &str, auth: &str| SubscriptionRow {
        id: id.into(),
        principal: principal.into(),
        endpoint: "https://push.example/abc".into(),
        p256dh: "key".into(),
        auth: auth.into(),
        events: "permission,turn".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
    };
    assert_eq!(
        store
            .save_subscription(&sub("a1", "alice", "one"))
            .await
            .unwrap(),
        "a1"
    );
    assert_eq!(
        store
            .save_subscription(&sub("a2", "alice", "two"))
            .await
            .unwrap(),
        "a1"
    );
    assert_eq!(
        store
            .save_subscription(&sub("b1", "bob", "x"))
            .await
            .unwrap(),
        "b1"
    );
    let alices = store.list_subscriptions(&"alice".into()).await.unwrap();
    assert_eq!(
        alices,
        [SubscriptionRow {
            auth: "two".into(),
            ..sub("a1", "alice", "")
        }]
    );
    assert!(
        store
            .has_endpoint(&"alice".into(), "https://push.example/abc")
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete_subscription(&"bob".into(), "a1")
            .await
            .unwrap()
    );
    assert!(
        store
            .delete_subscription(&"alice".into(), "a1")
            .await
            .unwrap()
    );
    store.forget_subscription("b1").await.unwrap();
    assert!(
        store
            .list_subscriptions(&"bob".into())
            .await
            .unwrap()
            .is_empty()
    );

    let action = |hash: &str, expires_ms: i64| ActionRow {
        token_hash: hash.into(),
        principal: "alice".into(),
        agent_id: "fix".into(),
        request_id: Some("r1".into()),
        expires_ms,
    };
    store
        .insert_action(&action("h1", 2_000), 1_000)
        .await
        .unwrap();
    store
        .insert_action(&action("h2", 1_500), 1_000)
        .await
        .unwrap();
    assert_eq!(
        store.take_action("h1", 1_200).await.unwrap(),
        Some(action("h1", 2_000))
    );
    assert_eq!(
        store.take_action("h1", 1_200).await.unwrap(),
        None,
        "used once"
    );
    assert_eq!(
        store.take_action("h2", 1_500).await.unwrap(),
        None,
        "expired"
    );
    assert_eq!(store.take_action("nope", 0).await.unwrap(), None);
}
