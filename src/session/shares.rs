//! Conversations shared with other principals: granting, changing and revoking a role, and
//! the one check every edge makes before acting on a conversation by the `agent_id` it was
//! given — its own, or the alias of one shared with it — which names the conversation to act
//! on and refuses what the caller's role does not allow (the commands make it in `asks`).

use dashmap::DashMap;
use tokio::sync::broadcast;

use super::errors::{store_error, store_failure, unknown_agent};
use super::{Audit, Manager, SessionError, SessionRecord};
use crate::protocol::{AgentId, ErrorCode, Principal, Role};
use crate::store::shares::ShareRow;

/// What an edge is about to do with a conversation, from the least to the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// Follow, read, export or fork it.
    View,
    /// Chat, interrupt, answer permission prompts, rewind, review its worktree.
    Edit,
    /// Share, rename, delete, change its options, schedule it: the owner's alone.
    Own,
}

impl Need {
    /// What sending `chat` needs: to edit, or to own the conversation when it sets the
    /// conversation's own spending cap.
    pub(super) fn for_chat(chat: &crate::protocol::Chat) -> Need {
        match chat.options.budget_usd {
            Some(_) => Need::Own,
            None => Need::Edit,
        }
    }

    /// Whether a sharee in `role` may.
    fn allowed(self, role: Role) -> bool {
        match self {
            Need::View => true,
            Need::Edit => role == Role::Editor,
            Need::Own => false,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Need::View => "view",
            Need::Edit => "act on",
            Need::Own => "manage",
        }
    }
}

/// The conversation an edge acts on, as the core knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acting {
    /// Whose conversation it is: what the core is called with.
    pub principal: Principal,
    /// The owner's `agent_id` for it.
    pub agent_id: AgentId,
    /// The alias the caller named it by and its role, when it is shared with the caller.
    pub shared: Option<(AgentId, Role)>,
}

/// A share's end, sent to the sharee's open streams: they stop following the alias.
#[derive(Debug, Clone)]
pub struct Revoked {
    /// The alias that no longer names a conversation for them.
    pub alias: AgentId,
}

/// The revocation feeds, one per principal with streams that follow a shared conversation.
#[derive(Default)]
pub(super) struct Revocations {
    by_principal: DashMap<Principal, broadcast::Sender<Revoked>>,
}

impl Revocations {
    fn publish(&self, principal: &Principal, alias: AgentId) {
        if let Some(feed) = self.by_principal.get(principal) {
            let _ = feed.send(Revoked { alias });
        }
        self.by_principal
            .remove_if(principal, |_, feed| feed.receiver_count() == 0);
    }
}

impl Manager {
    /// The conversation `agent_id` names for `principal` when they are about to do `need`
    /// with it: their own, or one shared with them under that alias in a role that allows it.
    ///
    /// # Errors
    /// `unknown_agent` for an alias nothing is shared under for them (exactly as for an
    /// unknown id of their own); `forbidden` when their role does not allow `need`;
    /// `store_unavailable`.
    pub async fn acting(
        &self,
        principal: &Principal,
        agent_id: &AgentId,
        need: Need,
    ) -> Result<Acting, SessionError> {
        if !agent_id.is_share_alias() {
            return Ok(Acting {
                principal: principal.clone(),
                agent_id: agent_id.clone(),
                shared: None,
            });
        }
        let share = self
            .shared
            .store
            .find_share(principal, agent_id)
            .await
            .map_err(store_failure)?
            .ok_or_else(|| unknown_agent(agent_id))?;
        if !need.allowed(share.role) {
            return Err(SessionError::new(
                ErrorCode::Forbidden,
                format!(
                    "conversation `{agent_id}` is shared with you as {}: you may not {} it",
                    share.role.as_str(),
                    need.what()
                ),
            ));
        }
        Ok(Acting {
            principal: share.owner,
            agent_id: share.agent_id,
            shared: Some((share.alias, share.role)),
        })
    }

    /// Shares `owner`'s conversation `agent_id` with `with` as `role`, or changes the role
    /// it has (a downgrade holds from the next thing they ask).
    ///
    /// # Errors
    /// `unknown_agent`; `invalid_request` for the owner themself or a principal that can't
    /// sign in; `store_unavailable`.
    pub async fn share(
        &self,
        owner: &Principal,
        agent_id: &AgentId,
        with: &Principal,
        role: Role,
    ) -> Result<ShareRow, SessionError> {
        let entry = Audit::new(owner, "share")
            .on(owner, agent_id)
            .detail(serde_json::json!({ "with": with, "role": role }));
        let shared = async {
            let record = self.share_target(owner, agent_id, with).await?;
            let share = self
                .shared
                .store
                .put_share(record.row, with, role)
                .await
                .map_err(|e| store_error(e, agent_id))?;
            tracing::info!(%owner, %agent_id, %with, role = role.as_str(), "shared");
            Ok(share)
        };
        self.audited(entry, shared.await).await
    }

    /// `owner`'s conversation `agent_id`, checked to be one they may share with `with`.
    pub(super) async fn share_target(
        &self,
        owner: &Principal,
        agent_id: &AgentId,
        with: &Principal,
    ) -> Result<SessionRecord, SessionError> {
        let record = self.get(owner, agent_id).await?;
        if with == owner {
            return Err(SessionError::new(
                ErrorCode::InvalidRequest,
                "you own this conversation: share it with someone else",
            ));
        }
        if !self.shared.config.auth.principal_exists(with) {
            return Err(SessionError::new(
                ErrorCode::InvalidRequest,
                format!("no principal `{with}` can sign in to this server"),
            ));
        }
        Ok(record)
    }

    /// Ends the share of `owner`'s conversation `agent_id` with `with`: their open streams of
    /// it get a `status` `access_revoked` and nothing more of it. Whether there was one.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn unshare(
        &self,
        owner: &Principal,
        agent_id: &AgentId,
        with: &Principal,
    ) -> Result<bool, SessionError> {
        let entry = Audit::new(owner, "unshare")
            .on(owner, agent_id)
            .detail(serde_json::json!({ "with": with }));
        let ended = async {
            let record = self.get(owner, agent_id).await?;
            let shares = self.shares(owner, agent_id).await?;
            let removed = self
                .shared
                .store
                .delete_share(record.row, with)
                .await
                .map_err(|e| store_error(e, agent_id))?;
            if let Some(share) = shares.into_iter().find(|s| &s.principal == with) {
                self.revoked(with, share.alias);
                tracing::info!(%owner, %agent_id, %with, "share revoked");
            }
            Ok(removed)
        };
        self.audited(entry, ended.await).await
    }

    /// Tells `principal`'s open streams of `alias`, on every node, that its share ended.
    pub(super) fn revoked(&self, principal: &Principal, alias: AgentId) {
        if let Some(bus) = &self.shared.bus {
            bus.revoked(principal, &alias);
        }
        self.revoked_here(principal, alias);
    }

    /// Tells `principal`'s open streams of `alias` on this node that its share ended.
    pub(super) fn revoked_here(&self, principal: &Principal, alias: AgentId) {
        self.shared.revocations.publish(principal, alias);
    }

    /// Everyone `owner`'s conversation `agent_id` is shared with.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn shares(
        &self,
        owner: &Principal,
        agent_id: &AgentId,
    ) -> Result<Vec<ShareRow>, SessionError> {
        let record = self.get(owner, agent_id).await?;
        self.shared
            .store
            .shares_of(record.row)
            .await
            .map_err(|e| store_error(e, agent_id))
    }

    /// The first `limit` conversations shared with `principal`, oldest share first, each with
    /// its record.
    ///
    /// # Errors
    /// `store_unavailable`.
    pub async fn shared_with(
        &self,
        principal: &Principal,
        limit: u32,
    ) -> Result<Vec<(ShareRow, SessionRecord)>, SessionError> {
        self.shared
            .store
            .shared_with(principal, limit)
            .await
            .map_err(store_failure)
    }

    /// The shares of `principal` that end from now on, for a stream following one.
    pub fn revocations(&self, principal: &Principal) -> broadcast::Receiver<Revoked> {
        self.shared
            .revocations
            .by_principal
            .entry(principal.clone())
            .or_insert_with(|| broadcast::channel(16).0)
            .subscribe()
    }
}
