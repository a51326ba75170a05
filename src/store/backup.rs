//! Copies of the SQLite database: made while the server serves (on a connection of its own in
//! the server's process, the only one that may open the file while it runs), made or put back
//! while no server runs, and checked before they count.
//!
//! A copy is made with `VACUUM INTO`, which reads the database in one transaction: it holds
//! every conversation as it was at one moment, while writes go on beside it (into the WAL).

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::schema;

/// Why a copy could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Another process holds the database: a server runs on it.
    #[error("the database {0} is in use by another process (a server running on it)")]
    InUse(PathBuf),
    /// There is no database there.
    #[error("there is no database at {0}")]
    Missing(PathBuf),
    /// Reading the database or writing the copy failed.
    #[error("cannot copy the database {0}: {1}")]
    Failed(PathBuf, String),
    /// The database fails its checks (damaged, not agentmux's, made by a newer agentmux).
    #[error("{0}")]
    Unusable(String),
}

/// What a checked copy holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Conversations (imports left unfinished not counted).
    pub conversations: u64,
    /// Stored messages.
    pub messages: u64,
    /// The schema version it was made at.
    pub schema: i64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// Where a restore put things.
#[derive(Debug)]
pub struct Restored {
    /// What the restored database holds.
    pub summary: Summary,
    /// Where the database it replaced was moved, if there was one.
    pub replaced: Option<PathBuf>,
}

/// Writes a consistent copy of the database `db` into `to`, which must be an empty file (made
/// 0600 by the caller) or not exist. With `wait`, the copy waits up to that long for a lock
/// held inside this process (the server's own connections); a lock held by another process
/// fails at once with [`CopyError::InUse`] either way.
///
/// # Errors
/// [`CopyError::Missing`] when `db` does not exist, [`CopyError::InUse`], or
/// [`CopyError::Failed`].
pub fn copy(db: &Path, to: &Path, wait: Duration) -> Result<(), CopyError> {
    if !db.is_file() {
        return Err(CopyError::Missing(db.to_owned()));
    }
    let failed = |e: rusqlite::Error| match is_busy(&e) {
        true => CopyError::InUse(db.to_owned()),
        false => CopyError::Failed(db.to_owned(), e.to_string()),
    };
    let conn = Connection::open_with_flags_and_vfs(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        super::connection::VFS,
    )
    .map_err(failed)?;
    conn.busy_timeout(wait).map_err(failed)?;
    let target = to
        .to_str()
        .ok_or_else(|| CopyError::Failed(db.to_owned(), "the copy's path is not UTF-8".into()))?;
    conn.execute("vacuum into ?1", [target]).map_err(failed)?;
    Ok(())
}

/// Checks a copy: SQLite's integrity check passes, it is an agentmux database, and its schema
/// is one this build knows (an older one is migrated when a server opens it).
///
/// # Errors
/// A message saying which of these fails.
pub fn check(file: &Path) -> anyhow::Result<Summary> {
    inspect(file, file)
}

/// [`check`] of the database `db` itself, which no server may hold meanwhile. What it holds;
/// its schema may be older than this build's (a server migrates it at start).
///
/// # Errors
/// [`CopyError::Missing`], [`CopyError::InUse`] while a server holds it, or
/// [`CopyError::Unusable`] with what [`check`] says.
pub fn check_in_place(db: &Path) -> Result<Summary, CopyError> {
    if !db.is_file() {
        return Err(CopyError::Missing(db.to_owned()));
    }
    let failed = |e: anyhow::Error| CopyError::Unusable(format!("{e:#}"));
    let conn = Connection::open_with_flags_and_vfs(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        super::connection::VFS,
    )
    .map_err(|e| failed(e.into()))?;
    conn.busy_timeout(Duration::ZERO)
        .map_err(|e| failed(e.into()))?;
    match conn.query_row("select count(*) from sqlite_schema", [], |r| {
        r.get::<_, i64>(0)
    }) {
        Err(e) if is_busy(&e) => return Err(CopyError::InUse(db.to_owned())),
        _ => {}
    }
    summarize(&conn, db, db).map_err(failed)
}

/// [`check`] of `file`, named `shown` in what it says (the file a person gave, of which
/// `file` is a copy).
fn inspect(file: &Path, shown: &Path) -> anyhow::Result<Summary> {
    let conn = Connection::open_with_flags(
        file,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", shown.display()))?;
    summarize(&conn, file, shown)
}

/// Whether `e` says another connection holds the database.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The checks of [`check`] on `conn`, a connection to `file`, named `shown`.
fn summarize(conn: &Connection, file: &Path, shown: &Path) -> anyhow::Result<Summary> {
    let shown = shown.display();
    let verdict: String = conn
        .query_row("pragma integrity_check", [], |r| r.get(0))
        .map_err(|e| anyhow::anyhow!("{shown} is not a SQLite database: {e}"))?;
    if verdict != "ok" {
        anyhow::bail!("{shown} is damaged: SQLite's integrity check says {verdict}");
    }
    let version: i64 = conn
        .query_row(
            "select coalesce(max(version), 0) from _sqlx_migrations where success",
            [],
            |r| r.get(0),
        )
        .map_err(|_| anyhow::anyhow!("{shown} is not an agentmux database"))?;
    if version > schema::newest(&schema::SQLITE) {
        anyhow::bail!(
            "{shown} can't be used here: {}",
            schema::newer(version, &schema::SQLITE)
        );
    }
    let count = |sql: &str| -> anyhow::Result<u64> {
        conn.query_row(sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| anyhow::anyhow!("{shown} is not an agentmux database: {e}"))
    };
    Ok(Summary {
        conversations: count("select count(*) from session_info where not pending")?,
        messages: count("select count(*) from messages")?,
        schema: version,
        bytes: std::fs::metadata(file)?.len(),
    })
}

/// Puts the copy `from` in place of the database `db` of a stopped server: checked, then
/// written next to it and renamed over it, so that `db` is always whole. The database it
/// replaces is kept beside it (`agentmux.db.replaced-<time>`), never deleted.
///
/// # Errors
/// When the copy fails its check (nothing is changed), a server holds `db` (nothing is
/// changed), or a file can't be written.
pub fn restore(from: &Path, db: &Path) -> anyhow::Result<Restored> {
    let dir = db.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| anyhow::anyhow!("cannot create the data dir {}: {e}", dir.display()))?;
    let incoming = with_suffix(db, ".restoring");
    let _ = std::fs::remove_file(&incoming);
    let outcome = place(from, db, &incoming);
    if outcome.is_err() {
        let _ = std::fs::remove_file(&incoming);
    }
    outcome
}

/// The steps of [`restore`]; `incoming` is where the copy is written first.
fn place(from: &Path, db: &Path, incoming: &Path) -> anyhow::Result<Restored> {
    {
        let mut source = std::fs::File::open(from)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", from.display()))?;
        let mut target = new_private_file(incoming)?;
        std::io::copy(&mut source, &mut target)?;
        target.flush()?;
        target.sync_all()?;
    }
    let summary = inspect(incoming, from)?;
    let replaced = if db.exists() {
        let aside = with_suffix(
            db,
            &format!(".replaced-{}", chrono::Utc::now().format("%Y%m%dT%H%M%SZ")),
        );
        settle(db)?;
        std::fs::rename(db, &aside)?;
        Some(aside)
    } else {
        None
    };
    std::fs::rename(incoming, db)?;
    std::fs::File::open(db.parent().unwrap_or(Path::new(".")))?.sync_all()?;
    Ok(Restored { summary, replaced })
}

/// Makes sure no server holds `db` and that everything of it is in the file itself (its WAL
/// copied back and removed), so that the file alone can be moved aside.
fn settle(db: &Path) -> anyhow::Result<()> {
    let in_use = || {
        anyhow::anyhow!(
            "a server is running on {} (its database is in use): stop it first",
            db.parent().unwrap_or(Path::new(".")).display()
        )
    };
    let conn = Connection::open_with_flags_and_vfs(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        super::connection::VFS,
    )?;
    // A server holding the file answers at once (rusqlite would wait 5 s by default).
    conn.busy_timeout(Duration::ZERO)?;
    match conn.query_row("pragma wal_checkpoint(truncate)", [], |r| {
        r.get::<_, i64>(0)
    }) {
        Ok(0) => {}
        Ok(_) => return Err(in_use()),
        Err(e) if is_busy(&e) => return Err(in_use()),
        Err(e) => return Err(e.into()),
    }
    conn.close().map_err(|(_, e)| e)?;
    let wal = with_suffix(db, "-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        anyhow::bail!(
            "{} still has changes of its own: start and stop the server once, then restore",
            wal.display()
        );
    }
    Ok(())
}

/// A new file only the server's user may read, which must not exist yet.
pub fn new_private_file(path: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))
}

/// `path` with `suffix` added to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
