//! The data path of one partition: align, then fetch → forward → extend the
//! offset map → acknowledge, until told to stop or something fails.
//!
//! Longer than 800 lines: it is one task's control flow (align, copy,
//! forward, repair, reopen) over one `PumpContext`, read top to bottom;
//! its pure bookkeeping already lives in `cursor.rs`.
//!
//! It runs as its own task (so a slow broker never blocks the actor's
//! mailbox) and reports back through [`Progress`] (cheap, shared, for
//! describe and metrics) and its return value (why it ended). Every record
//! it needs goes through the CoordinatorActor and is durable before the
//! produce that depends on it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::Addr;
use futures_util::stream::{FuturesOrdered, StreamExt};
use kmirror_events::{Command, GapDetected, MirrorPartitionKey, MirrorProducer, OffsetMapRun};
use tokio::sync::watch;

use super::cursor::{align, AlignError, Alignment, Cursor, Segment};
use crate::cluster::{
    Ack, BoxFuture, DestinationCluster, PartitionFetch, PartitionSink, SourceCluster,
};
use crate::coordinator::{CoordinatorActor, Execute, ReadPartition};
use crate::kafka::batch::{
    classify, merge, mergeable, prepare, OutgoingBatch, RecordBatch, SourceOffsets,
    MERGE_TARGET_BYTES,
};
use crate::kafka::fetch::{FetchError, TopicPartition};
use crate::kafka::produce::MAX_IN_FLIGHT;
use crate::kafka::{KafkaError, ResponseError};

/// How often acknowledged run lengths are written to the log while records
/// keep flowing, and how soon after the flow pauses.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(1000);
const IDLE_CHECKPOINT_DELAY: Duration = Duration::from_millis(100);

/// Live figures of a running partition, read by describe and metrics.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Next source offset not yet acknowledged on the destination.
    pub source_offset: i64,
    /// Destination end offset as far as acknowledged.
    pub destination_offset: i64,
    /// Source high watermark at the last fetch.
    pub source_high_watermark: i64,
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
}

impl PumpExit {
    fn retryable(message: impl Into<String>) -> Self {
        PumpExit::Failed {
            message: message.into(),
            retryable: true,
        }
    }
    fn fatal(message: impl Into<String>) -> Self {
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
}

impl PumpContext {
    async fn execute(&self, command: Command) -> Result<(), PumpExit> {
        match self.coordinator.send(Execute::new(command)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(PumpExit::retryable(format!("event log: {e}"))),
            Err(e) => Err(PumpExit::retryable(format!("coordinator unavailable: {e}"))),
        }
    }

    async fn record_runs(&self, runs: Vec<OffsetMapRun>) -> Result<(), PumpExit> {
        if runs.is_empty() {
            return Ok(());
        }
        self.execute(Command::SetOffsetRuns {
            key: self.key.clone(),
            upsert: runs,
            remove: Vec::new(),
            holes: Vec::new(),
        })
        .await
    }
}

fn kafka_failure(what: &str, e: KafkaError) -> PumpExit {
    PumpExit::retryable(format!("{what}: {e}"))
}

/// Source offsets of an outgoing batch as contiguous segments.
fn segments(offsets: &SourceOffsets) -> Vec<Segment> {
    match offsets {
        SourceOffsets::Range { first, last } => vec![Segment {
            source_start: *first,
            len: last - first + 1,
        }],
        SourceOffsets::List(list) => {
            let mut out: Vec<Segment> = Vec::new();
            for &o in list {
                match out.last_mut() {
                    Some(s) if s.source_start + s.len == o => s.len += 1,
                    _ => out.push(Segment {
                        source_start: o,
                        len: 1,
                    }),
                }
            }
            out
        }
    }
}

/// One acknowledgement we are waiting for, with what it means once it comes.
struct Pending {
    destination_offset: i64,
    records: i64,
    source_end: i64,
    max_timestamp: i64,
    leader_epoch: i32,
    bytes: u64,
}

/// Runs the partition until stopped or failed.
pub async fn run(mut cx: PumpContext) -> PumpExit {
    match run_inner(&mut cx).await {
        Ok(()) => PumpExit::Stopped,
        Err(exit) => exit,
    }
}

async fn run_inner(cx: &mut PumpContext) -> Result<(), PumpExit> {
    // Alignment: the map and the destination decide where we are.
    let view = cx
        .coordinator
        .send(ReadPartition(cx.key.clone()))
        .await
        .map_err(|e| PumpExit::retryable(format!("coordinator unavailable: {e}")))?;
    check_source_topic(cx).await?;
    let dest = cx
        .destination
        .settled_bounds(&cx.tp)
        .await
        .map_err(|e| kafka_failure("destination offsets", e))?;
    let alignment = align(view.runs, view.holes, dest.log_start, dest.end)
        .map_err(|e| PumpExit::fatal(e.to_string()))?;
    if let Some(ours) = view.producer {
        check_unrecorded_tail(cx, &alignment, dest.log_start, ours).await?;
    }
    if !alignment.stale.is_empty() || !alignment.corrected.is_empty() {
        cx.execute(Command::SetOffsetRuns {
            key: cx.key.clone(),
            upsert: alignment.corrected.clone(),
            remove: alignment.stale.iter().map(|r| r.source_start).collect(),
            holes: Vec::new(),
        })
        .await?;
    }
    let src = cx
        .source
        .bounds(&cx.tp)
        .await
        .map_err(|e| kafka_failure("source offsets", e))?;
    let mut alignment = alignment;
    let mut next_source = alignment.next_source.unwrap_or(src.log_start);
    if next_source > src.end {
        if !cx.support_unclean_leader_election {
            return Err(truncated(src.end, next_source));
        }
        repair_divergence(cx, &mut alignment, src.end).await?;
        next_source = src.end;
    }
    if next_source < src.log_start {
        record_gap(cx, next_source, src.log_start).await?;
        next_source = src.log_start;
    }
    let mut cursor = Cursor::new(&alignment, next_source);
    {
        let mut p = cx.progress.lock().unwrap();
        p.source_offset = cursor.next_source;
        p.destination_offset = cursor.acked_destination;
        p.source_high_watermark = src.end;
        p.destination_leader_epoch = dest.leader_epoch;
        p.offsets_identical = cursor.identical();
    }

    let max_message_bytes = cx
        .destination
        .max_message_bytes(&cx.tp.topic)
        .await
        .map_err(|e| kafka_failure("destination max.message.bytes", e))?;
    let mut sink = cx
        .destination
        .open_sink(cx.tp.clone())
        .await
        .map_err(|e| kafka_failure("open destination producer", e))?;
    // The producer is recorded before its first batch, so whatever it
    // appends and no checkpoint covers is known to be kmirror's.
    let (producer_id, producer_epoch) = sink.producer();
    let recorded = cx
        .execute(Command::RecordProducer {
            key: cx.key.clone(),
            producer: MirrorProducer {
                producer_id,
                producer_epoch,
            },
        })
        .await;
    let copied = match recorded {
        Ok(()) => {
            copy(
                cx,
                &mut cursor,
                &mut *sink,
                dest.leader_epoch,
                max_message_bytes,
            )
            .await
        }
        Err(e) => Err(e),
    };
    // Whatever this producer still has queued must land (or fail) before
    // anyone aligns again: a batch it retried after the next pump read the
    // destination's end would land twice, under two producer ids.
    sink.close().await;
    copied
}

/// Copies from the aligned position until told to stop or something fails;
/// in-flight produces are finished and the map made durable on a stop.
async fn copy(
    cx: &mut PumpContext,
    cursor: &mut Cursor,
    sink: &mut dyn PartitionSink,
    destination_leader_epoch: i32,
    max_message_bytes: usize,
) -> Result<(), PumpExit> {
    let mut fetch = cx
        .source
        .open(cx.tp.clone(), cx.key.topic_id, cursor.next_source)
        .await
        .map_err(|e| kafka_failure("open source fetch", e))?;

    let mut on_healthy = cx.on_healthy.take();
    if let Some(aligned) = cx.on_aligned.take() {
        aligned();
    }
    if let Some(may_copy) = cx.may_copy.take() {
        let mut stop = cx.stop.clone();
        tokio::select! {
            r = may_copy => if r.is_err() { return Ok(()) },
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
    }
    let cx = &*cx;
    let mut inflight: FuturesOrdered<PendingAck> = FuturesOrdered::new();
    let mut stop = cx.stop.clone();
    let mut last_checkpoint = Instant::now();
    let mut healthy = false;
    let mut moved = None;
    // Acknowledged lengths not yet written to the log.
    let mut dirty = false;
    // The checkpoint being written: at most one, in the background.
    let mut checkpointing: Option<BoxFuture<'_, Result<(), PumpExit>>> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        let idle_checkpoint =
            tokio::time::Instant::from_std(last_checkpoint + IDLE_CHECKPOINT_DELAY);
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            // (select! builds disabled branches' futures too, hence the match.)
            done = async {
                match checkpointing.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            }, if checkpointing.is_some() => {
                checkpointing = None;
                done?;
            }
            _ = tokio::time::sleep_until(idle_checkpoint),
                if dirty && inflight.is_empty() && checkpointing.is_none() => {
                checkpointing = start_checkpoint(cx, cursor);
                last_checkpoint = Instant::now();
                dirty = false;
                continue;
            }
            Some((pending, ack)) = inflight.next(), if !inflight.is_empty() => {
                on_ack(cx, cursor, pending, ack)?;
                if inflight.is_empty() {
                    // Everything planned is acknowledged: batches dropped
                    // after the last produced one (markers) count as done.
                    cx.progress.lock().unwrap().source_offset = cursor.next_source;
                }
                healthy = true;
                dirty = true;
            }
            fetched = fetch.next() => {
                let fetched = match fetched {
                    Ok(f) => f,
                    Err(e) => {
                        fetch = reopen(cx, cursor, e).await?;
                        continue;
                    }
                };
                forward(cx, cursor, sink, &mut inflight, fetched, max_message_bytes).await?;
                // A fetch that left nothing to forward proves the path healthy too.
                healthy |= inflight.is_empty();
            }
        }
        // The KIP clears a stored failure on the first successful fetch; for
        // us "successful" means copied: the first acknowledged produce (or a
        // fetch with nothing to copy), so a partition whose produces keep
        // failing still counts its retries up to the limit.
        if healthy {
            if let Some(on_healthy) = on_healthy.take() {
                on_healthy();
            }
        }
        if last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL && checkpointing.is_none() {
            checkpointing = start_checkpoint(cx, cursor);
            last_checkpoint = Instant::now();
            dirty = false;
            if let Some(now) = cx.destination.leader_epoch(&cx.tp) {
                if destination_leader_epoch >= 0 && now != destination_leader_epoch {
                    moved = Some((destination_leader_epoch, now));
                    break;
                }
            }
        }
    }
    // Stop: finish what is in flight, then make the map durable.
    if let Some(done) = checkpointing.take() {
        done.await?;
    }
    while let Some((pending, ack)) = inflight.next().await {
        on_ack(cx, cursor, pending, ack)?;
    }
    cx.record_runs(cursor.checkpoint()).await?;
    match moved {
        Some((from, to)) => Err(PumpExit::EpochMoved { from, to }),
        None => Ok(()),
    }
}

/// After a crash the destination may hold appends above what the map
/// records, and alignment counts them as kmirror's. They are, only if the
/// producer recorded before them wrote every one: anything else is a foreign
/// write that would shift every later offset.
async fn check_unrecorded_tail(
    cx: &PumpContext,
    alignment: &Alignment,
    log_start: i64,
    ours: MirrorProducer,
) -> Result<(), PumpExit> {
    let from = alignment.recorded_end.max(log_start);
    if from >= alignment.next_destination {
        return Ok(());
    }
    let batches = cx
        .destination
        .batch_producers(&cx.tp, from, alignment.next_destination)
        .await
        .map_err(|e| kafka_failure("read the destination above the recorded map", e))?;
    match batches.iter().find(|(_, pid)| *pid != ours.producer_id) {
        None => Ok(()),
        Some((offset, pid)) => Err(PumpExit::fatal(format!(
            "destination offset {offset} was written by producer id {pid}, not by kmirror's producer {}: another producer wrote to the mirror partition while kmirror was not copying",
            ours.producer_id
        ))),
    }
}

/// How long reading the source's leader epoch at the stopped position may
/// take: a failover must not wait on a source that is gone.
const SOURCE_EPOCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a partition's copy stands when no pump ran in this process (it was
/// PAUSED or FAILED when the daemon started): the map aligned with the
/// destination's end, and the source's leader epoch at that position if the
/// source still answers (−1 if not). What LastMirrorEpochs records.
pub async fn stopped_position(
    key: &MirrorPartitionKey,
    tp: &TopicPartition,
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    coordinator: &Addr<CoordinatorActor>,
) -> Result<Progress, String> {
    let view = coordinator
        .send(ReadPartition(key.clone()))
        .await
        .map_err(|e| format!("coordinator unavailable: {e}"))?;
    let dest = destination
        .settled_bounds(tp)
        .await
        .map_err(|e| format!("destination offsets: {e}"))?;
    let alignment =
        align(view.runs, view.holes, dest.log_start, dest.end).map_err(|e| e.to_string())?;
    let next_source = alignment.next_source.unwrap_or(0);
    let source_leader_epoch = if next_source > 0 {
        tokio::time::timeout(
            SOURCE_EPOCH_TIMEOUT,
            source_epoch_at(source, key, tp, next_source - 1),
        )
        .await
        .ok()
        .flatten()
        .unwrap_or(-1)
    } else {
        -1
    };
    Ok(Progress {
        source_offset: next_source,
        destination_offset: dest.end,
        source_leader_epoch,
        destination_leader_epoch: dest.leader_epoch,
        offsets_identical: Cursor::new(&alignment, next_source).identical(),
        ..Progress::default()
    })
}

/// The leader epoch the source batch holding `offset` was written in.
async fn source_epoch_at(
    source: &dyn SourceCluster,
    key: &MirrorPartitionKey,
    tp: &TopicPartition,
    offset: i64,
) -> Option<i32> {
    let mut fetch = source.open(tp.clone(), key.topic_id, offset).await.ok()?;
    let fetched = fetch.next().await.ok()?;
    fetched
        .batches()
        .filter_map(Result::ok)
        .find(|b| b.next_offset() > offset)
        .map(|b| b.partition_leader_epoch())
}

/// Starts writing the acknowledged run lengths. The pump keeps forwarding
/// meanwhile: no side effect waits on a checkpoint (they only let the log
/// alone translate offsets), and a durable append can take milliseconds that
/// would otherwise stall every record behind it once a second.
fn start_checkpoint<'a>(
    cx: &'a PumpContext,
    cursor: &mut Cursor,
) -> Option<BoxFuture<'a, Result<(), PumpExit>>> {
    let runs = cursor.checkpoint();
    (!runs.is_empty()).then(|| Box::pin(cx.record_runs(runs)) as BoxFuture<'a, _>)
}

type PendingAck = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = (
                    Pending,
                    Result<crate::kafka::produce::ProduceAck, KafkaError>,
                ),
            > + Send,
    >,
>;

fn on_ack(
    cx: &PumpContext,
    cursor: &mut Cursor,
    pending: Pending,
    ack: Result<crate::kafka::produce::ProduceAck, KafkaError>,
) -> Result<(), PumpExit> {
    let ack = ack.map_err(|e| match e.response_error() {
        // The same record is refused however often it is retried.
        Some(ResponseError::InvalidTimestamp) => PumpExit::fatal(format!(
            "the destination topic {} refused a record's timestamp ({e}): its message.timestamp.after.max.ms and message.timestamp.before.max.ms must admit every timestamp the source admits; raise them on the destination topic, then run kmirror mirror recover",
            cx.tp.topic
        )),
        _ => kafka_failure("produce to destination", e),
    })?;
    cursor
        .ack(ack.base_offset, pending.records)
        .map_err(|e| match e {
            AlignError::ForeignWrite { .. } => PumpExit::fatal(e.to_string()),
            other => PumpExit::retryable(other.to_string()),
        })?;
    debug_assert_eq!(ack.base_offset, pending.destination_offset);
    let mut p = cx.progress.lock().unwrap();
    p.source_offset = pending.source_end;
    p.destination_offset = cursor.acked_destination;
    p.newest_mirrored_timestamp = p.newest_mirrored_timestamp.max(pending.max_timestamp);
    p.source_leader_epoch = pending.leader_epoch;
    p.records_mirrored += pending.records as u64;
    p.offsets_identical = cursor.identical();
    p.bytes_mirrored += pending.bytes;
    Ok(())
}

/// What one fetched chunk sends, planned on the cursor in source order.
#[derive(Default)]
struct Outgoing {
    to_send: Vec<(Pending, OutgoingBatch)>,
    /// Runs the sends open: durable before the first of them is sent.
    new_runs: Vec<OffsetMapRun>,
    /// Consecutive mergeable batches not planned yet, merged into one
    /// destination batch when the next batch does not join them or the
    /// fetch ends ([`crate::kafka::batch::mergeable`]).
    group: Vec<RecordBatch>,
    group_bytes: usize,
}

impl Outgoing {
    /// Plans the batches one source batch (or one merged group) became;
    /// `end` is the source offset after it, where the cursor moves even if
    /// nothing is sent (dropped markers, aborted data).
    fn plan(
        &mut self,
        cursor: &mut Cursor,
        outgoing: Vec<OutgoingBatch>,
        end: i64,
        max_timestamp: i64,
        leader_epoch: i32,
    ) {
        if outgoing.is_empty() {
            cursor.plan(&[], end);
            return;
        }
        let count = outgoing.len();
        for (i, ob) in outgoing.into_iter().enumerate() {
            let segs = segments(&ob.source_offsets);
            let ob_end = if i + 1 == count {
                end
            } else {
                segs.last()
                    .map(|s| s.source_start + s.len)
                    .unwrap_or(cursor.next_source)
            };
            let plan = cursor.plan(&segs, ob_end);
            self.new_runs.extend(plan.runs_to_record);
            let pending = Pending {
                destination_offset: plan.destination_offset,
                records: plan.records,
                source_end: ob_end,
                max_timestamp,
                leader_epoch,
                bytes: ob.bytes.len() as u64,
            };
            self.to_send.push((pending, ob));
        }
    }

    /// Where the batches collected for merging end (the next source offset).
    fn group_end(&self) -> Option<i64> {
        self.group.last().map(RecordBatch::next_offset)
    }

    /// Collects a mergeable batch; a batch of another codec, or one that
    /// would make the group too large, first flushes the group.
    fn push_to_group(
        &mut self,
        cursor: &mut Cursor,
        batch: RecordBatch,
        max_message_bytes: usize,
    ) -> Result<(), PumpExit> {
        let joins = self
            .group
            .first()
            .is_none_or(|f| f.codec().ok() == batch.codec().ok())
            && self.group_bytes + batch.size() <= MERGE_TARGET_BYTES;
        if !joins {
            self.flush_group(cursor, max_message_bytes)?;
        }
        self.group_bytes += batch.size();
        self.group.push(batch);
        Ok(())
    }

    /// Merges and plans the batches collected so far.
    fn flush_group(
        &mut self,
        cursor: &mut Cursor,
        max_message_bytes: usize,
    ) -> Result<(), PumpExit> {
        let Some(last) = self.group.last() else {
            return Ok(());
        };
        let (end, leader_epoch) = (last.next_offset(), last.partition_leader_epoch());
        let max_timestamp = self
            .group
            .iter()
            .map(RecordBatch::max_timestamp)
            .max()
            .unwrap_or(-1);
        let outgoing =
            merge(&self.group, max_message_bytes).map_err(|e| kafka_failure("merge batches", e))?;
        self.group.clear();
        self.group_bytes = 0;
        self.plan(cursor, outgoing, end, max_timestamp, leader_epoch);
        Ok(())
    }
}

/// Plans, records and sends one fetched chunk.
async fn forward(
    cx: &PumpContext,
    cursor: &mut Cursor,
    sink: &mut dyn PartitionSink,
    inflight: &mut FuturesOrdered<PendingAck>,
    fetched: crate::kafka::fetch::FetchedPartition,
    max_message_bytes: usize,
) -> Result<(), PumpExit> {
    // One walk over the headers: the lag figures, and how many batches came.
    let (mut batches, mut newest) = (0, None);
    for b in fetched.batches().filter_map(Result::ok) {
        batches += 1;
        if !b.is_control() {
            newest = newest.max(Some(b.max_timestamp()));
        }
    }
    {
        // Lag first: a batch that cannot be forwarded still counts as waiting.
        let mut p = cx.progress.lock().unwrap();
        p.source_high_watermark = fetched.high_watermark;
        if let Some(ts) = newest {
            p.newest_source_timestamp = p.newest_source_timestamp.max(ts);
        }
    }
    let mut aborted = fetched.aborted();
    // Behind: this fetch cannot all be in flight at once, so the five
    // slots are what limits the partition: merge what is not large.
    let behind = inflight.len() + batches > MAX_IN_FLIGHT;
    let mut out = Outgoing::default();
    for batch in fetched.batches() {
        let batch: RecordBatch = batch.map_err(|e| kafka_failure("source batch", e))?;
        let is_aborted = aborted
            .is_aborted(&batch)
            .map_err(|e| kafka_failure("source batch", e))?;
        let position = out.group_end().unwrap_or(cursor.next_source);
        let action = classify(&batch, is_aborted, max_message_bytes, position);
        if mergeable(&batch, action, behind) {
            out.push_to_group(cursor, batch, max_message_bytes)?;
            continue;
        }
        out.flush_group(cursor, max_message_bytes)?;
        let outgoing = prepare(&batch, action, max_message_bytes, cursor.next_source)
            .map_err(|e| kafka_failure("prepare batch", e))?;
        out.plan(
            cursor,
            outgoing,
            batch.next_offset(),
            batch.max_timestamp(),
            batch.partition_leader_epoch(),
        );
    }
    out.flush_group(cursor, max_message_bytes)?;
    let Outgoing {
        to_send, new_runs, ..
    } = out;
    if to_send.is_empty() && inflight.is_empty() {
        // Only dropped batches: nothing to wait for, the position moves now.
        cx.progress.lock().unwrap().source_offset = cursor.next_source;
    }
    // The runs these produces open are durable before any of them is sent.
    cx.record_runs(new_runs).await?;
    for (pending, ob) in to_send {
        let ack: Ack = sink
            .send(ob)
            .await
            .map_err(|e| kafka_failure("produce to destination", e))?;
        inflight.push_back(Box::pin(async move { (pending, ack.await) }));
    }
    Ok(())
}

fn truncated(end: i64, position: i64) -> PumpExit {
    PumpExit::SourceTruncated {
        message: format!(
            "Detected log truncation during mirroring: the source partition ends at {end}, below the mirrored position {position}. This implies unclean leader election in source cluster, but mirror.support.unclean.leader.election is disabled."
        ),
    }
}

/// ULE recovery: the map is cut where the source now ends, the divergent
/// range is recorded (the destination keeps those records: Kafka cannot
/// truncate a partition), and copying resumes at the source's end.
async fn repair_divergence(
    cx: &PumpContext,
    alignment: &mut super::cursor::Alignment,
    source_end: i64,
) -> Result<(), PumpExit> {
    let d = super::cursor::cut_divergent(alignment, source_end);
    tracing::warn!(
        partition = %cx.tp, source = ?d.source, destination = ?d.destination,
        "unclean leader election on the source: mirrored records no longer exist there; continuing after them"
    );
    cx.execute(Command::RecordGap {
        key: cx.key.clone(),
        gap: GapDetected {
            source_start: d.source.0,
            source_end: d.source.1,
            reason: format!(
                "divergent after an unclean leader election on the source: destination offsets {}..{} hold records the source no longer has",
                d.destination.0, d.destination.1
            ),
        },
    })
    .await?;
    cx.execute(Command::SetOffsetRuns {
        key: cx.key.clone(),
        upsert: d.cut.into_iter().collect(),
        remove: d.removed.iter().map(|r| r.source_start).collect(),
        holes: d.hole.into_iter().collect(),
    })
    .await
}

async fn record_gap(cx: &PumpContext, from: i64, to: i64) -> Result<(), PumpExit> {
    tracing::warn!(
        partition = %cx.tp, lost_from = from, lost_to = to,
        "source retention deleted records before they were mirrored; continuing from the source log start"
    );
    cx.execute(Command::RecordGap {
        key: cx.key.clone(),
        gap: GapDetected {
            source_start: from,
            source_end: to,
            reason: "source retention deleted the records before they were mirrored".into(),
        },
    })
    .await
}

/// The source topic of this name is still the one the partition mirrors.
/// Identity is the topic id: a topic deleted and re-created under the same
/// name fails the partition, not retryable, naming both ids.
async fn check_source_topic(cx: &PumpContext) -> Result<(), PumpExit> {
    let topics = cx
        .source
        .topics()
        .await
        .map_err(|e| kafka_failure("describe source topics", e))?;
    match topics.iter().find(|t| *t.name == *cx.tp.topic) {
        None => Err(PumpExit::retryable(format!(
            "source topic {} not found",
            cx.tp.topic
        ))),
        Some(t) if t.topic_id != cx.key.topic_id => Err(PumpExit::fatal(format!(
            "source topic {} was deleted and re-created: its topic id is now {}, the mirror copies {}",
            cx.tp.topic, t.topic_id, cx.key.topic_id
        ))),
        Some(_) => Ok(()),
    }
}

/// Reopens the source fetch after a fetch error, at the position it decides.
async fn reopen(
    cx: &PumpContext,
    cursor: &mut Cursor,
    error: FetchError,
) -> Result<Box<dyn PartitionFetch>, PumpExit> {
    match error {
        FetchError::OffsetOutOfRange { .. } => {
            let b = cx
                .source
                .bounds(&cx.tp)
                .await
                .map_err(|e| kafka_failure("source offsets", e))?;
            if cursor.next_source < b.log_start {
                record_gap(cx, cursor.next_source, b.log_start).await?;
                cursor.next_source = b.log_start;
            } else if cursor.next_source > b.end {
                return Err(truncated(b.end, cursor.next_source));
            }
        }
        FetchError::LeaderChanged { error, .. } => {
            // UNKNOWN_TOPIC_ID and friends also mean "moved": only the
            // topic's id tells a leader change from a re-created topic.
            check_source_topic(cx).await?;
            tracing::info!(partition = %cx.tp, %error, "source leader moved; following it");
        }
        FetchError::Other(e) => return Err(kafka_failure("fetch from source", e)),
    }
    cx.source
        .open(cx.tp.clone(), cx.key.topic_id, cursor.next_source)
        .await
        .map_err(|e| kafka_failure("open source fetch", e))
}
