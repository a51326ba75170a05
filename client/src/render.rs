//! What the terminal shows: streamed replies, tool calls, permission questions, errors and
//! statuses of the current conversation, the history of a resumed one, the lists and the help.

use std::io::Write;

use serde_json::Value;

use crate::rest::{CliSession, Summary};

/// The help `/help` prints.
pub const HELP: &str = "\
Type a message to send it. Ctrl-C interrupts a running turn (again: quits); with no turn
running, Ctrl-C quits, unless the conversation waits for a rate limit: then it cancels the wait.
  /resume           pick a recent session from a numbered list (Enter cancels)
  /resume <id>      resume by agent_id, session_id or a unique prefix of either
  /resume --last    resume the session with the most recent activity
  /new              start a new session (in the project of --cwd, if any)
  /list             list recent sessions
  /rename <title>   rename the current session
  /import           pick one of the project's Claude CLI sessions and continue it here
  /import <n|id>    import that one directly
  /usage [day|conversation|agent|model]
                    what your turns cost in the last 30 days, and their tokens
  /budget <usd>     set the current session's own spending cap
  /model            list the models the agent offers
  /model <name>     ask for that model from the next message on
In a session with a git worktree of its own (started with --worktree):
  /changes          what it changed: each file with its +/- counts, then the diff
  /commit <message> commit everything in the worktree on its branch
  /merge [--squash] [message]
                    merge the branch into its base (--squash: as one commit)
  /discard          drop every change, committed or not (asks first)
  /help             this help
  /quit             quit
When the agent asks to use a tool, answer y (allow), n (deny) or a (always: allow this tool
for the rest of this session, without asking again).";

/// Longest tool-call summary shown, in characters.
const TOOL_LINE_CHARS: usize = 150;

/// Prints a line.
pub fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Prints text without ending the line.
pub fn print_raw(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{text}");
    let _ = out.flush();
}

/// What a frame meant for the turns in flight.
#[derive(Debug, PartialEq, Eq)]
pub enum Shown {
    /// Nothing about a turn of ours ended.
    Nothing,
    /// The current conversation's turn ended with its `result`.
    TurnEnded,
    /// A chat of ours failed before it became a turn (an `error` without `client_msg_id`).
    ChatFailed,
    /// The agent asks to use a tool: the request to answer.
    Permission(Permission),
    /// A permission request ended (answered here or elsewhere, timed out or withdrawn).
    PermissionResolved(String),
    /// The server acknowledged a chat of ours on the current conversation.
    Acked,
    /// The conversation started (true) or stopped (false) waiting for a rate limit to reset.
    Waiting(bool),
}

/// The statuses of a wait for a rate limit.
const LIMIT_STATUSES: [&str; 4] = [
    "waiting_for_limit",
    "limit_continued",
    "limit_wait_cancelled",
    "limit_gave_up",
];

/// A tool permission request waiting for the user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub request_id: String,
    pub tool_name: String,
    /// The one-line summary of what the tool would do.
    pub summary: String,
}

impl Permission {
    /// The request in a `permission_request` frame.
    pub fn from_frame(frame: &Value) -> Option<Self> {
        let tool_name = frame["tool_name"].as_str()?.to_owned();
        Some(Permission {
            request_id: frame["request_id"].as_str()?.to_owned(),
            summary: tool_summary(&tool_name, &frame["input"]),
            tool_name,
        })
    }

    /// The question shown for it.
    pub fn question(&self) -> String {
        format!(
            "? Allow {}: {}  [y]es / [n]o / [a]lways",
            self.tool_name, self.summary
        )
    }
}

/// `⚙ Bash: ls -la`: one line for a tool call.
pub fn tool_line(name: &str, input: &Value) -> String {
    format!("\u{2699} {name}: {}", tool_summary(name, input))
}

/// What a tool call does, on one line: the command, path, pattern or URL it is about, else its
/// input as JSON; shortened to [`TOOL_LINE_CHARS`].
pub fn tool_summary(name: &str, input: &Value) -> String {
    let key = match name {
        "Bash" => "command",
        "Read" | "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => "file_path",
        "Glob" | "Grep" => "pattern",
        "WebFetch" => "url",
        "WebSearch" => "query",
        "Task" => "description",
        _ => "",
    };
    let text = match input.get(key).and_then(Value::as_str) {
        Some(text) => text.to_owned(),
        None => input.to_string(),
    };
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > TOOL_LINE_CHARS {
        let cut: String = one_line.chars().take(TOOL_LINE_CHARS - 1).collect();
        format!("{cut}\u{2026}")
    } else {
        one_line
    }
}

/// The text blocks of an assistant message, joined.
fn assistant_text(message: &Value) -> String {
    message["message"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The tool calls of an assistant message, one line each.
fn tool_lines(message: &Value) -> Vec<String> {
    message["message"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| tool_line(b["name"].as_str().unwrap_or("tool"), &b["input"]))
        .collect()
}

/// The reply being printed: whether its text was shown and whether the cursor is mid-line.
#[derive(Default)]
pub struct Screen {
    /// Set once the current reply's text was printed (streamed or whole).
    streamed: bool,
    /// Set while the cursor is not at the start of a line.
    line_open: bool,
}

impl Screen {
    /// Ends a partly printed line.
    pub fn end_line(&mut self) {
        if self.line_open {
            print_raw("\n");
            self.line_open = false;
        }
    }

    /// Forgets the reply in progress (when leaving a conversation).
    pub fn reset(&mut self) {
        self.end_line();
        self.streamed = false;
    }

    fn print_reply(&mut self, text: &str) {
        self.streamed = true;
        self.line_open = true;
        print_raw(text);
    }

    /// Shows `frame` if it is an error or belongs to `agent_id`'s conversation.
    pub fn show(&mut self, frame: &Value, agent_id: &str) -> Shown {
        let ty = frame["message_type"].as_str().unwrap_or_default();
        if ty == "error" {
            self.end_line();
            say(&format!(
                "error ({}): {}",
                frame["code"].as_str().unwrap_or("?"),
                frame["error"].as_str().unwrap_or_default()
            ));
            return if frame["agent_id"] == agent_id && frame["client_msg_id"].is_null() {
                Shown::ChatFailed
            } else {
                Shown::Nothing
            };
        }
        if frame["agent_id"] != agent_id {
            return Shown::Nothing;
        }
        let message = &frame["message"];
        match ty {
            "stream_event" => {
                if let Some(text) = message["event"]["delta"]["text"].as_str() {
                    self.print_reply(text);
                }
            }
            "assistant" => {
                let text = assistant_text(message);
                if !self.streamed && !text.is_empty() {
                    self.print_reply(&text);
                }
                let tools = tool_lines(message);
                if !tools.is_empty() {
                    self.end_line();
                    for line in tools {
                        say(&line);
                    }
                    // Text after a tool call is a new paragraph of the reply.
                    self.streamed = false;
                }
            }
            "ack" => return Shown::Acked,
            "permission_request" => {
                if let Some(permission) = Permission::from_frame(frame) {
                    self.end_line();
                    return Shown::Permission(permission);
                }
            }
            "permission_resolved" => {
                if let Some(id) = frame["request_id"].as_str() {
                    return Shown::PermissionResolved(id.to_owned());
                }
            }
            "result" => {
                self.end_line();
                self.streamed = false;
                if message["is_error"] == true {
                    say(&format!(
                        "[turn ended: {}]",
                        message["terminal_reason"].as_str().unwrap_or("error")
                    ));
                }
                return Shown::TurnEnded;
            }
            "status" => {
                let status = frame["status"].as_str().unwrap_or_default();
                if LIMIT_STATUSES.contains(&status) {
                    self.end_line();
                    let waiting = status == "waiting_for_limit";
                    let hint = if waiting {
                        " (Ctrl-C cancels the wait)"
                    } else {
                        ""
                    };
                    say(&format!(
                        "[{status}: {}]{hint}",
                        frame["detail"].as_str().unwrap_or_default()
                    ));
                    return Shown::Waiting(waiting);
                }
                if matches!(
                    status,
                    "interrupted"
                        | "crashed"
                        | "resume_failed"
                        | "rewound"
                        | "deleted"
                        | "lagged"
                        | "budget_exceeded"
                ) {
                    self.end_line();
                    say(&format!(
                        "[{status}: {}]",
                        frame["detail"].as_str().unwrap_or_default()
                    ));
                }
            }
            _ => {}
        }
        Shown::Nothing
    }
}

/// The lines of a resumed conversation's last `turns` turns.
pub fn history(frames: &[Value], turns: usize) -> Vec<String> {
    let mut lines = Vec::new();
    // Whether the turn's reply text was shown from its assistant messages; a `result` repeats
    // it, and an imported transcript has assistant messages but no `result`.
    let mut replied = false;
    for frame in frames {
        let message = &frame["message"];
        match frame["message_type"].as_str() {
            Some("assistant") => {
                let text = assistant_text(message);
                if !text.is_empty() {
                    lines.push(text);
                    replied = true;
                }
                lines.extend(tool_lines(message));
            }
            Some("result") if message["is_error"] != true && replied => {}
            _ => {
                if let Some(line) = history_line(frame) {
                    if line.starts_with("> ") {
                        replied = false;
                    }
                    lines.push(line);
                }
            }
        }
    }
    // From the `turns`-th prompt from the end; everything when there are fewer.
    let start = match turns.checked_sub(1) {
        None => lines.len(),
        Some(skip) => lines
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, line)| line.starts_with("> "))
            .nth(skip)
            .map_or(0, |(i, _)| i),
    };
    lines.split_off(start)
}

/// A prompt's text, with `[image]` for each image; `None` for the user messages that carry
/// tool results.
fn prompt(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().map(str::to_owned),
                Some("image") => Some("[image]".to_owned()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.join(" ")),
        _ => None,
    }
}

/// The text of a stored user message or a reply, for the history.
fn history_line(frame: &Value) -> Option<String> {
    let message = &frame["message"];
    match frame["message_type"].as_str()? {
        "user" => prompt(&message["message"]["content"]).map(|text| format!("> {text}")),
        "result" if message["is_error"] == true => Some(format!(
            "[turn ended: {}]",
            message["terminal_reason"].as_str().unwrap_or("error")
        )),
        "result" => message["result"].as_str().map(str::to_owned),
        "status"
            if matches!(
                frame["status"].as_str(),
                Some(
                    "rewound"
                        | "imported"
                        | "synced"
                        | "waiting_for_limit"
                        | "limit_continued"
                        | "limit_wait_cancelled"
                        | "limit_gave_up"
                )
            ) =>
        {
            Some(format!(
                "[{}]",
                frame["detail"].as_str().unwrap_or_default()
            ))
        }
        _ => None,
    }
}

/// Prints a numbered list of conversations.
pub fn print_list(list: &[Summary]) {
    if list.is_empty() {
        say("no sessions yet");
    }
    for (i, s) in list.iter().enumerate() {
        let shared = match (&s.owner, &s.role) {
            (Some(owner), Some(role)) => format!("  (shared by {owner}, you are {role})"),
            _ => String::new(),
        };
        say(&format!(
            "{:>3}. {}  [{}]  {}, {} messages{shared}",
            i + 1,
            s.title.as_deref().unwrap_or("untitled"),
            s.agent_id,
            age(&s.last_active_at),
            s.message_count
        ));
    }
}

/// Prints a numbered list of a project's CLI sessions.
pub fn print_cli_sessions(list: &[CliSession]) {
    for (i, s) in list.iter().enumerate() {
        let imported = match &s.imported_as {
            Some(agent_id) => format!("  (imported as {agent_id})"),
            None => String::new(),
        };
        say(&format!(
            "{:>3}. {}  [{}]  {}, {} messages{imported}",
            i + 1,
            s.title.as_deref().unwrap_or("untitled"),
            s.cli_session_id,
            age(&s.modified_at),
            s.message_count
        ));
    }
}

/// "3m ago" from an RFC 3339 time.
fn age(rfc3339: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(rfc3339) else {
        return rfc3339.to_owned();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86400),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn user(text: &str) -> Value {
        json!({"message_type": "user", "message": {"type": "user", "message": {"role": "user", "content": text}}})
    }

    fn result(text: &str) -> Value {
        json!({"message_type": "result", "message": {"type": "result", "is_error": false, "result": text}})
    }

    #[test]
    fn history_keeps_the_last_turns() {
        let frames = [
            user("one"),
            json!({"message_type": "system"}),
            result("Echo: one"),
            user("two"),
            result("Echo: two"),
            json!({"message_type": "result", "message": {"is_error": true, "terminal_reason": "aborted_streaming"}}),
        ];
        assert_eq!(
            history(&frames, 1),
            ["> two", "Echo: two", "[turn ended: aborted_streaming]"]
        );
        assert_eq!(history(&frames, 10).len(), 5);
        assert_eq!(history(&frames, 2).len(), 5);
        assert!(history(&frames, 0).is_empty());
    }

    #[test]
    fn prompts_with_images_are_shown_and_tool_results_are_not() {
        let blocks = json!([{"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]);
        let tool_result = json!([{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]);
        let frame = |content: &Value| json!({"message_type": "user", "message": {"message": {"content": content}}});
        assert_eq!(history(&[frame(&blocks)], 1), ["> what is this? [image]"]);
        assert!(history(&[frame(&tool_result)], 1).is_empty());
    }

    #[test]
    fn ages_are_rounded_down_to_one_unit() {
        let ago = |secs: i64| {
            (chrono::Utc::now() - chrono::Duration::seconds(secs))
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        };
        assert_eq!(age(&ago(5)), "5s ago");
        assert_eq!(age(&ago(150)), "2m ago");
        assert_eq!(age(&ago(7300)), "2h ago");
        assert_eq!(age(&ago(200_000)), "2d ago");
        assert_eq!(age("not a time"), "not a time");
    }

    #[test]
    fn only_the_current_conversation_and_errors_are_shown() {
        let mut screen = Screen::default();
        let other =
            json!({"message_type": "result", "agent_id": "b", "message": {"is_error": false}});
        assert_eq!(screen.show(&other, "a"), Shown::Nothing);
        let ours =
            json!({"message_type": "result", "agent_id": "a", "message": {"is_error": false}});
        assert_eq!(screen.show(&ours, "a"), Shown::TurnEnded);
        let failed =
            json!({"message_type": "error", "agent_id": "a", "code": "queue_full", "error": "x"});
        assert_eq!(screen.show(&failed, "a"), Shown::ChatFailed);
        let answered = json!({"message_type": "error", "agent_id": "a", "client_msg_id": "c1", "code": "x", "error": "x"});
        assert_eq!(screen.show(&answered, "a"), Shown::Nothing);
    }

    #[test]
    fn tool_calls_are_one_line_each() {
        assert_eq!(
            tool_line(
                "Bash",
                &json!({"command": "ls -la\n  | head", "description": "x"})
            ),
            "\u{2699} Bash: ls -la | head"
        );
        assert_eq!(
            tool_line("Edit", &json!({"file_path": "/p/a.rs", "old_string": "a"})),
            "\u{2699} Edit: /p/a.rs"
        );
        assert_eq!(
            tool_line("Mystery", &json!({"n": 1})),
            "\u{2699} Mystery: {\"n\":1}"
        );
        let long = tool_summary("Bash", &json!({"command": "x".repeat(500)}));
        assert_eq!(long.chars().count(), TOOL_LINE_CHARS);
        assert!(long.ends_with('\u{2026}'));
    }

    #[test]
    fn an_imported_transcript_shows_replies_and_tool_calls_without_results() {
        let assistant = |content: Value| json!({"message_type": "assistant", "message": {"type": "assistant", "message": {"content": content}}});
        let frames = [
            user("list the files"),
            assistant(
                json!([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]),
            ),
            json!({"message_type": "user", "message": {"message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]}}}),
            assistant(json!([{"type": "text", "text": "There is a README."}])),
            user("and now?"),
            assistant(json!([{"type": "text", "text": "Echo: and now?"}])),
            result("Echo: and now?"),
        ];
        assert_eq!(
            history(&frames, 10),
            [
                "> list the files",
                "\u{2699} Bash: ls",
                "There is a README.",
                "> and now?",
                "Echo: and now?"
            ]
        );
    }
}
