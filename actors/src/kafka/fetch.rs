//! One multi-partition fetch stream per source broker, as Kafka's replica
//! fetchers do: one request carries every partition this broker leads, so
//! thousands of partitions cost one round trip, not thousands.
//!
//! Records come back as `Bytes` sliced out of the response frame (no copy);
//! [`FetchedPartition::batches`] walks them header by header.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use indexmap::{IndexMap, IndexSet};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::batch::{AbortedTransactions, BatchIter};
use super::budget::Charge;
use super::client::{ClusterMetadata, KafkaClient};
use super::error::{KafkaError, ResponseError, Result};

/// A topic partition. Topic names are shared (`Arc<str>`) because they are
/// cloned into every request and response on the hot path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: std::sync::Arc<str>,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds one.
    pub fn new(topic: &str, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Everything up to the high watermark, aborted data included.
    ReadUncommitted,
    /// Up to the last stable offset, with the aborted-transaction list so
    /// aborted batches can be dropped (the mirror's default).
    ReadCommitted,
}

/// Fetch tuning (Kafka consumer names in parentheses).
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// (`isolation.level`)
    pub isolation: IsolationLevel,
    /// How long the broker may wait for `min_bytes` (`fetch.max.wait.ms`).
    pub max_wait: Duration,
    /// (`fetch.min.bytes`)
    pub min_bytes: i32,
    /// Response size limit (`fetch.max.bytes`).
    pub max_bytes: i32,
    /// Per-partition limit (`max.partition.fetch.bytes`).
    pub partition_max_bytes: i32,
    /// Use an incremental fetch session (KIP-227): after the first full
    /// request, only partitions whose position changed are sent and only
    /// partitions with something new come back — what keeps a fetch over
    /// thousands of mostly idle partitions small.
    pub incremental: bool,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            isolation: IsolationLevel::ReadCommitted,
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            // The KIP's mirror defaults (fetch.response.max.bytes 10 MiB,
            // fetch.max.bytes 1 MiB per partition). They also bound memory:
            // a response frame is shared by its partitions' slices, and a
            // broker's fetch task holds at most a few frames at once.
            max_bytes: 10 * 1_048_576,
            partition_max_bytes: 1_048_576,
            incremental: true,
        }
    }
}

#[derive(Debug, Clone)]
struct PartState {
    offset: i64,
    leader_epoch: i32,
    /// The leader epoch of the last batch fetched (−1 unknown), sent as
    /// `LastFetchedEpoch` (Fetch v12+): the leader then checks that our
    /// history is its own and answers a `DivergingEpoch` where it is not.
    last_fetched_epoch: i32,
    /// The topic id the partition was added with: every request names the
    /// topic by it, so a topic deleted and re-created under the same name
    /// answers UNKNOWN_TOPIC_ID instead of serving the new topic's records.
    topic_id: Uuid,
}

/// Data for one partition from one fetch.
#[derive(Debug, Clone)]
pub struct FetchedPartition {
    /// The offset that was asked for.
    pub fetch_offset: i64,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset (-1 if the broker did not say).
    pub last_stable_offset: i64,
    /// Log start offset (-1 if the broker did not say).
    pub log_start_offset: i64,
    /// `(producer id, first offset)` of aborted transactions overlapping the data.
    pub aborted_transactions: Vec<(i64, i64)>,
    /// Raw record batches, a slice of the response frame.
    pub records: Bytes,
    /// Where the session will fetch this partition next: after the last
    /// complete batch (unchanged if no complete batch arrived).
    pub next_offset: i64,
    /// The data ended in a partial batch (the partition limit is smaller than
    /// a batch; if `next_offset == fetch_offset`, raise `partition_max_bytes`).
    pub truncated: bool,
    /// `records` in the daemon's memory budget, until the last clone is
    /// dropped: the pump keeps one with every produce these records became,
    /// until the destination acknowledges it.
    pub charge: Charge,
}

impl FetchedPartition {
    /// Iterates over the complete batches.
    pub fn batches(&self) -> BatchIter {
        BatchIter::new(self.records.clone())
    }
    /// The aborted-transaction filter for these batches.
    pub fn aborted(&self) -> AbortedTransactions {
        AbortedTransactions::new(self.aborted_transactions.clone())
    }
}

/// Per-partition fetch failures the caller must act on.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The position is outside `[log start, log end]` (retention deleted it,
    /// or the log was truncated). The partition stays in the session at the
    /// same offset; the caller must `seek`.
    #[error("offset {fetch_offset} out of range")]
    OffsetOutOfRange {
        /// The offset asked for.
        fetch_offset: i64,
    },
    /// Leadership moved (NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH,
    /// UNKNOWN_TOPIC_OR_PARTITION…). The partition was removed from this
    /// session and metadata refreshed; re-add it to the new leader's session.
    #[error("leader changed ({error}); new leader {new_leader:?}")]
    LeaderChanged {
        /// The broker's error.
        error: ResponseError,
        /// `(node id, leader epoch)` if the broker told us.
        new_leader: Option<(i32, i32)>,
        /// Offset the partition was at.
        offset: i64,
    },
    /// The leader's log parted from what this partition fetched (KIP-320):
    /// our `LastFetchedEpoch` ends at `end_offset` on the leader, whose
    /// largest epoch up to ours is `epoch`, and `end_offset` is below the
    /// fetch offset (or the leader never had our epoch). An unclean leader
    /// election took the records from there back, even if the leader has
    /// written past `fetch_offset` since. The partition stays in the
    /// session; the caller must decide where to go on.
    #[error("offset {fetch_offset}: the leader's log diverges from the fetched one (epoch {epoch} ends at {end_offset})")]
    Diverged {
        epoch: i32,
        end_offset: i64,
        fetch_offset: i64,
    },
    /// Any other error for this partition.
    #[error(transparent)]
    Other(KafkaError),
}

/// Result of one fetch round trip, per partition.
pub type FetchResults = Vec<(
    TopicPartition,
    std::result::Result<FetchedPartition, FetchError>,
)>;

/// Topic ids by name and names by id for one session's topics.
#[derive(Debug)]
struct TopicIds {
    /// The metadata some topic's id was read from, if any was: only then
    /// does newer metadata call for resolving again (metadata is replaced
    /// at every refresh, many times a minute at 10 000 partitions).
    metadata: Option<Arc<ClusterMetadata>>,
    ids: HashMap<Arc<str>, Uuid>,
    names: HashMap<Uuid, Arc<str>>,
}

impl TopicIds {
    /// A partition's pinned id, or (nil pinned, or a partition only left
    /// to forget) the id metadata has for its name.
    fn resolve(
        metadata: Arc<ClusterMetadata>,
        partitions: &IndexMap<TopicPartition, PartState>,
        sent: &HashMap<TopicPartition, (i64, i32, i32)>,
    ) -> Self {
        let mut ids: HashMap<Arc<str>, Uuid> = HashMap::new();
        let mut read = false;
        let mut from_metadata = |topic: &str| {
            read = true;
            metadata
                .topic(topic)
                .map(|t| t.topic_id)
                .unwrap_or_default()
        };
        for (tp, st) in partitions {
            let id = if st.topic_id.is_nil() {
                from_metadata(&tp.topic)
            } else {
                st.topic_id
            };
            ids.insert(tp.topic.clone(), id);
        }
        for tp in sent.keys() {
            if !ids.contains_key(&tp.topic) {
                ids.insert(tp.topic.clone(), from_metadata(&tp.topic));
            }
        }
        let names = ids.iter().map(|(n, id)| (*id, n.clone())).collect();
        TopicIds {
            metadata: read.then_some(metadata),
            ids,
            names,
        }
    }

    /// Whether `now` may hold ids this map read differently.
    fn stale(&self, now: &Arc<ClusterMetadata>) -> bool {
        self.metadata.as_ref().is_some_and(|m| !Arc::ptr_eq(m, now))
    }

    fn id_of(&self, topic: &Arc<str>) -> Uuid {
        self.ids.get(topic).copied().unwrap_or_default()
    }

    /// Takes in a partition added with a pinned `id`; false when the map
    /// must be resolved again (the id is nil, or the topic had another).
    fn learn(&mut self, topic: &Arc<str>, id: Uuid) -> bool {
        if id.is_nil() {
            return false;
        }
        match self.ids.get(topic) {
            Some(known) => *known == id,
            None => {
                self.ids.insert(topic.clone(), id);
                self.names.insert(id, topic.clone());
                true
            }
        }
    }
}

/// A fetch stream to one broker for many partitions.
#[derive(Debug)]
pub struct FetchSession {
    client: KafkaClient,
    node_id: i32,
    options: FetchOptions,
    partitions: IndexMap<TopicPartition, PartState>,
    /// Broker-side session id (0: none yet).
    session_id: i32,
    /// Epoch to send next (0 asks for a new session).
    session_epoch: i32,
    /// Version the session was created with (addressing by name or id must
    /// not change within a session).
    session_version: i16,
    /// What the broker's session holds per partition: (offset, leader
    /// epoch, last fetched epoch).
    sent: HashMap<TopicPartition, (i64, i32, i32)>,
    /// Partitions whose state may differ from `sent` (added, moved, or
    /// advanced by a response) and partitions removed that `sent` may still
    /// hold. An incremental request looks at these alone, so its cost
    /// follows what changed, not the session's size: at 5 000 idle
    /// partitions a walk of them all was most of the daemon's idle CPU.
    /// Every other partition is in `sent` as it is now.
    changed: IndexSet<TopicPartition>,
    /// The topic ids every request names topics by, and the names its
    /// responses are read back by: resolved from `partitions`, `sent` and
    /// metadata, kept up to date as partitions come with known ids, and
    /// resolved again when metadata or a topic's id changes.
    ids: Option<TopicIds>,
    /// The connection lane to the broker (see [`KafkaClient::lane_connection`]).
    lane: u8,
}

impl FetchSession {
    /// A session to broker `node_id` (normally the partitions' leader).
    pub fn new(client: KafkaClient, node_id: i32, options: FetchOptions) -> Self {
        FetchSession {
            client,
            node_id,
            options,
            partitions: IndexMap::new(),
            session_id: 0,
            session_epoch: 0,
            session_version: -1,
            sent: HashMap::new(),
            changed: IndexSet::new(),
            ids: None,
            lane: 0,
        }
    }

    /// The session on connection `lane` of its broker instead of the shared
    /// one, so that it is at the broker while another session's fetch is.
    pub fn on_lane(mut self, lane: u8) -> Self {
        self.lane = lane;
        self
    }

    /// The broker's fetch session id (0 when there is none).
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// The next request is a full one: it names every partition, so nothing
    /// is owed from `changed`.
    fn reset_session(&mut self) {
        self.session_id = 0;
        self.session_epoch = 0;
        self.sent.clear();
        self.changed.clear();
    }

    /// Tells the broker to forget the session, with a request at the final
    /// epoch (−1) as Kafka's consumer sends on close: a broker keeps
    /// incremental sessions in one cache that every client shares
    /// (`max.incremental.fetch.session.cache.slots`), and one left behind
    /// holds its slot until evicted. Costs nothing if no session is open.
    pub async fn close(&mut self) -> Result<()> {
        if self.session_id == 0 {
            return Ok(());
        }
        let (id, version) = (self.session_id, self.session_version);
        self.reset_session();
        let conn = self.client.lane_connection(self.node_id, self.lane).await?;
        let req = FetchRequest::default()
            .with_session_id(id)
            .with_session_epoch(-1)
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(self.options.max_bytes);
        let resp = conn
            .send_versioned(&req, version, conn.request_timeout())
            .await?;
        KafkaError::check(
            resp.error_code,
            || format!("closing the fetch session of broker {}", self.node_id),
            None,
        )
    }

    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    /// The response size limit of the next requests (Fetch `max_bytes`):
    /// what the memory budget has room for.
    pub fn set_max_bytes(&mut self, max_bytes: usize) {
        self.options.max_bytes = i32::try_from(max_bytes).unwrap_or(i32::MAX);
    }

    /// The broker this session fetches from.
    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Adds (or moves) a partition at `offset`. `leader_epoch` is the epoch
    /// from metadata (-1 to skip fencing); it lets the broker refuse to serve
    /// us from a stale leader. `topic_id` pins the topic (nil: resolve the
    /// name from metadata at each request).
    pub fn add(&mut self, tp: TopicPartition, offset: i64, leader_epoch: i32, topic_id: Uuid) {
        self.changed.insert(tp.clone());
        if !self
            .ids
            .as_mut()
            .is_some_and(|ids| ids.learn(&tp.topic, topic_id))
        {
            self.ids = None;
        }
        self.partitions.insert(
            tp,
            PartState {
                offset,
                leader_epoch,
                last_fetched_epoch: -1,
                topic_id,
            },
        );
    }

    /// Sets the leader epoch of the record before a partition's position
    /// (−1: unknown, nothing is checked), as a partition resuming after
    /// records it already has. Returns whether the partition is in the
    /// session.
    pub fn set_last_fetched_epoch(&mut self, tp: &TopicPartition, epoch: i32) -> bool {
        self.update(tp, |p| p.last_fetched_epoch = epoch)
    }

    /// Changes a partition's state; false if it is not in the session.
    fn update(&mut self, tp: &TopicPartition, change: impl FnOnce(&mut PartState)) -> bool {
        let found = self.partitions.get_mut(tp).map(change).is_some();
        if found {
            self.changed.insert(tp.clone());
        }
        found
    }

    /// The leader epoch of the last batch fetched for a partition (−1
    /// unknown).
    pub fn last_fetched_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        self.partitions.get(tp).map(|p| p.last_fetched_epoch)
    }

    /// Removes a partition; returns its position.
    pub fn remove(&mut self, tp: &TopicPartition) -> Option<i64> {
        let removed = self.partitions.shift_remove(tp)?;
        self.forget(tp);
        Some(removed.offset)
    }

    /// Notes that `tp` left `partitions`: the next incremental request
    /// tells the broker to forget it.
    fn forget(&mut self, tp: &TopicPartition) {
        self.changed.insert(tp.clone());
        // A topic without an id keeps every request on name-addressed
        // versions; it must not outlive its partitions. (Ids stay: the
        // forgotten partition is named by its topic's.)
        if self
            .ids
            .as_ref()
            .is_some_and(|ids| ids.id_of(&tp.topic).is_nil())
        {
            self.ids = None;
        }
    }

    /// Moves a partition's position.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> bool {
        self.update(tp, |p| p.offset = offset)
    }

    /// Current position of a partition.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp).map(|p| p.offset)
    }

    /// Partitions in the session.
    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions.keys()
    }

    /// Whether the session has no partitions.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// One fetch round trip for every partition. Positions advance past the
    /// complete batches returned. A request-level failure (network, timeout)
    /// is an `Err`; per-partition failures are in the results. With an
    /// incremental session, partitions with nothing new are absent.
    pub async fn fetch(&mut self) -> Result<FetchResults> {
        for attempt in 0..2 {
            match self.fetch_once().await {
                // The broker lost or rejected our session: start a new one at once.
                Err(KafkaError::Broker {
                    error:
                        ResponseError::FetchSessionIdNotFound | ResponseError::InvalidFetchSessionEpoch,
                    ..
                }) if attempt == 0 => self.reset_session(),
                Err(e) => {
                    self.reset_session();
                    return Err(e);
                }
                Ok(r) => return Ok(r),
            }
        }
        unreachable!("the second attempt returns")
    }

    async fn fetch_once(&mut self) -> Result<FetchResults> {
        if self.partitions.is_empty() && self.sent.is_empty() {
            return Ok(Vec::new());
        }
        let md = self.client.metadata();
        if self.ids.as_ref().is_none_or(|ids| ids.stale(&md)) {
            self.ids = Some(TopicIds::resolve(md, &self.partitions, &self.sent));
        }
        let conn = self.client.lane_connection(self.node_id, self.lane).await?;
        let mut version = conn.version::<FetchRequest>()?;
        if self
            .ids
            .as_ref()
            .is_some_and(|ids| ids.names.contains_key(&Uuid::nil()))
        {
            // Some topic id unknown: stay on name-addressed versions.
            version = version.min(12);
        }
        if self.session_id != 0 && version != self.session_version {
            self.reset_session();
        }
        let ids = self.ids.as_ref().expect("resolved above");
        let incremental = self.options.incremental && self.session_id != 0;
        let epoch_to_send = if !self.options.incremental {
            -1
        } else if self.session_id == 0 {
            0
        } else {
            self.session_epoch
        };
        let mut topics: IndexMap<Arc<str>, FetchTopic> = IndexMap::new();
        let mut forgotten: IndexMap<Arc<str>, ForgottenTopic> = IndexMap::new();
        // LastFetchedEpoch exists from v12 on; names-only fetches stay below 13.
        let last_epochs = version >= 12;
        let mut included: Vec<(TopicPartition, (i64, i32, i32))> = Vec::new();
        // A full request names every partition; an incremental one only
        // those that changed since the broker's session last heard of them.
        let candidates: Box<dyn Iterator<Item = &TopicPartition>> = if incremental {
            Box::new(self.changed.iter())
        } else {
            Box::new(self.partitions.keys())
        };
        for tp in candidates {
            let Some(st) = self.partitions.get(tp) else {
                // Removed: the broker forgets it, if its session holds it.
                if incremental && self.sent.contains_key(tp) {
                    forgotten
                        .entry(tp.topic.clone())
                        .or_insert_with(|| {
                            ForgottenTopic::default()
                                .with_topic(TopicName(StrBytes::from_string(tp.topic.to_string())))
                                .with_topic_id(ids.id_of(&tp.topic))
                        })
                        .partitions
                        .push(tp.partition);
                }
                continue;
            };
            let last_fetched_epoch = if last_epochs {
                st.last_fetched_epoch
            } else {
                -1
            };
            let now = (st.offset, st.leader_epoch, last_fetched_epoch);
            if incremental && self.sent.get(tp) == Some(&now) {
                continue;
            }
            included.push((tp.clone(), now));
            let t = topics.entry(tp.topic.clone()).or_insert_with(|| {
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(tp.topic.to_string())))
                    .with_topic_id(ids.id_of(&tp.topic))
            });
            t.partitions.push(
                FetchPartition::default()
                    .with_partition(tp.partition)
                    .with_current_leader_epoch(st.leader_epoch)
                    .with_last_fetched_epoch(last_fetched_epoch)
                    .with_fetch_offset(st.offset)
                    .with_partition_max_bytes(self.options.partition_max_bytes),
            );
        }
        let req = FetchRequest::default()
            .with_session_id(if incremental { self.session_id } else { 0 })
            .with_session_epoch(epoch_to_send)
            .with_forgotten_topics_data(forgotten.into_values().collect())
            .with_max_wait_ms(self.options.max_wait.as_millis() as i32)
            .with_min_bytes(self.options.min_bytes)
            .with_max_bytes(self.options.max_bytes)
            .with_isolation_level(match self.options.isolation {
                IsolationLevel::ReadUncommitted => 0,
                IsolationLevel::ReadCommitted => 1,
            })
            .with_topics(topics.into_values().collect());
        let timeout = conn.request_timeout() + self.options.max_wait;
        let resp = conn.send_versioned(&req, version, timeout).await?;
        if resp.error_code != 0 {
            return Err(KafkaError::from_code(
                resp.error_code,
                format!("Fetch from broker {}", self.node_id),
                None,
            )
            .expect("non-zero"));
        }
        if self.options.incremental {
            if resp.session_id == 0 {
                // No session (the broker's cache is full): full fetches, asking again.
                self.reset_session();
            } else if incremental && resp.session_id != self.session_id {
                // Not the session our request built on: start over in full.
                self.reset_session();
            } else {
                self.session_id = resp.session_id;
                self.session_version = version;
                self.session_epoch = if epoch_to_send >= i32::MAX - 1 {
                    1
                } else {
                    epoch_to_send + 1
                };
                if incremental {
                    for tp in self.changed.drain(..) {
                        if !self.partitions.contains_key(&tp) {
                            self.sent.remove(&tp);
                        }
                    }
                } else {
                    self.sent.clear();
                    self.changed.clear();
                }
                self.sent.extend(included);
            }
        } else {
            self.changed.clear();
        }
        let mut out = Vec::with_capacity(resp.responses.iter().map(|t| t.partitions.len()).sum());
        let mut refresh = Vec::new();
        let names = &self
            .ids
            .as_ref()
            .expect("resolved before the request")
            .names;
        for topic in resp.responses {
            let name: Arc<str> = if version >= 13 {
                match names.get(&topic.topic_id) {
                    Some(n) => n.clone(),
                    None => continue,
                }
            } else {
                topic.topic.0.as_str().into()
            };
            for p in topic.partitions {
                let tp = TopicPartition {
                    topic: name.clone(),
                    partition: p.partition_index,
                };
                let Some(state) = self.partitions.get_mut(&tp) else {
                    continue;
                };
                let fetch_offset = state.offset;
                let diverging = &p.diverging_epoch;
                let result = match ResponseError::try_from_code(p.error_code) {
                    None if diverging.epoch >= 0 || diverging.end_offset >= 0 => {
                        Err(FetchError::Diverged {
                            epoch: diverging.epoch,
                            end_offset: diverging.end_offset,
                            fetch_offset,
                        })
                    }
                    None => {
                        let records = p.records.unwrap_or_default();
                        let last_fetched_epoch = state.last_fetched_epoch;
                        let mut next = fetch_offset;
                        let mut it = BatchIter::new(records.clone());
                        for b in it.by_ref() {
                            match b {
                                Ok(b) => {
                                    next = next.max(b.next_offset());
                                    if b.partition_leader_epoch() >= 0 {
                                        state.last_fetched_epoch = b.partition_leader_epoch();
                                    }
                                }
                                Err(_) => break,
                            }
                        }
                        if (next, last_fetched_epoch) != (fetch_offset, state.last_fetched_epoch) {
                            self.changed.insert(tp.clone());
                        }
                        state.offset = next;
                        Ok(FetchedPartition {
                            fetch_offset,
                            high_watermark: p.high_watermark,
                            last_stable_offset: p.last_stable_offset,
                            log_start_offset: p.log_start_offset,
                            aborted_transactions: p
                                .aborted_transactions
                                .unwrap_or_default()
                                .iter()
                                .map(|a| (a.producer_id.0, a.first_offset))
                                .collect(),
                            records,
                            next_offset: next,
                            truncated: it.truncated(),
                            charge: Charge::default(),
                        })
                    }
                    Some(ResponseError::OffsetOutOfRange) => {
                        Err(FetchError::OffsetOutOfRange { fetch_offset })
                    }
                    Some(
                        e @ (ResponseError::NotLeaderOrFollower
                        | ResponseError::FencedLeaderEpoch
                        | ResponseError::UnknownLeaderEpoch
                        | ResponseError::UnknownTopicOrPartition
                        | ResponseError::UnknownTopicId
                        | ResponseError::LeaderNotAvailable),
                    ) => {
                        refresh.push(tp.topic.to_string());
                        let l = &p.current_leader;
                        Err(FetchError::LeaderChanged {
                            error: e,
                            new_leader: (l.leader_id.0 >= 0)
                                .then_some((l.leader_id.0, l.leader_epoch)),
                            offset: fetch_offset,
                        })
                    }
                    Some(e) => Err(FetchError::Other(KafkaError::Broker {
                        error: e,
                        context: format!("Fetch {tp} at {fetch_offset}"),
                        message: None,
                    })),
                };
                out.push((tp, result));
            }
        }
        for (tp, r) in &out {
            if matches!(r, Err(FetchError::LeaderChanged { .. })) {
                self.remove(tp);
            }
        }
        if !refresh.is_empty() {
            refresh.sort();
            refresh.dedup();
            if let Err(e) = self.client.refresh_metadata(Some(&refresh)).await {
                tracing::warn!(error = %e, "metadata refresh after leader change failed");
            }
        }
        Ok(out)
    }
}
