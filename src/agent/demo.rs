//! The built-in demo agent: no network, no key, deterministic replies.
//!
//! Each turn emits what the Claude CLI emits, in the same shape: a `system`/`init` carrying the
//! conversation id, one `stream_event` text delta per word, one `assistant`, then a `result`
//! with usage and duration. The reply is `Echo: <content> (turn N)`, N counting the user turns
//! the agent remembers (an image in the content is echoed as `[<media type> <size> bytes]`), so resume, rewind and fork can be seen from outside.
//!
//! A testing aid, [`DemoBackend::gate_dir`] (`demo.gate_dir`), makes each turn wait after its first
//! word until a file named after the turn exists, so that a test, not the clock, decides how
//! long a turn runs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::protocol::{AgentId, Content};
use async_trait::async_trait;
use serde_json::json;
use tokio::sync::mpsc;

use super::{
    AgentConn, AgentEvent, AgentInput, AgentMessage, Backend, EVENT_QUEUE, INPUT_QUEUE, Launch,
    SpawnError, SpawnSpec,
};

/// Model the demo reports when none was chosen.
const DEFAULT_MODEL: &str = "demo";
/// Permission mode the demo reports when none was chosen.
const DEFAULT_PERMISSION_MODE: &str = "default";
/// Cost the demo reports per turn, in US dollars.
const COST_PER_TURN_USD: f64 = 0.0001;

/// What the demo agent can do: it remembers its turns through the store.
const DEMO_SUPPORTS: super::Supports = super::Supports {
    resume: true,
    load: false,
    permissions: false,
    modes: false,
    rewind: true,
    fork: true,
    images: true,
    known: true,
};

/// The demo backend.
#[derive(Debug, Clone)]
pub struct DemoBackend {
    /// Pause after each word.
    pub word_delay: Duration,
    /// Testing aid (`demo.gate_dir`): after its first word, turn N of conversation `agent_id`
    /// goes on only once the file `<gate_dir>/<agent_id>.<N>` exists (N as in the reply's
    /// `(turn N)`). An interrupt ends the wait like any turn. The name is made of an `agent_id`
    /// (no `/`) and a number, so it never leaves the directory.
    pub gate_dir: Option<PathBuf>,
}

#[async_trait]
impl Backend for DemoBackend {
    fn name(&self) -> &'static str {
        "demo"
    }

    fn supports(&self) -> super::Supports {
        DEMO_SUPPORTS
    }

    fn check_options(&self, _model: Option<&str>, mode: Option<&str>) -> Result<(), String> {
        super::check_cli_mode(mode)
    }

    fn unattended_mode(&self, mode: &str) -> bool {
        super::CLI_UNATTENDED_MODES.contains(&mode)
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<AgentConn, SpawnError> {
        Ok(self.start(spec))
    }
}

impl DemoBackend {
    fn start(&self, spec: SpawnSpec) -> AgentConn {
        let (input_tx, input_rx) = mpsc::channel(INPUT_QUEUE);
        let (event_tx, event_rx) = mpsc::channel(EVENT_QUEUE);
        // The demo's memory is the number of turns it has seen: `prior_prompts` counts the
        // stored turns it remembers, which a rewind cuts and a fork inherits.
        let session_id = match &spec.launch {
            Launch::New { session_id } => session_id.clone(),
            Launch::Resume { sdk_session_id } => sdk_session_id.clone(),
            Launch::ResumeAt { new_session_id, .. } | Launch::Fork { new_session_id, .. } => {
                new_session_id.clone()
            }
        };
        let gate = self
            .gate_dir
            .clone()
            .map(|dir| (dir, spec.agent_id.clone()));
        let agent = DemoAgent {
            session_id,
            gate,
            model: spec.model.unwrap_or_else(|| DEFAULT_MODEL.into()),
            permission_mode: spec
                .permission_mode
                .unwrap_or_else(|| DEFAULT_PERMISSION_MODE.into()),
            turns: spec.prior_prompts,
            cumulative_cost: 0.0,
            word_delay: self.word_delay,
            events: event_tx,
        };
        tokio::spawn(agent.run(input_rx));
        AgentConn {
            input: input_tx,
            events: event_rx,
        }
    }
}

struct DemoAgent {
    session_id: String,
    /// The gate directory and the conversation's `agent_id`, when turns wait at a gate.
    gate: Option<(PathBuf, AgentId)>,
    model: String,
    /// Reported in each turn's `init`; the demo never asks for permissions in any mode.
    permission_mode: String,
    turns: i64,
    cumulative_cost: f64,
    word_delay: Duration,
    events: mpsc::Sender<AgentEvent>,
}

/// How a turn ended.
enum TurnEnd {
    Completed,
    Interrupted,
    /// The session dropped its input: stop the agent.
    Closed,
}

impl DemoAgent {
    async fn run(mut self, mut input: mpsc::Receiver<AgentInput>) {
        let mut pending = std::collections::VecDeque::new();
        loop {
            let next = match pending.pop_front() {
                Some(next) => next,
                None => match input.recv().await {
                    Some(next) => next,
                    None => break,
                },
            };
            let prompt = match next {
                AgentInput::Prompt(p) => p,
                // Nothing to stop, and the demo never asks for permissions.
                AgentInput::Interrupt
                | AgentInput::Permission { .. }
                | AgentInput::PermissionTimedOut { .. } => continue,
                AgentInput::SetOptions {
                    model,
                    permission_mode,
                } => {
                    self.model = model.unwrap_or_else(|| DEFAULT_MODEL.into());
                    self.permission_mode =
                        permission_mode.unwrap_or_else(|| DEFAULT_PERMISSION_MODE.into());
                    continue;
                }
            };
            match self.turn(&prompt, &mut input, &mut pending).await {
                TurnEnd::Completed | TurnEnd::Interrupted => {}
                TurnEnd::Closed => break,
            }
        }
        let _ = self
            .events
            .send(AgentEvent::Exited {
                detail: "stopped".into(),
            })
            .await;
    }

    async fn emit(&self, value: serde_json::Value) -> bool {
        let message = AgentMessage {
            kind: value["type"].as_str().unwrap_or_default().to_owned(),
            subtype: value["subtype"].as_str().map(str::to_owned),
            uuid: value["uuid"].as_str().map(str::to_owned),
            session_id: Some(self.session_id.clone()),
            raw: value.to_string(),
        };
        self.events.send(AgentEvent::Message(message)).await.is_ok()
    }

    /// Emits one word's `stream_event`. It is built as text rather than as a JSON value because
    /// it is the demo's hot path (one per word) and benchmarks should measure the gateway, not
    /// the demo; the line is the same JSON `stream()` would give.
    async fn emit_delta(&self, piece: &str) -> bool {
        let uuid = uuid::Uuid::new_v4();
        let message = AgentMessage {
            kind: "stream_event".to_owned(),
            subtype: None,
            uuid: Some(uuid.to_string()),
            session_id: Some(self.session_id.clone()),
            raw: delta_line(&self.session_id, &uuid, piece),
        };
        self.events.send(AgentEvent::Message(message)).await.is_ok()
    }

    async fn turn(
        &mut self,
        prompt: &Content,
        input: &mut mpsc::Receiver<AgentInput>,
        pending: &mut std::collections::VecDeque<AgentInput>,
    ) -> TurnEnd {
        let started = Instant::now();
        self.turns += 1;
        let sid = self.session_id.clone();
        let msg_id = format!("msg_demo_{}", uuid::Uuid::new_v4().simple());
        self.emit(json!({
            "type": "system", "subtype": "init", "session_id": sid, "uuid": uuid::Uuid::new_v4(),
            "model": self.model, "tools": [], "permissionMode": self.permission_mode, "apiKeySource": "none",
            "claude_code_version": "demo",
        }))
        .await;
        self.emit(stream(
            &sid,
            json!({"type": "message_start", "message": {"id": msg_id, "model": self.model}}),
        ))
        .await;
        let reply = format!("Echo: {} (turn {})", describe(prompt), self.turns);
        let words: Vec<&str> = reply.split(' ').collect();
        let mut said = String::with_capacity(reply.len());
        let mut end = TurnEnd::Completed;
        for (i, word) in words.iter().enumerate() {
            let piece = if i + 1 < words.len() {
                format!("{word} ")
            } else {
                (*word).to_owned()
            };
            if let Some(e) = check_input(input, pending) {
                end = e;
                break;
            }
            said.push_str(&piece);
            if !self.emit_delta(&piece).await {
                return TurnEnd::Closed;
            }
            if i == 0
                && let Some(e) = self.wait_at_gate(input, pending).await
            {
                end = e;
                break;
            }
            if !self.word_delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(self.word_delay) => {}
                    got = input.recv() => match got {
                        Some(AgentInput::Interrupt) => { end = TurnEnd::Interrupted; break; }
                        Some(AgentInput::Permission { .. } | AgentInput::PermissionTimedOut { .. }) => {}
                        Some(later) => pending.push_back(later),
                        None => { end = TurnEnd::Closed; break; }
                    }
                }
            }
        }
        let interrupted = !matches!(end, TurnEnd::Completed);
        let output_tokens = said.split_whitespace().count();
        let input_tokens = prompt.text().split_whitespace().count();
        let mut assistant = json!({
            "type": "assistant", "session_id": sid, "uuid": uuid::Uuid::new_v4(), "parent_tool_use_id": null,
            "message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": self.model,
                "content": [{"type": "text", "text": said}],
                "stop_reason": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
            },
        });
        if interrupted {
            assistant["aborted"] = json!(true);
        }
        self.emit(assistant).await;
        if interrupted {
            self.emit(json!({
                "type": "user", "session_id": sid, "uuid": uuid::Uuid::new_v4(),
                "message": {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]},
            }))
            .await;
        }
        self.emit(stream(
            &sid,
            json!({"type": "content_block_stop", "index": 0}),
        ))
        .await;
        self.emit(stream(&sid, json!({"type": "message_stop"})))
            .await;
        self.cumulative_cost += COST_PER_TURN_USD;
        let duration_ms = started.elapsed().as_millis() as u64;
        let usage = json!({"input_tokens": input_tokens, "output_tokens": output_tokens});
        let result = if interrupted {
            json!({
                "type": "result", "subtype": "error_during_execution", "is_error": true, "session_id": sid,
                "uuid": uuid::Uuid::new_v4(), "num_turns": 1, "duration_ms": duration_ms, "duration_api_ms": 0,
                "total_cost_usd": self.cumulative_cost, "stop_reason": null, "terminal_reason": "aborted_streaming",
                "usage": usage, "errors": [],
            })
        } else {
            json!({
                "type": "result", "subtype": "success", "is_error": false, "result": reply, "session_id": sid,
                "uuid": uuid::Uuid::new_v4(), "num_turns": 1, "duration_ms": duration_ms, "duration_api_ms": 0,
                "total_cost_usd": self.cumulative_cost, "stop_reason": "end_turn", "terminal_reason": "completed",
                "usage": usage,
            })
        };
        if !self.emit(result).await {
            return TurnEnd::Closed;
        }
        end
    }
}

impl DemoAgent {
    /// With a gate, waits until this turn's gate file exists; an interrupt or a closed input
    /// ends the wait and the turn.
    async fn wait_at_gate(
        &self,
        input: &mut mpsc::Receiver<AgentInput>,
        pending: &mut std::collections::VecDeque<AgentInput>,
    ) -> Option<TurnEnd> {
        let (dir, agent_id) = self.gate.as_ref()?;
        let file = dir.join(format!("{agent_id}.{}", self.turns));
        while !tokio::fs::try_exists(&file).await.unwrap_or(false) {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                got = input.recv() => match got {
                    Some(AgentInput::Interrupt) => return Some(TurnEnd::Interrupted),
                    Some(AgentInput::Permission { .. } | AgentInput::PermissionTimedOut { .. }) => {}
                    Some(later) => pending.push_back(later),
                    None => return Some(TurnEnd::Closed),
                }
            }
        }
        None
    }
}

/// Takes inputs that arrived without waiting: an interrupt ends the turn, a permission
/// answer is ignored (the demo never asks), anything else waits for the turn to end.
fn check_input(
    input: &mut mpsc::Receiver<AgentInput>,
    pending: &mut std::collections::VecDeque<AgentInput>,
) -> Option<TurnEnd> {
    loop {
        match input.try_recv() {
            Ok(AgentInput::Interrupt) => return Some(TurnEnd::Interrupted),
            Ok(AgentInput::Permission { .. } | AgentInput::PermissionTimedOut { .. }) => {}
            Ok(later) => pending.push_back(later),
            Err(mpsc::error::TryRecvError::Empty) => return None,
            Err(mpsc::error::TryRecvError::Disconnected) => return Some(TurnEnd::Closed),
        }
    }
}

/// The `stream_event` line of one word, as text.
fn delta_line(session_id: &str, uuid: &uuid::Uuid, piece: &str) -> String {
    let text = serde_json::to_string(piece).expect("a string serializes");
    format!(
        r#"{{"event":{{"delta":{{"text":{text},"type":"text_delta"}},"index":0,"type":"content_block_delta"}},"parent_tool_use_id":null,"session_id":"{session_id}","type":"stream_event","uuid":"{uuid}"}}"#
    )
}

fn stream(session_id: &str, event: serde_json::Value) -> serde_json::Value {
    json!({
        "type": "stream_event", "session_id": session_id, "uuid": uuid::Uuid::new_v4(),
        "parent_tool_use_id": null, "event": event,
    })
}

/// The turn's content as the demo echoes it: its text, then `[<media type> <size> bytes]` per
/// image, so a client can see which images reached the agent.
fn describe(prompt: &Content) -> String {
    let text = prompt.text();
    let images = prompt
        .images()
        .into_iter()
        .map(|(media_type, bytes)| format!("[{media_type} {bytes} bytes]"));
    std::iter::once(text.into_owned())
        .filter(|t| !t.is_empty())
        .chain(images)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_line_is_the_stream_event_json() {
        let uuid = uuid::Uuid::new_v4();
        let piece = "say \"hi\" ";
        let line: serde_json::Value =
            serde_json::from_str(&delta_line("s-1", &uuid, piece)).unwrap();
        let mut expected = stream(
            "s-1",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}),
        );
        expected["uuid"] = json!(uuid);
        assert_eq!(line, expected);
    }
}
