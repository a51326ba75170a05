//! The `[cluster]` settings: this node's name, its leases and how it reaches the others.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::secs;

/// Settings of a node among several sharing one PostgreSQL store.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name, unique among the nodes (`--node-id`, `AGENTMUX_NODE_ID`); empty for
    /// `<host name>:<port>`. A node restarted under the same name takes its own conversations
    /// back at once; under another, they wait for their leases to expire.
    pub node_id: String,
    /// How long a node's ownership of a conversation lasts unless renewed (it is renewed every
    /// third of that while the conversation is live). A node that dies leaves its
    /// conversations to others after at most this long.
    #[serde(deserialize_with = "secs")]
    pub lease_secs: u64,
    /// The NATS server(s) the nodes route commands and frames through (`--cluster-nats`,
    /// `AGENTMUX_CLUSTER_NATS`): `nats://HOST:PORT`, several separated by commas. Empty for
    /// none: a command for a conversation another node runs is then refused, naming it.
    /// A server's URL may carry a user and password (`nats://USER:PASSWORD@HOST:PORT`) or a
    /// token (`nats://TOKEN@HOST:PORT`); `tls://HOST:PORT` requires TLS.
    pub nats: String,
    /// The secret every node of a cluster shares (`AGENTMUX_CLUSTER_SECRET`), at least 32
    /// bytes: each message between nodes is authenticated with it, and a node refuses to route
    /// through NATS without one.
    pub secret: Option<String>,
    /// A NATS credentials file (a user JWT and its nkey seed) to log in to NATS with.
    pub nats_creds_file: Option<PathBuf>,
    /// A file holding an nkey seed (`SU…`) to log in to NATS with.
    pub nats_nkey_file: Option<PathBuf>,
    /// Require TLS on the connection to NATS (also implied by a `tls://` URL).
    pub nats_tls: bool,
    /// PEM certificates of the authorities that sign the NATS servers' certificates (TLS).
    pub nats_ca_file: Option<PathBuf>,
    /// A PEM client certificate and its key, for NATS servers that verify clients (TLS).
    pub nats_cert_file: Option<PathBuf>,
    /// The key of `nats_cert_file`.
    pub nats_key_file: Option<PathBuf>,
}

/// Shows which secrets are set, never their values (nor a password in a NATS URL).
impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("node_id", &self.node_id)
            .field("lease_secs", &self.lease_secs)
            .field("nats", &(!self.nats.is_empty()).then_some("<set>"))
            .field("secret", &self.secret.as_ref().map(|_| "<set>"))
            .field("nats_creds_file", &self.nats_creds_file)
            .field("nats_nkey_file", &self.nats_nkey_file)
            .field("nats_tls", &self.nats_tls)
            .field("nats_ca_file", &self.nats_ca_file)
            .field("nats_cert_file", &self.nats_cert_file)
            .field("nats_key_file", &self.nats_key_file)
            .finish()
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: String::new(),
            lease_secs: 10,
            nats: String::new(),
            secret: None,
            nats_creds_file: None,
            nats_nkey_file: None,
            nats_tls: false,
            nats_ca_file: None,
            nats_cert_file: None,
            nats_key_file: None,
        }
    }
}

impl ClusterConfig {
    /// How long a chat for a conversation whose node is gone waits for its lease to expire.
    pub fn takeover_wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.lease_secs + 2)
    }

    /// The node's name: the configured one, or `<host name>:<port of bind>`.
    ///
    /// # Errors
    /// When the name is not 1–128 characters of `[A-Za-z0-9._:-]` starting with no `-`, or
    /// `lease_secs` is 0.
    pub fn node_name(&self, bind: SocketAddr) -> anyhow::Result<String> {
        if self.lease_secs == 0 {
            anyhow::bail!("cluster.lease_secs must be at least 1");
        }
        let name = if self.node_id.is_empty() {
            format!("{}:{}", host_name(), bind.port())
        } else {
            self.node_id.clone()
        };
        let valid = (1..=128).contains(&name.len())
            && !name.starts_with('-')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".:_-".contains(&b));
        if !valid {
            anyhow::bail!(
                "node id {name:?} must be 1-128 characters of [A-Za-z0-9._:-], not starting with \
                 '-' (--node-id, AGENTMUX_NODE_ID or cluster.node_id)"
            );
        }
        Ok(name)
    }
}

/// This machine's host name (`localhost` when it has none).
fn host_name() -> String {
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    match name.is_empty() {
        true => "localhost".to_owned(),
        false => name,
    }
}
