//! What the actors need from a source and a destination cluster, as traits.
//!
//! The actors never call the protocol layer directly: they hold a
//! [`SourceCluster`] and a [`DestinationCluster`], which share the reads of
//! [`ClusterView`]. The Kafka implementation ([`kafka`], one type for both
//! roles) is what the daemon runs; the in-memory ones (`memory`, behind the
//! `testing` feature) let every state and failure of a PartitionActor be
//! unit-tested in milliseconds, with errors, timeouts and leader moves
//! injected. Both speak
//! the protocol layer's own types (raw batches in [`FetchedPartition`],
//! [`OutgoingBatch`] out), so the in-memory runs exercise the same batch
//! classification and re-encoding code as production.

pub mod kafka;
/// Test doubles: only in this crate's tests and with the `testing` feature,
/// never in the release library.
#[cfg(any(test, feature = "testing"))]
pub mod memory;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use kmirror_events::{AclEntry, TopicId, TopicRef};

use crate::kafka::batch::{OutgoingBatch, RecordBatch};
use crate::kafka::fence::KeepAlive;
use crate::kafka::fetch::{FetchError, FetchedPartition, TopicPartition};
use crate::kafka::produce::ProduceAck;
use crate::kafka::KafkaError;

pub use crate::kafka::admin::{AclBinding, CommittedOffset};

/// A group's committed offsets by `(topic, partition)`.
pub type GroupOffsets = BTreeMap<(String, i32), CommittedOffset>;

/// What [`ClusterView::committed_offsets_of_groups`] answers: each group
/// with its offsets or the error that group alone met.
pub type GroupAnswers<'a> =
    BoxFuture<'a, Result<Vec<(String, Result<GroupOffsets, KafkaError>)>, KafkaError>>;

/// A group as ListGroups reports it: what offset sync needs to pick the
/// groups to copy and to leave the destination's live groups alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    /// As the coordinator spells it (`Stable`, `Empty`, `ASSIGNING`, …).
    pub state: String,
    /// `consumer`, `connect`, or empty for a standalone-commit group.
    pub protocol_type: String,
    /// `classic`, `consumer`, `share` (empty from brokers before KIP-848).
    pub group_type: String,
}

/// A boxed, sendable future: the trait methods below return these so the
/// traits stay object-safe (`Arc<dyn SourceCluster>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The bounds of a partition's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBounds {
    /// First offset still in the log.
    pub log_start: i64,
    /// High watermark: one past the last committed offset.
    pub end: i64,
    /// Current leader epoch of the partition (−1 unknown).
    pub leader_epoch: i32,
}

/// A record batch's header, read without its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// One past the batch's last offset.
    pub next_offset: i64,
    /// The whole batch as stored, in bytes.
    pub size: usize,
    pub max_timestamp: i64,
    pub leader_epoch: i32,
    pub producer_id: i64,
    /// A transaction marker.
    pub is_control: bool,
}

/// The headers [`ClusterView::batch_headers`] read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchHeaders {
    pub batches: Vec<BatchHeader>,
    /// The read stopped at its byte cap before the end of the range.
    pub capped: bool,
}

impl BatchHeader {
    /// The header of a stored batch.
    pub fn of(b: &crate::kafka::batch::RecordBatch) -> Self {
        BatchHeader {
            base_offset: b.base_offset(),
            next_offset: b.next_offset(),
            size: b.size(),
            max_timestamp: b.max_timestamp(),
            leader_epoch: b.partition_leader_epoch(),
            producer_id: b.producer_id(),
            is_control: b.is_control(),
        }
    }
}

/// The Kafka binding of an ACL in kmirror's canonical terms (`None` for
/// codes kmirror does not name).
pub fn acl_binding(e: &AclEntry) -> Option<AclBinding> {
    let (resource_type, pattern_type, operation, permission_type) = e.codes()?;
    Some(AclBinding {
        resource_type,
        resource_name: e.resource_name.clone(),
        pattern_type,
        principal: e.principal.clone(),
        host: e.host.clone(),
        operation,
        permission_type,
    })
}

/// A Kafka ACL binding in kmirror's canonical terms (`None` for codes
/// kmirror does not name: ANY, MATCH, UNKNOWN).
pub fn acl_entry(a: &AclBinding) -> Option<AclEntry> {
    AclEntry::from_codes(
        a.resource_type,
        a.pattern_type,
        &a.resource_name,
        &a.principal,
        &a.host,
        a.operation,
        a.permission_type,
    )
}

/// What [`ClusterView::read_committed`] read.
#[derive(Clone, Debug, Default)]
pub struct CommittedRead {
    /// The batches holding offsets in the range, markers and aborted data
    /// included: the caller drops them as the pump does.
    pub batches: Vec<RecordBatch>,
    /// `(producer id, first offset)` of the aborted transactions the
    /// broker named for the range (Kafka's `read_committed` list).
    pub aborted_transactions: Vec<(i64, i64)>,
    /// Where the read stopped: the range's end, or earlier at the byte cap
    /// or at the last stable offset (an open transaction).
    pub next_offset: i64,
}

/// A topic as the source describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: TopicId,
    pub partitions: i32,
    /// Kafka marks its own internal topics; they are never mirrored.
    pub internal: bool,
}

/// A continuous read of one source partition, from a position onwards.
///
/// Implementations prefetch: data may already be buffered when `next` is
/// called. After an error the stream is finished; the caller opens a new
/// one at the position it decides.
pub trait PartitionFetch: Send {
    fn next(&mut self) -> BoxFuture<'_, Result<FetchedPartition, FetchError>>;
}

/// The acknowledgement of one produced batch, resolved in send order.
pub type Ack = BoxFuture<'static, Result<ProduceAck, KafkaError>>;

/// An ordered, pipelined, idempotent writer into one destination partition.
pub trait PartitionSink: Send {
    /// Queues a batch, waiting while the pipeline is full (back-pressure).
    fn send(&mut self, batch: OutgoingBatch) -> BoxFuture<'_, Result<Ack, KafkaError>>;
    /// `(producer id, epoch)` stamped on every batch this sink writes:
    /// recorded before its first produce, so alignment can tell kmirror's
    /// batches from a foreign writer's.
    fn producer(&self) -> (i64, i16);
    /// Resolves once nothing this sink queued can still reach the
    /// destination (every batch acknowledged or given up). Dropping a sink
    /// does not stop a producer that is retrying; only this says it is done.
    fn close(self: Box<Self>) -> BoxFuture<'static, ()>;
    /// When the partition must be fenced again ([`Self::refence`]) so its
    /// leader does not forget this sink's producer; only a clustered
    /// node's fenced sink has one.
    fn keep_alive(&self) -> Option<KeepAlive> {
        None
    }
    /// Writes one abort marker at this sink's epoch on its partition: the
    /// leader keeps the fence another `producer.id.expiration.ms`, while
    /// the epoch and the sink's sequences go on. Call with nothing in
    /// flight: the marker takes the partition's next offset. A newer owner
    /// is [`KafkaError::Fenced`].
    fn refence(&mut self) -> BoxFuture<'_, Result<(), KafkaError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A partition's fence held without a sink: what keeps a PAUSED or FAILED
/// partition closed to an old owner (see [`PartitionSink::refence`]).
pub trait HeldFence: Send + Sync {
    /// When it must be fenced again.
    fn keep_alive(&self) -> KeepAlive;
    /// One abort marker at the held epoch. A newer owner is
    /// [`KafkaError::Fenced`].
    fn refence(&self) -> BoxFuture<'_, Result<(), KafkaError>>;
}

/// How old a topic list a periodic check takes
/// ([`ClusterView::recent_topics`]). A mirror's discovery, metadata sync
/// and risk samples each run every 5 s by default; an answer younger than
/// this serves the ones that follow closely, and a new topic or grown
/// partition count is seen at most this much later.
pub const RECENT_TOPICS_AGE: Duration = Duration::from_secs(2);

/// What kmirror reads from either cluster: identity, topics, log bounds,
/// groups and ACLs. Source and destination answer these the same way, and a
/// failback reads the old destination as a source, so each backend writes
/// them once.
pub trait ClusterView: Send + Sync {
    fn cluster_id(&self) -> BoxFuture<'_, Result<String, KafkaError>>;
    /// Every topic of the cluster (internal ones marked).
    fn topics(&self) -> BoxFuture<'_, Result<Vec<TopicInfo>, KafkaError>>;
    /// [`Self::topics`] for a periodic check that an answer up to
    /// `max_age` old serves as well ([`RECENT_TOPICS_AGE`]): a mirror's
    /// discovery, its metadata sync and its risk samples each listed the
    /// source's topics every 5 s, three full metadata answers per mirror
    /// that the source broker builds (every partition of the cluster) and
    /// the daemon decodes.
    fn recent_topics(
        &self,
        max_age: Duration,
    ) -> BoxFuture<'_, Result<Vec<TopicInfo>, KafkaError>> {
        let _ = max_age;
        self.topics()
    }
    /// Log start and high watermark now, without waiting for them to
    /// settle: what a translated group offset is clamped to.
    fn bounds(&self, tp: &TopicPartition) -> BoxFuture<'_, Result<LogBounds, KafkaError>>;
    /// [`Self::bounds`] of many partitions, answered in the order asked.
    /// The risk sample of thousands of partitions asks them together, so
    /// Kafka answers with a request per broker rather than per partition.
    fn bounds_many<'a>(
        &'a self,
        tps: &'a [TopicPartition],
    ) -> BoxFuture<'a, Vec<Result<LogBounds, KafkaError>>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(tps.len());
            for tp in tps {
                out.push(self.bounds(tp).await);
            }
            out
        })
    }
    /// Every group with its state: offset sync copies the source's and
    /// leaves the destination's live groups alone.
    fn list_groups(&self) -> BoxFuture<'_, Result<Vec<GroupListing>, KafkaError>>;
    /// A group's committed offsets on `topics`.
    fn committed_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> BoxFuture<'_, Result<GroupOffsets, KafkaError>>;
    /// Many groups' committed offsets on `topics`, one answer per group in
    /// the order given. Offset sync reads every group each pass: the Kafka
    /// backend batches them per group coordinator; this default asks group
    /// by group, 16 at once.
    fn committed_offsets_of_groups<'a>(
        &'a self,
        groups: &'a [String],
        topics: &'a [String],
    ) -> GroupAnswers<'a> {
        Box::pin(async move {
            Ok(stream::iter(groups.iter().cloned())
                .map(|g| async move {
                    let answer = self.committed_offsets(&g, topics).await;
                    (g, answer)
                })
                .buffered(16)
                .collect()
                .await)
        })
    }
    /// Every ACL (SECURITY_DISABLED when the cluster has no authorizer).
    fn describe_acls(&self) -> BoxFuture<'_, Result<Vec<AclBinding>, KafkaError>>;
    /// OffsetForLeaderEpoch on the partition's leader: the largest leader
    /// epoch up to `epoch` its log knows, and the offset where that epoch
    /// ends there (its log end for the current epoch; for an epoch older
    /// than all it knows, that epoch and where its first known one starts);
    /// (−1, −1) for an epoch newer than all it knows.
    /// Both clusters answer it: alignment asks the source whether its
    /// history still holds the last mirrored record, a failback asks both.
    fn end_offset_for_epoch(
        &self,
        tp: &TopicPartition,
        epoch: i32,
    ) -> BoxFuture<'_, Result<(i32, i64), KafkaError>>;
    /// The topic's explicitly set configs, minus those a mirror never copies
    /// (`kmirror_events::DEFAULT_TOPIC_PROPERTIES_EXCLUDE`).
    fn topic_configs(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<Vec<(String, String)>, KafkaError>>;
    /// Creates these bindings. Both clusters are asked: ACL sync writes the
    /// destination, a planned switchover fences the source.
    fn create_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>>;
    /// Deletes exactly these bindings (each matched on every field).
    fn delete_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>>;
    /// The headers of the batches holding offsets `[from, to)`, read
    /// uncommitted in a fetch session of its own (never the shared stream a
    /// partition's copy reads from), until `max_bytes` of batches are read
    /// (`capped` then says the range goes on). What alignment checks
    /// producers with, and what a failover report sizes the unmirrored
    /// range with.
    fn batch_headers(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<BatchHeaders, KafkaError>>;
    /// The batches holding offsets `[from, to)` as a `read_committed`
    /// consumer is served them, with the broker's aborted-transaction list,
    /// in a fetch session of its own, until `max_bytes` of batches are read.
    /// `kmirror verify` reads both sides with it, and drops what the pump
    /// drops (markers, aborted data) with the pump's own classification.
    fn read_committed(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<CommittedRead, KafkaError>>;
    /// A topic's effective config values, defaults included (sensitive
    /// ones as `None`).
    fn topic_config_values(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<BTreeMap<String, Option<String>>, KafkaError>>;
}

/// The source cluster, read-only.
pub trait SourceCluster: ClusterView {
    /// Starts reading `tp` at `offset`, sharing one fetch stream per source
    /// broker with every other open partition that broker leads. Every fetch
    /// names the topic by `topic_id`: a topic deleted and re-created under
    /// the same name is another topic, and its records must never be read
    /// as this one's. `last_epoch` is the leader epoch of the record before
    /// `offset` (−1 unknown): every fetch carries the epoch of the last
    /// record read (KIP-320's `LastFetchedEpoch`), and a leader whose log
    /// parted from ours answers [`FetchError::Diverged`].
    fn open(
        &self,
        tp: TopicPartition,
        topic_id: TopicId,
        offset: i64,
        last_epoch: i32,
    ) -> BoxFuture<'_, Result<Box<dyn PartitionFetch>, KafkaError>>;
}

/// The destination cluster, which kmirror writes.
pub trait DestinationCluster: ClusterView {
    /// Log bounds once every record the leader holds is committed: an
    /// appended but uncommitted batch of an earlier (crashed) producer would
    /// otherwise become visible after we resumed behind it, as a duplicate.
    fn settled_bounds(&self, tp: &TopicPartition) -> BoxFuture<'_, Result<LogBounds, KafkaError>>;
    /// The partition's leader epoch as last seen in (cached) metadata, without
    /// a request: the data path polls it to notice a destination leader change.
    fn leader_epoch(&self, tp: &TopicPartition) -> Option<i32>;
    /// Creates a topic with the given partition count and configs.
    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: Vec<(String, String)>,
    ) -> BoxFuture<'_, Result<(), KafkaError>>;
    /// The batches holding offsets `[from, to)`, read uncommitted: after a
    /// crash, alignment checks that the batches above the recorded run
    /// lengths are kmirror's own (a range bounded by what was in flight).
    fn read_batches(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
    ) -> BoxFuture<'_, Result<Vec<RecordBatch>, KafkaError>> {
        self.read_page(tp, from, to, usize::MAX)
    }
    /// The first batches holding offsets `[from, to)`, read uncommitted, up
    /// to the one that reaches `max_bytes` (at least one): a failback's
    /// export reads ranges only the operator bounds, page by page.
    fn read_page(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Vec<RecordBatch>, KafkaError>>;
    /// Deletes a topic (a failback `from-scratch` re-creates it).
    fn delete_topic(&self, name: &str) -> BoxFuture<'_, Result<(), KafkaError>>;
    /// The largest batch the destination topic accepts (`max.message.bytes`).
    fn max_message_bytes(&self, topic: &str) -> BoxFuture<'_, Result<usize, KafkaError>>;
    /// A standalone commit (no member, generation −1): Kafka refuses it for
    /// a group with live members, which is the last line of defence when a
    /// consumer joins between our listing and our commit.
    fn commit_offsets(
        &self,
        group: &str,
        offsets: GroupOffsets,
    ) -> BoxFuture<'_, Result<(), KafkaError>>;
    /// IncrementalAlterConfigs: SET of each `Some`, DELETE (back to the
    /// default) of each `None`; other keys are untouched.
    fn alter_topic_configs(
        &self,
        topic: &str,
        changes: Vec<(String, Option<String>)>,
    ) -> BoxFuture<'_, Result<(), KafkaError>>;
    /// Grows `topic` to `total` partitions (counts never shrink).
    fn create_partitions(&self, topic: &str, total: i32) -> BoxFuture<'_, Result<(), KafkaError>>;
    /// Opens the partition's writer. At most one is open per partition.
    /// On a fenced destination it writes under the partition's
    /// transactional id, and fails with [`KafkaError::Fenced`] once another
    /// node owns the partition.
    fn open_sink(
        &self,
        tp: TopicPartition,
    ) -> BoxFuture<'_, Result<Box<dyn PartitionSink>, KafkaError>>;
    /// Takes each partition from whoever wrote it before (a clustered node
    /// that took over a shard): acquires its transactional id and writes
    /// the abort marker that makes the brokers refuse the old owner's
    /// batches. A no-op where there is no fence (one node owns all).
    fn fence(&self, partitions: Vec<TopicPartition>) -> BoxFuture<'_, Result<(), KafkaError>> {
        let _ = partitions;
        Box::pin(async { Ok(()) })
    }
    /// Takes each partition's transactional id (a new epoch) without a
    /// marker: after a clean release nobody else can still write, and this
    /// node's first batch raises the epoch the brokers hold. A node that
    /// held the partitions before must not write under its old epoch, which
    /// another owner has since passed. A no-op where there is no fence.
    fn acquire(&self, partitions: Vec<TopicPartition>) -> BoxFuture<'_, Result<(), KafkaError>> {
        let _ = partitions;
        Box::pin(async { Ok(()) })
    }
    /// Drops what this node held of `partitions` (it let their shard go).
    fn forget(&self, partitions: Vec<TopicPartition>) {
        let _ = partitions;
    }
    /// The fence this node holds on `tp`, to keep alive while no sink
    /// writes there (a PAUSED or FAILED partition): `None` where there is
    /// no fence, or this node holds none of `tp`.
    fn held_fence(
        &self,
        tp: TopicPartition,
    ) -> BoxFuture<'_, Result<Option<Box<dyn HeldFence>>, KafkaError>> {
        let _ = tp;
        Box::pin(async { Ok(None) })
    }
    /// The producer id this node's fence of `tp` writes under (its markers
    /// and batches carry it), if the destination is fenced and this node
    /// fenced or opened `tp`: what lets alignment tell our abort markers
    /// from a foreign writer's.
    fn fence_producer_id(&self, tp: &TopicPartition) -> Option<i64> {
        let _ = tp;
        None
    }
}

/// A cluster call that failed, with what kmirror was doing: the operator
/// reads "create destination topic orders: …", not a bare broker error.
#[derive(Debug, thiserror::Error)]
#[error("{doing}: {source}")]
pub struct ClusterError {
    pub doing: String,
    #[source]
    pub source: KafkaError,
}

impl ClusterError {
    pub fn new(doing: impl Into<String>, source: KafkaError) -> Self {
        ClusterError {
            doing: doing.into(),
            source,
        }
    }
}

/// Names what a cluster call was for, turning its error into a
/// [`ClusterError`].
pub trait Doing<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, ClusterError>;
}

impl<T> Doing<T> for Result<T, KafkaError> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, ClusterError> {
        self.map_err(|source| ClusterError::new(what(), source))
    }
}

/// The timestamp bounds a mirror topic is created with. A broker checks
/// every record's timestamp against its own clock when it is appended
/// (Kafka 4's default refuses records more than an hour ahead), and a mirror
/// appends later than the source did: the copy must admit every timestamp
/// the source admitted. So records may be as far ahead as on the source, and
/// as old as they like.
async fn timestamp_bounds(
    source: &dyn SourceCluster,
    topic: &str,
) -> Result<Vec<(String, String)>, KafkaError> {
    const AFTER: &str = "message.timestamp.after.max.ms";
    const BEFORE: &str = "message.timestamp.before.max.ms";
    let effective = source.topic_config_values(topic).await?;
    let mut out = vec![(BEFORE.to_string(), i64::MAX.to_string())];
    if let Some(Some(after)) = effective.get(AFTER) {
        out.push((AFTER.to_string(), after.clone()));
    }
    Ok(out)
}

/// Topics made ready at once by [`ensure_destination_topics`].
const TOPICS_AT_ONCE: usize = 8;

/// One topic of [`ensure_destination_topics`]: grown when the destination
/// has fewer partitions (`have`), created when it has none.
async fn ensure_destination_topic(
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    topic: &TopicInfo,
    have: Option<&TopicInfo>,
) -> Result<(), ClusterError> {
    if let Some(have) = have {
        // Made beforehand with fewer partitions: the missing ones would
        // fail until their retries ran out. Grow it, as a source that
        // grows later is grown.
        if have.partitions < topic.partitions {
            destination
                .create_partitions(&topic.name, topic.partitions)
                .await
                .doing(|| {
                    format!(
                        "grow destination topic {} from {} to {} partitions",
                        topic.name, have.partitions, topic.partitions
                    )
                })?;
        }
        return Ok(());
    }
    let mut configs = source
        .topic_configs(&topic.name)
        .await
        .doing(|| format!("describe source topic {} configs", topic.name))?;
    configs.extend(
        timestamp_bounds(source, &topic.name)
            .await
            .doing(|| format!("describe source topic {} configs", topic.name))?,
    );
    if let Err(e) = destination
        .create_topic(&topic.name, topic.partitions, configs)
        .await
    {
        // Discovery and an operator's start may race to create it:
        // whoever loses finds it there, which is all either wanted.
        let now = destination
            .topics()
            .await
            .doing(|| "list destination topics".into())?;
        if !now.iter().any(|t| t.name == topic.name) {
            return Err(ClusterError::new(
                format!("create destination topic {}", topic.name),
                e,
            ));
        }
    }
    Ok(())
}

/// Makes sure the destination has each of `topics` (created with the
/// source's explicit configs and partition count where missing) and returns
/// them as a StartTopics command names them. Both an operator's start and
/// auto-discovery go through here, so a topic is never started before its
/// destination exists.
pub async fn ensure_destination_topics(
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    topics: &[TopicInfo],
) -> Result<Vec<TopicRef>, ClusterError> {
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let existing = destination
        .topics()
        .await
        .doing(|| "list destination topics".into())?;
    // Each topic is a few round trips to each cluster (configs, create),
    // and discovery may find hundreds at once: several go at a time.
    let existing = &existing;
    let ready: Vec<Result<(), ClusterError>> = stream::iter(topics.iter().cloned())
        .map(|topic| async move {
            let have = existing.iter().find(|t| t.name == topic.name);
            ensure_destination_topic(source, destination, &topic, have).await
        })
        .buffer_unordered(TOPICS_AT_ONCE)
        .collect()
        .await;
    ready.into_iter().collect::<Result<(), _>>()?;
    let now = destination
        .topics()
        .await
        .doing(|| "list destination topics".into())?;
    Ok(topics
        .iter()
        .map(|t| TopicRef {
            topic_id: t.topic_id,
            name: t.name.clone(),
            partition_count: t.partitions,
            destination_topic_id: now.iter().find(|d| d.name == t.name).map(|d| d.topic_id),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::memory::{MemoryDestination, MemorySource};
    use super::*;

    #[actix::test]
    async fn a_destination_topic_with_fewer_partitions_than_the_source_grows() {
        let source = MemorySource::new("src");
        source.create_topic("orders", TopicId([1; 16]), 3);
        let destination = MemoryDestination::new("dst");
        destination.create_topic("orders", 1, vec![]).await.unwrap();
        let topics = source.topics().await.unwrap();
        let refs = ensure_destination_topics(&source, &destination, &topics)
            .await
            .unwrap();
        assert_eq!(refs[0].partition_count, 3);
        assert_eq!(destination.partition_count("orders"), 3);
    }
}
