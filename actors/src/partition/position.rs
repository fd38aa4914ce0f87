//! Where a partition's copy stands, read from the map and the clusters:
//! the I/O around [`super::cursor::align`]. Alignment runs before every
//! copy (LOG_ALIGNMENT, each retry, EPOCH_FENCING); it is where kmirror
//! refuses to go on when the clusters are not what the map says: a source
//! topic re-created under the same name, a foreign write above the last
//! checkpoint, records lost on the destination, a source whose history
//! parted from the mirrored one (an unclean leader election: asked by
//! leader epoch, KIP-320's way, then by offsets). The same reading gives
//! LastMirrorEpochs for a partition stopped without having run.

use std::time::Duration;

use actix::Addr;
use kmirror_events::{
    Command, EpochEntry, GapDetected, MirrorPartitionKey, MirrorProducer, OffsetMapHole,
    OffsetMapRun, SourceEpochs,
};

use super::context::{kafka_failure, Progress, PumpContext, PumpExit};
use super::cursor::{align as align_map, cut_divergent, Alignment, Cursor};
use super::tail::{out_of_sequence, trailing_markers};
use crate::cluster::{DestinationCluster, SourceCluster};
use crate::coordinator::{CoordinatorActor, ReadPartition};
use crate::failback;
use crate::kafka::batch::RecordBatch;
use crate::kafka::fetch::TopicPartition;

/// Where an aligned copy resumes.
pub(super) struct Aligned {
    pub cursor: Cursor,
    /// The destination leader epoch alignment saw (what EPOCH_FENCING
    /// watches).
    pub destination_leader_epoch: i32,
    /// The source leader epochs of the mirrored records before
    /// `cursor.next_source` (as recorded).
    pub epochs: SourceEpochs,
    /// The entry recorded ahead for the next record's epoch, if any:
    /// settled against the first batch fetched
    /// ([`SourceEpochs::settle_ahead`]).
    pub epoch_ahead: Option<EpochEntry>,
}

/// Aligns the map with the destination and the source, records what
/// alignment corrected or repaired, and returns where the copy resumes.
pub(super) async fn align(cx: &PumpContext) -> Result<Aligned, PumpExit> {
    let view = cx
        .coordinator
        .send(ReadPartition(cx.key.clone()))
        .await
        .map_err(|e| PumpExit::retryable(format!("coordinator unavailable: {e}")))?;
    let floor = view.failback_floor();
    check_source_topic(cx).await?;
    check_mirror_loop(cx).await?;
    let dest = cx
        .destination
        .settled_bounds(&cx.tp)
        .await
        .map_err(|e| kafka_failure("destination offsets", e))?;
    let MapWithTail {
        runs,
        holes,
        never_landed,
        trailing,
    } = with_trailing_hole(
        &*cx.destination,
        &cx.tp,
        (view.runs, view.holes),
        (dest.log_start, dest.end),
        (view.producer, Foreign::Fail),
    )
    .await?;
    let mut alignment = align_map(runs, holes, dest.log_start, dest.end)
        .map_err(|e| PumpExit::fatal(e.to_string()))?;
    alignment.stale.extend(never_landed);
    let from = alignment.recorded_end.max(dest.log_start);
    match (view.producer, trailing) {
        // A producer is recorded before its first produce: with none, a
        // run opened ahead never had anything sent into it, and records
        // above the recorded end are another writer's.
        (None, None) if alignment.next_destination > from => {
            return Err(PumpExit::fatal(format!(
                "destination offsets {from}..{} were not written by kmirror (no mirror producer is recorded for the partition): another producer wrote to the mirror partition while kmirror was not copying",
                alignment.next_destination
            )))
        }
        _ => {}
    }
    // The trailing hole is durable before anything is produced after it,
    // so no later alignment stretches a run over it.
    if let Some(correction) = correction(&cx.key, &alignment, trailing) {
        cx.execute(correction).await?;
    }
    let src = cx
        .source
        .bounds(&cx.tp)
        .await
        .map_err(|e| kafka_failure("source offsets", e))?;
    let mut epochs = view.source_epochs.clone();
    let mut next_source = alignment.next_source.unwrap_or(src.log_start);
    if let Some(floor) = floor {
        next_source = next_source.max(floor);
    }
    // By leader epoch first: it also sees a source that has already grown
    // past our position with other records.
    let mut repaired = false;
    if let Some(position) = alignment.next_source {
        if let Some(d) = diverged(cx, &epochs, position).await? {
            if !cx.support_unclean_leader_election {
                return Err(d.exit);
            }
            repair_divergence(cx, &mut alignment, d.at).await?;
            next_source = d.at;
            repaired = true;
        }
    }
    // By offsets: what a source without epochs (or one that no longer
    // knows ours) still shows.
    if !repaired && next_source > src.end {
        if !cx.support_unclean_leader_election {
            return Err(truncated(src.end, next_source));
        }
        repair_divergence(cx, &mut alignment, src.end).await?;
        next_source = src.end;
    }
    let forget_from = if next_source < src.log_start {
        record_gap(cx, next_source, src.log_start).await?;
        next_source = src.log_start;
        // The skipped records' epochs were never seen.
        0
    } else {
        next_source
    };
    epochs.truncate_from(forget_from);
    let mut cursor = Cursor::new(&alignment, next_source);
    if let Some(ahead) = cursor.open_ahead() {
        cx.record_runs(vec![ahead]).await?;
    }
    // With nothing past our position on the source, the next record is most
    // likely written in the leader's current epoch: recorded ahead like the
    // run, so that record waits on no log write either (a wrong guess is
    // settled before anything after it is produced).
    let epoch_ahead = (src.end == next_source && src.leader_epoch >= 0)
        .then_some(EpochEntry {
            epoch: src.leader_epoch,
            start_offset: next_source,
        })
        .filter(|e| epochs.observe(e.epoch, e.start_offset));
    if epochs != view.source_epochs {
        record_epochs(cx, &epochs).await?;
    }
    // Until a batch is acknowledged, the last mirrored record's epoch is
    // the recorded one, or (none recorded: a map seeded by a failback, a
    // gap) the source's: a stop before any copy records it, and a later
    // failback can go by delta.
    let source_leader_epoch = epoch_before(
        &*cx.source,
        &cx.tp,
        &epochs,
        cursor.next_source,
        src.log_start,
    )
    .await;
    {
        let mut p = cx.progress.lock().unwrap();
        p.source_offset = cursor.next_source;
        p.destination_offset = cursor.acked_destination;
        p.source_high_watermark = src.end;
        p.source_log_start = Some(src.log_start);
        p.destination_leader_epoch = dest.leader_epoch;
        p.offsets_identical = cursor.identical();
        p.source_leader_epoch = source_leader_epoch;
    }
    Ok(Aligned {
        cursor,
        destination_leader_epoch: dest.leader_epoch,
        epochs,
        epoch_ahead,
    })
}

/// Where the source's history parted from the mirrored one, and what the
/// partition fails with when that may not be repaired.
pub(super) struct Divergence {
    pub at: i64,
    pub exit: PumpExit,
}

/// Asks the source's leader, with OffsetForLeaderEpoch, where the leader
/// epoch of the last mirrored record (before `position`) ends on its log
/// (KIP-320). An end below `position` means the leader's log holds other
/// records from there: an unclean leader election, whether the leader's
/// log is now shorter than `position` or already longer.
async fn diverged(
    cx: &PumpContext,
    epochs: &SourceEpochs,
    position: i64,
) -> Result<Option<Divergence>, PumpExit> {
    let Some(ours) = epochs.epoch_at(position - 1) else {
        return Ok(None);
    };
    let (leader_epoch, end_offset) = cx
        .source
        .end_offset_for_epoch(&cx.tp, ours)
        .await
        .map_err(|e| kafka_failure("source OffsetForLeaderEpoch", e))?;
    Ok(divergence(epochs, ours, leader_epoch, end_offset, position))
}

/// Where a leader's answer for our epoch `ours` (its largest epoch up to
/// ours, `leader_epoch`, ends at `end_offset`) says the histories part,
/// below `position`; the same rule for OffsetForLeaderEpoch and a Fetch's
/// DivergingEpoch.
pub(super) fn divergence(
    epochs: &SourceEpochs,
    ours: i32,
    leader_epoch: i32,
    end_offset: i64,
    position: i64,
) -> Option<Divergence> {
    let at = epochs.divergence(leader_epoch, end_offset, position)?;
    let exit = PumpExit::SourceTruncated {
        message: format!(
            "Detected log truncation during mirroring: the source partition's leader holds the mirrored history only up to offset {at}, below the mirrored position {position} (the last mirrored record was written in leader epoch {ours}; the leader's epoch {leader_epoch} ends at {end_offset}), so its records from {at} on are not the ones mirrored. This implies unclean leader election in source cluster, but mirror.support.unclean.leader.election is disabled."
        ),
    };
    Some(Divergence { at, exit })
}

/// Records the source leader epochs of the mirrored records (empty:
/// unknown).
pub(super) async fn record_epochs(cx: &PumpContext, epochs: &SourceEpochs) -> Result<(), PumpExit> {
    cx.execute(Command::RecordSourceEpochs {
        key: cx.key.clone(),
        epochs: epochs.clone(),
    })
    .await
}

/// The KIP's mirror-loop rule: a mirror on the source that copies this very
/// topic from this destination, and is not STOPPED, would make the two
/// copy each other's writes forever. FAILED, not retryable.
async fn check_mirror_loop(cx: &PumpContext) -> Result<(), PumpExit> {
    let Some(history) = &cx.history else {
        return Ok(());
    };
    let image = match history.get(&*cx.source).await {
        Ok(Some(image)) => image,
        Ok(None) => return Ok(()),
        Err(e) => {
            // Not being able to read it must not stop the copy: the start
            // already checked, this is the second line.
            tracing::warn!(partition = %cx.tp, error = %e, "cannot read the source's state topic; mirror-loop check skipped");
            return Ok(());
        }
    };
    let here = cx
        .destination
        .cluster_id()
        .await
        .map_err(|e| kafka_failure("describe the destination cluster", e))?;
    failback::check_loops(&image, &here, &cx.tp.topic).map_err(|e| PumpExit::fatal(e.to_string()))
}

/// What alignment does with another writer's batch above the recorded
/// map (after a crash the destination may hold kmirror's appends there,
/// and anything else is a foreign write).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Foreign {
    /// Fails the partition: a pump copying on would shift every later
    /// offset.
    Fail,
    /// Ends the position before it: a stop completes whatever the
    /// destination holds.
    EndBefore,
}

/// Every batch of `[from, to)` is a data batch of `ours`.
fn check_ours(
    batches: &[RecordBatch],
    from: i64,
    to: i64,
    ours: MirrorProducer,
) -> Result<(), PumpExit> {
    let in_range = batches
        .iter()
        .filter(|b| b.next_offset() > from && b.base_offset() < to);
    match in_range
        .clone()
        .find(|b| b.producer_id() != ours.producer_id)
    {
        None => {}
        Some(b) => {
            return Err(PumpExit::fatal(format!(
                "destination offset {} was written by producer id {}, not by kmirror's producer {}: another producer wrote to the mirror partition while kmirror was not copying",
                b.base_offset(),
                b.producer_id(),
                ours.producer_id
            )))
        }
    }
    // Our producer writes no markers: one here belongs to no record we sent.
    match in_range.clone().find(|b| b.is_control()) {
        None => Ok(()),
        Some(b) => Err(PumpExit::fatal(format!(
            "destination offset {} holds a transaction marker below records above the recorded map: not a state kmirror leaves",
            b.base_offset()
        ))),
    }
}

/// In a clustered daemon a node that takes a partition over fences it
/// first: an abort marker of the partition's fence producer id lands at
/// the end (one per takeover, a control batch of one offset that belongs
/// to no source offset). Above the recorded map, such markers at the very
/// end become a hole, and what lies between the map and them must be the
/// recorded producer's data, as for any unrecorded tail: the previous
/// owner's appends it had no time to checkpoint. The same hole begins
/// lower when those appends stop following on by producer sequence
/// ([`trailing_hole`]).
///
/// A partition's map with the hole that ends its destination.
struct MapWithTail {
    runs: Vec<OffsetMapRun>,
    /// The recorded holes, and the trailing one if any.
    holes: Vec<OffsetMapHole>,
    /// Runs opened at or above the trailing hole: they never landed
    /// (fence markers came first) or are copied again after it.
    never_landed: Vec<OffsetMapRun>,
    /// The trailing hole, not recorded yet ([`trailing_hole`]).
    trailing: Option<OffsetMapHole>,
}

/// The map with the hole that ends the destination (if any), the last
/// landed run ending where it begins: what a pump's alignment records and
/// a stopped partition's position reads.
async fn with_trailing_hole(
    destination: &dyn DestinationCluster,
    tp: &TopicPartition,
    (mut runs, mut holes): (Vec<OffsetMapRun>, Vec<OffsetMapHole>),
    (log_start, end): (i64, i64),
    ours: (Option<MirrorProducer>, Foreign),
) -> Result<MapWithTail, PumpExit> {
    let mut never_landed = Vec::new();
    let trailing = trailing_hole(destination, tp, (&runs, &holes), (log_start, end), ours).await?;
    if let Some(hole) = trailing {
        runs.retain(|r| {
            let keep = r.destination_start < hole.destination_start;
            if !keep {
                never_landed.push(*r);
            }
            keep
        });
        holes.push(hole);
    }
    Ok(MapWithTail {
        runs,
        holes,
        never_landed,
        trailing,
    })
}

/// How many offsets of holes (re-fence markers, one offset each) between
/// the last mapped record and the recorded end alignment reads through to
/// find the batch the first one above follows on from.
const MARKERS_READ_THROUGH: i64 = 64;

/// The hole that ends the destination above the recorded map: the fence
/// markers a takeover left there, and below them, from kmirror's first
/// batch that does not follow on by producer sequence
/// ([`out_of_sequence`]: the broker forgot kmirror's producer and took a
/// retry twice, or a batch in place of a lost one). What lies in it is
/// nobody's copy; the source records after the last run are copied again
/// after it, so none is skipped. Another writer's batch below the markers
/// fails the partition; with no markers, as `foreign` says (a stop's
/// position then ends before it, [`ours_up_to`]).
async fn trailing_hole(
    destination: &dyn DestinationCluster,
    tp: &TopicPartition,
    (runs, holes): (&[OffsetMapRun], &[OffsetMapHole]),
    (log_start, end): (i64, i64),
    (producer, foreign): (Option<MirrorProducer>, Foreign),
) -> Result<Option<OffsetMapHole>, PumpExit> {
    let fence_producer = destination.fence_producer_id(tp);
    let recorded_end = recorded_end(runs, holes).max(log_start);
    if recorded_end >= end || (fence_producer.is_none() && producer.is_none()) {
        return Ok(None);
    }
    // From kmirror's last mapped record, through the re-fence markers
    // after it (if only a few), or else the batch below the recorded end:
    // the first batch above follows on from the last data batch of ours.
    let last_mapped = runs
        .iter()
        .filter(|r| r.length > 0)
        .map(|r| r.destination_end() - 1)
        .max()
        .filter(|&at| recorded_end - at <= MARKERS_READ_THROUGH)
        .unwrap_or(recorded_end - 1);
    let batches = destination
        .read_batches(tp, last_mapped.max(log_start), end)
        .await
        .map_err(|e| kafka_failure("read the destination above the recorded map", e))?;
    let markers = fence_producer
        .and_then(|f| trailing_markers(&batches, f, end))
        .map(|at| at.max(recorded_end));
    let mut at = markers.unwrap_or(end);
    if at > recorded_end {
        match (producer, markers) {
            (None, Some(_)) => {
                return Err(PumpExit::fatal(format!(
                    "destination offsets {recorded_end}..{at} hold records but kmirror never recorded a producer for this partition: another producer wrote to the mirror partition"
                )))
            }
            (None, None) => return Ok(None),
            (Some(ours), markers) => match check_ours(&batches, recorded_end, at, ours) {
                Err(e) if markers.is_some() || foreign == Foreign::Fail => return Err(e),
                Err(_) => return Ok(None),
                Ok(()) => {
                    let ours = (ours.producer_id, ours.producer_epoch);
                    at = out_of_sequence(&batches, recorded_end, at, ours).unwrap_or(at)
                }
            },
        }
    }
    if at >= end {
        return Ok(None);
    }
    if markers != Some(at) {
        tracing::warn!(partition = %tp, from = at, to = end, "kmirror's own batches above the recorded map stop following on by producer sequence at {at} (the destination broker forgot kmirror's producer: producer.id.expiration.ms counts from record timestamps): recorded as a hole, and the source records after the last mirrored one are copied again after it");
    } else {
        tracing::info!(partition = %tp, from = at, to = end, "fence markers at the destination's end recorded as a hole");
    }
    Ok(Some(OffsetMapHole {
        destination_start: at,
        length: end - at,
    }))
}

/// How long reading the source's leader epoch of the last mirrored record
/// may take: a failover must not wait on a source that is gone.
const SOURCE_EPOCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a stopped partition's copy stands ([`stopped_position`]), and the
/// map corrections that reading found: recorded before LastMirrorEpochs, so
/// that the map and LastMirrorEpochs say the same (failback compares them).
pub struct StoppedPosition {
    pub progress: Progress,
    /// `SetOffsetRuns` to record first; `None` when the map says it already.
    pub correction: Option<Command>,
}

/// Where a partition's copy stands when no pump of this process left it
/// knowingly (it was PAUSED or FAILED when the daemon started, or its pump
/// failed): the map aligned with the destination as far as the destination
/// proves the records there kmirror's, and the source leader epoch of the
/// last mirrored record — as recorded (`SourceEpochs`), else read from the
/// source if it answers, else −1. What LastMirrorEpochs records.
///
/// A stop must not wait for a sick partition to heal, so a destination
/// that contradicts the map (records another producer wrote, records lost)
/// does not fail it: the position is then the map's own, and the
/// destination end the lower of the map's and the destination's — what a
/// failback's delta check compares.
pub async fn stopped_position(
    key: &MirrorPartitionKey,
    tp: &TopicPartition,
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    coordinator: &Addr<CoordinatorActor>,
) -> Result<StoppedPosition, String> {
    let view = coordinator
        .send(ReadPartition(key.clone()))
        .await
        .map_err(|e| format!("coordinator unavailable: {e}"))?;
    let dest = destination
        .settled_bounds(tp)
        .await
        .map_err(|e| format!("destination offsets: {e}"))?;
    let (alignment, correction) = match aligned_as_ours(key, tp, destination, &view, &dest).await {
        Ok(aligned) => aligned,
        Err(PumpExit::Failed {
            message,
            retryable: false,
        }) => {
            tracing::warn!(partition = %tp, reason = %message, "the destination contradicts the offset map; the stop records the position the map records");
            (as_recorded(&view.runs, &view.holes, dest.end), None)
        }
        Err(e) => return Err(e.to_string()),
    };
    let next_source = alignment
        .next_source
        .unwrap_or(0)
        .max(view.failback_floor().unwrap_or(0));
    let source_leader_epoch = epoch_before(source, tp, &view.source_epochs, next_source, 0).await;
    Ok(StoppedPosition {
        progress: Progress {
            source_offset: next_source,
            destination_offset: alignment.next_destination,
            source_leader_epoch,
            destination_leader_epoch: dest.leader_epoch,
            offsets_identical: Cursor::new(&alignment, next_source).identical(),
            ..Progress::default()
        },
        correction,
    })
}

/// A pump's alignment without the source: the fence markers that end the
/// destination become a hole, and the map stretches over what lies above
/// it only as far as the recorded producer wrote it (a pump's alignment
/// fails the partition at another writer's record; a stop ends before it).
async fn aligned_as_ours(
    key: &MirrorPartitionKey,
    tp: &TopicPartition,
    destination: &dyn DestinationCluster,
    view: &crate::coordinator::PartitionView,
    dest: &crate::cluster::LogBounds,
) -> Result<(Alignment, Option<Command>), PumpExit> {
    let MapWithTail {
        runs,
        holes,
        never_landed,
        trailing,
    } = with_trailing_hole(
        destination,
        tp,
        (view.runs.clone(), view.holes.clone()),
        (dest.log_start, dest.end),
        (view.producer, Foreign::EndBefore),
    )
    .await?;
    let end = match trailing {
        Some(_) => dest.end,
        None => {
            let from = recorded_end(&runs, &holes).max(dest.log_start);
            ours_up_to(
                destination,
                tp,
                (dest.log_start, from),
                dest.end,
                view.producer,
            )
            .await?
        }
    };
    let mut alignment =
        align_map(runs, holes, dest.log_start, end).map_err(|e| PumpExit::fatal(e.to_string()))?;
    alignment.stale.extend(never_landed);
    let correction = correction(key, &alignment, trailing);
    Ok((alignment, correction))
}

/// What an alignment found that the map does not say yet (corrected
/// lengths, runs that never landed, the trailing hole), as one record.
fn correction(
    key: &MirrorPartitionKey,
    alignment: &Alignment,
    trailing: Option<OffsetMapHole>,
) -> Option<Command> {
    (!alignment.stale.is_empty() || !alignment.corrected.is_empty() || trailing.is_some()).then(
        || Command::SetOffsetRuns {
            key: key.clone(),
            upsert: alignment.corrected.clone(),
            remove: alignment.stale.iter().map(|r| r.source_start).collect(),
            holes: trailing.into_iter().collect(),
        },
    )
}

/// One past what the map records as written: acknowledged run lengths and
/// holes.
fn recorded_end(runs: &[OffsetMapRun], holes: &[OffsetMapHole]) -> i64 {
    runs.iter()
        .filter(|r| r.length > 0)
        .map(|r| r.destination_end())
        .chain(holes.iter().map(|h| h.destination_end()))
        .max()
        .unwrap_or(0)
}

/// How far above `from` (the recorded end) the destination holds data
/// batches of `producer` only, up to `to`, in sequence: where the first
/// record of another writer (or a marker) begins, or the first batch of
/// kmirror's that does not follow on ([`out_of_sequence`]). With no
/// producer recorded nothing above the map is kmirror's.
async fn ours_up_to(
    destination: &dyn DestinationCluster,
    tp: &TopicPartition,
    (log_start, from): (i64, i64),
    to: i64,
    producer: Option<MirrorProducer>,
) -> Result<i64, PumpExit> {
    let Some(ours) = producer.filter(|_| from < to) else {
        return Ok(from.min(to));
    };
    let batches = destination
        .read_batches(tp, (from - 1).max(log_start), to)
        .await
        .map_err(|e| kafka_failure("read the destination above the recorded map", e))?;
    let mut covered = from;
    for b in batches.iter().filter(|b| b.next_offset() > from) {
        if b.producer_id() != ours.producer_id || b.is_control() || b.base_offset() > covered {
            break;
        }
        covered = b.next_offset().min(to);
    }
    let ours = (ours.producer_id, ours.producer_epoch);
    Ok(out_of_sequence(&batches, from, covered, ours).unwrap_or(covered))
}

/// The map as recorded, for a destination that contradicts it: its
/// acknowledged runs, the position they reach, and a destination end no
/// higher than the destination's own (records lost there make a failback's
/// delta check refuse, as it must).
fn as_recorded(runs: &[OffsetMapRun], holes: &[OffsetMapHole], end: i64) -> Alignment {
    let mut landed: Vec<OffsetMapRun> = runs.iter().filter(|r| r.length > 0).copied().collect();
    landed.sort_by_key(|r| r.destination_start);
    let recorded = recorded_end(&landed, holes);
    Alignment {
        next_source: landed.last().map(|r| r.source_end()),
        runs: landed,
        holes: holes.to_vec(),
        stale: Vec::new(),
        corrected: Vec::new(),
        next_destination: recorded.min(end),
        recorded_end: recorded,
    }
}

/// The source leader epoch of the record before `next` (the last one
/// mirrored): as recorded, else — a map seeded by a failback, a gap — the
/// source's own if it holds that record (`readable_from`: its log start,
/// as far as known) and answers in time, else −1.
async fn epoch_before(
    source: &dyn SourceCluster,
    tp: &TopicPartition,
    epochs: &SourceEpochs,
    next: i64,
    readable_from: i64,
) -> i32 {
    let last = next - 1;
    if last < 0 {
        return -1;
    }
    if let Some(epoch) = epochs.epoch_at(last) {
        return epoch;
    }
    if last < readable_from {
        return -1;
    }
    tokio::time::timeout(SOURCE_EPOCH_TIMEOUT, source_epoch_at(source, tp, last))
        .await
        .ok()
        .flatten()
        .unwrap_or(-1)
}

/// The leader epoch the source batch holding `offset` was written in, read
/// apart from the partition's shared fetch stream.
async fn source_epoch_at(
    source: &dyn SourceCluster,
    tp: &TopicPartition,
    offset: i64,
) -> Option<i32> {
    let headers = source.batch_headers(tp, offset, offset + 1, 1).await.ok()?;
    headers
        .batches
        .iter()
        .find(|b| b.next_offset > offset)
        .map(|b| b.leader_epoch)
}

pub(super) fn truncated(end: i64, position: i64) -> PumpExit {
    PumpExit::SourceTruncated {
        message: format!(
            "Detected log truncation during mirroring: the source partition ends at {end}, below the mirrored position {position}. This implies unclean leader election in source cluster, but mirror.support.unclean.leader.election is disabled."
        ),
    }
}

/// ULE recovery: the map is cut where the source's history parted from the
/// mirrored one (`at`: where our last epoch ends on its leader, or where
/// its log now ends), the divergent range is recorded (the destination
/// keeps those records: Kafka cannot truncate a partition), and copying
/// resumes there, with the source's records of its own history.
async fn repair_divergence(
    cx: &PumpContext,
    alignment: &mut Alignment,
    at: i64,
) -> Result<(), PumpExit> {
    let d = cut_divergent(alignment, at);
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
        holes: d.holes,
    })
    .await
}

pub(super) async fn record_gap(cx: &PumpContext, from: i64, to: i64) -> Result<(), PumpExit> {
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
pub(super) async fn check_source_topic(cx: &PumpContext) -> Result<(), PumpExit> {
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
