//! Topic metadata sync: configs follow the source (minus
//! `topic.properties.exclude`), and partition counts grow with it. Each
//! change is recorded before it is applied, except new destination
//! partitions, which must exist before the record that starts copying them.
//!
//! One departure from the source's configs: while a partition is refused
//! a record without a key by its compacted destination, the topic is held
//! (`kmirror_events::KEYLESS_HOLD`) until the copy has caught up. The
//! refusal is the partition's error on the status board (or, for a spread
//! mirror's partition run elsewhere, its FAILED state as recorded in its
//! shard), and the copy caught up is every partition's, the board's and
//! — for a spread mirror — every host's, asked of each node; the hold is its
//! own marker records (`kmirror_events::keyless_hold`), written before the
//! destination is altered and cleared after it is put back, so a restart
//! finds it, and a release cut short is let go again by a later pass.

use std::collections::{BTreeMap, HashMap, HashSet};

use kmirror_events::{
    keyless_hold, partition_state_partition, release_stopped, Command, ConfigChange, ConfigPlan,
    Hold, KeylessCopy, MirrorPartitionKey, MirrorStateImage, PartitionState, SyncSettings,
    TopicConfigSync, TopicConfigSyncKey, TopicConfigs, TopicId,
};

use super::{mirrored_topics, record, PartitionsGrew, Shared, SyncError};
use crate::cluster::{Doing, RECENT_TOPICS_AGE};
use crate::kafka::produce::is_keyless_refusal;

pub(super) async fn sync_configs(
    shared: &Shared,
    image: &MirrorStateImage,
    settings: &SyncSettings,
    changed: &mut u64,
) -> Vec<SyncError> {
    let mut errors = Vec::new();
    let mirror = &shared.spec.mirror;
    let mirroring = mirrored_topics(image, mirror, &[PartitionState::Mirroring]);
    let held: Vec<TopicId> = mirroring
        .values()
        .map(|(id, _)| *id)
        .filter(|id| keyless_hold(recorded(image, mirror, *id)).is_some())
        .collect();
    let copies = copies(shared, &held).await;
    let refused_elsewhere = refused_elsewhere(shared);
    for (name, (topic_id, count)) in mirroring {
        // A topic not whole on the board (partitions that growth added
        // have not joined yet, or a spread mirror's placed elsewhere) is
        // not known to be caught up.
        let copy = match copies.get(&topic_id) {
            _ if refused_elsewhere.contains(&topic_id) => KeylessCopy::Refused,
            Some(&(KeylessCopy::CaughtUp, on_board)) if on_board < count as usize => {
                KeylessCopy::Behind
            }
            Some(&(copy, _)) => copy,
            None => KeylessCopy::Behind,
        };
        let hold = keyless_hold(recorded(image, mirror, topic_id));
        match sync_topic_configs(shared, settings, &name, topic_id, copy, hold).await {
            Ok(n) => *changed += n,
            Err(e) => errors.push(e),
        }
    }
    // A topic stopped during a keyless hold (a failover) is let go once
    // every partition is STOPPED, from its markers alone: its copy is over,
    // and the source may be gone.
    for (name, (topic_id, _)) in mirrored_topics(image, mirror, &[PartitionState::Stopped]) {
        let Some(hold) = keyless_hold(recorded(image, mirror, topic_id)) else {
            continue;
        };
        if copying(shared, image, topic_id) {
            continue;
        }
        let released = async {
            let exists = shared
                .spec
                .destination
                .topics()
                .await
                .doing(|| "list destination topics".into())?
                .iter()
                .any(|t| t.name == name);
            // A destination topic deleted since has nothing to put back;
            // its markers are cleared all the same, or they would refuse
            // the mirror's deletion for good.
            let plan = if exists {
                let (values, overrides) = destination_configs(shared, &name).await?;
                release_stopped(Some((&values, &overrides)), &hold)
            } else {
                release_stopped(None, &hold)
            };
            apply(shared, &name, topic_id, plan).await
        };
        match released.await {
            Ok(n) => *changed += n,
            Err(e) => errors.push(e),
        }
    }
    errors
}

/// Where each topic's copy stands, from the board and, for a spread mirror
/// with a topic `held` that its board does not already say is behind,
/// every host's (`Hosting::hosted_copies`), partition by partition: a
/// partition reported twice counts once (the worse), and one placed in
/// this shard is the board's. A topic whose partitions are not all
/// reported is behind, so a hold is let go only once every partition,
/// wherever it runs, has caught up. A node that gave no answer leaves its
/// partitions out, and the hold stays.
async fn copies(shared: &Shared, held: &[TopicId]) -> HashMap<TopicId, (KeylessCopy, usize)> {
    let mut copies = (shared.spec.keyless)();
    let Some((h, ask)) = shared
        .spec
        .spread
        .as_ref()
        .and_then(|h| Some((h, h.hosted_copies.as_ref()?)))
    else {
        return copies;
    };
    let worth = held.iter().any(|id| {
        !matches!(
            copies.get(id),
            Some((KeylessCopy::Behind | KeylessCopy::Refused, _))
        )
    });
    if !worth {
        return copies;
    }
    let hosted = match ask(shared.spec.mirror.clone()).await {
        Ok(hosted) => hosted,
        Err(e) => {
            tracing::info!(mirror = %shared.spec.mirror, error = %e,
                "not every node told how the partitions it hosts stand: the keyless hold stays");
            return copies;
        }
    };
    let partitions = h.followed.partitions();
    let mut by_partition: BTreeMap<(TopicId, i32), KeylessCopy> = BTreeMap::new();
    for c in hosted {
        let key = MirrorPartitionKey::new(shared.spec.mirror.clone(), c.topic_id, c.partition);
        if partition_state_partition(&key, partitions) == h.shard {
            continue;
        }
        let copy = by_partition
            .entry((c.topic_id, c.partition))
            .or_insert(c.copy);
        *copy = copy.and(c.copy);
    }
    for ((topic_id, _), copy) in by_partition {
        let (topic, n) = copies.entry(topic_id).or_insert((KeylessCopy::CaughtUp, 0));
        *topic = topic.and(copy);
        *n += 1;
    }
    copies
}

/// For a spread mirror, the topics of which a partition placed in another
/// shard is FAILED on a keyless refusal, as the follower last read that
/// shard to its high watermark (a shard read again from its log start may
/// show a state its newer record has not replaced yet): the board holds
/// only the partitions run here, and a refusal elsewhere needs the hold as
/// much (its partition copies once its retry finds the topic held).
fn refused_elsewhere(shared: &Shared) -> HashSet<TopicId> {
    let Some(h) = &shared.spec.spread else {
        return HashSet::new();
    };
    let mirror = &shared.spec.mirror;
    let mut refused = HashSet::new();
    for (i, shard) in h.followed.now().shards.iter().enumerate() {
        if i32::try_from(i) == Ok(h.shard) || !shard.caught_up() {
            continue;
        }
        refused.extend(
            shard
                .image
                .partition_states_of(mirror)
                .filter(|(_, v)| {
                    v.state == PartitionState::Failed
                        && v.error_message.as_deref().is_some_and(is_keyless_refusal)
                })
                .map(|(k, _)| k.topic_id),
        );
    }
    refused
}

/// Whether a partition of the mirror's topic may still copy: one not
/// STOPPED (or never started) in the coordinator's image or, for a spread
/// mirror, in the shard it is placed in as the follower last read it — or
/// a shard the follower has not read to its high watermark (never read,
/// or read again from its log start, where part of a compacted log may
/// lack a partition's newest state), which could hold one.
fn copying(shared: &Shared, image: &MirrorStateImage, topic_id: TopicId) -> bool {
    let mirror = &shared.spec.mirror;
    let busy = |image: &MirrorStateImage| {
        image
            .partition_states_of(mirror)
            .any(|(k, v)| k.topic_id == topic_id && !v.state.is_idle())
    };
    busy(image)
        || shared.spec.spread.as_ref().is_some_and(|h| {
            h.followed
                .now()
                .shards
                .iter()
                .enumerate()
                .filter(|(i, _)| i32::try_from(*i) != Ok(h.shard))
                .any(|(_, s)| !s.caught_up() || busy(&s.image))
        })
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

/// The destination topic's effective values and its own overrides.
async fn destination_configs(
    shared: &Shared,
    name: &str,
) -> Result<(BTreeMap<String, Option<String>>, BTreeMap<String, String>), SyncError> {
    let destination = &shared.spec.destination;
    let doing = || format!("describe destination configs of {name}");
    let values = destination.topic_config_values(name).await.doing(doing)?;
    let overrides = destination.topic_configs(name).await.doing(doing)?;
    Ok((values, overrides.into_iter().collect()))
}

/// Brings one destination topic's configs in line; returns how many changed.
async fn sync_topic_configs(
    shared: &Shared,
    settings: &SyncSettings,
    name: &str,
    topic_id: TopicId,
    copy: KeylessCopy,
    hold: Option<Hold>,
) -> Result<u64, SyncError> {
    let spec = &shared.spec;
    let source = spec
        .source
        .topic_configs(name)
        .await
        .doing(|| format!("describe source configs of {name}"))?;
    let hold_reads = copy.reads_for_hold(hold.is_some());
    let (dest, overrides) = if hold_reads {
        destination_configs(shared, name).await?
    } else {
        let values = spec
            .destination
            .topic_config_values(name)
            .await
            .doing(|| format!("describe destination configs of {name}"))?;
        (values, BTreeMap::new())
    };
    // Whether the source compacts at all, its broker's default included:
    // asked only when a hold would be placed.
    let source_compacts = copy == KeylessCopy::Refused
        && hold.is_none()
        && spec
            .source
            .topic_config_values(name)
            .await
            .doing(|| format!("describe source configs of {name}"))?
            .get("cleanup.policy")
            .cloned()
            .flatten()
            .is_some_and(|p| p.contains("compact"));
    let plan = settings.topic_config_plan(
        &TopicConfigs {
            source: &source,
            source_compacts,
            destination: &dest,
            overrides: &overrides,
        },
        copy,
        hold.as_ref(),
    );
    if !plan.mark.is_empty() {
        tracing::warn!(mirror = %spec.mirror, topic = %name,
            "a partition was refused records without a key: the destination is held at cleanup.policy=delete, retention -1, until the copy catches up");
    } else if !plan.unmark.is_empty() {
        tracing::info!(mirror = %spec.mirror, topic = %name,
            "the copy caught up: the keyless hold is let go");
    }
    apply(shared, name, topic_id, plan).await
}

/// Carries out a plan: its markers recorded, each change recorded then
/// made, then the markers cleared; returns how many configs changed.
async fn apply(
    shared: &Shared,
    name: &str,
    topic_id: TopicId,
    plan: ConfigPlan,
) -> Result<u64, SyncError> {
    let spec = &shared.spec;
    record_all(shared, topic_id, &plan.mark).await?;
    let n = plan.changes.len() as u64;
    if n > 0 {
        record_all(shared, topic_id, &plan.changes).await?;
        let changes = plan.changes.into_iter().map(|(k, _, v)| (k, v)).collect();
        spec.destination
            .alter_topic_configs(name, changes)
            .await
            .doing(|| format!("alter destination configs of {name}"))?;
        tracing::info!(mirror = %spec.mirror, topic = %name, configs = n, "synced topic configs");
    }
    record_all(shared, topic_id, &plan.unmark).await?;
    Ok(n)
}

async fn record_all(
    shared: &Shared,
    topic_id: TopicId,
    changes: &[ConfigChange],
) -> Result<(), SyncError> {
    for (config, from, to) in changes {
        record(
            shared,
            Command::RecordTopicConfigSync {
                key: TopicConfigSyncKey {
                    mirror_name: shared.spec.mirror.clone(),
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
    Ok(())
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
