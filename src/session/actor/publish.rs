//! Publishing an actor's frames: stored ones after their commit, to the conversation's followers on
//! every node and to the principal's activity watchers and devices.

use std::sync::atomic::Ordering;

use serde_json::Value;

use super::Actor;
use super::figures::ResultFigures;
use crate::protocol::{self, Activity, ErrorCode, Frame, Role};
use crate::push::Event;
use crate::session::SessionError;
use crate::store::{NewMessage, StoreError};

/// A frame to publish after the store has committed the batch it belongs to.
pub(super) enum Out {
    Stored(NewMessage),
    Live(&'static str, String),
    Status(&'static str, String),
}

impl Actor {
    pub(super) fn publish(&self, frame: Frame) {
        if let Some(bus) = &self.shared.bus {
            bus.publish(self.conversation.row, &frame);
        }
        // No receiver is fine: nobody is watching this conversation right now.
        let _ = self.events.send(frame);
    }

    /// Tells the principal's watchers what happened (the frame is built only when someone
    /// watches), and its devices by Web Push when a tool waits or a turn ended. `payload` is the stored message's, for the details the activity carries.
    pub(super) fn publish_activity(&self, activity: Activity, seq: i64, payload: &str) {
        let tag = self.conversation.tag();
        self.shared
            .activity
            .publish(&self.conversation.principal, || {
                let detail = match activity {
                    Activity::PermissionRequest | Activity::TurnEnded => {
                        serde_json::from_str::<Value>(payload).unwrap_or_default()
                    }
                    _ => Value::Null,
                };
                protocol::activity_frame(
                    tag,
                    activity,
                    seq,
                    detail["tool_name"].as_str(),
                    (activity == Activity::TurnEnded)
                        .then(|| detail["is_error"].as_bool() == Some(true)),
                )
            });
        let event = match activity {
            Activity::PermissionRequest => Event::Permission,
            Activity::TurnEnded if self.scheduled_turn => Event::Schedule,
            Activity::TurnEnded => Event::Turn,
            Activity::TurnStarted | Activity::PermissionResolved => return,
        };
        // The turns a shutdown ends are no news to anyone's phone.
        if !self.shared.closing.load(Ordering::Acquire) {
            let owner = (&self.conversation.principal, &self.conversation.agent_id);
            self.shared.push.notice(owner, owner, event, payload);
            self.push_to_editors(event, payload);
        }
    }

    /// Pushes `event` to the principals the conversation is shared with as editors (who may
    /// answer it), under their alias for it; the shares are read in the background, and only
    /// while somebody has a push subscription.
    fn push_to_editors(&self, event: Event, payload: &str) {
        if !self.shared.push.anyone_subscribed() {
            return;
        }
        let shared = self.shared.clone();
        let conversation = self.conversation.clone();
        let payload = payload.to_owned();
        tokio::spawn(async move {
            let shares = match shared.store.shares_of(conversation.row).await {
                Ok(shares) => shares,
                Err(err) => {
                    tracing::warn!(error = %err, "push: could not read a conversation's shares");
                    return;
                }
            };
            let owner = (&conversation.principal, &conversation.agent_id);
            for share in shares.iter().filter(|s| s.role == Role::Editor) {
                (shared.push).notice(owner, (&share.principal, &share.alias), event, &payload);
            }
        });
    }

    pub(super) fn publish_status(&self, status: &str, detail: &str) {
        match status {
            "busy" => self.busy.store(true, Ordering::Release),
            "idle" => self.busy.store(false, Ordering::Release),
            _ => {}
        }
        self.publish(protocol::status_frame(
            self.conversation.tag(),
            status,
            detail,
        ));
    }

    /// A status of the agent starting or running (`creating`, `resuming`, `active`): in a
    /// worktree, it names the worktree, its branch and its base, in `detail` too.
    pub(super) fn publish_agent_status(&self, status: &str, detail: &str) {
        let Some(worktree) = &self.conversation.worktree else {
            self.publish_status(status, detail);
            return;
        };
        let path = self.cwd.to_string_lossy();
        let info = protocol::WorktreeInfo {
            branch: &worktree.branch,
            base: &worktree.base,
            path: &path,
        };
        let detail = format!(
            "{detail} in its worktree {path} on branch `{}` (from `{}`)",
            info.branch, info.base
        );
        self.publish(protocol::worktree_status_frame(
            self.conversation.tag(),
            status,
            &detail,
            info,
        ));
    }

    pub(super) fn store_failed(&self, err: &StoreError) {
        if matches!(err, StoreError::Fenced) {
            self.taken_over.store(true, Ordering::Release);
            return;
        }
        tracing::error!(agent_id = %self.conversation.agent_id, error = %err, "could not store agent output");
        self.publish_error(SessionError::new(
            ErrorCode::StoreUnavailable,
            "the store is unavailable; agent output was not saved",
        ));
    }

    /// Tells the conversation's followers of a failure that no request of theirs caused.
    pub(super) fn publish_error(&self, err: SessionError) {
        self.shared.metrics.error(err.code.as_str());
        let err = err.into_frame(&self.conversation.agent_id, None);
        self.publish(protocol::error_frame(&err));
    }

    /// Stores the stored frames of `outs` in one append, then publishes all in order.
    pub(super) async fn publish_batch(&mut self, outs: Vec<Out>) {
        if outs.is_empty() {
            return;
        }
        let stored: Vec<NewMessage> = outs
            .iter()
            .filter_map(|o| match o {
                Out::Stored(m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        // What a turn cost is queued before its result: the writer commits it with the result
        // or earlier, so a budget read after the result counts it. Every stored result has a
        // ledger row, a turn that ended without the agent's own (a crash, say) at no cost.
        for m in &stored {
            if m.message_type == "result"
                && let Some(totals) = m.totals
            {
                let figures = ResultFigures::read(&m.payload);
                self.record_usage(&figures, totals, &m.created_at).await;
            }
        }
        let mut seq = None;
        let count = stored.len() as i64;
        let idle_after = std::mem::take(&mut self.idle_after_batch);
        if !stored.is_empty() {
            match self
                .shared
                .store
                .append(self.conversation.row, stored)
                .await
            {
                Ok(first) => {
                    seq = Some(first);
                    self.last_seq = first + count - 1;
                    if idle_after {
                        // Stored, and before any client sees it: a client acting on the
                        // result (merging the worktree, say) finds the conversation idle,
                        // though the `idle` status follows a little later.
                        self.busy.store(false, Ordering::Release);
                    }
                }
                Err(err) => self.store_failed(&err),
            }
        }
        let tag = self.conversation.tag();
        // Live frames of one wake-up share one timestamp: formatting the clock is a good part of
        // a streamed delta's cost.
        let mut live_at: Option<String> = None;
        for out in outs {
            match out {
                Out::Stored(m) => {
                    if let Some(s) = seq.as_mut() {
                        let activity = match m.message_type {
                            "result" => Some(Activity::TurnEnded),
                            "permission_request" => Some(Activity::PermissionRequest),
                            "permission_resolved" => Some(Activity::PermissionResolved),
                            _ => None,
                        };
                        if let Some(activity) = activity {
                            self.publish_activity(activity, *s, &m.payload);
                        }
                        self.publish(protocol::session_frame(
                            tag,
                            m.message_type,
                            Some(*s),
                            &m.created_at,
                            &m.payload,
                            m.totals.map(|t| t.cost_usd),
                        ));
                        *s += 1;
                    }
                }
                Out::Live(kind, raw) => {
                    let at = live_at.get_or_insert_with(protocol::now_rfc3339);
                    self.publish(protocol::session_frame(tag, kind, None, at, &raw, None));
                }
                Out::Status(status, detail) => self.publish_status(status, &detail),
            }
        }
    }
}
