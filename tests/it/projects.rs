//! Project roots: `options.cwd` and the agent options over the socket and REST (through the
//! fake CLI, which records its argv and working directory), the CLI sessions of a project
//! (listed, imported, synced) with their hostile inputs, and the real CLI working in a project.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::claude::Fixture;
use crate::common::*;
use crate::real_cli::{FakeApi, real_cli, start_server, stop};
use crate::rest::Rest;
use crate::security::{connect_as, http};

/// Directories of a test: an open root with a project, a file and a link out of it; a root
/// only `alice` may use; a directory outside every root; and the CLI's config dir.
pub struct Layout {
    pub _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub app: PathBuf,
    pub private: PathBuf,
    pub outside: PathBuf,
    pub home: PathBuf,
}

impl Layout {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("root");
        let app = root.join("app");
        let private = base.join("private");
        let outside = base.join("outside");
        let home = base.join("claude-home");
        for dir in [&app, &private.join("secret"), &outside, &home] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(app.join("README.md"), "hello").unwrap();
        std::fs::write(root.join("file.txt"), "not a dir").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        Layout {
            _tmp: tmp,
            root,
            app,
            private,
            outside,
            home,
        }
    }

    /// Settings: tokens for alice and bob, and the two roots.
    pub fn toml(&self) -> String {
        format!(
            "{}\n[projects]\nroots = [{{ path = {} }}, {{ path = {}, principals = [\"alice\"] }}]\n",
            crate::security::TOKENS,
            toml_string(&self.root.to_string_lossy()),
            toml_string(&self.private.to_string_lossy()),
        )
    }

    pub fn s(path: &Path) -> String {
        path.to_string_lossy().into_owned()
    }
}

/// Conversations `token`'s principal has (`GET /api/sessions`).
async fn listed_rows(server: &TestServer, token: &str) -> i64 {
    let (status, list) = call(server, "GET", "/api/sessions?total=true", token, None).await;
    assert_eq!(status, 200, "{list}");
    list["total"].as_i64().unwrap()
}

/// Stops the server: every conversation in its store is one a principal's listing showed
/// (nothing half-imported, nothing left behind by a refused call), read in the file.
async fn stored_rows_are_listed(server: &mut TestServer) {
    let listed = listed_rows(server, "tok-alice").await + listed_rows(server, "tok-bob").await;
    let db = server.stop_and_open_db().await;
    let stored: i64 = sqlx::query_scalar("select count(*) from session_info")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(stored, listed, "nothing stored that is not listed");
}

/// Stops the server, checks that its store holds no conversation at all, visible or not
/// (`what` it shows), and starts it again.
async fn nothing_stored(server: &mut TestServer, what: &str) {
    let db = server.stop_and_open_db().await;
    let stored: i64 = sqlx::query_scalar("select count(*) from session_info")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(stored, 0, "{what}");
    db.close().await;
    server.restart().await;
}

/// The argv of a spawn, without the program.
fn argv(spawn: &Value) -> Vec<String> {
    spawn["argv"].as_array().unwrap()[1..]
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

fn count(args: &[String], wanted: &str) -> usize {
    args.iter().filter(|a| *a == wanted).count()
}

/// Every refused `options.cwd` (relative, `..` out, a link out, a file, missing, outside every
/// root, another principal's root) is `invalid_options` over the socket and over REST, and
/// creates nothing: no conversation, no row, no agent process, no workspace.
#[tokio::test]
async fn refused_working_directories_create_nothing() {
    let layout = Layout::new();
    let fx = Fixture::new(&layout.toml());
    let mut server = fx.start(&[]).await;
    let mut bob = connect_as(&server.addr, "tok-bob").await;
    let refused = [
        "app".to_owned(),
        format!("{}/../outside", Layout::s(&layout.root)),
        format!("{}/app/../../outside", Layout::s(&layout.root)),
        Layout::s(&layout.root.join("out")),
        Layout::s(&layout.root.join("file.txt")),
        Layout::s(&layout.root.join("missing")),
        Layout::s(&layout.outside),
        Layout::s(&layout.private.join("secret")),
        "/".to_owned(),
        "-rf".to_owned(),
    ];
    for cwd in &refused {
        for options in [json!({"cwd": cwd}), json!({"add_dirs": [cwd]})] {
            bob.send(json!({"type": "chat", "agent_id": "p1", "content": "hi", "client_msg_id": "m", "options": options}))
                .await;
            let err = bob.recv().await;
            assert_eq!(err["code"], "invalid_options", "{options}: {err}");
            assert_eq!(err["agent_id"], "p1");
            assert_eq!(err["client_msg_id"], "m");
            let r = http(
                &server.addr,
                "POST",
                "/api/sessions/p1/messages",
                Some("tok-bob"),
                Some(&json!({"content": "hi", "options": options})),
            )
            .await;
            assert_eq!(r.status, 400, "{options}");
            let body: Value = serde_json::from_str(&r.body).unwrap();
            assert_eq!(body["code"], "invalid_options", "{options}");
        }
    }
    let list = http(
        &server.addr,
        "GET",
        "/api/sessions?total=true",
        Some("tok-bob"),
        None,
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&list.body).unwrap()["total"],
        0
    );
    assert!(fx.spawns().is_empty(), "no agent started");
    let workspaces = fx.data_dir().join("workspaces");
    assert_eq!(std::fs::read_dir(&workspaces).map_or(0, |d| d.count()), 0);

    // Alice may use the private root; bob's refusal was about him.
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    let secret = Layout::s(&layout.private.join("secret"));
    alice
        .send(
            json!({"type": "chat", "agent_id": "p1", "content": "hi", "options": {"cwd": secret}}),
        )
        .await;
    let frames = alice.until_result("p1").await;
    assert_eq!(reply_text(&frames), "Echo: hi (history 1)");
    assert_eq!(fx.spawns()[0]["cwd"], secret.as_str());
    stored_rows_are_listed(&mut server).await;
}

async fn stop_server(mut server: TestServer) {
    assert!(server.terminate().await.success());
}

/// A server without roots refuses any `cwd`; one whose root is missing refuses to start.
#[tokio::test]
async fn roots_are_checked_at_start() {
    let server = TestServer::start().await;
    let mut c = server.client().await;
    c.send(json!({"type": "chat", "agent_id": "x", "content": "hi", "options": {"cwd": "/tmp"}}))
        .await;
    let err = c.recv().await;
    assert_eq!(err["code"], "invalid_options");
    assert!(
        err["error"].as_str().unwrap().contains("no project roots"),
        "{err}"
    );
    drop(server);

    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("gone");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("data"))
        .arg("--project-root")
        .arg(&missing)
        .env_remove("AGENTMUX_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gone"), "{stderr}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("data"))
        .env("AGENTMUX_PROJECT_ROOTS", format!("{}:", missing.display()))
        .env_remove("AGENTMUX_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(
        !out.status.success(),
        "the variable's roots are checked too"
    );
}

/// Each option reaches the CLI exactly once, in `--flag=value` form, so a value starting with
/// `-` stays a value; the working directory is the process's own and never in argv. A change
/// of a start-only option restarts the CLI with resume; the cwd is fixed; REST shows it all,
/// and a fork and a rewind keep it; the tool rules take effect in the CLI. Bad values and sizes
/// change nothing.
#[tokio::test]
async fn options_reach_the_cli_once_as_flag_equals_value() {
    let layout = Layout::new();
    let fx = Fixture::new(&layout.toml());
    let server = fx.start(&[]).await;
    let mut c = connect_as(&server.addr, "tok-alice").await;
    let secret = Layout::s(&layout.private.join("secret"));
    let app = Layout::s(&layout.app);
    // Named through a link inside the root: stored and used in its canonical form.
    std::os::unix::fs::symlink(&layout.app, layout.root.join("app-link")).unwrap();
    let options = json!({
        "cwd": Layout::s(&layout.root.join("app-link")),
        "system_prompt": "--dangerously-skip-permissions",
        "allowed_tools": ["Bash(git log:*)", "Read(src/main.rs)"],
        "disallowed_tools": ["WebFetch"],
        "max_turns": 3,
        "add_dirs": [secret],
    });
    c.send(json!({"type": "chat", "agent_id": "opt", "content": "one", "options": options}))
        .await;
    let ack = c
        .recv_until(|f| f["message_type"] == "ack" || f["message_type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let session_id = ack["session_id"].as_str().unwrap().to_owned();
    assert_eq!(
        reply_text(&c.until_result("opt").await),
        "Echo: one (history 1)"
    );
    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 1);
    let args = argv(&spawns[0]);
    for wanted in [
        "--append-system-prompt=--dangerously-skip-permissions".to_owned(),
        "--allowedTools=Bash(git log:*),Read(src/main.rs)".to_owned(),
        "--disallowedTools=WebFetch".to_owned(),
        "--max-turns=3".to_owned(),
        format!("--add-dir={secret}"),
    ] {
        assert_eq!(count(&args, &wanted), 1, "{wanted} once in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a == "--dangerously-skip-permissions"),
        "no value became a flag: {args:?}"
    );
    assert!(!args.iter().any(|a| a.contains(&app)), "cwd is not in argv");
    assert_eq!(spawns[0]["cwd"], app.as_str());

    let fetch_summary = || async {
        let r = http(
            &server.addr,
            "GET",
            "/api/sessions/opt",
            Some("tok-alice"),
            None,
        )
        .await;
        serde_json::from_str::<Value>(&r.body).unwrap()
    };
    let summary = &fetch_summary().await;
    assert_eq!(summary["cwd"], app.as_str());
    assert_eq!(summary["system_prompt"], "--dangerously-skip-permissions");
    assert_eq!(
        summary["allowed_tools"],
        json!(["Bash(git log:*)", "Read(src/main.rs)"])
    );
    assert_eq!(summary["disallowed_tools"], json!(["WebFetch"]));
    assert_eq!(summary["max_turns"], 3);
    assert_eq!(summary["add_dirs"], json!([secret]));

    // A start-only option changes: the CLI restarts, resuming, with the new value.
    c.send(json!({"type": "chat", "agent_id": "opt", "content": "two", "options": {"system_prompt": "second", "cwd": app}}))
        .await;
    let second = c.until_result("opt").await;
    assert_eq!(reply_text(&second), "Echo: two (history 2)", "it remembers");
    assert!(second.iter().any(|f| f["status"] == "restarting"));
    let spawns = fx.spawns();
    assert_eq!(spawns.len(), 2, "restarted once");
    let args = argv(&spawns[1]);
    assert_eq!(
        count(&args, &format!("--resume={session_id}")),
        1,
        "{args:?}"
    );
    assert_eq!(count(&args, "--append-system-prompt=second"), 1);
    assert_eq!(count(&args, "--max-turns=3"), 1, "other options kept");
    assert_eq!(spawns[1]["cwd"], app.as_str());

    // A different cwd is refused and changes nothing.
    let before = fx.spawns().len();
    c.send(json!({"type": "chat", "agent_id": "opt", "content": "x", "options": {"cwd": secret}}))
        .await;
    let err = c
        .recv_until(|f| f["message_type"] == "error")
        .await
        .pop()
        .unwrap();
    assert_eq!(err["code"], "invalid_options");
    let r = http(
        &server.addr,
        "POST",
        "/api/sessions/opt/messages",
        Some("tok-alice"),
        Some(&json!({"content": "x", "options": {"cwd": secret}})),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(fx.spawns().len(), before);
    assert_eq!(
        fetch_summary().await["turn_count"],
        2,
        "the refused chats stored nothing"
    );

    // A fork works in the same project with the same options.
    let r = http(
        &server.addr,
        "POST",
        "/api/sessions/opt/fork",
        Some("tok-alice"),
        Some(&json!({"new_agent_id": "opt-fork"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let fork: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(fork["cwd"], app.as_str());
    assert_eq!(fork["system_prompt"], "second");
    assert_eq!(fork["add_dirs"], json!([secret]));
    c.send(json!({"type": "chat", "agent_id": "opt-fork", "content": "three"}))
        .await;
    assert_eq!(
        reply_text(&c.until_result("opt-fork").await),
        "Echo: three (history 3)"
    );
    assert_eq!(fx.spawns().last().unwrap()["cwd"], app.as_str());

    // A rewind keeps the directory: the agent that forgets the later turn works there too.
    let first = http(
        &server.addr,
        "GET",
        "/api/sessions/opt/messages",
        Some("tok-alice"),
        None,
    )
    .await;
    let page: Value = serde_json::from_str(&first.body).unwrap();
    let first_result = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["message_type"] == "result")
        .unwrap()["seq"]
        .clone();
    let r = http(
        &server.addr,
        "POST",
        "/api/sessions/opt/rewind",
        Some("tok-alice"),
        Some(&json!({"to_seq": first_result})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    c.send(json!({"type": "chat", "agent_id": "opt", "content": "four", "options": {"cwd": app}}))
        .await;
    assert_eq!(
        reply_text(&c.until_result("opt").await),
        "Echo: four (history 2)"
    );
    assert_eq!(fx.spawns().last().unwrap()["cwd"], app.as_str());

    // The options take effect in the CLI: a command `allowed_tools` covers runs without a
    // permission request.
    chat_ack(&mut c, "opt", "TOOL:git+log").await;
    let frames = c
        .recv_until(|f| {
            f["message_type"] == "permission_request"
                || (f["message_type"] == "result" && f["agent_id"] == "opt")
        })
        .await;
    assert_eq!(
        frames.last().unwrap()["message_type"],
        "result",
        "{frames:?}"
    );
    assert_eq!(reply_text(&frames), "Tool said: ran: git log");

    // Bad values and sizes are refused before anything reaches the CLI.
    let before = fx.spawns().len();
    for options in [
        json!({"system_prompt": "x".repeat((64 << 10) + 1)}),
        json!({"allowed_tools": (0..65).map(|i| format!("T{i}")).collect::<Vec<_>>()}),
        json!({"allowed_tools": ["-p"]}),
        json!({"disallowed_tools": ["Bash(x),Read"]}),
        json!({"max_turns": 0}),
        json!({"max_turns": -1}),
        json!({"add_dirs": (0..17).map(|_| app.clone()).collect::<Vec<_>>()}),
    ] {
        c.send(json!({"type": "chat", "agent_id": "opt", "content": "x", "options": options}))
            .await;
        let err = c
            .recv_until(|f| f["message_type"] == "error")
            .await
            .pop()
            .unwrap();
        assert_eq!(err["code"], "invalid_options");
    }
    assert_eq!(fx.spawns().len(), before);
    stop_server(server).await;
}

/// One line of a CLI transcript, as the CLI writes it in directory `cwd`.
pub(crate) fn transcript_line(
    kind: &str,
    uuid: &str,
    session: &str,
    cwd: &Path,
    content: Value,
) -> String {
    let role = if kind == "assistant" {
        "assistant"
    } else {
        "user"
    };
    json!({"type": kind, "uuid": uuid, "parentUuid": null, "sessionId": session, "isSidechain": false,
        "timestamp": "2026-01-02T03:04:05.000Z", "cwd": cwd,
        "message": {"role": role, "content": content}})
    .to_string()
}

/// Writes a transcript of session `id` for project `cwd` under `home`.
pub(crate) fn write_transcript(home: &Path, cwd: &Path, id: &str, text: &str) -> PathBuf {
    let dir = home.join("projects").join(sanitize(cwd));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{id}.jsonl"));
    std::fs::write(&path, text).unwrap();
    path
}

fn sanitize(path: &Path) -> String {
    path.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The CLI-session routes: listing per principal, import of a transcript with unknown line
/// types and a truncated last line, 409 the second time, and every hostile input refused
/// without leaving anything behind: paths outside the roots or in another principal's, links
/// out of the CLI's config dir, a transcript with another hard link, ids that are not UUIDs,
/// an oversized transcript.
#[tokio::test]
async fn cli_session_routes_refuse_hostile_input() {
    let layout = Layout::new();
    let (_cfg, config) = config_file(&format!(
        "{}\n[claude]\nconfig_dir = {}\n",
        layout.toml(),
        toml_string(&layout.home.to_string_lossy())
    ));
    let mut server = TestServer::start_with(&["--config", &config, "--demo-delay-ms", "0"]).await;
    let id = "0b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    let text = [
        json!({"type": "queue-operation", "operation": "enqueue"}).to_string(),
        transcript_line(
            "user",
            "u1",
            id,
            &layout.app,
            json!("list the files please"),
        ),
        transcript_line(
            "assistant",
            "a1",
            id,
            &layout.app,
            json!([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]),
        ),
        transcript_line(
            "user",
            "u2",
            id,
            &layout.app,
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": "README.md"}]),
        ),
        json!({"type": "last-prompt", "lastPrompt": "x"}).to_string(),
        transcript_line(
            "assistant",
            "a2",
            id,
            &layout.app,
            json!([{"type": "text", "text": "There is a README."}]),
        ),
        "{\"type\":\"user\",\"uuid\":\"u3\",\"mess".to_owned(),
    ]
    .join("\n");
    write_transcript(&layout.home, &layout.app, id, &text);
    // The server's address, which changes when it is started again.
    let addr = std::cell::RefCell::new(server.addr.clone());
    let get = |path: String, token: &'static str| {
        let addr = addr.borrow().clone();
        async move {
            let r = http(&addr, "GET", &path, Some(token), None).await;
            (
                r.status,
                serde_json::from_str::<Value>(&r.body).unwrap_or(Value::Null),
            )
        }
    };
    let post = |path: &'static str, body: Value, token: &'static str| {
        let addr = addr.borrow().clone();
        async move {
            let r = http(&addr, "POST", path, Some(token), Some(&body)).await;
            (
                r.status,
                serde_json::from_str::<Value>(&r.body).unwrap_or(Value::Null),
            )
        }
    };
    let app = Layout::s(&layout.app);

    let (status, projects) = get("/api/projects".into(), "tok-bob").await;
    assert_eq!(status, 200);
    let paths: Vec<&str> = projects["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [Layout::s(&layout.root), app.clone()],
        "no link out, no file, not alice's root"
    );
    let app_entry = &projects["projects"][1];
    assert_eq!(app_entry["name"], "app");
    assert_eq!(app_entry["cli_sessions"], 1);
    assert_eq!(app_entry["sessions"], 0);
    let (_, alice_projects) = get("/api/projects".into(), "tok-alice").await;
    assert!(
        alice_projects["projects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == Layout::s(&layout.private.join("secret")).as_str())
    );

    let cli_list = |cwd: &str| format!("/api/projects/cli-sessions?cwd={}", urlencode(cwd));
    let (status, list) = get(cli_list(&app), "tok-bob").await;
    assert_eq!(status, 200, "{list}");
    let listed = &list["sessions"][0];
    assert_eq!(listed["cli_session_id"], id);
    assert_eq!(listed["title"], "list the files please");
    assert_eq!(listed["message_count"], 4);
    assert_eq!(listed["imported_as"], Value::Null);

    for cwd in [
        Layout::s(&layout.outside),
        Layout::s(&layout.root.join("out")),
        format!("{app}/../../outside"),
        Layout::s(&layout.private.join("secret")),
        "app".to_owned(),
        "-x".to_owned(),
    ] {
        let (status, err) = get(cli_list(&cwd), "tok-bob").await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some("invalid_request")),
            "{cwd}"
        );
        let (status, _) = post(
            "/api/projects/cli-sessions/import",
            json!({"cwd": cwd, "cli_session_id": id}),
            "tok-bob",
        )
        .await;
        assert_eq!(status, 400, "{cwd}");
    }
    for bad_id in [
        "../../etc/passwd",
        "not-a-uuid",
        "0B6C3C1E-4A43-4A53-9D5C-3A3C7D2C1F00",
        "",
    ] {
        let (status, err) = post(
            "/api/projects/cli-sessions/import",
            json!({"cwd": app, "cli_session_id": bad_id}),
            "tok-bob",
        )
        .await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some("invalid_request")),
            "{bad_id}"
        );
    }
    let (status, _) = post(
        "/api/projects/cli-sessions/import",
        json!({"cwd": app, "cli_session_id": "1b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00"}),
        "tok-bob",
    )
    .await;
    assert_eq!(status, 404, "no such CLI session");

    // A transcript reached through a link, or a sessions folder that links out of the
    // CLI's config dir, is never read.
    let elsewhere = layout.outside.join("stolen");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let linked = "2b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    std::fs::write(
        elsewhere.join(format!("{linked}.jsonl")),
        transcript_line("user", "x1", linked, &layout.app, json!("secret")),
    )
    .unwrap();
    let app_dir = layout.home.join("projects").join(sanitize(&layout.app));
    std::os::unix::fs::symlink(
        elsewhere.join(format!("{linked}.jsonl")),
        app_dir.join(format!("{linked}.jsonl")),
    )
    .unwrap();
    let root_dir = layout.home.join("projects").join(sanitize(&layout.root));
    std::os::unix::fs::symlink(&elsewhere, &root_dir).unwrap();
    // Nor is one with another hard link (to a file anywhere else on the file system).
    let hard = "2c6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    let other_name = elsewhere.join("other-name.jsonl");
    std::fs::write(
        &other_name,
        transcript_line("user", "h1", hard, &layout.app, json!("secret")),
    )
    .unwrap();
    std::fs::hard_link(&other_name, app_dir.join(format!("{hard}.jsonl"))).unwrap();
    let (_, list) = get(cli_list(&app), "tok-bob").await;
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        1,
        "neither link is listed"
    );
    let (_, list) = get(cli_list(&Layout::s(&layout.root)), "tok-bob").await;
    assert_eq!(list["sessions"], json!([]), "a linked folder is not read");
    for (cwd, id) in [
        (&app, linked),
        (&Layout::s(&layout.root), linked),
        (&app, hard),
    ] {
        let (status, _) = post(
            "/api/projects/cli-sessions/import",
            json!({"cwd": cwd, "cli_session_id": id}),
            "tok-bob",
        )
        .await;
        assert_eq!(status, 404, "{cwd} {id}");
    }

    // Too large: refused up front, nothing stored.
    let huge = "3b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    let path = write_transcript(&layout.home, &layout.app, huge, "");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    let (status, err) = post(
        "/api/projects/cli-sessions/import",
        json!({"cwd": app, "cli_session_id": huge}),
        "tok-bob",
    )
    .await;
    assert_eq!(status, 400);
    assert!(err["error"].as_str().unwrap().contains("limit"), "{err}");
    nothing_stored(&mut server, "nothing half-imported").await;
    *addr.borrow_mut() = server.addr.clone();

    // The import: 201, the CLI's id as session_id, the project as cwd, the transcript as
    // frames (the unknown lines and the truncated last one skipped).
    let (status, imported) = post(
        "/api/projects/cli-sessions/import",
        json!({"cwd": app, "cli_session_id": id, "agent_id": "mine"}),
        "tok-bob",
    )
    .await;
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["agent_id"], "mine");
    assert_eq!(imported["session_id"], id);
    assert_eq!(imported["sdk_session_id"], id);
    assert_eq!(imported["cwd"], app.as_str());
    assert_eq!(imported["title"], "list the files please");
    let (_, page) = get("/api/sessions/mine/messages".into(), "tok-bob").await;
    let kinds: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["user", "assistant", "user", "assistant", "status"]);
    assert_eq!(
        page["messages"][1]["message"]["message"]["content"][0]["type"],
        "tool_use"
    );
    let (_, list) = get(cli_list(&app), "tok-bob").await;
    let entry = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["cli_session_id"] == id)
        .unwrap()
        .clone();
    assert_eq!(entry["imported_as"], "mine");

    // Twice: 409, for the same principal and for another one (who learns nothing of it).
    let (status, err) = post(
        "/api/projects/cli-sessions/import",
        json!({"cwd": app, "cli_session_id": id, "agent_id": "again"}),
        "tok-bob",
    )
    .await;
    assert_eq!((status, err["code"].as_str()), (409, Some("agent_exists")));
    let (status, err) = post(
        "/api/projects/cli-sessions/import",
        json!({"cwd": app, "cli_session_id": id}),
        "tok-alice",
    )
    .await;
    assert_eq!(status, 409);
    assert!(!err["error"].as_str().unwrap().contains("mine"), "{err}");
    let (_, alice_list) = get(cli_list(&app), "tok-alice").await;
    assert_eq!(alice_list["sessions"][0]["imported_as"], Value::Null);

    // Sync: another principal can't; nothing new is 0; a turn the CLI added is appended.
    let (status, _) = post("/api/sessions/mine/sync", json!({}), "tok-alice").await;
    assert_eq!(status, 404);
    let (status, synced) = post("/api/sessions/mine/sync", json!({}), "tok-bob").await;
    assert_eq!(
        (status, synced["appended"].as_i64()),
        (200, Some(0)),
        "{synced}"
    );
    let mut more = std::fs::read_to_string(path.with_file_name(format!("{id}.jsonl"))).unwrap();
    more.truncate(more.rfind('\n').unwrap() + 1);
    more.push_str(&transcript_line(
        "user",
        "u4",
        id,
        &layout.app,
        json!("and one more"),
    ));
    more.push('\n');
    more.push_str(&transcript_line(
        "assistant",
        "a4",
        id,
        &layout.app,
        json!([{"type": "text", "text": "Done."}]),
    ));
    more.push('\n');
    std::fs::write(path.with_file_name(format!("{id}.jsonl")), more).unwrap();
    let (status, synced) = post("/api/sessions/mine/sync", json!({}), "tok-bob").await;
    assert_eq!(
        (status, synced["appended"].as_i64()),
        (200, Some(2)),
        "{synced}"
    );
    let (_, page) = get("/api/sessions/mine/messages?after_seq=5".into(), "tok-bob").await;
    assert_eq!(
        page["messages"][0]["message"]["message"]["content"],
        "and one more"
    );
    assert_eq!(page["messages"][2]["status"], "synced");
    let (status, _) = post("/api/sessions/mine/sync", json!({}), "tok-bob").await;
    assert_eq!(status, 200);
    let (_, again) = get("/api/sessions/mine".into(), "tok-bob").await;
    assert_eq!(again["message_count"], 8, "a second sync appends nothing");

    // A conversation with no transcript has nothing to sync.
    let mut c = connect_as(&server.addr, "tok-bob").await;
    chat_ack(&mut c, "plain", "hi").await;
    c.until_result("plain").await;
    let (status, _) = post("/api/sessions/plain/sync", json!({}), "tok-bob").await;
    assert_eq!(status, 404);
    stored_rows_are_listed(&mut server).await;
}

/// `(status, body)` of a request as `token`, with a JSON body when one is given.
async fn call(
    server: &TestServer,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let r = http(&server.addr, method, path, Some(token), body.as_ref()).await;
    (
        r.status,
        serde_json::from_str(&r.body).unwrap_or(Value::Null),
    )
}

/// The CLI names a directory's folder by making every character that is not a letter or
/// digit `-`, so alice's `…/a/b` and bob's `…/a-b` share one. A transcript belongs only to
/// the directory its first recorded `cwd` names: neither lists, imports or syncs the other's
/// sessions (an import of the other's is `unknown_agent`, and stores nothing), and the owner's
/// own import is not blocked. A transcript that records no `cwd` before its messages, or
/// first records another one, belongs to neither.
#[tokio::test]
async fn cli_sessions_of_directories_sharing_a_folder_stay_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (alices, bobs, home) = (
        base.join("a").join("b"),
        base.join("a-b"),
        base.join("home"),
    );
    for dir in [&alices, &bobs, &home] {
        std::fs::create_dir_all(dir).unwrap();
    }
    assert_eq!(sanitize(&alices), sanitize(&bobs));
    let (_cfg, config) = config_file(&format!(
        "{}\n[projects]\nroots = [{{ path = {}, principals = [\"alice\"] }}, {{ path = {}, principals = [\"bob\"] }}]\n[claude]\nconfig_dir = {}\n",
        crate::security::TOKENS,
        toml_string(&alices.to_string_lossy()),
        toml_string(&bobs.to_string_lossy()),
        toml_string(&home.to_string_lossy())
    ));
    let mut server = TestServer::start_with(&["--config", &config, "--demo-delay-ms", "0"]).await;
    let session = |id: &str, cwd: &Path, said: &str| {
        [
            json!({"type": "queue-operation", "operation": "enqueue", "sessionId": id}).to_string(),
            transcript_line("user", &format!("{said}-u"), id, cwd, json!(said)),
            transcript_line(
                "assistant",
                &format!("{said}-a"),
                id,
                cwd,
                json!([{"type": "text", "text": "ok"}]),
            ),
        ]
        .join("\n")
            + "\n"
    };
    let alice_id = "4b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    let bob_id = "5b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    let no_cwd = "6b6c3c1e-4a43-4a53-9d5c-3a3c7d2c1f00";
    let alice_file = write_transcript(
        &home,
        &alices,
        alice_id,
        &session(alice_id, &alices, "alices"),
    );
    write_transcript(&home, &bobs, bob_id, &session(bob_id, &bobs, "bobs"));
    // Messages before any recorded cwd, then alice's: nobody's.
    let unclaimed = json!({"type": "user", "uuid": "n1", "sessionId": no_cwd,
        "message": {"role": "user", "content": "whose?"}})
    .to_string()
        + "\n"
        + &session(no_cwd, &alices, "later");
    write_transcript(&home, &alices, no_cwd, &unclaimed);

    let listed = |path: &Path, token: &'static str| {
        let path = format!(
            "/api/projects/cli-sessions?cwd={}",
            urlencode(&path.to_string_lossy())
        );
        let server = &server;
        async move {
            let (status, list) = call(server, "GET", &path, token, None).await;
            assert_eq!(status, 200, "{list}");
            list["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["cli_session_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(&alices, "tok-alice").await, [alice_id]);
    assert_eq!(listed(&bobs, "tok-bob").await, [bob_id]);
    for (token, path) in [("tok-alice", &alices), ("tok-bob", &bobs)] {
        let (_, projects) = call(&server, "GET", "/api/projects", token, None).await;
        let project = projects["projects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == path.to_string_lossy().as_ref())
            .unwrap()
            .clone();
        assert_eq!(project["cli_sessions"], 1, "{project}");
    }

    // Alice can't import bob's session through her directory, nor the unclaimed one.
    let import = "/api/projects/cli-sessions/import";
    for id in [bob_id, no_cwd] {
        let body = json!({"cwd": alices, "cli_session_id": id});
        let (status, err) = call(&server, "POST", import, "tok-alice", Some(body)).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (404, Some("unknown_agent")),
            "{err}"
        );
    }
    nothing_stored(&mut server, "nothing stored").await;
    // Bob's own import is not blocked; alice imports hers.
    let body = json!({"cwd": bobs, "cli_session_id": bob_id});
    let (status, imported) = call(&server, "POST", import, "tok-bob", Some(body)).await;
    assert_eq!(
        (status, imported["session_id"].as_str()),
        (201, Some(bob_id)),
        "{imported}"
    );
    let body = json!({"cwd": alices, "cli_session_id": alice_id, "agent_id": "mine"});
    let (status, imported) = call(&server, "POST", import, "tok-alice", Some(body)).await;
    assert_eq!(status, 201, "{imported}");

    // Her transcript's file replaced by one that first records bob's directory: a sync
    // appends nothing from it.
    let mut swapped = session(alice_id, &bobs, "swapped");
    swapped.push_str(&session(alice_id, &alices, "more"));
    std::fs::write(&alice_file, swapped).unwrap();
    let (status, err) = call(
        &server,
        "POST",
        "/api/sessions/mine/sync",
        "tok-alice",
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (404, Some("unknown_agent")),
        "{err}"
    );
    let (_, mine) = call(&server, "GET", "/api/sessions/mine", "tok-alice", None).await;
    assert_eq!(mine["message_count"], 3, "{mine}");
    stored_rows_are_listed(&mut server).await;
}

/// Percent-encodes a query value.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The real CLI in a project: a tool lists the project's own files, a file the agent writes
/// appears in the project, two conversations in it don't share memory, and the system prompt
/// reaches the model.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn real_cli_works_in_a_project() {
    let Some(cli) = real_cli() else { return };
    let layout = Layout::new();
    std::fs::write(layout.app.join("alpha.txt"), "a").unwrap();
    std::fs::write(layout.app.join("beta.txt"), "b").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(dir.path()).await;
    let (_cfg, config) = config_file(&format!(
        "[projects]\nroots = [{{ path = {} }}]\n[claude]\nconfig_dir = {}\n",
        toml_string(&layout.root.to_string_lossy()),
        toml_string(&layout.home.to_string_lossy())
    ));
    let server = start_server(&dir.path().join("data"), &cli, &api, &config).await;
    let mut c = server.client().await;
    let app = Layout::s(&layout.app);
    c.send(json!({"type": "chat", "agent_id": "p1", "content": "TOOL:ls", "options": {
        "cwd": app, "system_prompt": "You are the project helper 7731.", "permission_mode": "acceptEdits"}}))
        .await;
    let frames = c.until_result("p1").await;
    let reply = reply_text(&frames);
    assert!(
        reply.contains("alpha.txt") && reply.contains("beta.txt"),
        "{reply}"
    );
    assert!(reply.contains("README.md"), "{reply}");
    let system = api.bodies().last().unwrap()["system"].to_string();
    assert!(
        system.contains("You are the project helper 7731."),
        "{system}"
    );

    c.send(json!({"type": "chat", "agent_id": "p1", "content": "TOOL:touch+made_here.txt"}))
        .await;
    c.until_result("p1").await;
    assert!(
        layout.app.join("made_here.txt").exists(),
        "written in the project"
    );

    c.send(json!({"type": "chat", "agent_id": "p2", "content": "hello other", "options": {"cwd": app}}))
        .await;
    assert_eq!(
        reply_text(&c.until_result("p2").await),
        "Echo: hello other (history 1)",
        "a second conversation in the project starts with no memory"
    );
    let last = api.requests().pop().unwrap().to_string();
    assert!(!last.contains("TOOL:ls"), "{last}");
    stop(server, &cli).await;
}

/// Runs the real CLI directly in `cwd`, as a user would; returns its JSON output.
async fn run_cli(cli: &Path, cwd: &Path, home: &Path, api: &FakeApi, args: &[&str]) -> Value {
    let out = tokio::process::Command::new(cli)
        .args(args)
        .args(["--output-format", "json"])
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", home)
        .env("ANTHROPIC_BASE_URL", &api.url)
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A session made with the real CLI in a project is listed, imported, shows its history, and
/// the next turn's model request carries it; a turn the CLI adds later is synced in.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn real_cli_session_is_imported_resumed_and_synced() {
    let Some(cli) = real_cli() else { return };
    let layout = Layout::new();
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(dir.path()).await;
    let made = run_cli(
        &cli,
        &layout.app,
        &layout.home,
        &api,
        &["-p", "hello from the terminal"],
    )
    .await;
    let id = made["session_id"].as_str().unwrap().to_owned();
    assert_eq!(made["result"], "Echo: hello from the terminal (history 1)");

    let (_cfg, config) = config_file(&format!(
        "[projects]\nroots = [{{ path = {} }}]\n[claude]\nconfig_dir = {}\n",
        toml_string(&layout.root.to_string_lossy()),
        toml_string(&layout.home.to_string_lossy())
    ));
    let server = start_server(&dir.path().join("data"), &cli, &api, &config).await;
    let rest = Rest::new(&server);
    let app = Layout::s(&layout.app);
    let (_, projects) = rest.get("/api/projects").await;
    let entry = projects["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == app.as_str())
        .unwrap()
        .clone();
    assert_eq!(entry["cli_sessions"], 1, "{projects}");
    let (_, list) = rest
        .get(&format!(
            "/api/projects/cli-sessions?cwd={}",
            urlencode(&app)
        ))
        .await;
    assert_eq!(list["sessions"][0]["cli_session_id"], id.as_str(), "{list}");
    assert_eq!(list["sessions"][0]["title"], "hello from the terminal");

    let (status, imported) = rest
        .post(
            "/api/projects/cli-sessions/import",
            json!({"cwd": app, "cli_session_id": id, "agent_id": "term"}),
        )
        .await;
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["session_id"], id.as_str());
    let (_, page) = rest.get("/api/sessions/term/messages").await;
    let text = page.to_string();
    assert!(
        text.contains("hello from the terminal") && text.contains("Echo: hello from the terminal"),
        "{text}"
    );
    let (status, _) = rest
        .post(
            "/api/projects/cli-sessions/import",
            json!({"cwd": app, "cli_session_id": id, "agent_id": "term2"}),
        )
        .await;
    assert_eq!(status, 409);

    let mut c = server.client().await;
    chat_ack(&mut c, "term", "and now from agentmux").await;
    assert_eq!(
        reply_text(&c.until_result("term").await),
        "Echo: and now from agentmux (history 2)",
        "the agent remembers the CLI session"
    );
    let last = api.requests().pop().unwrap().to_string();
    assert!(last.contains("hello from the terminal"), "{last}");

    // The user goes on in the terminal; a sync brings that turn in, and the next turn knows it.
    let more = run_cli(
        &cli,
        &layout.app,
        &layout.home,
        &api,
        &["-p", "back in the terminal", "--resume", &id],
    )
    .await;
    assert_eq!(more["session_id"], id.as_str());
    let (status, synced) = rest.post("/api/sessions/term/sync", json!({})).await;
    assert_eq!(status, 200, "{synced}");
    // The terminal turn: its prompt and its reply.
    assert_eq!(synced["appended"], 2, "{synced}");
    let (_, page) = rest.get("/api/sessions/term/messages").await;
    assert!(page.to_string().contains("back in the terminal"));
    chat_ack(&mut c, "term", "last one").await;
    assert_eq!(
        reply_text(&c.until_result("term").await),
        "Echo: last one (history 4)"
    );
    stop(server, &cli).await;
}

/// With a pre-warmed spare (which runs in a workspace of its own with no options), a
/// conversation in a project still gets a CLI of its own in that project.
#[tokio::test]
async fn a_project_conversation_does_not_adopt_the_spare() {
    let layout = Layout::new();
    let fx = Fixture::new(&format!("{}\n[claude]\nprewarm = true\n", layout.toml()));
    let server = fx.start(&[]).await;
    let mut waited = 0;
    while fx.spawns().is_empty() && waited < 150 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waited += 1;
    }
    assert_eq!(fx.spawns().len(), 1, "the spare is up");
    let mut c = connect_as(&server.addr, "tok-alice").await;
    let app = Layout::s(&layout.app);
    c.send(json!({"type": "chat", "agent_id": "warm", "content": "hi", "options": {"cwd": app}}))
        .await;
    assert_eq!(
        reply_text(&c.until_result("warm").await),
        "Echo: hi (history 1)"
    );
    let pid = *fx.prompt_pids().last().unwrap();
    let spawn = fx.spawns().into_iter().find(|s| s["pid"] == pid).unwrap();
    assert_eq!(spawn["cwd"], app.as_str(), "the turn ran in the project");
    stop_server(server).await;
}

/// A conversation's directories are checked again at every start, not only when it was created:
/// after a restart in which alice's root was limited to bob, and in which a project directory
/// and an added directory were each replaced by a symbolic link leading out of every root, the
/// next chat, fork and sync of those conversations are refused `forbidden` (over the socket
/// and REST), nothing is started or stored, while a conversation whose directory is still
/// allowed goes on.
#[tokio::test]
async fn directories_that_left_the_roots_are_refused_at_the_next_start() {
    let layout = Layout::new();
    let fx = Fixture::new(&layout.toml());
    let server = fx.start(&[]).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    let linked = layout.root.join("linked");
    let added = layout.root.join("added");
    for dir in [&linked, &added] {
        std::fs::create_dir(dir).unwrap();
    }
    let s = Layout::s;
    let conversations = [
        (
            "in-private",
            json!({"cwd": s(&layout.private.join("secret"))}),
        ),
        ("in-linked", json!({"cwd": s(&linked)})),
        (
            "with-added",
            json!({"cwd": s(&layout.app), "add_dirs": [s(&added)]}),
        ),
        ("still-fine", json!({"cwd": s(&layout.app)})),
    ];
    for (agent_id, options) in &conversations {
        alice
            .send(
                json!({"type": "chat", "agent_id": agent_id, "content": "one", "options": options}),
            )
            .await;
        assert_eq!(
            reply_text(&alice.until_result(agent_id).await),
            "Echo: one (history 1)"
        );
    }
    stop_server(server).await;

    // The private root is bob's now; two directories became links to outside every root.
    let toml = std::fs::read_to_string(&fx.config).unwrap();
    let limited = toml.replace("principals = [\"alice\"]", "principals = [\"bob\"]");
    assert_ne!(toml, limited);
    std::fs::write(&fx.config, limited).unwrap();
    for dir in [&linked, &added] {
        std::fs::remove_dir(dir).unwrap();
        std::os::unix::fs::symlink(&layout.outside, dir).unwrap();
    }
    let server = fx.start(&[]).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    let spawns = fx.spawns().len();
    let rows = listed_rows(&server, "tok-alice").await;
    let forbidden = |status: u16, body: &str| {
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("forbidden")),
            "{body}"
        );
    };
    for (agent_id, _) in &conversations[..3] {
        let messages = format!("/api/sessions/{agent_id}/messages");
        let before = http(&server.addr, "GET", &messages, Some("tok-alice"), None).await;
        alice
            .send(json!({"type": "chat", "agent_id": agent_id, "content": "two", "client_msg_id": "c"}))
            .await;
        let err = alice.recv().await;
        assert_eq!(err["code"], "forbidden", "{agent_id}: {err}");
        assert_eq!(err["client_msg_id"], "c");
        assert!(
            err["error"]
                .as_str()
                .unwrap()
                .contains("no longer a directory inside a project root"),
            "{err}"
        );
        let chat = json!({"content": "two"});
        let r = http(
            &server.addr,
            "POST",
            &messages,
            Some("tok-alice"),
            Some(&chat),
        )
        .await;
        forbidden(r.status, &r.body);
        let fork = json!({"new_agent_id": format!("{agent_id}-fork")});
        let path = format!("/api/sessions/{agent_id}/fork");
        let r = http(&server.addr, "POST", &path, Some("tok-alice"), Some(&fork)).await;
        forbidden(r.status, &r.body);
        let path = format!("/api/sessions/{agent_id}/sync");
        let r = http(
            &server.addr,
            "POST",
            &path,
            Some("tok-alice"),
            Some(&json!({})),
        )
        .await;
        forbidden(r.status, &r.body);
        let after = http(&server.addr, "GET", &messages, Some("tok-alice"), None).await;
        assert_eq!(before.body, after.body, "nothing stored");
    }
    assert_eq!(fx.spawns().len(), spawns, "no agent started");
    assert_eq!(
        listed_rows(&server, "tok-alice").await,
        rows,
        "no fork created"
    );

    alice
        .send(json!({"type": "chat", "agent_id": "still-fine", "content": "two"}))
        .await;
    assert_eq!(
        reply_text(&alice.until_result("still-fine").await),
        "Echo: two (history 2)"
    );

    // A live conversation whose directory is swapped for a link: its agent does not start
    // there again (here, to take a new system prompt); the turn ends with an error saying why.
    let live = layout.root.join("live");
    std::fs::create_dir(&live).unwrap();
    let options = json!({"cwd": s(&live)});
    alice
        .send(json!({"type": "chat", "agent_id": "live", "content": "one", "options": options}))
        .await;
    alice.until_result("live").await;
    std::fs::remove_dir(&live).unwrap();
    std::os::unix::fs::symlink(&layout.outside, &live).unwrap();
    let spawns = fx.spawns().len();
    let options = json!({"system_prompt": "restart"});
    alice
        .send(json!({"type": "chat", "agent_id": "live", "content": "two", "options": options}))
        .await;
    let frames = alice.until_result("live").await;
    assert_eq!(frames.last().unwrap()["message"]["is_error"], true);
    let error = frames
        .iter()
        .find(|f| f["message_type"] == "error")
        .expect("an error says why");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("no longer a directory inside a project root"),
        "{error}"
    );
    assert_eq!(
        fx.spawns().len(),
        spawns,
        "no agent started through the link"
    );
    stop_server(server).await;
}
