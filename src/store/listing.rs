//! Pages of a principal's conversations on either engine: the statements of a page (newest
//! activity first, from an offset or from a cursor), of the count when asked, and of a search,
//! which reads a page one of two ways, both exact: along the listing, looking at each
//! conversation's words in turn, which finds a page at once when the words are common; or
//! through the engine's index (SQLite's FTS5 tables, PostgreSQL's GIN indexes), whose cost
//! grows with how many messages hold the words, so quick when they are rare. The first is tried
//! within a small budget, then the second; all of it within the search's time limit and a cap
//! on the searches running at once.

use std::time::{Duration, Instant};

use super::words::SearchWords;
use super::{PageStart, Result, SessionPage, SessionQuery, SessionRecord, StoreError, shared};

/// Which engine a statement is written for: they differ only in how a search reads words.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Engine {
    Sqlite,
    Postgres,
}

/// A value bound to a [`Statement`].
#[derive(Clone)]
pub(super) enum Arg {
    Text(String),
    Int(i64),
}

/// SQL and what it binds, in order (`$1`, `$2`, ...).
#[derive(Default)]
pub(super) struct Statement {
    pub sql: String,
    pub args: Vec<Arg>,
}

impl Statement {
    /// Binds `arg` and returns its placeholder.
    fn param(&mut self, arg: Arg) -> String {
        self.args.push(arg);
        format!("${}", self.args.len())
    }
}

/// The statements of one listing request.
pub(super) struct Statements {
    /// The page (one row more than asked, to tell whether more follow), along the listing: for
    /// a search, looking at each conversation's words in turn.
    pub scan: Statement,
    /// For a search, the same page through the index.
    pub lookup: Option<Statement>,
    /// How many match in all, when asked (for a search, through the index).
    pub count: Option<Statement>,
}

/// How a search's words are read.
#[derive(Clone, Copy)]
enum Read {
    Scan,
    Lookup,
}

/// The statements of `query` for `principal` on `engine`, searching for `search` when given.
pub(super) fn statements(
    engine: Engine,
    principal: &str,
    query: &SessionQuery,
    search: Option<&SearchWords>,
) -> Statements {
    let page = |read| {
        let mut s = Statement::default();
        let filter = filter(&mut s, engine, principal, search.map(|w| (w, read)));
        let mut offset = 0;
        let keyset = match &query.start {
            PageStart::Offset(n) => {
                offset = i64::from(*n);
                String::new()
            }
            // After the cursor's conversation: older activity, or the same and stored before it
            // (a conversation deleted since leaves the others of its instant out).
            PageStart::Before(cursor) => {
                let at = s.param(Arg::Text(cursor.last_active_at.clone()));
                let id = s.param(Arg::Text(cursor.session_id.as_str().to_owned()));
                format!(
                    " and (last_active_at < {at} or (last_active_at = {at} and id <
                        (select id from session_info where session_id = {id} and principal = $1)))"
                )
            }
        };
        let limit = s.param(Arg::Int(i64::from(query.limit) + 1));
        let offset = s.param(Arg::Int(offset));
        s.sql = format!(
            "select {} from session_info where {filter}{keyset}
             order by last_active_at desc, id desc limit {limit} offset {offset}",
            shared::SESSION_COLUMNS
        );
        s
    };
    let count = query.count.then(|| {
        let mut s = Statement::default();
        let filter = filter(&mut s, engine, principal, search.map(|w| (w, Read::Lookup)));
        s.sql = format!("select count(*) from session_info where {filter}");
        s
    });
    Statements {
        scan: page(Read::Scan),
        lookup: search.map(|_| page(Read::Lookup)),
        count,
    }
}

/// The condition on `session_info` of `principal`'s visible conversations that `search` (with
/// how its words are read) finds.
fn filter(
    s: &mut Statement,
    engine: Engine,
    principal: &str,
    search: Option<(&SearchWords, Read)>,
) -> String {
    s.param(Arg::Text(super::text(principal).into_owned()));
    let mut filter = String::from("principal = $1 and not pending");
    let Some((words, read)) = search else {
        return filter;
    };
    let found = match (engine, read) {
        // A word of the search starts a word of the text when it follows a space in the text
        // with a space put before it (the words are joined by single spaces).
        (Engine::Sqlite, Read::Scan) => {
            let has = |column: &str, s: &mut Statement| {
                let all: Vec<String> = words
                    .needles()
                    .map(|n| format!("instr(' ' || {column}, {}) > 0", s.param(Arg::Text(n))))
                    .collect();
                all.join(" and ")
            };
            let message = has("m.words", s);
            let title = has("title_words", s);
            format!(
                "exists (select 1 from messages m where m.session_pk = session_info.id
                    and {message}) or ({title})"
            )
        }
        (Engine::Sqlite, Read::Lookup) => {
            let q = s.param(Arg::Text(words.fts5()));
            format!(
                "id in (select m.session_pk from message_words_index f
                    join messages m on m.id = f.rowid where message_words_index match {q})
                 or id in (select rowid from title_words_index where title_words_index match {q})"
            )
        }
        // `offset 0` keeps the planner from turning the check of each conversation into a
        // lookup of every message that has the words.
        (Engine::Postgres, read) => {
            let q = s.param(Arg::Text(words.tsquery()));
            let fence = match read {
                Read::Scan => " offset 0",
                Read::Lookup => "",
            };
            format!(
                "exists (select 1 from messages m where m.session_pk = session_info.id
                    and m.words @@ {q}::tsquery{fence}) or title_words @@ {q}::tsquery"
            )
        }
    };
    filter.push_str(&format!(" and ({found})"));
    filter
}

/// The page made of `rows` read for `query` (one more than asked when more follow).
pub(super) fn page(
    query: &SessionQuery,
    mut rows: Vec<SessionRecord>,
    total: Option<i64>,
) -> SessionPage {
    let more = rows.len() > query.limit as usize;
    rows.truncate(query.limit as usize);
    SessionPage { rows, more, total }
}

/// The words of `query`'s search, if it has one: Err with the empty page when they match
/// nothing.
pub(super) fn search_words(query: &SessionQuery) -> Result<Option<SearchWords>, SessionPage> {
    match query.search.as_deref().map(SearchWords::parse) {
        Some(words) if words.is_empty() => Err(SessionPage {
            rows: Vec::new(),
            more: false,
            total: query.count.then_some(0),
        }),
        words => Ok(words),
    }
}

/// Whether `err` is the engine stopping a statement at its limit: SQLite's `SQLITE_INTERRUPT`
/// (a progress handler said stop), PostgreSQL's `query_canceled` (`statement_timeout`).
pub(super) fn stopped(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(e) if matches!(e.code().as_deref(), Some("9" | "57014")))
}

/// How much longer than its deadline a search is given to be stopped by its engine.
const ENGINE_FIRST: Duration = Duration::from_millis(500);

/// How long searches may run, and how many at once on this node.
pub(super) struct SearchLimits {
    /// Longest a search may take, waiting for its turn included.
    pub timeout: Duration,
    /// Searches running at once; the others wait for their turn.
    pub running: tokio::sync::Semaphore,
}

impl SearchLimits {
    pub(super) fn new(timeout: Duration, at_once: usize) -> Self {
        SearchLimits {
            timeout,
            running: tokio::sync::Semaphore::new(at_once.max(1)),
        }
    }

    /// Runs `search` once a place is free, both within the time limit: `search` is given the
    /// deadline and makes its engine stop its statements then, which fails them with the error
    /// read here as the search's timeout.
    pub(super) async fn run<T, F>(&self, search: impl FnOnce(Instant) -> F) -> Result<T>
    where
        F: std::future::Future<Output = sqlx::Result<T>>,
    {
        let deadline = Instant::now() + self.timeout;
        let timed_out = || StoreError::SearchTimeout(self.timeout.as_millis() as u64);
        let _turn = tokio::time::timeout_at(deadline.into(), self.running.acquire())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| StoreError::Unavailable("store is closed".into()))?;
        // The engine stops the statements; this stops what it can't (waiting for a connection
        // of a busy pool), a moment later so that the engine does it when it can.
        let outcome = tokio::time::timeout_at((deadline + ENGINE_FIRST).into(), search(deadline))
            .await
            .map_err(|_| timed_out())?;
        outcome.map_err(|err| match stopped(&err) {
            true => timed_out(),
            false => err.into(),
        })
    }
}

/// Binds the args of a [`Statement`] to a query of `sqlx`, in order.
macro_rules! bind_args {
    ($query:expr, $args:expr) => {{
        let mut query = $query;
        for arg in $args {
            query = match arg {
                super::listing::Arg::Text(s) => query.bind(s.as_str()),
                super::listing::Arg::Int(n) => query.bind(*n),
            };
        }
        query
    }};
}

/// Reads the conversations of a page [`Statement`] on `conn` (a `&mut` connection of either
/// engine).
macro_rules! fetch_rows {
    ($conn:expr, $statement:expr) => {{
        let statement: &super::listing::Statement = $statement;
        super::listing::bind_args!(
            sqlx::query_as(&statement.sql).persistent(false),
            &statement.args
        )
        .fetch_all(&mut *$conn)
        .await
    }};
}

/// Reads the count of a count [`Statement`] on `conn`, if there is one.
macro_rules! fetch_count {
    ($conn:expr, $statement:expr) => {{
        let statement: Option<&super::listing::Statement> = $statement;
        match statement {
            Some(s) => Some(
                super::listing::bind_args!(
                    sqlx::query_scalar::<_, i64>(&s.sql).persistent(false),
                    &s.args
                )
                .fetch_one(&mut *$conn)
                .await?,
            ),
            None => None,
        }
    }};
}

/// The start of either engine's `list_sessions` for `query` of `principal`: evaluates to a
/// search's statements (along the listing, through the index, and the count when asked), and
/// returns from the calling function the page itself when there is no search (read on a
/// connection of `pool`), or the empty page of a search that matches nothing.
macro_rules! searched {
    ($engine:expr, $pool:expr, $principal:expr, $query:expr) => {{
        let words = match super::listing::search_words($query) {
            Ok(words) => words,
            Err(nothing) => return Ok(nothing),
        };
        match super::listing::statements($engine, $principal, $query, words.as_ref()) {
            super::listing::Statements {
                scan,
                lookup: Some(lookup),
                count,
            } => (scan, lookup, count),
            super::listing::Statements { scan, count, .. } => {
                let mut conn = $pool.acquire().await?;
                let total = super::listing::fetch_count!(conn, count.as_ref());
                let rows = super::listing::fetch_rows!(conn, &scan)?;
                return Ok(super::listing::page($query, rows, total));
            }
        }
    }};
}

pub(super) use {bind_args, fetch_count, fetch_rows, searched};
