//! The control protocol on the CLI's stdin/stdout: the requests agentmux sends (`initialize`,
//! `interrupt`, `set_model`, `set_permission_mode`), the `initialize` handshake, and the
//! answers to the CLI's own requests (`can_use_tool`, anything unsupported).

use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::lines::Line;
use crate::agent::process::Proc;
use crate::protocol::PermissionDecision;

/// The id of the `initialize` request.
const INIT_ID: &str = "init";

/// A control request agentmux sends to the CLI.
#[derive(Debug, Clone, Copy)]
pub(super) enum Request<'a> {
    /// Sent once at start: the CLI is ready when it has answered.
    Initialize,
    /// Stop the running turn; the process stays alive.
    Interrupt,
    /// Run the next turns with this model.
    SetModel(&'a str),
    /// Run the next turns in this permission mode.
    SetPermissionMode(&'a str),
}

/// The `control_request` line for `request`; the CLI's `control_response` carries
/// `request_id` back.
pub(super) fn request(request_id: &str, request: Request<'_>) -> Value {
    let body = match request {
        Request::Initialize => json!({"subtype": "initialize", "hooks": null}),
        Request::Interrupt => json!({"subtype": "interrupt"}),
        Request::SetModel(model) => json!({"subtype": "set_model", "model": model}),
        Request::SetPermissionMode(mode) => {
            json!({"subtype": "set_permission_mode", "mode": mode})
        }
    };
    json!({"type": "control_request", "request_id": request_id, "request": body})
}

/// The answer to the CLI's `can_use_tool` request `request_id`. An `allow` without edits
/// sends back the input the CLI `proposed`.
pub(super) fn permission_answer(
    request_id: &str,
    decision: PermissionDecision,
    proposed: Value,
) -> Value {
    let response = match decision {
        PermissionDecision::Allow { updated_input, .. } => {
            json!({"behavior": "allow", "updatedInput": updated_input.unwrap_or(proposed)})
        }
        PermissionDecision::Deny { message } => json!({"behavior": "deny", "message": message}),
    };
    json!({"type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response}})
}

/// The answer to a CLI request of a `subtype` agentmux does not handle, worded as the CLI
/// words its own.
pub(super) fn unsupported_answer(request_id: &str, subtype: &str) -> Value {
    json!({"type": "control_response", "response": {"subtype": "error", "request_id": request_id,
        "error": format!("Unsupported control request subtype: {subtype}")}})
}

/// Sends `initialize` and waits for its answer: the CLI is then ready. Returns what it
/// answered (its models among other things).
pub(super) async fn initialize(proc: &mut Proc, timeout: Duration) -> Result<Value, String> {
    proc.write(&request(INIT_ID, Request::Initialize))
        .await
        .map_err(|e| format!("cannot write to the CLI: {e}"))?;
    let wait = async {
        loop {
            match proc.stdout.next().await {
                Ok(Some(Line::Text(text))) => {
                    proc.spoke = true;
                    let Ok(mut v) = serde_json::from_str::<Value>(&text) else {
                        continue;
                    };
                    if v["type"] == "control_response" && v["response"]["request_id"] == INIT_ID {
                        return if v["response"]["subtype"] == "success" {
                            Ok(v["response"]["response"].take())
                        } else {
                            Err(format!(
                                "the CLI refused to initialize: {}",
                                v["response"]["error"]
                            ))
                        };
                    }
                }
                Ok(Some(Line::TooLong(_))) => {}
                Ok(None) | Err(_) => return Err(proc.exit_detail().await),
            }
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the CLI did not answer initialize within {timeout:?}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_control_requests_with_their_id() {
        let cases = [
            (
                request("init", Request::Initialize),
                json!({"type": "control_request", "request_id": "init",
                    "request": {"subtype": "initialize", "hooks": null}}),
            ),
            (
                request("interrupt_3", Request::Interrupt),
                json!({"type": "control_request", "request_id": "interrupt_3",
                    "request": {"subtype": "interrupt"}}),
            ),
            (
                request("options_model", Request::SetModel("m-1")),
                json!({"type": "control_request", "request_id": "options_model",
                    "request": {"subtype": "set_model", "model": "m-1"}}),
            ),
            (
                request("options_mode", Request::SetPermissionMode("plan")),
                json!({"type": "control_request", "request_id": "options_mode",
                    "request": {"subtype": "set_permission_mode", "mode": "plan"}}),
            ),
        ];
        for (built, expected) in cases {
            assert_eq!(built, expected);
        }
    }

    /// Whatever a value holds, it stays a JSON string inside one line.
    #[test]
    fn values_are_escaped_into_one_line() {
        let line = request("x", Request::SetModel("a\"b\n\"}, {\"type\": \"user\"")).to_string();
        assert!(!line.contains('\n'));
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["request"]["model"], "a\"b\n\"}, {\"type\": \"user\"");
    }

    #[test]
    fn permission_answers() {
        let proposed = json!({"command": "ls"});
        assert_eq!(
            permission_answer(
                "r1",
                PermissionDecision::Allow {
                    updated_input: None,
                    always: false,
                },
                proposed.clone()
            ),
            json!({"type": "control_response", "response": {"subtype": "success",
                "request_id": "r1", "response": {"behavior": "allow", "updatedInput": {"command": "ls"}}}})
        );
        assert_eq!(
            permission_answer(
                "r2",
                PermissionDecision::Allow {
                    updated_input: Some(json!({"command": "pwd"})),
                    always: false,
                },
                proposed.clone()
            )["response"]["response"]["updatedInput"],
            json!({"command": "pwd"})
        );
        assert_eq!(
            permission_answer(
                "r3",
                PermissionDecision::Deny {
                    message: "no".into()
                },
                proposed
            ),
            json!({"type": "control_response", "response": {"subtype": "success",
                "request_id": "r3", "response": {"behavior": "deny", "message": "no"}}})
        );
    }

    #[test]
    fn unsupported_requests_get_an_error() {
        assert_eq!(
            unsupported_answer("q", "mcp_message"),
            json!({"type": "control_response", "response": {"subtype": "error", "request_id": "q",
                "error": "Unsupported control request subtype: mcp_message"}})
        );
    }
}
