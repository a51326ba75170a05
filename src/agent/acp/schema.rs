//! The Agent Client Protocol's wire types, from the pinned `agent-client-protocol-schema`
//! crate: the only module that names it, so a version bump stays here. It builds the requests
//! agentmux sends and reads the answers and notifications it needs into plain values. One
//! job, the translation to and from that crate; past 500 lines only with its tests.

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1 as acp;
use serde_json::{Value, json};

use crate::protocol::{Content, ContentBlock, ImageSource, LaunchOptions};

/// JSON-RPC method names.
pub(super) mod method {
    pub(crate) const INITIALIZE: &str = "initialize";
    pub(crate) const SESSION_NEW: &str = "session/new";
    pub(crate) const SESSION_LOAD: &str = "session/load";
    pub(crate) const SESSION_RESUME: &str = "session/resume";
    pub(crate) const SESSION_PROMPT: &str = "session/prompt";
    pub(crate) const SESSION_CANCEL: &str = "session/cancel";
    pub(crate) const SESSION_SET_MODE: &str = "session/set_mode";
    pub(crate) const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
    pub(crate) const SESSION_UPDATE: &str = "session/update";
    pub(crate) const REQUEST_PERMISSION: &str = "session/request_permission";
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("ACP requests serialize")
}

/// `initialize` params: protocol version 1, and no file system or terminal capability (the
/// agent works on its own files, in its own working directory).
pub(super) fn initialize() -> Value {
    let caps = acp::ClientCapabilities::new()
        .fs(acp::FileSystemCapabilities::new())
        .terminal(false);
    let info = acp::Implementation::new("agentmux", env!("CARGO_PKG_VERSION"));
    to_value(
        &acp::InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(caps)
            .client_info(info),
    )
}

/// `session/new` params, with `options` in `_meta`.
pub(super) fn new_session(cwd: &std::path::Path, options: &LaunchOptions) -> Value {
    with_meta(to_value(&acp::NewSessionRequest::new(cwd)), options)
}

/// `session/load` params, with `options` in `_meta`.
pub(super) fn load_session(
    session_id: &str,
    cwd: &std::path::Path,
    options: &LaunchOptions,
) -> Value {
    with_meta(
        to_value(&acp::LoadSessionRequest::new(session_id.to_owned(), cwd)),
        options,
    )
}

/// `session/resume` params, with `options` in `_meta`.
pub(super) fn resume_session(
    session_id: &str,
    cwd: &std::path::Path,
    options: &LaunchOptions,
) -> Value {
    let mut params = to_value(&acp::ResumeSessionRequest::new(session_id.to_owned(), cwd));
    // Optional in the schema (and left out when empty); sent anyway, as for session/new and
    // session/load, so agents written against older schemas accept it too.
    params["mcpServers"] = json!([]);
    with_meta(params, options)
}

/// `params` with the launch options in `_meta`, as the Claude adapter reads them (ACP itself
/// has no fields for them): `systemPrompt.append` adds to the agent's own system prompt, and
/// `claudeCode.options` holds `allowedTools`, `disallowedTools`, `maxTurns` and
/// `additionalDirectories`. The adapter reads it on `session/load` and `session/resume` too
/// (and starts over when it changed), so every way of opening a session sends it. No `_meta`
/// when no option is set.
fn with_meta(mut params: Value, options: &LaunchOptions) -> Value {
    let mut sdk = serde_json::Map::new();
    let mut list = |key: &str, values: &[String]| {
        if !values.is_empty() {
            sdk.insert(key.to_owned(), json!(values));
        }
    };
    list("allowedTools", &options.allowed_tools);
    list("disallowedTools", &options.disallowed_tools);
    list("additionalDirectories", &options.add_dirs);
    if let Some(turns) = options.max_turns {
        sdk.insert("maxTurns".to_owned(), json!(turns));
    }
    let mut meta = serde_json::Map::new();
    if let Some(text) = &options.system_prompt {
        meta.insert("systemPrompt".to_owned(), json!({"append": text}));
    }
    if !sdk.is_empty() {
        meta.insert("claudeCode".to_owned(), json!({"options": sdk}));
    }
    if !meta.is_empty() {
        params["_meta"] = Value::Object(meta);
    }
    params
}

/// `session/prompt` params: the user's turn as text and image blocks, in order.
pub(super) fn prompt(session_id: &str, content: &Content) -> Value {
    let blocks = match content {
        Content::Text(text) => vec![acp::ContentBlock::Text(acp::TextContent::new(text))],
        Content::Blocks(blocks) => blocks
            .iter()
            .map(|block| match block {
                ContentBlock::Text { text } => acp::ContentBlock::Text(acp::TextContent::new(text)),
                ContentBlock::Image {
                    source: ImageSource::Base64 { media_type, data },
                } => acp::ContentBlock::Image(acp::ImageContent::new(data, media_type)),
            })
            .collect(),
    };
    to_value(&acp::PromptRequest::new(session_id.to_owned(), blocks))
}

/// `session/cancel` params.
pub(super) fn cancel(session_id: &str) -> Value {
    to_value(&acp::CancelNotification::new(session_id.to_owned()))
}

/// `session/set_mode` params.
pub(super) fn set_mode(session_id: &str, mode: &str) -> Value {
    to_value(&acp::SetSessionModeRequest::new(
        session_id.to_owned(),
        mode.to_owned(),
    ))
}

/// `session/set_config_option` params for a select option.
pub(super) fn set_config_option(session_id: &str, config_id: &str, value: &str) -> Value {
    to_value(&acp::SetSessionConfigOptionRequest::new(
        session_id.to_owned(),
        config_id.to_owned(),
        acp::SessionConfigOptionValue::value_id(value.to_owned()),
    ))
}

/// The answer to `session/request_permission`: the option chosen, or `cancelled`.
pub(super) fn permission_outcome(option_id: Option<&str>) -> Value {
    let outcome = match option_id {
        Some(id) => acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(
            id.to_owned(),
        )),
        None => acp::RequestPermissionOutcome::Cancelled,
    };
    to_value(&acp::RequestPermissionResponse::new(outcome))
}

/// What an agent said it can do in its `initialize` answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Capabilities {
    /// `session/load`.
    pub(super) load: bool,
    /// `session/resume`.
    pub(super) resume: bool,
    /// Image blocks in prompts (`promptCapabilities.image`).
    pub(super) image: bool,
}

/// Reads the `initialize` result.
pub(super) fn capabilities(result: &Value) -> Result<Capabilities, String> {
    let answer: acp::InitializeResponse = serde_json::from_value(result.clone())
        .map_err(|e| format!("the agent's initialize answer is malformed: {e}"))?;
    let caps = answer.agent_capabilities;
    Ok(Capabilities {
        load: caps.load_session,
        resume: caps.session_capabilities.resume.is_some(),
        image: caps.prompt_capabilities.image,
    })
}

/// The modes and select config options a session offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Offered {
    /// Mode ids.
    pub(super) modes: Vec<String>,
    /// The current mode.
    pub(super) current_mode: Option<String>,
    /// Select config options: id and the values it allows.
    pub(super) options: Vec<(String, Vec<String>)>,
    /// The values of the `model` config option, with their names and descriptions.
    pub(super) models: Vec<crate::agent::AgentModel>,
}

impl Offered {
    /// The values config option `id` allows, if the agent offers it.
    pub(super) fn option(&self, id: &str) -> Option<&[String]> {
        self.options
            .iter()
            .find(|(o, _)| o == id)
            .map(|(_, v)| v.as_slice())
    }
}

fn offered(
    modes: Option<acp::SessionModeState>,
    config: Option<Vec<acp::SessionConfigOption>>,
) -> Offered {
    let Selects {
        options,
        mode,
        models,
    } = selects(config.unwrap_or_default());
    let mut out = Offered {
        options,
        current_mode: mode,
        models,
        ..Offered::default()
    };
    if let Some(modes) = modes {
        out.current_mode = Some(modes.current_mode_id.0.to_string());
        out.modes = modes
            .available_modes
            .into_iter()
            .map(|m| m.id.0.to_string())
            .collect();
    }
    out
}

/// What a session's select config options say.
struct Selects {
    /// Id and allowed values of each.
    options: Vec<(String, Vec<String>)>,
    /// The current value of the `mode` option, if there is one.
    mode: Option<String>,
    /// The values of the `model` option.
    models: Vec<crate::agent::AgentModel>,
}

/// Reads the select config options.
fn selects(config: Vec<acp::SessionConfigOption>) -> Selects {
    let mut options = Vec::new();
    let mut mode = None;
    let mut models = Vec::new();
    for option in config {
        if let acp::SessionConfigKind::Select(select) = option.kind {
            let id = option.id.0.to_string();
            if id == "mode" {
                mode = Some(select.current_value.0.to_string());
            }
            let values = match select.options {
                acp::SessionConfigSelectOptions::Ungrouped(list) => list,
                acp::SessionConfigSelectOptions::Grouped(groups) => {
                    groups.into_iter().flat_map(|g| g.options).collect()
                }
                _ => Vec::new(),
            };
            if id == "model" {
                models = values
                    .iter()
                    .map(|v| crate::agent::AgentModel {
                        id: v.value.0.to_string(),
                        name: Some(v.name.clone()),
                        description: v.description.clone(),
                    })
                    .collect();
            }
            options.push((
                id,
                values.into_iter().map(|v| v.value.0.to_string()).collect(),
            ));
        }
    }
    Selects {
        options,
        mode,
        models,
    }
}

/// Reads a `session/new` result: the new session's id and what it offers.
pub(super) fn new_session_result(result: &Value) -> Result<(String, Offered), String> {
    let answer: acp::NewSessionResponse = serde_json::from_value(result.clone())
        .map_err(|e| format!("the agent's session/new answer is malformed: {e}"))?;
    Ok((
        answer.session_id.0.to_string(),
        offered(answer.modes, answer.config_options),
    ))
}

/// Reads a `session/load` or `session/resume` result: what the session offers.
pub(super) fn reopened_result(result: &Value) -> Offered {
    match serde_json::from_value::<acp::ResumeSessionResponse>(result.clone()) {
        Ok(answer) => offered(answer.modes, answer.config_options),
        Err(_) => Offered::default(),
    }
}

/// The end of a turn, from a `session/prompt` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TurnEnd {
    /// `end_turn`, `max_tokens`, `max_turn_requests`, `refusal` or `cancelled`.
    pub(super) stop_reason: String,
    /// Input tokens, when reported.
    pub(super) input_tokens: u64,
    /// Output tokens, when reported.
    pub(super) output_tokens: u64,
}

/// Reads a `session/prompt` result.
pub(super) fn turn_end(result: &Value) -> Result<TurnEnd, String> {
    let answer: acp::PromptResponse = serde_json::from_value(result.clone())
        .map_err(|e| format!("the agent's session/prompt answer is malformed: {e}"))?;
    let stop_reason = serde_json::to_value(answer.stop_reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "end_turn".to_owned());
    // `usage` is not in the stable schema yet; agents that report it use these names.
    let tokens = |name: &str| result["usage"][name].as_u64().unwrap_or(0);
    let (input_tokens, output_tokens) = (tokens("inputTokens"), tokens("outputTokens"));
    Ok(TurnEnd {
        stop_reason,
        input_tokens,
        output_tokens,
    })
}

/// What a tool call is, as far as the agent has said.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Tool {
    /// The agent's id of the call.
    pub(super) id: String,
    /// Its title (`touch a.txt`), if given.
    pub(super) title: Option<String>,
    /// Its tool name (`Bash`), if given.
    pub(super) name: Option<String>,
    /// Its input, if given.
    pub(super) input: Option<Value>,
    /// `Some(is_error)` once it has finished.
    pub(super) finished: Option<bool>,
    /// Its output as text, if given.
    pub(super) output: Option<String>,
}

/// One `session/update`, as much as agentmux maps it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Update {
    /// A piece of the agent's reply (`thought`: of its reasoning).
    Chunk {
        /// The text.
        text: String,
        /// Whether it is a thought.
        thought: bool,
    },
    /// A piece of a user message (only in a `session/load` replay).
    UserChunk,
    /// A new tool call.
    NewTool(Tool),
    /// News about a tool call.
    ToolNews(Tool),
    /// The mode changed.
    Mode(String),
    /// The config options changed: the select options (as in [`Offered::options`]) and the
    /// `mode` option's value, if there is one (how the Claude adapter announces a new mode).
    Options {
        /// Id and allowed values of each select option.
        options: Vec<(String, Vec<String>)>,
        /// The `mode` option's current value.
        mode: Option<String>,
        /// The `model` option's values (as in [`Offered::models`]).
        models: Vec<crate::agent::AgentModel>,
    },
    /// The session's cost so far, in US dollars (a usage update that carries one).
    CostUsd(f64),
    /// Anything else (plans, commands, usage, config options, unknown kinds).
    Other,
}

fn tool_output(content: Option<&[acp::ToolCallContent]>, raw: Option<&Value>) -> Option<String> {
    let texts: Vec<String> = content
        .unwrap_or_default()
        .iter()
        .filter_map(|c| match c {
            acp::ToolCallContent::Content(c) => match &c.content {
                acp::ContentBlock::Text(t) => Some(t.text.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    if !texts.is_empty() {
        return Some(texts.join("\n"));
    }
    raw.map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

fn finished(status: Option<acp::ToolCallStatus>) -> Option<bool> {
    match status {
        Some(acp::ToolCallStatus::Completed) => Some(false),
        Some(acp::ToolCallStatus::Failed) => Some(true),
        _ => None,
    }
}

/// Reads `session/update` params: the session id and the update (`Other` when its kind is
/// unknown to the pinned schema).
pub(super) fn update(params: &Value) -> Option<(String, Update)> {
    let session_id = params.get("sessionId")?.as_str()?.to_owned();
    let Ok(note) = serde_json::from_value::<acp::SessionNotification>(params.clone()) else {
        return Some((session_id, Update::Other));
    };
    let update = match note.update {
        acp::SessionUpdate::AgentMessageChunk(chunk)
        | acp::SessionUpdate::AgentThoughtChunk(chunk)
            if !matches!(chunk.content, acp::ContentBlock::Text(_)) =>
        {
            Update::Other
        }
        acp::SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
            acp::ContentBlock::Text(t) => Update::Chunk {
                text: t.text,
                thought: false,
            },
            _ => Update::Other,
        },
        acp::SessionUpdate::AgentThoughtChunk(chunk) => match chunk.content {
            acp::ContentBlock::Text(t) => Update::Chunk {
                text: t.text,
                thought: true,
            },
            _ => Update::Other,
        },
        acp::SessionUpdate::UserMessageChunk(_) => Update::UserChunk,
        acp::SessionUpdate::ToolCall(call) => Update::NewTool(Tool {
            id: call.tool_call_id.0.to_string(),
            title: Some(call.title.clone()).filter(|t| !t.is_empty()),
            output: tool_output(Some(&call.content), call.raw_output.as_ref())
                .filter(|_| finished(Some(call.status)).is_some()),
            finished: finished(Some(call.status)),
            name: call.name,
            input: call.raw_input,
        }),
        acp::SessionUpdate::ToolCallUpdate(update) => {
            let fields = update.fields;
            Update::ToolNews(Tool {
                id: update.tool_call_id.0.to_string(),
                output: tool_output(fields.content.as_deref(), fields.raw_output.as_ref()),
                finished: finished(fields.status),
                title: fields.title,
                name: fields.name,
                input: fields.raw_input,
            })
        }
        acp::SessionUpdate::UsageUpdate(usage) => match usage.cost {
            Some(cost) if cost.currency.eq_ignore_ascii_case("USD") && cost.amount.is_finite() => {
                Update::CostUsd(cost.amount)
            }
            _ => Update::Other,
        },
        acp::SessionUpdate::CurrentModeUpdate(mode) => {
            Update::Mode(mode.current_mode_id.0.to_string())
        }
        acp::SessionUpdate::ConfigOptionUpdate(update) => {
            let Selects {
                options,
                mode,
                models,
            } = selects(update.config_options);
            Update::Options {
                options,
                mode,
                models,
            }
        }
        _ => Update::Other,
    };
    Some((session_id, update))
}

/// A `session/request_permission` request, read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PermissionAsk {
    /// The tool call it is about.
    pub(super) tool: Tool,
    /// The options offered: id and kind (`allow_once`, `allow_always`, `reject_once`,
    /// `reject_always`).
    pub(super) options: Vec<(String, String)>,
    /// The options as the agent sent them.
    pub(super) raw_options: Value,
}

/// Reads `session/request_permission` params.
pub(super) fn permission_ask(params: &Value) -> Result<PermissionAsk, String> {
    let ask: acp::RequestPermissionRequest = serde_json::from_value(params.clone())
        .map_err(|e| format!("malformed permission request: {e}"))?;
    let fields = ask.tool_call.fields;
    let options = ask
        .options
        .iter()
        .map(|o| {
            let kind = serde_json::to_value(o.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            (o.option_id.0.to_string(), kind)
        })
        .collect();
    Ok(PermissionAsk {
        tool: Tool {
            id: ask.tool_call.tool_call_id.0.to_string(),
            title: fields.title,
            name: fields.name,
            input: fields.raw_input,
            finished: None,
            output: None,
        },
        options,
        raw_options: json!(ask.options),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests as the pinned adapter accepts them (recorded).
    #[test]
    fn requests_have_the_recorded_shape() {
        let init = initialize();
        assert_eq!(init["protocolVersion"], 1);
        assert_eq!(init["clientCapabilities"]["terminal"], false);
        assert_eq!(init["clientCapabilities"]["fs"]["readTextFile"], false);
        assert_eq!(init["clientCapabilities"]["fs"]["writeTextFile"], false);
        let p = std::path::Path::new("/w");
        let none = LaunchOptions::default();
        assert_eq!(
            new_session(p, &none),
            json!({"cwd": "/w", "mcpServers": []})
        );
        assert_eq!(
            resume_session("s", p, &none),
            json!({"sessionId": "s", "cwd": "/w", "mcpServers": []})
        );
        assert_eq!(
            prompt("s", &Content::Text("hi".into())),
            json!({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]})
        );
        let image = ContentBlock::Image {
            source: ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into(),
            },
        };
        let text = ContentBlock::Text { text: "see".into() };
        assert_eq!(
            prompt("s", &Content::Blocks(vec![text, image])),
            json!({"sessionId": "s", "prompt": [{"type": "text", "text": "see"},
                {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}]})
        );
        assert_eq!(cancel("s"), json!({"sessionId": "s"}));
        assert_eq!(
            set_config_option("s", "model", "opus"),
            json!({"sessionId": "s", "configId": "model", "value": "opus"})
        );
        assert_eq!(
            permission_outcome(Some("allow-once")),
            json!({"outcome": {"outcome": "selected", "optionId": "allow-once"}})
        );
        assert_eq!(
            permission_outcome(None),
            json!({"outcome": {"outcome": "cancelled"}})
        );
    }

    /// Launch options go in `_meta` as the Claude adapter reads them, on every way of opening
    /// a session; only those set.
    #[test]
    fn launch_options_go_in_meta() {
        let p = std::path::Path::new("/w");
        let all = LaunchOptions {
            system_prompt: Some("Be brief.".into()),
            allowed_tools: vec!["Bash(git log:*)".into()],
            disallowed_tools: vec!["WebFetch".into()],
            max_turns: Some(3),
            add_dirs: vec!["/srv/docs".into()],
        };
        let meta = json!({"systemPrompt": {"append": "Be brief."},
            "claudeCode": {"options": {"allowedTools": ["Bash(git log:*)"],
            "disallowedTools": ["WebFetch"], "maxTurns": 3,
            "additionalDirectories": ["/srv/docs"]}}});
        assert_eq!(new_session(p, &all)["_meta"], meta);
        assert_eq!(load_session("s", p, &all)["_meta"], meta);
        assert_eq!(resume_session("s", p, &all)["_meta"], meta);
        let turns = LaunchOptions {
            max_turns: Some(1),
            ..LaunchOptions::default()
        };
        assert_eq!(
            new_session(p, &turns),
            json!({"cwd": "/w", "mcpServers": [], "_meta": {"claudeCode": {"options": {"maxTurns": 1}}}})
        );
    }

    #[test]
    fn recorded_answers_are_read() {
        let caps = capabilities(
            &json!({"protocolVersion":1,"agentCapabilities":{"loadSession":true,
            "sessionCapabilities":{"resume":{},"fork":{}}},"authMethods":[]}),
        )
        .unwrap();
        assert_eq!(
            caps,
            Capabilities {
                load: true,
                resume: true,
                image: false,
            }
        );
        // The adapter's recorded answer takes images.
        let caps = capabilities(
            &json!({"protocolVersion":1,"agentCapabilities":{"loadSession":true,
            "promptCapabilities":{"image":true,"embeddedContext":true}}}),
        )
        .unwrap();
        assert!(caps.image && caps.load && !caps.resume);
        let (id, offered) = new_session_result(&json!({"sessionId":"abc","modes":{"currentModeId":"auto",
            "availableModes":[{"id":"default","name":"Manual"},{"id":"auto","name":"Auto"}]},
            "configOptions":[{"id":"model","name":"Model","category":"model","type":"select",
            "currentValue":"default","options":[{"value":"default","name":"Default"},{"value":"opus","name":"Opus"}]}]}))
        .unwrap();
        assert_eq!(id, "abc");
        assert_eq!(offered.modes, ["default", "auto"]);
        assert_eq!(offered.option("model").unwrap(), ["default", "opus"]);
        let end = turn_end(&json!({"stopReason":"cancelled","usage":{"inputTokens":3,"outputTokens":2,"totalTokens":5}})).unwrap();
        assert_eq!(end.stop_reason, "cancelled");
        assert_eq!((end.input_tokens, end.output_tokens), (3, 2));
        let (_, u) = update(
            &json!({"sessionId":"abc","update":{"sessionUpdate":"tool_call_update",
            "toolCallId":"t1","status":"completed","rawOutput":"done"}}),
        )
        .unwrap();
        let Update::ToolNews(tool) = u else {
            panic!("{u:?}")
        };
        assert_eq!(
            (tool.finished, tool.output.as_deref()),
            (Some(false), Some("done"))
        );
        let (_, u) =
            update(&json!({"sessionId":"abc","update":{"sessionUpdate":"something_new"}})).unwrap();
        assert_eq!(u, Update::Other);
    }

    /// The adapter announces a new mode in a `config_option_update` (recorded); other agents
    /// in a `current_mode_update`.
    #[test]
    fn mode_changes_are_read_in_both_shapes() {
        let (_, u) = update(&json!({"sessionId":"abc","update":{
            "sessionUpdate":"config_option_update","configOptions":[
            {"id":"mode","name":"Mode","category":"mode","type":"select",
            "currentValue":"acceptEdits","options":[{"value":"default","name":"Manual"},
            {"value":"acceptEdits","name":"Accept edits"}]},
            {"id":"model","name":"Model","category":"model","type":"select",
            "currentValue":"default","options":[{"value":"default","name":"Default"}]}]}}))
        .unwrap();
        assert_eq!(
            u,
            Update::Options {
                options: vec![
                    ("mode".into(), vec!["default".into(), "acceptEdits".into()]),
                    ("model".into(), vec!["default".into()]),
                ],
                mode: Some("acceptEdits".into()),
                models: vec![crate::agent::AgentModel {
                    id: "default".into(),
                    name: Some("Default".into()),
                    description: None,
                }],
            }
        );
        let (_, u) = update(&json!({"sessionId":"abc","update":{
            "sessionUpdate":"current_mode_update","currentModeId":"yolo"}}))
        .unwrap();
        assert_eq!(u, Update::Mode("yolo".into()));
    }
}
