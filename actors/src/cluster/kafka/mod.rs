//! The cluster traits over real Kafka, through the protocol layer.
//!
//! Fetching is shared per source broker, as Kafka's own replica fetchers do:
//! a few tasks per broker ([`FETCH_SESSIONS_PER_BROKER`], each with a share
//! of its partitions) keep a multi-partition fetch going for every open
//! partition that broker leads and still has room in its buffer, and hand
//! each partition its data through a small bounded channel. A partition
//! whose consumer is slow simply drops out of the next request until it has
//! room again — back-pressure without a growing queue.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmirror_events::TopicId;
use tokio::sync::mpsc;

use super::{
    Ack, AclBinding, BatchHeader, BatchHeaders, BoxFuture, ClusterView, CommittedRead,
    DestinationCluster, GroupAnswers, GroupListing, GroupOffsets, HeldFence, LogBounds,
    PartitionFetch, PartitionSink, SourceCluster, TopicInfo,
};
use crate::kafka::admin::{AclFilter, Admin, AlterConfigOp, ConfigResource, NewTopic};
use crate::kafka::batch::{OutgoingBatch, RecordBatch};
use crate::kafka::budget::MemoryBudget;
use crate::kafka::fence::{KeepAlive, ProducerFence};
use crate::kafka::fetch::{FetchError, FetchOptions, FetchSession, IsolationLevel, TopicPartition};
use crate::kafka::lease::Lease;
use crate::kafka::produce::{IdempotentProducer, PartitionProducer, ProduceLanes};
use crate::kafka::{KafkaClient, KafkaError};

mod bounds;
mod fenced;
mod fetcher;
mod topics;

use bounds::{batched_bounds, batched_settling, bounds_many_retrying, LeaderFlights, Settling};
pub use fetcher::FetchFigures;
use fetcher::{broker_fetcher, BrokerFetches, KafkaPartitionFetch, Register, PARTITION_BUFFER};
use topics::TopicsFlight;

/// Fetch sessions per source broker, each its own loop, incremental session
/// and connection, holding a share of the partitions that broker leads: one
/// session's request is at the broker while another's answer is handed
/// out and forwarded, where a single session would leave the broker idle
/// for that time (the backlog copy was round-trip bound with one). A
/// partition stays in the session it was first placed in (round robin per
/// broker), so its position and fetch-session entry never move between two.
pub const FETCH_SESSIONS_PER_BROKER: u8 = 2;

/// The first connection lane of the fetch sessions: lane 0 is shared by
/// admin calls and produces (and the producer's few lanes follow it), and a
/// Fetch the broker parks for up to `fetch.max.wait.ms` holds every request
/// queued behind it on its connection, so fetches travel connections that
/// carry nothing else.
const FETCH_LANE_BASE: u8 = 16;
const _: () = assert!(crate::kafka::produce::PRODUCE_LANES <= FETCH_LANE_BASE);

/// The fetch tasks of a cluster read as a source, by (broker, session),
/// and where each partition was placed.
#[derive(Default)]
struct Fetchers {
    tasks: HashMap<(i32, u8), mpsc::UnboundedSender<Register>>,
    lanes: HashMap<TopicPartition, u8>,
    placed: HashMap<i32, usize>,
    figures: HashMap<i32, Arc<BrokerFetches>>,
}

/// How long a settled-bounds check waits for the destination's high
/// watermark to reach its log end before giving up (retryable).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

async fn list_groups(admin: &Admin) -> Result<Vec<GroupListing>, KafkaError> {
    Ok(admin
        .list_groups(&[])
        .await?
        .into_iter()
        .map(|g| GroupListing {
            group_id: g.group_id,
            state: g.state,
            protocol_type: g.protocol_type,
            group_type: g.group_type,
        })
        .collect())
}

async fn committed_offsets(
    admin: &Admin,
    group: &str,
    topics: &[String],
) -> Result<GroupOffsets, KafkaError> {
    let mut all = admin.offset_fetch(group, None).await?;
    all.retain(|(t, _), _| topics.contains(t));
    Ok(all)
}

async fn describe_acls(admin: &Admin) -> Result<Vec<AclBinding>, KafkaError> {
    admin.describe_acls(&AclFilter::any()).await
}

/// The batches holding offsets `[from, to)`, read in a fetch session of
/// its own (never the shared stream a copy reads from) at `isolation`,
/// until `max_bytes` of batches are read (`next_offset` then says where it
/// stopped). Read uncommitted, a range the log does not hold to its end is
/// an error; read committed, the read ends early at the last stable offset
/// (an open transaction) and keeps the broker's aborted-transaction lists.
async fn read_range(
    client: &KafkaClient,
    tp: &TopicPartition,
    from: i64,
    to: i64,
    max_bytes: usize,
    isolation: IsolationLevel,
) -> Result<CommittedRead, KafkaError> {
    let mut out = CommittedRead {
        next_offset: from,
        ..CommittedRead::default()
    };
    if from >= to {
        return Ok(out);
    }
    let (leader, epoch) = client.leader(&tp.topic, tp.partition).await?;
    let options = FetchOptions {
        isolation,
        max_wait: Duration::from_millis(100),
        incremental: false,
        ..FetchOptions::default()
    };
    let mut session = FetchSession::new(client.clone(), leader, options);
    session.add(tp.clone(), from, epoch, uuid::Uuid::nil());
    let mut bytes = 0usize;
    while out.next_offset < to && bytes < max_bytes {
        let at = out.next_offset;
        let fetched = session
            .fetch()
            .await?
            .into_iter()
            .find(|(t, _)| t == tp)
            .map(|(_, r)| r)
            .unwrap_or_else(|| {
                Err(FetchError::Other(KafkaError::Unknown(format!(
                    "{tp}: no data in a fetch at {at}"
                ))))
            })
            .map_err(|e| match e {
                FetchError::Other(e) => e,
                other => KafkaError::Unknown(format!("reading {tp} at {at}: {other}")),
            })?;
        for b in fetched.batches() {
            let b = b?;
            if b.base_offset() < to && b.next_offset() > from {
                bytes += b.size();
                out.batches.push(b);
            }
        }
        out.aborted_transactions
            .extend(fetched.aborted_transactions.iter().copied());
        if fetched.next_offset <= at {
            if isolation == IsolationLevel::ReadCommitted {
                break; // nothing complete past `at` below the last stable offset
            }
            return Err(KafkaError::Unknown(format!(
                "{tp}: no complete batch at offset {at} below the end {to}"
            )));
        }
        out.next_offset = fetched.next_offset.min(to);
    }
    Ok(out)
}

/// A filter matching exactly one binding.
fn exact_filter(a: &AclBinding) -> AclFilter {
    AclFilter {
        resource_type: a.resource_type,
        resource_name: Some(a.resource_name.clone()),
        pattern_type: a.pattern_type,
        principal: Some(a.principal.clone()),
        host: Some(a.host.clone()),
        operation: a.operation,
        permission_type: a.permission_type,
    }
}

/// A Kafka cluster, in either role: read as a source (a fetch task per
/// broker, started when a partition it leads is first opened) and written
/// as a destination. One type for both, because a failback reads the old
/// destination as its source.
pub struct KafkaCluster {
    client: KafkaClient,
    admin: Admin,
    /// How partitions are fetched when this cluster is read as a source.
    options: FetchOptions,
    fetchers: Mutex<Fetchers>,
    /// The daemon's memory budget, shared by every source's fetch tasks
    /// (none: each task holds what its buffers allow).
    budget: Option<Arc<MemoryBudget>>,
    /// Set in a clustered daemon: every destination partition is written
    /// under a transactional id of its own (see [`KafkaCluster::fenced`]).
    fenced: Option<Fenced>,
    /// `topics` shared by callers that ask together (see [`TopicsFlight`]).
    topics: TopicsFlight,
    /// `bounds` of single partitions sent together (see [`bounds::BoundsFlight`]).
    bounds: LeaderFlights,
    /// `settled_bounds`' asks, sent together likewise.
    settling: LeaderFlights<Settling>,
    /// The produce dispatchers every sink's producer shares (see
    /// [`ProduceLanes`]).
    lanes: ProduceLanes,
}

/// A clustered node's ownership of the destination partitions it writes.
struct Fenced {
    /// `{prefix}-{topic}-{partition}` is a partition's transactional id.
    prefix: String,
    /// The fence each partition was last acquired or renewed under here.
    held: Mutex<HashMap<TopicPartition, ProducerFence>>,
    /// The group lease the sinks write under (see [`KafkaCluster::leased`]).
    lease: Option<Lease>,
    /// Each leader's producer expiry, read once per broker.
    keep_alive: Mutex<HashMap<i32, KeepAlive>>,
}

impl KafkaCluster {
    pub fn new(client: KafkaClient, options: FetchOptions) -> Self {
        KafkaCluster {
            admin: Admin::new(client.clone()),
            client,
            options,
            fetchers: Mutex::new(Fetchers::default()),
            budget: None,
            fenced: None,
            topics: TopicsFlight::default(),
            bounds: LeaderFlights::default(),
            settling: LeaderFlights::default(),
            lanes: ProduceLanes::default(),
        }
    }

    /// Reads as a source within `budget` (see [`crate::kafka::budget`]).
    pub fn with_budget(mut self, budget: Arc<MemoryBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The fetch task of `tp`'s session on broker `node`, started on first use.
    fn fetcher(&self, node: i32, tp: &TopicPartition) -> mpsc::UnboundedSender<Register> {
        let mut guard = self.fetchers.lock().expect("fetcher map poisoned");
        let f = &mut *guard;
        let lane = match f.lanes.get(tp) {
            Some(&lane) => lane,
            None => {
                let placed = f.placed.entry(node).or_default();
                let lane = (*placed % usize::from(FETCH_SESSIONS_PER_BROKER)) as u8;
                *placed += 1;
                f.lanes.insert(tp.clone(), lane);
                lane
            }
        };
        if let Some(tx) = f.tasks.get(&(node, lane)).filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let session = FetchSession::new(self.client.clone(), node, self.options.clone())
            .on_lane(FETCH_LANE_BASE + lane);
        let figures = f.figures.entry(node).or_default().clone();
        tokio::spawn(broker_fetcher(
            session,
            self.client.clone(),
            rx,
            self.budget.clone(),
            figures,
        ));
        f.tasks.insert((node, lane), tx.clone());
        tx
    }

    /// What the fetch sessions of source broker `node` have done (zeros
    /// before its first fetch).
    pub fn fetch_figures(&self, node: i32) -> FetchFigures {
        let fetchers = self.fetchers.lock().expect("fetcher map poisoned");
        fetchers
            .figures
            .get(&node)
            .map(|f| f.figures())
            .unwrap_or_default()
    }
}

impl ClusterView for KafkaCluster {
    fn cluster_id(&self) -> BoxFuture<'_, Result<String, KafkaError>> {
        Box::pin(async move { Ok(self.admin.describe_cluster().await?.cluster_id) })
    }

    fn topics(&self) -> BoxFuture<'_, Result<Vec<TopicInfo>, KafkaError>> {
        Box::pin(self.topics.topics(&self.client, Duration::ZERO))
    }

    fn recent_topics(
        &self,
        max_age: Duration,
    ) -> BoxFuture<'_, Result<Vec<TopicInfo>, KafkaError>> {
        Box::pin(self.topics.topics(&self.client, max_age))
    }

    fn bounds(&self, tp: &TopicPartition) -> BoxFuture<'_, Result<LogBounds, KafkaError>> {
        let tp = tp.clone();
        Box::pin(async move { batched_bounds(&self.bounds, &self.admin, &tp).await })
    }

    fn bounds_many<'a>(
        &'a self,
        tps: &'a [TopicPartition],
    ) -> BoxFuture<'a, Vec<Result<LogBounds, KafkaError>>> {
        Box::pin(bounds_many_retrying(&self.admin, tps))
    }

    fn list_groups(&self) -> BoxFuture<'_, Result<Vec<GroupListing>, KafkaError>> {
        Box::pin(list_groups(&self.admin))
    }

    fn committed_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> BoxFuture<'_, Result<GroupOffsets, KafkaError>> {
        let (group, topics) = (group.to_string(), topics.to_vec());
        Box::pin(async move { committed_offsets(&self.admin, &group, &topics).await })
    }

    fn committed_offsets_of_groups<'a>(
        &'a self,
        groups: &'a [String],
        topics: &'a [String],
    ) -> GroupAnswers<'a> {
        Box::pin(async move {
            let answers = self.admin.offset_fetch_groups(groups).await?;
            Ok(answers
                .into_iter()
                .map(|(g, a)| {
                    let a = a.map(|mut all| {
                        all.retain(|(t, _), _| topics.contains(t));
                        all
                    });
                    (g, a)
                })
                .collect())
        })
    }

    fn describe_acls(&self) -> BoxFuture<'_, Result<Vec<AclBinding>, KafkaError>> {
        Box::pin(describe_acls(&self.admin))
    }

    fn create_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(async move {
            self.under_lease("ACLs").await?;
            self.admin.create_acls(&acls).await
        })
    }

    fn delete_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(async move {
            self.under_lease("ACLs").await?;
            let filters: Vec<AclFilter> = acls.iter().map(exact_filter).collect();
            self.admin.delete_acls(&filters).await.map(|_| ())
        })
    }

    fn batch_headers(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<BatchHeaders, KafkaError>> {
        let tp = tp.clone();
        Box::pin(async move {
            let read = read_range(
                &self.client,
                &tp,
                from,
                to,
                max_bytes,
                IsolationLevel::ReadUncommitted,
            )
            .await?;
            Ok(BatchHeaders {
                batches: read.batches.iter().map(BatchHeader::of).collect(),
                capped: read.next_offset < to,
            })
        })
    }

    fn read_committed(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<CommittedRead, KafkaError>> {
        let tp = tp.clone();
        Box::pin(async move {
            read_range(
                &self.client,
                &tp,
                from,
                to,
                max_bytes,
                IsolationLevel::ReadCommitted,
            )
            .await
        })
    }

    fn topic_config_values(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<BTreeMap<String, Option<String>>, KafkaError>> {
        let resource = ConfigResource::Topic(topic.to_string());
        Box::pin(async move {
            Ok(self
                .admin
                .describe_configs(&resource)
                .await?
                .into_iter()
                .map(|e| (e.name, if e.is_sensitive { None } else { e.value }))
                .collect())
        })
    }

    fn end_offset_for_epoch(
        &self,
        tp: &TopicPartition,
        epoch: i32,
    ) -> BoxFuture<'_, Result<(i32, i64), KafkaError>> {
        let tp = tp.clone();
        Box::pin(async move {
            self.admin
                .offset_for_leader_epoch(&tp.topic, tp.partition, epoch)
                .await
        })
    }

    fn topic_configs(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<Vec<(String, String)>, KafkaError>> {
        let resource = ConfigResource::Topic(topic.to_string());
        Box::pin(async move {
            Ok(self
                .admin
                .describe_configs(&resource)
                .await?
                .into_iter()
                .filter(|e| e.is_explicit() && !e.is_sensitive)
                .filter(|e| {
                    !kmirror_events::DEFAULT_TOPIC_PROPERTIES_EXCLUDE.contains(&e.name.as_str())
                })
                .filter_map(|e| Some((e.name, e.value?)))
                .collect())
        })
    }
}

impl SourceCluster for KafkaCluster {
    fn open(
        &self,
        tp: TopicPartition,
        topic_id: TopicId,
        offset: i64,
        last_epoch: i32,
    ) -> BoxFuture<'_, Result<Box<dyn PartitionFetch>, KafkaError>> {
        Box::pin(async move {
            let (leader, epoch) = self.client.leader(&tp.topic, tp.partition).await?;
            let (tx, rx) = mpsc::channel(PARTITION_BUFFER);
            self.fetcher(leader, &tp)
                .send(Register {
                    tp,
                    topic_id: uuid::Uuid::from_bytes(topic_id.0),
                    offset,
                    leader_epoch: epoch,
                    last_epoch,
                    tx,
                })
                .map_err(|_| KafkaError::Closed)?;
            Ok(Box::new(KafkaPartitionFetch { rx }) as Box<dyn PartitionFetch>)
        })
    }
}

struct KafkaSink {
    producer: PartitionProducer,
    id: (i64, i16),
    /// A fenced sink's fence, kept alive by `refence`.
    fence: Option<fenced::SinkFence>,
}

impl PartitionSink for KafkaSink {
    fn send(&mut self, batch: OutgoingBatch) -> BoxFuture<'_, Result<Ack, KafkaError>> {
        Box::pin(async move {
            let ticket = self.producer.send(batch).await?;
            Ok(Box::pin(ticket) as Ack)
        })
    }

    fn producer(&self) -> (i64, i16) {
        self.id
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(self.producer.close())
    }

    fn keep_alive(&self) -> Option<KeepAlive> {
        self.fence.as_ref().map(|f| f.keep_alive)
    }

    fn refence(&mut self) -> BoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(async move {
            match &self.fence {
                Some(f) => f.refence().await,
                None => Ok(()),
            }
        })
    }
}

impl DestinationCluster for KafkaCluster {
    fn settled_bounds(&self, tp: &TopicPartition) -> BoxFuture<'_, Result<LogBounds, KafkaError>> {
        let tp = tp.clone();
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
            loop {
                let Settling { bounds: b, log_end } =
                    batched_settling(&self.settling, &self.admin, &tp).await?;
                if log_end <= b.end {
                    return Ok(b);
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(KafkaError::Unknown(format!(
                        "{tp}: high watermark {} did not reach the log end {log_end} within {SETTLE_TIMEOUT:?}",
                        b.end
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    fn leader_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        let md = self.client.metadata();
        md.topic(&tp.topic)?
            .partition(tp.partition)
            .map(|p| p.leader_epoch)
            .filter(|e| *e >= 0)
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: Vec<(String, String)>,
    ) -> BoxFuture<'_, Result<(), KafkaError>> {
        let topic = NewTopic {
            name: name.to_string(),
            partitions,
            replication_factor: -1,
            configs: configs.into_iter().collect(),
        };
        Box::pin(async move {
            for (_, r) in self.admin.create_topics(&[topic], false).await? {
                r?;
            }
            Ok(())
        })
    }

    fn read_page(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Vec<RecordBatch>, KafkaError>> {
        let tp = tp.clone();
        Box::pin(async move {
            let read = read_range(
                &self.client,
                &tp,
                from,
                to,
                max_bytes,
                IsolationLevel::ReadUncommitted,
            )
            .await?;
            Ok(read.batches)
        })
    }

    fn delete_topic(&self, name: &str) -> BoxFuture<'_, Result<(), KafkaError>> {
        let name = name.to_string();
        Box::pin(async move { self.admin.delete_topic(&name).await })
    }

    fn max_message_bytes(&self, topic: &str) -> BoxFuture<'_, Result<usize, KafkaError>> {
        let resource = ConfigResource::Topic(topic.to_string());
        Box::pin(async move {
            let entries = self.admin.describe_configs(&resource).await?;
            Ok(entries
                .iter()
                .find(|e| e.name == "max.message.bytes")
                .and_then(|e| e.value.as_deref()?.parse().ok())
                .unwrap_or(1_048_588))
        })
    }

    fn commit_offsets(
        &self,
        group: &str,
        offsets: GroupOffsets,
    ) -> BoxFuture<'_, Result<(), KafkaError>> {
        let group = group.to_string();
        Box::pin(async move {
            self.under_lease(&format!("the offsets of group {group}"))
                .await?;
            // OffsetCommit v10+ names topics by id: make sure we know them.
            let md = self.client.metadata();
            let missing: Vec<String> = offsets
                .keys()
                .map(|(t, _)| t.clone())
                .filter(|t| md.topic(t).is_none())
                .collect();
            if !missing.is_empty() {
                self.client.refresh_metadata(Some(&missing)).await?;
            }
            self.admin.offset_commit(&group, &offsets).await
        })
    }

    fn alter_topic_configs(
        &self,
        topic: &str,
        changes: Vec<(String, Option<String>)>,
    ) -> BoxFuture<'_, Result<(), KafkaError>> {
        let resource = ConfigResource::Topic(topic.to_string());
        let ops: Vec<AlterConfigOp> = changes
            .into_iter()
            .map(|(k, v)| match v {
                Some(v) => AlterConfigOp::Set(k, v),
                None => AlterConfigOp::Delete(k),
            })
            .collect();
        Box::pin(async move {
            self.under_lease("topic configs").await?;
            self.admin.incremental_alter_configs(&resource, &ops).await
        })
    }

    fn create_partitions(&self, topic: &str, total: i32) -> BoxFuture<'_, Result<(), KafkaError>> {
        let topic = topic.to_string();
        Box::pin(async move { self.admin.create_partitions(&topic, total).await })
    }

    fn open_sink(
        &self,
        tp: TopicPartition,
    ) -> BoxFuture<'_, Result<Box<dyn PartitionSink>, KafkaError>> {
        Box::pin(async move {
            // A fresh producer id (or, fenced, a new epoch) per opened sink:
            // a sink is reopened after a failure, and sequences restart at 0
            // only under a new producer id or epoch (the broker would refuse
            // them as out of order otherwise).
            let (producer, fence) = match &self.fenced {
                Some(f) => {
                    let (producer, fence) = self.fenced_producer(f, &tp).await?;
                    (producer, Some(fence))
                }
                None => (
                    IdempotentProducer::new(self.client.clone())
                        .await?
                        .sharing(&self.lanes),
                    None,
                ),
            };
            let p = producer.partition(&tp.topic, tp.partition)?;
            Ok(Box::new(KafkaSink {
                producer: p,
                id: producer.id(),
                fence,
            }) as Box<dyn PartitionSink>)
        })
    }
    fn fence(&self, partitions: Vec<TopicPartition>) -> BoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(self.take_partitions(partitions, true))
    }

    fn acquire(&self, partitions: Vec<TopicPartition>) -> BoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(self.take_partitions(partitions, false))
    }

    fn forget(&self, partitions: Vec<TopicPartition>) {
        if let Some(f) = &self.fenced {
            let mut held = f.held.lock().expect("fence map poisoned");
            for tp in &partitions {
                held.remove(tp);
            }
        }
    }

    fn held_fence(
        &self,
        tp: TopicPartition,
    ) -> BoxFuture<'_, Result<Option<Box<dyn HeldFence>>, KafkaError>> {
        Box::pin(async move {
            let held = self.held(tp).await?;
            Ok(held.map(|f| Box::new(f) as Box<dyn HeldFence>))
        })
    }

    fn fence_producer_id(&self, tp: &TopicPartition) -> Option<i64> {
        let f = self.fenced.as_ref()?;
        let held = f.held.lock().expect("fence map poisoned");
        held.get(tp).map(|fence| fence.producer_id)
    }
}
