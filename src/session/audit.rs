//! The audit log as the core keeps it: an [`Audit`] entry for each action on a conversation,
//! a share, a link, a schedule or an import, appended with how the action went (a failure to
//! store it is logged, never the action's failure); reading it back for an owner (their
//! conversations') or an admin (everyone's); dropping entries older than the retention.
//!
//! A feature records its actions with [`Manager::audited`]:
//! `manager.audited(Audit::new(principal, "thing_made").on(owner, agent_id).detail(json), result)`.

use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::Value;

use super::errors::store_failure;
use super::{Manager, SessionError};
use crate::protocol::{self, AgentId, ErrorCode, Principal};
use crate::store::audit::{AuditQuery, AuditRow};
use crate::store::text;

/// How often entries past the retention are dropped, at most: hourly, by whichever append
/// comes first.
const PRUNE_EVERY_MS: i64 = 3_600_000;

/// Longest text in an entry's particulars, in characters: a longer one is cut.
const MAX_DETAIL_CHARS: usize = 200;
/// Most bytes an entry's particulars take: larger ones are stored as `{"truncated": true}`.
const MAX_DETAIL_BYTES: usize = 2048;

/// One action to record: who did what, to which conversation, with which particulars.
#[derive(Debug, Clone)]
pub struct Audit {
    principal: Principal,
    action: &'static str,
    owner: Option<Principal>,
    agent_id: Option<AgentId>,
    detail: Value,
}

impl Audit {
    /// `principal` did `action` (a `snake_case` verb: `chat`, `share`, `link_create`, …).
    pub fn new(principal: &Principal, action: &'static str) -> Self {
        Audit {
            principal: principal.clone(),
            action,
            owner: None,
            agent_id: None,
            detail: Value::Object(serde_json::Map::new()),
        }
    }

    /// To `owner`'s conversation (or schedule) `agent_id`: its owner sees the entry.
    #[must_use]
    pub fn on(mut self, owner: &Principal, agent_id: &AgentId) -> Self {
        self.owner = Some(owner.clone());
        self.agent_id = Some(agent_id.clone());
        self
    }

    /// To something of `owner`'s that is no conversation (their credentials): they see the
    /// entry.
    #[must_use]
    pub fn of(mut self, owner: &Principal) -> Self {
        self.owner = Some(owner.clone());
        self
    }

    /// With these particulars (a JSON object; never a secret or a message's content).
    #[must_use]
    pub fn detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }
}

/// `detail` as stored: each text in it cut to [`MAX_DETAIL_CHARS`], the whole to
/// [`MAX_DETAIL_BYTES`].
fn bounded(mut detail: Value) -> String {
    fn cut(value: &mut Value) {
        match value {
            Value::String(text) if text.chars().count() > MAX_DETAIL_CHARS => {
                *text = format!("{}…", protocol::truncate_chars(text, MAX_DETAIL_CHARS));
            }
            Value::Array(items) => items.iter_mut().for_each(cut),
            Value::Object(fields) => fields.values_mut().for_each(cut),
            _ => {}
        }
    }
    cut(&mut detail);
    let text = detail.to_string();
    if text.len() <= MAX_DETAIL_BYTES {
        text
    } else {
        serde_json::json!({ "truncated": true }).to_string()
    }
}

/// When the audit log was last pruned (ms since the epoch), per manager.
#[derive(Default)]
pub(super) struct Pruned(AtomicI64);

impl Manager {
    /// Records `entry` with how `result` went (`ok`, or its error's code), and gives `result`
    /// back.
    pub async fn audited<T>(
        &self,
        entry: Audit,
        result: Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        let outcome = match &result {
            Ok(_) => "ok",
            Err(err) => err.code.as_str(),
        };
        let row = AuditRow {
            id: 0,
            at: protocol::now_rfc3339(),
            // Names as both engines store text: a NUL a client put in one is shown, not
            // refused with the rows it is committed with.
            principal: text(&entry.principal).into_owned(),
            action: entry.action.to_owned(),
            owner: entry.owner.map(|o| text(&o).into_owned()),
            agent_id: entry.agent_id.map(|a| text(&a).into_owned()),
            detail: bounded(entry.detail),
            outcome: outcome.to_owned(),
        };
        if let Err(err) = self.shared.store.append_audit(row).await {
            tracing::error!(action = entry.action, error = %err, "an audit entry could not be stored");
        }
        self.prune_audit_log();
        result
    }

    /// Drops the entries past `store.audit_retention_days`, at most hourly, in the background.
    fn prune_audit_log(&self) {
        let days = self.shared.config.store.audit_retention_days;
        let now = chrono::Utc::now();
        let now_ms = now.timestamp_millis();
        let last = self.shared.audit_pruned.0.load(Ordering::Relaxed);
        if days == 0
            || now_ms - last < PRUNE_EVERY_MS
            || self
                .shared
                .audit_pruned
                .0
                .compare_exchange(last, now_ms, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let before = (now - chrono::Duration::days(i64::from(days)))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let store = self.shared.store.clone();
        tokio::spawn(async move {
            match store.prune_audit(&before).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(dropped = n, %before, "audit entries past retention dropped")
                }
                Err(err) => tracing::warn!(error = %err, "pruning the audit log failed"),
            }
        });
    }

    /// The audit entries `query` selects that `principal` may read: those of their own
    /// conversations, or, for an admin (`auth.admins`), everyone's.
    ///
    /// # Errors
    /// `forbidden` when someone else's entries are asked for by a non-admin;
    /// `store_unavailable`.
    pub async fn audit_log(
        &self,
        principal: &Principal,
        mut query: AuditQuery,
    ) -> Result<Vec<AuditRow>, SessionError> {
        if !self.shared.config.auth.is_admin(principal) {
            if query
                .owner
                .as_deref()
                .is_some_and(|o| o != principal.as_str())
            {
                return Err(SessionError::new(
                    ErrorCode::Forbidden,
                    "only the server's admins (auth.admins) read other principals' entries",
                ));
            }
            query.owner = Some(principal.to_string());
        }
        self.shared.store.audit(&query).await.map_err(store_failure)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{MAX_DETAIL_BYTES, MAX_DETAIL_CHARS, bounded};

    #[test]
    fn particulars_are_stored_bounded() {
        let long = "é".repeat(10_000);
        let stored: Value = serde_json::from_str(&bounded(json!({ "title": long }))).unwrap();
        let title = stored["title"].as_str().unwrap();
        assert_eq!(title.chars().count(), MAX_DETAIL_CHARS + 1);
        assert!(title.ends_with('…'));
        let many = json!({ "names": vec!["x".repeat(100); 100] });
        assert_eq!(bounded(many), r#"{"truncated":true}"#);
        let small = json!({ "to_seq": 3, "with": "bob" });
        assert_eq!(bounded(small.clone()), small.to_string());
        assert!(bounded(small).len() <= MAX_DETAIL_BYTES);
    }
}
