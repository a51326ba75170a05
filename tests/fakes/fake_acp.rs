//! `fake-acp`: a small Agent Client Protocol agent for tests, answering the way the pinned
//! `@agentclientprotocol/claude-agent-acp` adapter does (recorded in
//! `tests/it/fixtures/acp/`), for what the real one can't be made to do on demand: crash
//! mid-turn, write garbage, or load a session without offering resume.
//!
//! Usage: `fake-acp --state DIR [--no-resume] [--no-load] [--no-images] [--modes gemini]
//! [--start-mode MODE]`. Sessions are kept in
//! `DIR/<session id>.json` (their prompts and replies), so a new process can resume or load
//! them. Each `initialize` is logged as a line `initialize` in `DIR/calls.log`, and every
//! method it receives likewise, one per line; the `_meta` of each `session/new`, `session/load`
//! and `session/resume` goes to `DIR/meta.log`, as a line `METHOD JSON` (`null` for none). At
//! start it writes its working directory and
//! the names and values of its environment to `DIR/env.log` (one `cwd=` line, then `NAME=value`
//! lines).
//!
//! Like the adapter, sessions start in `auto` (`--start-mode`) and offer its modes, among them
//! `bypassPermissions`, and its config options (`mode`, `model`, `effort`, `fast`,
//! `ultracode`); `session/set_mode` is answered with a `config_option_update`, a change of the
//! `mode` option with a `current_mode_update`, an unknown mode with `-32602`, and a request for
//! a method it does not have with `-32601` (`"Method not found": <method>`); a resumed or loaded
//! session is back in the starting mode. With `--modes gemini` a mode change is announced with
//! a `current_mode_update` and only the `model` option is offered.
//!
//! A prompt's text picks the behaviour:
//! * `CRASH` — one chunk, then the process exits with status 3;
//! * `TOOL:<command>` — a `Bash` tool call, as the adapter makes it: in the `default` mode it
//!   asks `session/request_permission` first (options `allow-once`/`allow_once`,
//!   `reject`/`reject_once`), in the others it runs at once; run, it completes with `(Bash
//!   completed with no output)`; rejected, it fails with `User refused permission to run tool`;
//!   cancelled (or `session/cancel`), it fails and the turn ends `cancelled`. The reply is
//!   `Tool said: <output>`;
//! * `PERMIT` — the same for `touch a.txt`, asking in every mode, with output `ran`. With
//!   `ALWAYS` too, an `allow-always`/`allow_always` option is offered first (as the adapter does
//!   for some tools);
//! * `GARBAGE` — lines that are not JSON-RPC, then a normal reply;
//! * `HUGE` — one 100 000-byte `session/update` line, then a normal reply;
//! * `MODE:<id>` — the agent switches itself to that mode before it replies, announcing it as
//!   after `session/set_mode`;
//! * `SLOW` — the echo padded to 50 words, 200 ms apart; `session/cancel` ends the turn
//!   `cancelled`;
//! * `STUCK` — one chunk, then nothing: it ignores `session/cancel` and a closed stdin (only a
//!   signal ends it);
//! * otherwise `Echo: <text> (history N)`, N the session's number of prompts so far.
//!
//! Like the adapter, a turn reports the session's cost so far (one cent per prompt, over every
//! process that served the session) in a `usage_update` before it ends, and `session/load`
//! replays each turn: its prompt, its tool call, its reply, and the interruption of a cancelled
//! one.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use clap::Parser;
use serde_json::{Value, json};

const INTERRUPT_MARKER: &str = "[Request interrupted by user]";
const NO_OUTPUT: &str = "(Bash completed with no output)";
const REFUSED: &str = "User refused permission to run tool";
const CANCELLED: &str = "The user doesn't want to proceed with this tool use.";

#[derive(Parser)]
struct Args {
    /// Where sessions are kept.
    #[arg(long)]
    state: PathBuf,
    /// Don't offer `session/resume`.
    #[arg(long)]
    no_resume: bool,
    /// Don't offer `session/load`.
    #[arg(long)]
    no_load: bool,
    /// The mode sessions start in (the adapter's is `auto`).
    #[arg(long, default_value = "auto")]
    start_mode: String,
    /// The modes sessions offer: `claude` (the adapter's) or `gemini` (Gemini CLI's: `default`,
    /// `autoEdit`, `yolo`, `plan`).
    #[arg(long, default_value = "claude")]
    modes: String,
    /// Don't advertise image prompts (`promptCapabilities.image`), as agents that can't take
    /// images do; a prompt with an image is then answered with an error.
    #[arg(long)]
    no_images: bool,
}

fn send(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn raw(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn update(sid: &str, update: Value) {
    send(&json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": sid, "update": update}}));
}

fn chunk(sid: &str, text: &str) {
    update(
        sid,
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
    );
}

fn user_chunk(sid: &str, text: &str) {
    update(
        sid,
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}),
    );
}

fn answer(id: &Value, result: Value) {
    send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
}

fn error(id: &Value, error: Value) {
    send(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
}

/// The modes of `kind`: id, name and description, as the agent announces them.
fn mode_list(kind: &str) -> &'static [(&'static str, &'static str, &'static str)] {
    if kind == "gemini" {
        // As Gemini CLI's ACP mode announces them.
        &[
            ("default", "Default", "Prompts for approval"),
            ("autoEdit", "Auto Edit", "Auto-approves edit tools"),
            ("yolo", "YOLO", "Auto-approves all tools"),
            ("plan", "Plan", "Read-only mode"),
        ]
    } else {
        &[
            ("default", "Manual", "Always ask before making changes"),
            (
                "acceptEdits",
                "Accept edits",
                "Automatically accept all file edits",
            ),
            ("plan", "Plan", "Create a plan before making changes"),
            ("auto", "Auto", "Claude handles permission decisions"),
            (
                "bypassPermissions",
                "Bypass permissions",
                "Accepts all permissions",
            ),
        ]
    }
}

/// A select config option: id, name, category, values.
type Select = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

/// The adapter's config options besides `mode`.
const SELECTS: &[Select] = &[
    (
        "model",
        "Model",
        "model",
        &["default", "opus", "fable", "sonnet", "haiku"],
    ),
    (
        "effort",
        "Effort",
        "thought_level",
        &["default", "low", "medium", "high", "xhigh", "max"],
    ),
    ("fast", "Fast mode", "model_config", &["on", "off"]),
    ("ultracode", "Ultracode", "model_config", &["on", "off"]),
];

fn session_file(state: &Path, sid: &str) -> PathBuf {
    state.join(format!("{sid}.json"))
}

/// One turn of a session, as kept for resume and load.
#[derive(Clone, Default)]
struct Turn {
    prompt: String,
    reply: String,
    /// The tool call it made: the command, and its output or failure.
    tool: Option<(String, String, bool)>,
    cancelled: bool,
}

fn load(state: &Path, sid: &str) -> Option<Vec<Turn>> {
    let text = std::fs::read_to_string(session_file(state, sid)).ok()?;
    let turns: Vec<Value> = serde_json::from_str(&text).ok()?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    Some(
        turns
            .iter()
            .map(|t| Turn {
                prompt: text(&t["prompt"]),
                reply: text(&t["reply"]),
                tool: t["tool"]["command"].as_str().map(|command| {
                    (
                        command.to_owned(),
                        text(&t["tool"]["output"]),
                        t["tool"]["failed"] == true,
                    )
                }),
                cancelled: t["cancelled"] == true,
            })
            .collect(),
    )
}

fn save(state: &Path, sid: &str, turns: &[Turn]) {
    let turns: Vec<Value> = turns
        .iter()
        .map(|t| {
            let tool = t.tool.as_ref().map(|(command, output, failed)| {
                json!({"command": command, "output": output, "failed": failed})
            });
            json!({"prompt": t.prompt, "reply": t.reply, "tool": tool, "cancelled": t.cancelled})
        })
        .collect();
    let _ = std::fs::write(session_file(state, sid), json!(turns).to_string());
}

fn log_call(state: &Path, method: &str) {
    append(state, "calls.log", method);
}

fn append(state: &Path, file: &str, line: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.join(file))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Reports the session's cost so far, as the adapter does near the end of each turn: one
/// cent per prompt the session has had.
fn report_cost(sid: &str, prompts: usize) {
    update(
        sid,
        json!({"sessionUpdate": "usage_update", "used": 100, "size": 1000,
            "cost": {"amount": prompts as f64 * 0.01, "currency": "USD"}}),
    );
}

fn end(id: &Value, reason: &str) {
    answer(
        id,
        json!({"stopReason": reason, "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}}),
    );
}

fn tool_meta() -> Value {
    json!({"claudeCode": {"toolName": "Bash"}})
}

/// The tool call of a turn, announced as the adapter does: pending with no input, then its
/// input and title.
fn announce_tool(sid: &str, tool: &str, command: &str) {
    update(
        sid,
        json!({"_meta": tool_meta(), "sessionUpdate": "tool_call", "toolCallId": tool,
        "name": "Bash", "rawInput": {}, "status": "pending", "title": "Terminal",
        "kind": "execute", "content": []}),
    );
    update(
        sid,
        json!({"_meta": tool_meta(), "sessionUpdate": "tool_call_update", "toolCallId": tool,
        "rawInput": {"command": command, "description": "run it"}, "title": command,
        "content": [{"type": "content", "content": {"type": "text", "text": "run it"}}]}),
    );
}

/// The end of a tool call: completed with its output, or failed.
fn finish_tool(sid: &str, tool: &str, output: &str, failed: bool) {
    update(
        sid,
        json!({"_meta": tool_meta(), "sessionUpdate": "tool_call_update", "toolCallId": tool,
        "status": if failed { "failed" } else { "completed" }, "rawOutput": output}),
    );
}

struct Agent {
    args: Args,
    lines: Receiver<Value>,
    sid: Option<String>,
    turns: Vec<Turn>,
    next_id: u64,
    mode: String,
    /// Current values of the config options besides `mode`.
    values: Vec<String>,
}

impl Agent {
    /// Waits up to `wait` for a message; `Err(true)` when stdin closed.
    fn next(&self, wait: Duration) -> Result<Value, bool> {
        match self.lines.recv_timeout(wait) {
            Ok(v) => Ok(v),
            Err(RecvTimeoutError::Timeout) => Err(false),
            Err(RecvTimeoutError::Disconnected) => Err(true),
        }
    }

    fn claude(&self) -> bool {
        self.args.modes != "gemini"
    }

    fn modes(&self) -> Value {
        let available: Vec<Value> = mode_list(&self.args.modes)
            .iter()
            .map(|(id, name, description)| json!({"id": id, "name": name, "description": description}))
            .collect();
        json!({"currentModeId": self.mode, "availableModes": available})
    }

    fn config_options(&self) -> Value {
        let select = |id: &str, name: &str, category: &str, current: &str, values: Vec<Value>| {
            json!({"id": id, "name": name, "category": category, "type": "select",
                "currentValue": current, "options": values})
        };
        let mut out = Vec::new();
        if self.claude() {
            let modes = mode_list(&self.args.modes)
                .iter()
                .map(|(id, name, description)| json!({"value": id, "name": name, "description": description}))
                .collect();
            out.push(select("mode", "Mode", "mode", &self.mode, modes));
        }
        for ((id, name, category, values), current) in SELECTS.iter().zip(&self.values) {
            if !self.claude() && *id != "model" {
                continue;
            }
            let values = values
                .iter()
                .map(|v| json!({"value": v, "name": v}))
                .collect();
            out.push(select(id, name, category, current, values));
        }
        json!(out)
    }

    /// Takes a session: its turns, in the starting mode with the default options.
    fn open(&mut self, sid: String, turns: Vec<Turn>) {
        self.sid = Some(sid);
        self.turns = turns;
        self.mode.clone_from(&self.args.start_mode);
        self.values = SELECTS.iter().map(|(id, ..)| default_value(id)).collect();
    }

    fn session(&self) -> Value {
        json!({"sessionId": self.sid, "modes": self.modes(), "configOptions": self.config_options()})
    }

    fn set_mode(&mut self, id: &Value, mode: &str) {
        log_call(&self.args.state, &format!("mode {mode}"));
        if !mode_list(&self.args.modes).iter().any(|(m, ..)| *m == mode) {
            return error(
                id,
                json!({"code": -32602, "message": format!("Invalid params: Invalid Mode: {mode}")}),
            );
        }
        self.mode = mode.to_owned();
        self.announce_mode(&self.sid.clone().unwrap_or_default());
        answer(id, json!({}));
    }

    /// Announces a new mode: the adapter sends all its config options, Gemini CLI the mode.
    fn announce_mode(&self, sid: &str) {
        if self.claude() {
            update(
                sid,
                json!({"sessionUpdate": "config_option_update", "configOptions": self.config_options()}),
            );
        } else {
            update(
                sid,
                json!({"sessionUpdate": "current_mode_update", "currentModeId": self.mode}),
            );
        }
    }

    fn set_option(&mut self, id: &Value, option: &str, value: &str) {
        let sid = self.sid.clone().unwrap_or_default();
        if option == "mode"
            && mode_list(&self.args.modes)
                .iter()
                .any(|(m, ..)| *m == value)
        {
            log_call(&self.args.state, &format!("mode {value}"));
            self.mode = value.to_owned();
            update(
                &sid,
                json!({"sessionUpdate": "current_mode_update", "currentModeId": value}),
            );
        }
        for ((name, _, _, values), current) in SELECTS.iter().zip(self.values.iter_mut()) {
            if *name == option && values.contains(&value) {
                *current = value.to_owned();
            }
        }
        answer(id, json!({"configOptions": self.config_options()}));
    }

    fn prompt(&mut self, id: &Value, text: &str) {
        let sid = self.sid.clone().unwrap_or_default();
        if text.contains("CRASH") {
            chunk(&sid, "about to ");
            std::thread::sleep(Duration::from_millis(100));
            std::process::exit(3);
        }
        if text.contains("GARBAGE") {
            raw("this is not json");
            raw("[1, 2, 3]");
            raw("{\"no\": \"jsonrpc fields\"}");
            raw(
                "{\"jsonrpc\": \"2.0\", \"method\": \"session/update\", \"params\": {\"update\": 7}}",
            );
            raw(
                "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":\"x\"",
            );
        }
        if text.contains("STUCK") {
            chunk(&sid, "thinking forever ");
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        if text.contains("HUGE") {
            chunk(&sid, &"x".repeat(100_000));
        }
        if let Some(mode) = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("MODE:"))
            && mode_list(&self.args.modes).iter().any(|(m, ..)| *m == mode)
        {
            // The agent changes its mode itself (as the adapter does when the model leaves
            // plan mode), and says so as it does after `session/set_mode`.
            log_call(&self.args.state, &format!("switched itself to {mode}"));
            self.mode = mode.to_owned();
            self.announce_mode(&sid);
        }
        let mut turn = Turn {
            prompt: text.to_owned(),
            ..Turn::default()
        };
        let tool = if text.contains("PERMIT") {
            Some(("touch a.txt".to_owned(), true, "ran"))
        } else {
            text.split_whitespace()
                .find_map(|w| w.strip_prefix("TOOL:"))
                .map(|c| (c.replace('+', " "), self.mode == "default", NO_OUTPUT))
        };
        let reply = match tool {
            Some((command, ask, output)) => {
                match self.tool(&sid, &command, ask, output, text.contains("ALWAYS")) {
                    Some((output, failed)) => {
                        turn.tool = Some((command, output.clone(), failed));
                        format!("Tool said: {output}")
                    }
                    None => {
                        turn.tool = Some((command, CANCELLED.to_owned(), true));
                        turn.cancelled = true;
                        return self.end_turn(id, turn, "cancelled");
                    }
                }
            }
            None => {
                let mut reply = format!("Echo: {text} (history {})", self.turns.len() + 1);
                if text.contains("SLOW") {
                    for i in reply.split_whitespace().count()..50 {
                        reply.push_str(&format!(" chunk{i:02}"));
                    }
                }
                reply
            }
        };
        for word in reply.split_inclusive(' ') {
            if text.contains("SLOW") {
                match self.next(Duration::from_millis(200)) {
                    Ok(m) if m["method"] == "session/cancel" => {
                        log_call(&self.args.state, "session/cancel");
                        turn.cancelled = true;
                        return self.end_turn(id, turn, "cancelled");
                    }
                    Err(true) => std::process::exit(0),
                    _ => {}
                }
            }
            chunk(&sid, word);
            turn.reply.push_str(word);
        }
        self.end_turn(id, turn, "end_turn");
    }

    fn end_turn(&mut self, id: &Value, turn: Turn, reason: &str) {
        let sid = self.sid.clone().unwrap_or_default();
        self.turns.push(turn);
        save(&self.args.state, &sid, &self.turns);
        report_cost(&sid, self.turns.len());
        end(id, reason);
    }

    /// A `Bash` tool call running `command`, asking first when `ask`: its output and whether
    /// it failed, or `None` when the turn was cancelled.
    fn tool(
        &mut self,
        sid: &str,
        command: &str,
        ask: bool,
        output: &str,
        always: bool,
    ) -> Option<(String, bool)> {
        let tool = format!("toolu_fake_{}", self.turns.len() + 1);
        announce_tool(sid, &tool, command);
        if ask {
            let ask = self.next_id;
            self.next_id += 1;
            let mut options = vec![
                json!({"optionId": "allow-once", "name": "Yes", "kind": "allow_once"}),
                json!({"optionId": "reject", "name": "No", "kind": "reject_once"}),
            ];
            if always {
                options.insert(
                    0,
                    json!({"optionId": "allow-always", "name": "Always", "kind": "allow_always"}),
                );
            }
            send(
                &json!({"jsonrpc": "2.0", "id": ask, "method": "session/request_permission",
                "params": {"sessionId": sid, "toolCall": {"toolCallId": tool, "name": "Bash",
                "status": "pending", "rawInput": {"command": command, "description": "run it"},
                "title": command, "kind": "execute"}, "options": options}}),
            );
            let mut cancelled = false;
            let outcome = loop {
                match self.next(Duration::from_secs(600)) {
                    Ok(m) if m["method"] == "session/cancel" => {
                        log_call(&self.args.state, "session/cancel");
                        cancelled = true;
                    }
                    Ok(m) if m["id"] == json!(ask) && m.get("method").is_none() => {
                        break m["result"]["outcome"].clone();
                    }
                    Ok(_) | Err(false) => {}
                    Err(true) => std::process::exit(0),
                }
            };
            log_call(&self.args.state, &format!("permission {outcome}"));
            if cancelled || outcome["outcome"] == "cancelled" {
                finish_tool(sid, &tool, CANCELLED, true);
                return None;
            }
            let allowed =
                outcome["optionId"] == "allow-once" || outcome["optionId"] == "allow-always";
            if !allowed {
                finish_tool(sid, &tool, REFUSED, true);
                return Some((REFUSED.to_owned(), true));
            }
        }
        // What the tool did, in the adapter's metadata, before it is marked completed.
        update(
            sid,
            json!({"_meta": {"claudeCode": {"toolName": "Bash", "toolResponse": {"stdout": "",
            "stderr": "", "interrupted": false, "isImage": false}}},
            "sessionUpdate": "tool_call_update", "toolCallId": tool}),
        );
        finish_tool(sid, &tool, output, false);
        Some((output.to_owned(), false))
    }

    /// Replays a loaded session's turns, as the adapter does.
    fn replay(&self, sid: &str) {
        for (i, turn) in self.turns.iter().enumerate() {
            user_chunk(sid, &turn.prompt);
            if let Some((command, output, failed)) = &turn.tool {
                let tool = format!("toolu_fake_{}", i + 1);
                update(
                    sid,
                    json!({"_meta": tool_meta(), "sessionUpdate": "tool_call", "toolCallId": tool,
                    "name": "Bash", "rawInput": {"command": command, "description": "run it"},
                    "status": "pending", "title": command, "kind": "execute",
                    "content": [{"type": "content", "content": {"type": "text", "text": "run it"}}]}),
                );
                finish_tool(sid, &tool, output, *failed);
            }
            if !turn.reply.is_empty() {
                chunk(sid, &turn.reply);
            }
            if turn.cancelled {
                user_chunk(sid, INTERRUPT_MARKER);
            }
        }
    }

    fn run(&mut self) {
        loop {
            let message = match self.next(Duration::from_secs(3600)) {
                Ok(m) => m,
                Err(true) => return,
                Err(false) => continue,
            };
            let Some(method) = message["method"].as_str().map(str::to_owned) else {
                // An answer to a request no longer waited for.
                continue;
            };
            let id = message["id"].clone();
            let params = &message["params"];
            log_call(&self.args.state, &method);
            if matches!(
                method.as_str(),
                "session/new" | "session/load" | "session/resume"
            ) {
                let meta = &params["_meta"];
                append(&self.args.state, "meta.log", &format!("{method} {meta}"));
            }
            match method.as_str() {
                "initialize" => {
                    let mut caps = json!({"loadSession": !self.args.no_load,
                        "sessionCapabilities": {},
                        "promptCapabilities": {"image": !self.args.no_images, "embeddedContext": true}});
                    if !self.args.no_resume {
                        caps["sessionCapabilities"]["resume"] = json!({});
                    }
                    answer(
                        &id,
                        json!({"protocolVersion": 1, "agentCapabilities": caps,
                        "authMethods": [], "agentInfo": {"name": "fake-acp", "version": "1"}}),
                    );
                }
                "session/new" => {
                    let sid = uuid::Uuid::new_v4().to_string();
                    self.open(sid.clone(), Vec::new());
                    save(&self.args.state, &sid, &self.turns);
                    answer(&id, self.session());
                }
                "session/resume" | "session/load" => {
                    let sid = params["sessionId"].as_str().unwrap_or_default().to_owned();
                    let Some(turns) = load(&self.args.state, &sid) else {
                        error(
                            &id,
                            json!({"code": -32002, "message": "Resource not found",
                            "data": {"sessionId": sid}}),
                        );
                        continue;
                    };
                    self.open(sid.clone(), turns);
                    if method == "session/load" {
                        self.replay(&sid);
                    }
                    answer(&id, self.session());
                }
                "session/set_mode" => {
                    self.set_mode(&id, params["modeId"].as_str().unwrap_or_default());
                }
                "session/set_config_option" => self.set_option(
                    &id,
                    params["configId"].as_str().unwrap_or_default(),
                    params["value"].as_str().unwrap_or_default(),
                ),
                "session/prompt" => {
                    let images = params["prompt"]
                        .as_array()
                        .map_or(0, |b| b.iter().filter(|b| b["type"] == "image").count());
                    if images > 0 {
                        log_call(&self.args.state, &format!("prompt with {images} image(s)"));
                        if self.args.no_images {
                            error(
                                &id,
                                json!({"code": -32602,
                                "message": "Invalid params: image content is not supported"}),
                            );
                            continue;
                        }
                    }
                    let text = params["prompt"][0]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.prompt(&id, &text);
                }
                // Notifications (`session/cancel` between turns among them) need no answer.
                _ if id.is_null() => {}
                _ => error(
                    &id,
                    json!({"code": -32601, "message": format!("\"Method not found\": {method}"),
                    "data": {"method": method}}),
                ),
            }
        }
    }
}

/// A config option's value in a new session.
fn default_value(id: &str) -> String {
    if matches!(id, "fast" | "ultracode") {
        "off".into()
    } else {
        "default".into()
    }
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.state).expect("state dir");
    let mut env = format!(
        "cwd={}\n",
        std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    );
    for (name, value) in std::env::vars() {
        env.push_str(&format!("{name}={value}\n"));
    }
    let _ = std::fs::write(args.state.join("env.log"), env);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    let mode = args.start_mode.clone();
    let mut agent = Agent {
        args,
        lines: rx,
        sid: None,
        turns: Vec::new(),
        next_id: 0,
        mode,
        values: SELECTS.iter().map(|(id, ..)| default_value(id)).collect(),
    };
    agent.run();
}
