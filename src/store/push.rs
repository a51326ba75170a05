//! Stored Web Push subscriptions and notification action tokens: their own tables and calls,
//! apart from the conversations' writer, every read and write through the pool. The SQL is the
//! same on both engines.

use async_trait::async_trait;

use super::Result;
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use crate::protocol::Principal;

/// A browser's subscription, as stored in `push_subscriptions`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SubscriptionRow {
    /// Its id (UUID v4).
    pub id: String,
    /// Whose it is.
    #[sqlx(try_from = "String")]
    pub principal: Principal,
    /// The push service's URL for this browser.
    pub endpoint: String,
    /// The browser's P-256 public key (base64url).
    pub p256dh: String,
    /// The browser's authentication secret (base64url).
    pub auth: String,
    /// The kinds of news it wants, comma-separated.
    pub events: String,
    /// When it was made (RFC 3339).
    pub created_at: String,
}

/// What a notification's action token allows, as stored in `push_actions`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ActionRow {
    /// SHA-256 of the token (hex); the token itself is never stored.
    pub token_hash: String,
    /// Whom it acts for.
    #[sqlx(try_from = "String")]
    pub principal: Principal,
    /// The conversation.
    pub agent_id: String,
    /// The permission request Allow and Deny answer; None for Reply.
    pub request_id: Option<String>,
    /// When it expires, in milliseconds since the Unix epoch.
    pub expires_ms: i64,
}

/// Persistence of push subscriptions and action tokens.
#[async_trait]
pub trait PushStore: Send + Sync + 'static {
    /// Stores a subscription, or updates the keys and events of `principal`'s one with the
    /// same endpoint; returns the id of the one stored.
    async fn save_subscription(&self, row: &SubscriptionRow) -> Result<String>;

    /// A principal's subscriptions, oldest first.
    async fn list_subscriptions(&self, principal: &Principal) -> Result<Vec<SubscriptionRow>>;

    /// Whether anyone has a subscription.
    async fn any_subscription(&self) -> Result<bool>;

    /// Whether `principal` has one with `endpoint` already (saving it again adds none).
    async fn has_endpoint(&self, principal: &Principal, endpoint: &str) -> Result<bool>;

    /// Deletes a principal's subscription; false when there was none.
    async fn delete_subscription(&self, principal: &Principal, id: &str) -> Result<bool>;

    /// Deletes a subscription its push service says is gone.
    async fn forget_subscription(&self, id: &str) -> Result<()>;

    /// Stores an action token, dropping those expired before `now_ms`.
    async fn insert_action(&self, row: &ActionRow, now_ms: i64) -> Result<()>;

    /// Takes (deletes and returns) the token with `token_hash` unless it expired by `now_ms`:
    /// a token is used once.
    async fn take_action(&self, token_hash: &str, now_ms: i64) -> Result<Option<ActionRow>>;
}

const COLUMNS: &str = "id, principal, endpoint, p256dh, auth, events, created_at";

/// The same statements for either store.
macro_rules! push_store {
    ($store:ty) => {
#[async_trait]
impl PushStore for $store {
    async fn save_subscription(&self, row: &SubscriptionRow) -> Result<String> {
        Ok(sqlx::query_scalar(
            "insert into push_subscriptions (id, principal, endpoint, p256dh, auth, events, created_at) \
             values ($1, $2, $3, $4, $5, $6, $7) \
             on conflict (principal, endpoint) do update set p256dh = excluded.p256dh, \
             auth = excluded.auth, events = excluded.events returning id",
        )
        .bind(&row.id)
        .bind(row.principal.as_str())
        .bind(&row.endpoint)
        .bind(&row.p256dh)
        .bind(&row.auth)
        .bind(&row.events)
        .bind(&row.created_at)
        .fetch_one(self.pool())
        .await?)
    }

    async fn list_subscriptions(&self, principal: &Principal) -> Result<Vec<SubscriptionRow>> {
        Ok(sqlx::query_as(&format!(
            "select {COLUMNS} from push_subscriptions where principal = $1 order by created_at, id"
        ))
        .bind(principal.as_str())
        .fetch_all(self.pool())
        .await?)
    }

    async fn any_subscription(&self) -> Result<bool> {
        Ok(sqlx::query_scalar("select exists (select 1 from push_subscriptions)")
            .fetch_one(self.pool())
            .await?)
    }

    async fn has_endpoint(&self, principal: &Principal, endpoint: &str) -> Result<bool> {
        let found: Option<String> = sqlx::query_scalar(
            "select id from push_subscriptions where principal = $1 and endpoint = $2",
        )
        .bind(principal.as_str())
        .bind(endpoint)
        .fetch_optional(self.pool())
        .await?;
        Ok(found.is_some())
    }

    async fn delete_subscription(&self, principal: &Principal, id: &str) -> Result<bool> {
        let done = sqlx::query("delete from push_subscriptions where principal = $1 and id = $2")
            .bind(principal.as_str())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn forget_subscription(&self, id: &str) -> Result<()> {
        sqlx::query("delete from push_subscriptions where id = $1")
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn insert_action(&self, row: &ActionRow, now_ms: i64) -> Result<()> {
        sqlx::query("delete from push_actions where expires_ms <= $1")
            .bind(now_ms)
            .execute(self.pool())
            .await?;
        sqlx::query(
            "insert into push_actions (token_hash, principal, agent_id, request_id, expires_ms) \
             values ($1, $2, $3, $4, $5)",
        )
        .bind(&row.token_hash)
        .bind(row.principal.as_str())
        .bind(&row.agent_id)
        .bind(&row.request_id)
        .bind(row.expires_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn take_action(&self, token_hash: &str, now_ms: i64) -> Result<Option<ActionRow>> {
        Ok(sqlx::query_as(
            "delete from push_actions where token_hash = $1 and expires_ms > $2 \
             returning token_hash, principal, agent_id, request_id, expires_ms",
        )
        .bind(token_hash)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?)
    }
}
    };
}

push_store!(SqliteStore);
push_store!(PgStore);
