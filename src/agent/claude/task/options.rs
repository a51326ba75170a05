//! The CLI's model and permission mode: the ones a conversation wants, switched between turns
//! through the control protocol with the CLI's answers counted, and those a pre-warmed process
//! is switched to when a conversation adopts it.

use std::io;

use serde_json::Value;

use super::AgentTask;
use crate::agent::claude::control::{self, Request};
use crate::agent::process::Proc;

impl AgentTask {
    /// The model and permission mode the session wants (the configured ones by default).
    pub(super) fn wanted_options(&self) -> (Option<String>, Option<String>) {
        (
            self.spec
                .model
                .clone()
                .or_else(|| self.settings.config.model.clone()),
            self.spec
                .permission_mode
                .clone()
                .or_else(|| self.settings.config.permission_mode.clone()),
        )
    }

    /// Between turns: asks the CLI to switch to the settings the session now wants, through
    /// the control protocol. Prompts wait until the CLI has answered.
    pub(super) async fn switch_options(&mut self, proc: &mut Proc) -> io::Result<()> {
        let wanted = self.wanted_options();
        if wanted.0 != self.applied.0 {
            let model = wanted.0.as_deref().unwrap_or("default");
            proc.write(&control::request("options_model", Request::SetModel(model)))
                .await?;
            self.options_pending += 1;
        }
        if wanted.1 != self.applied.1 {
            let mode = wanted.1.as_deref().unwrap_or("default");
            proc.write(&control::request(
                "options_mode",
                Request::SetPermissionMode(mode),
            ))
            .await?;
            self.options_pending += 1;
        }
        self.applied = wanted;
        Ok(())
    }

    /// Counts an answer to [`Self::switch_options`]; a refusal is kept for the main loop.
    pub(super) fn on_options_answer(&mut self, raw: &str) {
        let Ok(v) = serde_json::from_str::<Value>(raw) else {
            return;
        };
        let response = &v["response"];
        if !matches!(
            response["request_id"].as_str(),
            Some("options_model" | "options_mode")
        ) {
            return;
        }
        self.options_pending = self.options_pending.saturating_sub(1);
        if response["subtype"] == "error" {
            let why = response["error"].as_str().unwrap_or("refused");
            self.options_refused = Some(format!("the agent refused the new settings ({why})"));
        }
    }

    /// A pre-warmed process runs with the default model and mode; switch if asked otherwise.
    pub(super) async fn adopt_options(&self, proc: &mut Proc) {
        if let Some(model) = &self.spec.model
            && self.settings.config.model.as_ref() != Some(model)
        {
            let request = control::request("set_model", Request::SetModel(model));
            let _ = proc.write(&request).await;
        }
        if let Some(mode) = &self.spec.permission_mode
            && self.settings.config.permission_mode.as_ref() != Some(mode)
        {
            let request = control::request("set_permission_mode", Request::SetPermissionMode(mode));
            let _ = proc.write(&request).await;
        }
    }
}
