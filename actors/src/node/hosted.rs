//! A clustered shard's part in spread mirrors (see [`crate::spread`]): the
//! partitions placed in this shard of mirrors that other shards coordinate
//! — fenced when the shard is taken, run by one host MirrorActor per such
//! mirror, stopped before the shard is released — and the reads of other
//! shards a coordinator of a spread mirror makes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;

use kmirror_events::{
    coordinator_partition, spreads, Command, MirrorConfig, MirrorPartitionKey, MirrorStateImage,
    PartitionState, TopicId, SPREAD_KEY,
};

use super::{Node, NodeError};
use crate::kafka::fetch::TopicPartition;
use crate::metadata_sync::FinalSync;
use crate::mirror::{MirrorActor, Placement, StopMirror};
use crate::spread::Followed;
use crate::state_log::{FollowedShard, FollowedState};

/// How long a shard's start waits for the other shards to be read to their
/// ends (what it fences and runs is named there).
const CATCH_UP: Duration = Duration::from_secs(30);

/// How long a coordinator runs a hosted partition's final group-offset
/// pass from the ask's arrival: its host waits 30 s
/// (`partition::FINAL_SYNC_TIMEOUT`) from sending it, so the pass ends
/// 10 s before, leaving the ask that long to arrive.
const HOSTED_FINAL_SYNC_LIMIT: Duration = Duration::from_secs(20);

/// Aborts a pass when dropped.
struct AbortOnDrop(futures_util::future::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often the hosts are reconciled when the follower reads nothing new.
const RETRY_HOSTING: Duration = Duration::from_secs(5);

impl Node {
    /// The shard this node coordinates and the state topic's partition
    /// count, in a clustered daemon.
    pub(super) fn placed_in(&self) -> Option<(i32, i32)> {
        let s = &self.inner.settings;
        s.shard.map(|shard| (shard, s.state_topic_partitions))
    }

    /// This shard and what it follows of the others, in a clustered daemon
    /// that follows them.
    pub(super) fn follows(&self) -> Option<(i32, &Followed)> {
        let s = &self.inner.settings;
        Some((s.shard?, s.followed.as_ref()?))
    }

    /// Refuses `mirror.partitions.spread=true` at create unless this node
    /// is a clustered shard that follows the others and accepts it.
    pub(super) fn check_spread(
        &self,
        properties: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), NodeError> {
        let config = MirrorConfig {
            source_properties: properties.clone(),
            ..MirrorConfig::default()
        };
        let spread =
            spreads(&config).map_err(|e| NodeError::new("INVALID_CONFIG", e.to_string()))?;
        if spread && (self.follows().is_none() || !self.inner.settings.accept_spread) {
            return Err(NodeError::new(
                "INVALID_CONFIG",
                format!(
                    "{}: spreading a mirror's partitions across nodes is not available on this node yet",
                    kmirror_events::SPREAD_KEY
                ),
            ));
        }
        Ok(())
    }

    /// Which of `config`'s partitions this node's MirrorActor runs.
    pub(super) fn placement(&self, config: &MirrorConfig, hosted: bool) -> Placement {
        match (self.placed_in(), spreads(config).unwrap_or(false)) {
            (Some((shard, partitions)), true) => Placement::Spread {
                shard,
                partitions,
                followed: self.inner.settings.followed.clone(),
                host: hosted.then(|| Box::new(config.clone())),
                hosted_copies: (!hosted)
                    .then(|| self.inner.settings.ask_hosted_copies.clone())
                    .flatten(),
            },
            _ => Placement::Whole,
        }
    }

    /// The destination partitions a pump of this shard may write of the
    /// mirrors other shards coordinate: the partitions placed here whose
    /// state here is not STOPPED (all of them if `stopped`), by the topic
    /// names their coordinators' shards hold. Those shards are read to
    /// their ends first, so no such topic is missing: a partition fenced
    /// too few is one the previous owner may still write. Only those: a
    /// host writes a partition's state here before it copies a record, so
    /// this shard names every mirror whose coordinator must be read, and a
    /// shard nobody needs (unreadable for a while) holds no takeover up.
    pub(super) async fn hosted_writable(
        &self,
        own: &MirrorStateImage,
    ) -> Result<Vec<TopicPartition>, NodeError> {
        let Some((_, followed)) = self.follows() else {
            return Ok(Vec::new());
        };
        let coordinators: BTreeSet<i32> = own
            .partition_states()
            .filter(|(k, _)| own.mirror(&k.mirror_name).is_none())
            .map(|(k, _)| coordinator_partition(&k.mirror_name, followed.partitions()))
            .collect();
        for shard in coordinators {
            followed.read_to_end(shard, CATCH_UP).await.map_err(|e| {
                NodeError::new(
                    "COORDINATOR_LOAD_IN_PROGRESS",
                    format!("reading the other shards before taking this one: {e}"),
                )
            })?;
        }
        Ok(self.hosted_partitions(own, false))
    }

    /// [`Node::hosted_writable`] as far as the shards are read now.
    pub(super) fn hosted_partitions(
        &self,
        own: &MirrorStateImage,
        stopped: bool,
    ) -> Vec<TopicPartition> {
        let Some((_, followed)) = self.follows() else {
            return Vec::new();
        };
        own.partition_states()
            .filter(|(k, v)| {
                own.mirror(&k.mirror_name).is_none()
                    && (stopped || v.state != PartitionState::Stopped)
            })
            .filter_map(|(k, _)| {
                let coordinator = followed.coordinator_of(&k.mirror_name)?;
                let topic = coordinator.image.topic(&k.topic_id)?;
                Some(TopicPartition::new(&topic.change.topic_name, k.partition))
            })
            .collect()
    }

    /// Keeps a host MirrorActor for each spread mirror another shard
    /// coordinates, as the follower reads them, until the node stops.
    pub(super) fn follow_hosted(&self) {
        let Some((_, followed)) = self.follows() else {
            return;
        };
        let (node, mut changes) = (self.clone(), followed.watch());
        let task = actix::spawn(async move {
            loop {
                let state = changes.borrow_and_update().clone();
                node.reconcile_hosted(&state).await;
                // A host that could not start (a source client this node
                // cannot make: a reference that does not resolve here) is
                // tried again though nothing changed.
                let retry = tokio::time::timeout(RETRY_HOSTING, changes.changed());
                if let Ok(Err(_)) = retry.await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        *self.inner.hosting.lock().expect("not poisoned") = Some(task);
    }

    /// Ends [`Node::follow_hosted`]'s task and waits until it has: no host
    /// starts after this.
    pub(super) async fn stop_following_hosted(&self) {
        let task = self.inner.hosting.lock().expect("not poisoned").take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    /// Starts a host for each spread mirror of another shard read to its
    /// end, and stops the hosts of mirrors such a shard no longer holds
    /// as they were started: a mirror deleted and created again with
    /// another config, in one read of the follower, gets a new host, not
    /// the old one on the old source. (Created again the same, it may keep
    /// the host: that one held no partition records, or the create would
    /// have waited for their forgetting, which stops it first.)
    async fn reconcile_hosted(&self, state: &FollowedState) {
        let Some((own, _)) = self.follows() else {
            return;
        };
        let partitions = state.shards.len() as i32;
        let mut wanted: Vec<(String, MirrorConfig)> = Vec::new();
        let mut known = Vec::new();
        for (shard, followed) in state.shards.iter().enumerate() {
            let shard = shard as i32;
            if shard == own || !followed.caught_up() {
                continue;
            }
            known.push(shard);
            for (name, config) in followed.image.mirrors() {
                if coordinator_partition(name, partitions) == shard
                    && spreads(config).unwrap_or(false)
                {
                    wanted.push((name.clone(), config.clone()));
                }
            }
        }
        let gone: Vec<_> = {
            let mut mirrors = self.inner.mirrors.lock().await;
            let gone: Vec<String> = mirrors
                .hosted
                .iter()
                .filter(|(name, running)| {
                    known.contains(&coordinator_partition(name, partitions))
                        && !wanted
                            .iter()
                            .any(|(w, config)| w == *name && *config == running.config)
                })
                .map(|(name, _)| name)
                .cloned()
                .collect();
            mirrors.unhostable.retain(|name, _| {
                !known.contains(&coordinator_partition(name, partitions))
                    || wanted.iter().any(|(w, _)| w == name)
            });
            gone.iter()
                .filter_map(|name| mirrors.hosted.remove(name))
                .map(|r| r.actor)
                .collect()
        };
        futures_util::future::join_all(gone.iter().map(|a| a.send(StopMirror))).await;
        self.forget_deleted(state, &known).await;
        let hosted: BTreeSet<String> = self
            .inner
            .mirrors
            .lock()
            .await
            .hosted
            .keys()
            .cloned()
            .collect();
        for (name, config) in wanted.into_iter().filter(|(n, _)| !hosted.contains(n)) {
            let before = self
                .inner
                .mirrors
                .lock()
                .await
                .unhostable
                .get(&name)
                .cloned();
            // `run_as` keeps the reason among the unhostable, described;
            // the log says it once, not on every try.
            match self.run_as(&name, &config, true).await {
                Err(e) if before.as_ref() != Some(&e) => {
                    tracing::warn!(mirror = %name, error = %e, "spread mirror not hosted here")
                }
                Err(e) => {
                    tracing::debug!(mirror = %name, error = %e, "spread mirror still not hosted here")
                }
                Ok(()) if before.is_some() => {
                    tracing::info!(mirror = %name, "spread mirror hosted here now")
                }
                Ok(()) => {}
            }
        }
    }

    /// Removes the records of the partitions placed here of each mirror
    /// that the shard coordinating it, read to its end (`known`), no longer
    /// holds: deleted there, whose partitions were all STOPPED, and whose
    /// host here was stopped before this. Until then a mirror of that name
    /// cannot be created again ([`Node::check_no_leftovers`]).
    async fn forget_deleted(&self, state: &FollowedState, known: &[i32]) {
        let Ok(own) = self.image().await else {
            return;
        };
        let partitions = state.shards.len() as i32;
        let deleted = own.mirrors_with_partitions().into_iter().filter(|name| {
            let shard = coordinator_partition(name, partitions);
            own.mirror(name).is_none()
                && known.contains(&shard)
                && state.shards[shard as usize].image.mirror(name).is_none()
        });
        for name in deleted {
            let forget = Command::ForgetMirror { name: name.into() };
            match self.execute(forget, None).await {
                Ok(_) => {
                    tracing::info!(mirror = %name, "forgot the partitions of a deleted spread mirror")
                }
                Err(e) => {
                    tracing::warn!(mirror = %name, error = %e, "a deleted spread mirror's partitions are not forgotten yet")
                }
            }
        }
    }

    /// Refuses to create `mirror` while any shard, read to its end, still
    /// holds partition records of a mirror of that name deleted before:
    /// its hosts forget them once they read the delete, and a new mirror
    /// would otherwise resume from the old one's maps.
    pub(super) async fn check_no_leftovers(&self, mirror: &str) -> Result<(), NodeError> {
        let Some((_, followed)) = self.follows() else {
            return Ok(());
        };
        for shard in 0..followed.partitions() {
            let read = read_shard(followed, shard, format!("before creating {mirror:?}")).await?;
            if read.image.mirrors_with_partitions().contains(mirror) {
                return Err(NodeError::new(
                    "INVALID_CLUSTER_MIRROR_STATES",
                    format!(
                        "state partition {shard} still holds partitions of a deleted mirror named {mirror:?}; its owner removes them once it reads the delete: retry shortly"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses `doing` unless every partition of `topics` (id and count)
    /// is STOPPED or UNKNOWN where it is placed: the coordinator's own
    /// decision sees only the partitions placed in its shard.
    pub(super) async fn check_idle(
        &self,
        own: Arc<MirrorStateImage>,
        mirror: &str,
        spread: bool,
        topics: &[(TopicId, i32)],
        doing: &str,
    ) -> Result<(), NodeError> {
        if !spread {
            return Ok(());
        }
        let keys: Vec<_> = topics
            .iter()
            .flat_map(|(id, count)| (0..*count).map(|p| MirrorPartitionKey::new(mirror, *id, p)))
            .collect();
        let placed = self.placed_records(own.clone(), keys.iter(), true).await?;
        for key in &keys {
            let state = placed.of(key).partition_state_or_unknown(key);
            if !state.is_idle() {
                let topic = own.topic(&key.topic_id).map(|t| &t.change.topic_name);
                return Err(NodeError::new(
                    "INVALID_CLUSTER_MIRROR_STATES",
                    format!(
                        "partition {} of {} ({}) is {state}; {doing} needs every partition STOPPED",
                        key.partition,
                        topic.map_or("a topic", String::as_str),
                        key.topic_id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A spread mirror runs only on a node that follows every shard:
    /// without that, its delete and start would check only this shard's
    /// partitions, and its keyless hold and group sync would read only
    /// this shard's maps. Such a mirror is kept among the unrunnable, so
    /// every operation on it names the setting.
    pub(super) fn check_runs_spread(&self, config: &MirrorConfig) -> Result<(), NodeError> {
        if spreads(config).unwrap_or(false) {
            self.follows_for_spread()?;
        }
        Ok(())
    }

    /// [`Node::follows`], which every read of a spread mirror across
    /// shards needs: an error naming the setting without it, never a read
    /// of this shard alone.
    fn follows_for_spread(&self) -> Result<(i32, &Followed), NodeError> {
        self.follows().ok_or_else(|| {
            NodeError::new(
                "INVALID_CONFIG",
                format!(
                    "a mirror with {SPREAD_KEY}=true needs every state partition followed, and this node does not: start every node with [cluster] spread_partitions = true"
                ),
            )
        })
    }

    /// The final group-offset pass of `key`, a partition of a spread mirror
    /// coordinated here and hosted by another shard, asked by its host as
    /// it stops it (`crate::hosted_sync`): `true` once the pass ran to its
    /// end. `asked` is when the ask arrived: the pass is abandoned
    /// [`HOSTED_FINAL_SYNC_LIMIT`] after it (or when this call is
    /// dropped), before the host stops waiting, and this answers only once
    /// the pass is over, which the host waits for before STOPPED.
    pub async fn final_sync_hosted(
        &self,
        key: MirrorPartitionKey,
        asked: tokio::time::Instant,
    ) -> Result<bool, NodeError> {
        // A mirror this shard cannot run says why (tried again first, within
        // the pass's time), one it does not know is unknown here: the shard
        // itself was asked.
        let limit = asked + HOSTED_FINAL_SYNC_LIMIT;
        let running = self.of_running(&key.mirror_name, |r| r.actor.clone());
        let actor = tokio::time::timeout_at(limit, running)
            .await
            .map_err(|_| {
                NodeError::new(
                    "REQUEST_TIMED_OUT",
                    format!(
                        "mirror {:?} did not start here within the final pass's {HOSTED_FINAL_SYNC_LIMIT:?}",
                        key.mirror_name
                    ),
                )
            })??;
        let pass = actor
            .send(FinalSync(key.clone()))
            .await
            .map_err(super::unavailable)?;
        // Aborted however this ends: a no-op once the pass is over, and
        // its end otherwise (the deadline passed, the caller went away).
        let _abandon = AbortOnDrop(pass.abort.clone());
        match tokio::time::timeout_at(limit, pass.done).await {
            Ok(synced) => Ok(synced.unwrap_or(false)),
            Err(_) => {
                tracing::warn!(partition = ?key, "the final group-offset pass its host asked for did not end within {HOSTED_FINAL_SYNC_LIMIT:?}; abandoned (with the passes run together with it)");
                Ok(false)
            }
        }
    }

    /// How the partitions of `mirror` (spread, coordinated by another
    /// shard) this node hosts stand, partition by partition, as its host
    /// board says: what the coordinator asks of every node before it lets
    /// a keyless hold go while the topic is mirrored, and while a
    /// switchover drains. Nothing hosted here: none.
    pub async fn hosted_copies(&self, mirror: &str) -> Vec<crate::spread::HostedCopy> {
        let mirrors = self.inner.mirrors.lock().await;
        let Some(running) = mirrors.hosted.get(mirror) else {
            return Vec::new();
        };
        let positions = running.board.positions();
        let mut copies: Vec<_> = running
            .board
            .keyless_partitions()
            .into_iter()
            .map(|(key, copy)| crate::spread::HostedCopy {
                topic_id: key.topic_id,
                partition: key.partition,
                copy,
                position: positions.get(&key).cloned(),
            })
            .collect();
        copies.sort_by_key(|c| (c.topic_id, c.partition));
        copies
    }

    /// `--recover` of the partitions of `mirror` (spread, coordinated by
    /// another shard) this node hosts: the FAILED ones of `topics`, named
    /// as in the coordinator's shard, go back to their PreviousState. Each
    /// records it in this shard, where the partition is placed; nothing
    /// hosted here, nothing to do.
    pub async fn recover_hosted(
        &self,
        mirror: &str,
        topics: &[String],
    ) -> Result<Vec<String>, NodeError> {
        let Some((actor, found)) = self.hosted_topics(mirror, topics).await? else {
            return Ok(Vec::new());
        };
        actor
            .send(crate::mirror::RecoverTopics(
                found.into_iter().map(|(id, _)| id).collect(),
            ))
            .await
            .map_err(super::unavailable)
    }

    /// The host MirrorActor of `mirror` on this node, if any, and `topics`
    /// (names or patterns) resolved in the coordinator's shard, read to
    /// its end.
    pub(super) async fn hosted_topics(
        &self,
        mirror: &str,
        topics: &[String],
    ) -> Result<Option<(Addr<MirrorActor>, Vec<(TopicId, String)>)>, NodeError> {
        let actor = match self.inner.mirrors.lock().await.hosted.get(mirror) {
            Some(running) => running.actor.clone(),
            None => return Ok(None),
        };
        let (_, followed) = self.follows_for_spread()?;
        let shard = coordinator_partition(mirror, followed.partitions());
        let read = read_shard(followed, shard, format!("which coordinates {mirror:?}")).await?;
        Ok(Some((actor, Self::resolve(&read.image, mirror, topics)?)))
    }

    /// Refuses `doing` for a spread mirror: an operation that would see
    /// only the partitions placed in the coordinator's shard, or act on
    /// them alone, and is not built across shards yet (ARCHITECTURE.md,
    /// "Departures from the KIP", step 3).
    pub(super) fn refuse_spread(
        image: &MirrorStateImage,
        mirror: &str,
        doing: &str,
    ) -> Result<(), NodeError> {
        if !image.spreads(mirror) {
            return Ok(());
        }
        Err(NodeError::new(
            "INVALID_REQUEST",
            format!(
                "{doing} is not built yet for a mirror created with {SPREAD_KEY}=true ({mirror:?}): it would reach only the partitions placed in its coordinator's state partition"
            ),
        ))
    }

    /// Where the own records of `keys` (partitions of one mirror) are
    /// read: this shard's image for those placed here, and each other shard
    /// they are placed in as read to its end now — so a record written
    /// there before this call (a partition's first state, its STOPPED) is
    /// in what is answered.
    pub(super) async fn placed_records(
        &self,
        own: Arc<MirrorStateImage>,
        keys: impl Iterator<Item = &MirrorPartitionKey>,
        spread: bool,
    ) -> Result<PlacedRecords, NodeError> {
        let mut placed = PlacedRecords {
            own,
            shards: BTreeMap::new(),
            placed_in: None,
        };
        if !spread {
            return Ok(placed);
        }
        let (shard, followed) = self.follows_for_spread()?;
        let partitions = followed.partitions();
        placed.placed_in = Some((shard, partitions));
        let wanted: BTreeSet<i32> = keys
            .map(|k| kmirror_events::placement_shard(k, true, partitions))
            .filter(|s| *s != shard)
            .collect();
        for s in wanted {
            let read = read_shard(followed, s, "for the partitions placed in it").await?;
            placed.shards.insert(s, read);
        }
        Ok(placed)
    }
}

impl Node {
    /// The shard that coordinates `mirror`, as this node last read it (a
    /// spread mirror's host reads its topics there).
    pub(super) fn coordinator_shard(&self, mirror: &str) -> Option<Arc<FollowedShard>> {
        self.follows()?.1.coordinator_of(mirror)
    }

    /// Whether `key` runs in this shard: any partition of a mirror that
    /// does not spread (its coordinator runs them all), a spread one's
    /// where its key places it.
    pub(super) fn placed_here(&self, key: &MirrorPartitionKey, spread: bool) -> bool {
        match (spread, self.placed_in()) {
            (true, Some((shard, partitions))) => {
                kmirror_events::placement_shard(key, true, partitions) == shard
            }
            _ => true,
        }
    }

    /// [`Node::placed_records`] of a spread mirror as every shard was last
    /// read to its end, waiting on none: for a description, which says so.
    pub(super) fn placed_as_read(&self, own: Arc<MirrorStateImage>) -> PlacedRecords {
        let Some((shard, followed)) = self.follows() else {
            return PlacedRecords {
                own,
                shards: BTreeMap::new(),
                placed_in: None,
            };
        };
        let now = followed.now();
        PlacedRecords {
            own,
            // A shard being read again holds part of its log: none of it.
            shards: (0..followed.partitions())
                .filter(|s| *s != shard)
                .filter_map(|s| Some((s, now.shards.get(s as usize)?.clone())))
                .filter(|(_, read)| read.caught_up())
                .collect(),
            placed_in: Some((shard, followed.partitions())),
        }
    }
}

/// `shard` as read to its end now, for an operation that reads it `why`;
/// COORDINATOR_NOT_AVAILABLE naming both when it cannot be.
async fn read_shard(
    followed: &Followed,
    shard: i32,
    why: impl std::fmt::Display,
) -> Result<Arc<FollowedShard>, NodeError> {
    followed.read_to_end(shard, CATCH_UP).await.map_err(|e| {
        NodeError::new(
            "COORDINATOR_NOT_AVAILABLE",
            format!("reading state partition {shard} {why}: {e}"),
        )
    })
}

/// Each partition's own records, wherever it is placed (see
/// [`Node::placed_records`]).
pub(super) struct PlacedRecords {
    own: Arc<MirrorStateImage>,
    shards: BTreeMap<i32, Arc<FollowedShard>>,
    /// This shard and the partition count, for a spread mirror.
    placed_in: Option<(i32, i32)>,
}

impl PlacedRecords {
    /// The image that holds `key`'s own records (an empty one for a shard
    /// not read, which no key given to `placed_records` is in).
    pub(super) fn of(&self, key: &MirrorPartitionKey) -> &MirrorStateImage {
        static EMPTY: std::sync::OnceLock<MirrorStateImage> = std::sync::OnceLock::new();
        match self.placed_in {
            Some((shard, partitions)) => {
                let placed = kmirror_events::placement_shard(key, true, partitions);
                if placed == shard {
                    &self.own
                } else {
                    self.shards
                        .get(&placed)
                        .map(|s| &s.image)
                        .unwrap_or_else(|| EMPTY.get_or_init(MirrorStateImage::default))
                }
            }
            None => &self.own,
        }
    }
}
