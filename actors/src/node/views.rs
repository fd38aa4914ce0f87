//! What the node answers, as the admin API sends it and the CLI reads it:
//! one set of types serves both ends, so the two cannot drift apart.

use std::collections::BTreeMap;

use kmirror_events::{
    FailbackPlan, FailoverReport, LastMirrorEpochsValue, PartitionState, Unmirrored, VerifyResult,
};
use serde::{Deserialize, Serialize};

use crate::metadata_sync::SyncMetrics;
use crate::partition::risk::RiskView;

/// A refused or failed operation: the KIP error name first, then why. On
/// the wire it is the admin API's error body, `{"error": CODE, "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct NodeError {
    /// KIP / Kafka error name (`UNKNOWN_CLUSTER_MIRROR`, `INVALID_CONFIG`, …).
    #[serde(rename = "error")]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

impl NodeError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        NodeError {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// The refusal of every operation that names a mirror the log lacks.
    pub fn unknown_mirror(mirror: &str) -> Self {
        NodeError::new(
            "UNKNOWN_CLUSTER_MIRROR",
            format!("cluster mirror {mirror:?} does not exist"),
        )
    }
}

/// One mirror, as `kmirror mirror list` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MirrorListing {
    pub mirror: String,
    pub topics: Vec<String>,
    pub source_cluster_id: String,
    pub source_bootstrap: String,
}

/// One mirror partition, as `kmirror mirror describe` shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PartitionDescription {
    pub mirror: String,
    pub topic: String,
    pub partition: i32,
    /// Next source offset to mirror (−1 unknown).
    pub source_offset: i64,
    /// Destination end offset as mirrored (−1 unknown).
    pub destination_offset: i64,
    /// Records behind the source high watermark (−1 unknown).
    pub lag: i64,
    pub lag_seconds: f64,
    /// KIP state name (MIRRORING, PAUSED, FAILED, …).
    pub state: String,
    /// Failures so far; −1 = not retryable.
    pub retry_attempt: i16,
    /// `mirror.failed.retry.max.attempts`, for "n/max".
    pub max_attempts: u32,
    /// When a FAILED partition's pending retry fires (epoch ms); absent
    /// when none is pending (not FAILED, not retryable, or retries used up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_at_ms: Option<i64>,
    pub error: Option<String>,
    /// The offset map is one run from equal offsets: consumers can use
    /// source offsets on the destination unchanged.
    pub offsets_identical: bool,
    pub records_mirrored: u64,
    pub bytes_mirrored: u64,
    /// Markers this node wrote to keep its fence of the destination
    /// partition alive past the leader's producer expiry (clustered only;
    /// each is a one-offset hole), since the partition started here.
    #[serde(default)]
    pub refences: u64,
    /// Where the copy stopped (LastMirrorEpochs), once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirror_epochs: Option<LastMirrorEpochsValue>,
    /// How a failback took the partition back, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failback: Option<FailbackPlan>,
    /// RPO now: records a failover at this instant would lose (−1 not
    /// measured yet). Fresh from the fetch while MIRRORING, else from the
    /// partition's periodic source sample; STOPPED: the failover report's.
    #[serde(default)]
    pub at_risk_records: i64,
    /// Their bytes in the source log (−1 not measured yet).
    #[serde(default)]
    pub at_risk_bytes: i64,
    /// `at_risk_bytes` is a lower bound (the read of batch headers was capped).
    #[serde(default)]
    pub at_risk_bytes_at_least: bool,
    /// Newest source timestamp − newest mirrored timestamp (−1 unknown).
    #[serde(default)]
    pub at_risk_seconds: f64,
    /// Mirrored position − source log start; negative once retention
    /// deleted records never mirrored (0 also when not measured).
    #[serde(default)]
    pub retention_margin_records: i64,
    /// Estimated ms until the source's retention deletes the next
    /// unmirrored record (−1 unknown or none ahead).
    #[serde(default)]
    pub retention_margin_ms: i64,
    /// The margin is under `mirror.retention.margin.ms`, or a gap is due.
    #[serde(default)]
    pub retention_warning: bool,
    /// The background check's last result (`mirror.verify.interval.ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyResult>,
}

impl PartitionDescription {
    /// Sets the RPO and retention figures.
    pub fn with_risk(mut self, r: &RiskView) -> Self {
        self.at_risk_records = r.at_risk_records;
        self.at_risk_bytes = r.at_risk_bytes;
        self.at_risk_bytes_at_least = r.at_risk_bytes_at_least;
        self.at_risk_seconds = r.at_risk_seconds;
        self.retention_margin_records = r.retention_margin_records;
        self.retention_margin_ms = r.retention_margin_ms;
        self.retention_warning = r.retention_warning;
        self
    }
}

/// What an operation did, per topic.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OperationReport {
    /// Topics the operation applied to.
    pub topics: Vec<String>,
    /// The StateValidationOffset the operation validated against.
    pub state_validation_offset: u64,
    /// A human note (e.g. "patterns saved for auto-discovery").
    pub note: Option<String>,
    /// What a start that took topics back decided per partition (planned
    /// only, with `dry_run`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failback: Vec<FailbackView>,
    /// Nothing was changed: the report says what the operation would do.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// One partition's failback plan, as answers and describe show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailbackView {
    pub topic: String,
    pub partition: i32,
    #[serde(flatten)]
    pub plan: FailbackPlan,
}

/// The answer of `kmirror offsets translate`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OffsetTranslation {
    pub mirror: String,
    pub topic: String,
    pub partition: i32,
    pub source_offset: i64,
    /// The destination offset a consumer positioned at `source_offset`
    /// should use (None: nothing mirrored yet).
    pub destination_offset: Option<i64>,
    /// `exact`, `gap` (the source offset was never mirrored; this is the next
    /// mirrored record), `end` (not mirrored yet) or `empty`.
    pub kind: String,
}

/// Node-wide figures for `/metrics`: rendered as Prometheus text, never
/// read back, so the only view without `Deserialize`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeMetrics {
    pub partitions: Vec<PartitionDescription>,
    /// Partitions per KIP state name.
    pub partitions_by_state: BTreeMap<String, u64>,
    pub mirrors: u64,
    /// The event log end offset: the StateValidationOffset an operation
    /// would validate against now.
    pub state_validation_offset: u64,
    /// Metadata sync per mirror: errors per kind, last successful sync
    /// times, active destination groups skipped, changes made.
    pub sync: Vec<SyncMetrics>,
}

impl NodeMetrics {
    /// Adds another shard's figures (a clustered node runs several). Each
    /// shard has a log of its own, so the StateValidationOffset kept is the
    /// highest, a figure that only grows.
    pub fn merge(&mut self, other: NodeMetrics) {
        self.partitions.extend(other.partitions);
        for (state, n) in other.partitions_by_state {
            *self.partitions_by_state.entry(state).or_insert(0) += n;
        }
        self.mirrors += other.mirrors;
        self.state_validation_offset = self
            .state_validation_offset
            .max(other.state_validation_offset);
        self.sync.extend(other.sync);
    }
}

/// The answer of `stop`: the operation, and per partition where its copy
/// stopped (LastMirrorEpochs) and what the source held beyond it. A superset
/// of [`OperationReport`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StopReport {
    /// Topics stopped (or, for a dry run, that would be).
    pub topics: Vec<String>,
    /// The StateValidationOffset the operation validated against.
    pub state_validation_offset: u64,
    pub note: Option<String>,
    /// Computed now, nothing changed (`--dry-run`).
    pub dry_run: bool,
    /// How the source's writers were stopped first (`--fence-source`).
    pub fence: Option<FenceReport>,
    /// Sorted by topic, then partition.
    pub partitions: Vec<PartitionFailover>,
}

/// How a planned switchover stopped the source's writers before draining.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FenceReport {
    /// `acl`: DENY WRITE ACLs on the source topics; `quiet`: the source has
    /// no authorizer, so kmirror waited until no new offsets appeared.
    pub mode: String,
    /// The ACL bindings kmirror created and owns (canonical text:
    /// `TOPIC;LITERAL;name;User:*;*;WRITE;DENY`); `unfence` removes them.
    pub acls: Vec<String>,
    /// How long the source's end offsets stayed unchanged before the drain.
    pub quiet_ms: u64,
}

/// One partition's failover: its LastMirrorEpochs and what was not mirrored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionFailover {
    pub topic: String,
    pub partition: i32,
    /// KIP state name (STOPPED after a stop; the current one in a dry run).
    pub state: String,
    /// Next source offset to mirror: one past the last mirrored record.
    pub source_offset: i64,
    /// Source leader epoch of the last mirrored batch (−1 unknown).
    pub source_leader_epoch: i32,
    /// Destination end offset after the last mirrored batch.
    pub destination_offset: i64,
    /// −1 unknown.
    pub destination_leader_epoch: i32,
    /// Whether the source answered; when not, `unmirrored` is `None` and
    /// `source_error` says why.
    pub source_reachable: bool,
    pub source_error: Option<String>,
    pub unmirrored: Option<UnmirroredView>,
}

impl PartitionFailover {
    /// The view of a partition's recorded (or previewed) report.
    pub fn new(topic: &str, partition: i32, state: PartitionState, r: &FailoverReport) -> Self {
        PartitionFailover {
            topic: topic.to_string(),
            partition,
            state: state.kip_name().to_string(),
            source_offset: r.source_offset,
            source_leader_epoch: r.source_leader_epoch,
            destination_offset: r.destination_end_offset,
            destination_leader_epoch: r.destination_leader_epoch,
            source_reachable: r.unmirrored.is_some(),
            source_error: r.source_error.clone(),
            unmirrored: r.unmirrored.as_ref().map(|u| UnmirroredView {
                source_high_watermark: u.source_high_watermark,
                records: u.records,
                bytes: u.bytes,
                bytes_at_least: u.bytes_at_least,
                seconds_behind: if u.behind_ms < 0 {
                    -1.0
                } else {
                    u.behind_ms as f64 / 1000.0
                },
            }),
        }
    }

    /// The report this view shows, back: so the CLI words it exactly as
    /// `kmirror log audit` words the record.
    pub fn report(&self) -> FailoverReport {
        FailoverReport {
            source_offset: self.source_offset,
            source_leader_epoch: self.source_leader_epoch,
            destination_end_offset: self.destination_offset,
            destination_leader_epoch: self.destination_leader_epoch,
            unmirrored: self.unmirrored.as_ref().map(|u| Unmirrored {
                source_high_watermark: u.source_high_watermark,
                records: u.records,
                bytes: u.bytes,
                bytes_at_least: u.bytes_at_least,
                behind_ms: if u.seconds_behind < 0.0 {
                    -1
                } else {
                    (u.seconds_behind * 1000.0).round() as i64
                },
            }),
            source_error: self.source_error.clone(),
        }
    }
}

/// What the source held beyond the mirrored position.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnmirroredView {
    pub source_high_watermark: i64,
    /// High watermark − `source_offset`.
    pub records: i64,
    /// Sum of the sizes of the source batches in that range.
    pub bytes: i64,
    /// `bytes` is a lower bound (the read of batch headers was capped).
    pub bytes_at_least: bool,
    /// Newest source timestamp − newest mirrored timestamp (−1 unknown).
    pub seconds_behind: f64,
}

/// The answer of `unfence`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnfenceReport {
    pub topics: Vec<String>,
    /// The ACL bindings removed from the source (canonical text).
    pub removed_acls: Vec<String>,
    pub note: Option<String>,
}
