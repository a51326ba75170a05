//! Stored shares: which principals a conversation is shared with, in which role, and the
//! `agent_id` each of them knows it by; the conversations shared with a principal are read with
//! their rows in one query. Their own table, read and written through the pool on both engines
//! with the same SQL; a share goes with its conversation (the foreign key cascades).

use async_trait::async_trait;

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Result, RowId, SessionRecord};
use crate::protocol::{AgentId, Principal, Role, SHARE_ALIAS_CHARS};

/// A conversation shared with a principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRow {
    /// The conversation.
    pub row: RowId,
    /// Whose conversation it is.
    pub owner: Principal,
    /// The owner's `agent_id` for it.
    pub agent_id: AgentId,
    /// Whom it is shared with.
    pub principal: Principal,
    /// The `agent_id` they know it by.
    pub alias: AgentId,
    /// What they may do with it.
    pub role: Role,
    /// When it was first shared with them (RFC 3339).
    pub created_at: String,
}

/// How a share row reads back from SQL.
#[derive(sqlx::FromRow)]
pub(super) struct Stored {
    session_pk: RowId,
    owner: String,
    agent_id: String,
    principal: String,
    alias: String,
    role: String,
    created_at: String,
}

impl Stored {
    /// The row as a share; a row changed behind the server's back reads as none.
    pub(super) fn share(self) -> Option<ShareRow> {
        Some(ShareRow {
            row: self.session_pk,
            owner: self.owner.into(),
            agent_id: AgentId::parse(self.agent_id).ok()?,
            principal: self.principal.into(),
            alias: AgentId::parse(self.alias)
                .ok()
                .filter(AgentId::is_share_alias)?,
            role: Role::parse(&self.role)?,
            created_at: self.created_at,
        })
    }
}

/// A conversation shared with a principal, with its row as stored.
#[derive(sqlx::FromRow)]
struct StoredShared {
    #[sqlx(flatten)]
    record: SessionRecord,
    alias: String,
    share_role: String,
    shared_at: String,
}

impl StoredShared {
    /// The share of it with `principal`, and its row; a row changed behind the server's back
    /// reads as none.
    fn shared(self, principal: &Principal) -> Option<(ShareRow, SessionRecord)> {
        let share = ShareRow {
            row: self.record.row,
            owner: self.record.principal.clone(),
            agent_id: self.record.agent_id.clone(),
            principal: principal.clone(),
            alias: AgentId::parse(self.alias)
                .ok()
                .filter(AgentId::is_share_alias)?,
            role: Role::parse(&self.share_role)?,
            created_at: self.shared_at,
        };
        Some((share, self.record))
    }
}

/// A new alias: `~` and random lowercase letters and digits (a name, not a secret: every use
/// is checked against whom it was shared with).
pub(super) fn new_alias() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let random = uuid::Uuid::new_v4();
    let mut alias = String::with_capacity(SHARE_ALIAS_CHARS + 1);
    alias.push('~');
    for b in &random.as_bytes()[..SHARE_ALIAS_CHARS] {
        alias.push(CHARS[usize::from(*b) % CHARS.len()] as char);
    }
    alias
}

/// Persistence of shares.
#[async_trait]
pub trait ShareStore: Send + Sync + 'static {
    /// Shares conversation `row` with `principal` as `role`, or changes the role it has; its
    /// alias stays what it was.
    async fn put_share(&self, row: RowId, principal: &Principal, role: Role) -> Result<ShareRow>;

    /// Ends the share of conversation `row` with `principal`; whether there was one.
    async fn delete_share(&self, row: RowId, principal: &Principal) -> Result<bool>;

    /// Everyone conversation `row` is shared with, by when.
    async fn shares_of(&self, row: RowId) -> Result<Vec<ShareRow>>;

    /// The conversation `principal` knows as `alias`, if it is shared with them.
    async fn find_share(&self, principal: &Principal, alias: &AgentId) -> Result<Option<ShareRow>>;

    /// The first `limit` conversations shared with `principal`, by when, each with its row.
    async fn shared_with(
        &self,
        principal: &Principal,
        limit: u32,
    ) -> Result<Vec<(ShareRow, SessionRecord)>>;
}

/// A share's columns with its conversation's owner and `agent_id`.
pub(super) const SELECT: &str = "select s.session_pk, i.principal as owner, i.agent_id, s.principal, \
     s.alias, s.role, s.created_at from shares s join session_info i on i.id = s.session_pk";

/// The same statements for either store.
macro_rules! share_store {
    ($store:ty) => {
        #[async_trait]
        impl ShareStore for $store {
            async fn put_share(
                &self,
                row: RowId,
                principal: &Principal,
                role: Role,
            ) -> Result<ShareRow> {
                sqlx::query(
                    "insert into shares (session_pk, principal, alias, role, created_at) \
                     values ($1, $2, $3, $4, $5) \
                     on conflict (session_pk, principal) do update set role = excluded.role",
                )
                .bind(row)
                .bind(principal.as_str())
                .bind(new_alias())
                .bind(role.as_str())
                .bind(crate::protocol::now_rfc3339())
                .execute(self.pool())
                .await?;
                let found: Option<Stored> = sqlx::query_as(&format!(
                    "{SELECT} where s.session_pk = $1 and s.principal = $2"
                ))
                .bind(row)
                .bind(principal.as_str())
                .fetch_optional(self.pool())
                .await?;
                found
                    .and_then(Stored::share)
                    .ok_or(super::StoreError::UnknownSession)
            }

            async fn delete_share(&self, row: RowId, principal: &Principal) -> Result<bool> {
                let done = sqlx::query("delete from shares where session_pk = $1 and principal = $2")
                    .bind(row)
                    .bind(principal.as_str())
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn shares_of(&self, row: RowId) -> Result<Vec<ShareRow>> {
                let rows: Vec<Stored> = sqlx::query_as(&format!(
                    "{SELECT} where s.session_pk = $1 order by s.created_at, s.principal"
                ))
                .bind(row)
                .fetch_all(self.pool())
                .await?;
                Ok(rows.into_iter().filter_map(Stored::share).collect())
            }

            async fn find_share(
                &self,
                principal: &Principal,
                alias: &AgentId,
            ) -> Result<Option<ShareRow>> {
                let found: Option<Stored> = sqlx::query_as(&format!(
                    "{SELECT} where s.alias = $1 and s.principal = $2"
                ))
                .bind(alias.as_str())
                .bind(principal.as_str())
                .fetch_optional(self.pool())
                .await?;
                Ok(found.and_then(Stored::share))
            }

            async fn shared_with(
                &self,
                principal: &Principal,
                limit: u32,
            ) -> Result<Vec<(ShareRow, SessionRecord)>> {
                let rows: Vec<StoredShared> = sqlx::query_as(&format!(
                    "select i.*, s.alias, s.role as share_role, s.created_at as shared_at \
                     from shares s join (select {} from session_info where not pending) i \
                     on i.id = s.session_pk where s.principal = $1 \
                     order by s.created_at, s.alias limit $2",
                    super::shared::SESSION_COLUMNS
                ))
                .bind(principal.as_str())
                .bind(i64::from(limit))
                .fetch_all(self.pool())
                .await?;
                Ok(rows
                    .into_iter()
                    .filter_map(|r| r.shared(principal))
                    .collect())
            }
        }
    };
}

share_store!(SqliteStore);
share_store!(PgStore);
