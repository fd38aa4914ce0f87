//! Coordinator routing, bit-for-bit as Kafka computes it.

use crate::{
    MirrorConfig, MirrorPartitionKey, MirrorStateImage, PartitionState, PatternError, RecordKey,
    RecordType, TopicId,
};

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code
/// units with wrapping `int` arithmetic. Must match Java exactly, because a
/// Kafka-hosted `__mirror_state` and Java tools place a mirror by this hash.
pub fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// Kafka's `Utils.abs`: like `i32::abs` except that `i32::MIN` maps to 0
/// instead of overflowing.
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// The `__mirror_state` partition that coordinates `mirror_name`:
/// `Utils.abs(mirrorName.hashCode()) % partitions` (KIP JR38).
///
/// # Panics
/// If `partitions` is not positive: a zero-partition state topic is a
/// configuration error that must never reach routing.
pub fn coordinator_partition(mirror_name: &str, partitions: i32) -> i32 {
    assert!(
        partitions > 0,
        "mirror.state.topic.num.partitions must be > 0"
    );
    kafka_abs(java_string_hash_code(mirror_name)) % partitions
}

/// Kafka's `Uuid.hashCode()`: the two halves of the id (big-endian, as
/// `Uuid` reads them from 16 bytes) xored, then the two halves of that.
pub fn java_uuid_hash_code(id: &TopicId) -> i32 {
    let most = i64::from_be_bytes(id.0[..8].try_into().expect("8 bytes"));
    let least = i64::from_be_bytes(id.0[8..].try_into().expect("8 bytes"));
    let h = most ^ least;
    ((h >> 32) as i32) ^ (h as i32)
}

/// The `hashCode()` Kafka's message generator writes for a key of
/// `(MirrorName string, TopicId uuid, Partition int32)`, such as the KIP's
/// `MirrorPartitionStateKey` and `LastMirrorEpochsKey`: `31 * h + field`
/// over the fields in order, from 0.
pub fn partition_key_hash_code(key: &MirrorPartitionKey) -> i32 {
    [
        java_string_hash_code(&key.mirror_name),
        java_uuid_hash_code(&key.topic_id),
        key.partition,
    ]
    .into_iter()
    .fold(0i32, |h, f| h.wrapping_mul(31).wrapping_add(f))
}

/// The `__mirror_state` partition of one mirror partition's own records:
/// `abs(key.hashCode()) % partitions` over its composite key, as the KIP's
/// later prototypes route partition-state records "so a mirror with many
/// partitions does not bottleneck on one node" — where the mirror's
/// topic-level records stay at [`coordinator_partition`].
///
/// # Panics
/// If `partitions` is not positive, as [`coordinator_partition`].
pub fn partition_state_partition(key: &MirrorPartitionKey, partitions: i32) -> i32 {
    assert!(
        partitions > 0,
        "mirror.state.topic.num.partitions must be > 0"
    );
    kafka_abs(partition_key_hash_code(key)) % partitions
}

/// The mirror property that spreads a mirror's partitions across a
/// clustered daemon's nodes: each partition's own records (and so its
/// copy) go to the shard its key routes to ([`partition_state_partition`])
/// rather than to the mirror's coordinator. Fixed at create: the records
/// already written say where they are.
pub const SPREAD_KEY: &str = "mirror.partitions.spread";

/// Whether `config` spreads its partitions (see [`SPREAD_KEY`]).
pub fn spreads(config: &MirrorConfig) -> Result<bool, PatternError> {
    match config.source_properties.get(SPREAD_KEY).map(String::as_str) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(PatternError {
            field: SPREAD_KEY.into(),
            pattern: other.into(),
            message: "expected true or false".into(),
        }),
    }
}

/// The state-topic partition that holds `key`'s own records, and whose
/// owner runs the partition's copy: the key's own shard for a mirror that
/// spreads, its mirror's coordinator's otherwise.
pub fn placement_shard(key: &MirrorPartitionKey, spread: bool, partitions: i32) -> i32 {
    if spread {
        partition_state_partition(key, partitions)
    } else {
        coordinator_partition(&key.mirror_name, partitions)
    }
}

impl RecordKey {
    /// The partition whose host writes this record (its copy's progress,
    /// state and reports), for records that live with the partition
    /// wherever it is placed; `None` for a mirror's topic-level records,
    /// which its coordinator writes (a failback plan among them: a start
    /// decides it before the partition runs).
    pub fn placed_partition(&self) -> Option<&MirrorPartitionKey> {
        match self {
            RecordKey::LastMirrorEpochs(k)
            | RecordKey::MirrorPartitionState(k)
            | RecordKey::MirrorProducer(k)
            | RecordKey::SourceEpochs(k)
            | RecordKey::VerifyResult(k)
            | RecordKey::FailoverReport(k) => Some(k),
            RecordKey::OffsetMapRun(k) | RecordKey::GapDetected(k) => Some(&k.partition),
            RecordKey::OffsetMapHole(k) => Some(&k.partition),
            RecordKey::MirrorTopicStateChange(_)
            | RecordKey::MirrorConfig(_)
            | RecordKey::GroupOffsetSync(_)
            | RecordKey::TopicConfigSync(_)
            | RecordKey::AclSync(_)
            | RecordKey::MirrorTopicDestination(_)
            | RecordKey::FailbackPlan(_)
            | RecordKey::SourceFence(_)
            | RecordKey::ShardRelease(_) => None,
        }
    }
}

impl RecordType {
    /// Whether records of this type live with their partition wherever it
    /// is placed ([`RecordKey::placed_partition`]): which shards a reader
    /// of a spread mirror's records of this type must read.
    pub fn placed(self) -> bool {
        use RecordType as T;
        match self {
            T::LastMirrorEpochs
            | T::MirrorPartitionState
            | T::MirrorProducer
            | T::SourceEpochs
            | T::VerifyResult
            | T::FailoverReport
            | T::OffsetMapRun
            | T::GapDetected
            | T::OffsetMapHole => true,
            T::MirrorTopicStateChange
            | T::MirrorConfig
            | T::GroupOffsetSync
            | T::TopicConfigSync
            | T::AclSync
            | T::MirrorTopicDestination
            | T::FailbackPlan
            | T::SourceFence
            | T::ShardRelease => false,
        }
    }
}

/// How many partitions are to copy in each shard, by where they run: a
/// mirror's in its coordinator's shard, a spread mirror's each in its own
/// ([`partition_state_partition`]). `shards[s]` is shard `s`'s image; a
/// topic counts while desired MIRRORING. What the clustered daemon's
/// assignor weighs a shard by, so nodes share partitions, not shards.
pub fn partition_loads<'a>(shards: impl IntoIterator<Item = &'a MirrorStateImage>) -> Vec<u64> {
    let shards: Vec<&MirrorStateImage> = shards.into_iter().collect();
    let partitions = i32::try_from(shards.len()).expect("a state topic's partition count");
    let mut loads = vec![0u64; shards.len()];
    for (here, image) in shards.iter().enumerate() {
        for (_, topic) in image.topics() {
            let change = &topic.change;
            // The mirror's config is in its coordinator's shard: here.
            let Some(config) = image.mirror(&change.mirror_name) else {
                continue;
            };
            if change.desired_state != PartitionState::Mirroring {
                continue;
            }
            let count = change.partition_count.max(0);
            if !spreads(config).unwrap_or(false) {
                loads[here] += count as u64;
                continue;
            }
            for p in 0..count {
                let key = MirrorPartitionKey::new(change.mirror_name.clone(), change.topic_id, p);
                loads[placement_shard(&key, true, partitions) as usize] += 1;
            }
        }
    }
    loads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("hello"), 99162322);
        assert_eq!(kafka_abs(i32::MIN), 0);
        assert_eq!(coordinator_partition("", 50), 0);
    }
}
