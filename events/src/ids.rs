//! Identifiers shared by every record.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A log offset in kmirror's own event log (not a Kafka partition offset).
///
/// Offsets are dense at append time; compaction leaves holes, so callers must
/// never assume `offset + 1` exists.
pub type Offset = u64;

/// A Kafka topic id (KIP-516 UUID).
///
/// Keys use topic ids rather than names because a topic that is deleted and
/// re-created under the same name is a different topic, and the KIP keys all
/// `__mirror_state` records by id for that reason (JR42).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TopicId(pub [u8; 16]);

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl TopicId {
    /// Kafka's all-zero id, which pre-KIP-516 clusters return; kept so we can
    /// recognise it rather than treat it as a real topic.
    pub const ZERO: TopicId = TopicId([0; 16]);

    fn b64_value(c: u8) -> Option<u32> {
        B64.iter().position(|&b| b == c).map(|p| p as u32)
    }
}

impl fmt::Display for TopicId {
    /// Kafka's `Uuid.toString()` form (base64url, no padding), so ids printed
    /// by kmirror can be pasted into `kafka-topics.sh` output comparisons.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        let mut out = String::with_capacity(22);
        for chunk in b.chunks(3) {
            let n = match chunk.len() {
                3 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8 | chunk[2] as u32,
                2 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8,
                _ => (chunk[0] as u32) << 16,
            };
            let chars = chunk.len() + 1;
            for i in 0..chars {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

/// Why a topic id string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid topic id {0:?}: expected 22 base64url characters (Kafka Uuid form)")]
pub struct TopicIdParseError(pub String);

impl FromStr for TopicId {
    type Err = TopicIdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || TopicIdParseError(s.to_string());
        let bytes = s.as_bytes();
        if bytes.len() != 22 {
            return Err(err());
        }
        let mut out = [0u8; 16];
        let mut o = 0;
        for chunk in bytes.chunks(4) {
            let mut n: u32 = 0;
            for (i, &c) in chunk.iter().enumerate() {
                n |= Self::b64_value(c).ok_or_else(err)? << (18 - 6 * i);
            }
            let produce = chunk.len() - 1;
            for i in 0..produce {
                out[o] = (n >> (16 - 8 * i)) as u8;
                o += 1;
            }
        }
        let id = TopicId(out);
        // Reject non-canonical encodings (stray low bits in the last char).
        if id.to_string() != s {
            return Err(err());
        }
        Ok(id)
    }
}

impl Serialize for TopicId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for TopicId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            s.parse().map_err(serde::de::Error::custom)
        } else {
            Ok(TopicId(<[u8; 16]>::deserialize(d)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_round_trips() {
        for id in [
            TopicId::ZERO,
            TopicId([255; 16]),
            TopicId(*b"0123456789abcdef"),
        ] {
            let s = id.to_string();
            assert_eq!(s.len(), 22);
            assert_eq!(s.parse::<TopicId>().unwrap(), id);
        }
        assert_eq!(TopicId::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert!("short".parse::<TopicId>().is_err());
    }
}
