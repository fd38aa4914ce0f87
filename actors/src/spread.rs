//! Spread mirrors: one mirror's partitions run on many nodes of a
//! clustered daemon.
//!
//! A mirror created with `mirror.partitions.spread=true` keeps its
//! topic-level records (config, topics and their desired states, syncs) in
//! its coordinator's shard, `coordinator_partition(mirror)`, and each
//! partition's own records (state, map, producer, epochs, reports) in the
//! shard its key routes to, `partition_state_partition(key)`, as the KIP's
//! later prototypes place partition-state records "so a mirror with many
//! partitions does not bottleneck on one node". A shard's owner runs the
//! partitions placed in it and is the only writer of their records, so the
//! fence that shuts a shard's previous owner out of its log covers them too.
//!
//! The two sides talk through the state topic, as the KIP's coordinator
//! and partition leaders do: a partition's host reads its topic's desired
//! state from the coordinator's shard, and the coordinator reads the
//! partitions' states from theirs, each through [`Followed`] — every shard
//! as this node's `StateFollower` last read it. What the log does not
//! hold is asked over the admin API: a stopping partition's final group
//! pass (host to coordinator), a recover and a stop's dry run, and how the
//! hosts' copies stand for a keyless hold (coordinator to every node).

use std::collections::BTreeMap;
use std::sync::Arc;

use kmirror_events::{
    coordinator_partition, partition_loads, KeylessCopy, MirrorPartitionKey, Offset,
    PartitionState, TopicId,
};
use tokio::sync::watch;

use crate::cluster::BoxFuture;
use crate::state_log::{FollowedShard, FollowedState};

/// How long a host waits for its coordinator's shard to be read to its
/// end before it copies (it tries again after).
const STILL_MIRRORING_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a partition to copy weighs in the group's assignment against a
/// shard's own upkeep (a shard with none weighs 1): nodes share the
/// partitions first, then the shards.
const PARTITION_WEIGHT: u64 = 16;

/// How often the shards' weights are counted again at most: counting goes
/// over every topic of every shard.
const WEIGH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a partition's topic is still to be mirrored, as the
/// coordinator's shard says once read to its end
/// ([`Followed::still_mirroring`]).
pub type StillMirroring =
    Arc<dyn Fn(MirrorPartitionKey) -> BoxFuture<'static, Result<bool, String>> + Send + Sync>;

/// A shard's end offset now, asked of the cluster that holds it.
pub type EndOf = Arc<dyn Fn(i32) -> BoxFuture<'static, Result<Offset, String>> + Send + Sync>;

/// Every shard of the state topic as this node last read it: a cheap handle.
#[derive(Clone)]
pub struct Followed {
    state: watch::Receiver<Arc<FollowedState>>,
    partitions: i32,
    end_of: EndOf,
}

impl Followed {
    /// `partitions`: the state topic's, by which mirrors are routed.
    pub fn new(state: watch::Receiver<Arc<FollowedState>>, partitions: i32, end_of: EndOf) -> Self {
        Followed {
            state,
            partitions,
            end_of,
        }
    }

    /// `shard` once everything it held when asked is read, within `limit`:
    /// what a decision across shards waits for, so that a record written
    /// there before it (a partition's first state, its STOPPED) is never
    /// mistaken for one not written. The follower reads behind the log,
    /// and a shard it has not read yet looks like one nobody wrote.
    pub async fn read_to_end(
        &self,
        shard: i32,
        limit: std::time::Duration,
    ) -> Result<Arc<FollowedShard>, String> {
        let wait = async {
            let end = (self.end_of)(shard).await?;
            let mut rx = self.state.clone();
            let seen = rx
                .wait_for(|s| {
                    usize::try_from(shard)
                        .ok()
                        .and_then(|i| s.shards.get(i))
                        .is_some_and(|s| s.stopped.is_some() || s.has_read(end))
                })
                .await
                .map_err(|_| "the state follower stopped".to_string())?;
            let shard = seen.shards[shard as usize].clone();
            match &shard.stopped {
                Some(why) => Err(why.clone()),
                None => Ok(shard),
            }
        };
        tokio::time::timeout(limit, wait).await.unwrap_or_else(|_| {
            Err(format!(
                "state topic partition {shard} was not read to its end within {limit:?}"
            ))
        })
    }

    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// One shard as last read.
    pub fn shard(&self, shard: i32) -> Option<Arc<FollowedShard>> {
        let state = self.state.borrow();
        usize::try_from(shard)
            .ok()
            .and_then(|i| state.shards.get(i))
            .cloned()
    }

    /// The shard that coordinates `mirror`, as last read.
    pub fn coordinator_of(&self, mirror: &str) -> Option<Arc<FollowedShard>> {
        self.shard(coordinator_partition(mirror, self.partitions))
    }

    /// Reads the coordinator's shard of a hosted partition's mirror to its
    /// end and answers whether its topic is still desired MIRRORING there:
    /// what a host asks before it copies (`partition/hosted.rs`).
    pub fn still_mirroring(&self) -> StillMirroring {
        let followed = self.clone();
        Arc::new(move |key: MirrorPartitionKey| {
            let followed = followed.clone();
            Box::pin(async move {
                let shard = coordinator_partition(&key.mirror_name, followed.partitions);
                let read = followed.read_to_end(shard, STILL_MIRRORING_LIMIT).await?;
                Ok(read.image.topic(&key.topic_id).is_some_and(|t| {
                    t.change.mirror_name == key.mirror_name
                        && t.change.desired_state == PartitionState::Mirroring
                        && key.partition < t.change.partition_count
                }))
            })
        })
    }

    /// Each shard's weight in the group's assignment, when every shard is
    /// read to its last answer's high watermark (a shard read in part, or
    /// again from its log start, would weigh less than it holds, and the
    /// group would move shards twice): 1 plus [`PARTITION_WEIGHT`] for
    /// each partition to copy that runs there ([`partition_loads`]).
    pub fn weights(&self) -> Option<Vec<u64>> {
        let state = self.now();
        if !state.shards.iter().all(|s| s.caught_up()) {
            return None;
        }
        let loads = partition_loads(state.shards.iter().map(|s| &s.image));
        Some(loads.iter().map(|n| 1 + PARTITION_WEIGHT * n).collect())
    }

    /// Publishes [`Self::weights`] on `tx`, shard `s` as `unit(s)`, each
    /// time they change (counted at most every [`WEIGH_EVERY`], and kept
    /// as they were while a shard is behind), until the follower or the
    /// receiver is gone.
    pub async fn publish_weights(
        self,
        unit: fn(i32) -> String,
        tx: watch::Sender<BTreeMap<String, u64>>,
    ) {
        let mut rx = self.watch();
        loop {
            if let Some(weights) = self.weights() {
                let weights: BTreeMap<String, u64> =
                    (0..).zip(weights).map(|(s, w)| (unit(s), w)).collect();
                tx.send_if_modified(|now| {
                    let changed = *now != weights;
                    *now = weights;
                    changed
                });
            }
            tokio::time::sleep(WEIGH_EVERY).await;
            if tx.is_closed() || rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Every shard as last read.
    pub fn now(&self) -> Arc<FollowedState> {
        self.state.borrow().clone()
    }

    /// Wakes on every change read (see `watch::Receiver::changed`).
    pub fn watch(&self) -> watch::Receiver<Arc<FollowedState>> {
        self.state.clone()
    }
}

/// What a shard's coordinator needs to decide the partitions placed in it
/// whose mirrors other shards coordinate.
#[derive(Clone)]
pub struct Hosting {
    /// The shard whose log the coordinator writes.
    pub shard: i32,
    pub followed: Followed,
    /// Where a spread mirror's metadata sync asks every host how its
    /// partitions' copies stand, to let a keyless hold go while the topic
    /// is mirrored (None: the hold stays until the topic is stopped).
    pub hosted_copies: Option<AskHostedCopies>,
}

/// How one partition a node hosts stands: what its host board says, for
/// a spread mirror's coordinator, whose board holds only its own — for
/// the keyless hold (`StatusBoard::keyless_partitions`) and a switchover's
/// drain. By partition, so that one reported twice (two members listed at
/// one address after a restart, a shard handed over meanwhile) is not
/// counted for another.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostedCopy {
    pub topic_id: TopicId,
    pub partition: i32,
    pub copy: KeylessCopy,
    /// Absent from the answer of a node from before it was reported.
    #[serde(default)]
    pub position: Option<HostedPosition>,
}

/// Where a hosted partition's copy is: what a switchover drains it by.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostedPosition {
    pub state: kmirror_events::PartitionState,
    /// The next source offset to mirror.
    pub source_offset: i64,
    pub error: Option<String>,
}

/// Asks every node (this process's shards and every other member)
/// how the partitions it hosts of a mirror stand: `Err` naming a node
/// that gave no answer.
pub type AskHostedCopies =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<Vec<HostedCopy>, String>> + Send + Sync>;

/// A follower over in-memory logs, for tests: every `every` it folds each
/// log anew and publishes the shards that changed.
#[cfg(any(test, feature = "testing"))]
pub fn follow_logs(
    logs: Vec<Arc<dyn kmirror_store::EventLog>>,
    every: std::time::Duration,
) -> (Followed, tokio::task::JoinHandle<()>) {
    let partitions = logs.len() as i32;
    let (tx, rx) = watch::channel(Arc::new(FollowedState {
        shards: logs.iter().map(|_| Arc::default()).collect(),
    }));
    let followed = logs.clone();
    let task = tokio::spawn(async move {
        let logs = followed;
        loop {
            let mut state = (**tx.borrow()).clone();
            let mut changed = false;
            for (shard, log) in state.shards.iter_mut().zip(&logs) {
                let end = log.end_offset();
                if shard.answered && shard.next == end {
                    continue;
                }
                let Ok(image) = log.load_image() else {
                    continue;
                };
                *shard = Arc::new(FollowedShard {
                    image,
                    next: end,
                    high_watermark: end,
                    answered: true,
                    error: None,
                    stopped: None,
                });
                changed = true;
            }
            if changed && tx.send(Arc::new(state)).is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
    let ends = logs.clone();
    let end_of: EndOf = Arc::new(move |shard| {
        let end = ends
            .get(shard as usize)
            .map(|l| l.end_offset())
            .ok_or_else(|| format!("no shard {shard}"));
        Box::pin(async move { end })
    });
    (Followed::new(rx, partitions, end_of), task)
}
