//! End to end with a real ACP agent: the pinned `@agentclientprotocol/claude-agent-acp`
//! adapter (run by Node.js 22+, both installed by `scripts/test.sh`), driving the pinned real
//! Claude CLI against the fake Messages API on loopback: no network, no key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::acp::chat_with;
use crate::common::*;
use crate::real_cli::{FakeApi, real_cli, stat, wait_gone};

/// Node.js and the adapter's script, from `AGENTMUX_TEST_ACP_NODE` and
/// `AGENTMUX_TEST_ACP_ADAPTER`. Missing is a failure under CI.
fn real_adapter() -> Option<(PathBuf, PathBuf)> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .map(PathBuf::from)
            .filter(|p| p.is_file())
    };
    match (
        var("AGENTMUX_TEST_ACP_NODE"),
        var("AGENTMUX_TEST_ACP_ADAPTER"),
    ) {
        (Some(node), Some(adapter)) => Some((node, adapter)),
        _ if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "AGENTMUX_TEST_ACP_NODE and AGENTMUX_TEST_ACP_ADAPTER must be set under CI \
             (scripts/test.sh installs them)"
        ),
        _ => {
            eprintln!(
                "skipping the real ACP adapter test: AGENTMUX_TEST_ACP_ADAPTER is not set \
                 (scripts/test.sh sets it)"
            );
            None
        }
    }
}

/// Every process descended from `root` (not `root` itself).
fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            stat(pid)
                .filter(|(state, _)| *state != 'Z')
                .map(|(_, ppid)| (pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    found.remove(0);
    found
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

async fn start(data_dir: &Path, config: &str) -> TestServer {
    TestServer::start_in(
        data_dir,
        &["--config", config, "--backend", "claude-acp"],
        &[],
    )
    .await
}

/// Settings with the adapter as agent `claude-acp` (with `agent_keys` in its table), driving
/// `cli` against `api`, with its home under `dir`.
fn adapter_config(
    dir: &Path,
    api: &FakeApi,
    cli: &Path,
    node: &Path,
    adapter: &Path,
    agent_keys: &str,
) -> (tempfile::TempDir, String) {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let sandbox = if is_root() {
        "IS_SANDBOX = \"1\"\n"
    } else {
        ""
    };
    config_file(&format!(
        "[agents.claude-acp]\nkind = \"acp\"\ncommand = [{}, {}]\n{agent_keys}\
         [agents.claude-acp.env]\n\
         HOME = {}\nCLAUDE_CONFIG_DIR = {}\nCLAUDE_CODE_EXECUTABLE = {}\n\
         ANTHROPIC_BASE_URL = {}\nANTHROPIC_API_KEY = \"dummy\"\n\
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\"\nCLAUDE_CODE_MAX_RETRIES = \"0\"\n{sandbox}",
        toml_string(&node.to_string_lossy()),
        toml_string(&adapter.to_string_lossy()),
        toml_string(&home.to_string_lossy()),
        toml_string(&home.join(".claude").to_string_lossy()),
        toml_string(&cli.to_string_lossy()),
        toml_string(&api.url),
    ))
}

/// Stops the server gracefully and checks that the adapter and its CLI went with it.
async fn stop(mut server: TestServer) {
    let pids = descendants(server.child.id().unwrap());
    assert!(!pids.is_empty(), "the agent was running");
    assert!(server.terminate().await.success());
    wait_gone(&pids, Duration::from_secs(10)).await;
}

/// Two turns stream and store; a tool call with a permission prompt runs when allowed and
/// doesn't when denied; an interrupt during a slow stream ends the turn within 5 s and the
/// next turn works; after a restart the conversation resumes and the model gets the earlier
/// turns; no process is left after shutdown.
#[cfg_attr(
    any(no_test_claude, no_test_acp),
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN) and the ACP adapter (AGENTMUX_TEST_ACP_ADAPTER), not configured here"
)]
#[tokio::test]
async fn real_acp_adapter_end_to_end() {
    let Some(cli) = real_cli() else { return };
    let Some((node, adapter)) = real_adapter() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(dir.path()).await;
    let (_cfg, config) = adapter_config(dir.path(), &api, &cli, &node, &adapter, "");
    let data_dir = dir.path().join("data");
    let server = start(&data_dir, &config).await;
    let mut c = server.client().await;

    // The adapter starts sessions in its `auto` mode; without `agent.allow_bypass_permissions`
    // agentmux switches them to `default`, so the permission prompts below reach the socket.
    let ack = chat_with(&mut c, "acp", "hello one", json!({})).await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let session_id = ack["session_id"].as_str().unwrap().to_owned();
    let first = c.until_result("acp").await;
    assert_eq!(reply_text(&first), "Echo: hello one (history 1)");
    assert!(
        first.iter().any(|f| f["message_type"] == "stream_event"),
        "the reply streams"
    );
    assert!(
        first
            .iter()
            .any(|f| f["message_type"] == "assistant" && f["seq"].is_i64()),
        "the reply is stored"
    );
    let result = first.last().unwrap();
    assert!(
        result["turn_cost_usd"].as_f64().is_some_and(|c| c > 0.0),
        "the agent's cost report counts: {result}"
    );
    chat_ack(&mut c, "acp", "hello two").await;
    assert_eq!(
        reply_text(&c.until_result("acp").await),
        "Echo: hello two (history 2)"
    );
    let workspace = data_dir.join("workspaces").join(&session_id);

    // Allowed, the tool runs in the workspace; denied, it doesn't.
    for (file, behavior) in [("allowed.txt", "allow"), ("denied.txt", "deny")] {
        chat_ack(&mut c, "acp", &format!("TOOL:touch+{file}")).await;
        let request = c
            .recv_until(|f| f["message_type"] == "permission_request")
            .await
            .pop()
            .unwrap();
        assert_eq!(request["input"]["command"], format!("touch {file}"));
        c.send(json!({"type": "permission_response", "agent_id": "acp",
            "request_id": request["request_id"], "behavior": behavior}))
            .await;
        let turn = c.until_result("acp").await;
        assert!(
            turn.iter()
                .any(|f| f["message_type"] == "permission_resolved")
        );
        assert_eq!(workspace.join(file).exists(), behavior == "allow", "{file}");
    }

    // An interrupt during a slow stream ends the turn before the story does; the next turn
    // works.
    chat_ack(&mut c, "acp", "SLOW story please").await;
    c.recv_until(|f| f["message_type"] == "stream_event").await;
    c.send(json!({"type": "interrupt", "agent_id": "acp"}))
        .await;
    let interrupted = c.until_result("acp").await;
    let result = &interrupted.last().unwrap()["message"];
    assert_eq!(result["terminal_reason"], "aborted_streaming", "{result}");
    chat_ack(&mut c, "acp", "after the stop").await;
    let reply = reply_text(&c.until_result("acp").await);
    assert!(
        reply.starts_with("Echo: after the stop (history "),
        "{reply}"
    );

    stop(server).await;

    // Restart: the conversation resumes and the model gets the earlier turns.
    let server = start(&data_dir, &config).await;
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "acp", "hello three").await;
    assert_eq!(ack["session_id"], session_id.as_str());
    let frames = c.until_result("acp").await;
    let reply = reply_text(&frames);
    assert!(reply.starts_with("Echo: hello three (history "), "{reply}");
    assert!(
        !frames.iter().any(|f| f["status"] == "resume_failed"),
        "{frames:?}"
    );
    let last = api.requests().pop().unwrap().to_string();
    assert!(
        last.contains("hello one") && last.contains("hello two"),
        "earlier turns reached the model"
    );
    stop(server).await;
}

/// Launch options reach the real adapter and take effect: `system_prompt` is appended to the
/// system prompt the model gets, `disallowed_tools` takes the tool off the model's list,
/// `allowed_tools` runs a matching tool call without a permission prompt, and with
/// `max_turns: 1` the turn ends after that tool call (an error saying so) without giving the
/// model the tool's result.
#[tokio::test]
async fn real_acp_adapter_takes_launch_options() {
    let Some(cli) = real_cli() else { return };
    let Some((node, adapter)) = real_adapter() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(dir.path()).await;
    let all = "launch_options = [\"system_prompt\", \"allowed_tools\", \"disallowed_tools\", \
               \"max_turns\", \"add_dirs\"]\n";
    let (_cfg, config) = adapter_config(dir.path(), &api, &cli, &node, &adapter, all);
    let data_dir = dir.path().join("data");
    let server = start(&data_dir, &config).await;
    let mut c = server.client().await;

    let options = json!({"system_prompt": "Answer like a lighthouse keeper (LH-7731).",
        "disallowed_tools": ["WebFetch"]});
    let ack = chat_with(&mut c, "opts", "hello", options).await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let workspace = data_dir
        .join("workspaces")
        .join(ack["session_id"].as_str().unwrap());
    assert_eq!(
        reply_text(&c.until_result("opts").await),
        "Echo: hello (history 1)"
    );
    let body = api.bodies().pop().unwrap();
    assert!(
        body["system"]
            .to_string()
            .contains("lighthouse keeper (LH-7731)"),
        "the system prompt has the text: {}",
        body["system"]
    );
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"Bash") && !tools.contains(&"WebFetch"),
        "{tools:?}"
    );

    let options = json!({"allowed_tools": ["Bash(touch made.txt)"], "max_turns": 1});
    let ack = chat_with(&mut c, "opts", "TOOL:touch+made.txt", options).await;
    assert_eq!(ack["message_type"], "ack", "{ack}");
    let frames = c.until_result("opts").await;
    assert!(
        !frames
            .iter()
            .any(|f| f["message_type"] == "permission_request"),
        "allowed without asking: {frames:?}"
    );
    assert!(workspace.join("made.txt").exists(), "the tool ran");
    let result = &frames.last().unwrap()["message"];
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|r| r.contains("maximum number of turns (1)")),
        "{result}"
    );
    assert!(
        !api.requests()
            .iter()
            .any(|messages| messages.to_string().contains("\"tool_result\"")),
        "the model was not asked again with the tool's result"
    );
    stop(server).await;
}
