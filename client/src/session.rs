//! The socket loop: reads input lines, commands, permission answers and Ctrl-C, sends chats on
//! the current conversation and follows its frames until the user quits.

use std::collections::{HashSet, VecDeque};
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode, header};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::render::{
    HELP, Permission, Screen, Shown, print_cli_sessions, print_list, print_raw, say,
};
use crate::rest::{CliSession, Renamed, Rest, Summary, Worktree};
use crate::resume::{self, Resume};
use crate::review::{self, MergeArgs};
use crate::spend;

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

/// What the client was started with.
pub struct Options {
    /// The server's WebSocket URL.
    pub url: String,
    /// The bearer credential (API token or JWT), when the server has authentication on.
    pub token: Option<String>,
    /// The project directory new conversations work in: `Some` when given with `--cwd`.
    pub cwd: Option<String>,
    /// The agent that runs new conversations: `Some` when given with `--agent`.
    pub agent: Option<String>,
    /// Whether new conversations ask for a git worktree of their own (`--worktree`).
    pub worktree: bool,
    /// A conversation to resume at start.
    pub resume: Option<Resume>,
}

/// Runs the terminal client until the user quits (or, with piped input, until the input
/// ends and the last reply arrived).
///
/// # Errors
/// When the server can't be reached, refuses the credential, or the socket fails.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let url = options.url.as_str();
    let rest = Rest::for_socket(url, options.token.clone())?;
    let socket = connect(url, options.token.as_deref()).await?;
    let cwd = match options.cwd {
        Some(cwd) => Some(cwd),
        None => default_cwd(&rest).await,
    };
    let mut client = Client {
        rest,
        socket,
        agent_id: new_agent_id(),
        cwd,
        agent: options.agent,
        worktree: options.worktree,
        model: None,
        send_new_options: true,
        pending: 0,
        interrupting: false,
        waiting: false,
        screen: Screen::default(),
        picking: None,
        asking: VecDeque::new(),
        always: HashSet::new(),
        interactive: std::io::stdin().is_terminal(),
        colour: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    match options.resume {
        Some(resume) => client.resume(resume).await?,
        None => say(&format!(
            "New session: {}{} (/help for commands)",
            client.agent_id,
            client.project_note()
        )),
    }
    client.run().await
}

/// Opens the socket, with `Authorization: Bearer <token>` when there is a token.
async fn connect(url: &str, token: Option<&str>) -> anyhow::Result<Socket> {
    let mut request = url
        .into_client_request()
        .with_context(|| format!("not a WebSocket URL: {url}"))?;
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .context("the token can't be sent in a header")?;
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(response))
            if response.status() == StatusCode::UNAUTHORIZED =>
        {
            if token.is_some() {
                bail!("the server at {url} refused the token")
            }
            bail!("the server at {url} needs a token: pass --token or set AGENTMUX_TOKEN")
        }
        Err(err) => Err(err).with_context(|| format!("cannot connect to {url}")),
    }
}

/// The current directory, when it is inside one of the project directories the server lists
/// for this principal; otherwise (or when the server has no project roots) none.
async fn default_cwd(rest: &Rest) -> Option<String> {
    let here = std::env::current_dir().ok()?.canonicalize().ok()?;
    let projects = rest.projects().await.ok()?;
    inside_any(&here, &projects).then(|| here.to_string_lossy().into_owned())
}

/// Whether `dir` is one of `projects` or inside one (whole path components only).
fn inside_any(dir: &Path, projects: &[String]) -> bool {
    projects.iter().any(|p| dir.starts_with(p))
}

/// A routing key for a new conversation.
fn new_agent_id() -> String {
    format!("chat-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

struct Client {
    rest: Rest,
    socket: Socket,
    agent_id: String,
    /// The project directory new conversations work in.
    cwd: Option<String>,
    /// The agent new conversations run.
    agent: Option<String>,
    /// Whether new conversations ask for a worktree of their own.
    worktree: bool,
    /// The model chats ask for (`/model NAME`); the server keeps it for the conversation.
    model: Option<String>,
    /// Whether chats carry `options.cwd`, `options.agent` and `options.worktree`: on a
    /// conversation this client started, until the server acknowledged one (they are fixed
    /// from then on).
    send_new_options: bool,
    /// Turns sent on this conversation whose `result` has not arrived.
    pending: usize,
    /// Set after the first Ctrl-C of a running turn.
    interrupting: bool,
    /// Whether the conversation waits for a rate limit to reset (Ctrl-C cancels the wait).
    waiting: bool,
    screen: Screen,
    /// A list waiting for the user's pick.
    picking: Option<Picking>,
    /// Permission requests of the current conversation waiting for an answer, oldest first.
    asking: VecDeque<Permission>,
    /// Tools the user allowed for the rest of the current conversation (`a`).
    always: HashSet<String>,
    interactive: bool,
    /// Whether diffs are coloured: standard output is a terminal and `NO_COLOR` is unset.
    colour: bool,
}

/// A question whose answer is the next line: a pick from a numbered list, or yes or no.
enum Picking {
    /// `/resume`: conversations.
    Resume(Vec<Summary>),
    /// `/import`: the project's CLI sessions.
    Import(Vec<CliSession>),
    /// `/discard`: whether to drop every change of this worktree.
    Discard(Worktree),
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
                            self.on_frame(&frame).await?;
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
                    } else if self.waiting {
                        self.waiting = false;
                        say("\n^C cancelling the wait for the rate limit (Ctrl-C again to quit)");
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
        if !self.interactive {
            return;
        }
        if !self.asking.is_empty() {
            print_raw("y/n/a> ");
        } else if self.pending == 0 {
            print_raw(match self.picking {
                Some(Picking::Discard(_)) => "y/N> ",
                Some(_) => "pick> ",
                None => "> ",
            });
        }
    }

    /// " in <dir>" for a conversation that will work in a project, " with <agent>" for one
    /// a chosen agent will run, " in a worktree of its own" for one that asks for it.
    fn project_note(&self) -> String {
        if !self.send_new_options {
            return String::new();
        }
        let mut note = String::new();
        if let Some(cwd) = &self.cwd {
            note.push_str(&format!(" in {cwd}"));
        }
        if let Some(agent) = &self.agent {
            note.push_str(&format!(" with {agent}"));
        }
        if self.worktree {
            note.push_str(" in a worktree of its own");
        }
        note
    }

    /// The `options` a chat of a new conversation carries: its project, agent and worktree.
    fn new_options(&self) -> Option<Value> {
        let mut options = serde_json::Map::new();
        if let Some(cwd) = &self.cwd {
            options.insert("cwd".into(), json!(cwd));
        }
        if let Some(agent) = &self.agent {
            options.insert("agent".into(), json!(agent));
        }
        if self.worktree {
            options.insert("worktree".into(), json!(true));
        }
        (self.send_new_options && !options.is_empty()).then_some(Value::Object(options))
    }

    async fn send(&mut self, frame: Value) -> anyhow::Result<()> {
        self.socket
            .send(Message::text(frame.to_string()))
            .await
            .context("cannot send to the server")
    }

    /// Handles one line of input; false to quit.
    async fn on_line(&mut self, line: &str) -> anyhow::Result<bool> {
        if !self.asking.is_empty() {
            self.answer(line).await?;
            return Ok(true);
        }
        if let Some(picking) = self.picking.take() {
            match picking {
                Picking::Discard(worktree) => {
                    review::discard(&self.rest, &self.agent_id, &worktree, line).await;
                }
                _ if line.is_empty() => say("cancelled"),
                Picking::Resume(list) => {
                    let chosen = match resume::pick(&list, line) {
                        Some(summary) => Some(summary.clone()),
                        None => report(self.resolve(line).await),
                    };
                    if let Some(summary) = chosen {
                        self.open(summary).await?;
                    }
                }
                Picking::Import(list) => self.import_pick(&list, line).await?,
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
                self.send_new_options = true;
                say(&format!(
                    "New session: {}{}",
                    self.agent_id,
                    self.project_note()
                ));
            }
            "/import" => self.import(arg).await?,
            "/model" => self.pick_model(arg).await,
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
            "/changes" => review::show(&self.rest, &self.agent_id, self.colour).await,
            "/usage" => spend::usage(&self.rest, arg).await,
            "/budget" => spend::set_cap(&self.rest, &self.agent_id, arg).await,
            "/commit" if arg.is_empty() => say("usage: /commit <message>"),
            "/commit" => review::commit(&self.rest, &self.agent_id, arg).await,
            "/merge" => review::merge(&self.rest, &self.agent_id, &MergeArgs::parse(arg)).await,
            "/discard" => {
                self.picking = review::ask_discard(&self.rest, &self.agent_id)
                    .await
                    .map(Picking::Discard);
            }
            c if c.starts_with('/') => say(&format!("unknown command {c}; /help lists them")),
            _ => {
                self.pending += 1;
                self.interrupting = false;
                let mut chat = json!({"type": "chat", "agent_id": self.agent_id, "content": line});
                if let Some(options) = self.new_options() {
                    chat["options"] = options;
                }
                if let Some(model) = &self.model {
                    chat["options"]["model"] = json!(model);
                }
                self.send(chat).await?;
            }
        }
        Ok(true)
    }

    /// `/model`: lists the models the agent offers; `/model NAME`: asks for one from the next
    /// message on (one the agent does not list is refused here).
    async fn pick_model(&mut self, arg: &str) {
        let Some(models) = report(self.rest.models(self.agent.as_deref()).await) else {
            return;
        };
        if arg.is_empty() {
            if models.is_empty() {
                say("the agent lists no models: /model NAME passes NAME on as it is");
            }
            for (id, name) in &models {
                let chosen = if self.model.as_deref() == Some(id) {
                    "* "
                } else {
                    "  "
                };
                say(&format!(
                    "{chosen}{id}{}",
                    name.as_ref()
                        .map(|n| format!("  ({n})"))
                        .unwrap_or_default()
                ));
            }
            return;
        }
        if !models.is_empty() && !models.iter().any(|(id, _)| id == arg) {
            say(&format!(
                "the agent has no model `{arg}`; /model lists them"
            ));
            return;
        }
        self.model = Some(arg.to_owned());
        say(&format!("Model: {arg}, from the next message on"));
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
                self.picking = Some(Picking::Resume(list));
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

    /// Answers the oldest waiting permission request with `line` (`y`, `n` or `a`).
    async fn answer(&mut self, line: &str) -> anyhow::Result<()> {
        let behavior = match line.to_ascii_lowercase().as_str() {
            "y" | "yes" => "allow",
            "n" | "no" => "deny",
            "a" | "always" => "always",
            _ => {
                say("answer y (allow), n (deny) or a (always allow this tool in this session)");
                return Ok(());
            }
        };
        let Some(request) = self.asking.pop_front() else {
            return Ok(());
        };
        if behavior == "always" {
            self.always.insert(request.tool_name.clone());
        }
        self.respond(&request, behavior != "deny").await?;
        // Requests of a tool now always allowed need no question.
        let (allowed, still): (Vec<Permission>, Vec<Permission>) = std::mem::take(&mut self.asking)
            .into_iter()
            .partition(|p| self.always.contains(&p.tool_name));
        self.asking = still.into();
        for request in allowed {
            say(&format!(
                "(allowed: {} is always allowed)",
                request.tool_name
            ));
            self.respond(&request, true).await?;
        }
        if let Some(next) = self.asking.front() {
            say(&next.question());
        }
        Ok(())
    }

    async fn respond(&mut self, request: &Permission, allow: bool) -> anyhow::Result<()> {
        let mut frame = json!({"type": "permission_response", "agent_id": self.agent_id,
            "request_id": request.request_id, "behavior": if allow { "allow" } else { "deny" }});
        if !allow {
            frame["message"] = json!("The user said no in the terminal.");
        }
        self.send(frame).await
    }

    /// A permission request arrived: allowed at once when its tool is always allowed, else
    /// asked (after any question already waiting).
    async fn on_permission(&mut self, request: Permission) -> anyhow::Result<()> {
        if self
            .asking
            .iter()
            .any(|p| p.request_id == request.request_id)
        {
            return Ok(());
        }
        if self.always.contains(&request.tool_name) {
            say(&format!(
                "(allowed {}: {} is always allowed)",
                request.summary, request.tool_name
            ));
            return self.respond(&request, true).await;
        }
        if self.asking.is_empty() {
            say(&request.question());
        }
        self.asking.push_back(request);
        self.prompt();
        Ok(())
    }

    /// `/import`: lists the project's CLI sessions to pick from, or imports the one `arg`
    /// names (a number of the last list, or a CLI session id).
    async fn import(&mut self, arg: &str) -> anyhow::Result<()> {
        let Some(cwd) = self.cwd.clone() else {
            say(
                "no project: start the client with --cwd DIR (a directory inside one of the server's project roots), or from such a directory",
            );
            return Ok(());
        };
        let Some(list) = report(self.rest.cli_sessions(&cwd).await) else {
            return Ok(());
        };
        if !arg.is_empty() {
            return self.import_pick(&list, arg).await;
        }
        if list.is_empty() {
            say(&format!("no Claude CLI sessions in {cwd}"));
            return Ok(());
        }
        print_cli_sessions(&list);
        say("Pick a number or a session id to import (Enter cancels):");
        self.picking = Some(Picking::Import(list));
        Ok(())
    }

    /// Imports (or, when it was imported already, opens) the CLI session `line` names.
    async fn import_pick(&mut self, list: &[CliSession], line: &str) -> anyhow::Result<()> {
        let chosen = match line.parse::<usize>() {
            Ok(n) if (1..=list.len()).contains(&n) => Some(&list[n - 1]),
            _ => list.iter().find(|s| s.cli_session_id == line),
        };
        let Some(chosen) = chosen.cloned() else {
            say(&format!("no CLI session `{line}` in this project"));
            return Ok(());
        };
        if let Some(agent_id) = &chosen.imported_as {
            say(&format!("already imported as {agent_id}"));
            if let Some(summary) = report(self.resolve(agent_id).await) {
                self.open(summary).await?;
            }
            return Ok(());
        }
        let Some(cwd) = self.cwd.clone() else {
            return Ok(());
        };
        if let Some(summary) = report(self.rest.import(&cwd, &chosen.cli_session_id).await) {
            say(&format!(
                "Imported CLI session {} as {}",
                chosen.cli_session_id, summary.agent_id
            ));
            self.open(summary).await?;
        }
        Ok(())
    }

    /// Stops following the current conversation.
    async fn leave(&mut self) -> anyhow::Result<()> {
        self.pending = 0;
        self.asking.clear();
        self.always.clear();
        self.screen.reset();
        self.send(json!({"type": "unsubscribe", "agent_id": self.agent_id}))
            .await
    }

    /// Makes `summary` the current conversation: loads and shows its recent history, then
    /// follows it from there.
    async fn open(&mut self, summary: Summary) -> anyhow::Result<()> {
        self.leave().await?;
        self.agent_id = summary.agent_id.clone();
        // A stored conversation keeps the directory it has.
        self.send_new_options = false;
        let (frames, last_seq) = self.rest.history(&summary.agent_id).await?;
        let title = summary.title.as_deref().unwrap_or("untitled");
        say(&format!(
            "Resumed session: {} ({} messages loaded) \u{2014} {title}",
            summary.agent_id,
            frames.len()
        ));
        if let Some(worktree) = &summary.worktree {
            say(&format!(
                "It works in a worktree on {} (from {}): /changes shows what it changed",
                worktree.branch, worktree.base
            ));
        }
        for line in crate::render::history(&frames, HISTORY_TURNS) {
            say(&line);
        }
        // `warm`: the agent starts while the person reads, so the next message skips start-up.
        self.send(json!({"type": "subscribe", "agent_id": self.agent_id, "since_seq": last_seq, "warm": true}))
            .await?;
        // Requests still waiting (asked before the client came) can be answered here.
        for request in waiting_permissions(&frames) {
            self.on_permission(request).await?;
        }
        Ok(())
    }

    async fn on_frame(&mut self, frame: &Value) -> anyhow::Result<()> {
        match self.screen.show(frame, &self.agent_id) {
            Shown::Nothing => {}
            Shown::Acked => {
                // A turn of ours ends any wait for a rate limit.
                self.send_new_options = false;
                self.waiting = false;
            }
            Shown::Waiting(waiting) => self.waiting = waiting,
            Shown::ChatFailed => self.pending = self.pending.saturating_sub(1),
            Shown::TurnEnded => {
                self.pending = self.pending.saturating_sub(1);
                self.interrupting = false;
                self.prompt();
            }
            Shown::Permission(request) => self.on_permission(request).await?,
            Shown::PermissionResolved(id) => {
                let before = self.asking.len();
                self.asking.retain(|p| p.request_id != id);
                if self.asking.len() != before {
                    say(&format!(
                        "[permission request {}]",
                        frame["outcome"].as_str().unwrap_or("resolved")
                    ));
                    match self.asking.front() {
                        Some(next) => say(&next.question()),
                        None => self.prompt(),
                    }
                }
            }
        }
        Ok(())
    }
}

/// The permission requests in `frames` that no `permission_resolved` ended.
fn waiting_permissions(frames: &[Value]) -> Vec<Permission> {
    let resolved: HashSet<&str> = frames
        .iter()
        .filter(|f| f["message_type"] == "permission_resolved")
        .filter_map(|f| f["request_id"].as_str())
        .collect();
    frames
        .iter()
        .filter(|f| f["message_type"] == "permission_request")
        .filter_map(Permission::from_frame)
        .filter(|p| !resolved.contains(p.request_id.as_str()))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_inside_a_project_by_whole_components() {
        let projects = ["/srv/src".to_owned(), "/srv/src/shop".to_owned()];
        assert!(inside_any(Path::new("/srv/src"), &projects));
        assert!(inside_any(Path::new("/srv/src/shop/web"), &projects));
        assert!(!inside_any(Path::new("/srv/srcfoo"), &projects));
        assert!(!inside_any(Path::new("/srv"), &projects));
        assert!(!inside_any(Path::new("/srv/src"), &[]));
    }

    #[test]
    fn only_unresolved_requests_are_waiting() {
        let request = |id: &str| {
            json!({"message_type": "permission_request", "request_id": id,
            "tool_name": "Bash", "input": {"command": "touch a"}})
        };
        let frames = [
            request("r1"),
            json!({"message_type": "permission_resolved", "request_id": "r1", "outcome": "allowed"}),
            request("r2"),
        ];
        let waiting = waiting_permissions(&frames);
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].request_id, "r2");
        assert_eq!(waiting[0].summary, "touch a");
    }
}
