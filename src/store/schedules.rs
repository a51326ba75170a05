//! Stored schedules (scheduled prompts): their own table and their own calls, kept apart from
//! the conversations' writer; every read and write here goes through the pool. The SQL is the
//! same on both engines (numbered parameters, booleans as such).

use async_trait::async_trait;

use super::Result;
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use crate::protocol::Principal;

/// A schedule as stored in `schedules`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ScheduleRow {
    /// Its id (UUID v4).
    pub id: String,
    /// Whose schedule this is.
    #[sqlx(try_from = "String")]
    pub principal: Principal,
    /// Shown in lists; the title of the conversations it starts.
    pub name: String,
    /// The conversation it sends to (`same`), or the prefix of the ones it starts (`new`).
    pub agent_id: String,
    /// The prompt's text.
    pub content: String,
    /// A 5-field cron expression, when it runs on one.
    pub cron: Option<String>,
    /// The interval in seconds, when it runs on one.
    pub every_secs: Option<i64>,
    /// `same` or `new`.
    pub mode: String,
    /// JSON of the chat options each run carries.
    pub options: String,
    /// Whether it runs at its ticks.
    pub enabled: bool,
    /// The next tick, in milliseconds since the Unix epoch.
    pub next_run_ms: i64,
    /// JSON of the latest run, if any.
    pub last_run: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it was last changed (RFC 3339).
    pub updated_at: String,
}

/// Persistence of schedules.
#[async_trait]
pub trait ScheduleStore: Send + Sync + 'static {
    /// Stores a new schedule.
    async fn insert_schedule(&self, row: &ScheduleRow) -> Result<()>;

    /// A principal's schedule by id.
    async fn find_schedule(&self, principal: &Principal, id: &str) -> Result<Option<ScheduleRow>>;

    /// A principal's schedules, oldest first.
    async fn list_schedules(&self, principal: &Principal) -> Result<Vec<ScheduleRow>>;

    /// Every principal's schedules, oldest first (for the server's admins).
    async fn all_schedules(&self) -> Result<Vec<ScheduleRow>>;

    /// How many schedules a principal has.
    async fn count_schedules(&self, principal: &Principal) -> Result<i64>;

    /// Replaces the definition of a schedule (everything but its id, owner, creation and last
    /// run); false when there is no such schedule of `principal`.
    async fn update_schedule(&self, row: &ScheduleRow) -> Result<bool>;

    /// Deletes a principal's schedule; false when there was none.
    async fn delete_schedule(&self, principal: &Principal, id: &str) -> Result<bool>;

    /// Enabled schedules whose next tick is at or before `now_ms`, of every principal.
    async fn due_schedules(&self, now_ms: i64) -> Result<Vec<ScheduleRow>>;

    /// The earliest next tick of any enabled schedule.
    async fn earliest_tick(&self) -> Result<Option<i64>>;

    /// Moves a schedule's next tick from `from_ms` to `to_ms`; false when it was changed or
    /// deleted meanwhile (then this tick is not run).
    async fn claim_tick(&self, id: &str, from_ms: i64, to_ms: i64) -> Result<bool>;

    /// Records a schedule's latest run.
    async fn set_last_run(&self, id: &str, last_run: &str) -> Result<()>;

    /// Pauses an enabled schedule, recording `last_run` as its latest run and `updated_at`,
    /// and nothing else of it: a change made since it was read is kept. False when it was
    /// deleted or paused meanwhile.
    async fn pause_schedule(&self, id: &str, updated_at: &str, last_run: &str) -> Result<bool>;

    /// How many of `principal`'s conversations a schedule's `mode: "new"` run started (those
    /// with a `schedule_id`) at or after `since` (RFC 3339, as stored).
    async fn scheduled_conversations_since(
        &self,
        principal: &Principal,
        since: &str,
    ) -> Result<i64>;
}

const COLUMNS: &str = "id, principal, name, agent_id, content, cron, every_secs, mode, options, \
     enabled, next_run_ms, last_run, created_at, updated_at";

/// The same statements for either store.
macro_rules! schedule_store {
    ($store:ty) => {
#[async_trait]
impl ScheduleStore for $store {
    async fn insert_schedule(&self, row: &ScheduleRow) -> Result<()> {
        sqlx::query(
            "insert into schedules (id, principal, name, agent_id, content, cron, every_secs, \
             mode, options, enabled, next_run_ms, last_run, created_at, updated_at) \
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(&row.id)
        .bind(row.principal.as_str())
        .bind(&row.name)
        .bind(&row.agent_id)
        .bind(&row.content)
        .bind(&row.cron)
        .bind(row.every_secs)
        .bind(&row.mode)
        .bind(&row.options)
        .bind(row.enabled)
        .bind(row.next_run_ms)
        .bind(&row.last_run)
        .bind(&row.created_at)
        .bind(&row.updated_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn find_schedule(&self, principal: &Principal, id: &str) -> Result<Option<ScheduleRow>> {
        Ok(sqlx::query_as(&format!(
            "select {COLUMNS} from schedules where principal = $1 and id = $2"
        ))
        .bind(principal.as_str())
        .bind(id)
        .fetch_optional(self.pool())
        .await?)
    }

    async fn list_schedules(&self, principal: &Principal) -> Result<Vec<ScheduleRow>> {
        Ok(sqlx::query_as(&format!(
            "select {COLUMNS} from schedules where principal = $1 order by created_at, id"
        ))
        .bind(principal.as_str())
        .fetch_all(self.pool())
        .await?)
    }

    async fn all_schedules(&self) -> Result<Vec<ScheduleRow>> {
        Ok(sqlx::query_as(&format!(
            "select {COLUMNS} from schedules order by created_at, id"
        ))
        .fetch_all(self.pool())
        .await?)
    }

    async fn count_schedules(&self, principal: &Principal) -> Result<i64> {
        Ok(
            sqlx::query_scalar("select count(*) from schedules where principal = $1")
                .bind(principal.as_str())
                .fetch_one(self.pool())
                .await?,
        )
    }

    async fn update_schedule(&self, row: &ScheduleRow) -> Result<bool> {
        let done = sqlx::query(
            "update schedules set name = $1, agent_id = $2, content = $3, cron = $4, every_secs = $5, \
             mode = $6, options = $7, enabled = $8, next_run_ms = $9, updated_at = $10 \
             where principal = $11 and id = $12",
        )
        .bind(&row.name)
        .bind(&row.agent_id)
        .bind(&row.content)
        .bind(&row.cron)
        .bind(row.every_secs)
        .bind(&row.mode)
        .bind(&row.options)
        .bind(row.enabled)
        .bind(row.next_run_ms)
        .bind(&row.updated_at)
        .bind(row.principal.as_str())
        .bind(&row.id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_schedule(&self, principal: &Principal, id: &str) -> Result<bool> {
        let done = sqlx::query("delete from schedules where principal = $1 and id = $2")
            .bind(principal.as_str())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn due_schedules(&self, now_ms: i64) -> Result<Vec<ScheduleRow>> {
        Ok(sqlx::query_as(&format!(
            "select {COLUMNS} from schedules where enabled and next_run_ms <= $1 \
             order by next_run_ms limit 256"
        ))
        .bind(now_ms)
        .fetch_all(self.pool())
        .await?)
    }

    async fn earliest_tick(&self) -> Result<Option<i64>> {
        Ok(
            sqlx::query_scalar("select min(next_run_ms) from schedules where enabled")
                .fetch_one(self.pool())
                .await?,
        )
    }

    async fn claim_tick(&self, id: &str, from_ms: i64, to_ms: i64) -> Result<bool> {
        let done = sqlx::query(
            "update schedules set next_run_ms = $1 where id = $2 and next_run_ms = $3 and enabled",
        )
        .bind(to_ms)
        .bind(id)
        .bind(from_ms)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn set_last_run(&self, id: &str, last_run: &str) -> Result<()> {
        sqlx::query("update schedules set last_run = $1 where id = $2")
            .bind(last_run)
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn pause_schedule(&self, id: &str, updated_at: &str, last_run: &str) -> Result<bool> {
        let done = sqlx::query(
            "update schedules set enabled = false, updated_at = $1, last_run = $2 \
             where id = $3 and enabled",
        )
        .bind(updated_at)
        .bind(last_run)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn scheduled_conversations_since(&self, principal: &Principal, since: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "select count(*) from session_info \
             where principal = $1 and created_at >= $2 and schedule_id is not null",
        )
        .bind(principal.as_str())
        .bind(since)
        .fetch_one(self.pool())
        .await?)
    }
}
    };
}

schedule_store!(SqliteStore);
schedule_store!(PgStore);
