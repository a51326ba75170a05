//! `agentmux doctor` on sound and broken setups, with the real parts it checks (a store a
//! server made, the fake Claude CLI answering as the real one does, git, PostgreSQL and NATS
//! when the machine has them); and the same agent check in the server's log at start.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use tokio::io::AsyncBufReadExt as _;

use crate::common::*;

/// A data dir, a config file and an empty Claude config dir (no sign-in), for one test.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(extra_toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let setup = Setup { dir };
        std::fs::create_dir(setup.claude_home()).unwrap();
        std::fs::write(
            setup.config(),
            format!(
                "{extra_toml}\n[claude]\nconfig_dir = {}\n",
                toml_string(setup.claude_home().to_str().unwrap())
            ),
        )
        .unwrap();
        setup
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("agentmux.toml")
    }

    fn claude_home(&self) -> PathBuf {
        self.dir.path().join("claude-home")
    }

    /// `agentmux doctor` on this setup with the fake CLI, `extra` arguments (which may give
    /// another `--data-dir` or `--claude-bin`) and `env`.
    fn doctor(&self, extra: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"));
        command.arg("doctor").arg("--config").arg(self.config());
        if !extra.contains(&"--data-dir") {
            command.arg("--data-dir").arg(self.data_dir());
        }
        if !extra.contains(&"--claude-bin") {
            command.args(["--claude-bin", sibling("fake-claude").to_str().unwrap()]);
        }
        command
            .args(extra)
            .env_remove("AGENTMUX_CONFIG")
            .env_remove("AGENTMUX_STORE_URL")
            .env_remove("AGENTMUX_BIND")
            .env_remove("AGENTMUX_TOKENS")
            .env_remove("AGENTMUX_CLUSTER_NATS")
            .env_remove("AGENTMUX_CLUSTER_SECRET")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("CLAUDE_CODE_OAUTH_TOKEN")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }
}

/// The report's line about `topic` with its `fix:` line, if any (or a panic showing it all).
fn line(report: &str, verdict: &str, topic: &str) -> String {
    let head = format!("{verdict:<4}  {topic:<14} ");
    let lines: Vec<&str> = report.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no `{verdict} {topic}` line in:\n{report}"));
    let fixes = lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("      "));
    std::iter::once(&lines[at])
        .chain(fixes)
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// A stopped server's store with one conversation, in `data_dir`.
async fn store_with_one_conversation(data_dir: &Path) {
    let mut server = TestServer::start_in(data_dir, &["--demo-delay-ms", "0"], &[]).await;
    let mut c = server.client().await;
    chat_ack(&mut c, "checked", "hello").await;
    c.until_result("checked").await;
    drop(c);
    assert!(server.terminate().await.success());
}

/// A sound setup: every check is ok, each naming what it found (the store intact with its
/// conversation, the CLI's version and how it is signed in, git), and the exit code is 0.
#[tokio::test]
#[cfg_attr(
    test_store_postgres,
    ignore = "checks the SQLite store; PostgreSQL has its own test"
)]
async fn a_sound_setup_passes_every_check() {
    let setup = Setup::new("");
    store_with_one_conversation(&setup.data_dir()).await;
    let out = setup.doctor(&[], &[("ANTHROPIC_API_KEY", "sk-ant-test")]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(
        !report.contains("FAIL") && !report.contains("warn"),
        "{report}"
    );
    assert!(
        report.ends_with("everything checked is in order\n"),
        "{report}"
    );
    let version = format!("ok    agentmux       {}", env!("CARGO_PKG_VERSION"));
    assert!(report.starts_with(&version), "{report}");
    assert!(
        line(&report, "ok", "store").contains("intact, 1 conversations"),
        "{report}"
    );
    let agent = line(&report, "ok", "agent claude");
    assert!(
        agent.contains("2.1.332 (Claude Code)")
            && agent.contains("signed in (api_key, from ANTHROPIC_API_KEY)"),
        "{agent}"
    );
    assert!(line(&report, "ok", "agents").contains("claude, demo (default claude)"));
    assert!(line(&report, "ok", "git").contains("git"), "{report}");
}

/// What needs fixing is named with how: a CLI that is neither signed in nor given a key
/// (FAIL, as every turn would fail), a data dir others may read (warn), a public name with no
/// authentication (warn); the exit code is 1. Signing the CLI in (its credentials file)
/// clears that line.
#[tokio::test]
async fn what_needs_fixing_is_named_with_how() {
    let setup = Setup::new("[server]\nallowed_hosts = [\"agents.example.com\"]\n");
    std::fs::create_dir(setup.data_dir()).unwrap();
    std::fs::set_permissions(setup.data_dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = setup.doctor(&[], &[]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{report}");
    let agent = line(&report, "FAIL", "agent claude");
    assert!(
        agent.contains("is not signed in and has no API key")
            && agent.contains("fix: sign it in as the server's user (`claude auth login`")
            && agent.contains("ANTHROPIC_API_KEY"),
        "{agent}"
    );
    let dir = line(&report, "warn", "data dir");
    assert!(
        dir.contains("other users may read") && dir.contains("(755)") && dir.contains("chmod"),
        "{dir}"
    );
    let auth = line(&report, "warn", "auth");
    assert!(
        auth.contains("agents.example.com") && auth.contains("fix: set AGENTMUX_TOKENS"),
        "{auth}"
    );
    assert!(report.contains("1 to fix, 2 to look at"), "{report}");

    std::fs::write(setup.claude_home().join(".credentials.json"), "{}").unwrap();
    let out = setup.doctor(&[], &[("AGENTMUX_TOKENS", "tok-doctor=alice")]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{report}");
    assert!(line(&report, "ok", "agent claude").contains("signed in (claude.ai)"));
    assert!(
        line(&report, "ok", "auth").contains("on: 1 API token(s)"),
        "{report}"
    );
}

/// Settings the server would refuse are a FAIL naming the setting: a file with an unknown
/// key, a project root that does not exist, a Claude CLI that is not there.
#[tokio::test]
async fn settings_the_server_would_refuse_fail() {
    let setup = Setup::new("[projects]\nroots = [{ path = \"/nonexistent/projects\" }]\n");
    let out = setup.doctor(&[], &[("ANTHROPIC_API_KEY", "k")]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        line(&report, "FAIL", "config").contains("/nonexistent/projects"),
        "{report}"
    );

    let out = setup.doctor(&["--claude-bin", "/nonexistent/claude"], &[]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let agents = line(&report, "FAIL", "agents");
    assert!(
        agents.contains("/nonexistent/claude") && agents.contains("does not exist"),
        "{agents}"
    );

    std::fs::write(setup.config(), "[sever]\nallowed_hosts = []\n").unwrap();
    let out = setup.doctor(&[], &[]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        report.starts_with("FAIL  config         bad config") && report.contains("sever"),
        "{report}"
    );
}

/// A store that is damaged, or was made by a newer agentmux, is a FAIL saying so; one a
/// running server holds is left alone (a warning says how to check it), and the server goes
/// on serving.
#[tokio::test]
#[cfg_attr(test_store_postgres, ignore = "checks the SQLite file")]
async fn the_store_is_checked_only_while_no_server_holds_it() {
    let setup = Setup::new("");
    store_with_one_conversation(&setup.data_dir()).await;
    let server = TestServer::start_in(&setup.data_dir(), &["--demo-delay-ms", "0"], &[]).await;
    let out = setup.doctor(&["--bind", &server.addr], &[("ANTHROPIC_API_KEY", "k")]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "a warning only: {report}");
    let store = line(&report, "warn", "store");
    assert!(
        store.contains("is held by a running server")
            && store.contains(&format!("(answering at {})", server.addr))
            && store.contains("agentmux backup"),
        "{store}"
    );
    let mut c = server.client().await;
    chat_ack(&mut c, "checked", "still here").await;
    c.until_result("checked").await;
    drop(c);
    drop(server);

    let db = setup.data_dir().join("agentmux.db");
    let newer = setup.dir.path().join("newer");
    std::fs::create_dir(&newer).unwrap();
    std::fs::copy(&db, newer.join("agentmux.db")).unwrap();
    let mut conn = {
        use sqlx::Connection as _;
        let url = format!("sqlite://{}", newer.join("agentmux.db").display());
        sqlx::SqliteConnection::connect(&url).await.unwrap()
    };
    sqlx::query(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time)
         values (99999, 'later', true, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    drop(conn);
    let out = setup.doctor(
        &["--data-dir", newer.to_str().unwrap()],
        &[("ANTHROPIC_API_KEY", "k")],
    );
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        line(&report, "FAIL", "store").contains("made by a newer agentmux"),
        "{report}"
    );

    std::fs::write(&db, vec![0x42; 16384]).unwrap();
    let out = setup.doctor(&[], &[("ANTHROPIC_API_KEY", "k")]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1));
    let store = line(&report, "FAIL", "store");
    assert!(
        store.contains("is not a SQLite database") && store.contains("agentmux restore"),
        "{store}"
    );
}

/// With a PostgreSQL store, the doctor connects and reads its schema; an unreachable one is
/// a FAIL that does not show the password.
#[tokio::test]
async fn a_postgres_store_is_reached_and_read() {
    let Some(server_url) = pg_url() else {
        eprintln!("skipped: AGENTMUX_TEST_PG_URL is not set");
        return;
    };
    let setup = Setup::new("");
    let url = create_database(&server_url, "agentmux_it_doctor").await;
    let out = setup.doctor(&["--store-url", &url], &[("ANTHROPIC_API_KEY", "k")]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    drop_database(&server_url, "agentmux_it_doctor");
    assert!(out.status.success(), "{report}");
    assert!(line(&report, "ok", "store").starts_with("ok    store          PostgreSQL "));

    let out = setup.doctor(
        &[
            "--store-url",
            "postgres://agentmux:s3cret-pw@127.0.0.1:1/agentmux",
        ],
        &[("ANTHROPIC_API_KEY", "k")],
    );
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1));
    let store = line(&report, "FAIL", "store");
    assert!(
        store.contains("postgres://agentmux:***@127.0.0.1:1"),
        "{store}"
    );
    assert!(!report.contains("s3cret-pw"), "{report}");
}

/// With NATS set, the doctor logs in as a node would (and joins nothing); without the
/// cluster secret it fails, saying how to make one.
#[tokio::test]
#[cfg_attr(
    no_test_nats,
    ignore = "needs nats-server (AGENTMUX_TEST_NATS_BIN), not configured here"
)]
async fn the_cluster_nats_is_logged_in_to() {
    let Some(nats) = crate::cluster::Nats::start().await else {
        return;
    };
    let setup = Setup::new("");
    let secret = "s".repeat(32);
    let url = nats.url();
    let args = ["--cluster-nats", url.as_str()];
    let out = setup.doctor(
        &args,
        &[
            ("ANTHROPIC_API_KEY", "k"),
            ("AGENTMUX_CLUSTER_SECRET", &secret),
        ],
    );
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(line(&report, "ok", "nats").contains("NATS "), "{report}");
    assert!(!report.contains("nats-Pa55word"), "{report}");

    let out = setup.doctor(&args, &[("ANTHROPIC_API_KEY", "k")]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        line(&report, "FAIL", "nats").contains("openssl rand -hex 32"),
        "{report}"
    );
}

/// The server asks the Claude CLI the same at start and logs it: a warning with the fix when
/// it is not signed in (before any turn fails), its version and sign-in when it is.
#[tokio::test]
async fn the_server_logs_the_agent_check_at_start() {
    for (key, expected) in [
        (None, "is not signed in and has no API key"),
        (
            Some("sk-ant-test"),
            "(2.1.332 (Claude Code)), signed in (api_key, from ANTHROPIC_API_KEY)",
        ),
    ] {
        let setup = Setup::new("");
        let mut serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"));
        serve
            .args(["serve", "--bind", "127.0.0.1:0", "--config"])
            .arg(setup.config())
            .arg("--data-dir")
            .arg(setup.data_dir())
            .args(["--claude-bin", sibling("fake-claude").to_str().unwrap()])
            .env_remove("AGENTMUX_CONFIG")
            .env_remove("AGENTMUX_STORE_URL")
            .env_remove("ANTHROPIC_API_KEY")
            .env("RUST_LOG", "agentmux=info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(key) = key {
            serve.env("ANTHROPIC_API_KEY", key);
        }
        let mut child = serve.spawn().unwrap();
        let mut log = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let said = loop {
            let line = tokio::time::timeout(WAIT, log.next_line())
                .await
                .expect("the check is logged")
                .unwrap()
                .expect("the log goes on until the check");
            if line.contains("agent=claude") {
                break line;
            }
        };
        assert!(said.contains(expected), "{said}");
        match key {
            None => assert!(said.contains(" WARN ") && said.contains("fix="), "{said}"),
            Some(_) => assert!(said.contains(" INFO "), "{said}"),
        }
        child.start_kill().unwrap();
        let _ = child.wait().await;
    }
}
