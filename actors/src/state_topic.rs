//! The state topic: kmirror's records in a compacted Kafka topic on the
//! destination cluster (`__kmirror_state` by default, so it never collides
//! with a broker's own `__mirror_state`).
//!
//! A disaster can take a daemon and its disk with it, and a failback runs
//! against the clusters, perhaps from another machine: so every record the
//! coordinator appends is also published there (the publisher, in
//! `publisher.rs`), and a reverse mirror reads the history of the mirror
//! that copied its topics the other way from its own source cluster.
//!
//! Each record is stored under the same key and envelope as in the event
//! log (`kmirror_events::codec`), a tombstone as a null value. Every record
//! of a key goes to one partition, so compaction keeps its newest value:
//! a mirror's records to the partition of its name (the routing hash the
//! clustered daemon's coordinators use), a topic's own records to the
//! partition of its id. Secrets in a mirror's source properties never leave
//! the daemon.

use bytes::Bytes;
use kmirror_events::codec;
use kmirror_events::{
    coordinator_partition, MirrorConfig, MirrorStateImage, Offset, Record, RecordKey,
};

use crate::cluster::{ClusterError, Doing, SourceCluster};
use crate::kafka::batch::decode_records;
use crate::kafka::fetch::TopicPartition;
use crate::kafka::KafkaError;
use crate::providers::has_reference;

/// The state topic's default name (`state_topic` in the daemon's settings).
pub const DEFAULT_STATE_TOPIC: &str = "__kmirror_state";
/// Its partitions when kmirror creates it (`state_topic_num_partitions`).
pub const DEFAULT_PARTITIONS: i32 = 50;

/// Where a key is routed.
enum Route {
    /// By the routing hash of this string (`coordinator_partition`).
    Hash(String),
    /// To this partition itself: a shard's own records.
    Partition(i32),
}

/// Where a key is routed.
fn routing(key: &RecordKey) -> Route {
    let name = match key {
        // Keyed by the topic alone: the mirror named in the value changes
        // (a delete clears it), the partition must not.
        RecordKey::MirrorTopicStateChange(k) | RecordKey::MirrorTopicDestination(k) => {
            k.topic_id.to_string()
        }
        RecordKey::LastMirrorEpochs(k)
        | RecordKey::MirrorPartitionState(k)
        | RecordKey::MirrorProducer(k)
        | RecordKey::FailbackPlan(k)
        | RecordKey::FailoverReport(k)
        | RecordKey::VerifyResult(k)
        | RecordKey::SourceEpochs(k) => k.mirror_name.clone(),
        RecordKey::MirrorConfig(k) => k.mirror_name.clone(),
        RecordKey::OffsetMapRun(k) | RecordKey::GapDetected(k) => k.partition.mirror_name.clone(),
        RecordKey::OffsetMapHole(k) => k.partition.mirror_name.clone(),
        RecordKey::GroupOffsetSync(k) => k.mirror_name.clone(),
        RecordKey::TopicConfigSync(k) => k.mirror_name.clone(),
        RecordKey::AclSync(k) => k.mirror_name.clone(),
        RecordKey::SourceFence(k) => k.mirror_name.clone(),
        // The key *is* the partition: hashing its number would send it to
        // another shard's log.
        RecordKey::ShardRelease(k) => return Route::Partition(k.shard),
    };
    Route::Hash(name)
}

/// The partition of the state topic a record's key lives in. A shard's
/// release goes to the shard itself (`partitions` must exceed it: a shard
/// is a partition of the topic).
pub fn partition_of(key: &RecordKey, partitions: i32) -> i32 {
    match routing(key) {
        Route::Hash(name) => coordinator_partition(&name, partitions),
        Route::Partition(p) => {
            debug_assert!((0..partitions).contains(&p), "shard {p} of {partitions}");
            p
        }
    }
}

/// Whether a client property holds a secret (a password, a JAAS line with
/// one, a private key): those stay in the daemon's own log.
fn is_secret(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("password") || n.contains("jaas") || n.contains("secret") || n.ends_with(".key")
}

/// The record as published: a mirror's configuration without its secrets.
pub fn published(record: &Record) -> Record {
    match record {
        Record::MirrorConfig(k, Some(c)) => Record::MirrorConfig(
            k.clone(),
            Some(MirrorConfig {
                source_properties: c
                    .source_properties
                    .iter()
                    // A `${file:…}` reference names a secret on each node's
                    // own disk: it is kept, so any node can connect.
                    .filter(|(name, value)| !is_secret(name) || has_reference(value))
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect(),
                ..c.clone()
            }),
        ),
        other => other.clone(),
    }
}

/// The Kafka key and value of a record at log offset `offset`.
pub fn encode(record: &Record, offset: Offset, timestamp_ms: i64) -> (Bytes, Option<Bytes>) {
    let key = Bytes::from(codec::encode_key(&record.key()));
    let value = (!record.is_tombstone()).then(|| {
        Bytes::from(codec::encode_record(
            &published(record),
            timestamp_ms,
            offset,
            1,
        ))
    });
    (key, value)
}

/// Reads the state topic of `cluster` (every partition, from its log start
/// to its high watermark) into an image. `None` when the cluster has no such
/// topic: nothing was ever mirrored into it.
pub async fn read_image(
    cluster: &dyn SourceCluster,
    topic: &str,
) -> Result<Option<MirrorStateImage>, ClusterError> {
    let doing = || format!("read the state topic {topic}");
    let Some(info) = cluster
        .topics()
        .await
        .doing(doing)?
        .into_iter()
        .find(|t| t.name == topic)
    else {
        return Ok(None);
    };
    let mut image = MirrorStateImage::default();
    let mut folded: Offset = 0;
    for p in 0..info.partitions {
        let tp = TopicPartition::new(topic, p);
        let bounds = cluster.bounds(&tp).await.doing(doing)?;
        if bounds.end <= bounds.log_start {
            continue;
        }
        let mut fetch = cluster
            .open(tp.clone(), info.topic_id, bounds.log_start, -1)
            .await
            .doing(doing)?;
        let mut at = bounds.log_start;
        while at < bounds.end {
            let fetched = fetch.next().await.map_err(|e| ClusterError {
                doing: doing(),
                source: KafkaError::Unknown(format!("{tp} at {at}: {e}")),
            })?;
            for batch in fetched.batches() {
                let batch = batch.doing(doing)?;
                // A shard's fence marker: no record of the state.
                if batch.is_control() {
                    continue;
                }
                let decoded = decode_records(&batch).doing(doing)?;
                for r in decoded.records {
                    let offset = batch.base_offset() + r.offset_delta as i64;
                    if offset >= bounds.end {
                        break;
                    }
                    let record =
                        decode(r.key.as_deref(), r.value.as_deref()).map_err(|e| ClusterError {
                            doing: doing(),
                            source: KafkaError::Unknown(format!("{tp} offset {offset}: {e}")),
                        })?;
                    image.replay(folded, record);
                    folded += 1;
                }
            }
            at = at.max(fetched.next_offset);
        }
    }
    Ok(Some(image))
}

/// A record from its Kafka key and value (null: a tombstone).
fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Record, codec::CodecError> {
    decode_stamped(key, value, -1).map(|(record, _)| record)
}

/// A record and the wall-clock time its writer stamped on it: the
/// envelope's, or for a tombstone (which has no envelope) the Kafka
/// record's `record_timestamp`, which the Kafka event log sets to the same.
pub(crate) fn decode_stamped(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    record_timestamp: i64,
) -> Result<(Record, i64), codec::CodecError> {
    match value {
        Some(v) => {
            let envelope = codec::decode_record(v)?;
            Ok((envelope.record, envelope.timestamp_ms))
        }
        None => Ok((
            codec::decode_key(key.unwrap_or_default())?.tombstone(),
            record_timestamp,
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kmirror_events::{MirrorConfigKey, MirrorTopicStateChange, MirrorTopicStateKey, TopicId};

    use super::*;

    #[test]
    fn secrets_stay_home_and_every_key_keeps_its_partition() {
        let config = MirrorConfig {
            source_bootstrap: "a:9092".into(),
            source_properties: BTreeMap::from([
                ("security.protocol".to_string(), "SASL_SSL".to_string()),
                (
                    "sasl.jaas.config".to_string(),
                    "... password=\"hunter2\";".to_string(),
                ),
                ("ssl.key.password".to_string(), "x".to_string()),
                (
                    "ssl.truststore.password".to_string(),
                    "${file:/etc/kmirror/east.properties:trust}".to_string(),
                ),
            ]),
            ..Default::default()
        };
        let record = Record::MirrorConfig(
            MirrorConfigKey {
                mirror_name: "east".into(),
            },
            Some(config),
        );
        let (key, value) = encode(&record, 7, 1);
        let back = decode(Some(&key), value.as_deref()).unwrap();
        let Record::MirrorConfig(_, Some(c)) = back else {
            panic!("{back:?}")
        };
        // The literal secrets stay home; a reference to a file on each node
        // travels, so any node can connect.
        assert_eq!(
            c.source_properties.keys().collect::<Vec<_>>(),
            ["security.protocol", "ssl.truststore.password"],
            "{c:?}"
        );
        // A topic's record stays on one partition whatever mirror it names.
        let id = TopicId([4; 16]);
        let change = |mirror: &str| {
            Record::MirrorTopicStateChange(
                MirrorTopicStateKey { topic_id: id },
                Some(MirrorTopicStateChange {
                    topic_id: id,
                    mirror_name: mirror.into(),
                    desired_state: kmirror_events::PartitionState::Stopped,
                    topic_name: "t".into(),
                    partition_count: 1,
                }),
            )
        };
        assert_eq!(
            partition_of(&change("east").key(), 50),
            partition_of(&change("").key(), 50)
        );
        let tombstone = change("east").key().tombstone();
        let (key, value) = encode(&tombstone, 8, 1);
        assert_eq!(value, None);
        assert_eq!(decode(Some(&key), None).unwrap(), tombstone);
    }

    #[test]
    fn a_shard_release_lives_in_the_shard_it_releases() {
        for shard in [0, 1, 7, 49] {
            let key = RecordKey::ShardRelease(kmirror_events::ShardReleaseKey { shard });
            assert_eq!(partition_of(&key, 50), shard);
        }
        // Whereas a hashed key of the same digits lands elsewhere.
        assert_ne!(
            coordinator_partition("7", 50),
            7,
            "the hash would misroute it"
        );
    }
}
