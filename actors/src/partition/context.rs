//! What a partition's data path shares between its copy loop
//! ([`super::pump`]) and its alignment ([`super::position`]): the context it
//! runs in, the figures it reports and why it ended.

use std::sync::{Arc, Mutex};

use actix::Addr;
use kmirror_events::{Command, MirrorPartitionKey, OffsetMapRun};
use tokio::sync::watch;

use crate::cluster::{DestinationCluster, SourceCluster};
use crate::coordinator::{CoordinatorActor, Execute};
use crate::failback::SourceHistory;
use crate::kafka::fence::FenceClock;
use crate::kafka::fetch::TopicPartition;
use crate::kafka::KafkaError;

/// Live figures of a running partition, read by describe and metrics.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Next source offset not yet acknowledged on the destination.
    pub source_offset: i64,
    /// Destination end offset as far as acknowledged.
    pub destination_offset: i64,
    /// Source high watermark at the last fetch.
    pub source_high_watermark: i64,
    /// Source log start offset as of the same answer (None: no fetch or
    /// alignment of this process has said). With the high watermark it is
    /// all a caught-up copy's risk figures need ([`super::risk`]).
    pub source_log_start: Option<i64>,
    /// Newest timestamp fetched from the source, and newest acknowledged.
    pub newest_source_timestamp: i64,
    pub newest_mirrored_timestamp: i64,
    /// Source leader epoch of the last acknowledged batch (−1 unknown).
    pub source_leader_epoch: i32,
    /// Destination leader epoch at alignment (−1 unknown).
    pub destination_leader_epoch: i32,
    pub records_mirrored: u64,
    pub bytes_mirrored: u64,
    /// Whether the offset map is one run from equal offsets.
    pub offsets_identical: bool,
    /// Markers written to keep this node's fence alive (see
    /// [`crate::kafka::fence::KeepAlive`]), since the actor started.
    pub refences: u64,
    /// Where the last pump left its fence's keep-alive clocks.
    pub fence_clock: Option<FenceClock>,
}

impl Progress {
    /// Lag in records: source high watermark − mirrored position.
    pub fn lag(&self) -> i64 {
        (self.source_high_watermark - self.source_offset).max(0)
    }
    /// Lag in seconds: newest source timestamp − newest mirrored timestamp;
    /// −1 (unknown) while records wait and none has been copied yet.
    pub fn lag_seconds(&self) -> f64 {
        if self.lag() == 0 {
            return 0.0;
        }
        if self.newest_mirrored_timestamp <= 0 {
            return -1.0;
        }
        ((self.newest_source_timestamp - self.newest_mirrored_timestamp).max(0)) as f64 / 1000.0
    }
}

/// Why the pump ended.
#[derive(Debug)]
pub enum PumpExit {
    /// Stopped on request after finishing what was in flight.
    Stopped,
    /// Failed; `retryable` decides between a backoff retry and manual
    /// recovery.
    Failed { message: String, retryable: bool },
    /// The source partition ends below the mirrored position: an unclean
    /// leader election there. ULE_RECOVERY if the mirror allows it, else
    /// FAILED, not retryable.
    SourceTruncated { message: String },
    /// The destination partition's leader epoch moved (a leader election):
    /// what was in flight is acknowledged and the map durable; the tail must
    /// be re-checked against the map before producing more (EPOCH_FENCING).
    EpochMoved { from: i32, to: i32 },
    /// Another node took the partition (a clustered daemon's fence: the
    /// destination refused our producer's epoch). Neither a failure to
    /// retry nor FAILED: the partition is the new owner's now, whose
    /// alignment takes over from what landed; this node's state writes
    /// would be fenced as well, so the actor stops without any.
    LostOwnership { message: String },
}

impl std::fmt::Display for PumpExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PumpExit::Stopped => f.write_str("stopped"),
            PumpExit::Failed { message, .. }
            | PumpExit::SourceTruncated { message }
            | PumpExit::LostOwnership { message } => f.write_str(message),
            PumpExit::EpochMoved { from, to } => {
                write!(f, "destination leader epoch moved from {from} to {to}")
            }
        }
    }
}

impl PumpExit {
    pub(super) fn retryable(message: impl Into<String>) -> Self {
        PumpExit::Failed {
            message: message.into(),
            retryable: true,
        }
    }
    pub(super) fn fatal(message: impl Into<String>) -> Self {
        PumpExit::Failed {
            message: message.into(),
            retryable: false,
        }
    }
}

/// Everything the pump needs.
pub struct PumpContext {
    pub key: MirrorPartitionKey,
    pub tp: TopicPartition,
    pub source: Arc<dyn SourceCluster>,
    pub destination: Arc<dyn DestinationCluster>,
    pub coordinator: Addr<CoordinatorActor>,
    pub progress: Arc<Mutex<Progress>>,
    /// Becomes `true` when the pump must stop.
    pub stop: watch::Receiver<bool>,
    /// `mirror.support.unclean.leader.election`: repair a truncated source
    /// (cut the map, record the divergence) instead of failing.
    pub support_unclean_leader_election: bool,
    /// Called once the partition is aligned; the actor then records
    /// LOG_ALIGNMENT → MIRRORING and opens `may_copy`. No record is copied
    /// before MIRRORING is durable.
    pub on_aligned: Option<Box<dyn FnOnce() + Send + Sync>>,
    pub may_copy: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Called once the first record is copied (or a fetch finds nothing to
    /// copy), so the actor clears a stored failure.
    pub on_healthy: Option<Box<dyn FnOnce() + Send + Sync>>,
    /// The source's history, for the mirror-loop rule at alignment (None:
    /// not checked, as in unit tests without one).
    pub history: Option<Arc<SourceHistory>>,
}

impl PumpContext {
    pub(super) async fn execute(&self, command: Command) -> Result<(), PumpExit> {
        self.send(Execute::new(command)).await
    }

    async fn send(&self, execute: Execute) -> Result<(), PumpExit> {
        match self.coordinator.send(execute).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(PumpExit::retryable(format!("event log: {e}"))),
            Err(e) => Err(PumpExit::retryable(format!("coordinator unavailable: {e}"))),
        }
    }

    pub(super) async fn record_runs(&self, runs: Vec<OffsetMapRun>) -> Result<(), PumpExit> {
        self.send_runs(runs, Vec::new(), Execute::new).await
    }

    /// Runs a fetch opens, with the runs opened ahead they replace
    /// ([`super::cursor::Cursor::open_ahead`]): durable before the produce.
    pub(super) async fn open_runs(
        &self,
        runs: Vec<OffsetMapRun>,
        replaced: Vec<i64>,
    ) -> Result<(), PumpExit> {
        self.send_runs(runs, replaced, Execute::new).await
    }

    /// A background checkpoint: nothing waits on it but the pump's next
    /// one, so its append may share a flush with others
    /// ([`Execute::lazy`]).
    pub(super) async fn checkpoint(&self, runs: Vec<OffsetMapRun>) -> Result<(), PumpExit> {
        self.send_runs(runs, Vec::new(), Execute::lazy).await
    }

    async fn send_runs(
        &self,
        runs: Vec<OffsetMapRun>,
        remove: Vec<i64>,
        execute: fn(Command) -> Execute,
    ) -> Result<(), PumpExit> {
        if runs.is_empty() && remove.is_empty() {
            return Ok(());
        }
        self.send(execute(Command::SetOffsetRuns {
            key: self.key.clone(),
            upsert: runs,
            remove,
            holes: Vec::new(),
        }))
        .await
    }
}

pub(super) fn kafka_failure(what: &str, e: KafkaError) -> PumpExit {
    match e {
        KafkaError::Fenced { .. } => PumpExit::LostOwnership {
            message: format!("{what}: {e}"),
        },
        e => PumpExit::retryable(format!("{what}: {e}")),
    }
}
