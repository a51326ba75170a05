//! `agentmux-chat` (also run as `agentmux chat`): a terminal client of a running agentmux
//! server, over its WebSocket, with the REST API for listing and renaming conversations.
//!
//! Replies stream as they arrive. Ctrl-C interrupts the running turn; a second Ctrl-C (or one
//! with no turn running) quits. Commands: `/resume` (pick from a numbered list), `/resume <id>`
//! (an `agent_id`, a `session_id`, or a unique prefix of either), `/resume --last`, `/new`,
//! `/list`, `/rename <title>`, `/help`. With standard input piped, lines are sent one turn
//! at a time and the client exits after the last reply.

mod render;
mod rest;
mod resume;
mod session;

use std::process::ExitCode;

use clap::Parser;

use crate::resume::Resume;

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
}

impl Cli {
    fn resume(&self) -> Option<Resume> {
        match (&self.resume, self.last) {
            (_, true) => Some(Resume::Last),
            (Some(id), false) => Some(Resume::parse(id)),
            (None, false) => None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(session::run(&cli.url, cli.resume())));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
