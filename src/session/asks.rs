//! What an edge asks of a conversation, one typed method per command (chat, interrupt,
//! permission answer, rewind, fork), each answering with what that command does: every one
//! goes through [`Manager::acted`], which names the conversation for the caller (their own, or
//! the alias of one shared with them, whose role must allow the command), runs it, and records
//! it in the audit log.

use serde_json::{Value, json};

use super::shares::Need;
use super::{Acting, Audit, Interrupted, Manager, PendingChat, SessionError, SessionRecord};
use crate::protocol::{
    AgentId, Chat, ChatOptions, ErrorCode, Frame, PermissionDecision, Principal,
};

impl Manager {
    /// Sends a user turn to the conversation `chat.agent_id` names for `caller`: their own
    /// (created when it is new), or one shared with them as an editor, whose chat carries no
    /// options (only the owner changes them). Setting the conversation's own spending cap takes
    /// its owner.
    ///
    /// # Errors
    /// Those of [`Manager::acting`]; `forbidden` for a sharee's chat with options; those of
    /// starting the turn (`invalid_options`, `limit_exceeded`, `store_unavailable`, …).
    pub async fn chat(
        &self,
        caller: &Principal,
        mut chat: Chat,
    ) -> Result<PendingChat, SessionError> {
        let agent_id = chat.agent_id.clone();
        let detail = json!({
            "client_msg_id": chat.client_msg_id,
            "options": !chat.options.is_empty(),
        });
        let need = Need::for_chat(&chat);
        self.acted(
            caller,
            &agent_id,
            need,
            ("chat", detail),
            |acting| async move {
                if acting.shared.is_some() && chat.options != ChatOptions::default() {
                    return Err(SessionError::new(
                        ErrorCode::Forbidden,
                        "only the owner changes a shared conversation's options",
                    ));
                }
                chat.agent_id = acting.agent_id;
                chat.sender = Some(caller.clone());
                self.submit_marked(&acting.principal, chat, None).await
            },
        )
        .await
    }

    /// Stops the running turn of the conversation `agent_id` names for `caller`; with none
    /// running, cancels its wait for a rate limit, if it has one.
    ///
    /// # Errors
    /// Those of [`Manager::acting`]; `unknown_agent` when there is no such conversation.
    pub async fn interrupt_turn(
        &self,
        caller: &Principal,
        agent_id: &AgentId,
    ) -> Result<Interrupted, SessionError> {
        let ask = ("interrupt", json!({}));
        self.acted(caller, agent_id, Need::Edit, ask, |acting| async move {
            self.interrupt(&acting.principal, &acting.agent_id, caller)
                .await
        })
        .await
    }

    /// Answers a pending tool permission request of the conversation `agent_id` names for
    /// `caller`.
    ///
    /// # Errors
    /// Those of [`Manager::acting`]; `unknown_agent`, or `unknown_request` when no such
    /// request is pending.
    pub async fn answer_prompt(
        &self,
        caller: &Principal,
        agent_id: &AgentId,
        request_id: String,
        decision: PermissionDecision,
    ) -> Result<(), SessionError> {
        let behavior = match decision {
            PermissionDecision::Allow { .. } => "allow",
            PermissionDecision::Deny { .. } => "deny",
        };
        let detail = json!({ "request_id": request_id, "behavior": behavior });
        let ask = ("permission_response", detail);
        self.acted(caller, agent_id, Need::Edit, ask, |acting| async move {
            let (owner, agent_id) = (&acting.principal, &acting.agent_id);
            self.answer_permission(owner, agent_id, caller, request_id, decision)
                .await
        })
        .await
    }

    /// Drops the stored messages of the conversation `agent_id` names for `caller` after
    /// `to_seq` (the `seq` of a `result`), and makes its agent forget them; the stored
    /// `rewound` status, which every follower also gets.
    ///
    /// # Errors
    /// Those of [`Manager::acting`]; `unknown_agent`, `invalid_seq`, `busy` or
    /// `store_unavailable`.
    pub async fn rewind_to(
        &self,
        caller: &Principal,
        agent_id: &AgentId,
        to_seq: i64,
    ) -> Result<Frame, SessionError> {
        let ask = ("rewind", json!({ "to_seq": to_seq }));
        self.acted(caller, agent_id, Need::Edit, ask, |acting| async move {
            self.rewind(&acting.principal, &acting.agent_id, caller, to_seq)
                .await
        })
        .await
    }

    /// Creates `caller`'s conversation `new_agent_id` from the history, up to `at_seq`, of the
    /// conversation `agent_id` names for them (their own, or one shared with them in any role).
    ///
    /// # Errors
    /// Those of [`Manager::acting`]; `unknown_agent`, `invalid_seq`, `agent_exists`,
    /// `forbidden` or `store_unavailable`.
    pub async fn fork(
        &self,
        caller: &Principal,
        agent_id: &AgentId,
        new_agent_id: AgentId,
        at_seq: Option<i64>,
    ) -> Result<SessionRecord, SessionError> {
        let ask = (
            "fork",
            json!({ "new_agent_id": new_agent_id, "at_seq": at_seq }),
        );
        self.acted(caller, agent_id, Need::View, ask, |acting| async move {
            // The fork is the caller's own, whoever's the conversation is.
            let (owner, agent_id) = (&acting.principal, &acting.agent_id);
            self.fork_into(owner, agent_id, caller, &new_agent_id, at_seq)
                .await
        })
        .await
    }

    /// The one path of an edge's command: names the conversation `agent_id` is for `caller`
    /// when they are about to do `need` with it ([`Manager::acting`]), runs `run` on it, and
    /// records `ask` (the audit log's action and particulars) with how it went. A refused
    /// attempt on an alias is recorded for the owner of the conversation it names; nobody
    /// learns of a guessed alias.
    async fn acted<T, Fut>(
        &self,
        caller: &Principal,
        agent_id: &AgentId,
        need: Need,
        (action, detail): (&'static str, Value),
        run: impl FnOnce(Acting) -> Fut,
    ) -> Result<T, SessionError>
    where
        Fut: Future<Output = Result<T, SessionError>>,
    {
        let entry = Audit::new(caller, action);
        let acting = match self.acting(caller, agent_id, need).await {
            Ok(acting) => acting,
            Err(err) => {
                let mut detail = detail;
                detail["agent_id"] = agent_id.as_str().into();
                let mut entry = entry.detail(detail);
                if !agent_id.is_share_alias() {
                    entry = entry.on(caller, agent_id);
                } else if let Ok(Some(share)) = self.shared.store.find_share(caller, agent_id).await
                {
                    entry = entry.on(&share.owner, &share.agent_id);
                }
                return self.audited(entry, Err(err)).await;
            }
        };
        let entry = entry.detail(detail).on(&acting.principal, &acting.agent_id);
        // Boxed: a command's future (a new worktree's git among it) is large, and every edge
        // awaits this one inside its own.
        let ran = Box::pin(run(acting)).await;
        self.audited(entry, ran).await
    }
}
