//! Pages of a principal's conversations on either engine: the statement of a page (newest
//! activity first, from an offset or from a cursor), the count only when asked, and a search
//! through the engine's index (SQLite's FTS5 table, PostgreSQL's `tsvector` columns) within a
//! time limit and a cap on the searches running at once.

use std::time::{Duration, Instant};

use super::words::SearchWords;
use super::{PageStart, Result, SessionPage, SessionQuery, SessionRecord, StoreError, shared};

/// Which engine a statement is written for: they differ only in how a search is looked up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Engine {
    Sqlite,
    Postgres,
}

/// A value bound to a statement of [`Statement`].
#[derive(Clone)]
pub(super) enum Arg {
    Text(String),
    Int(i64),
}

/// A listing's statements and what they bind, in order (`$1`, `$2`, ...).
pub(super) struct Statement {
    /// The page: one more row than asked, to tell whether more follow.
    pub page: String,
    pub page_args: Vec<Arg>,
    /// How many match in all, when asked.
    pub count: Option<(String, Vec<Arg>)>,
}

/// The statements of `query` for `principal` on `engine`, searching for `search` when given.
pub(super) fn statement(
    engine: Engine,
    principal: &str,
    query: &SessionQuery,
    search: Option<&SearchWords>,
) -> Statement {
    let mut args = vec![Arg::Text(super::text(principal).into_owned())];
    let mut filter = String::from("principal = $1 and not pending");
    if let Some(words) = search {
        match engine {
            // A match's row id carries its conversation's id (see the migration).
            Engine::Sqlite => {
                args.push(Arg::Text(words.fts5()));
                filter.push_str(
                    " and id in (select rowid >> 32 from message_words where message_words match $2)",
                );
            }
            // Written as a correlated `exists` so that the planner can either look the words up
            // once (a rare word) or check the newest conversations one by one (a common one).
            Engine::Postgres => {
                args.push(Arg::Text(words.tsquery()));
                filter.push_str(
                    " and (exists (select 1 from messages m where m.session_pk = session_info.id
                          and m.words @@ $2::tsquery)
                        or title_words @@ $2::tsquery)",
                );
            }
        }
    }
    let count = query.count.then(|| {
        (
            format!("select count(*) from session_info where {filter}"),
            args.clone(),
        )
    });
    let mut page_filter = filter;
    let mut offset = 0;
    match &query.start {
        PageStart::Offset(n) => offset = i64::from(*n),
        // After the cursor's conversation: older activity, or the same and stored before it (a
        // conversation deleted since leaves the others of its instant out).
        PageStart::Before(cursor) => {
            let (at, id) = (args.len() + 1, args.len() + 2);
            args.push(Arg::Text(cursor.last_active_at.clone()));
            args.push(Arg::Text(cursor.session_id.as_str().to_owned()));
            page_filter.push_str(&format!(
                " and (last_active_at < ${at} or (last_active_at = ${at} and id <
                    (select id from session_info where session_id = ${id} and principal = $1)))"
            ));
        }
    }
    let (limit, skip) = (args.len() + 1, args.len() + 2);
    args.push(Arg::Int(i64::from(query.limit) + 1));
    args.push(Arg::Int(offset));
    Statement {
        page: format!(
            "select {} from session_info where {page_filter}
             order by last_active_at desc, id desc limit ${limit} offset ${skip}",
            shared::SESSION_COLUMNS
        ),
        page_args: args,
        count,
    }
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
    /// deadline and makes its engine stop its statements then (SQLite's progress handler,
    /// PostgreSQL's `statement_timeout`), which fails them with the error this reads as the
    /// search's timeout.
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
        search(deadline).await.map_err(|err| match &err {
            // SQLITE_INTERRUPT, and PostgreSQL's query_canceled.
            sqlx::Error::Database(e) if matches!(e.code().as_deref(), Some("9" | "57014")) => {
                timed_out()
            }
            _ => err.into(),
        })
    }
}

/// Binds `args` (a `&[Arg]`) to a query of `sqlx`, in order.
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

pub(super) use bind_args;

/// Reads the page (and the count, when asked) of a [`Statement`] on `conn` (a `&mut` connection
/// of either engine): a [`SessionPage`] for `query`.
macro_rules! read_page {
    ($conn:expr, $statement:expr, $query:expr) => {
        async {
            let (conn, statement, query) = ($conn, $statement, $query);
            let total: Option<i64> = match &statement.count {
                Some((sql, args)) => Some(
                    super::listing::bind_args!(sqlx::query_scalar(sql).persistent(false), args)
                        .fetch_one(&mut *conn)
                        .await?,
                ),
                None => None,
            };
            let rows = super::listing::bind_args!(
                sqlx::query_as(&statement.page).persistent(false),
                &statement.page_args
            )
            .fetch_all(&mut *conn)
            .await?;
            Ok::<_, sqlx::Error>(super::listing::page(query, rows, total))
        }
        .await
    };
}

pub(super) use read_page;
