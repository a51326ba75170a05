//! Rewind and fork, whatever the engine: what they decide, written once over the few
//! statements ([`EditTx`]) each engine runs inside its own transaction.

use async_trait::async_trait;

use super::{
    NewMessage, NewSession, NextLaunch, Result, Rewound, RewoundStatus, RowId, StoreError,
};
use crate::protocol::LaunchOptions;

/// The statements of a rewind or a fork, run inside one transaction that holds the
/// conversation's write lock.
#[async_trait]
pub(super) trait EditTx: Send {
    /// The `message_type` of the stored message `seq` of `row`.
    async fn message_type(&mut self, row: RowId, seq: i64) -> Result<Option<String>>;
    /// `seq`s of the prompts at or before `at` that belong to turns after the one `at` ends
    /// (see [`later_prompts`]'s rule).
    async fn later_prompts(&mut self, row: RowId, at: i64) -> Result<Vec<i64>>;
    /// `sdk_session_id`, `next_launch` and `memory_from_seq` of `row`.
    async fn agent_row(
        &mut self,
        row: RowId,
    ) -> Result<Option<(Option<String>, Option<String>, i64)>>;
    /// The `turn_anchor` of the last `result` at or before `seq` that has one.
    async fn anchor_at(&mut self, row: RowId, seq: i64) -> Result<Option<String>>;
    /// Deletes the messages of `row` after `seq`; returns how many.
    async fn delete_after(&mut self, row: RowId, seq: i64) -> Result<u64>;
    /// Deletes the messages `seqs` of `row`; returns how many.
    async fn delete_seqs(&mut self, row: RowId, seqs: &[i64]) -> Result<u64>;
    /// Records how the agent's next launch starts.
    async fn set_next_launch(&mut self, row: RowId, launch: &str, memory_from: i64) -> Result<()>;
    /// Recomputes the message, prompt and result counts of `row` from its rows.
    async fn recount(&mut self, row: RowId) -> Result<()>;
    /// Stores `status` as the next message of `row`; returns its seq.
    async fn append_status(&mut self, row: RowId, status: &NewMessage) -> Result<i64>;
    /// The `seq` of the last stored `result` of `row`.
    async fn last_result(&mut self, row: RowId) -> Result<Option<i64>>;
    /// How many messages of the agent's own (user, assistant, system, result) follow `seq`.
    async fn agent_messages_after(&mut self, row: RowId, seq: i64) -> Result<i64>;
    /// Creates conversation `fork` with the title of `source` (and its words); None when its key
    /// is taken.
    async fn insert_fork(&mut self, source: RowId, fork: &ForkRow<'_>) -> Result<Option<RowId>>;
    /// Copies the messages of `source` up to `at` but `except` into `fork`, same `seq`s, with
    /// their words.
    async fn copy_messages(
        &mut self,
        source: RowId,
        fork: RowId,
        at: i64,
        except: &[i64],
    ) -> Result<()>;
}

/// The row of a new fork.
pub(super) struct ForkRow<'a> {
    pub new: &'a NewSession,
    pub created_at: String,
    pub last_seq: i64,
    pub next_launch: String,
    pub memory_from_seq: i64,
}

/// The stored form of launch options: NULL when none is set.
pub(super) fn launch_json(options: &LaunchOptions) -> Option<String> {
    (!options.is_empty()).then(|| serde_json::to_string(options).expect("options serialize"))
}

/// Checks that `seq` is the `seq` of a stored `result` of `row`.
async fn check_result_seq(tx: &mut impl EditTx, row: RowId, seq: i64) -> Result<()> {
    match tx.message_type(row, seq).await?.as_deref() {
        Some("result") => Ok(()),
        Some(other) => Err(StoreError::InvalidSeq(format!(
            "seq {seq} is a `{other}`, not the `result` that ends a turn"
        ))),
        None => Err(StoreError::InvalidSeq(format!(
            "no stored message has seq {seq}"
        ))),
    }
}

/// The agent session a launch of `row` continues, the pending launch, and `memory_from_seq`.
async fn agent_base(
    tx: &mut impl EditTx,
    row: RowId,
) -> Result<(Option<String>, Option<NextLaunch>, i64)> {
    let (sdk, pending, memory_from) = tx.agent_row(row).await?.ok_or(StoreError::UnknownSession)?;
    let pending: Option<NextLaunch> = pending.and_then(|p| serde_json::from_str(&p).ok());
    let base = sdk.or_else(|| pending.as_ref().and_then(|p| p.from().map(str::to_owned)));
    Ok((base, pending, memory_from))
}

/// Keeps exactly the turns that ended by `to_seq` (see [`super::Store::rewind`]).
pub(super) async fn rewind(
    tx: &mut impl EditTx,
    row: RowId,
    to_seq: i64,
    status: RewoundStatus,
) -> Result<Rewound> {
    check_result_seq(tx, row, to_seq).await?;
    let later = tx.later_prompts(row, to_seq).await?;
    let (base, _, memory_from) = agent_base(tx, row).await?;
    let next_launch = match (base, tx.anchor_at(row, to_seq).await?) {
        (Some(from), Some(at)) => NextLaunch::ForkAt { from, at },
        _ => NextLaunch::Fresh,
    };
    let memory_from = match next_launch {
        NextLaunch::Fresh => to_seq,
        _ => memory_from.min(to_seq),
    };
    let mut dropped = tx.delete_after(row, to_seq).await?;
    dropped += tx.delete_seqs(row, &later).await?;
    let launch = serde_json::to_string(&next_launch).expect("serializes");
    tx.set_next_launch(row, &launch, memory_from).await?;
    tx.recount(row).await?;
    let status = status(&later);
    let status_seq = tx.append_status(row, &status).await?;
    Ok(Rewound {
        status_seq,
        status,
        next_launch,
        dropped,
        dropped_prompts: later,
    })
}

/// Creates the fork `new` of `source` at `at_seq` (see [`super::Store::fork`]).
pub(super) async fn fork(
    tx: &mut impl EditTx,
    source: RowId,
    at_seq: Option<i64>,
    new: &NewSession,
) -> Result<()> {
    let at = match at_seq {
        Some(seq) => {
            check_result_seq(tx, source, seq).await?;
            seq
        }
        None => tx.last_result(source).await?.ok_or_else(|| {
            StoreError::InvalidSeq("the conversation has no finished turn to fork".into())
        })?,
    };
    let (base, pending, memory_from) = agent_base(tx, source).await?;
    // Forking whole is only right when nothing the agent did follows the fork point and no
    // earlier rewind is waiting to cut the agent's own history.
    let later = tx.agent_messages_after(source, at).await?;
    let next_launch = match (base, tx.anchor_at(source, at).await?) {
        (_, _) if matches!(pending, Some(NextLaunch::Fresh)) => NextLaunch::Fresh,
        (Some(from), _) if later == 0 && pending.is_none() => NextLaunch::Fork { from },
        (Some(from), Some(at)) => NextLaunch::ForkAt { from, at },
        _ => NextLaunch::Fresh,
    };
    let memory_from = match next_launch {
        NextLaunch::Fresh => at,
        _ => memory_from.min(at),
    };
    let row = ForkRow {
        new,
        created_at: crate::protocol::now_rfc3339(),
        last_seq: at,
        next_launch: serde_json::to_string(&next_launch).expect("serializes"),
        memory_from_seq: memory_from,
    };
    let fork = tx
        .insert_fork(source, &row)
        .await?
        .ok_or(StoreError::AgentExists)?;
    // The prompts of turns after `at` stay behind, like everything else of those turns.
    let later = tx.later_prompts(source, at).await?;
    tx.copy_messages(source, fork, at, &later).await?;
    tx.recount(fork).await
}
