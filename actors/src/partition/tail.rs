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
//! is. A retry then lands a second time; and a new producer id's batch sent
//! behind a refused first one is taken in its place, as Kafka takes any
//! sequence from an id it holds no state for. Stretched over such a log,
//! the map would pair later source records with copies of earlier ones and
//! never copy them. The producer sequence tells: with the broker's state,
//! kmirror's own batches never skip or repeat one.

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

/// The offset of the first of kmirror's data batches in `[from, to)` that
/// is not the next one of `ours`, the producer recorded before the first
/// of them (`MirrorProducer`): another epoch's (a late batch of an earlier
/// sink, or an old owner's), or one that does not follow on by sequence
/// from the batch before it. kmirror starts every producer id and epoch at
/// sequence 0, so the first batch above `from` follows on from the batch
/// below `from` when that is `ours`' data, and starts at 0 when it is
/// another producer's batch or there is none (`from` is 0: a batch taken
/// in place of a refused first one is not the first). Markers of `ours`
/// (re-fences, which take no sequence) are read through; only markers
/// with nothing of ours read below them, or a log that begins at `from`,
/// leave the first batch unjudged.
pub(super) fn out_of_sequence(
    batches: &[RecordBatch],
    from: i64,
    to: i64,
    ours: (i64, i16),
) -> Option<i64> {
    let of = |b: &RecordBatch| (b.producer_id(), b.producer_epoch());
    // Re-fence markers of ours take no sequence: read through them.
    let mut below = batches.iter().rev().filter(|b| b.base_offset() < from);
    let mut through_markers = false;
    let before = below.find(|b| {
        let marker = of(b) == ours && b.is_control();
        through_markers |= marker;
        !marker
    });
    let mut expected = match before {
        Some(p) if of(p) == ours => Some(next_sequence(p)),
        Some(_) => Some(0),
        None => (from == 0 && !through_markers).then_some(0),
    };
    for b in batches
        .iter()
        .filter(|b| b.base_offset() >= from && b.base_offset() < to)
    {
        if of(b) != ours || expected.is_some_and(|e| b.base_sequence() != e) {
            return Some(b.base_offset());
        }
        expected = Some(next_sequence(b));
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

    const OURS: (i64, i16) = (7, 0);

    #[test]
    fn batches_in_sequence_are_the_next_records() {
        let log = [
            data(0, OURS, 0, 2),
            data(2, OURS, 2, 3),
            data(5, OURS, 5, 1),
        ];
        assert_eq!(out_of_sequence(&log, 2, 6, OURS), None);
        assert_eq!(out_of_sequence(&log, 0, 6, OURS), None);
    }

    /// A retry taken twice: the repeat is where the log stops being the
    /// copy in order, whatever follows it (here the retries of the batches
    /// that were in flight behind it, in sequence after the repeat).
    #[test]
    fn a_repeated_batch_is_out_of_sequence() {
        let log = [
            data(0, OURS, 0, 2),
            data(2, OURS, 2, 2),
            data(4, OURS, 4, 2),
            data(6, OURS, 2, 2),
            data(8, OURS, 4, 2),
        ];
        assert_eq!(out_of_sequence(&log, 2, 10, OURS), Some(6));
        // The repeat of the batch just below the recorded end.
        assert_eq!(out_of_sequence(&log[2..4], 6, 8, OURS), Some(6));
    }

    /// A batch taken in place of a lost one before it: after one of ours,
    /// after another producer's, and as the partition's first.
    #[test]
    fn a_skipped_sequence_is_out_of_sequence() {
        let log = [data(0, OURS, 0, 2), data(2, OURS, 4, 2)];
        assert_eq!(out_of_sequence(&log, 2, 4, OURS), Some(2));
        let log = [data(0, (5, 0), 0, 2), data(2, OURS, 2, 2)];
        assert_eq!(out_of_sequence(&log, 2, 4, OURS), Some(2));
        // A log that begins at `from` (retention took the batch before).
        assert_eq!(out_of_sequence(&log[1..], 2, 4, OURS), None);
        let log = [data(0, OURS, 2, 2)];
        assert_eq!(out_of_sequence(&log, 0, 2, OURS), Some(0));
    }

    /// A late batch of an earlier epoch (a sink reopened meanwhile) is not
    /// the next record, whatever its sequence.
    #[test]
    fn another_epochs_batch_is_out_of_sequence() {
        let log = [
            data(0, (7, 1), 0, 2),
            data(2, (7, 1), 2, 2),
            data(4, (7, 2), 0, 1),
        ];
        assert_eq!(out_of_sequence(&log, 2, 5, (7, 2)), Some(2));
        assert_eq!(out_of_sequence(&log, 2, 5, (7, 1)), Some(4));
    }

    /// A re-fence marker of ours takes no sequence: the first batch after
    /// it is not judged (its predecessor is not read); a new epoch's first
    /// batch after another epoch's marker starts at 0.
    #[test]
    fn after_a_marker() {
        let log = [data(0, OURS, 0, 2), marker(2, OURS), data(3, OURS, 2, 1)];
        assert_eq!(out_of_sequence(&log, 3, 4, OURS), None);
        // Read through: a repeat behind a re-fence marker.
        let repeat = [data(0, OURS, 0, 2), marker(2, OURS), data(3, OURS, 0, 2)];
        assert_eq!(out_of_sequence(&repeat, 3, 5, OURS), Some(3));
        // The marker alone read: not judged.
        assert_eq!(out_of_sequence(&repeat[1..], 3, 5, OURS), None);
        let log = [
            marker(0, (7, 1)),
            data(1, (7, 2), 0, 1),
            data(2, (7, 2), 1, 1),
        ];
        assert_eq!(out_of_sequence(&log, 1, 3, (7, 2)), None);
        assert_eq!(out_of_sequence(&log[..2], 1, 2, (7, 3)), Some(1));
    }

    #[test]
    fn sequences_wrap_past_the_largest() {
        let log = [data(0, OURS, i32::MAX - 1, 2), data(2, OURS, 0, 1)];
        assert_eq!(out_of_sequence(&log, 2, 3, OURS), None);
        let log = [data(0, OURS, i32::MAX - 1, 2), data(2, OURS, 1, 1)];
        assert_eq!(out_of_sequence(&log, 2, 3, OURS), Some(2));
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
