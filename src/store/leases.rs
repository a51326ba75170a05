//! Ownership of conversations among the nodes sharing a PostgreSQL store: the leases this
//! node holds, and taking, renewing and releasing them.
//!
//! A lease is three columns of the conversation's row: the node holding it, an epoch that
//! grows with every take-over, and when it expires. The node running a conversation's actor
//! holds its lease and renews it every third of its length; the statement that assigns `seq`
//! (see `postgres::APPEND`) stores rows only under the epoch this node took, so a node that
//! was paused or cut off past its lease, and taken over meanwhile, can't write any more.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use dashmap::DashMap;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::mpsc;

use super::{Result, RowId, StoreError};
use crate::metrics::Metrics;

/// The leases of this node.
pub(super) struct Leases {
    /// This node's name, as the lease rows hold it.
    pub node: String,
    /// Where this node listens, for `agentmux cluster status`.
    address: String,
    /// How long a lease lasts unless renewed.
    length: Duration,
    /// Each conversation this node owns, with the epoch it took.
    held: DashMap<RowId, i64>,
    lost_tx: mpsc::UnboundedSender<RowId>,
    lost_rx: Mutex<Option<mpsc::UnboundedReceiver<RowId>>>,
    metrics: Metrics,
}

/// What taking a lease found.
pub(super) struct Taken {
    /// The conversation's `session_id`.
    pub session_id: String,
    /// Whether a turn is still marked running: its previous owner stopped before it ended.
    pub orphaned_turn: bool,
    /// Whether another node held the lease (expired) before.
    pub from_another_node: bool,
}

impl Leases {
    pub fn new(node: String, address: String, length: Duration, metrics: Metrics) -> Self {
        let (lost_tx, lost_rx) = mpsc::unbounded_channel();
        Leases {
            node,
            address,
            length,
            held: DashMap::new(),
            lost_tx,
            lost_rx: Mutex::new(Some(lost_rx)),
            metrics,
        }
    }

    fn count(&self) {
        self.metrics.leases_held(self.held.len());
    }

    /// The epoch under which this node owns `row`, if it does.
    pub fn epoch(&self, row: RowId) -> Option<i64> {
        self.held.get(&row).map(|e| *e)
    }

    /// Makes this node the owner of `row` when nobody is, the owner's lease expired, or the
    /// owner has this node's name (an earlier run of it). The epoch grows in any case, so
    /// whoever held it before can't write any more.
    ///
    /// # Errors
    /// [`StoreError::OwnedElsewhere`] while another node's lease holds,
    /// [`StoreError::UnknownSession`] when there is no such conversation.
    pub async fn take(&self, pool: &PgPool, row: RowId) -> Result<Taken> {
        let taken: Option<(i64, String, bool, bool)> = sqlx::query_as(
            "with prev as (
                select id, lease_node from session_info where id = $1 for update
             )
             update session_info s set lease_node = $2, lease_epoch = s.lease_epoch + 1,
                lease_expires_at = now() + $3 * interval '1 second'
             from prev
             where s.id = prev.id
               and (s.lease_node is null or s.lease_node = $2 or s.lease_expires_at <= now())
             returning s.lease_epoch, s.session_id, s.running_seq is not null,
                coalesce(prev.lease_node <> $2 and prev.lease_node is not null, false)",
        )
        .bind(row)
        .bind(&self.node)
        .bind(self.length.as_secs_f64())
        .fetch_optional(pool)
        .await?;
        let Some((epoch, session_id, orphaned_turn, from_another_node)) = taken else {
            let owner: Option<Option<String>> =
                sqlx::query_scalar("select lease_node from session_info where id = $1")
                    .bind(row)
                    .fetch_optional(pool)
                    .await?;
            return Err(match owner {
                Some(node) => StoreError::OwnedElsewhere(node.unwrap_or_default()),
                None => StoreError::UnknownSession,
            });
        };
        self.held.insert(row, epoch);
        self.count();
        Ok(Taken {
            session_id,
            orphaned_turn,
            from_another_node,
        })
    }

    /// The node other than this one whose lease on `row` holds now, if any.
    pub async fn owner(&self, pool: &PgPool, row: RowId) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "select lease_node from session_info
             where id = $1 and lease_node <> $2 and lease_expires_at > now()",
        )
        .bind(row)
        .bind(&self.node)
        .fetch_optional(pool)
        .await?)
    }

    /// The node whose lease on each of `rows` holds now, for those that have one.
    pub async fn holders(
        &self,
        pool: &PgPool,
        rows: &[RowId],
    ) -> Result<std::collections::HashMap<RowId, String>> {
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let held: Vec<(RowId, String)> = sqlx::query_as(
            "select id, lease_node from session_info
             where id = any($1) and lease_node is not null and lease_expires_at > now()",
        )
        .bind(ids)
        .fetch_all(pool)
        .await?;
        Ok(held.into_iter().collect())
    }

    /// Gives up this node's lease on `row`, unless it was taken over meanwhile.
    pub async fn release(&self, pool: &PgPool, row: RowId) {
        let Some((_, epoch)) = self.held.remove(&row) else {
            return;
        };
        self.count();
        let released = sqlx::query(
            "update session_info set lease_node = null, lease_expires_at = null
             where id = $1 and lease_node = $2 and lease_epoch = $3",
        )
        .bind(row)
        .bind(&self.node)
        .bind(epoch)
        .execute(pool)
        .await;
        if let Err(err) = released {
            // It expires on its own.
            tracing::warn!(error = %err, "releasing a conversation's lease failed");
        }
    }

    /// Gives up every lease this node holds, and records that it stopped.
    pub async fn release_all(&self, pool: &PgPool) {
        let stopped = sqlx::query("update nodes set last_seen = null where node_id = $1")
            .bind(&self.node)
            .execute(pool)
            .await;
        if let Err(err) = stopped {
            tracing::warn!(error = %err, "recording the node's stop failed");
        }
        let (rows, epochs) = self.snapshot();
        self.held.clear();
        self.count();
        if rows.is_empty() {
            return;
        }
        let released = sqlx::query(
            "update session_info s set lease_node = null, lease_expires_at = null
             from unnest($2::bigint[], $3::bigint[]) as h (id, epoch)
             where s.id = h.id and s.lease_node = $1 and s.lease_epoch = h.epoch",
        )
        .bind(&self.node)
        .bind(rows)
        .bind(epochs)
        .execute(pool)
        .await;
        if let Err(err) = released {
            tracing::warn!(error = %err, "releasing the node's leases failed");
        }
    }

    /// Records that another node took `row` over from this node's lease of `epoch`: its
    /// actor is told to stop (see [`Leases::lost`]).
    pub fn lose(&self, row: RowId, epoch: i64) {
        if self.held.remove_if(&row, |_, e| *e == epoch).is_some() {
            self.count();
            tracing::warn!(
                row = row.0,
                "another node took over a conversation of this node"
            );
            let _ = self.lost_tx.send(row);
        }
    }

    /// The conversations this node lost; taken once.
    pub fn lost(&self) -> Option<mpsc::UnboundedReceiver<RowId>> {
        self.lost_rx.lock().expect("not poisoned").take()
    }

    /// Renews every lease this node holds; the ones another node took over meanwhile are lost.
    /// One row per statement: a statement that locks several conversation rows, in an order of
    /// its own, could deadlock with a group commit locking the same rows in another order, and
    /// PostgreSQL would break one of them off.
    pub async fn renew(&self, pool: &PgPool) -> Result<()> {
        let (rows, epochs) = self.snapshot();
        for (row, epoch) in rows.into_iter().zip(epochs) {
            let renewed: Option<i64> = sqlx::query_scalar(
                "update session_info set lease_expires_at = now() + $2 * interval '1 second'
                 where id = $3 and lease_node = $1 and lease_epoch = $4
                 returning id",
            )
            .bind(&self.node)
            .bind(self.length.as_secs_f64())
            .bind(row)
            .bind(epoch)
            .fetch_optional(pool)
            .await?;
            if renewed.is_none() {
                self.lose(RowId(row), epoch);
            }
        }
        Ok(())
    }

    /// Records this node among the nodes sharing the database, as started now.
    pub async fn register(&self, pool: &PgPool) -> Result<()> {
        sqlx::query(
            "insert into nodes (node_id, address, lease_secs, started_at, last_seen)
             values ($1, $2, $3, now(), now())
             on conflict (node_id) do update set address = $2, lease_secs = $3,
                started_at = now(), last_seen = now()",
        )
        .bind(&self.node)
        .bind(&self.address)
        .bind(i64::try_from(self.length.as_secs()).unwrap_or(i64::MAX))
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Renews the leases (and this node's record) every third of their length until the pool
    /// closes.
    pub async fn keep_renewed(&self, pool: PgPool) {
        let every = self.length / 3;
        while !pool.is_closed() {
            tokio::time::sleep(every).await;
            let seen = sqlx::query("update nodes set last_seen = now() where node_id = $1")
                .bind(&self.node)
                .execute(&pool)
                .await;
            if let Err(err) = seen.map_err(StoreError::from).and(self.renew(&pool).await)
                && !pool.is_closed()
            {
                tracing::warn!(error = %err, "renewing the node's leases failed; retrying");
            }
        }
    }

    /// The nodes seen within their lease length: those not stopped, stalled or killed.
    pub async fn live_nodes(&self, pool: &PgPool) -> Result<HashSet<String>> {
        let nodes: Vec<String> = sqlx::query_scalar(
            "select node_id from nodes
             where last_seen > now() - make_interval(secs => lease_secs)",
        )
        .fetch_all(pool)
        .await?;
        Ok(nodes.into_iter().collect())
    }

    fn snapshot(&self) -> (Vec<i64>, Vec<i64>) {
        self.held.iter().map(|e| (e.key().0, *e.value())).unzip()
    }
}

/// A node sharing the database, as `agentmux cluster status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// Its name.
    pub node_id: String,
    /// Where it listens.
    pub address: String,
    /// `up` (seen within its lease), `silent` (not seen since: stalled or killed) or `stopped`.
    pub state: &'static str,
    /// When it last renewed (RFC 3339), if it has not stopped.
    pub last_seen: Option<String>,
    /// The conversations it owns now, as `principal/agent_id`.
    pub conversations: Vec<String>,
}

/// The nodes that share the PostgreSQL database at `url`, with the conversations each owns;
/// owners no node record names (none on a database that no node has used yet) are listed too.
///
/// # Errors
/// When the database can't be reached or has no agentmux tables.
pub async fn cluster_status(url: &str) -> anyhow::Result<Vec<NodeStatus>> {
    let shown = crate::config::redact_url(url);
    let mut conn = tokio::time::timeout(Duration::from_secs(10), PgConnection::connect(url))
        .await
        .map_err(|_| anyhow::anyhow!("cannot connect to the store at {shown}: timed out"))?
        .map_err(|e| anyhow::anyhow!("cannot connect to the store at {shown}: {e}"))?;
    let nodes: Vec<(String, String, Option<String>, bool)> = sqlx::query_as(
        "select node_id, address,
            to_char(last_seen at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
            coalesce(last_seen > now() - make_interval(secs => lease_secs), false)
         from nodes order by node_id",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(|e| anyhow::anyhow!("cannot read the nodes of {shown}: {e}"))?;
    let owned: Vec<(String, String, String)> = sqlx::query_as(
        "select lease_node, principal, agent_id from session_info
         where lease_node is not null and lease_expires_at > now()
         order by lease_node, principal, agent_id",
    )
    .fetch_all(&mut conn)
    .await?;
    let _ = conn.close().await;
    let mut status: Vec<NodeStatus> = nodes
        .into_iter()
        .map(|(node_id, address, last_seen, fresh)| NodeStatus {
            state: match (&last_seen, fresh) {
                (None, _) => "stopped",
                (Some(_), true) => "up",
                (Some(_), false) => "silent",
            },
            node_id,
            address,
            last_seen,
            conversations: Vec::new(),
        })
        .collect();
    for (node, principal, agent_id) in owned {
        let i = match status.iter().position(|n| n.node_id == node) {
            Some(i) => i,
            None => {
                status.push(NodeStatus {
                    node_id: node,
                    address: String::new(),
                    state: "unknown",
                    last_seen: None,
                    conversations: Vec::new(),
                });
                status.len() - 1
            }
        };
        status[i]
            .conversations
            .push(format!("{principal}/{agent_id}"));
    }
    Ok(status)
}
