//! The PostgreSQL writer: one task storing each batch of queued appends in one transaction with
//! one statement, and the edits (rewind, fork) that run inside a transaction.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use sqlx::PgPool;
use tokio::sync::mpsc;

use super::pg_json;
use crate::metrics::Metrics;
use crate::store::audit::AuditRow;
use crate::store::batch::{self, Batch, WriteOp};
use crate::store::leases::Leases;
use crate::store::usage::TurnUsage;
use crate::store::{NewMessage, Result, RowId, StoreError, text, words};

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

/// Starts the writer of `pool`: it stores the appends `rx` brings, at most `max_batch` a
/// transaction, checked against the node's `leases`.
pub(super) fn start(
    pool: PgPool,
    max_batch: usize,
    metrics: Metrics,
    leases: Arc<Leases>,
    rx: mpsc::Receiver<WriteOp>,
) {
    let writer = Writer {
        pool,
        max_batch: max_batch.max(1),
        metrics,
        leases,
        rows_since_analyze: 0,
        analyzing: None,
    };
    tokio::spawn(writer.run(rx));
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
        let mut batch = Batch::default();
        let mut closing = None;
        while closing.is_none() {
            let Some(op) = rx.recv().await else { break };
            closing = batch::fill(op, &mut rx, &mut batch, self.max_batch);
            self.metrics.store_queue(rx.len());
            if !batch.is_empty() {
                let started = Instant::now();
                let rows = batch.rows();
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
    async fn write(&self, whole: &Batch) -> sqlx::Result<Vec<Result<i64>>> {
        let batch = &whole.appends[..];
        let (audit, usage) = whole.audit_and_usage();
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
            let stored = match stored {
                Ok(bases) => store_records(&mut tx, &audit, &usage).await.map(|()| bases),
                Err(err) => Err(err),
            };
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

/// Stores a batch's audit entries and turns' costs in its transaction, one statement each.
async fn store_records(
    tx: &mut sqlx::PgConnection,
    audit: &[&AuditRow],
    usage: &[&TurnUsage],
) -> sqlx::Result<()> {
    if !audit.is_empty() {
        // NUL, which PostgreSQL's text refuses (and with it the whole batch), goes as in titles.
        let col = |f: fn(&AuditRow) -> Option<&str>| {
            audit.iter().map(|a| f(a).map(text)).collect::<Vec<_>>()
        };
        sqlx::query(
            "insert into audit_log (at, principal, action, owner, agent_id, detail, outcome) \
             select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
             $6::text[], $7::text[])",
        )
        .bind(col(|a| Some(&a.at)))
        .bind(col(|a| Some(&a.principal)))
        .bind(col(|a| Some(&a.action)))
        .bind(col(|a| a.owner.as_deref()))
        .bind(col(|a| a.agent_id.as_deref()))
        .bind(col(|a| Some(&a.detail)))
        .bind(col(|a| Some(&a.outcome)))
        .execute(&mut *tx)
        .await?;
    }
    if !usage.is_empty() {
        let texts =
            |f: fn(&TurnUsage) -> &str| usage.iter().map(|u| text(f(u))).collect::<Vec<_>>();
        let int = |f: fn(&TurnUsage) -> i64| usage.iter().map(|u| f(u)).collect::<Vec<_>>();
        // The ledger's rows, and what they add to each conversation's own sum (a batch may
        // hold two turns of one conversation).
        sqlx::query(
            "with added as (insert into turn_usage (principal, session_id, agent_id, agent, \
             model, at, cost_usd, input_tokens, output_tokens, cache_read_tokens, \
             cache_creation_tokens) \
             select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
             $6::text[], $7::float8[], $8::int8[], $9::int8[], $10::int8[], $11::int8[]) \
             returning session_id, cost_usd) \
             update session_info s set spent_usd = s.spent_usd + a.cost \
             from (select session_id, sum(cost_usd) as cost from added group by session_id) a \
             where s.session_id = a.session_id",
        )
        .bind(texts(|u| &u.principal))
        .bind(texts(|u| &u.session_id))
        .bind(texts(|u| &u.agent_id))
        .bind(texts(|u| &u.agent))
        .bind(texts(|u| &u.model))
        .bind(texts(|u| &u.at))
        .bind(usage.iter().map(|u| u.cost_usd).collect::<Vec<_>>())
        .bind(int(|u| u.input_tokens))
        .bind(int(|u| u.output_tokens))
        .bind(int(|u| u.cache_read_tokens))
        .bind(int(|u| u.cache_creation_tokens))
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
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
