//! The SQLite writer: one thread doing group commits, each batch ([`super::batch`]) in one
//! transaction with statements prepared once, after which it has the checkpointer
//! ([`super::checkpointer`]) do what [`super::pacing`] decides.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::mpsc;

use super::batch::{self, Batch, WriteOp};
use super::checkpointer::{Checkpointer, spawn_checkpointer};
use super::connection::open;
use super::pacing::{Pacer, Step};
use super::words::title_words;
use super::{Result, RowId};
use crate::metrics::Metrics;

/// How the writer's connections are opened.
pub(super) struct WriterSettings {
    pub path: PathBuf,
    pub synchronous_full: bool,
    pub max_batch: usize,
    pub max_page_count: u64,
    /// Pages written to the WAL after which the writer makes it start over.
    pub wal_restart_pages: u64,
}

/// Opens the writer's connection and starts the writer and checkpointer threads.
///
/// # Errors
/// When the database can't be opened or configured.
pub(super) fn start(
    settings: WriterSettings,
    rx: mpsc::Receiver<WriteOp>,
    metrics: Metrics,
) -> anyhow::Result<()> {
    let conn = open(
        &settings.path,
        settings.synchronous_full,
        settings.max_page_count,
    )?;
    // The rows' conversation is checked by the seq-assigning UPDATE of the same transaction,
    // which holds the write lock until the commit: nothing can delete it in between, so the
    // foreign key check (and the statement journal it costs each INSERT) is redundant here.
    // Every other connection keeps foreign keys on (deletes cascade there).
    conn.execute_batch("pragma foreign_keys = off")?;
    // The WAL file is cut back to this size when it starts over after a burst made it longer.
    conn.execute_batch(&format!(
        "pragma journal_size_limit = {}",
        settings.wal_restart_pages.saturating_mul(4096)
    ))?;
    let checkpointer = spawn_checkpointer(&settings.path)?;
    std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || {
            Writer {
                conn,
                max_batch: settings.max_batch.max(1),
                metrics,
                checkpointer,
                pacer: Pacer::new(settings.wal_restart_pages),
            }
            .run(rx)
        })?;
    Ok(())
}

struct Writer {
    conn: Connection,
    max_batch: usize,
    metrics: Metrics,
    checkpointer: Checkpointer,
    pacer: Pacer,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<WriteOp>) {
        let mut batch = Batch::default();
        let mut closing = None;
        while closing.is_none() {
            let Some(op) = rx.blocking_recv() else { break };
            closing = batch::fill(op, &mut rx, &mut batch, self.max_batch);
            self.metrics.store_queue(rx.len());
            if !batch.is_empty() {
                let started = Instant::now();
                let rows = batch.rows();
                self.commit(&mut batch);
                self.metrics.record_commit(started.elapsed(), rows);
                self.pace_checkpoints();
            }
        }
        self.checkpointer.stop();
        let _ = self.conn.execute_batch("pragma wal_checkpoint(truncate)");
        drop(self.conn);
        if let Some(done) = closing {
            let _ = done.send(());
        }
    }

    /// After a commit: wakes the checkpointer or has it restart the WAL when it is time.
    fn pace_checkpoints(&mut self) {
        match self
            .pacer
            .after_commit(self.pages_written(), self.checkpointer.passes())
        {
            Step::Nothing => {}
            Step::Pass => self.checkpointer.wake(),
            Step::Restart => self.checkpointer.restart(),
        }
    }

    /// Pages this connection has written to the WAL since the last call.
    fn pages_written(&self) -> u64 {
        let (mut current, mut highest) = (0, 0);
        // SAFETY: the handle is this open connection's, used on its own thread; the call only
        // reads (and resets) a counter of it into the two integers.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_db_status(
                self.conn.handle(),
                rusqlite::ffi::SQLITE_DBSTATUS_CACHE_WRITE,
                &mut current,
                &mut highest,
                1,
            )
        };
        if rc == rusqlite::ffi::SQLITE_OK {
            u64::try_from(current).unwrap_or(0)
        } else {
            0
        }
    }

    /// Stores every request of `batch` in one transaction, then answers each.
    fn commit(&mut self, batch: &mut Batch) {
        let outcome = write_batch(&self.conn, batch).map_err(|err| {
            let _ = self.conn.execute_batch("rollback");
            err.to_string()
        });
        batch::answer(batch, outcome);
    }
}

/// Assigns the seqs of one conversation and adds a batch's counts to its row (no row changes
/// when the conversation is gone); a title it gives the conversation comes with its words. Its
/// `last_seq` and whether it has a title are read before it by [`BEFORE_UPDATE`]: a `returning`
/// clause would cost each update a temporary table and a statement journal.
const UPDATE_SESSION: &str = "update session_info set
        last_seq = last_seq + ?2,
        message_count = message_count + ?2,
        prompt_count = prompt_count + ?3,
        result_count = result_count + ?4,
        last_active_at = ?5, title = coalesce(title, ?6),
        title_words = case when title is null then ?14 else title_words end,
        total_cost_usd = total_cost_usd + ?7,
        input_tokens = input_tokens + ?8,
        output_tokens = output_tokens + ?9,
        duration_ms = duration_ms + ?10,
        running_seq = case ?11
            when 1 then last_seq + ?12
            when 2 then ?12
            else running_seq end,
        schedule_id = coalesce(schedule_id, ?13)
     where id = ?1";

/// A conversation's highest seq, and whether it has no title yet.
const BEFORE_UPDATE: &str = "select last_seq, title is null from session_info where id = ?1";

/// Stores a message with its words.
const INSERT_MESSAGE: &str =
    "insert into messages (session_pk, seq, message_type, sdk_uuid, prompt,
        turn_anchor, payload, created_at, turn_cost_usd, words)
     values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// Indexes the words of the message just stored (row id: its `id`). Not a trigger's work: a
/// trigger's insert into an FTS5 table costs several times as much.
pub(super) const INDEX_MESSAGE: &str =
    "insert into message_words_index (rowid, words) values (?1, ?2)";

/// Indexes the words of a conversation's new title (row id: the conversation's).
pub(super) const INDEX_TITLE: &str =
    "insert into title_words_index (rowid, title_words) values (?1, ?2)";

/// Stores an entry of the audit log.
const INSERT_AUDIT: &str = "insert into audit_log
        (at, principal, action, owner, agent_id, detail, outcome)
     values (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Stores what a turn cost.
const INSERT_USAGE: &str = "insert into turn_usage (principal, session_id, agent_id, agent,
        model, at, cost_usd, input_tokens, output_tokens, cache_read_tokens,
        cache_creation_tokens)
     values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// Adds what a turn cost to its conversation's own sum (no row changes when it is gone).
const ADD_SPENT: &str = "update session_info set spent_usd = spent_usd + ?2 where session_id = ?1";

/// Stores every request of `batch` in one transaction: one UPDATE per conversation assigns its
/// seqs, one INSERT per row stores it and one more indexes its words, then the audit entries
/// and turns' costs (each added to its conversation's own sum), each statement prepared once
/// per connection. A request whose
/// conversation vanished fails alone; a database error fails them all (the caller rolls
/// back).
fn write_batch(conn: &Connection, whole: &Batch) -> rusqlite::Result<Vec<Result<i64>>> {
    let batch = &whole.appends;
    conn.execute_batch("begin immediate")?;
    let deltas = batch::deltas(batch);
    // Next seq to hand out, per conversation that still exists.
    let mut next: HashMap<RowId, i64> = HashMap::with_capacity(deltas.len());
    {
        let mut before = conn.prepare_cached(BEFORE_UPDATE)?;
        let mut update = conn.prepare_cached(UPDATE_SESSION)?;
        for d in &deltas {
            let Some((last, untitled)) = before
                .query_row([d.row.0], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, bool>(1)?))
                })
                .optional()?
            else {
                continue;
            };
            let words = d.title.filter(|_| untitled).and_then(title_words);
            update.execute(params![
                d.row.0,
                d.rows,
                d.prompts,
                d.results,
                d.last_active,
                d.title,
                d.totals.cost_usd,
                d.totals.input_tokens,
                d.totals.output_tokens,
                d.totals.duration_ms,
                d.running,
                d.running_at,
                d.schedule_id,
                words,
            ])?;
            next.insert(d.row, last + 1);
            if let Some(words) = words {
                conn.prepare_cached(INDEX_TITLE)?
                    .execute(params![d.row.0, words])?;
            }
        }
    }
    let mut insert = conn.prepare_cached(INSERT_MESSAGE)?;
    let mut index = conn.prepare_cached(INDEX_MESSAGE)?;
    let outcomes = batch::assign(batch, next, |row, seq, m, words| {
        insert.execute(params![
            row.0,
            seq,
            m.message_type,
            m.sdk_uuid.as_deref(),
            m.prompt,
            m.turn_anchor.as_deref(),
            m.payload.as_str(),
            m.created_at.as_str(),
            m.totals.map(|t| t.cost_usd),
            words,
        ])?;
        match words {
            Some(words) => index
                .execute(params![conn.last_insert_rowid(), words])
                .map(drop),
            None => Ok(()),
        }
    })?;
    drop((insert, index));
    let (audit, usage) = whole.audit_and_usage();
    for a in audit {
        conn.prepare_cached(INSERT_AUDIT)?.execute(params![
            a.at,
            a.principal,
            a.action,
            a.owner,
            a.agent_id,
            a.detail,
            a.outcome
        ])?;
    }
    for u in usage {
        conn.prepare_cached(INSERT_USAGE)?.execute(params![
            u.principal,
            u.session_id,
            u.agent_id,
            u.agent,
            u.model,
            u.at,
            u.cost_usd,
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_creation_tokens
        ])?;
        conn.prepare_cached(ADD_SPENT)?
            .execute(params![u.session_id, u.cost_usd])?;
    }
    conn.execute_batch("commit")?;
    Ok(outcomes)
}
