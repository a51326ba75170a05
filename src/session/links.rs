//! Share links: the owner of a conversation makes a link that gives whoever opens it (signed
//! in) a share in a role; a link is a token `ID.SECRET` of which only the SHA-256 of the secret
//! is stored, and it ends when it expires, is used up, or is revoked.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::errors::{store_error, store_failure};
use super::{Audit, Manager, SessionError};
use crate::protocol::{self, AgentId, ErrorCode, Principal, Role};
use crate::store::links::LinkRow;
use crate::store::shares::ShareRow;

/// Longest a link may live: 30 days.
pub const MAX_LINK_SECS: u64 = 30 * 24 * 3600;
/// Most uses a link may be given.
pub const MAX_LINK_USES: u32 = 1000;
/// Characters of a link's public id (hex).
const ID_CHARS: usize = 16;
/// Characters of a link's secret (hex: 244 random bits of two v4 UUIDs).
const SECRET_CHARS: usize = 64;

/// A link just made: its row, and the token (shown once, never stored).
pub struct NewLink {
    /// The stored link.
    pub link: LinkRow,
    /// `ID.SECRET`: what opens it.
    pub token: String,
}

/// The hash a link's secret is stored as.
fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Whether `s` is `n` lowercase hex digits.
fn is_hex(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn unknown_link() -> SessionError {
    SessionError::new(
        ErrorCode::UnknownLink,
        "no share link has that token (it may have been revoked)",
    )
}

impl Manager {
    /// Makes a link to `owner`'s conversation `agent_id` giving `role`, good for
    /// `expires_in_secs` (1 s to 30 days) and, when given, `max_uses` uses (1 to 1000).
    ///
    /// # Errors
    /// `invalid_request` for a lifetime or a use count out of range; `unknown_agent`;
    /// `store_unavailable`.
    pub async fn make_link(
        &self,
        owner: &Principal,
        agent_id: &AgentId,
        role: Role,
        expires_in_secs: u64,
        max_uses: Option<u32>,
    ) -> Result<NewLink, SessionError> {
        let entry = Audit::new(owner, "link_create")
            .on(owner, agent_id)
            .detail(json!({
                "role": role, "expires_in_secs": expires_in_secs, "max_uses": max_uses,
            }));
        let made = async {
            if !(1..=MAX_LINK_SECS).contains(&expires_in_secs) {
                return Err(SessionError::new(
                    ErrorCode::InvalidRequest,
                    format!("`expires_in_secs` must be 1-{MAX_LINK_SECS} (30 days)"),
                ));
            }
            if max_uses.is_some_and(|n| !(1..=MAX_LINK_USES).contains(&n)) {
                return Err(SessionError::new(
                    ErrorCode::InvalidRequest,
                    format!("`max_uses` must be 1-{MAX_LINK_USES}"),
                ));
            }
            let record = self.get(owner, agent_id).await?;
            let id = uuid::Uuid::new_v4().simple().to_string()[..ID_CHARS].to_owned();
            let secret = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            let now = chrono::Utc::now();
            let expires = now + chrono::Duration::seconds(expires_in_secs as i64);
            let link = LinkRow {
                id: id.clone(),
                row: record.row,
                owner: owner.clone(),
                agent_id: agent_id.clone(),
                role,
                hash: hash(&secret),
                created_at: protocol::now_rfc3339(),
                expires_at: expires.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                max_uses: max_uses.map(i64::from),
                uses: 0,
            };
            self.shared
                .store
                .put_link(&link)
                .await
                .map_err(|e| store_error(e, agent_id))?;
            Ok(NewLink {
                token: format!("{id}.{secret}"),
                link,
            })
        };
        self.audited(entry, made.await).await
    }

    /// The links of `owner`'s conversation `agent_id`, oldest first (expired and used-up ones
    /// too, until revoked).
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn links(
        &self,
        owner: &Principal,
        agent_id: &AgentId,
    ) -> Result<Vec<LinkRow>, SessionError> {
        let record = self.get(owner, agent_id).await?;
        self.shared
            .store
            .links_of(record.row)
            .await
            .map_err(|e| store_error(e, agent_id))
    }

    /// Revokes link `id` of `owner`'s conversation `agent_id` (the shares it gave stay); whether
    /// there was one.
    ///
    /// # Errors
    /// `unknown_agent` or `store_unavailable`.
    pub async fn revoke_link(
        &self,
        owner: &Principal,
        agent_id: &AgentId,
        id: &str,
    ) -> Result<bool, SessionError> {
        let entry = Audit::new(owner, "link_revoke")
            .on(owner, agent_id)
            .detail(json!({ "link": protocol::truncate_chars(id, 32) }));
        let revoked = async {
            let record = self.get(owner, agent_id).await?;
            self.shared
                .store
                .delete_link(record.row, id)
                .await
                .map_err(|e| store_error(e, agent_id))
        };
        self.audited(entry, revoked.await).await
    }

    /// Opens link `token` for `principal`: they get its conversation shared in its role (a
    /// share they have already keeps the greater of the two roles). The owner opening their
    /// own link gets nothing new and uses none of it.
    ///
    /// # Errors
    /// `unknown_link` for a token that names no link or has the wrong secret; `link_expired`
    /// for one past its time or uses; `invalid_request` for the owner; `store_unavailable`.
    pub async fn open_link(
        &self,
        principal: &Principal,
        token: &str,
    ) -> Result<ShareRow, SessionError> {
        let (id, secret) = token.split_once('.').unwrap_or((token, ""));
        let mut entry = Audit::new(principal, "link_open")
            .detail(json!({ "link": protocol::truncate_chars(id, 32) }));
        let found = if is_hex(id, ID_CHARS) && is_hex(secret, SECRET_CHARS) {
            self.shared.store.find_link(id).await.map_err(store_failure)
        } else {
            Ok(None)
        };
        let link = match found {
            Ok(Some(link)) if link.hash == hash(secret) => link,
            Ok(_) => return self.audited(entry, Err(unknown_link())).await,
            Err(err) => return self.audited(entry, Err(err)).await,
        };
        entry = entry.on(&link.owner, &link.agent_id);
        let opened = async {
            if &link.owner == principal {
                return Err(SessionError::new(
                    ErrorCode::InvalidRequest,
                    "this link is to your own conversation",
                ));
            }
            self.share_target(&link.owner, &link.agent_id, principal)
                .await?;
            let now = protocol::now_rfc3339();
            let share = self
                .shared
                .store
                .redeem_link(&link.id, &now, principal)
                .await
                .map_err(store_failure)?
                .ok_or_else(|| {
                    SessionError::new(
                        ErrorCode::LinkExpired,
                        "this share link has expired or was used as many times as it may be",
                    )
                })?;
            tracing::info!(owner = %link.owner, agent_id = %link.agent_id, with = %principal, role = share.role.as_str(), "shared by a link");
            Ok(share)
        };
        self.audited(entry, opened.await).await
    }
}

#[cfg(test)]
mod tests {
    use super::{hash, is_hex};

    #[test]
    fn a_secret_is_stored_as_its_sha256_and_tokens_are_hex_of_their_lengths() {
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_hex("0123456789abcdef", 16));
        assert!(!is_hex("0123456789ABCDEF", 16));
        assert!(!is_hex("-123456789abcdef", 16));
        assert!(!is_hex("0123", 16));
    }
}
