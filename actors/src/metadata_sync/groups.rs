//! Group-offset sync: each source group's committed offsets on the mirror's
//! MIRRORING topics, translated exactly through the offset map, clamped to
//! the destination's bounds, recorded, then committed — unless the group is
//! live on the destination, where its consumers own their offsets.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use kmirror_events::{
    group_offset_target, is_active_group_state, Command, GroupFilter, GroupOffsetSync,
    GroupOffsetSyncKey, MirrorPartitionKey, MirrorStateImage, PartitionState, SyncSettings,
    TopicId,
};

use super::{mirrored_topics, read_image, record, Shared, SyncError, SyncReport};
use crate::cluster::{ClusterError, CommittedOffset, Doing, GroupListing, GroupOffsets, LogBounds};
use crate::coordinator::now_ms;
use crate::kafka::fetch::TopicPartition;
use crate::kafka::{KafkaError, ResponseError};

/// Whether a commit was refused because the group has live members (a
/// consumer joined between our listing and our commit).
fn refused_as_active(e: &KafkaError) -> bool {
    matches!(
        e.response_error(),
        Some(
            ResponseError::UnknownMemberId
                | ResponseError::IllegalGeneration
                | ResponseError::RebalanceInProgress
                | ResponseError::FencedMemberEpoch
                | ResponseError::StaleMemberEpoch
                | ResponseError::GroupIdNotFound
        )
    )
}

/// Groups whose offsets are plain consumer offsets: consumer groups and
/// standalone-commit groups (share groups keep theirs elsewhere, Connect
/// groups have none).
fn has_consumer_offsets(g: &GroupListing) -> bool {
    (g.protocol_type.is_empty() || g.protocol_type == "consumer")
        && !g.group_type.eq_ignore_ascii_case("share")
}

/// What one group pass found, besides errors.
#[derive(Default)]
struct Pass {
    next: Option<Duration>,
    skipped: BTreeSet<String>,
    committed: u64,
    errors: Vec<SyncError>,
}

/// One group-offset pass: over every MIRRORING partition of the mirror, or
/// — the final pass of partitions being stopped — over exactly `only`,
/// whatever their topics' desired state. Returns when to run the next
/// periodic pass and what happened.
pub(super) async fn group_pass(
    shared: &Shared,
    only: Option<&HashSet<MirrorPartitionKey>>,
) -> (Duration, SyncReport) {
    let mut pass = Pass::default();
    if let Err(e) = sync_groups(shared, &mut pass, only).await {
        pass.errors.push(e);
    }
    let mirror = &shared.spec.mirror;
    let mut st = shared.state.lock().expect("sync state");
    for g in pass.skipped.difference(&st.warned.clone()) {
        tracing::warn!(mirror = %mirror, group = %g, "consumer group is active on the destination; its offsets are not synced while it has members");
        st.metrics.active_groups_skipped += 1;
    }
    st.warned = pass.skipped.clone();
    st.metrics.active_groups_now = pass.skipped.len() as u64;
    st.metrics.group_offsets_committed += pass.committed;
    if pass.errors.is_empty() {
        st.metrics.last_group_sync_ms = now_ms();
    } else {
        st.metrics.group_sync_errors += pass.errors.len() as u64;
        for e in &pass.errors {
            tracing::warn!(mirror = %mirror, error = %e, "group offset sync failed; retrying next tick");
        }
    }
    let report = SyncReport {
        errors: pass.errors,
        skipped_groups: pass.skipped.into_iter().collect(),
    };
    (pass.next.unwrap_or(Duration::from_secs(1)), report)
}

async fn sync_groups(
    shared: &Shared,
    pass: &mut Pass,
    only: Option<&HashSet<MirrorPartitionKey>>,
) -> Result<(), SyncError> {
    let spec = &shared.spec;
    let image = read_image(shared).await?;
    let Some(config) = image.mirror(&spec.mirror) else {
        return Ok(());
    };
    let settings = SyncSettings::from_config(config)?;
    pass.next = Some(settings.group_interval);
    let filter = GroupFilter::new(&config.groups_include, &config.groups_exclude)?;
    // Periodically, only topics actively mirrored: a paused topic's copy is
    // not moving, and a stopped one has failed over — its destination groups
    // belong to the consumers that moved there, once the final pass is done.
    let topics = match only {
        None => mirrored_topics(&image, &spec.mirror, &[PartitionState::Mirroring]),
        Some(keys) => image
            .topics_of(&spec.mirror)
            .filter(|e| keys.iter().any(|k| k.topic_id == e.change.topic_id))
            .map(|e| {
                (
                    e.change.topic_name.clone(),
                    (e.change.topic_id, e.change.partition_count),
                )
            })
            .collect(),
    };
    if topics.is_empty() {
        return Ok(());
    }
    // Source groups commit by topic name; identity is the topic id. A
    // source topic re-created under a mirrored name is another topic, and
    // its offsets mean nothing in this map.
    let source_ids: HashMap<String, TopicId> = spec
        .source
        .topics()
        .await
        .doing(|| "list source topics".into())?
        .into_iter()
        .map(|t| (t.name, t.topic_id))
        .collect();
    let topics: BTreeMap<String, (TopicId, i32)> = topics
        .into_iter()
        .filter(|(name, (id, _))| source_ids.get(name) == Some(id))
        .collect();
    if topics.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = topics.keys().cloned().collect();
    let source_groups = spec
        .source
        .list_groups()
        .await
        .doing(|| "list source groups".into())?;
    let wanted: Vec<&GroupListing> = source_groups
        .iter()
        .filter(|g| has_consumer_offsets(g) && filter.matches(&g.group_id))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let dest_states: HashMap<String, String> = spec
        .destination
        .list_groups()
        .await
        .doing(|| "list destination groups".into())?
        .into_iter()
        .map(|g| (g.group_id, g.state))
        .collect();
    let (live, idle): (Vec<&GroupListing>, Vec<&GroupListing>) =
        wanted.into_iter().partition(|g| {
            dest_states
                .get(&g.group_id)
                .is_some_and(|s| is_active_group_state(s))
        });
    pass.skipped
        .extend(live.into_iter().map(|g| g.group_id.clone()));
    let scope = Scope {
        image: &image,
        topics: &topics,
        names: &names,
        only,
        bounds: Mutex::new(HashMap::new()),
    };
    // Each group costs a few round trips to its coordinators on both
    // clusters and nothing else: a thousand of them one after another
    // would take a thousand times that.
    let outcomes: Vec<_> = stream::iter(idle)
        .map(|g| {
            let scope = &scope;
            async move { (g, sync_group(shared, scope, &g.group_id).await) }
        })
        .buffered(GROUPS_AT_ONCE)
        .collect()
        .await;
    for (g, outcome) in outcomes {
        match outcome {
            Ok(n) => pass.committed += n,
            Err(GroupError::Active) => {
                pass.skipped.insert(g.group_id.clone());
            }
            Err(GroupError::Failed(e)) => pass.errors.push(SyncError::Group {
                group: g.group_id.clone(),
                source: Box::new(e),
            }),
        }
    }
    Ok(())
}

enum GroupError {
    /// The destination refused the commit: the group has members now.
    Active,
    Failed(SyncError),
}

impl<E: Into<SyncError>> From<E> for GroupError {
    fn from(e: E) -> Self {
        GroupError::Failed(e.into())
    }
}

/// Groups synced at once in a pass.
const GROUPS_AT_ONCE: usize = 16;

/// What a pass syncs: the mirror's topics by name, and — for a final pass —
/// the partitions it is limited to.
struct Scope<'a> {
    image: &'a MirrorStateImage,
    topics: &'a BTreeMap<String, (TopicId, i32)>,
    names: &'a [String],
    only: Option<&'a HashSet<MirrorPartitionKey>>,
    /// Destination bounds read so far in this pass, shared by its groups.
    bounds: Mutex<HashMap<TopicPartition, LogBounds>>,
}

/// Syncs one group; returns how many partition offsets it committed.
async fn sync_group(shared: &Shared, scope: &Scope<'_>, group: &str) -> Result<u64, GroupError> {
    let spec = &shared.spec;
    let (image, topics, names) = (scope.image, scope.topics, scope.names);
    let source = spec
        .source
        .committed_offsets(group, names)
        .await
        .doing(|| "fetch source offsets".into())?;
    if source.is_empty() {
        return Ok(0);
    }
    let current = spec
        .destination
        .committed_offsets(group, names)
        .await
        .doing(|| "fetch destination offsets".into())?;
    let mut commit = GroupOffsets::new();
    for ((topic, partition), offset) in source {
        let Some(&(topic_id, count)) = topics.get(&topic) else {
            continue;
        };
        if partition >= count {
            continue;
        }
        let key = MirrorPartitionKey::new(spec.mirror.clone(), topic_id, partition);
        if scope.only.is_some_and(|only| !only.contains(&key)) {
            continue;
        }
        let translation = image.translate(&key, offset.offset);
        let tp = TopicPartition::new(&topic, partition);
        let known = scope.bounds.lock().unwrap().get(&tp).copied();
        let b = match known {
            Some(b) => b,
            None => {
                let b = spec
                    .destination
                    .bounds(&tp)
                    .await
                    .doing(|| format!("destination bounds of {tp}"))?;
                scope.bounds.lock().unwrap().insert(tp.clone(), b);
                b
            }
        };
        let Some(target) = group_offset_target(translation, b.log_start, b.end) else {
            continue;
        };
        let from = current
            .get(&(topic.clone(), partition))
            .map(|c| c.offset)
            .unwrap_or(-1);
        if from == target {
            continue;
        }
        record(
            shared,
            Command::RecordGroupOffsetSync {
                key: GroupOffsetSyncKey {
                    mirror_name: spec.mirror.clone(),
                    group: group.to_string(),
                    topic_id,
                    partition,
                },
                value: GroupOffsetSync {
                    source_offset: offset.offset,
                    from_offset: from,
                    to_offset: target,
                    // Destination leader epochs are not the source's: an
                    // unknown epoch makes the consumer skip a validation
                    // that would compare unrelated histories.
                    leader_epoch: -1,
                },
            },
        )
        .await?;
        commit.insert(
            (topic, partition),
            CommittedOffset {
                offset: target,
                leader_epoch: -1,
                metadata: offset.metadata,
            },
        );
    }
    let n = commit.len() as u64;
    if n == 0 {
        return Ok(0);
    }
    match spec.destination.commit_offsets(group, commit).await {
        Ok(()) => Ok(n),
        Err(e) if refused_as_active(&e) => Err(GroupError::Active),
        Err(e) => Err(ClusterError::new("commit offsets", e).into()),
    }
}
