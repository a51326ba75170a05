//! The stored audit log: entries appended, read back newest first by filters and a cursor,
//! and those older than the retention dropped — never changed otherwise. Its own table: entries
//! are written by the store's writer with the next batch of messages ([`super::batch`]), read
//! and pruned through the pool on both engines with the same SQL.

use async_trait::async_trait;

use super::Result;
use super::batch::{self, Record};
use super::postgres::PgStore;
use super::sqlite::SqliteStore;

/// One entry: who did what to which conversation, and how it went.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AuditRow {
    /// Its place in the log: later entries have greater ids.
    pub id: i64,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Who acted.
    pub principal: String,
    /// What they did (`chat`, `share`, …).
    pub action: String,
    /// Whose conversation (or schedule) it concerned, if any.
    pub owner: Option<String>,
    /// The owner's `agent_id` of the conversation, if any.
    pub agent_id: Option<String>,
    /// A JSON object with the action's particulars.
    pub detail: String,
    /// `ok`, or the error code the action was refused with.
    pub outcome: String,
}

/// Which entries to read.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries of this owner's conversations (none: everyone's).
    pub owner: Option<String>,
    /// Only entries of this conversation (the owner's `agent_id`).
    pub agent_id: Option<String>,
    /// Only entries of what this principal did.
    pub principal: Option<String>,
    /// Only this action.
    pub action: Option<String>,
    /// Only entries at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Only entries before this time (RFC 3339).
    pub until: Option<String>,
    /// Only entries older than this id (the cursor of the next page).
    pub before_id: Option<i64>,
    /// Most entries read.
    pub limit: u32,
}

/// Persistence of the audit log.
#[async_trait]
pub trait AuditStore: Send + Sync + 'static {
    /// Queues `entry` for the writer (its `id` is assigned; the one given is ignored): stored
    /// with the next batch, and in every read that starts after this returns.
    async fn append_audit(&self, entry: AuditRow) -> Result<()>;

    /// The entries `query` selects, newest first.
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRow>>;

    /// Drops the entries older than `before` (RFC 3339); how many.
    async fn prune_audit(&self, before: &str) -> Result<u64>;
}

/// The same statements for either store.
macro_rules! audit_store {
    ($store:ty) => {
        #[async_trait]
        impl AuditStore for $store {
            async fn append_audit(&self, entry: AuditRow) -> Result<()> {
                batch::record(self.writer(), Record::Audit(entry)).await
            }

            async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRow>> {
                // Every entry queued before the read is in it.
                batch::flush(self.writer()).await?;
                // Every filter is bound; one left out compares its column with itself.
                let rows = sqlx::query_as(
                    "select id, at, principal, action, owner, agent_id, detail, outcome \
                     from audit_log \
                     where ($1 is null or owner = $1) and ($2 is null or agent_id = $2) \
                     and ($3 is null or principal = $3) and ($4 is null or action = $4) \
                     and ($5 is null or at >= $5) and ($6 is null or at < $6) \
                     and ($7 is null or id < $7) \
                     order by id desc limit $8",
                )
                .bind(&query.owner)
                .bind(&query.agent_id)
                .bind(&query.principal)
                .bind(&query.action)
                .bind(&query.since)
                .bind(&query.until)
                .bind(query.before_id)
                .bind(i64::from(query.limit))
                .fetch_all(self.pool())
                .await?;
                Ok(rows)
            }

            async fn prune_audit(&self, before: &str) -> Result<u64> {
                let done = sqlx::query("delete from audit_log where at < $1")
                    .bind(before)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected())
            }
        }
    };
}

audit_store!(SqliteStore);
audit_store!(PgStore);
