//! The task behind one ACP conversation: its state, its life (a place among the live agent processes, the agent started and its session opened, turns run until it stops) and its JSON-RPC calls to the agent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::schema::{self, Offered, Tool, method};
use super::{AcpSettings, Learnt};
use crate::agent::lines::Line;
use crate::agent::pool::{Pool, Waiter, wait_for_place};
use crate::agent::process::{Proc, ProcSpec};
use crate::agent::{AgentEvent, AgentInput, AgentMessage, Reports, SpawnSpec};
use crate::protocol::Content;

/// How the turn loop ended.
pub(super) enum End {
    /// The session dropped its input.
    Stopped,
    /// The agent ended, or can't be written to; the detail says how.
    Exited(String),
    /// Stopped while idle to free its place for another conversation's process.
    Evicted,
}

/// Why a call during start-up did not get its answer.
pub(super) enum CallFail {
    /// The session dropped its input.
    Stopped,
    /// The agent ended, timed out or wrote nonsense; the detail says which.
    Failed(String),
}

/// The turn in progress.
pub(super) struct Turn {
    /// id of its `session/prompt` request.
    pub(super) rpc_id: u64,
    pub(super) started: Instant,
    /// Reply text not yet stored.
    pub(super) text: String,
    /// Thought text not yet stored.
    pub(super) thinking: String,
    /// The whole reply, for the result.
    pub(super) reply: String,
    /// Tool calls announced but not yet stored (their input may still come).
    pub(super) pending_tools: Vec<Tool>,
    /// Tool calls whose result was stored.
    pub(super) finished_tools: HashSet<String>,
    /// Whether `session/cancel` was sent.
    pub(super) cancelled: bool,
}

pub(super) struct AcpTask {
    pub(super) settings: Arc<AcpSettings>,
    pub(super) learnt: Arc<Mutex<Learnt>>,
    pub(super) pool: Arc<Pool>,
    pub(super) spec: SpawnSpec,
    pub(super) inputs: mpsc::Receiver<AgentInput>,
    pub(super) events: Reports,
    pub(super) prompts: VecDeque<Content>,
    pub(super) next_id: u64,
    /// The agent's id of the open session.
    pub(super) session: String,
    /// What the agent said it can do.
    pub(super) caps: schema::Capabilities,
    pub(super) offered: Offered,
    pub(super) applied_mode: Option<String>,
    pub(super) applied_model: Option<String>,
    /// Open permission requests: our request id → the agent's JSON-RPC id and the options.
    pub(super) permissions: HashMap<String, (Value, Vec<(String, String)>)>,
    pub(super) permission_count: u64,
    /// `session/set_mode` and `session/set_config_option` requests not answered yet.
    pub(super) option_calls: HashSet<u64>,
    /// Cost accounting. Agents report the session's cost so far (across processes, for a
    /// resumed one); results carry this process's running total, as the CLI's do.
    pub(super) cost: Cost,
}

/// What the agent's cost reports add up to.
#[derive(Debug, Default)]
pub(super) struct Cost {
    /// The session's cost when the current turn began; unknown for a reopened session until
    /// the agent reports one (that turn's cost is then not counted).
    pub(super) base: Option<f64>,
    /// The latest report.
    pub(super) seen: Option<f64>,
    /// This process's total.
    pub(super) process: f64,
}

impl Cost {
    /// At the end of a turn: adds its cost and returns the running total.
    pub(super) fn turn_ended(&mut self) -> f64 {
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

    fn prompts(&mut self) -> &mut VecDeque<Content> {
        &mut self.prompts
    }

    fn spec(&mut self) -> &mut SpawnSpec {
        &mut self.spec
    }

    async fn abort_unsent_turn(&self) {
        self.emit_aborted("Interrupted before the agent started.")
            .await;
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
    pub(super) async fn message(&self, value: Value) {
        if let Ok(message) = AgentMessage::parse(value.to_string()) {
            self.events.emit(AgentEvent::Message(message)).await;
        }
    }

    /// Reports something the agent said that has no stored shape (`agent_event`, not stored).
    pub(super) async fn agent_event(&self, event: &Value) {
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
        let env = self.spec.credentials.added_to(self.settings.environment());
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

    pub(super) async fn emit_aborted(&self, why: &str) {
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
    pub(super) async fn emit_refused(&self, why: &str) {
        self.message(json!({
            "type": "result", "subtype": "error_during_execution", "is_error": true,
            "session_id": self.session, "terminal_reason": "unsupported",
            "result": why, "num_turns": 0, "duration_ms": 0,
            "total_cost_usd": self.cost.process, "usage": {"input_tokens": 0, "output_tokens": 0},
            "errors": [why],
        }))
        .await;
    }

    pub(super) async fn send(&self, proc: &mut Proc, message: &Value) -> Result<(), String> {
        proc.write(message)
            .await
            .map_err(|e| format!("cannot write to the agent: {e}"))
    }

    pub(super) async fn request(
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
    pub(super) async fn call(
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
}
