//! The turn loop of an ACP agent: prompts sent as they come, interrupts as `session/cancel`, the user's permission answers passed on, and each line the agent writes read and routed.

use std::collections::HashSet;
use std::time::Instant;

use serde_json::{Value, json};

use super::schema::{self, method};
use super::task::{AcpTask, End, Turn};
use crate::agent::lines::Line;
use crate::agent::pool::Lease;
use crate::agent::process::Proc;
use crate::agent::{AgentEvent, AgentInput};

impl AcpTask {
    /// Runs turns until the session stops the agent, the agent ends, or the pool asks the idle
    /// process to make room.
    pub(super) async fn drive(&mut self, proc: &mut Proc, lease: &Lease) -> End {
        let mut turn: Option<Turn> = None;
        if self.prompts.is_empty() {
            // A start no turn waits for (a warm-up or a respawn) is complete.
            self.events
                .status("ready", "the agent is started and waits for a message")
                .await;
        }
        // Whether the pool was last told the process is idle (evictable).
        let mut told_idle = None;
        loop {
            if turn.is_none() && self.option_calls.is_empty() {
                if let Err(detail) = self.apply_options(proc).await {
                    return End::Exited(detail);
                }
                if self.option_calls.is_empty()
                    && let Some(prompt) = self.prompts.pop_front()
                {
                    if let Some(mode) = self.unallowed_mode() {
                        // The session runs tools without asking and offers no mode that asks.
                        self.emit_refused(&format!(
                            "the agent `{}` is in mode `{mode}`, which runs tools without asking, \
                             and offers no mode that asks; this server does not allow that \
                             (agent.allow_bypass_permissions); the message was not sent to it",
                            self.settings.name
                        ))
                        .await;
                        continue;
                    }
                    if !self.caps.image && !prompt.images().is_empty() {
                        // Known only now (the first start since the server started): the
                        // agent never sees the turn, which ends at once.
                        self.emit_refused(&format!(
                            "the agent `{}` does not take images; the message was not sent to it",
                            self.settings.name
                        ))
                        .await;
                        continue;
                    }
                    let params = schema::prompt(&self.session, &prompt);
                    match self.request(proc, method::SESSION_PROMPT, params).await {
                        Ok(rpc_id) => {
                            turn = Some(Turn {
                                rpc_id,
                                started: Instant::now(),
                                text: String::new(),
                                thinking: String::new(),
                                reply: String::new(),
                                pending_tools: Vec::new(),
                                finished_tools: HashSet::new(),
                                cancelled: false,
                            });
                        }
                        Err(detail) => return End::Exited(detail),
                    }
                }
            }
            let idle = turn.is_none() && self.prompts.is_empty() && self.option_calls.is_empty();
            if told_idle != Some(idle) {
                lease.set_busy(!idle);
                told_idle = Some(idle);
            }
            tokio::select! {
                // An input that arrives with an eviction request wins: the eviction is only for
                // an idle process with nothing queued.
                biased;
                input = self.inputs.recv() => match input {
                    None => return End::Stopped,
                    Some(AgentInput::Prompt(p)) => self.prompts.push_back(p),
                    Some(AgentInput::SetOptions { model, permission_mode }) => {
                        self.spec.model = model;
                        self.spec.permission_mode = permission_mode;
                    }
                    Some(AgentInput::Interrupt) => match turn.as_mut() {
                        Some(t) if !t.cancelled => {
                            t.cancelled = true;
                            let note = json!({"jsonrpc": "2.0", "method": method::SESSION_CANCEL,
                                "params": schema::cancel(&self.session)});
                            if let Err(detail) = self.send(proc, &note).await {
                                return End::Exited(detail);
                            }
                            // The protocol asks the client to answer open permission
                            // requests `cancelled` once it cancels.
                            for request_id in self.permissions.keys().cloned().collect::<Vec<_>>() {
                                self.answer_permission(proc, &request_id, None).await;
                                self.events.emit(AgentEvent::PermissionCancelled { request_id }).await;
                            }
                        }
                        Some(_) => {}
                        None => {
                            if self.prompts.pop_front().is_some() {
                                self.emit_aborted("Interrupted before the agent started.").await;
                            }
                        }
                    },
                    Some(AgentInput::Permission { request_id, decision }) => {
                        let option = self.choose(&request_id, &decision);
                        self.answer_permission(proc, &request_id, option.as_deref()).await;
                    }
                    Some(AgentInput::PermissionTimedOut { request_id }) => {
                        self.answer_permission(proc, &request_id, None).await;
                    }
                },
                line = proc.stdout.next() => match line {
                    Ok(Some(Line::Text(text))) => {
                        let Some(v) = self.parse_line(&text).await else { continue };
                        if let Err(detail) = self.on_message(proc, v, &mut turn).await {
                            return End::Exited(detail);
                        }
                    }
                    Ok(Some(Line::TooLong(bytes))) => self.too_long(bytes).await,
                    Ok(None) | Err(_) => return End::Exited(proc.exit_detail().await),
                },
                () = lease.evicted(), if idle => return End::Evicted,
            }
        }
    }

    pub(super) async fn too_long(&self, bytes: usize) {
        self.events.status(
            "warning",
            format!(
                "the agent wrote a line of {bytes} bytes, over the {} byte limit; it was skipped",
                self.settings.config.max_line_bytes
            ),
        )
        .await;
    }

    /// A line as a JSON-RPC message; anything else is reported as a warning and skipped.
    pub(super) async fn parse_line(&self, text: &str) -> Option<Value> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return None;
        }
        match serde_json::from_str::<Value>(trimmed) {
            Ok(v @ Value::Object(_)) => Some(v),
            Ok(_) | Err(_) => {
                let shown: String = trimmed.chars().take(80).collect();
                tracing::debug!(line = %shown, "a line from the agent that is not JSON-RPC");
                self.events
                    .status(
                        "warning",
                        "the agent wrote a line that is not a JSON-RPC message; it was skipped",
                    )
                    .await;
                None
            }
        }
    }

    /// Routes one JSON-RPC message from the agent. `Err` only when it can't be written to.
    pub(super) async fn on_message(
        &mut self,
        proc: &mut Proc,
        v: Value,
        turn: &mut Option<Turn>,
    ) -> Result<(), String> {
        let method = v.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = v.get("id").cloned();
        match (method, id) {
            (Some(m), Some(id)) => self.on_request(proc, &m, id, &v["params"], turn).await,
            (Some(m), None) if m == method::SESSION_UPDATE => {
                self.on_update(&v["params"], turn).await;
                Ok(())
            }
            (Some(_), None) => {
                self.agent_event(&v).await;
                Ok(())
            }
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { return Ok(()) };
                if turn.as_ref().is_some_and(|t| t.rpc_id == id)
                    && let Some(t) = turn.take()
                {
                    self.end_turn(t, &v).await;
                } else if self.option_calls.remove(&id)
                    && let Some(error) = v.get("error")
                {
                    let why = error["message"].as_str().unwrap_or("refused");
                    self.events
                        .status(
                            "warning",
                            format!("the agent refused the new settings ({why})"),
                        )
                        .await;
                }
                Ok(())
            }
            (None, None) => {
                self.events
                    .status(
                        "warning",
                        "the agent wrote a JSON object that is not JSON-RPC; it was skipped",
                    )
                    .await;
                Ok(())
            }
        }
    }
}
