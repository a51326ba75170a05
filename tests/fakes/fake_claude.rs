//! `fake-claude`: a stand-in for the Claude Code CLI (version 2.1.332) used by the tests.
//!
//! It is spawned exactly like the real CLI in stream-json mode:
//!
//! ```text
//! fake-claude -p --input-format stream-json --output-format stream-json --verbose \
//!   --include-partial-messages --permission-prompt-tool stdio \
//!   [--session-id=U | --resume=S [--resume-session-at=A] [--fork-session] [--session-id=U]] \
//!   [--model=M] [--permission-mode=P] [--allowedTools=R] [--disallowedTools=R] [--max-turns=N]
//!   [other flags of the real CLI, ignored]
//! ```
//!
//! A flag the real CLI does not have ends the process as it does (`error: unknown option`,
//! exit code 1), and so do `--resume-session-at` without `--resume` and a user line whose
//! `message.role` is not `user`. `fake-claude --version` and `fake-claude auth status --json`
//! answer as the real CLI does (signed in with `ANTHROPIC_API_KEY`, `CLAUDE_CODE_OAUTH_TOKEN`
//! or a `.credentials.json` in the config dir), without a line in the log.
//!
//! and reproduces what the real CLI does on stdin/stdout: NDJSON frames, one `system/init` per turn,
//! `stream_event` partial messages, `assistant`/`user`/`result` frames, the control protocol
//! (`initialize`, `interrupt`, `set_model`, `set_permission_mode`, `can_use_tool`), queued turns,
//! transcripts under `$CLAUDE_CONFIG_DIR/projects/<sanitized cwd>/<session id>.jsonl`
//! (or `$HOME/.claude/projects/...`), resume, fork, rewind, and the same refusals and exit codes.
//!
//! The fake plays the model too, with the fake model API's rules: the reply to a prompt is
//! `Echo: <user text> (history <N>)`, where N counts the user messages the model would be sent
//! (a turn that got no reply, after an API error or an interrupt before the reply began, is sent
//! together with the next prompt as one message, as the real CLI does, and the echo repeats both
//! texts, one per line). `SLOW` in a prompt pads the reply to 50 words streamed 200 ms apart;
//! with `LATE` the reply starts after 1 s.
//! `HTTPERR:<status>` makes the model request fail: 401, 429 and 5xx are retried
//! `CLAUDE_CODE_MAX_RETRIES` times (10 by default) with a `system/api_retry` frame each, then a
//! synthetic assistant message (`"model":"<synthetic>"`) and a `success` result with
//! `is_error: true`, `terminal_reason: "api_error"` and `api_error_status`.
//! `USAGELIMIT:<secs>` is a subscription's usage limit that resets `<secs>` from now, as the real
//! CLI signed in with a subscription reports one (not retried): a `rate_limit_event` with
//! `"status": "rejected"` and `resetsAt`, then the same error messages for a 429, their text
//! `You've hit your 5-hour limit · resets <time>`.
//!
//! A prompt containing `TOOL:<command>` (`+` stands for a space) first asks to run `<command>`
//! with the `Bash` tool, then replies `Tool said: <tool result>`. As in the real CLI, read-only
//! commands (`echo`, `ls`, `cat`, …) inside the working directory run without asking, commands
//! that change files inside it (`touch`, `rm`, `mkdir`, `mv`, `cp`, `>`) run without asking
//! only in `acceptEdits`, `bypassPermissions` runs everything, and anything else is asked for
//! with a `can_use_tool` control request (denied without asking in `dontAsk` and `plan`, or
//! without `--permission-prompt-tool stdio`). Before the mode, `--disallowedTools` rules
//! (`Bash(<prefix>:*)`, `Bash(<command>)`) deny the calls they cover (a `system/permission_denied`
//! frame, no question), and `--allowedTools` rules run them without asking; a bare `Bash` in
//! `--disallowedTools` removes the tool (not in `init`'s tools; a call fails with "No such tool
//! available"). The command is never executed: the tool result is `ran: <command>` when allowed
//! and the denial's message otherwise. With `--max-turns=1`, a turn whose tool result would
//! take a second model request ends with an `error_max_turns` result instead; the next prompt
//! goes to the model together with that tool result, which the model then answers.
//!
//! Also as in the real CLI: a user line carrying a `uuid` keeps it (transcript, replay) and gets
//! `command_lifecycle` frames (`queued`/`started`/`completed`); `--replay-user-messages` echoes
//! each prompt with `"isReplay": true`; running as root with `bypassPermissions` (or
//! `--dangerously-skip-permissions`) is refused unless `IS_SANDBOX=1`; an interrupt while the
//! process starts stops its first prompt before the model's reply (taken or still queued), while
//! one that comes between a later turn's prompt and its `system/init` is acknowledged and does
//! nothing; the exit code is 1 when the last turn's result was an error; `set_model` answers
//! `{"model":…}`, `set_permission_mode` answers `{"mode":…}` and prints a `system/status` frame,
//! and refuses `bypassPermissions` unless the process was started with it
//! (`bypass_not_launched`); SIGTERM ends the process at once with code 143.
//! Transcript entries are appended (and flushed) as they happen: the prompt when the turn starts,
//! each assistant message and tool result when it is complete.
//!
//! Switches (environment variables):
//!
//! * `FAKE_CLAUDE_DELAY_MS=N`: sleep N ms before each streamed word (default 0).
//! * `FAKE_CLAUDE_INIT_DELAY_MS=N`: take N ms to start (the real CLI takes about 650 ms before it
//!   answers `initialize` or starts a turn); nothing on stdin is answered before.
//! * `FAKE_CLAUDE_TURN_DELAY_MS=N`: take N ms between taking a prompt and its `system/init` (the
//!   real CLI takes 20-100 ms).
//! * `FAKE_CLAUDE_LOG=<file>`: append one JSON line per spawn, `{"argv":[..],"cwd":..,"pid":..}`
//!   (argv includes the program path), one per stdin line, `{"pid":..,"stdin":"<line>"}`, one
//!   when stdin closes, `{"pid":..,"event":"stdin_closed"}`, and one per SIGTERM,
//!   `{"pid":..,"signal":"SIGTERM","ignored":..}`.
//! * `FAKE_CLAUDE_CRASH_AFTER_WORDS=N`: exit abruptly with code 1 after N streamed words of a
//!   turn, with a message on stderr and no `result` frame. A prompt containing `CRASH` does the
//!   same after two words, whatever the environment says.
//! * `FAKE_CLAUDE_IGNORE_INTERRUPT=1`: acknowledge `interrupt` requests but keep streaming; the
//!   turn ends normally.
//! * `FAKE_CLAUDE_IGNORE_EOF=1`: stay up when stdin closes (as a CLI waiting on a background task
//!   does); only a signal ends the process.
//! * `FAKE_CLAUDE_IGNORE_SIGTERM=1`: log SIGTERM and carry on; only SIGKILL ends the process.
//! * `FAKE_CLAUDE_REFUSE_SET_MODEL=1`: refuse every `set_model` the way the real CLI does when
//!   its check of the new model with the API fails (`error_code: "check_failed"`).
//! * `FAKE_CLAUDE_UNKNOWN_TYPES=1`: each turn also emits frames the host does not know:
//!   `rate_limit_event`, `command_lifecycle` and `system/session_state_changed`.
//! * `FAKE_CLAUDE_HUGE_LINE_BYTES=N`: each turn emits one `system/huge` frame whose line is N
//!   bytes long (without the newline), before the text `assistant` frame.
//! * `FAKE_CLAUDE_REFUSE_RESUME=1`: every `--resume` fails with "No conversation found".
//! * `FAKE_CLAUDE_FAIL_START_IF=<file>`: while `<file>` exists, every new process fails at start
//!   as the real CLI does on a start-up error: nothing on stdout, `Error: …` on stderr, code 1.
//! * `FAKE_CLAUDE_ENV_DUMP=<file>`: write the process environment as a JSON object at start.
//! * `FAKE_CLAUDE_STAMP=1`: every stdout line gets a first key `"stamp_ns"`, the wall clock in
//!   nanoseconds since the Unix epoch at the moment the line is written, so that a client of the
//!   server can tell how long a line took from the CLI's stdout to its socket (`agentmux bench
//!   cli`).
//! * `FAKE_CLAUDE_CANCEL_PERMISSION_MS=N`: N ms after a `can_use_tool` request, withdraw it with a
//!   `control_cancel_request` and go on as if it had been denied.

use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use uuid::Uuid;

const VERSION: &str = "2.1.332";
const DEFAULT_MODEL: &str = "claude-opus-5-5";
const INTERRUPT_MARKER: &str = "[Request interrupted by user]";
/// A prompt with `SLOW` gets a reply of this many words, each after [`SLOW_DELAY`] (as the fake
/// model API does).
const SLOW_WORDS: usize = 50;
const SLOW_DELAY: Duration = Duration::from_millis(200);
/// A prompt with `LATE` gets a reply that starts after this long.
const LATE_DELAY: Duration = Duration::from_secs(1);
const TOOL_INTERRUPT_MARKER: &str = "[Request interrupted by user for tool use]";
/// The result of a call to `Bash` when `--disallowedTools` removed it.
const NO_SUCH_BASH: &str = "<tool_use_error>Error: No such tool available: Bash. Bash is disabled \
                            for this session, in subagents as well as here.</tool_use_error>";
const PERMISSION_MODES: &[&str] = &[
    "default",
    "acceptEdits",
    "bypassPermissions",
    "plan",
    "dontAsk",
    "auto",
    "manual",
];
const TOOLS: &[&str] = &[
    "Task",
    "Bash",
    "Glob",
    "Grep",
    "LS",
    "Read",
    "Edit",
    "MultiEdit",
    "Write",
    "NotebookEdit",
    "WebFetch",
    "TodoWrite",
    "WebSearch",
];

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Args {
    print: bool,
    verbose: bool,
    partial: bool,
    replay: bool,
    fork: bool,
    skip_permissions: bool,
    output_format: Option<String>,
    prompt_tool: Option<String>,
    session_id: Option<String>,
    resume: Option<Option<String>>,
    resume_at: Option<String>,
    model: Option<String>,
    permission_mode: Option<String>,
    /// `--allowedTools` rules: these tool calls run without asking.
    allowed_tools: Vec<Rule>,
    /// `--disallowedTools` rules: a bare tool name removes the tool, a rule with a pattern
    /// denies the calls it matches.
    disallowed_tools: Vec<Rule>,
    max_turns: Option<u32>,
}

/// How many values a flag of the real CLI takes.
#[derive(Clone, Copy, PartialEq)]
enum Arity {
    None,
    One,
    Optional,
}

/// Every flag the real CLI (2.1.332) accepts, the hidden ones too; any other is refused as it
/// refuses it (`error: unknown option '<arg>'`, exit code 1).
fn arity(name: &str) -> Option<Arity> {
    Some(match name {
        "-p"
        | "--print"
        | "--verbose"
        | "--include-partial-messages"
        | "--replay-user-messages"
        | "--fork-session"
        | "--dangerously-skip-permissions"
        | "-c"
        | "--continue"
        | "--include-hook-events"
        | "--strict-mcp-config"
        | "--allow-dangerously-skip-permissions"
        | "--ax-screen-reader"
        | "--bg"
        | "--background"
        | "--bare"
        | "--brief"
        | "--chrome"
        | "--no-chrome"
        | "--disable-slash-commands"
        | "--exclude-dynamic-system-prompt-sections"
        | "--forward-subagent-text"
        | "-h"
        | "--help"
        | "--ide"
        | "--no-session-persistence"
        | "--restricted"
        | "--safe-mode"
        | "--session-mirror"
        | "-v"
        | "--version" => Arity::None,
        "-r"
        | "--resume"
        | "-d"
        | "--debug"
        | "--cloud"
        | "--from-pr"
        | "--prompt-suggestions"
        | "--remote-control"
        | "--teleport"
        | "--tmux"
        | "-w"
        | "--worktree" => Arity::Optional,
        "--add-dir"
        | "--agent"
        | "--agents"
        | "--allowedTools"
        | "--allowed-tools"
        | "--append-system-prompt"
        | "--append-system-prompt-file"
        | "--autocompact"
        | "--betas"
        | "--debug-file"
        | "--disallowedTools"
        | "--disallowed-tools"
        | "--effort"
        | "--environment"
        | "--fallback-model"
        | "--file"
        | "--input-format"
        | "--json-schema"
        | "--max-budget-usd"
        | "--max-thinking-tokens"
        | "--max-turns"
        | "--mcp-config"
        | "--model"
        | "-n"
        | "--name"
        | "--output-format"
        | "--permission-mode"
        | "--permission-prompts"
        | "--permission-prompt-tool"
        | "--plugin-dir"
        | "--plugin-url"
        | "--remote-control-session-name-prefix"
        | "--resume-drops-turn"
        | "--resume-session-at"
        | "--session-id"
        | "--setting-sources"
        | "--settings"
        | "--system-prompt"
        | "--system-prompt-file"
        | "--system-prompt-snapshot"
        | "--task-budget"
        | "--thinking"
        | "--thinking-display"
        | "--tools" => Arity::One,
        _ => return None,
    })
}

/// Parses the command line as the real CLI does: `--flag=value` and `--flag value`; an
/// unknown flag ends the process.
fn parse_args(argv: &[String]) -> Args {
    let mut args = Args::default();
    let mut i = 0;
    while i < argv.len() {
        let arg = argv[i].as_str();
        i += 1;
        if !arg.starts_with('-') {
            // A prompt on the command line: the stream-json input is what the fake reads.
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg, None),
        };
        let Some(arity) = arity(name) else {
            fail(&format!("error: unknown option '{arg}'"));
        };
        let value = match arity {
            _ if inline.is_some() => inline,
            Arity::None => None,
            Arity::One | Arity::Optional
                if argv.get(i).is_some_and(|next| !next.starts_with('-')) =>
            {
                i += 1;
                Some(argv[i - 1].clone())
            }
            Arity::One => fail(&format!("error: option '{name}' argument missing")),
            Arity::Optional => None,
        };
        match name {
            "-p" | "--print" => args.print = true,
            "--verbose" => args.verbose = true,
            "--include-partial-messages" => args.partial = true,
            "--replay-user-messages" => args.replay = true,
            "--fork-session" => args.fork = true,
            "--dangerously-skip-permissions" => args.skip_permissions = true,
            "--output-format" => args.output_format = value,
            "--permission-prompt-tool" => args.prompt_tool = value,
            "--session-id" => args.session_id = value,
            "--resume" | "-r" => args.resume = Some(value),
            "--resume-session-at" => args.resume_at = value,
            "--model" => args.model = value,
            "--permission-mode" => args.permission_mode = value,
            "--allowedTools" | "--allowed-tools" => {
                args.allowed_tools.extend(rules(&value.unwrap_or_default()));
            }
            "--disallowedTools" | "--disallowed-tools" => {
                args.disallowed_tools
                    .extend(rules(&value.unwrap_or_default()));
            }
            "--max-turns" => args.max_turns = value.and_then(|v| v.trim().parse().ok()),
            _ => {}
        }
    }
    args
}

/// One permission rule: a tool name, with an optional pattern (`Bash(git log:*)`).
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    tool: String,
    pattern: Option<String>,
}

impl Rule {
    /// Whether the rule covers a `Bash` call running `command`: a bare `Bash` covers every
    /// command, `Bash(<prefix>:*)` the commands starting with the prefix, `Bash(<command>)`
    /// that command only.
    fn covers_bash(&self, command: &str) -> bool {
        if self.tool != "Bash" {
            return false;
        }
        match self.pattern.as_deref() {
            None | Some("*") => true,
            Some(pattern) => match pattern.strip_suffix(":*") {
                Some(prefix) => command == prefix || command.starts_with(&format!("{prefix} ")),
                None => command == pattern,
            },
        }
    }
}

/// The rules of a tool list: separated by commas or spaces outside parentheses.
fn rules(list: &str) -> Vec<Rule> {
    let mut out = Vec::new();
    let mut depth = 0u32;
    let mut current = String::new();
    let mut push = |current: &mut String| {
        let rule = std::mem::take(current);
        let rule = rule.trim();
        if rule.is_empty() {
            return;
        }
        out.push(match rule.split_once('(') {
            Some((tool, rest)) => Rule {
                tool: tool.to_string(),
                pattern: Some(rest.strip_suffix(')').unwrap_or(rest).to_string()),
            },
            None => Rule {
                tool: rule.to_string(),
                pattern: None,
            },
        });
    };
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' | ' ' if depth == 0 => {
                push(&mut current);
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    push(&mut current);
    out
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36 && Uuid::try_parse(s).is_ok()
}

fn new_uuid() -> String {
    Uuid::new_v4().to_string()
}

fn short_id() -> String {
    Uuid::new_v4().simple().to_string()
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The transcript folder name for a working directory: every non-alphanumeric char becomes `-`.
fn sanitize(path: &Path) -> String {
    path.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn append_line(path: &Path, value: &Value) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut line = value.to_string();
    line.push('\n');
    file.write_all(line.as_bytes())?;
    file.flush()
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Configuration and startup checks
// ---------------------------------------------------------------------------------------------

struct Config {
    cwd: PathBuf,
    projects: PathBuf,
    pid: u32,
    partial: bool,
    replay: bool,
    prompt_stdio: bool,
    delay: Duration,
    crash_after: Option<u64>,
    ignore_interrupt: bool,
    unknown_types: bool,
    huge_line: Option<usize>,
    refuse_resume: bool,
    cancel_permission: Option<Duration>,
    init_delay: Duration,
    turn_delay: Duration,
    ignore_eof: bool,
    ignore_sigterm: bool,
    refuse_set_model: bool,
    /// `CLAUDE_CODE_MAX_RETRIES`: how often a retryable API error is retried (10 by default).
    max_retries: u64,
    /// The model API's `host:port`, named in the text of server-side API errors.
    gateway: String,
    /// Launched with `bypassPermissions` (or `--dangerously-skip-permissions`): only then can
    /// `set_permission_mode` switch to it.
    launched_bypass: bool,
    log: Option<PathBuf>,
    api_key_source: &'static str,
    analytics_disabled: bool,
    /// `--allowedTools`: calls these rules cover run without asking.
    allowed_tools: Vec<Rule>,
    /// `--disallowedTools`: a bare tool name removes the tool; a rule with a pattern denies
    /// the calls it covers.
    disallowed_tools: Vec<Rule>,
    /// `--max-turns`: how many model requests a turn may make.
    max_turns: Option<u32>,
}

impl Config {
    fn project_dir(&self) -> PathBuf {
        self.projects.join(sanitize(&self.cwd))
    }

    fn log(&self, value: Value) {
        if let Some(path) = &self.log {
            let _ = append_line(path, &value);
        }
    }

    /// Whether `--disallowedTools` names `tool` bare, which removes it from the session.
    fn removed(&self, tool: &str) -> bool {
        self.disallowed_tools
            .iter()
            .any(|r| r.tool == tool && r.pattern.is_none())
    }
}

/// Which conversation the process works on; resolved when the first prompt arrives.
#[derive(Debug)]
enum Plan {
    New {
        session_id: String,
    },
    Resume {
        source: Option<String>,
        at: Option<String>,
        fork_to: Option<String>,
    },
}

impl Plan {
    /// The session id the frames will carry.
    fn session_id(&self) -> Option<String> {
        match self {
            Plan::New { session_id } => Some(session_id.clone()),
            Plan::Resume {
                fork_to: Some(id), ..
            } => Some(id.clone()),
            Plan::Resume { source, .. } => source.clone(),
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(1);
}

fn startup_plan(args: &Args, cfg: &Config) -> Plan {
    if args.print && args.output_format.as_deref() == Some("stream-json") && !args.verbose {
        fail("Error: When using --print, --output-format=stream-json requires --verbose");
    }
    if args.resume_at.is_some() && args.resume.is_none() {
        fail("Error: --resume-session-at requires --resume");
    }
    if let Some(id) = &args.session_id
        && !is_uuid(id)
    {
        fail("Error: Invalid session ID. Must be a valid UUID.");
    }
    if let Some(mode) = &args.permission_mode
        && !PERMISSION_MODES.contains(&mode.as_str())
    {
        fail(&format!(
            "Error: Invalid permission mode '{mode}'. Valid modes: {}",
            PERMISSION_MODES.join(", ")
        ));
    }
    let bypass =
        args.skip_permissions || args.permission_mode.as_deref() == Some("bypassPermissions");
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if bypass && root && !env_flag("IS_SANDBOX") {
        fail(
            "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons",
        );
    }
    if args.session_id.is_some() && args.resume.is_some() && !args.fork {
        fail(
            "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified.",
        );
    }
    if let Some(id) = &args.session_id
        && cfg.project_dir().join(format!("{id}.jsonl")).exists()
    {
        fail(&format!("Error: Session ID {id} is already in use."));
    }
    match &args.resume {
        Some(source) => Plan::Resume {
            source: source.clone(),
            at: args.resume_at.clone(),
            fork_to: args
                .fork
                .then(|| args.session_id.clone().unwrap_or_else(new_uuid)),
        },
        None => Plan::New {
            session_id: args.session_id.clone().unwrap_or_else(new_uuid),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Transcripts
// ---------------------------------------------------------------------------------------------

struct Conversation {
    session_id: String,
    file: PathBuf,
    cwd: String,
    leaf: Option<String>,
    view: ModelView,
    /// Images saved from prompts so far (each prompt image gets the next number).
    images: u32,
}

/// What the model is sent, reduced to what the replies depend on. The CLI sends the transcript
/// as user and assistant messages, leaving API-error messages out, so user entries with no
/// assistant reply between them (a turn that ended in an API error, or was interrupted before
/// the reply began) reach the model as one user message.
#[derive(Debug, Default)]
struct ModelView {
    /// User messages holding real text (not only tool results or the interruption marker).
    history: usize,
    /// The real texts of the last message when it is a user message.
    open: Option<Vec<String>>,
    /// The output of the last tool result, when no model request has answered it yet (a turn
    /// that ended at its turn limit).
    tool_output: Option<String>,
}

impl ModelView {
    fn feed(&mut self, entry: &Value) {
        match entry["type"].as_str() {
            Some("user") => {
                let open = self.open.get_or_insert_with(Vec::new);
                let had_text = !open.is_empty();
                open.extend(real_texts(&entry["message"]));
                if !had_text && !open.is_empty() {
                    self.history += 1;
                }
                let results = entry["message"]["content"].as_array().into_iter().flatten();
                if let Some(result) = results.rev().find(|b| b["type"] == "tool_result") {
                    // An interrupted tool call's result goes with the interruption.
                    self.tool_output = result["content"]
                        .as_str()
                        .filter(|c| *c != TOOL_INTERRUPT_MARKER)
                        .map(str::to_string);
                }
            }
            Some("assistant") if entry["isApiErrorMessage"] != true => {
                self.open = None;
                self.tool_output = None;
            }
            _ => {}
        }
    }

    /// The texts of the user message the model answers now.
    fn prompt(&self) -> String {
        self.open.as_deref().unwrap_or_default().join("\n")
    }
}

/// A refused resume: reported as an error `result` frame when the first prompt arrives.
struct ResumeError {
    session_id: String,
    message: String,
}

/// The real texts of a user message, trimmed: not tool results, not the interruption marker.
fn real_texts(message: &Value) -> Vec<String> {
    let keep = |t: &str| !t.trim().is_empty() && t.trim() != INTERRUPT_MARKER;
    match &message["content"] {
        Value::String(s) if keep(s) => vec![s.trim().to_string()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .filter(|t| keep(t))
            .map(|t| t.trim().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

fn read_entries(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            matches!(e["type"].as_str(), Some("user" | "assistant")) && e["uuid"].is_string()
        })
        .collect()
}

/// The entries from the root of the conversation down to `leaf`, following `parentUuid`.
fn chain(entries: &[Value], leaf: &str) -> Vec<Value> {
    let by_uuid: HashMap<&str, &Value> = entries
        .iter()
        .filter_map(|e| Some((e["uuid"].as_str()?, e)))
        .collect();
    let mut out = Vec::new();
    let mut next = Some(leaf);
    while let Some(id) = next {
        let Some(entry) = by_uuid.get(id) else { break };
        if out.len() > entries.len() {
            break;
        }
        out.push((*entry).clone());
        next = entry["parentUuid"].as_str();
    }
    out.reverse();
    out
}

fn find_transcript(cfg: &Config, id: &str) -> Option<PathBuf> {
    let name = format!("{id}.jsonl");
    let own = cfg.project_dir().join(&name);
    if own.exists() {
        return Some(own);
    }
    std::fs::read_dir(&cfg.projects)
        .ok()?
        .filter_map(Result::ok)
        .map(|d| d.path().join(&name))
        .find(|p| p.exists())
}

fn open_conversation(cfg: &Config, plan: &Plan) -> Result<Conversation, ResumeError> {
    let cwd = cfg.cwd.to_string_lossy().into_owned();
    let (source, at, fork_to) = match plan {
        Plan::New { session_id } => {
            return Ok(Conversation {
                session_id: session_id.clone(),
                file: cfg.project_dir().join(format!("{session_id}.jsonl")),
                cwd,
                leaf: None,
                view: ModelView::default(),
                images: 0,
            });
        }
        Plan::Resume {
            source,
            at,
            fork_to,
        } => (source.clone().unwrap_or_default(), at, fork_to),
    };
    if !is_uuid(&source) {
        return Err(ResumeError {
            message: format!(
                "Error: --resume requires a valid session ID or session title when used with --print. \
                 Usage: claude -p --resume <session-id|title>. Provided value \"{source}\" is not a UUID \
                 and does not match any session title."
            ),
            session_id: source,
        });
    }
    let not_found = || ResumeError {
        session_id: source.clone(),
        message: format!("No conversation found with session ID: {source}"),
    };
    if cfg.refuse_resume {
        return Err(not_found());
    }
    let file = find_transcript(cfg, &source).ok_or_else(not_found)?;
    let entries = read_entries(&file);
    let leaf = match at {
        Some(at) => {
            if !entries.iter().any(|e| e["uuid"] == at.as_str()) {
                return Err(ResumeError {
                    // A fork reports the id it would have had.
                    session_id: fork_to.clone().unwrap_or_else(|| source.clone()),
                    message: format!("No message found with message.uuid of: {at}"),
                });
            }
            at.clone()
        }
        None => match entries.last().and_then(|e| e["uuid"].as_str()) {
            Some(id) => id.to_string(),
            None => return Err(not_found()),
        },
    };
    let history = chain(&entries, &leaf);
    let mut view = ModelView::default();
    for entry in &history {
        view.feed(entry);
    }
    let (session_id, file) = match fork_to {
        Some(new_id) => {
            let new_file = cfg.project_dir().join(format!("{new_id}.jsonl"));
            for mut entry in history {
                entry["sessionId"] = json!(new_id);
                if let Err(e) = append_line(&new_file, &entry) {
                    eprintln!("failed to write transcript {}: {e}", new_file.display());
                }
            }
            (new_id.clone(), new_file)
        }
        None => (source, file),
    };
    let mut conv = Conversation {
        session_id,
        file,
        cwd,
        leaf: Some(leaf),
        view,
        images: 0,
    };
    if conv.view.open.is_some() {
        // A turn that never got its reply (the process died or was stopped mid-turn): the real
        // CLI closes it with a synthetic answer before the next prompt.
        let message = json!({
            "id": new_uuid(),
            "type": "message",
            "role": "assistant",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": "No response requested."}],
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        conv.append("assistant", &new_uuid(), &message, json!({}));
    }
    Ok(conv)
}

impl Conversation {
    fn append(&mut self, kind: &str, uuid: &str, message: &Value, extra: Value) {
        let mut entry = json!({
            "type": kind,
            "uuid": uuid,
            "parentUuid": self.leaf,
            "sessionId": self.session_id,
            "message": message,
            "timestamp": now(),
            "cwd": self.cwd,
            "version": VERSION,
            "isSidechain": false,
            "userType": "external",
        });
        if let (Some(map), Value::Object(more)) = (entry.as_object_mut(), extra) {
            map.extend(more);
        }
        if let Err(e) = append_line(&self.file, &entry) {
            eprintln!("failed to write transcript {}: {e}", self.file.display());
        }
        self.view.feed(&entry);
        self.leaf = Some(uuid.to_string());
    }
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

/// Nanoseconds since the Unix epoch, the clock `FAKE_CLAUDE_STAMP` stamps lines with.
fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

enum OutMsg {
    Line(String),
    Exit(i32),
}

/// Stdout, owned by one writer task so that reading stdin never waits on output. Lines are
/// written in the order they are sent, each with one write and a flush.
#[derive(Clone)]
struct Out(mpsc::UnboundedSender<OutMsg>);

impl Out {
    fn start() -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let stamp = env_flag("FAKE_CLAUDE_STAMP");
        tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Some(msg) = rx.recv().await {
                match msg {
                    OutMsg::Line(mut line) => {
                        if stamp && line.starts_with('{') && line.len() > 2 {
                            line.insert_str(1, &format!("\"stamp_ns\":{},", unix_nanos()));
                        }
                        line.push('\n');
                        if stdout.write_all(line.as_bytes()).await.is_err()
                            || stdout.flush().await.is_err()
                        {
                            std::process::exit(1);
                        }
                    }
                    OutMsg::Exit(code) => {
                        let _ = stdout.flush().await;
                        std::process::exit(code);
                    }
                }
            }
        });
        Out(tx)
    }

    fn send(&self, frame: Value) {
        let _ = self.0.send(OutMsg::Line(frame.to_string()));
    }

    /// Exits with `code` once every line sent before has been written. Never returns.
    async fn exit(&self, code: i32) {
        let _ = self.0.send(OutMsg::Exit(code));
        std::future::pending::<()>().await;
    }
}

// ---------------------------------------------------------------------------------------------
// Shared state between the stdin reader and the turn runner
// ---------------------------------------------------------------------------------------------

struct State {
    model: String,
    mode: String,
    session_id: Option<String>,
    queue: VecDeque<Value>,
    stdin_closed: bool,
    running: bool,
    interrupt: Option<watch::Sender<bool>>,
    pending: HashMap<String, oneshot::Sender<Value>>,
    /// The last turn's result was an error (an API error, an interrupt, the turn limit): the
    /// exit code is then 1.
    last_error: bool,
    /// A turn has begun in this process (past its `system/init`).
    began: bool,
    /// An interrupt came while the process was starting, with the first prompt taken: that
    /// turn ends before the model's reply.
    abort_first: bool,
}

struct Shared {
    cfg: Config,
    out: Out,
    state: Mutex<State>,
    wake: Notify,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn control_success(&self, request_id: &Value, response: Value) {
        self.out.send(json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": response},
        }));
    }

    fn control_error(&self, request_id: &Value, error: String, code: Option<&str>) {
        let mut response = json!({"subtype": "error", "request_id": request_id, "error": error});
        if let Some(code) = code {
            response["error_code"] = json!(code);
        }
        self.out
            .send(json!({"type": "control_response", "response": response}));
    }

    fn lifecycle(&self, session_id: &str, command_uuid: &str, state: &str) {
        self.out.send(json!({
            "type": "command_lifecycle",
            "command_uuid": command_uuid,
            "state": state,
            "session_id": session_id,
            "uuid": new_uuid(),
        }));
    }

    fn on_user(&self, mut msg: Value) {
        let wants_lifecycle = msg["uuid"].is_string() || self.cfg.unknown_types;
        if wants_lifecycle && !msg["uuid"].is_string() {
            msg["uuid"] = json!(new_uuid());
        }
        let mut st = self.state();
        if wants_lifecycle && let Some(sid) = &st.session_id {
            self.lifecycle(sid, msg["uuid"].as_str().unwrap_or_default(), "queued");
        }
        st.queue.push_back(msg);
        drop(st);
        self.wake.notify_one();
    }

    fn on_control_request(&self, msg: &Value) {
        let request_id = &msg["request_id"];
        let request = &msg["request"];
        let subtype = request["subtype"].as_str().unwrap_or_default();
        let mut st = self.state();
        match subtype {
            "initialize" => {
                let response = json!({
                    "commands": [],
                    "agents": [],
                    "output_style": "default",
                    "available_output_styles": ["default"],
                    // As 2.1.330 lists them (fewer fields).
                    "models": [
                        {"value": "default", "resolvedModel": "claude-opus-5-5",
                         "displayName": "Default (recommended)",
                         "description": "Use the default model (currently Opus 5.5)"},
                        {"value": "sonnet", "resolvedModel": "claude-sonnet-5-5",
                         "displayName": "Sonnet",
                         "description": "Sonnet 5.5 · Efficient for routine tasks"},
                        {"value": "haiku", "resolvedModel": "claude-haiku-5-5",
                         "displayName": "Haiku",
                         "description": "Haiku 5.5 · Fastest for quick answers"},
                    ],
                    "account": {
                        "apiKeySource": self.cfg.api_key_source,
                        "apiProvider": "firstParty",
                    },
                    "pid": self.cfg.pid,
                    "claude_code_version": VERSION,
                    "session_state": if st.running { "running" } else { "idle" },
                });
                self.control_success(request_id, response);
            }
            "interrupt" => {
                let still_queued: Vec<Value> = st
                    .queue
                    .iter()
                    .filter(|m| m["uuid"].is_string())
                    .map(|m| m["uuid"].clone())
                    .collect();
                self.control_success(request_id, json!({"still_queued": still_queued}));
                if !self.cfg.ignore_interrupt {
                    match &st.interrupt {
                        Some(tx) => {
                            let _ = tx.send(true);
                        }
                        // As the real CLI: an interrupt while it starts stops the first prompt
                        // (taken or still queued) before the model's reply.
                        None if !st.began && (st.running || !st.queue.is_empty()) => {
                            st.abort_first = true;
                        }
                        None => {}
                    }
                }
            }
            "set_model" => {
                let model = request["model"]
                    .as_str()
                    .filter(|m| !m.is_empty() && *m != "default")
                    .unwrap_or(DEFAULT_MODEL)
                    .to_string();
                if self.cfg.refuse_set_model {
                    // What the real CLI answers when its check of the new model with the API
                    // fails; it keeps the current model.
                    let response = json!({
                        "subtype": "error",
                        "request_id": request_id,
                        "error": format!("Unable to validate model: {model} was rejected by the API"),
                        "error_code": "check_failed",
                        "model": st.model,
                    });
                    self.out
                        .send(json!({"type": "control_response", "response": response}));
                } else {
                    st.model = model;
                    self.control_success(request_id, json!({"model": st.model}));
                }
            }
            "set_permission_mode" => match request["mode"].as_str() {
                Some("bypassPermissions") if !self.cfg.launched_bypass => self.control_error(
                    request_id,
                    "Cannot set permission mode to bypassPermissions because the session was not \
                     launched with --dangerously-skip-permissions"
                        .into(),
                    Some("bypass_not_launched"),
                ),
                Some(mode) if PERMISSION_MODES.contains(&mode) => {
                    // `manual` is the default mode under another name.
                    st.mode = if mode == "manual" { "default" } else { mode }.to_string();
                    self.control_success(request_id, json!({"mode": st.mode}));
                    self.out.send(json!({
                        "type": "system",
                        "subtype": "status",
                        "status": null,
                        "session_id": st.session_id,
                        "uuid": new_uuid(),
                    }));
                }
                _ => self.control_error(
                    request_id,
                    "Cannot set permission mode: must be one of acceptEdits, auto, \
                     bypassPermissions, default, dontAsk, plan"
                        .into(),
                    Some("invalid_mode"),
                ),
            },
            _ => self.control_error(
                request_id,
                format!("Unsupported control request subtype: {subtype}"),
                Some("unsupported_request"),
            ),
        }
    }

    fn on_control_response(&self, msg: Value) {
        let Some(id) = msg["response"]["request_id"].as_str() else {
            return;
        };
        if let Some(tx) = self.state().pending.remove(id) {
            let _ = tx.send(msg);
        }
    }

    fn on_eof(&self) {
        self.cfg
            .log(json!({"pid": self.cfg.pid, "event": "stdin_closed"}));
        if self.cfg.ignore_eof {
            // Stays up, like a CLI waiting on a background task: only a signal ends it.
            return;
        }
        let mut st = self.state();
        st.stdin_closed = true;
        // Pending permission requests can no longer be answered.
        st.pending.clear();
        drop(st);
        self.wake.notify_one();
    }
}

async fn read_stdin(sh: Arc<Shared>) {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                eprintln!("Error parsing streaming input line (type=unknown): {e}");
                sh.out.exit(1).await;
                return;
            }
            Err(_) => break,
        };
        sh.cfg.log(json!({"pid": sh.cfg.pid, "stdin": line}));
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(msg) => msg,
            Err(_) => {
                eprintln!(
                    "Error parsing streaming input line (type=unknown, {} chars): SyntaxError",
                    line.chars().count()
                );
                sh.out.exit(1).await;
                return;
            }
        };
        match msg["type"].as_str() {
            Some("user") if msg["message"]["role"] != "user" => {
                // The real CLI ends at once, whatever it was doing.
                let role = match &msg["message"]["role"] {
                    Value::Null => "undefined".to_string(),
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                eprintln!("Error: Expected message role 'user', got '{role}'");
                sh.out.exit(1).await;
                return;
            }
            Some("user") => sh.on_user(msg),
            Some("control_request") => sh.on_control_request(&msg),
            Some("control_response") => sh.on_control_response(msg),
            _ => {}
        }
    }
    sh.on_eof();
}

// ---------------------------------------------------------------------------------------------
// Turns
// ---------------------------------------------------------------------------------------------

/// Runs queued prompts one after the other until stdin is closed and the queue is empty.
async fn run_turns(sh: Arc<Shared>, plan: Plan) {
    let mut conversation: Option<Conversation> = None;
    let mut billed_turns: u64 = 0;
    loop {
        let msg = loop {
            {
                let mut st = sh.state();
                if let Some(msg) = st.queue.pop_front() {
                    st.running = true;
                    break msg;
                }
                if st.stdin_closed {
                    return;
                }
            }
            sh.wake.notified().await;
        };
        // Between taking a prompt and its `system/init` the real CLI takes 20-100 ms; an
        // interrupt in that window is acknowledged and does nothing.
        tokio::time::sleep(sh.cfg.turn_delay).await;
        let interrupt = {
            let mut st = sh.state();
            let (tx, rx) = watch::channel(std::mem::take(&mut st.abort_first));
            st.interrupt = Some(tx);
            st.began = true;
            rx
        };
        let conv = match &mut conversation {
            Some(conv) => conv,
            None => match open_conversation(&sh.cfg, &plan) {
                Ok(conv) => conversation.insert(conv),
                Err(err) => {
                    sh.out.send(json!({
                        "type": "result",
                        "subtype": "error_during_execution",
                        "is_error": true,
                        "duration_ms": 0,
                        "duration_api_ms": 0,
                        "num_turns": 0,
                        "session_id": err.session_id,
                        "total_cost_usd": 0,
                        "usage": {"input_tokens": 0, "output_tokens": 0},
                        "modelUsage": {},
                        "permission_denials": [],
                        "stop_reason": null,
                        "errors": [err.message],
                        "uuid": new_uuid(),
                    }));
                    eprintln!("{}", err.message);
                    sh.out.exit(1).await;
                    return;
                }
            },
        };
        billed_turns += 1;
        let (model, mode) = {
            let st = sh.state();
            (st.model.clone(), st.mode.clone())
        };
        let mut turn = Turn {
            sh: &sh,
            session_id: conv.session_id.clone(),
            conv,
            interrupt,
            started: Instant::now(),
            model,
            mode,
            delay: sh.cfg.delay,
            late: false,
            words: 0,
            crash_word: msg["message"]["content"].to_string().contains("CRASH"),
            input_tokens: 0,
            output_tokens: 0,
            num_turns: 1,
            denials: Vec::new(),
            cost: billed_turns as f64 / 1000.0,
        };
        turn.run(msg).await;
        let mut st = sh.state();
        st.running = false;
        st.interrupt = None;
    }
}

enum Block {
    Text(String),
    ToolUse { id: String, input: Value },
}

enum Permission {
    Allow(String),
    Deny(String),
    /// The tool was removed (`--disallowedTools`).
    Missing,
    Interrupted,
}

/// Why a turn stopped before the model's final reply.
enum Stop {
    /// Interrupted, with the result's terminal reason.
    Aborted(&'static str),
    /// It would have taken more model requests than `--max-turns` allows.
    MaxTurns(u32),
}

impl From<&'static str> for Stop {
    fn from(reason: &'static str) -> Self {
        Stop::Aborted(reason)
    }
}

struct Turn<'a> {
    sh: &'a Shared,
    conv: &'a mut Conversation,
    session_id: String,
    interrupt: watch::Receiver<bool>,
    started: Instant,
    model: String,
    mode: String,
    /// The pause before each streamed word.
    delay: Duration,
    /// The model's reply starts after [`LATE_DELAY`] (`LATE` in the prompt).
    late: bool,
    words: u64,
    /// The prompt contains `CRASH`: die after two words.
    crash_word: bool,
    input_tokens: u64,
    output_tokens: u64,
    num_turns: u32,
    denials: Vec<Value>,
    cost: f64,
}

/// Resolves once an interrupt has been signalled for the running turn.
async fn interrupted(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The value of the first `<prefix><value>` word in a prompt.
fn keyword<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(prefix))
        .filter(|v| !v.is_empty())
}

/// The command of the first `TOOL:<command>` word in a prompt (`+` stands for a space).
fn tool_command(text: &str) -> Option<String> {
    keyword(text, "TOOL:").map(|c| c.replace('+', " "))
}

/// Whether the real CLI (2.1.332) runs a Bash command without asking. Read-only commands inside
/// the working directory run in every mode; commands that change files inside it run unasked in
/// `acceptEdits`; `bypassPermissions` runs everything; anything else needs a permission.
fn runs_unasked(mode: &str, command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    let first = words.first().copied().unwrap_or_default();
    let inside = words[1.min(words.len())..]
        .iter()
        .all(|w| !w.starts_with('/') && !w.starts_with("..") && !w.starts_with('~'));
    let redirect = command.contains('>');
    let reads = matches!(
        first,
        "echo" | "ls" | "pwd" | "cat" | "head" | "tail" | "wc"
    );
    let edits = matches!(first, "touch" | "rm" | "rmdir" | "mkdir" | "mv" | "cp")
        || (redirect && first == "echo");
    mode == "bypassPermissions"
        || (inside && reads && !redirect)
        || (inside && edits && mode == "acceptEdits")
}

impl Turn<'_> {
    fn cfg(&self) -> &Config {
        &self.sh.cfg
    }

    fn emit(&self, mut frame: Value) {
        if let Some(map) = frame.as_object_mut() {
            map.entry("session_id")
                .or_insert_with(|| json!(self.session_id));
            map.entry("uuid").or_insert_with(|| json!(new_uuid()));
        }
        self.sh.out.send(frame);
    }

    fn event(&self, event: Value) {
        if self.cfg().partial {
            self.emit(json!({
                "type": "stream_event",
                "event": event,
                "parent_tool_use_id": null,
            }));
        }
    }

    fn system(&self, subtype: &str, fields: Value) {
        let mut frame = json!({"type": "system", "subtype": subtype});
        if let (Some(map), Value::Object(more)) = (frame.as_object_mut(), fields) {
            map.extend(more);
        }
        self.emit(frame);
    }

    async fn crash_check(&self) {
        let crash_after = if self.crash_word {
            Some(2)
        } else {
            self.cfg().crash_after
        };
        if crash_after == Some(self.words) {
            eprintln!("fake-claude: simulated crash after {} words", self.words);
            self.sh.out.exit(1).await;
        }
    }

    /// Waits the configured per-word delay; true when the turn has been interrupted.
    async fn pause(&mut self) -> bool {
        self.pause_for(self.delay).await
    }

    /// Waits `delay`; true when the turn has been interrupted.
    async fn pause_for(&mut self, delay: Duration) -> bool {
        if !delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = interrupted(&mut self.interrupt) => {}
            }
        } else {
            tokio::task::yield_now().await;
        }
        *self.interrupt.borrow()
    }

    /// As the CLI does with the images of a prompt: each is saved under the session's temporary
    /// directory and a text block naming the file follows the prompt's blocks.
    fn with_image_paths(&mut self, content: &Value) -> Value {
        let Value::Array(blocks) = content else {
            return content.clone();
        };
        let mut out = blocks.clone();
        for block in blocks.iter().filter(|b| b["type"] == "image") {
            self.conv.images += 1;
            let ext = block["source"]["media_type"]
                .as_str()
                .and_then(|m| m.strip_prefix("image/"))
                .unwrap_or("png");
            let path = std::env::temp_dir()
                .join("claude-fake")
                .join(&self.conv.session_id)
                .join("images")
                .join(format!("{}.{ext}", self.conv.images));
            out.push(
                json!({"type": "text", "text": format!("[Image: source: {}]", path.display())}),
            );
        }
        Value::Array(out)
    }

    async fn run(&mut self, msg: Value) {
        let message =
            json!({"role": "user", "content": self.with_image_paths(&msg["message"]["content"])});
        let newest = real_texts(&message).join("\n");
        let prompt_uuid = msg["uuid"].as_str().map_or_else(new_uuid, str::to_string);
        let lifecycle = msg["uuid"].is_string();

        self.system(
            "init",
            json!({
                "cwd": self.conv.cwd,
                "tools": TOOLS.iter().filter(|t| !self.cfg().removed(t)).collect::<Vec<_>>(),
                "mcp_servers": [],
                "model": self.model,
                "permissionMode": self.mode,
                "slash_commands": ["compact", "context", "cost", "init", "review"],
                "apiKeySource": self.cfg().api_key_source,
                "claude_code_version": VERSION,
                "output_style": "default",
                "agents": ["general-purpose"],
                "skills": [],
                "plugins": [],
                "capabilities": ["interrupt_receipt_v1"],
                "analytics_disabled": self.cfg().analytics_disabled,
                "memory_paths": {},
                "messaging_socket_path": format!("/tmp/cc-socks/{}.sock", self.cfg().pid),
            }),
        );
        if lifecycle {
            self.sh.lifecycle(&self.session_id, &prompt_uuid, "started");
        }
        if self.cfg().replay {
            self.emit(json!({
                "type": "user",
                "message": message,
                "uuid": prompt_uuid,
                "isReplay": true,
                "parent_tool_use_id": null,
            }));
        }
        self.conv.append("user", &prompt_uuid, &message, json!({}));
        let history = self.conv.view.history;
        self.input_tokens = 50 + 10 * history as u64;

        if self.cfg().unknown_types {
            self.emit(json!({
                "type": "rate_limit_event",
                "rate_limit_info": {
                    "status": "allowed",
                    "resetsAt": chrono::Utc::now().timestamp() + 3600,
                    "rateLimitType": "five_hour",
                    "utilization": 0.1,
                },
            }));
        }

        // A prompt after a tool result (a turn that ended at its turn limit) is sent in one
        // message with it, and the model answers the tool result.
        let api_error = keyword(&newest, "HTTPERR:")
            .and_then(|s| s.parse::<u16>().ok())
            .filter(|_| self.conv.view.tool_output.is_none());
        let usage_limit = keyword(&newest, "USAGELIMIT:").and_then(|s| s.parse::<i64>().ok());
        if let Some(status) = api_error {
            self.api_error(status).await;
        } else if let Some(secs) = usage_limit {
            self.usage_limit(secs);
        } else {
            self.reply(&newest, history).await;
        }
        if self.cfg().unknown_types {
            self.system("session_state_changed", json!({"state": "idle"}));
        }
        if lifecycle {
            self.sh
                .lifecycle(&self.session_id, &prompt_uuid, "completed");
        }
    }

    /// A turn the model answers: streamed, possibly with a tool call, possibly interrupted.
    async fn reply(&mut self, newest: &str, history: usize) {
        if newest.contains("SLOW") {
            self.delay = self.delay.max(SLOW_DELAY);
        }
        self.late = newest.contains("LATE");
        let terminal = self.body(newest, history).await;
        match terminal {
            Ok(reply) => self.result(json!({
                "subtype": "success",
                "is_error": false,
                "result": reply,
                "stop_reason": "end_turn",
                "terminal_reason": "completed",
                "api_error_status": null,
            })),
            Err(Stop::MaxTurns(max)) => self.result(json!({
                "subtype": "error_max_turns",
                "is_error": true,
                "stop_reason": "tool_use",
                "terminal_reason": "max_turns",
                "errors": [format!("Reached maximum number of turns ({max})")],
            })),
            Err(Stop::Aborted(reason)) => {
                let diagnostic = if reason == "aborted_tools" {
                    "[ede_diagnostic] result_type=user last_content_type=tool_result stop_reason=tool_use"
                } else {
                    "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"
                };
                // The real CLI counts the interrupted request as one more turn.
                self.num_turns += 1;
                self.result(json!({
                    "subtype": "error_during_execution",
                    "is_error": true,
                    "stop_reason": null,
                    "terminal_reason": reason,
                    "errors": [diagnostic],
                }));
            }
        }
    }

    /// A turn whose model request fails with HTTP `status`, as the real CLI reports it: an
    /// `api_retry` frame per retry (401, 429 and 5xx are retried `CLAUDE_CODE_MAX_RETRIES`
    /// times), then a synthetic assistant message and a `success` result with `is_error`.
    async fn api_error(&mut self, status: u16) {
        self.system("status", json!({"status": "requesting"}));
        let retried = matches!(status, 401 | 429) || status >= 500;
        let reason = match status {
            400 => "unknown",
            401 => "authentication_failed",
            404 => "model_not_found",
            429 => "rate_limit",
            _ if status >= 500 => "server_error",
            _ => "unknown",
        };
        if retried {
            let retry_error = if status == 529 { "overloaded" } else { reason };
            for attempt in 1..=self.cfg().max_retries {
                self.system(
                    "api_retry",
                    json!({
                        "attempt": attempt,
                        "max_retries": self.cfg().max_retries,
                        "retry_delay_ms": 500u64 << (attempt - 1).min(6),
                        "error_status": status,
                        "error": retry_error,
                    }),
                );
                // The real CLI backs off for `retry_delay_ms`; the fake only pauses briefly.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let forced = format!("fake server: forced {status}");
        let text = match status {
            401 => format!("Failed to authenticate. API Error: 401 {forced}"),
            404 => format!(
                "There's an issue with the selected model ({}). It may not exist or you may not \
                 have access to it. Run --model to pick a different model.",
                self.model
            ),
            429 => format!("API Error: Request rejected (429) · {forced}"),
            _ if status >= 500 => format!(
                "API Error: {status} {forced}. This is a server-side issue, usually temporary \
                 — try again in a moment. If it persists, check your inference gateway ({}).",
                self.cfg().gateway
            ),
            _ => format!("API Error: {status} {forced}"),
        };
        self.error_reply(status, reason, text);
    }

    /// A turn a subscription's usage limit rejects, resetting `secs` from now.
    fn usage_limit(&mut self, secs: i64) {
        self.system("status", json!({"status": "requesting"}));
        let resets = chrono::Utc::now() + chrono::Duration::seconds(secs);
        self.emit(json!({
            "type": "rate_limit_event",
            "rate_limit_info": {
                "status": "rejected",
                "resetsAt": resets.timestamp(),
                "rateLimitType": "five_hour",
                "isUsingOverage": false,
            },
        }));
        let text = format!(
            "You've hit your 5-hour limit · resets {} (UTC)",
            resets.format("%-I:%M%P")
        );
        self.error_reply(429, "rate_limit", text);
    }

    /// The synthetic assistant message and the error result of a turn whose model request
    /// failed with HTTP `status`.
    fn error_reply(&mut self, status: u16, reason: &str, text: String) {
        let error_type = match status {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            _ => "api_error",
        };
        let uuid = new_uuid();
        let message = json!({
            "id": new_uuid(),
            "type": "message",
            "role": "assistant",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        self.emit(json!({
            "type": "assistant",
            "message": message,
            "parent_tool_use_id": null,
            "uuid": uuid,
            "timestamp": now(),
            "error": reason,
            "is_api_error_message": true,
            "api_error_status": status,
            "api_error_type": error_type,
        }));
        self.conv.append(
            "assistant",
            &uuid,
            &message,
            json!({"error": reason, "isApiErrorMessage": true}),
        );
        self.input_tokens = 0;
        self.cost = 0.0;
        self.result(json!({
            "subtype": "success",
            "is_error": true,
            "result": text,
            "stop_reason": "stop_sequence",
            "terminal_reason": "api_error",
            "api_error_status": status,
            "api_error_type": error_type,
        }));
    }

    /// Emits the `result` frame ending the turn, with the fields every result carries.
    fn result(&self, fields: Value) {
        let duration = self.started.elapsed().as_millis() as u64;
        let mut frame = json!({
            "type": "result",
            "num_turns": self.num_turns,
            "duration_ms": duration,
            "duration_api_ms": duration,
            "total_cost_usd": self.cost,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            "modelUsage": {
                self.model.clone(): {
                    "inputTokens": self.input_tokens,
                    "outputTokens": self.output_tokens,
                    "costUSD": self.cost,
                },
            },
            "permission_denials": self.denials,
        });
        if let (Some(map), Value::Object(more)) = (frame.as_object_mut(), fields) {
            map.extend(more);
        }
        self.sh.state().last_error = frame["is_error"] == true;
        self.emit(frame);
    }

    /// The model side of the turn: an optional tool call, then the text reply. Returns the reply
    /// text, or the terminal reason of an interrupted turn.
    async fn body(&mut self, text: &str, history: usize) -> Result<String, Stop> {
        if let Some(output) = self.conv.view.tool_output.clone() {
            // The prompt went in one message with a tool result no model request answered.
            let reply = format!("Tool said: {output}");
            self.stream(Block::Text(reply.clone())).await?;
            return Ok(reply);
        }
        if let Some(command) = tool_command(text) {
            let id = format!("toolu_fake_{}", short_id());
            let input = json!({"command": command});
            self.stream(Block::ToolUse {
                id: id.clone(),
                input: input.clone(),
            })
            .await?;
            let removed = self.cfg().removed("Bash");
            let permission = if removed {
                self.event(json!({"type": "message_stop"}));
                Permission::Missing
            } else {
                self.permission(&id, &input).await
            };
            let (content, is_error) = match permission {
                Permission::Allow(command) => (format!("ran: {command}"), false),
                Permission::Deny(message) => {
                    self.denials.push(json!({
                        "tool_name": "Bash",
                        "tool_use_id": id,
                        "tool_input": input,
                    }));
                    (message, true)
                }
                Permission::Missing => (NO_SUCH_BASH.to_string(), true),
                Permission::Interrupted => {
                    self.tool_result(&id, TOOL_INTERRUPT_MARKER, true);
                    return Err(Stop::Aborted("aborted_tools"));
                }
            };
            if !removed {
                // (A removed tool's result came as soon as the call was complete.)
                self.tool_result(&id, &content, is_error);
            }
            self.num_turns = 2;
            if let Some(max) = self.cfg().max_turns.filter(|max| *max < 2) {
                // The tool result would take a second model request.
                return Err(Stop::MaxTurns(max));
            }
            let reply = format!("Tool said: {content}");
            self.stream(Block::Text(reply.clone())).await?;
            return Ok(reply);
        }
        let mut reply = format!("Echo: {} (history {history})", self.conv.view.prompt());
        if text.contains("SLOW") {
            let words = reply.split_whitespace().count();
            for i in words..SLOW_WORDS {
                reply.push_str(&format!(" chunk{i:02}"));
            }
        }
        self.stream(Block::Text(reply.clone())).await?;
        Ok(reply)
    }

    fn tool_result(&mut self, tool_use_id: &str, content: &str, is_error: bool) {
        let uuid = new_uuid();
        let message = json!({
            "role": "user",
            "content": [{
                "tool_use_id": tool_use_id,
                "type": "tool_result",
                "content": content,
                "is_error": is_error,
            }],
        });
        let tool_use_result = if let Some(inner) = content
            .strip_prefix("<tool_use_error>")
            .and_then(|c| c.strip_suffix("</tool_use_error>"))
        {
            json!(inner)
        } else if is_error {
            json!(format!("Error: {content}"))
        } else {
            json!({"stdout": content, "stderr": "", "interrupted": false, "isImage": false})
        };
        self.emit(json!({
            "type": "user",
            "message": message,
            "parent_tool_use_id": null,
            "uuid": uuid,
            "timestamp": now(),
            "tool_use_result": tool_use_result,
        }));
        self.conv.append(
            "user",
            &uuid,
            &message,
            json!({"toolUseResult": tool_use_result}),
        );
    }

    /// Decides on a tool call. The tool call's `message_stop` event is still to come: the
    /// real CLI asks for the permission before it.
    async fn permission(&mut self, tool_use_id: &str, input: &Value) -> Permission {
        let command = input["command"].as_str().unwrap_or_default().to_string();
        let mode = self.sh.state().mode.clone();
        // `--disallowedTools` rules come first, then `--allowedTools`, then the mode.
        let denied = self
            .cfg()
            .disallowed_tools
            .iter()
            .any(|r| r.pattern.is_some() && r.covers_bash(&command));
        let allowed = !denied
            && (runs_unasked(&mode, &command)
                || self
                    .cfg()
                    .allowed_tools
                    .iter()
                    .any(|r| r.covers_bash(&command)));
        let asks = !denied
            && !allowed
            && !matches!(mode.as_str(), "dontAsk" | "plan")
            && self.cfg().prompt_stdio;
        if denied {
            let message = format!("Permission to use Bash with command {command} has been denied.");
            self.system(
                "permission_denied",
                json!({
                    "tool_name": "Bash",
                    "tool_use_id": tool_use_id,
                    "decision_reason_type": "subcommandResults",
                    "message": message,
                }),
            );
            self.event(json!({"type": "message_stop"}));
            return Permission::Deny(message);
        }
        if !asks {
            self.event(json!({"type": "message_stop"}));
        }
        if allowed {
            return Permission::Allow(command);
        }
        if mode == "dontAsk" {
            return Permission::Deny(
                "Permission to use Bash has been denied because Claude Code is running in \
                 don't ask mode."
                    .into(),
            );
        }
        if mode == "plan" {
            return Permission::Deny(
                "Auto mode is unavailable: its safety check does not run for this session, so \
                 Bash was not run."
                    .into(),
            );
        }
        if !self.cfg().prompt_stdio {
            return Permission::Deny(format!("{command} in '{}' needs approval.", self.conv.cwd));
        }
        let request_id = new_uuid();
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.sh.state();
            if st.stdin_closed {
                drop(st);
                self.event(json!({"type": "message_stop"}));
                return Permission::Deny("Stream closed".to_string());
            }
            st.pending.insert(request_id.clone(), tx);
        }
        self.sh.out.send(json!({
            "type": "control_request",
            "request_id": request_id,
            "request": {
                "subtype": "can_use_tool",
                "tool_name": "Bash",
                "display_name": "Bash",
                "input": input,
                "permission_suggestions": [],
                "tool_use_id": tool_use_id,
            },
        }));
        self.event(json!({"type": "message_stop"}));
        let cancel_after = self.cfg().cancel_permission;
        let cancel = async {
            match cancel_after {
                Some(delay) => tokio::time::sleep(delay).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            answer = rx => match answer {
                Ok(answer) => decision(&answer, &command),
                Err(_) => Permission::Deny("Stream closed".to_string()),
            },
            _ = interrupted(&mut self.interrupt) => {
                self.sh.state().pending.remove(&request_id);
                Permission::Interrupted
            }
            _ = cancel => {
                self.sh.state().pending.remove(&request_id);
                self.sh.out.send(json!({
                    "type": "control_cancel_request",
                    "request_id": request_id,
                }));
                Permission::Deny("Permission request was cancelled".to_string())
            }
        }
    }

    /// Streams one assistant message. On interrupt, emits the aborted frames and returns the
    /// terminal reason.
    async fn stream(&mut self, block: Block) -> Result<(), &'static str> {
        let message_id = format!("msg_fake_{}", short_id());
        let request_id = format!("req_fake_{}", short_id());
        // Each model request is announced, the one after a tool result too.
        self.system("status", json!({"status": "requesting"}));
        // The model's first byte: an interrupt before it leaves no assistant message at all.
        let wait = if std::mem::take(&mut self.late) {
            LATE_DELAY
        } else {
            self.delay
        };
        if self.pause_for(wait).await {
            return Err(self.abort_before_reply());
        }
        self.event(json!({
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 1},
            },
        }));
        let (content, stop_reason, words) = match block {
            Block::Text(text) => {
                self.event(json!({
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                }));
                let mut sent = String::new();
                let mut words = 0;
                for word in text.split_inclusive(' ') {
                    self.crash_check().await;
                    if self.pause().await {
                        return Err(self.abort(&message_id, &request_id, &sent));
                    }
                    self.event(json!({
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": word},
                    }));
                    sent.push_str(word);
                    self.words += 1;
                    words += 1;
                }
                self.crash_check().await;
                if let Some(size) = self.cfg().huge_line {
                    self.huge_frame(size);
                }
                (json!([{"type": "text", "text": text}]), "end_turn", words)
            }
            Block::ToolUse { id, input } => {
                self.event(json!({
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": id, "name": "Bash", "input": {}},
                }));
                self.event(json!({
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": input.to_string()},
                }));
                let content =
                    json!([{"type": "tool_use", "id": id, "name": "Bash", "input": input}]);
                (content, "tool_use", 1)
            }
        };
        self.output_tokens += words;
        let uuid = new_uuid();
        let message = json!({
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": words},
        });
        self.emit(json!({
            "type": "assistant",
            "message": message,
            "parent_tool_use_id": null,
            "uuid": uuid,
            "timestamp": now(),
            "request_id": request_id,
        }));
        self.conv.append(
            "assistant",
            &uuid,
            &message,
            json!({"requestId": request_id}),
        );
        if let Some(id) = message["content"][0]["id"].as_str()
            && self.cfg().removed("Bash")
        {
            // A call to a removed tool fails as soon as it is complete.
            self.tool_result(id, NO_SUCH_BASH, true);
        }
        self.event(json!({"type": "content_block_stop", "index": 0}));
        self.event(json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": words},
        }));
        // A tool call's `message_stop` comes once its permission is settled (see `permission`).
        if stop_reason != "tool_use" {
            self.event(json!({"type": "message_stop"}));
        }
        Ok(())
    }

    /// The frames of a turn interrupted before the model's reply began: only the marker (the
    /// interrupted prompt then reaches the model together with the next one).
    fn abort_before_reply(&mut self) -> &'static str {
        let marker_uuid = new_uuid();
        let marker =
            json!({"role": "user", "content": [{"type": "text", "text": INTERRUPT_MARKER}]});
        self.emit(json!({
            "type": "user",
            "message": marker,
            "parent_tool_use_id": null,
            "uuid": marker_uuid,
            "timestamp": now(),
        }));
        self.conv.append("user", &marker_uuid, &marker, json!({}));
        "aborted_streaming"
    }

    /// The frames of a turn interrupted while streaming `partial`.
    fn abort(&mut self, message_id: &str, request_id: &str, partial: &str) -> &'static str {
        let uuid = new_uuid();
        let message = json!({
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [{"type": "text", "text": partial}],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.words},
        });
        self.emit(json!({
            "type": "assistant",
            "message": message,
            "parent_tool_use_id": null,
            "uuid": uuid,
            "timestamp": now(),
            "request_id": request_id,
            "aborted": true,
        }));
        self.conv
            .append("assistant", &uuid, &message, json!({"aborted": true}));
        let marker_uuid = new_uuid();
        let marker =
            json!({"role": "user", "content": [{"type": "text", "text": INTERRUPT_MARKER}]});
        self.emit(json!({
            "type": "user",
            "message": marker,
            "parent_tool_use_id": null,
            "uuid": marker_uuid,
            "timestamp": now(),
        }));
        self.conv.append("user", &marker_uuid, &marker, json!({}));
        self.event(json!({"type": "content_block_stop", "index": 0}));
        self.event(json!({
            "type": "message_delta",
            "delta": {"stop_reason": null, "stop_sequence": null},
            "usage": {"output_tokens": self.words},
        }));
        self.event(json!({"type": "message_stop"}));
        "aborted_streaming"
    }

    /// A `system/huge` frame whose serialized line is exactly `size` bytes when possible.
    fn huge_frame(&self, size: usize) {
        let mut frame = json!({
            "type": "system",
            "subtype": "huge",
            "session_id": self.session_id,
            "uuid": new_uuid(),
            "padding": "",
        });
        let base = frame.to_string().len();
        frame["padding"] = json!("x".repeat(size.saturating_sub(base)));
        self.sh.out.send(frame);
    }
}

fn decision(answer: &Value, command: &str) -> Permission {
    let response = &answer["response"];
    if response["subtype"] == "error" {
        let error = response["error"]
            .as_str()
            .unwrap_or("permission request failed");
        return Permission::Deny(error.to_string());
    }
    let body = &response["response"];
    if body["behavior"] == "allow" {
        let command = body["updatedInput"]["command"]
            .as_str()
            .unwrap_or(command)
            .to_string();
        Permission::Allow(command)
    } else {
        Permission::Deny(body["message"].as_str().unwrap_or_default().to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

/// `--version` and `auth status [--json|--text]` as the real CLI answers them: the version
/// line; whether it is signed in (an `ANTHROPIC_API_KEY`, a `CLAUDE_CODE_OAUTH_TOKEN`, or the
/// credentials file `/login` leaves in the config dir), exiting with 1 when not. The exit code,
/// for anything else None.
fn answer_about_itself(args: &[String], config_dir: &Path) -> Option<i32> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["--version"] | ["-v"] => {
            println!("{VERSION} (Claude Code)");
            Some(0)
        }
        ["auth", "status", rest @ ..] if rest.iter().all(|a| ["--json", "--text"].contains(a)) => {
            let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
            let (method, source) = if set("ANTHROPIC_API_KEY") {
                ("api_key", Some("ANTHROPIC_API_KEY"))
            } else if set("CLAUDE_CODE_OAUTH_TOKEN") {
                ("oauth_token", Some("CLAUDE_CODE_OAUTH_TOKEN"))
            } else if config_dir.join(".credentials.json").is_file() {
                ("claude.ai", None)
            } else {
                ("none", None)
            };
            let mut status = json!({
                "loggedIn": method != "none",
                "authMethod": method,
                "apiProvider": "firstParty",
                "configDirectory": config_dir,
            });
            if let Some(source) = source {
                status["apiKeySource"] = json!(source);
            }
            println!("{}", serde_json::to_string_pretty(&status).unwrap());
            Some(if method == "none" { 1 } else { 0 })
        }
        _ => None,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let config_dir = match std::env::var_os("CLAUDE_CONFIG_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".claude"),
    };
    // Questions about itself are answered at once and leave no trace in the log: the server
    // asks them at start, and `agentmux doctor` whenever it runs.
    if let Some(code) = answer_about_itself(&argv[1.min(argv.len())..], &config_dir) {
        std::process::exit(code);
    }
    let cfg = Config {
        projects: config_dir.join("projects"),
        pid: std::process::id(),
        partial: false,
        replay: false,
        prompt_stdio: false,
        delay: Duration::from_millis(env_number("FAKE_CLAUDE_DELAY_MS").unwrap_or(0)),
        crash_after: env_number("FAKE_CLAUDE_CRASH_AFTER_WORDS"),
        ignore_interrupt: env_flag("FAKE_CLAUDE_IGNORE_INTERRUPT"),
        unknown_types: env_flag("FAKE_CLAUDE_UNKNOWN_TYPES"),
        huge_line: env_number("FAKE_CLAUDE_HUGE_LINE_BYTES").map(|n| n as usize),
        refuse_resume: env_flag("FAKE_CLAUDE_REFUSE_RESUME"),
        cancel_permission: env_number("FAKE_CLAUDE_CANCEL_PERMISSION_MS")
            .map(Duration::from_millis),
        init_delay: Duration::from_millis(env_number("FAKE_CLAUDE_INIT_DELAY_MS").unwrap_or(0)),
        turn_delay: Duration::from_millis(env_number("FAKE_CLAUDE_TURN_DELAY_MS").unwrap_or(0)),
        ignore_eof: env_flag("FAKE_CLAUDE_IGNORE_EOF"),
        ignore_sigterm: env_flag("FAKE_CLAUDE_IGNORE_SIGTERM"),
        refuse_set_model: env_flag("FAKE_CLAUDE_REFUSE_SET_MODEL"),
        max_retries: env_number("CLAUDE_CODE_MAX_RETRIES").unwrap_or(10),
        gateway: std::env::var("ANTHROPIC_BASE_URL")
            .ok()
            .and_then(|url| {
                let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
                rest.split('/').next().map(str::to_string)
            })
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "api.anthropic.com".into()),
        launched_bypass: false,
        allowed_tools: Vec::new(),
        disallowed_tools: Vec::new(),
        max_turns: None,
        log: std::env::var_os("FAKE_CLAUDE_LOG")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        api_key_source: if std::env::var_os("ANTHROPIC_API_KEY").is_some() {
            "ANTHROPIC_API_KEY"
        } else {
            "none"
        },
        analytics_disabled: env_flag("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"),
        cwd,
    };
    cfg.log(json!({"argv": argv, "cwd": cfg.cwd, "pid": cfg.pid}));
    if std::env::var_os("FAKE_CLAUDE_FAIL_START_IF")
        .filter(|p| !p.is_empty())
        .is_some_and(|p| Path::new(&p).exists())
    {
        // As the real CLI's start-up errors: nothing on stdout, one line on stderr, rc 1.
        eprintln!("Error: the CLI could not start (FAKE_CLAUDE_FAIL_START_IF)");
        std::process::exit(1);
    }
    if let Some(path) = std::env::var_os("FAKE_CLAUDE_ENV_DUMP").filter(|p| !p.is_empty()) {
        let env: Map<String, Value> = std::env::vars_os()
            .map(|(k, v)| {
                let value = v.to_string_lossy().into_owned();
                (k.to_string_lossy().into_owned(), Value::String(value))
            })
            .collect();
        if let Err(e) = std::fs::write(&path, Value::Object(env).to_string()) {
            eprintln!("failed to write environment dump: {e}");
        }
    }

    let args = parse_args(&argv[1.min(argv.len())..]);
    let cfg = Config {
        partial: args.partial,
        replay: args.replay,
        prompt_stdio: args.prompt_tool.as_deref() == Some("stdio"),
        launched_bypass: args.skip_permissions
            || args.permission_mode.as_deref() == Some("bypassPermissions"),
        allowed_tools: args.allowed_tools.clone(),
        disallowed_tools: args.disallowed_tools.clone(),
        max_turns: args.max_turns,
        ..cfg
    };
    let plan = startup_plan(&args, &cfg);
    let model = args.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into());
    if !model.starts_with("claude-") {
        eprintln!(
            "[claude-code:unrecognized_model] {}",
            json!({"model": model})
        );
    }
    let mode = if args.skip_permissions {
        "bypassPermissions".to_string()
    } else {
        args.permission_mode
            .clone()
            .unwrap_or_else(|| "default".into())
    };

    let out = Out::start();
    tokio::spawn(on_sigterm(
        out.clone(),
        cfg.pid,
        cfg.log.clone(),
        cfg.ignore_sigterm,
    ));
    // Start-up: the real CLI answers nothing (not even `initialize`) for about 0.65 s.
    tokio::time::sleep(cfg.init_delay).await;
    let shared = Arc::new(Shared {
        cfg,
        out: out.clone(),
        state: Mutex::new(State {
            model,
            mode,
            session_id: plan.session_id(),
            queue: VecDeque::new(),
            stdin_closed: false,
            running: false,
            interrupt: None,
            pending: HashMap::new(),
            last_error: false,
            began: false,
            abort_first: false,
        }),
        wake: Notify::new(),
    });
    let runner = tokio::spawn(run_turns(shared.clone(), plan));
    tokio::spawn(read_stdin(shared.clone()));
    let _ = runner.await;
    // Like the real CLI: exit code 1 when the last turn's result was an error.
    let code = i32::from(shared.state().last_error);
    out.exit(code).await;
}

/// SIGTERM: logged; then the process exits at once with 143 and no result, like the real CLI,
/// unless `FAKE_CLAUDE_IGNORE_SIGTERM` is set.
async fn on_sigterm(out: Out, pid: u32, log: Option<PathBuf>, ignore: bool) {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return;
    };
    while term.recv().await.is_some() {
        if let Some(path) = &log {
            let _ = append_line(
                path,
                &json!({"pid": pid, "signal": "SIGTERM", "ignored": ignore}),
            );
        }
        if !ignore {
            out.exit(143).await;
        }
    }
}
