//! Failback, against the clusters: find the history of the mirror that
//! copied a topic the other way, gather what both clusters hold now, let
//! `kmirror_events::failback` decide, and carry out what it decided.
//!
//! Here "source" and "destination" are the reverse mirror's: the source is
//! the old destination (where producers went after the failover), the
//! destination the old source. The history is read from the source's state
//! topic, so a daemon with an empty data dir, on another machine, can fail
//! back: the forward mirror published it there as it ran and stopped. It is
//! found by cluster id, the KIP's rule: the mirror whose recorded source
//! cluster id is this mirror's destination cluster.

mod export;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kmirror_events::failback::{
    plan_partition, FailbackRefusal, PartitionFacts, PartitionPlan, TailPolicy,
};
use kmirror_events::{
    FailbackMode, MirrorConfig, MirrorPartitionKey, MirrorStateImage, PartitionState, TopicEntry,
    TopicId,
};

use crate::cluster::{ClusterError, DestinationCluster, Doing, SourceCluster, TopicInfo};
use crate::kafka::fetch::TopicPartition;
use export::export;

/// `mirror.failback.divergent.tail`: `quarantine` (default) or `refuse`.
pub const DIVERGENT_TAIL_KEY: &str = "mirror.failback.divergent.tail";
/// `mirror.failback.quarantine.suffix`: the quarantine topic is the topic's
/// name with this suffix (default `.kmirror-divergent`).
pub const QUARANTINE_SUFFIX_KEY: &str = "mirror.failback.quarantine.suffix";
const DEFAULT_QUARANTINE_SUFFIX: &str = ".kmirror-divergent";

/// Why a failback cannot go ahead; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum FailbackError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The KIP's mirror-loop rule: the mirror copying this topic the other
    /// way is still active.
    #[error("Detected mirror loop: mirror {forward:?} on the source still mirrors {topic} from this cluster ({state}); stop it there first")]
    MirrorLoop {
        forward: String,
        topic: String,
        state: String,
    },
    #[error("topic {topic}: {reason}")]
    Refused { topic: String, reason: String },
    #[error("{0}")]
    Settings(String),
    /// The node is stopping (its shard's next owner must find the clusters
    /// left alone), between two steps: asked again, the failback goes on.
    #[error("the node is stopping: the failback of {topic} was cut off before {next}; start it again (its shard's next owner goes on where it stopped)")]
    Stopping { topic: String, next: String },
}

/// Refuses the next step, `next`, of `topic`'s failback once `stop` is set.
fn go_on(stop: &AtomicBool, topic: &str, next: &str) -> Result<(), FailbackError> {
    if !stop.load(Ordering::SeqCst) {
        return Ok(());
    }
    let (topic, next) = (topic.into(), next.into());
    Err(FailbackError::Stopping { topic, next })
}

/// The history on a mirror's source, read from its state topic and kept for
/// a few seconds: every partition checks it at alignment (the mirror-loop
/// rule), and one read serves them all.
pub struct SourceHistory {
    topic: String,
    cached: tokio::sync::Mutex<Option<(tokio::time::Instant, Option<Arc<MirrorStateImage>>)>>,
}

/// How long a read of the source's history is reused.
const HISTORY_TTL: std::time::Duration = std::time::Duration::from_secs(10);

impl SourceHistory {
    pub fn new(state_topic: &str) -> Self {
        SourceHistory {
            topic: state_topic.to_string(),
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The source's history (None: it has no state topic).
    pub async fn get(
        &self,
        source: &dyn SourceCluster,
    ) -> Result<Option<Arc<MirrorStateImage>>, ClusterError> {
        self.read(source, false).await
    }

    /// The source's history read now, not from the cache: a failback plans
    /// on what the forward mirror recorded last (its stop, its
    /// LastMirrorEpochs).
    pub async fn fresh(
        &self,
        source: &dyn SourceCluster,
    ) -> Result<Option<Arc<MirrorStateImage>>, ClusterError> {
        self.read(source, true).await
    }

    /// One read at a time: each fetches the state topic's partitions on
    /// `source`'s connection, where a second fetch of a partition would
    /// take the first one's place and end it ("closed").
    async fn read(
        &self,
        source: &dyn SourceCluster,
        fresh: bool,
    ) -> Result<Option<Arc<MirrorStateImage>>, ClusterError> {
        let mut cached = self.cached.lock().await;
        if let Some((at, image)) = cached.as_ref().filter(|_| !fresh) {
            if at.elapsed() < HISTORY_TTL {
                return Ok(image.clone());
            }
        }
        let image = crate::state_topic::read_image(source, &self.topic)
            .await?
            .map(Arc::new);
        *cached = Some((tokio::time::Instant::now(), image.clone()));
        Ok(image)
    }
}

/// The operator's choice for a start that takes topics back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailbackRequest {
    /// `None`: `delta` where the histories allow it (else refused, saying
    /// why only `from-scratch` is possible).
    pub mode: Option<FailbackMode>,
    /// Plan only: record nothing, change nothing.
    pub dry_run: bool,
}

/// A topic's failback, planned per partition.
#[derive(Clone, Debug)]
pub struct TopicFailback {
    /// The reverse mirror's source topic (the old destination's).
    pub topic: TopicInfo,
    pub forward_mirror: String,
    pub partitions: Vec<(i32, PartitionPlan)>,
}

/// The mirror properties that shape a failback.
pub struct FailbackSettings {
    pub tail: TailPolicy,
    pub quarantine_suffix: String,
}

impl FailbackSettings {
    pub fn from_config(config: &MirrorConfig) -> Result<Self, FailbackError> {
        let tail = match config
            .source_properties
            .get(DIVERGENT_TAIL_KEY)
            .map(String::as_str)
        {
            None | Some("quarantine") => TailPolicy::Quarantine,
            Some("refuse") => TailPolicy::Refuse,
            Some(other) => {
                return Err(FailbackError::Settings(format!(
                    "{DIVERGENT_TAIL_KEY}: `{other}` is neither quarantine nor refuse"
                )))
            }
        };
        let quarantine_suffix = config
            .source_properties
            .get(QUARANTINE_SUFFIX_KEY)
            .cloned()
            .unwrap_or_else(|| DEFAULT_QUARANTINE_SUFFIX.to_string());
        // Appended to a topic name, so it must keep one legal.
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if quarantine_suffix.is_empty() || !quarantine_suffix.chars().all(legal) {
            return Err(FailbackError::Settings(format!(
                "{QUARANTINE_SUFFIX_KEY}: `{quarantine_suffix}` is not a topic-name suffix (letters, digits, '.', '_', '-')"
            )));
        }
        Ok(FailbackSettings {
            tail,
            quarantine_suffix,
        })
    }
}

/// Every entry of topic `name` in the source's mirrors that copy from
/// `destination_cluster` (the KIP finds them by source cluster id): a
/// mirror keeps one per topic id, so a topic deleted and re-created at the
/// destination while mirrored has two.
fn forward_entries<'a>(
    history: &'a MirrorStateImage,
    destination_cluster: &'a str,
    name: &'a str,
) -> impl Iterator<Item = (&'a str, &'a TopicEntry)> {
    history
        .mirrors()
        .filter(move |(_, c)| c.source_cluster_id == destination_cluster)
        .flat_map(move |(m, _)| {
            history
                .topics_of(m)
                .filter(move |t| t.change.topic_name == name)
                .map(move |t| (m.as_str(), t))
        })
}

/// The mirror on the source that copied topic `name` from
/// `destination_cluster`, with the topic's entry there: the one of the
/// topic the destination holds now (`destination_topic_id`) when there is
/// one, else the first.
pub fn forward_mirror<'a>(
    history: &'a MirrorStateImage,
    destination_cluster: &'a str,
    name: &'a str,
    destination_topic_id: Option<TopicId>,
) -> Option<(&'a str, &'a TopicEntry)> {
    let mut entries = forward_entries(history, destination_cluster, name);
    let first = entries.next()?;
    let current = |(_, t): &(&str, &TopicEntry)| Some(t.change.topic_id) == destination_topic_id;
    if current(&first) {
        return Some(first);
    }
    Some(entries.find(current).unwrap_or(first))
}

/// Refuses when any mirror on the source still copies a topic of this name
/// from this cluster: both directions at once would loop. Every entry is
/// checked, not only the one a failback plans by: an old incarnation
/// stopped must not hide the new one mirrored.
pub fn check_loops(
    history: &MirrorStateImage,
    destination_cluster: &str,
    name: &str,
) -> Result<(), FailbackError> {
    forward_entries(history, destination_cluster, name)
        .try_for_each(|(forward, entry)| check_loop(history, forward, entry))
}

/// Refuses when the forward mirror still copies this entry's topic into
/// the source.
fn check_loop(
    history: &MirrorStateImage,
    forward: &str,
    entry: &TopicEntry,
) -> Result<(), FailbackError> {
    let loop_in = |state: String| FailbackError::MirrorLoop {
        forward: forward.to_string(),
        topic: entry.change.topic_name.clone(),
        state,
    };
    if entry.change.is_active() {
        return Err(loop_in(format!("desired {}", entry.change.desired_state)));
    }
    for p in 0..entry.change.partition_count {
        let key = MirrorPartitionKey::new(forward, entry.change.topic_id, p);
        match history.partition_state_or_unknown(&key) {
            PartitionState::Stopped | PartitionState::Unknown => {}
            other => return Err(loop_in(format!("partition {p} is {other}"))),
        }
    }
    Ok(())
}

/// Refuses while the forward mirror's planned switchover still denies
/// writes to the topic here: the failback's own produce would be refused
/// with it (unless kmirror is a super user), and so would the producers
/// that come back afterwards.
pub fn check_fence(
    history: &MirrorStateImage,
    forward: &str,
    entry: &TopicEntry,
) -> Result<(), FailbackError> {
    let acls: Vec<&str> = history
        .source_fences_of(forward)
        .filter(|(_, f)| f.topic_id == entry.change.topic_id)
        .map(|(k, _)| k.binding.as_str())
        .collect();
    if acls.is_empty() {
        return Ok(());
    }
    Err(FailbackError::Refused {
        topic: entry.change.topic_name.clone(),
        reason: format!(
            "mirror {forward} still fences writes to it on this destination since its planned switchover (ACL {}); remove the fence first: `kmirror mirror unfence --mirror {forward} --topics {}` on that mirror's daemon, or delete the ACL with kafka-acls.sh",
            acls.join(", "),
            entry.change.topic_name
        ),
    })
}

/// Plans the failback of `topic` (the source's) onto the destination topic
/// of the same name. `None`: nothing to take back (the destination topic is
/// missing or empty, and no mode was asked for).
#[allow(clippy::too_many_arguments)]
pub async fn plan_topic(
    source: &dyn SourceCluster,
    destination: &dyn DestinationCluster,
    history: Option<&MirrorStateImage>,
    destination_cluster: &str,
    topic: &TopicInfo,
    destination_topic: Option<&TopicInfo>,
    request: FailbackRequest,
    settings: &FailbackSettings,
) -> Result<Option<TopicFailback>, FailbackError> {
    let refused = |reason: String| FailbackError::Refused {
        topic: topic.name.clone(),
        reason,
    };
    let found = history.and_then(|h| {
        forward_mirror(
            h,
            destination_cluster,
            &topic.name,
            destination_topic.map(|d| d.topic_id),
        )
    });
    if let Some(h) = history {
        // Every incarnation's: the ACL names the topic, not its id.
        for (forward, entry) in forward_entries(h, destination_cluster, &topic.name) {
            check_loop(h, forward, entry)?;
            check_fence(h, forward, entry)?;
        }
    }
    let Some(dest) = destination_topic else {
        return match request.mode {
            // A from-scratch whose delete went through and whose re-create
            // did not (a crash, an error): asked again, it goes on.
            Some(FailbackMode::FromScratch) => {
                let forward = found.map_or("", |(forward, _)| forward);
                plan_from_scratch(source, topic, forward, &[]).await.map(Some)
            }
            Some(FailbackMode::Delta) => Err(refused(
                "the destination has no such topic to fail back onto by delta (if a from-scratch failback deleted it and was cut off, ask for from-scratch again)".into(),
            )),
            None => Ok(None),
        };
    };
    let mut bounds = Vec::new();
    for p in 0..dest.partitions {
        let tp = TopicPartition::new(&dest.name, p);
        bounds.push(
            destination
                .bounds(&tp)
                .await
                .doing(|| format!("destination offsets of {tp}"))?,
        );
    }
    let empty = bounds.iter().all(|b| b.end <= b.log_start);
    if empty && request.mode.is_none() {
        return Ok(None);
    }
    let Some((forward, entry)) = found else {
        if request.mode == Some(FailbackMode::FromScratch) {
            return plan_from_scratch(source, topic, "", &bounds)
                .await
                .map(Some);
        }
        return match request.mode {
            None if !empty => Ok(None),
            _ => Err(refused(format!(
                "no mirror on the source copied it from this cluster ({destination_cluster}): no history to fail back by; ask for from-scratch to copy it again"
            ))),
        };
    };
    let history = history.expect("found in it");
    // Identity is the topic id, on both sides.
    let mut identity = None;
    if entry.change.topic_id != dest.topic_id {
        identity = Some(format!(
            "the destination topic was re-created since the forward mirror copied it (id {} then, {} now)",
            entry.change.topic_id, dest.topic_id
        ));
    }
    if let Some(then) = history.destination_topic(&entry.change.topic_id) {
        if then != topic.topic_id {
            identity = Some(format!(
                "the source topic was re-created since the forward mirror copied into it (id {then} then, {} now)",
                topic.topic_id
            ));
        }
    }
    let mut partitions = Vec::new();
    for p in 0..topic.partitions {
        let key = MirrorPartitionKey::new(forward, entry.change.topic_id, p);
        let lme = history.last_mirror_epochs(&key);
        let dest_bounds = bounds.get(p as usize).copied();
        let src_tp = TopicPartition::new(&topic.name, p);
        let src = source
            .bounds(&src_tp)
            .await
            .doing(|| format!("source offsets of {src_tp}"))?;
        let dest_tp = TopicPartition::new(&dest.name, p);
        let destination_end_of_epoch = match lme.filter(|l| l.source_leader_epoch >= 0) {
            Some(l) if dest_bounds.is_some() => Some(
                destination
                    .end_offset_for_epoch(&dest_tp, l.source_leader_epoch)
                    .await
                    .doing(|| format!("OffsetForLeaderEpoch on {dest_tp}"))?
                    .1,
            ),
            _ => None,
        };
        let source_end_of_epoch = match lme.filter(|l| l.destination_leader_epoch >= 0) {
            Some(l) => Some(
                source
                    .end_offset_for_epoch(&src_tp, l.destination_leader_epoch)
                    .await
                    .doing(|| format!("OffsetForLeaderEpoch on {src_tp}"))?
                    .1,
            ),
            None => None,
        };
        let facts = PartitionFacts {
            destination_log_start: dest_bounds.map_or(0, |b| b.log_start),
            destination_end: dest_bounds.map_or(0, |b| b.end),
            destination_end_of_epoch,
            source_log_start: src.log_start,
            source_end: src.end,
            source_end_of_epoch,
        };
        // A re-created topic on either side: the map means nothing there.
        let (lme, map) = match &identity {
            Some(_) => (None, kmirror_events::OffsetMap::default()),
            None => (lme, history.offset_map(&key).clone()),
        };
        let quarantine = format!("{}{}", topic.name, settings.quarantine_suffix);
        let plan = plan_partition(
            forward,
            lme,
            &map,
            &facts,
            request.mode,
            settings.tail,
            &quarantine,
        )
        .map_err(|e| match (&identity, e) {
            (Some(why), FailbackRefusal::OnlyFromScratch(_)) => refused(format!(
                "partition {p}: only from-scratch is possible: {why}"
            )),
            (_, e) => refused(format!("partition {p}: {e}")),
        })?;
        partitions.push((p, plan));
    }
    Ok(Some(TopicFailback {
        topic: topic.clone(),
        forward_mirror: forward.to_string(),
        partitions,
    }))
}

/// `from-scratch` asked for with no history to go by (none on the source,
/// or no destination topic left to compare): the destination topic is
/// re-created and everything copied. `bounds`: the destination topic's
/// partitions, if it exists.
async fn plan_from_scratch(
    source: &dyn SourceCluster,
    topic: &TopicInfo,
    forward: &str,
    bounds: &[crate::cluster::LogBounds],
) -> Result<TopicFailback, FailbackError> {
    let mut partitions = Vec::new();
    for p in 0..topic.partitions {
        let tp = TopicPartition::new(&topic.name, p);
        let src = source
            .bounds(&tp)
            .await
            .doing(|| format!("source offsets of {tp}"))?;
        let dest = bounds.get(p as usize).copied();
        let facts = PartitionFacts {
            destination_log_start: dest.map_or(0, |b| b.log_start),
            destination_end: dest.map_or(0, |b| b.end),
            destination_end_of_epoch: None,
            source_log_start: src.log_start,
            source_end: src.end,
            source_end_of_epoch: None,
        };
        let plan = plan_partition(
            forward,
            None,
            &kmirror_events::OffsetMap::default(),
            &facts,
            Some(FailbackMode::FromScratch),
            TailPolicy::Quarantine,
            "",
        )
        .expect("from-scratch is always possible");
        partitions.push((p, plan));
    }
    Ok(TopicFailback {
        topic: topic.clone(),
        forward_mirror: forward.to_string(),
        partitions,
    })
}

/// Carries out a recorded failback: `from-scratch` re-creates the
/// destination topic (same partitions, its own explicit configs), `delta`
/// exports each partition's divergent records to the quarantine topic with
/// a manifest. Safe to run again after a crash: an export is finished, not
/// repeated, and a topic deleted by a run cut off before its re-create is
/// left to the start, which creates it as its source is. `stop` (the node
/// is stopping) cuts it off at the same places: before a topic is deleted
/// or created, between export pages.
pub async fn carry_out(
    destination: &dyn DestinationCluster,
    mirror: &str,
    failback: &TopicFailback,
    stop: &AtomicBool,
) -> Result<(), FailbackError> {
    let name = &failback.topic.name;
    let scratch = failback
        .partitions
        .iter()
        .any(|(_, p)| p.plan.mode == FailbackMode::FromScratch);
    if scratch {
        let exists = destination
            .topics()
            .await
            .doing(|| "list destination topics".into())?
            .iter()
            .any(|t| t.name == *name);
        if !exists {
            // Deleted by a run cut off before its re-create: the start
            // creates it as its source is.
            return Ok(());
        }
        let configs = destination
            .topic_configs(name)
            .await
            .doing(|| format!("describe destination topic {name} configs"))?;
        go_on(stop, name, "its delete")?;
        destination
            .delete_topic(name)
            .await
            .doing(|| format!("delete destination topic {name}"))?;
        go_on(stop, name, "its re-create (the start creates it)")?;
        destination
            .create_topic(name, failback.topic.partitions, configs)
            .await
            .doing(|| format!("re-create destination topic {name}"))?;
        return Ok(());
    }
    for (p, plan) in &failback.partitions {
        let Some(quarantine) = &plan.plan.quarantine_topic else {
            continue;
        };
        let whole = export(
            destination,
            mirror,
            &failback.forward_mirror,
            name,
            *p,
            quarantine,
            &plan.plan,
            stop,
        )
        .await?;
        if !whole {
            return Err(FailbackError::Stopping {
                topic: name.clone(),
                next: format!("partition {p}'s export to {quarantine} was whole"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kmirror_events::{
        MirrorConfigKey, MirrorTopicStateChange, MirrorTopicStateKey, Record, SourceFence,
        SourceFenceKey, TopicId,
    };

    use super::*;
    use crate::cluster::memory::{MemoryDestination, MemorySource};

    /// The history a daemon on `A` left in `B`'s state topic: mirror `ab`
    /// copied `orders` from `A` and stopped it with a planned switchover.
    fn history(fenced: bool) -> MirrorStateImage {
        let id = TopicId([4; 16]);
        let mut image = MirrorStateImage::new();
        let mut records = vec![
            Record::MirrorConfig(
                MirrorConfigKey {
                    mirror_name: "ab".into(),
                },
                Some(MirrorConfig {
                    source_bootstrap: "a:9092".into(),
                    source_properties: Default::default(),
                    topics_include: "orders".into(),
                    topics_exclude: String::new(),
                    groups_include: ".*".into(),
                    groups_exclude: String::new(),
                    source_cluster_id: "A".into(),
                }),
            ),
            Record::MirrorTopicStateChange(
                MirrorTopicStateKey { topic_id: id },
                Some(MirrorTopicStateChange {
                    topic_id: id,
                    mirror_name: "ab".into(),
                    desired_state: PartitionState::Stopped,
                    topic_name: "orders".into(),
                    partition_count: 1,
                }),
            ),
        ];
        if fenced {
            records.push(Record::SourceFence(
                SourceFenceKey {
                    mirror_name: "ab".into(),
                    binding: "TOPIC;LITERAL;orders;User:*;*;WRITE;DENY".into(),
                },
                Some(SourceFence {
                    topic_id: id,
                    topic_name: "orders".into(),
                }),
            ));
        }
        for (i, r) in records.iter().enumerate() {
            image.apply(i as u64, r);
        }
        image
    }

    #[actix::test]
    async fn a_switchover_fence_still_on_the_topic_refuses_the_failback_and_says_how_to_lift_it() {
        let source = MemorySource::new("B");
        let destination = MemoryDestination::new("A");
        let topic = TopicInfo {
            name: "orders".into(),
            topic_id: TopicId([5; 16]),
            partitions: 1,
            internal: false,
        };
        let settings = FailbackSettings {
            tail: TailPolicy::Quarantine,
            quarantine_suffix: ".kmirror-divergent".into(),
        };
        let plan = |history: MirrorStateImage| {
            let (source, destination, topic) = (&source, &destination, &topic);
            let settings = &settings;
            async move {
                plan_topic(
                    source,
                    destination,
                    Some(&history),
                    "A",
                    topic,
                    None,
                    FailbackRequest::default(),
                    settings,
                )
                .await
            }
        };
        let Err(refused) = plan(history(true)).await else {
            panic!("a fenced topic was planned");
        };
        let text = refused.to_string();
        assert!(
            text.contains("TOPIC;LITERAL;orders;User:*;*;WRITE;DENY"),
            "{text}"
        );
        assert!(
            text.contains("kmirror mirror unfence --mirror ab --topics orders"),
            "{text}"
        );
        // Unfenced, the same start goes on (nothing to take back here).
        assert!(plan(history(false)).await.unwrap().is_none());
    }

    /// `orders` was deleted and re-created on A while `ab` mirrored it:
    /// `ab` keeps the old incarnation STOPPED and mirrors the new one. The
    /// old one sorts first; it must not hide the loop the new one makes.
    #[actix::test]
    async fn a_stopped_old_incarnation_does_not_hide_the_mirrored_new_one() {
        let (old, new) = (TopicId([1; 16]), TopicId([4; 16]));
        let mut image = history(false);
        let at = image.end_offset();
        for (i, (id, state)) in [
            (old, PartitionState::Stopped),
            (new, PartitionState::Mirroring),
        ]
        .into_iter()
        .enumerate()
        {
            let r = Record::MirrorTopicStateChange(
                MirrorTopicStateKey { topic_id: id },
                Some(MirrorTopicStateChange {
                    topic_id: id,
                    mirror_name: "ab".into(),
                    desired_state: state,
                    topic_name: "orders".into(),
                    partition_count: 1,
                }),
            );
            image.apply(at + i as u64, &r);
        }
        let (_, entry) = forward_mirror(&image, "A", "orders", Some(new)).unwrap();
        assert_eq!(entry.change.topic_id, new);
        let planned = plan_topic(
            &MemorySource::new("B"),
            &MemoryDestination::new("A"),
            Some(&image),
            "A",
            &TopicInfo {
                name: "orders".into(),
                topic_id: TopicId([5; 16]),
                partitions: 1,
                internal: false,
            },
            None,
            FailbackRequest::default(),
            &FailbackSettings {
                tail: TailPolicy::Quarantine,
                quarantine_suffix: ".kmirror-divergent".into(),
            },
        )
        .await;
        assert!(
            matches!(planned, Err(FailbackError::MirrorLoop { .. })),
            "{planned:?}"
        );
    }

    /// A from-scratch failback deleted the destination topic and was cut
    /// off before re-creating it. Asked again, it goes on (it was refused:
    /// "no such topic"), and the start creates the topic.
    #[actix::test]
    async fn a_from_scratch_cut_off_after_its_delete_goes_on_when_asked_again() {
        let source = MemorySource::new("B");
        let id = TopicId([5; 16]);
        source.create_topic("orders", id, 1);
        let records: Vec<_> = (0..3)
            .map(|i| crate::cluster::memory::record(Some("k"), Some(&i.to_string()), 7))
            .collect();
        source.append(
            &TopicPartition::new("orders", 0),
            &records,
            crate::kafka::batch::Codec::None,
        );
        let destination = MemoryDestination::new("A");
        let topic = TopicInfo {
            name: "orders".into(),
            topic_id: id,
            partitions: 1,
            internal: false,
        };
        let settings = FailbackSettings {
            tail: TailPolicy::Quarantine,
            quarantine_suffix: ".kmirror-divergent".into(),
        };
        let image = history(false);
        let plan = |mode| {
            let (source, destination, topic, image, settings) =
                (&source, &destination, &topic, &image, &settings);
            async move {
                let request = FailbackRequest {
                    mode: Some(mode),
                    dry_run: false,
                };
                plan_topic(
                    source,
                    destination,
                    Some(image),
                    "A",
                    topic,
                    None,
                    request,
                    settings,
                )
                .await
            }
        };
        let fb = plan(FailbackMode::FromScratch).await.unwrap().unwrap();
        assert_eq!(fb.forward_mirror, "ab");
        let p = &fb.partitions[0].1.plan;
        assert_eq!(
            (p.mode, p.divergent_end, p.copy_start, p.copy_end),
            (FailbackMode::FromScratch, 0, 0, 3)
        );
        carry_out(&destination, "ba", &fb, &AtomicBool::new(false))
            .await
            .unwrap();
        let dest: &dyn DestinationCluster = &destination;
        assert!(dest.topics().await.unwrap().is_empty());
        let Err(delta) = plan(FailbackMode::Delta).await else {
            panic!("a delta onto no topic was planned");
        };
        assert!(
            delta.to_string().contains("ask for from-scratch again"),
            "{delta}"
        );
    }
}
