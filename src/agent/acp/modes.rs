//! The mode and model of an ACP session: asked of the agent when the conversation wants others than it has, and a mode that runs tools without asking switched or refused unless the server allows it.

use super::schema::{self, Offered, method};
use super::task::AcpTask;
use crate::agent::process::Proc;

/// Whether the session offers `mode`, as a mode or as a value of its `mode` config option.
pub(super) fn offers_mode(offered: &Offered, mode: &str) -> bool {
    offered.modes.iter().any(|m| m == mode)
        || offered
            .option("mode")
            .is_some_and(|v| v.iter().any(|m| m == mode))
}

impl AcpTask {
    /// Asks the agent for the mode and model the conversation wants, when they differ from
    /// what it has; one it does not offer is reported and left alone.
    pub(super) async fn apply_options(&mut self, proc: &mut Proc) -> Result<(), String> {
        let unattended = |mode: &str| self.settings.is_unattended(mode);
        let starts_unattended = self.applied_mode.as_deref().is_some_and(unattended);
        let wanted = self.spec.permission_mode.clone().or_else(|| {
            // A session that starts in a mode running tools without asking is switched to the
            // agent's `default` (else its first mode that asks), unless the operator allows
            // such modes.
            if !starts_unattended || self.settings.allow_unattended {
                return None;
            }
            if offers_mode(&self.offered, "default") && !unattended("default") {
                return Some("default".to_owned());
            }
            self.offered.modes.iter().find(|m| !unattended(m)).cloned()
        });
        if let Some(mode) = wanted
            && self.applied_mode.as_deref() != Some(mode.as_str())
        {
            self.applied_mode = Some(mode.clone());
            let params = if self.offered.modes.contains(&mode) {
                Some((
                    method::SESSION_SET_MODE,
                    schema::set_mode(&self.session, &mode),
                ))
            } else if offers_mode(&self.offered, &mode) {
                let params = schema::set_config_option(&self.session, "mode", &mode);
                Some((method::SESSION_SET_CONFIG_OPTION, params))
            } else {
                None
            };
            match params {
                Some((m, params)) => {
                    let id = self.request(proc, m, params).await?;
                    self.option_calls.insert(id);
                }
                None => {
                    self.events
                        .status(
                            "warning",
                            format!("the agent has no mode `{mode}`; it keeps its own"),
                        )
                        .await;
                }
            }
        }
        if let Some(model) = self.spec.model.clone()
            && self.applied_model.as_deref() != Some(model.as_str())
        {
            self.applied_model = Some(model.clone());
            if self
                .offered
                .option("model")
                .is_some_and(|v| v.contains(&model))
            {
                let params = schema::set_config_option(&self.session, "model", &model);
                let id = self
                    .request(proc, method::SESSION_SET_CONFIG_OPTION, params)
                    .await?;
                self.option_calls.insert(id);
            } else {
                self.events
                    .status(
                        "warning",
                        format!("the agent has no model `{model}`; it keeps its own"),
                    )
                    .await;
            }
        }
        Ok(())
    }

    /// The session's mode, when it runs tools without asking and the server does not allow
    /// that (it could not be switched to a mode that asks).
    pub(super) fn unallowed_mode(&self) -> Option<String> {
        self.applied_mode
            .clone()
            .filter(|m| !self.settings.allow_unattended && self.settings.is_unattended(m))
    }
}
