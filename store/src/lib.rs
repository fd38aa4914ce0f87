//! kmirror's event log: the [`EventLog`] trait, its sled implementation
//! ([`SledLog`]) for one node, and an in-memory one ([`MemLog`]) for actor
//! tests.
//!
//! All calls block (sled, fsync); actors call them from a blocking pool,
//! never from an actix Arbiter thread.

mod mem;
mod sled_blob;
mod sled_log;
mod verify;

use kmirror_events::codec::CodecError;
use kmirror_events::{
    MirrorStateImage, MirrorTopicStateKey, Offset, Record, RecordKey, StateValidation, TopicId,
};

pub use mem::MemLog;
#[doc(hidden)]
pub use sled_blob::encode_batch_blob as sled_log_blob;
pub use sled_log::{
    open_waiting as open_sled_waiting, FsyncPolicy, OpenReport, SledLog, SledOptions,
};
pub use verify::{verify, verify_entries, VerifyReport};

/// One stored record with its position and the caller-stamped time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub offset: Offset,
    pub timestamp_ms: i64,
    pub record: Record,
}

/// What a compaction removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactStats {
    pub examined: u64,
    pub removed_superseded: u64,
    pub removed_tombstones: u64,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data directory {0} does not exist")]
    MissingDataDir(std::path::PathBuf),
    #[error(
        "data directory {0} is locked by another process (is a kmirror daemon running on it?)"
    )]
    Locked(std::path::PathBuf),
    /// Files that are not a kmirror event log where one should be: sled
    /// would have written its own beside them, or started an empty log
    /// over a damaged one.
    #[error("data directory {path} {problem}; refusing to touch it")]
    NotALog {
        path: std::path::PathBuf,
        problem: &'static str,
    },
    #[error("data directory {path}: {message}")]
    Open {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("event log storage error: {0}")]
    Sled(#[from] sled::Error),
    #[error("record at offset {offset} is damaged: {source}")]
    Corrupt { offset: Offset, source: CodecError },
    /// The newest batches fail their checksum or miss records: damage, not
    /// a crash's leftovers (sled writes each batch atomically). Nothing is
    /// changed; the operator decides.
    #[error("data directory {path}: the event log's last {records} records, from offset {from_offset}, are damaged (a checksum fails or records are missing); nothing was changed. Restore the directory from a backup, or run `kmirror log repair --data-dir {path}` to cut the log back to offset {from_offset} (those records are lost)")]
    DamagedTail {
        path: std::path::PathBuf,
        from_offset: Offset,
        records: u64,
    },
    #[error("snapshot at offset {offset} is damaged: {source}")]
    CorruptSnapshot { offset: Offset, source: CodecError },
    #[error("the event log was written by a newer kmirror (format version {found}; this build reads up to {supported}); refusing to open it")]
    NewerFormat { found: u8, supported: u8 },
    /// The StateValidationOffset lock refused (see [`StateValidation`]).
    #[error("INVALID_CLUSTER_MIRROR_STATES: topic {topic_id} changed state at offset {changed_at}, after the view the operation validated (log end offset {state_validation_offset})")]
    InvalidClusterMirrorStates {
        topic_id: TopicId,
        changed_at: Offset,
        state_validation_offset: Offset,
    },
    #[error("snapshot at end offset {snapshot} is ahead of the log end offset {end}")]
    SnapshotAhead { snapshot: Offset, end: Offset },
    #[error("the log was opened read-only")]
    ReadOnly,
    /// A log kept in a Kafka partition (the clustered daemon's) could not
    /// read or write it; `partition` is `topic-partition`.
    #[error("state topic partition {partition}: {message}")]
    Broker { partition: String, message: String },
    /// A log kept in a Kafka partition takes no more appends until it is
    /// opened again: an append's outcome is unknown (its produce failed or
    /// timed out after it was sent), and with it the log's next offset.
    #[error("state topic partition {partition}: {message}")]
    Unwritable { partition: String, message: String },
}

impl StoreError {
    /// The KIP error name where one applies.
    pub fn kip_name(&self) -> Option<&'static str> {
        match self {
            StoreError::InvalidClusterMirrorStates { .. } => Some("INVALID_CLUSTER_MIRROR_STATES"),
            _ => None,
        }
    }

    /// The store cannot take another record until it is opened again: an
    /// I/O error such as a full disk (sled keeps it and fails every later
    /// write of this process with it), or a Kafka log whose append's
    /// outcome is unknown. Refusals and a clustered log's other broker
    /// errors (it was not reachable, nothing was sent) are not this.
    pub fn is_storage_failure(&self) -> bool {
        matches!(self, StoreError::Sled(_) | StoreError::Unwritable { .. })
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// An iterator over stored records in offset order.
pub type LogIter<'a> = Box<dyn Iterator<Item = Result<LogEntry>> + 'a>;

/// kmirror's append-only, keyed, compactable log (`__mirror_state`).
///
/// The contract every implementation keeps: a batch is appended whole or
/// not at all, is durable when `append` returns (subject to the fsync
/// policy), offsets grow monotonically, and compaction never changes the
/// image that [`EventLog::load_image`] returns.
pub trait EventLog: Send + Sync {
    /// Appends `batch` atomically, stamped with the caller's wall-clock
    /// `timestamp_ms` (the domain has no clock). Returns the offset of the
    /// first record. An empty batch appends nothing and returns the end
    /// offset.
    fn append(&self, timestamp_ms: i64, batch: &[Record]) -> Result<Offset>;

    /// Appends under the KIP §5.3 StateValidationOffset lock: only if none
    /// of `validation.topics` had a `MirrorTopicStateChange` at or after
    /// `validation.offset`, else refuses with
    /// [`StoreError::InvalidClusterMirrorStates`]. Check and append are
    /// atomic with respect to other appends.
    fn append_if_unchanged(
        &self,
        timestamp_ms: i64,
        validation: &StateValidation,
        batch: &[Record],
    ) -> Result<Offset>;

    /// Records from `from` (inclusive) in offset order. Compaction leaves
    /// holes, so offsets need not be contiguous.
    fn read(&self, from: Offset) -> Result<LogIter<'_>>;

    /// The newest record for `key`, tombstones included (until compaction
    /// drops them).
    fn latest(&self, key: &RecordKey) -> Result<Option<LogEntry>>;

    /// One past the last appended offset.
    fn end_offset(&self) -> Offset;

    /// Keeps the newest record per key; drops tombstones older than
    /// `tombstone_retention_ms` (relative to `now_ms`) once a snapshot covers
    /// them. The last batch is never touched, so the end offset is kept.
    fn compact(&self, now_ms: i64, tombstone_retention_ms: i64) -> Result<CompactStats>;

    /// Stores `image` as a snapshot at `image.end_offset()`, so loads replay
    /// only the tail. Keeps the two newest snapshots.
    fn write_snapshot(&self, image: &MirrorStateImage) -> Result<()>;

    /// The newest readable snapshot, if any.
    fn latest_snapshot(&self) -> Result<Option<MirrorStateImage>>;

    /// Makes everything appended so far durable regardless of fsync policy.
    fn flush(&self) -> Result<()>;

    /// Snapshots `image` (which must be this log's, folded to its end or
    /// near it), then compacts: what keeps start-up short however long a
    /// daemon has run. Tombstones older than `tombstone_retention_ms` that
    /// the snapshot covers are dropped.
    fn snapshot_and_compact(
        &self,
        image: &MirrorStateImage,
        now_ms: i64,
        tombstone_retention_ms: i64,
    ) -> Result<CompactStats> {
        self.write_snapshot(image)?;
        self.compact(now_ms, tombstone_retention_ms)
    }

    /// The folded state: the newest snapshot plus a replay of the tail.
    fn load_image(&self) -> Result<MirrorStateImage> {
        let image = self.latest_snapshot()?.unwrap_or_default();
        let from = image.end_offset();
        replay_onto(self, image, from)
    }

    /// The folded state from the first record, ignoring snapshots.
    fn replay_all(&self) -> Result<MirrorStateImage> {
        replay_onto(self, MirrorStateImage::default(), 0)
    }
}

/// Enforces the StateValidationOffset (KIP §5.3) for both implementations:
/// `last_change` answers the offset of a key's newest record, read under
/// the same write lock as the append that follows. Public so that a log
/// kept outside this crate (the Kafka one) enforces exactly the same rule.
pub fn check_state_validation(
    validation: &StateValidation,
    mut last_change: impl FnMut(&RecordKey) -> Result<Option<Offset>>,
) -> Result<()> {
    for &topic_id in &validation.topics {
        let key = RecordKey::MirrorTopicStateChange(MirrorTopicStateKey { topic_id });
        match last_change(&key)? {
            Some(changed_at) if changed_at >= validation.offset => {
                return Err(StoreError::InvalidClusterMirrorStates {
                    topic_id,
                    changed_at,
                    state_validation_offset: validation.offset,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// Folds the records from `from` onto `image`, reading and decoding on a
/// second thread while this one folds: on two cores the two halves of a
/// replay run side by side instead of one after the other.
pub fn replay_onto<L: EventLog + ?Sized>(
    log: &L,
    mut image: MirrorStateImage,
    from: Offset,
) -> Result<MirrorStateImage> {
    const CHUNK: usize = 4096;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<LogEntry>>>(8);
        scope.spawn(move || {
            let entries = match log.read(from) {
                Ok(it) => it,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut chunk = Vec::with_capacity(CHUNK);
            for e in entries {
                match e {
                    Ok(e) => chunk.push(e),
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
                if chunk.len() == CHUNK
                    && tx
                        .send(Ok(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK))))
                        .is_err()
                {
                    return;
                }
            }
            let _ = tx.send(Ok(chunk));
        });
        for chunk in rx {
            for e in chunk? {
                image.replay(e.offset, e.record);
            }
        }
        Ok(image)
    })
}
