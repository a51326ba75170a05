//! Requests from an ACP agent: its permission requests relayed to the user and answered with the option the user's decision selects; any other method refused.

use serde_json::{Value, json};

use super::schema::{self, method};
use super::task::{AcpTask, Turn};
use crate::agent::AgentEvent;
use crate::agent::process::Proc;
use crate::protocol::PermissionDecision;

/// JSON-RPC error code for a method the client does not implement.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error code for malformed params.
const INVALID_PARAMS: i64 = -32602;

impl AcpTask {
    /// The option a user's decision selects: allow → `allow_once` (`allow_always` when the
    /// user said always and the agent offers it), deny → `reject_once` (the `always` kinds
    /// when the agent offers only those); none fits → `cancelled`.
    pub(super) fn choose(&self, request_id: &str, decision: &PermissionDecision) -> Option<String> {
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

    pub(super) async fn answer_permission(
        &mut self,
        proc: &mut Proc,
        request_id: &str,
        option: Option<&str>,
    ) {
        let Some((rpc_id, _)) = self.permissions.remove(request_id) else {
            return;
        };
        let answer =
            json!({"jsonrpc": "2.0", "id": rpc_id, "result": schema::permission_outcome(option)});
        let _ = self.send(proc, &answer).await;
    }

    pub(super) async fn on_request(
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
}
