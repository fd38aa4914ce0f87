//! The records of kmirror's `__mirror_state` log.
//!
//! Names follow KIP-1279 §4 so that readers of the KIP find them. Every
//! record has a key (compaction keeps the newest record per key) and an
//! optional value (`None` is a tombstone). Each record only ever sets or
//! removes its own key's entry in the folded image: this is what makes a
//! compacted log replay to the same state as the full log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::TopicId;
pub use crate::source_epochs::{EpochEntry, SourceEpochs, MAX_SOURCE_EPOCHS};
use crate::state::PartitionState;

/// The identity of one mirror partition: `(MirrorName, TopicId, Partition)`,
/// the key of both `MirrorPartitionState` and `LastMirrorEpochs` in the KIP.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct MirrorPartitionKey {
    pub mirror_name: String,
    pub topic_id: TopicId,
    pub partition: i32,
}

impl MirrorPartitionKey {
    pub fn new(mirror_name: impl Into<String>, topic_id: TopicId, partition: i32) -> Self {
        MirrorPartitionKey {
            mirror_name: mirror_name.into(),
            topic_id,
            partition,
        }
    }
}

/// KIP name for the partition-state key.
pub type MirrorPartitionStateKey = MirrorPartitionKey;
/// KIP name for the last-mirror-epochs key.
pub type LastMirrorEpochsKey = MirrorPartitionKey;

/// KIP `MirrorPartitionStateValue`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct MirrorPartitionStateValue {
    pub state: PartitionState,
    /// Highest destination leader epoch seen from a writer; fences writers
    /// that lost leadership (FENCED_LEADER_EPOCH).
    pub leader_epoch: i32,
    /// +1 per transition; fences writers that act on a stale read
    /// (FENCED_STATE_EPOCH).
    pub state_epoch: i32,
    pub error_message: Option<String>,
    /// Failures so far (1 on the first), or −1 when not retryable.
    pub retry_attempt: i16,
    /// The state to retry back to when this one is FAILED.
    pub previous_state: PartitionState,
}

impl MirrorPartitionStateValue {
    /// The state of a partition nothing was recorded for yet: epoch −1, so
    /// the first writer's leader epoch always passes the fence.
    pub fn unknown() -> Self {
        Self {
            state: PartitionState::Unknown,
            leader_epoch: -1,
            state_epoch: 0,
            error_message: None,
            retry_attempt: 0,
            previous_state: PartitionState::Unknown,
        }
    }
}

/// KIP `LastMirrorEpochsValue`, widened with the positions an outside-the-
/// broker mirror needs for failback, since our offsets are not identical on
/// both sides: the source position we had copied and the destination
/// position it landed at.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct LastMirrorEpochsValue {
    /// Highest destination leader epoch at STOPPING (KIP LME).
    pub last_mirror_epoch: i32,
    /// Destination log end offset at STOPPING (KIP LastMirrorOffset).
    pub last_mirror_offset: i64,
    /// Next source offset to fetch (one past the last mirrored source record).
    pub source_offset: i64,
    /// Source leader epoch of the last mirrored batch (−1 unknown).
    pub source_leader_epoch: i32,
    /// Destination end offset after the last mirrored batch.
    pub destination_end_offset: i64,
    /// Destination leader epoch at that point (−1 unknown).
    pub destination_leader_epoch: i32,
}

/// Key of `MirrorTopicStateChange`: one per topic, never tombstoned (the KIP
/// clears the association with an empty mirror name instead, JR33.1).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct MirrorTopicStateKey {
    pub topic_id: TopicId,
}

/// KIP `MirrorTopicStateChangeRecord`, carrying the topic's name and
/// partition count too, because outside the broker we have no TopicImage to
/// look them up in.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct MirrorTopicStateChange {
    pub topic_id: TopicId,
    /// Empty clears the association (after DeleteClusterMirror).
    pub mirror_name: String,
    pub desired_state: PartitionState,
    pub topic_name: String,
    pub partition_count: i32,
}

impl MirrorTopicStateChange {
    /// Whether the topic is one its mirror runs (desired MIRRORING or
    /// PAUSED): what a start skips, an exclude stops and a delete waits for.
    pub fn is_active(&self) -> bool {
        !self.mirror_name.is_empty()
            && matches!(
                self.desired_state,
                PartitionState::Mirroring | PartitionState::Paused
            )
    }
}

/// Key of a mirror's configuration record.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct MirrorConfigKey {
    pub mirror_name: String,
}

/// A mirror's configuration (the KIP's CLUSTER_MIRROR config resource).
/// Create and alter both write the whole value; delete writes a tombstone.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct MirrorConfig {
    pub source_bootstrap: String,
    /// Connection properties for the source (security.*, sasl.*, ssl.*,
    /// fetch.*...). A BTreeMap so the encoding is deterministic.
    pub source_properties: BTreeMap<String, String>,
    pub topics_include: String,
    pub topics_exclude: String,
    pub groups_include: String,
    pub groups_exclude: String,
    /// Recorded at create; failback finds a mirror by its source cluster id
    /// (JR30), and a change of source cluster id fails every partition.
    pub source_cluster_id: String,
}

/// One run of the exact offset map: source offsets
/// `[source_start, source_start+length)` landed at destination offsets
/// `[destination_start, destination_start+length)`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct OffsetMapRun {
    pub source_start: i64,
    pub destination_start: i64,
    pub length: i64,
}

impl OffsetMapRun {
    pub fn source_end(&self) -> i64 {
        self.source_start + self.length
    }
    pub fn destination_end(&self) -> i64 {
        self.destination_start + self.length
    }
}

/// Key of an offset-map run: one key per run start, so compaction keeps every
/// run while an extended run (same start, longer length) replaces itself.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct OffsetMapRunKey {
    pub partition: MirrorPartitionKey,
    pub source_start: i64,
}

/// A destination range that belongs to no source offset: records an
/// unclean leader election on the source took back after kmirror had
/// mirrored them. Kafka cannot truncate a partition, so the destination keeps
/// them; the hole keeps alignment from stretching a run over them and
/// translation from answering with them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct OffsetMapHole {
    pub destination_start: i64,
    pub length: i64,
}

impl OffsetMapHole {
    pub fn destination_end(&self) -> i64 {
        self.destination_start + self.length
    }
}

/// Key of a hole: one per destination start.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct OffsetMapHoleKey {
    pub partition: MirrorPartitionKey,
    pub destination_start: i64,
}

/// The idempotent producer a partition's copy writes with, recorded before
/// its first produce. After a crash, the destination may hold batches above
/// the recorded run lengths; they are kmirror's only if this producer wrote
/// them — anything else is a foreign write, which alignment must not take
/// for its own.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct MirrorProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// Key of the producer record: one per mirror partition.
pub type MirrorProducerKey = MirrorPartitionKey;

/// The destination topic a mirrored topic is copied into, by id: a
/// failback finds the mirror that copied a topic the other way by it, and
/// refuses to fail back onto a topic re-created since.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct MirrorTopicDestination {
    pub destination_topic_id: TopicId,
}

/// How a reverse mirror takes a topic back from the mirror that copied it
/// the other way.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailbackMode {
    /// Keep what both clusters agree on; quarantine what only this
    /// destination has after the last mirrored position; copy only what the
    /// source wrote after the failover.
    Delta,
    /// Delete and re-create the destination topic, then copy everything.
    FromScratch,
}

impl FailbackMode {
    /// The name operators type and read (`delta`, `from-scratch`).
    pub fn name(self) -> &'static str {
        match self {
            FailbackMode::Delta => "delta",
            FailbackMode::FromScratch => "from-scratch",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "delta" => Some(FailbackMode::Delta),
            "from-scratch" => Some(FailbackMode::FromScratch),
            _ => None,
        }
    }
}

/// What a failback decided for one partition, recorded before any of it is
/// done (quarantine export, topic re-creation), so the audit tells why the
/// map starts where it does.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct FailbackPlan {
    /// The mirror that copied this topic the other way.
    pub forward_mirror: String,
    pub mode: FailbackMode,
    /// Where the histories last agreed: the forward mirror's last mirrored
    /// position, on this mirror's destination (its old source) and on this
    /// mirror's source (its old destination). −1 for `from-scratch`.
    pub destination_position: i64,
    pub source_position: i64,
    /// Destination records after the agreed position, which the source
    /// never had: quarantined (`delta`) or deleted (`from-scratch`).
    pub divergent_start: i64,
    pub divergent_end: i64,
    /// Source records to copy.
    pub copy_start: i64,
    pub copy_end: i64,
    /// Where the divergent records were exported (`delta`, when any).
    pub quarantine_topic: Option<String>,
    /// Why `delta` was not possible, when it was not.
    pub reason: Option<String>,
}
/// Key of a partition's source leader epochs ([`SourceEpochs`]): one per
/// mirror partition, rewritten (before the produce) whenever a fetched
/// batch carries a newer source leader epoch, so alignment after a restart
/// can ask the source where the last mirrored record's epoch ends.
pub type SourceEpochsKey = MirrorPartitionKey;

/// A source range that was lost before we could copy it (source retention
/// overtook the fetch position). Recorded so audits can say exactly what a
/// destination never received.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct GapDetected {
    pub source_start: i64,
    /// Exclusive.
    pub source_end: i64,
    pub reason: String,
}

/// Key of a gap record.
pub type GapKey = OffsetMapRunKey;

/// Key of a group-offset sync record.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct GroupOffsetSyncKey {
    pub mirror_name: String,
    pub group: String,
    pub topic_id: TopicId,
    pub partition: i32,
}

/// A consumer-group offset we committed on the destination.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct GroupOffsetSync {
    /// The source's committed offset we translated.
    pub source_offset: i64,
    /// Destination offset previously committed (−1 none).
    pub from_offset: i64,
    /// Destination offset we committed.
    pub to_offset: i64,
    pub leader_epoch: i32,
}

/// Key of a topic-config sync record.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct TopicConfigSyncKey {
    pub mirror_name: String,
    pub topic_id: TopicId,
    pub config_name: String,
}

/// A destination topic config we changed, with the old value so an audit can
/// explain it and an operator can undo it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct TopicConfigSync {
    pub from: Option<String>,
    pub to: Option<String>,
}

/// Key of an ACL sync record: the binding in a canonical text form
/// (`resourceType;patternType;name;principal;host;operation;permission`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct AclSyncKey {
    pub mirror_name: String,
    pub binding: String,
}

/// An ACL we created on the destination. Deleting it writes a tombstone, so
/// the image holds exactly the bindings kmirror owns — we only ever delete
/// bindings we created (the KIP's full overwrite is ambiguous with several
/// mirrors).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AclSync {
    pub owned_by_kmirror: bool,
}

/// Key of a source write fence: the mirror, and the ACL binding in the
/// canonical text form of [`AclSyncKey::binding`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct SourceFenceKey {
    pub mirror_name: String,
    pub binding: String,
}

/// A DENY WRITE ACL kmirror created on the *source* cluster for a planned
/// switchover (`stop --fence-source`). Recorded before the ACL is created;
/// its tombstone follows the ACL's deletion (`unfence`, a start of the
/// topic, a mirror delete), so the image holds every fence kmirror may still
/// have on the source, and kmirror never deletes a binding it did not make.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SourceFence {
    pub topic_id: TopicId,
    pub topic_name: String,
}

/// Key of a shard release: the state-topic partition (the coordinator
/// shard) given up. Routed to that partition itself, so a shard's releases
/// live in its own log.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct ShardReleaseKey {
    pub shard: i32,
}

/// The last record a clustered node writes to a shard's log when it lets
/// the shard go cleanly: every pump of the shard had closed and awaited its
/// producer before it was appended, so nothing of the old owner can still
/// land on a destination partition. A next owner that finds it as the
/// newest record of the log needs no fence markers (a clean handover costs
/// no destination offset); any other ending (a crash, a pause, a lost
/// session) makes it fence as before.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ShardRelease {
    /// Who let the shard go (the node's member label).
    pub member: String,
    /// Why (revoked by a rebalance, node shutting down, …).
    pub reason: String,
}

/// What a source held that a failover did not mirror, read when it stopped.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Unmirrored {
    /// The source high watermark when it was read.
    pub source_high_watermark: i64,
    /// High watermark − the next source offset to mirror.
    pub records: i64,
    /// Sum of the sizes of the source batches in that range.
    pub bytes: i64,
    /// `bytes` is a lower bound: reading the batch headers stopped at its cap.
    pub bytes_at_least: bool,
    /// Newest source timestamp − newest mirrored timestamp, in ms (−1 unknown).
    pub behind_ms: i64,
}

impl Unmirrored {
    /// `50 records, at least 5200 bytes, 3.200 s behind`: the one wording of
    /// the CLI and the audit.
    pub fn text(&self) -> String {
        let at_least = if self.bytes_at_least { "at least " } else { "" };
        let behind = if self.behind_ms >= 0 {
            format!("{:.3} s behind", self.behind_ms as f64 / 1000.0)
        } else {
            "seconds behind unknown".to_string()
        };
        format!(
            "{} records, {at_least}{} bytes, {behind}",
            self.records, self.bytes
        )
    }
}

/// Key of a verify result: one per mirror partition, so compaction keeps
/// each partition's last result (describe shows it beside the partition).
pub type VerifyResultKey = MirrorPartitionKey;

/// Where a verify first found the copy unequal to the source.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct VerifyDifference {
    pub source_offset: i64,
    pub destination_offset: i64,
    /// `key`, `value`, `headers`, `timestamp`, `missing` (the destination
    /// has no record there) or `lost` (below the destination's log start).
    pub field: String,
    pub detail: String,
}

/// The background check's last comparison of a partition with its source
/// (`mirror.verify.interval.ms`): a seeded sample, so `kmirror verify
/// --sample N --seed S` repeats it exactly. Recorded after the reads; it
/// decides nothing.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct VerifyResult {
    /// Wall-clock time the check finished, stamped by the caller.
    pub verified_at_ms: i64,
    pub sample: u64,
    pub seed: u64,
    /// The source range sampled: `[from, through)`.
    pub from: i64,
    pub through: i64,
    pub compared: u64,
    pub equal: u64,
    pub skipped: u64,
    pub differences: u64,
    pub first_difference: Option<VerifyDifference>,
    /// Why the check could not finish.
    pub error: Option<String>,
}

/// Key of a failover report: one per mirror partition.
pub type FailoverReportKey = MirrorPartitionKey;

/// A partition's failover, recorded by STOPPING after LastMirrorEpochs and
/// before STOPPED: where the copy stopped and what the source held beyond
/// it. A source that cannot be read never holds a failover up: the report
/// then says why (`source_error`) instead of what was left.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct FailoverReport {
    /// Next source offset to fetch (as LastMirrorEpochs).
    pub source_offset: i64,
    /// Source leader epoch of the last mirrored batch (−1 unknown).
    pub source_leader_epoch: i32,
    pub destination_end_offset: i64,
    /// −1 unknown.
    pub destination_leader_epoch: i32,
    /// `None` when the source could not be read.
    pub unmirrored: Option<Unmirrored>,
    /// Why the source could not be read.
    pub source_error: Option<String>,
}

impl FailoverReport {
    /// What was not mirrored, or why that is unknown: the one wording of the
    /// CLI and the audit.
    pub fn unmirrored_text(&self) -> String {
        match (&self.unmirrored, &self.source_error) {
            (Some(u), _) => format!(
                "not mirrored: {} (source high watermark {})",
                u.text(),
                u.source_high_watermark
            ),
            (None, Some(e)) => format!("source unreachable, what was not mirrored is unknown: {e}"),
            (None, None) => "source unreachable, what was not mirrored is unknown".to_string(),
        }
    }
}

/// The record type byte in the codec envelope. 1 and 2 are the KIP's
/// coordinator `apiKey`s; the rest are ours.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum RecordType {
    LastMirrorEpochs = 1,
    MirrorPartitionState = 2,
    MirrorTopicStateChange = 3,
    MirrorConfig = 4,
    OffsetMapRun = 5,
    GapDetected = 6,
    GroupOffsetSync = 7,
    TopicConfigSync = 8,
    AclSync = 9,
    OffsetMapHole = 10,
    MirrorProducer = 11,
    MirrorTopicDestination = 13,
    FailbackPlan = 16,
    SourceFence = 12,
    FailoverReport = 15,
    SourceEpochs = 14,
    ShardRelease = 17,
    VerifyResult = 18,
}

impl RecordType {
    pub fn from_u8(v: u8) -> Option<Self> {
        use RecordType::*;
        Some(match v {
            1 => LastMirrorEpochs,
            2 => MirrorPartitionState,
            3 => MirrorTopicStateChange,
            4 => MirrorConfig,
            5 => OffsetMapRun,
            6 => GapDetected,
            7 => GroupOffsetSync,
            8 => TopicConfigSync,
            9 => AclSync,
            10 => OffsetMapHole,
            11 => MirrorProducer,
            13 => MirrorTopicDestination,
            16 => FailbackPlan,
            12 => SourceFence,
            15 => FailoverReport,
            14 => SourceEpochs,
            17 => ShardRelease,
            18 => VerifyResult,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        use RecordType::*;
        match self {
            LastMirrorEpochs => "LastMirrorEpochs",
            MirrorPartitionState => "MirrorPartitionState",
            MirrorTopicStateChange => "MirrorTopicStateChange",
            MirrorConfig => "MirrorConfig",
            OffsetMapRun => "OffsetMapRun",
            GapDetected => "GapDetected",
            GroupOffsetSync => "GroupOffsetSync",
            TopicConfigSync => "TopicConfigSync",
            AclSync => "AclSync",
            OffsetMapHole => "OffsetMapHole",
            MirrorProducer => "MirrorProducer",
            MirrorTopicDestination => "MirrorTopicDestination",
            FailbackPlan => "FailbackPlan",
            SourceFence => "SourceFence",
            FailoverReport => "FailoverReport",
            SourceEpochs => "SourceEpochs",
            ShardRelease => "ShardRelease",
            VerifyResult => "VerifyResult",
        }
    }
}

/// A record's key alone: what compaction and `latest(key)` work on.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub enum RecordKey {
    LastMirrorEpochs(LastMirrorEpochsKey),
    MirrorPartitionState(MirrorPartitionStateKey),
    MirrorTopicStateChange(MirrorTopicStateKey),
    MirrorConfig(MirrorConfigKey),
    OffsetMapRun(OffsetMapRunKey),
    GapDetected(GapKey),
    GroupOffsetSync(GroupOffsetSyncKey),
    TopicConfigSync(TopicConfigSyncKey),
    AclSync(AclSyncKey),
    OffsetMapHole(OffsetMapHoleKey),
    MirrorProducer(MirrorProducerKey),
    MirrorTopicDestination(MirrorTopicStateKey),
    FailbackPlan(MirrorPartitionKey),
    SourceFence(SourceFenceKey),
    FailoverReport(FailoverReportKey),
    SourceEpochs(SourceEpochsKey),
    ShardRelease(ShardReleaseKey),
    VerifyResult(VerifyResultKey),
}

/// One record: a typed key with its optional value (`None` = tombstone).
/// Pairing key and value types in one variant makes a mismatched pair
/// unrepresentable.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Record {
    LastMirrorEpochs(LastMirrorEpochsKey, Option<LastMirrorEpochsValue>),
    MirrorPartitionState(MirrorPartitionStateKey, Option<MirrorPartitionStateValue>),
    MirrorTopicStateChange(MirrorTopicStateKey, Option<MirrorTopicStateChange>),
    MirrorConfig(MirrorConfigKey, Option<MirrorConfig>),
    OffsetMapRun(OffsetMapRunKey, Option<OffsetMapRun>),
    GapDetected(GapKey, Option<GapDetected>),
    GroupOffsetSync(GroupOffsetSyncKey, Option<GroupOffsetSync>),
    TopicConfigSync(TopicConfigSyncKey, Option<TopicConfigSync>),
    AclSync(AclSyncKey, Option<AclSync>),
    OffsetMapHole(OffsetMapHoleKey, Option<OffsetMapHole>),
    MirrorProducer(MirrorProducerKey, Option<MirrorProducer>),
    MirrorTopicDestination(MirrorTopicStateKey, Option<MirrorTopicDestination>),
    FailbackPlan(MirrorPartitionKey, Option<FailbackPlan>),
    SourceFence(SourceFenceKey, Option<SourceFence>),
    FailoverReport(FailoverReportKey, Option<FailoverReport>),
    SourceEpochs(SourceEpochsKey, Option<SourceEpochs>),
    ShardRelease(ShardReleaseKey, Option<ShardRelease>),
    VerifyResult(VerifyResultKey, Option<VerifyResult>),
}

impl Record {
    pub fn record_type(&self) -> RecordType {
        match self {
            Record::LastMirrorEpochs(..) => RecordType::LastMirrorEpochs,
            Record::MirrorPartitionState(..) => RecordType::MirrorPartitionState,
            Record::MirrorTopicStateChange(..) => RecordType::MirrorTopicStateChange,
            Record::MirrorConfig(..) => RecordType::MirrorConfig,
            Record::OffsetMapRun(..) => RecordType::OffsetMapRun,
            Record::GapDetected(..) => RecordType::GapDetected,
            Record::GroupOffsetSync(..) => RecordType::GroupOffsetSync,
            Record::TopicConfigSync(..) => RecordType::TopicConfigSync,
            Record::AclSync(..) => RecordType::AclSync,
            Record::OffsetMapHole(..) => RecordType::OffsetMapHole,
            Record::MirrorProducer(..) => RecordType::MirrorProducer,
            Record::MirrorTopicDestination(..) => RecordType::MirrorTopicDestination,
            Record::FailbackPlan(..) => RecordType::FailbackPlan,
            Record::SourceFence(..) => RecordType::SourceFence,
            Record::FailoverReport(..) => RecordType::FailoverReport,
            Record::SourceEpochs(..) => RecordType::SourceEpochs,
            Record::ShardRelease(..) => RecordType::ShardRelease,
            Record::VerifyResult(..) => RecordType::VerifyResult,
        }
    }

    pub fn key(&self) -> RecordKey {
        match self {
            Record::LastMirrorEpochs(k, _) => RecordKey::LastMirrorEpochs(k.clone()),
            Record::MirrorPartitionState(k, _) => RecordKey::MirrorPartitionState(k.clone()),
            Record::MirrorTopicStateChange(k, _) => RecordKey::MirrorTopicStateChange(k.clone()),
            Record::MirrorConfig(k, _) => RecordKey::MirrorConfig(k.clone()),
            Record::OffsetMapRun(k, _) => RecordKey::OffsetMapRun(k.clone()),
            Record::GapDetected(k, _) => RecordKey::GapDetected(k.clone()),
            Record::GroupOffsetSync(k, _) => RecordKey::GroupOffsetSync(k.clone()),
            Record::TopicConfigSync(k, _) => RecordKey::TopicConfigSync(k.clone()),
            Record::AclSync(k, _) => RecordKey::AclSync(k.clone()),
            Record::OffsetMapHole(k, _) => RecordKey::OffsetMapHole(k.clone()),
            Record::MirrorProducer(k, _) => RecordKey::MirrorProducer(k.clone()),
            Record::MirrorTopicDestination(k, _) => RecordKey::MirrorTopicDestination(k.clone()),
            Record::FailbackPlan(k, _) => RecordKey::FailbackPlan(k.clone()),
            Record::SourceFence(k, _) => RecordKey::SourceFence(k.clone()),
            Record::FailoverReport(k, _) => RecordKey::FailoverReport(k.clone()),
            Record::SourceEpochs(k, _) => RecordKey::SourceEpochs(k.clone()),
            Record::ShardRelease(k, _) => RecordKey::ShardRelease(*k),
            Record::VerifyResult(k, _) => RecordKey::VerifyResult(k.clone()),
        }
    }

    pub fn is_tombstone(&self) -> bool {
        match self {
            Record::LastMirrorEpochs(_, v) => v.is_none(),
            Record::MirrorPartitionState(_, v) => v.is_none(),
            Record::MirrorTopicStateChange(_, v) => v.is_none(),
            Record::MirrorConfig(_, v) => v.is_none(),
            Record::OffsetMapRun(_, v) => v.is_none(),
            Record::GapDetected(_, v) => v.is_none(),
            Record::GroupOffsetSync(_, v) => v.is_none(),
            Record::TopicConfigSync(_, v) => v.is_none(),
            Record::AclSync(_, v) => v.is_none(),
            Record::OffsetMapHole(_, v) => v.is_none(),
            Record::MirrorProducer(_, v) => v.is_none(),
            Record::MirrorTopicDestination(_, v) => v.is_none(),
            Record::FailbackPlan(_, v) => v.is_none(),
            Record::SourceFence(_, v) => v.is_none(),
            Record::FailoverReport(_, v) => v.is_none(),
            Record::SourceEpochs(_, v) => v.is_none(),
            Record::ShardRelease(_, v) => v.is_none(),
            Record::VerifyResult(_, v) => v.is_none(),
        }
    }

    /// The mirror this record belongs to, for audit filters. Topic state
    /// changes carry it in the value (empty when cleared).
    pub fn mirror_name(&self) -> Option<&str> {
        match self {
            Record::LastMirrorEpochs(k, _)
            | Record::MirrorPartitionState(k, _)
            | Record::MirrorProducer(k, _)
            | Record::SourceEpochs(k, _)
            | Record::FailbackPlan(k, _)
            | Record::FailoverReport(k, _)
            | Record::VerifyResult(k, _) => Some(&k.mirror_name),
            Record::SourceFence(k, _) => Some(&k.mirror_name),
            Record::OffsetMapHole(k, _) => Some(&k.partition.mirror_name),
            // Keyed by the topic alone, like the topic's state change.
            Record::MirrorTopicDestination(..) => None,
            // About a whole shard, whatever mirrors it holds.
            Record::ShardRelease(..) => None,
            Record::MirrorTopicStateChange(_, v) => v.as_ref().map(|v| v.mirror_name.as_str()),
            Record::MirrorConfig(k, _) => Some(&k.mirror_name),
            Record::OffsetMapRun(k, _) | Record::GapDetected(k, _) => {
                Some(&k.partition.mirror_name)
            }
            Record::GroupOffsetSync(k, _) => Some(&k.mirror_name),
            Record::TopicConfigSync(k, _) => Some(&k.mirror_name),
            Record::AclSync(k, _) => Some(&k.mirror_name),
        }
    }

    /// The topic this record is about, for audit filters.
    pub fn topic_id(&self) -> Option<TopicId> {
        match self {
            Record::LastMirrorEpochs(k, _)
            | Record::MirrorPartitionState(k, _)
            | Record::MirrorProducer(k, _)
            | Record::SourceEpochs(k, _)
            | Record::FailbackPlan(k, _)
            | Record::FailoverReport(k, _)
            | Record::VerifyResult(k, _) => Some(k.topic_id),
            Record::SourceFence(_, v) => v.as_ref().map(|v| v.topic_id),
            Record::OffsetMapHole(k, _) => Some(k.partition.topic_id),
            Record::MirrorTopicDestination(k, _) => Some(k.topic_id),
            Record::MirrorTopicStateChange(k, _) => Some(k.topic_id),
            Record::MirrorConfig(..) | Record::AclSync(..) | Record::ShardRelease(..) => None,
            Record::OffsetMapRun(k, _) | Record::GapDetected(k, _) => Some(k.partition.topic_id),
            Record::GroupOffsetSync(k, _) => Some(k.topic_id),
            Record::TopicConfigSync(k, _) => Some(k.topic_id),
        }
    }

    /// The partition this record is about, for audit filters.
    pub fn partition(&self) -> Option<i32> {
        match self {
            Record::LastMirrorEpochs(k, _)
            | Record::MirrorPartitionState(k, _)
            | Record::MirrorProducer(k, _)
            | Record::SourceEpochs(k, _)
            | Record::FailbackPlan(k, _)
            | Record::FailoverReport(k, _)
            | Record::VerifyResult(k, _) => Some(k.partition),
            Record::OffsetMapHole(k, _) => Some(k.partition.partition),
            Record::OffsetMapRun(k, _) | Record::GapDetected(k, _) => Some(k.partition.partition),
            Record::GroupOffsetSync(k, _) => Some(k.partition),
            _ => None,
        }
    }
}
