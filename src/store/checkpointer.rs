//! The thread that checkpoints the WAL beside the writer's commits: copying the WAL back into
//! the database file and syncing it. The writer's connection has automatic checkpoints off and
//! wakes this thread, whose passive checkpoints never block it. Passive checkpoints alone never
//! let the WAL start over while commits keep coming, so the writer also has this thread restart
//! the WAL between two commits, with commits held until it is done (unless readers hold its old
//! pages past the busy timeout, when a restart gives up until the next one is due). When to do
//! either is [`super::pacing`]'s decision. Only this thread's connection ever checkpoints, so a
//! restart never finds another checkpoint under way.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use rusqlite::Connection;

use super::connection::open;
use super::pacing::Passes;

/// The checkpointer also runs this often while rows keep coming in slowly.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);

/// What the writer asks of the checkpointer.
enum Job {
    /// A passive checkpoint beside the commits.
    Pass,
    /// A restart of the WAL while the writer waits for the answer, so no commit runs meanwhile.
    Restart(std_mpsc::SyncSender<()>),
}

/// Starts the thread that checkpoints the WAL whenever the writer asks (and every
/// [`CHECKPOINT_INTERVAL`]); it ends when the writer drops the sender.
pub(super) fn spawn_checkpointer(path: &Path) -> anyhow::Result<Checkpointer> {
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
pub(super) struct Checkpointer {
    jobs: std_mpsc::SyncSender<Job>,
    passes: Arc<PassCounts>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// The passes so far. `finished` is read first, so that the snapshot never shows more
    /// passes finished than started (a pass is counted as started before it runs).
    pub(super) fn passes(&self) -> Passes {
        let finished = self.passes.finished.load(Ordering::Acquire);
        Passes {
            started: self.passes.started.load(Ordering::Acquire),
            finished,
        }
    }

    /// Asks for a pass unless one is already asked for.
    pub(super) fn wake(&self) {
        let _ = self.jobs.try_send(Job::Pass);
    }

    /// Has the WAL restarted and waits until it has (after a pass already asked for).
    pub(super) fn restart(&self) {
        let (tx, rx) = std_mpsc::sync_channel(1);
        if self.jobs.send(Job::Restart(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// Ends the thread once its current job is done.
    pub(super) fn stop(self) {
        drop(self.jobs);
        let _ = self.thread.join();
    }
}
