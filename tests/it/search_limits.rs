//! Searches over HTTP under their limits: one that runs too long is answered 503
//! `search_timeout` while other requests go on, and a principal already running as many
//! searches as it may is refused one more (429 `limit_exceeded`) while another principal's go
//! on.

use serde_json::Value;
use sqlx::Connection;

use crate::bodies::rest_as;
use crate::common::*;
use crate::imports::import;
use crate::refused::export_of;
use crate::rest::Rest;
use crate::security::TOKENS;
use crate::store::Fixture;

/// Takes `messages`' exclusive lock on the PostgreSQL database at `url`, held until the
/// connection rolls back: every search waits for it.
async fn lock_messages(url: &str) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("begin").execute(&mut conn).await.unwrap();
    sqlx::query("lock table messages in access exclusive mode")
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

/// A search stopped at `store.search_timeout_ms` is answered 503 `search_timeout`, saying so;
/// the listing goes on. On SQLite a search that looks at many messages with a limit of 1 ms, on
/// PostgreSQL one that waits behind a lock.
#[tokio::test]
async fn a_search_that_runs_too_long_answers_search_timeout() {
    let limit = if on_postgres() { 500 } else { 1 };
    let (_cfg, config) = config_file(&format!("[store]\nsearch_timeout_ms = {limit}\n"));
    let server = TestServer::start_with(&["--demo-delay-ms", "0", "--config", &config]).await;
    let (status, imported) = import(&server, "none", "big", export_of(20_000)).await;
    assert_eq!(status, 201, "{imported}");
    let held = match &server.store_url {
        Some(url) => Some(lock_messages(url).await),
        None => None,
    };
    let rest = Rest::new(&server);
    // A word no message holds: every message is looked at.
    let (status, err) = rest.get("/api/sessions?q=nowhere").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (503, Some("search_timeout")),
        "{err}"
    );
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains(&format!("{limit} ms")),
        "{err}"
    );
    if let Some(mut conn) = held {
        sqlx::query("rollback").execute(&mut conn).await.unwrap();
    }
    let (status, list) = rest.get("/api/sessions").await;
    assert_eq!(status, 200);
    assert_eq!(list["sessions"][0]["agent_id"], "big");
}

/// With `session.max_searches_per_principal = 2`, a principal's third search while two wait
/// behind a lock is refused at once with 429 `limit_exceeded`, another principal's search is
/// not, and once the lock is gone every search that waited is answered and the principal may
/// search again.
#[tokio::test]
#[cfg_attr(
    no_test_pg,
    ignore = "needs PostgreSQL (AGENTMUX_TEST_PG_URL), not configured here"
)]
async fn a_principal_runs_at_most_its_searches_at_once() {
    let Some(fx) = Fixture::postgres().await else {
        return;
    };
    let url = fx.pg_url().unwrap();
    let (_cfg, config) = config_file(&format!(
        "{TOKENS}[session]\nmax_searches_per_principal = 2\n[store]\nmax_searches = 4\nsearch_timeout_ms = \"2m\"\n"
    ));
    let server = TestServer::start_in(
        fx.dir.path(),
        &["--demo-delay-ms", "0", "--config", &config],
        &[("AGENTMUX_STORE_URL", url.as_str())],
    )
    .await;
    for (token, agent_id) in [("tok-alice", "mine"), ("tok-bob", "theirs")] {
        let (status, imported) = import(&server, token, agent_id, export_of(10)).await;
        assert_eq!(status, 201, "{imported}");
    }
    let search = |token: &'static str| {
        let server_url = server.url("/api/sessions?q=question");
        tokio::spawn(async move {
            let resp = reqwest::Client::new()
                .get(server_url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        })
    };
    let waiting = |n: i64| {
        let url = url.clone();
        async move {
            // Only searches match words (`@@`): the server's own work on `messages` (a batch
            // of its writer) may wait behind the lock too, and is not counted.
            eventually(&format!("{n} searches wait for the lock"), || async {
                let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
                let waiting: i64 = sqlx::query_scalar(
                    "select count(*) from pg_stat_activity
                     where datname = current_database() and application_name = 'agentmux'
                       and wait_event_type = 'Lock' and query like '%@@%'",
                )
                .fetch_one(&mut conn)
                .await
                .unwrap();
                (waiting == n).then_some(())
            })
            .await
        }
    };
    let mut lock = lock_messages(&url).await;
    let alices = [search("tok-alice"), search("tok-alice")];
    waiting(2).await;
    let (status, err) = rest_as(&server, "tok-alice", "GET", "/api/sessions?q=question").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (429, Some("limit_exceeded")),
        "{err}"
    );
    let bobs = search("tok-bob");
    waiting(3).await;
    sqlx::query("rollback").execute(&mut lock).await.unwrap();
    for (searcher, mine) in alices
        .into_iter()
        .map(|s| (s, "mine"))
        .chain([(bobs, "theirs")])
    {
        let (status, found) = searcher.await.unwrap();
        assert_eq!(status, 200, "{found}");
        assert_eq!(found["sessions"][0]["agent_id"], mine);
    }
    let (status, _) = rest_as(&server, "tok-alice", "GET", "/api/sessions?q=question").await;
    assert_eq!(status, 200);
}

/// Search limits no search could run within are refused at start-up, saying which.
#[tokio::test]
async fn search_limits_no_search_could_meet_refuse_to_start() {
    let dir = tempfile::tempdir().unwrap();
    for (setting, expected) in [
        (
            "search_timeout_ms = 0",
            "search_timeout_ms must be at least 1 ms",
        ),
        ("search_timeout_ms = \"2h\"", "at most an hour"),
        ("search_timeout_ms = -1", "search_timeout_ms"),
        ("max_searches = 0", "max_searches must be at least 1"),
    ] {
        let config = dir.path().join("bad.toml");
        std::fs::write(&config, format!("[store]\n{setting}\n")).unwrap();
        let (listened, output) = serve_output(&["--config", config.to_str().unwrap()], &[]).await;
        assert!(!listened, "{setting}: {output}");
        assert!(output.contains(expected), "{setting}: {output}");
    }
}
