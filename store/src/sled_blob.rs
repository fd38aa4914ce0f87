//! A batch of the sled log as one value: `(offset, envelope)` pairs, each
//! envelope the codec's (format version, CRC, record). What open checks a
//! damaged tail with, and what `verify` walks.

use kmirror_events::codec::{self, CodecError};
use kmirror_events::Offset;

/// Encodes a batch value. Public for tests that fabricate damage.
#[doc(hidden)]
pub fn encode_batch_blob(entries: &[(Offset, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.iter().map(|(_, e)| e.len() + 12).sum());
    for (o, e) in entries {
        out.extend_from_slice(&o.to_le_bytes());
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out
}

/// `(offset, envelope)` pairs of one batch value.
pub(crate) type BlobEntries<'a> = Vec<(Offset, &'a [u8])>;

/// Splits a batch value into `(offset, envelope)` pairs.
pub(crate) fn parse_blob(blob: &[u8]) -> std::result::Result<BlobEntries<'_>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < blob.len() {
        let head = blob
            .get(at..at + 12)
            .ok_or_else(|| format!("batch value truncated at byte {at}"))?;
        let o = u64::from_le_bytes(head[..8].try_into().unwrap());
        let len = u32::from_le_bytes(head[8..].try_into().unwrap()) as usize;
        let env = blob
            .get(at + 12..at + 12 + len)
            .ok_or_else(|| format!("batch value truncated in the record at offset {o}"))?;
        out.push((o, env));
        at += 12 + len;
    }
    Ok(out)
}

/// Checks a whole batch value: every envelope's CRC and version, offsets
/// inside the declared batch. Returns the batch's declared (base, count) and
/// its entries.
pub(crate) fn check_blob(
    key_base: Offset,
    blob: &[u8],
) -> std::result::Result<(Offset, u32, BlobEntries<'_>), CodecError> {
    let entries = parse_blob(blob).map_err(|message| CodecError::Decode {
        what: "batch",
        message,
    })?;
    let mut declared = None;
    for (o, env) in &entries {
        let v = codec::view_record(env)?;
        let end = v.batch_base.saturating_add(v.batch_count as u64);
        if *o < v.batch_base || *o >= end || v.batch_base != key_base {
            return Err(CodecError::Decode {
                what: "batch",
                message: format!(
                    "record at offset {o} is outside its batch [{}, {end})",
                    v.batch_base
                ),
            });
        }
        declared = Some((v.batch_base, v.batch_count));
    }
    let (base, count) = declared.ok_or(CodecError::Decode {
        what: "batch",
        message: "empty batch value".into(),
    })?;
    Ok((base, count, entries))
}
