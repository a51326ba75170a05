//! Unit tests of the wire protocol: decoding every client frame kind and building every server frame.

use serde_json::{Value, json};

use super::*;

const LIMITS: DecodeLimits = DecodeLimits {
    max_content_bytes: 1024,
};

fn code(text: &str) -> ErrorCode {
    decode(text, LIMITS).unwrap_err().code
}

/// Numbers in an approved tool input reach the agent as the client wrote them. Found by
/// fuzzing: a long number was read one unit off in its last binary place, so the frame,
/// written out and read again, no longer meant the same.
#[test]
fn numbers_in_an_approved_input_are_kept_exactly() {
    let long = "881111111111111111111111111111111111111111111111111111111111110000000000000000000000015374090981363322423";
    let text = format!(
        r#"{{"type":"permission_response","agent_id":"a","request_id":"4f2c","behavior":"allow","updated_input":{{"n":{long},"f":8.811111111111109e+104}}}}"#
    );
    let frame = decode(&text, LIMITS).unwrap();
    let ClientFrame::PermissionResponse {
        decision:
            PermissionDecision::Allow {
                updated_input: Some(input),
                ..
            },
        ..
    } = &frame
    else {
        panic!("{frame:?}");
    };
    assert_eq!(input["n"].as_f64(), Some(long.parse::<f64>().unwrap()));
    assert_eq!(input["f"].as_f64(), Some(8.811111111111109e104));
    let again = serde_json::to_string(&frame).unwrap();
    assert_eq!(decode(&again, LIMITS).unwrap(), frame);
}

#[test]
fn decodes_every_client_frame() {
    let chat = decode(
        r#"{"type":"chat","agent_id":"a-1","content":"hi","client_msg_id":"c1","options":{"model":"m1"},"extra":1}"#,
        LIMITS,
    )
    .unwrap();
    assert_eq!(
        chat,
        ClientFrame::Chat(Chat {
            agent_id: "a-1".into(),
            content: Content::Text("hi".into()),
            client_msg_id: Some("c1".into()),
            options: ChatOptions {
                model: Some("m1".into()),
                ..ChatOptions::default()
            },
            sender: None,
        })
    );
    assert_eq!(
        decode(r#"{"type":"subscribe","agent_id":"x"}"#, LIMITS).unwrap(),
        ClientFrame::Subscribe {
            agent_id: "x".into(),
            since_seq: 0,
            warm: false,
        }
    );
    assert_eq!(
        decode(r#"{"type":"subscribe","agent_id":"x","warm":true}"#, LIMITS).unwrap(),
        ClientFrame::Subscribe {
            agent_id: "x".into(),
            since_seq: 0,
            warm: true,
        }
    );
    for bad in [r#""yes""#, "1", "[]", "{}"] {
        let err = decode(
            &format!(r#"{{"type":"subscribe","agent_id":"x","warm":{bad}}}"#),
            LIMITS,
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::BadFrame, "{bad}");
        assert_eq!(err.message, "`warm` must be a boolean");
        assert_eq!(err.agent_id.as_deref(), Some("x"));
    }
    assert_eq!(
        decode(r#"{"type":"ping","ts":5}"#, LIMITS).unwrap(),
        ClientFrame::Ping { ts: Some(5.into()) }
    );
    assert_eq!(
        decode(r#"{"type":"rewind","agent_id":"x","to_seq":4}"#, LIMITS).unwrap(),
        ClientFrame::Rewind {
            agent_id: "x".into(),
            to_seq: 4
        }
    );
    assert_eq!(
        decode(
            r#"{"type":"fork","agent_id":"x","new_agent_id":"y"}"#,
            LIMITS
        )
        .unwrap(),
        ClientFrame::Fork {
            agent_id: "x".into(),
            new_agent_id: "y".into(),
            at_seq: None
        }
    );
}

#[test]
fn agent_options_are_checked_one_by_one() {
    let chat = |options: &str| {
        decode(
            &format!(r#"{{"type":"chat","agent_id":"a","content":"hi","options":{options}}}"#),
            LIMITS,
        )
    };
    for bad in [
        r#"{"cwd":"relative/dir"}"#,
        r#"{"cwd":""}"#,
        r#"{"cwd":"/a\nb"}"#,
        r#"{"cwd":7}"#,
        r#"{"system_prompt":""}"#,
        r#"{"system_prompt":"a\u0000b"}"#,
        r#"{"allowed_tools":"Read"}"#,
        r#"{"allowed_tools":["-Read"]}"#,
        r#"{"allowed_tools":["Read,Write"]}"#,
        r#"{"allowed_tools":["Bash(git"]}"#,
        r#"{"disallowed_tools":["Bash(a)(b)"]}"#,
        r#"{"disallowed_tools":[""]}"#,
        r#"{"disallowed_tools":["Bash()"]}"#,
        r#"{"max_turns":0}"#,
        r#"{"max_turns":1001}"#,
        r#"{"max_turns":"3"}"#,
        r#"{"max_turns":2.5}"#,
        r#"{"budget_usd":-1}"#,
        r#"{"budget_usd":"5"}"#,
        r#"{"budget_usd":1e7}"#,
        r#"{"add_dirs":["rel"]}"#,
        r#"{"add_dirs":"/abs"}"#,
        r#"{"auto_continue":"true"}"#,
        r#"{"auto_continue":1}"#,
        r#"{"auto_continue":[true]}"#,
        r#"{"auto_continue":{}}"#,
    ] {
        let err = chat(bad).expect_err(bad);
        assert_eq!(err.code, ErrorCode::InvalidOptions, "{bad}");
    }
    for (text, on) in [("true", Some(true)), ("false", Some(false)), ("null", None)] {
        let ClientFrame::Chat(ok) = chat(&format!(r#"{{"auto_continue":{text}}}"#)).unwrap() else {
            panic!("a chat")
        };
        assert_eq!(ok.options.auto_continue, on, "{text}");
    }
    let too_many: Vec<String> = (0..65).map(|i| format!("\"T{i}\"")).collect();
    assert!(chat(&format!(r#"{{"allowed_tools":[{}]}}"#, too_many.join(","))).is_err());
    let ClientFrame::Chat(ok) = chat(
        r#"{"cwd":"/p","system_prompt":"-x","allowed_tools":["mcp__srv__*","Bash(npm run test:*)"],"disallowed_tools":[],"max_turns":1000,"add_dirs":[]}"#,
    )
    .unwrap() else {
        panic!("a chat")
    };
    assert_eq!(ok.options.system_prompt.as_deref(), Some("-x"));
    assert_eq!(ok.options.disallowed_tools, Some(vec![]));
    assert_eq!(ok.options.max_turns, Some(1000));
}

#[test]
fn launch_options_take_what_a_chat_sets() {
    let stored = LaunchOptions {
        system_prompt: Some("old".into()),
        allowed_tools: vec!["Read".into()],
        max_turns: Some(2),
        ..LaunchOptions::default()
    };
    let chat = ChatOptions {
        allowed_tools: Some(vec![]),
        add_dirs: Some(vec!["/d".into()]),
        ..ChatOptions::default()
    };
    let next = stored.updated(&chat);
    assert_eq!(next.system_prompt.as_deref(), Some("old"));
    assert!(next.allowed_tools.is_empty(), "[] clears");
    assert_eq!(next.max_turns, Some(2));
    assert_eq!(next.add_dirs, ["/d"]);
    assert_eq!(
        chat.launch_options(),
        [LaunchOption::AddDirs],
        "[] sets none"
    );
    assert_eq!(
        next.named(),
        [
            LaunchOption::SystemPrompt,
            LaunchOption::MaxTurns,
            LaunchOption::AddDirs
        ]
    );
    let kept = next.only(&[LaunchOption::MaxTurns].into());
    assert_eq!(kept.named(), [LaunchOption::MaxTurns]);
    assert_eq!(kept.max_turns, Some(2));
}

#[test]
fn bad_rewind_and_fork_frames_have_their_codes() {
    assert_eq!(
        code(r#"{"type":"rewind","agent_id":"x"}"#),
        ErrorCode::InvalidSeq
    );
    assert_eq!(
        code(r#"{"type":"rewind","agent_id":"x","to_seq":"3"}"#),
        ErrorCode::InvalidSeq
    );
    assert_eq!(
        code(r#"{"type":"fork","agent_id":"x","new_agent_id":"x"}"#),
        ErrorCode::InvalidAgentId
    );
    assert_eq!(
        code(r#"{"type":"fork","agent_id":"x","new_agent_id":"y","at_seq":0}"#),
        ErrorCode::InvalidSeq
    );
}

/// A frame's `agent_id` may be the alias of a conversation shared with the client (`~` and 16
/// lowercase letters and digits); nothing else starting with `~` is, and a fork's new
/// conversation is always the client's own key, never an alias.
#[test]
fn a_share_alias_names_a_conversation_but_never_a_new_one() {
    assert_eq!(
        decode(
            r#"{"type":"interrupt","agent_id":"~permissimodelava"}"#,
            LIMITS
        )
        .unwrap(),
        ClientFrame::Interrupt {
            agent_id: "~permissimodelava".into()
        }
    );
    for bad in ["~short", "~Permissimodelava", "~permissimodelavaa", "~"] {
        let frame = json!({"type": "interrupt", "agent_id": bad}).to_string();
        assert_eq!(code(&frame), ErrorCode::InvalidAgentId, "{bad}");
    }
    assert_eq!(
        code(r#"{"type":"fork","agent_id":"x","new_agent_id":"~permissimodelava"}"#),
        ErrorCode::InvalidAgentId
    );
}

/// A permission mode is decoded by its form only (the agent knows its own ids): CLI names
/// and other agents' ids pass, flag-like, path-like, overlong or odd ones don't.
#[test]
fn permission_modes_are_checked_by_form() {
    let chat = |mode: Value| {
        let frame = json!({"type": "chat", "agent_id": "a", "content": "hi",
            "client_msg_id": "m", "options": {"permission_mode": mode}});
        decode(&frame.to_string(), LIMITS)
    };
    let m64 = "m".repeat(MAX_MODE_CHARS);
    for good in [
        "acceptEdits",
        "yolo",
        "autoEdit",
        "read-only",
        "full_access",
        "v2.mode:x",
        &m64,
    ] {
        let Ok(ClientFrame::Chat(ok)) = chat(json!(good)) else {
            panic!("{good} decodes");
        };
        assert_eq!(ok.options.permission_mode.as_deref(), Some(good));
    }
    let m65 = "m".repeat(MAX_MODE_CHARS + 1);
    let bad = [
        json!("-x"),
        json!("--dangerously-skip-permissions"),
        json!(".hidden"),
        json!("_x"),
        json!("../x"),
        json!("a/b"),
        json!("a b"),
        json!("plan\n"),
        json!("mod\u{e9}"),
        json!(""),
        json!(m65),
        json!(7),
        json!(["plan"]),
    ];
    for bad in bad {
        let err = chat(bad.clone()).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidOptions, "{bad}");
        assert_eq!(err.agent_id.as_deref(), Some("a"));
        assert_eq!(err.client_msg_id.as_deref(), Some("m"));
    }
}

#[test]
fn options_agent_is_a_plain_name() {
    let chat = |agent: &str| {
        let frame = json!({"type": "chat", "agent_id": "a", "content": "hi",
            "options": {"agent": serde_json::from_str::<Value>(agent).unwrap()}});
        decode(&frame.to_string(), LIMITS)
    };
    let Ok(ClientFrame::Chat(ok)) = chat("\"codex-acp\"") else {
        panic!("a plain name decodes");
    };
    assert_eq!(ok.options.agent.as_deref(), Some("codex-acp"));
    let long = format!("\"{}\"", "a".repeat(MAX_AGENT_NAME_CHARS + 1));
    let bad = [
        "\"\"", "\"../x\"", "\"-x\"", "\".x\"", "\"a/b\"", "\"a b\"", "7", "[]",
    ];
    for bad in bad.iter().copied().chain([long.as_str()]) {
        let err = chat(bad).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidOptions, "{bad}");
        assert_eq!(err.agent_id.as_deref(), Some("a"));
    }
}

#[test]
fn serialized_client_frames_decode_to_themselves() {
    let frames = [
        ClientFrame::Chat(Chat {
            agent_id: "a".into(),
            content: Content::Text("hi".into()),
            client_msg_id: Some("c".into()),
            options: ChatOptions {
                model: Some("m".into()),
                permission_mode: Some("plan".into()),
                cwd: Some("/srv/project".into()),
                system_prompt: Some("-- be brief".into()),
                allowed_tools: Some(vec!["Read".into(), "Bash(git log:*)".into()]),
                disallowed_tools: Some(vec![]),
                max_turns: Some(3),
                add_dirs: Some(vec!["/srv/other".into()]),
                agent: Some("gemini".into()),
                worktree: Some(Box::new(WorktreeOption::From {
                    base: Some("main".into()),
                    branch: None,
                })),
                budget_usd: Some(Box::new(Usd(2.5))),
                auto_continue: Some(true),
            },
            sender: None,
        }),
        ClientFrame::Chat(Chat {
            agent_id: "a".into(),
            content: Content::Text("hi".into()),
            client_msg_id: None,
            options: ChatOptions::default(),
            sender: None,
        }),
        ClientFrame::Interrupt {
            agent_id: "a".into(),
        },
        ClientFrame::Ping { ts: Some(7.into()) },
        ClientFrame::Ping { ts: None },
        ClientFrame::Subscribe {
            agent_id: "a".into(),
            since_seq: 4,
            warm: false,
        },
        ClientFrame::Subscribe {
            agent_id: "a".into(),
            since_seq: 0,
            warm: true,
        },
        ClientFrame::Unsubscribe {
            agent_id: "a".into(),
        },
        ClientFrame::PermissionResponse {
            agent_id: "a".into(),
            request_id: "r".into(),
            decision: PermissionDecision::Allow {
                updated_input: Some(serde_json::json!({"command": "ls"})),
                always: false,
            },
        },
        ClientFrame::PermissionResponse {
            agent_id: "a".into(),
            request_id: "r".into(),
            decision: PermissionDecision::Allow {
                updated_input: None,
                always: true,
            },
        },
        ClientFrame::PermissionResponse {
            agent_id: "a".into(),
            request_id: "r".into(),
            decision: PermissionDecision::Deny {
                message: "no".into(),
            },
        },
        ClientFrame::Rewind {
            agent_id: "a".into(),
            to_seq: 3,
        },
        ClientFrame::Fork {
            agent_id: "a".into(),
            new_agent_id: "b".into(),
            at_seq: Some(3),
        },
        ClientFrame::Fork {
            agent_id: "a".into(),
            new_agent_id: "b".into(),
            at_seq: None,
        },
    ];
    for frame in frames {
        let text = serde_json::to_string(&frame).unwrap();
        assert_eq!(decode(&text, LIMITS).unwrap(), frame, "{text}");
    }
}

#[test]
fn control_frames_have_their_fields() {
    let tag = Tag {
        agent_id: "a",
        session_id: "s",
    };
    let v: Value = serde_json::from_str(ack_frame(tag, None, 3, 1).text.as_str()).unwrap();
    assert_eq!(v["message_type"], "ack");
    assert_eq!(v["client_msg_id"], Value::Null);
    assert_eq!(
        (v["seq"].as_i64(), v["queue_position"].as_i64()),
        (Some(3), Some(1))
    );
    let err = FrameError::new(ErrorCode::UnknownAgent, "no such agent").for_agent(Some("a"));
    let v: Value = serde_json::from_str(error_frame(&err).text.as_str()).unwrap();
    assert_eq!(v["code"], "unknown_agent");
    assert_eq!(v["agent_id"], "a");
    assert!(v.get("client_msg_id").is_none());
    let v: Value = serde_json::from_str(status_frame(tag, "idle", "done").text.as_str()).unwrap();
    assert_eq!(
        (&v["status"], &v["session_id"]),
        (&"idle".into(), &"s".into())
    );
    let v: Value = serde_json::from_str(pong_frame(Some(&5.into())).text.as_str()).unwrap();
    assert_eq!((&v["message_type"], &v["ts"]), (&"pong".into(), &5.into()));
}

#[test]
fn every_bad_input_has_its_code() {
    assert_eq!(code("not json"), ErrorCode::BadFrame);
    assert_eq!(code("[1,2]"), ErrorCode::BadFrame);
    assert_eq!(code(r#"{"agent_id":"a"}"#), ErrorCode::BadFrame);
    assert_eq!(code(r#"{"type":7}"#), ErrorCode::BadFrame);
    assert_eq!(
        code(r#"{"type":"dance","agent_id":"a"}"#),
        ErrorCode::UnknownType
    );
    assert_eq!(
        code(r#"{"type":"chat","content":"x"}"#),
        ErrorCode::InvalidAgentId
    );
    assert_eq!(
        code(r#"{"type":"chat","agent_id":"a b","content":"x"}"#),
        ErrorCode::InvalidAgentId
    );
    assert_eq!(
        code(r#"{"type":"chat","agent_id":5,"content":"x"}"#),
        ErrorCode::InvalidAgentId
    );
    let long = "a".repeat(129);
    assert_eq!(
        code(&format!(
            r#"{{"type":"chat","agent_id":"{long}","content":"x"}}"#
        )),
        ErrorCode::InvalidAgentId
    );
    assert_eq!(
        code(r#"{"type":"chat","agent_id":"a","content":"  "}"#),
        ErrorCode::InvalidContent
    );
    assert_eq!(
        code(r#"{"type":"chat","agent_id":"a","content":3}"#),
        ErrorCode::InvalidContent
    );
    let big = "x".repeat(1025);
    assert_eq!(
        code(&format!(
            r#"{{"type":"chat","agent_id":"a","content":"{big}"}}"#
        )),
        ErrorCode::InvalidContent
    );
    assert_eq!(
        code(
            r#"{"type":"chat","agent_id":"a","content":"x","options":{"model":"--dangerously-skip-permissions"}}"#
        ),
        ErrorCode::InvalidOptions
    );
    assert_eq!(
        code(r#"{"type":"chat","agent_id":"a","content":"x","options":{"model":"../../etc"}}"#),
        ErrorCode::InvalidOptions
    );
    assert_eq!(
        code(r#"{"type":"chat","agent_id":"a","content":"x","options":{"workdir":"/"}}"#),
        ErrorCode::InvalidOptions
    );
    assert_eq!(
        code(r#"{"type":"subscribe","agent_id":"a","since_seq":-1}"#),
        ErrorCode::BadFrame
    );
}

#[test]
fn errors_echo_agent_and_client_msg_id() {
    let err = decode(
        r#"{"type":"chat","agent_id":"a","content":"","client_msg_id":"m"}"#,
        LIMITS,
    )
    .unwrap_err();
    assert_eq!(err.agent_id.as_deref(), Some("a"));
    assert_eq!(err.client_msg_id.as_deref(), Some("m"));
}

#[test]
fn session_frames_splice_payloads() {
    let tag = Tag {
        agent_id: "a",
        session_id: "s",
    };
    let f = session_frame(
        tag,
        "assistant",
        Some(3),
        "t",
        r#"{"type":"assistant"}"#,
        None,
    );
    let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
    assert_eq!(v["message"]["type"], "assistant");
    assert_eq!(v["seq"], 3);
    assert!(v.get("turn_cost_usd").is_none());
    let f = session_frame(
        tag,
        "result",
        Some(5),
        "t",
        r#"{"type":"result"}"#,
        Some(0.25),
    );
    let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
    assert_eq!(v["turn_cost_usd"], 0.25);
    let f = session_frame(
        tag,
        "status",
        Some(4),
        "t",
        r#"{"status":"rewound","dropped_after_seq":2}"#,
        None,
    );
    let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
    assert_eq!(v["status"], "rewound");
    assert_eq!(v["dropped_after_seq"], 2);
    assert_eq!(v["agent_id"], "a");
    // Ids with escapes and characters of every width come out as they went in.
    let agent_id = "ä \"q\" \\ ☃\u{1F600}\n";
    let tag = Tag {
        agent_id,
        session_id: "s",
    };
    let f = session_frame(tag, "user", Some(1), "t", r#"{"type":"user"}"#, None);
    let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
    assert_eq!(
        (v["agent_id"].as_str(), &v["message"]),
        (Some(agent_id), &serde_json::json!({"type": "user"}))
    );
}

#[test]
fn spliced_payloads_never_set_header_keys() {
    use serde_json::json;
    let tag = Tag {
        agent_id: "a",
        session_id: "s",
    };
    for payload in [
        r#"{"status":"x","agent_id":"victim","session_id":"v","seq":99,"message_type":"result","timestamp":"z","turn_cost_usd":9}"#,
        r#"{"status":"x","agent_\u0069d":"victim","s\u0065q":99}"#,
    ] {
        let f = session_frame(tag, "status", Some(4), "t", payload, None);
        let text = f.text.as_str();
        assert!(!text.contains("turn_cost_usd"), "{text}");
        for key in ["message_type", "agent_id", "session_id", "seq", "timestamp"] {
            assert_eq!(
                text.matches(&format!("\"{key}\"")).count(),
                1,
                "{key}: {text}"
            );
        }
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            (
                &v["agent_id"],
                &v["session_id"],
                &v["seq"],
                &v["message_type"]
            ),
            (&json!("a"), &json!("s"), &json!(4), &json!("status")),
        );
        assert_eq!(v["timestamp"], "t");
        assert_eq!(v["status"], "x");
    }
    // Our own payloads are spliced verbatim.
    let f = session_frame(
        tag,
        "status",
        Some(6),
        "t",
        r#"{"status":"rewound","dropped_after_seq":2}"#,
        None,
    );
    assert!(
        f.text
            .as_str()
            .ends_with(r#","status":"rewound","dropped_after_seq":2}"#)
    );
    // Nested keys are the payload's own business.
    let f = session_frame(
        tag,
        "permission_request",
        Some(5),
        "t",
        r#"{"request_id":"r","input":{"seq":1,"agent_id":"b"}}"#,
        None,
    );
    let v: Value = serde_json::from_str(f.text.as_str()).unwrap();
    assert_eq!(v["input"], json!({"seq": 1, "agent_id": "b"}));
    assert_eq!((&v["agent_id"], &v["seq"]), (&json!("a"), &json!(5)));
}

#[test]
fn truncates_on_scalar_values() {
    assert_eq!(truncate_chars("héllo", 2), "hé");
    assert_eq!(truncate_chars("hi", 5), "hi");
}
