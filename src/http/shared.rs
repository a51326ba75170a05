//! Streams that follow a conversation shared with their principal: each frame of it named by
//! the alias they know it by, and the feed of the principal's shares that end, read to find
//! which followed aliases no longer name a conversation for them.

use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

use crate::http::AppState;
use crate::http::auth::Principal;
use crate::protocol::{AgentId, Frame, is_share_alias};
use crate::session::{Need, Revoked};

/// A frame of conversation `agent_id` as the client names it: retagged when that is an alias.
pub(crate) fn named(agent_id: &str, frame: Frame) -> Frame {
    if is_share_alias(agent_id) {
        frame.retagged(agent_id)
    } else {
        frame
    }
}

/// The ends of the principal's shares, for a socket once it follows a shared conversation.
#[derive(Default)]
pub(super) struct Revocations {
    feed: Option<Receiver<Revoked>>,
}

/// What the feed said.
pub(super) enum Ended {
    /// This alias's share ended (or changed).
    One(AgentId),
    /// The feed fell behind: every followed alias is to be checked.
    Unknown,
    /// The feed is gone.
    Closed,
}

impl Revocations {
    /// Starts reading the feed, when following `agent_id` is following a shared conversation.
    pub(super) fn watch_for(&mut self, app: &AppState, principal: &Principal, agent_id: &AgentId) {
        if agent_id.is_share_alias() && self.feed.is_none() {
            self.feed = Some(app.manager.revocations(principal));
        }
    }

    /// The next share of the principal's to end; never, while none is watched.
    pub(super) async fn next(&mut self) -> Ended {
        let Some(feed) = &mut self.feed else {
            return std::future::pending().await;
        };
        match feed.recv().await {
            Ok(Revoked { alias }) => Ended::One(alias),
            Err(RecvError::Lagged(_)) => Ended::Unknown,
            Err(RecvError::Closed) => {
                self.feed = None;
                Ended::Closed
            }
        }
    }
}

/// Of the `aliases` a stream follows, those that `ended` may concern and that no longer name a
/// conversation `principal` may view.
pub(super) async fn gone(
    app: &AppState,
    principal: &Principal,
    ended: Ended,
    followed: impl Iterator<Item = &AgentId>,
) -> Vec<AgentId> {
    let candidates: Vec<AgentId> = match ended {
        Ended::One(alias) => vec![alias],
        Ended::Unknown => followed.filter(|a| a.is_share_alias()).cloned().collect(),
        Ended::Closed => Vec::new(),
    };
    let mut gone = Vec::new();
    for alias in candidates {
        if app
            .manager
            .acting(principal, &alias, Need::View)
            .await
            .is_err()
        {
            gone.push(alias);
        }
    }
    gone
}
