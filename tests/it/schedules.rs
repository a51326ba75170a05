//! Scheduled prompts against a real server and the demo agent: runs are full, marked turns;
//! pause, resume and delete; one conversation per run; overlapping runs skipped; a missed tick
//! run once after a restart; typed refusals of bad definitions; isolation between principals;
//! schedules of a principal that can no longer sign in paused and shown to an admin; runs that
//! start conversations limited per hour.

use serde_json::{Value, json};

use crate::common::*;
use crate::rest::Rest;
use crate::security::TOKENS;

/// Every stored frame of a conversation, in order (empty when it does not exist yet).
async fn messages(rest: &Rest, agent_id: &str) -> Vec<Value> {
    let (status, page) = rest
        .get(&format!("/api/sessions/{agent_id}/messages?limit=1000"))
        .await;
    if status == 404 {
        return Vec::new();
    }
    assert_eq!(status, 200, "{page}");
    page["messages"].as_array().unwrap().clone()
}

fn count(frames: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    frames.iter().filter(|f| pred(f)).count()
}

fn is_result(f: &Value) -> bool {
    f["message_type"] == "result"
}

fn is_mark(f: &Value, schedule_id: &str) -> bool {
    f["message_type"] == "status"
        && f["status"] == "scheduled_run"
        && f["schedule_id"] == schedule_id
}

/// Waits until a conversation has no turn running or queued.
async fn idle(rest: &Rest, agent_id: &str) {
    eventually("the conversation is idle", || async {
        let (status, s) = rest.get(&format!("/api/sessions/{agent_id}")).await;
        (status == 404 || s["status"] != "busy").then_some(())
    })
    .await;
}

/// Each scheduled run in `frames` is its mark, then the prompt, then (later) a result: returns
/// the number of complete runs.
fn complete_runs(frames: &[Value], schedule_id: &str, content: &str) -> usize {
    let mut runs = 0;
    for (i, f) in frames.iter().enumerate() {
        if !is_mark(f, schedule_id) {
            continue;
        }
        let user = &frames[i + 1];
        assert_eq!(user["message_type"], "user", "the prompt follows its mark");
        assert_eq!(user["seq"].as_i64(), f["seq"].as_i64().map(|s| s + 1));
        assert_eq!(user["message"]["message"]["content"], content, "{user}");
        if frames[i + 1..].iter().any(is_result) {
            runs += 1;
        }
    }
    runs
}

/// A schedule that runs every second on a conversation of its own: the scheduler's own clock,
/// for the checks that something else did *not* run.
struct Clock {
    id: String,
}

impl Clock {
    async fn start(rest: &Rest) -> Self {
        let (status, s) = rest
            .post(
                "/api/schedules",
                json!({"name": "clock", "agent_id": "clock", "content": "tick", "every_secs": 1}),
            )
            .await;
        assert_eq!(status, 201, "{s}");
        Clock {
            id: s["id"].as_str().unwrap().to_owned(),
        }
    }

    /// Waits until the clock has run twice more: the scheduler had two ticks to run whatever
    /// was due.
    async fn two_ticks(&self, rest: &Rest) {
        let ticks = || async { count(&messages(rest, "clock").await, |f| is_mark(f, &self.id)) };
        let from = ticks().await;
        eventually("two ticks of the clock", || async {
            (ticks().await >= from + 2).then_some(())
        })
        .await;
    }

    async fn stop(self, rest: &Rest) {
        assert_eq!(
            rest.delete(&format!("/api/schedules/{}", self.id)).await,
            204
        );
    }
}

#[tokio::test]
async fn an_every_second_schedule_runs_full_turns_until_paused_or_deleted() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let (status, s) = rest
        .post(
            "/api/schedules",
            json!({"name": "Heartbeat", "agent_id": "sch-a", "content": "ping", "every_secs": 1}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let id = s["id"].as_str().unwrap().to_owned();
    assert_eq!(s["mode"], "same");
    assert_eq!(s["enabled"], true);
    assert!(s["next_run_at"].is_string(), "{s}");
    assert_eq!(s["last_run"], Value::Null);

    // Within a few seconds: two complete runs, each marked and each a full turn.
    eventually("two complete runs", || async {
        let frames = messages(&rest, "sch-a").await;
        (complete_runs(&frames, &id, "ping") >= 2).then_some(())
    })
    .await;
    let (_, conv) = rest.get("/api/sessions/sch-a").await;
    assert_eq!(
        conv["title"], "Heartbeat",
        "titled with the schedule's name"
    );
    let (_, s) = rest.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(s["last_run"]["agent_id"], "sch-a");
    assert_eq!(s["last_run"]["trigger"], "tick");
    assert!(s["last_run"]["seq"].as_i64().unwrap() > 1, "{s}");
    assert!(
        metric(
            &server,
            "agentmux_scheduled_runs_total{outcome=\"started\"}"
        )
        .await
            >= 2
    );

    // Paused: no more runs.
    let (status, s) = rest
        .patch(&format!("/api/schedules/{id}"), json!({"enabled": false}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["enabled"], false);
    assert_eq!(s["next_run_at"], Value::Null);
    idle(&rest, "sch-a").await;
    let paused = count(&messages(&rest, "sch-a").await, |f| is_mark(f, &id));
    let clock = Clock::start(&rest).await;
    clock.two_ticks(&rest).await;
    assert_eq!(
        count(&messages(&rest, "sch-a").await, |f| is_mark(f, &id)),
        paused,
        "a paused schedule does not run"
    );

    // Resumed: runs again.
    let (status, s) = rest
        .patch(&format!("/api/schedules/{id}"), json!({"enabled": true}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert!(s["next_run_at"].is_string());
    eventually("a run after resuming", || async {
        let frames = messages(&rest, "sch-a").await;
        (count(&frames, |f| is_mark(f, &id)) > paused).then_some(())
    })
    .await;

    // Deleted: 404 everywhere, and no more runs.
    assert_eq!(rest.delete(&format!("/api/schedules/{id}")).await, 204);
    let (status, err) = rest.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (404, Some("unknown_schedule"))
    );
    assert_eq!(rest.delete(&format!("/api/schedules/{id}")).await, 404);
    let (status, _) = rest
        .post(&format!("/api/schedules/{id}/run"), json!({}))
        .await;
    assert_eq!(status, 404);
    idle(&rest, "sch-a").await;
    let deleted = count(&messages(&rest, "sch-a").await, |f| is_mark(f, &id));
    clock.two_ticks(&rest).await;
    assert_eq!(
        count(&messages(&rest, "sch-a").await, |f| is_mark(f, &id)),
        deleted,
        "a deleted schedule does not run"
    );
    clock.stop(&rest).await;
    let (_, list) = rest.get("/api/schedules").await;
    assert_eq!(list["schedules"], json!([]));
}

#[tokio::test]
async fn mode_new_starts_one_conversation_per_run() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let (status, s) = rest
        .post(
            "/api/schedules",
            json!({"name": "Morning report", "agent_id": "report", "content": "summarize",
                   "every_secs": 1, "mode": "new"}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let id = s["id"].as_str().unwrap().to_owned();
    let runs: Vec<Value> = eventually("two conversations", || async {
        let (_, list) = rest.get("/api/sessions").await;
        let runs: Vec<Value> = list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["agent_id"].as_str().unwrap().starts_with("report-"))
            .cloned()
            .collect();
        (runs.len() >= 2).then_some(runs)
    })
    .await;
    assert_eq!(rest.delete(&format!("/api/schedules/{id}")).await, 204);
    for conv in &runs {
        let agent_id = conv["agent_id"].as_str().unwrap();
        let frames = eventually("the run's turn ends", || async {
            let frames = messages(&rest, agent_id).await;
            frames.iter().any(is_result).then_some(frames)
        })
        .await;
        let (_, conv) = rest.get(&format!("/api/sessions/{agent_id}")).await;
        assert_eq!(conv["title"], "Morning report");
        assert_eq!(
            count(&frames, |f| is_mark(f, &id)),
            1,
            "one run per conversation"
        );
        assert_eq!(complete_runs(&frames, &id, "summarize"), 1);
        assert!(
            is_mark(&frames[0], &id),
            "the mark comes first: {}",
            frames[0]
        );
    }
    assert!(
        rest.get("/api/sessions/report").await.0 == 404,
        "no conversation without suffix"
    );
}

#[tokio::test]
async fn a_run_that_would_overlap_the_previous_one_is_skipped_and_recorded() {
    let gates = Gates::new("");
    let server = gates.start().await;
    let rest = Rest::new(&server);
    let (_, s) = rest
        .post(
            "/api/schedules",
            json!({"name": "slow", "agent_id": "gated", "content": "work", "every_secs": 3600}),
        )
        .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let run = format!("/api/schedules/{id}/run");

    let (status, first) = rest.post(&run, json!({})).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["outcome"], "started");
    assert_eq!(first["trigger"], "manual");
    assert_eq!(first["agent_id"], "gated");
    let first_seq = first["seq"].as_i64().unwrap();

    // Its turn waits at the gate: the next run is skipped, and recorded.
    let (status, second) = rest.post(&run, json!({})).await;
    assert_eq!(status, 202);
    assert_eq!(second["outcome"], "skipped", "{second}");
    assert_eq!(
        second["seq"].as_i64(),
        Some(first_seq),
        "names the run still going on"
    );
    assert!(
        second["detail"].as_str().unwrap().contains("still running"),
        "{second}"
    );
    let (_, s) = rest.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(s["last_run"]["outcome"], "skipped");
    assert_eq!(
        metric(
            &server,
            "agentmux_scheduled_runs_total{outcome=\"skipped\"}"
        )
        .await,
        1
    );
    let frames = messages(&rest, "gated").await;
    assert_eq!(
        count(&frames, |f| is_mark(f, &id)),
        1,
        "the skipped run stored nothing"
    );
    assert_eq!(count(&frames, |f| f["message_type"] == "user"), 1);

    // Once the turn ends, the schedule runs again; that run's end is recorded.
    gates.open("gated", 1);
    let third = eventually("a run after the first ended", || async {
        let (_, last) = rest.post(&run, json!({})).await;
        (last["outcome"] == "started").then_some(last)
    })
    .await;
    assert!(third["seq"].as_i64().unwrap() > first_seq);
    gates.open("gated", 2);
    eventually("the run's end is recorded", || async {
        let (_, s) = rest.get(&format!("/api/schedules/{id}")).await;
        (s["last_run"]["outcome"] == "completed").then_some(())
    })
    .await;
    let frames = messages(&rest, "gated").await;
    assert_eq!(complete_runs(&frames, &id, "work"), 2);
}

#[tokio::test]
async fn a_scheduled_run_queues_behind_a_users_turn() {
    let gates = Gates::new("");
    let server = gates.start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let ack = chat_ack(&mut c, "shared", "mine").await;
    assert_eq!(ack["message_type"], "ack");
    let (_, s) = rest
        .post(
            "/api/schedules",
            json!({"name": "n", "agent_id": "shared", "content": "scheduled", "every_secs": 3600}),
        )
        .await;
    let id = s["id"].as_str().unwrap();
    let (_, run) = rest
        .post(&format!("/api/schedules/{id}/run"), json!({}))
        .await;
    assert_eq!(run["outcome"], "started", "queued like any chat: {run}");
    gates.open_all("shared", 1..=2);
    let frames = c
        .recv_until(|f| {
            is_result(f)
                && f["message"]["result"]
                    .as_str()
                    .unwrap_or("")
                    .contains("turn 2")
        })
        .await;
    let reply = reply_text(&frames);
    assert!(reply.contains("scheduled"), "{reply}");
    assert!(
        frames.iter().any(|f| is_mark(f, id)),
        "subscribers see the mark"
    );
}

#[tokio::test]
async fn a_restart_keeps_schedules_and_runs_a_missed_tick_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(tmp.path(), &["--demo-delay-ms", "0"], &[]).await;
    let rest = Rest::new(&server);
    let (_, s) = rest
        .post(
            "/api/schedules",
            json!({"name": "minutely", "agent_id": "missed", "content": "catch up", "every_secs": 60}),
        )
        .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let (_, paused) = rest
        .post(
            "/api/schedules",
            json!({"name": "paused", "agent_id": "never", "content": "x", "every_secs": 60,
                   "enabled": false}),
        )
        .await;
    assert!(server.terminate().await.success());

    // While the server is down, an hour passes: sixty ticks are missed.
    let db = open_db(tmp.path()).await;
    let hour_ago = chrono::Utc::now().timestamp_millis() - 3_600_000;
    sqlx::query("update schedules set next_run_ms = $1")
        .bind(hour_ago)
        .execute(&db)
        .await
        .unwrap();
    db.close().await;

    let server = TestServer::start_in(tmp.path(), &["--demo-delay-ms", "0"], &[]).await;
    let rest = Rest::new(&server);
    let (status, kept) = rest.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(status, 200, "the schedule survived the restart");
    assert_eq!(kept["name"], "minutely");
    let frames = eventually("the missed tick runs", || async {
        let frames = messages(&rest, "missed").await;
        frames.iter().any(is_result).then_some(frames)
    })
    .await;
    idle(&rest, "missed").await;
    Clock::start(&rest).await.two_ticks(&rest).await;
    let frames_after = messages(&rest, "missed").await;
    assert_eq!(frames_after.len(), frames.len());
    assert_eq!(
        count(&frames_after, |f| is_mark(f, &id)),
        1,
        "missed ticks run once"
    );
    let (_, s) = rest.get(&format!("/api/schedules/{id}")).await;
    let next = chrono::DateTime::parse_from_rfc3339(s["next_run_at"].as_str().unwrap()).unwrap();
    assert!(
        next.timestamp_millis() > chrono::Utc::now().timestamp_millis() + 30_000,
        "the next tick is counted from now: {s}"
    );
    assert_eq!(
        rest.get("/api/sessions/never").await.0,
        404,
        "a paused one stays paused"
    );
    let (_, p) = rest
        .get(&format!(
            "/api/schedules/{}",
            paused["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(p["enabled"], false);
}

#[tokio::test]
async fn bad_schedules_are_refused_with_typed_errors_and_store_nothing() {
    let roots = tempfile::tempdir().unwrap();
    let root = roots.path().join("root");
    std::fs::create_dir_all(root.join("app")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
    std::os::unix::fs::symlink(root.join("app"), roots.path().join("via-link")).unwrap();
    let server = TestServer::start_with(&[
        "--demo-delay-ms",
        "0",
        "--project-root",
        root.to_str().unwrap(),
    ])
    .await;
    let rest = Rest::new(&server);
    let base = json!({"name": "n", "agent_id": "a", "content": "c", "every_secs": 60});
    let with = |patch: Value| {
        let mut body = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                body.as_object_mut().unwrap().remove(k);
            } else {
                body[k] = v.clone();
            }
        }
        body
    };
    let long = "x".repeat(300_000);
    let cases = [
        (
            json!({"cron": "not a cron", "every_secs": null}),
            "invalid_schedule",
        ),
        (
            json!({"cron": "* * * * * *", "every_secs": null}),
            "invalid_schedule",
        ),
        (
            json!({"cron": "61 * * * *", "every_secs": null}),
            "invalid_schedule",
        ),
        (
            json!({"cron": "* * * *", "every_secs": null}),
            "invalid_schedule",
        ),
        (
            json!({"cron": "-1 * * * *", "every_secs": null}),
            "invalid_schedule",
        ),
        (
            json!({"cron": "0 0 30 2 *", "every_secs": null}),
            "invalid_schedule",
        ),
        (json!({"cron": "0 9 * * *"}), "invalid_schedule"),
        (json!({"every_secs": null}), "invalid_schedule"),
        (json!({"every_secs": 0}), "invalid_schedule"),
        (json!({"every_secs": -5}), "invalid_schedule"),
        (json!({"every_secs": 100_000_000}), "invalid_schedule"),
        (json!({"mode": "sometimes"}), "invalid_schedule"),
        (json!({"name": ""}), "invalid_schedule"),
        (json!({"name": "  "}), "invalid_schedule"),
        (json!({"name": "n".repeat(101)}), "invalid_schedule"),
        (json!({"name": "a\nb"}), "invalid_schedule"),
        (json!({"name": null}), "invalid_schedule"),
        (json!({"agent_id": "../x"}), "invalid_agent_id"),
        (json!({"agent_id": "a".repeat(129)}), "invalid_agent_id"),
        (
            json!({"agent_id": "a".repeat(120), "mode": "new"}),
            "invalid_agent_id",
        ),
        (json!({"content": ""}), "invalid_content"),
        (json!({"content": long}), "invalid_content"),
        (json!({"options": {"bogus": 1}}), "invalid_options"),
        (json!({"options": "model"}), "invalid_options"),
        (json!({"options": {"model": "-rf"}}), "invalid_options"),
        (
            json!({"options": {"permission_mode": "bypassPermissions"}}),
            "invalid_options",
        ),
        (json!({"options": {"cwd": "relative"}}), "invalid_options"),
        (json!({"options": {"cwd": "-rf"}}), "invalid_options"),
        (
            json!({"options": {"cwd": "/nonexistent-dir"}}),
            "invalid_options",
        ),
        (
            json!({"options": {"cwd": format!("{}/../..", root.display())}}),
            "invalid_options",
        ),
        (
            json!({"options": {"cwd": root.join("escape").to_str().unwrap()}}),
            "invalid_options",
        ),
        (
            json!({"options": {"add_dirs": ["/etc"]}}),
            "invalid_options",
        ),
        (json!({"surprise": true}), "invalid_request"),
        (json!({"every_secs": "soon"}), "invalid_request"),
    ];
    for (patch, code) in cases {
        let body = with(patch.clone());
        let (status, err) = rest.post("/api/schedules", body).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some(code)),
            "{patch}: {err}"
        );
        assert!(!err["error"].as_str().unwrap().is_empty());
    }
    let (status, _) = rest
        .send(
            rest.http
                .post(format!("{}/api/schedules", rest.base))
                .header("content-type", "application/json")
                .body("{not json"),
        )
        .await;
    assert_eq!(status, 400);
    let (_, list) = rest.get("/api/schedules").await;
    assert_eq!(list["schedules"], json!([]), "nothing was stored");

    // A good one: cron, and a cwd given through a symbolic link, stored canonical.
    let (status, s) = rest
        .post(
            "/api/schedules",
            with(json!({"every_secs": null, "cron": "*/5 * * * *",
                        "options": {"cwd": roots.path().join("via-link").to_str().unwrap(),
                                    "model": "sonnet"}})),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let canonical = std::fs::canonicalize(root.join("app")).unwrap();
    assert_eq!(s["options"]["cwd"], canonical.to_str().unwrap());
    assert_eq!(s["options"]["model"], "sonnet");
    let next = chrono::DateTime::parse_from_rfc3339(s["next_run_at"].as_str().unwrap()).unwrap();
    assert_eq!(chrono::Timelike::minute(&next) % 5, 0, "{next}");
    assert_eq!(chrono::Timelike::second(&next), 0);

    // A bad change is refused and leaves the schedule as it was.
    let id = s["id"].as_str().unwrap();
    for (patch, code) in [
        (json!({"cron": "bad"}), "invalid_schedule"),
        (
            json!({"cron": "* * * * *", "every_secs": 5}),
            "invalid_schedule",
        ),
        (json!({"every_secs": 0}), "invalid_schedule"),
        (json!({"options": {"nope": 1}}), "invalid_options"),
        (json!({"name": ""}), "invalid_schedule"),
    ] {
        let (status, err) = rest
            .patch(&format!("/api/schedules/{id}"), patch.clone())
            .await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some(code)),
            "{patch}: {err}"
        );
    }
    let (_, after) = rest.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(after["cron"], "*/5 * * * *");
    assert_eq!(after["options"], s["options"]);
    assert_eq!(after["updated_at"], s["updated_at"]);

    // Switching to an interval drops the cron expression.
    let (status, s) = rest
        .patch(&format!("/api/schedules/{id}"), json!({"every_secs": 7200}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(
        (s["cron"].clone(), s["every_secs"].clone()),
        (Value::Null, json!(7200))
    );
}

#[tokio::test]
async fn cron_expressions_are_read_in_the_configured_time_zone() {
    let (_dir, config) = config_file("[schedules]\ntime_zone = \"Asia/Tokyo\"\n");
    let server = TestServer::start_with(&["--config", &config]).await;
    let rest = Rest::new(&server);
    let (status, s) = rest
        .post(
            "/api/schedules",
            json!({"name": "n", "agent_id": "a", "content": "c", "cron": "0 9 * * *"}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let next = s["next_run_at"].as_str().unwrap();
    assert!(
        next.ends_with("T00:00:00.000Z"),
        "09:00 in Tokyo is 00:00 UTC: {next}"
    );

    let (_dir, bad) = config_file("[schedules]\ntime_zone = \"Mars/Olympus\"\n");
    let tmp = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentmux"))
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--config",
            &bad,
            "--data-dir",
        ])
        .arg(tmp.path())
        .env_remove("AGENTMUX_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(
        !out.status.success(),
        "an unknown time zone refuses to start"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("Mars/Olympus"));
}

#[tokio::test]
async fn another_principal_can_neither_see_nor_touch_a_schedule() {
    let (_dir, config) = config_file(TOKENS);
    let server = TestServer::start_with(&["--config", &config, "--demo-delay-ms", "0"]).await;
    let alice = Rest::with_token(&server, "tok-alice");
    let bob = Rest::with_token(&server, "tok-bob");
    let (status, s) = alice
        .post(
            "/api/schedules",
            json!({"name": "mine", "agent_id": "private", "content": "c", "every_secs": 3600}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let id = s["id"].as_str().unwrap();
    let path = format!("/api/schedules/{id}");

    let (_, list) = bob.get("/api/schedules").await;
    assert_eq!(list["schedules"], json!([]));
    let unknown = |(status, body): (u16, Value)| {
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("unknown_schedule")),
            "{body}"
        );
    };
    unknown(bob.get(&path).await);
    unknown(
        bob.patch(&path, json!({"enabled": false, "content": "hijacked"}))
            .await,
    );
    unknown(bob.post(&format!("{path}/run"), json!({})).await);
    unknown(bob.get("/api/schedules/not-a-real-id").await);
    assert_eq!(bob.delete(&path).await, 404);
    let (status, _) = Rest::new(&server).get("/api/schedules").await;
    assert_eq!(status, 401, "no credentials, no schedules");

    let (_, mine) = alice.get(&path).await;
    assert_eq!(mine["enabled"], true);
    assert_eq!(mine["content"], "c");
    assert_eq!(mine["last_run"], Value::Null, "bob's run did not happen");
    assert_eq!(bob.get("/api/sessions/private").await.0, 404);

    // Alice's run is hers: her conversation, not visible to bob.
    let (_, run) = alice.post(&format!("{path}/run"), json!({})).await;
    assert_eq!(run["outcome"], "started", "{run}");
    assert_eq!(alice.get("/api/sessions/private").await.0, 200);
    assert_eq!(bob.get("/api/sessions/private").await.0, 404);
}

#[tokio::test]
async fn a_principal_has_at_most_the_configured_number_of_schedules() {
    let (_dir, config) = config_file("[schedules]\nmax_per_principal = 2\n");
    let server = TestServer::start_with(&["--config", &config]).await;
    let rest = Rest::new(&server);
    let body = json!({"name": "n", "agent_id": "a", "content": "c", "every_secs": 3600});
    for _ in 0..2 {
        assert_eq!(rest.post("/api/schedules", body.clone()).await.0, 201);
    }
    let (status, err) = rest.post("/api/schedules", body.clone()).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (429, Some("limit_exceeded")),
        "{err}"
    );
    let (_, list) = rest.get("/api/schedules").await;
    let ids: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        rest.delete(&format!("/api/schedules/{}", ids[0])).await,
        204
    );
    assert_eq!(rest.post("/api/schedules", body).await.0, 201, "room again");
}

/// A schedule whose principal can no longer sign in (its token was taken out of the settings)
/// would run on with nobody able to see or stop it: after a restart without the token, its next
/// tick pauses it instead of running, and records why. Another principal's schedule runs on.
/// Only an admin (`auth.admins`) lists every principal's schedules, the paused one among them.
#[tokio::test]
async fn schedules_of_a_principal_that_is_gone_are_paused_and_shown_to_admins() {
    let tmp = tempfile::tempdir().unwrap();
    let admins = "[auth]\nadmins = [\"root\"]\n";
    let root = "\"tok-root\" = \"root\"\n";
    let (_all, with_alice) = config_file(&format!("{admins}{TOKENS}{root}"));
    let args = |config: &str| ["--config", config, "--demo-delay-ms", "0"].map(str::to_owned);
    let start = |config: &str| {
        let args = args(config);
        let data_dir = tmp.path().to_path_buf();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            TestServer::start_in(&data_dir, &args, &[]).await
        }
    };
    let mut server = start(&with_alice).await;
    let body = |agent_id: &str| json!({"name": "beat", "agent_id": agent_id, "content": "ping", "every_secs": 1});
    let alice = Rest::with_token(&server, "tok-alice");
    let (status, mine) = alice.post("/api/schedules", body("alice-beat")).await;
    assert_eq!(status, 201, "{mine}");
    let alice_id = mine["id"].as_str().unwrap().to_owned();
    assert_eq!(mine["principal"], "alice");
    let bob = Rest::with_token(&server, "tok-bob");
    let (_, bobs) = bob.post("/api/schedules", body("bob-beat")).await;
    let bob_id = bobs["id"].as_str().unwrap().to_owned();
    eventually("alice's schedule runs", || async {
        let (_, s) = alice.get(&format!("/api/schedules/{alice_id}")).await;
        s["last_run"]["seq"].is_i64().then_some(())
    })
    .await;
    assert!(server.terminate().await.success());

    let bob_toml = "[auth.tokens]\n\"tok-bob\" = \"bob\"\n";
    let (_some, without_alice) = config_file(&format!("{admins}{bob_toml}{root}"));
    let server = start(&without_alice).await;
    let admin = Rest::with_token(&server, "tok-root");
    let bob = Rest::with_token(&server, "tok-bob");
    let alices = eventually("alice's schedule is paused", || async {
        let (status, all) = admin.get("/api/schedules?all=true").await;
        assert_eq!(status, 200, "{all}");
        let alices = all["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == alice_id.as_str())
            .cloned()
            .unwrap();
        (alices["last_run"]["outcome"] == "paused").then_some(alices)
    })
    .await;
    assert_eq!(alices["principal"], "alice");
    assert_eq!(alices["enabled"], false, "{alices}");
    assert_eq!(alices["next_run_at"], Value::Null);
    assert!(
        alices["last_run"]["detail"]
            .as_str()
            .unwrap()
            .contains("can no longer sign in"),
        "{alices}"
    );
    // Bob's runs on, and bob sees only his own.
    let seq_now = |s: &Value| s["last_run"]["seq"].as_i64();
    let (_, before) = bob.get(&format!("/api/schedules/{bob_id}")).await;
    eventually("bob's schedule runs again", || async {
        let (_, s) = bob.get(&format!("/api/schedules/{bob_id}")).await;
        (seq_now(&s) > seq_now(&before) && s["enabled"] == true).then_some(())
    })
    .await;
    let (status, err) = bob.get("/api/schedules?all=true").await;
    assert_eq!(
        (status, err["code"].as_str()),
        (403, Some("forbidden")),
        "{err}"
    );
    let (_, own) = bob.get("/api/schedules").await;
    assert_eq!(own["schedules"].as_array().unwrap().len(), 1, "{own}");
    let (status, _) = bob.get("/api/schedules?all=maybe").await;
    assert_eq!(status, 400);
}

/// How many conversations the `flood` schedules started.
async fn floods(rest: &Rest) -> usize {
    let (_, list) = rest.get("/api/sessions").await;
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["agent_id"].as_str().unwrap().starts_with("flood"))
        .count()
}

/// Runs that start a conversation each (`mode: "new"`) are limited per principal per hour
/// (`schedules.max_new_runs_per_hour`), across all of the principal's schedules: beyond, a tick
/// or a run-now is recorded `limited` and starts nothing, after a restart too (the count is the
/// store's). Runs of `mode: "same"` are not.
#[tokio::test]
async fn runs_that_start_conversations_are_limited_per_hour() {
    let (_cfg, config) = config_file("[schedules]\nmax_new_runs_per_hour = 3\n");
    let mut server = TestServer::start_with(&["--config", &config, "--demo-delay-ms", "0"]).await;
    let rest = Rest::new(&server);
    let mut ids = Vec::new();
    for n in 0..2 {
        let (status, s) = rest
            .post(
                "/api/schedules",
                json!({"name": "flood", "agent_id": format!("flood{n}"), "content": "x",
                       "every_secs": 1, "mode": "new"}),
            )
            .await;
        assert_eq!(status, 201, "{s}");
        ids.push(s["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        eventually("the schedule's runs are limited", || async {
            let (_, s) = rest.get(&format!("/api/schedules/{id}")).await;
            (s["last_run"]["outcome"] == "limited").then_some(())
        })
        .await;
    }
    assert_eq!(floods(&rest).await, 3, "three conversations in the hour");
    let (_, run) = rest
        .post(&format!("/api/schedules/{}/run", ids[0]), json!({}))
        .await;
    assert_eq!(run["outcome"], "limited", "{run}");
    assert!(
        run["detail"]
            .as_str()
            .unwrap()
            .contains("max_new_runs_per_hour"),
        "{run}"
    );
    assert_eq!(floods(&rest).await, 3);
    assert!(
        metric(
            &server,
            "agentmux_scheduled_runs_total{outcome=\"limited\"}"
        )
        .await
            >= 3
    );

    // The count is the store's: a restart starts no more conversations within the hour.
    let data_dir = server.data_dir.clone();
    assert!(server.terminate().await.success());
    let args = ["--config", config.as_str(), "--demo-delay-ms", "0"];
    let server = TestServer::start_in(&data_dir, &args, &[]).await;
    let rest = Rest::new(&server);
    let restarted = agentmux::protocol::now_rfc3339();
    for id in &ids {
        eventually("a run after the restart is limited", || async {
            let (_, s) = rest.get(&format!("/api/schedules/{id}")).await;
            let after = s["last_run"]["at"].as_str().unwrap() > restarted.as_str();
            (after && s["last_run"]["outcome"] == "limited").then_some(())
        })
        .await;
    }
    assert_eq!(
        floods(&rest).await,
        3,
        "still three conversations in the hour"
    );

    // A schedule that sends to one conversation is not limited.
    let (_, same) = rest
        .post(
            "/api/schedules",
            json!({"name": "same", "agent_id": "one", "content": "x", "every_secs": 3600}),
        )
        .await;
    let (_, run) = rest
        .post(
            &format!("/api/schedules/{}/run", same["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(run["outcome"], "started", "{run}");
}

/// Waits until the end of schedule `id`'s latest run is recorded.
async fn ended(rest: &Rest, id: &str) {
    eventually("the run's end is recorded", || async {
        let (_, s) = rest.get(&format!("/api/schedules/{id}")).await;
        (s["last_run"]["outcome"] != "started").then_some(())
    })
    .await;
}

/// Only the conversations a `mode: "new"` run starts count against the hourly limit: the runs
/// of a `mode: "same"` schedule (its first one starts its conversation), a fork of that
/// conversation and an import of its export (both begin with the run's mark) do not.
#[tokio::test]
async fn only_new_runs_use_up_the_hourly_limit() {
    let (_cfg, config) = config_file("[schedules]\nmax_new_runs_per_hour = 1\n");
    let server = TestServer::start_with(&["--config", &config, "--demo-delay-ms", "0"]).await;
    let rest = Rest::new(&server);
    let (status, same) = rest
        .post(
            "/api/schedules",
            json!({"name": "same", "agent_id": "one", "content": "x", "every_secs": 3600}),
        )
        .await;
    assert_eq!(status, 201, "{same}");
    let same = same["id"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let (_, run) = rest
            .post(&format!("/api/schedules/{same}/run"), json!({}))
            .await;
        assert_eq!(run["outcome"], "started", "{run}");
        ended(&rest, &same).await;
    }
    assert!(is_mark(&messages(&rest, "one").await[0], &same));

    let (status, fork) = rest
        .post(
            "/api/sessions/one/fork",
            json!({"new_agent_id": "one-fork"}),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    assert!(is_mark(&messages(&rest, "one-fork").await[0], &same));
    let export = rest.text("/api/sessions/one/export").await;
    let (status, imported) = rest
        .send(
            rest.http
                .post(server.url("/api/sessions/import?agent_id=one-import"))
                .header("content-type", "application/x-ndjson")
                .body(export),
        )
        .await;
    assert_eq!(status, 201, "{imported}");
    assert!(is_mark(&messages(&rest, "one-import").await[0], &same));

    let (_, new) = rest
        .post(
            "/api/schedules",
            json!({"name": "flood", "agent_id": "flood", "content": "x", "every_secs": 3600,
                   "mode": "new"}),
        )
        .await;
    let new = new["id"].as_str().unwrap().to_owned();
    let (_, run) = rest
        .post(&format!("/api/schedules/{new}/run"), json!({}))
        .await;
    assert_eq!(run["outcome"], "started", "the hour's one new run: {run}");
    ended(&rest, &new).await;
    let (_, run) = rest
        .post(&format!("/api/schedules/{new}/run"), json!({}))
        .await;
    assert_eq!(run["outcome"], "limited", "{run}");
    assert_eq!(floods(&rest).await, 1);
}
