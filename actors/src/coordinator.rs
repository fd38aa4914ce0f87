//! CoordinatorActor: the only writer of `__mirror_state` records.
//!
//! Longer than 800 lines: its unit tests and their store double (the code
//! alone is under 600).
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
//! would be split when nodes form a cluster.
//!
//! Group commit, as Kafka's coordinator runtime does it: operations are
//! decided one at a time, in arrival order, against a *pending* image (the
//! durable one plus everything decided and not yet written), so no decision
//! misses an earlier one; the records of the operations that arrive while an
//! append runs are written together by the next one — one store batch, one
//! flush — and each caller is answered only when the batch holding its
//! records is durable. A first start of thousands of partitions decides
//! several state records per partition within seconds of each other; one
//! at a time, each would wait for every flush queued before it. An
//! operation under a StateValidationOffset lock is appended alone, so the
//! log checks its lock as before. Reads are answered from the
//! durable image once what was decided before them is in it. Operations
//! nobody waits on (a pump's background checkpoint, [`Execute::lazy`]) may
//! wait [`LAZY_WINDOW`] for company when nothing else is queued. The blocking
//! store calls run on tokio's blocking pool, never on the arbiter thread.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use kmirror_events::{
    decide, decide_hosted, placement_shard, spreads, Command, DecideError, FailbackMode,
    FailbackPlan, MirrorPartitionKey, MirrorPartitionStateValue, MirrorProducer, MirrorStateImage,
    Offset, OffsetMapHole, OffsetMapRun, Record, SourceEpochs, StateValidation,
};
use kmirror_store::{EventLog, StoreError};
use tokio::sync::oneshot;

use crate::spread::Hosting;

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
    /// A partition's own record sent to a shard it is not placed in: its
    /// records live in one shard only, written by that shard's owner.
    #[error("NOT_COORDINATOR: partition {partition} of topic {topic_id} of cluster mirror {mirror:?} is placed in shard {placed}, not {shard}")]
    NotPlaced {
        mirror: String,
        topic_id: kmirror_events::TopicId,
        partition: i32,
        placed: i32,
        shard: i32,
    },
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
            CoordinatorError::Released { .. } | CoordinatorError::NotPlaced { .. } => {
                "NOT_COORDINATOR"
            }
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
    /// Nothing waits on it (a pump's background checkpoint): its append may
    /// wait [`LAZY_WINDOW`] for others to share the flush.
    pub lazy: bool,
}

impl Execute {
    pub fn new(command: Command) -> Self {
        Execute {
            command,
            state_validation: None,
            lazy: false,
        }
    }

    /// An operation nobody waits on but its sender's next one: appended
    /// within [`LAZY_WINDOW`], sharing the flush with whatever else comes.
    pub fn lazy(command: Command) -> Self {
        Execute {
            lazy: true,
            ..Execute::new(command)
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
    /// The partition's delta failback plan, if one took it back.
    pub failback: Option<FailbackPlan>,
}

impl PartitionView {
    /// Where a delta failback's copy resumes at least: its `copy_start`,
    /// until anything is copied after it. The map turned around ends at the
    /// forward mirror's last run, and a hole after it (a divergent tail
    /// quarantined by an earlier failback, an unclean election's repair)
    /// holds source records that are not ours to copy. Once the map reaches
    /// past the destination end the plan saw, it says where the copy is,
    /// even cut back by a repair of its own.
    pub fn failback_floor(&self) -> Option<i64> {
        let plan = self.failback.as_ref()?;
        let mapped_to = self
            .runs
            .iter()
            .map(|r| r.destination_end())
            .chain(self.holes.iter().map(|h| h.destination_end()))
            .max()
            .unwrap_or(0);
        (mapped_to <= plan.divergent_end).then_some(plan.copy_start)
    }
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
    /// The fold of what is durable: what readers are answered from and what
    /// snapshots are taken of.
    image: Arc<MirrorStateImage>,
    /// `image` plus every record decided but not yet durable (the queued
    /// groups and the one being written): what the next decision and lock
    /// check see, so decisions stay one at a time in arrival order while
    /// their appends share flushes. Reset to `image` when an append fails.
    pending: Arc<MirrorStateImage>,
    /// Decided operations waiting for their append, oldest first; the
    /// group being written is not in here.
    queue: VecDeque<Group>,
    /// An append is on the blocking pool.
    writing: bool,
    /// A wake-up for a lazy group's window is set.
    lazy_timer: bool,
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
    /// record and the next owner may skip its fence markers. Set when the
    /// release is decided (refusing from then on), cleared if its append
    /// fails.
    released: Option<i32>,
    /// `released` once the release is durable: what it falls back to.
    released_durable: Option<i32>,
    /// Set once an append finds the store itself failed
    /// ([`StoreError::is_storage_failure`]): nothing more can be recorded,
    /// so nothing more may be copied; the daemon watches it and exits.
    log_failure: tokio::sync::watch::Sender<Option<String>>,
    /// A clustered shard's: where the partitions placed in it whose
    /// mirrors other shards coordinate find their mirror and topic.
    hosting: Option<Hosting>,
}

/// Most records one group commit appends: bounds the size of one store
/// batch (and of one `Appended`) when thousands of partitions report at once.
pub const GROUP_COMMIT_MAX_RECORDS: usize = 4096;

/// How long a group of only lazy operations waits for others before its
/// append. Idle partitions fed a record now and then (10 000 of them at a
/// trickle of 100 records/s) each checkpoint once per record: one flush
/// each was the largest share of the idle daemon's CPU. Five flushes a
/// second, not twenty, took another eighth off it; nothing waits on a
/// background checkpoint but the pump's next (a second later).
pub const LAZY_WINDOW: Duration = Duration::from_millis(200);

/// Operations whose records go into the log as one atomic append (one
/// flush), and the readers that asked after them.
struct Group {
    /// An operation under a StateValidationOffset lock is a group of its
    /// own, so the log checks its lock exactly as before.
    lock: Option<StateValidation>,
    records: Vec<Record>,
    waiters: Vec<Waiter>,
    /// Whether another operation may still join it.
    open: bool,
    /// Only lazy operations are in it (see [`Execute::lazy`]), since
    /// `opened`.
    lazy: bool,
    opened: Instant,
}

/// Who is answered once a group is durable (or failed).
enum Waiter {
    /// An `Execute` whose records are `records[start..start + len]`.
    Execute {
        start: usize,
        len: usize,
        reply: oneshot::Sender<Result<Applied, CoordinatorError>>,
    },
    /// A read that arrived after the group's operations: answered from the
    /// durable image once they are in it, as if it had waited its turn.
    Read(oneshot::Sender<Arc<MirrorStateImage>>),
}

impl CoordinatorActor {
    /// Loads the image from `log` (blocking: call before starting the actor,
    /// or from a blocking context).
    pub fn load(log: Arc<dyn EventLog>) -> Result<Self, StoreError> {
        let image = Arc::new(log.load_image()?);
        Ok(CoordinatorActor {
            log,
            pending: image.clone(),
            image,
            queue: VecDeque::new(),
            writing: false,
            lazy_timer: false,
            subscriber: None,
            snapshot_every: SNAPSHOT_EVERY_RECORDS,
            snapshot_at: 0,
            snapshotting: false,
            released: None,
            released_durable: None,
            log_failure: tokio::sync::watch::channel(None).0,
            hosting: None,
        })
    }

    /// Makes this the coordinator of a clustered shard that hosts
    /// partitions of spread mirrors (see [`crate::spread`]).
    pub fn hosting(mut self, hosting: Hosting) -> Self {
        self.hosting = Some(hosting);
        self
    }

    /// Decides `command` on the pending image. A partition's own command is
    /// refused unless the partition is placed in this shard, and when its
    /// mirror is coordinated by another shard, the mirror and topic are
    /// checked in that shard as this node last read it.
    fn decide(&self, command: &Command) -> Result<Vec<Record>, CoordinatorError> {
        if let (Command::ForgetMirror { name }, Some(hosting)) = (command, &self.hosting) {
            // The mirror's absence is read where it is coordinated, as far
            // as that shard was read to its end.
            let coordinator = hosting.followed.coordinator_of(name);
            return match coordinator.filter(|c| c.caught_up()) {
                Some(c) => Ok(decide_hosted(&self.pending, &c.image, command)?),
                None => Err(CoordinatorError::Unavailable(format!(
                    "the shard coordinating {name:?} is not read to its end yet"
                ))),
            };
        }
        let (Some(key), Some(hosting)) = (command.placed_partition(), &self.hosting) else {
            return Ok(decide(&self.pending, command)?);
        };
        let mirror = &key.mirror_name;
        let followed;
        let (topics, config) = match self.pending.mirror(mirror) {
            Some(config) => (&*self.pending, config),
            None => {
                followed = hosting.followed.coordinator_of(mirror);
                let topics = followed.as_deref().map(|s| &s.image);
                match topics.and_then(|t| Some((t, t.mirror(mirror)?))) {
                    Some(found) => found,
                    None => return Err(DecideError::UnknownClusterMirror(mirror.clone()).into()),
                }
            }
        };
        let spread = spreads(config).map_err(DecideError::from)?;
        let placed = placement_shard(key, spread, hosting.followed.partitions());
        if placed != hosting.shard {
            return Err(CoordinatorError::NotPlaced {
                mirror: mirror.clone(),
                topic_id: key.topic_id,
                partition: key.partition,
                placed,
                shard: hosting.shard,
            });
        }
        Ok(decide_hosted(&self.pending, topics, command)?)
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

    /// Adds a decided operation (or, with no records and no reply, a read)
    /// to the newest open group, or opens one.
    fn enqueue(
        &mut self,
        lock: Option<StateValidation>,
        records: Vec<Record>,
        waiter: Waiter,
        lazy: bool,
    ) {
        let joinable = lock.is_none()
            && self.queue.back().is_some_and(|g| {
                g.open && g.records.len() + records.len() <= GROUP_COMMIT_MAX_RECORDS
            });
        if !joinable {
            self.queue.push_back(Group {
                open: lock.is_none(),
                lock,
                records: Vec::new(),
                waiters: Vec::new(),
                lazy: true,
                opened: Instant::now(),
            });
        }
        let group = self.queue.back_mut().expect("a group was just ensured");
        group.lazy &= lazy;
        let waiter = match waiter {
            Waiter::Execute { reply, .. } => Waiter::Execute {
                start: group.records.len(),
                len: records.len(),
                reply,
            },
            read => read,
        };
        group.records.extend(records);
        group.waiters.push(waiter);
    }

    /// Starts appending the oldest group unless an append is running: one
    /// store call (one flush) for every operation in it.
    fn write_next(&mut self, ctx: &mut Context<Self>) {
        if self.writing {
            return;
        }
        if let Some(wait) = self.lazy_wait() {
            if !self.lazy_timer {
                self.lazy_timer = true;
                ctx.run_later(wait, |act, ctx| {
                    act.lazy_timer = false;
                    act.write_next(ctx);
                });
            }
            return;
        }
        let Some(group) = self.queue.pop_front() else {
            return;
        };
        self.writing = true;
        let log = self.log.clone();
        let records = Arc::new(group.records);
        let to_append = records.clone();
        let lock = group.lock;
        let ops = group
            .waiters
            .iter()
            .filter(|w| matches!(w, Waiter::Execute { .. }))
            .count();
        let job = tokio::task::spawn_blocking(move || {
            let t0 = std::time::Instant::now();
            let res = match &lock {
                Some(lock) => log.append_if_unchanged(now_ms(), lock, &to_append),
                None => log.append(now_ms(), &to_append),
            };
            tracing::debug!(
                target: "kmirror::profile::append",
                operations = ops,
                records = to_append.len(),
                micros = t0.elapsed().as_micros() as u64,
                "event log append"
            );
            res
        });
        let waiters = group.waiters;
        ctx.spawn(job.into_actor(self).map(move |res, act, ctx| {
            act.writing = false;
            let res = res
                .map_err(|e| StoreError::Broker {
                    partition: "append task".into(),
                    message: e.to_string(),
                })
                .and_then(|r| r);
            match res {
                Ok(offset) => act.appended(offset, &records, waiters, ctx),
                Err(e) => act.append_failed(e, waiters),
            }
            act.write_next(ctx);
        }));
    }

    /// How much longer the queue may wait: while only lazy operations are
    /// queued and the oldest has waited less than [`LAZY_WINDOW`].
    fn lazy_wait(&self) -> Option<Duration> {
        let oldest = self.queue.front()?;
        if !self.queue.iter().all(|g| g.lazy) {
            return None;
        }
        LAZY_WINDOW
            .checked_sub(oldest.opened.elapsed())
            .filter(|w| !w.is_zero())
    }

    /// Folds a durable group into the image and answers its waiters.
    fn appended(
        &mut self,
        offset: Offset,
        records: &[Record],
        waiters: Vec<Waiter>,
        ctx: &mut Context<Self>,
    ) {
        // The pending image guessed this group's offsets from the durable
        // end (the log's next offset, unless it skipped some — markers in
        // a state topic partition).
        let guessed = self.image.end_offset();
        let image = Arc::make_mut(&mut self.image);
        for (o, r) in (offset..).zip(records.iter()) {
            image.apply(o, r);
            if let Record::ShardRelease(k, Some(_)) = r {
                self.released_durable = Some(k.shard);
            }
        }
        if self.queue.is_empty() {
            // Nothing else decided: the pending image is the durable one,
            // shared rather than a second copy of every node both changed.
            self.pending = self.image.clone();
        } else if offset != guessed {
            // The pending image again = the durable one (with the offsets
            // the log actually gave) + what is still queued, so a guessed
            // offset never trails the durable end a lock may be taken at.
            // When the guess was right the pending image is that already:
            // folding the queue again cost every record a third fold.
            let mut pending = self.image.clone();
            let next = Arc::make_mut(&mut pending);
            for r in self.queue.iter().flat_map(|g| g.records.iter()) {
                next.apply(next.end_offset(), r);
            }
            self.pending = pending;
        }
        if let (Some(s), false) = (&self.subscriber, records.is_empty()) {
            s.do_send(Appended {
                records: Arc::new((offset..).zip(records.iter().cloned()).collect()),
            });
        }
        for waiter in waiters {
            match waiter {
                Waiter::Execute { start, len, reply } => {
                    let _ = reply.send(Ok(Applied {
                        offset: offset + start as Offset,
                        records: records[start..start + len].to_vec(),
                    }));
                }
                Waiter::Read(reply) => {
                    let _ = reply.send(self.image.clone());
                }
            }
        }
        self.maintain(ctx);
    }

    /// A group's append failed: its operations get the error, and so does
    /// every operation decided after it (each was decided against records
    /// that are not in the log); the pending image falls back to the
    /// durable one, so the next decision starts from what is recorded.
    fn append_failed(&mut self, e: StoreError, waiters: Vec<Waiter>) {
        let error = match e {
            StoreError::InvalidClusterMirrorStates {
                state_validation_offset,
                ..
            } => CoordinatorError::Stale {
                state_validation_offset,
            },
            other => {
                let message = other.to_string();
                if other.is_storage_failure() {
                    self.log_failure.send_if_modified(|f| {
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
        };
        let later = CoordinatorError::Store(format!(
            "not appended: an operation decided before it failed ({error})"
        ));
        let answer = |waiters: Vec<Waiter>, error: &CoordinatorError, image: &Arc<_>| {
            for waiter in waiters {
                match waiter {
                    Waiter::Execute { reply, .. } => {
                        let _ = reply.send(Err(error.clone()));
                    }
                    Waiter::Read(reply) => {
                        let _ = reply.send(Arc::clone(image));
                    }
                }
            }
        };
        answer(waiters, &error, &self.image);
        for group in std::mem::take(&mut self.queue) {
            answer(group.waiters, &later, &self.image);
        }
        self.pending = self.image.clone();
        self.released = self.released_durable;
    }

    /// A read answered now when nothing is waiting to be appended, else
    /// once everything decided before it is durable.
    fn read<T: 'static>(
        &mut self,
        ctx: &mut Context<Self>,
        answer: impl FnOnce(&Arc<MirrorStateImage>) -> T + 'static,
    ) -> ResponseActFuture<Self, T> {
        if self.queue.is_empty() && !self.writing {
            let v = answer(&self.image);
            return Box::pin(fut::ready(v));
        }
        let (tx, rx) = oneshot::channel();
        if self.queue.is_empty() {
            // Only the running append is ahead: wait for it alone.
            self.queue.push_back(Group {
                lock: None,
                records: Vec::new(),
                waiters: Vec::new(),
                open: true,
                lazy: false,
                opened: Instant::now(),
            });
        }
        // A reader is waiting: no lazy window for what it waits on.
        let group = self.queue.back_mut().expect("a group is queued");
        group.lazy = false;
        group.waiters.push(Waiter::Read(tx));
        self.write_next(ctx);
        Box::pin(rx.into_actor(self).map(move |image, act, _| match image {
            Ok(image) => answer(&image),
            Err(_) => answer(&act.image),
        }))
    }
}

impl Actor for CoordinatorActor {
    type Context = Context<Self>;
}

impl Handler<Execute> for CoordinatorActor {
    type Result = ResponseFuture<Result<Applied, CoordinatorError>>;

    fn handle(&mut self, msg: Execute, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(shard) = self.released {
            let refused = Err(CoordinatorError::Released { shard });
            return Box::pin(async move { refused });
        }
        // The pending image is the log's fold once what is queued lands
        // (every append goes through here), so it judges the lock as the
        // log would; the log checks again when the group is written.
        if let Some(lock) = &msg.state_validation {
            if self.pending.stale_under(lock).is_some() {
                let e = CoordinatorError::Stale {
                    state_validation_offset: lock.offset,
                };
                return Box::pin(async move { Err(e) });
            }
        }
        let records = match self.decide(&msg.command) {
            Ok(r) => r,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        // Offsets here are a guess (the log assigns them); the pending
        // image uses them only to order changes after every lock taken
        // from the durable image, which any guess at or past its end does.
        let pending = Arc::make_mut(&mut self.pending);
        for (o, r) in (pending.end_offset()..).zip(records.iter()) {
            pending.apply(o, r);
            if let Record::ShardRelease(k, Some(_)) = r {
                self.released = Some(k.shard);
            }
        }
        let (reply, rx) = oneshot::channel();
        let waiter = Waiter::Execute {
            start: 0,
            len: 0,
            reply,
        };
        self.enqueue(msg.state_validation, records, waiter, msg.lazy);
        self.write_next(ctx);
        Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                Err(CoordinatorError::Unavailable(
                    "the coordinator stopped before the append finished".into(),
                ))
            })
        })
    }
}

impl Handler<ReadPartition> for CoordinatorActor {
    type Result = ResponseActFuture<Self, PartitionView>;

    fn handle(&mut self, msg: ReadPartition, ctx: &mut Context<Self>) -> Self::Result {
        self.read(ctx, move |image| {
            let map = image.offset_map(&msg.0);
            PartitionView {
                state: image.partition_state(&msg.0).cloned(),
                runs: map.runs().copied().collect(),
                holes: map.holes().copied().collect(),
                producer: image.producer(&msg.0).copied(),
                source_epochs: image.source_epochs(&msg.0),
                failback: image
                    .failback_plan(&msg.0)
                    .filter(|p| p.mode == FailbackMode::Delta)
                    .cloned(),
            }
        })
    }
}

impl Handler<ReadImage> for CoordinatorActor {
    type Result = ResponseActFuture<Self, Arc<MirrorStateImage>>;

    fn handle(&mut self, _msg: ReadImage, ctx: &mut Context<Self>) -> Self::Result {
        self.read(ctx, |image| image.clone())
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
            start_t(id, 1),
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
                .send(Execute::new(run_of(key.clone(), length)))
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

    /// A log whose appends can be held (as if the flush took long) and
    /// counted, and which can "crash": from then on an append writes
    /// nothing and fails, as a process killed mid-flush would leave it.
    struct GateLog {
        inner: MemLog,
        held: std::sync::Mutex<bool>,
        opened: std::sync::Condvar,
        appends: std::sync::atomic::AtomicUsize,
        crashed: std::sync::atomic::AtomicBool,
        /// The next append lands one offset later than the log's end, as
        /// a state topic partition's does after a fence marker.
        skip: std::sync::atomic::AtomicBool,
        /// Appends let through while held.
        passes: std::sync::Mutex<usize>,
    }

    impl GateLog {
        fn new() -> Self {
            GateLog {
                inner: MemLog::new(),
                held: std::sync::Mutex::new(false),
                opened: std::sync::Condvar::new(),
                appends: Default::default(),
                crashed: Default::default(),
                skip: Default::default(),
                passes: Default::default(),
            }
        }
        /// Lets the next held append through, and only it.
        fn pass_one(&self) {
            // Under `held`, so a gate between its check and its wait
            // cannot miss the wake-up.
            let _held = self.held.lock().unwrap();
            *self.passes.lock().unwrap() += 1;
            self.opened.notify_all();
        }
        fn hold(&self) {
            *self.held.lock().unwrap() = true;
        }
        fn release(&self) {
            *self.held.lock().unwrap() = false;
            self.opened.notify_all();
        }
        fn appends(&self) -> usize {
            self.appends.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn crash(&self) {
            self.crashed
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        fn gate(&self) -> Result<(), StoreError> {
            self.appends
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut held = self.held.lock().unwrap();
            while *held {
                let mut passes = self.passes.lock().unwrap();
                if *passes > 0 {
                    *passes -= 1;
                    break;
                }
                drop(passes);
                held = self.opened.wait(held).unwrap();
            }
            if self.crashed.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::Broker {
                    partition: "test".into(),
                    message: "crashed before the flush".into(),
                });
            }
            Ok(())
        }
    }

    impl EventLog for GateLog {
        fn append(&self, timestamp_ms: i64, batch: &[Record]) -> kmirror_store::Result<Offset> {
            self.gate()?;
            if self.skip.swap(false, std::sync::atomic::Ordering::SeqCst) {
                // A record nobody decided that changes nothing: a marker.
                let marker = Record::MirrorConfig(
                    kmirror_events::MirrorConfigKey {
                        mirror_name: "never-created".into(),
                    },
                    None,
                );
                self.inner.append(timestamp_ms, &[marker])?;
            }
            self.inner.append(timestamp_ms, batch)
        }
        fn append_if_unchanged(
            &self,
            timestamp_ms: i64,
            validation: &StateValidation,
            batch: &[Record],
        ) -> kmirror_store::Result<Offset> {
            self.gate()?;
            self.inner
                .append_if_unchanged(timestamp_ms, validation, batch)
        }
        fn read(&self, from: Offset) -> kmirror_store::Result<kmirror_store::LogIter<'_>> {
            self.inner.read(from)
        }
        fn latest(
            &self,
            key: &kmirror_events::RecordKey,
        ) -> kmirror_store::Result<Option<kmirror_store::LogEntry>> {
            self.inner.latest(key)
        }
        fn end_offset(&self) -> Offset {
            self.inner.end_offset()
        }
        fn compact(
            &self,
            now_ms: i64,
            retention_ms: i64,
        ) -> kmirror_store::Result<kmirror_store::CompactStats> {
            self.inner.compact(now_ms, retention_ms)
        }
        fn write_snapshot(&self, image: &MirrorStateImage) -> kmirror_store::Result<()> {
            self.inner.write_snapshot(image)
        }
        fn latest_snapshot(&self) -> kmirror_store::Result<Option<MirrorStateImage>> {
            self.inner.latest_snapshot()
        }
        fn flush(&self) -> kmirror_store::Result<()> {
            self.inner.flush()
        }
    }

    /// Starts topic `t` (`id`, `partitions`) in mirror `m`.
    fn start_t(id: TopicId, partitions: i32) -> Command {
        Command::StartTopics {
            mirror: "m".into(),
            topics: vec![TopicRef {
                topic_id: id,
                name: "t".into(),
                partition_count: partitions,
                destination_topic_id: None,
            }],
            include: vec![],
            exclude: vec![],
            seeds: vec![],
        }
    }

    /// A checkpoint of `key`: one identical run of `length`.
    fn run_of(key: MirrorPartitionKey, length: i64) -> Command {
        Command::SetOffsetRuns {
            key,
            upsert: vec![OffsetMapRun {
                source_start: 0,
                destination_start: 0,
                length,
            }],
            remove: vec![],
            holes: vec![],
        }
    }

    fn create(name: &str) -> Execute {
        Execute::new(Command::CreateMirror {
            name: name.into(),
            config: MirrorConfig {
                source_bootstrap: "src:9092".into(),
                ..Default::default()
            },
        })
    }

    /// Waits (bounded) until `log` has seen `n` append calls.
    async fn appends_reach(log: &GateLog, n: usize) {
        for _ in 0..500 {
            if log.appends() >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{} appends, wanted {n}", log.appends());
    }

    #[actix::test]
    async fn operations_arriving_during_a_flush_share_the_next_and_are_answered_once_durable() {
        let log = Arc::new(GateLog::new());
        let coordinator = CoordinatorActor::load(log.clone()).unwrap().start();
        log.hold();
        let first = tokio::spawn(coordinator.send(create("m0")));
        appends_reach(&log, 1).await;
        // 50 operations arrive while the first append is held.
        let mut rest = Vec::new();
        for i in 1..=50 {
            let log = log.clone();
            let reply = coordinator.send(create(&format!("m{i}")));
            rest.push(tokio::spawn(async move {
                let applied = reply.await.unwrap().unwrap();
                // Answered only once its records are in the log.
                let stored = log.inner.entries();
                for (o, r) in (applied.offset..).zip(applied.records.iter()) {
                    assert!(
                        stored.iter().any(|e| e.offset == o && &e.record == r),
                        "answered before offset {o} was durable"
                    );
                }
                applied
            }));
        }
        // Decided against the pending image: a second create of a name
        // still in flight is refused although nothing is durable yet.
        let again = coordinator.send(create("m7")).await.unwrap();
        assert_eq!(
            again.unwrap_err().kip_name(),
            "CLUSTER_MIRROR_ALREADY_EXISTS"
        );
        // A read waits for what was decided before it.
        let read = tokio::spawn(coordinator.send(ReadImage));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!first.is_finished() && !read.is_finished());
        assert!(rest.iter().all(|r| !r.is_finished()));
        assert!(log.inner.entries().is_empty(), "nothing written while held");
        log.release();
        first.await.unwrap().unwrap().unwrap();
        let mut offsets = Vec::new();
        for r in rest {
            offsets.push(r.await.unwrap().offset);
        }
        let image = read.await.unwrap().unwrap();
        assert_eq!(image.mirrors().count(), 51, "the read saw all 51");
        // One append for the first, one for the 50 that waited behind it.
        assert_eq!(log.appends(), 2);
        offsets.dedup();
        assert_eq!(offsets.len(), 50, "each operation has its own records");
        assert_eq!(log.load_image().unwrap(), *image);
    }

    #[actix::test]
    async fn a_crash_mid_flush_loses_no_acknowledged_operation() {
        let log = Arc::new(GateLog::new());
        let coordinator = CoordinatorActor::load(log.clone()).unwrap().start();
        coordinator.send(create("acked")).await.unwrap().unwrap();
        log.hold();
        let writing = tokio::spawn(coordinator.send(create("writing")));
        appends_reach(&log, 2).await;
        let queued: Vec<_> = (0..10)
            .map(|i| tokio::spawn(coordinator.send(create(&format!("queued{i}")))))
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        log.crash();
        log.release();
        // The flush that crashed, and everything decided after it, fail:
        // none of them is acknowledged.
        assert!(writing.await.unwrap().unwrap().is_err());
        for q in queued {
            let e = q.await.unwrap().unwrap().unwrap_err();
            assert_eq!(e.kip_name(), "KAFKA_STORAGE_ERROR", "{e}");
        }
        // What a restart reads: exactly the acknowledged operation.
        let reloaded = log.load_image().unwrap();
        let names: Vec<_> = reloaded.mirrors().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["acked"]);
        // And the live coordinator fell back to the durable image: the
        // names that failed can be created again.
        log.crashed
            .store(false, std::sync::atomic::Ordering::SeqCst);
        coordinator.send(create("writing")).await.unwrap().unwrap();
        let image = coordinator.send(ReadImage).await.unwrap();
        assert_eq!(log.load_image().unwrap(), *image);
    }

    /// What the coordinator decides against, for the test below.
    struct ReadPending;

    impl Message for ReadPending {
        type Result = Arc<MirrorStateImage>;
    }

    impl Handler<ReadPending> for CoordinatorActor {
        type Result = Arc<MirrorStateImage>;

        fn handle(&mut self, _msg: ReadPending, _ctx: &mut Context<Self>) -> Self::Result {
            self.pending.clone()
        }
    }

    /// The pending image is folded once per decision and kept when the
    /// log put a group where it guessed; when the log skipped offsets (a
    /// marker) it is folded again from the durable image, so what the next
    /// decision sees always carries the log's offsets.
    #[actix::test]
    async fn the_pending_image_carries_the_logs_offsets_after_a_skip() {
        let log = Arc::new(GateLog::new());
        let coordinator = CoordinatorActor::load(log.clone()).unwrap().start();
        coordinator.send(create("m0")).await.unwrap().unwrap();
        log.hold();
        log.skip.store(true, std::sync::atomic::Ordering::SeqCst);
        let writing = tokio::spawn(coordinator.send(create("m1")));
        appends_reach(&log, 2).await;
        let queued = tokio::spawn(coordinator.send(create("m2")));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        // m1 lands one offset past the guess; m2, decided on the guess,
        // is being written: what the next decision sees has it at 3.
        log.pass_one();
        let m1 = writing.await.unwrap().unwrap().unwrap();
        assert_eq!(m1.offset, 2, "after m0 and the marker");
        appends_reach(&log, 3).await;
        let pending = coordinator.send(ReadPending).await.unwrap();
        log.release();
        assert_eq!(
            pending.end_offset(),
            4,
            "m2 at the offset the log will give"
        );
        let m2 = queued.await.unwrap().unwrap().unwrap();
        assert_eq!(m2.offset, 3);
        let image = coordinator.send(ReadImage).await.unwrap();
        assert_eq!(log.load_image().unwrap(), *image);
        let pending = coordinator.send(ReadPending).await.unwrap();
        assert_eq!(*pending, *image, "nothing queued: pending = durable");
        // No skip: the pending image is kept, and still right.
        coordinator.send(create("m3")).await.unwrap().unwrap();
        let image = coordinator.send(ReadImage).await.unwrap();
        assert_eq!(*coordinator.send(ReadPending).await.unwrap(), *image);
        assert_eq!(image.end_offset(), 5);
    }

    #[actix::test]
    async fn lazy_checkpoints_share_one_flush_and_wait_the_window_alone() {
        let log = Arc::new(GateLog::new());
        let coordinator = CoordinatorActor::load(log.clone()).unwrap().start();
        coordinator.send(create("m")).await.unwrap().unwrap();
        let id = TopicId([4; 16]);
        coordinator
            .send(Execute::new(start_t(id, 10)))
            .await
            .unwrap()
            .unwrap();
        let checkpoint = |partition: i32, length: i64| {
            Execute::lazy(run_of(MirrorPartitionKey::new("m", id, partition), length))
        };
        let before = log.appends();

        // Ten partitions' checkpoints, none appending at once: one flush.
        let replies: Vec<_> = (0..10)
            .map(|p| tokio::spawn(coordinator.send(checkpoint(p, 1))))
            .collect();
        for r in replies {
            r.await.unwrap().unwrap().unwrap();
        }
        assert_eq!(log.appends(), before + 1, "one append for all ten");

        // Alone, a lazy checkpoint waits out the window.
        let asked = Instant::now();
        coordinator.send(checkpoint(0, 2)).await.unwrap().unwrap();
        assert!(asked.elapsed() >= LAZY_WINDOW - Duration::from_millis(5));

        // A reader does not wait for it: the read flushes what it follows.
        let lazy = tokio::spawn(coordinator.send(checkpoint(1, 2)));
        let image = coordinator.send(ReadImage).await.unwrap();
        let map = image.offset_map(&MirrorPartitionKey::new("m", id, 1));
        assert_eq!(map.last_run().map(|r| r.length), Some(2));
        lazy.await.unwrap().unwrap().unwrap();
    }
}
