//! What `GET /api/agents` offers a chat to pick: the models an agent lists itself (the Claude
//! CLI's `initialize` answer, asked before any conversation has run), and only the permission
//! modes this server allows.

use serde_json::Value;

use crate::claude::Fixture;
use crate::real_cli::{RealSetup, real_cli, start_server, stop};
use crate::rest::Rest;

/// The agent `name` of a `GET /api/agents` answer.
fn agent<'a>(agents: &'a Value, name: &str) -> &'a Value {
    agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("agent {name} is listed: {agents}"))
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().or(m.as_str()).unwrap().to_owned())
        .collect()
}

/// Before any conversation, the CLI's models are listed as it names them (one CLI started to
/// ask, and gone again); modes that run tools unasked are offered only when allowed.
#[tokio::test]
async fn the_cli_lists_its_models_and_the_server_its_allowed_modes() {
    let fixture = Fixture::new("");
    let server = fixture.start(&[]).await;
    let rest = Rest::new(&server);
    let (status, agents) = rest.get("/api/agents").await;
    assert_eq!(status, 200, "{agents}");
    let claude = agent(&agents, "claude");
    assert_eq!(ids(&claude["models"]), ["default", "sonnet", "haiku"]);
    assert_eq!(claude["models"][1]["name"], "Sonnet");
    assert!(
        claude["models"][2]["description"]
            .as_str()
            .unwrap()
            .contains("Fastest")
    );
    let modes = ids(&claude["modes"]);
    assert!(modes.contains(&"default".to_owned()) && modes.contains(&"plan".to_owned()));
    for unattended in ["bypassPermissions", "auto"] {
        assert!(
            !modes.contains(&unattended.to_owned()),
            "{unattended} is not offered where the server refuses it: {modes:?}"
        );
        assert!(
            !ids(&agent(&agents, "demo")["modes"]).contains(&unattended.to_owned()),
            "nor for the demo agent"
        );
    }
    assert_eq!(fixture.spawns().len(), 1, "one CLI was asked");
    // Asked once: the list is kept.
    let (_, again) = rest.get("/api/agents").await;
    assert_eq!(again["agents"], agents["agents"]);
    assert_eq!(fixture.spawns().len(), 1, "the list was kept");

    let allowing = Fixture::new("[agent]\nallow_bypass_permissions = true\n");
    let server = allowing.start(&[]).await;
    let (_, agents) = Rest::new(&server).get("/api/agents").await;
    let modes = ids(&agent(&agents, "claude")["modes"]);
    assert!(modes.contains(&"bypassPermissions".to_owned()), "{modes:?}");
}

/// A CLI that does not answer `initialize` holds the list up no longer than the CLI's start-up
/// timeout, once: the list is answered without its models, at once from then on.
#[tokio::test]
async fn a_cli_that_does_not_answer_is_asked_once() {
    let fixture = Fixture::new("[claude]\ninit_timeout_secs = 1\n");
    let server = fixture
        .start(&[("FAKE_CLAUDE_INIT_DELAY_MS", "60000")])
        .await;
    let rest = Rest::new(&server);
    for _ in 0..3 {
        let (status, agents) = rest.get("/api/agents").await;
        assert_eq!(status, 200, "{agents}");
        assert_eq!(agent(&agents, "claude")["models"], serde_json::json!([]));
    }
    assert_eq!(fixture.spawns().len(), 1, "asked once");
}

/// The real CLI's own list, through the same route.
#[cfg_attr(
    no_test_claude,
    ignore = "needs the Claude CLI (AGENTMUX_TEST_CLAUDE_BIN), not configured here"
)]
#[tokio::test]
async fn the_real_cli_lists_its_models() {
    let Some(cli) = real_cli() else { return };
    let setup = RealSetup::new().await;
    let server = start_server(&setup.data_dir(), &cli, &setup.api, &setup.config).await;
    let (status, agents) = Rest::new(&server).get("/api/agents").await;
    assert_eq!(status, 200, "{agents}");
    let models = &agent(&agents, "claude")["models"];
    let listed = ids(models);
    for alias in ["sonnet", "haiku"] {
        assert!(listed.contains(&alias.to_owned()), "{listed:?}");
    }
    assert!(
        models
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["name"].is_string()),
        "each has a name: {models}"
    );
    stop(server, &cli).await;
}
