//! Shards: the state-topic partitions a clustered node coordinates.
//!
//! In a clustered daemon each partition of the state topic is a shard: one
//! coordinator (a [`Node`] whose event log *is* that partition) and the
//! mirrors routed to it by `coordinator_partition(mirror)`, with all their
//! partitions. Membership decides which shards a node owns; [`Shards`]
//! makes the running set follow it. A shard is started only once its log is
//! open — opening it fences the previous owner at the broker — and a shard
//! taken away is shut down (every pump closed and awaited) before
//! `reconcile` returns, so nothing of it still acts when its new owner
//! starts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures_util::StreamExt;
use kmirror_events::coordinator_partition;
use kmirror_store::EventLog;

use serde::{Deserialize, Serialize};

use crate::cluster::{BoxFuture, DestinationCluster};
use crate::node::{Node, NodeError, NodeSettings, SourceConnector};

/// Who owns which shard, as the group's latest generation assigned them:
/// what `kmirror cluster status` shows and where requests are forwarded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The `[cluster] id` the nodes share.
    pub cluster_id: String,
    /// The group generation the assignment belongs to (−1: not a member).
    pub generation: i32,
    /// This node's member id.
    pub member_id: String,
    pub leader: String,
    pub members: Vec<MemberStatus>,
}

/// One node of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub member_id: String,
    /// Its admin API (`[cluster] advertised_url`).
    pub url: String,
    pub capacity: u32,
    /// The state-topic partitions it coordinates.
    pub shards: Vec<i32>,
}

impl ClusterStatus {
    /// The member that owns `shard`, if any does.
    pub fn owner(&self, shard: i32) -> Option<&MemberStatus> {
        self.members.iter().find(|m| m.shards.contains(&shard))
    }

    /// Whether `member` is this node.
    pub fn is_me(&self, member: &MemberStatus) -> bool {
        member.member_id == self.member_id
    }
}

/// How many shards a node opens at once (each: a fence round trip to the
/// transaction coordinator, then a load).
pub const PARALLEL_STARTS: usize = 8;

/// Opens (and fences) the log of one shard.
pub type ShardLogOpener =
    Arc<dyn Fn(i32) -> BoxFuture<'static, Result<Arc<dyn EventLog>, NodeError>> + Send + Sync>;

/// What every shard of this node is started with.
#[derive(Clone)]
pub struct ShardsSpec {
    pub destination: Arc<dyn DestinationCluster>,
    pub connect_source: SourceConnector,
    /// The node settings; `shard` is set per shard.
    pub settings: NodeSettings,
    pub open_log: ShardLogOpener,
}

/// The shards running on this node (see the module docs). A cheap handle.
#[derive(Clone)]
pub struct Shards {
    spec: Arc<ShardsSpec>,
    running: Arc<tokio::sync::Mutex<BTreeMap<i32, Node>>>,
}

impl Shards {
    pub fn new(spec: ShardsSpec) -> Self {
        Shards {
            spec: Arc::new(spec),
            running: Arc::default(),
        }
    }

    /// The shard (state-topic partition) that coordinates `mirror`.
    pub fn shard_of(&self, mirror: &str) -> i32 {
        coordinator_partition(mirror, self.spec.settings.state_topic_partitions)
    }

    /// The running node of `mirror`'s shard, if this node owns it.
    pub async fn node_for(&self, mirror: &str) -> Option<Node> {
        self.running
            .lock()
            .await
            .get(&self.shard_of(mirror))
            .cloned()
    }

    /// The shards running here.
    pub async fn owned(&self) -> BTreeSet<i32> {
        self.running.lock().await.keys().copied().collect()
    }

    /// Every running shard, copied out.
    pub async fn nodes(&self) -> Vec<(i32, Node)> {
        let running = self.running.lock().await;
        running.iter().map(|(s, n)| (*s, n.clone())).collect()
    }

    /// Makes the running shards equal `owned`: stops the ones no longer
    /// owned first (their new owners may be waiting), then starts the new
    /// ones, [`PARALLEL_STARTS`] at a time, each answering requests as soon
    /// as it runs (the lock is not held while shards stop or start). A
    /// shard that cannot start is left out and named in the answer; the
    /// next call tries it again. Calls must not overlap (one follower
    /// calls it).
    pub async fn reconcile(&self, owned: &BTreeSet<i32>) -> Vec<(i32, NodeError)> {
        let (stopping, acquired) = {
            let mut running = self.running.lock().await;
            // A shard whose log takes no more records (an append's outcome
            // unknown) is stopped and started again: opening its log anew
            // fences the old writer, reloads, and aligns from what landed.
            let revoked: Vec<i32> = running
                .iter()
                .filter(|(s, node)| {
                    let broken = node.log_broken();
                    if let Some(why) = &broken {
                        tracing::warn!(shard = *s, error = %why, "shard log unwritable; reopening the shard");
                    }
                    !owned.contains(s) || broken.is_some()
                })
                .map(|(s, _)| *s)
                .collect();
            let stopping: Vec<(i32, Node)> = revoked
                .iter()
                .filter_map(|s| running.remove(s).map(|n| (*s, n)))
                .collect();
            let acquired: Vec<i32> = owned
                .iter()
                .filter(|s| !running.contains_key(s))
                .copied()
                .collect();
            (stopping, acquired)
        };
        futures_util::future::join_all(stopping.iter().map(|(s, n)| async move {
            n.shutdown().await;
            tracing::info!(shard = s, "shard released");
        }))
        .await;
        let started: Vec<(i32, Result<Node, NodeError>)> =
            futures_util::stream::iter(acquired.into_iter().map(|shard| async move {
                let started = self.start(shard).await;
                if let Ok(node) = &started {
                    self.running.lock().await.insert(shard, node.clone());
                    tracing::info!(shard, "shard acquired");
                }
                (shard, started)
            }))
            .buffer_unordered(PARALLEL_STARTS)
            .collect()
            .await;
        let mut failed: Vec<(i32, NodeError)> = started
            .into_iter()
            .filter_map(|(shard, r)| r.err().map(|e| (shard, e)))
            .collect();
        failed.sort_by_key(|(shard, _)| *shard);
        for (shard, e) in &failed {
            tracing::warn!(shard, error = %e, "shard could not start");
        }
        failed
    }

    async fn start(&self, shard: i32) -> Result<Node, NodeError> {
        let log = (self.spec.open_log)(shard).await?;
        Node::start(
            log,
            self.spec.destination.clone(),
            self.spec.connect_source.clone(),
            NodeSettings {
                shard: Some(shard),
                ..self.spec.settings.clone()
            },
        )
        .await
    }

    /// Resolves once the log of a running shard takes no more records
    /// ([`Node::log_failed`]): [`Shards::reconcile`] then reopens it.
    /// Pending while no shard runs.
    pub async fn log_failed(&self) -> i32 {
        let nodes = self.nodes().await;
        if nodes.is_empty() {
            return std::future::pending().await;
        }
        let waits = nodes.into_iter().map(|(shard, node)| {
            Box::pin(async move {
                node.log_failed().await;
                shard
            })
        });
        futures_util::future::select_all(waits).await.0
    }

    /// Stops every shard (a node leaving the cluster).
    pub async fn shutdown(&self) {
        self.reconcile(&BTreeSet::new()).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use kmirror_events::{MirrorStateImage, Offset, Record, RecordKey, StateValidation};
    use kmirror_store::{CompactStats, LogEntry, MemLog};

    use super::*;
    use crate::cluster::memory::{MemoryDestination, MemorySource};
    use crate::cluster::SourceCluster;

    fn shards(logs: Arc<std::sync::Mutex<BTreeMap<i32, Arc<MemLog>>>>) -> Shards {
        shards_opening(Arc::new(move |shard| {
            let log = logs.lock().unwrap().entry(shard).or_default().clone();
            Box::pin(async move { Ok(log as Arc<dyn EventLog>) })
        }))
    }

    fn shards_opening(open_log: ShardLogOpener) -> Shards {
        let source: Arc<dyn SourceCluster> = Arc::new(MemorySource::new("src"));
        Shards::new(ShardsSpec {
            destination: Arc::new(MemoryDestination::new("dst")),
            connect_source: Arc::new(move |_| {
                let source = source.clone();
                Box::pin(async move { Ok(source) })
            }),
            settings: NodeSettings {
                refresh_interval: Duration::from_millis(100),
                state_topic_partitions: 4,
                ..NodeSettings::default()
            },
            open_log,
        })
    }

    /// A memory log that breaks as a Kafka log does once an append's
    /// outcome is unknown: that append and every later one are refused
    /// until the log is opened again (a new `Breakable` on the same log).
    struct Breakable {
        log: Arc<MemLog>,
        break_next: Arc<std::sync::atomic::AtomicBool>,
        broken: std::sync::atomic::AtomicBool,
    }

    impl Breakable {
        fn refuse(&self) -> kmirror_store::Result<()> {
            use std::sync::atomic::Ordering::SeqCst;
            if self.break_next.swap(false, SeqCst) {
                self.broken.store(true, SeqCst);
            }
            if self.broken.load(SeqCst) {
                return Err(kmirror_store::StoreError::Unwritable {
                    partition: "test-0".into(),
                    message: "no acknowledgement".into(),
                });
            }
            Ok(())
        }
    }

    impl EventLog for Breakable {
        fn append(&self, ts: i64, batch: &[Record]) -> kmirror_store::Result<Offset> {
            self.refuse()?;
            self.log.append(ts, batch)
        }
        fn append_if_unchanged(
            &self,
            ts: i64,
            validation: &StateValidation,
            batch: &[Record],
        ) -> kmirror_store::Result<Offset> {
            self.refuse()?;
            self.log.append_if_unchanged(ts, validation, batch)
        }
        fn read(&self, from: Offset) -> kmirror_store::Result<kmirror_store::LogIter<'_>> {
            self.log.read(from)
        }
        fn latest(&self, key: &RecordKey) -> kmirror_store::Result<Option<LogEntry>> {
            self.log.latest(key)
        }
        fn end_offset(&self) -> Offset {
            self.log.end_offset()
        }
        fn compact(&self, now: i64, retention: i64) -> kmirror_store::Result<CompactStats> {
            self.log.compact(now, retention)
        }
        fn write_snapshot(&self, image: &MirrorStateImage) -> kmirror_store::Result<()> {
            self.log.write_snapshot(image)
        }
        fn latest_snapshot(&self) -> kmirror_store::Result<Option<MirrorStateImage>> {
            self.log.latest_snapshot()
        }
        fn flush(&self) -> kmirror_store::Result<()> {
            self.log.flush()
        }
    }

    #[actix::test]
    async fn a_shard_whose_log_broke_is_reopened_and_takes_records_again() {
        let log = Arc::new(MemLog::new());
        let break_next = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let shards = shards_opening({
            let (log, break_next, opened) = (log.clone(), break_next.clone(), opened.clone());
            Arc::new(move |_shard| {
                opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let log: Arc<dyn EventLog> = Arc::new(Breakable {
                    log: log.clone(),
                    break_next: break_next.clone(),
                    broken: false.into(),
                });
                Box::pin(async move { Ok(log) })
            })
        });
        let home = shards.shard_of("m");
        let other = (0..)
            .map(|i| format!("m{i}"))
            .find(|n| shards.shard_of(n) == home)
            .unwrap();
        let owned = BTreeSet::from([home]);
        assert!(shards.reconcile(&owned).await.is_empty());
        let node = shards.node_for("m").await.unwrap();
        node.create_mirror("m", props()).await.unwrap();

        break_next.store(true, std::sync::atomic::Ordering::SeqCst);
        let err = node.create_mirror(&other, props()).await.unwrap_err();
        assert_eq!(err.code, "KAFKA_STORAGE_ERROR", "{err:?}");
        let failed = tokio::time::timeout(Duration::from_secs(5), shards.log_failed())
            .await
            .expect("the broken log is reported");
        assert_eq!(failed, home);
        assert!(
            node.create_mirror(&other, props()).await.is_err(),
            "the broken log takes nothing more"
        );

        assert!(shards.reconcile(&owned).await.is_empty());
        assert_eq!(
            opened.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "reopened once"
        );
        let node = shards.node_for(&other).await.unwrap();
        node.create_mirror(&other, props()).await.unwrap();
        let listed = node.list_mirrors().await;
        assert_eq!(
            listed.len(),
            2,
            "both mirrors, the first from the log: {listed:?}"
        );
        shards.shutdown().await;
    }

    fn props() -> BTreeMap<String, String> {
        BTreeMap::from([("bootstrap.servers".to_string(), "src:9092".to_string())])
    }

    #[actix::test]
    async fn a_mirror_lives_in_its_shard_and_moves_with_it() {
        let logs = Arc::default();
        let a = shards(Arc::clone(&logs));
        let home = a.shard_of("m");
        let other = (home + 1) % 4;
        a.reconcile(&BTreeSet::from([home, other])).await;
        // Created through the wrong shard: refused, naming the right one.
        let wrong = a.nodes().await.into_iter().find(|(s, _)| *s == other);
        let err = wrong
            .unwrap()
            .1
            .create_mirror("m", props())
            .await
            .unwrap_err();
        assert_eq!(err.code, "NOT_COORDINATOR", "{err:?}");
        let node = a.node_for("m").await.expect("own shard runs");
        node.create_mirror("m", props()).await.unwrap();
        // The shard moves to another node: the mirror goes with its log.
        a.reconcile(&BTreeSet::from([other])).await;
        assert!(a.node_for("m").await.is_none());
        let b = shards(logs);
        b.reconcile(&BTreeSet::from([home])).await;
        let listed = b.node_for("m").await.unwrap().list_mirrors().await;
        assert_eq!(
            listed.iter().map(|m| m.mirror.as_str()).collect::<Vec<_>>(),
            ["m"]
        );
    }
}
