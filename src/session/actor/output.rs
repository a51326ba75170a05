//! What the agent reports: its messages, statuses, permission requests and exits, read in batches
//! and turned into stored and live frames.

use serde_json::Value;
use tokio::time::Instant;

use super::figures::ResultFigures;
use super::permissions::resolved;
use super::publish::Out;
use super::ratelimit::Limited;
use super::turns::Released;
use super::{Actor, EVENT_BATCH};
use crate::agent::{AgentEvent, AgentMessage};
use crate::protocol;
use crate::store::{NewMessage, Totals};

impl Actor {
    /// Handles one agent event and whatever else the agent has already reported.
    pub(super) async fn on_agent_events(&mut self, first: Option<AgentEvent>) {
        let mut outs = Vec::new();
        let mut turn_ended = false;
        let mut crashed = None;
        let mut redeliver = false;
        let mut next = Some(first);
        while let Some(event) = next.take() {
            match event {
                Some(AgentEvent::Message(message)) => {
                    if let Some(out) = self.on_message(message, &mut turn_ended).await {
                        outs.push(out);
                    }
                }
                Some(AgentEvent::Status { status, detail }) => {
                    tracing::info!(agent_id = %self.conversation.agent_id, status, %detail, "agent status");
                    outs.push(Out::Status(status, detail));
                }
                Some(AgentEvent::PermissionRequest {
                    request_id,
                    tool_name,
                    input,
                    suggestions,
                }) => {
                    let payload = serde_json::to_string(&protocol::PermissionRequest {
                        request_id: &request_id,
                        tool_name: &tool_name,
                        input: &input,
                        suggestions: &suggestions,
                    })
                    .expect("permission requests serialize");
                    let timeout = std::time::Duration::from_secs(
                        self.shared.config.session.permission_timeout_secs,
                    );
                    self.pending_permissions
                        .insert(request_id, Instant::now() + timeout);
                    outs.push(Out::Stored(NewMessage::new("permission_request", payload)));
                }
                Some(AgentEvent::PermissionCancelled { request_id }) => {
                    if self.pending_permissions.remove(&request_id).is_some() {
                        outs.push(Out::Stored(resolved(&request_id, "cancelled", None)));
                    }
                }
                Some(AgentEvent::Exited { detail }) => {
                    self.on_exit(&detail, &mut outs, &mut turn_ended);
                    crashed = Some(detail);
                    break;
                }
                Some(AgentEvent::Released { detail }) => {
                    // An agent goes only while idle with no prompt read: the prompt of a turn
                    // sent meanwhile never reached it, and goes to the next agent instead.
                    self.agent = None;
                    match self.turns.release() {
                        // Interrupted meanwhile: it ends as if the agent had read both.
                        Released::Interrupted => {
                            outs.push(Out::Stored(NewMessage::error_result(
                                &self.conversation.session_id,
                                "aborted_streaming",
                                self.turn_ends(),
                            )));
                            turn_ended = true;
                        }
                        Released::Requeued => {
                            tracing::debug!(agent_id = %self.conversation.agent_id, detail, "the agent went before reading the turn; starting another");
                            redeliver = true;
                        }
                        Released::Nothing => {}
                    }
                    break;
                }
                None => {
                    let detail = "the agent stopped".to_owned();
                    self.on_exit(&detail, &mut outs, &mut turn_ended);
                    crashed = Some(detail);
                    break;
                }
            }
            if outs.len() < EVENT_BATCH
                && let Some(agent) = self.agent.as_mut()
                && let Ok(event) = agent.events.try_recv()
            {
                next = Some(Some(event));
            }
        }
        if turn_ended {
            // A turn's open questions end with it.
            for request_id in std::mem::take(&mut self.pending_permissions).into_keys() {
                outs.push(Out::Stored(resolved(&request_id, "cancelled", None)));
            }
            let limited = self.limit_hit.take();
            self.after_turn(limited, &mut outs).await;
        }
        let goes_idle = turn_ended && (self.turns.queued() == 0 || self.stopping);
        self.idle_after_batch = goes_idle;
        self.publish_batch(outs).await;
        if turn_ended && crashed.is_none() {
            // The agent proved healthy: a later crash starts the back-off over.
            self.respawns.healthy();
        }
        if turn_ended {
            self.turns.finish();
            self.report_changes().await;
            self.mirror_transcript().await;
            if goes_idle {
                self.idle_since = Instant::now();
                self.publish_status("idle", "no turn is running");
            } else {
                self.shared.metrics.queued_turns(-1);
                self.start_next_turn().await;
            }
        }
        if let Some(detail) = crashed {
            self.schedule_respawn(&detail);
        }
        if redeliver {
            self.start_next_turn().await;
        }
    }

    async fn on_message(&mut self, message: AgentMessage, turn_ended: &mut bool) -> Option<Out> {
        let AgentMessage {
            kind,
            subtype,
            uuid,
            session_id,
            raw,
        } = message;
        let message_type: &'static str = match kind.as_str() {
            "stream_event" => return Some(Out::Live("stream_event", raw)),
            "user" => "user",
            "assistant" => "assistant",
            "result" => "result",
            "system" => "system",
            "conversation_reset" => {
                if let Ok(v) = serde_json::from_str::<Value>(&raw)
                    && let Some(id) = v["new_conversation_id"].as_str()
                {
                    self.record_agent_session(id.to_owned()).await;
                }
                return Some(Out::Live("agent_event", raw));
            }
            "rate_limit_event" => {
                if let Some(at) = super::ratelimit::announced_reset(&raw) {
                    self.announced_reset = Some(at);
                }
                return Some(Out::Live("agent_event", raw));
            }
            _ => return Some(Out::Live("agent_event", raw)),
        };
        if message_type == "system"
            && subtype.as_deref() == Some("init")
            && let Some(id) = session_id
        {
            self.record_agent_session(id).await;
        }
        let mut stored = NewMessage::new(message_type, raw);
        if message_type == "assistant" {
            self.turns.saw_assistant(uuid.clone());
        }
        if message_type == "result" {
            let figures = ResultFigures::read(&stored.payload);
            stored.totals = Some(self.result_totals(&figures));
            // The turn is over from here on: a release or an exit reported in the same batch
            // finds nothing running.
            let finished = self.turns.finish();
            *turn_ended = finished.is_some();
            stored.turn_anchor = finished.and_then(|r| r.last_assistant_uuid);
            if *turn_ended {
                stored.running = Some(self.turn_ends());
                let announced = self.announced_reset.take();
                self.limit_hit = figures.rate_limited().then_some(Limited {
                    reset_ms: announced,
                });
            }
        }
        stored.sdk_uuid = uuid;
        Some(Out::Stored(stored))
    }

    /// Records the id the agent reports for the conversation: what the next resume uses.
    async fn record_agent_session(&mut self, id: String) {
        if self.sdk_session_id.as_deref() == Some(id.as_str()) {
            return;
        }
        let unified = self.conversation.session_id == id.as_str();
        if let Err(err) = self
            .shared
            .store
            .record_agent_session(self.conversation.row, &id, unified)
            .await
        {
            self.store_failed(&err);
        }
        self.sdk_session_id = Some(id);
        self.next_launch = None;
    }

    /// What one result adds to the totals: the agent reports cost cumulatively per process.
    fn result_totals(&mut self, figures: &ResultFigures) -> Totals {
        let cumulative = figures.total_cost_usd.unwrap_or(0.0);
        let cost = (cumulative - self.process_cost).max(0.0);
        self.process_cost = cumulative.max(self.process_cost);
        Totals {
            cost_usd: cost,
            input_tokens: figures.tokens(|u| u.input_tokens),
            output_tokens: figures.tokens(|u| u.output_tokens),
            duration_ms: figures.duration_ms.unwrap_or(0),
        }
    }
}
