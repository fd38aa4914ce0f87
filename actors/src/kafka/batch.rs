//! Raw v2 record batches: a zero-copy header view, an iterator over a fetched
//! record set, the pass-through / re-encode / drop classifier, the header
//! rewrite for forwarding, and a record codec for what cannot pass through.
//!
//! Why our own record codec and not `kafka_protocol::records`: that codec keeps
//! headers in an `IndexMap<StrBytes, _>`, which merges duplicate header keys
//! and rejects non-UTF-8 keys — both legal in Kafka and both must survive a
//! mirror. Here headers are an ordered `Vec` of raw byte keys. The crate's
//! compression codecs are reused.
//!
//! Layout of a v2 batch (offsets in bytes, see `DefaultRecordBatch.java`):
//! `0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 |
//! 16 magic i8 | 17 crc u32 | 21 attributes i16 | 23 lastOffsetDelta i32 |
//! 27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64 |
//! 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordCount i32 | 61 records`.
//! The CRC-32C covers bytes 21..end.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as cmpr, Compressor, Decompressor};

use super::error::{KafkaError, Result};

/// Size of the v2 batch header.
pub const HEADER_SIZE: usize = 61;
/// Bytes before the batch length field's coverage starts (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;

const BASE_OFFSET: usize = 0;
const BATCH_LENGTH: usize = 8;
const PARTITION_LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORD_COUNT: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;
const DELETE_HORIZON_BIT: i16 = 0x40;

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
    fn id(self) -> i16 {
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

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
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
        let len = be_i32(&bytes, BATCH_LENGTH) as usize + LOG_OVERHEAD;
        if len != bytes.len() {
            return Err(KafkaError::InvalidBatch(format!(
                "batch length {len} != buffer {}",
                bytes.len()
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

    /// For a control batch: the marker type (0 = ABORT, 1 = COMMIT), read
    /// from the key of its single record.
    pub fn control_type(&self) -> Result<i16> {
        let decoded = decode_records(self)?;
        let key = decoded
            .records
            .first()
            .and_then(|r| r.key.clone())
            .ok_or_else(|| {
                KafkaError::InvalidBatch("control batch without a keyed record".into())
            })?;
        if key.len() < 4 {
            return Err(KafkaError::InvalidBatch(
                "control record key too short".into(),
            ));
        }
        Ok(be_i16(&key, 2))
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
        if len < (HEADER_SIZE - LOG_OVERHEAD) as i32 && self.rest[MAGIC] == 2 {
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

/// What to do with one source batch on its way to the destination, per
/// `reference/broker-validation.md`.
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

/// A batch ready for our idempotent producer: producer id/epoch/sequence are
/// stamped (and the CRC computed) by the producer when it assigns the
/// sequence. `source_offsets` says which source offsets its records carry,
/// in order, for the offset map.
#[derive(Debug)]
pub struct OutgoingBatch {
    /// Header + payload; header fields other than pid/epoch/seq/CRC are final.
    pub bytes: BytesMut,
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
    /// Pass-through: copies the batch once into an owned buffer and rewrites
    /// base offset (0), partition leader epoch (-1) and clears the
    /// LogAppendTime, transactional and delete-horizon bits. The payload is not
    /// touched. The CRC is computed later by [`stamp_producer`].
    pub fn pass_through(batch: &RecordBatch) -> Self {
        let mut bytes = BytesMut::with_capacity(batch.size());
        bytes.extend_from_slice(batch.as_bytes());
        bytes[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&0i64.to_be_bytes());
        bytes[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
            .copy_from_slice(&(-1i32).to_be_bytes());
        let attrs =
            batch.attributes() & !(TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | DELETE_HORIZON_BIT);
        bytes[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attrs.to_be_bytes());
        OutgoingBatch {
            bytes,
            record_count: batch.record_count(),
            source_offsets: SourceOffsets::Range {
                first: batch.base_offset(),
                last: batch.last_offset(),
            },
        }
    }
}

/// Writes producer id, epoch and base sequence into a batch and recomputes
/// its CRC-32C. Called once per send; a retry re-sends the same bytes, so the
/// broker's duplicate detection sees the identical sequence range.
pub fn stamp_producer(batch: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) {
    batch[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&producer_epoch.to_be_bytes());
    batch[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES..]);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// One record, decoded. Key, value and header values are slices of the
/// (decompressed) payload; headers keep order, duplicates, raw key bytes and
/// null values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset delta inside the source batch.
    pub offset_delta: i32,
    /// Absolute timestamp (base timestamp + delta; for LogAppendTime
    /// batches, the batch max timestamp).
    pub timestamp: i64,
    /// Key, `None` for a null key.
    pub key: Option<Bytes>,
    /// Value, `None` for a null value (tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// A batch's records, decoded.
#[derive(Debug, Clone)]
pub struct DecodedBatch {
    /// Source base offset.
    pub base_offset: i64,
    /// Source codec.
    pub codec: Codec,
    /// Records in order.
    pub records: Vec<Record>,
}

fn invalid(m: &str) -> KafkaError {
    KafkaError::InvalidBatch(m.to_owned())
}

fn decompress(codec: Codec, mut payload: Bytes) -> Result<Bytes> {
    let f = |b: &mut Bytes| -> anyhow::Result<Bytes> { Ok(std::mem::take(b)) };
    let r = match codec {
        Codec::None => return Ok(payload),
        Codec::Gzip => cmpr::Gzip::decompress(&mut payload, f),
        Codec::Snappy => cmpr::Snappy::decompress(&mut payload, f),
        Codec::Lz4 => cmpr::Lz4::decompress(&mut payload, f),
        Codec::Zstd => cmpr::Zstd::decompress(&mut payload, f),
    };
    r.map_err(|e| KafkaError::InvalidBatch(format!("{codec:?} decompression failed: {e:#}")))
}

struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| invalid("truncated record"))?;
        self.pos += 1;
        Ok(b)
    }
    fn varlong(&mut self) -> Result<i64> {
        let mut raw: u64 = 0;
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            raw |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(invalid("varint too long"));
            }
        }
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }
    fn varint(&mut self) -> Result<i32> {
        let v = self.varlong()?;
        i32::try_from(v).map_err(|_| invalid("varint out of range"))
    }
    fn bytes(&mut self, len: usize) -> Result<Bytes> {
        if self.pos + len > self.buf.len() {
            return Err(invalid("truncated record field"));
        }
        let b = self.buf.slice(self.pos..self.pos + len);
        self.pos += len;
        Ok(b)
    }
    fn nullable(&mut self) -> Result<Option<Bytes>> {
        let len = self.varint()?;
        if len < 0 {
            Ok(None)
        } else {
            self.bytes(len as usize).map(Some)
        }
    }
}

/// Decodes (decompressing if needed) every record of a batch. Used only on
/// the slow path (re-encoding, control markers).
pub fn decode_records(batch: &RecordBatch) -> Result<DecodedBatch> {
    let codec = batch.codec()?;
    let data = decompress(codec, batch.payload())?;
    let count = batch.record_count().max(0) as usize;
    let mut r = Reader { buf: data, pos: 0 };
    let mut records = Vec::with_capacity(count);
    let log_append = batch.timestamp_type() == TimestampType::LogAppendTime;
    for _ in 0..count {
        let len = r.varint()?;
        if len < 0 {
            return Err(invalid("negative record length"));
        }
        let end = r.pos + len as usize;
        if end > r.buf.len() {
            return Err(invalid("record runs past the batch"));
        }
        let _attributes = r.byte()?;
        let ts_delta = r.varlong()?;
        let offset_delta = r.varint()?;
        let key = r.nullable()?;
        let value = r.nullable()?;
        let n_headers = r.varint()?;
        if n_headers < 0 {
            return Err(invalid("negative header count"));
        }
        let mut headers = Vec::with_capacity(n_headers as usize);
        for _ in 0..n_headers {
            let klen = r.varint()?;
            if klen < 0 {
                return Err(invalid("null header key"));
            }
            let k = r.bytes(klen as usize)?;
            let v = r.nullable()?;
            headers.push((k, v));
        }
        if r.pos != end {
            return Err(invalid("record length does not match its content"));
        }
        let timestamp = if log_append {
            batch.max_timestamp()
        } else {
            batch.base_timestamp() + ts_delta
        };
        records.push(Record {
            offset_delta,
            timestamp,
            key,
            value,
            headers,
        });
    }
    if r.pos != r.buf.len() {
        return Err(invalid("bytes left after the declared record count"));
    }
    Ok(DecodedBatch {
        base_offset: batch.base_offset(),
        codec,
        records,
    })
}

fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn put_varlong<B: BufMut>(buf: &mut B, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

fn put_nullable<B: BufMut>(buf: &mut B, v: &Option<Bytes>) {
    match v {
        None => put_varlong(buf, -1),
        Some(b) => {
            put_varlong(buf, b.len() as i64);
            buf.put_slice(b);
        }
    }
}

fn nullable_len(v: &Option<Bytes>) -> usize {
    match v {
        None => 1,
        Some(b) => varint_len(b.len() as i64) + b.len(),
    }
}

fn record_body_len(r: &Record, ts_delta: i64, offset_delta: i32) -> usize {
    1 + varint_len(ts_delta)
        + varint_len(offset_delta as i64)
        + nullable_len(&r.key)
        + nullable_len(&r.value)
        + varint_len(r.headers.len() as i64)
        + r.headers
            .iter()
            .map(|(k, v)| varint_len(k.len() as i64) + k.len() + nullable_len(v))
            .sum::<usize>()
}

/// Upper bound of a record's encoded size (uncompressed), for splitting.
pub fn record_size_estimate(r: &Record) -> usize {
    let body = record_body_len(r, i64::MAX / 2, i32::MAX);
    body + varint_len(body as i64)
}

/// lz4 at its fast level. kafka-protocol's own lz4 compressor runs at level
/// 4, which the lz4 frame library treats as LZ4HC: about ten times the CPU,
/// and merged batches are re-compressed on the hot path. The frame is the
/// one Kafka's own producer writes (`KafkaLZ4BlockOutputStream`: independent
/// 64 KiB blocks, no content checksum — the batch CRC covers the bytes, and
/// the xxHash was a third of the remaining compression cost in a profile).
fn lz4_fast(
    out: &mut BytesMut,
    write: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut plain = BytesMut::new();
    write(&mut plain)?;
    let mut encoder = lz4::EncoderBuilder::new()
        .level(0)
        .block_mode(lz4::BlockMode::Independent)
        .checksum(lz4::ContentChecksum::NoChecksum)
        .build(out.writer())?;
    encoder.write_all(&plain)?;
    let (_, result) = encoder.finish();
    Ok(result?)
}

/// Encodes records into one new v2 batch with offsets 0..n-1 (CreateTime,
/// not transactional, producer fields -1 until [`stamp_producer`]).
pub fn encode_batch(records: &[Record], codec: Codec) -> Result<BytesMut> {
    if records.is_empty() {
        return Err(invalid("cannot encode an empty batch"));
    }
    let base_ts = records[0].timestamp;
    let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(base_ts);
    let mut out = BytesMut::with_capacity(
        HEADER_SIZE + records.iter().map(record_size_estimate).sum::<usize>(),
    );
    out.resize(HEADER_SIZE, 0);
    let write = |buf: &mut BytesMut| -> anyhow::Result<()> {
        for (i, r) in records.iter().enumerate() {
            let ts_delta = r.timestamp - base_ts;
            let len = record_body_len(r, ts_delta, i as i32);
            put_varlong(buf, len as i64);
            buf.put_u8(0);
            put_varlong(buf, ts_delta);
            put_varlong(buf, i as i64);
            put_nullable(buf, &r.key);
            put_nullable(buf, &r.value);
            put_varlong(buf, r.headers.len() as i64);
            for (k, v) in &r.headers {
                put_varlong(buf, k.len() as i64);
                buf.put_slice(k);
                put_nullable(buf, v);
            }
        }
        Ok(())
    };
    let res = match codec {
        Codec::None => write(&mut out),
        Codec::Gzip => cmpr::Gzip::compress(&mut out, write),
        Codec::Snappy => cmpr::Snappy::compress(&mut out, write),
        Codec::Lz4 => lz4_fast(&mut out, write),
        Codec::Zstd => cmpr::Zstd::compress(&mut out, write),
    };
    res.map_err(|e| KafkaError::InvalidBatch(format!("{codec:?} compression failed: {e:#}")))?;
    let batch_len = (out.len() - LOG_OVERHEAD) as i32;
    let n = records.len() as i32;
    let h = &mut out[..HEADER_SIZE];
    h[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&0i64.to_be_bytes());
    h[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&batch_len.to_be_bytes());
    h[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4].copy_from_slice(&(-1i32).to_be_bytes());
    h[MAGIC] = 2;
    h[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&codec.id().to_be_bytes());
    h[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(n - 1).to_be_bytes());
    h[BASE_TIMESTAMP..BASE_TIMESTAMP + 8].copy_from_slice(&base_ts.to_be_bytes());
    h[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&max_ts.to_be_bytes());
    h[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&(-1i64).to_be_bytes());
    h[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&(-1i16).to_be_bytes());
    h[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&(-1i32).to_be_bytes());
    h[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&n.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES..]);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Encodes records into as many batches as needed so that each is at most
/// `max_bytes` on the wire. A single record that cannot fit is
/// [`KafkaError::RecordTooLarge`].
pub fn encode_batches(
    records: &[Record],
    source_offsets: &[i64],
    codec: Codec,
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
            let bytes = encode_batch(&records[start..end], codec)?;
            if bytes.len() <= max_bytes {
                let offs = &source_offsets[start..end];
                let consecutive = offs.windows(2).all(|w| w[1] == w[0] + 1);
                out.push(OutgoingBatch {
                    bytes,
                    record_count: (end - start) as i32,
                    source_offsets: if consecutive {
                        SourceOffsets::Range {
                            first: offs[0],
                            last: offs[offs.len() - 1],
                        }
                    } else {
                        SourceOffsets::List(offs.to_vec())
                    },
                });
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
/// [`classify`]'s verdict. Empty result for dropped batches. Records keep
/// their timestamps (LogAppendTime batches: the source's append time becomes
/// each record's CreateTime), keys, values and headers byte for byte; the
/// codec is kept.
pub fn prepare(
    batch: &RecordBatch,
    action: BatchAction,
    max_message_bytes: usize,
    from_offset: i64,
) -> Result<Vec<OutgoingBatch>> {
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
                ob.bytes[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4]
                    .copy_from_slice(&(n as i32 - 1).to_be_bytes());
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
            encode_batches(&decoded.records, &offsets, decoded.codec, max_message_bytes)
        }
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
    match batches {
        [] => Ok(Vec::new()),
        [one] => Ok(vec![OutgoingBatch::pass_through(one)]),
        [first, ..] => {
            let codec = first.codec()?;
            let mut records = Vec::new();
            let mut offsets = Vec::new();
            for b in batches {
                if b.codec()? != codec {
                    return Err(invalid("merged batches must share one codec"));
                }
                let decoded = decode_records(b)?;
                offsets.extend(
                    decoded
                        .records
                        .iter()
                        .map(|r| decoded.base_offset + r.offset_delta as i64),
                );
                records.extend(decoded.records);
            }
            encode_batches(&records, &offsets, codec, max_bytes.min(MERGE_TARGET_BYTES))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: i32, ts: i64) -> Record {
        Record {
            offset_delta: i,
            timestamp: ts,
            key: if i % 3 == 0 {
                None
            } else {
                Some(Bytes::from(format!("k{i}")))
            },
            value: if i % 4 == 0 {
                None
            } else {
                Some(Bytes::from(vec![b'v'; (i as usize) * 7]))
            },
            headers: vec![
                (Bytes::from_static(b"dup"), Some(Bytes::from_static(b"1"))),
                (Bytes::from_static(b"dup"), None),
                (
                    Bytes::from_static(b"\xc3\x28"),
                    Some(Bytes::from_static(b"")),
                ),
                (Bytes::from_static(b"dup"), Some(Bytes::from_static(b"3"))),
            ],
        }
    }

    const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    #[test]
    fn encode_decode_roundtrip_all_codecs() {
        let records: Vec<Record> = (0..50)
            .map(|i| rec(i, 1_700_000_000_000 + (i as i64 % 7) * 13))
            .collect();
        for codec in ALL {
            let bytes = encode_batch(&records, codec).unwrap().freeze();
            let b = RecordBatch::new(bytes).unwrap();
            assert!(b.verify_crc(), "{codec:?}");
            assert_eq!(b.codec().unwrap(), codec);
            assert_eq!(b.record_count(), 50);
            assert_eq!(b.last_offset_delta(), 49);
            assert_eq!(b.max_timestamp(), 1_700_000_000_000 + 6 * 13);
            let d = decode_records(&b).unwrap();
            assert_eq!(d.records, records, "{codec:?}");
            assert_eq!(classify(&b, false, 1 << 20, 0), BatchAction::PassThrough);
        }
    }

    #[test]
    fn compat_with_kafka_protocol_crate_decoder() {
        // Cross-check our encoder against an independent decoder.
        let records: Vec<Record> = (0..5)
            .map(|i| Record {
                headers: vec![(Bytes::from_static(b"h"), Some(Bytes::from_static(b"x")))],
                ..rec(i, 1000 + i as i64)
            })
            .collect();
        for codec in ALL {
            let mut bytes = encode_batch(&records, codec).unwrap().freeze();
            let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut bytes).unwrap();
            let got = &sets[0].records;
            assert_eq!(got.len(), 5);
            for (a, b) in got.iter().zip(&records) {
                assert_eq!(a.key, b.key);
                assert_eq!(a.value, b.value);
                assert_eq!(a.timestamp, b.timestamp);
            }
        }
    }

    #[test]
    fn pass_through_rewrite_and_stamp() {
        let records: Vec<Record> = (0..3).map(|i| rec(i, 5)).collect();
        let mut src = encode_batch(&records, Codec::Lz4).unwrap();
        // Make it look like a fetched batch: offset 1000, epoch 7, LogAppendTime off, txn + horizon on.
        src[0..8].copy_from_slice(&1000i64.to_be_bytes());
        src[12..16].copy_from_slice(&7i32.to_be_bytes());
        let attrs = (Codec::Lz4.id() | TRANSACTIONAL_BIT | DELETE_HORIZON_BIT).to_be_bytes();
        src[21..23].copy_from_slice(&attrs);
        stamp_producer(&mut src, 99, 3, 40);
        let src = RecordBatch::new(src.freeze()).unwrap();
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
        stamp_producer(&mut out.bytes, 5, 0, 12);
        let b = RecordBatch::new(out.bytes.freeze()).unwrap();
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

    /// Builds an uncompressed batch whose records have the given offset deltas
    /// (as a compacted source log has them).
    fn gapped(deltas: &[i32], last_offset_delta: i32, codec: Codec) -> RecordBatch {
        let records: Vec<Record> = deltas.iter().map(|&d| rec(d + 1, 100)).collect();
        let mut b = encode_batch(&records, codec).unwrap();
        // Re-encode payload with explicit deltas.
        let mut payload = BytesMut::new();
        for (r, &d) in records.iter().zip(deltas) {
            let len = record_body_len(r, 0, d);
            put_varlong(&mut payload, len as i64);
            payload.put_u8(0);
            put_varlong(&mut payload, 0);
            put_varlong(&mut payload, d as i64);
            put_nullable(&mut payload, &r.key);
            put_nullable(&mut payload, &r.value);
            put_varlong(&mut payload, r.headers.len() as i64);
            for (k, v) in &r.headers {
                put_varlong(&mut payload, k.len() as i64);
                payload.put_slice(k);
                put_nullable(&mut payload, v);
            }
        }
        let mut compressed = BytesMut::new();
        let w = |buf: &mut BytesMut| -> anyhow::Result<()> {
            buf.put_slice(&payload);
            Ok(())
        };
        match codec {
            Codec::None => w(&mut compressed).unwrap(),
            Codec::Gzip => cmpr::Gzip::compress(&mut compressed, w).unwrap(),
            _ => unimplemented!(),
        }
        b.truncate(HEADER_SIZE);
        b.extend_from_slice(&compressed);
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[0..8].copy_from_slice(&500i64.to_be_bytes());
        b[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
        stamp_producer(&mut b, -1, -1, -1);
        RecordBatch::new(b.freeze()).unwrap()
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
            let nb = RecordBatch::new(out[0].bytes.clone().freeze()).unwrap();
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
        let mut bytes = out[0].bytes.clone();
        stamp_producer(&mut bytes, 1, 0, 0);
        let nb = RecordBatch::new(bytes.freeze()).unwrap();
        assert_eq!(nb.last_offset_delta(), 2);
        assert_eq!(nb.payload(), b.payload());
    }

    #[test]
    fn log_append_time_becomes_create_time_per_record() {
        let records: Vec<Record> = (0..4).map(|i| rec(i, 10 + i as i64)).collect();
        let mut raw = encode_batch(&records, Codec::Snappy).unwrap();
        raw[21..23].copy_from_slice(&(Codec::Snappy.id() | TIMESTAMP_TYPE_BIT).to_be_bytes());
        raw[35..43].copy_from_slice(&777i64.to_be_bytes());
        stamp_producer(&mut raw, -1, -1, -1);
        let b = RecordBatch::new(raw.freeze()).unwrap();
        let action = classify(&b, false, 1 << 20, 0);
        assert_eq!(action, BatchAction::Reencode(ReencodeReason::LogAppendTime));
        let out = prepare(&b, action, 1 << 20, 0).unwrap();
        let nb = RecordBatch::new(out[0].bytes.clone().freeze()).unwrap();
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
        let mut raw = encode_batch(&records, Codec::None).unwrap();
        raw[0..8].copy_from_slice(&42i64.to_be_bytes());
        let b = RecordBatch::new(raw.freeze()).unwrap();
        let action = classify(&b, false, 10_000, 0);
        assert_eq!(action, BatchAction::Reencode(ReencodeReason::TooLarge));
        let out = prepare(&b, action, 10_000, 0).unwrap();
        assert!(out.len() >= 10);
        let mut next = 42;
        for o in &out {
            assert!(o.bytes.len() <= 10_000);
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
        let mut raw = encode_batch(&records, codec).unwrap();
        raw[0..8].copy_from_slice(&offset.to_be_bytes());
        RecordBatch::new(raw.freeze()).unwrap()
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
            let merged = RecordBatch::new(out[0].bytes.clone().freeze()).unwrap();
            assert_eq!(merged.codec().unwrap(), codec);
            assert_eq!(merged.record_count(), 12);
            assert_eq!(merged.last_offset_delta(), 11, "dense offsets");
            assert_eq!(merged.max_timestamp(), 74);
            let expected: Vec<Record> = batches
                .iter()
                .flat_map(|b| decode_records(b).unwrap().records)
                .enumerate()
                .map(|(i, r)| Record {
                    offset_delta: i as i32,
                    ..r
                })
                .collect();
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
        assert!(out.iter().all(|o| o.bytes.len() <= 4_000));
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
        assert_eq!(one[0].bytes[61..], batches[0].as_bytes()[61..]);
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
        let mut raw = encode_batch(&records, Codec::Zstd).unwrap();
        raw[0..8].copy_from_slice(&10i64.to_be_bytes());
        let b = RecordBatch::new(raw.freeze()).unwrap();
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
        let nb = RecordBatch::new(out[0].bytes.clone().freeze()).unwrap();
        let d = decode_records(&nb).unwrap();
        assert_eq!(d.records[0].key, records[2].key);
        assert_eq!(d.records.len(), 3);
    }

    #[test]
    fn iterator_stops_at_partial_batch() {
        let a = encode_batch(&[rec(1, 1)], Codec::None).unwrap();
        let b = encode_batch(&[rec(2, 1), rec(3, 1)], Codec::Gzip).unwrap();
        let mut all = BytesMut::new();
        all.extend_from_slice(&a);
        all.extend_from_slice(&b);
        all.extend_from_slice(&b[..30]);
        let mut it = BatchIter::new(all.freeze());
        assert_eq!(it.next().unwrap().unwrap().record_count(), 1);
        assert_eq!(it.next().unwrap().unwrap().record_count(), 2);
        assert!(it.next().is_none());
        assert!(it.truncated());
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
        let mut raw = encode_batch(&[r], Codec::None).unwrap();
        raw[0..8].copy_from_slice(&offset.to_be_bytes());
        raw[21..23].copy_from_slice(&(TRANSACTIONAL_BIT | CONTROL_BIT).to_be_bytes());
        stamp_producer(&mut raw, pid, 0, -1);
        RecordBatch::new(raw.freeze()).unwrap()
    }

    fn txn(pid: i64, offset: i64) -> RecordBatch {
        let mut raw = encode_batch(&[rec(1, 1)], Codec::None).unwrap();
        raw[0..8].copy_from_slice(&offset.to_be_bytes());
        raw[21..23].copy_from_slice(&TRANSACTIONAL_BIT.to_be_bytes());
        stamp_producer(&mut raw, pid, 0, 0);
        RecordBatch::new(raw.freeze()).unwrap()
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

    #[test]
    fn varint_edges() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            i32::MAX as i64,
            i32::MIN as i64,
            i64::MAX,
            i64::MIN,
        ] {
            let mut b = BytesMut::new();
            put_varlong(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            let mut r = Reader {
                buf: b.freeze(),
                pos: 0,
            };
            assert_eq!(r.varlong().unwrap(), v);
        }
    }
}
