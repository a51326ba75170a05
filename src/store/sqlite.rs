//! The SQLite store: WAL, migrations at start-up, reads and the rare small updates (the calls
//! whose SQL PostgreSQL shares are in [`super::shared`]).
//!
//! Every append goes through the writer ([`super::writer`]), which stores whatever requests
//! are queued in one transaction and only then answers each caller, so a frame is never sent
//! before it is committed and a busy server pays one commit for many frames. Reads and the
//! rare small updates use a separate pool, and searches connections of their own; WAL lets them
//! run beside the writer.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{SqliteConnection, SqlitePool};
use tokio::sync::mpsc;

use super::batch::{self, WriteOp};
use super::edits::{self, EditTx};
use super::listing::{self, Engine, SearchLimits};
use super::readers::Readers;
use super::writer::WriterSettings;
use super::{
    NewMessage, NewSession, Page, PageSize, Result, Rewound, RewoundStatus, RowId, RunningTurn,
    SessionPage, SessionQuery, SessionRecord, Store, StoreError,
};
use super::{backfill, shared, words, writer};
use crate::metrics::Metrics;
use crate::protocol::Principal;

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
    /// Pages written to the WAL after which it is made to start over.
    pub wal_restart_pages: u64,
    /// Longest a search may run, waiting for its turn included.
    pub search_timeout: Duration,
    /// Searches running at once, each on a connection of its own.
    pub max_searches: usize,
}

impl Default for SqliteSettings {
    fn default() -> Self {
        SqliteSettings {
            synchronous_full: false,
            max_batch: 512,
            queue_depth: 4096,
            max_page_count: 0,
            wal_restart_pages: 64 * 256,
            search_timeout: Duration::from_secs(2),
            max_searches: 2,
        }
    }
}

/// The SQLite implementation of [`Store`].
pub struct SqliteStore {
    /// The database file.
    path: std::path::PathBuf,
    pool: SqlitePool,
    /// The connections searches run on, none of the pool's: a search stopped at its deadline
    /// (by a progress handler) never holds a connection the other reads need.
    search_pool: SqlitePool,
    searches: SearchLimits,
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
            .vfs(super::connection::VFS)
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
        let pool_of = |connections: usize| {
            SqlitePoolOptions::new()
                .max_connections(connections.max(1) as u32)
                .test_before_acquire(false)
                .idle_timeout(None)
                .max_lifetime(None)
                .acquire_timeout(Duration::from_secs(10))
        };
        let pool = pool_of(4).connect_with(options.clone()).await?;
        super::schema::SQLITE.run(&pool).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot migrate the store at {}: {}",
                path.display(),
                super::schema::explain(&e, &super::schema::SQLITE)
            )
        })?;
        backfill::sqlite(&pool).await?;
        let search_pool = pool_of(settings.max_searches)
            .connect_with(options.clone())
            .await?;
        let (tx, rx) = mpsc::channel(settings.queue_depth);
        super::writer::start(
            WriterSettings {
                path: path.to_owned(),
                synchronous_full: settings.synchronous_full,
                max_batch: settings.max_batch,
                max_page_count: settings.max_page_count,
                wal_restart_pages: settings.wal_restart_pages,
            },
            rx,
            metrics,
        )?;
        Ok(SqliteStore {
            path: path.to_owned(),
            pool,
            search_pool,
            searches: SearchLimits::new(settings.search_timeout, settings.max_searches),
            writer: tx,
            readers: Arc::new(Readers::new(path.to_owned())),
        })
    }

    /// The read pool, for queries of other modules' own (REST listings, checks in tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The queue in front of the writer, for the rows other modules store through it.
    pub(in crate::store) fn writer(&self) -> &mpsc::Sender<WriteOp> {
        &self.writer
    }
}

/// How long a backup waits for the write lock a checkpoint may hold for a moment.
const BACKUP_WAIT: Duration = Duration::from_secs(10);

/// A rewind's or a fork's transaction on SQLite (`begin immediate`: the database's write lock).
struct Tx<'c>(&'c mut SqliteConnection);

shared::edit_tx_impl!(Tx<'_>, {
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

    async fn copy_messages(
        &mut self,
        source: RowId,
        fork: RowId,
        at: i64,
        except: &[i64],
    ) -> Result<()> {
        sqlx::query(
            "insert into messages (session_pk, seq, message_type, sdk_uuid, prompt, turn_anchor,
                payload, created_at, turn_cost_usd, words)
             select ?, seq, message_type, sdk_uuid, prompt, turn_anchor, payload, created_at,
                turn_cost_usd, words
             from messages where session_pk = ? and seq <= ?
               and seq not in (select value from json_each(?))",
        )
        .bind(fork)
        .bind(source)
        .bind(at)
        .bind(serde_json::to_string(except).expect("serializes"))
        .execute(&mut *self.0)
        .await?;
        sqlx::query(
            "insert into message_words_index (rowid, words)
             select id, words from messages where session_pk = $1 and words is not null",
        )
        .bind(fork)
        .execute(&mut *self.0)
        .await?;
        // The fork's row took the source's title and its words.
        sqlx::query(
            "insert into title_words_index (rowid, title_words)
             select id, title_words from session_info where id = $1 and title_words is not null",
        )
        .bind(fork)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }
});

/// Virtual machine steps of a search between two looks at its deadline.
const PROGRESS_STEPS: i32 = 1000;
/// Virtual machine steps a search may spend reading the words of the principal's newest
/// conversations (about 25,000 messages) before it looks them up in the index instead.
const SCAN_STEPS: i32 = 50_000;

/// Has `conn` stop its statements at `deadline`; with `budget`, also once they have run
/// [`SCAN_STEPS`], which then sets it.
async fn stop_at(
    conn: &mut SqliteConnection,
    deadline: Instant,
    budget: Option<Arc<AtomicBool>>,
) -> sqlx::Result<()> {
    let mut left = SCAN_STEPS / PROGRESS_STEPS;
    conn.lock_handle()
        .await?
        .set_progress_handler(PROGRESS_STEPS, move || {
            if Instant::now() >= deadline {
                return false;
            }
            let Some(spent) = &budget else { return true };
            left -= 1;
            if left < 0 {
                spent.store(true, Ordering::Relaxed);
            }
            left >= 0
        });
    Ok(())
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

shared::store_impl!(SqliteStore, {
    /// One node has the file: every turn still marked running was cut off by its last stop.
    async fn close_unfinished_turns(&self) -> Result<u64> {
        let running: Vec<(RowId, String)> = sqlx::query_as(
            "select id, session_id from session_info where running_seq is not null and not pending",
        )
        .fetch_all(&self.pool)
        .await?;
        for (id, session_id) in &running {
            // A turn a crash left running ends here; no turn runs after it.
            let ends = RunningTurn::Ends { next: None };
            let result = NewMessage::error_result(session_id, "server_restart", ends);
            self.append(*id, vec![result]).await?;
        }
        Ok(running.len() as u64)
    }

    async fn messages_after(&self, row: RowId, after_seq: i64, size: PageSize) -> Result<Page> {
        self.readers.messages_after(row, after_seq, size).await
    }

    /// A search runs on a connection of its own, stopped at its deadline by a progress handler,
    /// which also ends its read along the listing once that has used its budget.
    async fn list_sessions(
        &self,
        principal: &Principal,
        query: &SessionQuery,
    ) -> Result<SessionPage> {
        let (scan, lookup, count) = listing::searched!(Engine::Sqlite, self.pool, principal, query);
        self.searches
            .run(|deadline| async move {
                let mut conn = self.search_pool.acquire().await?;
                stop_at(&mut conn, deadline, None).await?;
                let total = listing::fetch_count!(conn, count.as_ref());
                let spent = Arc::new(AtomicBool::new(false));
                stop_at(&mut conn, deadline, Some(spent.clone())).await?;
                let rows = match listing::fetch_rows!(conn, &scan) {
                    Err(err) if listing::stopped(&err) && spent.load(Ordering::Relaxed) => {
                        stop_at(&mut conn, deadline, None).await?;
                        listing::fetch_rows!(conn, &lookup)?
                    }
                    rows => rows?,
                };
                Ok(listing::page(query, rows, total))
            })
            .await
    }

    async fn rename_session(&self, row: RowId, title: &str) -> Result<()> {
        let words = words::title_words(title);
        let mut conn = self.pool.acquire().await?;
        sqlx::query("begin immediate").execute(&mut *conn).await?;
        let outcome = async {
            let done =
                sqlx::query("update session_info set title = $1, title_words = $2 where id = $3")
                    .bind(super::text(title))
                    .bind(&words)
                    .bind(row)
                    .execute(&mut *conn)
                    .await?;
            shared::found(done.rows_affected())?;
            sqlx::query("delete from title_words_index where rowid = $1")
                .bind(row)
                .execute(&mut *conn)
                .await?;
            if let Some(words) = &words {
                sqlx::query(writer::INDEX_TITLE)
                    .bind(row)
                    .bind(words)
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(())
        }
        .await;
        finish(&mut conn, outcome).await
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

    async fn backup(&self, to: &Path) -> Result<bool> {
        let (db, to) = (self.path.clone(), to.to_owned());
        tokio::task::spawn_blocking(move || super::backup::copy(&db, &to, BACKUP_WAIT))
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(true)
    }

    async fn close(&self) {
        batch::close(&self.writer).await;
        self.readers.close();
        self.pool.close().await;
    }
});
