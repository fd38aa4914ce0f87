//! A clustered node's destination: every partition written under a
//! transactional id of its own, taken from its previous owner at the
//! brokers (see ARCHITECTURE.md, "Fencing, for the clustered daemon").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{Fenced, KafkaCluster};
use crate::cluster::{BoxFuture, HeldFence};
use crate::kafka::admin::ConfigResource;
use crate::kafka::fence::{self, KeepAlive, ProducerFence};
use crate::kafka::fetch::TopicPartition;
use crate::kafka::lease::Lease;
use crate::kafka::produce::IdempotentProducer;
use crate::kafka::{KafkaClient, KafkaError};

/// How long a fence's transaction may stay open before the coordinator
/// aborts it; it is open only between AddPartitionsToTxn and EndTxn.
const FENCE_TXN_TIMEOUT: Duration = Duration::from_secs(60);
/// Partitions fenced at once when a node takes over a shard.
const FENCE_CONCURRENCY: usize = 8;
/// The most fencing one partition may take (each of its calls is bounded by
/// `delivery.timeout.ms` too).
const FENCE_TIMEOUT: Duration = Duration::from_secs(120);
/// Kafka's defaults of `producer.id.expiration.ms` and
/// `producer.id.expiration.check.interval.ms` and
/// `transactional.id.expiration.ms`, for a broker that does not list them.
const DEFAULT_EXPIRATION: Duration = Duration::from_secs(86_400);
const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(600);
const DEFAULT_TRANSACTIONAL_EXPIRATION: Duration = Duration::from_secs(7 * 86_400);

/// What a fenced sink needs to fence its partition again.
pub(super) struct SinkFence {
    pub(super) client: KafkaClient,
    pub(super) fence: ProducerFence,
    pub(super) tp: TopicPartition,
    pub(super) keep_alive: KeepAlive,
}

impl SinkFence {
    /// One abort marker at the sink's own epoch (EndTxn below v5 bumps no
    /// epoch), bounded by [`FENCE_TIMEOUT`]. Not under the lease: once a
    /// newer owner acquired the id, its coordinator refuses our
    /// transaction (`KafkaError::Fenced`) before any marker is written.
    pub(super) async fn refence(&self) -> Result<(), KafkaError> {
        let marked =
            fence::fence_partitions(&self.client, &self.fence, std::slice::from_ref(&self.tp));
        tokio::time::timeout(FENCE_TIMEOUT, marked)
            .await
            .map_err(|_| KafkaError::Timeout {
                api: "re-fence",
                broker: format!("transaction coordinator of {}", self.fence.transactional_id),
                timeout: FENCE_TIMEOUT,
            })??;
        tracing::info!(partition = %self.tp, producer_id = self.fence.producer_id, epoch = self.fence.producer_epoch, "destination partition fenced again before its producer expires");
        Ok(())
    }
}

impl HeldFence for SinkFence {
    fn keep_alive(&self) -> KeepAlive {
        self.keep_alive
    }

    fn refence(&self) -> BoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(SinkFence::refence(self))
    }
}

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
            keep_alive: Mutex::new(HashMap::new()),
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

    /// Ok unless this node writes under a group lease and may no longer:
    /// the lease ran out and is not renewed within the fence's wait, or
    /// the member was out of the group since the assignment it acts on.
    /// What the destination writes that are not produces — group offsets,
    /// topic configs, ACLs — check first: a node paused past its session
    /// must not commit, after it resumes, group offsets it translated
    /// before, over the consumers' own on a partition failed over since.
    pub(super) async fn under_lease(&self, what: &str) -> Result<(), KafkaError> {
        match self.fenced.as_ref().and_then(|f| f.lease.as_ref()) {
            Some(lease) => lease.before_taking(what, FENCE_TIMEOUT).await,
            None => Ok(()),
        }
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
                fence::acquire(
                    &self.client,
                    &tid,
                    FENCE_TXN_TIMEOUT,
                    std::slice::from_ref(tp),
                )
                .await?
            }
        };
        f.held
            .lock()
            .expect("fence map poisoned")
            .insert(tp.clone(), fence.clone());
        Ok(fence)
    }

    /// The fence this node holds on `tp`, with what keeps it alive.
    pub(super) async fn held(&self, tp: TopicPartition) -> Result<Option<SinkFence>, KafkaError> {
        let Some(f) = &self.fenced else {
            return Ok(None);
        };
        let held = f.held.lock().expect("fence map poisoned").get(&tp).cloned();
        let Some(fence) = held else {
            return Ok(None);
        };
        let keep_alive = self.keep_alive(f, &tp).await?;
        Ok(Some(SinkFence {
            client: self.client.clone(),
            fence,
            tp,
            keep_alive,
        }))
    }

    /// A fenced sink's producer (under the lease, if any) and what keeps
    /// its fence alive.
    pub(super) async fn fenced_producer(
        &self,
        f: &Fenced,
        tp: &TopicPartition,
    ) -> Result<(IdempotentProducer, SinkFence), KafkaError> {
        let fence = self.sink_fence(f, tp).await?;
        let keep_alive = self.keep_alive(f, tp).await?;
        let producer =
            IdempotentProducer::under_fence(self.client.clone(), &fence).sharing(&self.lanes);
        let producer = match &f.lease {
            Some(lease) => producer.leased(lease),
            None => producer,
        };
        let fence = SinkFence {
            client: self.client.clone(),
            fence,
            tp: tp.clone(),
            keep_alive,
        };
        Ok((producer, fence))
    }

    /// The producer expiry of `tp`'s leader (DescribeConfigs, once per
    /// broker): how soon a sink must fence the partition again. The
    /// transactional id's expiry belongs to its coordinator; the leader's
    /// setting stands for it (brokers of a cluster share it as a rule).
    pub(super) async fn keep_alive(
        &self,
        f: &Fenced,
        tp: &TopicPartition,
    ) -> Result<KeepAlive, KafkaError> {
        let (leader, _) = self.client.leader(&tp.topic, tp.partition).await?;
        if let Some(k) = f
            .keep_alive
            .lock()
            .expect("keep-alive map poisoned")
            .get(&leader)
        {
            return Ok(*k);
        }
        // A principal allowed to write but not to read broker configs
        // still mirrors, on Kafka's defaults (cached, so no request storm).
        let entries = match self
            .admin
            .describe_configs(&ConfigResource::Broker(leader))
            .await
        {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(broker = leader, error = %e, "cannot read the destination leader's producer expiry; fences are kept alive on Kafka's defaults (1 day, 7 days for transactional ids)");
                Vec::new()
            }
        };
        let ms = |name: &str, default: Duration| {
            entries
                .iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.as_deref()?.parse::<u64>().ok())
                .map_or(default, Duration::from_millis)
        };
        let k = KeepAlive {
            expiration: ms("producer.id.expiration.ms", DEFAULT_EXPIRATION),
            check_interval: ms(
                "producer.id.expiration.check.interval.ms",
                DEFAULT_CHECK_INTERVAL,
            ),
            transactional_expiration: ms(
                "transactional.id.expiration.ms",
                DEFAULT_TRANSACTIONAL_EXPIRATION,
            ),
        };
        if let Some(warning) = k.short_expiration_warning() {
            tracing::warn!(broker = leader, "{warning}");
        }
        tracing::info!(
            broker = leader,
            expiration_ms = k.expiration.as_millis() as u64,
            check_interval_ms = k.check_interval.as_millis() as u64,
            refence_age_ms = k.refence_age().as_millis() as u64,
            "destination leader's producer expiry"
        );
        f.keep_alive
            .lock()
            .expect("keep-alive map poisoned")
            .insert(leader, k);
        Ok(k)
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
                    let fence = fence::acquire(
                        &self.client,
                        &tid,
                        FENCE_TXN_TIMEOUT,
                        std::slice::from_ref(&tp),
                    )
                    .await?;
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
