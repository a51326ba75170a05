//! The models the Claude CLI offers: read from the `models` of its `initialize` answers, and
//! asked of a CLI started for that alone when no conversation's has answered yet.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ClaudeSettings, control};
use crate::agent::process::Proc;
use crate::agent::{AgentModel, Launch};
use crate::protocol::{LaunchOptions, SessionId};

/// How long after a CLI failed to say, none is asked again (a conversation's CLI may still say).
const RETRY_AFTER: Duration = Duration::from_secs(300);

/// What the CLI last said it offers.
#[derive(Default)]
pub(super) struct Models {
    /// The list, once a CLI has given one.
    known: Mutex<Option<Vec<AgentModel>>>,
    /// Held while a CLI is asked: callers meanwhile wait for its answer instead of asking too.
    /// It holds when asking last failed.
    asking: tokio::sync::Mutex<Option<Instant>>,
}

impl Models {
    /// Keeps the models of an `initialize` answer (`{"models": [{"value", "displayName",
    /// "description"}, …]}`), when it lists any.
    pub(super) fn learn(&self, init: &Value) {
        let Some(list) = init["models"].as_array() else {
            return;
        };
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let models: Vec<AgentModel> = list
            .iter()
            .filter_map(|m| {
                Some(AgentModel {
                    id: text(&m["value"])?,
                    name: text(&m["displayName"]),
                    description: text(&m["description"]),
                })
            })
            .collect();
        if !models.is_empty() {
            *self.known.lock().expect("models lock") = Some(models);
        }
    }

    fn known(&self) -> Option<Vec<AgentModel>> {
        self.known.lock().expect("models lock").clone()
    }

    /// The models, asking a CLI of its own when none has said yet (once at a time; empty when
    /// it could not be asked).
    pub(super) async fn get(&self, settings: &ClaudeSettings) -> Vec<AgentModel> {
        if let Some(models) = self.known() {
            return models;
        }
        let mut failed = self.asking.lock().await;
        if let Some(models) = self.known() {
            return models;
        }
        if failed.is_some_and(|at| at.elapsed() < RETRY_AFTER) {
            return Vec::new();
        }
        if let Err(e) = self.ask(settings).await {
            tracing::warn!(error = %e, "the Claude CLI did not say which models it offers");
            *failed = Some(Instant::now());
        }
        self.known().unwrap_or_default()
    }

    /// Starts a CLI in a workspace of its own, reads its `initialize` answer and stops it.
    async fn ask(&self, settings: &ClaudeSettings) -> Result<(), String> {
        let id = SessionId::new().to_string();
        let cwd = settings.workspaces.join(&id);
        let launch = Launch::New { session_id: id };
        let args = settings.args(&launch, None, None, &LaunchOptions::default());
        let mut proc = Proc::start(settings.proc_spec(&args, &cwd, &Default::default()))
            .map_err(|e| format!("cannot start the Claude CLI: {e}"))?;
        let answer = control::initialize(&mut proc, settings.init_timeout()).await;
        proc.stop(settings.stop_grace()).await;
        let _ = std::fs::remove_dir(&cwd);
        self.learn(&answer?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn models_are_read_from_the_initialize_answer() {
        let models = Models::default();
        models.learn(&json!({"models": []}));
        assert_eq!(models.known(), None, "an empty list says nothing");
        models.learn(&json!({"models": [
            {"value": "default", "displayName": "Default (recommended)", "description": "Opus"},
            {"value": "haiku", "resolvedModel": "claude-haiku-5-5"},
            {"displayName": "no value: skipped"},
        ]}));
        let known = models.known().expect("learnt");
        assert_eq!(
            known,
            vec![
                AgentModel {
                    id: "default".into(),
                    name: Some("Default (recommended)".into()),
                    description: Some("Opus".into()),
                },
                AgentModel {
                    id: "haiku".into(),
                    name: None,
                    description: None,
                },
            ]
        );
    }
}
