//! A chat's options: what each may hold, which of them a conversation's agent is launched
//! with, and their decoding with the error each kind of bad value gets.

use serde::Serialize;
use serde_json::Value;

use super::client::{valid_agent_name, valid_mode_id, valid_model, valid_path_form};
use super::{
    ErrorCode, FrameError, MAX_ADD_DIRS, MAX_AGENT_NAME_CHARS, MAX_MODE_CHARS, MAX_PATH_BYTES,
    MAX_SYSTEM_PROMPT_BYTES, MAX_TOOL_PATTERNS, MAX_TURNS_LIMIT, truncate_chars,
    valid_tool_pattern,
};

/// Options a `chat` may carry; only these reach the agent. An option left out (or `null`)
/// keeps the conversation's current value; a list given as `[]` clears it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct ChatOptions {
    /// Model name for the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub model: Option<String>,
    /// Permission mode for the agent: one of the modes its agent offers (for the Claude CLI,
    /// its permission modes). The protocol checks only its form ([`valid_mode_id`]); the
    /// conversation's agent checks the id, and whether the server allows a mode that runs
    /// tools without asking.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub permission_mode: Option<String>,
    /// The agent's working directory: an absolute path of a directory inside a project root
    /// the principal may use. Only on a conversation's first chat (later chats may repeat it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub cwd: Option<String>,
    /// Text appended to the agent's own system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub system_prompt: Option<String>,
    /// Tool-name patterns the agent may use without asking (`Read`, `Bash(git:*)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub allowed_tools: Option<Vec<String>>,
    /// Tool-name patterns the agent may never use.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub disallowed_tools: Option<Vec<String>>,
    /// Most agentic turns (model calls) per user turn, 1 to [`MAX_TURNS_LIMIT`].
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub max_turns: Option<u32>,
    /// More directories the agent may read and change, each inside a project root the
    /// principal may use.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub add_dirs: Option<Vec<String>>,
    /// The agent (by name) of a new conversation; on a later chat it must name the
    /// conversation's own agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub agent: Option<String>,
    /// Whether a new conversation in a git repository works in a worktree of its own (on
    /// its own branch): `true`, `false`, or where it starts and which branch it makes. Only on
    /// a conversation's first chat (later chats may repeat it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub worktree: Option<Box<WorktreeOption>>,
    /// The conversation's own spending cap in US dollars (0 to [`super::MAX_CAP_USD`]); only
    /// its owner may set it. A turn that would start with the conversation's spending at or
    /// over it is refused with `budget_exceeded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional, as = "Option<f64>"))]
    pub budget_usd: Option<Box<Usd>>,

    /// Whether a turn the model API's rate limit ends continues by itself once the limit
    /// resets (a "continue" turn, after a `status` `waiting_for_limit`). Kept for the
    /// conversation's later turns; absent follows the server's `session.auto_continue`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub auto_continue: Option<bool>,
}

/// An amount of US dollars, checked to be a finite number (so that it compares whole).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, utoipa::ToSchema)]
#[serde(transparent)]
pub struct Usd(pub f64);

impl Eq for Usd {}

/// A chat's `options.worktree`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub enum WorktreeOption {
    /// A worktree from the repository's current branch on a new `agentmux/<agent_id>` branch,
    /// or none.
    On(bool),
    /// A worktree from `base` (a branch or a commit id; the current branch when absent) on
    /// branch `branch` (`agentmux/<agent_id>` when absent).
    From {
        /// A branch or commit of the repository.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        base: Option<String>,
        /// The new branch.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        branch: Option<String>,
    },
}

/// Longest `base` or `branch` of `options.worktree`, in bytes.
pub const MAX_WORKTREE_NAME_BYTES: usize = 200;

impl ChatOptions {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == ChatOptions::default()
    }

    /// The launch options this chat sets (a list given as `[]` only clears, and sets none).
    pub fn launch_options(&self) -> Vec<LaunchOption> {
        LaunchOptions::default().updated(self).named()
    }
}

/// One of the [`LaunchOptions`], by its name in a chat's `options`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LaunchOption {
    /// `system_prompt`.
    SystemPrompt,
    /// `allowed_tools`.
    AllowedTools,
    /// `disallowed_tools`.
    DisallowedTools,
    /// `max_turns`.
    MaxTurns,
    /// `add_dirs`.
    AddDirs,
}

impl LaunchOption {
    /// Every launch option.
    pub const ALL: [LaunchOption; 5] = [
        LaunchOption::SystemPrompt,
        LaunchOption::AllowedTools,
        LaunchOption::DisallowedTools,
        LaunchOption::MaxTurns,
        LaunchOption::AddDirs,
    ];

    /// Its name in a chat's `options`.
    pub fn name(self) -> &'static str {
        match self {
            LaunchOption::SystemPrompt => "system_prompt",
            LaunchOption::AllowedTools => "allowed_tools",
            LaunchOption::DisallowedTools => "disallowed_tools",
            LaunchOption::MaxTurns => "max_turns",
            LaunchOption::AddDirs => "add_dirs",
        }
    }
}

impl std::fmt::Display for LaunchOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The options an agent can only take when it starts; a change between turns restarts it
/// (resuming its conversation). Stored per conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct LaunchOptions {
    /// Text appended to the agent's own system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Tool-name patterns the agent may use without asking.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Tool-name patterns the agent may never use.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disallowed_tools: Vec<String>,
    /// Most agentic turns per user turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// More directories the agent may use (canonical paths).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add_dirs: Vec<String>,
}

impl LaunchOptions {
    /// These options with those a chat sets replacing them.
    pub fn updated(&self, chat: &ChatOptions) -> LaunchOptions {
        LaunchOptions {
            system_prompt: chat
                .system_prompt
                .clone()
                .or_else(|| self.system_prompt.clone()),
            allowed_tools: chat
                .allowed_tools
                .clone()
                .unwrap_or_else(|| self.allowed_tools.clone()),
            disallowed_tools: chat
                .disallowed_tools
                .clone()
                .unwrap_or_else(|| self.disallowed_tools.clone()),
            max_turns: chat.max_turns.or(self.max_turns),
            add_dirs: chat
                .add_dirs
                .clone()
                .unwrap_or_else(|| self.add_dirs.clone()),
        }
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == LaunchOptions::default()
    }

    /// The options that are set.
    pub fn named(&self) -> Vec<LaunchOption> {
        LaunchOption::ALL
            .into_iter()
            .filter(|option| match option {
                LaunchOption::SystemPrompt => self.system_prompt.is_some(),
                LaunchOption::AllowedTools => !self.allowed_tools.is_empty(),
                LaunchOption::DisallowedTools => !self.disallowed_tools.is_empty(),
                LaunchOption::MaxTurns => self.max_turns.is_some(),
                LaunchOption::AddDirs => !self.add_dirs.is_empty(),
            })
            .collect()
    }

    /// These options with only those in `kept` left set.
    pub fn only(&self, kept: &std::collections::BTreeSet<LaunchOption>) -> LaunchOptions {
        let keeps = |option| kept.contains(&option);
        let list = |option, values: &Vec<String>| {
            if keeps(option) {
                values.clone()
            } else {
                Vec::new()
            }
        };
        LaunchOptions {
            system_prompt: (self.system_prompt.clone())
                .filter(|_| keeps(LaunchOption::SystemPrompt)),
            allowed_tools: list(LaunchOption::AllowedTools, &self.allowed_tools),
            disallowed_tools: list(LaunchOption::DisallowedTools, &self.disallowed_tools),
            max_turns: self.max_turns.filter(|_| keeps(LaunchOption::MaxTurns)),
            add_dirs: list(LaunchOption::AddDirs, &self.add_dirs),
        }
    }
}

pub(super) fn chat_options(value: Option<&Value>) -> Result<ChatOptions, FrameError> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(ChatOptions::default()),
        Some(Value::Object(obj)) => obj,
        Some(_) => {
            return Err(FrameError::new(
                ErrorCode::InvalidOptions,
                "`options` must be an object",
            ));
        }
    };
    let mut options = ChatOptions::default();
    for (key, value) in obj {
        match (key.as_str(), value) {
            (_, Value::Null) => {}
            ("model", Value::String(m)) if valid_model(m) => options.model = Some(m.clone()),
            ("model", _) => {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    "`options.model` must be 1-64 characters of [A-Za-z0-9._:-]",
                ));
            }
            ("agent", Value::String(a)) if valid_agent_name(a) => options.agent = Some(a.clone()),
            ("agent", _) => {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    format!(
                        "`options.agent` must be 1-{MAX_AGENT_NAME_CHARS} characters of \
                         [A-Za-z0-9._-], not starting with `-` or `.`"
                    ),
                ));
            }
            ("permission_mode", Value::String(m)) if valid_mode_id(m) => {
                options.permission_mode = Some(m.clone());
            }
            ("permission_mode", _) => {
                return Err(invalid_option(format!(
                    "`options.permission_mode` must be 1-{MAX_MODE_CHARS} characters of \
                     [A-Za-z0-9._:-], starting with a letter or digit"
                )));
            }
            ("cwd", Value::String(path)) if valid_path_form(path) => {
                options.cwd = Some(path.clone());
            }
            ("cwd", _) => {
                return Err(invalid_option(format!(
                    "`options.cwd` must be an absolute path (at most {MAX_PATH_BYTES} bytes, no control characters)"
                )));
            }
            ("system_prompt", Value::String(text))
                if !text.trim().is_empty()
                    && text.len() <= MAX_SYSTEM_PROMPT_BYTES
                    && !text.contains('\0') =>
            {
                options.system_prompt = Some(text.clone());
            }
            ("system_prompt", _) => {
                return Err(invalid_option(format!(
                    "`options.system_prompt` must be a non-empty string of at most {MAX_SYSTEM_PROMPT_BYTES} bytes without NUL"
                )));
            }
            ("allowed_tools" | "disallowed_tools", value) => {
                let patterns = tool_patterns(key, value)?;
                if key == "allowed_tools" {
                    options.allowed_tools = Some(patterns);
                } else {
                    options.disallowed_tools = Some(patterns);
                }
            }
            ("max_turns", Value::Number(n))
                if n.as_u64()
                    .is_some_and(|n| (1..=u64::from(MAX_TURNS_LIMIT)).contains(&n)) =>
            {
                options.max_turns = n.as_u64().map(|n| n as u32);
            }
            ("max_turns", _) => {
                return Err(invalid_option(format!(
                    "`options.max_turns` must be an integer from 1 to {MAX_TURNS_LIMIT}"
                )));
            }
            ("add_dirs", Value::Array(items))
                if items.len() <= MAX_ADD_DIRS
                    && items
                        .iter()
                        .all(|v| v.as_str().is_some_and(valid_path_form)) =>
            {
                options.add_dirs = Some(
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                );
            }
            ("add_dirs", _) => {
                return Err(invalid_option(format!(
                    "`options.add_dirs` must be a list of at most {MAX_ADD_DIRS} absolute paths"
                )));
            }
            ("worktree", value) => options.worktree = Some(Box::new(worktree_option(value)?)),
            ("budget_usd", value) => {
                let usd = value.as_f64().unwrap_or(f64::NAN);
                super::check_cap("options.budget_usd", usd).map_err(invalid_option)?;
                options.budget_usd = Some(Box::new(Usd(usd)));
            }
            ("auto_continue", Value::Bool(on)) => options.auto_continue = Some(*on),
            ("auto_continue", _) => {
                return Err(invalid_option(
                    "`options.auto_continue` must be true or false".into(),
                ));
            }
            (other, _) => {
                return Err(FrameError::new(
                    ErrorCode::InvalidOptions,
                    format!("unknown option `{}`", truncate_chars(other, 64)),
                ));
            }
        }
    }
    Ok(options)
}

/// `options.worktree`: a boolean, or an object of at most `base` and `branch`, each a string
/// of 1 to [`MAX_WORKTREE_NAME_BYTES`] bytes without control characters (git's own rules for
/// them are checked where the worktree is made).
fn worktree_option(value: &Value) -> Result<WorktreeOption, FrameError> {
    let bad = || {
        invalid_option(format!(
            "`options.worktree` must be true, false or {{\"base\": …, \"branch\": …}} with \
             names of 1-{MAX_WORKTREE_NAME_BYTES} bytes"
        ))
    };
    let name = |v: Option<&Value>| match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= MAX_WORKTREE_NAME_BYTES
                && !s.chars().any(char::is_control) =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(bad()),
    };
    match value {
        Value::Bool(on) => Ok(WorktreeOption::On(*on)),
        Value::Object(obj) if obj.keys().all(|k| k == "base" || k == "branch") => {
            Ok(WorktreeOption::From {
                base: name(obj.get("base"))?,
                branch: name(obj.get("branch"))?,
            })
        }
        _ => Err(bad()),
    }
}

fn invalid_option(message: String) -> FrameError {
    FrameError::new(ErrorCode::InvalidOptions, message)
}

/// A list of tool-name patterns (see [`valid_tool_pattern`]).
fn tool_patterns(key: &str, value: &Value) -> Result<Vec<String>, FrameError> {
    let bad = || {
        invalid_option(format!(
            "`options.{key}` must be a list of at most {MAX_TOOL_PATTERNS} tool-name patterns \
             such as `Read` or `Bash(git:*)` (a name of letters, digits, `_.*-`, optionally \
             followed by a specifier in parentheses without commas)"
        ))
    };
    let Value::Array(items) = value else {
        return Err(bad());
    };
    if items.len() > MAX_TOOL_PATTERNS {
        return Err(bad());
    }
    items
        .iter()
        .map(|v| match v.as_str() {
            Some(p) if valid_tool_pattern(p) => Ok(p.to_owned()),
            _ => Err(bad()),
        })
        .collect()
}
