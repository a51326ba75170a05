//! Stored share links: a conversation's links, each kept as an id and the hash of its secret
//! (never the secret), with its role, expiry and uses; using one counts a use in the same
//! statement that checks it is still good, and writes the share it gives in the same
//! transaction. Their own table, through the pool on both engines with the same SQL; a link
//! goes with its conversation (the foreign key cascades).

use async_trait::async_trait;

use super::postgres::PgStore;
use super::shares::ShareRow;
use super::sqlite::SqliteStore;
use super::{Result, RowId};
use crate::protocol::{AgentId, Principal, Role};

/// A conversation's share link, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRow {
    /// The link's public id (the part of its token before the `.`).
    pub id: String,
    /// The conversation.
    pub row: RowId,
    /// Whose conversation it is.
    pub owner: Principal,
    /// The owner's `agent_id` for it.
    pub agent_id: AgentId,
    /// The role it gives.
    pub role: Role,
    /// SHA-256 of its secret, in hex.
    pub hash: String,
    /// When it was made (RFC 3339).
    pub created_at: String,
    /// When it stops working (RFC 3339).
    pub expires_at: String,
    /// How many times it may be used; none: until it expires.
    pub max_uses: Option<i64>,
    /// How many times it was used.
    pub uses: i64,
}

/// How a link row reads back from SQL.
#[derive(sqlx::FromRow)]
struct Stored {
    id: String,
    session_pk: RowId,
    owner: String,
    agent_id: String,
    role: String,
    hash: String,
    created_at: String,
    expires_at: String,
    max_uses: Option<i64>,
    uses: i64,
}

impl Stored {
    /// The row as a link; a row changed behind the server's back reads as none.
    fn link(self) -> Option<LinkRow> {
        Some(LinkRow {
            id: self.id,
            row: self.session_pk,
            owner: self.owner.into(),
            agent_id: AgentId::parse(self.agent_id).ok()?,
            role: Role::parse(&self.role)?,
            hash: self.hash,
            created_at: self.created_at,
            expires_at: self.expires_at,
            max_uses: self.max_uses,
            uses: self.uses,
        })
    }
}

/// Persistence of share links.
#[async_trait]
pub trait LinkStore: Send + Sync + 'static {
    /// Stores a new link (its `uses` start at 0).
    async fn put_link(&self, link: &LinkRow) -> Result<()>;

    /// The link with public id `id`, whatever its state.
    async fn find_link(&self, id: &str) -> Result<Option<LinkRow>>;

    /// Counts a use of link `id`, if it is still good at `now` (not expired, uses left), and
    /// shares its conversation with `principal` in its role (a share they have keeps the
    /// greater of the two roles), all in one transaction; the share, or none when the link
    /// was no longer good (then nothing changed).
    async fn redeem_link(
        &self,
        id: &str,
        now: &str,
        principal: &Principal,
    ) -> Result<Option<ShareRow>>;

    /// Conversation `row`'s links, oldest first.
    async fn links_of(&self, row: RowId) -> Result<Vec<LinkRow>>;

    /// Deletes conversation `row`'s link `id`; whether there was one.
    async fn delete_link(&self, row: RowId, id: &str) -> Result<bool>;
}

/// A link's columns with its conversation's owner and `agent_id`.
const SELECT: &str = "select l.id, l.session_pk, i.principal as owner, i.agent_id, l.role, \
     l.hash, l.created_at, l.expires_at, l.max_uses, l.uses \
     from share_links l join session_info i on i.id = l.session_pk";

/// The same statements for either store.
macro_rules! link_store {
    ($store:ty) => {
        #[async_trait]
        impl LinkStore for $store {
            async fn put_link(&self, link: &LinkRow) -> Result<()> {
                sqlx::query(
                    "insert into share_links \
                     (id, session_pk, hash, role, created_at, expires_at, max_uses) \
                     values ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(&link.id)
                .bind(link.row)
                .bind(&link.hash)
                .bind(link.role.as_str())
                .bind(&link.created_at)
                .bind(&link.expires_at)
                .bind(link.max_uses)
                .execute(self.pool())
                .await?;
                Ok(())
            }

            async fn find_link(&self, id: &str) -> Result<Option<LinkRow>> {
                let found: Option<Stored> = sqlx::query_as(&format!("{SELECT} where l.id = $1"))
                    .bind(id)
                    .fetch_optional(self.pool())
                    .await?;
                Ok(found.and_then(Stored::link))
            }

            async fn redeem_link(
                &self,
                id: &str,
                now: &str,
                principal: &Principal,
            ) -> Result<Option<ShareRow>> {
                let mut tx = self.pool().begin().await?;
                let used: Option<(RowId, String)> = sqlx::query_as(
                    "update share_links set uses = uses + 1 where id = $1 and expires_at > $2 \
                     and (max_uses is null or uses < max_uses) returning session_pk, role",
                )
                .bind(id)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
                let Some((row, role)) = used else {
                    return Ok(None);
                };
                // The greater role: an editor's share stays one.
                sqlx::query(
                    "insert into shares (session_pk, principal, alias, role, created_at) \
                     values ($1, $2, $3, $4, $5) on conflict (session_pk, principal) do update \
                     set role = case when excluded.role = 'editor' then excluded.role \
                     else shares.role end",
                )
                .bind(row)
                .bind(principal.as_str())
                .bind(super::shares::new_alias())
                .bind(&role)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                let share: Option<super::shares::Stored> = sqlx::query_as(&format!(
                    "{} where s.session_pk = $1 and s.principal = $2",
                    super::shares::SELECT
                ))
                .bind(row)
                .bind(principal.as_str())
                .fetch_optional(&mut *tx)
                .await?;
                let share = share
                    .and_then(super::shares::Stored::share)
                    .ok_or(super::StoreError::UnknownSession)?;
                tx.commit().await?;
                Ok(Some(share))
            }

            async fn links_of(&self, row: RowId) -> Result<Vec<LinkRow>> {
                let rows: Vec<Stored> = sqlx::query_as(&format!(
                    "{SELECT} where l.session_pk = $1 order by l.created_at, l.id"
                ))
                .bind(row)
                .fetch_all(self.pool())
                .await?;
                Ok(rows.into_iter().filter_map(Stored::link).collect())
            }

            async fn delete_link(&self, row: RowId, id: &str) -> Result<bool> {
                let done = sqlx::query("delete from share_links where session_pk = $1 and id = $2")
                    .bind(row)
                    .bind(id)
                    .execute(self.pool())
                    .await?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

link_store!(SqliteStore);
link_store!(PgStore);
