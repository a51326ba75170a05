//! Each principal's own agent credentials, through the fake CLI and the fake ACP agent (which
//! write the environment they got): a principal's variables reach that principal's agents only and restart them when
//! they change, are never shown (REST, frames, exports, logs, the database), bad names and
//! values are refused, `require_own_credentials` refuses turns without them, and the server
//! refuses to start without the key that opens them. With the real CLI and the fake model API:
//! the model sees each principal's own key, and the CLI gets `--max-budget-usd`.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::claude::Fixture;
use crate::common::*;
use crate::real_cli::{RealSetup, args_of, cli_children, real_cli};
use crate::repos::rest;
use crate::security::{TOKENS, connect_as};

/// A secret key (32 bytes, base64) and another.
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const OTHER_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

/// Alice, Bob and the admin Root, with `extra` tables.
fn config(extra: &str) -> String {
    format!("[auth]\nadmins = [\"root\"]\n{TOKENS}\"tok-root\" = \"root\"\n{extra}")
}

/// The fake CLI's environment at its last start.
fn dumped(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn put_key(server: &TestServer, token: &str, value: &str) -> (u16, Value) {
    rest(
        server,
        Some(token),
        "PUT",
        "/api/me/credentials/claude",
        Some(json!({"env": {"ANTHROPIC_API_KEY": value}})),
    )
    .await
}

/// A server of `fixture` with the secret key `key` (if any), its log written to `log`.
async fn start_logged(fixture: &Fixture, key: Option<&str>, dump: &Path, log: &Path) -> TestServer {
    let config = fixture.config.to_string_lossy().into_owned();
    let fake = sibling("fake-claude");
    let argv = [
        "--backend",
        "claude",
        "--claude-bin",
        fake.to_str().unwrap(),
        "--config",
        &config,
    ];
    let dump = dump.to_string_lossy().into_owned();
    let mut env = vec![
        ("FAKE_CLAUDE_ENV_DUMP", dump.as_str()),
        ("ANTHROPIC_API_KEY", "operator-key"),
        ("RUST_LOG", "agentmux=debug"),
    ];
    if let Some(key) = key {
        env.push(("AGENTMUX_SECRET_KEY", key));
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    TestServer::start_in_logged(&fixture.data_dir(), &argv, &env, log).await
}

/// Every byte the stopped server's database holds (on PostgreSQL: the tables' text).
async fn database_text(server: &TestServer) -> Vec<u8> {
    if !on_postgres() {
        let mut all = Vec::new();
        for suffix in ["", "-wal", "-shm"] {
            let path = server.data_dir.join(format!("agentmux.db{suffix}"));
            all.extend(std::fs::read(path).unwrap_or_default());
        }
        return all;
    }
    let db = server.db().await;
    let mut all = Vec::new();
    for query in [
        "select payload from messages",
        "select principal || name || key_id || set_at from credentials",
    ] {
        let rows: Vec<String> = sqlx::query_scalar(query).fetch_all(&db).await.unwrap();
        all.extend(rows.join("\n").into_bytes());
    }
    let sealed: Vec<Vec<u8>> = sqlx::query_scalar("select sealed from credentials")
        .fetch_all(&db)
        .await
        .unwrap();
    all.extend(sealed.concat());
    db.close().await;
    all
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn own_credentials_reach_only_their_agents_and_are_never_shown() {
    let fixture = Fixture::new(&config(""));
    let dump = fixture.dir.path().join("env.json");
    let log = fixture.dir.path().join("server.log");
    let mut server = start_logged(&fixture, Some(KEY), &dump, &log).await;
    let (secret, rotated) = ("sk-alice-0123456789", "sk-alice-rotated-987");

    let (status, set) = put_key(&server, "tok-alice", secret).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["set"][0]["name"], "ANTHROPIC_API_KEY", "{set}");
    let mut frames = Vec::new();
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut alice, "mine", "hello").await;
    frames.extend(alice.until_result("mine").await);
    assert_eq!(dumped(&dump)["ANTHROPIC_API_KEY"], secret);
    // Bob has none: his agent runs on the operator's.
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    chat_ack(&mut bob, "his", "hello").await;
    frames.extend(bob.until_result("his").await);
    assert_eq!(dumped(&dump)["ANTHROPIC_API_KEY"], "operator-key");

    // A new value restarts Alice's live agent at her next turn, on it.
    let (status, _) = put_key(&server, "tok-alice", rotated).await;
    assert_eq!(status, 200);
    // Every frame of the turn, the ack's neighbours included.
    alice
        .send(json!({"type": "chat", "agent_id": "mine", "content": "again"}))
        .await;
    let next = alice.until_result("mine").await;
    assert!(next.iter().any(|f| f["status"] == "restarting"), "{next:?}");
    assert_eq!(dumped(&dump)["ANTHROPIC_API_KEY"], rotated);
    frames.extend(next);

    // Listed by name only, and each principal's own.
    let (_, mine) = rest(
        &server,
        Some("tok-alice"),
        "GET",
        "/api/me/credentials",
        None,
    )
    .await;
    let claude = &mine["agents"][0];
    assert_eq!(
        (claude["agent"].as_str(), claude["set"][0]["name"].as_str()),
        (Some("claude"), Some("ANTHROPIC_API_KEY")),
        "{mine}"
    );
    assert!(
        claude["accepts"]
            .as_array()
            .unwrap()
            .contains(&json!("ANTHROPIC_BASE_URL")),
        "{mine}"
    );
    let (_, his) = rest(
        &server,
        Some("tok-bob"),
        "GET",
        "/api/me/credentials/claude",
        None,
    )
    .await;
    assert_eq!(his["set"], json!([]), "{his}");
    let (status, _) = rest(
        &server,
        Some("tok-bob"),
        "DELETE",
        "/api/me/credentials/claude",
        None,
    )
    .await;
    assert_eq!(status, 404, "Bob has none to remove");

    // Nothing shows a value: not the REST answers, the frames, the export or the log.
    let mut shown = vec![mine.to_string(), his.to_string(), set.to_string()];
    shown.extend(frames.iter().map(Value::to_string));
    for path in [
        "/api/sessions/mine/messages",
        "/api/sessions/mine/export",
        "/api/sessions/mine",
    ] {
        let body = reqwest::Client::new()
            .get(server.url(path))
            .bearer_auth("tok-alice")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!body.is_empty(), "{path}");
        shown.push(body);
    }
    for text in &shown {
        assert!(!text.contains(secret) && !text.contains(rotated), "{text}");
    }
    // Removed, Alice's agent is back on the operator's.
    let (status, _) = rest(
        &server,
        Some("tok-alice"),
        "DELETE",
        "/api/me/credentials/claude",
        None,
    )
    .await;
    assert_eq!(status, 204);
    chat_ack(&mut alice, "mine", "third").await;
    alice.until_result("mine").await;
    assert_eq!(dumped(&dump)["ANTHROPIC_API_KEY"], "operator-key");
    let (status, _) = put_key(&server, "tok-alice", secret).await;
    assert_eq!(status, 200);

    let _db = server.stop_and_open_db().await;
    let stored = database_text(&server).await;
    assert!(!stored.is_empty());
    assert!(
        !holds(&stored, secret) && !holds(&stored, rotated),
        "a value is in the database"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("credentials set"),
        "the log says what happened"
    );
    assert!(
        !logged.contains(secret) && !logged.contains(rotated),
        "a value is in the log"
    );
}

#[tokio::test]
async fn bad_names_and_values_are_refused_and_change_nothing() {
    let fixture = Fixture::new(&config(""));
    let dir = fixture.dir.path();
    let server = start_logged(&fixture, Some(KEY), &dir.join("env.json"), &dir.join("log")).await;
    let value = "VALUE-NEVER-ECHOED";
    let long = "x".repeat(16 * 1024 + 1);
    let bodies = [
        json!({"env": {"PATH": value}}),
        json!({"env": {"LD_PRELOAD": value}}),
        json!({"env": {"NODE_OPTIONS": value}}),
        json!({"env": {"GEMINI_API_KEY": value}}),
        json!({"env": {"anthropic_api_key": value}}),
        json!({"env": {"-X": value}}),
        json!({"env": {"ANTHROPIC_API_KEY": format!("{value}\u{0}")}}),
        json!({"env": {"ANTHROPIC_API_KEY": ""}}),
        json!({"env": {"ANTHROPIC_API_KEY": long}}),
        json!({"env": {"ANTHROPIC_API_KEY": 5}}),
        json!({"env": {}}),
        json!({"env": {"ANTHROPIC_API_KEY": value}, "more": 1}),
        json!([value]),
    ];
    // Refused changes are recorded: all but the bodies refused before the handler runs (no
    // JSON object of names), and the one for the demo agent below.
    let bodies_refused = bodies.len() - 3 + 1;
    for body in bodies {
        let (status, answer) = rest(
            &server,
            Some("tok-alice"),
            "PUT",
            "/api/me/credentials/claude",
            Some(body.clone()),
        )
        .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("invalid_request")),
            "{body}: {answer}"
        );
        assert!(!answer.to_string().contains(value), "{answer}");
    }
    let ok = json!({"env": {"ANTHROPIC_API_KEY": value}});
    for (agent, code) in [("nope", 404), ("demo", 400)] {
        let (status, answer) = rest(
            &server,
            Some("tok-alice"),
            "PUT",
            &format!("/api/me/credentials/{agent}"),
            Some(ok.clone()),
        )
        .await;
        assert_eq!(status, code, "{agent}: {answer}");
    }
    // A page of another site may not set them.
    let answer = reqwest::Client::new()
        .put(server.url("/api/me/credentials/claude"))
        .bearer_auth("tok-alice")
        .header("origin", "https://evil.example")
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403);
    let (_, listed) = rest(
        &server,
        Some("tok-alice"),
        "GET",
        "/api/me/credentials/claude",
        None,
    )
    .await;
    assert_eq!(listed["set"], json!([]), "nothing was set: {listed}");

    // Each change is in the audit log, Alice's to read, with the names and never a value.
    let (status, _) = put_key(&server, "tok-alice", value).await;
    assert_eq!(status, 200);
    for want in [204, 404] {
        let (status, _) = rest(
            &server,
            Some("tok-alice"),
            "DELETE",
            "/api/me/credentials/claude",
            None,
        )
        .await;
        assert_eq!(status, want);
    }
    let (status, page) = rest(&server, Some("tok-alice"), "GET", "/api/audit", None).await;
    assert_eq!(status, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    let seen: Vec<(&str, &str)> = entries
        .iter()
        .take(3)
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("credentials_delete", "unknown_agent"),
            ("credentials_delete", "ok"),
            ("credentials_set", "ok"),
        ],
        "{page}"
    );
    assert_eq!(
        entries[2]["detail"],
        json!({"agent": "claude", "names": ["ANTHROPIC_API_KEY"]})
    );
    let refused = entries
        .iter()
        .filter(|e| e["outcome"] == "invalid_request")
        .count();
    assert_eq!(refused, bodies_refused, "each refused change too: {page}");
    assert!(!page.to_string().contains(value), "{page}");

    // Without a secret key the server keeps none at all.
    let bare = Fixture::new(&config(""));
    let dir = bare.dir.path();
    let keyless = start_logged(&bare, None, &dir.join("env.json"), &dir.join("log")).await;
    let (status, answer) = put_key(&keyless, "tok-alice", value).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (422, Some("unsupported")),
        "{answer}"
    );
}

#[tokio::test]
async fn turns_without_required_credentials_are_refused_saying_what_to_set() {
    let fixture = Fixture::new(&config("[agent]\nrequire_own_credentials = true\n"));
    let dir = fixture.dir.path();
    let dump = dir.join("env.json");
    let server = start_logged(&fixture, Some(KEY), &dump, &dir.join("log")).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice
        .send(json!({"type": "chat", "agent_id": "r", "content": "hi"}))
        .await;
    let err = alice
        .recv_until(|f| f["message_type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(err["code"], "credentials_required", "{err}");
    let text = err["error"].as_str().unwrap();
    assert!(
        text.contains("ANTHROPIC_API_KEY") && text.contains("/api/me/credentials/claude"),
        "{text}"
    );
    let (status, body) = rest(
        &server,
        Some("tok-alice"),
        "POST",
        "/api/sessions/r/messages",
        Some(json!({"content": "hi"})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("credentials_required")),
        "{body}"
    );
    let (_, list) = rest(&server, Some("tok-alice"), "GET", "/api/sessions", None).await;
    assert_eq!(list["sessions"], json!([]), "nothing was created: {list}");
    let (_, listed) = rest(
        &server,
        Some("tok-alice"),
        "GET",
        "/api/me/credentials",
        None,
    )
    .await;
    assert_eq!(listed["agents"][0]["required"], true, "{listed}");

    put_key(&server, "tok-alice", "sk-alice-required").await;
    chat_ack(&mut alice, "r", "hi").await;
    alice.until_result("r").await;
    assert_eq!(dumped(&dump)["ANTHROPIC_API_KEY"], "sk-alice-required");
}

/// `agentmux serve` on `data_dir` with `env`, expected to refuse to start: its log.
async fn refused_start(fixture: &Fixture, env: &[(&str, &str)]) -> String {
    let config = fixture.config.to_string_lossy().into_owned();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"));
    cmd.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--backend",
        "claude",
        "--claude-bin",
    ])
    .arg(sibling("fake-claude"))
    .args(["--config", &config, "--data-dir"])
    .arg(fixture.data_dir())
    .env_remove("AGENTMUX_SECRET_KEY")
    .env_remove("AGENTMUX_STORE_URL")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    if on_postgres() {
        let url = with_database(&pg_url().unwrap(), &database_for(&fixture.data_dir()));
        cmd.env("AGENTMUX_STORE_URL", url);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(WAIT, cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && !stdout.contains("listening"),
        "it started: {stdout}"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn the_server_refuses_to_start_without_the_key_that_opens_the_credentials() {
    let fixture = Fixture::new(&config(""));
    let dir = fixture.dir.path();
    let dump = dir.join("env.json");
    let log = dir.join("log");
    let mut server = start_logged(&fixture, Some(KEY), &dump, &log).await;
    put_key(&server, "tok-alice", "sk-alice-kept").await;
    assert!(server.terminate().await.success());

    let missing = refused_start(&fixture, &[]).await;
    assert!(
        missing.contains("AGENTMUX_SECRET_KEY") && missing.contains("credentials.key_file"),
        "{missing}"
    );
    let wrong = refused_start(&fixture, &[("AGENTMUX_SECRET_KEY", OTHER_KEY)]).await;
    assert!(
        wrong.contains("can't be opened") && wrong.contains("wrong or missing"),
        "{wrong}"
    );
    let malformed = refused_start(&fixture, &[("AGENTMUX_SECRET_KEY", "not-a-key")]).await;
    assert!(malformed.contains("32 random bytes"), "{malformed}");
    for text in [&missing, &wrong, &malformed] {
        assert!(
            !text.contains(KEY) && !text.contains(OTHER_KEY) && !text.contains("sk-alice-kept"),
            "{text}"
        );
    }

    // Rotation: the new key first in the key file, the old one after it; the start seals
    // everything anew, and from then on the new key alone opens it.
    let key_file: PathBuf = dir.join("secret.key");
    std::fs::write(&key_file, format!("# rotated\n{OTHER_KEY}\n{KEY}\n")).unwrap();
    let mut toml = std::fs::read_to_string(&fixture.config).unwrap();
    toml.push_str(&format!(
        "\n[credentials]\nkey_file = {}\n",
        toml_string(&key_file.to_string_lossy())
    ));
    std::fs::write(&fixture.config, toml).unwrap();
    let server = start_logged(&fixture, None, &dump, &log).await;
    drop(server);
    std::fs::write(&key_file, format!("{OTHER_KEY}\n")).unwrap();
    let server = start_logged(&fixture, None, &dump, &log).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut alice, "after", "hi").await;
    alice.until_result("after").await;
    assert_eq!(dumped(&dump)["ANTHROPIC_API_KEY"], "sk-alice-kept");
}

/// The value of `--max-budget-usd=` in the command line of process `pid`.
fn budget_arg(pid: u32) -> Option<f64> {
    args_of(pid)
        .iter()
        .find_map(|arg| arg.strip_prefix("--max-budget-usd="))
        .and_then(|v| v.parse().ok())
}

#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn the_model_sees_each_principals_own_key_and_the_cli_what_is_left() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::new().await;
    let cfg = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(
        &setup.config,
        format!("{}{cfg}[budgets]\ndaily_usd = 5.0\n", config("")),
    )
    .unwrap();
    let server = TestServer::start_in(
        &setup.data_dir(),
        &[
            "--backend",
            "claude",
            "--claude-bin",
            cli.to_str().unwrap(),
            "--config",
            &setup.config,
        ],
        &[
            ("ANTHROPIC_BASE_URL", setup.api.url.as_str()),
            ("ANTHROPIC_API_KEY", "operator-key"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("AGENTMUX_SECRET_KEY", KEY),
        ],
    )
    .await;
    let keys = [
        ("tok-alice", "sk-ant-alice-1111"),
        ("tok-bob", "sk-ant-bob-2222"),
    ];
    for (token, key) in keys {
        let (status, body) = put_key(&server, token, key).await;
        assert_eq!(status, 200, "{body}");
    }
    for (token, who) in [
        ("tok-alice", "alice"),
        ("tok-bob", "bob"),
        ("tok-root", "root"),
    ] {
        let mut c = connect_as(&server.addr, token).await;
        chat_ack(&mut c, "k", &format!("from {who}")).await;
        let frames = c.until_result("k").await;
        let result = frames
            .iter()
            .find(|f| f["message_type"] == "result")
            .unwrap();
        assert!(result["turn_cost_usd"].as_f64().unwrap() > 0.0, "{result}");
    }
    let requests = setup.api.bodies();
    for (who, key) in [
        ("alice", "sk-ant-alice-1111"),
        ("bob", "sk-ant-bob-2222"),
        ("root", "operator-key"),
    ] {
        let theirs: Vec<&Value> = requests
            .iter()
            .filter(|r| r["messages"].to_string().contains(&format!("from {who}")))
            .collect();
        assert!(!theirs.is_empty(), "{who}");
        assert!(
            theirs.iter().all(|r| r["_x_api_key"] == key),
            "{who}: {theirs:?}"
        );
        let with_key = requests.iter().filter(|r| r["_x_api_key"] == key);
        assert!(
            with_key
                .clone()
                .all(|r| r["messages"].to_string().contains(&format!("from {who}"))),
            "{key}"
        );
    }

    // Alice's CLI was told what is left of her day; once an admin lowers the cap, her next
    // turn starts it again with the new figure.
    let budget_of = |pids: &[u32]| {
        pids.iter()
            .filter_map(|p| budget_arg(*p))
            .collect::<Vec<f64>>()
    };
    let started = budget_of(&cli_children(&server, &cli));
    assert!(started.contains(&5.0), "{started:?}");
    let (_, budget) = rest(&server, Some("tok-alice"), "GET", "/api/budgets/me", None).await;
    let spent = budget["daily_spent_usd"].as_f64().unwrap();
    assert!(spent > 0.0, "{budget}");
    let (status, _) = rest(
        &server,
        Some("tok-root"),
        "PUT",
        "/api/budgets/alice",
        Some(json!({"daily_usd": 4.0})),
    )
    .await;
    assert_eq!(status, 200);
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    chat_ack(&mut alice, "k", "from alice again").await;
    alice.until_result("k").await;
    let now = budget_of(&cli_children(&server, &cli));
    assert!(
        now.iter().any(|b| (b - (4.0 - spent)).abs() < 1e-9),
        "{now:?}, spent {spent}"
    );
}

/// The variable an Agent Client Protocol agent's own `env` sets.
fn acp_key(setup: &crate::acp::AcpSetup) -> Option<String> {
    let env = std::fs::read_to_string(setup.dir.path().join("agent-state/env.log")).unwrap();
    env.lines()
        .find_map(|l| l.strip_prefix("FAKE_KEY="))
        .map(str::to_owned)
}

#[tokio::test]
async fn an_acp_agent_gets_the_principals_own_variables_over_its_configured_ones() {
    let setup = crate::acp::AcpSetup::with_agent_keys(
        &[],
        &config(""),
        "credential_env = [\"FAKE_KEY\"]\n",
    );
    let server = TestServer::start_in(
        &setup.data_dir(),
        &["--config", &setup.config],
        &[("AGENTMUX_SECRET_KEY", KEY)],
    )
    .await;
    let (status, body) = rest(
        &server,
        Some("tok-alice"),
        "PUT",
        "/api/me/credentials/fake",
        Some(json!({"env": {"FAKE_KEY": "alice-own"}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = rest(
        &server,
        Some("tok-alice"),
        "PUT",
        "/api/me/credentials/fake",
        Some(json!({"env": {"ANTHROPIC_API_KEY": "not-its-name"}})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    for (token, expected) in [("tok-alice", "alice-own"), ("tok-bob", "secret")] {
        let mut c = connect_as(&server.addr, token).await;
        c.send(json!({"type": "chat", "agent_id": "acp", "content": "hi", "options": {"agent": "fake"}}))
            .await;
        c.until_result("acp").await;
        assert_eq!(acp_key(&setup).as_deref(), Some(expected), "{token}");
    }
}
