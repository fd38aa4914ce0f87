//! CoordinatorActor: the only writer of `__mirror_state` records.
//!
//! Shaped like Kafka's `CoordinatorShard`: an operation is a
//! [`Command`]; the actor decides it against its image
//! ([`kmirror_events::decide`]), appends the records durably, folds them
//! ([`MirrorStateImage::apply`]) and only then replies — so whoever asked
//! performs its side effect after the record that decides it is durable.
//! On start it rebuilds the image from the log (newest snapshot + tail).
//!
//! One node owns every `__mirror_state` partition today, so one actor serves
//! them all; the routing hash (`coordinator_partition`) is already how keys
//! would be split when nodes form a cluster. Messages are handled one at a
//! time (`AtomicResponse`): a decision never sees an image that an
//! in-flight append is about to change. The blocking store calls run on
//! tokio's blocking pool, never on the arbiter thread.

use std::sync::Arc;

use actix::prelude::*;
use kmirror_events::{
    decide, Command, DecideError, MirrorPartitionKey, MirrorPartitionStateValue, MirrorProducer,
    MirrorStateImage, Offset, OffsetMapHole, OffsetMapRun, Record, SourceEpochs, StateValidation,
};
use kmirror_store::{EventLog, StoreError};

/// Wall-clock milliseconds, stamped into each appended batch (the domain
/// has no clock of its own).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Why an operation was not applied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CoordinatorError {
    #[error(transparent)]
    Refused(#[from] DecideError),
    #[error("INVALID_CLUSTER_MIRROR_STATES: a topic's mirror state changed after offset {state_validation_offset}")]
    Stale { state_validation_offset: Offset },
    #[error("event log: {0}")]
    Store(String),
    /// The actor is gone (the node is shutting down) or its mailbox closed.
    #[error("coordinator unavailable: {0}")]
    Unavailable(String),
    /// This coordinator released its shard: its log must end with the
    /// release, so nothing more is written through it.
    #[error("NOT_COORDINATOR: shard {shard} was released by this node")]
    Released { shard: i32 },
}

impl From<MailboxError> for CoordinatorError {
    fn from(e: MailboxError) -> Self {
        CoordinatorError::Unavailable(e.to_string())
    }
}

impl CoordinatorError {
    /// The KIP error name, for replies and CLI output.
    pub fn kip_name(&self) -> &'static str {
        match self {
            CoordinatorError::Refused(e) => e.kip_name(),
            CoordinatorError::Stale { .. } => "INVALID_CLUSTER_MIRROR_STATES",
            CoordinatorError::Store(_) => "KAFKA_STORAGE_ERROR",
            CoordinatorError::Unavailable(_) => "COORDINATOR_NOT_AVAILABLE",
            CoordinatorError::Released { .. } => "NOT_COORDINATOR",
        }
    }
}

/// What an applied operation wrote.
#[derive(Debug, Clone)]
pub struct Applied {
    /// Log offset of the first record (the end offset when nothing was written).
    pub offset: Offset,
    pub records: Vec<Record>,
}

/// Decide, append, apply.
#[derive(Message)]
#[rtype(result = "Result<Applied, CoordinatorError>")]
pub struct Execute {
    pub command: Command,
    /// Operations a client validated first carry the StateValidationOffset
    /// lock; internal bookkeeping (progress, failures) appends without one.
    pub state_validation: Option<StateValidation>,
}

impl Execute {
    pub fn new(command: Command) -> Self {
        Execute {
            command,
            state_validation: None,
        }
    }
}

/// The records an operation appended, once durable and folded: told to the
/// node's subscriber (the state publisher). The coordinator declares it and
/// never learns who listens.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct Appended {
    pub records: Arc<Vec<(Offset, Record)>>,
}

/// What a PartitionActor needs to (re)start: its stored state and map.
#[derive(Debug, Clone, Default)]
pub struct PartitionView {
    pub state: Option<MirrorPartitionStateValue>,
    pub runs: Vec<OffsetMapRun>,
    pub holes: Vec<OffsetMapHole>,
    pub producer: Option<MirrorProducer>,
    /// The source leader epochs of the mirrored records.
    pub source_epochs: SourceEpochs,
}

/// Reads one partition's state and offset map.
#[derive(Message)]
#[rtype(result = "PartitionView")]
pub struct ReadPartition(pub MirrorPartitionKey);

/// A copy of the whole image (for describe, audits and the control plane).
#[derive(Message)]
#[rtype(result = "Arc<MirrorStateImage>")]
pub struct ReadImage;

/// How often the coordinator snapshots the image and compacts the log, in
/// records appended: a busy mirror checkpoints every partition every second,
/// and start-up replays only what came after the newest snapshot.
pub const SNAPSHOT_EVERY_RECORDS: u64 = 100_000;
/// Tombstones are kept this long after a snapshot covers them (Kafka's
/// `delete.retention.ms` default), so a reader of the log sees deletes.
pub const TOMBSTONE_RETENTION_MS: i64 = 86_400_000;

pub struct CoordinatorActor {
    log: Arc<dyn EventLog>,
    image: Arc<MirrorStateImage>,
    /// Told of every durable append.
    subscriber: Option<Recipient<Appended>>,
    /// Records appended between snapshots.
    snapshot_every: u64,
    /// End offset of the last snapshot this actor wrote (0 at start).
    snapshot_at: Offset,
    snapshotting: bool,
    /// The shard this actor appended a `ShardRelease` for: every later
    /// `Execute` is refused, whoever sends it (a straggling sync pass, a
    /// request that raced the shutdown), so the release stays the newest
    /// record and the next owner may skip its fence markers.
    released: Option<i32>,
    /// Set once an append finds the store itself failed
    /// ([`StoreError::is_storage_failure`]): nothing more can be recorded,
    /// so nothing more may be copied; the daemon watches it and exits.
    log_failure: tokio::sync::watch::Sender<Option<String>>,
}

impl CoordinatorActor {
    /// Loads the image from `log` (blocking: call before starting the actor,
    /// or from a blocking context).
    pub fn load(log: Arc<dyn EventLog>) -> Result<Self, StoreError> {
        let image = log.load_image()?;
        Ok(CoordinatorActor {
            log,
            image: Arc::new(image),
            subscriber: None,
            snapshot_every: SNAPSHOT_EVERY_RECORDS,
            snapshot_at: 0,
            snapshotting: false,
            released: None,
            log_failure: tokio::sync::watch::channel(None).0,
        })
    }

    /// Resolves to the store's error once an append found the log unable
    /// to take records (a full or failing disk); `None` until then.
    pub fn log_failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.log_failure.subscribe()
    }

    /// Tells `subscriber` of every durable append.
    pub fn publish_to(mut self, subscriber: Recipient<Appended>) -> Self {
        self.subscriber = Some(subscriber);
        self
    }

    /// Snapshots and compacts after every `records` appended (tests and
    /// benchmarks shorten it).
    pub fn snapshot_every(mut self, records: u64) -> Self {
        self.snapshot_every = records.max(1);
        self
    }

    /// Snapshots the image and compacts the log on the blocking pool when
    /// enough has been appended since the last time. Appends go on
    /// meanwhile: the snapshot is of the image as it was, and compaction
    /// never touches the newest batch.
    fn maintain(&mut self, ctx: &mut Context<Self>) {
        let end = self.image.end_offset();
        if self.snapshotting || end.saturating_sub(self.snapshot_at) < self.snapshot_every {
            return;
        }
        self.snapshotting = true;
        let (log, image) = (self.log.clone(), self.image.clone());
        let job = tokio::task::spawn_blocking(move || {
            log.snapshot_and_compact(&image, now_ms(), TOMBSTONE_RETENTION_MS)
        });
        ctx.spawn(job.into_actor(self).map(move |res, act, _ctx| {
            act.snapshotting = false;
            match res {
                Ok(Ok(stats)) => {
                    act.snapshot_at = end;
                    tracing::debug!(end, ?stats, "event log snapshotted and compacted");
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "snapshotting the event log failed; retrying later")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "snapshotting the event log failed; retrying later")
                }
            }
        }));
    }
}

impl Actor for CoordinatorActor {
    type Context = Context<Self>;
}

impl Handler<Execute> for CoordinatorActor {
    type Result = AtomicResponse<Self, Result<Applied, CoordinatorError>>;

    fn handle(&mut self, msg: Execute, _ctx: &mut Context<Self>) -> Self::Result {
        if let Some(shard) = self.released {
            let refused = Err(CoordinatorError::Released { shard });
            return AtomicResponse::new(Box::pin(fut::ready(refused)));
        }
        // The image is the log's fold (every append goes through here), so
        // it judges the lock as the log would; the log checks again below.
        if let Some(lock) = &msg.state_validation {
            if self.image.stale_under(lock).is_some() {
                let e = CoordinatorError::Stale {
                    state_validation_offset: lock.offset,
                };
                return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
            }
        }
        let records = match decide(&self.image, &msg.command) {
            Ok(r) => r,
            Err(e) => return AtomicResponse::new(Box::pin(fut::ready(Err(e.into())))),
        };
        let log = self.log.clone();
        let to_append = records.clone();
        let failure = self.log_failure.clone();
        let append = async move {
            tokio::task::spawn_blocking(move || match &msg.state_validation {
                Some(lock) => log.append_if_unchanged(now_ms(), lock, &to_append),
                None => log.append(now_ms(), &to_append),
            })
            .await
            .map_err(|e| CoordinatorError::Store(e.to_string()))?
            .map_err(|e| match e {
                StoreError::InvalidClusterMirrorStates {
                    state_validation_offset,
                    ..
                } => CoordinatorError::Stale {
                    state_validation_offset,
                },
                other => {
                    let message = other.to_string();
                    if other.is_storage_failure() {
                        failure.send_if_modified(|f| {
                            let first = f.is_none();
                            if first {
                                tracing::error!(error = %message, "the event log cannot take records: nothing more is copied");
                                *f = Some(message.clone());
                            }
                            first
                        });
                    }
                    CoordinatorError::Store(message)
                }
            })
        };
        AtomicResponse::new(Box::pin(append.into_actor(self).map(
            move |res, act, ctx| {
                let offset = res?;
                let image = Arc::make_mut(&mut act.image);
                for (o, r) in (offset..).zip(records.iter()) {
                    image.apply(o, r);
                    if let Record::ShardRelease(k, Some(_)) = r {
                        act.released = Some(k.shard);
                    }
                }
                if let (Some(s), false) = (&act.subscriber, records.is_empty()) {
                    s.do_send(Appended {
                        records: Arc::new((offset..).zip(records.iter().cloned()).collect()),
                    });
                }
                act.maintain(ctx);
                Ok(Applied { offset, records })
            },
        )))
    }
}

impl Handler<ReadPartition> for CoordinatorActor {
    type Result = MessageResult<ReadPartition>;

    fn handle(&mut self, msg: ReadPartition, _ctx: &mut Context<Self>) -> Self::Result {
        let map = self.image.offset_map(&msg.0);
        MessageResult(PartitionView {
            state: self.image.partition_state(&msg.0).cloned(),
            runs: map.runs().copied().collect(),
            holes: map.holes().copied().collect(),
            producer: self.image.producer(&msg.0).copied(),
            source_epochs: self.image.source_epochs(&msg.0),
        })
    }
}

impl Handler<ReadImage> for CoordinatorActor {
    type Result = MessageResult<ReadImage>;

    fn handle(&mut self, _msg: ReadImage, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.image.clone())
    }
}

#[cfg(test)]
mod tests {
    use kmirror_events::{MirrorConfig, MirrorPartitionKey, OffsetMapRun, TopicId, TopicRef};
    use kmirror_store::MemLog;

    use super::*;

    #[actix::test]
    async fn a_failed_store_is_reported_once_and_a_refusal_is_not() {
        let log = Arc::new(MemLog::new());
        let coordinator = CoordinatorActor::load(log.clone()).unwrap();
        let mut failure = coordinator.log_failure();
        let coordinator = coordinator.start();
        let create = |name: &str| {
            Execute::new(Command::CreateMirror {
                name: name.into(),
                config: MirrorConfig {
                    source_bootstrap: "src:9092".into(),
                    ..Default::default()
                },
            })
        };
        // A refused append (not the store failing) leaves the log usable.
        log.fail_next_appends(1);
        assert!(coordinator.send(create("a")).await.unwrap().is_err());
        coordinator.send(create("a")).await.unwrap().unwrap();
        assert!(failure.borrow().is_none());

        log.fill_disk();
        for name in ["b", "c"] {
            let e = coordinator.send(create(name)).await.unwrap().unwrap_err();
            assert_eq!(e.kip_name(), "KAFKA_STORAGE_ERROR");
        }
        failure.changed().await.unwrap();
        let said = failure.borrow_and_update().clone().unwrap();
        assert!(said.contains("No space left on device"), "{said}");
        // Reported once: the second failure changed nothing.
        assert!(!failure.has_changed().unwrap());
    }

    #[actix::test]
    async fn a_busy_log_is_snapshotted_and_compacted_as_it_grows() {
        let log = Arc::new(MemLog::new());
        let coordinator = CoordinatorActor::load(log.clone())
            .unwrap()
            .snapshot_every(50)
            .start();
        let id = TopicId([3; 16]);
        for command in [
            Command::CreateMirror {
                name: "m".into(),
                config: MirrorConfig {
                    source_bootstrap: "src:9092".into(),
                    ..Default::default()
                },
            },
            Command::StartTopics {
                mirror: "m".into(),
                topics: vec![TopicRef {
                    topic_id: id,
                    name: "t".into(),
                    partition_count: 1,
                    destination_topic_id: None,
                }],
                include: vec![],
                exclude: vec![],
                seeds: vec![],
            },
        ] {
            coordinator
                .send(Execute::new(command))
                .await
                .unwrap()
                .unwrap();
        }
        // A checkpoint a second for a while: one key, rewritten.
        let key = MirrorPartitionKey::new("m", id, 0);
        for length in 1..=500 {
            coordinator
                .send(Execute::new(Command::SetOffsetRuns {
                    key: key.clone(),
                    upsert: vec![OffsetMapRun {
                        source_start: 0,
                        destination_start: 0,
                        length,
                    }],
                    remove: vec![],
                    holes: vec![],
                }))
                .await
                .unwrap()
                .unwrap();
        }
        // Let the last maintenance finish.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let image = coordinator.send(ReadImage).await.unwrap();
        let stored = log.entries().len();
        assert!(stored < 60, "compacted to what matters: {stored} records");
        let snapshot = log.latest_snapshot().unwrap().expect("a snapshot");
        assert!(snapshot.end_offset() >= 450);
        assert_eq!(log.load_image().unwrap(), *image);
    }
}
