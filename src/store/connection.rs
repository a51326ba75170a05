//! How the store's SQLite connections are opened: the writer's, the checkpointer's and the
//! readers' by [`open`], and every one of them, the pools' too, with the [`VFS`] named here.
//!
//! Every connection uses SQLite's `unix-excl` VFS: the WAL's index lives in the process's
//! memory, not in a memory-mapped `-shm` file that another process could truncate (the next
//! access to such a mapping ends the process with `SIGBUS`). The price is that the server holds
//! the database file alone while it runs.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// The SQLite VFS of every connection of the store, the pools' among them (see the module's
/// opening).
pub(super) const VFS: &str = "unix-excl";

/// A connection of the writer, the checkpointer or a reader to `path`, with the store's
/// settings and automatic checkpoints off.
pub(super) fn open(
    path: &Path,
    synchronous_full: bool,
    max_page_count: u64,
) -> rusqlite::Result<Connection> {
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
