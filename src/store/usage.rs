//! Stored spending: the ledger of what each turn cost (its agent's own figures), the caps an
//! admin set per principal and a conversation's own cap, and the sums budgets and usage reports
//! are made of, summed by the engine itself (but a conversation's own, which its row keeps as
//! the ledger grows). Their own tables, read and written through the pool on both engines with
//! the same SQL, but for the ledger's rows: the store's writer stores those, and adds them to
//! their conversation's sum, with the next batch of messages ([`super::batch`]).

use async_trait::async_trait;
use serde::Serialize;

use super::batch::{self, Record};
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Result, RowId};
use crate::protocol::Principal;

/// What one turn cost, as its agent reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnUsage {
    /// Whose conversation it is.
    pub principal: String,
    /// Our id of the conversation.
    pub session_id: String,
    /// The owner's `agent_id` for it.
    pub agent_id: String,
    /// The agent (by name) that ran it.
    pub agent: String,
    /// The model that ran it (`default` when neither the agent nor the chat named one).
    pub model: String,
    /// When it ended (RFC 3339, UTC).
    pub at: String,
    /// Its cost in US dollars.
    pub cost_usd: f64,
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: i64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_tokens: i64,
}

/// What a usage report is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The day (UTC) each turn ended.
    Day,
    /// The conversation (`session_id`).
    Conversation,
    /// The agent.
    Agent,
    /// The model.
    Model,
}

impl GroupBy {
    fn column(self) -> &'static str {
        match self {
            GroupBy::Day => "substr(at, 1, 10)",
            GroupBy::Conversation => "session_id",
            GroupBy::Agent => "agent",
            GroupBy::Model => "model",
        }
    }
}

/// Which turns a usage report sums.
#[derive(Debug, Clone)]
pub struct UsageQuery {
    /// Whose turns; None: everyone's.
    pub principal: Option<Principal>,
    /// From this time on (RFC 3339, inclusive).
    pub from: String,
    /// Before this time (RFC 3339, exclusive).
    pub to: String,
    /// How they are grouped.
    pub group_by: GroupBy,
}

/// One group of a usage report.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct UsageRow {
    /// The day (`YYYY-MM-DD`), `session_id`, agent or model.
    pub key: String,
    /// For a conversation: its `agent_id` (the owner's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// For a report of everyone's: whose turns these are when they are one principal's
    /// (always for a conversation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Cost in US dollars.
    pub cost_usd: f64,
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: i64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_tokens: i64,
    /// Turns.
    pub turns: i64,
}

/// The caps an admin set for a principal (None: the configured default).
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct CapOverride {
    /// Per day (UTC).
    pub daily_usd: Option<f64>,
    /// Per calendar month (UTC).
    pub monthly_usd: Option<f64>,
}

/// The caps a turn starts under, as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Caps {
    /// The principal's, when an admin set them.
    pub principal: Option<CapOverride>,
    /// The conversation's own.
    pub conversation: Option<f64>,
}

/// Persistence of spending.
#[async_trait]
pub trait UsageStore: Send + Sync + 'static {
    /// Queues what a turn cost for the writer: stored with the next batch, so no later than
    /// anything appended after this returns.
    async fn record_usage(&self, usage: TurnUsage) -> Result<()>;

    /// What `principal` spent from `since` (RFC 3339) on.
    async fn spent_since(&self, principal: &Principal, since: &str) -> Result<f64>;

    /// What conversation `session_id` spent in all.
    async fn spent_in_session(&self, session_id: &str) -> Result<f64>;

    /// A usage report.
    async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageRow>>;

    /// The caps a turn of `principal` (in conversation `row`, when given) starts under, in one
    /// read: the ones an admin set for the principal, and the conversation's own.
    async fn caps(&self, principal: &Principal, row: Option<RowId>) -> Result<Caps>;

    /// Sets (Some) or removes (None) the caps of `principal`.
    async fn set_cap_override(
        &self,
        principal: &Principal,
        caps: Option<CapOverride>,
    ) -> Result<()>;

    /// Sets conversation `row`'s own cap.
    async fn set_session_cap(&self, row: RowId, usd: f64) -> Result<()>;
}

/// The sums of a report's groups.
const SUMS: &str = "sum(cost_usd) as cost_usd, \
     cast(sum(input_tokens) as bigint) as input_tokens, \
     cast(sum(output_tokens) as bigint) as output_tokens, \
     cast(sum(cache_read_tokens) as bigint) as cache_read_tokens, \
     cast(sum(cache_creation_tokens) as bigint) as cache_creation_tokens, \
     count(*) as turns";

/// The same statements for either store.
macro_rules! usage_store {
    ($store:ty) => {
        #[async_trait]
        impl UsageStore for $store {
            async fn record_usage(&self, u: TurnUsage) -> Result<()> {
                batch::record(self.writer(), Record::Usage(u)).await
            }

            async fn spent_since(&self, principal: &Principal, since: &str) -> Result<f64> {
                let (spent,): (Option<f64>,) = sqlx::query_as(
                    "select sum(cost_usd) from turn_usage where principal = $1 and at >= $2",
                )
                .bind(principal.as_str())
                .bind(since)
                .fetch_one(self.pool())
                .await?;
                Ok(spent.unwrap_or(0.0))
            }

            async fn spent_in_session(&self, session_id: &str) -> Result<f64> {
                let spent: Option<f64> =
                    sqlx::query_scalar("select spent_usd from session_info where session_id = $1")
                        .bind(session_id)
                        .fetch_optional(self.pool())
                        .await?;
                Ok(spent.unwrap_or(0.0))
            }

            async fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>> {
                let key = q.group_by.column();
                let labels = match q.group_by {
                    GroupBy::Conversation => "max(agent_id) as agent_id, max(principal) as principal",
                    _ => "null as agent_id, \
                          case when min(principal) = max(principal) then max(principal) end as principal",
                };
                Ok(sqlx::query_as(&format!(
                    "select {key} as key, {labels}, {SUMS} from turn_usage \
                     where at >= $1 and at < $2 and ($3 is null or principal = $3) \
                     group by {key} order by {key}"
                ))
                .bind(&q.from)
                .bind(&q.to)
                .bind(q.principal.as_deref())
                .fetch_all(self.pool())
                .await?)
            }

            async fn caps(&self, principal: &Principal, row: Option<RowId>) -> Result<Caps> {
                let (overridden, daily_usd, monthly_usd, conversation): (
                    bool,
                    Option<f64>,
                    Option<f64>,
                    Option<f64>,
                ) = sqlx::query_as(
                    "select b.principal is not null, b.daily_usd, b.monthly_usd, s.budget_usd \
                     from (select 1 as one) k \
                     left join budgets b on b.principal = $1 \
                     left join session_budgets s on s.session_pk = $2",
                )
                .bind(principal.as_str())
                .bind(row)
                .fetch_one(self.pool())
                .await?;
                Ok(Caps {
                    principal: overridden.then_some(CapOverride {
                        daily_usd,
                        monthly_usd,
                    }),
                    conversation,
                })
            }

            async fn set_cap_override(
                &self,
                principal: &Principal,
                caps: Option<CapOverride>,
            ) -> Result<()> {
                match caps {
                    Some(caps) => sqlx::query(
                        "insert into budgets (principal, daily_usd, monthly_usd, updated_at) \
                         values ($1, $2, $3, $4) on conflict (principal) do update set \
                         daily_usd = excluded.daily_usd, monthly_usd = excluded.monthly_usd, \
                         updated_at = excluded.updated_at",
                    )
                    .bind(principal.as_str())
                    .bind(caps.daily_usd)
                    .bind(caps.monthly_usd)
                    .bind(crate::protocol::now_rfc3339())
                    .execute(self.pool())
                    .await?,
                    None => sqlx::query("delete from budgets where principal = $1")
                        .bind(principal.as_str())
                        .execute(self.pool())
                        .await?,
                };
                Ok(())
            }

            async fn set_session_cap(&self, row: RowId, usd: f64) -> Result<()> {
                sqlx::query(
                    "insert into session_budgets (session_pk, budget_usd) values ($1, $2) \
                     on conflict (session_pk) do update set budget_usd = excluded.budget_usd",
                )
                .bind(row)
                .bind(usd)
                .execute(self.pool())
                .await?;
                Ok(())
            }
        }
    };
}

usage_store!(SqliteStore);
usage_store!(PgStore);
