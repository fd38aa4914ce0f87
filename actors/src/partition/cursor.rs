//! The partition's position on both clusters, and how the offset map grows.
//!
//! The cursor is the PartitionActor's bookkeeping without any I/O, so every
//! rule that makes the copy exact is unit-tested here:
//!
//! - A record's destination offset is known before it is produced (the
//!   destination assigns offsets densely, and kmirror is its only writer), so
//!   the run a record belongs to can be written to the log *before* the
//!   produce that opens it.
//! - Only a new run needs a log write ahead of its produce. Extending the
//!   open run is implicit: on resume its landed length is the destination's
//!   end offset minus the run's destination start, because the destination
//!   holds a prefix of what was sent (the idempotent producer keeps order).
//! - The map only ever records acknowledged lengths; a run opened but never
//!   landed is recorded with length 0 and removed at the next alignment.
//! - When the map's last run cannot take the next record (a partition never
//!   copied, a gap), the run it will open is recorded once at start
//!   ([`Cursor::open_ahead`]), so a partition's first record, or an idle
//!   one's, waits on no log write of its own. A run opened ahead that no
//!   record extended gives way to the next run opened at its destination
//!   offset, in the same log write.

use kmirror_events::{OffsetMapHole, OffsetMapRun};

/// A contiguous range of source offsets whose records are forwarded together
/// (one source batch, or one gap-free piece of a compacted batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub source_start: i64,
    pub len: i64,
}

/// What planning one source batch decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Runs to append to the log before producing: each run this batch
    /// opens, at length 0.
    pub runs_to_record: Vec<OffsetMapRun>,
    /// The run opened ahead that a run this batch opens replaces (by source
    /// start), to remove in the same log write.
    pub runs_to_remove: Vec<i64>,
    /// Where the batch's first record will land on the destination.
    pub destination_offset: i64,
    /// Records the batch puts on the destination.
    pub records: i64,
}

/// Why the destination disagrees with the map; both mean someone other than
/// kmirror changed the destination partition, so neither is retried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AlignError {
    #[error("destination partition holds {end} records but kmirror never wrote to it (not empty before mirroring, or written by another producer)")]
    NotEmpty { end: i64 },
    #[error("destination end offset {end} is below {acked}, which kmirror had already mirrored (records deleted or truncated on the destination)")]
    Truncated { end: i64, acked: i64 },
    #[error("destination produce landed at offset {landed}, expected {expected}: another producer wrote to the mirror partition, or its leader took a retry twice; aligning again")]
    ForeignWrite { landed: i64, expected: i64 },
    #[error("destination records {from}..{end} follow the divergent range kmirror kept, but kmirror never wrote them")]
    AfterHole { from: i64, end: i64 },
}

/// The outcome of aligning the map with the destination at (re)start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alignment {
    /// The landed runs, each with its true length (the last one's from the
    /// destination end offset, the others' from their successor's start).
    pub runs: Vec<OffsetMapRun>,
    /// Destination ranges that belong to no source offset; a run before one
    /// ends where the hole starts.
    pub holes: Vec<OffsetMapHole>,
    /// Runs recorded in the log that never landed: tombstone them.
    pub stale: Vec<OffsetMapRun>,
    /// Landed runs whose recorded length was short of the truth: record them.
    pub corrected: Vec<OffsetMapRun>,
    /// Next source offset to fetch (None: nothing mirrored yet, start at the
    /// source log start).
    pub next_source: Option<i64>,
    /// Destination offset the next produced record will get.
    pub next_destination: i64,
    /// One past what the map records as written (acknowledged lengths and
    /// holes): anything above it on the destination must be kmirror's own
    /// unrecorded appends, which alignment has to verify.
    pub recorded_end: i64,
}

/// Reconciles the recorded runs and holes with the destination partition,
/// whose log starts at `log_start` and ends at `end` (the high watermark
/// once it has caught up with the leader's log end).
///
/// Every landed record is in a run or a hole, runs and holes tile the
/// destination without overlapping, and the destination holds a prefix of
/// what was sent, so the landed part of the map is exactly the runs that
/// start below `end`, each reaching the next run or hole, the last reaching
/// `end`. Recorded lengths are only ever acknowledged lengths, so a
/// destination that ends below one lost records kmirror had mirrored.
pub fn align(
    mut runs: Vec<OffsetMapRun>,
    holes: Vec<OffsetMapHole>,
    log_start: i64,
    end: i64,
) -> Result<Alignment, AlignError> {
    runs.sort_by_key(|r| (r.destination_start, r.source_start));
    let acked = runs
        .iter()
        .filter(|r| r.length > 0)
        .map(|r| r.destination_end())
        .chain(holes.iter().map(|h| h.destination_end()))
        .max()
        .unwrap_or(0);
    if end < acked {
        return Err(AlignError::Truncated { end, acked });
    }
    let (mut landed, stale): (Vec<_>, Vec<_>) =
        runs.into_iter().partition(|r| r.destination_start < end);
    // Where each landed run's records must stop: the next run or hole.
    let starts: std::collections::BTreeSet<i64> = landed
        .iter()
        .map(|r| r.destination_start)
        .chain(holes.iter().map(|h| h.destination_start))
        .collect();
    let mut corrected = Vec::new();
    for run in landed.iter_mut() {
        let run_end = starts
            .range(run.destination_start + 1..)
            .next()
            .copied()
            .unwrap_or(end);
        let len = run_end - run.destination_start;
        if len != run.length {
            run.length = len;
            corrected.push(*run);
        }
    }
    // Records past the last hole with no run after it are nobody's.
    let owned_to = landed
        .iter()
        .map(|r| r.destination_end())
        .chain(holes.iter().map(|h| h.destination_end()))
        .max();
    match owned_to {
        None if end != log_start => {
            return Err(AlignError::NotEmpty {
                end: end - log_start,
            })
        }
        Some(to) if to < end => return Err(AlignError::AfterHole { from: to, end }),
        _ => {}
    }
    let next_source = landed.last().map(|r| r.source_end());
    Ok(Alignment {
        runs: landed,
        holes,
        stale,
        corrected,
        next_source,
        next_destination: end,
        recorded_end: acked,
    })
}

/// What an unclean leader election on the source leaves to repair: the
/// source now ends at `source_end`, below records kmirror had mirrored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Source offsets that were mirrored but no longer exist on the source
    /// (offsets the source will now reuse for other records).
    pub source: (i64, i64),
    /// Where those records sit on the destination (kept: Kafka cannot
    /// truncate a partition's tail).
    pub destination: (i64, i64),
    /// The run cut at `source_end`, to record.
    pub cut: Option<OffsetMapRun>,
    /// Runs wholly beyond `source_end`, to remove.
    pub removed: Vec<OffsetMapRun>,
    /// The divergent records' destination range, to record as holes so no
    /// later alignment stretches a run over it: the stretches of it no
    /// hole covers already (a takeover's fence marker, an earlier repair),
    /// since holes must not overlap.
    pub holes: Vec<OffsetMapHole>,
}

/// Cuts the map at `source_end` after the source was truncated under it, so
/// the source offsets it will reuse map to the new records, not the old ones.
/// The destination keeps its tail; the next run opens after it.
pub fn cut_divergent(alignment: &mut Alignment, source_end: i64) -> Divergence {
    let old_next = alignment.next_source.unwrap_or(source_end);
    let mut removed = Vec::new();
    let mut cut = None;
    let mut divergent_dst_start = alignment.next_destination;
    alignment.runs.retain_mut(|r| {
        if r.source_start >= source_end {
            divergent_dst_start = divergent_dst_start.min(r.destination_start);
            removed.push(*r);
            false
        } else {
            if r.source_end() > source_end {
                r.length = source_end - r.source_start;
                divergent_dst_start = divergent_dst_start.min(r.destination_end());
                cut = Some(*r);
            }
            true
        }
    });
    alignment.next_source = Some(source_end);
    let holes = uncovered(
        &alignment.holes,
        divergent_dst_start,
        alignment.next_destination,
    );
    alignment.holes.extend(holes.iter().copied());
    alignment.holes.sort_by_key(|h| h.destination_start);
    Divergence {
        source: (source_end, old_next),
        destination: (divergent_dst_start, alignment.next_destination),
        cut,
        removed,
        holes,
    }
}

/// The stretches of destination range `[from, to)` that none of `holes`
/// covers, as holes.
fn uncovered(holes: &[OffsetMapHole], from: i64, to: i64) -> Vec<OffsetMapHole> {
    let mut covered: Vec<(i64, i64)> = holes
        .iter()
        .map(|h| (h.destination_start, h.destination_end()))
        .filter(|&(s, e)| s < to && e > from)
        .collect();
    covered.sort();
    let mut out = Vec::new();
    let mut at = from;
    for (s, e) in covered.into_iter().chain([(to, to)]) {
        if s > at {
            out.push(OffsetMapHole {
                destination_start: at,
                length: s.min(to) - at,
            });
        }
        at = at.max(e);
        if at >= to {
            break;
        }
    }
    out
}

/// The planned position of a partition's copy: where the next fetched record
/// comes from and where it will land, and which runs still need their
/// acknowledged length written to the log.
#[derive(Clone, Debug)]
pub struct Cursor {
    /// Next source offset to fetch.
    pub next_source: i64,
    /// Destination offset the next produced record will get.
    pub next_destination: i64,
    /// Destination offset up to which produces are acknowledged.
    pub acked_destination: i64,
    /// Runs with their planned lengths and the length last written to the
    /// log, oldest first; the last is open. Closed runs leave once their
    /// full length is written.
    runs: std::collections::VecDeque<(OffsetMapRun, i64)>,
    /// The whole map is one run starting at the same offset on both sides.
    identical: bool,
}

impl Cursor {
    /// A cursor resuming after `alignment` at source offset `next_source`
    /// (the alignment's, or the source log start for an empty map, or past
    /// a retention gap).
    pub fn new(alignment: &Alignment, next_source: i64) -> Self {
        let last = alignment.runs.last().copied();
        Cursor {
            next_source,
            next_destination: alignment.next_destination,
            acked_destination: alignment.next_destination,
            runs: last.map(|r| (r, r.length)).into_iter().collect(),
            identical: alignment.holes.is_empty() && Self::offsets_identical(&alignment.runs),
        }
    }

    /// Plans one destination batch: `segments` are the source records it
    /// carries in order (one source batch, a piece of a split one, or a run
    /// of merged small ones; empty when everything was dropped: control
    /// batches, aborted transactions) and `batch_end` is one past the last
    /// source offset it accounts for.
    ///
    /// Returns the runs to append to the log before the produce: each newly
    /// opened run, at length 0.
    pub fn plan(&mut self, segments: &[Segment], batch_end: i64) -> Plan {
        let destination_offset = self.next_destination;
        let mut runs_to_record = Vec::new();
        let mut runs_to_remove = Vec::new();
        for s in segments.iter().filter(|s| s.len > 0) {
            if self.open_run_takes(s.source_start) {
                let only = self.runs.len() == 1;
                let (run, _) = self.runs.back_mut().expect("checked above");
                if run.length == 0 {
                    // A run opened ahead takes its first record.
                    self.identical &= only && run.source_start == run.destination_start;
                }
                run.length += s.len;
            } else {
                if self.runs.back().is_some_and(|(run, _)| run.length == 0) {
                    // Opened ahead at this destination offset, never
                    // extended: it must not claim the new run's records.
                    let (ahead, _) = self.runs.pop_back().expect("checked above");
                    runs_to_remove.push(ahead.source_start);
                }
                let run = OffsetMapRun {
                    source_start: s.source_start,
                    destination_start: self.next_destination,
                    length: 0,
                };
                runs_to_record.push(run);
                self.identical &= self.runs.is_empty() && run.source_start == run.destination_start;
                self.runs.push_back((
                    OffsetMapRun {
                        length: s.len,
                        ..run
                    },
                    0,
                ));
            }
            self.next_destination += s.len;
        }
        self.next_source = self.next_source.max(batch_end);
        Plan {
            runs_to_record,
            runs_to_remove,
            destination_offset,
            records: self.next_destination - destination_offset,
        }
    }

    /// The run the next record extends, when the map's last run cannot
    /// (nothing copied yet, or a gap before `next_source`): recorded at
    /// length 0 before anything is fetched, so the record that opens it
    /// waits on no log write of its own. A fresh mirror of idle partitions
    /// otherwise paid one flush per partition's first record, the largest
    /// share of the idle daemon's CPU. Returns the run to record.
    pub fn open_ahead(&mut self) -> Option<OffsetMapRun> {
        if self.open_run_takes(self.next_source) {
            return None;
        }
        let run = OffsetMapRun {
            source_start: self.next_source,
            destination_start: self.next_destination,
            length: 0,
        };
        // Identity is judged when a record first lands in it (`plan`).
        self.runs.push_back((run, 0));
        Some(run)
    }

    /// Whether the open run goes on with the record at `source_start`: it
    /// ends there on the source and at the next offset on the destination.
    fn open_run_takes(&self, source_start: i64) -> bool {
        self.runs.back().is_some_and(|(run, _)| {
            run.source_end() == source_start && run.destination_end() == self.next_destination
        })
    }

    /// Records that the destination acknowledged a produce of `records` at
    /// `landed`; any other offset than the planned one is a foreign write
    /// or a repeat, which alignment tells apart.
    pub fn ack(&mut self, landed: i64, records: i64) -> Result<(), AlignError> {
        if landed != self.acked_destination {
            return Err(AlignError::ForeignWrite {
                landed,
                expected: self.acked_destination,
            });
        }
        self.acked_destination += records;
        Ok(())
    }

    /// Steps over `len` destination offsets that hold no mirrored record
    /// (a re-fence marker, recorded as a hole), with nothing in flight:
    /// the next record opens a new run. A run opened ahead moves past them
    /// (it never claims the hole); returned, to record with the hole.
    pub fn skip_destination(&mut self, len: i64) -> Option<OffsetMapRun> {
        debug_assert_eq!(self.next_destination, self.acked_destination);
        self.next_destination += len;
        self.acked_destination += len;
        self.identical = false;
        match self.runs.back_mut() {
            Some((run, _)) if run.length == 0 => {
                run.destination_start += len;
                Some(*run)
            }
            _ => None,
        }
    }

    /// Runs whose acknowledged length grew since the last checkpoint, at that
    /// length, to write to the log (so the log alone translates offsets, for
    /// group-offset sync and `kmirror log audit`). Closed, fully recorded runs
    /// are forgotten.
    pub fn checkpoint(&mut self) -> Vec<OffsetMapRun> {
        let mut out = Vec::new();
        for (run, recorded) in self.runs.iter_mut() {
            let acked = (self.acked_destination - run.destination_start).clamp(0, run.length);
            if acked > *recorded {
                out.push(OffsetMapRun {
                    length: acked,
                    ..*run
                });
                *recorded = acked;
            }
        }
        while self.runs.len() > 1 && self.runs[0].1 == self.runs[0].0.length {
            self.runs.pop_front();
        }
        out
    }

    /// Whether the partition's offsets are the same on both clusters so far.
    pub fn identical(&self) -> bool {
        self.identical
    }

    /// Whether the map is a single run starting at the same offset on both
    /// clusters: the partition's offsets are identical.
    pub fn offsets_identical(runs: &[OffsetMapRun]) -> bool {
        match runs {
            [] => true,
            [only] => only.source_start == only.destination_start,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: i64, d: i64, l: i64) -> OffsetMapRun {
        OffsetMapRun {
            source_start: s,
            destination_start: d,
            length: l,
        }
    }
    fn seg(s: i64, len: i64) -> Segment {
        Segment {
            source_start: s,
            len,
        }
    }

    #[test]
    fn a_contiguous_source_is_one_run_recorded_once() {
        let a = align(vec![], vec![], 0, 0).unwrap();
        let mut c = Cursor::new(&a, 0);
        let p = c.plan(&[seg(0, 10)], 10);
        assert_eq!(p.runs_to_record, vec![run(0, 0, 0)]);
        assert_eq!((p.destination_offset, p.records), (0, 10));
        let p = c.plan(&[seg(10, 5)], 15);
        assert!(p.runs_to_record.is_empty(), "extending needs no log write");
        assert_eq!(p.destination_offset, 10);
        assert!(c.checkpoint().is_empty(), "nothing acknowledged yet");
        c.ack(0, 10).unwrap();
        assert_eq!(c.checkpoint(), vec![run(0, 0, 10)]);
        assert!(
            c.checkpoint().is_empty(),
            "unchanged since the last checkpoint"
        );
        c.ack(10, 5).unwrap();
        assert_eq!(c.checkpoint(), vec![run(0, 0, 15)]);
    }

    #[test]
    fn gaps_open_runs_and_dropped_batches_only_advance_the_source() {
        let a = align(vec![], vec![], 0, 0).unwrap();
        let mut c = Cursor::new(&a, 100);
        c.plan(&[seg(100, 3)], 103);
        // A control batch at 103: nothing produced.
        let p = c.plan(&[], 104);
        assert_eq!((p.records, p.runs_to_record.len()), (0, 0));
        assert_eq!(c.next_source, 104);
        // A compacted batch 104..110 keeping 104, 105, 108.
        let p = c.plan(&[seg(104, 2), seg(108, 1)], 110);
        assert_eq!(p.runs_to_record, vec![run(104, 3, 0), run(108, 5, 0)]);
        assert_eq!((p.destination_offset, p.records), (3, 3));
        // Acks in two steps: closed runs get their final lengths, once.
        c.ack(0, 3).unwrap();
        c.ack(3, 1).unwrap();
        assert_eq!(c.checkpoint(), vec![run(100, 0, 3), run(104, 3, 1)]);
        c.ack(4, 2).unwrap();
        assert_eq!(c.checkpoint(), vec![run(104, 3, 2), run(108, 5, 1)]);
        assert!(c.checkpoint().is_empty());
    }

    #[test]
    fn align_derives_lengths_and_drops_runs_that_never_landed() {
        // Recorded: run A acked at 5, run B opened at dst 10, run C opened at
        // dst 12 but the destination ends at 11.
        let recorded = vec![run(0, 0, 5), run(20, 10, 0), run(40, 12, 0)];
        let a = align(recorded, vec![], 0, 11).unwrap();
        assert_eq!(a.runs, vec![run(0, 0, 10), run(20, 10, 1)]);
        assert_eq!(a.stale, vec![run(40, 12, 0)]);
        assert_eq!(a.corrected, vec![run(0, 0, 10), run(20, 10, 1)]);
        assert_eq!(a.next_source, Some(21));
        assert_eq!(a.next_destination, 11);
    }

    #[test]
    fn align_refuses_foreign_and_lost_data() {
        assert_eq!(
            align(vec![], vec![], 0, 7),
            Err(AlignError::NotEmpty { end: 7 })
        );
        assert!(
            align(vec![], vec![], 7, 7).is_ok(),
            "an emptied topic may start above 0"
        );
        assert_eq!(
            align(vec![run(0, 0, 9)], vec![], 0, 4),
            Err(AlignError::Truncated { end: 4, acked: 9 })
        );
        let mut c = Cursor::new(&align(vec![], vec![], 0, 0).unwrap(), 0);
        c.plan(&[seg(0, 2)], 2);
        assert_eq!(
            c.ack(1, 2),
            Err(AlignError::ForeignWrite {
                landed: 1,
                expected: 0
            })
        );
    }

    /// A takeover's fence marker (a hole) inside the divergent range: the
    /// repair records only the stretches around it, since holes must not
    /// overlap (the log refused the whole range, and the partition retried
    /// the repair until its attempts ran out).
    #[test]
    fn a_cut_over_a_recorded_hole_records_only_what_it_does_not_cover() {
        let runs = vec![run(0, 0, 10), run(10, 11, 2)];
        let mut a = align(runs, vec![hole(10, 1)], 0, 13).unwrap();
        assert_eq!(a.next_destination, 13);
        let d = cut_divergent(&mut a, 8);
        assert_eq!(d.destination, (8, 13));
        assert_eq!(d.holes, vec![hole(8, 2), hole(11, 2)]);
        assert_eq!(a.holes, vec![hole(8, 2), hole(10, 1), hole(11, 2)]);
        assert_eq!(
            uncovered(&[hole(2, 3), hole(7, 1)], 0, 10),
            vec![hole(0, 2), hole(5, 2), hole(8, 2)]
        );
        assert_eq!(uncovered(&[hole(0, 10)], 2, 8), vec![]);
    }

    #[test]
    fn a_truncated_source_cuts_the_map_and_the_next_run_follows_the_tail() {
        let mut a = align(vec![run(0, 0, 10), run(12, 10, 5)], vec![], 0, 15).unwrap();
        let d = cut_divergent(&mut a, 8);
        assert_eq!(d.source, (8, 17));
        assert_eq!(d.destination, (8, 15));
        assert_eq!(d.cut, Some(run(0, 0, 8)));
        assert_eq!(d.removed, vec![run(12, 10, 5)]);
        let mut c = Cursor::new(&a, 8);
        let p = c.plan(&[seg(8, 3)], 11);
        assert_eq!(
            p.runs_to_record,
            vec![run(8, 15, 0)],
            "new records after the kept tail"
        );
        assert!(!c.identical());
    }

    fn hole(d: i64, l: i64) -> OffsetMapHole {
        OffsetMapHole {
            destination_start: d,
            length: l,
        }
    }

    #[test]
    fn alignment_never_stretches_a_run_over_a_hole() {
        let mut a = align(vec![run(0, 0, 10), run(12, 10, 5)], vec![], 0, 15).unwrap();
        let d = cut_divergent(&mut a, 8);
        assert_eq!(d.holes, vec![hole(8, 7)]);
        // Restarted before the next run exists.
        let a = align(vec![run(0, 0, 8)], vec![hole(8, 7)], 0, 15).unwrap();
        assert_eq!(a.runs, vec![run(0, 0, 8)]);
        assert!(a.corrected.is_empty());
        assert_eq!((a.next_source, a.next_destination), (Some(8), 15));
        assert!(!Cursor::new(&a, 8).identical());
        // After the next run landed three records.
        let a = align(vec![run(0, 0, 8), run(8, 15, 0)], vec![hole(8, 7)], 0, 18).unwrap();
        assert_eq!(a.runs, vec![run(0, 0, 8), run(8, 15, 3)]);
        assert_eq!(a.corrected, vec![run(8, 15, 3)]);
        assert_eq!(a.next_source, Some(11));
        // Records after the hole that no run opened are not kmirror's.
        assert_eq!(
            align(vec![run(0, 0, 8)], vec![hole(8, 7)], 0, 17),
            Err(AlignError::AfterHole { from: 15, end: 17 })
        );
        // A destination that lost part of the hole lost records too.
        assert_eq!(
            align(vec![run(0, 0, 8)], vec![hole(8, 7)], 0, 12),
            Err(AlignError::Truncated { end: 12, acked: 15 })
        );
    }

    #[test]
    fn identical_offsets_are_reported() {
        let mut c = Cursor::new(&align(vec![], vec![], 0, 0).unwrap(), 0);
        c.plan(&[seg(0, 5)], 5);
        assert!(c.identical());
        c.plan(&[seg(7, 1)], 8);
        assert!(!c.identical(), "a gap ends identical offsets");
        let mut c = Cursor::new(&align(vec![], vec![], 0, 0).unwrap(), 3);
        c.plan(&[seg(3, 1)], 4);
        assert!(!c.identical(), "source 3 landed at 0");
        assert!(Cursor::offsets_identical(&[run(0, 0, 10)]));
        assert!(!Cursor::offsets_identical(&[run(0, 0, 10), run(11, 10, 1)]));
        assert!(!Cursor::offsets_identical(&[run(5, 0, 10)]));
    }

    #[test]
    fn a_run_opened_ahead_takes_the_first_record_without_a_log_write() {
        let mut c = Cursor::new(&align(vec![], vec![], 0, 0).unwrap(), 0);
        assert_eq!(c.open_ahead(), Some(run(0, 0, 0)));
        assert_eq!(c.open_ahead(), None, "opened once");
        let p = c.plan(&[seg(0, 3)], 3);
        assert!(p.runs_to_record.is_empty() && p.runs_to_remove.is_empty());
        assert!(c.identical());
        assert!(c.checkpoint().is_empty(), "nothing acknowledged yet");
        c.ack(0, 3).unwrap();
        assert_eq!(c.checkpoint(), vec![run(0, 0, 3)]);
        // A map whose last run takes the next record needs nothing ahead.
        let a = align(vec![run(0, 0, 3)], vec![], 0, 3).unwrap();
        assert_eq!(Cursor::new(&a, 3).open_ahead(), None);
        // One that cannot (records gone from the source) opens after it.
        let mut c = Cursor::new(&a, 10);
        assert_eq!(c.open_ahead(), Some(run(10, 3, 0)));
        c.plan(&[seg(10, 1)], 11);
        assert!(!c.identical());
    }

    #[test]
    fn a_run_opened_ahead_gives_way_to_the_run_a_gap_opens() {
        let mut c = Cursor::new(&align(vec![], vec![], 0, 0).unwrap(), 0);
        c.open_ahead();
        // A marker at 0, then records from 1: they open their own run at
        // destination 0, and the one ahead is removed in the same write.
        c.plan(&[], 1);
        let p = c.plan(&[seg(1, 2)], 3);
        assert_eq!(p.runs_to_record, vec![run(1, 0, 0)]);
        assert_eq!(p.runs_to_remove, vec![0]);
        assert!(!c.identical(), "source 1 landed at 0");
        c.ack(0, 2).unwrap();
        assert_eq!(c.checkpoint(), vec![run(1, 0, 2)]);
        // Recorded as planned, alignment finds the same map.
        let a = align(vec![run(1, 0, 2)], vec![], 0, 2).unwrap();
        assert_eq!(a.next_source, Some(3));
    }

    #[test]
    fn a_run_opened_ahead_moves_past_a_refence_marker() {
        let a = align(vec![run(0, 0, 3)], vec![], 0, 3).unwrap();
        let mut c = Cursor::new(&a, 5);
        assert_eq!(c.open_ahead(), Some(run(5, 3, 0)));
        assert_eq!(c.skip_destination(1), Some(run(5, 4, 0)));
        let p = c.plan(&[seg(5, 1)], 6);
        assert!(p.runs_to_record.is_empty());
        assert_eq!(p.destination_offset, 4);
        // Without one ahead, nothing moves.
        let mut c = Cursor::new(&a, 3);
        assert_eq!(c.skip_destination(1), None);
    }

    #[test]
    fn alignment_drops_a_run_opened_ahead_that_never_landed_and_keeps_one_that_did() {
        let a = align(vec![run(0, 0, 3), run(5, 3, 0)], vec![], 0, 3).unwrap();
        assert_eq!(a.stale, vec![run(5, 3, 0)]);
        assert_eq!(a.next_source, Some(3));
        let a = align(vec![run(0, 0, 3), run(5, 3, 0)], vec![], 0, 5).unwrap();
        assert_eq!(a.runs, vec![run(0, 0, 3), run(5, 3, 2)]);
        assert_eq!(a.next_source, Some(7));
    }
}
