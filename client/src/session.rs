//! The socket loop: reads input lines, commands and Ctrl-C, sends chats on the current
//! conversation and follows its frames until the user quits.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::render::{HELP, Screen, Shown, print_list, print_raw, say};
use crate::rest::{Renamed, Rest, Summary};
use crate::resume::{self, Resume};

/// How often the client pings the server so an idle terminal keeps its socket.
const KEEPALIVE: Duration = Duration::from_secs(30);
/// Conversations shown by `/resume` and `/list`.
const LIST_LIMIT: usize = 20;
/// Most conversations searched when resolving an id prefix.
const RESOLVE_LIMIT: usize = 500;
/// Turns of history shown after resuming.
const HISTORY_TURNS: usize = 10;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Runs the terminal client on the server at `url` until the user quits (or, with piped
/// input, until the input ends and the last reply arrived).
///
/// # Errors
/// When the server can't be reached or the socket fails.
pub async fn run(url: &str, resume: Option<Resume>) -> anyhow::Result<()> {
    let rest = Rest::for_socket(url)?;
    let (socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    let mut client = Client {
        rest,
        socket,
        agent_id: new_agent_id(),
        pending: 0,
        interrupting: false,
        screen: Screen::default(),
        picking: None,
        interactive: std::io::stdin().is_terminal(),
    };
    match resume {
        Some(resume) => client.resume(resume).await?,
        None => say(&format!(
            "New session: {} (/help for commands)",
            client.agent_id
        )),
    }
    client.run().await
}

/// A routing key for a new conversation.
fn new_agent_id() -> String {
    format!("chat-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

struct Client {
    rest: Rest,
    socket: Socket,
    agent_id: String,
    /// Turns sent on this conversation whose `result` has not arrived.
    pending: usize,
    /// Set after the first Ctrl-C of a running turn.
    interrupting: bool,
    screen: Screen,
    /// A `/resume` list waiting for the user's pick.
    picking: Option<Vec<Summary>>,
    interactive: bool,
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
            let chosen = match resume::pick(&list, line) {
                Some(summary) => Some(summary.clone()),
                None => report(self.resolve(line).await),
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
                if let Some(list) = report(self.rest.list(LIST_LIMIT).await) {
                    print_list(&list);
                }
            }
            "/resume" => self.resume(Resume::parse(arg)).await?,
            "/rename" if arg.is_empty() => say("usage: /rename <title>"),
            "/rename" => match self.rest.rename(&self.agent_id, arg).await {
                Renamed::Done => say(&format!("Renamed to: {arg}")),
                Renamed::NotFound => say("nothing to rename yet: send a message first"),
                Renamed::Failed(why) => say(&format!("rename failed: {why}")),
            },
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

    async fn resume(&mut self, how: Resume) -> anyhow::Result<()> {
        let chosen = match how {
            Resume::Pick => {
                let Some(list) = report(self.rest.list(LIST_LIMIT).await) else {
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
            Resume::Last => report(self.rest.list(1).await).and_then(|l| {
                let first = l.into_iter().next();
                if first.is_none() {
                    say("no sessions yet");
                }
                first
            }),
            Resume::Id(id) => report(self.resolve(&id).await),
        };
        if let Some(summary) = chosen {
            self.open(summary).await?;
        }
        Ok(())
    }

    async fn resolve(&self, id: &str) -> anyhow::Result<Summary> {
        resume::resolve(&self.rest.list(RESOLVE_LIMIT).await?, id)
    }

    /// Stops following the current conversation.
    async fn leave(&mut self) -> anyhow::Result<()> {
        self.pending = 0;
        self.screen.reset();
        self.send(json!({"type": "unsubscribe", "agent_id": self.agent_id}))
            .await
    }

    /// Makes `summary` the current conversation: loads and shows its recent history, then
    /// follows it from there.
    async fn open(&mut self, summary: Summary) -> anyhow::Result<()> {
        self.leave().await?;
        self.agent_id = summary.agent_id.clone();
        let (frames, last_seq) = self.rest.history(&summary.agent_id).await?;
        let title = summary.title.as_deref().unwrap_or("untitled");
        say(&format!(
            "Resumed session: {} ({} messages loaded) \u{2014} {title}",
            summary.agent_id,
            frames.len()
        ));
        for line in crate::render::history(&frames, HISTORY_TURNS) {
            say(&line);
        }
        self.send(json!({"type": "subscribe", "agent_id": self.agent_id, "since_seq": last_seq}))
            .await
    }

    fn on_frame(&mut self, frame: &Value) {
        match self.screen.show(frame, &self.agent_id) {
            Shown::Nothing => {}
            Shown::ChatFailed => self.pending = self.pending.saturating_sub(1),
            Shown::TurnEnded => {
                self.pending = self.pending.saturating_sub(1);
                self.interrupting = false;
                self.prompt();
            }
        }
    }
}

/// Prints an error and turns it into `None`.
fn report<T>(outcome: anyhow::Result<T>) -> Option<T> {
    outcome.map_err(|err| say(&format!("{err:#}"))).ok()
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
