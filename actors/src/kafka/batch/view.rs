//! The v2 record-batch header: where each field sits, read in place, and
//! the few fields that are rewritten in place on the way to the destination.
//!
//! Why a view over the fetched `Bytes` and not a decoded struct: most
//! batches are forwarded untouched, so reading a header field must cost no
//! copy and no decompression.
//!
//! Layout of a v2 batch (offsets in bytes, as in Kafka's `DefaultRecordBatch`):
//! `0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 |
//! 16 magic i8 | 17 crc u32 | 21 attributes i16 | 23 lastOffsetDelta i32 |
//! 27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64 |
//! 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordCount i32 | 61 records`.
//! The CRC-32C covers bytes 21..end.

use bytes::Bytes;

use crate::kafka::error::{KafkaError, Result};

/// Size of the v2 batch header.
pub const HEADER_SIZE: usize = 61;
/// Bytes before the batch length field's coverage starts (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;

pub(super) const BASE_OFFSET: usize = 0;
pub(super) const BATCH_LENGTH: usize = 8;
pub(super) const PARTITION_LEADER_EPOCH: usize = 12;
pub(super) const MAGIC: usize = 16;
pub(super) const CRC: usize = 17;
pub(super) const ATTRIBUTES: usize = 21;
pub(super) const LAST_OFFSET_DELTA: usize = 23;
pub(super) const BASE_TIMESTAMP: usize = 27;
pub(super) const MAX_TIMESTAMP: usize = 35;
pub(super) const PRODUCER_ID: usize = 43;
pub(super) const PRODUCER_EPOCH: usize = 51;
pub(super) const BASE_SEQUENCE: usize = 53;
pub(super) const RECORD_COUNT: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
pub(super) const TIMESTAMP_TYPE_BIT: i16 = 0x08;
pub(super) const TRANSACTIONAL_BIT: i16 = 0x10;
pub(super) const CONTROL_BIT: i16 = 0x20;
pub(super) const DELETE_HORIZON_BIT: i16 = 0x40;

/// Compression codec of a batch (attribute bits 0–2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// snappy (xerial framing).
    Snappy,
    /// lz4 (frame format).
    Lz4,
    /// zstd.
    Zstd,
}

impl Codec {
    fn from_bits(bits: i16) -> Result<Codec> {
        Ok(match bits & COMPRESSION_MASK {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            n => {
                return Err(KafkaError::InvalidBatch(format!(
                    "unknown compression codec id {n}"
                )))
            }
        })
    }
    pub(super) fn id(self) -> i16 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }
}

/// Timestamp type of a batch (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Producer-assigned.
    CreateTime,
    /// Broker-assigned at append; every record's timestamp is the batch's max timestamp.
    LogAppendTime,
}

pub(super) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// Writes a big-endian field at `at` (as `v.to_be_bytes()`).
pub(super) fn put<const N: usize>(b: &mut [u8], at: usize, v: [u8; N]) {
    b[at..at + N].copy_from_slice(&v);
}

/// One complete v2 record batch, as a zero-copy slice of a fetch response.
/// Accessors read the header without decompressing anything.
#[derive(Clone, PartialEq, Eq)]
pub struct RecordBatch {
    bytes: Bytes,
}

impl std::fmt::Debug for RecordBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordBatch")
            .field("base_offset", &self.base_offset())
            .field("last_offset", &self.last_offset())
            .field("records", &self.record_count())
            .field("size", &self.size())
            .field("codec", &self.codec())
            .field("attributes", &self.attributes())
            .finish()
    }
}

impl RecordBatch {
    /// Wraps exactly one batch. Checks length and magic; use
    /// [`RecordBatch::verify_crc`] to check the checksum.
    pub fn new(bytes: Bytes) -> Result<Self> {
        if bytes.len() < HEADER_SIZE {
            return Err(KafkaError::InvalidBatch(format!(
                "{} bytes is shorter than a v2 header",
                bytes.len()
            )));
        }
        // A negative length overflowed `as usize + 12` (found by the fuzzer).
        let declared = be_i32(&bytes, BATCH_LENGTH);
        if usize::try_from(declared).map(|l| l + LOG_OVERHEAD) != Ok(bytes.len()) {
            return Err(KafkaError::InvalidBatch(format!(
                "batch length {declared} + {LOG_OVERHEAD} != buffer {}",
                bytes.len()
            )));
        }
        let (base, delta) = (
            be_i64(&bytes, BASE_OFFSET),
            be_i32(&bytes, LAST_OFFSET_DELTA),
        );
        if base.checked_add(delta as i64 + 1).is_none() {
            // Its last and next offsets would overflow (found by the fuzzer).
            return Err(KafkaError::InvalidBatch(format!(
                "base offset {base} + last offset delta {delta} is past the largest offset"
            )));
        }
        if bytes[MAGIC] != 2 {
            return Err(KafkaError::InvalidBatch(format!(
                "message format v{} (magic {}) is not supported; only v2 batches can be mirrored",
                bytes[MAGIC], bytes[MAGIC]
            )));
        }
        Ok(RecordBatch { bytes })
    }

    /// The raw bytes (header + payload).
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }
    /// Size on the wire: 12 + batchLength. What `max.message.bytes` limits.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
    /// First offset of the batch in the source log.
    pub fn base_offset(&self) -> i64 {
        be_i64(&self.bytes, BASE_OFFSET)
    }
    /// `lastOffsetDelta`: last offset − base offset, kept even when
    /// compaction removed the last records.
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(&self.bytes, LAST_OFFSET_DELTA)
    }
    /// Last offset covered by the batch.
    pub fn last_offset(&self) -> i64 {
        self.base_offset() + self.last_offset_delta() as i64
    }
    /// The offset a fetch continues from after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    /// Leader epoch of the source leader that appended the batch.
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(&self.bytes, PARTITION_LEADER_EPOCH)
    }
    /// Magic (always 2 here).
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC] as i8
    }
    /// Stored CRC-32C.
    pub fn crc(&self) -> u32 {
        u32::from_be_bytes(self.bytes[CRC..CRC + 4].try_into().unwrap())
    }
    /// Raw attributes.
    pub fn attributes(&self) -> i16 {
        be_i16(&self.bytes, ATTRIBUTES)
    }
    /// Compression codec.
    pub fn codec(&self) -> Result<Codec> {
        Codec::from_bits(self.attributes())
    }
    /// Timestamp type.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    /// Part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_BIT != 0
    }
    /// A control batch (transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_BIT != 0
    }
    /// Delete-horizon flag (set by the source's cleaner; baseTimestamp then holds the horizon).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & DELETE_HORIZON_BIT != 0
    }
    /// First record's timestamp (or the delete horizon).
    pub fn base_timestamp(&self) -> i64 {
        be_i64(&self.bytes, BASE_TIMESTAMP)
    }
    /// Max timestamp; for LogAppendTime batches, every record's timestamp.
    pub fn max_timestamp(&self) -> i64 {
        be_i64(&self.bytes, MAX_TIMESTAMP)
    }
    /// Source producer id (-1 if none).
    pub fn producer_id(&self) -> i64 {
        be_i64(&self.bytes, PRODUCER_ID)
    }
    /// Source producer epoch.
    pub fn producer_epoch(&self) -> i16 {
        be_i16(&self.bytes, PRODUCER_EPOCH)
    }
    /// Source base sequence.
    pub fn base_sequence(&self) -> i32 {
        be_i32(&self.bytes, BASE_SEQUENCE)
    }
    /// Number of records actually in the batch (≠ lastOffsetDelta+1 after compaction).
    pub fn record_count(&self) -> i32 {
        be_i32(&self.bytes, RECORD_COUNT)
    }
    /// The (possibly compressed) records payload.
    pub fn payload(&self) -> Bytes {
        self.bytes.slice(HEADER_SIZE..)
    }
    /// Whether the stored CRC matches the content.
    pub fn verify_crc(&self) -> bool {
        crc32c::crc32c(&self.bytes[ATTRIBUTES..]) == self.crc()
    }
}

/// Iterates over the batches of a fetched record set without copying. A
/// trailing partial batch (the broker cuts responses at the size limit) ends
/// the iteration and is reported by [`BatchIter::truncated`].
#[derive(Debug, Clone)]
pub struct BatchIter {
    rest: Bytes,
    truncated: bool,
}

impl BatchIter {
    /// Iterates over `records` as returned in a fetch response.
    pub fn new(records: Bytes) -> Self {
        BatchIter {
            rest: records,
            truncated: false,
        }
    }
    /// Whether a partial batch was found at the end.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < LOG_OVERHEAD + 5 {
            self.truncated = true;
            self.rest = Bytes::new();
            return None;
        }
        let len = be_i32(&self.rest, BATCH_LENGTH);
        // Negative in any format (a damaged or hostile response; found by
        // the fuzzer, it overflowed the sum below).
        if len < 0 || (len < (HEADER_SIZE - LOG_OVERHEAD) as i32 && self.rest[MAGIC] == 2) {
            self.rest = Bytes::new();
            return Some(Err(KafkaError::InvalidBatch(format!(
                "batch length {len} too small"
            ))));
        }
        let total = len as usize + LOG_OVERHEAD;
        if total > self.rest.len() {
            self.truncated = true;
            self.rest = Bytes::new();
            return None;
        }
        let b = self.rest.split_to(total);
        Some(RecordBatch::new(b))
    }
}

/// Writes producer id, epoch and base sequence into a batch and recomputes
/// its CRC-32C. Called once per send; a retry re-sends the same bytes, so the
/// broker's duplicate detection sees the identical sequence range.
pub fn stamp_producer(batch: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) {
    stamp_producer_parts(batch, &[], producer_id, producer_epoch, base_sequence)
}

/// [`stamp_producer`] for a batch whose bytes are `head` then `tail` (a
/// header rewritten here before records left where they were fetched).
pub fn stamp_producer_parts(
    head: &mut [u8],
    tail: &[u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) {
    put(head, PRODUCER_ID, producer_id.to_be_bytes());
    put(head, PRODUCER_EPOCH, producer_epoch.to_be_bytes());
    put(head, BASE_SEQUENCE, base_sequence.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head[ATTRIBUTES..]), tail);
    put(head, CRC, crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header-only batch claiming `records` records over `payload` bytes.
    fn batch(records: i32, payload: usize) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_SIZE + payload];
        let len = (HEADER_SIZE + payload - LOG_OVERHEAD) as i32;
        put(&mut b, BATCH_LENGTH, len.to_be_bytes());
        b[MAGIC] = 2;
        put(&mut b, RECORD_COUNT, records.to_be_bytes());
        b
    }

    #[test]
    fn iterator_stops_at_partial_batch() {
        let (a, b) = (batch(1, 10), batch(2, 20));
        let mut all = a.clone();
        all.extend_from_slice(&b);
        all.extend_from_slice(&b[..30]);
        let mut it = BatchIter::new(Bytes::from(all));
        assert_eq!(it.next().unwrap().unwrap().record_count(), 1);
        assert_eq!(it.next().unwrap().unwrap().record_count(), 2);
        assert!(it.next().is_none());
        assert!(it.truncated());
    }

    #[test]
    fn stamp_writes_the_producer_and_seals_the_crc() {
        let mut b = batch(0, 0);
        stamp_producer(&mut b, 7, 2, 40);
        let b = RecordBatch::new(Bytes::from(b)).unwrap();
        assert!(b.verify_crc());
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (7, 2, 40)
        );
    }
}
