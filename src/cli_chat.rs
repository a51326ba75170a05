//! `agentmux chat`: a terminal client over the server's WebSocket, with the REST API for
//! listing and renaming conversations.
//!
//! Replies stream as they arrive. Ctrl-C interrupts the running turn; a second Ctrl-C (or one
//! with no turn running) quits. Commands: `/resume` (pick from a numbered list), `/resume <id>`
//! (an `agent_id`, a `session_id`, or a unique prefix of either), `/resume --last`, `/new`,
//! `/list`, `/rename <title>`, `/help`. With standard input piped, lines are sent one turn
//! at a time and the client exits after the last reply.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// How often the client pings the server so an idle terminal keeps its socket.
const KEEPALIVE: Duration = Duration::from_secs(30);
/// Conversations shown by `/resume` and `/list`.
const LIST_LIMIT: usize = 20;
/// Most conversations searched when resolving an id prefix.
const RESOLVE_LIMIT: usize = 500;
/// Turns of history shown after resuming.
const HISTORY_TURNS: usize = 10;

/// What `agentmux chat` starts with.
#[derive(Debug, Clone)]
pub struct ChatOptions {
    /// WebSocket URL of the server, e.g. `ws://127.0.0.1:7878/ws`.
    pub url: String,
    /// What to resume at start.
    pub resume: Option<Resume>,
}

/// Which conversation to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// Pick from a numbered list.
    Pick,
    /// The conversation with the most recent activity.
    Last,
    /// An `agent_id`, `session_id` or a unique prefix of either.
    Id(String),
}

impl Resume {
    /// Parses the argument of `/resume`.
    pub fn parse(arg: &str) -> Self {
        match arg.trim() {
            "" => Resume::Pick,
            "--last" => Resume::Last,
            id => Resume::Id(id.to_owned()),
        }
    }
}

/// A conversation as the REST list returns it (the fields the client shows).
#[derive(Debug, Clone, Deserialize)]
struct Summary {
    agent_id: String,
    session_id: String,
    title: Option<String>,
    message_count: i64,
    last_active_at: String,
}

#[derive(Deserialize)]
struct SessionList {
    sessions: Vec<Summary>,
}

#[derive(Deserialize)]
struct MessagesPage {
    messages: Vec<Value>,
    has_more: bool,
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The REST base (`http://host:port`) of a WebSocket URL.
fn http_base(ws_url: &str) -> anyhow::Result<String> {
    let rest = if let Some(r) = ws_url.strip_prefix("ws://") {
        format!("http://{r}")
    } else if let Some(r) = ws_url.strip_prefix("wss://") {
        format!("https://{r}")
    } else {
        bail!("the URL must start with ws:// or wss://: {ws_url}");
    };
    let base = rest.trim_end_matches('/');
    Ok(base.strip_suffix("/ws").unwrap_or(base).to_owned())
}

/// A routing key for a new conversation.
fn new_agent_id() -> String {
    format!("chat-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
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

/// The text of a stored user message or a reply, for the history.
fn history_line(frame: &Value) -> Option<String> {
    let message = &frame["message"];
    match frame["message_type"].as_str()? {
        "user" => message["message"]["content"]
            .as_str()
            .map(|text| format!("> {text}")),
        "result" if message["is_error"] == true => Some(format!(
            "[turn ended: {}]",
            message["terminal_reason"].as_str().unwrap_or("error")
        )),
        "result" => message["result"].as_str().map(str::to_owned),
        "status" if frame["status"] == "rewound" || frame["status"] == "imported" => Some(format!(
            "[{}]",
            frame["detail"].as_str().unwrap_or_default()
        )),
        _ => None,
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    socket: Socket,
    agent_id: String,
    /// Turns sent on this conversation whose `result` has not arrived.
    pending: usize,
    /// Set after the first Ctrl-C of a running turn.
    interrupting: bool,
    /// Set once the current reply's text was printed (streamed or whole).
    streamed: bool,
    /// Set while the cursor is not at the start of a line.
    line_open: bool,
    /// A `/resume` list waiting for the user's pick.
    picking: Option<Vec<Summary>>,
    interactive: bool,
}

/// Runs the terminal client until the user quits (or, with piped input, until the input ends
/// and the last reply arrived).
///
/// # Errors
/// When the server can't be reached or the socket fails.
pub async fn run(options: ChatOptions) -> anyhow::Result<()> {
    let base = http_base(&options.url)?;
    let (socket, _) = tokio_tungstenite::connect_async(options.url.as_str())
        .await
        .with_context(|| format!("cannot connect to {}", options.url))?;
    let mut client = Client {
        http: reqwest::Client::new(),
        base,
        socket,
        agent_id: new_agent_id(),
        pending: 0,
        interrupting: false,
        streamed: false,
        line_open: false,
        picking: None,
        interactive: std::io::stdin().is_terminal(),
    };
    match &options.resume {
        Some(resume) => client.resume(resume.clone()).await?,
        None => say(&format!(
            "New session: {} (/help for commands)",
            client.agent_id
        )),
    }
    client.run().await
}

fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn print_raw(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{text}");
    let _ = out.flush();
}

impl Client {
    async fn run(&mut self) -> anyhow::Result<()> {
        let mut lines = stdin_lines();
        let mut input_open = true;
        let mut keepalive = tokio::time::interval(KEEPALIVE);
        self.prompt();
        loop {
            if !input_open && self.pending == 0 {
                return Ok(());
            }
            tokio::select! {
                line = lines.recv(), if input_open => match line {
                    Some(line) => {
                        if !self.on_line(line.trim()).await? {
                            return Ok(());
                        }
                        self.prompt();
                    }
                    None => input_open = false,
                },
                msg = self.socket.next() => match msg {
                    Some(Ok(Message::Text(text))) => {
                        if let Ok(frame) = serde_json::from_str::<Value>(text.as_str()) {
                            self.on_frame(&frame);
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        bail!("the server closed the connection{}", frame.map(|f| format!(": {}", f.reason)).unwrap_or_default());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(err)) => bail!("connection lost: {err}"),
                    None => bail!("connection lost"),
                },
                _ = tokio::signal::ctrl_c() => {
                    if self.pending > 0 && !self.interrupting {
                        self.interrupting = true;
                        say("\n^C interrupting the turn (Ctrl-C again to quit)");
                        self.send(json!({"type": "interrupt", "agent_id": self.agent_id})).await?;
                    } else {
                        say("\nbye");
                        return Ok(());
                    }
                }
                _ = keepalive.tick() => self.socket.send(Message::Ping(Default::default())).await?,
            }
        }
    }

    fn prompt(&self) {
        if self.interactive && self.pending == 0 {
            print_raw(if self.picking.is_some() {
                "pick> "
            } else {
                "> "
            });
        }
    }

    async fn send(&mut self, frame: Value) -> anyhow::Result<()> {
        self.socket
            .send(Message::text(frame.to_string()))
            .await
            .context("cannot send to the server")
    }

    /// Handles one line of input; false to quit.
    async fn on_line(&mut self, line: &str) -> anyhow::Result<bool> {
        if let Some(list) = self.picking.take() {
            if line.is_empty() {
                say("cancelled");
                return Ok(true);
            }
            let chosen = match line.parse::<usize>() {
                Ok(n) if (1..=list.len()).contains(&n) => Some(list[n - 1].clone()),
                _ => self.report(self.resolve(line).await),
            };
            if let Some(summary) = chosen {
                self.open(summary).await?;
            }
            return Ok(true);
        }
        if line.is_empty() {
            return Ok(true);
        }
        let (command, arg) = match line.split_once(char::is_whitespace) {
            Some((c, a)) => (c, a.trim()),
            None => (line, ""),
        };
        match command {
            "/help" => say(HELP),
            "/quit" | "/exit" => return Ok(false),
            "/new" => {
                self.leave().await?;
                self.agent_id = new_agent_id();
                say(&format!("New session: {}", self.agent_id));
            }
            "/list" => {
                if let Some(list) = self.report(self.list(LIST_LIMIT).await) {
                    print_list(&list);
                }
            }
            "/resume" => self.resume(Resume::parse(arg)).await?,
            "/rename" if arg.is_empty() => say("usage: /rename <title>"),
            "/rename" => {
                let url = format!("{}/api/sessions/{}", self.base, self.agent_id);
                let outcome = self
                    .http
                    .patch(url)
                    .json(&json!({"title": arg}))
                    .send()
                    .await;
                match outcome {
                    Ok(r) if r.status().is_success() => say(&format!("Renamed to: {arg}")),
                    Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                        say("nothing to rename yet: send a message first")
                    }
                    Ok(r) => say(&format!(
                        "rename failed: {}",
                        r.text().await.unwrap_or_default()
                    )),
                    Err(err) => say(&format!("rename failed: {err}")),
                }
            }
            c if c.starts_with('/') => say(&format!("unknown command {c}; /help lists them")),
            _ => {
                self.pending += 1;
                self.interrupting = false;
                self.send(json!({"type": "chat", "agent_id": self.agent_id, "content": line}))
                    .await?;
            }
        }
        Ok(true)
    }

    /// Prints an error and turns it into `None`.
    fn report<T>(&self, outcome: anyhow::Result<T>) -> Option<T> {
        outcome.map_err(|err| say(&format!("{err:#}"))).ok()
    }

    async fn resume(&mut self, how: Resume) -> anyhow::Result<()> {
        let chosen = match how {
            Resume::Pick => {
                let Some(list) = self.report(self.list(LIST_LIMIT).await) else {
                    return Ok(());
                };
                if list.is_empty() {
                    say("no sessions yet");
                    return Ok(());
                }
                print_list(&list);
                say("Pick a number or an id (Enter cancels):");
                self.picking = Some(list);
                return Ok(());
            }
            Resume::Last => self.report(self.list(1).await).and_then(|l| {
                let first = l.into_iter().next();
                if first.is_none() {
                    say("no sessions yet");
                }
                first
            }),
            Resume::Id(id) => self.report(self.resolve(&id).await),
        };
        if let Some(summary) = chosen {
            self.open(summary).await?;
        }
        Ok(())
    }

    async fn list(&self, limit: usize) -> anyhow::Result<Vec<Summary>> {
        let url = format!("{}/api/sessions?limit={limit}", self.base);
        let response = self
            .http
            .get(url)
            .send()
            .await
            .context("cannot list sessions")?;
        if !response.status().is_success() {
            bail!(
                "cannot list sessions: {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(response.json::<SessionList>().await?.sessions)
    }

    /// Finds the one conversation `id` names: an exact `agent_id` or `session_id`, else a
    /// unique prefix of either.
    async fn resolve(&self, id: &str) -> anyhow::Result<Summary> {
        let all = self.list(RESOLVE_LIMIT).await?;
        if let Some(exact) = all.iter().find(|s| s.agent_id == id || s.session_id == id) {
            return Ok(exact.clone());
        }
        let matches: Vec<&Summary> = all
            .iter()
            .filter(|s| s.agent_id.starts_with(id) || s.session_id.starts_with(id))
            .collect();
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => bail!("no session matches `{id}`"),
            many => bail!(
                "`{id}` matches {} sessions ({}); type more of it",
                many.len(),
                many.iter()
                    .map(|s| s.agent_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Stops following the current conversation.
    async fn leave(&mut self) -> anyhow::Result<()> {
        self.pending = 0;
        self.end_line();
        self.streamed = false;
        self.send(json!({"type": "unsubscribe", "agent_id": self.agent_id}))
            .await
    }

    /// Makes `summary` the current conversation: loads and shows its recent history, then
    /// follows it from there.
    async fn open(&mut self, summary: Summary) -> anyhow::Result<()> {
        self.leave().await?;
        self.agent_id = summary.agent_id.clone();
        let mut frames = Vec::new();
        let mut after = 0;
        loop {
            let url = format!(
                "{}/api/sessions/{}/messages?after_seq={after}&limit=1000",
                self.base, summary.agent_id
            );
            let page: MessagesPage = self
                .http
                .get(url)
                .send()
                .await
                .context("cannot load the history")?
                .error_for_status()?
                .json()
                .await?;
            after = page
                .messages
                .last()
                .and_then(|m| m["seq"].as_i64())
                .unwrap_or(after);
            frames.extend(page.messages);
            if !page.has_more {
                break;
            }
        }
        let title = summary.title.as_deref().unwrap_or("untitled");
        say(&format!(
            "Resumed session: {} ({} messages loaded) \u{2014} {title}",
            summary.agent_id,
            frames.len()
        ));
        let lines: Vec<String> = frames.iter().filter_map(history_line).collect();
        let prompts_seen = lines.iter().rev().scan(0, |turns, line| {
            if line.starts_with("> ") {
                *turns += 1;
            }
            Some(*turns)
        });
        let keep = prompts_seen.take_while(|t| *t <= HISTORY_TURNS).count();
        for line in &lines[lines.len() - keep..] {
            say(line);
        }
        self.send(json!({"type": "subscribe", "agent_id": self.agent_id, "since_seq": after}))
            .await
    }

    fn on_frame(&mut self, frame: &Value) {
        let ty = frame["message_type"].as_str().unwrap_or_default();
        if ty == "error" {
            self.end_line();
            say(&format!(
                "error ({}): {}",
                frame["code"].as_str().unwrap_or("?"),
                frame["error"].as_str().unwrap_or_default()
            ));
            if frame["agent_id"] == self.agent_id.as_str() && frame["client_msg_id"].is_null() {
                self.pending = self.pending.saturating_sub(1);
            }
            return;
        }
        if frame["agent_id"] != self.agent_id.as_str() {
            return;
        }
        let message = &frame["message"];
        match ty {
            "stream_event" => {
                if let Some(text) = message["event"]["delta"]["text"].as_str() {
                    self.streamed = true;
                    self.line_open = true;
                    print_raw(text);
                }
            }
            "assistant" if !self.streamed => {
                let text: String = message["message"]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                if !text.is_empty() {
                    print_raw(&text);
                    self.streamed = true;
                    self.line_open = true;
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
                self.pending = self.pending.saturating_sub(1);
                self.interrupting = false;
                self.prompt();
            }
            "status" => {
                let status = frame["status"].as_str().unwrap_or_default();
                if matches!(
                    status,
                    "interrupted" | "crashed" | "resume_failed" | "rewound" | "deleted" | "lagged"
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
    }
}

impl Client {
    /// Ends a partly printed line.
    fn end_line(&mut self) {
        if self.line_open {
            print_raw("\n");
            self.line_open = false;
        }
    }
}

/// Lines of standard input, read on a thread of their own: a blocking read of a terminal
/// can't be cancelled, and the process must be able to exit while one is pending.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn print_list(list: &[Summary]) {
    if list.is_empty() {
        say("no sessions yet");
    }
    for (i, s) in list.iter().enumerate() {
        say(&format!(
            "{:>3}. {}  [{}]  {}, {} messages",
            i + 1,
            s.title.as_deref().unwrap_or("untitled"),
            s.agent_id,
            age(&s.last_active_at),
            s.message_count
        ));
    }
}

const HELP: &str = "\
Type a message to send it. Ctrl-C interrupts a running turn; a second Ctrl-C quits.
  /resume           pick a recent session from a numbered list (Enter cancels)
  /resume <id>      resume by agent_id, session_id or a unique prefix of either
  /resume --last    resume the session with the most recent activity
  /new              start a new session
  /list             list recent sessions
  /rename <title>   rename the current session
  /help             this help
  /quit             quit";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_base_comes_from_the_socket_url() {
        assert_eq!(
            http_base("ws://127.0.0.1:7878/ws").unwrap(),
            "http://127.0.0.1:7878"
        );
        assert_eq!(http_base("wss://h/ws/").unwrap(), "https://h");
        assert!(http_base("http://h/ws").is_err());
    }

    #[test]
    fn resume_arguments() {
        assert_eq!(Resume::parse(""), Resume::Pick);
        assert_eq!(Resume::parse(" --last "), Resume::Last);
        assert_eq!(Resume::parse("abc"), Resume::Id("abc".into()));
    }
}
