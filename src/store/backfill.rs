//! The search index of a store written before it had one, built at its first start after the
//! upgrade on either engine: the words of every message and title filled in, and indexed (by
//! SQLite's FTS5 tables, by PostgreSQL's GIN indexes of the columns), a chunk per transaction,
//! with the progress logged.

use std::time::{Duration, Instant};

use sqlx::{PgPool, SqlitePool};

use super::words::{message_words, title_words};
use super::writer::{INDEX_MESSAGE, INDEX_TITLE};

/// Stored messages given their words per transaction.
const CHUNK: i64 = 2000;
/// How often the progress is logged.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Logs how far building the index has come, every [`PROGRESS_EVERY`].
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

/// The messages that have no words yet and may have some: user and assistant messages.
const UNINDEXED: &str = "words is null and message_type in ('user', 'assistant')";

/// Builds the index of a SQLite store written before it had one, if it is one: the words of its
/// titles, then of its messages in the order they were stored. A start cut short does it again
/// from the first message that has none. Nothing else writes meanwhile.
pub(super) async fn sqlite(pool: &SqlitePool) -> sqlx::Result<()> {
    if sqlx::query_scalar::<_, i64>("select count(*) from search_backfill")
        .fetch_one(pool)
        .await?
        == 0
    {
        return Ok(());
    }
    let titles: Vec<(i64, String)> = sqlx::query_as(
        "select id, title from session_info where title is not null and title_words is null",
    )
    .fetch_all(pool)
    .await?;
    let mut conn = pool.acquire().await?;
    sqlx::query("begin immediate").execute(&mut *conn).await?;
    for (id, title) in &titles {
        let Some(words) = title_words(title) else {
            continue;
        };
        sqlx::query("update session_info set title_words = $1 where id = $2")
            .bind(&words)
            .bind(id)
            .execute(&mut *conn)
            .await?;
        sqlx::query(INDEX_TITLE)
            .bind(id)
            .bind(&words)
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query("commit").execute(&mut *conn).await?;
    let of: i64 = sqlx::query_scalar(&format!("select count(*) from messages where {UNINDEXED}"))
        .fetch_one(&mut *conn)
        .await?;
    let mut progress = Progress::new(of);
    let mut after = 0;
    loop {
        let chunk: Vec<(i64, String, String)> = sqlx::query_as(&format!(
            "select id, message_type, payload from messages where id > $1 and {UNINDEXED}
             order by id limit $2"
        ))
        .bind(after)
        .bind(CHUNK)
        .fetch_all(&mut *conn)
        .await?;
        let Some(last) = chunk.last() else { break };
        after = last.0;
        sqlx::query("begin immediate").execute(&mut *conn).await?;
        for (id, message_type, payload) in &chunk {
            if let Some(words) = message_words(message_type, payload) {
                sqlx::query("update messages set words = $1 where id = $2")
                    .bind(&words)
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query(INDEX_MESSAGE)
                    .bind(id)
                    .bind(&words)
                    .execute(&mut *conn)
                    .await?;
            }
        }
        sqlx::query("commit").execute(&mut *conn).await?;
        progress.add(chunk.len());
    }
    sqlx::query("delete from search_backfill")
        .execute(&mut *conn)
        .await?;
    progress.finish();
    Ok(())
}

/// Builds the index of a PostgreSQL store written before it had one, if it is one: the words of
/// the titles and messages that have none yet. One node does it, holding an advisory lock;
/// another starting meanwhile waits for it, then finds nothing left to do.
pub(super) async fn postgres(pool: &PgPool) -> sqlx::Result<()> {
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
        let (ids, words): (Vec<i64>, Vec<Option<String>>) = titles
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
        let of: i64 =
            sqlx::query_scalar(&format!("select count(*) from messages where {UNINDEXED}"))
                .fetch_one(pool)
                .await?;
        let mut progress = Progress::new(of);
        let mut after = (0i64, 0i64);
        loop {
            let chunk: Vec<(i64, i64, String, String)> = sqlx::query_as(&format!(
                "select session_pk, seq, message_type, payload from messages
                 where (session_pk, seq) > ($1, $2) and {UNINDEXED}
                 order by session_pk, seq limit $3"
            ))
            .bind(after.0)
            .bind(after.1)
            .bind(CHUNK)
            .fetch_all(pool)
            .await?;
            let Some(last) = chunk.last() else { break };
            after = (last.0, last.1);
            let (mut rows, mut seqs, mut words) = (Vec::new(), Vec::new(), Vec::new());
            for (row, seq, message_type, payload) in &chunk {
                if let Some(w) = message_words(message_type, payload) {
                    rows.push(*row);
                    seqs.push(*seq);
                    words.push(w);
                }
            }
            sqlx::query(
                "update messages m set words = array_to_tsvector(string_to_array(v.w, ' '))
                 from unnest($1::bigint[], $2::bigint[], $3::text[]) v (pk, seq, w)
                 where m.session_pk = v.pk and m.seq = v.seq",
            )
            .bind(rows)
            .bind(seqs)
            .bind(words)
            .execute(pool)
            .await?;
            progress.add(chunk.len());
        }
        sqlx::query("delete from search_backfill")
            .execute(pool)
            .await?;
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

/// The advisory lock a node holds while it builds the index of a PostgreSQL store.
const BACKFILL_LOCK: i64 = 0x6167_6d78_7365_6172; // "agmxsear"
