//! The messages between nodes as they go over the bus: a forwarded command ([`Forward`], with
//! the mark a schedule's or a "continue" turn's chat carries) and the owning node's [`Answer`],
//! what each is checked for as it is read, and the subjects they are sent on.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::protocol::{self, AgentId, DecodeLimits, ErrorCode, MAX_PRINCIPAL_BYTES, Principal};
use crate::session::Command;
use crate::session::SessionError;
use crate::store::{NewMessage, RowId};

/// A command forwarded to the node that runs its conversation, as it goes over the bus: the
/// principal it acts for and the command as the client frame it mirrors (for a schedule's run,
/// with the status that marks it), read there as this node reads a socket's frame.
#[derive(Serialize, Deserialize)]
pub(super) struct Forward {
    principal: Principal,
    /// Who sent the command (the owner, or a principal it is shared with); the owner when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sender: Option<Principal>,
    frame: Box<RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    marker: Option<Marker>,
}

impl Forward {
    /// `command` for conversation `agent_id` of `principal`, as it is sent.
    pub(super) fn new(
        principal: &Principal,
        sender: &Principal,
        agent_id: &AgentId,
        command: &Command,
    ) -> Self {
        let marker = match command {
            Command::Chat { marker, .. } => marker.as_deref().map(Marker::of),
            _ => None,
        };
        let frame = command.clone().into_frame(agent_id.clone());
        Forward {
            principal: principal.to_owned(),
            sender: (sender != principal).then(|| sender.to_owned()),
            frame: serde_json::value::to_raw_value(&frame).expect("frames serialize"),
            marker,
        }
    }

    /// The principal whose conversation it is for, and who sent it.
    pub(super) fn acting(&self) -> (&Principal, &Principal) {
        (
            &self.principal,
            self.sender.as_ref().unwrap_or(&self.principal),
        )
    }

    /// Whether what it names is what a node sends: a principal of an accepted length, and a
    /// marker whose payload is a JSON object.
    pub(super) fn is_sound(&self) -> bool {
        let sound = |p: &Principal| (1..=MAX_PRINCIPAL_BYTES).contains(&p.len());
        sound(&self.principal)
            && self.sender.as_ref().is_none_or(sound)
            && self.marker.as_ref().is_none_or(Marker::is_object)
    }

    /// The command it carries and that command's conversation, once its frame reads as a
    /// client's command frame of a kind that is forwarded (a fork never is: it runs on the node
    /// that got it, from the store); else the answer refusing it.
    pub(super) fn command(&self, limits: DecodeLimits) -> Result<(AgentId, Command), Answer> {
        let frame = protocol::decode(self.frame.get(), limits)
            .map_err(|err| Answer::from_error(err.into()))?;
        match Command::from_frame(frame) {
            None => Err(Answer::Error {
                code: ErrorCode::BadFrame,
                message: "only chat, interrupt, permission_response and rewind are forwarded"
                    .into(),
            }),
            Some((agent_id, Command::Chat { chat, .. })) => {
                let marker = self.marker.clone().map(|m| Box::new(m.into_message()));
                Ok((agent_id, Command::Chat { chat, marker }))
            }
            Some(forwarded) => Ok(forwarded),
        }
    }
}

/// The `status` stored just before a forwarded chat's user message, as it goes over the bus.
#[derive(Clone, Serialize, Deserialize)]
struct Marker {
    payload: String,
    title: Option<String>,
    schedule_id: Option<String>,
}

impl Marker {
    /// The marker of a stored `status` message.
    fn of(message: &NewMessage) -> Self {
        Marker {
            payload: message.payload.clone(),
            title: message.title.clone(),
            schedule_id: message.schedule_id.clone(),
        }
    }

    /// The `status` message it marks a chat with.
    fn into_message(self) -> NewMessage {
        let mut message = NewMessage::new("status", self.payload);
        message.title = self.title;
        message.schedule_id = self.schedule_id;
        message
    }

    /// Whether its payload is a JSON object, as every stored `status` payload must be.
    fn is_object(&self) -> bool {
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&self.payload).is_ok()
    }
}

/// The owner's answer to a forwarded command.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub(in crate::session) enum Answer {
    /// A chat was stored and queued.
    Chat { seq: i64, queue_position: usize },
    /// An interrupt was handled.
    Interrupt {
        was_running: bool,
        #[serde(default)]
        cancelled_wait: bool,
    },
    /// A permission answer was taken.
    Done,
    /// A rewind stored this status frame.
    Rewound {
        seq: Option<i64>,
        message_type: String,
        text: String,
    },
    /// The command failed.
    Error { code: ErrorCode, message: String },
}

impl Answer {
    pub(in crate::session) fn from_error(err: SessionError) -> Self {
        Answer::Error {
            code: err.code,
            message: err.message,
        }
    }

    /// The error this answer carries, as the frame's own.
    pub(in crate::session) fn into_error(self) -> SessionError {
        match self {
            Answer::Error { code, message } => SessionError::new(code, message),
            other => SessionError::new(
                ErrorCode::BackendUnavailable,
                format!("the owning node answered {other:?}"),
            ),
        }
    }
}

/// Nobody answers for the node a command was meant for: it is gone.
pub(in crate::session) struct NoOwner;

/// The subject of a conversation's published frames.
pub(super) fn frames_subject(row: RowId) -> String {
    format!("agentmux.frames.{}", row.0)
}

/// The subject of a node's commands: its name in hex, as a name may hold `.`.
pub(super) fn node_subject(node: &str) -> String {
    format!("agentmux.node.{}", hex::encode(node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ClientFrame;

    const LIMITS: DecodeLimits = DecodeLimits {
        max_content_bytes: 1 << 20,
    };

    #[test]
    fn a_forwarded_command_must_name_a_principal_and_carry_a_json_marker() {
        let forward = |principal: &str, payload: Option<&str>| Forward {
            principal: Principal::new(principal),
            sender: None,
            frame: RawValue::from_string("null".into()).unwrap(),
            marker: payload.map(|p| Marker {
                payload: p.into(),
                title: None,
                schedule_id: None,
            }),
        };
        assert!(forward("alice", None).is_sound());
        assert!(forward("alice", Some(r#"{"status":"scheduled"}"#)).is_sound());
        assert!(!forward("alice", Some("not json")).is_sound());
        assert!(!forward("alice", Some(r#"{"a":1,}"#)).is_sound());
        assert!(!forward("alice", Some("[1]")).is_sound());
        assert!(!forward("", None).is_sound());
        assert!(!forward(&"p".repeat(MAX_PRINCIPAL_BYTES + 1), None).is_sound());
        let mut by_nobody = forward("alice", None);
        by_nobody.sender = Some(Principal::new(""));
        assert!(!by_nobody.is_sound());
    }

    /// Only what a node forwards is run: a fork (which runs on the node that got it) and a
    /// frame that is no command are refused alike.
    #[test]
    fn a_fork_or_a_frame_that_is_no_command_is_not_run_when_forwarded() {
        let agent_id = AgentId::parse("x").unwrap();
        let fork = ClientFrame::Fork {
            agent_id: agent_id.clone(),
            new_agent_id: AgentId::parse("y").unwrap(),
            at_seq: None,
        };
        let alice = Principal::new("alice");
        let forward = |frame: String| Forward {
            principal: alice.clone(),
            sender: None,
            frame: RawValue::from_string(frame).unwrap(),
            marker: None,
        };
        let fork = serde_json::to_string(&fork).unwrap();
        for forward in [forward(fork), forward(r#"{"type":"ping"}"#.into())] {
            let Err(Answer::Error { code, message }) = forward.command(LIMITS) else {
                panic!("run");
            };
            assert_eq!(code, ErrorCode::BadFrame);
            assert_eq!(
                message,
                "only chat, interrupt, permission_response and rewind are forwarded"
            );
        }
    }
}
