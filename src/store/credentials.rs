//! Stored credentials: each principal's own variables for an agent, one row per name, the value
//! sealed by [`crate::credentials`] before it gets here (the store never sees it in clear). Their
//! own table, read and written through the pool on both engines with the same SQL.

use async_trait::async_trait;

use super::Result;
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use crate::protocol::Principal;

/// One stored variable, sealed.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SealedVar {
    /// Whose it is.
    pub principal: String,
    /// For which agent.
    pub agent: String,
    /// The variable's name.
    pub name: String,
    /// Which key sealed it (a hash of the key, never the key).
    pub key_id: String,
    /// The nonce it was sealed with.
    pub nonce: Vec<u8>,
    /// The sealed value and its tag.
    pub sealed: Vec<u8>,
    /// When it was set (RFC 3339).
    pub set_at: String,
}

/// Persistence of credentials.
#[async_trait]
pub trait CredentialStore: Send + Sync + 'static {
    /// Sets `vars` of `principal` for `agent`, each replacing one of the same name, in one
    /// transaction.
    async fn put_credentials(
        &self,
        principal: &Principal,
        agent: &str,
        vars: &[SealedVar],
    ) -> Result<()>;

    /// Removes every variable `principal` has for `agent`; how many there were.
    async fn delete_credentials(&self, principal: &Principal, agent: &str) -> Result<u64>;

    /// The variables `principal` has, for `agent` or (None) every agent, by agent and name.
    async fn credentials_of(
        &self,
        principal: &Principal,
        agent: Option<&str>,
    ) -> Result<Vec<SealedVar>>;

    /// Every stored variable (to check and re-seal them at start).
    async fn all_credentials(&self) -> Result<Vec<SealedVar>>;

    /// Stores `var` sealed anew (by a rotated key), unless its row changed meanwhile.
    async fn reseal_credential(&self, old: &SealedVar, new: &SealedVar) -> Result<()>;
}

const COLUMNS: &str = "principal, agent, name, key_id, nonce, sealed, set_at";

/// The same statements for either store.
macro_rules! credential_store {
    ($store:ty) => {
        #[async_trait]
        impl CredentialStore for $store {
            async fn put_credentials(
                &self,
                principal: &Principal,
                agent: &str,
                vars: &[SealedVar],
            ) -> Result<()> {
                let mut tx = self.pool().begin().await?;
                for var in vars {
                    sqlx::query(&format!(
                        "insert into credentials ({COLUMNS}) values ($1, $2, $3, $4, $5, $6, $7) \
                         on conflict (principal, agent, name) do update set \
                         key_id = excluded.key_id, nonce = excluded.nonce, \
                         sealed = excluded.sealed, set_at = excluded.set_at"
                    ))
                    .bind(principal.as_str())
                    .bind(agent)
                    .bind(&var.name)
                    .bind(&var.key_id)
                    .bind(&var.nonce)
                    .bind(&var.sealed)
                    .bind(&var.set_at)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn delete_credentials(&self, principal: &Principal, agent: &str) -> Result<u64> {
                let done =
                    sqlx::query("delete from credentials where principal = $1 and agent = $2")
                        .bind(principal.as_str())
                        .bind(agent)
                        .execute(self.pool())
                        .await?;
                Ok(done.rows_affected())
            }

            async fn credentials_of(
                &self,
                principal: &Principal,
                agent: Option<&str>,
            ) -> Result<Vec<SealedVar>> {
                Ok(sqlx::query_as(&format!(
                    "select {COLUMNS} from credentials where principal = $1 \
                     and ($2 is null or agent = $2) order by agent, name"
                ))
                .bind(principal.as_str())
                .bind(agent)
                .fetch_all(self.pool())
                .await?)
            }

            async fn all_credentials(&self) -> Result<Vec<SealedVar>> {
                Ok(sqlx::query_as(&format!(
                    "select {COLUMNS} from credentials order by principal, agent, name"
                ))
                .fetch_all(self.pool())
                .await?)
            }

            async fn reseal_credential(&self, old: &SealedVar, new: &SealedVar) -> Result<()> {
                sqlx::query(
                    "update credentials set key_id = $1, nonce = $2, sealed = $3 \
                     where principal = $4 and agent = $5 and name = $6 and sealed = $7",
                )
                .bind(&new.key_id)
                .bind(&new.nonce)
                .bind(&new.sealed)
                .bind(&old.principal)
                .bind(&old.agent)
                .bind(&old.name)
                .bind(&old.sealed)
                .execute(self.pool())
                .await?;
                Ok(())
            }
        }
    };
}

credential_store!(SqliteStore);
credential_store!(PgStore);
