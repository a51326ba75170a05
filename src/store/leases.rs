//! Ownership of conversations among the nodes sharing a PostgreSQL store: the leases this
//! node holds, and taking, renewing and releasing them.
//!
//! A lease is three columns of the conversation's row: the node holding it, an epoch that
//! grows with every take-over, and when it expires. The node running a conversation's actor
//! holds its lease and renews it every third of its length; the statement that assigns `seq`
//! (see `postgres::APPEND`) stores rows only under the epoch this node took, so a node that
//! was paused or cut off past its lease, and taken over meanwhile, can't write any more.

use std::sync::Mutex;
use std::time::Duration;

use dashmap::DashMap;
use sqlx::PgPool;
use tokio::sync::mpsc;

use super::{Result, RowId, StoreError};
use crate::metrics::Metrics;

/// The leases of this node.
pub(super) struct Leases {
    /// This node's name, as the lease rows hold it.
    pub node: String,
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
    pub fn new(node: String, length: Duration, metrics: Metrics) -> Self {
        let (lost_tx, lost_rx) = mpsc::unbounded_channel();
        Leases {
            node,
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

    /// Gives up every lease this node holds (it stops).
    pub async fn release_all(&self, pool: &PgPool) {
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
    pub async fn renew(&self, pool: &PgPool) -> Result<()> {
        let (rows, epochs) = self.snapshot();
        if rows.is_empty() {
            return Ok(());
        }
        let renewed: Vec<RowId> = sqlx::query_scalar(
            "update session_info s set lease_expires_at = now() + $2 * interval '1 second'
             from unnest($3::bigint[], $4::bigint[]) as h (id, epoch)
             where s.id = h.id and s.lease_node = $1 and s.lease_epoch = h.epoch
             returning s.id",
        )
        .bind(&self.node)
        .bind(self.length.as_secs_f64())
        .bind(&rows)
        .bind(&epochs)
        .fetch_all(pool)
        .await?;
        let renewed: std::collections::HashSet<RowId> = renewed.into_iter().collect();
        for (row, epoch) in rows.into_iter().zip(epochs) {
            if !renewed.contains(&RowId(row)) {
                self.lose(RowId(row), epoch);
            }
        }
        Ok(())
    }

    /// Renews the leases every third of their length until the pool closes.
    pub async fn keep_renewed(&self, pool: PgPool) {
        let every = self.length / 3;
        while !pool.is_closed() {
            tokio::time::sleep(every).await;
            if let Err(err) = self.renew(&pool).await
                && !pool.is_closed()
            {
                tracing::warn!(error = %err, "renewing the node's leases failed; retrying");
            }
        }
    }

    fn snapshot(&self) -> (Vec<i64>, Vec<i64>) {
        self.held.iter().map(|e| (e.key().0, *e.value())).unzip()
    }
}
