//! The SQLite store: WAL, migrations at start-up, reads and the rare small updates.
//!
//! Every append goes through the writer ([`super::writer`]), which stores whatever requests
//! are queued in one transaction and only then answers each caller, so a frame is never sent
//! before it is committed and a busy server pays one commit for many frames. Reads and the
//! rare small updates use a separate pool; WAL lets them run beside the writer.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{SqliteConnection, SqlitePool};
use tokio::sync::mpsc;

use super::batch::{self, WriteOp};
use super::edits::{self, EditTx, ForkRow, launch_json};
use super::writer::{Readers, WriterSettings};
use super::{
    NewMessage, NewSession, Result, Rewound, RewoundStatus, RowId, SessionQuery, SessionRecord,
    Store, StoreError, StoredMessage,
};
use crate::metrics::Metrics;
use crate::protocol::LaunchOptions;

/// Rows an unfinished import loses per transaction while it is discarded.
const DISCARD_ROWS: u32 = 2000;

/// Settings of the SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteSettings {
    /// `synchronous=FULL` instead of `NORMAL` (fsync at every commit, not only at checkpoints).
    pub synchronous_full: bool,
    /// Most append requests stored in one transaction.
    pub max_batch: usize,
    /// Depth of the queue in front of the writer.
    pub queue_depth: usize,
    /// Largest database size in pages (`PRAGMA max_page_count`); 0 leaves SQLite's own limit.
    pub max_page_count: u64,
}

impl Default for SqliteSettings {
    fn default() -> Self {
        SqliteSettings {
            synchronous_full: false,
            max_batch: 512,
            queue_depth: 4096,
            max_page_count: 0,
        }
    }
}

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    pool: SqlitePool,
    writer: mpsc::Sender<WriteOp>,
    /// Reads of stored messages (replays, history pages, exports).
    readers: Arc<Readers>,
}

impl SqliteStore {
    /// Opens (creating if needed) `<path>`, runs the migrations and starts the writer.
    ///
    /// # Errors
    /// When the file can't be opened or a migration fails.
    pub async fn open(
        path: &Path,
        settings: SqliteSettings,
        metrics: Metrics,
    ) -> anyhow::Result<Self> {
        // Only the server's user may read the conversations: a new database file is 0600, and
        // SQLite gives its `-wal` and `-shm` files the database's mode.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => anyhow::bail!("cannot create the database {}: {e}", path.display()),
        }
        let mut options = SqliteConnectOptions::from_str("sqlite:")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if settings.synchronous_full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            .pragma("wal_autocheckpoint", "0")
            .pragma("cache_size", "-65536");
        if settings.max_page_count > 0 {
            options = options.pragma("max_page_count", settings.max_page_count.to_string());
        }
        // Readers only: replays and lookups. Four is plenty on a small machine; the writer has
        // its own connection.
        // A local file's connections don't go stale: they are kept open and not pinged before
        // each use (which costs a round trip to SQLite's thread per read).
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        let (tx, rx) = mpsc::channel(settings.queue_depth);
        super::writer::start(
            WriterSettings {
                path: path.to_owned(),
                synchronous_full: settings.synchronous_full,
                max_batch: settings.max_batch,
                max_page_count: settings.max_page_count,
            },
            rx,
            metrics,
        )?;
        Ok(SqliteStore {
            pool,
            writer: tx,
            readers: Arc::new(Readers::new(path.to_owned())),
        })
    }

    /// The read pool, for queries of other modules' own (REST listings, checks in tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Inserts the row of conversation `new` unless its key or its `session_id` is taken (then
    /// nothing happens); a `pending` one (an import being stored) is invisible until finished.
    async fn insert_session(
        &self,
        new: &NewSession,
        pending: bool,
    ) -> Result<sqlx::sqlite::SqliteQueryResult> {
        let now = crate::protocol::now_rfc3339();
        Ok(sqlx::query(
            "insert into session_info (principal, agent_id, session_id, backend, cwd, model, permission_mode,
                launch_options, created_at, last_active_at, pending)
             values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             on conflict do nothing",
        )
        .bind(&new.principal)
        .bind(&new.agent_id)
        .bind(&new.session_id)
        .bind(&new.backend)
        .bind(&new.cwd)
        .bind(&new.model)
        .bind(&new.permission_mode)
        .bind(launch_json(&new.launch_options))
        .bind(&now)
        .bind(&now)
        .bind(pending)
        .execute(&self.pool)
        .await?)
    }
}

/// A rewind's or a fork's transaction on SQLite (`begin immediate`: the database's write lock).
struct Tx<'c>(&'c mut SqliteConnection);

#[async_trait]
impl EditTx for Tx<'_> {
    async fn message_type(&mut self, row: RowId, seq: i64) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar(
                "select message_type from messages where session_pk = ? and seq = ?",
            )
            .bind(row)
            .bind(seq)
            .fetch_optional(&mut *self.0)
            .await?,
        )
    }

    /// Turns run one at a time in the order their prompts were stored, and each ends with
    /// exactly one `result`, so the prompts of the turns that ended by `at` are the first as
    /// many prompts as there are results; any later prompt is a later turn's. Counting starts
    /// after the last stored `rewound` or `imported` status before `at`, when nothing was
    /// running or queued.
    async fn later_prompts(&mut self, row: RowId, at: i64) -> Result<Vec<i64>> {
        Ok(sqlx::query_scalar(
            "with since (seq) as (
                select coalesce(max(seq), 0) from messages
                where session_pk = ?1 and seq < ?2 and message_type = 'status'
                  and json_valid(payload)
                  and json_extract(payload, '$.status') in ('rewound', 'imported')
             ),
             ended (n) as (
                select count(*) from messages
                where session_pk = ?1 and message_type = 'result'
                  and seq > (select seq from since) and seq <= ?2
             )
             select seq from messages
             where session_pk = ?1 and prompt = 1 and seq > (select seq from since) and seq <= ?2
             order by seq limit -1 offset (select n from ended)",
        )
        .bind(row)
        .bind(at)
        .fetch_all(&mut *self.0)
        .await?)
    }

    async fn agent_row(
        &mut self,
        row: RowId,
    ) -> Result<Option<(Option<String>, Option<String>, i64)>> {
        Ok(sqlx::query_as(
            "select sdk_session_id, next_launch, memory_from_seq from session_info where id = ?",
        )
        .bind(row)
        .fetch_optional(&mut *self.0)
        .await?)
    }

    async fn anchor_at(&mut self, row: RowId, seq: i64) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "select turn_anchor from messages where session_pk = ? and seq <= ?
               and message_type = 'result' and turn_anchor is not null
             order by seq desc limit 1",
        )
        .bind(row)
        .bind(seq)
        .fetch_optional(&mut *self.0)
        .await?)
    }

    async fn delete_after(&mut self, row: RowId, seq: i64) -> Result<u64> {
        Ok(
            sqlx::query("delete from messages where session_pk = ? and seq > ?")
                .bind(row)
                .bind(seq)
                .execute(&mut *self.0)
                .await?
                .rows_affected(),
        )
    }

    async fn delete_seqs(&mut self, row: RowId, seqs: &[i64]) -> Result<u64> {
        Ok(sqlx::query(
            "delete from messages where session_pk = ? and seq in (select value from json_each(?))",
        )
        .bind(row)
        .bind(serde_json::to_string(seqs).expect("serializes"))
        .execute(&mut *self.0)
        .await?
        .rows_affected())
    }

    async fn set_next_launch(&mut self, row: RowId, launch: &str, memory_from: i64) -> Result<()> {
        sqlx::query("update session_info set next_launch = ?, memory_from_seq = ? where id = ?")
            .bind(launch)
            .bind(memory_from)
            .bind(row)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn recount(&mut self, row: RowId) -> Result<()> {
        sqlx::query(
            "update session_info set
                message_count = (select count(*) from messages where session_pk = ?1),
                prompt_count = (select count(*) from messages where session_pk = ?1 and prompt = 1),
                result_count = (select count(*) from messages where session_pk = ?1 and message_type = 'result')
             where id = ?1",
        )
        .bind(row)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    /// A status starts or ends no turn and adds no totals.
    async fn append_status(&mut self, row: RowId, status: &NewMessage) -> Result<i64> {
        let seq: i64 = sqlx::query_scalar(
            "update session_info set last_seq = last_seq + 1, message_count = message_count + 1,
                last_active_at = ? where id = ? returning last_seq",
        )
        .bind(&status.created_at)
        .bind(row)
        .fetch_optional(&mut *self.0)
        .await?
        .ok_or(StoreError::UnknownSession)?;
        sqlx::query(
            "insert into messages (session_pk, seq, message_type, sdk_uuid, payload, created_at)
             values (?, ?, ?, ?, ?, ?)",
        )
        .bind(row)
        .bind(seq)
        .bind(status.message_type)
        .bind(status.sdk_uuid.as_deref())
        .bind(&status.payload)
        .bind(&status.created_at)
        .execute(&mut *self.0)
        .await?;
        Ok(seq)
    }

    async fn last_result(&mut self, row: RowId) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "select max(seq) from messages where session_pk = ? and message_type = 'result'",
        )
        .bind(row)
        .fetch_one(&mut *self.0)
        .await?)
    }

    async fn agent_messages_after(&mut self, row: RowId, seq: i64) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "select count(*) from messages where session_pk = ? and seq > ?
               and message_type in ('user', 'assistant', 'system', 'result')",
        )
        .bind(row)
        .bind(seq)
        .fetch_one(&mut *self.0)
        .await?)
    }

    async fn insert_fork(&mut self, source: RowId, fork: &ForkRow<'_>) -> Result<Option<RowId>> {
        let new = fork.new;
        let created = sqlx::query(
            "insert into session_info (principal, agent_id, session_id, backend, cwd, model, permission_mode,
                launch_options, title, created_at, last_active_at, last_seq, next_launch, memory_from_seq)
             select ?, ?, ?, ?, ?, ?, ?, ?, title, ?, ?, ?, ?, ? from session_info where id = ?
             on conflict (principal, agent_id) do nothing",
        )
        .bind(&new.principal)
        .bind(&new.agent_id)
        .bind(&new.session_id)
        .bind(&new.backend)
        .bind(&new.cwd)
        .bind(&new.model)
        .bind(&new.permission_mode)
        .bind(launch_json(&new.launch_options))
        .bind(&fork.created_at)
        .bind(&fork.created_at)
        .bind(fork.last_seq)
        .bind(&fork.next_launch)
        .bind(fork.memory_from_seq)
        .bind(source)
        .execute(&mut *self.0)
        .await?;
        Ok((created.rows_affected() > 0).then(|| RowId(created.last_insert_rowid())))
    }

    async fn copy_messages(
        &mut self,
        source: RowId,
        fork: RowId,
        at: i64,
        except: &[i64],
    ) -> Result<()> {
        sqlx::query(
            "insert into messages (session_pk, seq, message_type, sdk_uuid, prompt, turn_anchor, payload, created_at)
             select ?, seq, message_type, sdk_uuid, prompt, turn_anchor, payload, created_at
             from messages where session_pk = ? and seq <= ?
               and seq not in (select value from json_each(?))",
        )
        .bind(fork)
        .bind(source)
        .bind(at)
        .bind(serde_json::to_string(except).expect("serializes"))
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }
}

/// Commits when `outcome` is a success, rolls back otherwise.
async fn finish<T>(conn: &mut SqliteConnection, outcome: Result<T>) -> Result<T> {
    match outcome {
        Ok(value) => {
            sqlx::query("commit").execute(&mut *conn).await?;
            Ok(value)
        }
        Err(err) => {
            let _ = sqlx::query("rollback").execute(&mut *conn).await;
            Err(err)
        }
    }
}

const SESSION_COLUMNS: &str = "id, principal, agent_id, session_id, sdk_session_id, unified, backend, title, cwd, \
     model, permission_mode, created_at, last_active_at, message_count, last_seq, prompt_count, \
     result_count, total_cost_usd, input_tokens, output_tokens, duration_ms, next_launch, memory_from_seq, \
     launch_options";

#[async_trait]
impl Store for SqliteStore {
    async fn find_session(&self, principal: &str, agent_id: &str) -> Result<Option<SessionRecord>> {
        let sql = format!(
            "select {SESSION_COLUMNS} from session_info where principal = ? and agent_id = ? and pending = 0"
        );
        Ok(sqlx::query_as(&sql)
            .bind(principal)
            .bind(agent_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn create_session(&self, new: NewSession) -> Result<SessionRecord> {
        self.insert_session(&new, false).await?;
        // Not found: the key is taken by an import that is not finished.
        self.find_session(&new.principal, &new.agent_id)
            .await?
            .ok_or(StoreError::Importing)
    }

    async fn append(&self, row: RowId, messages: Vec<NewMessage>) -> Result<i64> {
        batch::append(&self.writer, row, messages).await
    }

    async fn messages_after(
        &self,
        row: RowId,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<StoredMessage>> {
        self.readers.messages_after(row, after_seq, limit).await
    }

    async fn record_agent_session(
        &self,
        row: RowId,
        sdk_session_id: &str,
        unified: bool,
    ) -> Result<()> {
        sqlx::query(
            "update session_info set sdk_session_id = ?, unified = ?, next_launch = null where id = ?",
        )
            .bind(sdk_session_id)
            .bind(unified)
            .bind(row)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn prompts_before(&self, row: RowId, seq: i64) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "select count(*) from messages where session_pk = ?1 and seq < ?2 and prompt = 1
               and seq > (select memory_from_seq from session_info where id = ?1)",
        )
        .bind(row)
        .bind(seq)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn list_sessions(
        &self,
        principal: &str,
        query: &SessionQuery,
    ) -> Result<(Vec<SessionRecord>, i64)> {
        // `instr(lower(..))` rather than LIKE: the filter is literal text, `%` and `_` included.
        // Content matches are looked for in the text of user and assistant messages only (the
        // string values under `message.content`: a prompt, `text` blocks, tool results), never
        // in JSON keys or ids.
        let filter = "principal = ?1 and pending = 0 and (?2 is null
            or instr(lower(coalesce(title, '')), lower(?2)) > 0
            or exists (select 1 from messages m,
                         json_tree(case when json_valid(m.payload) then m.payload else '{}' end,
                                   '$.message.content') t
                       where m.session_pk = session_info.id
                         and m.message_type in ('user', 'assistant')
                         and t.type = 'text' and (t.key is null or t.key in ('text', 'content'))
                         and instr(lower(t.atom), lower(?2)) > 0))";
        let total: i64 =
            sqlx::query_scalar(&format!("select count(*) from session_info where {filter}"))
                .bind(principal)
                .bind(query.text_contains.as_deref())
                .fetch_one(&self.pool)
                .await?;
        let sql = format!(
            "select {SESSION_COLUMNS} from session_info where {filter}
             order by last_active_at desc, id desc limit ?3 offset ?4"
        );
        let rows = sqlx::query_as(&sql)
            .bind(principal)
            .bind(query.text_contains.as_deref())
            .bind(query.limit)
            .bind(query.offset)
            .fetch_all(&self.pool)
            .await?;
        Ok((rows, total))
    }

    async fn project_activity(&self, principal: &str) -> Result<Vec<(String, i64, String)>> {
        Ok(sqlx::query_as(
            "select cwd, count(*), max(last_active_at) from session_info
             where principal = ? and pending = 0 group by cwd",
        )
        .bind(principal)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn find_by_session_id(&self, session_id: &str) -> Result<Option<SessionRecord>> {
        let sql = format!("select {SESSION_COLUMNS} from session_info where session_id = ?");
        Ok(sqlx::query_as(&sql)
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn stored_uuids(&self, row: RowId) -> Result<std::collections::HashSet<String>> {
        let uuids: Vec<String> = sqlx::query_scalar(
            "select sdk_uuid from messages where session_pk = ? and sdk_uuid is not null",
        )
        .bind(row)
        .fetch_all(&self.pool)
        .await?;
        Ok(uuids.into_iter().collect())
    }

    async fn rename_session(&self, row: RowId, title: &str) -> Result<()> {
        let done = sqlx::query("update session_info set title = ? where id = ?")
            .bind(title)
            .bind(row)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::UnknownSession);
        }
        Ok(())
    }

    async fn delete_session(&self, row: RowId) -> Result<()> {
        sqlx::query("delete from session_info where id = ?")
            .bind(row)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn set_options(
        &self,
        row: RowId,
        model: Option<&str>,
        permission_mode: Option<&str>,
        launch: &LaunchOptions,
    ) -> Result<()> {
        sqlx::query(
            "update session_info set model = ?, permission_mode = ?, launch_options = ? where id = ?",
        )
        .bind(model)
        .bind(permission_mode)
        .bind(launch_json(launch))
        .bind(row)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn rewind(&self, row: RowId, to_seq: i64, status: RewoundStatus) -> Result<Rewound> {
        let mut conn = self.pool.acquire().await?;
        sqlx::query("begin immediate").execute(&mut *conn).await?;
        let outcome = edits::rewind(&mut Tx(&mut conn), row, to_seq, status).await;
        finish(&mut conn, outcome).await
    }

    async fn fork(
        &self,
        source: RowId,
        at_seq: Option<i64>,
        new: NewSession,
    ) -> Result<SessionRecord> {
        let mut conn = self.pool.acquire().await?;
        sqlx::query("begin immediate").execute(&mut *conn).await?;
        let outcome = edits::fork(&mut Tx(&mut conn), source, at_seq, &new).await;
        finish(&mut conn, outcome).await?;
        self.find_session(&new.principal, &new.agent_id)
            .await?
            .ok_or(StoreError::UnknownSession)
    }

    async fn begin_import(&self, new: NewSession) -> Result<SessionRecord> {
        let created = self.insert_session(&new, true).await?;
        if created.rows_affected() == 0 {
            return Err(StoreError::AgentExists);
        }
        let sql = format!("select {SESSION_COLUMNS} from session_info where id = ?");
        Ok(sqlx::query_as(&sql)
            .bind(created.last_insert_rowid())
            .fetch_one(&self.pool)
            .await?)
    }

    async fn finish_import(&self, row: RowId, remembered: bool) -> Result<()> {
        let done = sqlx::query(
            "update session_info set pending = 0,
                memory_from_seq = case when ? then memory_from_seq else last_seq end
             where id = ? and pending = 1",
        )
        .bind(remembered)
        .bind(row)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::UnknownSession);
        }
        Ok(())
    }

    async fn discard_import(&self, row: RowId) -> Result<()> {
        loop {
            let gone = sqlx::query(
                "delete from messages where session_pk = ?1 and seq in
                   (select seq from messages where session_pk = ?1 order by seq limit ?2)",
            )
            .bind(row)
            .bind(DISCARD_ROWS)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if gone == 0 {
                break;
            }
        }
        sqlx::query("delete from session_info where id = ? and pending = 1")
            .bind(row)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn discard_unfinished_imports(&self) -> Result<u64> {
        let pending: Vec<RowId> =
            sqlx::query_scalar("select id from session_info where pending = 1")
                .fetch_all(&self.pool)
                .await?;
        for &id in &pending {
            self.discard_import(id).await?;
        }
        Ok(pending.len() as u64)
    }

    async fn close_unfinished_turns(&self) -> Result<u64> {
        let running: Vec<(RowId, String)> = sqlx::query_as(
            "select id, session_id from session_info where running_seq is not null and pending = 0",
        )
        .fetch_all(&self.pool)
        .await?;
        for (id, session_id) in &running {
            self.append(*id, vec![edits::restart_result(session_id)])
                .await?;
        }
        Ok(running.len() as u64)
    }

    async fn close(&self) {
        batch::close(&self.writer).await;
        self.readers.close();
        self.pool.close().await;
    }
}
