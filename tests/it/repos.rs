//! A git repository inside a project root and a server with that root: the fixture of the
//! worktree tests (REST, the terminal client's review commands, the real CLI's).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;
use crate::security::{TOKENS, connect_as, server_with};

/// A repository on `main` with `a.txt`, inside a project root, and a server with that root.
pub(crate) struct Fixture {
    _tmp: tempfile::TempDir,
    pub(crate) repo: PathBuf,
    pub(crate) server: TestServer,
    _cfg: tempfile::TempDir,
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

/// `root/repo`: a repository on `main` whose one commit holds `a.txt` ("one\ntwo\n") and
/// `sub/b.txt`.
pub(crate) fn repo_in(root: &Path) -> PathBuf {
    let repo = root.join("repo");
    std::fs::create_dir_all(repo.join("sub")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Dev"]);
    git(&repo, &["config", "user.email", "dev@example.com"]);
    std::fs::write(repo.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(repo.join("sub/b.txt"), "b\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    repo
}

/// A REST call to `server`, as the holder of `token` if any; `(status, body)`.
pub(crate) async fn rest(
    server: &TestServer,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method.parse().unwrap(), server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let resp = request.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

impl Fixture {
    /// `root_options` goes into the root's entry (e.g. `worktrees = true`).
    pub(crate) async fn new(root_options: &str) -> Self {
        Self::with(root_options, "").await
    }

    /// With more tables (`extra_toml`) in the server's config file.
    pub(crate) async fn with(root_options: &str, extra_toml: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("root");
        let repo = repo_in(&root);
        std::fs::create_dir_all(root.join("plain")).unwrap();
        let (server, cfg) = server_with(&format!(
            "{TOKENS}\n[projects]\nroots = [{{ path = {}{root_options} }}]\n{extra_toml}",
            toml_string(&root.to_string_lossy())
        ))
        .await;
        Fixture {
            _tmp: tmp,
            repo,
            server,
            _cfg: cfg,
        }
    }

    /// A REST call as `token`; `(status, body)`.
    pub(crate) async fn api(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        rest(&self.server, Some(token), method, path, body).await
    }

    /// Starts conversation `agent_id` as alice with `options`, runs its first turn and returns
    /// its summary.
    pub(crate) async fn start(&self, agent_id: &str, options: Value) -> Value {
        let mut c = connect_as(&self.server.addr, "tok-alice").await;
        c.send(json!({"type": "chat", "agent_id": agent_id, "content": "hi", "options": options}))
            .await;
        let frames = c.until_result(agent_id).await;
        assert!(
            frames.iter().all(|f| f["message_type"] != "error"),
            "{frames:?}"
        );
        let (status, summary) = self
            .api(
                "tok-alice",
                "GET",
                &format!("/api/sessions/{agent_id}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{summary}");
        summary
    }

    /// The first error a chat as alice with `options` gets.
    pub(crate) async fn refused(&self, agent_id: &str, options: Value) -> Value {
        let mut c = connect_as(&self.server.addr, "tok-alice").await;
        c.send(json!({"type": "chat", "agent_id": agent_id, "content": "hi", "options": options}))
            .await;
        let frames = c
            .recv_until(|v| v["message_type"] == "error" || v["message_type"] == "result")
            .await;
        frames.last().unwrap().clone()
    }
}

/// The directory a conversation's agent runs in, from its summary.
pub(crate) fn cwd(summary: &Value) -> PathBuf {
    PathBuf::from(summary["cwd"].as_str().unwrap())
}
