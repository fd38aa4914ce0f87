//! What the node answers, as the admin API sends it and the CLI reads it:
//! one set of types serves both ends, so the two cannot drift apart.

use std::collections::BTreeMap;

use kmirror_events::{FailbackPlan, LastMirrorEpochsValue};
use serde::{Deserialize, Serialize};

use crate::metadata_sync::SyncMetrics;

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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    pub error: Option<String>,
    /// The offset map is one run from equal offsets: consumers can use
    /// source offsets on the destination unchanged.
    pub offsets_identical: bool,
    pub records_mirrored: u64,
    pub bytes_mirrored: u64,
    /// Where the copy stopped (LastMirrorEpochs), once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mirror_epochs: Option<LastMirrorEpochsValue>,
    /// How a failback took the partition back, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failback: Option<FailbackPlan>,
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
