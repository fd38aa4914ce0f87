//! The one binary codec for everything kmirror persists.
//!
//! A record is stored as an envelope:
//!
//! ```text
//! format_version u8 | record_type u8 | timestamp_ms i64 | batch_base u64 |
//! batch_count u32 | key_len u32 | key | has_value u8 | [value_len u32 | value] |
//! crc32 u32
//! ```
//!
//! Integers are little-endian; key and value are bincode 2
//! (`config::standard()`) encodings of the serde types in [`crate::record`].
//! The last four bytes are always the CRC-32 (IEEE) of everything before
//! them, in every format version, so damage is told apart from a newer
//! format without understanding the newer layout. The batch fields let the
//! store tell a whole batch from a torn one.

use bincode::config::{standard, Configuration, Limit, LittleEndian, Varint};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ids::Offset;
use crate::image::MirrorStateImage;
use crate::record::*;

/// The format this build writes. Readers accept this and older versions and
/// refuse newer ones: a newer kmirror may have added record types or fields
/// that we would silently drop.
///
/// 2 added `OffsetMapHole` and `MirrorProducer` and changed the snapshot's
/// image layout; version-1 records read unchanged. 3 added `SourceFence`
/// and `FailoverReport` (and their maps in the snapshot's image). 4 added
/// `MirrorTopicDestination`, `FailbackPlan` and `SourceEpochs`, and their
/// maps. 5 added `ShardRelease` (and the image's newest release per shard).
/// 6 added `VerifyResult` (and the image's last result per partition).
pub const FORMAT_VERSION: u8 = 6;

/// Snapshots of an older image layout than this are skipped (the log is
/// replayed instead): a snapshot is a cache of the log, never its only copy.
const SNAPSHOT_LAYOUT_VERSION: u8 = 6;

const CFG: Configuration = standard();
/// The most one decode may reserve in all. bincode reserves a string's
/// claimed length before reading it, so without a limit a damaged length
/// of 2^50 aborted the process (found by the fuzzer,
/// `fuzz/corpus/event_codec/crash-*`). Far above any real record or
/// snapshot, whose strings are names; the bytes on the wire are the same.
const DECODE_LIMIT: usize = 1 << 30;
const DECODE_CFG: Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT>> =
    standard().with_limit::<DECODE_LIMIT>();
/// Fixed header before `key_len`.
const HEADER: usize = 1 + 1 + 8 + 8 + 4;

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("record truncated: {len} bytes is shorter than its header or declared lengths")]
    Truncated { len: usize },
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("written by a newer kmirror (format version {found}; this build reads up to {supported}); upgrade kmirror to read this log")]
    NewerFormat { found: u8, supported: u8 },
    #[error(
        "snapshot of an older image layout (format version {found}); the log is replayed instead"
    )]
    OldSnapshotLayout { found: u8 },
    #[error("unknown record type {0}")]
    UnknownRecordType(u8),
    #[error("cannot decode {what}: {message}")]
    Decode { what: &'static str, message: String },
}

impl CodecError {
    /// Whether this is damage (as opposed to a newer format), i.e. something
    /// a torn-tail repair may cut away.
    pub fn is_damage(&self) -> bool {
        !matches!(self, CodecError::NewerFormat { .. })
    }
}

/// A decoded record with its envelope metadata.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Envelope {
    /// Wall-clock time the caller stamped on the batch (events has no clock).
    pub timestamp_ms: i64,
    /// Offset of the first record of the batch this record was appended in.
    pub batch_base: Offset,
    /// Number of records in that batch.
    pub batch_count: u32,
    pub record: Record,
}

/// Refuses a format version newer than this build understands.
pub fn check_format_version(found: u8) -> Result<(), CodecError> {
    if found > FORMAT_VERSION {
        Err(CodecError::NewerFormat {
            found,
            supported: FORMAT_VERSION,
        })
    } else {
        Ok(())
    }
}

fn enc<T: Serialize>(v: &T, out: &mut Vec<u8>) {
    bincode::serde::encode_into_std_write(v, out, CFG).expect("encoding into a Vec cannot fail");
}

fn dec<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, CodecError> {
    let (v, used): (T, usize) =
        bincode::serde::decode_from_slice(bytes, DECODE_CFG).map_err(|e| CodecError::Decode {
            what,
            message: e.to_string(),
        })?;
    if used != bytes.len() {
        return Err(CodecError::Decode {
            what,
            message: format!("{} trailing bytes", bytes.len() - used),
        });
    }
    Ok(v)
}

/// Encodes a key as stored in indexes: the record type byte, then the key.
/// Deterministic, so equal keys give equal bytes.
pub fn encode_key(key: &RecordKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(48);
    match key {
        RecordKey::LastMirrorEpochs(k) => {
            out.push(RecordType::LastMirrorEpochs as u8);
            enc(k, &mut out)
        }
        RecordKey::MirrorPartitionState(k) => {
            out.push(RecordType::MirrorPartitionState as u8);
            enc(k, &mut out)
        }
        RecordKey::MirrorTopicStateChange(k) => {
            out.push(RecordType::MirrorTopicStateChange as u8);
            enc(k, &mut out)
        }
        RecordKey::MirrorConfig(k) => {
            out.push(RecordType::MirrorConfig as u8);
            enc(k, &mut out)
        }
        RecordKey::OffsetMapRun(k) => {
            out.push(RecordType::OffsetMapRun as u8);
            enc(k, &mut out)
        }
        RecordKey::GapDetected(k) => {
            out.push(RecordType::GapDetected as u8);
            enc(k, &mut out)
        }
        RecordKey::GroupOffsetSync(k) => {
            out.push(RecordType::GroupOffsetSync as u8);
            enc(k, &mut out)
        }
        RecordKey::TopicConfigSync(k) => {
            out.push(RecordType::TopicConfigSync as u8);
            enc(k, &mut out)
        }
        RecordKey::AclSync(k) => {
            out.push(RecordType::AclSync as u8);
            enc(k, &mut out)
        }
        RecordKey::OffsetMapHole(k) => {
            out.push(RecordType::OffsetMapHole as u8);
            enc(k, &mut out)
        }
        RecordKey::MirrorProducer(k) => {
            out.push(RecordType::MirrorProducer as u8);
            enc(k, &mut out)
        }
        RecordKey::MirrorTopicDestination(k) => {
            out.push(RecordType::MirrorTopicDestination as u8);
            enc(k, &mut out)
        }
        RecordKey::FailbackPlan(k) => {
            out.push(RecordType::FailbackPlan as u8);
            enc(k, &mut out)
        }
        RecordKey::SourceFence(k) => {
            out.push(RecordType::SourceFence as u8);
            enc(k, &mut out)
        }
        RecordKey::FailoverReport(k) => {
            out.push(RecordType::FailoverReport as u8);
            enc(k, &mut out)
        }
        RecordKey::SourceEpochs(k) => {
            out.push(RecordType::SourceEpochs as u8);
            enc(k, &mut out)
        }
        RecordKey::ShardRelease(k) => {
            out.push(RecordType::ShardRelease as u8);
            enc(k, &mut out)
        }
        RecordKey::VerifyResult(k) => {
            out.push(RecordType::VerifyResult as u8);
            enc(k, &mut out)
        }
    }
    out
}

/// Decodes a key written by [`encode_key`]: what a keyed store (a compacted
/// Kafka topic) holds for a tombstone, which has no envelope.
pub fn decode_key(bytes: &[u8]) -> Result<RecordKey, CodecError> {
    let (&ty, key) = bytes
        .split_first()
        .ok_or(CodecError::Truncated { len: bytes.len() })?;
    let ty = RecordType::from_u8(ty).ok_or(CodecError::UnknownRecordType(ty))?;
    Ok(match ty {
        RecordType::LastMirrorEpochs => RecordKey::LastMirrorEpochs(dec(key, "record key")?),
        RecordType::MirrorPartitionState => {
            RecordKey::MirrorPartitionState(dec(key, "record key")?)
        }
        RecordType::MirrorTopicStateChange => {
            RecordKey::MirrorTopicStateChange(dec(key, "record key")?)
        }
        RecordType::MirrorConfig => RecordKey::MirrorConfig(dec(key, "record key")?),
        RecordType::OffsetMapRun => RecordKey::OffsetMapRun(dec(key, "record key")?),
        RecordType::GapDetected => RecordKey::GapDetected(dec(key, "record key")?),
        RecordType::GroupOffsetSync => RecordKey::GroupOffsetSync(dec(key, "record key")?),
        RecordType::TopicConfigSync => RecordKey::TopicConfigSync(dec(key, "record key")?),
        RecordType::AclSync => RecordKey::AclSync(dec(key, "record key")?),
        RecordType::OffsetMapHole => RecordKey::OffsetMapHole(dec(key, "record key")?),
        RecordType::MirrorProducer => RecordKey::MirrorProducer(dec(key, "record key")?),
        RecordType::MirrorTopicDestination => {
            RecordKey::MirrorTopicDestination(dec(key, "record key")?)
        }
        RecordType::FailbackPlan => RecordKey::FailbackPlan(dec(key, "record key")?),
        RecordType::SourceFence => RecordKey::SourceFence(dec(key, "record key")?),
        RecordType::FailoverReport => RecordKey::FailoverReport(dec(key, "record key")?),
        RecordType::SourceEpochs => RecordKey::SourceEpochs(dec(key, "record key")?),
        RecordType::ShardRelease => RecordKey::ShardRelease(dec(key, "record key")?),
        RecordType::VerifyResult => RecordKey::VerifyResult(dec(key, "record key")?),
    })
}

fn enc_kv<K: Serialize, V: Serialize>(k: &K, v: &Option<V>, out: &mut Vec<u8>) {
    let key_pos = out.len();
    out.extend_from_slice(&[0; 4]);
    enc(k, out);
    let key_len = (out.len() - key_pos - 4) as u32;
    out[key_pos..key_pos + 4].copy_from_slice(&key_len.to_le_bytes());
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            let pos = out.len();
            out.extend_from_slice(&[0; 4]);
            enc(v, out);
            let len = (out.len() - pos - 4) as u32;
            out[pos..pos + 4].copy_from_slice(&len.to_le_bytes());
        }
    }
}

/// Encodes one record in its envelope.
pub fn encode_record(
    record: &Record,
    timestamp_ms: i64,
    batch_base: Offset,
    batch_count: u32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    out.push(FORMAT_VERSION);
    out.push(record.record_type() as u8);
    out.extend_from_slice(&timestamp_ms.to_le_bytes());
    out.extend_from_slice(&batch_base.to_le_bytes());
    out.extend_from_slice(&batch_count.to_le_bytes());
    match record {
        Record::LastMirrorEpochs(k, v) => enc_kv(k, v, &mut out),
        Record::MirrorPartitionState(k, v) => enc_kv(k, v, &mut out),
        Record::MirrorTopicStateChange(k, v) => enc_kv(k, v, &mut out),
        Record::MirrorConfig(k, v) => enc_kv(k, v, &mut out),
        Record::OffsetMapRun(k, v) => enc_kv(k, v, &mut out),
        Record::GapDetected(k, v) => enc_kv(k, v, &mut out),
        Record::GroupOffsetSync(k, v) => enc_kv(k, v, &mut out),
        Record::TopicConfigSync(k, v) => enc_kv(k, v, &mut out),
        Record::AclSync(k, v) => enc_kv(k, v, &mut out),
        Record::OffsetMapHole(k, v) => enc_kv(k, v, &mut out),
        Record::MirrorProducer(k, v) => enc_kv(k, v, &mut out),
        Record::MirrorTopicDestination(k, v) => enc_kv(k, v, &mut out),
        Record::FailbackPlan(k, v) => enc_kv(k, v, &mut out),
        Record::SourceFence(k, v) => enc_kv(k, v, &mut out),
        Record::FailoverReport(k, v) => enc_kv(k, v, &mut out),
        Record::SourceEpochs(k, v) => enc_kv(k, v, &mut out),
        Record::ShardRelease(k, v) => enc_kv(k, v, &mut out),
        Record::VerifyResult(k, v) => enc_kv(k, v, &mut out),
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, CodecError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        .ok_or(CodecError::Truncated { len: b.len() })
}

/// Checks the CRC and format version without decoding key and value.
/// `verify` uses this to walk a log fast.
pub fn check_record(bytes: &[u8]) -> Result<(), CodecError> {
    if bytes.len() < HEADER + 4 {
        return Err(CodecError::Truncated { len: bytes.len() });
    }
    let body = &bytes[..bytes.len() - 4];
    let stored = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap());
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(CodecError::CrcMismatch { stored, computed });
    }
    check_format_version(bytes[0])
}

fn dec_kv<K: DeserializeOwned, V: DeserializeOwned>(
    body: &[u8],
) -> Result<(K, Option<V>), CodecError> {
    let trunc = CodecError::Truncated { len: body.len() };
    let mut at = HEADER;
    let key_len = u32_at(body, at)? as usize;
    at += 4;
    let key_bytes = body.get(at..at + key_len).ok_or(trunc.clone())?;
    at += key_len;
    let k: K = dec(key_bytes, "record key")?;
    let flag = *body.get(at).ok_or(trunc.clone())?;
    at += 1;
    let v = match flag {
        0 => None,
        1 => {
            let len = u32_at(body, at)? as usize;
            at += 4;
            let vb = body.get(at..at + len).ok_or(trunc.clone())?;
            at += len;
            Some(dec(vb, "record value")?)
        }
        other => {
            return Err(CodecError::Decode {
                what: "value flag",
                message: format!("unexpected byte {other}"),
            })
        }
    };
    if at != body.len() {
        return Err(CodecError::Decode {
            what: "envelope",
            message: format!("{} trailing bytes", body.len() - at),
        });
    }
    Ok((k, v))
}

/// Decodes one envelope, checking its CRC and format version.
pub fn decode_record(bytes: &[u8]) -> Result<Envelope, CodecError> {
    check_record(bytes)?;
    let body = &bytes[..bytes.len() - 4];
    let ty = RecordType::from_u8(body[1]).ok_or(CodecError::UnknownRecordType(body[1]))?;
    let timestamp_ms = i64::from_le_bytes(body[2..10].try_into().unwrap());
    let batch_base = u64::from_le_bytes(body[10..18].try_into().unwrap());
    let batch_count = u32::from_le_bytes(body[18..22].try_into().unwrap());
    let record = match ty {
        RecordType::LastMirrorEpochs => {
            let (k, v) = dec_kv(body)?;
            Record::LastMirrorEpochs(k, v)
        }
        RecordType::MirrorPartitionState => {
            let (k, v) = dec_kv(body)?;
            Record::MirrorPartitionState(k, v)
        }
        RecordType::MirrorTopicStateChange => {
            let (k, v) = dec_kv(body)?;
            Record::MirrorTopicStateChange(k, v)
        }
        RecordType::MirrorConfig => {
            let (k, v) = dec_kv(body)?;
            Record::MirrorConfig(k, v)
        }
        RecordType::OffsetMapRun => {
            let (k, v) = dec_kv(body)?;
            Record::OffsetMapRun(k, v)
        }
        RecordType::GapDetected => {
            let (k, v) = dec_kv(body)?;
            Record::GapDetected(k, v)
        }
        RecordType::GroupOffsetSync => {
            let (k, v) = dec_kv(body)?;
            Record::GroupOffsetSync(k, v)
        }
        RecordType::TopicConfigSync => {
            let (k, v) = dec_kv(body)?;
            Record::TopicConfigSync(k, v)
        }
        RecordType::AclSync => {
            let (k, v) = dec_kv(body)?;
            Record::AclSync(k, v)
        }
        RecordType::OffsetMapHole => {
            let (k, v) = dec_kv(body)?;
            Record::OffsetMapHole(k, v)
        }
        RecordType::MirrorProducer => {
            let (k, v) = dec_kv(body)?;
            Record::MirrorProducer(k, v)
        }
        RecordType::MirrorTopicDestination => {
            let (k, v) = dec_kv(body)?;
            Record::MirrorTopicDestination(k, v)
        }
        RecordType::FailbackPlan => {
            let (k, v) = dec_kv(body)?;
            Record::FailbackPlan(k, v)
        }
        RecordType::SourceFence => {
            let (k, v) = dec_kv(body)?;
            Record::SourceFence(k, v)
        }
        RecordType::FailoverReport => {
            let (k, v) = dec_kv(body)?;
            Record::FailoverReport(k, v)
        }
        RecordType::SourceEpochs => {
            let (k, v) = dec_kv(body)?;
            Record::SourceEpochs(k, v)
        }
        RecordType::ShardRelease => {
            let (k, v) = dec_kv(body)?;
            Record::ShardRelease(k, v)
        }
        RecordType::VerifyResult => {
            let (k, v) = dec_kv(body)?;
            Record::VerifyResult(k, v)
        }
    };
    Ok(Envelope {
        timestamp_ms,
        batch_base,
        batch_count,
        record,
    })
}

/// Encodes a snapshot of the folded image: `version u8 | image | crc32`.
pub fn encode_snapshot(image: &MirrorStateImage) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    enc(image, &mut out);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a snapshot written by [`encode_snapshot`].
pub fn decode_snapshot(bytes: &[u8]) -> Result<MirrorStateImage, CodecError> {
    if bytes.len() < 5 {
        return Err(CodecError::Truncated { len: bytes.len() });
    }
    let body = &bytes[..bytes.len() - 4];
    let stored = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap());
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(CodecError::CrcMismatch { stored, computed });
    }
    check_format_version(body[0])?;
    if body[0] < SNAPSHOT_LAYOUT_VERSION {
        return Err(CodecError::OldSnapshotLayout { found: body[0] });
    }
    dec(&body[1..], "snapshot")
}

/// The envelope's header and raw key, read without decoding key or value.
/// Compaction and verification work on this so they never pay for a full
/// decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawView<'a> {
    pub format_version: u8,
    pub record_type: u8,
    pub timestamp_ms: i64,
    pub batch_base: Offset,
    pub batch_count: u32,
    /// bincode bytes of the key (without the type byte).
    pub key: &'a [u8],
    pub has_value: bool,
}

impl RawView<'_> {
    /// The index key bytes: identical to [`encode_key`] of the decoded key.
    pub fn index_key(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.key.len() + 1);
        v.push(self.record_type);
        v.extend_from_slice(self.key);
        v
    }
}

/// Checks the CRC and version and returns the envelope header.
pub fn view_record(bytes: &[u8]) -> Result<RawView<'_>, CodecError> {
    check_record(bytes)?;
    let body = &bytes[..bytes.len() - 4];
    let trunc = CodecError::Truncated { len: bytes.len() };
    let key_len = u32_at(body, HEADER)? as usize;
    let key = body
        .get(HEADER + 4..HEADER + 4 + key_len)
        .ok_or(trunc.clone())?;
    let flag = *body.get(HEADER + 4 + key_len).ok_or(trunc)?;
    Ok(RawView {
        format_version: body[0],
        record_type: body[1],
        timestamp_ms: i64::from_le_bytes(body[2..10].try_into().unwrap()),
        batch_base: u64::from_le_bytes(body[10..18].try_into().unwrap()),
        batch_count: u32::from_le_bytes(body[18..22].try_into().unwrap()),
        key,
        has_value: flag == 1,
    })
}
