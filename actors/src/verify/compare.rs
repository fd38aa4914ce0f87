//! The pure half of `kmirror verify`: which source records the mirror
//! forwards, where the offset map says each landed, and whether the record
//! there is the same. No I/O: the caller reads both clusters and hands the
//! batches in, so every verdict is unit-tested without a broker.
//!
//! What counts as a difference, and what does not: a source record is
//! compared only where the map records it exactly (`Translation::Exact`);
//! source offsets in gaps, past the recorded copy, or with no record any
//! more (compacted, markers, aborted data — what the pump drops) are
//! *skipped* and counted, never reported. Destination holes are never
//! looked up, since no source offset translates into one.

use std::collections::BTreeMap;

use kmirror_events::{OffsetMap, Translation, VerifyDifference};
use serde::{Deserialize, Serialize};

use crate::kafka::batch::{
    classify, decode_records, AbortedTransactions, BatchAction, DropReason, Record, RecordBatch,
    TimestampType,
};
use crate::kafka::error::Result;

/// One committed record and the offset it sits at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    pub offset: i64,
    /// Of the batch it came in: a destination topic with
    /// `message.timestamp.type=LogAppendTime` stamps its own times.
    pub timestamp_type: TimestampType,
    pub record: Record,
}

/// The counts of one partition's comparison so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Source records looked up on the destination.
    pub compared: u64,
    pub equal: u64,
    /// Compared records that differ (`compared - equal`).
    pub differences: u64,
    /// Source offsets the map does not translate exactly (gaps, markers,
    /// aborted data, not yet checkpointed): not expected on the
    /// destination, so neither compared nor a difference.
    pub skipped: u64,
    pub first_difference: Option<VerifyDifference>,
}

impl Tally {
    fn differ(&mut self, d: VerifyDifference) {
        self.differences += 1;
        if self.first_difference.is_none() {
            self.first_difference = Some(d);
        }
    }

    pub fn add(&mut self, other: Tally) {
        self.compared += other.compared;
        self.equal += other.equal;
        self.differences += other.differences;
        self.skipped += other.skipped;
        if self.first_difference.is_none() {
            self.first_difference = other.first_difference;
        }
    }
}

/// The records of `batches` in `[from, to)` that the mirror forwards: what
/// the pump's classification keeps (no markers, no aborted transactions, no
/// empty batches), decoded by kmirror's own codec.
pub fn forwarded_records(
    batches: &[RecordBatch],
    aborted_transactions: &[(i64, i64)],
    from: i64,
    to: i64,
) -> Result<Vec<Located>> {
    let mut aborted = AbortedTransactions::new(aborted_transactions.to_vec());
    let mut out = Vec::new();
    for b in batches {
        let is_aborted = aborted.is_aborted(b)?;
        // `from` 0: verify keeps every record and filters by offset below.
        if let BatchAction::Drop(DropReason::Control | DropReason::Aborted | DropReason::Empty) =
            classify(b, is_aborted, usize::MAX, 0)
        {
            continue;
        }
        let decoded = decode_records(b)?;
        for r in decoded.records {
            let offset = b.base_offset() + r.offset_delta as i64;
            if (from..to).contains(&offset) {
                out.push(Located {
                    offset,
                    timestamp_type: b.timestamp_type(),
                    record: r,
                });
            }
        }
    }
    Ok(out)
}

/// Where each source record landed, or `None` when the map does not
/// record it exactly (skipped).
pub fn destination_offsets(map: &OffsetMap, source: &[Located]) -> Vec<Option<i64>> {
    source
        .iter()
        .map(|s| match map.translate(s.offset) {
            Translation::Exact(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// Compares `source` with the destination records by offset, through the
/// map. `destination_log_start`: records translated below it were deleted
/// on the destination, a difference of their own.
pub fn compare(
    map: &OffsetMap,
    destination_log_start: i64,
    source: &[Located],
    destination: &BTreeMap<i64, Located>,
) -> Tally {
    let mut tally = Tally::default();
    for (s, d) in source.iter().zip(destination_offsets(map, source)) {
        let Some(d) = d else {
            tally.skipped += 1;
            continue;
        };
        tally.compared += 1;
        let difference = |field: &str, detail: String| VerifyDifference {
            source_offset: s.offset,
            destination_offset: d,
            field: field.to_string(),
            detail,
        };
        if d < destination_log_start {
            tally.differ(difference(
                "lost",
                format!(
                    "destination lost records: source offset {} → destination offset {d} is below the destination log start {destination_log_start}",
                    s.offset
                ),
            ));
            continue;
        }
        let Some(dst) = destination.get(&d) else {
            tally.differ(difference(
                "missing",
                format!(
                    "source offset {} → destination offset {d}: the destination has no record there",
                    s.offset
                ),
            ));
            continue;
        };
        match first_field_differing(s, dst) {
            None => tally.equal += 1,
            Some((field, detail)) => tally.differ(difference(field, detail)),
        }
    }
    tally
}

/// The first field in which two records differ, and how. The timestamp is
/// compared where the destination keeps the producer's CreateTime: a source
/// LogAppendTime record is mirrored with its append time as CreateTime, and
/// a LogAppendTime destination topic stamps times of its own.
fn first_field_differing(s: &Located, d: &Located) -> Option<(&'static str, String)> {
    let (a, b) = (&s.record, &d.record);
    if a.key != b.key {
        return Some(("key", format!("{} ≠ {}", show(&a.key), show(&b.key))));
    }
    if a.value != b.value {
        return Some(("value", format!("{} ≠ {}", show(&a.value), show(&b.value))));
    }
    if a.headers != b.headers {
        let list = |h: &[(bytes::Bytes, Option<bytes::Bytes>)]| {
            h.iter()
                .map(|(k, v)| format!("{}={}", show(&Some(k.clone())), show(v)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Some((
            "headers",
            format!("[{}] ≠ [{}]", list(&a.headers), list(&b.headers)),
        ));
    }
    if d.timestamp_type == TimestampType::CreateTime && a.timestamp != b.timestamp {
        return Some(("timestamp", format!("{} ≠ {}", a.timestamp, b.timestamp)));
    }
    None
}

/// A field for a message: text when it is printable UTF-8 (cut at 64
/// characters), else its length.
fn show(b: &Option<bytes::Bytes>) -> String {
    match b {
        None => "null".into(),
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) if !s.chars().any(char::is_control) => {
                let cut: String = s.chars().take(64).collect();
                if cut.len() < s.len() {
                    format!("{cut:?}…")
                } else {
                    format!("{cut:?}")
                }
            }
            _ => format!("<{} bytes>", b.len()),
        },
    }
}

/// `n` distinct source offsets of `[from, to)` that the map records
/// exactly, drawn with a generator seeded by `seed`: the same seed picks
/// the same offsets, so a failed sample can be re-run. Sorted.
pub fn sample_offsets(map: &OffsetMap, from: i64, to: i64, n: u64, seed: u64) -> Vec<i64> {
    let spans: Vec<(i64, i64)> = map
        .runs()
        .map(|r| (r.source_start.max(from), r.source_end().min(to)))
        .filter(|(a, b)| a < b)
        .collect();
    let total: i64 = spans.iter().map(|(a, b)| b - a).sum();
    if total <= 0 || n == 0 {
        return Vec::new();
    }
    let mut rng = SplitMix64(seed);
    let mut picked = std::collections::BTreeSet::new();
    // Compared unsigned: a sample of 2^63 or more cast to i64 went
    // negative and took the draw below, which could never pick that many.
    if n >= total as u64 {
        picked.extend(spans.iter().flat_map(|&(a, b)| a..b));
    } else {
        while (picked.len() as u64) < n {
            let mut k = (rng.next() % total as u64) as i64;
            for &(a, b) in &spans {
                if k < b - a {
                    picked.insert(a + k);
                    break;
                }
                k -= b - a;
            }
        }
    }
    picked.into_iter().collect()
}

/// SplitMix64: tiny, seedable, and the same on every platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A partition's own seed from the request's: the partitions of one
/// request sample different offsets, the same ones each time.
pub fn partition_seed(seed: u64, topic: &str, partition: i32) -> u64 {
    let mut rng = SplitMix64(seed);
    let mut h = rng.next();
    for b in topic.bytes().chain(partition.to_be_bytes()) {
        h = SplitMix64(h ^ b as u64).next();
    }
    h
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kmirror_events::{OffsetMapHole, OffsetMapRun};

    use super::*;
    use crate::kafka::batch::BatchBuilder;

    fn rec(i: i64) -> Record {
        Record {
            offset_delta: 0,
            timestamp: 1_000 + i,
            key: Some(Bytes::from(format!("k{i}"))),
            value: (i % 5 != 0).then(|| Bytes::from(format!("v{i}"))),
            headers: vec![
                (Bytes::from_static(b"h"), Some(Bytes::from(format!("{i}")))),
                (Bytes::from_static(b"h"), None),
            ],
        }
    }

    fn at(offset: i64, record: Record) -> Located {
        Located {
            offset,
            timestamp_type: TimestampType::CreateTime,
            record,
        }
    }

    fn run(source_start: i64, destination_start: i64, length: i64) -> OffsetMapRun {
        OffsetMapRun {
            source_start,
            destination_start,
            length,
        }
    }

    fn map(runs: &[OffsetMapRun]) -> OffsetMap {
        let mut m = OffsetMap::default();
        for r in runs {
            m.put_run(r.source_start, Some(*r));
        }
        m
    }

    /// Source 0..10 landed at 0..10; source 20..30 (after a gap) at 10..20.
    fn mirrored() -> (OffsetMap, Vec<Located>, BTreeMap<i64, Located>) {
        let m = map(&[run(0, 0, 10), run(20, 10, 10)]);
        let source: Vec<Located> = (0..10).chain(20..30).map(|i| at(i, rec(i))).collect();
        let dest = source
            .iter()
            .map(|s| {
                let d = match m.translate(s.offset) {
                    Translation::Exact(d) => d,
                    t => panic!("{t:?}"),
                };
                (d, at(d, s.record.clone()))
            })
            .collect();
        (m, source, dest)
    }

    #[test]
    fn an_exact_copy_is_equal_across_a_gap() {
        // Given a copy that skipped source 10..20 (a gap)
        let (m, source, dest) = mirrored();
        // When compared
        let t = compare(&m, 0, &source, &dest);
        // Then all 20 records are equal and nothing is a difference
        assert_eq!((t.compared, t.equal, t.differences), (20, 20, 0));
        assert_eq!(t.first_difference, None);
    }

    #[test]
    fn a_differing_header_names_both_offsets_and_the_field() {
        // Given a copy whose record at destination 12 (source 22) lost its
        // duplicate header key
        let (m, source, mut dest) = mirrored();
        dest.get_mut(&12).unwrap().record.headers.pop();
        // When compared
        let t = compare(&m, 0, &source, &dest);
        // Then the first difference is there, on the headers
        let d = t.first_difference.unwrap();
        assert_eq!((d.source_offset, d.destination_offset), (22, 12));
        assert_eq!(d.field, "headers");
        assert_eq!(t.differences, 1);
    }

    #[test]
    fn null_and_empty_values_differ_and_timestamps_count_only_as_create_time() {
        let (m, source, mut dest) = mirrored();
        // source 5 has a null value; an empty one is not the same
        dest.get_mut(&5).unwrap().record.value = Some(Bytes::new());
        let t = compare(&m, 0, &source, &dest);
        assert_eq!(t.first_difference.unwrap().field, "value");

        let (m, source, mut dest) = mirrored();
        dest.get_mut(&3).unwrap().record.timestamp += 1;
        let t = compare(&m, 0, &source, &dest);
        assert_eq!(t.first_difference.unwrap().field, "timestamp");
        // A LogAppendTime destination stamps its own times: not a difference.
        dest.get_mut(&3).unwrap().timestamp_type = TimestampType::LogAppendTime;
        assert_eq!(compare(&m, 0, &source, &dest).differences, 0);
    }

    #[test]
    fn records_below_the_destination_log_start_are_lost() {
        // Given a destination whose records below 7 were deleted
        let (m, source, mut dest) = mirrored();
        dest.retain(|d, _| *d >= 7);
        // When compared
        let t = compare(&m, 7, &source, &dest);
        // Then the first source record is reported lost, with both offsets
        let d = t.first_difference.unwrap();
        assert_eq!((d.source_offset, d.destination_offset), (0, 0));
        assert_eq!(d.field, "lost");
        assert!(
            d.detail.contains(
                "source offset 0 → destination offset 0 is below the destination log start 7"
            ),
            "{}",
            d.detail
        );
        assert_eq!((t.differences, t.equal), (7, 13));
    }

    #[test]
    fn a_record_missing_at_its_destination_offset_is_a_difference() {
        let (m, source, mut dest) = mirrored();
        dest.remove(&15);
        let d = compare(&m, 0, &source, &dest).first_difference.unwrap();
        assert_eq!(
            (d.source_offset, d.destination_offset, d.field.as_str()),
            (25, 15, "missing")
        );
    }

    #[test]
    fn offsets_not_recorded_exactly_are_skipped_not_differences() {
        // Given source records in the gap, past the recorded run, and a
        // destination hole (a divergent tail) between the runs
        let mut m = map(&[run(0, 0, 10), run(20, 13, 5)]);
        m.put_hole(
            10,
            Some(OffsetMapHole {
                destination_start: 10,
                length: 3,
            }),
        );
        let source: Vec<Located> = (0..30).map(|i| at(i, rec(i))).collect();
        let dest: BTreeMap<i64, Located> = (0..10)
            .map(|i| (i, at(i, rec(i))))
            .chain((20..25).map(|i| (i - 7, at(i - 7, rec(i)))))
            .collect();
        // When compared
        let t = compare(&m, 0, &source, &dest);
        // Then 15 are equal, the 15 others (gap 10..20, unrecorded 25..30)
        // skipped
        assert_eq!(
            (t.compared, t.equal, t.skipped, t.differences),
            (15, 15, 15, 0)
        );
    }

    #[test]
    fn markers_aborted_and_compacted_records_are_not_forwarded() {
        // Given a data batch, an aborted transactional batch and its marker,
        // and a compacted batch missing offset 7
        let data = BatchBuilder {
            base_offset: 0,
            ..BatchBuilder::new(
                (0..3)
                    .map(|i| Record {
                        offset_delta: i,
                        ..rec(i as i64)
                    })
                    .collect(),
            )
        };
        let aborted = BatchBuilder {
            base_offset: 3,
            transactional: true,
            producer: (9, 0, 0),
            ..BatchBuilder::new(
                (0..2)
                    .map(|i| Record {
                        offset_delta: i,
                        ..rec(3 + i as i64)
                    })
                    .collect(),
            )
        };
        let abort_marker = BatchBuilder {
            base_offset: 5,
            transactional: true,
            control: true,
            producer: (9, 0, 2),
            ..BatchBuilder::new(vec![Record {
                offset_delta: 0,
                timestamp: 1,
                key: Some(Bytes::from_static(&[0, 0, 0, 0])),
                value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
                headers: vec![],
            }])
        };
        let compacted = BatchBuilder {
            base_offset: 6,
            last_offset_delta: Some(2),
            ..BatchBuilder::new(
                [0, 2]
                    .into_iter()
                    .map(|d| Record {
                        offset_delta: d,
                        ..rec(6 + d as i64)
                    })
                    .collect(),
            )
        };
        let batches: Vec<RecordBatch> = [data, aborted, abort_marker, compacted]
            .iter()
            .map(|b| b.build().unwrap())
            .collect();
        // When the forwarded records of [1, 9) are taken
        let out = forwarded_records(&batches, &[(9, 3)], 1, 9).unwrap();
        // Then only the committed data records in range remain
        let offsets: Vec<i64> = out.iter().map(|l| l.offset).collect();
        assert_eq!(offsets, vec![1, 2, 6, 8]);
        assert_eq!(out[3].record.key, rec(8).key);
    }

    #[test]
    fn a_seeded_sample_is_repeatable_and_inside_the_runs() {
        let m = map(&[run(0, 0, 100), run(500, 100, 100)]);
        let a = sample_offsets(&m, 0, 1_000, 20, 7);
        assert_eq!(a, sample_offsets(&m, 0, 1_000, 20, 7));
        assert_ne!(a, sample_offsets(&m, 0, 1_000, 20, 8));
        assert_eq!(a.len(), 20);
        assert!(
            a.iter()
                .all(|o| (0..100).contains(o) || (500..600).contains(o)),
            "{a:?}"
        );
        // Asking for more than there is takes everything recorded in range.
        assert_eq!(sample_offsets(&m, 90, 510, 1_000, 1).len(), 20);
        assert_eq!(sample_offsets(&m, 90, 510, u64::MAX, 1).len(), 20);
        assert_eq!(sample_offsets(&m, 90, 510, 1 << 63, 1).len(), 20);
        assert_ne!(partition_seed(1, "t", 0), partition_seed(1, "t", 1));
    }
}
