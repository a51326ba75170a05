//! Opening an ACP agent's session: `initialize`, then the conversation's session resumed, loaded or new, with the launch options the agent takes, and what the session offers taken as the current state.

use serde_json::json;

use super::schema::{self, Offered, method};
use super::task::{AcpTask, CallFail};
use crate::agent::Launch;
use crate::agent::process::Proc;
use crate::protocol::{LaunchOption, LaunchOptions};

impl AcpTask {
    /// `initialize`, then the session: resumed or loaded when the conversation has one and the
    /// agent can, else new (with `resume_failed` when an old one could not be reopened).
    pub(super) async fn open(&mut self, proc: &mut Proc) -> Result<(), CallFail> {
        let caps = match self
            .call(proc, method::INITIALIZE, schema::initialize(), false)
            .await?
        {
            Ok(result) => schema::capabilities(&result).map_err(CallFail::Failed)?,
            Err(error) => {
                return Err(CallFail::Failed(format!(
                    "the agent refused initialize: {error}"
                )));
            }
        };
        self.learnt.lock().expect("learnt lock").caps = Some(caps);
        self.caps = caps;
        let cwd = self.spec.cwd.clone();
        let launch = self.launch_options().await;
        let previous = match &self.spec.launch {
            Launch::Resume { sdk_session_id } => Some(sdk_session_id.clone()),
            Launch::New { .. } | Launch::ResumeAt { .. } | Launch::Fork { .. } => None,
        };
        let mut refused = None;
        if let Some(id) = previous {
            let reopened = if caps.resume {
                Some(
                    self.call(
                        proc,
                        method::SESSION_RESUME,
                        schema::resume_session(&id, &cwd, &launch),
                        false,
                    )
                    .await?,
                )
            } else if caps.load {
                Some(
                    self.call(
                        proc,
                        method::SESSION_LOAD,
                        schema::load_session(&id, &cwd, &launch),
                        true,
                    )
                    .await?,
                )
            } else {
                None
            };
            match reopened {
                Some(Ok(result)) => {
                    self.session = id;
                    self.adopt(schema::reopened_result(&result));
                    self.announce().await;
                    return Ok(());
                }
                Some(Err(error)) => {
                    refused = Some(format!(
                        "the agent could not reopen its session ({})",
                        error["message"].as_str().unwrap_or("refused")
                    ));
                }
                None => {
                    refused = Some("the agent can neither resume nor load a session".to_owned());
                }
            }
        }
        let result = match self
            .call(
                proc,
                method::SESSION_NEW,
                schema::new_session(&cwd, &launch),
                false,
            )
            .await?
        {
            Ok(result) => result,
            Err(error) => {
                return Err(CallFail::Failed(format!(
                    "the agent refused session/new: {error}"
                )));
            }
        };
        let (id, offered) = schema::new_session_result(&result).map_err(CallFail::Failed)?;
        if let Some(reason) = refused {
            self.events
                .status(
                    "resume_failed",
                    format!(
                        "{reason}; continuing in a new agent session (the stored history is kept)"
                    ),
                )
                .await;
        }
        self.session = id;
        self.cost.base = Some(0.0);
        self.adopt(offered);
        self.announce().await;
        Ok(())
    }

    /// The conversation's launch options that the agent takes (its `launch_options`); one it
    /// no longer takes (since the configuration changed) is left out, with a warning.
    async fn launch_options(&self) -> LaunchOptions {
        let taken = &self.settings.launch_options;
        let left: Vec<&str> = (self.spec.options.named().into_iter())
            .filter(|o| !taken.contains(o))
            .map(LaunchOption::name)
            .collect();
        if !left.is_empty() {
            self.events
                .status(
                    "warning",
                    format!(
                        "the agent does not take `options.{}` (its launch_options); it starts \
                         without",
                        left.join("`, `options.")
                    ),
                )
                .await;
        }
        self.spec.options.only(taken)
    }

    /// Takes what a session offers as the current state, and lets the backend know it.
    fn adopt(&mut self, offered: Offered) {
        self.applied_mode.clone_from(&offered.current_mode);
        self.applied_model = None;
        self.learnt.lock().expect("learnt lock").offered = Some(offered.clone());
        self.offered = offered;
    }

    /// The stored `system`/`init` message: the agent's session id (what a resume uses).
    async fn announce(&self) {
        self.message(json!({
            "type": "system", "subtype": "init", "session_id": self.session,
            "uuid": uuid::Uuid::new_v4().to_string(), "agent": self.settings.name,
            "cwd": self.spec.cwd, "permissionMode": self.applied_mode,
            "modes": self.offered.modes,
        }))
        .await;
    }
}
