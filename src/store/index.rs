//! The search index's rows written outside the writers (which index what they store): a
//! renamed title and a fork's copies on SQLite, whose FTS5 table keeps no text to copy them
//! from, and at start-up the whole index of a store written before it had one (on either
//! engine), a chunk per transaction, with its progress logged.

use std::time::{Duration, Instant};

use sqlx::{PgPool, SqliteConnection, SqlitePool};

use super::RowId;
use super::words::{message_words, title_words};
use super::writer::words_rowid;

/// Stored messages indexed per transaction when a store is indexed at start-up or a fork's
/// copies are.
const CHUNK: i64 = 2000;
/// How often the progress of indexing a store is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Adds a row to the search index (SQLite; see the migration that makes the table).
const INSERT_WORDS: &str = "insert into message_words (rowid, words) values ($1, $2)";

/// A stored message as read to be indexed: its conversation, seq, type and payload.
type Stored = (RowId, i64, String, String);

/// Indexes `messages` (SQLite), in the caller's transaction.
async fn index_messages(conn: &mut SqliteConnection, messages: &[Stored]) -> sqlx::Result<()> {
    for (row, seq, message_type, payload) in messages {
        if let Some(words) = message_words(message_type, payload) {
            sqlx::query(INSERT_WORDS)
                .bind(words_rowid(*row, *seq))
                .bind(words)
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

/// Makes `title` the indexed title of conversation `row` (SQLite), in the caller's transaction.
pub(super) async fn set_title(
    conn: &mut SqliteConnection,
    row: RowId,
    title: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query("delete from message_words where rowid = $1")
        .bind(words_rowid(row, 0))
        .execute(&mut *conn)
        .await?;
    if let Some(words) = title.and_then(title_words) {
        sqlx::query(INSERT_WORDS)
            .bind(words_rowid(row, 0))
            .bind(words)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Indexes what a fork copied into conversation `fork` (SQLite): its messages and its title,
/// in the caller's transaction.
pub(super) async fn copies(conn: &mut SqliteConnection, fork: RowId) -> sqlx::Result<()> {
    let mut after = 0;
    loop {
        let chunk: Vec<Stored> = sqlx::query_as(
            "select session_pk, seq, message_type, payload from messages
             where session_pk = $1 and seq > $2 and message_type in ('user', 'assistant')
             order by seq limit $3",
        )
        .bind(fork)
        .bind(after)
        .bind(CHUNK)
        .fetch_all(&mut *conn)
        .await?;
        let Some(last) = chunk.last() else { break };
        after = last.1;
        index_messages(conn, &chunk).await?;
    }
    let title: Option<String> = sqlx::query_scalar("select title from session_info where id = $1")
        .bind(fork)
        .fetch_one(&mut *conn)
        .await?;
    set_title(conn, fork, title.as_deref()).await
}

/// Logs how far indexing a store has come, every [`PROGRESS_EVERY`].
struct Progress {
    done: i64,
    of: i64,
    logged: Instant,
}

impl Progress {
    fn new(of: i64) -> Self {
        tracing::info!(
            messages = of,
            "building the search index of the stored messages (a store written before it had one)"
        );
        Progress {
            done: 0,
            of,
            logged: Instant::now(),
        }
    }

    fn add(&mut self, n: usize) {
        self.done += n as i64;
        if self.logged.elapsed() >= PROGRESS_EVERY {
            self.logged = Instant::now();
            tracing::info!(done = self.done, of = self.of, "building the search index");
        }
    }

    fn finish(self) {
        tracing::info!(messages = self.done, "the search index is built");
    }
}

/// Indexes a SQLite store written before it had a search index, if it is one: its titles, then
/// its messages up to the last one it held, a chunk per transaction, each recording how far it
/// came, so that a start cut short goes on from there. Nothing else writes meanwhile.
pub(super) async fn backfill_sqlite(pool: &SqlitePool) -> sqlx::Result<()> {
    let Some((mut next, up_to, titles_done)) = sqlx::query_as::<_, (i64, i64, bool)>(
        "select next_id, up_to, titles_done from search_backfill",
    )
    .fetch_optional(pool)
    .await?
    else {
        return Ok(());
    };
    let mut conn = pool.acquire().await?;
    if !titles_done {
        sqlx::query("begin immediate").execute(&mut *conn).await?;
        let titles: Vec<(RowId, String)> =
            sqlx::query_as("select id, title from session_info where title is not null")
                .fetch_all(&mut *conn)
                .await?;
        for (row, title) in &titles {
            set_title(&mut conn, *row, Some(title)).await?;
        }
        sqlx::query("update search_backfill set titles_done = 1")
            .execute(&mut *conn)
            .await?;
        sqlx::query("commit").execute(&mut *conn).await?;
    }
    let of: i64 = sqlx::query_scalar(
        "select count(*) from messages where id >= $1 and id <= $2
           and message_type in ('user', 'assistant')",
    )
    .bind(next)
    .bind(up_to)
    .fetch_one(&mut *conn)
    .await?;
    let mut progress = Progress::new(of);
    loop {
        let chunk: Vec<(i64, RowId, i64, String, String)> = sqlx::query_as(
            "select id, session_pk, seq, message_type, payload from messages
             where id >= $1 and id <= $2 and message_type in ('user', 'assistant')
             order by id limit $3",
        )
        .bind(next)
        .bind(up_to)
        .bind(CHUNK)
        .fetch_all(&mut *conn)
        .await?;
        let Some(last) = chunk.last().map(|m| m.0) else {
            break;
        };
        let messages: Vec<Stored> = chunk.into_iter().map(|m| (m.1, m.2, m.3, m.4)).collect();
        sqlx::query("begin immediate").execute(&mut *conn).await?;
        index_messages(&mut conn, &messages).await?;
        sqlx::query("update search_backfill set next_id = $1")
            .bind(last + 1)
            .execute(&mut *conn)
            .await?;
        sqlx::query("commit").execute(&mut *conn).await?;
        next = last + 1;
        progress.add(messages.len());
    }
    sqlx::query("delete from search_backfill")
        .execute(&mut *conn)
        .await?;
    progress.finish();
    Ok(())
}

/// Indexes a PostgreSQL store written before it had a search index, if it is one: the titles
/// and messages that have no words yet, a chunk per transaction. One node does it, holding an
/// advisory lock; another starting meanwhile waits for it, then finds nothing left to do.
pub(super) async fn backfill_pg(pool: &PgPool) -> sqlx::Result<()> {
    let pending = || async {
        sqlx::query_scalar::<_, bool>("select exists (select 1 from search_backfill)")
            .fetch_one(pool)
            .await
    };
    if !pending().await? {
        return Ok(());
    }
    let mut lock = pool.acquire().await?;
    sqlx::query("select pg_advisory_lock($1)")
        .bind(BACKFILL_LOCK)
        .execute(&mut *lock)
        .await?;
    let outcome = async {
        if !pending().await? {
            return Ok(());
        }
        let titles: Vec<(i64, String)> = sqlx::query_as(
            "select id, title from session_info where title is not null and title_words is null",
        )
        .fetch_all(pool)
        .await?;
        for chunk in titles.chunks(CHUNK as usize) {
            let (ids, words): (Vec<i64>, Vec<Option<String>>) = chunk
                .iter()
                .map(|(id, title)| (*id, title_words(title)))
                .unzip();
            sqlx::query(
                "update session_info s set title_words = array_to_tsvector(string_to_array(v.w, ' '))
                 from unnest($1::bigint[], $2::text[]) v (id, w) where s.id = v.id",
            )
            .bind(ids)
            .bind(words)
            .execute(pool)
            .await?;
        }
        let of: i64 = sqlx::query_scalar(
            "select count(*) from messages where words is null
               and message_type in ('user', 'assistant')",
        )
        .fetch_one(pool)
        .await?;
        let mut progress = Progress::new(of);
        let mut after = (0i64, 0i64);
        loop {
            let chunk: Vec<(i64, i64, String, String)> = sqlx::query_as(
                "select session_pk, seq, message_type, payload from messages
                 where (session_pk, seq) > ($1, $2) and words is null
                   and message_type in ('user', 'assistant')
                 order by session_pk, seq limit $3",
            )
            .bind(after.0)
            .bind(after.1)
            .bind(CHUNK)
            .fetch_all(pool)
            .await?;
            let Some(last) = chunk.last() else { break };
            after = (last.0, last.1);
            let mut ids = (Vec::new(), Vec::new(), Vec::new());
            for (row, seq, message_type, payload) in &chunk {
                if let Some(words) = message_words(message_type, payload) {
                    ids.0.push(*row);
                    ids.1.push(*seq);
                    ids.2.push(words);
                }
            }
            sqlx::query(
                "update messages m set words = array_to_tsvector(string_to_array(v.w, ' '))
                 from unnest($1::bigint[], $2::bigint[], $3::text[]) v (pk, seq, w)
                 where m.session_pk = v.pk and m.seq = v.seq",
            )
            .bind(ids.0)
            .bind(ids.1)
            .bind(ids.2)
            .execute(pool)
            .await?;
            progress.add(chunk.len());
        }
        sqlx::query("delete from search_backfill").execute(pool).await?;
        progress.finish();
        Ok(())
    }
    .await;
    sqlx::query("select pg_advisory_unlock($1)")
        .bind(BACKFILL_LOCK)
        .execute(&mut *lock)
        .await?;
    outcome
}

/// The advisory lock a node holds while it indexes a PostgreSQL store at start-up.
const BACKFILL_LOCK: i64 = 0x6167_6d78_7365_6172; // "agmxsear"
