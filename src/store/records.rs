//! The records the store reads and writes: a conversation's row ([`SessionRecord`]) and what
//! creates one ([`NewSession`]), a frame to store ([`NewMessage`]) with a result's figures
//! ([`Totals`]) and the running-turn mark ([`RunningTurn`]), a stored frame ([`StoredMessage`]),
//! their pages and listing cursors, what a rewind leaves ([`Rewound`]), and how an agent's
//! next launch starts ([`NextLaunch`]).

use serde::{Deserialize, Serialize};

use crate::protocol::{AgentId, LaunchOptions, Principal, SessionId};
use crate::worktrees::Worktree;

/// A conversation's row in the store: the key its messages hang from. Not an `agent_id` (the
/// client's name for it) nor a `session_id` (the server's), and never shown to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::Type)]
#[sqlx(transparent)]
pub struct RowId(pub i64);

/// A conversation as stored in `session_info`.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct SessionRecord {
    /// Its row in the store; the foreign key of its messages.
    #[serde(skip)]
    #[sqlx(rename = "id")]
    pub row: RowId,
    /// Whose conversation this is.
    #[serde(skip)]
    #[sqlx(try_from = "String")]
    pub principal: Principal,
    /// The client's routing key.
    #[sqlx(try_from = "String")]
    pub agent_id: AgentId,
    /// Our id for the conversation.
    #[sqlx(try_from = "String")]
    pub session_id: SessionId,
    /// The id the agent reported; what `--resume` gets.
    pub sdk_session_id: Option<String>,
    /// Whether the agent adopted our `session_id`.
    pub unified: bool,
    /// `claude` or `demo`.
    pub backend: String,
    /// The first 50 characters of the first user message.
    pub title: Option<String>,
    /// The agent's working directory.
    pub cwd: String,
    /// Model the agent runs with, if one was chosen.
    pub model: Option<String>,
    /// Permission mode the agent runs with, if one was chosen.
    pub permission_mode: Option<String>,
    /// When the conversation was created (RFC 3339).
    pub created_at: String,
    /// Last stored message (RFC 3339).
    pub last_active_at: String,
    /// Number of stored messages.
    pub message_count: i64,
    /// Highest `seq` ever assigned.
    pub last_seq: i64,
    /// User turns sent.
    pub prompt_count: i64,
    /// Result messages stored.
    pub result_count: i64,
    /// Total cost reported by the agent, in US dollars.
    pub total_cost_usd: f64,
    /// Total input tokens.
    pub input_tokens: i64,
    /// Total output tokens.
    pub output_tokens: i64,
    /// Total turn duration, in milliseconds.
    pub duration_ms: i64,
    /// JSON of the [`NextLaunch`] a rewind, fork or import left for the agent's next start.
    #[serde(skip)]
    pub next_launch: Option<String>,
    /// Stored messages up to this `seq` are not in the agent's own memory.
    #[serde(skip)]
    pub memory_from_seq: i64,
    /// JSON of the [`LaunchOptions`] the agent starts with; NULL when none is set.
    #[serde(skip)]
    pub launch_options: Option<String>,
    /// JSON of the conversation's own git [`Worktree`]; NULL when it has none.
    #[serde(skip)]
    pub worktree: Option<String>,
    /// Whether a turn a rate limit ended continues by itself; None follows the server's
    /// default.
    #[serde(skip)]
    pub auto_continue: Option<bool>,
    /// When the conversation's "continue" turn is due (milliseconds since the epoch), while
    /// it waits for a rate limit to reset.
    #[serde(skip)]
    pub limit_wait_until_ms: Option<i64>,
    /// Rate-limited turns in a row it waited out.
    #[serde(skip)]
    pub limit_tries: i64,
}

impl SessionRecord {
    /// The options the agent starts with.
    pub fn launch_options(&self) -> LaunchOptions {
        self.launch_options
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default()
    }

    /// The conversation's own git worktree, if it has one.
    pub fn worktree(&self) -> Option<Worktree> {
        self.worktree
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
    }

    /// How the agent's next launch must start, when a rewind or fork decided it.
    pub fn next_launch(&self) -> Option<NextLaunch> {
        self.next_launch
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
    }
}

/// How the agent's next launch starts after a rewind or a fork; stored until the agent
/// reports its new id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NextLaunch {
    /// Fork the agent's session `from`, keeping its history up to the assistant message `at`.
    ForkAt {
        /// The agent's session id to fork.
        from: String,
        /// uuid of the last assistant message the fork keeps.
        at: String,
    },
    /// Fork the agent's whole session `from`.
    Fork {
        /// The agent's session id to fork.
        from: String,
    },
    /// Start a new agent session that remembers nothing.
    Fresh,
}

impl NextLaunch {
    /// The agent session this launch forks, if any.
    pub fn from(&self) -> Option<&str> {
        match self {
            NextLaunch::ForkAt { from, .. } | NextLaunch::Fork { from } => Some(from),
            NextLaunch::Fresh => None,
        }
    }
}

/// A page of a principal's conversations, newest activity first.
#[derive(Debug, Clone)]
pub struct SessionQuery {
    /// Most conversations returned.
    pub limit: u32,
    /// Where the page starts.
    pub start: PageStart,
    /// Only conversations whose title, or one of whose messages, has a word starting with
    /// each word of this (what a word is: `words.rs`); one without any word matches nothing.
    pub search: Option<String>,
    /// Whether to count every conversation that matches (a cost that grows with them).
    pub count: bool,
}

/// Where a page of conversations starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageStart {
    /// After skipping this many (a cost that grows with it).
    Offset(u32),
    /// Right after the conversation a [`Cursor`] names, where the page before ended.
    Before(Cursor),
}

/// Where a page of conversations ended: the last one's activity and id, written to a client
/// as an opaque token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The `last_active_at` of the last conversation of the page.
    pub last_active_at: String,
    /// Its `session_id`: among conversations with the same `last_active_at`, the page goes on
    /// with those stored before it.
    pub session_id: SessionId,
}

impl Cursor {
    /// The cursor of the page that ends with `record`.
    pub fn after(record: &SessionRecord) -> Self {
        Cursor {
            last_active_at: record.last_active_at.clone(),
            session_id: record.session_id.clone(),
        }
    }

    /// The token a client is given.
    pub fn token(&self) -> String {
        use base64::Engine as _;
        let text = format!("{}\n{}", self.last_active_at, self.session_id.as_str());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    }

    /// The cursor a client's token names; None when it is not one.
    pub fn from_token(token: &str) -> Option<Self> {
        use base64::Engine as _;
        if token.len() > 200 {
            return None;
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let (last_active_at, session_id) = text.split_once('\n')?;
        Some(Cursor {
            last_active_at: last_active_at.to_owned(),
            session_id: SessionId::parse(session_id).ok()?,
        })
    }
}

/// A page of conversations, as read.
#[derive(Debug, Clone, Default)]
pub struct SessionPage {
    /// The conversations, newest activity first.
    pub rows: Vec<SessionRecord>,
    /// Whether more follow the last one.
    pub more: bool,
    /// How many match in all, when asked.
    pub total: Option<i64>,
}

/// What a rewind did.
#[derive(Debug, Clone)]
pub struct Rewound {
    /// `seq` of the stored `rewound` status.
    pub status_seq: i64,
    /// The stored `rewound` status.
    pub status: NewMessage,
    /// How the agent starts next.
    pub next_launch: NextLaunch,
    /// Stored messages removed.
    pub dropped: u64,
    /// `seq`s at or before the rewind point that were removed: prompts of later turns that
    /// were queued while the kept turns ran.
    pub dropped_prompts: Vec<i64>,
}

/// Builds the stored status of a rewind from the `seq`s at or before the rewind point that it
/// drops (see [`Rewound::dropped_prompts`]).
pub type RewoundStatus = Box<dyn FnOnce(&[i64]) -> NewMessage + Send>;

/// What a new conversation starts with.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Whose conversation.
    pub principal: Principal,
    /// The client's routing key.
    pub agent_id: AgentId,
    /// Our id.
    pub session_id: SessionId,
    /// Backend name.
    pub backend: String,
    /// Working directory of the agent.
    pub cwd: String,
    /// Chosen model.
    pub model: Option<String>,
    /// Chosen permission mode.
    pub permission_mode: Option<String>,
    /// Options the agent starts with.
    pub launch_options: LaunchOptions,
    /// Its own git worktree, if it works in one.
    pub worktree: Option<Worktree>,
}

/// The stored form of a conversation's worktree.
pub(super) fn worktree_json(worktree: Option<&Worktree>) -> Option<String> {
    worktree.map(|w| serde_json::to_string(w).expect("serializes"))
}

/// Usage figures of one `result`, added to the conversation's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Cost in US dollars.
    pub cost_usd: f64,
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Duration in milliseconds.
    pub duration_ms: i64,
}

/// What storing a message says about the conversation's running turn. The store keeps the
/// running turn's user `seq`, so that a start-up after a crash closes exactly that turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningTurn {
    /// This message, a user prompt, starts a turn that runs now.
    Starts,
    /// The running turn ends with this message (its `result`); the queued turn whose user
    /// message has `seq` `next` runs from now on, if any.
    Ends {
        /// The user `seq` of the turn that runs next.
        next: Option<i64>,
    },
}

/// A frame to store; its `seq` is assigned by the store.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// `user`, `system`, `assistant`, `result`, `status`, ...
    pub message_type: &'static str,
    /// The JSON object stored (for agent messages: the message verbatim).
    pub payload: String,
    /// The agent's uuid for the message.
    pub sdk_uuid: Option<String>,
    /// True for the user's own chat message (starts a turn).
    pub prompt: bool,
    /// On a result: uuid of the turn's last assistant message.
    pub turn_anchor: Option<String>,
    /// Storage time (RFC 3339); also the frame's `timestamp`.
    pub created_at: String,
    /// Becomes the title if the conversation has none yet.
    pub title: Option<String>,
    /// On a result: what to add to the totals.
    pub totals: Option<Totals>,
    /// Whether a turn starts or ends here.
    pub running: Option<RunningTurn>,
    /// On the first message of a conversation a schedule's `mode: "new"` run starts: that
    /// schedule, kept with the conversation (counted against the hourly limit of such runs).
    pub schedule_id: Option<String>,
}

impl NewMessage {
    /// A message with no extras, stamped now.
    pub fn new(message_type: &'static str, payload: String) -> Self {
        NewMessage {
            message_type,
            payload,
            sdk_uuid: None,
            prompt: false,
            turn_anchor: None,
            created_at: crate::protocol::now_rfc3339(),
            title: None,
            totals: None,
            running: None,
            schedule_id: None,
        }
    }

    /// The `result` that closes a turn which ended without the agent's own result: the error
    /// result of [`crate::protocol::error_result`] for `terminal_reason`, adding nothing to the
    /// totals, where `ends` says which turn runs next.
    pub fn error_result(session_id: &str, terminal_reason: &str, ends: RunningTurn) -> Self {
        let payload = crate::protocol::error_result(session_id, terminal_reason);
        let mut result = NewMessage::new("result", payload);
        result.totals = Some(Totals::default());
        result.running = Some(ends);
        result
    }
}

/// A stored frame, as read back.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct StoredMessage {
    /// Position in the conversation.
    pub seq: i64,
    /// Frame type.
    pub message_type: String,
    /// The agent's uuid, if any.
    pub sdk_uuid: Option<String>,
    /// The stored JSON object.
    pub payload: String,
    /// Storage time (RFC 3339).
    pub created_at: String,
    /// For a `result`: what that turn cost, in US dollars.
    pub turn_cost_usd: Option<f64>,
}

/// How much one read of stored frames returns at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSize {
    /// Most rows.
    pub rows: u32,
    /// Most payload bytes in all; the first row is returned whatever its size, so that a
    /// reader always moves on.
    pub bytes: usize,
}

impl PageSize {
    /// At most `rows` rows, whatever their size.
    pub fn rows(rows: u32) -> Self {
        PageSize {
            rows,
            bytes: usize::MAX,
        }
    }
}

/// Stored frames read in one call.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The rows, in `seq` order.
    pub rows: Vec<StoredMessage>,
    /// Whether more rows follow the last one.
    pub more: bool,
}
