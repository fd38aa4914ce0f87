//! Which source batches pass through to the destination untouched, which
//! must be re-encoded and which are dropped, decided from the header alone
//! so that the common case never decompresses anything.
//!
//! Why these verdicts: a destination broker rejects or silently mangles a
//! forwarded batch that is compacted, LogAppendTime or too large (see
//! [`ReencodeReason`]), and a `read_committed` consumer of the source never
//! sees aborted records or transaction markers, so neither may the mirror.

use super::view::{RecordBatch, TimestampType};
use crate::kafka::error::Result;

/// What to do with one source batch on its way to the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchAction {
    /// Send the batch's bytes with only header fields rewritten; the payload
    /// (compressed or not) is untouched.
    PassThrough,
    /// The records must be decoded and written into new batch(es).
    Reencode(ReencodeReason),
    /// Nothing of this batch goes to the destination (its offsets still advance).
    Drop(DropReason),
}

/// Why a batch must be re-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReencodeReason {
    /// Compaction removed records: count ≠ lastOffsetDelta+1. Forwarding gives
    /// INVALID_RECORD, UNKNOWN_SERVER_ERROR, or (uncompressed) a silently
    /// corrupted log.
    OffsetGaps,
    /// LogAppendTime batch: every record must carry the source's append time
    /// as its CreateTime, so consumers see what source consumers saw.
    LogAppendTime,
    /// Larger than the destination's `max.message.bytes`: must be split.
    TooLarge,
    /// The batch starts before the mirror's position (resume inside a
    /// batch): only the records from the position on are sent.
    StartsBeforePosition,
}

/// Why a batch is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Transaction marker: clients may not write control records.
    Control,
    /// Belongs to an aborted transaction (read_committed semantics).
    Aborted,
    /// Empty batch kept by the source's cleaner for producer state.
    Empty,
    /// Entirely before the mirror's position (already mirrored).
    BeforePosition,
}

/// Applies a fetch response's aborted-transaction list to its batches, as
/// Kafka's consumer does for `read_committed`: a transactional batch is
/// dropped if its producer has an aborted transaction that started at or
/// before it and whose ABORT marker has not been passed yet.
#[derive(Debug, Default, Clone)]
pub struct AbortedTransactions {
    /// (producer id, first offset), sorted by first offset.
    pending: Vec<(i64, i64)>,
    next: usize,
    aborted_producers: Vec<i64>,
}

impl AbortedTransactions {
    /// From a fetch response's `(producer_id, first_offset)` list.
    pub fn new(mut list: Vec<(i64, i64)>) -> Self {
        list.sort_by_key(|&(_, first)| first);
        AbortedTransactions {
            pending: list,
            next: 0,
            aborted_producers: Vec::new(),
        }
    }

    /// Whether `batch` belongs to an aborted transaction. Must be called for
    /// every batch in order. Control batches return `false` but update state.
    pub fn is_aborted(&mut self, batch: &RecordBatch) -> Result<bool> {
        if batch.producer_id() < 0 {
            return Ok(false);
        }
        while self.next < self.pending.len() && self.pending[self.next].1 <= batch.last_offset() {
            let pid = self.pending[self.next].0;
            if !self.aborted_producers.contains(&pid) {
                self.aborted_producers.push(pid);
            }
            self.next += 1;
        }
        let pid = batch.producer_id();
        if batch.is_control() {
            if batch.control_type()? == 0 {
                self.aborted_producers.retain(|&p| p != pid);
            }
            return Ok(false);
        }
        Ok(batch.is_transactional() && self.aborted_producers.contains(&pid))
    }
}

/// Classifies a source batch. `aborted` is what
/// [`AbortedTransactions::is_aborted`] said; `max_message_bytes` is the
/// destination topic's limit; `from_offset` is the first source offset not yet
/// mirrored (a fetch can return a batch that starts before it).
pub fn classify(
    batch: &RecordBatch,
    aborted: bool,
    max_message_bytes: usize,
    from_offset: i64,
) -> BatchAction {
    if batch.is_control() {
        BatchAction::Drop(DropReason::Control)
    } else if aborted {
        BatchAction::Drop(DropReason::Aborted)
    } else if batch.record_count() <= 0 {
        BatchAction::Drop(DropReason::Empty)
    } else if batch.last_offset() < from_offset {
        BatchAction::Drop(DropReason::BeforePosition)
    } else if batch.base_offset() < from_offset {
        BatchAction::Reencode(ReencodeReason::StartsBeforePosition)
    } else if batch.record_count() as i64 != batch.last_offset_delta() as i64 + 1 {
        BatchAction::Reencode(ReencodeReason::OffsetGaps)
    } else if batch.timestamp_type() == TimestampType::LogAppendTime {
        BatchAction::Reencode(ReencodeReason::LogAppendTime)
    } else if batch.size() > max_message_bytes {
        BatchAction::Reencode(ReencodeReason::TooLarge)
    } else {
        BatchAction::PassThrough
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::codec::tests::{rec, ALL};
    use super::super::codec::{encode_batch, BatchBuilder, Record};
    use super::*;

    #[test]
    fn a_fresh_batch_of_any_codec_passes_through() {
        let records: Vec<Record> = (0..50).map(|i| rec(i, 1_700_000_000_000)).collect();
        for codec in ALL {
            let b = RecordBatch::new(encode_batch(&records, codec).unwrap().freeze()).unwrap();
            assert_eq!(classify(&b, false, 1 << 20, 0), BatchAction::PassThrough);
        }
    }

    fn control(pid: i64, offset: i64, commit: bool) -> RecordBatch {
        let key = Bytes::from(vec![0, 0, 0, if commit { 1 } else { 0 }]);
        let r = Record {
            offset_delta: 0,
            timestamp: 1,
            key: Some(key),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            headers: vec![],
        };
        BatchBuilder {
            base_offset: offset,
            transactional: true,
            control: true,
            producer: (pid, 0, -1),
            ..BatchBuilder::new(vec![r])
        }
        .build()
        .unwrap()
    }

    fn txn(pid: i64, offset: i64) -> RecordBatch {
        let r = Record {
            offset_delta: 0,
            ..rec(1, 1)
        };
        BatchBuilder {
            base_offset: offset,
            transactional: true,
            producer: (pid, 0, 0),
            ..BatchBuilder::new(vec![r])
        }
        .build()
        .unwrap()
    }

    #[test]
    fn aborted_transactions_and_control_batches() {
        // pid 1: aborted txn at 0..1 + marker at 2; pid 2 committed at 1 + marker at 3;
        // pid 1 again (new txn, committed) at 4 + marker 5.
        let batches = [
            txn(1, 0),
            txn(2, 1),
            txn(1, 1),
            control(1, 2, false),
            control(2, 3, true),
            txn(1, 4),
            control(1, 5, true),
        ];
        let mut f = AbortedTransactions::new(vec![(1, 0)]);
        let verdicts: Vec<BatchAction> = batches
            .iter()
            .map(|b| {
                let ab = f.is_aborted(b).unwrap();
                classify(b, ab, 1 << 20, 0)
            })
            .collect();
        use BatchAction::*;
        use DropReason::*;
        assert_eq!(
            verdicts,
            vec![
                Drop(Aborted),
                PassThrough,
                Drop(Aborted),
                Drop(Control),
                Drop(Control),
                PassThrough,
                Drop(Control)
            ]
        );
    }
}
