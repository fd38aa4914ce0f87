//! kmirror's own v2 record codec: for the batches that cannot pass through
//! (compacted, LogAppendTime, too large, resumed mid-batch, merged), for
//! control markers, and for building batches in tests.
//!
//! Why our own and not `kafka_protocol::records`: that codec keeps headers
//! in an `IndexMap<StrBytes, _>`, which merges duplicate header keys and
//! rejects non-UTF-8 keys — both legal in Kafka and both must survive a
//! mirror. Here headers are an ordered `Vec` of raw byte keys. The crate's
//! compression codecs are reused.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as cmpr, Compressor, Decompressor};

use super::view::{
    put, stamp_producer, Codec, RecordBatch, TimestampType, ATTRIBUTES, BASE_OFFSET,
    BASE_TIMESTAMP, BATCH_LENGTH, CONTROL_BIT, DELETE_HORIZON_BIT, HEADER_SIZE, LAST_OFFSET_DELTA,
    LOG_OVERHEAD, MAGIC, MAX_TIMESTAMP, PARTITION_LEADER_EPOCH, RECORD_COUNT, TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
};
use crate::kafka::error::{KafkaError, Result};

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
    /// Size of the records decompressed: with the payload's size, how much
    /// the source's compression saved.
    pub plain_len: usize,
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
        Codec::Lz4 => match super::lz4::decode(&payload) {
            Some(plain) => return Ok(Bytes::from(plain)),
            None => cmpr::Lz4::decompress(&mut payload, f),
        },
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
    // Every record takes at least a byte, so no more than the payload's
    // length are reserved, whatever the header claims (a claimed 2^31
    // records aborted the process on allocation; found by the fuzzer).
    let mut records = Vec::with_capacity(count.min(data.len()));
    let plain_len = data.len();
    let mut r = Reader { buf: data, pos: 0 };
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
        // Within the batch, as Kafka writes it: so base + delta, which
        // prepare and merge compute, stays at or below the last offset.
        if !(0..=batch.last_offset_delta()).contains(&offset_delta) {
            return Err(invalid("record offset delta outside the batch"));
        }
        let key = r.nullable()?;
        let value = r.nullable()?;
        let n_headers = r.varint()?;
        if n_headers < 0 {
            return Err(invalid("negative header count"));
        }
        let mut headers = Vec::with_capacity((n_headers as usize).min(end - r.pos));
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
            // Java's long addition: a hostile delta wraps, never panics.
            batch.base_timestamp().wrapping_add(ts_delta)
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
        plain_len,
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

/// lz4 at its fast level, or stored blocks where compressing would not pay
/// (`compress` false). kafka-protocol's own lz4 compressor runs at level 4,
/// which the lz4 frame library treats as LZ4HC: about ten times the CPU, and
/// merged batches are re-compressed on the hot path. The frame is the one
/// Kafka's own producer writes (`KafkaLZ4BlockOutputStream`: independent
/// 64 KiB blocks, no checksums — the batch CRC covers the bytes; see
/// [`super::lz4`]).
fn lz4_fast(
    out: &mut BytesMut,
    compress: bool,
    write: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    // `out` was sized for the records: so is the plain buffer, which then
    // never grows (a growing buffer copied every merged batch once more).
    let mut plain = BytesMut::with_capacity(out.capacity());
    write(&mut plain)?;
    Ok(super::lz4::encode(&plain, compress, out)?)
}

/// Encodes records into one new v2 batch with offsets 0..n-1 (CreateTime,
/// not transactional, producer fields -1 until [`stamp_producer`]).
pub fn encode_batch(records: &[Record], codec: Codec) -> Result<BytesMut> {
    encode(records, codec, true, |i, _| i as i32)
}

/// [`encode_batch`], but lz4 blocks are stored, not compressed, unless
/// `compress`: for records whose source batches lz4 could not shrink
/// (see [`super::lz4::worth_compressing`]). Other codecs compress anyway.
pub fn encode_batch_effort(records: &[Record], codec: Codec, compress: bool) -> Result<BytesMut> {
    encode(records, codec, compress, |i, _| i as i32)
}

/// One batch of `records`, each at the offset delta `delta` gives it, with
/// the header [`encode_batch`] documents.
fn encode(
    records: &[Record],
    codec: Codec,
    compress: bool,
    delta: impl Fn(usize, &Record) -> i32,
) -> Result<BytesMut> {
    let Some(last) = records.last() else {
        return Err(invalid("cannot encode an empty batch"));
    };
    let base_ts = records[0].timestamp;
    let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(base_ts);
    let mut out = BytesMut::with_capacity(
        HEADER_SIZE + records.iter().map(record_size_estimate).sum::<usize>(),
    );
    out.resize(HEADER_SIZE, 0);
    let write = |buf: &mut BytesMut| -> anyhow::Result<()> {
        for (i, r) in records.iter().enumerate() {
            let ts_delta = r.timestamp - base_ts;
            let offset_delta = delta(i, r);
            let len = record_body_len(r, ts_delta, offset_delta);
            put_varlong(buf, len as i64);
            buf.put_u8(0);
            put_varlong(buf, ts_delta);
            put_varlong(buf, offset_delta as i64);
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
        Codec::Lz4 => lz4_fast(&mut out, compress, write),
        Codec::Zstd => cmpr::Zstd::compress(&mut out, write),
    };
    res.map_err(|e| KafkaError::InvalidBatch(format!("{codec:?} compression failed: {e:#}")))?;
    let batch_len = (out.len() - LOG_OVERHEAD) as i32;
    let last_delta = delta(records.len() - 1, last);
    put(&mut out, BASE_OFFSET, 0i64.to_be_bytes());
    put(&mut out, BATCH_LENGTH, batch_len.to_be_bytes());
    put(&mut out, PARTITION_LEADER_EPOCH, (-1i32).to_be_bytes());
    out[MAGIC] = 2;
    put(&mut out, ATTRIBUTES, codec.id().to_be_bytes());
    put(&mut out, LAST_OFFSET_DELTA, last_delta.to_be_bytes());
    put(&mut out, BASE_TIMESTAMP, base_ts.to_be_bytes());
    put(&mut out, MAX_TIMESTAMP, max_ts.to_be_bytes());
    put(&mut out, RECORD_COUNT, (records.len() as i32).to_be_bytes());
    stamp_producer(&mut out, -1, -1, -1);
    Ok(out)
}

impl RecordBatch {
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
        Ok(i16::from_be_bytes([key[2], key[3]]))
    }
}

/// A real v2 batch with any header a source log can hold: a base offset, a
/// leader epoch, records at compacted offset deltas, a producer, the
/// transactional, control, delete-horizon and LogAppendTime attributes.
/// For tests, so that they build what a broker serves instead of patching
/// bytes at offsets: set the fields that matter, `..BatchBuilder::new(records)`.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    /// The records, each at its own `offset_delta`.
    pub records: Vec<Record>,
    /// Compression of the payload.
    pub codec: Codec,
    /// Where the batch sits in the source log.
    pub base_offset: i64,
    /// The epoch of the leader that appended it.
    pub partition_leader_epoch: i32,
    /// A `lastOffsetDelta` past the last record's, as when compaction
    /// removed the batch's tail.
    pub last_offset_delta: Option<i32>,
    /// LogAppendTime: the broker's append time, which every record then carries.
    pub log_append_time: Option<i64>,
    /// Part of a transaction.
    pub transactional: bool,
    /// A transaction marker (brokers set `transactional` too).
    pub control: bool,
    /// Marked by the source's cleaner.
    pub delete_horizon: bool,
    /// Producer id, epoch and base sequence.
    pub producer: (i64, i16, i32),
}

impl BatchBuilder {
    /// What [`encode_batch`] would make of `records`, but at their own
    /// offset deltas: uncompressed, base offset 0, no leader epoch, no
    /// producer, CreateTime.
    pub fn new(records: Vec<Record>) -> Self {
        BatchBuilder {
            records,
            codec: Codec::None,
            base_offset: 0,
            partition_leader_epoch: -1,
            last_offset_delta: None,
            log_append_time: None,
            transactional: false,
            control: false,
            delete_horizon: false,
            producer: (-1, -1, -1),
        }
    }

    /// The batch, with its CRC.
    pub fn build(&self) -> Result<RecordBatch> {
        let mut b = encode(&self.records, self.codec, true, |_, r| r.offset_delta)?;
        put(&mut b, BASE_OFFSET, self.base_offset.to_be_bytes());
        let epoch = self.partition_leader_epoch;
        put(&mut b, PARTITION_LEADER_EPOCH, epoch.to_be_bytes());
        if let Some(delta) = self.last_offset_delta {
            put(&mut b, LAST_OFFSET_DELTA, delta.to_be_bytes());
        }
        if let Some(timestamp) = self.log_append_time {
            put(&mut b, MAX_TIMESTAMP, timestamp.to_be_bytes());
        }
        let mut attributes = self.codec.id();
        for (on, bit) in [
            (self.log_append_time.is_some(), TIMESTAMP_TYPE_BIT),
            (self.transactional, TRANSACTIONAL_BIT),
            (self.control, CONTROL_BIT),
            (self.delete_horizon, DELETE_HORIZON_BIT),
        ] {
            if on {
                attributes |= bit;
            }
        }
        put(&mut b, ATTRIBUTES, attributes.to_be_bytes());
        let (id, epoch, sequence) = self.producer;
        stamp_producer(&mut b, id, epoch, sequence);
        RecordBatch::new(b.freeze())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A record with null keys and values here and there, and headers
    /// with duplicate and non-UTF-8 keys.
    pub(crate) fn rec(i: i32, ts: i64) -> Record {
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

    pub(crate) const ALL: [Codec; 5] = [
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

    #[test]
    fn builder_makes_the_batch_a_broker_would_serve() {
        let records: Vec<Record> = [0, 3, 4]
            .iter()
            .map(|&d| Record {
                offset_delta: d,
                ..rec(d + 1, 10 + d as i64)
            })
            .collect();
        let b = BatchBuilder {
            codec: Codec::Gzip,
            base_offset: 500,
            partition_leader_epoch: 7,
            last_offset_delta: Some(6),
            log_append_time: Some(99),
            transactional: true,
            delete_horizon: true,
            producer: (3, 1, 20),
            ..BatchBuilder::new(records.clone())
        }
        .build()
        .unwrap();
        assert!(b.verify_crc());
        assert_eq!(
            (b.base_offset(), b.last_offset(), b.partition_leader_epoch()),
            (500, 506, 7)
        );
        assert_eq!((b.codec().unwrap(), b.record_count()), (Codec::Gzip, 3));
        assert_eq!(b.timestamp_type(), TimestampType::LogAppendTime);
        assert!(b.is_transactional() && b.has_delete_horizon() && !b.is_control());
        assert_eq!(
            (b.producer_id(), b.producer_epoch(), b.base_sequence()),
            (3, 1, 20)
        );
        let decoded = decode_records(&b).unwrap().records;
        let expected: Vec<Record> = records
            .into_iter()
            .map(|r| Record { timestamp: 99, ..r })
            .collect();
        assert_eq!(decoded, expected);
    }
}
