//! Stored waits for a rate limit: a conversation's `auto_continue` option, when its "continue"
//! turn is due and how many rate-limited turns in a row it waited out. Columns of
//! `session_info`, read and written through the pool on both engines with the same SQL.

use async_trait::async_trait;

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Result, RowId};
use crate::protocol::{AgentId, Principal};

/// A conversation whose "continue" turn is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueWait {
    /// The conversation.
    pub row: RowId,
    /// Whose it is: the continue turn is theirs.
    pub principal: Principal,
    /// The owner's `agent_id` for it.
    pub agent_id: AgentId,
    /// When it was due (milliseconds since the epoch): what claiming it checks.
    pub until_ms: i64,
}

#[derive(sqlx::FromRow)]
struct Stored {
    id: RowId,
    principal: String,
    agent_id: String,
    limit_wait_until_ms: i64,
}

/// Persistence of waits for a rate limit.
#[async_trait]
pub trait LimitWaitStore: Send + Sync + 'static {
    /// Sets conversation `row`'s own `auto_continue` (None: the server's default).
    async fn set_auto_continue(&self, row: RowId, on: Option<bool>) -> Result<()>;

    /// Makes conversation `row` wait until `until_ms` (None: for nothing), having waited out
    /// `tries` rate-limited turns in a row.
    async fn set_limit_wait(&self, row: RowId, until_ms: Option<i64>, tries: i64) -> Result<()>;

    /// Conversations whose wait ended at or before `now_ms`, of every principal.
    async fn due_limit_waits(&self, now_ms: i64) -> Result<Vec<DueWait>>;

    /// When the earliest wait ends.
    async fn earliest_limit_wait(&self) -> Result<Option<i64>>;

    /// Ends the wait of conversation `row` that ends at `until_ms`, keeping its count of
    /// tries; false when it was cancelled or changed meanwhile (then nothing continues).
    async fn claim_limit_wait(&self, row: RowId, until_ms: i64) -> Result<bool>;

    /// Cancels conversation `row`'s wait and starts its count of tries over; whether it waited.
    async fn cancel_limit_wait(&self, row: RowId) -> Result<bool>;
}

/// The same statements for either store.
macro_rules! limit_wait_store {
    ($store:ty) => {
        #[async_trait]
        impl LimitWaitStore for $store {
            async fn set_auto_continue(&self, row: RowId, on: Option<bool>) -> Result<()> {
                sqlx::query("update session_info set auto_continue = $1 where id = $2")
                    .bind(on)
                    .bind(row)
                    .execute(self.pool())
                    .await?;
                Ok(())
            }

            async fn set_limit_wait(
                &self,
                row: RowId,
                until_ms: Option<i64>,
                tries: i64,
            ) -> Result<()> {
                sqlx::query(
                    "update session_info set limit_wait_until_ms = $1, limit_tries = $2 \
                     where id = $3",
                )
                .bind(until_ms)
                .bind(tries)
                .bind(row)
                .execute(self.pool())
                .await?;
                Ok(())
            }

            async fn due_limit_waits(&self, now_ms: i64) -> Result<Vec<DueWait>> {
                let rows: Vec<Stored> = sqlx::query_as(
                    "select id, principal, agent_id, limit_wait_until_ms from session_info \
                     where limit_wait_until_ms is not null and limit_wait_until_ms <= $1 \
                     order by limit_wait_until_ms limit 100",
                )
                .bind(now_ms)
                .fetch_all(self.pool())
                .await?;
                Ok(rows
                    .into_iter()
                    .filter_map(|r| {
                        Some(DueWait {
                            row: r.id,
                            principal: r.principal.into(),
                            agent_id: AgentId::parse(r.agent_id).ok()?,
                            until_ms: r.limit_wait_until_ms,
                        })
                    })
                    .collect())
            }

            async fn earliest_limit_wait(&self) -> Result<Option<i64>> {
                Ok(sqlx::query_scalar(
                    "select min(limit_wait_until_ms) from session_info \
                     where limit_wait_until_ms is not null",
                )
                .fetch_one(self.pool())
                .await?)
            }

            async fn claim_limit_wait(&self, row: RowId, until_ms: i64) -> Result<bool> {
                let done = sqlx::query(
                    "update session_info set limit_wait_until_ms = null \
                     where id = $1 and limit_wait_until_ms = $2",
                )
                .bind(row)
                .bind(until_ms)
                .execute(self.pool())
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn cancel_limit_wait(&self, row: RowId) -> Result<bool> {
                let done = sqlx::query(
                    "update session_info set limit_wait_until_ms = null, limit_tries = 0 \
                     where id = $1 and limit_wait_until_ms is not null",
                )
                .bind(row)
                .execute(self.pool())
                .await?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

limit_wait_store!(SqliteStore);
limit_wait_store!(PgStore);
