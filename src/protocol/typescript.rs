//! Generates `web/protocol.d.ts` from the protocol's Rust types, and fails when the committed
//! file is stale. Regenerate with `UPDATE_PROTOCOL_TS=1 cargo test --lib protocol`.

use ts_rs::{Config, TS};

use super::{
    AGENT_MESSAGE_TYPES, AckFrame, Activity, ActivityFrame, ChangeCounts, Chat, ChatOptions,
    ClientFrame, Content, ContentBlock, ControlFrame, ErrorCode, ErrorFrame, ImageSource,
    LIVE_AGENT_MESSAGE_TYPES, LimitWait, PermissionDecision, PermissionRequest, PermissionResolved,
    PongFrame, SessionHeader, StatusFrame, ViewersFrame, Viewing, WorktreeInfo, WorktreeOption,
};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/web/protocol.d.ts");

/// The whole declaration file.
fn render() -> String {
    // `seq` and counters are far below 2^53: plain numbers in JavaScript.
    let cfg = Config::new().with_large_int("number");
    let decls = [
        ErrorCode::decl(&cfg),
        ChatOptions::decl(&cfg),
        WorktreeOption::decl(&cfg),
        PermissionDecision::decl(&cfg),
        ImageSource::decl(&cfg),
        ContentBlock::decl(&cfg),
        Content::decl(&cfg),
        Chat::decl(&cfg),
        ClientFrame::decl(&cfg),
        SessionHeader::decl(&cfg),
        AckFrame::decl(&cfg),
        ErrorFrame::decl(&cfg),
        PongFrame::decl(&cfg),
        ChangeCounts::decl(&cfg),
        WorktreeInfo::decl(&cfg),
        StatusFrame::decl(&cfg),
        LimitWait::decl(&cfg),
        Activity::decl(&cfg),
        ActivityFrame::decl(&cfg),
        Viewing::decl(&cfg),
        ViewersFrame::decl(&cfg),
        ControlFrame::decl(&cfg),
        PermissionRequest::decl(&cfg),
        PermissionResolved::decl(&cfg),
    ];
    let mut out = String::from(
        "// Generated from src/protocol.rs by its unit tests; do not edit.\n\
         // Regenerate: UPDATE_PROTOCOL_TS=1 cargo test --lib protocol\n\n",
    );
    for decl in decls {
        out.push_str("export ");
        out.push_str(&decl);
        out.push_str("\n\n");
    }
    let agent_types: Vec<String> = AGENT_MESSAGE_TYPES
        .iter()
        .chain(LIVE_AGENT_MESSAGE_TYPES)
        .map(|t| format!("\"{t}\""))
        .collect();
    out.push_str(&format!(
        "/** Message types whose frame carries the agent's own message under `message`. */\n\
         export type AgentMessageType = {};\n\n",
        agent_types.join(" | ")
    ));
    out.push_str(
        "/** A conversation frame carrying the agent's message verbatim; `seq` is absent on `stream_event`. */\n\
         export type MessageFrame = Omit<SessionHeader, \"message_type\"> & { message_type: AgentMessageType, message: unknown };\n\n\
         /** A stored conversation frame whose fields follow the header (see `session_frame`). */\n\
         export type StoredFrame<T extends string, F> = Omit<SessionHeader, \"message_type\"> & { message_type: T, seq: number } & F;\n\n\
         export type PermissionRequestFrame = StoredFrame<\"permission_request\", PermissionRequest>;\n\n\
         export type PermissionResolvedFrame = StoredFrame<\"permission_resolved\", PermissionResolved>;\n\n\
         /** Every frame the server sends. */\n\
         export type ServerFrame = ControlFrame | MessageFrame | PermissionRequestFrame | PermissionResolvedFrame;\n",
    );
    out
}

#[test]
fn committed_typescript_matches_the_rust_types() {
    let want = render();
    if std::env::var_os("UPDATE_PROTOCOL_TS").is_some() {
        std::fs::write(PATH, &want).expect("write web/protocol.d.ts");
        return;
    }
    let have = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        have == want,
        "web/protocol.d.ts is stale; run `UPDATE_PROTOCOL_TS=1 cargo test --lib protocol` and commit it"
    );
}
