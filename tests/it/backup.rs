//! Backing up, restoring and upgrading the store: `agentmux backup` of a live SQLite store
//! through its server, of a stopped one from its file; `agentmux restore` only into a stopped
//! server's data dir; a database of an earlier schema migrated and served, one of a newer
//! agentmux refused untouched.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::*;

/// `agentmux` with `args`, none of the server's variables inherited.
fn agentmux(args: &[&str], env: &[(&str, &str)]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args(args)
        .env_remove("AGENTMUX_CONFIG")
        .env_remove("AGENTMUX_STORE_URL")
        .env_remove("AGENTMUX_BIND")
        .env_remove("AGENTMUX_DATA_DIR")
        .env_remove("AGENTMUX_TOKEN")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// What a command printed on stdout and stderr.
fn said(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `agentmux backup --to FILE` against `server`, with `extra` arguments.
fn backup(server: &TestServer, to: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec![
        "backup",
        "--to",
        to.to_str().unwrap(),
        "--bind",
        &server.addr,
        "--data-dir",
        server.data_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    agentmux(&args, env)
}

/// `agentmux restore --from FILE` into `data_dir`.
fn restore(from: &Path, data_dir: &Path) -> Output {
    agentmux(
        &[
            "restore",
            "--from",
            from.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
        ],
        &[],
    )
}

/// The `agent_id`s of the conversations `server` lists, sorted.
async fn listed(server: &TestServer) -> Vec<String> {
    let list: Value = reqwest::get(server.url("/api/sessions?limit=100"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut ids: Vec<String> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["agent_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// The stored frames of conversation `agent_id` on `server`, as `message_type`s.
async fn stored_kinds(server: &TestServer, agent_id: &str) -> Vec<String> {
    let page: Value =
        reqwest::get(server.url(&format!("/api/sessions/{agent_id}/messages?limit=100")))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    page["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("{agent_id}: {page}"))
        .iter()
        .map(|m| m["message_type"].as_str().unwrap().to_owned())
        .collect()
}

/// A backup of a live store is made by its server while it serves, a turn running meanwhile:
/// it holds every conversation as it was at that moment and nothing stored after. A restore
/// is refused while the server runs (which goes on serving), and once it is stopped puts the
/// backup in place, keeping the database it replaces; the server started on it serves the
/// backed-up conversations, and closes the turn that was running when the copy was made.
#[tokio::test]
#[cfg_attr(
    test_store_postgres,
    ignore = "about the SQLite file: a PostgreSQL store is backed up with pg_dump"
)]
async fn a_live_store_is_backed_up_by_its_server_and_restored_once_stopped() {
    let gates = Gates::new("");
    let mut server = gates.start().await;
    let mut c = server.client().await;
    for id in ["one", "two"] {
        chat_ack(&mut c, id, "before the backup").await;
        gates.open(id, 1);
        c.until_result(id).await;
    }
    chat_ack(&mut c, "running", "held at its gate").await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentmux-backup.db");
    let out = backup(&server, &file, &[], &[]);
    let (stdout, stderr) = said(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("backed up 3 conversations (")
            && stdout.contains(&format!("from the server at {}", server.addr)),
        "{stdout}"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "only the server's user reads it");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing else left beside it"
    );

    gates.open("running", 1);
    c.until_result("running").await;
    chat_ack(&mut c, "after", "after the backup").await;
    gates.open("after", 1);
    c.until_result("after").await;

    let out = restore(&file, &server.data_dir);
    let (_, stderr) = said(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("a server is running on") && stderr.contains("stop it first"),
        "{stderr}"
    );
    chat_ack(&mut c, "after", "still serving").await;
    gates.open("after", 2);
    c.until_result("after").await;
    drop(c);

    assert!(server.terminate().await.success());
    let out = restore(&file, &server.data_dir);
    let (stdout, stderr) = said(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("restored 3 conversations (") && stdout.contains("kept as"),
        "{stdout}"
    );
    let kept: Vec<String> = std::fs::read_dir(&server.data_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("agentmux.db.replaced-"))
        .collect();
    assert_eq!(kept.len(), 1, "the replaced database is kept");

    server.restart().await;
    assert_eq!(listed(&server).await, ["one", "running", "two"]);
    assert_eq!(
        stored_kinds(&server, "one").await.last().unwrap(),
        "result",
        "a finished conversation whole"
    );
    let running = stored_kinds(&server, "running").await;
    assert_eq!(running.first().unwrap(), "user");
    assert_eq!(
        running.last().unwrap(),
        "result",
        "the turn running at the copy is closed at start: {running:?}"
    );
}

/// With no server answering, the file of a stopped store is copied directly; a file a server
/// holds while nothing answers at the address given is not, and says what to give instead.
#[tokio::test]
#[cfg_attr(
    test_store_postgres,
    ignore = "about the SQLite file: a PostgreSQL store is backed up with pg_dump"
)]
async fn a_stopped_store_is_backed_up_from_its_file_and_a_held_one_is_not() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    chat_ack(&mut c, "kept", "hello").await;
    c.until_result("kept").await;
    drop(c);

    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.db");
    let data_dir = server.data_dir.to_str().unwrap().to_owned();
    let args = |to: &Path| {
        agentmux(
            &[
                "backup",
                "--to",
                to.to_str().unwrap(),
                "--bind",
                &nobody,
                "--data-dir",
                &data_dir,
            ],
            &[],
        )
    };
    let out = args(&file);
    let (_, stderr) = said(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("is in use by another process")
            && stderr.contains(&format!("no server answers at {nobody}"))
            && stderr.contains("--bind"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );

    assert!(server.terminate().await.success());
    let out = args(&file);
    let (stdout, stderr) = said(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("backed up 1 conversation (")
            && stdout.contains("no server was running"),
        "{stdout}"
    );
    server.restart().await;
    assert_eq!(listed(&server).await, ["kept"], "the store is as it was");
}

/// Only the server's admins get a backup: without a credential it is 401 (and the command
/// says to give a token), another principal's is 403. A backup never replaces a file. On
/// PostgreSQL the server answers that `pg_dump` backs it up.
#[tokio::test]
async fn only_admins_get_a_backup_and_it_never_replaces_a_file() {
    let (_cfg, config) = config_file("[auth]\nadmins = [\"root-person\"]\n");
    let server = TestServer::start_with_env(
        &["--config", &config, "--demo-delay-ms", "0"],
        &[("AGENTMUX_TOKENS", "tok-admin=root-person,tok-bob=bob")],
    )
    .await;
    let http = reqwest::Client::new();
    let get = async |token: Option<&str>| {
        let mut request = http.get(server.url("/api/admin/backup"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        (status, content_type, response.bytes().await.unwrap())
    };
    let code = |body: &[u8]| serde_json::from_slice::<Value>(body).unwrap()["code"].clone();
    let (status, _, body) = get(None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized".into()));
    let (status, _, body) = get(Some("tok-bob")).await;
    assert_eq!((status, code(&body)), (403, "forbidden".into()));
    let (status, content_type, body) = get(Some("tok-admin")).await;
    if on_postgres() {
        assert_eq!((status, code(&body)), (422, "unsupported".into()));
        assert!(String::from_utf8_lossy(&body).contains("pg_dump"));
    } else {
        assert_eq!(status, 200);
        assert_eq!(content_type, "application/vnd.sqlite3");
        assert!(body.starts_with(b"SQLite format 3\0"), "a SQLite file");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.db");
    let out = backup(&server, &file, &[], &[]);
    let (_, stderr) = said(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("(unauthorized)") && stderr.contains("--token or AGENTMUX_TOKEN"),
        "{stderr}"
    );
    let out = backup(&server, &file, &["--token", "tok-bob"], &[]);
    assert!(said(&out).1.contains("(forbidden)"), "{:?}", said(&out));
    assert!(!file.exists(), "nothing kept of a refused backup");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let out = backup(&server, &file, &[], &[("AGENTMUX_TOKEN", "tok-admin")]);
    let (stdout, stderr) = said(&out);
    if on_postgres() {
        assert!(!out.status.success());
        assert!(
            stderr.contains("(unsupported)") && stderr.contains("pg_dump"),
            "{stderr}"
        );
        return;
    }
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("backed up 0 conversations ("),
        "{stdout}"
    );

    std::fs::write(dir.path().join("taken.db"), b"mine").unwrap();
    let taken = dir.path().join("taken.db");
    let out = backup(&server, &taken, &["--token", "tok-admin"], &[]);
    assert!(
        said(&out).1.contains("exists: back up into a new file"),
        "{:?}",
        said(&out)
    );
    assert_eq!(std::fs::read(&taken).unwrap(), b"mine", "left as it was");
}

/// A restore checks the backup before anything is changed: a file that is not SQLite, a SQLite
/// file that is not agentmux's, a backup of a newer agentmux, a missing file and the database
/// itself are each refused with the reason, and the database stays as it was.
#[tokio::test]
#[cfg_attr(
    test_store_postgres,
    ignore = "about the SQLite file: a PostgreSQL store is restored with pg_restore"
)]
async fn a_restore_refuses_what_is_not_a_backup_it_can_use() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    chat_ack(&mut c, "kept", "hello").await;
    c.until_result("kept").await;
    drop(c);
    assert!(server.terminate().await.success());
    let db = server.data_dir.join("agentmux.db");
    let before = std::fs::read(&db).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let foreign = dir.path().join("foreign.db");
    sqlite_exec(
        &foreign,
        "create table notes (body text); insert into notes values ('x');",
    )
    .await;
    let newer = dir.path().join("newer.db");
    let out = agentmux(
        &[
            "backup",
            "--to",
            newer.to_str().unwrap(),
            "--bind",
            "127.0.0.1:1",
            "--data-dir",
            server.data_dir.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{:?}", said(&out));
    sqlite_exec(
        &newer,
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time)
         values (99999, 'from a later agentmux', true, x'00', 0);",
    )
    .await;

    let missing = dir.path().join("missing.db");
    for (from, reason) in [
        (&garbage, "is not a SQLite database"),
        (&foreign, "is not an agentmux database"),
        (
            &newer,
            "was made by a newer agentmux: it has schema version 99999",
        ),
        (&missing, "cannot read"),
        (&db, "is the database itself"),
    ] {
        let out = restore(from, &server.data_dir);
        let (_, stderr) = said(&out);
        assert!(!out.status.success(), "{from:?}");
        assert!(
            stderr.contains(reason) && stderr.contains(from.to_str().unwrap()),
            "{reason:?} in {stderr}"
        );
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the database untouched"
    );
    let names: Vec<String> = std::fs::read_dir(&server.data_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("agentmux.db"))
        .collect();
    assert_eq!(names, ["agentmux.db"], "nothing left beside it");
}

/// Runs `sql` on the SQLite file `path` (made when missing).
async fn sqlite_exec(path: &Path, sql: &str) {
    use sqlx::{Connection as _, Executor as _};
    let url = format!("sqlite://{}?mode=rwc", path.to_str().unwrap());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    conn.execute(sqlx::raw_sql(sql)).await.unwrap();
    conn.close().await.unwrap();
}

/// A database made by an earlier agentmux (schema version 7, before schedules, kept as SQL in
/// `fixtures/schema-0007.sql`) is migrated at start and serves its conversations: their
/// titles, their history, and their next turns.
#[tokio::test]
#[cfg_attr(test_store_postgres, ignore = "the fixture is a SQLite database")]
async fn a_database_of_an_earlier_schema_is_migrated_and_served() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/schema-0007.sql");
    let sql = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("@DATA_DIR@", dir.path().to_str().unwrap());
    sqlite_exec(&dir.path().join("agentmux.db"), &sql).await;
    let mut server = TestServer::start_in(dir.path(), &["--demo-delay-ms", "0"], &[]).await;

    assert_eq!(listed(&server).await, FIXTURE_CONVERSATIONS);
    let one: Value = reqwest::get(server.url("/api/sessions/old-one"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one["title"], "Renamed before the upgrade");
    let turn = ["user", "system", "assistant", "result"];
    assert_eq!(
        stored_kinds(&server, "old-one").await,
        [turn, turn].concat()
    );
    let mut c = server.client().await;
    chat_ack(&mut c, "old-one", "after the upgrade").await;
    let turn = c.until_result("old-one").await;
    assert_eq!(reply_text(&turn), "Echo: after the upgrade (turn 3)");
    assert_eq!(
        turn.last().unwrap()["seq"],
        12,
        "seq goes on from the stored ones"
    );
    drop(c);

    let db = server.stop_and_open_db().await;
    let newest: i64 = sqlx::query_scalar("select max(version) from _sqlx_migrations")
        .fetch_one(&db)
        .await
        .unwrap();
    let known = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .split('_')
                .next()?
                .parse::<i64>()
                .ok()
        })
        .max()
        .unwrap();
    assert_eq!(newest, known, "migrated to this build's schema");
}

/// The conversations of `fixtures/schema-0007.sql`.
const FIXTURE_CONVERSATIONS: [&str; 2] = ["old-one", "old-two"];

/// A database that a newer agentmux has migrated past this build's schema is refused at
/// start with a message saying so and what to do, on either engine, and left as it was.
#[tokio::test]
async fn a_database_of_a_newer_agentmux_is_refused_untouched() {
    let mut server = TestServer::start().await;
    let mut c = server.client().await;
    chat_ack(&mut c, "kept", "hello").await;
    c.until_result("kept").await;
    drop(c);
    let db = server.stop_and_open_db().await;
    sqlx::query(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time)
         values (99999, 'from a later agentmux', $1, $2, 0)",
    )
    .bind(true)
    .bind(vec![0u8; 48])
    .execute(&db)
    .await
    .unwrap();
    let messages = |db: sqlx::AnyPool| async move {
        let n: i64 = sqlx::query_scalar("select count(*) from messages")
            .fetch_one(&db)
            .await
            .unwrap();
        db.close().await;
        n
    };
    let before = messages(db).await;

    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"));
    serve
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&server.data_dir)
        .env_remove("AGENTMUX_CONFIG")
        .env_remove("AGENTMUX_STORE_URL");
    if let Some(url) = &server.store_url {
        serve.env("AGENTMUX_STORE_URL", url);
    }
    let out = serve.output().unwrap();
    let (stdout, stderr) = said(&out);
    assert!(
        !out.status.success() && !stdout.contains("listening"),
        "{stdout}"
    );
    for needle in [
        "was made by a newer agentmux",
        "it has schema version 99999",
        "knows versions up to",
        "Run the newer agentmux, or restore a backup made by this one",
    ] {
        assert!(stderr.contains(needle), "{needle:?} in {stderr}");
    }
    assert_eq!(messages(server.db().await).await, before, "nothing changed");
}
