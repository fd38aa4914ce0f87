//! A clustered node's destination: every partition written under a
//! transactional id of its own, taken from its previous owner at the
//! brokers (see ARCHITECTURE.md, "Fencing, for the clustered daemon").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{Fenced, KafkaCluster};
use crate::kafka::fence::{self, Lease, ProducerFence};
use crate::kafka::fetch::TopicPartition;
use crate::kafka::KafkaError;

/// How long a fence's transaction may stay open before the coordinator
/// aborts it; it is open only between AddPartitionsToTxn and EndTxn.
const FENCE_TXN_TIMEOUT: Duration = Duration::from_secs(60);
/// Partitions fenced at once when a node takes over a shard.
const FENCE_CONCURRENCY: usize = 8;
/// The most fencing one partition may take (each of its calls is bounded by
/// `delivery.timeout.ms` too).
const FENCE_TIMEOUT: Duration = Duration::from_secs(120);

impl KafkaCluster {
    /// This cluster as a clustered node's destination: each partition is
    /// written under the transactional id `{prefix}-{topic}-{partition}`
    /// (deterministic, so every node names it alike; Kafka takes ids of
    /// any length a string holds), and [`DestinationCluster::fence`] takes
    /// partitions from their previous owner at the brokers. A sink reopened
    /// after a failure renews the epoch it holds instead of acquiring the
    /// id anew, so a node that lost a partition cannot take it back by
    /// retrying: only a [`DestinationCluster::fence`] does that.
    pub fn fenced(mut self, prefix: &str) -> Self {
        self.fenced = Some(Fenced {
            prefix: prefix.to_string(),
            held: Mutex::new(HashMap::new()),
            lease: None,
        });
        self
    }

    /// Fenced sinks that write only under the node's group `lease`, which
    /// closes the gap the epoch fence leaves when a leader forgets a
    /// producer (see [`Lease`]). Call after [`KafkaCluster::fenced`].
    pub fn leased(mut self, lease: Lease) -> Self {
        if let Some(f) = &mut self.fenced {
            f.lease = Some(lease);
        }
        self
    }

    /// The transactional id of a destination partition under `prefix`.
    pub fn transactional_id(prefix: &str, tp: &TopicPartition) -> String {
        format!("{prefix}-{}-{}", tp.topic, tp.partition)
    }

    /// The fence a sink of `tp` writes under: the held one renewed (a new
    /// epoch, refused if another node took `tp`), or — for a partition
    /// this node never fenced, which only it ever wrote (see `Node::start`)
    /// — a first acquisition.
    pub(super) async fn sink_fence(
        &self,
        f: &Fenced,
        tp: &TopicPartition,
    ) -> Result<ProducerFence, KafkaError> {
        let held = f.held.lock().expect("fence map poisoned").get(tp).cloned();
        let fence = match held {
            Some(held) => fence::renew(&self.client, &held, FENCE_TXN_TIMEOUT).await?,
            None => {
                let tid = Self::transactional_id(&f.prefix, tp);
                fence::acquire(&self.client, &tid, FENCE_TXN_TIMEOUT).await?
            }
        };
        f.held
            .lock()
            .expect("fence map poisoned")
            .insert(tp.clone(), fence.clone());
        Ok(fence)
    }

    /// Acquires each partition's transactional id (and, with `mark`, writes
    /// its abort marker), [`FENCE_CONCURRENCY`] at a time, each bounded by
    /// [`FENCE_TIMEOUT`]; the new fence replaces any this node held.
    pub(super) async fn take_partitions(
        &self,
        partitions: Vec<TopicPartition>,
        mark: bool,
    ) -> Result<(), KafkaError> {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let Some(f) = &self.fenced else {
            return Ok(());
        };
        // A node that was stopped while it started a shard must not take
        // the partitions from the node the group gave them to meanwhile:
        // its lease ran out during the pause, and the fence waits until the
        // membership renews it or finds itself out.
        if let Some(lease) = &f.lease {
            let what = format!("{} destination partitions", partitions.len());
            lease.before_taking(&what, FENCE_TIMEOUT).await?;
        }
        stream::iter(partitions)
            .map(|tp| async move {
                let tid = Self::transactional_id(&f.prefix, &tp);
                let taken = async {
                    let fence = fence::acquire(&self.client, &tid, FENCE_TXN_TIMEOUT).await?;
                    if mark {
                        fence::fence_partitions(&self.client, &fence, std::slice::from_ref(&tp))
                            .await?;
                    }
                    Ok::<_, KafkaError>(fence)
                };
                let fence = tokio::time::timeout(FENCE_TIMEOUT, taken)
                    .await
                    .map_err(|_| KafkaError::Timeout {
                        api: "fence",
                        broker: format!("transaction coordinator of {tid}"),
                        timeout: FENCE_TIMEOUT,
                    })??;
                tracing::info!(partition = %tp, producer_id = fence.producer_id, epoch = fence.producer_epoch, marker = mark, "destination partition taken");
                f.held
                    .lock()
                    .expect("fence map poisoned")
                    .insert(tp, fence);
                Ok(())
            })
            .buffer_unordered(FENCE_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
    }
}
