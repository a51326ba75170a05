//! Client frame decoding, checked against docs/protocol.md rather than against the decoder's
//! own validators. Any text either
//! - decodes to a frame of every type the protocol has (chat, interrupt, ping, subscribe,
//!   unsubscribe, watch, unwatch, permission_response, rewind, fork) whose fields are the
//!   input's own, within the documented rules, and which re-encodes to JSON that decodes to
//!   the same frame; or
//! - is refused with one of the documented client error codes, as an `error` frame that is
//!   JSON and echoes only the input's own `agent_id` and `client_msg_id`.
//!
//! Never a panic.

#![no_main]

use agentmux::protocol::{self, DecodeLimits};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

const MAX_CONTENT_BYTES: usize = 256;
const LIMITS: DecodeLimits = DecodeLimits {
    max_content_bytes: MAX_CONTENT_BYTES,
};

/// The codes protocol.md gives for a bad client frame.
const CLIENT_FRAME_CODES: &[&str] = &[
    "bad_frame",
    "unknown_type",
    "invalid_agent_id",
    "invalid_content",
    "invalid_options",
    "invalid_seq",
];
/// A key of the client's own: 1–128 characters of `[A-Za-z0-9._:-]`.
fn agent_id_ok(id: &Value) -> bool {
    id.as_str().is_some_and(|id| {
        (1..=128).contains(&id.chars().count())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
    })
}

/// A frame's `agent_id`: a key of the client's own, or the alias of a conversation shared with
/// the client: `~` and 16 lowercase letters and digits.
fn agent_id_or_alias_ok(id: &Value) -> bool {
    agent_id_ok(id)
        || id.as_str().and_then(|id| id.strip_prefix('~')).is_some_and(|alias| {
            alias.len() == 16
                && alias
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// `model`: `[A-Za-z0-9._:-]{1,64}`, not starting with `-`.
fn model_ok(model: &Value) -> bool {
    model.as_str().is_some_and(|m| {
        (1..=64).contains(&m.chars().count())
            && !m.starts_with('-')
            && m.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
    })
}

/// `permission_mode`: `[A-Za-z0-9._:-]{1,64}`, starting with a letter or digit (which ids
/// exist is the agent's business, not the decoder's).
fn mode_ok(mode: &Value) -> bool {
    mode.as_str().is_some_and(|m| {
        (1..=64).contains(&m.chars().count())
            && m.starts_with(|c: char| c.is_ascii_alphanumeric())
            && m.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c))
    })
}

/// A field the input had, absent and null being the same.
fn given<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// The decoded frame (as JSON) holds the input's own values, within the documented rules.
fn check_accepted(input: &Map<String, Value>, frame: &Map<String, Value>) {
    let ty = frame["type"].as_str().expect("a frame has its type");
    assert_eq!(input.get("type"), Some(&frame["type"]));
    let keys: Vec<&str> = frame.keys().map(String::as_str).collect();
    let allowed: &[&str] = match ty {
        "chat" => &["type", "agent_id", "content", "client_msg_id", "options"],
        "interrupt" | "unsubscribe" => &["type", "agent_id"],
        "ping" => &["type", "ts"],
        "watch" | "unwatch" => &["type"],
        "subscribe" => &["type", "agent_id", "since_seq", "warm"],
        "permission_response" => &[
            "type",
            "agent_id",
            "request_id",
            "behavior",
            "updated_input",
            "message",
        ],
        "rewind" => &["type", "agent_id", "to_seq"],
        "fork" => &["type", "agent_id", "new_agent_id", "at_seq"],
        other => panic!("a frame type protocol.md does not have: {other}"),
    };
    assert!(keys.iter().all(|k| allowed.contains(k)), "{ty}: {keys:?}");
    if !["ping", "watch", "unwatch"].contains(&ty) {
        assert_eq!(input.get("agent_id"), Some(&frame["agent_id"]));
        assert!(agent_id_or_alias_ok(&frame["agent_id"]));
    }
    match ty {
        "chat" => {
            assert_eq!(input.get("content"), Some(&frame["content"]));
            content_follows_the_rules(&frame["content"]);
            assert_eq!(given(input, "client_msg_id"), frame.get("client_msg_id"));
            let asked = given(input, "options").map(|o| o.as_object().expect("an object"));
            let options = frame.get("options").map(|o| o.as_object().unwrap());
            for (key, value) in asked.into_iter().flatten() {
                if value.is_null() {
                    continue;
                }
                assert!(OPTIONS.contains(&key.as_str()), "option {key}");
                assert_eq!(options.and_then(|o| o.get(key)), Some(value));
            }
            if let Some(options) = options {
                for (key, value) in options {
                    match key.as_str() {
                        "model" => assert!(model_ok(value), "{value}"),
                        "permission_mode" => assert!(mode_ok(value), "{value}"),
                        "cwd" => assert!(path_ok(value), "{value}"),
                        "system_prompt" => {
                            let text = value.as_str().unwrap();
                            assert!(!text.is_empty() && text.len() <= 64 << 10);
                            assert!(!text.contains('\0'));
                        }
                        "allowed_tools" | "disallowed_tools" => {
                            let patterns = value.as_array().unwrap();
                            assert!(patterns.len() <= 64);
                            assert!(patterns.iter().all(tool_pattern_ok), "{value}");
                        }
                        "max_turns" => assert!((1..=1000).contains(&value.as_u64().unwrap())),
                        "add_dirs" => {
                            let dirs = value.as_array().unwrap();
                            assert!(dirs.len() <= 16 && dirs.iter().all(path_ok), "{value}");
                        }
                        "agent" => {
                            let name = value.as_str().unwrap();
                            assert!(
                                (1..=64).contains(&name.len()) && !name.starts_with(['-', '.'])
                            );
                            assert!(
                                name.bytes()
                                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                            );
                        }
                        other => panic!("option {other}"),
                    }
                    assert_eq!(asked.and_then(|a| a.get(key)), Some(value));
                }
            }
        }
        "ping" => assert_eq!(input.get("ts"), frame.get("ts")),
        "subscribe" => {
            let since = frame["since_seq"].as_i64().expect("an integer");
            match given(input, "since_seq") {
                None => assert_eq!(since, 0),
                Some(asked) => assert_eq!(asked.as_i64(), Some(since)),
            }
            assert!(since >= 0);
            // `warm` is serialized only when true, and only when the input asked for it.
            match given(input, "warm") {
                Some(asked) => {
                    assert!(asked.is_boolean());
                    assert_eq!(frame.get("warm").is_some(), asked == &Value::Bool(true));
                }
                None => assert!(frame.get("warm").is_none()),
            }
            assert!(frame.get("warm").is_none_or(|w| w == &Value::Bool(true)));
        }
        "permission_response" => {
            let id = frame["request_id"].as_str().unwrap();
            assert_eq!(input.get("request_id"), Some(&frame["request_id"]));
            assert!(!id.is_empty());
            assert_eq!(input.get("behavior"), Some(&frame["behavior"]));
            match frame["behavior"].as_str() {
                Some("allow") => {
                    assert!(frame.get("message").is_none());
                    assert_eq!(given(input, "updated_input"), frame.get("updated_input"));
                    assert!(frame.get("updated_input").is_none_or(Value::is_object));
                }
                Some("deny") => {
                    assert!(frame.get("updated_input").is_none());
                    let message = frame["message"].as_str().expect("a deny has a message");
                    match given(input, "message") {
                        Some(asked) => assert_eq!(asked, &frame["message"]),
                        None => assert!(!message.is_empty()),
                    }
                }
                other => panic!("behavior {other:?}"),
            }
        }
        "rewind" => {
            assert_eq!(input.get("to_seq"), Some(&frame["to_seq"]));
            assert!(frame["to_seq"].as_i64().is_some_and(|n| n > 0));
        }
        "fork" => {
            assert_eq!(input.get("new_agent_id"), Some(&frame["new_agent_id"]));
            assert!(agent_id_ok(&frame["new_agent_id"]));
            assert_ne!(frame["new_agent_id"], frame["agent_id"]);
            assert_eq!(given(input, "at_seq"), frame.get("at_seq"));
            if let Some(at) = frame.get("at_seq") {
                assert!(at.as_i64().is_some_and(|n| n > 0));
            }
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let input: Option<Value> = serde_json::from_str(text).ok();
    match protocol::decode(text, LIMITS) {
        Ok(frame) => {
            let input = input.expect("only JSON decodes");
            let input = input.as_object().expect("only an object decodes");
            let encoded = serde_json::to_value(&frame).expect("frames serialize");
            check_accepted(input, encoded.as_object().expect("a frame is an object"));
            let again = protocol::decode(&encoded.to_string(), LIMITS)
                .expect("a decoded frame re-encodes to a frame");
            assert_eq!(again, frame, "the re-encoded frame means the same");
        }
        Err(err) => {
            let code = err.code.as_str();
            assert!(CLIENT_FRAME_CODES.contains(&code), "{code}");
            match &input {
                None => assert_eq!(code, "bad_frame", "not JSON"),
                Some(v) if !v.is_object() => assert_eq!(code, "bad_frame", "not an object"),
                Some(v) if !v["type"].is_string() => assert_eq!(code, "bad_frame", "no type"),
                _ => {}
            }
            let frame = protocol::error_frame(&err);
            let value: Value =
                serde_json::from_str(frame.text.as_str()).expect("error frames are JSON");
            assert_eq!(value["message_type"], "error");
            assert_eq!(value["code"], code);
            assert!(value["error"].as_str().is_some_and(|e| !e.is_empty()));
            assert!(value["timestamp"].is_string());
            let input = input.as_ref().and_then(Value::as_object);
            for echoed in ["agent_id", "client_msg_id"] {
                if let Some(v) = value.get(echoed) {
                    assert!(v.is_string(), "{echoed}: {v}");
                    assert_eq!(input.and_then(|i| i.get(echoed)), Some(v), "{echoed}");
                }
            }
        }
    }
});

/// protocol.md's rules for `chat.content`: a non-blank string of at most `max_content_bytes`,
/// or 1–64 `text`/`image` blocks with no other fields, at most 20 images of the four media
/// types in base64, text within `max_content_bytes`, and an image or some non-blank text.
fn content_follows_the_rules(content: &Value) {
    if let Some(text) = content.as_str() {
        assert!(!text.trim().is_empty());
        assert!(text.len() <= MAX_CONTENT_BYTES);
        return;
    }
    let blocks = content.as_array().expect("content is a string or a list");
    assert!((1..=64).contains(&blocks.len()));
    let mut text = Vec::new();
    let mut images = 0;
    for block in blocks {
        let block = block.as_object().expect("a block is an object");
        match block["type"].as_str() {
            Some("text") => {
                assert!(block.keys().all(|k| k == "type" || k == "text"));
                text.push(block["text"].as_str().expect("text is a string"));
            }
            Some("image") => {
                images += 1;
                assert!(block.keys().all(|k| k == "type" || k == "source"));
                let source = block["source"].as_object().expect("source is an object");
                assert!(
                    source
                        .keys()
                        .all(|k| ["type", "media_type", "data"].contains(&k.as_str()))
                );
                assert_eq!(source["type"], "base64");
                assert!(
                    ["image/png", "image/jpeg", "image/gif", "image/webp"]
                        .contains(&source["media_type"].as_str().unwrap())
                );
                let data = source["data"].as_str().unwrap();
                assert!(data.len() % 4 == 0 && !data.is_empty());
                assert!(
                    data.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
                );
            }
            other => panic!("a block type protocol.md does not have: {other:?}"),
        }
    }
    let text = text.join("\n\n");
    assert!(images <= 20);
    assert!(text.len() <= MAX_CONTENT_BYTES);
    assert!(images > 0 || !text.trim().is_empty());
}

/// The options protocol.md lists for a chat.
const OPTIONS: &[&str] = &[
    "model",
    "permission_mode",
    "cwd",
    "system_prompt",
    "allowed_tools",
    "disallowed_tools",
    "max_turns",
    "add_dirs",
    "agent",
];

/// protocol.md's form of a path option: absolute, at most 4096 bytes, no control characters.
fn path_ok(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|p| p.starts_with('/') && p.len() <= 4096 && !p.chars().any(char::is_control))
}

/// protocol.md's form of a tool pattern: a name of letters, digits and `_.*-` starting with a
/// letter, then optionally one `(specifier)` without commas or parentheses; never a flag.
fn tool_pattern_ok(value: &Value) -> bool {
    let Some(p) = value.as_str() else {
        return false;
    };
    let name_end = p.find('(').unwrap_or(p.len());
    let (name, rest) = p.split_at(name_end);
    let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.*-".contains(&b));
    let rest_ok = rest.is_empty()
        || (rest.len() > 2
            && rest.ends_with(')')
            && !rest[1..rest.len() - 1].contains(['(', ')', ',']));
    name_ok && rest_ok && !p.chars().any(char::is_control)
}
