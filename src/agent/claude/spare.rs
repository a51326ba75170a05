//! The pre-warmed spare: one initialized CLI started with a fresh id, adopted by the next
//! new conversation and replaced at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::Instrument;

use super::ClaudeSettings;
use super::control;
use super::models::Models;
use crate::agent::Launch;
use crate::agent::process::Proc;
use crate::protocol::SessionId;

/// How often the spare process is checked for life.
const SPARE_CHECK: Duration = Duration::from_secs(1);

/// The pre-warmed spare: an initialized process started with a fresh `--session-id`.
#[derive(Default)]
pub(super) struct Spare {
    /// The spare waiting for a conversation.
    ready: Mutex<Option<(SessionId, Proc)>>,
    /// Spares handed out by id, waiting for their conversation's first spawn.
    claimed: Mutex<HashMap<SessionId, Proc>>,
    /// Wakes the keeper to start a new spare.
    refill: Arc<Notify>,
}

impl Spare {
    /// Hands out the ready spare's id (its process waits for [`Self::claim`]) and asks for a
    /// replacement.
    pub(super) fn take(&self) -> Option<SessionId> {
        let (id, proc) = self.ready.lock().expect("spare lock").take()?;
        self.claimed
            .lock()
            .expect("spare lock")
            .insert(id.clone(), proc);
        self.refill.notify_one();
        Some(id)
    }

    /// The process of a spare handed out under `session_id`, if it is still alive.
    pub(super) fn claim(&self, session_id: &str) -> Option<Proc> {
        let mut proc = self
            .claimed
            .lock()
            .expect("spare lock")
            .remove(session_id)?;
        proc.alive().then_some(proc)
    }
}

/// Keeps one spare ready while the backend exists; a spare that dies is replaced at once.
pub(super) async fn keep_spare(
    settings: Arc<ClaudeSettings>,
    spare: Weak<Spare>,
    models: Arc<Models>,
) {
    loop {
        let Some(slot) = spare.upgrade() else { return };
        let needs_one = {
            let mut ready = slot.ready.lock().expect("spare lock");
            let alive = ready.as_mut().is_some_and(|(_, proc)| proc.alive());
            if !alive {
                *ready = None;
            }
            !alive
        };
        if needs_one {
            let id = SessionId::new();
            let span = tracing::info_span!("claude_spare", session_id = %id);
            match start_spare(&settings, &id, &models).instrument(span).await {
                Some(proc) => *slot.ready.lock().expect("spare lock") = Some((id, proc)),
                None => {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    continue;
                }
            }
        }
        let refill = slot.refill.clone();
        drop(slot);
        let _ = tokio::time::timeout(SPARE_CHECK, refill.notified()).await;
    }
}

/// Starts and initializes a spare under `id`, in its own workspace; None when it failed.
async fn start_spare(settings: &ClaudeSettings, id: &str, models: &Models) -> Option<Proc> {
    let cwd = settings.workspaces.join(id);
    let args = settings.args(
        &Launch::New {
            session_id: id.to_owned(),
        },
        None,
        None,
        &crate::protocol::LaunchOptions::default(),
    );
    match Proc::start(settings.proc_spec(&args, &cwd, &Default::default())) {
        Ok(mut proc) => match control::initialize(&mut proc, settings.init_timeout()).await {
            Ok(answer) => {
                models.learn(&answer);
                Some(proc)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the spare CLI did not start");
                proc.stop(settings.stop_grace()).await;
                let _ = std::fs::remove_dir(&cwd);
                None
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the spare CLI");
            None
        }
    }
}
