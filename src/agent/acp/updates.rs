//! What an ACP agent reports during a turn (`session/update` notifications, then the answer to its prompt) turned into the stream-json shaped messages every backend produces.

use serde_json::{Value, json};

use super::schema::{self, Tool, Update};
use super::task::{AcpTask, Turn};

impl AcpTask {
    pub(super) fn merge_pending(turn: &mut Turn, news: &Tool) {
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
    pub(super) async fn flush(&self, turn: &mut Turn) {
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

    pub(super) async fn on_update(&mut self, params: &Value, turn: &mut Option<Turn>) {
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
            (
                Update::Options {
                    options,
                    mode,
                    models,
                },
                _,
            ) => {
                if mode.is_some() {
                    self.applied_mode = mode;
                }
                self.offered.options = options;
                self.offered.models = models;
                self.learnt.lock().expect("learnt lock").offered = Some(self.offered.clone());
                self.agent_event(params).await;
            }
            _ => self.agent_event(params).await,
        }
    }

    /// The turn's `session/prompt` was answered: store what is left, then its `result`.
    pub(super) async fn end_turn(&mut self, mut turn: Turn, answer: &Value) {
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
