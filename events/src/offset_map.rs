//! A partition's exact offset map, and translating source offsets through it.
//!
//! The map is what makes kmirror's offsets exact: runs of source offsets
//! that landed densely at destination offsets, plus holes — destination
//! ranges that belong to no source offset (records an unclean leader
//! election on the source took back, which the destination keeps because
//! Kafka cannot truncate a partition). Runs ascend on both clusters at once,
//! and runs and holes never overlap on the destination: that is what lets
//! alignment derive every landed length from the destination's end alone.
//!
//! The map only ever records what is known: a run's recorded length is an
//! acknowledged length, so it may lag the copy (checkpoints are periodic).
//! Translation therefore never answers beyond a run's recorded end.

use std::collections::BTreeMap;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use crate::record::{OffsetMapHole, OffsetMapRun};

/// The destination position for a source offset.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Translation {
    /// The source offset was mirrored to exactly this destination offset.
    Exact(i64),
    /// The source offset was never mirrored (compacted away on the source,
    /// an aborted transaction or a marker, or lost to retention); this is
    /// the destination offset of the next mirrored record, which is where a
    /// consumer positioned there resumes.
    InGap(i64),
    /// The source offset is past what the map records as mirrored (not
    /// copied yet, or copied but not yet checkpointed); this is the
    /// destination offset where the recorded copy ends. A consumer resumed
    /// here may re-read records, never skip one.
    AtEnd(i64),
    /// Nothing mirrored yet.
    Empty,
}

impl Translation {
    /// The destination offset to use for a consumer position, if any.
    pub fn destination_offset(self) -> Option<i64> {
        match self {
            Translation::Exact(o) | Translation::InGap(o) | Translation::AtEnd(o) => Some(o),
            Translation::Empty => None,
        }
    }
}

/// Why a change to the map was refused: it would break the invariants that
/// alignment and translation rely on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("invalid offset map run {0:?}")]
    InvalidRun(OffsetMapRun),
    #[error("invalid destination hole {0:?}")]
    InvalidHole(OffsetMapHole),
    #[error("offset map runs {0:?} and {1:?} would overlap")]
    RunsOverlap(OffsetMapRun, OffsetMapRun),
    #[error("offset map run {0:?} would overlap the destination hole {1:?}")]
    HoleOverlap(OffsetMapRun, OffsetMapHole),
    #[error("destination holes {0:?} and {1:?} would overlap")]
    HolesOverlap(OffsetMapHole, OffsetMapHole),
}

/// One partition's offset map: runs by source start, holes by destination
/// start.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct OffsetMap {
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    runs: OrdMap<i64, OffsetMapRun>,
    #[serde(deserialize_with = "crate::bounded::ord_map")]
    holes: OrdMap<i64, OffsetMapHole>,
}

impl OffsetMap {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.holes.is_empty()
    }

    /// Runs in source (and destination) order.
    pub fn runs(&self) -> impl DoubleEndedIterator<Item = &OffsetMapRun> + '_ {
        self.runs.values()
    }

    /// Holes in destination order.
    pub fn holes(&self) -> impl DoubleEndedIterator<Item = &OffsetMapHole> + '_ {
        self.holes.values()
    }

    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    pub fn hole_count(&self) -> usize {
        self.holes.len()
    }

    pub fn last_run(&self) -> Option<&OffsetMapRun> {
        self.runs.values().next_back()
    }

    pub fn put_run(&mut self, source_start: i64, run: Option<OffsetMapRun>) {
        match run {
            Some(r) => self.runs.insert(source_start, r),
            None => self.runs.remove(&source_start),
        };
    }

    pub fn put_hole(&mut self, destination_start: i64, hole: Option<OffsetMapHole>) {
        match hole {
            Some(h) => self.holes.insert(destination_start, h),
            None => self.holes.remove(&destination_start),
        };
    }

    /// One past the highest destination offset the map records as written
    /// (acknowledged run lengths and holes): a destination that ends below
    /// this lost records kmirror had mirrored.
    pub fn recorded_destination_end(&self) -> i64 {
        let runs = self
            .runs
            .values()
            .filter(|r| r.length > 0)
            .map(OffsetMapRun::destination_end);
        let holes = self.holes.values().map(OffsetMapHole::destination_end);
        runs.chain(holes).max().unwrap_or(0)
    }

    /// Whether a run recorded up to `destination_end` is followed, on the
    /// destination, directly by the next run (through any holes): its
    /// recorded length is then final, and source offsets between it and the
    /// next run were never mirrored.
    fn closes_at(&self, destination_end: i64, next: &OffsetMapRun) -> bool {
        self.past_holes(destination_end) == next.destination_start
    }

    /// The first destination offset at or after `at` that no chain of holes
    /// starting at `at` covers: where the record after a run closed by holes
    /// lands.
    fn past_holes(&self, mut at: i64) -> i64 {
        while let Some(h) = self.holes.get(&at) {
            at = h.destination_end();
        }
        at
    }

    /// Translates `source_offset`, in O(log runs): group-offset sync calls
    /// this per group partition per tick, and a transactional or compacted
    /// source has a run per gap.
    pub fn translate(&self, source_offset: i64) -> Translation {
        let before = self
            .runs
            .range(..=source_offset)
            .next_back()
            .map(|(_, r)| r);
        let after = self
            .runs
            .range(source_offset.saturating_add(1)..)
            .next()
            .map(|(_, r)| r);
        match (before, after) {
            (None, None) => Translation::Empty,
            (None, Some(next)) => Translation::InGap(next.destination_start),
            (Some(r), _) if source_offset < r.source_end() => {
                Translation::Exact(r.destination_start + (source_offset - r.source_start))
            }
            (Some(r), Some(next)) if self.closes_at(r.destination_end(), next) => {
                Translation::InGap(next.destination_start)
            }
            // A run closed by a hole is final: what comes next lands after
            // the hole, never on the records in it.
            (Some(r), _) => Translation::AtEnd(self.past_holes(r.destination_end())),
        }
    }

    /// Checks the map after upserting `upsert` runs, removing the runs
    /// starting at `remove` and adding `holes`, without building it: only
    /// the neighbourhood of the changed runs is read, so a checkpoint costs
    /// O(changed · log runs) however long the map has grown.
    pub fn check_change(
        &self,
        upsert: &[OffsetMapRun],
        remove: &[i64],
        holes: &[OffsetMapHole],
    ) -> Result<(), MapError> {
        for r in upsert {
            if r.length < 0 || r.source_start < 0 || r.destination_start < 0 {
                return Err(MapError::InvalidRun(*r));
            }
        }
        for h in holes {
            if h.length <= 0 || h.destination_start < 0 {
                return Err(MapError::InvalidHole(*h));
            }
        }
        let mut overlay: BTreeMap<i64, Option<OffsetMapRun>> = BTreeMap::new();
        for s in remove {
            overlay.insert(*s, None);
        }
        for r in upsert {
            overlay.insert(r.source_start, Some(*r));
        }
        let run_at = |s: &i64| match overlay.get(s) {
            Some(r) => *r,
            None => self.runs.get(s).copied(),
        };
        // The runs that changed, with one surviving neighbour on each side.
        if let (Some(lo), Some(hi)) = (overlay.keys().next(), overlay.keys().next_back()) {
            let prev = self.runs.range(..*lo).rev().find_map(|(s, _)| run_at(s));
            let next = self.runs.range(hi + 1..).find_map(|(s, _)| run_at(s));
            let mut window: BTreeMap<i64, OffsetMapRun> =
                self.runs.range(*lo..=*hi).map(|(s, r)| (*s, *r)).collect();
            for (s, r) in &overlay {
                match r {
                    Some(r) => window.insert(*s, *r),
                    None => window.remove(s),
                };
            }
            let seq: Vec<OffsetMapRun> = prev
                .into_iter()
                .chain(window.into_values())
                .chain(next)
                .collect();
            check_ascending(&seq)?;
        }
        // A run must not start or land inside a stored hole.
        for r in upsert {
            let (r0, r1) = run_span(r);
            if let Some((_, h)) = self.holes.range(..r1).next_back() {
                if h.destination_end() > r0 {
                    return Err(MapError::HoleOverlap(*r, *h));
                }
            }
        }
        if holes.is_empty() {
            return Ok(());
        }
        // Holes come only from unclean-election repairs: a full walk of the
        // changed map is cheap enough there.
        let runs: Vec<OffsetMapRun> = self
            .runs
            .keys()
            .chain(overlay.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter_map(run_at)
            .collect();
        let existing: Vec<OffsetMapHole> = self.holes.values().copied().collect();
        check_holes(&runs, &existing, holes)
    }

    /// Every invariant at once, for `kmirror log verify`: runs ascend and
    /// never overlap on either cluster, and no hole overlaps a run or
    /// another hole.
    pub fn check(&self) -> Result<(), MapError> {
        let runs: Vec<OffsetMapRun> = self.runs.values().copied().collect();
        if let Some(r) = runs
            .iter()
            .find(|r| r.length < 0 || r.source_start < 0 || r.destination_start < 0)
        {
            return Err(MapError::InvalidRun(*r));
        }
        check_ascending(&runs)?;
        let holes: Vec<OffsetMapHole> = self.holes.values().copied().collect();
        check_holes(&runs, &[], &holes)
    }
}

/// Consecutive runs (in source order) ascend on both clusters.
fn check_ascending(runs: &[OffsetMapRun]) -> Result<(), MapError> {
    for w in runs.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.source_end() > b.source_start || a.destination_end() > b.destination_start {
            return Err(MapError::RunsOverlap(a, b));
        }
    }
    Ok(())
}

/// The destination range a run claims: its records, or, while it is still
/// empty, the offset its first record will get.
fn run_span(r: &OffsetMapRun) -> (i64, i64) {
    (r.destination_start, r.destination_start + r.length.max(1))
}

/// `added` holes overlap no run and no other hole on the destination.
fn check_holes(
    runs: &[OffsetMapRun],
    existing: &[OffsetMapHole],
    added: &[OffsetMapHole],
) -> Result<(), MapError> {
    let overlaps = |a0: i64, a1: i64, b0: i64, b1: i64| a0 < b1 && b0 < a1;
    for (i, h) in added.iter().enumerate() {
        let (h0, h1) = (h.destination_start, h.destination_end());
        if let Some(r) = runs.iter().find(|r| {
            let (r0, r1) = run_span(r);
            overlaps(h0, h1, r0, r1)
        }) {
            return Err(MapError::HoleOverlap(*r, *h));
        }
        if let Some(o) = existing.iter().chain(&added[..i]).find(|o| {
            o.destination_start != h.destination_start
                && overlaps(h0, h1, o.destination_start, o.destination_end())
        }) {
            return Err(MapError::HolesOverlap(*o, *h));
        }
    }
    Ok(())
}

/// Translates through a bare list of runs (sorted, non-overlapping, no
/// holes), for callers that hold runs rather than a map.
pub fn translate(runs: &[OffsetMapRun], source_offset: i64) -> Translation {
    let mut map = OffsetMap::default();
    for r in runs {
        map.put_run(r.source_start, Some(*r));
    }
    map.translate(source_offset)
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

    fn hole(d: i64, l: i64) -> OffsetMapHole {
        OffsetMapHole {
            destination_start: d,
            length: l,
        }
    }

    fn map(runs: &[OffsetMapRun], holes: &[OffsetMapHole]) -> OffsetMap {
        let mut m = OffsetMap::default();
        for r in runs {
            m.put_run(r.source_start, Some(*r));
        }
        for h in holes {
            m.put_hole(h.destination_start, Some(*h));
        }
        m
    }

    #[test]
    fn translates_exact_gap_and_end() {
        let runs = [run(5, 0, 5), run(20, 5, 10)];
        assert_eq!(translate(&runs, 0), Translation::InGap(0));
        assert_eq!(translate(&runs, 5), Translation::Exact(0));
        assert_eq!(translate(&runs, 9), Translation::Exact(4));
        assert_eq!(translate(&runs, 10), Translation::InGap(5));
        assert_eq!(translate(&runs, 19), Translation::InGap(5));
        assert_eq!(translate(&runs, 29), Translation::Exact(14));
        assert_eq!(translate(&runs, 30), Translation::AtEnd(15));
        assert_eq!(translate(&[], 3), Translation::Empty);
    }

    #[test]
    fn a_run_recorded_short_of_its_successor_never_answers_past_its_recorded_end() {
        // Run A is recorded at 4 of its 10 records (the checkpoint lags);
        // run B was opened at destination 10 before its produce. Source 7
        // landed at destination 7, but the log does not know that yet: the
        // answer must not skip to B.
        let m = map(&[run(0, 0, 4), run(12, 10, 0)], &[]);
        assert_eq!(m.translate(3), Translation::Exact(3));
        assert_eq!(m.translate(7), Translation::AtEnd(4));
        assert_eq!(m.translate(11), Translation::AtEnd(4));
        // Once A's final length is recorded, 10 and 11 are a real gap.
        let m = map(&[run(0, 0, 10), run(12, 10, 0)], &[]);
        assert_eq!(m.translate(11), Translation::InGap(10));
    }

    #[test]
    fn a_run_closed_by_a_hole_is_final() {
        // The cut run ends at destination 8, the divergent records sit at
        // 8..15, the next run starts after them.
        let m = map(&[run(0, 0, 8), run(8, 15, 3)], &[hole(8, 7)]);
        assert_eq!(m.translate(7), Translation::Exact(7));
        assert_eq!(m.translate(8), Translation::Exact(15));
        let m = map(&[run(0, 0, 8), run(10, 15, 3)], &[hole(8, 7)]);
        assert_eq!(m.translate(9), Translation::InGap(15));
        assert_eq!(m.recorded_destination_end(), 18);
        // Before any record after the hole is mirrored, the next lands after it.
        let m = map(&[run(0, 0, 8)], &[hole(8, 7)]);
        assert_eq!(m.translate(8), Translation::AtEnd(15));
    }

    #[test]
    fn changes_are_checked_against_their_neighbours() {
        let m = map(&[run(0, 0, 10), run(20, 10, 5), run(40, 15, 0)], &[]);
        assert_eq!(m.check_change(&[run(20, 10, 5)], &[], &[]), Ok(()));
        assert_eq!(
            m.check_change(&[run(20, 10, 6)], &[], &[]),
            Err(MapError::RunsOverlap(run(20, 10, 6), run(40, 15, 0)))
        );
        assert_eq!(m.check_change(&[run(20, 10, 6)], &[40], &[]), Ok(()));
        assert_eq!(
            m.check_change(&[run(5, 10, 1)], &[], &[]),
            Err(MapError::RunsOverlap(run(0, 0, 10), run(5, 10, 1)))
        );
        assert_eq!(
            m.check_change(&[run(1, 0, -1)], &[], &[]),
            Err(MapError::InvalidRun(run(1, 0, -1)))
        );
        assert_eq!(
            m.check_change(&[], &[], &[hole(12, 2)]),
            Err(MapError::HoleOverlap(run(20, 10, 5), hole(12, 2)))
        );
        assert_eq!(
            m.check_change(&[], &[], &[hole(15, 2)]),
            Err(MapError::HoleOverlap(run(40, 15, 0), hole(15, 2))),
            "an opened run claims the offset its first record gets"
        );
        assert_eq!(m.check_change(&[], &[40], &[hole(15, 2)]), Ok(()));
        let m = map(&[run(0, 0, 10)], &[hole(10, 5)]);
        assert!(m.check().is_ok());
        assert_eq!(
            m.check_change(&[], &[], &[hole(14, 5)]),
            Err(MapError::HolesOverlap(hole(10, 5), hole(14, 5)))
        );
        assert!(map(&[run(0, 0, 10)], &[hole(9, 5)]).check().is_err());
        assert_eq!(
            m.check_change(&[run(20, 12, 0)], &[], &[]),
            Err(MapError::HoleOverlap(run(20, 12, 0), hole(10, 5)))
        );
        assert_eq!(m.check_change(&[run(20, 15, 0)], &[], &[]), Ok(()));
    }
}
