//! Unit tests of the cluster bus.

use super::*;
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
        assert_eq!(read.acting(), (&alice, &bob));
        let (to, back) = read.command(LIMITS).ok().unwrap();
        assert_eq!(to, agent_id);
        assert_eq!(asked(&agent_id, back), asked(&agent_id, command));
    }
}
