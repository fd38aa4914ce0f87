//! What the destination is sent for the classified source batches: a
//! pass-through copy with its header rewritten, records re-encoded (and
//! split to the destination's limit), or small batches merged into one.
//!
//! Why merge at all: a destination broker's cost is per batch and the
//! idempotent producer keeps at most five batches in flight per partition,
//! so many small source batches forwarded one by one cap a partition's
//! throughput (see [`MERGE_BELOW_BYTES`]).

use bytes::{Bytes, BytesMut};

use super::classify::{BatchAction, ReencodeReason};
use super::codec::{decode_records, encode_batch_effort, record_size_estimate, Record};
use super::lz4::worth_compressing;
use super::view::{
    put, stamp_producer_parts, Codec, RecordBatch, TimestampType, ATTRIBUTES, BASE_OFFSET,
    DELETE_HORIZON_BIT, HEADER_SIZE, LAST_OFFSET_DELTA, PARTITION_LEADER_EPOCH, TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
};
use crate::kafka::error::{KafkaError, Result};

/// A batch ready for our idempotent producer: producer id/epoch/sequence are
/// stamped (and the CRC computed) by the producer when it assigns the
/// sequence. `source_offsets` says which source offsets its records carry,
/// in order, for the offset map.
///
/// A batch passed through is its rewritten header (`bytes`) and the source
/// batch's records (`tail`), which stay in the fetched data instead of
/// being copied: that data is held until the batch is acknowledged anyway
/// (its charge in the memory budget), so a copy of it would be a second
/// one alive as long.
#[derive(Debug)]
pub struct OutgoingBatch {
    /// Header, and for a batch encoded here the whole batch; header fields
    /// other than pid/epoch/seq/CRC are final. Not public: outside the
    /// crate a batch is read whole ([`OutgoingBatch::to_bytes`]), never
    /// as this part alone.
    pub(crate) bytes: BytesMut,
    /// What follows `bytes` on the wire, shared with the fetched data
    /// (empty when `bytes` holds the whole batch).
    pub(crate) tail: Bytes,
    /// Number of records.
    pub record_count: i32,
    /// Source offsets of the records.
    pub source_offsets: SourceOffsets,
}

/// Source offsets of an outgoing batch's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceOffsets {
    /// Consecutive source offsets `first..=last`.
    Range {
        /// First source offset.
        first: i64,
        /// Last source offset.
        last: i64,
    },
    /// Non-consecutive (compacted source): one source offset per record.
    List(Vec<i64>),
}

impl OutgoingBatch {
    /// A batch encoded here, whole in `bytes`.
    pub fn new(bytes: BytesMut, record_count: i32, source_offsets: SourceOffsets) -> Self {
        OutgoingBatch {
            bytes,
            tail: Bytes::new(),
            record_count,
            source_offsets,
        }
    }

    /// Pass-through: copies the batch's header and rewrites base offset
    /// (0), partition leader epoch (-1) and clears the LogAppendTime,
    /// transactional and delete-horizon bits. The records are not touched,
    /// nor copied. The CRC is computed later by [`OutgoingBatch::stamp`].
    pub fn pass_through(batch: &RecordBatch) -> Self {
        let all = batch.as_bytes();
        let mut bytes = BytesMut::from(&all[..HEADER_SIZE]);
        put(&mut bytes, BASE_OFFSET, 0i64.to_be_bytes());
        put(&mut bytes, PARTITION_LEADER_EPOCH, (-1i32).to_be_bytes());
        let attrs =
            batch.attributes() & !(TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | DELETE_HORIZON_BIT);
        put(&mut bytes, ATTRIBUTES, attrs.to_be_bytes());
        OutgoingBatch {
            bytes,
            tail: all.slice(HEADER_SIZE..),
            record_count: batch.record_count(),
            source_offsets: SourceOffsets::Range {
                first: batch.base_offset(),
                last: batch.last_offset(),
            },
        }
    }

    /// Size on the wire.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.tail.len()
    }

    /// Whether it has no bytes at all (never, for a batch made here).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stamps the producer's id, epoch and base sequence, and the CRC.
    pub fn stamp(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        stamp_producer_parts(
            &mut self.bytes,
            &self.tail,
            producer_id,
            producer_epoch,
            base_sequence,
        );
    }

    /// The batch as one buffer: a copy when it has a tail.
    pub fn to_bytes(&self) -> Bytes {
        whole(&self.bytes.clone().freeze(), &self.tail)
    }
}

/// `head` followed by `tail` in one buffer (no copy when `tail` is empty).
pub fn whole(head: &Bytes, tail: &Bytes) -> Bytes {
    if tail.is_empty() {
        return head.clone();
    }
    let mut out = BytesMut::with_capacity(head.len() + tail.len());
    out.extend_from_slice(head);
    out.extend_from_slice(tail);
    out.freeze()
}

/// Encodes records into as many batches as needed so that each is at most
/// `max_bytes` on the wire. A single record that cannot fit is
/// [`KafkaError::RecordTooLarge`]. lz4 blocks are stored unless `compress`
/// (see [`encode_batch_effort`]).
pub fn encode_batches(
    records: &[Record],
    source_offsets: &[i64],
    codec: Codec,
    compress: bool,
    max_bytes: usize,
) -> Result<Vec<OutgoingBatch>> {
    assert_eq!(records.len(), source_offsets.len());
    let mut out = Vec::new();
    let mut start = 0;
    while start < records.len() {
        // Greedy by uncompressed size, then halve if compression did not help enough.
        let mut end = start;
        let mut size = HEADER_SIZE;
        while end < records.len() {
            let s = record_size_estimate(&records[end]);
            if end > start && size + s > max_bytes {
                break;
            }
            size += s;
            end += 1;
        }
        loop {
            let bytes = encode_batch_effort(&records[start..end], codec, compress)?;
            if bytes.len() <= max_bytes {
                let offs = &source_offsets[start..end];
                let consecutive = offs.windows(2).all(|w| w[1] == w[0] + 1);
                out.push(OutgoingBatch::new(
                    bytes,
                    (end - start) as i32,
                    if consecutive {
                        SourceOffsets::Range {
                            first: offs[0],
                            last: offs[offs.len() - 1],
                        }
                    } else {
                        SourceOffsets::List(offs.to_vec())
                    },
                ));
                break;
            }
            if end - start == 1 {
                return Err(KafkaError::RecordTooLarge {
                    size: bytes.len(),
                    max: max_bytes,
                });
            }
            end = start + (end - start) / 2;
        }
        start = end;
    }
    Ok(out)
}

/// Turns one source batch into what is sent to the destination, applying
/// [`classify`](super::classify)'s verdict. Empty result for dropped batches. Records keep
/// their timestamps (LogAppendTime batches: the source's append time becomes
/// each record's CreateTime), keys, values and headers byte for byte; the
/// codec is kept.
pub fn prepare(
    batch: &RecordBatch,
    action: BatchAction,
    max_message_bytes: usize,
    from_offset: i64,
) -> Result<Vec<OutgoingBatch>> {
    if !matches!(action, BatchAction::Drop(_)) {
        check_crc(batch)?;
    }
    match action {
        BatchAction::Drop(_) => Ok(Vec::new()),
        BatchAction::PassThrough => Ok(vec![OutgoingBatch::pass_through(batch)]),
        BatchAction::Reencode(reason) => {
            let mut decoded = decode_records(batch)?;
            let base = decoded.base_offset;
            decoded
                .records
                .retain(|r| base + r.offset_delta as i64 >= from_offset);
            if decoded.records.is_empty() {
                return Ok(Vec::new());
            }
            let n = decoded.records.len();
            let deltas_consecutive = decoded
                .records
                .iter()
                .enumerate()
                .all(|(i, r)| r.offset_delta == i as i32);
            // Only trailing records were compacted away: fixing lastOffsetDelta
            // is enough and keeps the compressed payload.
            if reason == ReencodeReason::OffsetGaps
                && deltas_consecutive
                && batch.base_offset() >= from_offset
                && batch.timestamp_type() == TimestampType::CreateTime
                && batch.size() <= max_message_bytes
            {
                let mut ob = OutgoingBatch::pass_through(batch);
                put(
                    &mut ob.bytes,
                    LAST_OFFSET_DELTA,
                    (n as i32 - 1).to_be_bytes(),
                );
                ob.source_offsets = SourceOffsets::Range {
                    first: batch.base_offset(),
                    last: batch.base_offset() + n as i64 - 1,
                };
                return Ok(vec![ob]);
            }
            let offsets: Vec<i64> = decoded
                .records
                .iter()
                .map(|r| decoded.base_offset + r.offset_delta as i64)
                .collect();
            let compress = worth_compressing(batch.payload().len(), decoded.plain_len);
            encode_batches(
                &decoded.records,
                &offsets,
                decoded.codec,
                compress,
                max_message_bytes,
            )
        }
    }
}

/// Refuses a source batch whose CRC-32C does not match its bytes. Whatever
/// is sent is stamped with a fresh CRC (`stamp_producer`), so a batch
/// damaged on the source's disk or on the way would otherwise reach the
/// destination with a valid checksum over wrong records, and no broker or
/// consumer could tell any more (the fuzzer passed damaged batches through).
fn check_crc(batch: &RecordBatch) -> Result<()> {
    if batch.verify_crc() {
        Ok(())
    } else {
        Err(KafkaError::InvalidBatch(format!(
            "source batch at offset {} fails its CRC-32C check ({:#010x} stored): damaged, not mirrored",
            batch.base_offset(),
            batch.crc()
        )))
    }
}

/// Source batches smaller than this are merged with their small neighbours
/// of the same fetch into one destination batch.
///
/// Why: a destination broker's cost is per batch (validation, append, index,
/// replication), and the idempotent producer keeps at most five batches in
/// flight per partition. Forwarded one by one, the 5 KiB batches of a
/// producer with a small `batch.size` or no linger made kmirror 0.3× as fast
/// as MirrorMaker 2, which re-batches. Merging re-encodes those records (the
/// codec is kept, records are byte for byte the same, offsets stay dense),
/// so pass-through is kept for the batches where it pays: the large ones.
/// 32 KiB sits above Kafka's default `batch.size` (16 KiB).
pub const MERGE_BELOW_BYTES: usize = 32 * 1024;

/// While a partition is behind — what one fetch returned does not fit the
/// producer's free in-flight slots — batches up to this size are merged too.
/// Five batches per round trip is then the partition's ceiling: at 75 KiB
/// batches and a 50 ms produce round trip on a busy machine that is 7 MB/s,
/// and the partition never catches up. Merged, the same five slots carry
/// up to [`MERGE_TARGET_BYTES`] each; once caught up, a fetch holds a batch
/// or two and they pass through untouched again.
pub const MERGE_BEHIND_BELOW_BYTES: usize = 256 * 1024;

/// Upper bound of the source bytes merged into one group, and of the
/// records (uncompressed) in one merged destination batch, below the
/// destination's `max.message.bytes` anyway: large enough that the broker's
/// per-batch cost vanishes (MirrorMaker 2 is tuned to 320 KiB batches),
/// small enough that five in flight per partition stay cheap in memory.
pub const MERGE_TARGET_BYTES: usize = 512 * 1024;

/// Whether a classified batch may be merged with its neighbours: only one
/// that would otherwise pass through (everything else is dropped, or
/// re-encoded on its own for a reason of its own) and is small, or, while
/// the partition is `behind`, not large.
pub fn mergeable(batch: &RecordBatch, action: BatchAction, behind: bool) -> bool {
    let below = if behind {
        MERGE_BEHIND_BELOW_BYTES
    } else {
        MERGE_BELOW_BYTES
    };
    action == BatchAction::PassThrough && batch.size() < below
}

/// Merges consecutive mergeable batches of one codec into as few batches as
/// `max_bytes` allows; one batch alone passes through untouched. Records
/// keep keys, values, headers and timestamps; each keeps its source offset
/// in [`OutgoingBatch::source_offsets`], so the offset map stays exact even
/// where compaction left gaps between the merged batches.
pub fn merge(batches: &[RecordBatch], max_bytes: usize) -> Result<Vec<OutgoingBatch>> {
    for b in batches {
        check_crc(b)?;
    }
    match batches {
        [] => Ok(Vec::new()),
        [one] => Ok(vec![OutgoingBatch::pass_through(one)]),
        [first, ..] => {
            let codec = first.codec()?;
            let mut records = Vec::new();
            let mut offsets = Vec::new();
            // What the sources' compression saved, over all of them.
            let (mut compressed, mut plain) = (0, 0);
            for b in batches {
                if b.codec()? != codec {
                    return Err(KafkaError::InvalidBatch(
                        "merged batches must share one codec".into(),
                    ));
                }
                let decoded = decode_records(b)?;
                compressed += b.payload().len();
                plain += decoded.plain_len;
                offsets.extend(
                    decoded
                        .records
                        .iter()
                        .map(|r| decoded.base_offset + r.offset_delta as i64),
                );
                records.extend(decoded.records);
            }
            encode_batches(
                &records,
                &offsets,
                codec,
                worth_compressing(compressed, plain),
                max_bytes.min(MERGE_TARGET_BYTES),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::classify::{classify, DropReason};
    use super::super::codec::tests::{rec, ALL};
    use super::super::codec::{encode_batch, BatchBuilder};
    use super::*;

    #[test]
    fn a_damaged_source_batch_is_never_sent_with_a_fresh_crc() {
        let good = BatchBuilder::new((0..3).map(|i| rec(i, 5)).collect())
            .build()
            .unwrap();
        let mut bytes = good.as_bytes().to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 1; // one bit of the last record's payload
        let bad = RecordBatch::new(Bytes::from(bytes)).unwrap();
        assert!(!bad.verify_crc());
        for action in [
            BatchAction::PassThrough,
            BatchAction::Reencode(ReencodeReason::TooLarge),
        ] {
            let e = prepare(&bad, action, 1 << 20, 0).unwrap_err();
            assert!(e.to_string().contains("CRC-32C"), "{e}");
        }
        let e = merge(&[good.clone(), bad.clone()], 1 << 20).unwrap_err();
        assert!(e.to_string().contains("CRC-32C"), "{e}");
        assert!(merge(std::slice::from_ref(&bad), 1 << 20).is_err());
        // Dropped batches are not read at all.
        let dropped = BatchAction::Drop(DropReason::Control);
        assert!(prepare(&bad, dropped, 1 << 20, 0).unwrap().is_empty());
    }

    #[test]
    fn pass_through_rewrite_and_stamp() {
        let records: Vec<Record> = (0..3).map(|i| rec(i, 5)).collect();
        // What a fetch returns: offset 1000, epoch 7, transactional, delete horizon.
        let src = BatchBuilder {
            codec: Codec::Lz4,
            base_offset: 1000,
            partition_leader_epoch: 7,
            transactional: true,
            delete_horizon: true,
            producer: (99, 3, 40),
            ..BatchBuilder::new(records)
        }
        .build()
        .unwrap();
        assert!(src.verify_crc());
        assert!(src.is_transactional() && src.has_delete_horizon());
        assert_eq!(
            (
                src.base_offset(),
                src.last_offset(),
                src.partition_leader_epoch()
            ),
            (1000, 1002, 7)
        );
        let mut out = OutgoingBatch::pass_through(&src);
        assert_eq!(
            out.source_offsets,
            SourceOffsets::Range {
                first: 1000,
                last: 1002
            }
        );
        out.stamp(5, 0, 12);
        assert_eq!(out.bytes.len(), HEADER_SIZE, "the records are not copied");
        let b = RecordBatch::new(out.to_bytes()).unwrap();
        assert!(b.verify_crc());
        assert_eq!(b.base_offset(), 0);
        assert_eq!(b.partition_leader_epoch(), -1);
        assert!(!b.is_transactional() && !b.has_delete_horizon());
        assert_eq!(b.timestamp_type(), TimestampType::CreateTime);
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (5, 0, 12)
        );
        assert_eq!(b.codec().unwrap(), Codec::Lz4);
        assert_eq!(b.payload(), src.payload(), "compressed payload untouched");
    }

    /// A batch whose records have the given offset deltas (as a compacted
    /// source log has them).
    fn gapped(deltas: &[i32], last_offset_delta: i32, codec: Codec) -> RecordBatch {
        let records: Vec<Record> = deltas
            .iter()
            .map(|&d| Record {
                offset_delta: d,
                ..rec(d + 1, 100)
            })
            .collect();
        BatchBuilder {
            codec,
            base_offset: 500,
            last_offset_delta: Some(last_offset_delta),
            ..BatchBuilder::new(records)
        }
        .build()
        .unwrap()
    }

    #[test]
    fn compacted_batch_is_reencoded_with_consecutive_offsets() {
        for codec in [Codec::None, Codec::Gzip] {
            let b = gapped(&[0, 5, 9], 9, codec);
            let action = classify(&b, false, 1 << 20, 0);
            assert_eq!(action, BatchAction::Reencode(ReencodeReason::OffsetGaps));
            let out = prepare(&b, action, 1 << 20, 0).unwrap();
            assert_eq!(out.len(), 1);
            assert_eq!(
                out[0].source_offsets,
                SourceOffsets::List(vec![500, 505, 509])
            );
            let nb = RecordBatch::new(out[0].to_bytes()).unwrap();
            assert_eq!((nb.record_count(), nb.last_offset_delta()), (3, 2));
            assert_eq!(nb.codec().unwrap(), codec);
            let d = decode_records(&nb).unwrap();
            assert_eq!(
                d.records.iter().map(|r| r.offset_delta).collect::<Vec<_>>(),
                vec![0, 1, 2]
            );
            let orig = decode_records(&b).unwrap();
            for (a, o) in d.records.iter().zip(&orig.records) {
                assert_eq!(
                    (&a.key, &a.value, &a.headers, a.timestamp),
                    (&o.key, &o.value, &o.headers, o.timestamp)
                );
            }
        }
    }

    #[test]
    fn tail_compacted_batch_keeps_payload() {
        let b = gapped(&[0, 1, 2], 9, Codec::Gzip);
        let action = classify(&b, false, 1 << 20, 0);
        let out = prepare(&b, action, 1 << 20, 0).unwrap();
        assert_eq!(
            out[0].source_offsets,
            SourceOffsets::Range {
                first: 500,
                last: 502
            }
        );
        let mut out = out;
        out[0].stamp(1, 0, 0);
        let nb = RecordBatch::new(out[0].to_bytes()).unwrap();
        assert_eq!(nb.last_offset_delta(), 2);
        assert_eq!(nb.payload(), b.payload());
    }

    #[test]
    fn log_append_time_becomes_create_time_per_record() {
        let records: Vec<Record> = (0..4).map(|i| rec(i, 10 + i as i64)).collect();
        let b = BatchBuilder {
            codec: Codec::Snappy,
            log_append_time: Some(777),
            ..BatchBuilder::new(records)
        }
        .build()
        .unwrap();
        let action = classify(&b, false, 1 << 20, 0);
        assert_eq!(action, BatchAction::Reencode(ReencodeReason::LogAppendTime));
        let out = prepare(&b, action, 1 << 20, 0).unwrap();
        let nb = RecordBatch::new(out[0].to_bytes()).unwrap();
        assert_eq!(nb.timestamp_type(), TimestampType::CreateTime);
        assert!(decode_records(&nb)
            .unwrap()
            .records
            .iter()
            .all(|r| r.timestamp == 777));
    }

    #[test]
    fn oversized_batch_is_split() {
        let records: Vec<Record> = (0..100)
            .map(|i| Record {
                value: Some(Bytes::from(vec![(i % 251) as u8; 1000])),
                ..rec(i, 1)
            })
            .collect();
        let b = BatchBuilder {
            base_offset: 42,
            ..BatchBuilder::new(records)
        }
        .build()
        .unwrap();
        let action = classify(&b, false, 10_000, 0);
        assert_eq!(action, BatchAction::Reencode(ReencodeReason::TooLarge));
        let out = prepare(&b, action, 10_000, 0).unwrap();
        assert!(out.len() >= 10);
        let mut next = 42;
        for o in &out {
            assert!(o.len() <= 10_000);
            match o.source_offsets {
                SourceOffsets::Range { first, last } => {
                    assert_eq!(first, next);
                    assert_eq!(last - first + 1, o.record_count as i64);
                    next = last + 1;
                }
                _ => panic!("consecutive"),
            }
        }
        assert_eq!(next, 142);
        let too_small = prepare(&b, action, 500, 0).unwrap_err();
        assert!(matches!(too_small, KafkaError::RecordTooLarge { .. }));
    }

    /// A fetched-looking batch of `n` records starting at source `offset`.
    fn fetched(offset: i64, n: i32, codec: Codec, ts: i64) -> RecordBatch {
        let records: Vec<Record> = (0..n).map(|i| rec(i, ts + i as i64)).collect();
        BatchBuilder {
            codec,
            base_offset: offset,
            ..BatchBuilder::new(records)
        }
        .build()
        .unwrap()
    }

    /// The records of `batches` as one merged batch holds them: in order,
    /// at dense offset deltas.
    fn renumbered(batches: &[RecordBatch]) -> Vec<Record> {
        batches
            .iter()
            .flat_map(|b| decode_records(b).unwrap().records)
            .enumerate()
            .map(|(i, r)| Record {
                offset_delta: i as i32,
                ..r
            })
            .collect()
    }

    /// lz4 batches of `n` records of 1000-byte values, random letters
    /// (lz4 finds almost nothing to take out) or one repeated letter.
    fn lz4_batch(offset: i64, n: i32, random: bool) -> RecordBatch {
        let mut x = offset as u32 ^ 0x9E37_79B9;
        let records: Vec<Record> = (0..n)
            .map(|i| {
                let value: Vec<u8> = (0..1000)
                    .map(|_| {
                        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        if random {
                            b'A' + (x >> 24) as u8 % 26
                        } else {
                            b'x'
                        }
                    })
                    .collect();
                Record {
                    value: Some(Bytes::from(value)),
                    ..rec(i, 5)
                }
            })
            .collect();
        BatchBuilder {
            codec: Codec::Lz4,
            base_offset: offset,
            ..BatchBuilder::new(records)
        }
        .build()
        .unwrap()
    }

    #[test]
    fn merged_lz4_is_compressed_only_where_the_source_compression_paid() {
        for random in [true, false] {
            let batches = [lz4_batch(0, 40, random), lz4_batch(40, 40, random)];
            let out = merge(&batches, 1 << 20).unwrap();
            assert_eq!(out.len(), 1);
            let merged = RecordBatch::new(out[0].to_bytes()).unwrap();
            assert_eq!(merged.codec().unwrap(), Codec::Lz4, "the codec is kept");
            let decoded = decode_records(&merged).unwrap();
            let expected = renumbered(&batches);
            assert_eq!(decoded.records, expected, "records byte for byte");
            if random {
                // Stored: the records plus framing, not compressed again.
                assert!(merged.payload().len() >= decoded.plain_len);
                assert!(merged.payload().len() < decoded.plain_len + 64);
            } else {
                assert!(merged.payload().len() * 10 < decoded.plain_len);
            }
        }
    }

    #[test]
    fn small_batches_merge_into_one_with_every_record_and_offset() {
        for codec in ALL {
            // Three small batches with a gap between the second and the third
            // (a whole batch compacted away on the source).
            let batches = [
                fetched(100, 4, codec, 50),
                fetched(104, 3, codec, 10),
                fetched(110, 5, codec, 70),
            ];
            assert!(batches
                .iter()
                .all(|b| mergeable(b, classify(b, false, 1 << 20, 100), false)));
            let out = merge(&batches, 1 << 20).unwrap();
            assert_eq!(out.len(), 1, "{codec:?}");
            let merged = RecordBatch::new(out[0].to_bytes()).unwrap();
            assert_eq!(merged.codec().unwrap(), codec);
            assert_eq!(merged.record_count(), 12);
            assert_eq!(merged.last_offset_delta(), 11, "dense offsets");
            assert_eq!(merged.max_timestamp(), 74);
            let expected = renumbered(&batches);
            assert_eq!(decode_records(&merged).unwrap().records, expected);
            let mut offsets: Vec<i64> = (100..107).collect();
            offsets.extend(110..115);
            assert_eq!(out[0].source_offsets, SourceOffsets::List(offsets));
        }
    }

    #[test]
    fn merging_respects_the_destination_limit_and_codec() {
        let batches: Vec<RecordBatch> = (0..20)
            .map(|i| fetched(i * 10, 10, Codec::Lz4, 1))
            .collect();
        let out = merge(&batches, 4_000).unwrap();
        assert!(out.len() > 1);
        assert!(out.iter().all(|o| o.len() <= 4_000));
        let mut next = 0;
        for o in &out {
            let SourceOffsets::Range { first, last } = o.source_offsets else {
                panic!("contiguous batches merge into ranges");
            };
            assert_eq!(first, next);
            next = last + 1;
        }
        assert_eq!(next, 200);
        // One batch alone is not touched.
        let one = merge(&batches[..1], 4_000).unwrap();
        assert_eq!(
            one[0].to_bytes()[HEADER_SIZE..],
            batches[0].as_bytes()[HEADER_SIZE..]
        );
        // Codecs are never mixed.
        let mixed = [fetched(0, 2, Codec::Lz4, 1), fetched(2, 2, Codec::Zstd, 1)];
        assert!(merge(&mixed, 1 << 20).is_err());
        // Large or re-encoded batches are not merged.
        let big = fetched(0, 100, Codec::None, 1);
        assert!(big.size() > 5_000);
        assert!(!mergeable(&big, classify(&big, false, 5_000, 0), true));
        let huge: Vec<Record> = (0..40)
            .map(|i| Record {
                value: Some(Bytes::from(vec![1u8; 1000])),
                ..rec(i, 1)
            })
            .collect();
        let huge = RecordBatch::new(encode_batch(&huge, Codec::None).unwrap().freeze()).unwrap();
        assert!(!mergeable(&huge, classify(&huge, false, 1 << 20, 0), false));
        assert!(mergeable(&huge, classify(&huge, false, 1 << 20, 0), true));
    }

    #[test]
    fn resume_inside_a_batch() {
        let records: Vec<Record> = (0..5).map(|i| rec(i, 1)).collect();
        let b = BatchBuilder {
            codec: Codec::Zstd,
            base_offset: 10,
            ..BatchBuilder::new(records.clone())
        }
        .build()
        .unwrap();
        assert_eq!(
            classify(&b, false, 1 << 20, 15),
            BatchAction::Drop(DropReason::BeforePosition)
        );
        let a = classify(&b, false, 1 << 20, 12);
        assert_eq!(
            a,
            BatchAction::Reencode(ReencodeReason::StartsBeforePosition)
        );
        let out = prepare(&b, a, 1 << 20, 12).unwrap();
        assert_eq!(
            out[0].source_offsets,
            SourceOffsets::Range {
                first: 12,
                last: 14
            }
        );
        let nb = RecordBatch::new(out[0].to_bytes()).unwrap();
        let d = decode_records(&nb).unwrap();
        assert_eq!(d.records[0].key, records[2].key);
        assert_eq!(d.records.len(), 3);
    }
}
