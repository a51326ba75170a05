//! Group commit, whatever the engine: the append requests a writer takes from its queue, and
//! what one batch of them adds to each conversation's row.
//!
//! Each engine's writer takes every request that is queued (up to a batch limit), stores them
//! all in one transaction and only then answers each caller, so a frame is never sent before
//! it is committed and a busy server pays one commit for many frames. The audit log's entries
//! and what turns cost are written by the same writer, in the transaction of the next batch:
//! on SQLite a second writer would take the database's write lock from it on every turn.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};

use super::audit::AuditRow;
use super::usage::TurnUsage;
use super::{NewMessage, Result, RowId, RunningTurn, StoreError, Totals};

/// An append request: rows of one conversation, answered with the `seq` of the first.
pub(super) struct Append {
    pub row: RowId,
    pub messages: Vec<NewMessage>,
    /// The search index's words of each message (see [`super::words`]), made before the
    /// request is queued so that the writer only stores them.
    pub words: Vec<Option<String>>,
    pub reply: oneshot::Sender<Result<i64>>,
}

/// A row the writer stores beside the messages, in the order it was queued, without an
/// answer: committed with the next batch, so before anything appended after it.
pub(super) enum Record {
    /// An entry of the audit log.
    Audit(AuditRow),
    /// What a turn cost.
    Usage(TurnUsage),
}

/// What a writer is asked.
pub(super) enum WriteOp {
    Append(Append),
    Record(Record),
    /// Answered once everything queued before it is committed (or failed).
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
}

/// What one transaction of a writer stores: the requests taken from its queue at once.
#[derive(Default)]
pub(super) struct Batch {
    pub appends: Vec<Append>,
    pub records: Vec<Record>,
    pub flushes: Vec<oneshot::Sender<()>>,
}

impl Batch {
    /// Whether nothing was taken.
    pub fn is_empty(&self) -> bool {
        self.appends.is_empty() && self.records.is_empty() && self.flushes.is_empty()
    }

    /// Message rows among the appends.
    pub fn rows(&self) -> usize {
        self.appends.iter().map(|a| a.messages.len()).sum()
    }

    /// The audit entries and the turns' costs, in order.
    pub fn audit_and_usage(&self) -> (Vec<&AuditRow>, Vec<&TurnUsage>) {
        let mut audit = Vec::new();
        let mut usage = Vec::new();
        for record in &self.records {
            match record {
                Record::Audit(row) => audit.push(row),
                Record::Usage(row) => usage.push(row),
            }
        }
        (audit, usage)
    }
}

/// Queues `record` for the writer behind `writer` (waiting only while its queue is full).
pub(super) async fn record(writer: &mpsc::Sender<WriteOp>, record: Record) -> Result<()> {
    writer
        .send(WriteOp::Record(record))
        .await
        .map_err(|_| StoreError::Unavailable("store is closed".into()))
}

/// Waits until everything queued for the writer behind `writer` before now is committed.
pub(super) async fn flush(writer: &mpsc::Sender<WriteOp>) -> Result<()> {
    let (done, rx) = oneshot::channel();
    writer
        .send(WriteOp::Flush(done))
        .await
        .map_err(|_| StoreError::Unavailable("store is closed".into()))?;
    rx.await
        .map_err(|_| StoreError::Unavailable("store writer stopped".into()))
}

/// Queues `messages` of `row` for the writer behind `writer` and waits for its commit.
pub(super) async fn append(
    writer: &mpsc::Sender<WriteOp>,
    row: RowId,
    messages: Vec<NewMessage>,
) -> Result<i64> {
    let (reply, rx) = oneshot::channel();
    let words = messages
        .iter()
        .map(|m| super::words::message_words(m.message_type, &m.payload))
        .collect();
    writer
        .send(WriteOp::Append(Append {
            row,
            messages,
            words,
            reply,
        }))
        .await
        .map_err(|_| StoreError::Unavailable("store is closed".into()))?;
    rx.await
        .map_err(|_| StoreError::Unavailable("store writer stopped".into()))?
}

/// Asks the writer behind `writer` to finish and waits until it has.
pub(super) async fn close(writer: &mpsc::Sender<WriteOp>) {
    let (done, rx) = oneshot::channel();
    if writer.send(WriteOp::Close(done)).await.is_ok() {
        let _ = rx.await;
    }
}

/// Adds `first` and whatever else is queued on `rx` to `batch`, up to `max_batch` requests;
/// returns the close request when one came (nothing after it is taken).
pub(super) fn fill(
    first: WriteOp,
    rx: &mut mpsc::Receiver<WriteOp>,
    batch: &mut Batch,
    max_batch: usize,
) -> Option<oneshot::Sender<()>> {
    let mut next = Some(first);
    let mut taken = 0;
    while let Some(op) = next.take() {
        match op {
            WriteOp::Append(a) => batch.appends.push(a),
            WriteOp::Record(r) => batch.records.push(r),
            WriteOp::Flush(done) => batch.flushes.push(done),
            WriteOp::Close(done) => return Some(done),
        }
        taken += 1;
        if taken < max_batch {
            next = rx.try_recv().ok();
        }
    }
    None
}

/// Answers every request of `batch` with its outcome (in order), or all with `err`, and
/// empties it.
pub(super) fn answer(batch: &mut Batch, outcome: std::result::Result<Vec<Result<i64>>, String>) {
    match outcome {
        Ok(seqs) => {
            for (append, seq) in batch.appends.drain(..).zip(seqs) {
                let _ = append.reply.send(seq);
            }
        }
        Err(err) => {
            tracing::error!(error = %err, records = batch.records.len(), "store commit failed");
            for append in batch.appends.drain(..) {
                let _ = append.reply.send(Err(StoreError::Unavailable(err.clone())));
            }
        }
    }
    batch.records.clear();
    for done in batch.flushes.drain(..) {
        let _ = done.send(());
    }
}
/// What one batch adds to one conversation's row.
pub(super) struct Delta<'a> {
    pub row: RowId,
    pub rows: i64,
    pub prompts: i64,
    pub results: i64,
    pub last_active: &'a str,
    pub title: Option<&'a str>,
    pub schedule_id: Option<&'a str>,
    pub totals: Totals,
    /// How the running turn changes: 0 not at all, 1 to the prompt at 1-based position
    /// `running_at` among these rows, 2 to the user seq `running_at` (or none).
    pub running: i64,
    pub running_at: Option<i64>,
}

/// What `batch` adds to each conversation, in order of first appearance. Empty requests add
/// nothing (they are answered with an error).
pub(super) fn deltas(batch: &[Append]) -> Vec<Delta<'_>> {
    let mut deltas: Vec<Delta> = Vec::new();
    let mut index: HashMap<RowId, usize> = HashMap::new();
    for append in batch.iter().filter(|a| !a.messages.is_empty()) {
        let i = *index.entry(append.row).or_insert_with(|| {
            deltas.push(Delta {
                row: append.row,
                rows: 0,
                prompts: 0,
                results: 0,
                last_active: "",
                title: None,
                schedule_id: None,
                totals: Totals::default(),
                running: 0,
                running_at: None,
            });
            deltas.len() - 1
        });
        let d = &mut deltas[i];
        for m in &append.messages {
            d.rows += 1;
            d.prompts += i64::from(m.prompt);
            d.results += i64::from(m.message_type == "result");
            d.last_active = &m.created_at;
            d.title = d.title.or(m.title.as_deref());
            d.schedule_id = d.schedule_id.or(m.schedule_id.as_deref());
            if let Some(t) = m.totals {
                d.totals.cost_usd += t.cost_usd;
                d.totals.input_tokens += t.input_tokens;
                d.totals.output_tokens += t.output_tokens;
                d.totals.duration_ms += t.duration_ms;
            }
            match m.running {
                Some(RunningTurn::Starts) => (d.running, d.running_at) = (1, Some(d.rows)),
                Some(RunningTurn::Ends { next }) => (d.running, d.running_at) = (2, next),
                None => {}
            }
        }
    }
    deltas
}

/// Each request's outcome once the conversations that still exist got their seqs: `next`
/// holds the first seq of each such conversation's rows in this batch. Calls `store` with
/// each row to store, its seq and its words, in order.
pub(super) fn assign<'a, E>(
    batch: &'a [Append],
    mut next: HashMap<RowId, i64>,
    mut store: impl FnMut(RowId, i64, &'a NewMessage, Option<&'a str>) -> std::result::Result<(), E>,
) -> std::result::Result<Vec<Result<i64>>, E> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for append in batch {
        if append.messages.is_empty() {
            outcomes.push(Err(StoreError::Unavailable("empty append".into())));
            continue;
        }
        let Some(seq) = next.get_mut(&append.row) else {
            outcomes.push(Err(StoreError::UnknownSession));
            continue;
        };
        outcomes.push(Ok(*seq));
        for (m, words) in append.messages.iter().zip(&append.words) {
            store(append.row, *seq, m, words.as_deref())?;
            *seq += 1;
        }
    }
    Ok(outcomes)
}
