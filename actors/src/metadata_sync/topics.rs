//! Topic metadata sync: configs follow the source (minus
//! `topic.properties.exclude`), and partition counts grow with it. Each
//! change is recorded before it is applied, except new destination
//! partitions, which must exist before the record that starts copying them.
//!
//! One departure from the source's configs: while a partition is refused
//! a record without a key by its compacted destination, the topic is held
//! (`kmirror_events::KEYLESS_HOLD`) until the copy has caught up. The
//! refusal is the partition's error on the status board; the hold itself
//! is the destination's configs, so it outlives a restart.

use std::collections::{BTreeMap, HashMap};

use kmirror_events::{
    keyless_hold_in_place, keyless_hold_recorded, undo_keyless_hold, Command, ConfigChange,
    KeylessCopy, MirrorStateImage, PartitionState, SyncSettings, TopicConfigSync,
    TopicConfigSyncKey, TopicId,
};

use super::{mirrored_topics, record, PartitionsGrew, Shared, SyncError};
use crate::cluster::{Doing, RECENT_TOPICS_AGE};

pub(super) async fn sync_configs(
    shared: &Shared,
    image: &MirrorStateImage,
    settings: &SyncSettings,
    changed: &mut u64,
) -> Vec<SyncError> {
    let mut errors = Vec::new();
    let mirror = &shared.spec.mirror;
    let copies = (shared.spec.keyless)();
    for (name, (topic_id, _)) in mirrored_topics(image, mirror, &[PartitionState::Mirroring]) {
        // A topic with no partition on the board yet is not known to be
        // caught up.
        let copy = copies
            .get(&topic_id)
            .copied()
            .unwrap_or(KeylessCopy::Behind);
        match sync_topic_configs(shared, image, settings, &name, topic_id, copy).await {
            Ok(n) => *changed += n,
            Err(e) => errors.push(e),
        }
    }
    // A topic stopped during a keyless hold (a failover) is let go from the
    // records alone: its copy is over, and the source may be gone. Only
    // topics whose records say so are asked about.
    for (name, (topic_id, _)) in mirrored_topics(image, mirror, &[PartitionState::Stopped]) {
        if !keyless_hold_recorded(recorded(image, mirror, topic_id)) {
            continue;
        }
        let undone = async {
            let dest = shared
                .spec
                .destination
                .topic_config_values(&name)
                .await
                .doing(|| format!("describe destination configs of {name}"))?;
            let changes = undo_keyless_hold(&dest, recorded(image, mirror, topic_id));
            apply(shared, &name, topic_id, changes).await
        };
        match undone.await {
            Ok(n) => *changed += n,
            Err(e) => errors.push(e),
        }
    }
    errors
}

/// The last recorded change of each of a topic's configs.
fn recorded<'a>(
    image: &'a MirrorStateImage,
    mirror: &'a str,
    topic_id: TopicId,
) -> impl Fn(&str) -> Option<TopicConfigSync> + 'a {
    move |config_name| {
        image
            .topic_config(&TopicConfigSyncKey {
                mirror_name: mirror.to_string(),
                topic_id,
                config_name: config_name.to_string(),
            })
            .cloned()
    }
}

/// Brings one destination topic's configs in line; returns how many changed.
async fn sync_topic_configs(
    shared: &Shared,
    image: &MirrorStateImage,
    settings: &SyncSettings,
    name: &str,
    topic_id: TopicId,
    copy: KeylessCopy,
) -> Result<u64, SyncError> {
    let spec = &shared.spec;
    let source = spec
        .source
        .topic_configs(name)
        .await
        .doing(|| format!("describe source configs of {name}"))?;
    let dest = spec
        .destination
        .topic_config_values(name)
        .await
        .doing(|| format!("describe destination configs of {name}"))?;
    let held = keyless_hold_in_place(&dest);
    // The destination's own overrides, for the records of a hold (rare).
    let overrides = if copy == KeylessCopy::Refused || held {
        spec.destination
            .topic_configs(name)
            .await
            .doing(|| format!("describe destination configs of {name}"))?
            .into_iter()
            .collect()
    } else {
        BTreeMap::new()
    };
    let changes = settings.topic_config_changes(
        &source,
        &dest,
        &overrides,
        copy,
        recorded(image, &spec.mirror, topic_id),
    );
    let n = apply(shared, name, topic_id, changes).await?;
    if copy == KeylessCopy::Refused && !held {
        tracing::warn!(mirror = %spec.mirror, topic = %name,
            "a partition was refused records without a key: the destination is held at cleanup.policy=delete, retention -1, until the copy catches up");
    }
    Ok(n)
}

/// Records each change, then makes them; returns how many there were.
async fn apply(
    shared: &Shared,
    name: &str,
    topic_id: TopicId,
    changes: Vec<ConfigChange>,
) -> Result<u64, SyncError> {
    if changes.is_empty() {
        return Ok(0);
    }
    let spec = &shared.spec;
    for (config, from, to) in &changes {
        record(
            shared,
            Command::RecordTopicConfigSync {
                key: TopicConfigSyncKey {
                    mirror_name: spec.mirror.clone(),
                    topic_id,
                    config_name: config.clone(),
                },
                value: TopicConfigSync {
                    from: from.clone(),
                    to: to.clone(),
                },
            },
        )
        .await?;
    }
    let n = changes.len() as u64;
    spec.destination
        .alter_topic_configs(name, changes.into_iter().map(|(k, _, v)| (k, v)).collect())
        .await
        .doing(|| format!("alter destination configs of {name}"))?;
    tracing::info!(mirror = %spec.mirror, topic = %name, configs = n, "synced topic configs");
    Ok(n)
}

/// Source partition counts that grew: destination partitions first (so the
/// PartitionActors the record starts have somewhere to write), then the
/// record, then the MirrorActor is told ([`PartitionsGrew`]).
pub(super) async fn sync_partitions(
    shared: &Shared,
    image: &MirrorStateImage,
    added: &mut u64,
) -> Vec<SyncError> {
    let spec = &shared.spec;
    let topics = mirrored_topics(
        image,
        &spec.mirror,
        &[PartitionState::Mirroring, PartitionState::Paused],
    );
    if topics.is_empty() {
        return Vec::new();
    }
    let result: Result<bool, SyncError> = async {
        let source: HashMap<TopicId, i32> = spec
            .source
            .recent_topics(RECENT_TOPICS_AGE)
            .await
            .doing(|| "list source topics".into())?
            .into_iter()
            .map(|t| (t.topic_id, t.partitions))
            .collect();
        let mut grew = false;
        let mut dest: Option<HashMap<String, i32>> = None;
        for (name, (topic_id, count)) in topics {
            // Identity is the topic id: a re-created source topic of the
            // same name is not this one.
            let Some(&wanted) = source.get(&topic_id).filter(|&&n| n > count) else {
                continue;
            };
            if dest.is_none() {
                dest = Some(
                    spec.destination
                        .topics()
                        .await
                        .doing(|| "list destination topics".into())?
                        .into_iter()
                        .map(|t| (t.name, t.partitions))
                        .collect(),
                );
            }
            let have = dest.as_ref().and_then(|d| d.get(&name)).copied().unwrap_or(0);
            if have < wanted {
                spec.destination
                    .create_partitions(&name, wanted)
                    .await
                    .doing(|| format!("grow destination {name} to {wanted} partitions"))?;
            }
            record(
                shared,
                Command::UpdatePartitionCount {
                    mirror: spec.mirror.clone(),
                    topic_id,
                    partition_count: wanted,
                },
            )
            .await?;
            tracing::info!(mirror = %spec.mirror, topic = %name, from = count, to = wanted, "source partitions grew");
            *added += (wanted - count) as u64;
            grew = true;
        }
        Ok(grew)
    }
    .await;
    match result {
        Ok(true) => {
            spec.partitions_grew.do_send(PartitionsGrew);
            Vec::new()
        }
        Ok(false) => Vec::new(),
        Err(e) => vec![e],
    }
}
