//! Running agentmux as an installed service: what `--version` says, the logs, and the shipped
//! systemd unit and settings.

use std::path::{Path, PathBuf};

use crate::common::*;

/// The repository's commit as git names it (12 hex digits); None outside a checkout.
fn checkout_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let top = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let top = String::from_utf8(top.stdout).ok()?;
    let ours = std::fs::canonicalize(top.trim()).ok()?
        == std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).ok()?;
    (out.status.success() && ours).then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// `agentmux --version` names the package's version and the commit it was built from (the
/// one named at build time by `AGENTMUX_COMMIT`, else the checkout's), or only the version
/// when neither is known.
#[cfg_attr(
    test_store_postgres,
    ignore = "not about the store: run in the SQLite pass"
)]
#[test]
fn the_version_names_the_commit_built_from() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let commit = option_env!("AGENTMUX_COMMIT")
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .or_else(checkout_commit);
    let expected = match commit {
        Some(commit) => format!("agentmux {} (commit {commit})\n", env!("CARGO_PKG_VERSION")),
        None => format!("agentmux {}\n", env!("CARGO_PKG_VERSION")),
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
}

/// A file of `deploy/`.
fn deployed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name)
}

/// The shipped unit passes `systemd-analyze verify` without a word (an unknown or misspelt
/// setting is only a warning there, so any output fails), and its hardening keeps the
/// exposure `systemd-analyze security` computes at 2.0 or below (of 10). Its `ExecStart` is
/// pointed at the binary under test, which verify requires to exist.
#[test]
#[cfg_attr(
    no_test_systemd_analyze,
    ignore = "needs systemd-analyze (AGENTMUX_TEST_SYSTEMD_ANALYZE), not configured here"
)]
#[cfg_attr(
    test_store_postgres,
    ignore = "not about the store: run in the SQLite pass"
)]
fn the_shipped_unit_passes_systemd_analyze() {
    let analyze = std::env::var("AGENTMUX_TEST_SYSTEMD_ANALYZE")
        .expect("AGENTMUX_TEST_SYSTEMD_ANALYZE is set (scripts/test.sh installs systemd)");
    let unit = std::fs::read_to_string(deployed("agentmux.service")).unwrap();
    let exec = "ExecStart=/usr/local/bin/agentmux serve --config /etc/agentmux/agentmux.toml";
    assert!(unit.contains(exec), "the unit runs the documented paths");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentmux.service");
    let under_test = format!(
        "ExecStart={} serve --config /etc/agentmux/agentmux.toml",
        env!("CARGO_BIN_EXE_agentmux")
    );
    std::fs::write(&file, unit.replace(exec, &under_test)).unwrap();

    let verify = std::process::Command::new(&analyze)
        .args(["verify", "--man=no"])
        .arg(&file)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");

    let security = std::process::Command::new(&analyze)
        .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
        .arg(&file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&security.stdout);
    assert!(security.status.success(), "exposure above 2.0:\n{report}");
    assert!(report.contains("Overall exposure level"), "{report}");
}

/// The shipped settings start a server that answers the public name it names (with a token)
/// and refuses any other `Host`.
#[tokio::test]
async fn the_shipped_settings_serve_their_public_name_only() {
    let config = deployed("agentmux.toml");
    let server = TestServer::start_with_env(
        &["--config", config.to_str().unwrap()],
        &[("AGENTMUX_TOKENS", "tok-ops=alice")],
    )
    .await;
    let http = reqwest::Client::new();
    let get = async |host: &str| {
        http.get(server.url("/api/sessions"))
            .header("host", host)
            .bearer_auth("tok-ops")
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(get("agents.example.com").await, 200);
    assert_eq!(get("evil.example").await, 421);
}

/// A server logging to a pipe, the address it listens on, and its data dir.
struct Logging {
    child: tokio::process::Child,
    addr: String,
    _dir: tempfile::TempDir,
}

/// `agentmux serve` with `args` and `env` in a fresh data dir, its log on a pipe.
async fn serve_logging(args: &[&str], env: &[(&str, &str)]) -> Logging {
    use tokio::io::AsyncBufReadExt as _;
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args(["serve", "--bind", "127.0.0.1:0", "--demo-delay-ms", "0"])
        .arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .env_remove("AGENTMUX_STORE_URL")
        .env_remove("AGENTMUX_CONFIG")
        .env_remove("AGENTMUX_LOG_FORMAT")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the server starts")
        .unwrap()
        .expect("it prints its address");
    let addr = line
        .strip_prefix("listening on http://")
        .expect(&line)
        .to_owned();
    Logging {
        child,
        addr,
        _dir: dir,
    }
}

/// Runs a turn on the server, stops it with SIGTERM and returns its log.
async fn one_turn_then_stop(server: Logging) -> String {
    use tokio::io::AsyncReadExt as _;
    let Logging {
        mut child,
        addr,
        _dir,
    } = server;
    let mut c = Client::connect(&addr).await;
    chat_ack(&mut c, "logged", "hello").await;
    c.until_result("logged").await;
    let mut stderr = child.stderr.take().unwrap();
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-15", &pid.to_string()])
        .status()
        .unwrap();
    let mut log = String::new();
    stderr.read_to_string(&mut log).await.unwrap();
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    log
}

/// Written to a pipe (a journal, a file), the log has no colour codes: plain lines with the
/// level and the message, the first naming the version; `RUST_LOG` chooses what is logged, and
/// one that is not a filter is said so, with the filter used instead.
#[cfg_attr(
    test_store_postgres,
    ignore = "not about the store: run in the SQLite pass"
)]
#[tokio::test]
async fn the_log_is_plain_text_when_not_on_a_terminal() {
    let server = serve_logging(&[], &[("RUST_LOG", "agentmux=debug,tower_http=debug")]).await;
    let log = one_turn_then_stop(server).await;
    assert!(!log.contains('\u{1b}'), "no escape codes:\n{log}");
    let version = format!("INFO agentmux: agentmux {}", env!("CARGO_PKG_VERSION"));
    assert!(log.lines().next().unwrap().contains(&version), "{log}");
    assert!(
        log.contains("DEBUG request{"),
        "RUST_LOG chose debug:\n{log}"
    );
    assert!(log.contains("INFO agentmux: shutting down"), "{log}");

    let server = serve_logging(&[], &[("RUST_LOG", "agentmux=loud")]).await;
    let log = one_turn_then_stop(server).await;
    assert!(
        log.contains("RUST_LOG is not a log filter") && log.contains("logging agentmux=info,warn"),
        "{log}"
    );
    assert!(!log.contains("DEBUG"), "{log}");
}

/// `--log-format json` (or `AGENTMUX_LOG_FORMAT=json`) writes one JSON object a line, each
/// with its time, level, target and message, and a request's lines name the spans they ran
/// in. Any other format is refused before anything starts, naming the ones there are.
#[cfg_attr(
    test_store_postgres,
    ignore = "not about the store: run in the SQLite pass"
)]
#[tokio::test]
async fn the_log_can_be_json_one_object_a_line() {
    for (args, env) in [
        (&["--log-format", "json"][..], &[][..]),
        (&[][..], &[("AGENTMUX_LOG_FORMAT", "json")][..]),
    ] {
        let mut env = env.to_vec();
        env.push(("RUST_LOG", "agentmux=debug,tower_http=debug"));
        let log = one_turn_then_stop(serve_logging(args, &env).await).await;
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect();
        for line in &lines {
            for key in ["timestamp", "level", "target"] {
                assert!(line[key].is_string(), "{key} in {line}");
            }
            assert!(line["fields"].is_object(), "{line}");
        }
        let says = |text: &str| lines.iter().any(|l| l["fields"]["message"] == text);
        let version = format!("agentmux {}", env!("CARGO_PKG_VERSION"));
        assert!(
            lines[0]["fields"]["message"]
                .as_str()
                .unwrap()
                .starts_with(&version),
            "{log}"
        );
        assert!(says("shutting down"), "{log}");
        assert!(
            lines.iter().any(|l| l["spans"]
                .as_array()
                .is_some_and(|spans| spans.iter().any(|s| s["name"] == "request"))),
            "a request's lines name its span:\n{log}"
        );
    }

    for (args, env) in [
        (&["--log-format", "yaml"][..], &[][..]),
        (&[][..], &[("AGENTMUX_LOG_FORMAT", "xml")][..]),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("invalid value") && stderr.contains("[possible values: text, json]"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "nothing listened");
    }
}

/// A server whose log can't be written any more (the journal restarted, the pipe's reader
/// went away) goes on serving, and still shuts down cleanly on SIGTERM.
#[cfg_attr(
    test_store_postgres,
    ignore = "not about the store: run in the SQLite pass"
)]
#[tokio::test]
async fn a_server_whose_log_is_gone_still_serves_and_stops() {
    let Logging {
        mut child,
        addr,
        _dir,
    } = serve_logging(&[], &[("RUST_LOG", "agentmux=debug,tower_http=debug")]).await;
    drop(child.stderr.take());
    let mut c = Client::connect(&addr).await;
    chat_ack(&mut c, "unlogged", "hello").await;
    assert_eq!(
        reply_text(&c.until_result("unlogged").await),
        "Echo: hello (turn 1)"
    );
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-15", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("it stops")
        .unwrap();
    assert!(status.success(), "{status:?}");
}
