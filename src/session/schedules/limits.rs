//! What stops a schedule's runs besides its definition: the pause of a schedule whose principal can no longer sign in, and the hourly limit of runs that start conversations.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use dashmap::DashMap;

use super::{LastRun, Scheduler};
use crate::protocol;
use crate::protocol::Principal;
use crate::store::schedules::ScheduleRow;

/// The window of `schedules.max_new_runs_per_hour`.
const HOUR: Duration = Duration::from_secs(3600);

/// A principal's turn to count and start a `mode: "new"` run: its lock is forgotten when the
/// turn ends and nobody else waits for it.
pub(super) struct NewRunTurn<'a> {
    locks: &'a DashMap<Principal, Arc<tokio::sync::Mutex<()>>>,
    principal: Principal,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for NewRunTurn<'_> {
    fn drop(&mut self) {
        // The guard holds the lock too: released first, the map's is then the only one left
        // unless another run waits (it took its copy under the map's shard lock).
        drop(self.guard.take());
        self.locks
            .remove_if(&self.principal, |_, lock| Arc::strong_count(lock) == 1);
    }
}

impl Scheduler {
    /// Whether the principal of a schedule can still sign in (see
    /// [`crate::config::AuthConfig::principal_exists`]).
    pub(super) fn principal_exists(&self, principal: &Principal) -> bool {
        self.inner
            .manager
            .shared
            .config
            .auth
            .principal_exists(principal)
    }

    /// Pauses a schedule whose principal can no longer sign in, recording why: nobody could
    /// see or stop its runs. Its owner may resume it once it can sign in again; an admin sees
    /// it in every principal's schedules.
    pub(super) async fn pause_orphan(&self, row: ScheduleRow) {
        let last = LastRun {
            agent_id: row.agent_id.clone(),
            seq: None,
            outcome: "paused".into(),
            at: protocol::now_rfc3339(),
            detail: Some(format!(
                "principal `{}` can no longer sign in (it is not among the server's tokens); \
                 the schedule is paused",
                row.principal
            )),
            trigger: "tick".into(),
        };
        let text = serde_json::to_string(&last).expect("runs serialize");
        // Only its state and latest run: a change made since it was read stays.
        match self
            .inner
            .store
            .pause_schedule(&row.id, &protocol::now_rfc3339(), &text)
            .await
        {
            Ok(true) => {
                tracing::warn!(schedule = %row.id, principal = %row.principal,
                    "paused a schedule whose principal can no longer sign in");
                self.inner.manager.shared.metrics.scheduled_run("paused");
            }
            Ok(false) => {}
            Err(err) => tracing::warn!(error = %err, schedule = %row.id, "cannot pause a schedule"),
        }
    }

    /// Takes one of `principal`'s `mode: "new"` runs of the last hour, counted from the
    /// conversations its schedules started (in the store, so that a restart or another node
    /// does not start the count again): the turn to start one, held until it is stored, or
    /// the detail of why not. Without a limit (0) there is nothing to count or wait for.
    pub(super) async fn take_new_run(
        &self,
        principal: &Principal,
    ) -> Result<Option<NewRunTurn<'_>>, String> {
        let max = self.inner.max_new_runs_per_hour;
        if max == 0 {
            return Ok(None);
        }
        let lock = self
            .inner
            .new_runs
            .entry(principal.clone())
            .or_default()
            .clone();
        let turn = NewRunTurn {
            locks: &self.inner.new_runs,
            principal: principal.clone(),
            guard: Some(lock.lock_owned().await),
        };
        let hour = chrono::TimeDelta::from_std(HOUR).expect("an hour");
        let since = (Utc::now() - hour).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let started = self
            .inner
            .store
            .scheduled_conversations_since(principal, &since)
            .await
            .map_err(|err| format!("store_unavailable: {err}"))?;
        if started >= max as i64 {
            return Err(format!(
                "at most {max} runs that start a conversation per principal per hour \
                 (schedules.max_new_runs_per_hour)"
            ));
        }
        Ok(Some(turn))
    }
}
