//! Decisions: commands checked against the image, turned into records, in
//! one place so that every rule a write must pass is read and tested here.
//!
//! Shaped like Kafka's `CoordinatorShard`: [`decide`] reads the current image
//! and returns the records an operation ([`Command`]) must append (or a typed
//! refusal, [`DecideError`]);
//! [`MirrorStateImage::replay`] folds them. Side effects happen only after
//! the records are durably appended, and replaying the log rebuilds exactly
//! the state the deciders saw.

use crate::command::{Command, DecideError};
use crate::ids::TopicId;
use crate::image::MirrorStateImage;
use crate::pattern::{is_internal_topic, join_lists, GroupFilter, TopicFilter};
use crate::record::*;
use crate::state::PartitionState;
use crate::sync::keyless_hold_refuses;

mod partition;

/// Mirror names follow topic-name rules (KIP AS3), so they are safe in
/// client ids, metric tags and file names.
pub fn validate_mirror_name(name: &str) -> Result<(), DecideError> {
    let bad = |reason: &str| {
        Err(DecideError::InvalidClusterMirrorName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name == "." || name == ".." {
        return bad("must not be '.' or '..'");
    }
    if name.len() > 249 {
        return bad("must be at most 249 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return bad("may contain only ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

fn topic_label(image: &MirrorStateImage, id: &TopicId) -> String {
    match image.topic(id) {
        Some(t) => format!("{} ({id})", t.change.topic_name),
        None => id.to_string(),
    }
}

fn require_mirror<'a>(
    image: &'a MirrorStateImage,
    name: &str,
) -> Result<&'a MirrorConfig, DecideError> {
    image
        .mirror(name)
        .ok_or_else(|| DecideError::UnknownClusterMirror(name.to_string()))
}

fn validate_config(config: &MirrorConfig) -> Result<(), DecideError> {
    TopicFilter::new(&config.topics_include, &config.topics_exclude)?;
    GroupFilter::new(&config.groups_include, &config.groups_exclude)?;
    // acls.include, topic.properties.exclude and the sync interval: refused
    // here so a bad rule is an INVALID_CONFIG at create/alter time rather
    // than a sync error every tick.
    crate::sync::SyncSettings::from_config(config)?;
    crate::risk::RiskSettings::from_config(config)?;
    crate::sync::verify_interval(config)?;
    crate::routing::spreads(config)?;
    if config.source_bootstrap.trim().is_empty() {
        return Err(DecideError::InvalidRequest(
            "source bootstrap servers must not be empty".into(),
        ));
    }
    Ok(())
}

fn topic_change(t: &TopicEntryView, desired: PartitionState) -> Record {
    Record::MirrorTopicStateChange(
        MirrorTopicStateKey {
            topic_id: t.topic_id,
        },
        Some(MirrorTopicStateChange {
            topic_id: t.topic_id,
            mirror_name: t.mirror.clone(),
            desired_state: desired,
            topic_name: t.name.clone(),
            partition_count: t.partition_count,
        }),
    )
}

struct TopicEntryView {
    topic_id: TopicId,
    mirror: String,
    name: String,
    partition_count: i32,
    desired: PartitionState,
}

fn topic_in_mirror(
    image: &MirrorStateImage,
    mirror: &str,
    id: &TopicId,
) -> Result<TopicEntryView, DecideError> {
    match image.topic(id) {
        Some(t) if t.change.mirror_name == mirror => Ok(TopicEntryView {
            topic_id: *id,
            mirror: mirror.to_string(),
            name: t.change.topic_name.clone(),
            partition_count: t.change.partition_count,
            desired: t.change.desired_state,
        }),
        _ => Err(DecideError::TopicNotInClusterMirror {
            topic: topic_label(image, id),
            mirror: mirror.to_string(),
        }),
    }
}

fn partitions_of<'a>(
    image: &'a MirrorStateImage,
    mirror: &str,
    id: TopicId,
    count: i32,
) -> impl Iterator<Item = PartitionState> + 'a {
    let mirror = mirror.to_string();
    (0..count).map(move |p| {
        image.partition_state_or_unknown(&MirrorPartitionKey::new(mirror.clone(), id, p))
    })
}

/// Decides `command` against `image`: the records to append, or why not.
///
/// Multi-topic commands are all-or-nothing; send one command per topic for
/// per-topic results.
pub fn decide(image: &MirrorStateImage, command: &Command) -> Result<Vec<Record>, DecideError> {
    decide_with(image, image, command)
}

/// Decides a partition's own command ([`Command::placed_partition`]) on the
/// shard that hosts the partition of a mirror coordinated elsewhere: the
/// partition's state and map are `image`'s, its mirror and topic are
/// checked in `topics`, the coordinator's shard as this node last read it.
/// A check on a topic record a little old is what the KIP's partition
/// leader does too: it acts on the coordinator's last answer.
pub fn decide_hosted(
    image: &MirrorStateImage,
    topics: &MirrorStateImage,
    command: &Command,
) -> Result<Vec<Record>, DecideError> {
    if command.placed_partition().is_none() && !matches!(command, Command::ForgetMirror { .. }) {
        return Err(DecideError::InvalidRequest(
            "only a partition's own records are written where it is placed; this operation is its mirror's coordinator's".into(),
        ));
    }
    decide_with(image, topics, command)
}

/// [`decide`] with the mirror's topic-level records read from `topics`
/// (the same image unless the partition is hosted away from its
/// coordinator).
fn decide_with(
    image: &MirrorStateImage,
    topics: &MirrorStateImage,
    command: &Command,
) -> Result<Vec<Record>, DecideError> {
    use PartitionState as S;
    match command {
        Command::CreateMirror { name, config } => {
            validate_mirror_name(name)?;
            if image.mirror(name).is_some() {
                return Err(DecideError::ClusterMirrorAlreadyExists(name.clone()));
            }
            validate_config(config)?;
            Ok(vec![Record::MirrorConfig(
                MirrorConfigKey {
                    mirror_name: name.clone(),
                },
                Some(config.clone()),
            )])
        }
        Command::AlterMirror { name, config } => {
            let current = require_mirror(image, name)?;
            validate_config(config)?;
            if crate::routing::spreads(config)? != crate::routing::spreads(current)? {
                return Err(DecideError::InvalidRequest(format!(
                    "{} is fixed at create: the partitions' records are where it put them",
                    crate::routing::SPREAD_KEY
                )));
            }
            let mut config = config.clone();
            if config.source_cluster_id.is_empty() {
                config.source_cluster_id = current.source_cluster_id.clone();
            } else if !current.source_cluster_id.is_empty()
                && config.source_cluster_id != current.source_cluster_id
            {
                return Err(DecideError::InvalidRequest(format!(
                    "the source cluster id is recorded at create ({:?}) and cannot change to {:?}",
                    current.source_cluster_id, config.source_cluster_id
                )));
            }
            if &config == current {
                return Ok(vec![]);
            }
            Ok(vec![Record::MirrorConfig(
                MirrorConfigKey {
                    mirror_name: name.clone(),
                },
                Some(config),
            )])
        }
        Command::DeleteMirror { name } => {
            require_mirror(image, name)?;
            let active: Vec<String> = image
                .topics_of(name)
                .filter(|t| t.change.is_active())
                .map(|t| t.change.topic_name.clone())
                .collect();
            if !active.is_empty() {
                return Err(DecideError::ClusterMirrorNotEmpty {
                    mirror: name.clone(),
                    topics: active,
                });
            }
            if let Some((k, v)) = image
                .partition_states_of(name)
                .find(|(_, v)| !v.state.is_idle())
            {
                return Err(DecideError::InvalidClusterMirrorStates(format!(
                    "partition {} of {} is {}, not STOPPED",
                    k.partition,
                    topic_label(image, &k.topic_id),
                    v.state
                )));
            }
            if let Some(why) = keyless_hold_refuses(image, name, None) {
                return Err(DecideError::InvalidClusterMirrorStates(why));
            }
            let mut out = vec![Record::MirrorConfig(
                MirrorConfigKey {
                    mirror_name: name.clone(),
                },
                None,
            )];
            for t in image.topics_of(name) {
                out.push(Record::MirrorTopicStateChange(
                    MirrorTopicStateKey {
                        topic_id: t.change.topic_id,
                    },
                    Some(MirrorTopicStateChange {
                        mirror_name: String::new(),
                        desired_state: S::Unknown,
                        ..t.change.clone()
                    }),
                ));
            }
            out.extend(
                image
                    .keys_of_mirror(name)
                    .into_iter()
                    .map(RecordKey::tombstone),
            );
            Ok(out)
        }
        Command::StartTopics {
            mirror,
            topics,
            include,
            exclude,
            seeds,
        } => {
            let current = require_mirror(image, mirror)?;
            let config = MirrorConfig {
                topics_include: join_lists(&current.topics_include, include),
                topics_exclude: join_lists(&current.topics_exclude, exclude),
                ..current.clone()
            };
            let filter = TopicFilter::new(&config.topics_include, &config.topics_exclude)?;
            if !seeds.is_empty() && crate::routing::spreads(current)? {
                // A seeded map would land in this shard, not in each
                // partition's own.
                return Err(DecideError::InvalidRequest(format!(
                    "cluster mirror {mirror:?} spreads its partitions ({}=true): a start that seeds their offset maps (a delta failback) is not supported for it yet",
                    crate::routing::SPREAD_KEY
                )));
            }
            let mut out = Vec::new();
            if config != *current {
                out.push(Record::MirrorConfig(
                    MirrorConfigKey {
                        mirror_name: mirror.clone(),
                    },
                    Some(config.clone()),
                ));
            }
            for t in topics {
                let label = format!("{} ({})", t.name, t.topic_id);
                if is_internal_topic(&t.name) || filter.is_excluded(&t.name) {
                    return Err(DecideError::InvalidRequest(format!(
                        "topic {label} is internal or excluded by topics.exclude"
                    )));
                }
                if t.partition_count <= 0 {
                    return Err(DecideError::InvalidRequest(format!(
                        "topic {label} has partition count {}",
                        t.partition_count
                    )));
                }
                if let Some(why) = keyless_hold_refuses(image, mirror, Some((t.topic_id, &t.name)))
                {
                    return Err(DecideError::InvalidClusterMirrorStates(why));
                }
                if let Some(e) = image.topic(&t.topic_id) {
                    let c = &e.change;
                    if !c.mirror_name.is_empty() && &c.mirror_name != mirror {
                        if !matches!(c.desired_state, S::Stopped | S::Unknown) {
                            return Err(DecideError::TopicAlreadyInClusterMirror {
                                topic: label,
                                mirror: c.mirror_name.clone(),
                            });
                        }
                    } else if &c.mirror_name == mirror {
                        match c.desired_state {
                            S::Mirroring => continue,
                            S::Paused => return Err(DecideError::MirrorTopicAlreadyPaused(label)),
                            _ => {}
                        }
                    }
                }
                if let Some(s) = partitions_of(image, mirror, t.topic_id, t.partition_count)
                    .find(|s| !s.is_idle())
                {
                    return Err(if s == S::Stopping {
                        DecideError::MirrorTopicBeingStopped(label)
                    } else {
                        DecideError::InvalidClusterMirrorStates(format!(
                            "topic {label} has a partition in {s}; start needs STOPPED or UNKNOWN"
                        ))
                    });
                }
                let view = TopicEntryView {
                    topic_id: t.topic_id,
                    mirror: mirror.clone(),
                    name: t.name.clone(),
                    partition_count: t.partition_count,
                    desired: S::Mirroring,
                };
                out.push(topic_change(&view, view.desired));
                if let Some(destination_topic_id) = t.destination_topic_id {
                    out.push(Record::MirrorTopicDestination(
                        MirrorTopicStateKey {
                            topic_id: t.topic_id,
                        },
                        Some(MirrorTopicDestination {
                            destination_topic_id,
                        }),
                    ));
                }
            }
            for seed in seeds {
                let Some(t) = topics.iter().find(|t| t.topic_id == seed.topic_id) else {
                    return Err(DecideError::InvalidRequest(format!(
                        "an offset map for topic {} that this start does not start",
                        seed.topic_id
                    )));
                };
                if !(0..t.partition_count).contains(&seed.partition) {
                    return Err(DecideError::UnknownTopicOrPartition {
                        topic: t.name.clone(),
                        partition: seed.partition,
                        count: t.partition_count,
                    });
                }
                let key = MirrorPartitionKey::new(mirror.clone(), seed.topic_id, seed.partition);
                // A start begins a partition's map afresh.
                let map = image.offset_map(&key);
                let stale: Vec<i64> = map.runs().map(|r| r.source_start).collect();
                crate::OffsetMap::default()
                    .check_change(&seed.runs, &[], &seed.holes)
                    .map_err(|e| DecideError::InvalidRequest(e.to_string()))?;
                out.extend(stale.into_iter().map(|s| {
                    Record::OffsetMapRun(
                        OffsetMapRunKey {
                            partition: key.clone(),
                            source_start: s,
                        },
                        None,
                    )
                }));
                out.extend(map.holes().map(|h| {
                    Record::OffsetMapHole(
                        OffsetMapHoleKey {
                            partition: key.clone(),
                            destination_start: h.destination_start,
                        },
                        None,
                    )
                }));
                // The old map's source epochs say nothing of the records the
                // seeded map covers (another mirror wrote them, in epochs of
                // their own): the next fetch records the epochs anew.
                if !image.source_epochs(&key).entries.is_empty() {
                    out.push(Record::SourceEpochs(key.clone(), None));
                }
                out.extend(seed.runs.iter().map(|r| {
                    Record::OffsetMapRun(
                        OffsetMapRunKey {
                            partition: key.clone(),
                            source_start: r.source_start,
                        },
                        Some(*r),
                    )
                }));
                out.extend(seed.holes.iter().map(|h| {
                    Record::OffsetMapHole(
                        OffsetMapHoleKey {
                            partition: key.clone(),
                            destination_start: h.destination_start,
                        },
                        Some(*h),
                    )
                }));
            }
            Ok(out)
        }
        Command::StopTopics { mirror, topics } => {
            require_mirror(image, mirror)?;
            let mut out = Vec::new();
            for id in topics {
                let t = topic_in_mirror(image, mirror, id)?;
                match t.desired {
                    S::Stopped => {}
                    // KIP §5.3 allows stop from MIRRORING and PAUSED; the
                    // RPC table's "PAUSED → MIRROR_TOPIC_ALREADY_PAUSED" would
                    // make a paused topic impossible to fail over.
                    S::Mirroring | S::Paused => out.push(topic_change(&t, S::Stopped)),
                    other => {
                        return Err(DecideError::InvalidClusterMirrorStates(format!(
                            "topic {} has desired state {other}",
                            t.name
                        )))
                    }
                }
            }
            Ok(out)
        }
        Command::PauseTopics { mirror, topics } => {
            require_mirror(image, mirror)?;
            let mut out = Vec::new();
            for id in topics {
                let t = topic_in_mirror(image, mirror, id)?;
                match t.desired {
                    S::Mirroring => out.push(topic_change(&t, S::Paused)),
                    S::Paused => {
                        return Err(DecideError::MirrorTopicAlreadyPaused(topic_label(
                            image, id,
                        )))
                    }
                    _ => return Err(DecideError::MirrorTopicBeingStopped(topic_label(image, id))),
                }
            }
            Ok(out)
        }
        Command::ResumeTopics { mirror, topics } => {
            require_mirror(image, mirror)?;
            let mut out = Vec::new();
            for id in topics {
                let t = topic_in_mirror(image, mirror, id)?;
                match t.desired {
                    S::Paused => out.push(topic_change(&t, S::Mirroring)),
                    S::Mirroring => {}
                    _ => return Err(DecideError::MirrorTopicNotPaused(topic_label(image, id))),
                }
            }
            Ok(out)
        }
        Command::UpdatePartitionCount {
            mirror,
            topic_id,
            partition_count,
        } => {
            require_mirror(image, mirror)?;
            let mut t = topic_in_mirror(image, mirror, topic_id)?;
            if *partition_count < t.partition_count {
                return Err(DecideError::InvalidRequest(format!(
                    "partition count of {} cannot decrease from {} to {partition_count}",
                    t.name, t.partition_count
                )));
            }
            if *partition_count == t.partition_count {
                return Ok(vec![]);
            }
            t.partition_count = *partition_count;
            Ok(vec![topic_change(&t, t.desired)])
        }
        c @ (Command::TransitionPartition { .. }
        | Command::FailPartition { .. }
        | Command::RecoverPartition { .. }
        | Command::ClearFailure { .. }
        | Command::RecordLastMirrorEpochs { .. }
        | Command::SetOffsetRuns { .. }
        | Command::RecordProducer { .. }
        | Command::RecordSourceEpochs { .. }
        | Command::RecordGap { .. }
        | Command::RecordVerifyResult { .. }
        | Command::RecordFailoverReport { .. }) => partition::decide(image, topics, c),
        Command::RecordFailbackPlan { key, plan } => {
            // Recorded before the topic starts (what it decides is done
            // first), so only the mirror must exist.
            require_mirror(image, &key.mirror_name)?;
            Ok(vec![Record::FailbackPlan(key.clone(), Some(plan.clone()))])
        }
        Command::RecordGroupOffsetSyncs { syncs } => syncs
            .iter()
            .map(|(key, value)| {
                require_mirror(image, &key.mirror_name)?;
                Ok(Record::GroupOffsetSync(key.clone(), Some(value.clone())))
            })
            .collect(),
        Command::RecordTopicConfigSync { key, value } => {
            require_mirror(image, &key.mirror_name)?;
            Ok(vec![Record::TopicConfigSync(
                key.clone(),
                Some(value.clone()),
            )])
        }
        Command::RecordAclCreated { key } => {
            require_mirror(image, &key.mirror_name)?;
            Ok(vec![Record::AclSync(
                key.clone(),
                Some(AclSync {
                    owned_by_kmirror: true,
                }),
            )])
        }
        Command::RecordAclDeleted { key } => {
            require_mirror(image, &key.mirror_name)?;
            Ok(vec![Record::AclSync(key.clone(), None)])
        }
        Command::RecordSourceFence { key, fence } => {
            require_mirror(image, &key.mirror_name)?;
            topic_in_mirror(image, &key.mirror_name, &fence.topic_id)?;
            if key.binding.trim().is_empty() {
                return Err(DecideError::InvalidRequest(
                    "a source fence needs an ACL binding".into(),
                ));
            }
            Ok(vec![Record::SourceFence(key.clone(), Some(fence.clone()))])
        }
        Command::RemoveSourceFence { key } => {
            require_mirror(image, &key.mirror_name)?;
            let recorded = image
                .source_fences_of(&key.mirror_name)
                .any(|(k, _)| k == key);
            Ok(if recorded {
                vec![Record::SourceFence(key.clone(), None)]
            } else {
                vec![]
            })
        }
        Command::ForgetMirror { name } => {
            if image.mirror(name).is_some() || topics.mirror(name).is_some() {
                return Err(DecideError::InvalidClusterMirrorStates(format!(
                    "cluster mirror {name:?} exists: only a deleted mirror's partitions are forgotten"
                )));
            }
            Ok(image
                .keys_of_mirror(name)
                .into_iter()
                .map(RecordKey::tombstone)
                .collect())
        }
        Command::ReleaseShard { shard, release } => {
            if *shard < 0 {
                return Err(DecideError::InvalidRequest(format!(
                    "shard {shard} is not a state-topic partition"
                )));
            }
            Ok(vec![Record::ShardRelease(
                ShardReleaseKey { shard: *shard },
                Some(release.clone()),
            )])
        }
    }
}

/// Decides and folds in one step, for tests and single-writer callers that
/// do not persist (e.g. dry runs). Returns the records it applied.
pub fn decide_and_apply(
    image: &mut MirrorStateImage,
    command: &Command,
) -> Result<Vec<Record>, DecideError> {
    let records = decide(image, command)?;
    for (offset, r) in (image.end_offset()..).zip(records.iter()) {
        image.apply(offset, r);
    }
    Ok(records)
}
