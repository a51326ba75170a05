//! The task behind one ACP conversation: it waits for a place among the live agent processes,
//! starts the agent, opens (or reopens) its session, then runs turns: prompts out,
//! `session/update` notifications in as stream-json shaped messages, permission requests
//! relayed, `session/cancel` for interrupts; an idle agent goes when the pool needs its place.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::schema::{self, Offered, Tool, Update, method};
use super::{AcpSettings, Learnt};
use crate::agent::lines::Line;
use crate::agent::pool::{Lease, Pool, Waiter, wait_for_place};
use crate::agent::process::{Proc, ProcSpec};
use crate::agent::{AgentEvent, AgentInput, AgentMessage, Launch, Reports, SpawnSpec};
use crate::protocol::{Content, LaunchOption, LaunchOptions, PermissionDecision};

/// JSON-RPC error code for a method the client does not implement.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code for malformed params.
const INVALID_PARAMS: i64 = -32602;

/// Whether the session offers `mode`, as a mode or as a value of its `mode` config option.
pub(super) fn offers_mode(offered: &Offered, mode: &str) -> bool {
    offered.modes.iter().any(|m| m == mode)
        || offered
            .option("mode")
            .is_some_and(|v| v.iter().any(|m| m == mode))
}

/// How the turn loop ended.
enum End {
    /// The session dropped its input.
    Stopped,
    /// The agent ended, or can't be written to; the detail says how.
    Exited(String),
    /// Stopped while idle to free its place for another conversation's process.
    Evicted,
}

/// Why a call during start-up did not get its answer.
enum CallFail {
    /// The session dropped its input.
    Stopped,
    /// The agent ended, timed out or wrote nonsense; the detail says which.
    Failed(String),
}

/// The turn in progress.
struct Turn {
    /// id of its `session/prompt` request.
    rpc_id: u64,
    started: Instant,
    /// Reply text not yet stored.
    text: String,
    /// Thought text not yet stored.
    thinking: String,
    /// The whole reply, for the result.
    reply: String,
    /// Tool calls announced but not yet stored (their input may still come).
    pending_tools: Vec<Tool>,
    /// Tool calls whose result was stored.
    finished_tools: HashSet<String>,
    /// Whether `session/cancel` was sent.
    cancelled: bool,
}

pub(super) struct AcpTask {
    settings: Arc<AcpSettings>,
    learnt: Arc<Mutex<Learnt>>,
    pool: Arc<Pool>,
    spec: SpawnSpec,
    inputs: mpsc::Receiver<AgentInput>,
    events: Reports,
    prompts: VecDeque<Content>,
    next_id: u64,
    /// The agent's id of the open session.
    session: String,
    /// What the agent said it can do.
    caps: schema::Capabilities,
    offered: Offered,
    applied_mode: Option<String>,
    applied_model: Option<String>,
    /// Open permission requests: our request id → the agent's JSON-RPC id and the options.
    permissions: HashMap<String, (Value, Vec<(String, String)>)>,
    permission_count: u64,
    /// `session/set_mode` and `session/set_config_option` requests not answered yet.
    option_calls: HashSet<u64>,
    /// Cost accounting. Agents report the session's cost so far (across processes, for a
    /// resumed one); results carry this process's running total, as the CLI's do.
    cost: Cost,
}

/// What the agent's cost reports add up to.
#[derive(Debug, Default)]
struct Cost {
    /// The session's cost when the current turn began; unknown for a reopened session until
    /// the agent reports one (that turn's cost is then not counted).
    base: Option<f64>,
    /// The latest report.
    seen: Option<f64>,
    /// This process's total.
    process: f64,
}

impl Cost {
    /// At the end of a turn: adds its cost and returns the running total.
    fn turn_ended(&mut self) -> f64 {
        if let Some(seen) = self.seen {
            if let Some(base) = self.base {
                self.process += (seen - base).max(0.0);
            }
            self.base = Some(seen);
        }
        self.process
    }
}

impl Waiter for AcpTask {
    fn inputs(&mut self) -> &mut mpsc::Receiver<AgentInput> {
        &mut self.inputs
    }

    fn reports(&self) -> &Reports {
        &self.events
    }

    fn has_prompts(&self) -> bool {
        !self.prompts.is_empty()
    }

    async fn buffer_input(&mut self, input: Option<AgentInput>) -> bool {
        match input {
            None => return false,
            Some(AgentInput::Prompt(p)) => self.prompts.push_back(p),
            Some(AgentInput::Interrupt) => {
                if self.prompts.pop_front().is_some() {
                    self.emit_aborted("Interrupted before the agent started.")
                        .await;
                }
            }
            Some(AgentInput::SetOptions {
                model,
                permission_mode,
            }) => {
                self.spec.model = model;
                self.spec.permission_mode = permission_mode;
            }
            Some(AgentInput::Permission { .. } | AgentInput::PermissionTimedOut { .. }) => {}
        }
        true
    }
}

impl AcpTask {
    pub(super) fn new(
        settings: Arc<AcpSettings>,
        learnt: Arc<Mutex<Learnt>>,
        pool: Arc<Pool>,
        spec: SpawnSpec,
        inputs: mpsc::Receiver<AgentInput>,
        events: mpsc::Sender<AgentEvent>,
    ) -> Self {
        AcpTask {
            settings,
            learnt,
            pool,
            spec,
            inputs,
            events: Reports(events),
            prompts: VecDeque::new(),
            next_id: 0,
            session: String::new(),
            caps: schema::Capabilities::default(),
            offered: Offered::default(),
            applied_mode: None,
            applied_model: None,
            permissions: HashMap::new(),
            permission_count: 0,
            option_calls: HashSet::new(),
            cost: Cost::default(),
        }
    }

    /// Reports one stream-json shaped message.
    async fn message(&self, value: Value) {
        if let Ok(message) = AgentMessage::parse(value.to_string()) {
            self.events.emit(AgentEvent::Message(message)).await;
        }
    }

    /// Reports something the agent said that has no stored shape (`agent_event`, not stored).
    async fn agent_event(&self, event: &Value) {
        self.message(json!({"type": "agent_event", "agent": self.settings.name, "event": event}))
            .await;
    }

    fn stop_grace(&self) -> Duration {
        Duration::from_secs(self.settings.config.stop_grace_secs)
    }

    /// Serves the conversation until its session drops the input or the agent ends.
    pub(super) async fn run(mut self) {
        let (pool, background, watched) = (
            self.pool.clone(),
            self.spec.background,
            self.spec.watched.clone(),
        );
        let Some(lease) = wait_for_place(&mut self, &pool, background, &watched).await else {
            return;
        };
        let env = self.settings.environment();
        let started = Proc::start(ProcSpec {
            program: &self.settings.program,
            args: &self.settings.args,
            env,
            cwd: &self.spec.cwd,
            // The session made the conversation's directory (or checked the project's).
            create_cwd: false,
            max_line_bytes: self.settings.config.max_line_bytes,
            label: "the ACP agent",
        });
        let mut proc = match started {
            Ok(proc) => proc,
            Err(e) => {
                self.events
                    .emit(AgentEvent::Exited {
                        detail: format!("cannot start the agent: {e}"),
                    })
                    .await;
                return;
            }
        };
        let end = match self.open(&mut proc).await {
            Ok(()) => self.drive(&mut proc, &lease).await,
            Err(CallFail::Stopped) => End::Stopped,
            Err(CallFail::Failed(detail)) => End::Exited(detail),
        };
        proc.stop(self.stop_grace()).await;
        drop(lease);
        match end {
            End::Stopped => {}
            End::Exited(detail) => self.events.emit(AgentEvent::Exited { detail }).await,
            End::Evicted => {
                self.events
                    .emit(AgentEvent::Released {
                        detail: "stopped to free a process slot".into(),
                    })
                    .await;
            }
        }
    }

    async fn emit_aborted(&self, why: &str) {
        self.message(json!({
            "type": "result", "subtype": "error_during_execution", "is_error": true,
            "session_id": self.session, "terminal_reason": "aborted_streaming",
            "stop_reason": "cancelled", "result": why, "num_turns": 0, "duration_ms": 0,
            "total_cost_usd": 0, "usage": {"input_tokens": 0, "output_tokens": 0}, "errors": [],
        }))
        .await;
    }

    /// Ends a turn the agent can't take before it is sent: an error `result` whose
    /// `terminal_reason` is `unsupported`.
    async fn emit_refused(&self, why: &str) {
        self.message(json!({
            "type": "result", "subtype": "error_during_execution", "is_error": true,
            "session_id": self.session, "terminal_reason": "unsupported",
            "result": why, "num_turns": 0, "duration_ms": 0,
            "total_cost_usd": self.cost.process, "usage": {"input_tokens": 0, "output_tokens": 0},
            "errors": [why],
        }))
        .await;
    }

    async fn send(&self, proc: &mut Proc, message: &Value) -> Result<(), String> {
        proc.write(message)
            .await
            .map_err(|e| format!("cannot write to the agent: {e}"))
    }

    async fn request(
        &mut self,
        proc: &mut Proc,
        method: &str,
        params: Value,
    ) -> Result<u64, String> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(proc, &message).await?;
        Ok(id)
    }

    /// Sends a request during start-up and waits for its answer: `Ok(Err(error))` when the
    /// agent answered with a JSON-RPC error. Inputs are buffered meanwhile; with `replay`,
    /// session updates are dropped (a `session/load` replays what is already stored).
    async fn call(
        &mut self,
        proc: &mut Proc,
        method: &str,
        params: Value,
        replay: bool,
    ) -> Result<Result<Value, Value>, CallFail> {
        let id = self
            .request(proc, method, params)
            .await
            .map_err(CallFail::Failed)?;
        let deadline = tokio::time::Instant::now()
            + Duration::from_secs(self.settings.config.init_timeout_secs);
        loop {
            tokio::select! {
                input = self.inputs.recv() => {
                    if !self.buffer_input(input).await {
                        return Err(CallFail::Stopped);
                    }
                }
                line = proc.stdout.next() => match line {
                    Ok(Some(Line::Text(text))) => {
                        let Some(v) = self.parse_line(&text).await else { continue };
                        if v.get("method").is_none() && v.get("id").and_then(Value::as_u64) == Some(id) {
                            return Ok(match v.get("error") {
                                Some(error) => Err(error.clone()),
                                None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
                            });
                        }
                        if replay && v.get("method").and_then(Value::as_str) == Some(method::SESSION_UPDATE) {
                            continue;
                        }
                        self.on_message(proc, v, &mut None).await.map_err(CallFail::Failed)?;
                    }
                    Ok(Some(Line::TooLong(bytes))) => self.too_long(bytes).await,
                    Ok(None) | Err(_) => return Err(CallFail::Failed(proc.exit_detail().await)),
                },
                () = tokio::time::sleep_until(deadline) => {
                    return Err(CallFail::Failed(format!(
                        "the agent did not answer {method} within {} s",
                        self.settings.config.init_timeout_secs
                    )));
                }
            }
        }
    }

    /// `initialize`, then the session: resumed or loaded when the conversation has one and the
    /// agent can, else new (with `resume_failed` when an old one could not be reopened).
    async fn open(&mut self, proc: &mut Proc) -> Result<(), CallFail> {
        let caps = match self
            .call(proc, method::INITIALIZE, schema::initialize(), false)
            .await?
        {
            Ok(result) => schema::capabilities(&result).map_err(CallFail::Failed)?,
            Err(error) => {
                return Err(CallFail::Failed(format!(
                    "the agent refused initialize: {error}"
                )));
            }
        };
        self.learnt.lock().expect("learnt lock").caps = Some(caps);
        self.caps = caps;
        let cwd = self.spec.cwd.clone();
        let launch = self.launch_options().await;
        let previous = match &self.spec.launch {
            Launch::Resume { sdk_session_id } => Some(sdk_session_id.clone()),
            Launch::New { .. } | Launch::ResumeAt { .. } | Launch::Fork { .. } => None,
        };
        let mut refused = None;
        if let Some(id) = previous {
            let reopened = if caps.resume {
                Some(
                    self.call(
                        proc,
                        method::SESSION_RESUME,
                        schema::resume_session(&id, &cwd, &launch),
                        false,
                    )
                    .await?,
                )
            } else if caps.load {
                Some(
                    self.call(
                        proc,
                        method::SESSION_LOAD,
                        schema::load_session(&id, &cwd, &launch),
                        true,
                    )
                    .await?,
                )
            } else {
                None
            };
            match reopened {
                Some(Ok(result)) => {
                    self.session = id;
                    self.adopt(schema::reopened_result(&result));
                    self.announce().await;
                    return Ok(());
                }
                Some(Err(error)) => {
                    refused = Some(format!(
                        "the agent could not reopen its session ({})",
                        error["message"].as_str().unwrap_or("refused")
                    ));
                }
                None => {
                    refused = Some("the agent can neither resume nor load a session".to_owned());
                }
            }
        }
        let result = match self
            .call(
                proc,
                method::SESSION_NEW,
                schema::new_session(&cwd, &launch),
                false,
            )
            .await?
        {
            Ok(result) => result,
            Err(error) => {
                return Err(CallFail::Failed(format!(
                    "the agent refused session/new: {error}"
                )));
            }
        };
        let (id, offered) = schema::new_session_result(&result).map_err(CallFail::Failed)?;
        if let Some(reason) = refused {
            self.events
                .status(
                    "resume_failed",
                    format!(
                        "{reason}; continuing in a new agent session (the stored history is kept)"
                    ),
                )
                .await;
        }
        self.session = id;
        self.cost.base = Some(0.0);
        self.adopt(offered);
        self.announce().await;
        Ok(())
    }

    /// The conversation's launch options that the agent takes (its `launch_options`); one it
    /// no longer takes (since the configuration changed) is left out, with a warning.
    async fn launch_options(&self) -> LaunchOptions {
        let taken = &self.settings.launch_options;
        let left: Vec<&str> = (self.spec.options.named().into_iter())
            .filter(|o| !taken.contains(o))
            .map(LaunchOption::name)
            .collect();
        if !left.is_empty() {
            self.events
                .status(
                    "warning",
                    format!(
                        "the agent does not take `options.{}` (its launch_options); it starts \
                         without",
                        left.join("`, `options.")
                    ),
                )
                .await;
        }
        self.spec.options.only(taken)
    }

    /// Takes what a session offers as the current state, and lets the backend know it.
    fn adopt(&mut self, offered: Offered) {
        self.applied_mode.clone_from(&offered.current_mode);
        self.applied_model = None;
        self.learnt.lock().expect("learnt lock").offered = Some(offered.clone());
        self.offered = offered;
    }

    /// The stored `system`/`init` message: the agent's session id (what a resume uses).
    async fn announce(&self) {
        self.message(json!({
            "type": "system", "subtype": "init", "session_id": self.session,
            "uuid": uuid::Uuid::new_v4().to_string(), "agent": self.settings.name,
            "cwd": self.spec.cwd, "permissionMode": self.applied_mode,
            "modes": self.offered.modes,
        }))
        .await;
    }

    /// Asks the agent for the mode and model the conversation wants, when they differ from
    /// what it has; one it does not offer is reported and left alone.
    async fn apply_options(&mut self, proc: &mut Proc) -> Result<(), String> {
        let unattended = |mode: &str| self.settings.is_unattended(mode);
        let starts_unattended = self.applied_mode.as_deref().is_some_and(unattended);
        let wanted = self.spec.permission_mode.clone().or_else(|| {
            // A session that starts in a mode running tools without asking is switched to the
            // agent's `default` (else its first mode that asks), unless the operator allows
            // such modes.
            if !starts_unattended || self.settings.allow_unattended {
                return None;
            }
            if offers_mode(&self.offered, "default") && !unattended("default") {
                return Some("default".to_owned());
            }
            self.offered.modes.iter().find(|m| !unattended(m)).cloned()
        });
        if let Some(mode) = wanted
            && self.applied_mode.as_deref() != Some(mode.as_str())
        {
            self.applied_mode = Some(mode.clone());
            let params = if self.offered.modes.contains(&mode) {
                Some((
                    method::SESSION_SET_MODE,
                    schema::set_mode(&self.session, &mode),
                ))
            } else if offers_mode(&self.offered, &mode) {
                let params = schema::set_config_option(&self.session, "mode", &mode);
                Some((method::SESSION_SET_CONFIG_OPTION, params))
            } else {
                None
            };
            match params {
                Some((m, params)) => {
                    let id = self.request(proc, m, params).await?;
                    self.option_calls.insert(id);
                }
                None => {
                    self.events
                        .status(
                            "warning",
                            format!("the agent has no mode `{mode}`; it keeps its own"),
                        )
                        .await;
                }
            }
        }
        if let Some(model) = self.spec.model.clone()
            && self.applied_model.as_deref() != Some(model.as_str())
        {
            self.applied_model = Some(model.clone());
            if self
                .offered
                .option("model")
                .is_some_and(|v| v.contains(&model))
            {
                let params = schema::set_config_option(&self.session, "model", &model);
                let id = self
                    .request(proc, method::SESSION_SET_CONFIG_OPTION, params)
                    .await?;
                self.option_calls.insert(id);
            } else {
                self.events
                    .status(
                        "warning",
                        format!("the agent has no model `{model}`; it keeps its own"),
                    )
                    .await;
            }
        }
        Ok(())
    }

    /// The session's mode, when it runs tools without asking and the server does not allow
    /// that (it could not be switched to a mode that asks).
    fn unallowed_mode(&self) -> Option<String> {
        self.applied_mode
            .clone()
            .filter(|m| !self.settings.allow_unattended && self.settings.is_unattended(m))
    }

    /// Runs turns until the session stops the agent, the agent ends, or the pool asks the idle
    /// process to make room.
    async fn drive(&mut self, proc: &mut Proc, lease: &Lease) -> End {
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

    async fn too_long(&self, bytes: usize) {
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
    async fn parse_line(&self, text: &str) -> Option<Value> {
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

    /// The option a user's decision selects: allow → `allow_once` (`allow_always` when the
    /// user said always and the agent offers it), deny → `reject_once` (the `always` kinds
    /// when the agent offers only those); none fits → `cancelled`.
    fn choose(&self, request_id: &str, decision: &PermissionDecision) -> Option<String> {
        let (_, options) = self.permissions.get(request_id)?;
        let kinds: &[&str] = match decision {
            PermissionDecision::Allow { always: true, .. } => &["allow_always", "allow_once"],
            PermissionDecision::Allow { .. } => &["allow_once", "allow_always"],
            PermissionDecision::Deny { .. } => &["reject_once", "reject_always"],
        };
        kinds.iter().find_map(|kind| {
            options
                .iter()
                .find(|(_, k)| k == kind)
                .map(|(id, _)| id.clone())
        })
    }

    async fn answer_permission(&mut self, proc: &mut Proc, request_id: &str, option: Option<&str>) {
        let Some((rpc_id, _)) = self.permissions.remove(request_id) else {
            return;
        };
        let answer =
            json!({"jsonrpc": "2.0", "id": rpc_id, "result": schema::permission_outcome(option)});
        let _ = self.send(proc, &answer).await;
    }

    /// Routes one JSON-RPC message from the agent. `Err` only when it can't be written to.
    async fn on_message(
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

    async fn on_request(
        &mut self,
        proc: &mut Proc,
        m: &str,
        id: Value,
        params: &Value,
        turn: &mut Option<Turn>,
    ) -> Result<(), String> {
        if m != method::REQUEST_PERMISSION {
            let error = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": METHOD_NOT_FOUND, "message": format!("agentmux does not offer {m}")}});
            return self.send(proc, &error).await;
        }
        let ask = match schema::permission_ask(params) {
            Ok(ask) => ask,
            Err(why) => {
                let error = json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": INVALID_PARAMS, "message": why}});
                return self.send(proc, &error).await;
            }
        };
        if turn.as_ref().is_some_and(|t| t.cancelled) {
            let answer =
                json!({"jsonrpc": "2.0", "id": id, "result": schema::permission_outcome(None)});
            return self.send(proc, &answer).await;
        }
        if let Some(t) = turn.as_mut() {
            Self::merge_pending(t, &ask.tool);
            self.flush(t).await;
        }
        self.permission_count += 1;
        let request_id = format!("acp-{}", self.permission_count);
        self.permissions
            .insert(request_id.clone(), (id, ask.options.clone()));
        self.events
            .emit(AgentEvent::PermissionRequest {
                request_id,
                tool_name: ask
                    .tool
                    .name
                    .clone()
                    .or(ask.tool.title.clone())
                    .unwrap_or_else(|| "tool".to_owned()),
                input: ask.tool.input.clone().unwrap_or_else(|| json!({})),
                suggestions: ask.raw_options,
            })
            .await;
        Ok(())
    }

    fn merge_pending(turn: &mut Turn, news: &Tool) {
        if let Some(tool) = turn.pending_tools.iter_mut().find(|t| t.id == news.id) {
            if news.title.is_some() {
                tool.title.clone_from(&news.title);
            }
            if news.name.is_some() {
                tool.name.clone_from(&news.name);
            }
            if news.input.as_ref().is_some_and(|i| i != &json!({})) {
                tool.input.clone_from(&news.input);
            }
        }
    }

    fn stream_event(&self, text: &str, thought: bool) -> Value {
        let delta = if thought {
            json!({"type": "thinking_delta", "thinking": text})
        } else {
            json!({"type": "text_delta", "text": text})
        };
        json!({"type": "stream_event", "session_id": self.session, "parent_tool_use_id": null,
            "event": {"type": "content_block_delta", "index": 0, "delta": delta}})
    }

    fn assistant(&self, content: Vec<Value>) -> Value {
        json!({"type": "assistant", "uuid": uuid::Uuid::new_v4().to_string(),
            "session_id": self.session, "parent_tool_use_id": null,
            "message": {"role": "assistant", "type": "message", "content": content}})
    }

    /// Stores the reply text gathered so far, then the tool calls waiting for their input.
    async fn flush(&self, turn: &mut Turn) {
        let mut content = Vec::new();
        if !turn.thinking.is_empty() {
            content
                .push(json!({"type": "thinking", "thinking": std::mem::take(&mut turn.thinking)}));
        }
        if !turn.text.is_empty() {
            content.push(json!({"type": "text", "text": std::mem::take(&mut turn.text)}));
        }
        if !content.is_empty() {
            self.message(self.assistant(content)).await;
        }
        for tool in std::mem::take(&mut turn.pending_tools) {
            self.tool_use(&tool).await;
        }
    }

    async fn tool_use(&self, tool: &Tool) {
        let name = tool
            .name
            .clone()
            .or(tool.title.clone())
            .unwrap_or_else(|| "tool".to_owned());
        let mut block = json!({"type": "tool_use", "id": tool.id, "name": name,
            "input": tool.input.clone().unwrap_or_else(|| json!({}))});
        if let Some(title) = &tool.title {
            block["title"] = json!(title);
        }
        self.message(self.assistant(vec![block])).await;
    }

    async fn tool_result(&self, turn: &mut Turn, tool: &Tool) {
        if !turn.finished_tools.insert(tool.id.clone()) {
            return;
        }
        self.message(
            json!({"type": "user", "uuid": uuid::Uuid::new_v4().to_string(),
            "session_id": self.session, "parent_tool_use_id": null,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool.id,
                "content": tool.output.clone().unwrap_or_default(),
                "is_error": tool.finished == Some(true)}]}}),
        )
        .await;
    }

    async fn on_update(&mut self, params: &Value, turn: &mut Option<Turn>) {
        let Some((session, update)) = schema::update(params) else {
            self.events
                .status(
                    "warning",
                    "the agent sent a session/update without a session id",
                )
                .await;
            return;
        };
        if session != self.session {
            return;
        }
        match (update, turn.as_mut()) {
            (Update::Chunk { text, thought }, t) => {
                self.message(self.stream_event(&text, thought)).await;
                if let Some(t) = t {
                    if !t.pending_tools.is_empty() {
                        self.flush(t).await;
                    }
                    if thought {
                        t.thinking.push_str(&text);
                    } else {
                        t.text.push_str(&text);
                        t.reply.push_str(&text);
                    }
                }
            }
            (Update::NewTool(tool), Some(t)) => {
                self.flush(t).await;
                if tool.finished.is_some() {
                    self.tool_use(&tool).await;
                    self.tool_result(t, &tool).await;
                } else {
                    t.pending_tools.push(tool);
                }
            }
            (Update::ToolNews(tool), Some(t)) => {
                Self::merge_pending(t, &tool);
                let ready = t
                    .pending_tools
                    .iter()
                    .any(|p| p.id == tool.id && p.input.as_ref().is_some_and(|i| i != &json!({})));
                if ready || tool.finished.is_some() {
                    self.flush(t).await;
                }
                if tool.finished.is_some() {
                    self.tool_result(t, &tool).await;
                } else {
                    self.agent_event(params).await;
                }
            }
            (Update::CostUsd(amount), _) => {
                self.cost.seen = Some(amount);
                self.agent_event(params).await;
            }
            (Update::Mode(mode), _) => {
                self.applied_mode = Some(mode);
                self.agent_event(params).await;
            }
            (Update::Options { options, mode }, _) => {
                if mode.is_some() {
                    self.applied_mode = mode;
                }
                self.offered.options = options;
                self.learnt.lock().expect("learnt lock").offered = Some(self.offered.clone());
                self.agent_event(params).await;
            }
            _ => self.agent_event(params).await,
        }
    }

    /// The turn's `session/prompt` was answered: store what is left, then its `result`.
    async fn end_turn(&mut self, mut turn: Turn, answer: &Value) {
        self.flush(&mut turn).await;
        self.permissions.clear();
        let duration_ms = u64::try_from(turn.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let result = match answer.get("error") {
            Some(error) => {
                let why = error["message"]
                    .as_str()
                    .unwrap_or("the agent failed the turn");
                json!({"type": "result", "subtype": "error_during_execution", "is_error": true,
                    "terminal_reason": "agent_error", "result": why, "errors": [error]})
            }
            None => match schema::turn_end(&answer["result"]) {
                Ok(end) if end.stop_reason == "cancelled" => json!({"type": "result",
                    "subtype": "error_during_execution", "is_error": true,
                    "terminal_reason": "aborted_streaming", "stop_reason": end.stop_reason,
                    "result": turn.reply, "errors": [],
                    "usage": {"input_tokens": end.input_tokens, "output_tokens": end.output_tokens}}),
                Ok(end) => json!({"type": "result", "subtype": "success", "is_error": false,
                    "terminal_reason": "completed", "stop_reason": end.stop_reason,
                    "result": turn.reply,
                    "usage": {"input_tokens": end.input_tokens, "output_tokens": end.output_tokens}}),
                Err(why) => json!({"type": "result", "subtype": "error_during_execution",
                    "is_error": true, "terminal_reason": "agent_error", "result": why, "errors": [why]}),
            },
        };
        let mut result = result;
        result["session_id"] = json!(self.session);
        result["duration_ms"] = json!(duration_ms);
        result["num_turns"] = json!(1);
        result["total_cost_usd"] = json!(self.cost.turn_ended());
        if result.get("usage").is_none() {
            result["usage"] = json!({"input_tokens": 0, "output_tokens": 0});
        }
        self.message(result).await;
    }
}
