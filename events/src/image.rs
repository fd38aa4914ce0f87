//! The folded state of the log: what replaying every record gives.

use std::collections::BTreeMap;

use imbl::{HashMap, OrdMap};

use serde::{Deserialize, Serialize};

use crate::ids::{Offset, TopicId};
use crate::offset_map::{OffsetMap, Translation};
use crate::record::*;
use crate::state::PartitionState;

/// A topic's mirror association, as the last `MirrorTopicStateChange` set it,
/// plus the offset of that record — the optimistic lock's "last state change
/// offset" (KIP §5.3).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct TopicEntry {
    pub change: MirrorTopicStateChange,
    pub changed_at: Offset,
}

/// The KIP §5.3 StateValidationOffset lock: an operation decided on the
/// image that ended at `offset` is refused (INVALID_CLUSTER_MIRROR_STATES)
/// if any of `topics` had a `MirrorTopicStateChange` at or after `offset`,
/// because another operation moved those topics after it looked.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StateValidation {
    /// The StateValidationOffset: the end offset of the image validated.
    pub offset: Offset,
    pub topics: Vec<TopicId>,
}

/// Everything kmirror knows, rebuilt by folding records in offset order.
///
/// Each map holds exactly the newest live value per record key, so the image
/// depends only on the newest record of each key and its offset. That is the
/// invariant that lets compaction drop older records without changing state.
///
/// The maps are persistent (structurally shared): describe, sync and
/// discovery hold a snapshot of the image across network calls while the
/// coordinator keeps appending, and cloning it costs O(1), where a copy
/// would cost every offset-map run of every partition.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct MirrorStateImage {
    end_offset: Offset,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    mirrors: OrdMap<String, MirrorConfig>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    topics: OrdMap<TopicId, TopicEntry>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    partitions: OrdMap<MirrorPartitionKey, MirrorPartitionStateValue>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    last_mirror_epochs: OrdMap<MirrorPartitionKey, LastMirrorEpochsValue>,
    /// Per partition, the offset map: runs are the hot record type, so the
    /// partition key is hashed once and runs are compared as integers.
    #[serde(deserialize_with = "crate::bounded::hash_map")]
    offset_maps: HashMap<MirrorPartitionKey, OffsetMap>,
    #[serde(deserialize_with = "crate::bounded::hash_map_of_ord_maps")]
    gaps: HashMap<MirrorPartitionKey, OrdMap<i64, GapDetected>>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    producers: OrdMap<MirrorPartitionKey, MirrorProducer>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    destination_topics: OrdMap<TopicId, MirrorTopicDestination>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    failback_plans: OrdMap<MirrorPartitionKey, FailbackPlan>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    group_offsets: OrdMap<GroupOffsetSyncKey, GroupOffsetSync>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    topic_configs: OrdMap<TopicConfigSyncKey, TopicConfigSync>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    acls: OrdMap<AclSyncKey, AclSync>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    source_fences: OrdMap<SourceFenceKey, SourceFence>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    failover_reports: OrdMap<FailoverReportKey, FailoverReport>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    verify_results: OrdMap<VerifyResultKey, VerifyResult>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    source_epochs: OrdMap<MirrorPartitionKey, SourceEpochs>,
    /// Per shard, its newest release and that record's offset: with
    /// `end_offset` (one past the newest record folded) it answers whether
    /// the log *ends* with the release, which is all a next owner asks.
    /// The newest record of a key survives compaction, so this does too.
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    releases: OrdMap<ShardReleaseKey, ReleaseEntry>,
}

/// A shard's newest release and where it is in the log.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ReleaseEntry {
    pub release: ShardRelease,
    pub released_at: Offset,
}

fn put<K: Ord + Clone, V: Clone>(map: &mut OrdMap<K, V>, k: K, v: Option<V>) {
    match v {
        Some(v) => {
            map.insert(k, v);
        }
        None => {
            map.remove(&k);
        }
    }
}

/// Sets or removes one entry of a partition's offset map, dropping empty
/// maps so that equal states compare equal however they were reached.
fn put_map(
    maps: &mut HashMap<MirrorPartitionKey, OffsetMap>,
    partition: MirrorPartitionKey,
    change: impl FnOnce(&mut OffsetMap),
) {
    let map = maps.entry(partition.clone()).or_default();
    change(map);
    if map.is_empty() {
        maps.remove(&partition);
    }
}

/// Sets or removes one run-keyed entry, dropping empty partitions so that
/// equal states compare equal however they were reached.
fn put_run<V: Clone>(
    map: &mut HashMap<MirrorPartitionKey, OrdMap<i64, V>>,
    k: OffsetMapRunKey,
    v: Option<V>,
) {
    match v {
        Some(v) => {
            map.entry(k.partition)
                .or_default()
                .insert(k.source_start, v);
        }
        None => {
            if let Some(inner) = map.get_mut(&k.partition) {
                inner.remove(&k.source_start);
                if inner.is_empty() {
                    map.remove(&k.partition);
                }
            }
        }
    }
}

impl MirrorStateImage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one record (CoordinatorShard `replay(offset, record)`). Takes the
    /// record by value so a replay of millions of records moves rather than
    /// clones keys and values.
    pub fn replay(&mut self, offset: Offset, record: Record) {
        self.end_offset = self.end_offset.max(offset + 1);
        match record {
            Record::LastMirrorEpochs(k, v) => put(&mut self.last_mirror_epochs, k, v),
            Record::MirrorPartitionState(k, v) => put(&mut self.partitions, k, v),
            Record::MirrorTopicStateChange(k, v) => match v {
                Some(change) => {
                    self.topics.insert(
                        k.topic_id,
                        TopicEntry {
                            change,
                            changed_at: offset,
                        },
                    );
                }
                None => {
                    self.topics.remove(&k.topic_id);
                }
            },
            Record::MirrorConfig(k, v) => put(&mut self.mirrors, k.mirror_name, v),
            Record::OffsetMapRun(k, v) => put_map(&mut self.offset_maps, k.partition, |m| {
                m.put_run(k.source_start, v)
            }),
            Record::OffsetMapHole(k, v) => put_map(&mut self.offset_maps, k.partition, |m| {
                m.put_hole(k.destination_start, v)
            }),
            Record::GapDetected(k, v) => put_run(&mut self.gaps, k, v),
            Record::MirrorProducer(k, v) => put(&mut self.producers, k, v),
            Record::MirrorTopicDestination(k, v) => {
                put(&mut self.destination_topics, k.topic_id, v)
            }
            Record::FailbackPlan(k, v) => put(&mut self.failback_plans, k, v),
            Record::GroupOffsetSync(k, v) => put(&mut self.group_offsets, k, v),
            Record::TopicConfigSync(k, v) => put(&mut self.topic_configs, k, v),
            Record::AclSync(k, v) => put(&mut self.acls, k, v),
            Record::SourceFence(k, v) => put(&mut self.source_fences, k, v),
            Record::FailoverReport(k, v) => put(&mut self.failover_reports, k, v),
            Record::VerifyResult(k, v) => put(&mut self.verify_results, k, v),
            Record::SourceEpochs(k, v) => put(&mut self.source_epochs, k, v),
            Record::ShardRelease(k, v) => put(
                &mut self.releases,
                k,
                v.map(|release| ReleaseEntry {
                    release,
                    released_at: offset,
                }),
            ),
        }
    }

    /// Like [`replay`](Self::replay) for callers that keep the record.
    pub fn apply(&mut self, offset: Offset, record: &Record) {
        self.replay(offset, record.clone());
    }

    /// One past the highest offset folded: the StateValidationOffset of
    /// decisions taken on this image (see [`StateValidation`]).
    pub fn end_offset(&self) -> Offset {
        self.end_offset
    }

    /// The release of `shard` if it is the newest record folded: the
    /// previous owner stopped every pump of the shard and wrote nothing
    /// after, so its next owner need not fence (see `ShardRelease`).
    pub fn ends_with_release(&self, shard: i32) -> Option<&ShardRelease> {
        self.releases
            .get(&ShardReleaseKey { shard })
            .filter(|e| e.released_at + 1 == self.end_offset)
            .map(|e| &e.release)
    }

    pub fn mirror(&self, name: &str) -> Option<&MirrorConfig> {
        self.mirrors.get(name)
    }

    /// Whether `name` exists and spreads its partitions across shards
    /// ([`crate::spreads`]; a value it cannot have been created with
    /// reads as not spread).
    pub fn spreads(&self, name: &str) -> bool {
        self.mirror(name)
            .is_some_and(|c| crate::spreads(c).unwrap_or(false))
    }

    pub fn mirrors(&self) -> impl Iterator<Item = (&String, &MirrorConfig)> {
        self.mirrors.iter()
    }

    pub fn topic(&self, topic_id: &TopicId) -> Option<&TopicEntry> {
        self.topics.get(topic_id)
    }

    /// Every topic record, including those whose association was cleared
    /// (empty mirror name): their lock offsets still matter.
    pub fn topics(&self) -> impl Iterator<Item = (&TopicId, &TopicEntry)> {
        self.topics.iter()
    }

    /// Topics currently associated with `mirror`.
    pub fn topics_of<'a>(&'a self, mirror: &'a str) -> impl Iterator<Item = &'a TopicEntry> + 'a {
        self.topics
            .values()
            .filter(move |t| t.change.mirror_name == mirror)
    }

    /// Finds a topic by name within a mirror, for admin commands that take
    /// names.
    pub fn topic_by_name(&self, mirror: &str, topic_name: &str) -> Option<&TopicEntry> {
        self.topics
            .values()
            .find(|t| t.change.mirror_name == mirror && t.change.topic_name == topic_name)
    }

    /// The offset of the topic's last `MirrorTopicStateChange` (KIP §5.3).
    pub fn topic_last_change(&self, topic_id: &TopicId) -> Option<Offset> {
        self.topics.get(topic_id).map(|t| t.changed_at)
    }

    /// The first of `lock`'s topics that changed at or after its offset,
    /// and where. Judged before the command itself: once another operation
    /// moved a topic, an error about its new state (being stopped, already
    /// paused) would answer a question the client never asked; the lock's
    /// INVALID_CLUSTER_MIRROR_STATES tells it to look again.
    pub fn stale_under(&self, lock: &StateValidation) -> Option<(TopicId, Offset)> {
        lock.topics.iter().find_map(|id| {
            self.topic_last_change(id)
                .filter(|&at| at >= lock.offset)
                .map(|at| (*id, at))
        })
    }

    pub fn partition_state(&self, key: &MirrorPartitionKey) -> Option<&MirrorPartitionStateValue> {
        self.partitions.get(key)
    }

    /// The state of a partition, UNKNOWN when none is recorded.
    pub fn partition_state_or_unknown(&self, key: &MirrorPartitionKey) -> PartitionState {
        self.partitions
            .get(key)
            .map(|v| v.state)
            .unwrap_or(PartitionState::Unknown)
    }

    pub fn partition_states(
        &self,
    ) -> impl Iterator<Item = (&MirrorPartitionKey, &MirrorPartitionStateValue)> {
        self.partitions.iter()
    }

    pub fn partition_states_of<'a>(
        &'a self,
        mirror: &'a str,
    ) -> impl Iterator<Item = (&'a MirrorPartitionKey, &'a MirrorPartitionStateValue)> + 'a {
        self.partitions
            .iter()
            .filter(move |(k, _)| k.mirror_name == mirror)
    }

    pub fn last_mirror_epochs(&self, key: &MirrorPartitionKey) -> Option<&LastMirrorEpochsValue> {
        self.last_mirror_epochs.get(key)
    }

    pub fn all_last_mirror_epochs(
        &self,
    ) -> impl Iterator<Item = (&MirrorPartitionKey, &LastMirrorEpochsValue)> {
        self.last_mirror_epochs.iter()
    }

    /// The partition's offset map (empty when nothing is recorded).
    pub fn offset_map(&self, key: &MirrorPartitionKey) -> &OffsetMap {
        static EMPTY: std::sync::OnceLock<OffsetMap> = std::sync::OnceLock::new();
        self.offset_maps
            .get(key)
            .unwrap_or_else(|| EMPTY.get_or_init(OffsetMap::default))
    }

    /// Every partition's offset map.
    pub fn offset_maps(&self) -> impl Iterator<Item = (&MirrorPartitionKey, &OffsetMap)> {
        self.offset_maps.iter()
    }

    /// The partition's offset-map runs in source order.
    pub fn offset_runs(&self, key: &MirrorPartitionKey) -> Vec<OffsetMapRun> {
        self.offset_map(key).runs().copied().collect()
    }

    /// The last run of a partition's offset map: where the next batch must
    /// continue from.
    pub fn last_offset_run(&self, key: &MirrorPartitionKey) -> Option<OffsetMapRun> {
        self.offset_map(key).last_run().copied()
    }

    /// Translates a source offset of a partition into a destination offset.
    pub fn translate(&self, key: &MirrorPartitionKey, source_offset: i64) -> Translation {
        self.offset_map(key).translate(source_offset)
    }

    /// The destination topic id a mirrored topic was started with, if known.
    pub fn destination_topic(&self, topic_id: &TopicId) -> Option<TopicId> {
        self.destination_topics
            .get(topic_id)
            .map(|d| d.destination_topic_id)
    }

    /// What a failback decided for a partition, if it was taken back by one.
    pub fn failback_plan(&self, key: &MirrorPartitionKey) -> Option<&FailbackPlan> {
        self.failback_plans.get(key)
    }

    /// The producer the partition's copy last opened (see [`MirrorProducer`]).
    pub fn producer(&self, key: &MirrorPartitionKey) -> Option<&MirrorProducer> {
        self.producers.get(key)
    }

    /// The source leader epochs of the partition's mirrored records (see
    /// [`SourceEpochs`]); empty when none are recorded.
    pub fn source_epochs(&self, key: &MirrorPartitionKey) -> SourceEpochs {
        self.source_epochs.get(key).cloned().unwrap_or_default()
    }

    pub fn gaps(&self, key: &MirrorPartitionKey) -> Vec<GapDetected> {
        self.gaps
            .get(key)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn group_offsets(&self) -> impl Iterator<Item = (&GroupOffsetSyncKey, &GroupOffsetSync)> {
        self.group_offsets.iter()
    }

    pub fn topic_configs(&self) -> impl Iterator<Item = (&TopicConfigSyncKey, &TopicConfigSync)> {
        self.topic_configs.iter()
    }

    /// The last change the sync recorded of one destination topic config.
    pub fn topic_config(&self, key: &TopicConfigSyncKey) -> Option<&TopicConfigSync> {
        self.topic_configs.get(key)
    }

    pub fn acls(&self) -> impl Iterator<Item = (&AclSyncKey, &AclSync)> {
        self.acls.iter()
    }

    /// Every write fence kmirror may still hold on a source, of any mirror.
    pub fn source_fences(&self) -> impl Iterator<Item = (&SourceFenceKey, &SourceFence)> {
        self.source_fences.iter()
    }

    /// The fences of `mirror`.
    pub fn source_fences_of<'a>(
        &'a self,
        mirror: &'a str,
    ) -> impl Iterator<Item = (&'a SourceFenceKey, &'a SourceFence)> + 'a {
        self.source_fences
            .iter()
            .filter(move |(k, _)| k.mirror_name == mirror)
    }

    /// The partition's last background verify (see [`VerifyResult`]).
    pub fn verify_result(&self, key: &MirrorPartitionKey) -> Option<&VerifyResult> {
        self.verify_results.get(key)
    }

    /// The report of the partition's last failover (see [`FailoverReport`]).
    pub fn failover_report(&self, key: &MirrorPartitionKey) -> Option<&FailoverReport> {
        self.failover_reports.get(key)
    }

    /// Every live key of `mirror` in the partition-scoped and sync maps: what
    /// a mirror delete must tombstone.
    /// The mirrors this image holds partition records of, with or without
    /// their config: a shard that hosts a spread mirror's partitions holds
    /// their records and not the mirror (see `Command::ForgetMirror`).
    pub fn mirrors_with_partitions(&self) -> std::collections::BTreeSet<&str> {
        let names = self.partitions.keys().map(|k| k.mirror_name.as_str());
        names
            .chain(
                self.last_mirror_epochs
                    .keys()
                    .map(|k| k.mirror_name.as_str()),
            )
            .chain(self.offset_maps.keys().map(|k| k.mirror_name.as_str()))
            .chain(self.gaps.keys().map(|k| k.mirror_name.as_str()))
            .chain(self.producers.keys().map(|k| k.mirror_name.as_str()))
            .chain(self.source_epochs.keys().map(|k| k.mirror_name.as_str()))
            .chain(self.failover_reports.keys().map(|k| k.mirror_name.as_str()))
            .chain(self.verify_results.keys().map(|k| k.mirror_name.as_str()))
            .collect()
    }

    pub(crate) fn keys_of_mirror(&self, mirror: &str) -> Vec<RecordKey> {
        let mut out = Vec::new();
        out.extend(
            self.partitions
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::MirrorPartitionState(k.clone())),
        );
        out.extend(
            self.last_mirror_epochs
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::LastMirrorEpochs(k.clone())),
        );
        for (k, m) in self
            .offset_maps
            .iter()
            .filter(|(k, _)| k.mirror_name == mirror)
        {
            out.extend(m.runs().map(|r| {
                RecordKey::OffsetMapRun(OffsetMapRunKey {
                    partition: k.clone(),
                    source_start: r.source_start,
                })
            }));
            out.extend(m.holes().map(|h| {
                RecordKey::OffsetMapHole(OffsetMapHoleKey {
                    partition: k.clone(),
                    destination_start: h.destination_start,
                })
            }));
        }
        for (k, g) in self.gaps.iter().filter(|(k, _)| k.mirror_name == mirror) {
            out.extend(g.keys().map(|s| {
                RecordKey::GapDetected(OffsetMapRunKey {
                    partition: k.clone(),
                    source_start: *s,
                })
            }));
        }
        out.extend(
            self.producers
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::MirrorProducer(k.clone())),
        );
        out.extend(
            self.failback_plans
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::FailbackPlan(k.clone())),
        );
        out.extend(
            self.source_epochs
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::SourceEpochs(k.clone())),
        );
        out.extend(
            self.group_offsets
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::GroupOffsetSync(k.clone())),
        );
        out.extend(
            self.topic_configs
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::TopicConfigSync(k.clone())),
        );
        out.extend(
            self.acls
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::AclSync(k.clone())),
        );
        out.extend(
            self.source_fences
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::SourceFence(k.clone())),
        );
        out.extend(
            self.failover_reports
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::FailoverReport(k.clone())),
        );
        out.extend(
            self.verify_results
                .keys()
                .filter(|k| k.mirror_name == mirror)
                .map(|k| RecordKey::VerifyResult(k.clone())),
        );
        out
    }

    /// Counts for summaries (`kmirror log replay`).
    pub fn summary(&self) -> ImageSummary {
        let mut by_state = BTreeMap::new();
        for v in self.partitions.values() {
            *by_state.entry(v.state).or_insert(0usize) += 1;
        }
        ImageSummary {
            end_offset: self.end_offset,
            mirrors: self.mirrors.len(),
            topics: self
                .topics
                .values()
                .filter(|t| !t.change.mirror_name.is_empty())
                .count(),
            partitions: self.partitions.len(),
            partitions_by_state: by_state,
            offset_runs: self.offset_maps.values().map(OffsetMap::run_count).sum(),
            offset_map_holes: self.offset_maps.values().map(OffsetMap::hole_count).sum(),
            gaps: self.gaps.values().map(OrdMap::len).sum(),
            group_offsets: self.group_offsets.len(),
            topic_configs: self.topic_configs.len(),
            acls: self.acls.len(),
            source_fences: self.source_fences.len(),
            failover_reports: self.failover_reports.len(),
        }
    }
}

impl RecordKey {
    /// The tombstone for this key.
    pub fn tombstone(self) -> Record {
        match self {
            RecordKey::LastMirrorEpochs(k) => Record::LastMirrorEpochs(k, None),
            RecordKey::MirrorPartitionState(k) => Record::MirrorPartitionState(k, None),
            RecordKey::MirrorTopicStateChange(k) => Record::MirrorTopicStateChange(k, None),
            RecordKey::MirrorConfig(k) => Record::MirrorConfig(k, None),
            RecordKey::OffsetMapRun(k) => Record::OffsetMapRun(k, None),
            RecordKey::GapDetected(k) => Record::GapDetected(k, None),
            RecordKey::GroupOffsetSync(k) => Record::GroupOffsetSync(k, None),
            RecordKey::TopicConfigSync(k) => Record::TopicConfigSync(k, None),
            RecordKey::AclSync(k) => Record::AclSync(k, None),
            RecordKey::OffsetMapHole(k) => Record::OffsetMapHole(k, None),
            RecordKey::MirrorProducer(k) => Record::MirrorProducer(k, None),
            RecordKey::MirrorTopicDestination(k) => Record::MirrorTopicDestination(k, None),
            RecordKey::FailbackPlan(k) => Record::FailbackPlan(k, None),
            RecordKey::SourceFence(k) => Record::SourceFence(k, None),
            RecordKey::FailoverReport(k) => Record::FailoverReport(k, None),
            RecordKey::SourceEpochs(k) => Record::SourceEpochs(k, None),
            RecordKey::ShardRelease(k) => Record::ShardRelease(k, None),
            RecordKey::VerifyResult(k) => Record::VerifyResult(k, None),
        }
    }
}

/// Counts describing an image.
#[derive(Clone, PartialEq, Eq, Debug, Serialize)]
pub struct ImageSummary {
    pub end_offset: Offset,
    pub mirrors: usize,
    pub topics: usize,
    pub partitions: usize,
    pub partitions_by_state: BTreeMap<PartitionState, usize>,
    pub offset_runs: usize,
    pub offset_map_holes: usize,
    pub gaps: usize,
    pub group_offsets: usize,
    pub topic_configs: usize,
    pub acls: usize,
    pub source_fences: usize,
    pub failover_reports: usize,
}
