//! The agent task of one conversation: it waits for a process slot, starts the CLI (or adopts
//! the pre-warmed spare), then runs the turn loop: prompts in, stdout lines out as events,
//! held interrupts, permission requests, settings changes (asked as [`options`] says), and
//! fresh starts when the CLI refuses to resume.

mod options;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::ClaudeSettings;
use super::control::{self, Request};
use super::models::Models;
use crate::agent::lines::Line;
use crate::agent::pool::{Lease, Pool, Waiter, wait_for_place};
use crate::agent::process::Proc;
use crate::agent::{AgentEvent, AgentInput, AgentMessage, Launch, Reports, SpawnSpec};
use crate::protocol::{Content, PermissionDecision};

/// Where the running turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Idle,
    /// The prompt was written; `started` once the turn's init arrived.
    Sent {
        started: bool,
    },
}

/// How the main loop ended.
enum End {
    /// The session dropped its input.
    Stopped,
    /// The process ended by itself; the detail says how.
    Exited(String),
    /// The process was stopped to free a slot for another conversation.
    Evicted,
    /// The CLI refused to resume or reuse the id; start a fresh conversation.
    Refused(String),
    /// The CLI refused a model or permission mode between turns: start it again, resuming,
    /// under the new settings.
    Restart(String),
}

impl Waiter for AgentTask {
    fn inputs(&mut self) -> &mut mpsc::Receiver<AgentInput> {
        &mut self.inputs
    }

    fn reports(&self) -> &Reports {
        &self.events
    }

    fn prompts(&mut self) -> &mut VecDeque<Content> {
        &mut self.prompts
    }

    fn spec(&mut self) -> &mut SpawnSpec {
        &mut self.spec
    }

    async fn abort_unsent_turn(&self) {
        self.emit_aborted().await;
    }
}

/// The task behind one conversation's [`crate::agent::AgentConn`].
pub(super) struct AgentTask {
    settings: Arc<ClaudeSettings>,
    /// Where the models its CLI offers are kept.
    models: Arc<Models>,
    pool: Arc<Pool>,
    spec: SpawnSpec,
    inputs: mpsc::Receiver<AgentInput>,
    events: Reports,
    /// Prompts not yet written to the CLI.
    prompts: VecDeque<Content>,
    /// The proposed input of each open permission request (an `allow` without edits sends it back).
    tool_inputs: HashMap<String, Value>,
    /// The model and permission mode the running process was started with or switched to.
    applied: (Option<String>, Option<String>),
    /// `set_model` / `set_permission_mode` requests not answered yet; prompts wait for them.
    options_pending: usize,
    /// Why the CLI refused a change of settings, when it did.
    options_refused: Option<String>,
    /// The id the CLI reported in its last init: what a restart resumes.
    reported_session_id: Option<String>,
}

impl AgentTask {
    pub(super) fn new(
        settings: Arc<ClaudeSettings>,
        models: Arc<Models>,
        pool: Arc<Pool>,
        spec: SpawnSpec,
        inputs: mpsc::Receiver<AgentInput>,
        events: mpsc::Sender<AgentEvent>,
    ) -> Self {
        AgentTask {
            settings,
            models,
            pool,
            spec,
            inputs,
            events: Reports(events),
            prompts: VecDeque::new(),
            tool_inputs: HashMap::new(),
            applied: (None, None),
            options_pending: 0,
            options_refused: None,
            reported_session_id: None,
        }
    }

    async fn emit_aborted(&self) {
        let raw = json!({
            "type": "result", "subtype": "error_during_execution", "is_error": true,
            "session_id": self.spec.session_id, "terminal_reason": "aborted_streaming",
            "result": "Interrupted before the agent started.", "num_turns": 0, "duration_ms": 0,
            "total_cost_usd": 0, "usage": {"input_tokens": 0, "output_tokens": 0}, "errors": [],
        })
        .to_string();
        if let Ok(message) = AgentMessage::parse(raw) {
            self.events.emit(AgentEvent::Message(message)).await;
        }
    }

    /// Serves the conversation until its session drops the input or the agent ends; `warm`
    /// is the pre-warmed process it adopts, if any.
    pub(super) async fn run(mut self, warm: Option<Proc>) {
        let mut warm = warm;
        let (pool, background, watched) = (
            self.pool.clone(),
            self.spec.background,
            self.spec.watched.clone(),
        );
        let Some(lease) = wait_for_place(&mut self, &pool, background, &watched).await else {
            return;
        };
        loop {
            let proc = match warm.take() {
                Some(mut proc) => {
                    self.adopt_options(&mut proc).await;
                    self.applied = self.wanted_options();
                    proc
                }
                None => match self.start().await {
                    Ok(Some(proc)) => proc,
                    Ok(None) => return,
                    Err(detail) => {
                        self.events.emit(AgentEvent::Exited { detail }).await;
                        return;
                    }
                },
            };
            match self.drive(proc, &lease).await {
                End::Stopped => return,
                End::Evicted => {
                    self.events
                        .emit(AgentEvent::Released {
                            detail: "stopped to free a process slot".into(),
                        })
                        .await;
                    return;
                }
                End::Exited(detail) => {
                    self.events.emit(AgentEvent::Exited { detail }).await;
                    return;
                }
                End::Restart(reason) => {
                    self.events
                        .status(
                            "restarting",
                            format!(
                                "{reason}; restarting the agent with resume under the new settings"
                            ),
                        )
                        .await;
                    self.options_pending = 0;
                    if let Some(id) = self.reported_session_id.clone() {
                        self.spec.launch = Launch::Resume { sdk_session_id: id };
                    }
                }
                End::Refused(reason) => {
                    let fresh = uuid::Uuid::new_v4().to_string();
                    self.events.status(
                        "resume_failed",
                        format!("{reason}; continuing in a fresh agent conversation (the stored history is kept)"),
                    )
                    .await;
                    self.spec.launch = Launch::New { session_id: fresh };
                }
            }
        }
    }

    /// Starts and initializes a process, buffering inputs meanwhile.
    async fn start(&mut self) -> Result<Option<Proc>, String> {
        let mut args = self.settings.args(
            &self.spec.launch,
            self.spec.model.as_deref(),
            self.spec.permission_mode.as_deref(),
            &self.spec.options,
        );
        if let Some(usd) = self.spec.max_budget_usd {
            args.push(format!("--max-budget-usd={usd}"));
        }
        self.applied = self.wanted_options();
        let mut proc = Proc::start(self.settings.proc_spec(
            &args,
            &self.spec.cwd,
            &self.spec.credentials,
        ))
        .map_err(|e| format!("cannot start the Claude CLI: {e}"))?;
        let timeout = self.settings.init_timeout();
        let outcome = {
            let init = control::initialize(&mut proc, timeout);
            tokio::pin!(init);
            loop {
                tokio::select! {
                    ready = &mut init => break Some(ready),
                    input = self.inputs.recv() => {
                        if !self.buffer_input(input).await {
                            break None;
                        }
                    }
                }
            }
        };
        match outcome {
            Some(Ok(answer)) => {
                self.models.learn(&answer);
                Ok(Some(proc))
            }
            Some(Err(detail)) => {
                proc.stop(self.settings.stop_grace()).await;
                Err(detail)
            }
            None => {
                proc.stop(self.settings.stop_grace()).await;
                Ok(None)
            }
        }
    }

    /// Runs turns on a ready process until it ends or the session stops it.
    async fn drive(&mut self, mut proc: Proc, lease: &Lease) -> End {
        let mut turn = Turn::Idle;
        let mut interrupt_held = false;
        let mut interrupts = 0u64;
        let mut seen_init = false;
        let mut current: Option<Content> = None;
        if self.prompts.is_empty() {
            lease.set_busy(false);
            // A start no turn waits for (a warm-up or a respawn) is complete.
            self.events
                .status("ready", "the agent is started and waits for a message")
                .await;
        }
        let end = loop {
            if turn == Turn::Idle
                && self.wanted_options() != self.applied
                && let Err(e) = self.switch_options(&mut proc).await
            {
                break End::Exited(format!(
                    "cannot write to the CLI: {e}; {}",
                    proc.exit_detail().await
                ));
            }
            if turn == Turn::Idle
                && self.options_pending == 0
                && let Some(prompt) = self.prompts.pop_front()
            {
                let line = json!({
                    "type": "user", "message": {"role": "user", "content": prompt},
                    "parent_tool_use_id": null, "session_id": "default",
                });
                if let Err(e) = proc.write(&line).await {
                    break End::Exited(format!(
                        "cannot write to the CLI: {e}; {}",
                        proc.exit_detail().await
                    ));
                }
                current = Some(prompt);
                turn = Turn::Sent { started: false };
                lease.set_busy(true);
            }
            let idle = turn == Turn::Idle;
            tokio::select! {
                // A prompt that arrives with an eviction request wins: the eviction is only
                // for an idle process with nothing queued.
                biased;
                input = self.inputs.recv() => match input {
                    None => break End::Stopped,
                    Some(AgentInput::Prompt(p)) => self.prompts.push_back(p),
                    Some(AgentInput::SetOptions { model, permission_mode }) => {
                        self.spec.model = model;
                        self.spec.permission_mode = permission_mode;
                    }
                    Some(AgentInput::Interrupt) => match turn {
                        Turn::Sent { started: true } => {
                            interrupts += 1;
                            let request = control::request(&format!("interrupt_{interrupts}"), Request::Interrupt);
                            let _ = proc.write(&request).await;
                        }
                        // The CLI ignores an interrupt before the turn's init: hold it until then.
                        Turn::Sent { started: false } => interrupt_held = true,
                        Turn::Idle => {
                            if self.prompts.pop_front().is_some() {
                                self.emit_aborted().await;
                            }
                        }
                    },
                    Some(AgentInput::PermissionTimedOut { request_id }) => {
                        let message = "Nobody answered the permission request in time.".to_owned();
                        let proposed = self.tool_inputs.remove(&request_id).unwrap_or(Value::Null);
                        let answer = control::permission_answer(&request_id, PermissionDecision::Deny { message }, proposed);
                        let _ = proc.write(&answer).await;
                    }
                    Some(AgentInput::Permission { request_id, decision }) => {
                        let proposed = self.tool_inputs.remove(&request_id).unwrap_or(Value::Null);
                        let answer = control::permission_answer(&request_id, decision, proposed);
                        let _ = proc.write(&answer).await;
                    }
                },
                line = proc.stdout.next() => match line {
                    Ok(Some(Line::Text(text))) => {
                        proc.spoke = true;
                        match self.on_line(&mut proc, text, &mut turn, &mut seen_init).await {
                            Some(refusal) => break End::Refused(refusal),
                            None if self.options_refused.is_some() => {
                                break End::Restart(self.options_refused.take().unwrap_or_default());
                            }
                            None => {
                                if turn == (Turn::Sent { started: true }) && interrupt_held {
                                    interrupt_held = false;
                                    interrupts += 1;
                                    let request = control::request(&format!("interrupt_{interrupts}"), Request::Interrupt);
                                    let _ = proc.write(&request).await;
                                }
                                if turn == Turn::Idle {
                                    current = None;
                                    lease.set_busy(false);
                                }
                            }
                        }
                    }
                    Ok(Some(Line::TooLong(bytes))) => {
                        self.events.status("warning", format!(
                            "the agent wrote a line of {bytes} bytes, over the {} byte limit; it was skipped",
                            self.settings.config.max_line_bytes
                        )).await;
                    }
                    Ok(None) | Err(_) => {
                        if !proc.spoke && proc.stderr_says("already in use") {
                            break End::Refused("the agent's conversation id is already in use".into());
                        }
                        break End::Exited(proc.exit_detail().await);
                    }
                },
                _ = lease.evicted(), if idle && self.prompts.is_empty() => break End::Evicted,
            }
        };
        if let End::Refused(_) = end
            && let Some(prompt) = current
        {
            self.prompts.push_front(prompt);
        }
        proc.stop(self.settings.stop_grace()).await;
        end
    }

    /// Routes one stdout line. Returns the reason when the CLI refused to resume.
    async fn on_line(
        &mut self,
        proc: &mut Proc,
        text: String,
        turn: &mut Turn,
        seen_init: &mut bool,
    ) -> Option<String> {
        let trimmed = text.trim_start();
        if !trimmed.starts_with('{') {
            if !trimmed.is_empty() {
                tracing::debug!(line = %trimmed, "non-JSON line from the CLI");
            }
            return None;
        }
        let message = match AgentMessage::parse(text) {
            Ok(m) => m,
            Err(e) => {
                self.events
                    .status(
                        "warning",
                        format!("the agent wrote a line that is not a JSON message ({e})"),
                    )
                    .await;
                return None;
            }
        };
        match message.kind.as_str() {
            "control_response" => {
                self.on_options_answer(&message.raw);
                None
            }
            "control_request" => {
                self.on_control_request(proc, &message.raw).await;
                None
            }
            "control_cancel_request" => {
                if let Ok(v) = serde_json::from_str::<Value>(&message.raw)
                    && let Some(id) = v["request_id"].as_str()
                {
                    self.tool_inputs.remove(id);
                    self.events
                        .emit(AgentEvent::PermissionCancelled {
                            request_id: id.to_owned(),
                        })
                        .await;
                }
                None
            }
            "system" if message.subtype.as_deref() == Some("init") => {
                *seen_init = true;
                self.reported_session_id.clone_from(&message.session_id);
                if *turn == (Turn::Sent { started: false }) {
                    *turn = Turn::Sent { started: true };
                }
                self.events.emit(AgentEvent::Message(message)).await;
                None
            }
            "result" => {
                if !*seen_init
                    && !matches!(self.spec.launch, Launch::New { .. })
                    && (message.raw.contains("No conversation found")
                        || message.raw.contains("No message found"))
                {
                    return Some("the agent could not find the conversation to resume".into());
                }
                *turn = Turn::Idle;
                self.events.emit(AgentEvent::Message(message)).await;
                None
            }
            _ => {
                self.events.emit(AgentEvent::Message(message)).await;
                None
            }
        }
    }

    async fn on_control_request(&mut self, proc: &mut Proc, raw: &str) {
        let Ok(v) = serde_json::from_str::<Value>(raw) else {
            return;
        };
        let request_id = v["request_id"].as_str().unwrap_or_default().to_owned();
        let request = &v["request"];
        if request["subtype"] == "can_use_tool" {
            let input = request["input"].clone();
            self.tool_inputs.insert(request_id.clone(), input.clone());
            self.events
                .emit(AgentEvent::PermissionRequest {
                    request_id,
                    tool_name: request["tool_name"].as_str().unwrap_or_default().to_owned(),
                    input,
                    suggestions: request
                        .get("permission_suggestions")
                        .cloned()
                        .unwrap_or_else(|| json!([])),
                })
                .await;
            return;
        }
        let subtype = request["subtype"].as_str().unwrap_or("unknown");
        let _ = proc
            .write(&control::unsupported_answer(&request_id, subtype))
            .await;
    }
}
