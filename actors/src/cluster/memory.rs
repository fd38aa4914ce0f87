//! In-memory clusters for actor unit tests, with injectable faults.
//!
//! Longer than 800 lines: it is one test double (a source and a destination
//! answering every trait the actors use, with their fault switches), read
//! top to bottom, and built only for tests (here, or by the `testing` feature).
//!
//! The source stores real v2 record batches (built with the protocol
//! layer's encoder) and serves them the way a broker does: from the batch
//! that contains the fetch offset, up to the high watermark. The destination
//! decodes what it is sent with the protocol layer's decoder and assigns
//! offsets densely. So a PartitionActor under test runs the production
//! classification, rewrite and re-encode code; only the network is fake.
//! Never used to claim Kafka behaviour: that is what `tests/` is for.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use kmirror_events::TopicId;

use super::{
    Ack, AclBinding, BatchHeader, BatchHeaders, BoxFuture, ClusterView, CommittedOffset,
    CommittedRead, DestinationCluster, GroupListing, GroupOffsets, LogBounds, PartitionFetch,
    PartitionSink, SourceCluster, TopicInfo,
};
use crate::kafka::batch::{
    decode_records, encode_batch, BatchBuilder, Codec, OutgoingBatch, Record, RecordBatch,
};
use crate::kafka::fetch::{FetchError, FetchedPartition, TopicPartition};
use crate::kafka::produce::ProduceAck;
use crate::kafka::{KafkaError, ResponseError};

/// One stored batch and the offsets it covers.
#[derive(Clone, Debug)]
struct StoredBatch {
    last: i64,
    bytes: Bytes,
}

#[derive(Default, Debug)]
struct SourcePartition {
    batches: Vec<StoredBatch>,
    log_start: i64,
    end: i64,
    /// The current leader's epoch, stamped on every batch appended.
    leader_epoch: i32,
    /// The leader's epoch cache, as a Kafka replica keeps it: (epoch,
    /// start offset), one entry per election, the first `(0, 0)`.
    epochs: Vec<(i32, i64)>,
    fetch_faults: VecDeque<FetchError>,
}

impl SourcePartition {
    fn new() -> Self {
        SourcePartition {
            epochs: vec![(0, 0)],
            ..SourcePartition::default()
        }
    }

    /// OffsetForLeaderEpoch as Kafka's epoch cache answers it
    /// (`LeaderEpochFileCache.endOffsetFor`): the current epoch ends at the
    /// log end; an older one at the start of the next epoch the leader
    /// knows, answered with the largest known epoch up to the one asked.
    fn epoch_end(&self, requested: i32) -> (i32, i64) {
        if requested < 0 {
            return (-1, -1);
        }
        if requested == self.leader_epoch {
            return (requested, self.end);
        }
        match self.epochs.iter().find(|e| e.0 > requested) {
            None => (-1, -1),
            Some(&(_, higher_start)) => match self.epochs.iter().rev().find(|e| e.0 <= requested) {
                None => (requested, higher_start),
                Some(&(floor, _)) => (floor, higher_start),
            },
        }
    }
}

#[derive(Default, Debug)]
struct SourceState {
    cluster_id: String,
    topics: BTreeMap<String, (TopicId, Vec<SourcePartition>)>,
    groups: Groups,
    configs: BTreeMap<String, BTreeMap<String, String>>,
    /// `None`: no authorizer (DescribeAcls answers SECURITY_DISABLED).
    acls: Option<Vec<AclBinding>>,
    /// Every call fails as a broker that cannot be reached does.
    unreachable: bool,
    /// While it holds `true`, committed-offset reads wait (a stalled broker
    /// that answers once it resumes).
    group_reads_held: Option<tokio::sync::watch::Sender<bool>>,
    /// Answers no question about leader epochs (as a broker before
    /// KIP-320): OffsetForLeaderEpoch knows none, fetches check none.
    no_epochs: bool,
}

/// Groups of an in-memory cluster: state and committed offsets.
#[derive(Default, Debug, Clone)]
struct Groups(BTreeMap<String, (String, GroupOffsets)>);

impl Groups {
    fn listing(&self) -> Vec<GroupListing> {
        self.0
            .iter()
            .map(|(g, (state, _))| GroupListing {
                group_id: g.clone(),
                state: state.clone(),
                protocol_type: "consumer".into(),
                group_type: "classic".into(),
            })
            .collect()
    }
    fn offsets(&self, group: &str, topics: &[String]) -> GroupOffsets {
        let mut o = self.0.get(group).map(|g| g.1.clone()).unwrap_or_default();
        o.retain(|(t, _), _| topics.contains(t));
        o
    }
    fn commit(&mut self, group: &str, topic: &str, partition: i32, offset: CommittedOffset) {
        self.0
            .entry(group.to_string())
            .or_insert_with(|| ("Empty".into(), GroupOffsets::new()))
            .1
            .insert((topic.to_string(), partition), offset);
    }
    fn set_state(&mut self, group: &str, state: &str) {
        self.0
            .entry(group.to_string())
            .or_insert_with(|| (String::new(), GroupOffsets::new()))
            .0 = state.to_string();
    }
}

/// CreateAcls on a cluster's ACLs (`None`: no authorizer).
fn create_in(have: &mut Option<Vec<AclBinding>>, acls: Vec<AclBinding>) -> Result<(), KafkaError> {
    let have = have
        .as_mut()
        .ok_or_else(|| broker_error(ResponseError::SecurityDisabled, "CreateAcls"))?;
    for a in acls {
        if !have.contains(&a) {
            have.push(a);
        }
    }
    Ok(())
}

/// DeleteAcls of exactly these bindings (`None`: no authorizer).
fn delete_in(have: &mut Option<Vec<AclBinding>>, acls: &[AclBinding]) -> Result<(), KafkaError> {
    let have = have
        .as_mut()
        .ok_or_else(|| broker_error(ResponseError::SecurityDisabled, "DeleteAcls"))?;
    have.retain(|a| !acls.contains(a));
    Ok(())
}

/// The headers of `batches` holding `[from, to)`, up to `max_bytes`.
fn headers_in(
    batches: impl Iterator<Item = BatchHeader>,
    from: i64,
    to: i64,
    max_bytes: usize,
) -> BatchHeaders {
    let mut out = BatchHeaders::default();
    let mut bytes = 0;
    for b in batches.filter(|b| b.next_offset > from && b.base_offset < to) {
        if bytes >= max_bytes {
            out.capped = true;
            break;
        }
        bytes += b.size;
        out.batches.push(b);
    }
    out
}

/// What a `read_committed` fetch of `[from, to)` returns from these
/// batches (no aborted transactions: the in-memory clusters keep none).
fn committed_in(
    batches: impl Iterator<Item = RecordBatch>,
    from: i64,
    to: i64,
    max_bytes: usize,
) -> CommittedRead {
    let mut out = CommittedRead {
        next_offset: from,
        ..CommittedRead::default()
    };
    let mut bytes = 0;
    for b in batches.filter(|b| b.next_offset() > from && b.base_offset() < to) {
        if bytes >= max_bytes {
            break;
        }
        bytes += b.size();
        out.next_offset = b.next_offset().min(to);
        out.batches.push(b);
    }
    out
}

fn unreachable_error() -> KafkaError {
    KafkaError::Io {
        broker: "memory:9092".into(),
        source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "source unreachable"),
    }
}

fn broker_error(error: ResponseError, context: &str) -> KafkaError {
    KafkaError::Broker {
        error,
        context: context.to_string(),
        message: None,
    }
}

/// A source cluster in memory.
#[derive(Clone, Default, Debug)]
pub struct MemorySource {
    state: Arc<Mutex<SourceState>>,
}

/// A record to append in a test: key, value, headers, timestamp.
pub fn record(key: Option<&str>, value: Option<&str>, timestamp: i64) -> Record {
    Record {
        offset_delta: 0,
        timestamp,
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        headers: Vec::new(),
    }
}

impl MemorySource {
    pub fn new(cluster_id: &str) -> Self {
        let s = MemorySource::default();
        s.state.lock().unwrap().cluster_id = cluster_id.to_string();
        s
    }

    /// The bootstrap address now reaches another cluster.
    pub fn set_cluster_id(&self, cluster_id: &str) {
        self.state.lock().unwrap().cluster_id = cluster_id.to_string();
    }

    pub fn create_topic(&self, name: &str, id: TopicId, partitions: i32) {
        let parts = (0..partitions).map(|_| SourcePartition::new()).collect();
        self.state
            .lock()
            .unwrap()
            .topics
            .insert(name.to_string(), (id, parts));
    }

    fn with<R>(&self, tp: &TopicPartition, f: impl FnOnce(&mut SourcePartition) -> R) -> R {
        let mut s = self.state.lock().unwrap();
        let (_, parts) = s.topics.get_mut(&*tp.topic).expect("test topic exists");
        f(&mut parts[tp.partition as usize])
    }

    /// Appends one batch of `records` (offsets assigned densely), returning
    /// its base offset.
    pub fn append(&self, tp: &TopicPartition, records: &[Record], codec: Codec) -> i64 {
        let records: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, r)| Record {
                offset_delta: i as i32,
                ..r.clone()
            })
            .collect();
        self.with(tp, |p| {
            let base = p.end;
            let last = base + records.len() as i64 - 1;
            let batch = BatchBuilder {
                codec,
                base_offset: base,
                partition_leader_epoch: p.leader_epoch,
                ..BatchBuilder::new(records)
            };
            p.batches.push(StoredBatch {
                last,
                bytes: batch.build().expect("encode").as_bytes().clone(),
            });
            p.end = last + 1;
            base
        })
    }

    /// Appends a batch whose records sit at the given offset deltas, as a
    /// compacted batch does (`span` offsets, fewer records). Uncompressed.
    pub fn append_compacted(
        &self,
        tp: &TopicPartition,
        records: &[(i32, Record)],
        span: i64,
    ) -> i64 {
        let records = records
            .iter()
            .map(|(delta, r)| Record {
                offset_delta: *delta,
                ..r.clone()
            })
            .collect();
        self.with(tp, |p| {
            let base = p.end;
            let last = base + span - 1;
            let batch = BatchBuilder {
                base_offset: base,
                partition_leader_epoch: p.leader_epoch,
                last_offset_delta: Some((span - 1) as i32),
                ..BatchBuilder::new(records)
            };
            p.batches.push(StoredBatch {
                last,
                bytes: batch.build().expect("encode").as_bytes().clone(),
            });
            p.end = last + 1;
            base
        })
    }

    /// The log now ends at `offset` (whole batches above it are gone;
    /// tests truncate at batch boundaries), with no new leader epoch: what
    /// the offsets alone see of an unclean leader election.
    pub fn truncate_to(&self, tp: &TopicPartition, offset: i64) {
        self.with(tp, |p| {
            p.batches.retain(|b| b.last < offset);
            p.end = offset;
        });
    }

    /// A clean leader election: the same log, a new leader epoch (returned)
    /// for what is appended from now on.
    pub fn elect_leader(&self, tp: &TopicPartition) -> i32 {
        self.with(tp, |p| {
            p.leader_epoch += 1;
            p.epochs.push((p.leader_epoch, p.end));
            p.leader_epoch
        })
    }

    /// An unclean leader election: a replica that held the log only up to
    /// `keep` (a batch boundary) becomes leader in a new epoch (returned).
    /// Its epoch cache is what it had replicated below `keep`; whatever is
    /// appended next is a history of its own, at offsets the old leader had
    /// used for other records.
    pub fn unclean_election(&self, tp: &TopicPartition, keep: i64) -> i32 {
        self.with(tp, |p| {
            p.batches.retain(|b| b.last < keep);
            p.end = keep;
            p.epochs.retain(|e| e.1 < keep);
            p.leader_epoch += 1;
            p.epochs.push((p.leader_epoch, keep));
            p.leader_epoch
        })
    }

    /// The source answers no question about leader epochs (a broker before
    /// KIP-320): only the offsets can show a truncation.
    pub fn without_epochs(&self) {
        self.state.lock().unwrap().no_epochs = true;
    }

    /// Retention: drops everything below `offset`.
    pub fn delete_before(&self, tp: &TopicPartition, offset: i64) {
        self.with(tp, |p| {
            p.batches.retain(|b| b.last >= offset);
            p.log_start = offset;
        });
    }

    /// The next fetch of `tp` fails with `error`.
    pub fn fail_next_fetch(&self, tp: &TopicPartition, error: FetchError) {
        self.with(tp, |p| p.fetch_faults.push_back(error));
    }

    /// A source consumer group in `state` (`Stable`, `Empty`, …).
    pub fn set_group_state(&self, group: &str, state: &str) {
        self.state.lock().unwrap().groups.set_state(group, state);
    }

    /// A source consumer commits `offset` (creating an EMPTY group).
    pub fn commit(&self, group: &str, topic: &str, partition: i32, offset: i64, metadata: &str) {
        self.state.lock().unwrap().groups.commit(
            group,
            topic,
            partition,
            CommittedOffset {
                offset,
                leader_epoch: 0,
                metadata: Some(metadata.to_string()),
            },
        );
    }

    /// Sets an explicit topic config on the source.
    pub fn set_topic_config(&self, topic: &str, key: &str, value: &str) {
        self.state
            .lock()
            .unwrap()
            .configs
            .entry(topic.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
    }

    /// Grows a source topic to `total` partitions.
    pub fn add_partitions(&self, topic: &str, total: i32) {
        let mut s = self.state.lock().unwrap();
        let (_, parts) = s.topics.get_mut(topic).expect("test topic exists");
        while (parts.len() as i32) < total {
            parts.push(SourcePartition::new());
        }
    }

    /// Turns the authorizer on (with no ACLs).
    pub fn enable_acls(&self) {
        self.state.lock().unwrap().acls.get_or_insert_with(Vec::new);
    }

    pub fn add_acl(&self, acl: AclBinding) {
        self.state
            .lock()
            .unwrap()
            .acls
            .get_or_insert_with(Vec::new)
            .push(acl);
    }

    pub fn remove_acl(&self, acl: &AclBinding) {
        if let Some(a) = self.state.lock().unwrap().acls.as_mut() {
            a.retain(|x| x != acl);
        }
    }

    /// The source's ACLs, sorted (empty without an authorizer).
    pub fn acl_list(&self) -> Vec<AclBinding> {
        let mut a = self.state.lock().unwrap().acls.clone().unwrap_or_default();
        a.sort();
        a
    }

    /// Every call (reads, fetches, ACLs) fails as an unreachable broker's.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.state.lock().unwrap().unreachable = unreachable;
    }

    /// Fails when the source is unreachable (see [`Self::set_unreachable`]).
    /// Holds committed-offset reads until released: they answer then, with
    /// the offsets of that moment.
    pub fn hold_group_reads(&self, held: bool) {
        let mut s = self.state.lock().unwrap();
        s.group_reads_held
            .get_or_insert_with(|| tokio::sync::watch::channel(false).0)
            .send_replace(held);
    }

    fn reach(&self) -> Result<(), KafkaError> {
        if self.state.lock().unwrap().unreachable {
            Err(unreachable_error())
        } else {
            Ok(())
        }
    }

    /// Re-creates a topic under the same name with a new id and no data.
    pub fn recreate_topic(&self, name: &str, id: TopicId, partitions: i32) {
        self.create_topic(name, id, partitions);
    }

    /// One fetch, as a broker answers a request naming the topic by id,
    /// with `last_epoch` as its LastFetchedEpoch (−1: none).
    pub(crate) fn fetch_once(
        &self,
        tp: &TopicPartition,
        topic_id: TopicId,
        offset: i64,
        last_epoch: i32,
    ) -> Result<FetchedPartition, FetchError> {
        let mut s = self.state.lock().unwrap();
        if s.unreachable {
            return Err(FetchError::Other(unreachable_error()));
        }
        let check_epochs = !s.no_epochs && last_epoch >= 0;
        let parts = match s.topics.get_mut(&*tp.topic) {
            Some((id, parts)) if *id == topic_id => parts,
            _ => {
                return Err(FetchError::LeaderChanged {
                    error: ResponseError::UnknownTopicId,
                    new_leader: None,
                    offset,
                })
            }
        };
        let p = &mut parts[tp.partition as usize];
        if let Some(e) = p.fetch_faults.pop_front() {
            return Err(e);
        }
        if check_epochs {
            // Kafka's Partition.readRecords.
            let (epoch, end_offset) = p.epoch_end(last_epoch);
            if epoch < 0 || end_offset < 0 || offset < p.log_start {
                return Err(FetchError::OffsetOutOfRange {
                    fetch_offset: offset,
                });
            }
            if epoch < last_epoch || end_offset < offset {
                return Err(FetchError::Diverged {
                    epoch,
                    end_offset,
                    fetch_offset: offset,
                });
            }
        }
        if offset < p.log_start || offset > p.end {
            return Err(FetchError::OffsetOutOfRange {
                fetch_offset: offset,
            });
        }
        let mut out = BytesMut::new();
        let mut next = offset;
        for b in p.batches.iter().filter(|b| b.last >= offset).take(8) {
            out.extend_from_slice(&b.bytes);
            next = b.last + 1;
        }
        Ok(FetchedPartition {
            fetch_offset: offset,
            high_watermark: p.end,
            last_stable_offset: p.end,
            log_start_offset: p.log_start,
            aborted_transactions: Vec::new(),
            records: out.freeze(),
            next_offset: next,
            truncated: false,
            charge: Default::default(),
        })
    }
}

struct MemoryFetch {
    source: MemorySource,
    tp: TopicPartition,
    topic_id: TopicId,
    position: i64,
    /// The leader epoch of the last batch read (−1 unknown).
    last_epoch: i32,
}

impl PartitionFetch for MemoryFetch {
    fn next(&mut self) -> BoxFuture<'_, Result<FetchedPartition, FetchError>> {
        Box::pin(async move {
            loop {
                let f = self.source.fetch_once(
                    &self.tp,
                    self.topic_id,
                    self.position,
                    self.last_epoch,
                )?;
                if !f.records.is_empty() {
                    self.position = f.next_offset;
                    if let Some(Ok(last)) = f.batches().last() {
                        self.last_epoch = last.partition_leader_epoch();
                    }
                    return Ok(f);
                }
                // Long-poll like a broker's fetch.max.wait.ms.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
    }
}

impl ClusterView for MemorySource {
    fn cluster_id(&self) -> BoxFuture<'_, Result<String, KafkaError>> {
        let id = self.state.lock().unwrap().cluster_id.clone();
        Box::pin(async move { Ok(id) })
    }

    fn topics(&self) -> BoxFuture<'_, Result<Vec<TopicInfo>, KafkaError>> {
        let topics = self.reach().map(|()| {
            self.state
                .lock()
                .unwrap()
                .topics
                .iter()
                .map(|(name, (id, parts))| TopicInfo {
                    name: name.clone(),
                    topic_id: *id,
                    partitions: parts.len() as i32,
                    internal: name.starts_with("__"),
                })
                .collect()
        });
        Box::pin(async move { topics })
    }

    fn bounds(&self, tp: &TopicPartition) -> BoxFuture<'_, Result<LogBounds, KafkaError>> {
        let b = self.reach().map(|()| {
            self.with(tp, |p| LogBounds {
                log_start: p.log_start,
                end: p.end,
                leader_epoch: p.leader_epoch,
            })
        });
        Box::pin(async move { b })
    }

    fn list_groups(&self) -> BoxFuture<'_, Result<Vec<GroupListing>, KafkaError>> {
        let l = self
            .reach()
            .map(|()| self.state.lock().unwrap().groups.listing());
        Box::pin(async move { l })
    }

    fn committed_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> BoxFuture<'_, Result<GroupOffsets, KafkaError>> {
        let held = self
            .state
            .lock()
            .unwrap()
            .group_reads_held
            .as_ref()
            .map(|h| h.subscribe());
        let (group, topics) = (group.to_string(), topics.to_vec());
        Box::pin(async move {
            if let Some(mut held) = held {
                let _ = held.wait_for(|held| !held).await;
            }
            self.reach()?;
            Ok(self.state.lock().unwrap().groups.offsets(&group, &topics))
        })
    }

    fn describe_acls(&self) -> BoxFuture<'_, Result<Vec<AclBinding>, KafkaError>> {
        let acls = self.reach().and_then(|()| {
            self.state
                .lock()
                .unwrap()
                .acls
                .clone()
                .ok_or_else(|| broker_error(ResponseError::SecurityDisabled, "DescribeAcls"))
        });
        Box::pin(async move { acls })
    }

    fn create_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>> {
        let result = self
            .reach()
            .and_then(|()| create_in(&mut self.state.lock().unwrap().acls, acls));
        Box::pin(async move { result })
    }

    fn delete_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>> {
        let result = self
            .reach()
            .and_then(|()| delete_in(&mut self.state.lock().unwrap().acls, &acls));
        Box::pin(async move { result })
    }

    fn batch_headers(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<BatchHeaders, KafkaError>> {
        let headers = self.reach().and_then(|()| {
            let stored = self.with(tp, |p| p.batches.clone());
            let batches = stored
                .iter()
                .map(|b| RecordBatch::new(b.bytes.clone()).map(|rb| BatchHeader::of(&rb)))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(headers_in(batches.into_iter(), from, to, max_bytes))
        });
        Box::pin(async move { headers })
    }

    fn read_committed(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<CommittedRead, KafkaError>> {
        let read = self.reach().and_then(|()| {
            let stored = self.with(tp, |p| p.batches.clone());
            let batches = stored
                .iter()
                .map(|b| RecordBatch::new(b.bytes.clone()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(committed_in(batches.into_iter(), from, to, max_bytes))
        });
        Box::pin(async move { read })
    }

    fn topic_config_values(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<BTreeMap<String, Option<String>>, KafkaError>> {
        let c = self
            .state
            .lock()
            .unwrap()
            .configs
            .get(topic)
            .map(|c| {
                c.iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect()
            })
            .unwrap_or_default();
        Box::pin(async move { Ok(c) })
    }

    fn end_offset_for_epoch(
        &self,
        tp: &TopicPartition,
        epoch: i32,
    ) -> BoxFuture<'_, Result<(i32, i64), KafkaError>> {
        let no_epochs = self.state.lock().unwrap().no_epochs;
        let answer = self.with(tp, |p| p.epoch_end(epoch));
        Box::pin(async move { Ok(if no_epochs { (-1, -1) } else { answer }) })
    }

    fn topic_configs(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<Vec<(String, String)>, KafkaError>> {
        let configs = self
            .state
            .lock()
            .unwrap()
            .configs
            .get(topic)
            .map(|c| {
                c.iter()
                    .filter(|(k, _)| {
                        !kmirror_events::DEFAULT_TOPIC_PROPERTIES_EXCLUDE.contains(&k.as_str())
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Box::pin(async move { Ok(configs) })
    }
}

impl SourceCluster for MemorySource {
    fn open(
        &self,
        tp: TopicPartition,
        topic_id: TopicId,
        offset: i64,
        last_epoch: i32,
    ) -> BoxFuture<'_, Result<Box<dyn PartitionFetch>, KafkaError>> {
        let f = MemoryFetch {
            source: self.clone(),
            tp,
            topic_id,
            position: offset,
            last_epoch,
        };
        Box::pin(async move { Ok(Box::new(f) as Box<dyn PartitionFetch>) })
    }
}

/// A destination record as stored: what a consumer would read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    pub offset: i64,
    pub record: Record,
}

#[derive(Default, Debug)]
struct DestPartition {
    records: Vec<StoredRecord>,
    /// Every append as stored: the batch with its offsets assigned.
    appended: Vec<RecordBatch>,
    /// Batches appended (what a broker pays for per append).
    batches: u64,
    log_start: i64,
    leader_epoch: i32,
    produce_faults: VecDeque<KafkaError>,
    /// Offsets taken by transaction markers, which hold no record.
    markers: i64,
    /// The next sequence each producer id must send, as an idempotent
    /// leader checks it once it holds the id's state: a batch after a
    /// failed one is refused then, never appended in its place.
    sequences: HashMap<i64, i32>,
    /// The next accepted produce lands twice ([`MemoryDestination::duplicate_next_produce`]).
    duplicate_next: bool,
}

impl DestPartition {
    /// The log end offset: records and markers.
    fn end(&self) -> i64 {
        self.log_start + self.records.len() as i64 + self.markers
    }
}

#[derive(Default, Debug)]
struct DestState {
    cluster_id: String,
    topics: BTreeMap<String, (TopicId, Vec<DestPartition>)>,
    max_message_bytes: usize,
    next_topic_id: u8,
    groups: Groups,
    /// Offset commits received (each call counts once).
    commits: u64,
    commit_faults: VecDeque<KafkaError>,
    configs: BTreeMap<String, BTreeMap<String, String>>,
    acls: Option<Vec<AclBinding>>,
    /// The last producer id handed to a sink.
    last_producer_id: i64,
    /// Fenced like a clustered node's destination: the producer id of
    /// every partition's transactional id (one, for simplicity).
    fence_producer: Option<i64>,
    /// The epoch the last fenced sink took: each one opened bumps it, as
    /// the transactional id's InitProducerId does.
    fence_epoch: i16,
    /// What fenced sinks report as their leader's producer expiry.
    keep_alive: Option<crate::kafka::fence::KeepAlive>,
    /// Set while acknowledgements are held (see `hold_acks`).
    acks_held: Option<tokio::sync::watch::Sender<bool>>,
    /// Set while topic config describes are held (see
    /// `hold_topic_configs`).
    configs_held: Option<tokio::sync::watch::Sender<bool>>,
    /// Partitions whose bounds cannot be read (all their replicas down).
    unreadable: BTreeSet<(String, i32)>,
}

/// A destination cluster in memory.
#[derive(Clone, Default, Debug)]
pub struct MemoryDestination {
    state: Arc<Mutex<DestState>>,
}

impl MemoryDestination {
    pub fn new(cluster_id: &str) -> Self {
        let d = MemoryDestination::default();
        {
            let mut s = d.state.lock().unwrap();
            s.cluster_id = cluster_id.to_string();
            s.max_message_bytes = 1_048_588;
        }
        d
    }

    fn with<R>(&self, tp: &TopicPartition, f: impl FnOnce(&mut DestPartition) -> R) -> R {
        let mut s = self.state.lock().unwrap();
        let (_, parts) = s
            .topics
            .get_mut(&*tp.topic)
            .expect("destination topic exists");
        f(&mut parts[tp.partition as usize])
    }

    /// Everything a consumer would read from `tp`.
    pub fn records(&self, tp: &TopicPartition) -> Vec<StoredRecord> {
        self.with(tp, |p| p.records.clone())
    }

    /// How many batches were appended to `tp`.
    pub fn batches(&self, tp: &TopicPartition) -> u64 {
        self.with(tp, |p| p.batches)
    }

    /// A destination group in `state`; `Stable` and friends have live
    /// members, so a standalone commit into them is refused.
    pub fn set_group_state(&self, group: &str, state: &str) {
        self.state.lock().unwrap().groups.set_state(group, state);
    }

    /// A group's committed offsets on the destination.
    pub fn committed(&self, group: &str) -> GroupOffsets {
        let s = self.state.lock().unwrap();
        s.groups
            .0
            .get(group)
            .map(|g| g.1.clone())
            .unwrap_or_default()
    }

    /// Offset commits received so far.
    pub fn commit_count(&self) -> u64 {
        self.state.lock().unwrap().commits
    }

    /// The next offset commit fails with `error`.
    pub fn fail_next_commit(&self, error: KafkaError) {
        self.state.lock().unwrap().commit_faults.push_back(error);
    }

    /// The topic's explicit configs.
    pub fn topic_config(&self, topic: &str) -> BTreeMap<String, String> {
        let s = self.state.lock().unwrap();
        s.configs.get(topic).cloned().unwrap_or_default()
    }

    pub fn partition_count(&self, topic: &str) -> i32 {
        let s = self.state.lock().unwrap();
        s.topics.get(topic).map(|t| t.1.len() as i32).unwrap_or(0)
    }

    /// Turns the authorizer on (with no ACLs).
    pub fn enable_acls(&self) {
        self.state.lock().unwrap().acls.get_or_insert_with(Vec::new);
    }

    /// An operator's own ACL.
    pub fn add_acl(&self, acl: AclBinding) {
        self.state
            .lock()
            .unwrap()
            .acls
            .get_or_insert_with(Vec::new)
            .push(acl);
    }

    pub fn acl_list(&self) -> Vec<AclBinding> {
        let mut a = self.state.lock().unwrap().acls.clone().unwrap_or_default();
        a.sort();
        a
    }

    /// A leader election on the destination partition.
    pub fn set_leader_epoch(&self, tp: &TopicPartition, epoch: i32) {
        self.with(tp, |p| p.leader_epoch = epoch);
    }

    /// Holds every produce's acknowledgement until released, as a slow
    /// leader would: the batch is appended at once, its answer waits.
    pub fn hold_acks(&self, held: bool) {
        let mut s = self.state.lock().unwrap();
        s.acks_held
            .get_or_insert_with(|| tokio::sync::watch::channel(false).0)
            .send_replace(held);
    }

    /// The next produce to `tp` lands twice, its acknowledgement naming the
    /// second copy: a leader that forgot kmirror's producer (its state
    /// expired, as it does for records older than `producer.id.expiration.ms`)
    /// taking a retry whose first answer was lost.
    pub fn duplicate_next_produce(&self, tp: &TopicPartition) {
        self.with(tp, |p| p.duplicate_next = true);
    }

    /// Holds every topic config describe until released, as a slow
    /// controller would: it answers then, with the configs of that moment.
    /// How a test keeps an admin operation waiting between two of its
    /// steps.
    pub fn hold_topic_configs(&self, held: bool) {
        let mut s = self.state.lock().unwrap();
        s.configs_held
            .get_or_insert_with(|| tokio::sync::watch::channel(false).0)
            .send_replace(held);
    }

    /// How many topic config describes are under way (waiting, while
    /// [`Self::hold_topic_configs`] holds them).
    pub fn topic_config_reads(&self) -> usize {
        let s = self.state.lock().unwrap();
        s.configs_held.as_ref().map_or(0, |h| h.receiver_count())
    }

    /// The next produce to `tp` fails with `error`.
    pub fn fail_next_produce(&self, tp: &TopicPartition, error: KafkaError) {
        self.with(tp, |p| p.produce_faults.push_back(error));
    }

    /// Fences like a clustered node's destination (see
    /// `KafkaCluster::fenced`): sinks write as `producer_id`, and
    /// [`DestinationCluster::fence`] writes an abort marker of it.
    pub fn fenced(&self, producer_id: i64) {
        self.state.lock().unwrap().fence_producer = Some(producer_id);
    }

    /// Fenced sinks keep their fence alive by `keep_alive` (see
    /// [`PartitionSink::refence`]): each re-fence is an abort marker.
    pub fn keep_alive(&self, keep_alive: crate::kafka::fence::KeepAlive) {
        self.state.lock().unwrap().keep_alive = Some(keep_alive);
    }

    /// A transaction marker (ABORT) of `producer_id` at `epoch` lands on
    /// `tp`, taking one offset, as a broker writes one.
    pub fn append_marker(&self, tp: &TopicPartition, producer_id: i64, epoch: i16) {
        self.with(tp, |p| {
            // An ABORT marker: key (version 0, type 0), value (version 0,
            // coordinator epoch 0).
            let marker = Record {
                key: Some(Bytes::from_static(&[0, 0, 0, 0])),
                value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
                ..record(None, None, 0)
            };
            let b = crate::kafka::batch::BatchBuilder {
                base_offset: p.end(),
                partition_leader_epoch: p.leader_epoch,
                transactional: true,
                control: true,
                producer: (producer_id, epoch, -1),
                ..crate::kafka::batch::BatchBuilder::new(vec![marker])
            }
            .build()
            .expect("a marker batch");
            p.appended.push(b);
            p.markers += 1;
        });
    }

    /// Changes the record stored at `offset` in place, as no real broker
    /// would: how a test plants a difference for `verify` to find.
    pub fn plant(&self, tp: &TopicPartition, offset: i64, record: Record) {
        self.with(tp, |p| {
            let i = p
                .appended
                .iter()
                .position(|b| b.base_offset() <= offset && offset < b.next_offset())
                .expect("a batch holds the offset");
            let b = &p.appended[i];
            let mut decoded = decode_records(b).expect("a stored batch decodes");
            let at = decoded
                .records
                .iter()
                .position(|r| b.base_offset() + r.offset_delta as i64 == offset)
                .expect("a record at the offset");
            decoded.records[at] = Record {
                offset_delta: decoded.records[at].offset_delta,
                ..record.clone()
            };
            let rebuilt = BatchBuilder {
                base_offset: b.base_offset(),
                partition_leader_epoch: b.partition_leader_epoch(),
                producer: (b.producer_id(), b.producer_epoch(), b.base_sequence()),
                ..BatchBuilder::new(decoded.records)
            };
            p.appended[i] = rebuilt.build().expect("encode");
            if let Some(r) = p.records.iter_mut().find(|r| r.offset == offset) {
                r.record = record;
            }
        });
    }

    /// The partition loses its records from `offset` on (an unclean leader
    /// election on the destination): what alignment must not count as
    /// mirrored. Tests truncate at batch boundaries of a log with no
    /// markers.
    pub fn truncate_to(&self, tp: &TopicPartition, offset: i64) {
        self.with(tp, |p| {
            assert_eq!(p.markers, 0, "a log with markers is not truncated here");
            p.records.retain(|r| r.offset < offset);
            p.appended.retain(|b| b.next_offset() <= offset);
        });
    }

    /// Whether `tp`'s bounds can be read: a partition whose replicas are
    /// all down answers nothing.
    pub fn set_unreadable(&self, tp: &TopicPartition, unreadable: bool) {
        let key = (tp.topic.to_string(), tp.partition);
        let mut s = self.state.lock().unwrap();
        if unreadable {
            s.unreadable.insert(key);
        } else {
            s.unreadable.remove(&key);
        }
    }

    /// Someone other than kmirror writes a record to `tp`.
    pub fn foreign_write(&self, tp: &TopicPartition, r: Record) {
        self.with(tp, |p| {
            let offset = p.end();
            let mut bytes = encode_batch(std::slice::from_ref(&r), Codec::None).expect("encode");
            bytes[0..8].copy_from_slice(&offset.to_be_bytes());
            crate::kafka::batch::stamp_producer(&mut bytes, -1, -1, -1);
            bytes[12..16].copy_from_slice(&p.leader_epoch.to_be_bytes());
            p.appended
                .push(RecordBatch::new(bytes.freeze()).expect("a batch just built"));
            p.records.push(StoredRecord { offset, record: r });
        });
    }

    fn produce(
        &self,
        tp: &TopicPartition,
        (producer_id, sequence): (i64, i32),
        batch: OutgoingBatch,
    ) -> Result<ProduceAck, KafkaError> {
        let rb = RecordBatch::new(batch.to_bytes())?;
        if !rb.verify_crc() {
            return Err(KafkaError::InvalidBatch("CRC mismatch".into()));
        }
        let decoded = decode_records(&rb)?;
        self.with(tp, |p| {
            if let Some(e) = p.produce_faults.pop_front() {
                return Err(e);
            }
            // With no state for the id (a new one, or a new epoch), Kafka
            // takes any sequence: a batch behind a refused first one lands
            // in its place.
            let expected = p.sequences.entry(producer_id).or_insert(sequence);
            if sequence != *expected {
                return Err(KafkaError::ProducerFenced {
                    partition: tp.to_string(),
                    reason: format!(
                        "OUT_OF_ORDER_SEQUENCE_NUMBER: sequence {sequence}, expected {expected}"
                    ),
                });
            }
            *expected += batch.record_count;
            let copies = if std::mem::take(&mut p.duplicate_next) {
                2
            } else {
                1
            };
            let mut base = p.end();
            for _ in 0..copies {
                base = p.end();
                p.batches += 1;
                let mut stored = BytesMut::from(rb.as_bytes().as_ref());
                stored[0..8].copy_from_slice(&base.to_be_bytes());
                // Stamped by the leader, as a broker does (outside the CRC).
                stored[12..16].copy_from_slice(&p.leader_epoch.to_be_bytes());
                p.appended
                    .push(RecordBatch::new(stored.freeze()).expect("a batch it accepted"));
                for (i, r) in decoded.records.iter().enumerate() {
                    p.records.push(StoredRecord {
                        offset: base + i as i64,
                        record: r.clone(),
                    });
                }
            }
            Ok(ProduceAck {
                base_offset: base,
                record_count: batch.record_count,
                source_offsets: batch.source_offsets,
                log_append_time: -1,
                log_start_offset: p.log_start,
                base_sequence: 0,
            })
        })
    }
}

struct MemorySink {
    dest: MemoryDestination,
    tp: TopicPartition,
    producer_id: i64,
    epoch: i16,
    next_sequence: i32,
    keep_alive: Option<crate::kafka::fence::KeepAlive>,
}

impl PartitionSink for MemorySink {
    fn send(&mut self, mut batch: OutgoingBatch) -> BoxFuture<'_, Result<Ack, KafkaError>> {
        // Stamped as the real producer stamps every batch it writes.
        batch.stamp(self.producer_id, self.epoch, self.next_sequence);
        let sequence = self.next_sequence;
        self.next_sequence += batch.record_count;
        let result = self
            .dest
            .produce(&self.tp, (self.producer_id, sequence), batch);
        let held = self
            .dest
            .state
            .lock()
            .unwrap()
            .acks_held
            .as_ref()
            .map(|h| h.subscribe());
        Box::pin(async move {
            let ack = async move {
                if let Some(mut held) = held {
                    let _ = held.wait_for(|h| !*h).await;
                }
                result
            };
            Ok(Box::pin(ack) as Ack)
        })
    }

    fn producer(&self) -> (i64, i16) {
        (self.producer_id, self.epoch)
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    fn keep_alive(&self) -> Option<crate::kafka::fence::KeepAlive> {
        self.keep_alive
    }

    fn refence(&mut self) -> BoxFuture<'_, Result<(), KafkaError>> {
        self.dest
            .append_marker(&self.tp, self.producer_id, self.epoch);
        Box::pin(async { Ok(()) })
    }
}

impl ClusterView for MemoryDestination {
    fn cluster_id(&self) -> BoxFuture<'_, Result<String, KafkaError>> {
        let id = self.state.lock().unwrap().cluster_id.clone();
        Box::pin(async move { Ok(id) })
    }

    fn topics(&self) -> BoxFuture<'_, Result<Vec<TopicInfo>, KafkaError>> {
        let topics = self
            .state
            .lock()
            .unwrap()
            .topics
            .iter()
            .map(|(name, (id, parts))| TopicInfo {
                name: name.clone(),
                topic_id: *id,
                partitions: parts.len() as i32,
                internal: false,
            })
            .collect();
        Box::pin(async move { Ok(topics) })
    }

    fn bounds(&self, tp: &TopicPartition) -> BoxFuture<'_, Result<LogBounds, KafkaError>> {
        self.settled_bounds(tp)
    }

    fn list_groups(&self) -> BoxFuture<'_, Result<Vec<GroupListing>, KafkaError>> {
        let l = self.state.lock().unwrap().groups.listing();
        Box::pin(async move { Ok(l) })
    }

    fn committed_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> BoxFuture<'_, Result<GroupOffsets, KafkaError>> {
        let o = self.state.lock().unwrap().groups.offsets(group, topics);
        Box::pin(async move { Ok(o) })
    }

    fn describe_acls(&self) -> BoxFuture<'_, Result<Vec<AclBinding>, KafkaError>> {
        let acls = self.state.lock().unwrap().acls.clone();
        Box::pin(async move {
            acls.ok_or_else(|| broker_error(ResponseError::SecurityDisabled, "DescribeAcls"))
        })
    }

    fn create_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>> {
        let result = create_in(&mut self.state.lock().unwrap().acls, acls);
        Box::pin(async move { result })
    }

    fn delete_acls(&self, acls: Vec<AclBinding>) -> BoxFuture<'_, Result<(), KafkaError>> {
        let result = delete_in(&mut self.state.lock().unwrap().acls, &acls);
        Box::pin(async move { result })
    }

    fn batch_headers(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<BatchHeaders, KafkaError>> {
        let headers = self.with(tp, |p| {
            headers_in(p.appended.iter().map(BatchHeader::of), from, to, max_bytes)
        });
        Box::pin(async move { Ok(headers) })
    }

    fn read_committed(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<CommittedRead, KafkaError>> {
        let read = self.with(tp, |p| {
            committed_in(p.appended.iter().cloned(), from, to, max_bytes)
        });
        Box::pin(async move { Ok(read) })
    }

    fn topic_config_values(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<BTreeMap<String, Option<String>>, KafkaError>> {
        let c = self
            .topic_config(topic)
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect();
        Box::pin(async move { Ok(c) })
    }

    fn end_offset_for_epoch(
        &self,
        tp: &TopicPartition,
        epoch: i32,
    ) -> BoxFuture<'_, Result<(i32, i64), KafkaError>> {
        let end = self.with(tp, |p| (epoch.min(p.leader_epoch), p.end()));
        Box::pin(async move { Ok(end) })
    }

    fn topic_configs(
        &self,
        topic: &str,
    ) -> BoxFuture<'_, Result<Vec<(String, String)>, KafkaError>> {
        let held = self
            .state
            .lock()
            .unwrap()
            .configs_held
            .as_ref()
            .map(|h| h.subscribe());
        let topic = topic.to_string();
        Box::pin(async move {
            if let Some(mut held) = held {
                let _ = held.wait_for(|h| !*h).await;
            }
            Ok(self
                .topic_config(&topic)
                .into_iter()
                .filter(|(k, _)| {
                    !kmirror_events::DEFAULT_TOPIC_PROPERTIES_EXCLUDE.contains(&k.as_str())
                })
                .collect())
        })
    }
}

impl DestinationCluster for MemoryDestination {
    fn leader_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        Some(self.with(tp, |p| p.leader_epoch))
    }

    fn settled_bounds(&self, tp: &TopicPartition) -> BoxFuture<'_, Result<LogBounds, KafkaError>> {
        let unreadable =
            (self.state.lock().unwrap().unreadable).contains(&(tp.topic.to_string(), tp.partition));
        if unreadable {
            let e = KafkaError::Unknown(format!("{tp}: no replica answers"));
            return Box::pin(async move { Err(e) });
        }
        let b = self.with(tp, |p| LogBounds {
            log_start: p.log_start,
            end: p.end(),
            leader_epoch: p.leader_epoch,
        });
        Box::pin(async move { Ok(b) })
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: Vec<(String, String)>,
    ) -> BoxFuture<'_, Result<(), KafkaError>> {
        let mut s = self.state.lock().unwrap();
        s.next_topic_id += 1;
        let id = TopicId([s.next_topic_id; 16]);
        let parts = (0..partitions).map(|_| DestPartition::default()).collect();
        if !s.topics.contains_key(name) {
            s.topics.insert(name.to_string(), (id, parts));
            s.configs
                .insert(name.to_string(), configs.into_iter().collect());
        }
        Box::pin(async move { Ok(()) })
    }

    fn commit_offsets(
        &self,
        group: &str,
        offsets: GroupOffsets,
    ) -> BoxFuture<'_, Result<(), KafkaError>> {
        let mut s = self.state.lock().unwrap();
        s.commits += 1;
        let result = if let Some(e) = s.commit_faults.pop_front() {
            Err(e)
        } else if s
            .groups
            .0
            .get(group)
            .is_some_and(|g| kmirror_events::is_active_group_state(&g.0))
        {
            // Kafka refuses a standalone commit into a group with members.
            Err(broker_error(ResponseError::UnknownMemberId, "OffsetCommit"))
        } else {
            for ((t, p), o) in offsets {
                s.groups.commit(group, &t, p, o);
            }
            Ok(())
        };
        Box::pin(async move { result })
    }

    fn alter_topic_configs(
        &self,
        topic: &str,
        changes: Vec<(String, Option<String>)>,
    ) -> BoxFuture<'_, Result<(), KafkaError>> {
        let mut s = self.state.lock().unwrap();
        let configs = s.configs.entry(topic.to_string()).or_default();
        for (k, v) in changes {
            match v {
                Some(v) => configs.insert(k, v),
                None => configs.remove(&k),
            };
        }
        Box::pin(async move { Ok(()) })
    }

    fn create_partitions(&self, topic: &str, total: i32) -> BoxFuture<'_, Result<(), KafkaError>> {
        let mut s = self.state.lock().unwrap();
        let result = match s.topics.get_mut(topic) {
            None => Err(broker_error(
                ResponseError::UnknownTopicOrPartition,
                "CreatePartitions",
            )),
            Some((_, parts)) if parts.len() as i32 >= total => Err(broker_error(
                ResponseError::InvalidPartitions,
                "CreatePartitions",
            )),
            Some((_, parts)) => {
                while (parts.len() as i32) < total {
                    parts.push(DestPartition::default());
                }
                Ok(())
            }
        };
        Box::pin(async move { result })
    }

    fn read_page(
        &self,
        tp: &TopicPartition,
        from: i64,
        to: i64,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<Vec<RecordBatch>, KafkaError>> {
        let found = self.with(tp, |p| {
            let mut bytes = 0;
            p.appended
                .iter()
                .filter(|b| b.next_offset() > from && b.base_offset() < to)
                .take_while(|b| {
                    let more = bytes < max_bytes;
                    bytes += b.size();
                    more
                })
                .cloned()
                .collect()
        });
        Box::pin(async move { Ok(found) })
    }

    fn delete_topic(&self, name: &str) -> BoxFuture<'_, Result<(), KafkaError>> {
        let mut s = self.state.lock().unwrap();
        s.topics.remove(name);
        s.configs.remove(name);
        Box::pin(async move { Ok(()) })
    }

    fn max_message_bytes(&self, _topic: &str) -> BoxFuture<'_, Result<usize, KafkaError>> {
        let m = self.state.lock().unwrap().max_message_bytes;
        Box::pin(async move { Ok(m) })
    }

    fn fence(&self, partitions: Vec<TopicPartition>) -> BoxFuture<'_, Result<(), KafkaError>> {
        let producer = self.state.lock().unwrap().fence_producer;
        if let Some(producer_id) = producer {
            for tp in &partitions {
                self.append_marker(tp, producer_id, 0);
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn fence_producer_id(&self, _tp: &TopicPartition) -> Option<i64> {
        self.state.lock().unwrap().fence_producer
    }

    fn open_sink(
        &self,
        tp: TopicPartition,
    ) -> BoxFuture<'_, Result<Box<dyn PartitionSink>, KafkaError>> {
        let producer_id = {
            let mut s = self.state.lock().unwrap();
            s.last_producer_id += 1;
            let keep_alive = s.fence_producer.and(s.keep_alive);
            let producer_id = s.fence_producer.unwrap_or(s.last_producer_id);
            // A fenced sink's producer id is the fence's, under a new
            // epoch: its sequences restart.
            let epoch = match s.fence_producer {
                Some(_) => {
                    s.fence_epoch += 1;
                    s.fence_epoch
                }
                None => 0,
            };
            if let Some((_, parts)) = s.topics.get_mut(&*tp.topic) {
                if let Some(p) = parts.get_mut(tp.partition as usize) {
                    p.sequences.remove(&producer_id);
                }
            }
            (producer_id, epoch, keep_alive)
        };
        let (producer_id, epoch, keep_alive) = producer_id;
        let sink = MemorySink {
            dest: self.clone(),
            tp,
            producer_id,
            epoch,
            next_sequence: 0,
            keep_alive,
        };
        Box::pin(async move { Ok(Box::new(sink) as Box<dyn PartitionSink>) })
    }
}

/// A one-topic mirror `m` on in-memory clusters, recorded through a
/// coordinator over an in-memory log: the starting point of every actor
/// unit test.
#[cfg(test)]
pub(crate) struct Fixture {
    pub log: Arc<kmirror_store::MemLog>,
    pub coordinator: actix::Addr<crate::coordinator::CoordinatorActor>,
    pub source: MemorySource,
    pub dest: MemoryDestination,
}

#[cfg(test)]
impl Fixture {
    /// Mirror `m` (with `config`'s patterns and properties) of `topic` with
    /// `partitions` partitions, started; the topic exists on both sides.
    pub async fn new(
        config: kmirror_events::MirrorConfig,
        topic: &str,
        id: TopicId,
        partitions: i32,
    ) -> Self {
        use actix::Actor;
        use kmirror_events::{Command, TopicRef};
        let log = Arc::new(kmirror_store::MemLog::new());
        let coordinator = crate::coordinator::CoordinatorActor::load(log.clone())
            .unwrap()
            .start();
        for command in [
            Command::CreateMirror {
                name: "m".into(),
                config,
            },
            Command::StartTopics {
                mirror: "m".into(),
                topics: vec![TopicRef {
                    topic_id: id,
                    name: topic.into(),
                    partition_count: partitions,
                    destination_topic_id: None,
                }],
                include: vec![],
                exclude: vec![],
                seeds: vec![],
            },
        ] {
            coordinator
                .send(crate::coordinator::Execute::new(command))
                .await
                .unwrap()
                .unwrap();
        }
        let source = MemorySource::new("src");
        source.create_topic(topic, id, partitions);
        let dest = MemoryDestination::new("dst");
        dest.create_topic(topic, partitions, vec![]).await.unwrap();
        Fixture {
            log,
            coordinator,
            source,
            dest,
        }
    }
}
