//! Reading a conversation's stored messages on SQLite: a page at a time on blocking threads,
//! each with a connection kept for reuse, with no hand-off per row.

use std::path::PathBuf;

use rusqlite::{Connection, params};

use super::connection::open;
use super::{Page, PageSize, Result, RowId, StoreError};

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
