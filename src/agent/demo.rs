//! The built-in demo agent: no network, no key, deterministic replies.
//!
//! Each turn emits what the Claude CLI emits, in the same shape: a `system`/`init` carrying the
//! conversation id, one `stream_event` text delta per word, one `assistant`, then a `result`
//! with usage and duration. The reply is `Echo: <content> (turn N)`, N counting the user turns
//! the agent remembers (an image in the content is echoed as `[<media type> <size> bytes]`), so resume, rewind and fork can be seen from outside.
//!
//! A testing aid, [`crate::config::DemoOptions::gate_dir`] (`demo.gate_dir`), makes each turn wait after its
//! first word until a file named after the turn exists, so that a test, not the clock, decides
//! how long a turn runs. It is the demo agent's own option, not a setting of the server's.
//!
//! One job, one agent: its options, its backend and its turn (its tests in `demo/tests.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::protocol::{AgentId, Content, LaunchOption};
use async_trait::async_trait;
use serde::Serialize;
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
        // It remembers its turns through the store.
        super::Supports {
            resume: true,
            load: false,
            permissions: false,
            modes: false,
            rewind: true,
            fork: true,
            images: true,
            launch_options: LaunchOption::ALL.into(),
            known: true,
            max_budget: false,
        }
    }

    fn check_options(&self, _model: Option<&str>, mode: Option<&str>) -> Result<(), String> {
        super::check_cli_mode(mode)
    }

    fn unattended_mode(&self, mode: &str) -> bool {
        super::CLI_UNATTENDED_MODES.contains(&mode)
    }

    /// Its two names: it answers the same under either, naming it in the turn's `result`.
    async fn models(&self) -> Vec<super::AgentModel> {
        [(DEFAULT_MODEL, "Demo"), ("demo-2", "Demo 2")]
            .into_iter()
            .map(|(id, name)| super::AgentModel {
                id: id.to_owned(),
                name: Some(name.to_owned()),
                description: Some("Echoes the message, word by word".to_owned()),
            })
            .collect()
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
            delta_tail: delta_tail(&session_id),
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
    /// The end of each word delta's line, after the word (see [`delta_tail`]).
    delta_tail: String,
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

    /// Sends one line with `body` and a fresh uuid: it is serialized once, and its type,
    /// subtype and uuid are known without reading it back.
    async fn emit(&self, body: Body<'_>) -> bool {
        let uuid = new_uuid();
        let line = Line {
            body,
            session_id: &self.session_id,
            uuid: &uuid,
        };
        let message = AgentMessage {
            kind: line.kind().to_owned(),
            subtype: line.subtype().map(str::to_owned),
            raw: serde_json::to_string(&line).expect("a demo line serializes"),
            uuid: Some(uuid),
            session_id: Some(self.session_id.clone()),
        };
        self.events.send(AgentEvent::Message(message)).await.is_ok()
    }

    /// Sends one word's `stream_event`, the word followed by a space unless it is the `last`.
    /// It is the demo's hottest line (one per word), so it is assembled from fixed text around
    /// the word instead of serialized field by field (the tests check it is the CLI's
    /// `content_block_delta` line).
    async fn emit_delta(&self, word: &str, last: bool) -> bool {
        let uuid = new_uuid();
        let text = serde_json::to_string(word).expect("a string serializes");
        let mut raw = String::with_capacity(
            DELTA_HEAD.len() + text.len() + self.delta_tail.len() + uuid.len() + 4,
        );
        raw.push_str(DELTA_HEAD);
        // The word's string, with the space inside its closing quote.
        raw.push_str(&text[..text.len() - 1]);
        if !last {
            raw.push(' ');
        }
        for part in ["\"", &self.delta_tail, &uuid, "\"}"] {
            raw.push_str(part);
        }
        let message = AgentMessage {
            kind: "stream_event".to_owned(),
            subtype: None,
            uuid: Some(uuid),
            session_id: Some(self.session_id.clone()),
            raw,
        };
        self.events.send(AgentEvent::Message(message)).await.is_ok()
    }

    /// Sends one `stream_event` line.
    async fn emit_stream(&self, event: StreamEvent<'_>) -> bool {
        self.emit(Body::StreamEvent {
            parent_tool_use_id: None,
            event,
        })
        .await
    }

    async fn turn(
        &mut self,
        prompt: &Content,
        input: &mut mpsc::Receiver<AgentInput>,
        pending: &mut std::collections::VecDeque<AgentInput>,
    ) -> TurnEnd {
        let started = Instant::now();
        self.turns += 1;
        let msg_id = format!("msg_demo_{}", uuid::Uuid::new_v4().simple());
        self.emit(Body::System {
            subtype: "init",
            model: &self.model,
            tools: [],
            permission_mode: &self.permission_mode,
            api_key_source: "none",
            claude_code_version: "demo",
        })
        .await;
        self.emit_stream(StreamEvent::MessageStart {
            message: MessageStart {
                id: &msg_id,
                model: &self.model,
            },
        })
        .await;
        let reply = format!("Echo: {} (turn {})", describe(prompt), self.turns);
        let words: Vec<&str> = reply.split(' ').collect();
        let mut said = String::with_capacity(reply.len());
        let mut end = TurnEnd::Completed;
        for (i, word) in words.iter().enumerate() {
            let last = i + 1 == words.len();
            if let Some(e) = check_input(input, pending) {
                end = e;
                break;
            }
            said.push_str(word);
            if !last {
                said.push(' ');
            }
            if !self.emit_delta(word, last).await {
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
        let usage = Usage {
            input_tokens: prompt.text().split_whitespace().count(),
            output_tokens: said.split_whitespace().count(),
        };
        self.emit(Body::Assistant {
            parent_tool_use_id: None,
            message: AssistantMessage {
                id: &msg_id,
                kind: "message",
                role: "assistant",
                model: &self.model,
                content: [Block::Text { text: &said }],
                stop_reason: None,
                usage,
            },
            aborted: interrupted,
        })
        .await;
        if interrupted {
            self.emit(Body::User {
                message: UserMessage {
                    role: "user",
                    content: [Block::Text {
                        text: "[Request interrupted by user]",
                    }],
                },
            })
            .await;
        }
        self.emit_stream(StreamEvent::ContentBlockStop { index: 0 })
            .await;
        self.emit_stream(StreamEvent::MessageStop).await;
        self.cumulative_cost += COST_PER_TURN_USD;
        let (subtype, result, stop_reason, terminal_reason, errors) = if interrupted {
            (
                "error_during_execution",
                None,
                None,
                "aborted_streaming",
                Some([]),
            )
        } else {
            (
                "success",
                Some(reply.as_str()),
                Some("end_turn"),
                "completed",
                None,
            )
        };
        let result = Body::Result(TurnResult {
            subtype,
            is_error: interrupted,
            result,
            num_turns: 1,
            duration_ms: started.elapsed().as_millis() as u64,
            duration_api_ms: 0,
            total_cost_usd: self.cumulative_cost,
            stop_reason,
            terminal_reason,
            usage,
            errors,
        });
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

/// A fresh uuid, as the text every line carries.
fn new_uuid() -> String {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut text)
        .to_owned()
}

/// A word delta's line up to the word's text (see [`DemoAgent::emit_delta`]).
const DELTA_HEAD: &str = r#"{"type":"stream_event","parent_tool_use_id":null,"event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"#;

/// A word delta's line from after the word's text up to its uuid's value.
fn delta_tail(session_id: &str) -> String {
    let session_id = serde_json::to_string(session_id).expect("a string serializes");
    format!(r#"}}}},"session_id":{session_id},"uuid":""#)
}

/// One line of the demo's stdout, in the Claude CLI's shape. It is serialized straight from
/// these types, without a JSON value tree, as the demo runs in every benchmark.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    body: Body<'a>,
    session_id: &'a str,
    uuid: &'a str,
}

impl Line<'_> {
    fn kind(&self) -> &'static str {
        match self.body {
            Body::System { .. } => "system",
            Body::StreamEvent { .. } => "stream_event",
            Body::Assistant { .. } => "assistant",
            Body::User { .. } => "user",
            Body::Result(_) => "result",
        }
    }

    fn subtype(&self) -> Option<&str> {
        match &self.body {
            Body::System { subtype, .. } => Some(subtype),
            Body::Result(result) => Some(result.subtype),
            _ => None,
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Body<'a> {
    System {
        subtype: &'static str,
        model: &'a str,
        tools: [&'static str; 0],
        #[serde(rename = "permissionMode")]
        permission_mode: &'a str,
        #[serde(rename = "apiKeySource")]
        api_key_source: &'static str,
        claude_code_version: &'static str,
    },
    StreamEvent {
        parent_tool_use_id: Option<&'static str>,
        event: StreamEvent<'a>,
    },
    Assistant {
        parent_tool_use_id: Option<&'static str>,
        message: AssistantMessage<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        aborted: bool,
    },
    User {
        message: UserMessage,
    },
    Result(TurnResult<'a>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent<'a> {
    MessageStart { message: MessageStart<'a> },
    ContentBlockStop { index: u32 },
    MessageStop,
}

#[derive(Serialize)]
struct MessageStart<'a> {
    id: &'a str,
    model: &'a str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text { text: &'a str },
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: [Block<'a>; 1],
    stop_reason: Option<&'static str>,
    usage: Usage,
}

#[derive(Serialize)]
struct UserMessage {
    role: &'static str,
    content: [Block<'static>; 1],
}

#[derive(Serialize, Clone, Copy)]
struct Usage {
    input_tokens: usize,
    output_tokens: usize,
}

#[derive(Serialize)]
struct TurnResult<'a> {
    subtype: &'static str,
    is_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a str>,
    num_turns: u32,
    duration_ms: u64,
    duration_api_ms: u64,
    total_cost_usd: f64,
    stop_reason: Option<&'static str>,
    terminal_reason: &'static str,
    usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<[&'static str; 0]>,
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
mod tests;
