//! What the Claude CLI says of itself, asked the way its conversations run it (the same
//! program, the same environment): its version (`--version`) and whether it is signed in or
//! has a key (`auth status --json`). A CLI that is neither fails every turn; this says so
//! before the first one.

use std::process::Stdio;
use std::time::Duration;

use super::ClaudeSettings;
use crate::agent::{AgentCheck, SignIn};

/// How long each question may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// Asks the CLI of `settings` its version and whether it is signed in.
pub(super) async fn check(settings: &ClaudeSettings) -> AgentCheck {
    let version = ask(settings, &["--version"])
        .await
        .and_then(|(ok, out)| match ok {
            true => Ok(out.lines().next().unwrap_or_default().trim().to_owned()),
            false => Err(format!("`--version` failed: {}", out.trim())),
        });
    let sign_in = match ask(settings, &["auth", "status", "--json"]).await {
        Err(err) => SignIn::Unknown(err),
        Ok((_, out)) => read_status(&out),
    };
    AgentCheck {
        program: settings.bin.clone(),
        version,
        sign_in,
    }
}

/// What `auth status --json` printed means. It exits with 1 when not signed in, so its exit
/// status alone says nothing of an answer that is not that JSON (a CLI too old to have the
/// command).
fn read_status(out: &str) -> SignIn {
    let Ok(status) = serde_json::from_str::<serde_json::Value>(out.trim()) else {
        let first = out.trim().lines().next().unwrap_or("nothing");
        return SignIn::Unknown(format!("`auth status --json` answered: {first}"));
    };
    match status["loggedIn"].as_bool() {
        Some(true) => {
            let method = status["authMethod"].as_str().unwrap_or("unknown");
            SignIn::Yes(match status["apiKeySource"].as_str() {
                Some(source) => format!("{method}, from {source}"),
                None => method.to_owned(),
            })
        }
        Some(false) => SignIn::No,
        None => SignIn::Unknown("`auth status --json` has no `loggedIn`".into()),
    }
}

/// Runs the CLI with `args` in its conversations' environment; whether it succeeded, and what
/// it printed on stdout (else on stderr).
async fn ask(settings: &ClaudeSettings, args: &[&str]) -> Result<(bool, String), String> {
    let mut command = tokio::process::Command::new(&settings.bin);
    command
        .args(args)
        .env_clear()
        .envs(settings.env())
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(ANSWER_WITHIN, command.output())
        .await
        .map_err(|_| {
            format!(
                "`{}` did not answer within {ANSWER_WITHIN:?}",
                args.join(" ")
            )
        })?
        .map_err(|e| format!("cannot run {}: {e}", settings.bin.display()))?;
    let text = match out.stdout.is_empty() {
        true => out.stderr,
        false => out.stdout,
    };
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&text).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_of_the_real_cli_is_read() {
        let signed =
            r#"{"loggedIn": true, "authMethod": "api_key", "apiKeySource": "ANTHROPIC_API_KEY"}"#;
        assert_eq!(
            read_status(signed),
            SignIn::Yes("api_key, from ANTHROPIC_API_KEY".into())
        );
        let oauth = r#"{"loggedIn": true, "authMethod": "claude.ai"}"#;
        assert_eq!(read_status(oauth), SignIn::Yes("claude.ai".into()));
        let none = r#"{"loggedIn": false, "authMethod": "none"}"#;
        assert_eq!(read_status(none), SignIn::No);
        assert!(matches!(
            read_status("error: unknown command 'auth'"),
            SignIn::Unknown(said) if said.contains("unknown command")
        ));
        assert!(matches!(read_status("{}"), SignIn::Unknown(_)));
    }
}
