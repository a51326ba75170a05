//! Unit tests of the cluster bus.

use serde_json::value::RawValue;

use super::messages::Marker;
use super::*;
use crate::protocol::MAX_PRINCIPAL_BYTES;
use crate::protocol::{Chat, ChatOptions, ClientFrame, Content, PermissionDecision, SessionId};
use crate::store::NewMessage;

const SECRET: &str = "0123456789abcdef0123456789abcdef";
const LIMITS: DecodeLimits = DecodeLimits {
    max_content_bytes: 1 << 20,
};

/// What a command asks, as the owning node runs it: its frame, and its marker's fields.
type Asked = (
    ClientFrame,
    Option<(String, Option<String>, Option<String>)>,
);

fn asked(agent_id: &AgentId, command: Command) -> Asked {
    let marker = match &command {
        Command::Chat {
            marker: Some(m), ..
        } => Some((m.payload.clone(), m.title.clone(), m.schedule_id.clone())),
        _ => None,
    };
    (command.into_frame(agent_id.clone()), marker)
}

fn conversation() -> Conversation {
    Conversation {
        row: RowId(7),
        agent_id: AgentId::parse("x").unwrap(),
        session_id: SessionId::new(),
        agent: "demo".into(),
        principal: Principal::new("alice"),
        worktree: None,
    }
}

#[test]
fn a_relayed_frame_must_name_its_conversation_and_agree_with_its_headers() {
    let c = conversation();
    let sid = c.session_id.to_string();
    let text = |agent: &str, session: &str, seq: &str| {
        format!(
            r#"{{"message_type":"assistant","agent_id":"{agent}","session_id":"{session}"{seq},"message":{{}}}}"#
        )
    };
    let good = text("x", &sid, r#","seq":3"#);
    let frame = relayed_frame(&c, Some("3"), "assistant", good.as_bytes()).unwrap();
    assert_eq!((frame.seq, frame.kind), (Some(3), "assistant"));
    assert_eq!(frame.text.as_str(), good);
    let relayed = |seq, kind: &str, text: &str| relayed_frame(&c, seq, kind, text.as_bytes());
    assert!(
        relayed(Some("4"), "assistant", &good).is_none(),
        "other seq"
    );
    assert!(relayed(None, "assistant", &good).is_none(), "unstored");
    assert!(relayed(Some("3"), "result", &good).is_none(), "other type");
    assert!(relayed(Some("3"), "assistant", &text("y", &sid, r#","seq":3"#)).is_none());
    let other = SessionId::new().to_string();
    assert!(relayed(Some("3"), "assistant", &text("x", &other, r#","seq":3"#)).is_none());
    let twice = text("x", &sid, r#","seq":3,"agent_id":"y""#);
    assert!(
        relayed(Some("3"), "assistant", &twice).is_none(),
        "a key twice"
    );
    assert!(relayed(Some("3"), "assistant", &good[..good.len() - 1]).is_none());
    assert!(relayed(Some("3"), "assistant", "not json").is_none());
    let unstored = text("x", &sid, "");
    assert!(relayed(None, "assistant", &unstored).is_some());
}

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

/// A command goes over the bus as one message: serialized, sealed by the sending node,
/// opened by the owner, read back to the same command (a schedule's run with its marker);
/// the same message changed on the way is refused.
#[test]
fn a_forwarded_command_comes_back_as_sent_and_a_changed_one_is_refused() {
    let seal = |node: &str| Seal::new(SECRET, node.into(), Metrics::default()).unwrap();
    let (sender, owner) = (seal("a"), seal("b"));
    let agent_id = AgentId::parse("x").unwrap();
    let chat = Chat {
        agent_id: agent_id.clone(),
        content: Content::Text("hello".into()),
        client_msg_id: Some("m-1".into()),
        options: ChatOptions {
            model: Some("sonnet".into()),
            ..ChatOptions::default()
        },
        sender: None,
    };
    let mut marker = NewMessage::new("status", r#"{"status":"scheduled_run"}"#.into());
    marker.title = Some("nightly".into());
    marker.schedule_id = Some("s-1".into());
    let commands = [
        Command::Chat {
            chat: chat.clone(),
            marker: Some(Box::new(marker)),
        },
        Command::Chat { chat, marker: None },
        Command::Interrupt,
        Command::AnswerPermission {
            request_id: "r-1".into(),
            decision: PermissionDecision::Deny {
                message: "no".into(),
            },
        },
        Command::Rewind { to_seq: 4 },
    ];
    let subject = node_subject("b");
    let (alice, bob) = (Principal::new("alice"), Principal::new("bob"));
    for command in commands {
        let sent = Forward::new(&alice, &bob, &agent_id, &command);
        let payload = serde_json::to_vec(&sent).unwrap();
        let (headers, _) = sender.command(&subject, &payload);
        let changed = String::from_utf8(payload.clone())
            .unwrap()
            .replacen("alice", "alicf", 1);
        let refused = owner.open(
            Kind::Command,
            &subject,
            Some(&headers),
            &[],
            changed.as_bytes(),
        );
        assert_eq!(refused.err(), Some(Refusal::Forged));
        let opened = owner.open(Kind::Command, &subject, Some(&headers), &[], &payload);
        assert_eq!(opened.ok().map(|o| o.from), Some("a".to_owned()));
        let read: Forward = serde_json::from_slice(&payload).unwrap();
        assert!(read.is_sound());
        assert_eq!(read.principal, "alice");
        assert_eq!(read.sender.as_ref().map(Principal::as_str), Some("bob"));
        let (to, back) = read.command(LIMITS).ok().unwrap();
        assert_eq!(to, agent_id);
        assert_eq!(asked(&agent_id, back), asked(&agent_id, command));
    }
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
