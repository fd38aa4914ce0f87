//! Group-offset sync: each source group's committed offsets on the mirror's
//! MIRRORING topics, translated exactly through the offset map, clamped to
//! the destination's bounds, recorded, then committed — unless the group is
//! live on the destination, where its consumers own their offsets.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use kmirror_events::{
    group_offset_target, is_active_group_state, placement_shard, Command, GroupFilter,
    GroupOffsetSync, GroupOffsetSyncKey, MirrorPartitionKey, MirrorStateImage, PartitionState,
    SyncSettings, TopicId,
};

use super::{mirrored_topics, read_image, record, Shared, SyncError, SyncReport};
use crate::cluster::{ClusterError, CommittedOffset, Doing, GroupListing, GroupOffsets, LogBounds};
use crate::coordinator::now_ms;
use crate::kafka::fetch::TopicPartition;
use crate::kafka::{KafkaError, ResponseError};
use crate::state_log::FollowedState;

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
            if only.is_some() {
                tracing::warn!(mirror = %mirror, error = %e, "final group offset sync of stopping partitions failed; not retried");
            } else {
                tracing::warn!(mirror = %mirror, error = %e, "group offset sync failed; retrying next tick");
            }
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
    // A thousand groups cost a few requests per cluster to read (batched
    // per group coordinator), one ListOffsets pair per partition, a few
    // appends, and then one OffsetCommit each: a group-by-group pass paid
    // two coordinator round trips per read and one durable append per
    // partition offset.
    let ids: Vec<String> = idle.iter().map(|g| g.group_id.clone()).collect();
    let mut source = Vec::new();
    for (group, answer) in spec
        .source
        .committed_offsets_of_groups(&ids, &names)
        .await
        .doing(|| "fetch source offsets".into())?
    {
        match answer {
            Ok(offsets) if offsets.is_empty() => {}
            Ok(offsets) => source.push((group, offsets)),
            Err(e) => pass
                .errors
                .push(group_error(group, "fetch source offsets", e)),
        }
    }
    if source.is_empty() {
        return Ok(());
    }
    // Source groups commit by topic name; identity is the topic id. A
    // source topic re-created under a mirrored name is another topic, and
    // its offsets mean nothing in this map. Read only once some group has
    // offsets on mirrored topics: the listing is the whole source's
    // metadata, and a pass runs every second, groups or not.
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
    // A final pass over partitions placed in other shards translates with
    // their maps as their hosts left them: the host asks for it after its
    // last checkpoint, so each such shard is read to its end first. The
    // partitions of a shard that cannot be read are left out, not synced
    // with an older map, and the others are synced all the same.
    let mut readable = None;
    if let (Some(h), Some(keys)) = (&spec.spread, only) {
        let shard_of = |k: &MirrorPartitionKey| placement_shard(k, true, h.followed.partitions());
        let elsewhere: BTreeSet<i32> = keys
            .iter()
            .map(shard_of)
            .filter(|&shard| shard != h.shard)
            .collect();
        let reads = elsewhere.iter().map(|&shard| async move {
            (
                shard,
                h.followed.read_to_end(shard, PLACED_READ_LIMIT).await,
            )
        });
        let mut unread = BTreeSet::new();
        for (shard, read) in futures_util::future::join_all(reads).await {
            if let Err(e) = read {
                pass.errors.push(SyncError::Placed(e));
                unread.insert(shard);
            }
        }
        if !unread.is_empty() {
            readable = Some(
                keys.iter()
                    .filter(|k| !unread.contains(&shard_of(k)))
                    .cloned()
                    .collect::<HashSet<_>>(),
            );
        }
    }
    let only = readable.as_ref().or(only);
    let followed = spec.spread.as_ref().map(|h| (h, h.followed.now()));
    let scope = Scope {
        mirror: &spec.mirror,
        image: &image,
        placed: followed.as_ref().map(|(h, now)| Placed {
            shard: h.shard,
            partitions: h.followed.partitions(),
            followed: now,
        }),
        topics: &topics,
        only,
    };
    let ids: Vec<String> = source.iter().map(|(g, _)| g.clone()).collect();
    let mut current: HashMap<String, Result<GroupOffsets, KafkaError>> = spec
        .destination
        .committed_offsets_of_groups(&ids, &names)
        .await
        .doing(|| "fetch destination offsets".into())?
        .into_iter()
        .collect();
    let wanted: BTreeSet<TopicPartition> = source
        .iter()
        .flat_map(|(_, offsets)| offsets.keys())
        .filter_map(|(t, p)| scope.key(t, *p).map(|_| TopicPartition::new(t, *p)))
        .collect();
    let bounds = destination_bounds(shared, wanted, &mut pass.errors).await;
    let mut syncs = Vec::new();
    let mut commits = Vec::new();
    for (group, offsets) in source {
        let current = match current.remove(&group) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                pass.errors
                    .push(group_error(group, "fetch destination offsets", e));
                continue;
            }
            None => GroupOffsets::new(),
        };
        let commit = plan_group(&scope, &group, offsets, &current, &bounds, &mut syncs);
        if !commit.is_empty() {
            commits.push((group, commit));
        }
    }
    // Durable before any commit, as every side effect; chunked so one
    // append stays small.
    for chunk in syncs.chunks(SYNCS_PER_APPEND) {
        record(
            shared,
            Command::RecordGroupOffsetSyncs {
                syncs: chunk.to_vec(),
            },
        )
        .await?;
    }
    let outcomes: Vec<_> = stream::iter(commits)
        .map(|(group, commit)| async move {
            let n = commit.len() as u64;
            let outcome = spec.destination.commit_offsets(&group, commit).await;
            (group, n, outcome)
        })
        .buffered(GROUPS_AT_ONCE)
        .collect()
        .await;
    for (group, n, outcome) in outcomes {
        match outcome {
            Ok(()) => pass.committed += n,
            Err(e) if refused_as_active(&e) => {
                pass.skipped.insert(group);
            }
            Err(e) => pass.errors.push(group_error(group, "commit offsets", e)),
        }
    }
    Ok(())
}

fn group_error(group: String, doing: &str, e: KafkaError) -> SyncError {
    SyncError::Group {
        group,
        source: Box::new(ClusterError::new(doing, e).into()),
    }
}

/// How long a final pass waits for a shard where one of its partitions is
/// placed to be read to its end.
const PLACED_READ_LIMIT: Duration = Duration::from_secs(10);

/// OffsetCommits in flight at once in a pass (OffsetCommit takes one group
/// per request).
const GROUPS_AT_ONCE: usize = 16;

/// `GroupOffsetSync` records per append: a thousand groups of five
/// partitions are a few appends, not five thousand.
const SYNCS_PER_APPEND: usize = 1000;

/// What a pass syncs: the mirror's topics by name, and — for a final pass —
/// the partitions it is limited to.
struct Scope<'a> {
    mirror: &'a str,
    /// The coordinator's shard: the mirror's topics, and the maps of the
    /// partitions placed there.
    image: &'a MirrorStateImage,
    /// For a spread mirror, where the other partitions' maps are read.
    placed: Option<Placed<'a>>,
    topics: &'a BTreeMap<String, (TopicId, i32)>,
    only: Option<&'a HashSet<MirrorPartitionKey>>,
}

impl Scope<'_> {
    /// The mirrored partition a source commit on `topic`-`partition` is
    /// for, if this pass syncs it.
    fn key(&self, topic: &str, partition: i32) -> Option<MirrorPartitionKey> {
        let &(topic_id, count) = self.topics.get(topic)?;
        if partition >= count {
            return None;
        }
        let key = MirrorPartitionKey::new(self.mirror, topic_id, partition);
        if self.only.is_some_and(|only| !only.contains(&key)) {
            return None;
        }
        Some(key)
    }

    /// The image holding `key`'s offset map: the shard it is placed in.
    /// Another shard's is as this node's follower last read it, so it may
    /// lag its host's checkpoints: a map read behind translates to an
    /// earlier destination offset (the end of a shorter last run), never a
    /// later one, so the group's consumers re-read a little and skip
    /// nothing. A spread mirror's map never starts over (it cannot be
    /// seeded), so an older read is always a prefix of the newer one — but
    /// only when read forward: a shard the follower is reading again from
    /// its log start holds part of a compacted log, where a run rewritten
    /// later may be missing while the runs after it are there, and an
    /// offset in it would translate to the next run's start, too far.
    /// `None` unless the shard was read to its high watermark.
    fn map_of(&self, key: &MirrorPartitionKey) -> Option<&MirrorStateImage> {
        let Some(p) = &self.placed else {
            return Some(self.image);
        };
        let shard = placement_shard(key, true, p.partitions);
        if shard == p.shard {
            return Some(self.image);
        }
        let read = usize::try_from(shard)
            .ok()
            .and_then(|i| p.followed.shards.get(i))?;
        read.caught_up().then_some(&read.image)
    }
}

/// A spread mirror's partitions placed in other shards than the
/// coordinator's (see [`crate::spread`]).
struct Placed<'a> {
    /// The coordinator's own shard.
    shard: i32,
    /// The state topic's partition count, by which keys are placed.
    partitions: i32,
    followed: &'a FollowedState,
}

/// The destination's bounds of these partitions: one ListOffsets pair per
/// broker, not per partition, so a thousand groups' partitions cost a few
/// requests. A partition that cannot be read is left out (its offsets wait
/// for the next pass) and named in `errors`: it holds back no other.
async fn destination_bounds(
    shared: &Shared,
    partitions: BTreeSet<TopicPartition>,
    errors: &mut Vec<SyncError>,
) -> HashMap<TopicPartition, LogBounds> {
    let partitions: Vec<TopicPartition> = partitions.into_iter().collect();
    let read = shared.spec.destination.bounds_many(&partitions).await;
    let mut out = HashMap::with_capacity(read.len());
    for (tp, b) in partitions.into_iter().zip(read) {
        match b.doing(|| format!("destination bounds of {tp}")) {
            Ok(b) => {
                out.insert(tp, b);
            }
            Err(e) => errors.push(e.into()),
        }
    }
    out
}

/// One group's translated offsets: the records to append (pushed onto
/// `syncs`) and the commit they describe.
fn plan_group(
    scope: &Scope<'_>,
    group: &str,
    source: GroupOffsets,
    current: &GroupOffsets,
    bounds: &HashMap<TopicPartition, LogBounds>,
    syncs: &mut Vec<(GroupOffsetSyncKey, GroupOffsetSync)>,
) -> GroupOffsets {
    let mut commit = GroupOffsets::new();
    for ((topic, partition), offset) in source {
        let Some(key) = scope.key(&topic, partition) else {
            continue;
        };
        let Some(map) = scope.map_of(&key) else {
            continue;
        };
        let translation = map.translate(&key, offset.offset);
        let Some(b) = bounds.get(&TopicPartition::new(&topic, partition)) else {
            continue;
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
        syncs.push((
            GroupOffsetSyncKey {
                mirror_name: key.mirror_name.clone(),
                group: group.to_string(),
                topic_id: key.topic_id,
                partition,
            },
            GroupOffsetSync {
                source_offset: offset.offset,
                from_offset: from,
                to_offset: target,
                // Destination leader epochs are not the source's: an
                // unknown epoch makes the consumer skip a validation
                // that would compare unrelated histories.
                leader_epoch: -1,
            },
        ));
        commit.insert(
            (topic, partition),
            CommittedOffset {
                offset: target,
                leader_epoch: -1,
                metadata: offset.metadata,
            },
        );
    }
    commit
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kmirror_events::{MirrorPartitionKey, MirrorStateImage, Record, TopicId};

    use super::{placement_shard, Placed, Scope};
    use crate::state_log::{FollowedShard, FollowedState};

    /// A shard read again from its log start holds part of a compacted
    /// log: its maps are not used until it is read to its high watermark.
    #[test]
    fn a_shard_being_read_again_lends_no_map() {
        let key = MirrorPartitionKey::new("m", TopicId([3; 16]), 0);
        let placed = placement_shard(&key, true, 4);
        let mut image = MirrorStateImage::default();
        image.apply(
            0,
            &Record::OffsetMapRun(
                kmirror_events::OffsetMapRunKey {
                    partition: key.clone(),
                    source_start: 0,
                },
                Some(kmirror_events::OffsetMapRun {
                    source_start: 0,
                    destination_start: 0,
                    length: 5,
                }),
            ),
        );
        let shard = |next| {
            Arc::new(FollowedShard {
                image: image.clone(),
                next,
                high_watermark: 9,
                answered: true,
                error: None,
                stopped: None,
            })
        };
        let own = MirrorStateImage::default();
        let topics = Default::default();
        let lends = |next| {
            let followed = FollowedState {
                shards: (0..4).map(|_| shard(next)).collect(),
            };
            let scope = Scope {
                mirror: "m",
                image: &own,
                placed: Some(Placed {
                    shard: (placed + 1) % 4,
                    partitions: 4,
                    followed: &followed,
                }),
                topics: &topics,
                only: None,
            };
            scope.map_of(&key).map(|i| i.translate(&key, 3))
        };
        assert_eq!(lends(4), None, "part way through a re-read");
        assert_eq!(
            lends(9),
            Some(kmirror_events::Translation::Exact(3)),
            "read to its high watermark"
        );
    }
}
