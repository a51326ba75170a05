//! A schedule's runs and their outcomes: sending one as a marked chat unless the previous one still runs, following its turn to its end, and recording what became of it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::super::{Activity, Audit, ChatAccepted};
use super::{Running, Scheduler};
use crate::protocol::{self, Principal};
use crate::session::SessionError;
use crate::store::NewMessage;
use crate::store::schedules::ScheduleRow;

/// What became of a schedule's latest tick or run-now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LastRun {
    /// The conversation of the run (for a skipped one: of the run still going on).
    pub agent_id: String,
    /// `seq` of the run's user message, once stored.
    pub seq: Option<i64>,
    /// `started` (its turn runs or is queued), `completed` or `failed` (its turn ended, with
    /// an error for `failed`), `skipped` (the previous run was still running or queued),
    /// `limited` (a `mode: "new"` run beyond `schedules.max_new_runs_per_hour`), `paused`
    /// (its principal can no longer sign in, so the schedule was paused) or `refused` (the
    /// chat was refused; `detail` says why).
    pub outcome: String,
    /// When the run was decided (RFC 3339).
    pub at: String,
    /// Why it was skipped, refused or failed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub detail: Option<String>,
    /// `tick` (its schedule) or `manual` (run now).
    pub trigger: String,
}

impl Scheduler {
    /// Sends one run of `row`, unless its previous run is still going on; records and
    /// returns what became of it.
    pub(super) async fn run(&self, row: &ScheduleRow, trigger: &str) -> LastRun {
        let at = protocol::now_rfc3339();
        let agent_id = if row.mode == "new" {
            format!(
                "{}-{}",
                row.agent_id,
                Utc::now().format("%Y%m%dT%H%M%S%.3fZ")
            )
        } else {
            row.agent_id.clone()
        };
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed);
        let skipped = {
            let mut running = self.inner.running.lock().expect("not poisoned");
            match running.get(&row.id) {
                Some(previous) => Some(LastRun {
                    agent_id: previous.agent_id.clone(),
                    seq: previous.seq,
                    outcome: "skipped".into(),
                    at: at.clone(),
                    detail: Some(format!(
                        "the previous run (conversation `{}`) is still running or queued",
                        previous.agent_id
                    )),
                    trigger: trigger.into(),
                }),
                None => {
                    running.insert(
                        row.id.clone(),
                        Running {
                            agent_id: agent_id.clone(),
                            seq: None,
                            generation,
                        },
                    );
                    None
                }
            }
        };
        let metrics = &self.inner.manager.shared.metrics;
        if let Some(last) = skipped {
            tracing::info!(schedule = %row.id, "skipped a run: the previous one is still going on");
            metrics.scheduled_run("skipped");
            self.record(&row.id, &last).await;
            return last;
        }
        let new_run = match row.mode.as_str() {
            "new" => match self.take_new_run(&row.principal).await {
                Ok(turn) => turn,
                Err(detail) => {
                    self.forget(&row.id, generation);
                    let last = LastRun {
                        agent_id,
                        seq: None,
                        outcome: "limited".into(),
                        at,
                        detail: Some(detail),
                        trigger: trigger.into(),
                    };
                    metrics.scheduled_run("limited");
                    self.record(&row.id, &last).await;
                    return last;
                }
            },
            _ => None,
        };
        let accepted = self.send(row, &agent_id, trigger).await;
        drop(new_run);
        let last = match accepted {
            Ok(accepted) => {
                let seq = accepted.seq;
                if let Some(r) = self
                    .inner
                    .running
                    .lock()
                    .expect("not poisoned")
                    .get_mut(&row.id)
                    .filter(|r| r.generation == generation)
                {
                    r.seq = Some(seq);
                }
                metrics.scheduled_run("started");
                let last = LastRun {
                    agent_id,
                    seq: Some(seq),
                    outcome: "started".into(),
                    at,
                    detail: None,
                    trigger: trigger.into(),
                };
                // Recorded before the watcher may record the end of the turn.
                self.record(&row.id, &last).await;
                let this = self.clone();
                let (id, principal) = (row.id.clone(), row.principal.clone());
                tokio::spawn(async move {
                    this.watch(id, principal, generation, accepted).await;
                });
                return last;
            }
            Err(err) => {
                self.forget(&row.id, generation);
                tracing::warn!(schedule = %row.id, error = %err.message, "a scheduled run was refused");
                metrics.scheduled_run("refused");
                LastRun {
                    agent_id,
                    seq: None,
                    outcome: "refused".into(),
                    at,
                    detail: Some(format!("{}: {}", err.code.as_str(), err.message)),
                    trigger: trigger.into(),
                }
            }
        };
        self.record(&row.id, &last).await;
        last
    }

    /// Hands the run's chat, marked by its `scheduled_run` status, to the manager.
    async fn send(
        &self,
        row: &ScheduleRow,
        agent_id: &str,
        trigger: &str,
    ) -> Result<ChatAccepted, SessionError> {
        let chat = self.chat(row, agent_id)?;
        let payload = json!({
            "status": "scheduled_run",
            "detail": format!("run of schedule `{}`", row.name),
            "schedule_id": row.id,
            "schedule_name": row.name,
            "trigger": trigger,
        });
        let mut marker = NewMessage::new("status", payload.to_string());
        marker.title = Some(row.name.clone());
        // Counted against the hourly limit: the conversation is this run's own.
        marker.schedule_id = (row.mode == "new").then(|| row.id.clone());
        let agent_id = chat.agent_id.clone();
        let manager = &self.inner.manager;
        let entry = Audit::new(&row.principal, "schedule_run")
            .on(&row.principal, &agent_id)
            .detail(json!({ "schedule": row.id, "trigger": trigger }));
        let sent = manager.submit_own(&row.principal, chat, marker);
        manager.audited(entry, sent.await).await
    }

    fn forget(&self, id: &str, generation: u64) {
        let mut running = self.inner.running.lock().expect("not poisoned");
        if running.get(id).is_some_and(|r| r.generation == generation) {
            running.remove(id);
        }
    }

    async fn record(&self, id: &str, last: &LastRun) {
        let text = serde_json::to_string(last).expect("runs serialize");
        if let Err(err) = self.inner.store.set_last_run(id, &text).await {
            tracing::warn!(error = %err, schedule = %id, "cannot record a scheduled run");
        }
    }

    /// Follows a run's conversation until its turn ends (the `result`s of the turns queued
    /// ahead of it, then its own), then lets the schedule run again and records the outcome
    /// unless a later decision was recorded meanwhile.
    async fn watch(
        &self,
        id: String,
        principal: Principal,
        generation: u64,
        accepted: ChatAccepted,
    ) {
        let ChatAccepted {
            conversation,
            seq,
            queue_position,
            mut events,
        } = accepted;
        let mut results_left = queue_position + 1;
        let mut ended: Option<(&str, Option<String>)> = None;
        loop {
            match events.recv().await {
                Ok(frame) if frame.kind == "result" && frame.seq.is_some_and(|s| s > seq) => {
                    results_left -= 1;
                    if results_left == 0 {
                        let v: Value =
                            serde_json::from_str(frame.text.as_str()).unwrap_or_default();
                        let message = &v["message"];
                        ended = Some(if message["is_error"] == true {
                            let why = message["result"]
                                .as_str()
                                .or(message["subtype"].as_str())
                                .map(|s| protocol::truncate_chars(s, 200).to_owned());
                            ("failed", why)
                        } else {
                            ("completed", None)
                        });
                        break;
                    }
                }
                Ok(frame)
                    if frame.kind == "status"
                        && frame.text.as_str().contains("\"status\":\"deleted\"") =>
                {
                    ended = Some(("failed", Some("the conversation was deleted".into())));
                    break;
                }
                Ok(_) => {}
                Err(super::super::events::RecvError::Lagged(_)) => {
                    // Too far behind to count results: wait until the conversation is idle.
                    drop(events);
                    while self
                        .inner
                        .manager
                        .activity(&principal, &conversation.agent_id)
                        == Activity::Busy
                    {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    break;
                }
                Err(super::super::events::RecvError::Closed) => break,
            }
        }
        self.forget(&id, generation);
        let Some((outcome, detail)) = ended else {
            return;
        };
        // Record the end only if the latest decision is still this run's start.
        let Ok(Some(row)) = self.inner.store.find_schedule(&principal, &id).await else {
            return;
        };
        let Some(mut last) = row
            .last_run
            .as_deref()
            .and_then(|s| serde_json::from_str::<LastRun>(s).ok())
        else {
            return;
        };
        if last.outcome == "started"
            && last.seq == Some(seq)
            && conversation.agent_id == last.agent_id.as_str()
        {
            last.outcome = outcome.into();
            last.detail = detail;
            self.record(&id, &last).await;
        }
    }
}
