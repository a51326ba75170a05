//! `agentmux-chat` (also run as `agentmux chat`): a terminal client of a running agentmux
//! server, over its WebSocket, with the REST API for listing and renaming conversations.
//!
//! Replies stream as they arrive. Ctrl-C interrupts the running turn; a second Ctrl-C (or one
//! with no turn running) quits, except that one while the conversation waits for a rate limit
//! cancels the wait. Commands: `/resume` (pick from a numbered list), `/resume <id>`
//! (an `agent_id`, a `session_id`, or a unique prefix of either), `/resume --last`, `/new`,
//! `/list`, `/rename <title>`, `/import` (one of the project's Claude CLI sessions), `/model`
//! (list the agent's models, or ask for one), `/usage`, `/budget <usd>`, `/help`,
//! and for a conversation in a git worktree of its own `/changes`, `/commit`, `/merge` and
//! `/discard`. New conversations work in the project of `--cwd` (default: the current
//! directory when it is inside one of the server's project roots), in a worktree of their own
//! with `--worktree`. Tool calls show one line each; permission
//! requests are answered `y`, `n` or `a` (always). With standard input piped, lines are sent
//! one turn at a time and the client exits after the last reply.

mod render;
mod rest;
mod resume;
mod review;
mod session;
mod spend;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::resume::Resume;
use crate::session::Options;

#[derive(Parser)]
#[command(
    name = "agentmux-chat",
    version,
    about = "Chat with a running agentmux server from the terminal"
)]
struct Cli {
    /// WebSocket URL of the server
    #[arg(long, env = "AGENTMUX_URL", default_value = "ws://127.0.0.1:7878/ws")]
    url: String,
    /// Resume a session: by agent_id, session_id or a unique prefix; without a value, pick
    /// from a list (or, with --last, the most recent)
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    resume: Option<String>,
    /// With --resume: the session with the most recent activity
    #[arg(long)]
    last: bool,
    /// The project directory new sessions work in (inside one of the server's project
    /// roots); default: the current directory when it is inside one
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// The agent (by name, as the server's /api/agents lists them) that runs new sessions;
    /// default: the server's default agent
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// New sessions work in a git worktree of their own, on a branch of their own (the
    /// project directory must be in a git repository)
    #[arg(long)]
    worktree: bool,
    /// API token (or JWT) for a server with authentication on
    #[arg(long, env = "AGENTMUX_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl Cli {
    fn resume(&self) -> Option<Resume> {
        match (&self.resume, self.last) {
            (_, true) => Some(Resume::Last),
            (Some(id), false) => Some(Resume::parse(id)),
            (None, false) => None,
        }
    }

    /// The options of the session: `--cwd` made absolute with links resolved (the server
    /// checks it against its roots).
    fn options(&self) -> anyhow::Result<Options> {
        let cwd = match &self.cwd {
            Some(dir) => {
                let full = std::fs::canonicalize(dir)
                    .with_context(|| format!("cannot use --cwd {}", dir.display()))?;
                anyhow::ensure!(
                    full.is_dir(),
                    "cannot use --cwd {}: not a directory",
                    dir.display()
                );
                Some(full.to_string_lossy().into_owned())
            }
            None => None,
        };
        Ok(Options {
            url: self.url.clone(),
            token: self.token.clone().filter(|t| !t.is_empty()),
            cwd,
            agent: self.agent.clone(),
            worktree: self.worktree,
            resume: self.resume(),
        })
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = cli.options().and_then(|options| {
        tokio::runtime::Runtime::new()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(session::run(options)))
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
