//! The store's synchronous SQLite connections: the writer thread doing group commits, the
//! thread checkpointing the WAL beside it, and the readers of stored messages.
//!
//! The writer stores each batch ([`super::batch`]) in one transaction with statements prepared
//! once. Checkpoints (copying the WAL back into the database and syncing it) run beside the
//! commits: the writer's connection has automatic checkpoints off and wakes the checkpointer,
//! whose passive checkpoints never block it. Passive checkpoints alone never let the WAL start
//! over while commits keep coming, so after every `store.wal_restart_mib` it has written, the
//! writer has the checkpointer restart the WAL between two commits, with commits held until it
//! is done (unless readers hold its old pages past the busy timeout, when a restart gives up
//! until the next one is due). When to do either is [`super::pacing`]'s decision. Only the
//! checkpointer's connection ever checkpoints, so a restart never finds another checkpoint
//! under way.
//!
//! Every connection uses SQLite's `unix-excl` VFS: the WAL's index lives in the process's
//! memory, not in a memory-mapped `-shm` file that another process could truncate (the next
//! access to such a mapping ends the process with `SIGBUS`). The price is that the server holds
//! the database file alone while it runs.
//! Stored messages are read a page at a time on blocking threads, with no hand-off per row.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::mpsc;

use super::batch::{self, Batch, WriteOp};
use super::pacing::{Pacer, Passes, Step};
use super::words::title_words;
use super::{Page, PageSize, Result, RowId, StoreError};
use crate::metrics::Metrics;

/// The checkpointer also runs this often while rows keep coming in slowly.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);

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

/// The SQLite VFS of every connection of the store (see the module's opening).
pub(super) const VFS: &str = "unix-excl";

/// A connection to `path` with the store's settings and automatic checkpoints off.
fn open(path: &Path, synchronous_full: bool, max_page_count: u64) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags_and_vfs(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        VFS,
    )?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let synchronous = if synchronous_full { "full" } else { "normal" };
    conn.execute_batch(&format!(
        "pragma journal_mode = wal; pragma synchronous = {synchronous};
         pragma wal_autocheckpoint = 0; pragma cache_size = -8192; pragma temp_store = memory;
         pragma foreign_keys = on;"
    ))?;
    if max_page_count > 0 {
        conn.execute_batch(&format!("pragma max_page_count = {max_page_count}"))?;
    }
    Ok(conn)
}

/// What the writer asks of the checkpointer.
enum Job {
    /// A passive checkpoint beside the commits.
    Pass,
    /// A restart of the WAL while the writer waits for the answer, so no commit runs meanwhile.
    Restart(std_mpsc::SyncSender<()>),
}

/// Starts the thread that checkpoints the WAL whenever the writer asks (and every
/// [`CHECKPOINT_INTERVAL`]); it ends when the writer drops the sender.
fn spawn_checkpointer(path: &Path) -> anyhow::Result<Checkpointer> {
    let conn = open(path, false, 0)?;
    let (tx, rx) = std_mpsc::sync_channel::<Job>(1);
    let passes = Arc::new(PassCounts::default());
    let counts = passes.clone();
    let thread = std::thread::Builder::new()
        .name("store-checkpoint".into())
        .spawn(move || {
            loop {
                match rx.recv_timeout(CHECKPOINT_INTERVAL) {
                    Ok(Job::Pass) | Err(std_mpsc::RecvTimeoutError::Timeout) => {
                        counts.started.fetch_add(1, Ordering::Release);
                        if let Err(err) = conn.execute_batch("pragma wal_checkpoint(passive)") {
                            tracing::warn!(error = %err, "WAL checkpoint failed");
                        } else if let Err(err) = sync_database(&conn) {
                            tracing::warn!(error = %err, "syncing the database file failed");
                        }
                        counts.finished.fetch_add(1, Ordering::Release);
                    }
                    Ok(Job::Restart(answer)) => {
                        restart_wal(&conn);
                        let _ = answer.send(());
                    }
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        })?;
    Ok(Checkpointer {
        jobs: tx,
        passes,
        thread,
    })
}

/// Checkpoints what earlier passes have not yet copied, waits for readers of the old pages (the
/// connection's busy timeout), and so makes the next commit write from the WAL's beginning. A
/// restart that fails or times out is tried again after the next `store.wal_restart_mib`.
fn restart_wal(conn: &Connection) {
    // (busy, pages in the WAL, pages copied back)
    match conn.query_row("pragma wal_checkpoint(restart)", [], |r| r.get::<_, i64>(0)) {
        Ok(0) => {}
        Ok(_) => tracing::warn!("WAL restart timed out waiting for readers"),
        Err(err) => tracing::warn!(error = %err, "WAL restart failed"),
    }
}

/// Flushes what checkpoints wrote into the database file to disk, through the connection's own
/// file handle (opening another would release the process's locks on the file when closed).
///
/// A passive checkpoint that is overtaken by new commits copies pages into the database file
/// but leaves the file's sync to a later checkpoint that catches up. Under steady load that is
/// the WAL restart, which then syncs every page copied since the last one while commits wait.
/// Syncing after each pass, beside the commits, leaves it only the pages of its own copy.
fn sync_database(conn: &Connection) -> std::result::Result<(), String> {
    use rusqlite::ffi;
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the handle is this open connection's, used on its own thread. The file control
    // writes the main database's open file object (owned by the connection, alive while it is
    // open) into `file`; its methods' `xSync` only flushes that file.
    let rc = unsafe {
        let rc = ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        );
        match (rc, file.as_ref().and_then(|f| f.pMethods.as_ref())) {
            (ffi::SQLITE_OK, Some(methods)) => match methods.xSync {
                Some(sync) => sync(file, ffi::SQLITE_SYNC_NORMAL),
                None => ffi::SQLITE_OK,
            },
            (ffi::SQLITE_OK, None) => ffi::SQLITE_OK,
            (rc, _) => rc,
        }
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(format!("SQLite error code {rc}"))
    }
}

/// The checkpointer's passes, started and finished, counted by its thread.
#[derive(Default)]
struct PassCounts {
    started: AtomicU64,
    finished: AtomicU64,
}

/// The writer's handle on the checkpointer thread.
struct Checkpointer {
    jobs: std_mpsc::SyncSender<Job>,
    passes: Arc<PassCounts>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// The passes so far. `finished` is read first, so that the snapshot never shows more
    /// passes finished than started (a pass is counted as started before it runs).
    fn passes(&self) -> Passes {
        let finished = self.passes.finished.load(Ordering::Acquire);
        Passes {
            started: self.passes.started.load(Ordering::Acquire),
            finished,
        }
    }

    /// Asks for a pass unless one is already asked for.
    fn wake(&self) {
        let _ = self.jobs.try_send(Job::Pass);
    }

    /// Has the WAL restarted and waits until it has (after a pass already asked for).
    fn restart(&self) {
        let (tx, rx) = std_mpsc::sync_channel(1);
        if self.jobs.send(Job::Restart(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// Ends the thread once its current job is done.
    fn stop(self) {
        drop(self.jobs);
        let _ = self.thread.join();
    }
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

/// Connections that read stored messages on blocking threads, kept for reuse: a page of a
/// replay is read and decoded there without a hand-off per row.
pub(super) struct Readers {
    path: PathBuf,
    idle: std::sync::Mutex<Vec<Connection>>,
    /// Reads running at once (each on a blocking thread with its own connection).
    running: tokio::sync::Semaphore,
}

/// Most reads of stored messages running at once; as many connections are kept open.
const READERS: usize = 4;

/// Stored frames of one conversation after a seq, in order (one more than a page holds, to
/// tell whether more follow).
const MESSAGES_AFTER: &str =
    "select seq, message_type, sdk_uuid, payload, created_at, turn_cost_usd
     from messages where session_pk = ?1 and seq > ?2 order by seq limit ?3 + 1";

impl Readers {
    pub(super) fn new(path: PathBuf) -> Self {
        Readers {
            path,
            idle: std::sync::Mutex::new(Vec::new()),
            running: tokio::sync::Semaphore::new(READERS),
        }
    }

    /// Closes the idle connections.
    pub(super) fn close(&self) {
        self.idle.lock().expect("readers lock").clear();
    }

    /// Stored frames of `row` with `seq > after_seq`, in order, at most `size` of them.
    pub(super) async fn messages_after(
        self: &std::sync::Arc<Self>,
        row: RowId,
        after_seq: i64,
        size: PageSize,
    ) -> Result<Page> {
        let _running = self
            .running
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable("store is closed".into()))?;
        let readers = self.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match readers.idle.lock().expect("readers lock").pop() {
                Some(conn) => conn,
                None => open(&readers.path, false, 0)?,
            };
            let rows = read_after(&conn, row, after_seq, size);
            readers.idle.lock().expect("readers lock").push(conn);
            rows
        })
        .await
        .map_err(|e| StoreError::Unavailable(e.to_string()))?
        .map_err(|e| StoreError::Unavailable(e.to_string()))
    }
}

/// Reads a page row by row, stopping at the first row that would not fit: its payload's size
/// is looked at where SQLite holds it, before anything of it is copied.
fn read_after(
    conn: &Connection,
    row: RowId,
    after_seq: i64,
    size: PageSize,
) -> rusqlite::Result<Page> {
    let mut stmt = conn.prepare_cached(MESSAGES_AFTER)?;
    let mut rows = stmt.query(params![row.0, after_seq, size.rows])?;
    let mut page = Page::default();
    let mut bytes = 0usize;
    while let Some(r) = rows.next()? {
        let len = r.get_ref(3)?.as_bytes()?.len();
        let full = page.rows.len() >= size.rows as usize
            || (!page.rows.is_empty() && bytes.saturating_add(len) > size.bytes);
        if full {
            page.more = true;
            break;
        }
        bytes += len;
        page.rows.push(super::StoredMessage {
            seq: r.get(0)?,
            message_type: r.get(1)?,
            sdk_uuid: r.get(2)?,
            payload: r.get(3)?,
            created_at: r.get(4)?,
            turn_cost_usd: r.get(5)?,
        });
    }
    Ok(page)
}
