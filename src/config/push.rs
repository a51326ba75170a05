//! The `[push]` settings: Web Push to the browsers principals subscribed, and its server key.

use std::fmt;

use serde::Deserialize;

use super::secs;

/// Settings of Web Push notifications (see `docs/notifications.md`).
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushConfig {
    /// Whether the server sends pushes and accepts subscriptions at all.
    pub enabled: bool,
    /// The server's VAPID private key: the 32-byte P-256 scalar, base64url without padding.
    /// Unset: the key in `<data dir>/push-vapid.key`, made on the first start. Every node of a
    /// cluster must have the same key.
    pub vapid_private_key: Option<String>,
    /// Who runs this server, for the push services (the VAPID `sub`): `mailto:` or `https:`.
    pub subject: String,
    /// Subscriptions one principal may have (one per browser it enabled); more answer
    /// `limit_exceeded`.
    pub max_subscriptions_per_principal: usize,
    /// Testing only: accept endpoints that are not `https` or reach a loopback, private or
    /// link-local address.
    pub allow_insecure_endpoints: bool,
    /// Pushes waiting to be sent; a push beyond is dropped (and counted).
    pub queue: usize,
    /// How long one request to a push service may take.
    #[serde(deserialize_with = "secs")]
    pub timeout_secs: u64,
    /// Tries after the first when a push service answers 429 or 5xx, or can't be reached.
    pub retries: u32,
    /// How long a push service keeps a push for a device that is offline (the `TTL` header).
    #[serde(deserialize_with = "secs")]
    pub ttl_secs: u64,
    /// How long the token a notification's action buttons carry stays valid.
    #[serde(deserialize_with = "secs")]
    pub action_token_secs: u64,
}

/// Shows whether the key is set, never the key.
impl fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushConfig")
            .field("enabled", &self.enabled)
            .field(
                "vapid_private_key",
                &self.vapid_private_key.as_ref().map(|_| "<set>"),
            )
            .field("subject", &self.subject)
            .field(
                "max_subscriptions_per_principal",
                &self.max_subscriptions_per_principal,
            )
            .field("allow_insecure_endpoints", &self.allow_insecure_endpoints)
            .field("queue", &self.queue)
            .field("timeout_secs", &self.timeout_secs)
            .field("retries", &self.retries)
            .field("ttl_secs", &self.ttl_secs)
            .field("action_token_secs", &self.action_token_secs)
            .finish()
    }
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig {
            enabled: true,
            vapid_private_key: None,
            subject: "mailto:admin@agentmux.invalid".into(),
            max_subscriptions_per_principal: 10,
            allow_insecure_endpoints: false,
            queue: 1024,
            timeout_secs: 10,
            retries: 3,
            ttl_secs: 3600,
            action_token_secs: 600,
        }
    }
}

impl PushConfig {
    /// Refuses settings that could never work.
    ///
    /// # Errors
    /// A subject that is neither `mailto:` nor `https:`, or a zero queue, timeout or token life.
    pub fn check(&self) -> anyhow::Result<()> {
        if !(self.subject.starts_with("mailto:") || self.subject.starts_with("https://")) {
            anyhow::bail!("push.subject must be a mailto: or https: URL");
        }
        if self.queue == 0 || self.timeout_secs == 0 || self.action_token_secs == 0 {
            anyhow::bail!(
                "push.queue, push.timeout_secs and push.action_token_secs must be above 0"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_must_be_a_contact_and_sizes_above_zero() {
        assert!(PushConfig::default().check().is_ok());
        let https = PushConfig {
            subject: "https://ops.example/agentmux".into(),
            ..PushConfig::default()
        };
        assert!(https.check().is_ok());
        for bad in [
            PushConfig {
                subject: "admin@example.com".into(),
                ..PushConfig::default()
            },
            PushConfig {
                queue: 0,
                ..PushConfig::default()
            },
            PushConfig {
                action_token_secs: 0,
                ..PushConfig::default()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
