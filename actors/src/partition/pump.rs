//! The data path of one partition: align (`position`), then
//! fetch → forward → extend the offset map → acknowledge, until told to stop
//! or something fails.
//!
//! It runs as its own task (so a slow broker never blocks the actor's
//! mailbox) and reports back through [`super::Progress`] (cheap, shared, for
//! describe and metrics) and its return value (why it ended). Every record
//! it needs goes through the CoordinatorActor and is durable before the
//! produce that depends on it.

use std::time::{Duration, Instant};

use futures_util::stream::{FuturesOrdered, StreamExt};
use kmirror_events::{
    Command, EpochEntry, MirrorProducer, OffsetMapHole, OffsetMapRun, SourceEpochs,
};

use super::context::{kafka_failure, PumpContext, PumpExit};
use super::cursor::{Cursor, Segment};
use super::position;
use crate::cluster::{Ack, BoxFuture, PartitionFetch, PartitionSink};
use crate::kafka::batch::{
    classify, merge, mergeable, prepare, OutgoingBatch, RecordBatch, SourceOffsets,
    MERGE_TARGET_BYTES,
};
use crate::kafka::fence::FenceClock;
use crate::kafka::fetch::FetchError;
use crate::kafka::produce::MAX_IN_FLIGHT;
use crate::kafka::{KafkaError, ResponseError};

/// How often acknowledged run lengths are written to the log while records
/// keep flowing, and how soon after the flow pauses.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(1000);
const IDLE_CHECKPOINT_DELAY: Duration = Duration::from_millis(100);

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
    /// When the produce was handed to the sink (the profile's round trip).
    sent: Instant,
}

/// Runs the partition until stopped or failed.
///
/// A spawned task's future is as large as its largest await point for its
/// whole life, and every idle partition holds one: the steps a pump rarely
/// takes (alignment, reopening the fetch, a re-fence) and `forward` (once
/// per fetch, against a fetch's worth of data) are boxed, so the idle loop
/// does not carry their state.
pub async fn run(mut cx: PumpContext) -> PumpExit {
    match run_inner(&mut cx).await {
        Ok(()) => PumpExit::Stopped,
        Err(exit) => exit,
    }
}

async fn run_inner(cx: &mut PumpContext) -> Result<(), PumpExit> {
    let position::Aligned {
        mut cursor,
        destination_leader_epoch,
        mut epochs,
        epoch_ahead,
    } = Box::pin(position::align(cx)).await?;
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
    // The stamp before this pump is not known: the sink was just acquired
    // or renewed, so both keep-alive clocks start now.
    let mut clock = FenceClock::started(crate::coordinator::now_ms());
    let copied = match recorded {
        Ok(()) => {
            copy(
                cx,
                &mut cursor,
                (&mut epochs, epoch_ahead),
                &mut *sink,
                &mut clock,
                destination_leader_epoch,
                max_message_bytes,
            )
            .await
        }
        Err(e) => Err(e),
    };
    // For the keep-alive that holds the partition once no pump runs.
    cx.progress.lock().unwrap().fence_clock = Some(clock);
    // Whatever this producer still has queued must land (or fail) before
    // anyone aligns again: a batch it retried after the next pump read the
    // destination's end would land twice, under two producer ids.
    sink.close().await;
    copied
}

/// Copies from the aligned position until told to stop or something fails;
/// in-flight produces are finished and the map made durable on a stop.
/// `epochs` are the source leader epochs of what is mirrored (and planned):
/// each fetch carries the last one, so the source's leader tells when its
/// log parted from ours. They travel with the entry alignment recorded
/// ahead, until the first batch fetched settles it.
async fn copy(
    cx: &mut PumpContext,
    cursor: &mut Cursor,
    (epochs, mut epoch_ahead): (&mut SourceEpochs, Option<EpochEntry>),
    sink: &mut dyn PartitionSink,
    clock: &mut FenceClock,
    destination_leader_epoch: i32,
    max_message_bytes: usize,
) -> Result<(), PumpExit> {
    let mut fetch = Box::pin(open(cx, cursor, last_epoch(epochs, cursor))).await?;

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
    // A clustered node's fence, kept alive: the leader forgets our
    // producer `producer.id.expiration.ms` after the timestamp of the last
    // batch or marker, the coordinator our transactional id
    // `transactional.id.expiration.ms` after its last transaction, so the
    // partition is fenced again before either (`refence`).
    let keep_alive = sink.keep_alive();
    loop {
        if *stop.borrow() {
            break;
        }
        let idle_checkpoint =
            tokio::time::Instant::from_std(last_checkpoint + IDLE_CHECKPOINT_DELAY);
        let refence_due = keep_alive.map(|k| {
            let due = clock.due_ms(&k);
            let wait = due - crate::coordinator::now_ms();
            tokio::time::Instant::now() + Duration::from_millis(wait.max(0) as u64)
        });
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
            _ = async {
                match refence_due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            }, if refence_due.is_some() && inflight.is_empty() && checkpointing.is_none() => {
                Box::pin(refence(cx, cursor, sink)).await?;
                *clock = FenceClock::refenced(crate::coordinator::now_ms());
                continue;
            }
            Some((pending, ack)) = inflight.next(), if !inflight.is_empty() => {
                // The leader keeps the last batch's timestamp, old or not.
                clock.stamp_ms = pending.max_timestamp;
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
                        fetch = Box::pin(reopen(cx, cursor, epochs, e)).await?;
                        continue;
                    }
                };
                let epochs = (&mut *epochs, &mut epoch_ahead);
                let forwarded =
                    forward(cx, cursor, epochs, sink, &mut inflight, fetched, max_message_bytes);
                Box::pin(forwarded).await?;
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

/// Fences the partition again at the sink's epoch before its leader
/// forgets our producer ([`crate::kafka::fence::KeepAlive`]), with nothing
/// in flight: the acknowledged runs are made durable, the marker written,
/// then recorded as a one-offset hole, as a takeover's markers are (a
/// crash in between leaves a trailing marker that alignment records). The
/// epoch does not change, so the sink's sequences go on.
async fn refence(
    cx: &PumpContext,
    cursor: &mut Cursor,
    sink: &mut dyn PartitionSink,
) -> Result<(), PumpExit> {
    cx.record_runs(cursor.checkpoint()).await?;
    let at = cursor.acked_destination;
    sink.refence()
        .await
        .map_err(|e| kafka_failure("fence the destination partition again", e))?;
    let end = cx
        .destination
        .settled_bounds(&cx.tp)
        .await
        .map_err(|e| kafka_failure("destination offsets", e))?
        .end;
    if end != at + 1 {
        return Err(PumpExit::retryable(format!(
            "the destination ends at {end} after the re-fence marker, not at {}: aligning again",
            at + 1
        )));
    }
    let ahead = cursor.skip_destination(1);
    cx.execute(Command::SetOffsetRuns {
        key: cx.key.clone(),
        upsert: ahead.into_iter().collect(),
        remove: Vec::new(),
        holes: vec![OffsetMapHole {
            destination_start: at,
            length: 1,
        }],
    })
    .await?;
    let mut p = cx.progress.lock().unwrap();
    p.destination_offset = cursor.acked_destination;
    p.offsets_identical = false;
    p.refences += 1;
    Ok(())
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
    (!runs.is_empty()).then(|| Box::pin(cx.checkpoint(runs)) as BoxFuture<'a, _>)
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
    // Landed elsewhere than planned: another writer's records, or kmirror's
    // own retry taken twice by a leader that forgot its producer. The next
    // alignment tells them apart (failing for the one, a hole for the
    // other), so the pump only stops here.
    cursor
        .ack(ack.base_offset, pending.records)
        .map_err(|e| PumpExit::retryable(e.to_string()))?;
    debug_assert_eq!(ack.base_offset, pending.destination_offset);
    if tracing::enabled!(target: "kmirror::profile", tracing::Level::DEBUG) {
        tracing::debug!(
            target: "kmirror::profile",
            partition = %cx.tp,
            produce_us = pending.sent.elapsed().as_micros() as u64,
            age_ms = crate::coordinator::now_ms() - pending.max_timestamp,
            records = pending.records,
            "ack"
        );
    }
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
    /// Runs opened ahead that those replace, removed in the same write.
    replaced_runs: Vec<i64>,
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
            self.replaced_runs.extend(plan.runs_to_remove);
            let pending = Pending {
                destination_offset: plan.destination_offset,
                records: plan.records,
                source_end: ob_end,
                max_timestamp,
                leader_epoch,
                bytes: ob.len() as u64,
                sent: Instant::now(),
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

/// Plans, records and sends one fetched chunk: the source leader epochs it
/// brings (settling an entry recorded ahead, the first time) and the runs
/// it opens are durable before its first produce.
async fn forward(
    cx: &PumpContext,
    cursor: &mut Cursor,
    (epochs, epoch_ahead): (&mut SourceEpochs, &mut Option<EpochEntry>),
    sink: &mut dyn PartitionSink,
    inflight: &mut FuturesOrdered<PendingAck>,
    mut fetched: crate::kafka::fetch::FetchedPartition,
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
        if fetched.log_start_offset >= 0 {
            p.source_log_start = Some(fetched.log_start_offset);
        }
        if let Some(ts) = newest {
            p.newest_source_timestamp = p.newest_source_timestamp.max(ts);
        }
    }
    let started = Instant::now();
    let inflight_before = inflight.len();
    let mut aborted = fetched.aborted();
    // Behind: this fetch cannot all be in flight at once, so the five
    // slots are what limits the partition: merge what is not large.
    let behind = inflight.len() + batches > MAX_IN_FLIGHT;
    let mut out = Outgoing::default();
    let mut new_epoch = false;
    if let Some(ahead) = *epoch_ahead {
        if let Some(first) = fetched.batches().find_map(Result::ok) {
            // The entry recorded ahead meets the batch it guessed.
            let start = first.base_offset().max(cursor.next_source);
            new_epoch = epochs.settle_ahead(ahead, first.partition_leader_epoch(), start);
            *epoch_ahead = None;
        }
    }
    for batch in fetched.batches() {
        let batch: RecordBatch = batch.map_err(|e| kafka_failure("source batch", e))?;
        let is_aborted = aborted
            .is_aborted(&batch)
            .map_err(|e| kafka_failure("source batch", e))?;
        let position = out.group_end().unwrap_or(cursor.next_source);
        new_epoch |= epochs.observe(
            batch.partition_leader_epoch(),
            batch.base_offset().max(position),
        );
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
    // Let go of the fetched data now, not after the sends below (which wait
    // for room among the five in flight): merged and re-encoded batches
    // have their own bytes, and a batch passed through holds its records
    // until it is acknowledged. Its charge stays until then (`charge`).
    let fetched_bytes = fetched.records.len();
    drop(std::mem::take(&mut fetched.records));
    let Outgoing {
        to_send,
        new_runs,
        replaced_runs,
        ..
    } = out;
    if to_send.is_empty() && inflight.is_empty() {
        // Only dropped batches: nothing to wait for, the position moves now.
        cx.progress.lock().unwrap().source_offset = cursor.next_source;
    }
    // The epochs these records were written in, and the runs these
    // produces open, are durable before any of them is sent.
    let planned = Instant::now();
    let had_runs = !new_runs.is_empty();
    if new_epoch {
        position::record_epochs(cx, epochs).await?;
    }
    cx.open_runs(new_runs, replaced_runs).await?;
    let recorded = Instant::now();
    let sends = to_send.len();
    for (mut pending, ob) in to_send {
        pending.sent = Instant::now();
        // The fetched bytes stay in the memory budget until the last
        // produce they became is acknowledged.
        let charge = fetched.charge.clone();
        let ack: Ack = sink
            .send(ob)
            .await
            .map_err(|e| kafka_failure("produce to destination", e))?;
        inflight.push_back(Box::pin(async move {
            let ack = ack.await;
            drop(charge);
            (pending, ack)
        }));
    }
    if tracing::enabled!(target: "kmirror::profile", tracing::Level::DEBUG) {
        tracing::debug!(
            target: "kmirror::profile",
            partition = %cx.tp,
            age_ms = newest.map(|t| crate::coordinator::now_ms() - t).unwrap_or(-1),
            batches,
            sends,
            bytes = fetched_bytes,
            behind,
            inflight_before,
            plan_us = planned.duration_since(started).as_micros() as u64,
            record_us = recorded.duration_since(planned).as_micros() as u64,
            records_written = had_runs || new_epoch,
            send_wait_us = recorded.elapsed().as_micros() as u64,
            "forward"
        );
    }
    Ok(())
}

/// The leader epoch of the record before the cursor's position (−1 unknown).
fn last_epoch(epochs: &SourceEpochs, cursor: &Cursor) -> i32 {
    epochs.epoch_at(cursor.next_source - 1).unwrap_or(-1)
}

async fn open(
    cx: &PumpContext,
    cursor: &Cursor,
    last_epoch: i32,
) -> Result<Box<dyn PartitionFetch>, PumpExit> {
    cx.source
        .open(
            cx.tp.clone(),
            cx.key.topic_id,
            cursor.next_source,
            last_epoch,
        )
        .await
        .map_err(|e| kafka_failure("open source fetch", e))
}

/// Reopens the source fetch after a fetch error, at the position it decides.
async fn reopen(
    cx: &PumpContext,
    cursor: &mut Cursor,
    epochs: &mut SourceEpochs,
    error: FetchError,
) -> Result<Box<dyn PartitionFetch>, PumpExit> {
    let mut last = last_epoch(epochs, cursor);
    match error {
        FetchError::Diverged {
            epoch, end_offset, ..
        } => {
            // The leader's log parted from ours (KIP-320's DivergingEpoch):
            // ULE_RECOVERY or FAILED; alignment asks again and repairs.
            let d = position::divergence(epochs, last, epoch, end_offset, cursor.next_source);
            return Err(d.map(|d| d.exit).unwrap_or_else(|| {
                PumpExit::retryable(format!(
                    "the source leader reports a log diverging from the fetched one (epoch {epoch} ends at {end_offset}, fetched up to {}); aligning again",
                    cursor.next_source
                ))
            }));
        }
        FetchError::OffsetOutOfRange { .. } => {
            let b = cx
                .source
                .bounds(&cx.tp)
                .await
                .map_err(|e| kafka_failure("source offsets", e))?;
            if cursor.next_source < b.log_start {
                position::record_gap(cx, cursor.next_source, b.log_start).await?;
                cursor.next_source = b.log_start;
                // The skipped records' epochs were never seen.
                if epochs.truncate_from(0) {
                    position::record_epochs(cx, epochs).await?;
                }
                last = -1;
            } else if cursor.next_source > b.end {
                return Err(position::truncated(b.end, cursor.next_source));
            } else if last >= 0 {
                // In range: the leader cannot place the last fetched epoch
                // (newer than any it knows, or no epoch cache; Kafka answers
                // OFFSET_OUT_OF_RANGE then), so the offsets are all there is.
                tracing::warn!(partition = %cx.tp, epoch = last, "the source leader cannot place the last mirrored record's leader epoch; fetching without the epoch check");
                last = -1;
            }
        }
        FetchError::LeaderChanged { error, .. } => {
            // UNKNOWN_TOPIC_ID and friends also mean "moved": only the
            // topic's id tells a leader change from a re-created topic.
            position::check_source_topic(cx).await?;
            tracing::info!(partition = %cx.tp, %error, "source leader moved; following it");
        }
        FetchError::Other(e) => return Err(kafka_failure("fetch from source", e)),
    }
    open(cx, cursor, last).await
}
