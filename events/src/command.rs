//! The operations on the mirror state and the ways they can be refused:
//! the vocabulary callers (the coordinator, the admin API, the actors)
//! speak, kept apart from [`crate::machine`]'s decisions so they can name an
//! operation without reading how it is decided.

use crate::ids::TopicId;
use crate::pattern::PatternError;
use crate::record::*;
use crate::state::PartitionState;

/// A topic named in a start command, with what we learned from the source.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TopicRef {
    pub topic_id: TopicId,
    pub name: String,
    pub partition_count: i32,
    /// The destination topic's id, when known: a failback finds the mirror
    /// that copied a topic the other way by it (a topic re-created on the
    /// destination since is another topic).
    pub destination_topic_id: Option<TopicId>,
}

/// A partition's offset map as a start sets it: runs and holes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MapSeed {
    pub topic_id: TopicId,
    pub partition: i32,
    pub runs: Vec<OffsetMapRun>,
    pub holes: Vec<OffsetMapHole>,
}

/// An operation on the mirror state.
///
/// Epoch arguments follow KIP §4.1: `leader_epoch` is the writer's
/// destination leader epoch and `expected_state_epoch` the state epoch it
/// read; −1 skips the respective fencing check (admin operations).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Command {
    CreateMirror {
        name: String,
        config: MirrorConfig,
    },
    /// Replaces the whole config; the source cluster id recorded at create
    /// is kept (an empty one in `config` means "unchanged").
    AlterMirror {
        name: String,
        config: MirrorConfig,
    },
    DeleteMirror {
        name: String,
    },
    /// Starts `topics` and adds `include`/`exclude` (names or regexes) to
    /// the mirror's patterns for auto-discovery, in one append: a start
    /// refused as stale changes nothing, and two starts never lose each
    /// other's patterns (they are joined here, against the current image).
    StartTopics {
        mirror: String,
        topics: Vec<TopicRef>,
        include: Vec<String>,
        exclude: Vec<String>,
        /// Offset maps the started partitions begin with (a failback's
        /// `delta`), in the same append, so no partition aligns without it.
        seeds: Vec<MapSeed>,
    },
    StopTopics {
        mirror: String,
        topics: Vec<TopicId>,
    },
    PauseTopics {
        mirror: String,
        topics: Vec<TopicId>,
    },
    ResumeTopics {
        mirror: String,
        topics: Vec<TopicId>,
    },
    /// The source grew a topic's partitions (counts never shrink).
    UpdatePartitionCount {
        mirror: String,
        topic_id: TopicId,
        partition_count: i32,
    },
    TransitionPartition {
        key: MirrorPartitionKey,
        target: PartitionState,
        leader_epoch: i32,
        expected_state_epoch: i32,
    },
    /// → FAILED, keeping PreviousState and counting RetryAttempt.
    FailPartition {
        key: MirrorPartitionKey,
        leader_epoch: i32,
        error_message: String,
        retryable: bool,
    },
    /// Operator recovery (`RecoverMirrorTopics`): FAILED → the retry target
    /// of PreviousState, with RetryAttempt reset to 0.
    RecoverPartition {
        key: MirrorPartitionKey,
        leader_epoch: i32,
    },
    /// A successful fetch in MIRRORING clears the stored failure
    /// (`clearFailedStateAndPersist`). No-op when nothing is stored.
    ClearFailure {
        key: MirrorPartitionKey,
        leader_epoch: i32,
    },
    RecordLastMirrorEpochs {
        key: MirrorPartitionKey,
        value: LastMirrorEpochsValue,
    },
    /// The PartitionActor's write-ahead map maintenance: `upsert` opens runs
    /// (at length 0, before the produce that fills them) and records
    /// acknowledged lengths (same `source_start`, longer length); `remove`
    /// drops runs, by `source_start`, that alignment found never landed;
    /// `holes` marks destination ranges that belong to no source offset (an
    /// unclean-election repair, in the same append as the cut). Refused if
    /// the resulting map would overlap on either cluster.
    SetOffsetRuns {
        key: MirrorPartitionKey,
        upsert: Vec<OffsetMapRun>,
        remove: Vec<i64>,
        holes: Vec<OffsetMapHole>,
    },
    /// What a failback decided for a partition, before any of it is done.
    RecordFailbackPlan {
        key: MirrorPartitionKey,
        plan: FailbackPlan,
    },
    /// The producer a partition's copy opened, before its first produce.
    RecordProducer {
        key: MirrorPartitionKey,
        producer: MirrorProducer,
    },
    /// The source leader epochs of the mirrored records, whole: before the
    /// produce of a batch with a newer epoch, and when alignment forgets
    /// entries past what landed or past a divergence. Empty entries remove
    /// the record (nothing known: the offsets are all a check has).
    RecordSourceEpochs {
        key: MirrorPartitionKey,
        epochs: SourceEpochs,
    },
    RecordGap {
        key: MirrorPartitionKey,
        gap: GapDetected,
    },
    /// Translated group offsets about to be committed, many in one append:
    /// a pass over a thousand groups would otherwise pay one durable append
    /// per partition offset.
    RecordGroupOffsetSyncs {
        syncs: Vec<(GroupOffsetSyncKey, GroupOffsetSync)>,
    },
    RecordTopicConfigSync {
        key: TopicConfigSyncKey,
        value: TopicConfigSync,
    },
    RecordAclCreated {
        key: AclSyncKey,
    },
    RecordAclDeleted {
        key: AclSyncKey,
    },
    /// The background verify's result for a partition.
    RecordVerifyResult {
        key: MirrorPartitionKey,
        value: VerifyResult,
    },
    /// What a partition's failover left unmirrored, before its STOPPED.
    RecordFailoverReport {
        key: MirrorPartitionKey,
        value: FailoverReport,
    },
    /// A DENY WRITE ACL about to be created on the source (`--fence-source`):
    /// recorded first, so kmirror owns exactly what it may have created.
    RecordSourceFence {
        key: SourceFenceKey,
        fence: SourceFence,
    },
    /// A fence whose ACL is gone from the source (or was never created).
    /// No-op when none is recorded.
    RemoveSourceFence {
        key: SourceFenceKey,
    },
    /// A clustered node lets `shard` go after every pump of it stopped: the
    /// last record it writes there (see [`ShardRelease`]).
    ReleaseShard {
        shard: i32,
        release: ShardRelease,
    },
    /// A shard that hosted partitions of a spread mirror its coordinator
    /// has deleted removes their records, as the KIP's
    /// `retryPendingTombstoneWrites` does for partition-state records
    /// placed away from the coordinator. Decided with [`crate::decide_hosted`]:
    /// the mirror must be gone from `topics` too.
    ForgetMirror {
        name: String,
    },
}

impl Command {
    /// The partition a command writes only its own records for — its
    /// state, map, producer, epochs and reports — and which its host
    /// decides on the shard where the partition is placed
    /// ([`crate::placement_shard`]). `None` for the coordinator's
    /// operations on mirrors and topics.
    pub fn placed_partition(&self) -> Option<&MirrorPartitionKey> {
        use Command::*;
        match self {
            TransitionPartition { key, .. }
            | FailPartition { key, .. }
            | RecoverPartition { key, .. }
            | ClearFailure { key, .. }
            | RecordLastMirrorEpochs { key, .. }
            | SetOffsetRuns { key, .. }
            | RecordProducer { key, .. }
            | RecordSourceEpochs { key, .. }
            | RecordGap { key, .. }
            | RecordVerifyResult { key, .. }
            | RecordFailoverReport { key, .. } => Some(key),
            CreateMirror { .. }
            | AlterMirror { .. }
            | DeleteMirror { .. }
            | StartTopics { .. }
            | StopTopics { .. }
            | PauseTopics { .. }
            | ResumeTopics { .. }
            | UpdatePartitionCount { .. }
            | RecordFailbackPlan { .. }
            | RecordGroupOffsetSyncs { .. }
            | RecordTopicConfigSync { .. }
            | RecordAclCreated { .. }
            | RecordAclDeleted { .. }
            | RecordSourceFence { .. }
            | RemoveSourceFence { .. }
            | ReleaseShard { .. }
            | ForgetMirror { .. } => None,
        }
    }
}

/// Why a command was refused. Variants named after KIP error codes map to
/// them through [`DecideError::kip_name`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    #[error("cluster mirror {0:?} does not exist")]
    UnknownClusterMirror(String),
    #[error("cluster mirror {0:?} already exists")]
    ClusterMirrorAlreadyExists(String),
    #[error("topic {topic} is already mirrored by cluster mirror {mirror:?}")]
    TopicAlreadyInClusterMirror { topic: String, mirror: String },
    #[error("topic {topic} is not in cluster mirror {mirror:?}")]
    TopicNotInClusterMirror { topic: String, mirror: String },
    #[error("mirror topic {0} is already paused")]
    MirrorTopicAlreadyPaused(String),
    #[error("mirror topic {0} is not paused")]
    MirrorTopicNotPaused(String),
    #[error("mirror topic {0} is being stopped or is stopped")]
    MirrorTopicBeingStopped(String),
    #[error("cluster mirror {mirror:?} still has active topics: {topics:?}")]
    ClusterMirrorNotEmpty { mirror: String, topics: Vec<String> },
    #[error("invalid cluster mirror states: {0}")]
    InvalidClusterMirrorStates(String),
    #[error("fenced state epoch: stored {stored}, request expected {expected}")]
    FencedStateEpoch { stored: i32, expected: i32 },
    #[error("fenced leader epoch: stored {stored}, request {request}")]
    FencedLeaderEpoch { stored: i32, request: i32 },
    /// The KIP coordinator skips such writes silently; we refuse so callers
    /// see it, and they may treat it as a no-op.
    #[error("transition {from} -> {to} is not allowed for {key:?}")]
    InvalidTransition {
        key: MirrorPartitionKey,
        from: PartitionState,
        to: PartitionState,
    },
    #[error("invalid cluster mirror name {name:?}: {reason}")]
    InvalidClusterMirrorName { name: String, reason: String },
    #[error(transparent)]
    InvalidPattern(#[from] PatternError),
    #[error("topic {topic} has {count} partitions; partition {partition} does not exist")]
    UnknownTopicOrPartition {
        topic: String,
        partition: i32,
        count: i32,
    },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl DecideError {
    /// The KIP / Kafka error name, for RPC-style replies and logs.
    pub fn kip_name(&self) -> &'static str {
        use DecideError::*;
        match self {
            UnknownClusterMirror(_) => "UNKNOWN_CLUSTER_MIRROR",
            ClusterMirrorAlreadyExists(_) => "CLUSTER_MIRROR_ALREADY_EXISTS",
            TopicAlreadyInClusterMirror { .. } => "TOPIC_ALREADY_IN_CLUSTER_MIRROR",
            TopicNotInClusterMirror { .. } => "TOPIC_NOT_IN_CLUSTER_MIRROR",
            MirrorTopicAlreadyPaused(_) => "MIRROR_TOPIC_ALREADY_PAUSED",
            MirrorTopicNotPaused(_) => "MIRROR_TOPIC_NOT_PAUSED",
            MirrorTopicBeingStopped(_) => "MIRROR_TOPIC_BEING_STOPPED",
            ClusterMirrorNotEmpty { .. } => "CLUSTER_MIRROR_NOT_EMPTY",
            InvalidClusterMirrorStates(_) => "INVALID_CLUSTER_MIRROR_STATES",
            FencedStateEpoch { .. } => "FENCED_STATE_EPOCH",
            FencedLeaderEpoch { .. } => "FENCED_LEADER_EPOCH",
            InvalidTransition { .. } => "INVALID_STATE_TRANSITION",
            InvalidClusterMirrorName { .. } => "INVALID_CLUSTER_MIRROR_NAME",
            InvalidPattern(_) => "INVALID_CONFIG",
            UnknownTopicOrPartition { .. } => "UNKNOWN_TOPIC_OR_PARTITION",
            InvalidRequest(_) => "INVALID_REQUEST",
        }
    }
}
