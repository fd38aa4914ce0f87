//! Translating source offsets through the exact run-length offset map.

use serde::{Deserialize, Serialize};

use crate::record::OffsetMapRun;

/// The destination position for a source offset.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Translation {
    /// The source offset was mirrored to exactly this destination offset.
    Exact(i64),
    /// The source offset was never mirrored (compacted away on the source,
    /// or lost to retention); this is the destination offset of the next
    /// mirrored record, which is where a consumer positioned there resumes.
    InGap(i64),
    /// The source offset is at or past the end of what we mirrored; this is
    /// the destination offset the next mirrored record will get.
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

/// Translates `source_offset` through `runs`, which must be sorted by
/// `source_start` and non-overlapping (as `decide` guarantees).
///
/// Pure and allocation-free so group-offset sync can call it per partition
/// per tick.
pub fn translate(runs: &[OffsetMapRun], source_offset: i64) -> Translation {
    if runs.is_empty() {
        return Translation::Empty;
    }
    // Index of the first run starting after source_offset.
    let idx = runs.partition_point(|r| r.source_start <= source_offset);
    if idx > 0 {
        let r = &runs[idx - 1];
        if source_offset < r.source_end() {
            return Translation::Exact(r.destination_start + (source_offset - r.source_start));
        }
    }
    match runs.get(idx) {
        Some(next) => Translation::InGap(next.destination_start),
        None => Translation::AtEnd(runs[runs.len() - 1].destination_end()),
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
}
