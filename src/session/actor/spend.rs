//! A conversation's spending and credentials: the terms its agent starts on, the refusal of a
//! turn over a cap (stored as a `budget_exceeded` status, and nothing else), and the ledger
//! entry of each turn's cost.

use std::sync::atomic::Ordering;

use super::Actor;
use super::figures::ResultFigures;
use crate::protocol;
use crate::session::SessionError;
use crate::session::spend::{OverCap, Refusal, Terms};
use crate::store::usage::TurnUsage;
use crate::store::{NewMessage, StoreError, Totals};

impl Actor {
    /// What the conversation's agent must start on now.
    ///
    /// # Errors
    /// When a turn may not start: over a cap, or without credentials where they are required.
    pub(super) async fn launch_terms(&self) -> Result<Terms, Refusal> {
        let c = &self.conversation;
        let credentials = self.shared.credentials_for(&c.principal, &c.agent).await?;
        let left = self
            .shared
            .allowance(&c.principal, Some((c.row, &c.session_id)))
            .await?;
        let stops = self
            .backend
            .as_ref()
            .is_some_and(|b| b.supports().max_budget);
        Ok(Terms {
            credentials,
            max_budget_usd: left.filter(|_| stops),
        })
    }

    /// Checks a chat before anything of it is stored: its own cap (set first, when it names
    /// one), the caps and the credentials its turn needs; what its agent would start on. A
    /// refusal over a cap is stored as a `budget_exceeded` status with the figures.
    pub(super) async fn admit(&mut self, budget_usd: Option<f64>) -> Result<Terms, SessionError> {
        let c = &self.conversation;
        if let Some(usd) = budget_usd
            && let Err(err) = (self.shared).set_own_cap(c.row, &c.session_id, usd).await
        {
            return Err(self.store_refused(err));
        }
        match self.launch_terms().await {
            Ok(terms) => Ok(terms),
            Err(Refusal::Over(over)) => {
                self.store_over_cap(&over).await;
                Err(over.error())
            }
            Err(Refusal::Error(err)) => Err(err),
        }
    }

    /// A failed write of the conversation as the client's error; a write refused because
    /// another node took the conversation over hands it over.
    pub(super) fn store_refused(&self, err: StoreError) -> SessionError {
        if matches!(err, StoreError::Fenced) {
            self.taken_over.store(true, Ordering::Release);
        }
        crate::session::errors::store_error(err, &self.conversation.agent_id)
    }

    /// Stores and publishes the `budget_exceeded` status of a refused turn.
    pub(super) async fn store_over_cap(&mut self, over: &OverCap) {
        tracing::info!(agent_id = %self.conversation.agent_id, cap = over.cap, limit_usd = over.limit_usd, spent_usd = over.spent_usd, "turn refused over a spending cap");
        let status = NewMessage::new("status", over.status_payload());
        let (at, payload) = (status.created_at.clone(), status.payload.clone());
        match self
            .shared
            .store
            .append(self.conversation.row, vec![status])
            .await
        {
            Ok(seq) => {
                self.last_seq = seq;
                self.publish(protocol::session_frame(
                    self.conversation.tag(),
                    "status",
                    Some(seq),
                    &at,
                    &payload,
                    None,
                ));
            }
            Err(err) => self.store_failed(&err),
        }
    }

    /// Records what a `result` (with its `totals`) cost, in the ledger and the metrics.
    pub(super) async fn record_usage(&self, figures: &ResultFigures, totals: Totals, at: &str) {
        let c = &self.conversation;
        let record = TurnUsage {
            principal: c.principal.to_string(),
            session_id: c.session_id.to_string(),
            agent_id: c.agent_id.to_string(),
            agent: c.agent.clone(),
            model: figures
                .costliest_model()
                .or_else(|| self.model.clone())
                .unwrap_or_else(|| "default".into()),
            at: at.to_owned(),
            cost_usd: totals.cost_usd,
            input_tokens: totals.input_tokens,
            output_tokens: totals.output_tokens,
            cache_read_tokens: figures.tokens(|u| u.cache_read_input_tokens),
            cache_creation_tokens: figures.tokens(|u| u.cache_creation_input_tokens),
        };
        self.shared
            .metrics
            .turn_usage(&record.agent, &record.model, &record);
        let cost_usd = record.cost_usd;
        if let Err(err) = self.shared.store.record_usage(record).await {
            tracing::error!(agent_id = %c.agent_id, error = %err, cost_usd, "could not record what a turn cost");
        }
    }
}
