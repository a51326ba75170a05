//! The PostgreSQL store: the store several nodes can share, behind the same [`Store`] trait.
//!
//! Appends go through one writer task that stores whatever requests are queued in one
//! transaction ([`super::batch`]) with one statement: it adds each conversation's counts to its
//! row, takes its seqs from the same UPDATE and inserts the rows, so `seq` is assigned in the
//! statement that stores them (the place where an ownership check will go). Reads, rewinds,
//! forks and the rare small updates use the pool; the calls whose SQL SQLite shares are in
//! [`super::shared`].
//!
//! The writer is in [`writer`]; connecting, with the password kept out of errors, and the
//! doctor's look at a store are in [`connect`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};
use tokio::sync::mpsc;

use super::batch::{self, WriteOp};
use super::edits::{self, EditTx};
use super::leases::Leases;
use super::listing::{self, Engine, SearchLimits};
use super::{
    NewMessage, NewSession, Page, PageSize, Result, Rewound, RewoundStatus, RowId, RunningTurn,
    SessionPage, SessionQuery, SessionRecord, Store, StoreError, StoredMessage, text,
};
use super::{backfill, shared, words};
use crate::config::redact_url;
use crate::metrics::Metrics;
use crate::protocol::Principal;

mod connect;
mod writer;

use connect::scrub;
pub use connect::{PgSummary, inspect};

/// Settings of the PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgSettings {
    /// Most append requests stored in one transaction.
    pub max_batch: usize,
    /// Depth of the queue in front of the writer.
    pub queue_depth: usize,
    /// Most connections open to the server (the writer's included).
    pub max_connections: u32,
    /// How long to wait for a connection, at start-up and later.
    pub connect_timeout: Duration,
    /// This node's name, as its leases hold it.
    pub node_id: String,
    /// Where this node listens (shown by `agentmux cluster status`).
    pub address: String,
    /// How long a lease lasts unless renewed.
    pub lease: Duration,
    /// Longest a search may run, waiting for its turn included.
    pub search_timeout: Duration,
    /// Searches running at once (each on a connection of the pool).
    pub max_searches: usize,
}

impl Default for PgSettings {
    fn default() -> Self {
        PgSettings {
            max_batch: 512,
            queue_depth: 4096,
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
            node_id: "localhost:7878".into(),
            address: "127.0.0.1:7878".into(),
            lease: Duration::from_secs(10),
            search_timeout: Duration::from_secs(2),
            max_searches: 2,
        }
    }
}

/// `text` with every occurrence of the password of `url` (raw or percent-encoded) replaced by
/// `***`: errors of the driver may quote what they were given.
fn pg_json(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\\u0000"))
    } else {
        Cow::Borrowed(s)
    }
}

/// The PostgreSQL implementation of [`Store`].
pub struct PgStore {
    pool: PgPool,
    writer: mpsc::Sender<WriteOp>,
    leases: Arc<Leases>,
    searches: SearchLimits,
}

impl PgStore {
    /// Connects to `url` (`postgres://…`), runs the migrations and starts the writer.
    ///
    /// # Errors
    /// When the URL is not a PostgreSQL URL, the server can't be reached or refuses the login,
    /// or a migration fails. The password of `url` never appears in the error.
    pub async fn open(url: &str, settings: PgSettings, metrics: Metrics) -> anyhow::Result<Self> {
        let shown = redact_url(url);
        let fail = |what: &str, err: &dyn std::fmt::Display| {
            anyhow::anyhow!("{what} {shown}: {}", scrub(url, &err.to_string()))
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            anyhow::bail!(
                "store URL {shown} is not a PostgreSQL URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"
            );
        }
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| fail("bad store URL", &e))?
            .application_name("agentmux");
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections.max(2))
            .acquire_timeout(settings.connect_timeout)
            .connect_with(options)
            .await
            .map_err(|e| fail("cannot connect to the store at", &e))?;
        let schema = &super::schema::POSTGRES;
        schema.run(&pool).await.map_err(|e| {
            fail(
                "cannot migrate the store at",
                &super::schema::explain(&e, schema),
            )
        })?;
        backfill::postgres(&pool)
            .await
            .map_err(|e| fail("cannot build the search index of the store at", &e))?;
        let leases = Arc::new(Leases::new(
            settings.node_id,
            settings.address,
            settings.lease,
            metrics.clone(),
        ));
        leases
            .register(&pool)
            .await
            .map_err(|e| fail("cannot record this node in the store at", &e))?;
        let (tx, rx) = mpsc::channel(settings.queue_depth);
        writer::start(
            pool.clone(),
            settings.max_batch,
            metrics,
            leases.clone(),
            rx,
        );
        tokio::spawn({
            let (leases, pool) = (leases.clone(), pool.clone());
            async move { leases.keep_renewed(pool).await }
        });
        Ok(PgStore {
            pool,
            writer: tx,
            leases,
            searches: SearchLimits::new(settings.search_timeout, settings.max_searches),
        })
    }

    /// The pool, for queries of other modules' own.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The queue in front of the writer, for the rows other modules store through it.
    pub(in crate::store) fn writer(&self) -> &mpsc::Sender<WriteOp> {
        &self.writer
    }

    /// A transaction for a search's reads, each stopped after `limit`, and not compiled first:
    /// a plan this costly to run would be compiled (JIT), which alone takes longer than most
    /// searches.
    async fn read_within(
        &self,
        limit: Duration,
    ) -> sqlx::Result<sqlx::Transaction<'static, sqlx::Postgres>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "select set_config('statement_timeout', $1, true), set_config('jit', 'off', true)",
        )
        .bind(limit.as_millis().max(1).to_string())
        .execute(&mut *tx)
        .await?;
        Ok(tx)
    }
}

/// Adds each conversation's counts to its row and takes its seqs (`base` is the last seq
/// before this batch), then inserts the rows at `base + ord`, all in one statement. A
/// conversation that is gone, or that another node holds (this node's lease of `epoch` was
/// taken over, or this node holds none and another node does), gets no row in `u`, so its
/// rows are not stored while the others of the batch go on. The words of the search index go
/// with the rows and titles they index.
/// A rewind's or a fork's transaction on PostgreSQL, holding the conversation's row lock.
struct Tx<'c>(&'c mut PgConnection);

shared::edit_tx_impl!(Tx<'_>, {
    /// The same rule as SQLite's: the first as many prompts as there are results since the
    /// last `rewound` or `imported` status are the ended turns'; later ones are later turns'.
    async fn later_prompts(&mut self, row: RowId, at: i64) -> Result<Vec<i64>> {
        Ok(sqlx::query_scalar(
            "with since (seq) as (
                select coalesce(max(seq), 0) from messages
                where session_pk = $1 and seq < $2 and message_type = 'status'
                  and agentmux_try_jsonb(payload) ->> 'status' in ('rewound', 'imported')
             ),
             ended (n) as (
                select count(*) from messages
                where session_pk = $1 and message_type = 'result'
                  and seq > (select seq from since) and seq <= $2
             )
             select seq from messages
             where session_pk = $1 and prompt and seq > (select seq from since) and seq <= $2
             order by seq offset (select n from ended)",
        )
        .bind(row)
        .bind(at)
        .fetch_all(&mut *self.0)
        .await?)
    }

    async fn delete_seqs(&mut self, row: RowId, seqs: &[i64]) -> Result<u64> {
        Ok(
            sqlx::query("delete from messages where session_pk = $1 and seq = any($2)")
                .bind(row)
                .bind(seqs)
                .execute(&mut *self.0)
                .await?
                .rows_affected(),
        )
    }

    /// A status starts or ends no turn and adds no totals; seq and row in one statement.
    async fn append_status(&mut self, row: RowId, status: &NewMessage) -> Result<i64> {
        sqlx::query_scalar(
            "with u as (
                update session_info set last_seq = last_seq + 1, message_count = message_count + 1,
                    last_active_at = $2 where id = $1 returning last_seq
             )
             insert into messages (session_pk, seq, message_type, sdk_uuid, payload, created_at)
             select $1, last_seq, $3, $4, $5, $2 from u
             returning seq",
        )
        .bind(row)
        .bind(&status.created_at)
        .bind(status.message_type)
        .bind(status.sdk_uuid.as_deref().map(text))
        .bind(pg_json(&status.payload))
        .fetch_optional(&mut *self.0)
        .await?
        .ok_or(StoreError::UnknownSession)
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
             select $1, seq, message_type, sdk_uuid, prompt, turn_anchor, payload, created_at,
                turn_cost_usd, words
             from messages where session_pk = $2 and seq <= $3 and seq <> all($4)",
        )
        .bind(fork)
        .bind(source)
        .bind(at)
        .bind(except)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }
});

/// How long a search may read the words of the principal's newest conversations before it looks
/// them up in the indexes instead.
const SCAN_BUDGET: Duration = Duration::from_millis(15);

/// Takes the write lock of conversation `row` in `tx` (appends to it wait until the commit).
async fn lock(conn: &mut PgConnection, row: RowId) -> Result<()> {
    sqlx::query("select 1 from session_info where id = $1 for update")
        .bind(row)
        .fetch_optional(&mut *conn)
        .await?
        .map(|_: sqlx::postgres::PgRow| ())
        .ok_or(StoreError::UnknownSession)
}

shared::store_impl!(PgStore, {
    /// The page is cut in SQL, by the running total of the payloads' sizes (which PostgreSQL
    /// knows without reading them), so rows beyond it are never sent; `more` is whether a row
    /// follows each one.
    async fn messages_after(&self, row: RowId, after_seq: i64, size: PageSize) -> Result<Page> {
        #[derive(sqlx::FromRow)]
        struct PageRow {
            #[sqlx(flatten)]
            message: StoredMessage,
            more: bool,
        }
        let rows: Vec<PageRow> = sqlx::query_as(
            "select seq, message_type, sdk_uuid, payload, created_at, turn_cost_usd, more from (
                select seq, message_type, sdk_uuid, payload, created_at, turn_cost_usd,
                    row_number() over w as n,
                    sum(octet_length(payload)) over w as upto,
                    lead(true, 1, false) over w as more
                from messages where session_pk = $1 and seq > $2
                window w as (order by seq rows between unbounded preceding and current row)
                order by seq limit $3
             ) page where n = 1 or upto <= $4 order by seq",
        )
        .bind(row)
        .bind(after_seq)
        .bind(i64::from(size.rows))
        .bind(i64::try_from(size.bytes).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        let more = rows.last().is_some_and(|r| r.more);
        Ok(Page {
            rows: rows.into_iter().map(|r| r.message).collect(),
            more,
        })
    }

    /// A search reads along the listing in a transaction of its own whose `statement_timeout`
    /// is its budget; the count and, when the budget ran out, the lookup through the indexes in
    /// another whose limit is the search's deadline. Nothing else runs under the budget: on a
    /// busy machine even a `COMMIT` can wait longer than that for a core.
    async fn list_sessions(
        &self,
        principal: &Principal,
        query: &SessionQuery,
    ) -> Result<SessionPage> {
        let (scan, lookup, count) =
            listing::searched!(Engine::Postgres, self.pool, principal, query);
        self.searches
            .run(|deadline| async move {
                let left = || deadline.saturating_duration_since(Instant::now());
                let budgeted = SCAN_BUDGET < left();
                let mut tx = self.read_within(SCAN_BUDGET.min(left())).await?;
                let scanned = match listing::fetch_rows!(tx, &scan) {
                    Ok(rows) => Some(rows),
                    Err(err) if budgeted && listing::stopped(&err) => None,
                    Err(err) => return Err(err),
                };
                // Only read: whether its end succeeds changes nothing.
                let _ = tx.rollback().await;
                let (rows, total) = match (scanned, count.as_ref()) {
                    (Some(rows), None) => (rows, None),
                    (scanned, count) => {
                        let mut tx = self.read_within(left()).await?;
                        let total = listing::fetch_count!(tx, count);
                        let rows = match scanned {
                            Some(rows) => rows,
                            None => listing::fetch_rows!(tx, &lookup)?,
                        };
                        let _ = tx.rollback().await;
                        (rows, total)
                    }
                };
                Ok(listing::page(query, rows, total))
            })
            .await
    }

    async fn rename_session(&self, row: RowId, title: &str) -> Result<()> {
        let done = sqlx::query(
            "update session_info set title = $1,
                title_words = array_to_tsvector(string_to_array($2, ' '))
             where id = $3",
        )
        .bind(text(title))
        .bind(words::title_words(title))
        .bind(row)
        .execute(&self.pool)
        .await?;
        shared::found(done.rows_affected())
    }

    async fn rewind(&self, row: RowId, to_seq: i64, status: RewoundStatus) -> Result<Rewound> {
        let mut tx = self.pool.begin().await?;
        lock(&mut tx, row).await?;
        let rewound = edits::rewind(&mut Tx(&mut tx), row, to_seq, status).await?;
        tx.commit().await?;
        Ok(rewound)
    }

    async fn fork(
        &self,
        source: RowId,
        at_seq: Option<i64>,
        new: NewSession,
    ) -> Result<SessionRecord> {
        let mut tx = self.pool.begin().await?;
        lock(&mut tx, source).await?;
        edits::fork(&mut Tx(&mut tx), source, at_seq, &new).await?;
        tx.commit().await?;
        self.find_session(&new.principal, &new.agent_id)
            .await?
            .ok_or(StoreError::UnknownSession)
    }

    /// Closes, for each conversation still marked running, the turn its owner left running
    /// when it stopped, unless another node owns it now (taking its lease closes the turn).
    async fn close_unfinished_turns(&self) -> Result<u64> {
        let running: Vec<RowId> = sqlx::query_scalar(
            "select id from session_info where running_seq is not null and not pending",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut closed = 0;
        for row in running {
            if self.take_lease(row).await.is_ok() {
                self.release_lease(row).await;
                closed += 1;
            }
        }
        Ok(closed)
    }

    async fn take_lease(&self, row: RowId) -> Result<()> {
        let taken = self.leases.take(&self.pool, row).await?;
        if taken.orphaned_turn {
            let reason = if taken.from_another_node {
                "node_lost"
            } else {
                "server_restart"
            };
            // The turn the lost run left running ends here; no turn runs after it.
            let ends = RunningTurn::Ends { next: None };
            let result = NewMessage::error_result(&taken.session_id, reason, ends);
            self.append(row, vec![result]).await?;
        }
        Ok(())
    }

    async fn lease_owner(&self, row: RowId) -> Result<Option<String>> {
        self.leases.owner(&self.pool, row).await
    }

    async fn lease_holders(&self, rows: &[RowId]) -> Result<HashMap<RowId, String>> {
        self.leases.holders(&self.pool, rows).await
    }

    fn is_shared(&self) -> bool {
        true
    }

    /// Only under this node's lease: a node that lost the conversation must not overwrite
    /// what its new owner keeps.
    async fn save_transcript(
        &self,
        row: RowId,
        agent_session: &str,
        content: Vec<u8>,
    ) -> Result<()> {
        let Some(epoch) = self.leases.epoch(row) else {
            return Ok(());
        };
        sqlx::query(
            "insert into transcripts (agent_session, session_pk, content, updated_at)
             select $1, id, $3, now() from session_info
             where id = $2 and lease_node = $4 and lease_epoch = $5
             on conflict (agent_session) do update set content = excluded.content,
                updated_at = excluded.updated_at
             where transcripts.session_pk = excluded.session_pk",
        )
        .bind(agent_session)
        .bind(row)
        .bind(content)
        .bind(&self.leases.node)
        .bind(epoch)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn load_transcript(&self, agent_session: &str) -> Result<Option<Vec<u8>>> {
        Ok(
            sqlx::query_scalar("select content from transcripts where agent_session = $1")
                .bind(agent_session)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn release_lease(&self, row: RowId) {
        self.leases.release(&self.pool, row).await;
    }

    fn lost_leases(&self) -> Option<mpsc::UnboundedReceiver<RowId>> {
        self.leases.lost()
    }

    async fn live_nodes(&self) -> Result<Option<HashSet<String>>> {
        self.leases.live_nodes(&self.pool).await.map(Some)
    }

    async fn close(&self) {
        batch::close(&self.writer).await;
        self.leases.release_all(&self.pool).await;
        self.pool.close().await;
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_scrubbed() {
        let url = "postgres://app:s3cr%2Ft@db.example:5432/agentmux?sslmode=require";
        assert_eq!(
            scrub(url, "bad password s3cr%2Ft or s3cr/t"),
            "bad password *** or ***"
        );
        assert_eq!(scrub("postgres://app@db/x", "text"), "text");
    }

    #[test]
    fn nul_characters_are_made_storable() {
        assert_eq!(text("a\0b"), "a\u{FFFD}b");
        assert_eq!(pg_json("{\"a\":\"x\0\"}"), "{\"a\":\"x\\u0000\"}");
        assert!(matches!(text("plain"), Cow::Borrowed(_)));
    }
}
