//! The PostgreSQL store: the store several nodes can share, behind the same [`Store`] trait.
//!
//! Appends go through one writer task that stores whatever requests are queued in one
//! transaction ([`super::batch`]) with one statement: it adds each conversation's counts to its
//! row, takes its seqs from the same UPDATE and inserts the rows, so `seq` is assigned in the
//! statement that stores them (the place where an ownership check will go). Reads, rewinds,
//! forks and the rare small updates use the pool; the calls whose SQL SQLite shares are in
//! [`super::shared`].
//!
//! One job at about 820 lines: the PostgreSQL side of every `Store` call, its writer and its
//! leases' SQL; splitting it would scatter one engine's statements.

use std::borrow::Cow;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};
use tokio::sync::mpsc;

use super::batch::{self, Append, WriteOp};
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
fn scrub(url: &str, text: &str) -> String {
    let Some(password) = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?', '#']).next())
        .and_then(|authority| authority.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty())
    else {
        return text.to_owned();
    };
    let mut out = text.replace(password, "***");
    if let Ok(decoded) = percent_decode(password)
        && !decoded.is_empty()
    {
        out = out.replace(&decoded, "***");
    }
    out
}

/// Decodes `%XX` escapes.
fn percent_decode(s: &str) -> std::result::Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or(())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// A JSON text PostgreSQL accepts, with the same meaning: a NUL can only be inside a string
/// there, where `\u0000` says the same.
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

/// What a PostgreSQL store holds, as `agentmux doctor` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSummary {
    /// The server's version (`server_version`).
    pub server: String,
    /// The schema version of agentmux's tables; None before the first node started on it.
    pub schema: Option<i64>,
    /// Conversations (imports left unfinished not counted).
    pub conversations: u64,
}

/// Connects to the store at `url` and reads what it holds, changing nothing.
///
/// # Errors
/// When the server can't be reached or refuses the login, or its schema is newer than this
/// build's; the password of `url` never appears.
pub async fn inspect(url: &str) -> anyhow::Result<PgSummary> {
    use sqlx::Connection as _;
    let shown = redact_url(url);
    let fail = |err: &dyn std::fmt::Display| {
        anyhow::anyhow!("the store at {shown}: {}", scrub(url, &err.to_string()))
    };
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| fail(&e))?
        .application_name("agentmux doctor");
    let mut conn = tokio::time::timeout(
        Duration::from_secs(10),
        PgConnection::connect_with(&options),
    )
    .await
    .map_err(|_| fail(&"no answer within 10 s"))?
    .map_err(|e| fail(&e))?;
    let server: String = sqlx::query_scalar("show server_version")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| fail(&e))?;
    let made: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| fail(&e))?;
    let mut summary = PgSummary {
        server,
        schema: None,
        conversations: 0,
    };
    if made {
        let schema: i64 = sqlx::query_scalar(
            "select coalesce(max(version), 0) from _sqlx_migrations where success",
        )
        .fetch_one(&mut conn)
        .await
        .map_err(|e| fail(&e))?;
        if schema > super::schema::newest(&super::schema::POSTGRES) {
            return Err(fail(&super::schema::newer(
                schema,
                &super::schema::POSTGRES,
            )));
        }
        let conversations: i64 =
            sqlx::query_scalar("select count(*) from session_info where not pending")
                .fetch_one(&mut conn)
                .await
                .map_err(|e| fail(&e))?;
        summary.schema = Some(schema);
        summary.conversations = conversations as u64;
    }
    let _ = conn.close().await;
    Ok(summary)
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
        tokio::spawn(
            Writer {
                pool: pool.clone(),
                max_batch: settings.max_batch.max(1),
                metrics,
                leases: leases.clone(),
                rows_since_analyze: 0,
                analyzing: None,
            }
            .run(rx),
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
const APPEND: &str = "with d (id, n, prompts, results, last_active, title, cost, input_tokens,
        output_tokens, duration_ms, running, running_at, epoch, schedule_id, title_words) as (
        select * from unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[],
            $6::text[], $7::float8[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],
            $12::bigint[], $22::bigint[], $24::text[], $25::text[])
    ),
    u as (
        update session_info s set
            last_seq = s.last_seq + d.n,
            message_count = s.message_count + d.n,
            prompt_count = s.prompt_count + d.prompts,
            result_count = s.result_count + d.results,
            last_active_at = d.last_active,
            title = coalesce(s.title, d.title),
            title_words = case when s.title is null
                then array_to_tsvector(string_to_array(d.title_words, ' '))
                else s.title_words end,
            total_cost_usd = s.total_cost_usd + d.cost,
            input_tokens = s.input_tokens + d.input_tokens,
            output_tokens = s.output_tokens + d.output_tokens,
            duration_ms = s.duration_ms + d.duration_ms,
            running_seq = case d.running
                when 1 then s.last_seq + d.running_at
                when 2 then d.running_at
                else s.running_seq end,
            schedule_id = coalesce(s.schedule_id, d.schedule_id)
        from d where s.id = d.id
            and (case when d.epoch is null then s.lease_node is null
                 else s.lease_node = $23 and s.lease_epoch = d.epoch end)
        returning s.id, s.last_seq - d.n as base
    ),
    ins as (
        insert into messages (session_pk, seq, message_type, sdk_uuid, prompt, turn_anchor,
            payload, created_at, turn_cost_usd, words)
        select m.id, u.base + m.ord, m.message_type, m.sdk_uuid, m.prompt, m.turn_anchor,
            m.payload, m.created_at, m.turn_cost_usd,
            array_to_tsvector(string_to_array(m.words, ' '))
        from unnest($13::bigint[], $14::bigint[], $15::text[], $16::text[], $17::bool[],
            $18::text[], $19::text[], $20::text[], $21::float8[], $26::text[])
            as m (id, ord, message_type, sdk_uuid, prompt, turn_anchor, payload, created_at,
                turn_cost_usd, words)
        join u on u.id = m.id
    )
    select id, base from u";

/// How many times a batch whose transaction PostgreSQL broke off is tried.
const COMMIT_ATTEMPTS: u32 = 5;

/// Whether `err` is PostgreSQL breaking a transaction off to resolve a conflict (deadlock,
/// serialization failure): nothing of it was stored, and trying again may succeed.
fn is_transient(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(e) if matches!(e.code().as_deref(), Some("40P01" | "40001")))
}

/// The writer: one task storing each batch in one transaction.
struct Writer {
    pool: PgPool,
    max_batch: usize,
    metrics: Metrics,
    /// The node's leases, which its appends are checked against.
    leases: Arc<Leases>,
    /// Rows stored since the tables' statistics were last refreshed.
    rows_since_analyze: usize,
    /// The refresh running now, if any.
    analyzing: Option<tokio::task::JoinHandle<()>>,
}

/// Rows stored between two refreshes of the tables' statistics (`analyze`), besides the
/// server's own autovacuum: a replay reads a conversation a page at a time along its primary
/// key only while the planner knows how many rows the conversation has; with statistics from
/// before a large import it sorts the rest of the conversation for every page instead.
const ANALYZE_EVERY_ROWS: usize = 50_000;

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<WriteOp>) {
        let mut batch: Vec<Append> = Vec::with_capacity(self.max_batch);
        let mut closing = None;
        while closing.is_none() {
            let Some(op) = rx.recv().await else { break };
            closing = batch::fill(op, &mut rx, &mut batch, self.max_batch);
            self.metrics.store_queue(rx.len());
            if !batch.is_empty() {
                let started = Instant::now();
                let rows: usize = batch.iter().map(|a| a.messages.len()).sum();
                let outcome = self.write(&batch).await.map_err(|e| e.to_string());
                batch::answer(&mut batch, outcome);
                self.metrics.record_commit(started.elapsed(), rows);
                self.rows_since_analyze += rows;
                if self.rows_since_analyze >= ANALYZE_EVERY_ROWS
                    && self.analyzing.as_ref().is_none_or(|a| a.is_finished())
                {
                    self.rows_since_analyze = 0;
                    let pool = self.pool.clone();
                    self.analyzing = Some(tokio::spawn(async move {
                        if let Err(err) = sqlx::query("analyze session_info, messages")
                            .execute(&pool)
                            .await
                        {
                            tracing::warn!(error = %err, "refreshing the store's statistics failed");
                        }
                    }));
                }
            }
        }
        if let Some(analyzing) = self.analyzing.take() {
            let _ = analyzing.await;
        }
        if let Some(done) = closing {
            let _ = done.send(());
        }
    }

    /// Stores `batch` in one transaction; each request's outcome in order.
    async fn write(&self, batch: &[Append]) -> sqlx::Result<Vec<Result<i64>>> {
        let deltas = batch::deltas(batch);
        let rows: usize = batch.iter().map(|a| a.messages.len()).sum();
        // Each row's position among its conversation's rows of this batch (from 1).
        let ones = deltas.iter().map(|d| (d.row, 1)).collect();
        let mut m = Rows::with_capacity(rows);
        let _ = batch::assign(batch, ones, |row, ord, msg, words| {
            m.push(row, ord, msg, words);
            Ok::<(), ()>(())
        });
        let epochs: Vec<Option<i64>> = deltas.iter().map(|d| self.leases.epoch(d.row)).collect();
        // A transaction PostgreSQL broke off (a deadlock or a serialization failure with
        // another statement on these rows) stored nothing: it is tried again.
        let mut attempt = 0;
        let bases: Vec<(i64, i64)> = loop {
            attempt += 1;
            let mut tx = self.pool.begin().await?;
            let stored: sqlx::Result<Vec<(i64, i64)>> = sqlx::query_as(APPEND)
                .bind(deltas.iter().map(|d| d.row.0).collect::<Vec<_>>())
                .bind(deltas.iter().map(|d| d.rows).collect::<Vec<_>>())
                .bind(deltas.iter().map(|d| d.prompts).collect::<Vec<_>>())
                .bind(deltas.iter().map(|d| d.results).collect::<Vec<_>>())
                .bind(deltas.iter().map(|d| d.last_active).collect::<Vec<_>>())
                .bind(deltas.iter().map(|d| d.title.map(text)).collect::<Vec<_>>())
                .bind(deltas.iter().map(|d| d.totals.cost_usd).collect::<Vec<_>>())
                .bind(
                    deltas
                        .iter()
                        .map(|d| d.totals.input_tokens)
                        .collect::<Vec<_>>(),
                )
                .bind(
                    deltas
                        .iter()
                        .map(|d| d.totals.output_tokens)
                        .collect::<Vec<_>>(),
                )
                .bind(
                    deltas
                        .iter()
                        .map(|d| d.totals.duration_ms)
                        .collect::<Vec<_>>(),
                )
                .bind(deltas.iter().map(|d| d.running).collect::<Vec<_>>())
                .bind(deltas.iter().map(|d| d.running_at).collect::<Vec<_>>())
                .bind(&m.id)
                .bind(&m.ord)
                .bind(&m.message_type)
                .bind(&m.sdk_uuid)
                .bind(&m.prompt)
                .bind(&m.turn_anchor)
                .bind(&m.payload)
                .bind(&m.created_at)
                .bind(&m.turn_cost_usd)
                .bind(&epochs)
                .bind(&self.leases.node)
                .bind(
                    deltas
                        .iter()
                        .map(|d| d.schedule_id.map(text))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    deltas
                        .iter()
                        .map(|d| d.title.and_then(words::title_words))
                        .collect::<Vec<_>>(),
                )
                .bind(&m.words)
                .fetch_all(&mut *tx)
                .await;
            match stored {
                Ok(bases) => {
                    tx.commit().await?;
                    break bases;
                }
                Err(err) if attempt < COMMIT_ATTEMPTS && is_transient(&err) => {
                    tracing::warn!(error = %err, attempt, "store commit broken off; trying again");
                }
                Err(err) => return Err(err),
            }
        };
        let next: HashMap<RowId, i64> = bases
            .into_iter()
            .map(|(id, base)| (RowId(id), base + 1))
            .collect();
        // Of the conversations held under a lease and refused, the ones that still exist were
        // taken over by another node.
        // The conversations refused that still exist are held by another node: taken over
        // from this one (which may have noticed already), or never this one's.
        let refused: Vec<(RowId, Option<i64>)> = deltas
            .iter()
            .zip(&epochs)
            .map(|(d, e)| (d.row, *e))
            .filter(|(row, _)| !next.contains_key(row))
            .collect();
        let mut fenced = Vec::new();
        if !refused.is_empty() {
            let ids: Vec<i64> = refused.iter().map(|(row, _)| row.0).collect();
            let existing: Vec<RowId> =
                sqlx::query_scalar("select id from session_info where id = any($1)")
                    .bind(ids)
                    .fetch_all(&self.pool)
                    .await?;
            for (row, epoch) in refused {
                if existing.contains(&row) {
                    if let Some(epoch) = epoch {
                        self.leases.lose(row, epoch);
                    }
                    self.metrics.fence_rejection();
                    fenced.push(row);
                }
            }
        }
        let mut outcomes =
            batch::assign(batch, next, |_, _, _, _| Ok::<(), ()>(())).expect("nothing to fail");
        for (outcome, append) in outcomes.iter_mut().zip(batch) {
            if fenced.contains(&append.row) {
                *outcome = Err(StoreError::Fenced);
            }
        }
        Ok(outcomes)
    }
}

/// The rows of a batch as the columns [`APPEND`] unnests.
struct Rows<'a> {
    id: Vec<i64>,
    ord: Vec<i64>,
    message_type: Vec<&'static str>,
    sdk_uuid: Vec<Option<Cow<'a, str>>>,
    prompt: Vec<bool>,
    turn_anchor: Vec<Option<Cow<'a, str>>>,
    payload: Vec<Cow<'a, str>>,
    created_at: Vec<&'a str>,
    turn_cost_usd: Vec<Option<f64>>,
    words: Vec<Option<&'a str>>,
}

impl<'a> Rows<'a> {
    fn with_capacity(n: usize) -> Self {
        Rows {
            id: Vec::with_capacity(n),
            ord: Vec::with_capacity(n),
            message_type: Vec::with_capacity(n),
            sdk_uuid: Vec::with_capacity(n),
            prompt: Vec::with_capacity(n),
            turn_anchor: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            created_at: Vec::with_capacity(n),
            turn_cost_usd: Vec::with_capacity(n),
            words: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, row: RowId, ord: i64, m: &'a NewMessage, words: Option<&'a str>) {
        self.id.push(row.0);
        self.ord.push(ord);
        self.message_type.push(m.message_type);
        self.sdk_uuid.push(m.sdk_uuid.as_deref().map(text));
        self.prompt.push(m.prompt);
        self.turn_anchor.push(m.turn_anchor.as_deref().map(text));
        self.payload.push(pg_json(&m.payload));
        self.created_at.push(&m.created_at);
        self.turn_cost_usd.push(m.totals.map(|t| t.cost_usd));
        self.words.push(words);
    }
}

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
    async fn list_sessions(&self, principal: &str, query: &SessionQuery) -> Result<SessionPage> {
        let words = match listing::search_words(query) {
            Ok(words) => words,
            Err(nothing) => return Ok(nothing),
        };
        let statements = listing::statements(Engine::Postgres, principal, query, words.as_ref());
        let Some(lookup) = &statements.lookup else {
            let mut conn = self.pool.acquire().await?;
            let total = listing::fetch_count!(conn, statements.count.as_ref());
            let rows = listing::fetch_rows!(conn, &statements.scan)?;
            return Ok(listing::page(query, rows, total));
        };
        self.searches
            .run(|deadline| async move {
                let left = || deadline.saturating_duration_since(Instant::now());
                let budgeted = SCAN_BUDGET < left();
                let mut tx = self.read_within(SCAN_BUDGET.min(left())).await?;
                let scanned = match listing::fetch_rows!(tx, &statements.scan) {
                    Ok(rows) => Some(rows),
                    Err(err) if budgeted && listing::stopped(&err) => None,
                    Err(err) => return Err(err),
                };
                // Only read: whether its end succeeds changes nothing.
                let _ = tx.rollback().await;
                let (rows, total) = match (scanned, statements.count.as_ref()) {
                    (Some(rows), None) => (rows, None),
                    (scanned, count) => {
                        let mut tx = self.read_within(left()).await?;
                        let total = listing::fetch_count!(tx, count);
                        let rows = match scanned {
                            Some(rows) => rows,
                            None => listing::fetch_rows!(tx, lookup)?,
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
