//! What a turn may spend: the caps it must start under (the principal's daily and monthly
//! ones, the conversation's own; on SQLite kept in memory once read), what is left of them for
//! an agent that stops by itself, what it starts on (those and the principal's credentials),
//! and the usage reports.

use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use serde::Serialize;

use super::errors::store_failure;
use super::{Manager, Shared};
use crate::agent::Credentials;
use crate::protocol::{AgentId, ErrorCode, Principal, SessionId, check_cap};
use crate::session::SessionError;
use crate::store::usage::{CapOverride, Caps, UsageQuery, UsageRow};
use crate::store::{RowId, StoreError};

/// A cap a turn would start over.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct OverCap {
    /// Which cap: `daily`, `monthly` or `conversation`.
    pub cap: &'static str,
    /// The cap, in US dollars.
    pub limit_usd: f64,
    /// What was spent against it, in US dollars.
    pub spent_usd: f64,
}

impl OverCap {
    /// The refusal a client gets.
    pub fn error(&self) -> SessionError {
        let whose = match self.cap {
            "conversation" => "this conversation's spending cap",
            "daily" => "your daily spending cap",
            _ => "your monthly spending cap",
        };
        SessionError::new(
            ErrorCode::BudgetExceeded,
            format!(
                "{whose} of ${} is reached (${:.4} spent); the turn did not run{}",
                self.limit_usd,
                self.spent_usd,
                match self.cap {
                    "conversation" => "; its owner can raise it",
                    _ => "; an admin can raise it",
                }
            ),
        )
    }

    /// The stored `status` that shows it in the conversation.
    pub fn status_payload(&self) -> String {
        serde_json::json!({
            "status": "budget_exceeded",
            "detail": self.error().message,
            "cap": self.cap,
            "limit_usd": self.limit_usd,
            "spent_usd": self.spent_usd,
        })
        .to_string()
    }
}

/// Why a turn may not start.
#[derive(Debug)]
pub(super) enum Refusal {
    /// Over a cap.
    Over(OverCap),
    /// Anything else (no credentials where they are required, the store).
    Error(SessionError),
}

impl From<SessionError> for Refusal {
    fn from(err: SessionError) -> Self {
        Refusal::Error(err)
    }
}

impl From<Refusal> for SessionError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Over(over) => over.error(),
            Refusal::Error(err) => err,
        }
    }
}

/// What an agent starts with besides its launch: the principal's credentials, and what it may
/// spend when a cap applies and it can stop by itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Terms {
    pub(super) credentials: Credentials,
    pub(super) max_budget_usd: Option<f64>,
}

impl Terms {
    /// Whether an agent started on `self`, which has spent `spent` since, must start again to
    /// run on `now`: other credentials, or an allowance that moved by more than a cent (a cap
    /// raised, a new day, spending in the principal's other conversations).
    pub(super) fn outdated_by(&self, spent: f64, now: &Terms) -> bool {
        let left = self.max_budget_usd.map(|b| b - spent);
        self.credentials != now.credentials
            || match (left, now.max_budget_usd) {
                (None, None) => false,
                (Some(a), Some(b)) => (a - b).abs() > 0.01,
                _ => true,
            }
    }
}

/// A principal's caps and what they spent against them.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Budget {
    /// Whose.
    pub principal: String,
    /// Their daily cap (UTC days), if any.
    pub daily_usd: Option<f64>,
    /// Their monthly cap (UTC calendar months), if any.
    pub monthly_usd: Option<f64>,
    /// Spent today.
    pub daily_spent_usd: f64,
    /// Spent this month.
    pub monthly_spent_usd: f64,
    /// Whether an admin set these caps (else they are the configured defaults).
    pub overridden: bool,
    /// Whether the caller may set them (an admin).
    pub can_set: bool,
}

/// The start of today and of this month (UTC), as stored times compare.
fn day_and_month_start() -> (String, String) {
    let now = chrono::Utc::now();
    (
        format!("{}T00:00:00.000Z", now.format("%Y-%m-%d")),
        format!("{}-01T00:00:00.000Z", now.format("%Y-%m")),
    )
}

/// The spending caps turns start under, kept by a server that is the only one to set them
/// (its SQLite database is its alone): read from the store the first time a turn needs them,
/// and read again after this server set them. A conversation's is known by its `session_id`
/// until its slot goes.
#[derive(Default)]
pub(super) struct KnownCaps {
    principals: DashMap<Principal, Option<CapOverride>>,
    conversations: DashMap<SessionId, Option<f64>>,
    /// Counts the sets begun: a read that saw one begin keeps nothing.
    sets: AtomicU64,
    /// Held across a set's write and what it forgets, so that sets run one at a time.
    setting: tokio::sync::Mutex<()>,
}

impl KnownCaps {
    /// The caps of `principal` (and of `conversation`, when given), if all are known.
    fn get(&self, principal: &Principal, conversation: Option<&SessionId>) -> Option<Caps> {
        let principal = *self.principals.get(principal)?;
        let conversation = match conversation {
            Some(id) => *self.conversations.get(id)?,
            None => None,
        };
        Some(Caps {
            principal,
            conversation,
        })
    }

    /// Keeps what the store said, read after `sets` sets had begun, unless another began since.
    fn read(&self, sets: u64, principal: &Principal, conversation: Option<&SessionId>, caps: Caps) {
        if self.sets.load(Ordering::Acquire) != sets {
            return;
        }
        self.principals
            .entry(principal.clone())
            .or_insert(caps.principal);
        if let Some(id) = conversation {
            (self.conversations.entry(id.clone())).or_insert(caps.conversation);
        }
    }

    /// Runs `write`, a set of the caps of `principal` or of `conversation`, and forgets them
    /// once it is done, whether it worked or not: the next turn reads them again.
    async fn set<T>(
        &self,
        principal: Option<&Principal>,
        conversation: Option<&SessionId>,
        write: impl Future<Output = T>,
    ) -> T {
        let _one_at_a_time = self.setting.lock().await;
        self.sets.fetch_add(1, Ordering::AcqRel);
        let written = write.await;
        if let Some(principal) = principal {
            self.principals.remove(principal);
        }
        if let Some(id) = conversation {
            self.conversations.remove(id);
        }
        written
    }

    /// Forgets conversation `session_id`'s (its slot is gone).
    pub(super) fn forget(&self, session_id: &SessionId) {
        self.conversations.remove(session_id);
    }
}

impl Shared {
    /// The caps of `principal` and what they spent against them.
    pub(super) async fn budget(&self, principal: &Principal) -> Result<Budget, SessionError> {
        let caps = self.caps(principal, None).await?;
        self.budget_under(principal, caps.principal).await
    }

    /// The caps a turn of `principal` (in conversation `row`, `session_id`, when given)
    /// starts under: as known, else as stored.
    async fn caps(
        &self,
        principal: &Principal,
        conversation: Option<(RowId, &SessionId)>,
    ) -> Result<Caps, SessionError> {
        let known = self.known_caps.as_ref();
        let id = conversation.map(|(_, id)| id);
        if let Some(caps) = known.and_then(|k| k.get(principal, id)) {
            return Ok(caps);
        }
        let sets = known.map(|k| k.sets.load(Ordering::Acquire));
        let row = conversation.map(|(row, _)| row);
        let caps = self
            .store
            .caps(principal, row)
            .await
            .map_err(store_failure)?;
        if let (Some(known), Some(sets)) = (known, sets) {
            known.read(sets, principal, id, caps);
        }
        Ok(caps)
    }

    /// Sets (Some) or removes (None) the caps an admin gives `principal`.
    async fn set_caps(
        &self,
        principal: &Principal,
        caps: Option<CapOverride>,
    ) -> Result<(), SessionError> {
        let write = self.store.set_cap_override(principal, caps);
        let written = match &self.known_caps {
            Some(known) => known.set(Some(principal), None, write).await,
            None => write.await,
        };
        written.map_err(store_failure)
    }

    /// Sets the own cap of conversation `row` (`session_id`).
    pub(super) async fn set_own_cap(
        &self,
        row: RowId,
        session_id: &SessionId,
        usd: f64,
    ) -> Result<(), StoreError> {
        let write = self.store.set_session_cap(row, usd);
        match &self.known_caps {
            Some(known) => known.set(None, Some(session_id), write).await,
            None => write.await,
        }
    }

    /// The caps of `principal`, `set` by an admin or else the configured ones, and what they
    /// spent against them.
    async fn budget_under(
        &self,
        principal: &Principal,
        set: Option<CapOverride>,
    ) -> Result<Budget, SessionError> {
        let store = &self.store;
        let caps = set.unwrap_or(CapOverride {
            daily_usd: self.config.budgets.daily_usd,
            monthly_usd: self.config.budgets.monthly_usd,
        });
        let (day, month) = day_and_month_start();
        let spent = |since| store.spent_since(principal, since);
        Ok(Budget {
            principal: principal.to_string(),
            daily_usd: caps.daily_usd,
            monthly_usd: caps.monthly_usd,
            daily_spent_usd: if caps.daily_usd.is_some() {
                spent(&day).await.map_err(store_failure)?
            } else {
                0.0
            },
            monthly_spent_usd: if caps.monthly_usd.is_some() {
                spent(&month).await.map_err(store_failure)?
            } else {
                0.0
            },
            overridden: set.is_some(),
            can_set: false,
        })
    }

    /// What a turn of `principal` in conversation `row` (`session_id`; None for one not yet
    /// created) may still spend: None when no cap applies.
    ///
    /// # Errors
    /// [`Refusal::Over`] when a cap is reached.
    pub(super) async fn allowance(
        &self,
        principal: &Principal,
        conversation: Option<(RowId, &SessionId)>,
    ) -> Result<Option<f64>, Refusal> {
        let stored = self.caps(principal, conversation).await?;
        let budget = self.budget_under(principal, stored.principal).await?;
        let mut caps = vec![
            ("daily", budget.daily_usd, budget.daily_spent_usd),
            ("monthly", budget.monthly_usd, budget.monthly_spent_usd),
        ];
        if let (Some(cap), Some((_, session_id))) = (stored.conversation, conversation) {
            let spent = self
                .store
                .spent_in_session(session_id)
                .await
                .map_err(store_failure)?;
            caps.push(("conversation", Some(cap), spent));
        }
        let mut left: Option<f64> = None;
        for (cap, limit, spent) in caps {
            let Some(limit) = limit else { continue };
            if spent >= limit {
                return Err(Refusal::Over(OverCap {
                    cap,
                    limit_usd: limit,
                    spent_usd: spent,
                }));
            }
            left = Some(left.map_or(limit - spent, |l| l.min(limit - spent)));
        }
        Ok(left)
    }
}

impl Manager {
    /// Before a conversation is created for a chat: whether its first turn could start
    /// (the principal's caps, and their credentials where they are required).
    ///
    /// # Errors
    /// `budget_exceeded` or `credentials_required`, or a failure to read the store.
    pub(super) async fn admit_new(
        &self,
        principal: &Principal,
        agent: &str,
    ) -> Result<(), SessionError> {
        self.shared.credentials_for(principal, agent).await?;
        self.shared.allowance(principal, None).await?;
        Ok(())
    }

    /// Whether `principal` may see or change `whose` budget: their own, or any as an admin.
    fn may_see_budget(&self, principal: &Principal, whose: &Principal) -> Result<(), SessionError> {
        if principal == whose || self.shared.config.auth.is_admin(principal) {
            return Ok(());
        }
        Err(SessionError::new(
            ErrorCode::Forbidden,
            "only an admin may see or set another principal's budget",
        ))
    }

    /// The caps of `whose` and what they spent, for `principal` (themselves, or an admin).
    ///
    /// # Errors
    /// `forbidden` for another principal's unless an admin, `store_unavailable`.
    pub async fn budget(
        &self,
        principal: &Principal,
        whose: &Principal,
    ) -> Result<Budget, SessionError> {
        self.may_see_budget(principal, whose)?;
        self.budget_for(principal, whose).await
    }

    /// The budget of `whose` as `principal` sees it.
    async fn budget_for(
        &self,
        principal: &Principal,
        whose: &Principal,
    ) -> Result<Budget, SessionError> {
        let mut budget = self.shared.budget(whose).await?;
        budget.can_set = self.shared.config.auth.is_admin(principal);
        Ok(budget)
    }

    /// Sets (Some) or removes (None: back to the configured defaults) the caps of `whose`;
    /// for admins only.
    ///
    /// # Errors
    /// `forbidden` for anyone but an admin, `invalid_request` for a cap out of range,
    /// `store_unavailable`.
    pub async fn set_budget(
        &self,
        principal: &Principal,
        whose: &Principal,
        caps: Option<CapOverride>,
    ) -> Result<Budget, SessionError> {
        if !self.shared.config.auth.is_admin(principal) {
            return Err(SessionError::new(
                ErrorCode::Forbidden,
                "only an admin ([auth] admins) may set budgets",
            ));
        }
        if let Some(caps) = caps {
            for (what, cap) in [
                ("daily_usd", caps.daily_usd),
                ("monthly_usd", caps.monthly_usd),
            ] {
                if let Some(cap) = cap {
                    check_cap(what, cap)
                        .map_err(|m| SessionError::new(ErrorCode::InvalidRequest, m))?;
                }
            }
        }
        self.shared.set_caps(whose, caps).await?;
        tracing::info!(%principal, %whose, ?caps, "budget set");
        self.budget_for(principal, whose).await
    }

    /// Sets the own cap of conversation `agent_id` of `owner` (asked by `principal`: the owner,
    /// or an admin).
    ///
    /// # Errors
    /// `forbidden` for anyone else, `unknown_agent`, `invalid_request` for a cap out of range,
    /// `store_unavailable`.
    pub async fn set_conversation_cap(
        &self,
        principal: &Principal,
        owner: &Principal,
        agent_id: &AgentId,
        usd: f64,
    ) -> Result<(), SessionError> {
        self.may_see_budget(principal, owner)?;
        check_cap("budget_usd", usd)
            .map_err(|m| SessionError::new(ErrorCode::InvalidRequest, m))?;
        let record = self
            .shared
            .store
            .find_session(owner, agent_id)
            .await
            .map_err(store_failure)?
            .ok_or_else(|| super::errors::unknown_agent(agent_id))?;
        self.shared
            .set_own_cap(record.row, &record.session_id, usd)
            .await
            .map_err(store_failure)
    }

    /// A usage report for `principal`: their own turns, or (an admin) anyone's.
    ///
    /// # Errors
    /// `forbidden` for another principal's unless an admin, `store_unavailable`.
    pub async fn usage(
        &self,
        principal: &Principal,
        query: UsageQuery,
    ) -> Result<Vec<UsageRow>, SessionError> {
        match &query.principal {
            Some(whose) => self.may_see_budget(principal, whose)?,
            None if self.shared.config.auth.is_admin(principal) => {}
            None => {
                return Err(SessionError::new(
                    ErrorCode::Forbidden,
                    "only an admin may see everyone's usage",
                ));
            }
        }
        self.shared.store.usage(&query).await.map_err(store_failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(key: &str, budget: Option<f64>) -> Terms {
        Terms {
            credentials: Credentials {
                vars: [("K".to_owned(), key.to_owned())].into(),
                names: vec!["K".to_owned()],
            },
            max_budget_usd: budget,
        }
    }

    /// An agent starts again for other credentials, or for an allowance that moved by more
    /// than a cent from what it has left; not for what it spent itself.
    #[test]
    fn an_agent_restarts_only_when_its_terms_changed() {
        let live = terms("a", Some(1.0));
        assert!(!live.outdated_by(0.25, &terms("a", Some(0.75))));
        assert!(!live.outdated_by(0.25, &terms("a", Some(0.755))));
        assert!(live.outdated_by(0.25, &terms("a", Some(2.0))), "raised");
        assert!(
            live.outdated_by(0.0, &terms("a", Some(0.5))),
            "spent elsewhere"
        );
        assert!(live.outdated_by(0.0, &terms("b", Some(1.0))), "new key");
        assert!(live.outdated_by(0.0, &terms("a", None)), "cap removed");
        assert!(!terms("a", None).outdated_by(3.0, &terms("a", None)));
    }

    /// What a read of the store finds is kept unless a set began meanwhile; a set forgets
    /// what was known of what it sets, and nothing else.
    #[tokio::test]
    async fn known_caps_never_keep_what_a_set_overtook() {
        let known = KnownCaps::default();
        let alice = Principal::from("alice");
        let id = SessionId::new();
        let stored = Caps {
            principal: None,
            conversation: Some(1.0),
        };
        let before = known.sets.load(Ordering::Acquire);
        known.set(None, Some(&id), async {}).await;
        known.read(before, &alice, Some(&id), stored);
        assert_eq!(known.get(&alice, Some(&id)), None, "overtaken: read again");
        let now = known.sets.load(Ordering::Acquire);
        known.read(now, &alice, Some(&id), stored);
        assert_eq!(known.get(&alice, Some(&id)), Some(stored));
        known.set(Some(&alice), None, async {}).await;
        assert_eq!(known.get(&alice, None), None, "set: read again");
        assert_eq!(known.conversations.get(&id).map(|c| *c), Some(Some(1.0)));
        known.forget(&id);
        assert!(known.conversations.get(&id).is_none());
    }

    #[test]
    fn a_refusal_says_which_cap_and_the_figures() {
        let over = OverCap {
            cap: "daily",
            limit_usd: 0.5,
            spent_usd: 0.5012,
        };
        let err = over.error();
        assert_eq!(err.code, ErrorCode::BudgetExceeded);
        assert!(err.message.contains("daily"), "{}", err.message);
        assert!(err.message.contains("$0.5 "), "{}", err.message);
        let status: serde_json::Value = serde_json::from_str(&over.status_payload()).unwrap();
        assert_eq!(status["status"], "budget_exceeded");
        assert_eq!(status["limit_usd"], 0.5);
        assert_eq!(status["spent_usd"], 0.5012);
    }
}
