//! The store: conversations and their stored frames, behind the [`Store`] trait, with the
//! records it reads and writes in [`records`].
//!
//! SQLite ([`sqlite::SqliteStore`]) is the embedded default; PostgreSQL
//! ([`postgres::PgStore`]) the store that several nodes can share. Both commit appends in
//! groups ([`batch`]) and share what rewind and fork decide ([`edits`]); `seq` is assigned
//! inside the same write that stores the rows, and so are the rows of the search index, whose
//! rule ([`words`]) both engines share, as they share the statements of a listing
//! ([`listing`]).

pub mod audit;
mod backfill;
pub mod backup;
mod batch;
mod checkpointer;
mod connection;
pub mod credentials;
mod edits;
mod leases;
mod listing;
mod pacing;
pub use leases::{NodeStatus, cluster_status};
pub use records::{
    Cursor, NewMessage, NewSession, NextLaunch, Page, PageSize, PageStart, Rewound, RewoundStatus,
    RowId, RunningTurn, SessionPage, SessionQuery, SessionRecord, StoredMessage, Totals,
};
pub mod links;
pub mod postgres;
pub mod push;
mod readers;
mod records;
pub mod schedules;
mod schema;
mod shared;
pub mod shares;
pub mod sqlite;
pub mod usage;
pub mod waits;
mod words;
mod writer;

use std::borrow::Cow;
use std::collections::HashMap;

use async_trait::async_trait;

use crate::protocol::{AgentId, LaunchOptions, Principal};

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be read or written (disk full, I/O error, closed).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The conversation does not exist (any more).
    #[error("unknown session")]
    UnknownSession,
    /// A `seq` that does not name what the call needs (a rewind or fork point must be the
    /// `seq` of a stored `result`).
    #[error("{0}")]
    InvalidSeq(String),
    /// Another conversation of the principal already has that `agent_id`.
    #[error("agent_id is taken")]
    AgentExists,
    /// An import is creating the conversation with that `agent_id` right now.
    #[error("agent_id is being imported")]
    Importing,
    /// Another node owns the conversation (its lease is held and not expired).
    #[error("the conversation is live on node {0}")]
    OwnedElsewhere(String),
    /// This node's lease on the conversation was taken over by another node: it may not write
    /// to the conversation any more.
    #[error("another node took the conversation over")]
    Fenced,
    /// A search ran longer than the store allows (`store.search_timeout_ms`) and was stopped.
    #[error("the search took longer than {0} ms and was stopped; more or longer words find less")]
    SearchTimeout(u64),
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        StoreError::Unavailable(err.to_string())
    }
}

/// Text as both engines store it: PostgreSQL refuses NUL characters, which a decoded client or
/// agent string may hold, so they become U+FFFD. For what is shown or searched (titles, agent
/// ids); keys are bound as they are, so that a NUL fails that one call instead of matching
/// another key.
pub(crate) fn text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// Result alias for store calls.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Persistence of conversations and their frames.
#[async_trait]
pub trait Store:
    shares::ShareStore
    + credentials::CredentialStore
    + usage::UsageStore
    + waits::LimitWaitStore
    + audit::AuditStore
    + links::LinkStore
    + Send
    + Sync
    + 'static
{
    /// Looks up a conversation by its key.
    async fn find_session(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
    ) -> Result<Option<SessionRecord>>;

    /// Creates a conversation, or returns the existing one with the same key.
    async fn create_session(&self, new: NewSession) -> Result<SessionRecord>;

    /// Stores `messages` in one commit and returns the `seq` of the first one; the rest follow
    /// by one each. The call returns only once the rows are committed.
    async fn append(&self, row: RowId, messages: Vec<NewMessage>) -> Result<i64>;

    /// Stored frames with `seq > after_seq`, in order, at most `size` of them: its rows, and
    /// no more payload bytes than its bytes unless the first row alone has more.
    async fn messages_after(&self, row: RowId, after_seq: i64, size: PageSize) -> Result<Page>;

    /// Records the id the agent reported for the conversation.
    async fn record_agent_session(
        &self,
        row: RowId,
        sdk_session_id: &str,
        unified: bool,
    ) -> Result<()>;

    /// The `seq` of the first `result` after `seq`: where the turn after that point ended.
    async fn next_result_after(&self, row: RowId, seq: i64) -> Result<Option<i64>>;

    /// Number of user turns stored before `seq` that the agent remembers (those after the
    /// conversation's `memory_from_seq`).
    async fn prompts_before(&self, row: RowId, seq: i64) -> Result<i64>;

    /// A page of the principal's conversations, newest activity first.
    ///
    /// # Errors
    /// [`StoreError::SearchTimeout`] when a search runs longer than the store allows.
    async fn list_sessions(
        &self,
        principal: &Principal,
        query: &SessionQuery,
    ) -> Result<SessionPage>;

    /// Sets the title of a conversation.
    async fn rename_session(&self, row: RowId, title: &str) -> Result<()>;

    /// Deletes a conversation and (by cascade) every stored message of it.
    async fn delete_session(&self, row: RowId) -> Result<()>;

    /// Records the model, permission mode and launch options the agent runs with.
    async fn set_options(
        &self,
        row: RowId,
        model: Option<&str>,
        permission_mode: Option<&str>,
        launch: &LaunchOptions,
    ) -> Result<()>;

    /// For each working directory of `principal`'s conversations: how many there are, and
    /// the latest activity of any of them (RFC 3339).
    async fn project_activity(&self, principal: &Principal) -> Result<Vec<(String, i64, String)>>;

    /// The conversation with this `session_id`, whoever's it is and even while it is being
    /// imported.
    async fn find_by_session_id(&self, session_id: &str) -> Result<Option<SessionRecord>>;

    /// The agent's uuids of a conversation's stored messages.
    async fn stored_uuids(&self, row: RowId) -> Result<std::collections::HashSet<String>>;

    /// Keeps exactly the turns that ended by `to_seq` (the `seq` of a `result`): drops every
    /// stored message after it and the prompts before it of later turns (queued while those
    /// turns ran), stores `status` after them in the same transaction, and records how the
    /// agent's next launch forgets the dropped turns. `seq`s are never reused.
    ///
    /// # Errors
    /// [`StoreError::InvalidSeq`] when `to_seq` is not the `seq` of a stored `result`.
    async fn rewind(&self, row: RowId, to_seq: i64, status: RewoundStatus) -> Result<Rewound>;

    /// Creates conversation `new` holding a copy of `source`'s stored messages up to `at_seq`
    /// (a `result`'s `seq`; default the latest), with the same `seq`s, without the prompts of
    /// later turns queued meanwhile; its agent forks the source's.
    ///
    /// # Errors
    /// [`StoreError::InvalidSeq`] for a bad `at_seq`, [`StoreError::AgentExists`] when the new
    /// `agent_id` is taken.
    async fn fork(
        &self,
        source: RowId,
        at_seq: Option<i64>,
        new: NewSession,
    ) -> Result<SessionRecord>;

    /// Creates conversation `new` for an import, invisible (to lookups, lists and chats)
    /// until [`Store::finish_import`]. Its messages are then stored with [`Store::append`], in
    /// chunks that share the writer with everyone else's.
    ///
    /// # Errors
    /// [`StoreError::AgentExists`] when the `agent_id` is taken (or being imported).
    async fn begin_import(&self, new: NewSession) -> Result<SessionRecord>;

    /// Makes an imported conversation visible. Unless `remembered` (the agent has the
    /// transcript itself, as for a CLI session), its stored messages are ones its agent does
    /// not remember.
    async fn finish_import(&self, row: RowId, remembered: bool) -> Result<()>;

    /// Deletes an unfinished import, a bounded number of rows per transaction so that other
    /// writers go on meanwhile.
    async fn discard_import(&self, row: RowId) -> Result<()>;

    /// Deletes every unfinished import (left by a crash); returns how many.
    async fn discard_unfinished_imports(&self) -> Result<u64>;

    /// Closes the turns that were running when the server died (recorded by the messages'
    /// [`RunningTurn`] marks) with an error `result` each; returns how many. Prompts that
    /// never ran keep no result.
    async fn close_unfinished_turns(&self) -> Result<u64>;

    /// Makes this node the owner of conversation `row` until [`Store::release_lease`], when
    /// several nodes share the store: from then on its appends are checked against this
    /// ownership (a node that lost it gets [`StoreError::Fenced`]), and a turn that a previous
    /// owner left running is closed with an error `result`. A store only one node uses has
    /// nothing to check.
    ///
    /// # Errors
    /// [`StoreError::OwnedElsewhere`] while another node's lease on it holds,
    /// [`StoreError::UnknownSession`].
    async fn take_lease(&self, _row: RowId) -> Result<()> {
        Ok(())
    }

    /// Gives up this node's ownership of conversation `row` (the actor stopped), if it holds it.
    async fn release_lease(&self, _row: RowId) {}

    /// The node other than this one whose lease on conversation `row` holds now, if any.
    async fn lease_owner(&self, _row: RowId) -> Result<Option<String>> {
        Ok(None)
    }

    /// The node whose lease on each of `rows` holds now (this one included), for those that
    /// have one.
    async fn lease_holders(&self, _rows: &[RowId]) -> Result<HashMap<RowId, String>> {
        Ok(HashMap::new())
    }

    /// Whether several nodes may share this store: then what a resume needs beyond its rows
    /// (see [`Store::save_transcript`]) is kept in it too.
    fn is_shared(&self) -> bool {
        false
    }

    /// Keeps `content`, the agent's own record of agent session `agent_session` of
    /// conversation `row` (see [`crate::agent::Backend::transcript`]), replacing an older copy.
    async fn save_transcript(
        &self,
        _row: RowId,
        _agent_session: &str,
        _content: Vec<u8>,
    ) -> Result<()> {
        Ok(())
    }

    /// The copy [`Store::save_transcript`] kept of agent session `agent_session`, if any.
    async fn load_transcript(&self, _agent_session: &str) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    /// The conversations whose leases this node lost to another node: their actors must stop.
    /// Taken once; None for a store only one node uses.
    fn lost_leases(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<RowId>> {
        None
    }

    /// The nodes sharing the store that are up (seen within their lease length); None for a
    /// store only one node uses.
    async fn live_nodes(&self) -> Result<Option<std::collections::HashSet<String>>> {
        Ok(None)
    }

    /// Writes a consistent copy of the whole database into `to` (an empty file, or none) while
    /// the store goes on serving; false, writing nothing, for a store that is no file of the
    /// server's (PostgreSQL, which `pg_dump` copies).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the copy fails.
    async fn backup(&self, _to: &std::path::Path) -> Result<bool> {
        Ok(false)
    }

    /// Finishes pending writes and closes the database.
    async fn close(&self);
}
