//! What the destination batches above the recorded map say: where the
//! fence markers that end the log begin, and whether kmirror's own batches
//! below them follow on from each other by producer sequence.
//!
//! Alignment stretches the last run of the map over kmirror's unrecorded
//! batches above it, as the next source records in order. That holds only
//! while the broker deduplicates kmirror's retries, and a broker forgets a
//! producer: `producer.id.expiration.ms` is measured from the batches'
//! *record* timestamps, which a mirror keeps, so a backlog older than the
//! expiry loses its producer state at every check however busy the copy
//! is. A retry then lands a second time, and a batch may be taken in place
//! of a lost one before it. Stretched over such a log, the map would pair
//! later source records with copies of earlier ones and never copy them.
//! The producer sequence tells: without the broker's state, nothing else
//! makes kmirror's own batches skip or repeat a sequence.

use crate::kafka::batch::RecordBatch;
use crate::kafka::fence::EXHAUSTED_EPOCH;

/// Where the run of control batches of `producer` that ends the log at
/// `end` begins, if the log ends with one. A marker at an exhausted epoch
/// belongs to the run whatever its producer id: the fence that made the
/// coordinator rotate the partition's id to `producer` left it
/// (`fence::acquire`).
pub(super) fn trailing_markers(batches: &[RecordBatch], producer: i64, end: i64) -> Option<i64> {
    let mut at = end;
    for b in batches.iter().rev() {
        let ours = b.producer_id() == producer || b.producer_epoch() >= EXHAUSTED_EPOCH;
        if b.next_offset() != at || !b.is_control() || !ours {
            break;
        }
        at = b.base_offset();
    }
    (at < end).then_some(at)
}

/// The offset of the first of the batches in `[from, to)` that does not
/// follow on by sequence from the batch before it (the last one below
/// `from` too), where both are data batches of one producer id and epoch.
/// A batch after a marker, another writer's batch, or a new epoch starts
/// afresh: no sequence of its own before it is known.
pub(super) fn out_of_sequence(batches: &[RecordBatch], from: i64, to: i64) -> Option<i64> {
    let mut before = batches.iter().rfind(|b| b.base_offset() < from);
    for b in batches
        .iter()
        .filter(|b| b.base_offset() >= from && b.base_offset() < to)
    {
        let chained = before.filter(|p| {
            !p.is_control()
                && !b.is_control()
                && p.producer_id() == b.producer_id()
                && p.producer_epoch() == b.producer_epoch()
        });
        if chained.is_some_and(|p| b.base_sequence() != next_sequence(p)) {
            return Some(b.base_offset());
        }
        before = Some(b);
    }
    None
}

/// The sequence the producer's next batch after `b` carries: Kafka's
/// `lastSequence + 1`, wrapping past `i32::MAX` to 0 as the producer does.
fn next_sequence(b: &RecordBatch) -> i32 {
    let last = b.base_sequence() as i64 + b.last_offset_delta() as i64;
    ((last + 1) % (i32::MAX as i64 + 1)) as i32
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::kafka::batch::{BatchBuilder, Record};

    /// `records` records of producer `(id, epoch)` at `base_offset`, the
    /// first with sequence `sequence`.
    fn data(base_offset: i64, (id, epoch): (i64, i16), sequence: i32, records: i32) -> RecordBatch {
        let records = (0..records)
            .map(|i| Record {
                offset_delta: i,
                timestamp: 0,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: vec![],
            })
            .collect();
        BatchBuilder {
            base_offset,
            producer: (id, epoch, sequence),
            ..BatchBuilder::new(records)
        }
        .build()
        .unwrap()
    }

    fn marker(base_offset: i64, (id, epoch): (i64, i16)) -> RecordBatch {
        let record = Record {
            offset_delta: 0,
            timestamp: 0,
            key: Some(Bytes::from_static(&[0, 0, 0, 0])),
            value: None,
            headers: vec![],
        };
        BatchBuilder {
            base_offset,
            transactional: true,
            control: true,
            producer: (id, epoch, -1),
            ..BatchBuilder::new(vec![record])
        }
        .build()
        .unwrap()
    }

    #[test]
    fn batches_in_sequence_are_the_next_records() {
        let log = [
            data(0, (7, 0), 0, 2),
            data(2, (7, 0), 2, 3),
            data(5, (7, 0), 5, 1),
        ];
        assert_eq!(out_of_sequence(&log, 2, 6), None);
        assert_eq!(out_of_sequence(&log, 0, 6), None);
    }

    /// A retry taken twice: the repeat is where the log stops being the
    /// copy in order, whatever follows it (here the retries of the batches
    /// that were in flight behind it, in sequence after the repeat).
    #[test]
    fn a_repeated_batch_is_out_of_sequence() {
        let log = [
            data(0, (7, 0), 0, 2),
            data(2, (7, 0), 2, 2),
            data(4, (7, 0), 4, 2),
            data(6, (7, 0), 2, 2),
            data(8, (7, 0), 4, 2),
        ];
        assert_eq!(out_of_sequence(&log, 2, 10), Some(6));
        // The repeat of the batch just below the recorded end.
        assert_eq!(out_of_sequence(&log[2..4], 6, 8), Some(6));
    }

    /// A batch taken in place of a lost one before it.
    #[test]
    fn a_skipped_sequence_is_out_of_sequence() {
        let log = [data(0, (7, 0), 0, 2), data(2, (7, 0), 4, 2)];
        assert_eq!(out_of_sequence(&log, 2, 4), Some(2));
    }

    #[test]
    fn a_new_epoch_a_marker_or_another_producer_starts_afresh() {
        let log = [
            data(0, (7, 0), 0, 2),
            data(2, (7, 1), 0, 2),
            marker(4, (7, 1)),
            data(5, (7, 1), 9, 1),
            data(6, (8, 0), 3, 1),
        ];
        assert_eq!(out_of_sequence(&log, 0, 7), None);
    }

    #[test]
    fn sequences_wrap_past_the_largest() {
        let log = [data(0, (7, 0), i32::MAX - 1, 2), data(2, (7, 0), 0, 1)];
        assert_eq!(out_of_sequence(&log, 0, 3), None);
        let log = [data(0, (7, 0), i32::MAX - 1, 2), data(2, (7, 0), 1, 1)];
        assert_eq!(out_of_sequence(&log, 0, 3), Some(2));
    }

    #[test]
    fn the_marker_before_a_rotation_belongs_to_the_fence_markers() {
        // Data of producer 7, the takeover's marker at 7's exhausted epoch,
        // then the marker of 9, the id the coordinator rotated to.
        let log = [
            data(0, (7, 3), 0, 1),
            marker(1, (7, EXHAUSTED_EPOCH)),
            marker(2, (9, 0)),
        ];
        assert_eq!(trailing_markers(&log, 9, 3), Some(1));
        // Only the marker at the exhausted epoch: a clean handover's.
        assert_eq!(trailing_markers(&log[..2], 9, 2), Some(1));
        // Another producer's marker below an ordinary epoch is not ours.
        let foreign = [data(0, (7, 3), 0, 1), marker(1, (5, 2))];
        assert_eq!(trailing_markers(&foreign, 9, 2), None);
    }
}
