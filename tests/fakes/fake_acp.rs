//! `fake-acp`: a small Agent Client Protocol agent for tests, answering the way the pinned
//! `@agentclientprotocol/claude-agent-acp` adapter does (recorded in
//! `tests/it/fixtures/acp/`), for what the real one can't be made to do on demand: crash
//! mid-turn, write garbage, or load a session without offering resume.
//!
//! Usage: `fake-acp --state DIR [--no-resume] [--no-load] [--no-images] [--modes gemini]
//! [--start-mode MODE]`. Sessions are kept in
//! `DIR/<session id>.json` (their prompts and replies), so a new process can resume or load
//! them. Each `initialize` is logged as a line `initialize` in `DIR/calls.log`, and every
//! method it receives likewise, one per line. At start it writes its working directory and
//! the names and values of its environment to `DIR/env.log` (one `cwd=` line, then `NAME=value`
//! lines).
//!
//! A prompt's text picks the behaviour:
//! * `CRASH` — one chunk, then the process exits with status 3;
//! * `PERMIT` — a `Bash` tool call that asks `session/request_permission` (options
//!   `allow-once`/`allow_once`, `reject`/`reject_once`); allowed, it completes with output
//!   `ran`; rejected, it fails; cancelled (or `session/cancel`), the turn ends `cancelled`.
//!   With `ALWAYS` too, an `allow-always`/`allow_always` option is offered first (as the
//!   adapter does for some tools);
//! * `GARBAGE` — lines that are not JSON-RPC, then a normal reply;
//! * `HUGE` — one 100 000-byte `session/update` line, then a normal reply;
//! * `SLOW` — 50 words, 200 ms apart; `session/cancel` ends the turn `cancelled`;
//! * `STUCK` — one chunk, then nothing: it ignores `session/cancel` and a closed stdin (only a
//!   signal ends it);
//! * otherwise `Echo: <text> (history N)`, N the session's number of prompts so far.
//!
//! Like the adapter, a normal turn reports the session's cost so far (one cent per prompt, over
//! every process that served the session) in a `usage_update` before it ends.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use clap::Parser;
use serde_json::{Value, json};

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
    /// The mode sessions start in (the real adapter starts in `auto`).
    #[arg(long, default_value = "default")]
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

fn answer(id: &Value, result: Value) {
    send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
}

fn modes(kind: &str, current: &str) -> Value {
    let available = if kind == "gemini" {
        // As Gemini CLI's ACP mode announces them.
        json!([
            {"id": "default", "name": "Default", "description": "Prompts for approval"},
            {"id": "autoEdit", "name": "Auto Edit", "description": "Auto-approves edit tools"},
            {"id": "yolo", "name": "YOLO", "description": "Auto-approves all tools"},
            {"id": "plan", "name": "Plan", "description": "Read-only mode"}])
    } else {
        json!([
            {"id": "default", "name": "Manual"}, {"id": "acceptEdits", "name": "Accept edits"},
            {"id": "plan", "name": "Plan"}, {"id": "auto", "name": "Auto"}])
    };
    json!({"currentModeId": current, "availableModes": available})
}

fn config_options() -> Value {
    json!([{"id": "model", "name": "Model", "category": "model", "type": "select",
        "currentValue": "default", "options": [{"value": "default", "name": "Default"},
        {"value": "fast-model", "name": "Fast"}]}])
}

fn session_file(state: &Path, sid: &str) -> PathBuf {
    state.join(format!("{sid}.json"))
}

fn load(state: &Path, sid: &str) -> Option<Vec<(String, String)>> {
    let text = std::fs::read_to_string(session_file(state, sid)).ok()?;
    serde_json::from_str(&text).ok()
}

fn save(state: &Path, sid: &str, turns: &[(String, String)]) {
    let _ = std::fs::write(session_file(state, sid), json!(turns).to_string());
}

fn log_call(state: &Path, method: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.join("calls.log"))
    {
        let _ = writeln!(f, "{method}");
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

struct Agent {
    args: Args,
    lines: Receiver<Value>,
    sid: Option<String>,
    turns: Vec<(String, String)>,
    next_id: u64,
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
        if text.contains("PERMIT") {
            return self.permit(id, &sid, text);
        }
        let reply = format!("Echo: {text} (history {})", self.turns.len() + 1);
        let words: Vec<String> = if text.contains("SLOW") {
            (0..50).map(|i| format!("w{i} ")).collect()
        } else {
            reply.split_inclusive(' ').map(str::to_owned).collect()
        };
        let mut said = String::new();
        for word in words {
            if text.contains("SLOW") {
                match self.next(Duration::from_millis(200)) {
                    Ok(m) if m["method"] == "session/cancel" => {
                        log_call(&self.args.state, "session/cancel");
                        self.turns.push((text.to_owned(), said));
                        save(&self.args.state, &sid, &self.turns);
                        return end(id, "cancelled");
                    }
                    Err(true) => std::process::exit(0),
                    _ => {}
                }
            }
            chunk(&sid, &word);
            said.push_str(&word);
        }
        self.turns.push((text.to_owned(), said));
        save(&self.args.state, &sid, &self.turns);
        report_cost(&sid, self.turns.len());
        end(id, "end_turn");
    }

    fn permit(&mut self, id: &Value, sid: &str, text: &str) {
        let tool = "toolu_fake_1";
        let input = json!({"command": "touch a.txt", "description": "run it"});
        update(
            sid,
            json!({"sessionUpdate": "tool_call", "toolCallId": tool, "name": "Bash",
            "rawInput": {}, "status": "pending", "title": "Terminal", "kind": "execute", "content": []}),
        );
        update(
            sid,
            json!({"sessionUpdate": "tool_call_update", "toolCallId": tool,
            "rawInput": input, "title": "touch a.txt"}),
        );
        let ask = self.next_id;
        self.next_id += 1;
        let mut options = vec![
            json!({"optionId": "allow-once", "name": "Yes", "kind": "allow_once"}),
            json!({"optionId": "reject", "name": "No", "kind": "reject_once"}),
        ];
        if text.contains("ALWAYS") {
            options.insert(
                0,
                json!({"optionId": "allow-always", "name": "Always", "kind": "allow_always"}),
            );
        }
        send(
            &json!({"jsonrpc": "2.0", "id": ask, "method": "session/request_permission",
            "params": {"sessionId": sid, "toolCall": {"toolCallId": tool, "name": "Bash",
            "status": "pending", "rawInput": input, "title": "touch a.txt", "kind": "execute"},
            "options": options}}),
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
        self.turns.push((text.to_owned(), String::new()));
        save(&self.args.state, sid, &self.turns);
        if cancelled || outcome["outcome"] == "cancelled" {
            return end(id, "cancelled");
        }
        let allowed = outcome["optionId"] == "allow-once" || outcome["optionId"] == "allow-always";
        if allowed {
            update(
                sid,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": tool,
                "status": "completed", "rawOutput": "ran"}),
            );
            chunk(sid, "Tool said: ran");
        } else {
            update(
                sid,
                json!({"sessionUpdate": "tool_call_update", "toolCallId": tool,
                "status": "failed", "rawOutput": "The user doesn't want to proceed with this tool use."}),
            );
            chunk(sid, "Tool was denied");
        }
        end(id, "end_turn");
    }

    fn run(&mut self) {
        loop {
            let message = match self.next(Duration::from_secs(3600)) {
                Ok(m) => m,
                Err(true) => return,
                Err(false) => continue,
            };
            let method = message["method"].as_str().unwrap_or_default().to_owned();
            let id = message["id"].clone();
            let params = &message["params"];
            log_call(&self.args.state, &method);
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
                    self.sid = Some(sid.clone());
                    self.turns.clear();
                    save(&self.args.state, &sid, &self.turns);
                    answer(
                        &id,
                        json!({"sessionId": sid, "modes": modes(&self.args.modes, &self.args.start_mode), "configOptions": config_options()}),
                    );
                }
                "session/resume" | "session/load" => {
                    let sid = params["sessionId"].as_str().unwrap_or_default().to_owned();
                    let Some(turns) = load(&self.args.state, &sid) else {
                        send(
                            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32002,
                            "message": "Resource not found", "data": {"sessionId": sid}}}),
                        );
                        continue;
                    };
                    if method == "session/load" {
                        for (prompt, reply) in &turns {
                            update(
                                &sid,
                                json!({"sessionUpdate": "user_message_chunk",
                                "content": {"type": "text", "text": prompt}}),
                            );
                            chunk(&sid, reply);
                        }
                    }
                    self.sid = Some(sid);
                    self.turns = turns;
                    answer(
                        &id,
                        json!({"modes": modes(&self.args.modes, &self.args.start_mode), "configOptions": config_options()}),
                    );
                }
                "session/set_mode" => {
                    let mode = params["modeId"].clone();
                    log_call(
                        &self.args.state,
                        &format!("mode {}", mode.as_str().unwrap_or_default()),
                    );
                    let sid = self.sid.clone().unwrap_or_default();
                    update(
                        &sid,
                        json!({"sessionUpdate": "current_mode_update", "currentModeId": mode}),
                    );
                    answer(&id, json!({}));
                }
                "session/set_config_option" => {
                    answer(&id, json!({"configOptions": config_options()}))
                }
                "session/prompt" => {
                    let images = params["prompt"]
                        .as_array()
                        .map_or(0, |b| b.iter().filter(|b| b["type"] == "image").count());
                    if images > 0 {
                        log_call(&self.args.state, &format!("prompt with {images} image(s)"));
                        if self.args.no_images {
                            send(
                                &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602,
                                "message": "Invalid params: image content is not supported"}}),
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
                _ => {}
            }
        }
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
    let mut agent = Agent {
        args,
        lines: rx,
        sid: None,
        turns: Vec::new(),
        next_id: 0,
    };
    agent.run();
}
