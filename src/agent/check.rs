//! What an agent program says of itself before any conversation runs it (its version, whether
//! it is signed in), and what to do when that is not enough: what `agentmux doctor` prints and
//! the server logs at start.

use std::path::PathBuf;

/// An agent program's answers about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCheck {
    /// The program asked.
    pub program: PathBuf,
    /// Its version, or why it gave none.
    pub version: Result<String, String>,
    /// Whether it can reach its model.
    pub sign_in: SignIn,
}

/// Whether an agent program is signed in or has a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignIn {
    /// It is, by this method (`api_key, from ANTHROPIC_API_KEY`, `claude.ai`).
    Yes(String),
    /// It is not, and has no key: every turn would fail.
    No,
    /// It could not tell, for this reason.
    Unknown(String),
}

/// Something to fix about an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Whether turns fail because of it (else it only may).
    pub fatal: bool,
    /// What is wrong.
    pub what: String,
    /// What to do.
    pub fix: String,
}

impl AgentCheck {
    /// One line for a person: the program, its version and how it is signed in.
    pub fn summary(&self) -> String {
        let version = match &self.version {
            Ok(version) => version.as_str(),
            Err(_) => "version unknown",
        };
        let signed = match &self.sign_in {
            SignIn::Yes(method) => format!("signed in ({method})"),
            SignIn::No => "not signed in, no API key".to_owned(),
            SignIn::Unknown(_) => "sign-in unknown".to_owned(),
        };
        format!("{} ({version}), {signed}", self.program.display())
    }

    /// What is wrong, with what to do about it; None when the agent can run turns.
    pub fn problem(&self) -> Option<Problem> {
        let program = self.program.display();
        if let Err(why) = &self.version {
            return Some(Problem {
                fatal: true,
                what: format!("{program} does not run: {why}"),
                fix: "check that it is the Claude CLI and runs as the server's user \
                      (claude.bin, --claude-bin)"
                    .into(),
            });
        }
        match &self.sign_in {
            SignIn::Yes(_) => None,
            SignIn::No => Some(Problem {
                fatal: true,
                what: format!(
                    "{program} is not signed in and has no API key: every turn would fail"
                ),
                fix: "sign it in as the server's user (`claude auth login`, with the server's \
                      CLAUDE_CONFIG_DIR or claude.config_dir), or give the server \
                      ANTHROPIC_API_KEY in its environment"
                    .into(),
            }),
            SignIn::Unknown(why) => Some(Problem {
                fatal: false,
                what: format!("{program} did not say whether it is signed in: {why}"),
                fix: "run `claude auth status` as the server's user; a CLI older than 2.1 \
                      can't say"
                    .into(),
            }),
        }
    }
}
