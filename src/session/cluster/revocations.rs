//! Ended shares across the cluster: the node where a share ends tells the others over the bus
//! (sealed like a frame, in order per sending node), and each tells its own sockets and event
//! streams that follow the alias, which stop at once.

use std::sync::Arc;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::Bus;
use super::seal::{Kind, Refusal};
use crate::protocol::{AgentId, Principal};
use crate::session::Manager;

/// The subject every node publishes ended shares on.
const SUBJECT: &str = "agentmux.revoked";

/// A share that ended, as it goes over the bus.
#[derive(Serialize, Deserialize)]
struct Ended {
    principal: Principal,
    alias: String,
}

impl Bus {
    /// Tells the other nodes that `principal`'s share under `alias` ended.
    pub(in crate::session) fn revoked(&self, principal: &Principal, alias: &AgentId) {
        let ended = Ended {
            principal: principal.clone(),
            alias: alias.to_string(),
        };
        let payload = serde_json::to_vec(&ended).expect("ended shares serialize");
        let headers = self.seal.frame(SUBJECT, &[], &payload);
        let client = self.client.clone();
        tokio::spawn(async move {
            let sent = client
                .publish_with_headers(SUBJECT, headers, payload.into())
                .await;
            if let Err(err) = sent {
                tracing::warn!(error = %err, "telling the other nodes of an ended share failed");
            }
        });
    }

    /// Tells this node's streams of the shares other nodes end, until `stop`; returns once the
    /// subscription is in place.
    ///
    /// # Errors
    /// When the subscription can't be made.
    pub(in crate::session) async fn follow_revocations(
        self: Arc<Self>,
        manager: Manager,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let frames = self.frames_on(SUBJECT.into(), &[], stop).await?;
        tokio::spawn(async move {
            let mut frames = std::pin::pin!(frames);
            while let Some((msg, from)) = frames.next().await {
                let ended = serde_json::from_slice::<Ended>(&msg.payload)
                    .ok()
                    .and_then(|e| {
                        let alias = AgentId::parse(e.alias)
                            .ok()
                            .filter(AgentId::is_share_alias)?;
                        Some((e.principal, alias))
                    });
                match ended {
                    Some((principal, alias)) => manager.revoked_here(&principal, alias),
                    _ => self
                        .seal
                        .refused(Kind::Frame, Refusal::Malformed, Some(&from)),
                }
            }
        });
        Ok(())
    }
}
