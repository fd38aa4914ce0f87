//! Topic metadata sync: configs follow the source (minus
//! `topic.properties.exclude`), and partition counts grow with it. Each
//! change is recorded before it is applied, except new destination
//! partitions, which must exist before the record that starts copying them.

use std::collections::HashMap;

use kmirror_events::{
    Command, MirrorStateImage, PartitionState, SyncSettings, TopicConfigSync, TopicConfigSyncKey,
    TopicId,
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
    for (name, (topic_id, _)) in
        mirrored_topics(image, &shared.spec.mirror, &[PartitionState::Mirroring])
    {
        match sync_topic_configs(shared, settings, &name, topic_id).await {
            Ok(n) => *changed += n,
            Err(e) => errors.push(e),
        }
    }
    errors
}

/// Brings one destination topic's configs in line; returns how many changed.
async fn sync_topic_configs(
    shared: &Shared,
    settings: &SyncSettings,
    name: &str,
    topic_id: TopicId,
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
    let changes = settings.config_changes(&source, &dest);
    if changes.is_empty() {
        return Ok(0);
    }
    for (key, from, to) in &changes {
        record(
            shared,
            Command::RecordTopicConfigSync {
                key: TopicConfigSyncKey {
                    mirror_name: spec.mirror.clone(),
                    topic_id,
                    config_name: key.clone(),
                },
                value: TopicConfigSync {
                    from: from.clone(),
                    to: Some(to.clone()),
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
