//! Client frame decoding: any text either decodes to a frame that honours every validation
//! rule, or to a typed error whose `error` frame is valid JSON. Never a panic.

#![no_main]

use agentmux::protocol::{self, ClientFrame, DecodeLimits};
use libfuzzer_sys::fuzz_target;

const LIMITS: DecodeLimits = DecodeLimits {
    max_content_bytes: 256,
    allow_bypass_permissions: false,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match protocol::decode(text, LIMITS) {
        Ok(ClientFrame::Chat(chat)) => {
            assert!(protocol::valid_agent_id(&chat.agent_id));
            assert!(!chat.content.trim().is_empty());
            assert!(chat.content.len() <= LIMITS.max_content_bytes);
            if let Some(model) = &chat.options.model {
                assert!(protocol::valid_model(model));
            }
            if let Some(mode) = &chat.options.permission_mode {
                assert!(protocol::PERMISSION_MODES.contains(&mode.as_str()));
                assert!(!protocol::UNATTENDED_PERMISSION_MODES.contains(&mode.as_str()));
            }
        }
        Ok(
            ClientFrame::Interrupt { agent_id }
            | ClientFrame::Unsubscribe { agent_id }
            | ClientFrame::Subscribe { agent_id, .. },
        ) => assert!(protocol::valid_agent_id(&agent_id)),
        Ok(_) => {}
        Err(err) => {
            let frame = protocol::error_frame(&err);
            let value: serde_json::Value =
                serde_json::from_str(frame.text.as_str()).expect("error frames are JSON");
            assert_eq!(value["code"], err.code.as_str());
        }
    }
});
