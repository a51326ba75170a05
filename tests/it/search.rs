//! Searches and pages of conversations on both engines (a real SQLite file and a real
//! PostgreSQL database): a search finds the words the user and the agent wrote, by the start of
//! a word, and never JSON keys or ids, another principal's conversations, or what a rewind or a
//! delete removed; query syntax is taken literally; pages go on from a cursor; a store written
//! before the search index is indexed when opened; a search that runs too long is stopped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentmux::store::postgres::PgSettings;
use agentmux::store::sqlite::SqliteSettings;
use agentmux::store::{
    Cursor, NewMessage, PageStart, SessionPage, SessionQuery, Store, StoreError,
};
use serde_json::json;

use crate::store::{
    Fixture, agent, message, new_session, on_both_engines, prompt, result, rewound_status,
};

on_both_engines!(
    a_search_finds_what_was_written_and_nothing_else,
    another_principals_conversations_are_never_found,
    rewinds_forks_deletes_and_imports_keep_the_index_exact,
    query_syntax_is_taken_literally,
    pages_go_on_from_a_cursor,
    words_the_newest_conversations_lack_are_looked_up,
    a_search_that_runs_too_long_is_stopped,
    an_older_store_is_indexed_when_opened,
);

/// The first page (of 50) of `principal`'s conversations that `q` finds.
async fn page(store: &Arc<dyn Store>, principal: &str, q: &str) -> SessionPage {
    let query = SessionQuery {
        limit: 50,
        start: PageStart::Offset(0),
        search: Some(q.into()),
        count: true,
    };
    store
        .list_sessions(&principal.into(), &query)
        .await
        .unwrap()
}

/// The `agent_id`s of `principal`'s conversations that `q` finds, sorted; checked against the
/// count.
async fn found_for(store: &Arc<dyn Store>, principal: &str, q: &str) -> Vec<String> {
    let page = page(store, principal, q).await;
    let mut ids: Vec<String> = page.rows.into_iter().map(|r| r.agent_id.into()).collect();
    assert_eq!(page.total, Some(ids.len() as i64), "the count of {q:?}");
    ids.sort();
    ids
}

async fn found(store: &Arc<dyn Store>, q: &str) -> Vec<String> {
    found_for(store, "local", q).await
}

/// A conversation `agent_id` of `principal` holding `messages`.
async fn stored(
    store: &Arc<dyn Store>,
    principal: &str,
    agent_id: &str,
    messages: Vec<NewMessage>,
) -> agentmux::store::SessionRecord {
    let s = store
        .create_session(new_session(principal, agent_id))
        .await
        .unwrap();
    if !messages.is_empty() {
        store.append(s.row, messages).await.unwrap();
    }
    s
}

/// An assistant message of one text block.
fn reply(text: &str) -> NewMessage {
    message(
        "assistant",
        json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}),
    )
}

/// A search finds the words of prompts, text blocks and tool results, and of titles, by the
/// start of a word, case-insensitively, all of its words in one message or title; never JSON
/// keys, ids or types, nor other messages' fields.
async fn a_search_finds_what_was_written_and_nothing_else(fx: Fixture) {
    let store = fx.open().await;
    stored(
        &store,
        "local",
        "prompt",
        vec![prompt("Deploy the NEEDLE tonight")],
    )
    .await;
    stored(&store, "local", "block", vec![reply("a needle here")]).await;
    let tool_result = json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_needle", "content": [{"type": "text", "text": "100% done, haystack"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "compiled without warnings"}
    ]}});
    stored(&store, "local", "tool", vec![message("user", tool_result)]).await;
    let keys = json!({"type": "assistant", "message": {"id": "needle", "role": "assistant", "content": [
        {"type": "tool_use", "id": "needle", "name": "needle", "input": {"needle": 1, "path": "needle.rs"}}
    ]}});
    stored(&store, "local", "keys", vec![message("assistant", keys)]).await;
    let others = vec![
        message("status", json!({"status": "needle", "detail": "needle"})),
        message("result", json!({"type": "result", "result": "needle"})),
        message(
            "system",
            json!({"type": "system", "message": {"content": "needle"}}),
        ),
        NewMessage::new("user", "not json: needle".into()),
    ];
    stored(&store, "local", "others", others).await;
    let titled = stored(&store, "local", "titled", vec![]).await;
    store
        .rename_session(titled.row, "Quarterly Roadmap")
        .await
        .unwrap();
    // A schedule's run names its conversation after the schedule, in a status of its own.
    let mut marker = message("status", json!({"status": "scheduled_run"}));
    marker.title = Some("Nightly digest".into());
    stored(&store, "local", "scheduled", vec![marker]).await;

    assert_eq!(found(&store, "needle").await, ["block", "prompt"]);
    assert_eq!(found(&store, "NEED").await, ["block", "prompt"], "a prefix");
    assert!(found(&store, "eedle").await.is_empty(), "not inside a word");
    assert_eq!(found(&store, "deploy needle").await, ["prompt"]);
    assert!(
        found(&store, "deploy here").await.is_empty(),
        "every word in one message"
    );
    assert_eq!(found(&store, "100 done").await, ["tool"]);
    assert_eq!(found(&store, "hay").await, ["tool"]);
    assert_eq!(found(&store, "warnings compiled").await, ["tool"]);
    assert_eq!(found(&store, "roadmap").await, ["titled"]);
    assert_eq!(found(&store, "quart road").await, ["titled"]);
    assert_eq!(found(&store, "digest").await, ["scheduled"]);
    for q in [
        "type",
        "text",
        "tool_result",
        "toolu",
        "tool",
        "role",
        "content",
        "input",
        "path",
        "rs",
        "assistant",
        "user",
        "status",
        "scheduled_run",
        "json",
    ] {
        assert!(
            found(&store, q).await.is_empty(),
            "{q} is no word of a text"
        );
    }
    store.close().await;
}

/// Another principal's conversations are never found, whatever their words or titles.
async fn another_principals_conversations_are_never_found(fx: Fixture) {
    let store = fx.open().await;
    stored(&store, "alice", "a", vec![prompt("secret plans")]).await;
    let b = stored(
        &store,
        "bob",
        "b",
        vec![prompt("secret recipe"), reply("plans")],
    )
    .await;
    store.rename_session(b.row, "Shared words").await.unwrap();
    assert_eq!(found_for(&store, "alice", "secret").await, ["a"]);
    assert_eq!(found_for(&store, "bob", "secret").await, ["b"]);
    assert!(found_for(&store, "alice", "recipe").await.is_empty());
    assert!(found_for(&store, "alice", "shared").await.is_empty());
    assert!(found_for(&store, "carol", "secret").await.is_empty());
    store.close().await;
}

/// A rewound message is no longer found and a kept one still is; a fork's copies are found
/// under the fork (its title too), a deleted conversation's words nowhere, not even under a new
/// conversation that takes its place in the store; an import is found once it is finished.
async fn rewinds_forks_deletes_and_imports_keep_the_index_exact(fx: Fixture) {
    let store = fx.open().await;
    let s = stored(
        &store,
        "local",
        "edit",
        vec![prompt("alpha one"), reply("bravo reply"), result()],
    )
    .await;
    store
        .append(
            s.row,
            vec![prompt("charlie two"), reply("delta reply"), result()],
        )
        .await
        .unwrap();
    assert_eq!(found(&store, "charlie").await, ["edit"]);
    store.rewind(s.row, 3, rewound_status()).await.unwrap();
    assert!(found(&store, "charlie").await.is_empty());
    assert!(found(&store, "delta").await.is_empty());
    assert_eq!(found(&store, "bravo").await, ["edit"]);

    store
        .fork(s.row, Some(3), new_session("local", "copy"))
        .await
        .unwrap();
    assert_eq!(found(&store, "bravo").await, ["copy", "edit"]);
    store.rename_session(s.row, "Renamed source").await.unwrap();
    assert_eq!(found(&store, "renamed").await, ["edit"]);
    let copy2 = store
        .fork(s.row, None, new_session("local", "copy2"))
        .await
        .unwrap();
    assert_eq!(found(&store, "renamed").await, ["copy2", "edit"]);
    let copy = store
        .find_session(&"local".into(), &agent("copy"))
        .await
        .unwrap()
        .unwrap();
    store
        .append(copy.row, vec![prompt("echo fresh")])
        .await
        .unwrap();
    assert_eq!(found(&store, "echo").await, ["copy"]);

    store.delete_session(s.row).await.unwrap();
    assert_eq!(found(&store, "bravo").await, ["copy", "copy2"]);
    assert_eq!(found(&store, "renamed").await, ["copy2"]);
    // The newest conversation gone, SQLite gives a new one its row id again.
    store.delete_session(copy2.row).await.unwrap();
    stored(&store, "local", "reuse", vec![prompt("zulu")]).await;
    assert!(found(&store, "renamed").await.is_empty());
    assert_eq!(found(&store, "bravo").await, ["copy"]);
    assert_eq!(found(&store, "zulu").await, ["reuse"]);

    let import = store
        .begin_import(new_session("local", "imp"))
        .await
        .unwrap();
    store
        .append(import.row, vec![prompt("imported foxtrot"), reply("golf")])
        .await
        .unwrap();
    assert!(found(&store, "foxtrot").await.is_empty(), "not finished");
    store.finish_import(import.row, false).await.unwrap();
    assert_eq!(found(&store, "foxtrot golf").await, Vec::<String>::new());
    assert_eq!(found(&store, "foxtrot").await, ["imp"]);
    assert_eq!(found(&store, "golf").await, ["imp"]);
    let gone = store
        .begin_import(new_session("local", "gone"))
        .await
        .unwrap();
    store
        .append(gone.row, vec![prompt("hotel india")])
        .await
        .unwrap();
    store.discard_import(gone.row).await.unwrap();
    stored(&store, "local", "after", vec![prompt("juliet")]).await;
    assert!(found(&store, "hotel").await.is_empty());
    store.close().await;
}

/// What either engine's query language would read as syntax (quotes, `*`, `NEAR`, `OR`,
/// parentheses, a lone `-`, `&`, `|`, `!`, `<->`, `:*`, backslashes) only separates words, or is
/// a word: no search fails, and each finds what its words find.
async fn query_syntax_is_taken_literally(fx: Fixture) {
    let store = fx.open().await;
    stored(
        &store,
        "local",
        "x",
        vec![prompt(
            r#"He said "quoted" (parens) NEAR the end - OR not * star AND x:y"#,
        )],
    )
    .await;
    stored(&store, "local", "y", vec![prompt("nothing special")]).await;
    for (q, expected) in [
        (r#""quoted""#, vec!["x"]),
        (r#"quoted""#, vec!["x"]),
        ("NEAR", vec!["x"]),
        ("OR", vec!["x"]),
        ("(parens)", vec!["x"]),
        ("not -star", vec!["x"]),
        ("x:y", vec!["x"]),
        ("NEAR(quoted parens, 2)", vec![]),
        ("quoted OR special", vec![]),
        ("quoted NOT parens", vec!["x"]),
        ("nothing -special", vec!["y"]),
        ("special*", vec!["y"]),
        ("a & b | !c <-> d:*", vec![]),
        ("'spec' \\ ''", vec!["y"]),
        ("'; drop table messages; --", vec![]),
        ("\"", vec![]),
        ("*", vec![]),
        ("-", vec![]),
        ("(", vec![]),
        ("()", vec![]),
        ("\"\"\"", vec![]),
        ("AND", vec!["x"]),
        ("^x", vec!["x"]),
        ("{x}", vec!["x"]),
        ("x NEAR/2 y", vec![]),
    ] {
        assert_eq!(found(&store, q).await, expected, "{q:?}");
    }
    let many: String = (0..100).map(|i| format!("w{i} ")).collect();
    assert!(found(&store, &many).await.is_empty());
    assert!(found(&store, "").await.is_empty(), "no word finds nothing");
    store.close().await;
}

/// Pages of a listing, and of a search, go on from the cursor of the page before: together
/// they are the whole list in order, once each, even among conversations with the same
/// activity time; the count is there only when asked.
async fn pages_go_on_from_a_cursor(fx: Fixture) {
    let store = fx.open().await;
    for i in 0..7 {
        let mut m = prompt(&format!("common word {i}"));
        // Five of them share an instant, before the others'.
        if i < 5 {
            m.created_at = "2020-01-01T00:00:00.000Z".into();
        }
        stored(&store, "local", &format!("c{i}"), vec![m]).await;
    }
    stored(&store, "other", "o", vec![prompt("common word")]).await;
    for search in [None, Some("common")] {
        let query = |start| SessionQuery {
            limit: 2,
            start,
            search: search.map(str::to_owned),
            count: false,
        };
        let whole = store
            .list_sessions(
                &"local".into(),
                &SessionQuery {
                    limit: 50,
                    count: true,
                    ..query(PageStart::Offset(0))
                },
            )
            .await
            .unwrap();
        assert_eq!((whole.total, whole.more), (Some(7), false));
        let mut paged = Vec::new();
        let mut start = PageStart::Offset(0);
        loop {
            let page = store
                .list_sessions(&"local".into(), &query(start))
                .await
                .unwrap();
            assert_eq!(page.total, None, "not counted unless asked");
            assert!(page.rows.len() <= 2);
            paged.extend(page.rows.iter().map(|r| r.agent_id.to_string()));
            if !page.more {
                break;
            }
            start = PageStart::Before(Cursor::after(page.rows.last().unwrap()));
        }
        let order: Vec<String> = whole.rows.iter().map(|r| r.agent_id.to_string()).collect();
        assert_eq!(paged, order, "search {search:?}");
        assert_eq!(&order[..2], ["c6", "c5"]);
    }
    let token = Cursor::after(
        &store
            .find_session(&"local".into(), &agent("c1"))
            .await
            .unwrap()
            .unwrap(),
    )
    .token();
    assert!(Cursor::from_token(&token).is_some());
    for bad in ["", "!!", "bm90IGEgY3Vyc29y", &"A".repeat(10_000)] {
        assert!(Cursor::from_token(bad).is_none(), "{bad}");
    }
    store.close().await;
}

/// A search first reads the words of the newest conversations, then, past a budget (about
/// 25,000 messages on SQLite), looks them up in the index: either way the page is the same,
/// in order, with what only older conversations hold.
async fn words_the_newest_conversations_lack_are_looked_up(fx: Fixture) {
    let store = fx.open().await;
    stored(&store, "local", "old-1", vec![prompt("rare bravo")]).await;
    stored(&store, "local", "old-2", vec![prompt("rare charlie")]).await;
    for c in 0..3 {
        let s = stored(&store, "local", &format!("new-{c}"), vec![]).await;
        for _ in 0..10 {
            let batch = (0..1000)
                .map(|i| reply(&format!("filler text {i}")))
                .collect();
            store.append(s.row, batch).await.unwrap();
        }
    }
    let page = page(&store, "local", "rare").await;
    let ids: Vec<String> = page.rows.iter().map(|r| r.agent_id.to_string()).collect();
    assert_eq!(
        (ids, page.total),
        (vec!["old-2".into(), "old-1".into()], Some(2))
    );
    assert_eq!(found(&store, "rare bravo").await, ["old-1"]);
    assert_eq!(found(&store, "fill").await, ["new-0", "new-1", "new-2"]);
    assert!(found(&store, "rare filler").await.is_empty());
    store.close().await;
}

/// A search that runs longer than the store allows is stopped with its own error, and the
/// store goes on serving: on SQLite one that looks at many messages with a limit of 1 ms, on PostgreSQL
/// one that waits behind a lock.
async fn a_search_that_runs_too_long_is_stopped(fx: Fixture) {
    let limit = Duration::from_millis(1);
    let store: Arc<dyn Store> = match fx.pg_url() {
        Some(_) => Arc::new(
            fx.open_pg(PgSettings {
                search_timeout: Duration::from_millis(300),
                ..PgSettings::default()
            })
            .await,
        ),
        None => Arc::new(
            fx.open_sqlite(SqliteSettings {
                search_timeout: limit,
                ..SqliteSettings::default()
            })
            .await,
        ),
    };
    let words: String = (0..40).map(|i| format!("word{i} ")).collect();
    for c in 0..4 {
        let s = store
            .create_session(new_session("local", &format!("s{c}")))
            .await
            .unwrap();
        for _ in 0..5 {
            let batch = (0..1000).map(|_| reply(&words)).collect();
            store.append(s.row, batch).await.unwrap();
        }
    }
    // A word no message holds: every message is looked at.
    let search = SessionQuery {
        limit: 50,
        start: PageStart::Offset(0),
        search: Some("nowhere".into()),
        count: true,
    };
    let held = match fx.pg_url() {
        Some(url) => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query("begin").execute(&mut conn).await.unwrap();
            sqlx::query("lock table messages in access exclusive mode")
                .execute(&mut conn)
                .await
                .unwrap();
            Some(conn)
        }
        None => None,
    };
    let outcome = store.list_sessions(&"local".into(), &search).await;
    assert!(
        matches!(outcome, Err(StoreError::SearchTimeout(_))),
        "{outcome:?}"
    );
    if let Some(mut conn) = held {
        sqlx::query("rollback").execute(&mut conn).await.unwrap();
        assert_eq!(
            store
                .list_sessions(&"local".into(), &search)
                .await
                .unwrap()
                .total,
            Some(0)
        );
    }
    let listing = SessionQuery {
        search: None,
        ..search
    };
    assert_eq!(
        store
            .list_sessions(&"local".into(), &listing)
            .await
            .unwrap()
            .rows
            .len(),
        4
    );
    assert!(
        store
            .find_session(&"local".into(), &agent("s0"))
            .await
            .unwrap()
            .is_some()
    );
    store.close().await;
}

/// A store written before the search index had one is indexed when opened: its messages and
/// titles are found, progress is logged, and what is stored from then on is found too.
async fn an_older_store_is_indexed_when_opened(fx: Fixture) {
    fx.migrate_to(13, 6).await;
    // The server holds a SQLite file alone while it runs: this connection closes first.
    let sql = fx.sql().await;
    let payloads = [
        (
            "user",
            json!({"type": "user", "message": {"role": "user", "content": "Old kilo prompt"}}),
        ),
        (
            "assistant",
            json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "old lima reply"}]}}),
        ),
        ("status", json!({"status": "kilo"})),
    ];
    for (id, agent, title) in [(1, "old-a", Some("Ancient mike title")), (2, "old-b", None)] {
        sqlx::query(
            "insert into session_info (principal, agent_id, session_id, backend, cwd, title,
                created_at, last_active_at, message_count, last_seq, prompt_count)
             values ('local', $1, $2, 'demo', '/tmp/x', $3, 't', 't', 3, 3, 1)",
        )
        .bind(agent)
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(title)
        .execute(&sql)
        .await
        .unwrap();
        for (seq, (kind, payload)) in payloads.iter().enumerate() {
            sqlx::query(
                "insert into messages (session_pk, seq, message_type, payload, created_at)
                 values ($1, $2, $3, $4, 't')",
            )
            .bind(id)
            .bind(seq as i64 + 1)
            .bind(*kind)
            .bind(payload.to_string())
            .execute(&sql)
            .await
            .unwrap();
        }
    }
    sql.close().await;
    let logs = Logs::default();
    let store = {
        let _capture = tracing::subscriber::set_default(logs.subscriber());
        fx.open().await
    };
    assert!(
        logs.text().contains("building the search index"),
        "{}",
        logs.text()
    );
    assert_eq!(found(&store, "kilo").await, ["old-a", "old-b"]);
    assert_eq!(found(&store, "lima reply").await, ["old-a", "old-b"]);
    assert_eq!(found(&store, "mike").await, ["old-a"]);
    let b = store
        .find_session(&"local".into(), &agent("old-b"))
        .await
        .unwrap()
        .unwrap();
    store.append(b.row, vec![prompt("november")]).await.unwrap();
    assert_eq!(found(&store, "november").await, ["old-b"]);
    store.close().await;
    let sql = fx.sql().await;
    let left: i64 = sqlx::query_scalar("select count(*) from search_backfill")
        .fetch_one(&sql)
        .await
        .unwrap();
    assert_eq!(left, 0, "done once");
    sql.close().await;
    // Opened again, nothing is indexed twice.
    let store = fx.open().await;
    assert_eq!(found(&store, "kilo").await, ["old-a", "old-b"]);
    store.close().await;
}

/// What the store logs while a test holds [`Logs::subscriber`] as its thread's default.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let logs = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .finish()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
