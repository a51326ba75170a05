//! A principal's own credentials for an agent: set, listed by name and removed, checked
//! against what the agent takes, and opened only for that principal's turns.

use std::collections::BTreeMap;

use serde::Serialize;

use super::errors::store_failure;
use super::{Manager, Shared};
use crate::agent::Credentials;
use crate::protocol::{ErrorCode, Principal};
use crate::session::SessionError;

/// Most variables one principal may set for one agent.
pub const MAX_CREDENTIALS_PER_AGENT: usize = 16;

/// One variable a principal set, as listed: its name and when, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct CredentialName {
    /// The variable.
    pub name: String,
    /// When it was set (RFC 3339).
    pub set_at: String,
}

/// A principal's credentials for one agent, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AgentCredentials {
    /// The agent.
    pub agent: String,
    /// The variables it takes as credentials.
    pub accepts: Vec<String>,
    /// Those set, by name.
    pub set: Vec<CredentialName>,
    /// Whether its turns run only on the principal's own credentials.
    pub required: bool,
}

impl Shared {
    /// The credentials `principal`'s agent `agent` runs on (only the names it still takes).
    ///
    /// # Errors
    /// `credentials_required` when the agent takes credentials, the server requires each
    /// principal's own, and they set none; `backend_unavailable` when they can't be opened.
    pub(super) async fn credentials_for(
        &self,
        principal: &Principal,
        agent: &str,
    ) -> Result<Credentials, SessionError> {
        let names = self.config.credential_names(agent);
        if names.is_empty() {
            return Ok(Credentials::default());
        }
        let mut env = crate::credentials::env_of(
            self.store.as_ref(),
            self.sealer.as_deref(),
            principal,
            agent,
        )
        .await
        .map_err(|e| SessionError::new(ErrorCode::BackendUnavailable, e))?;
        env.retain(|name, _| names.contains(name));
        if env.is_empty() && self.config.agent.require_own_credentials {
            return Err(SessionError::new(
                ErrorCode::CredentialsRequired,
                format!(
                    "the agent `{agent}` runs on each member's own credentials on this server, \
                     and you have set none for it: set one of {} with PUT \
                     /api/me/credentials/{agent} (or on the web UI's Settings page)",
                    names.join(", ")
                ),
            ));
        }
        Ok(Credentials {
            vars: env,
            names: names.to_vec(),
        })
    }
}

/// Checks the variables a principal sets for `agent` against what it takes.
fn check_vars(
    config: &crate::config::Config,
    agent: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), SessionError> {
    let invalid = |m: String| SessionError::new(ErrorCode::InvalidRequest, m);
    let names = config.credential_names(agent);
    if names.is_empty() {
        return Err(invalid(format!(
            "the agent `{}` takes no credentials",
            crate::protocol::truncate_chars(agent, 64)
        )));
    }
    if env.is_empty() || env.len() > MAX_CREDENTIALS_PER_AGENT {
        return Err(invalid(format!(
            "`env` must set 1 to {MAX_CREDENTIALS_PER_AGENT} variables"
        )));
    }
    let max = config.credentials.max_value_bytes;
    for (name, value) in env {
        if !names.contains(name) {
            let why = crate::config::credential_name_problem(name)
                .unwrap_or_else(|| format!("`{name}` is not a credential of this agent"));
            return Err(invalid(format!(
                "{why}; the agent `{agent}` takes {}",
                names.join(", ")
            )));
        }
        // The value is never repeated back: it is a secret.
        if value.is_empty() || value.len() > max || value.contains('\0') {
            return Err(invalid(format!(
                "the value of `{name}` must be 1 to {max} bytes without NUL"
            )));
        }
    }
    Ok(())
}

impl Manager {
    /// The credentials of `principal` for every agent that takes some, by name only.
    ///
    /// # Errors
    /// `store_unavailable`.
    pub async fn credentials(
        &self,
        principal: &Principal,
    ) -> Result<Vec<AgentCredentials>, SessionError> {
        let stored = self
            .shared
            .store
            .credentials_of(principal, None)
            .await
            .map_err(store_failure)?;
        let config = &self.shared.config;
        Ok(self
            .shared
            .agents
            .list()
            .await
            .into_iter()
            .filter_map(|info| {
                let accepts = config.credential_names(&info.name).to_vec();
                (!accepts.is_empty()).then(|| AgentCredentials {
                    set: stored
                        .iter()
                        .filter(|v| v.agent == info.name && accepts.contains(&v.name))
                        .map(|v| CredentialName {
                            name: v.name.clone(),
                            set_at: v.set_at.clone(),
                        })
                        .collect(),
                    required: config.agent.require_own_credentials,
                    agent: info.name,
                    accepts,
                })
            })
            .collect())
    }

    /// Sets the credentials `env` of `principal` for `agent`, each replacing one of the same
    /// name (the others stay); their live agents start again on them at their next turn.
    ///
    /// # Errors
    /// `unknown_agent` for an agent that is not configured, `invalid_request` for a name the
    /// agent does not take or a bad value (never shown), `unsupported` when no secret key is
    /// configured, `store_unavailable`.
    pub async fn set_credentials(
        &self,
        principal: &Principal,
        agent: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<CredentialName>, SessionError> {
        self.known_agent(agent)?;
        check_vars(&self.shared.config, agent, env)?;
        let Some(sealer) = self.shared.sealer.as_deref() else {
            return Err(SessionError::new(
                ErrorCode::Unsupported,
                "this server keeps no credentials: its operator has set no secret key \
                 (AGENTMUX_SECRET_KEY or credentials.key_file)",
            ));
        };
        let sealed: Vec<_> = env
            .iter()
            .map(|(name, value)| sealer.seal(principal, agent, name, value))
            .collect();
        self.shared
            .store
            .put_credentials(principal, agent, &sealed)
            .await
            .map_err(store_failure)?;
        tracing::info!(%principal, agent, names = ?env.keys().collect::<Vec<_>>(), "credentials set");
        Ok(sealed
            .into_iter()
            .map(|v| CredentialName {
                name: v.name,
                set_at: v.set_at,
            })
            .collect())
    }

    /// Removes every credential of `principal` for `agent`.
    ///
    /// # Errors
    /// `unknown_agent` when the agent is not configured or they had none, `store_unavailable`.
    pub async fn delete_credentials(
        &self,
        principal: &Principal,
        agent: &str,
    ) -> Result<(), SessionError> {
        self.known_agent(agent)?;
        let removed = self
            .shared
            .store
            .delete_credentials(principal, agent)
            .await
            .map_err(store_failure)?;
        if removed == 0 {
            return Err(SessionError::new(
                ErrorCode::UnknownAgent,
                format!("you have no credentials for the agent `{agent}`"),
            ));
        }
        tracing::info!(%principal, agent, "credentials removed");
        Ok(())
    }

    fn known_agent(&self, agent: &str) -> Result<(), SessionError> {
        if self.shared.agents.get(agent).is_none() {
            return Err(SessionError::new(
                ErrorCode::UnknownAgent,
                format!(
                    "no agent `{}` is configured",
                    crate::protocol::truncate_chars(agent, 64)
                ),
            ));
        }
        Ok(())
    }
}
