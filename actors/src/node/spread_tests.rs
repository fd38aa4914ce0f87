//! A spread mirror on the in-memory clusters: its partitions run in the
//! shards their keys route to, each shard a node of its own that reads the
//! others through a follower; a stop waits for partitions placed anywhere,
//! and a shard handed to another node takes its hosted partitions along.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kmirror_events::{
    coordinator_partition, placement_shard, spreads, MirrorPartitionKey, TopicId, SPREAD_KEY,
};
use kmirror_store::{EventLog, MemLog};

use super::*;
use crate::cluster::memory::{record, MemoryDestination, MemorySource};
use crate::cluster::SourceCluster;
use crate::kafka::batch::Codec;
use crate::kafka::fetch::TopicPartition;
use crate::shards::{Shards, ShardsSpec};

const SHARDS: i32 = 4;
const PARTITIONS: i32 = 8;
const TOPIC_ID: TopicId = TopicId([7; 16]);

struct Bed {
    source: MemorySource,
    dest: MemoryDestination,
    logs: Vec<Arc<MemLog>>,
    followed: Followed,
    follower: tokio::task::JoinHandle<()>,
}

impl Bed {
    fn new() -> Bed {
        let source = MemorySource::new("src");
        source.create_topic("orders", TOPIC_ID, PARTITIONS);
        let dest = MemoryDestination::new("dst");
        dest.fenced(900);
        let logs: Vec<Arc<MemLog>> = (0..SHARDS).map(|_| Arc::new(MemLog::new())).collect();
        let (followed, follower) = crate::spread::follow_logs(
            logs.iter()
                .map(|l| l.clone() as Arc<dyn EventLog>)
                .collect(),
            Duration::from_millis(10),
        );
        Bed {
            source,
            dest,
            logs,
            followed,
            follower,
        }
    }

    /// A node of the cluster (its shards are given by `reconcile`).
    fn node(&self, member: &str) -> Shards {
        self.node_following(member, true)
    }

    /// A node that follows the other shards or not (the daemon's
    /// `cluster.spread_partitions`).
    fn node_following(&self, member: &str, follows: bool) -> Shards {
        let source = self.source.clone();
        let logs = self.logs.clone();
        Shards::new(ShardsSpec {
            destination: Arc::new(self.dest.clone()),
            connect_source: Arc::new(move |_| {
                let source = source.clone();
                Box::pin(async move { Ok(Arc::new(source) as Arc<dyn SourceCluster>) })
            }),
            settings: NodeSettings {
                refresh_interval: Duration::from_millis(100),
                state_topic_partitions: SHARDS,
                member: member.into(),
                followed: follows.then(|| self.followed.clone()),
                accept_spread: follows,
                ..NodeSettings::default()
            },
            open_log: Arc::new(move |shard| {
                let log = logs[shard as usize].clone() as Arc<dyn EventLog>;
                Box::pin(async move { Ok(log) })
            }),
        })
    }

    /// Appends `n` records to every partition of the source.
    fn append(&self, n: usize) {
        for p in 0..PARTITIONS {
            let records: Vec<_> = (0..n)
                .map(|i| record(Some(&format!("k{i}")), Some("v"), 1_000))
                .collect();
            self.source
                .append(&TopicPartition::new("orders", p), &records, Codec::None);
        }
    }

    /// Waits until every destination partition holds `n` records.
    async fn copied(&self, n: usize) {
        for _ in 0..1000 {
            let counts = self.counts();
            if counts.iter().all(|c| *c == n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{n} records per partition not copied: {:?}", self.counts());
    }

    fn counts(&self) -> Vec<usize> {
        (0..PARTITIONS)
            .map(|p| self.dest.records(&TopicPartition::new("orders", p)).len())
            .collect()
    }

    /// The shards whose logs hold a state of `key`.
    fn holders(&self, key: &MirrorPartitionKey) -> Vec<i32> {
        (0..SHARDS)
            .filter(|s| {
                self.logs[*s as usize]
                    .load_image()
                    .unwrap()
                    .partition_state(key)
                    .is_some()
            })
            .collect()
    }

    /// One node owning every shard, `m` created on it (spread) and started.
    async fn one_node(&self) -> (Shards, Node) {
        let a = self.node("a");
        a.reconcile(&(0..SHARDS).collect()).await;
        let coordinator = a.node_for("m").await.unwrap();
        coordinator
            .create_mirror("m", spread_props())
            .await
            .unwrap();
        coordinator
            .start_topics("m", &["orders".into()], &[], None)
            .await
            .unwrap();
        (a, coordinator)
    }

    /// Two nodes: `b` owns one shard that partitions of `m` are placed
    /// in, away from the coordinator's; `a` owns the others. `m` is
    /// created, spread, and its 3 records per partition copied.
    async fn split(&self) -> (Shards, Shards, i32) {
        self.append(3);
        let (a, b) = (self.node("a"), self.node("b"));
        let home = coordinator_partition("m", SHARDS);
        let moved = (0..PARTITIONS)
            .map(|p| placement_shard(&key(p), true, SHARDS))
            .find(|s| *s != home)
            .expect("a partition placed away from the coordinator");
        a.reconcile(&(0..SHARDS).filter(|s| *s != moved).collect())
            .await;
        b.reconcile(&BTreeSet::from([moved])).await;
        let coordinator = a.node_for("m").await.unwrap();
        coordinator
            .create_mirror("m", spread_props())
            .await
            .unwrap();
        assert!(spreads(coordinator.image().await.unwrap().mirror("m").unwrap()).unwrap());
        coordinator
            .start_topics("m", &["orders".into()], &[], None)
            .await
            .unwrap();
        self.copied(3).await;
        (a, b, moved)
    }

    async fn close(self) {
        self.follower.abort();
        let _ = self.follower.await;
    }
}

fn spread_props() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("bootstrap.servers".to_string(), "memory:9092".to_string()),
        (SPREAD_KEY.to_string(), "true".to_string()),
    ])
}

/// Stops `node`'s (one shard's) hosted partitions as a crash would: its
/// pumps stop, no state is written, no release either. Answers how many
/// host actors it stopped.
async fn freeze(node: &Shards) -> usize {
    let (_, frozen) = node.nodes().await.pop().unwrap();
    frozen.stop_following_hosted().await;
    let actors: Vec<_> = {
        let mirrors = frozen.inner.mirrors.lock().await;
        mirrors.hosted.values().map(|r| r.actor.clone()).collect()
    };
    futures_util::future::join_all(actors.iter().map(|a| a.send(StopMirror))).await;
    actors.len()
}

/// Polls `done` every 10 ms until it holds, for at most 5 s; the caller
/// asserts what it waited for.
async fn until(mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..500 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn key(p: i32) -> MirrorPartitionKey {
    MirrorPartitionKey::new("m", TOPIC_ID, p)
}

#[actix::test]
async fn a_spread_mirror_copies_each_partition_where_its_key_routes_and_stops_them_all() {
    let bed = Bed::new();
    let placed: BTreeSet<i32> = (0..PARTITIONS)
        .map(|p| placement_shard(&key(p), true, SHARDS))
        .collect();
    assert!(
        placed.len() > 1,
        "the test needs partitions in several shards: {placed:?}"
    );
    bed.append(5);
    let (a, coordinator) = bed.one_node().await;
    bed.copied(5).await;
    for p in 0..PARTITIONS {
        assert_eq!(
            bed.holders(&key(p)),
            [placement_shard(&key(p), true, SHARDS)],
            "partition {p}'s state is in its own shard only"
        );
    }

    let report = coordinator
        .stop_topics("m", &["orders".into()], StopOptions::default())
        .await
        .unwrap();
    assert_eq!(report.partitions.len(), PARTITIONS as usize);
    for p in &report.partitions {
        assert_eq!(p.state, "STOPPED", "{p:?}");
        assert_eq!(p.source_offset, 5, "{p:?}");
    }
    a.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn a_spread_mirror_cannot_be_created_where_its_partitions_could_not_be_hosted() {
    let bed = Bed::new();
    let node = Node::start(
        Arc::new(MemLog::new()),
        Arc::new(bed.dest.clone()),
        Arc::new(|_| {
            Box::pin(async { Ok(Arc::new(MemorySource::new("src")) as Arc<dyn SourceCluster>) })
        }),
        NodeSettings::default(),
    )
    .await
    .unwrap();
    let err = node.create_mirror("m", spread_props()).await.unwrap_err();
    assert_eq!(err.code, "INVALID_CONFIG", "{err:?}");
    assert!(err.message.contains(SPREAD_KEY), "{err:?}");
    let mut bad = spread_props();
    bad.insert(SPREAD_KEY.into(), "sometimes".into());
    let err = node.create_mirror("m", bad).await.unwrap_err();
    assert_eq!(err.code, "INVALID_CONFIG", "{err:?}");
    node.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn a_shard_handed_over_takes_its_hosted_partitions_and_loses_nothing() {
    let bed = Bed::new();
    let (a, b, _) = bed.split().await;

    // b lets its shard go (a clean release), a takes it and goes on.
    b.reconcile(&BTreeSet::new()).await;
    a.reconcile(&(0..SHARDS).collect()).await;
    bed.append(4);
    bed.copied(7).await;
    for p in 0..PARTITIONS {
        let records = bed.dest.records(&TopicPartition::new("orders", p));
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            (0..7).collect::<Vec<_>>(),
            "partition {p}: source offsets kept, no marker, no duplicate"
        );
    }
    a.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn a_shard_taken_from_a_crashed_node_fences_its_hosted_partitions_once() {
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;

    // b crashes: its pumps stop, and no release is written.
    assert!(
        freeze(&b).await > 0,
        "b hosted the partitions placed in {moved}"
    );

    a.reconcile(&(0..SHARDS).collect()).await;
    bed.append(1);
    bed.copied(4).await;
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new("orders", p);
        let end = crate::cluster::ClusterView::bounds(&bed.dest, &tp)
            .await
            .unwrap()
            .end;
        let markers = end - bed.dest.records(&tp).len() as i64;
        let fenced = placement_shard(&key(p), true, SHARDS) == moved;
        assert_eq!(
            markers,
            i64::from(fenced),
            "partition {p}: one marker where the crashed node's shard was fenced, none elsewhere"
        );
    }
    a.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn a_partitions_records_are_refused_by_a_shard_it_is_not_placed_in() {
    let bed = Bed::new();
    let (a, _) = bed.one_node().await;
    let home = coordinator_partition("m", SHARDS);
    bed.followed
        .read_to_end(home, Duration::from_secs(5))
        .await
        .unwrap();
    let k = key(0);
    let placed = placement_shard(&k, true, SHARDS);
    let fail = || Command::FailPartition {
        key: k.clone(),
        leader_epoch: -1,
        error_message: "sent to the wrong shard".into(),
        retryable: true,
    };
    for (shard, node) in a.nodes().await {
        let answer = node.execute(fail(), None).await;
        if shard == placed {
            answer.unwrap();
        } else {
            let err = answer.unwrap_err();
            assert_eq!(err.code, "NOT_COORDINATOR", "shard {shard}: {err:?}");
        }
    }
    a.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn a_spread_mirror_is_deleted_once_stopped_everywhere_and_forgotten_before_its_name_returns()
{
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;

    // b freezes with its hosted partitions MIRRORING: the stop cannot end.
    freeze(&b).await;
    let coordinator = a.node_for("m").await.unwrap();
    let stop = StopOptions {
        timeout: Duration::from_millis(500),
        ..StopOptions::default()
    };
    coordinator
        .stop_topics("m", &["orders".into()], stop)
        .await
        .unwrap_err();
    // The coordinator's shard holds only its own partitions, all STOPPED;
    // the delete reads the others where they are placed.
    let err = coordinator.delete_mirror("m", None).await.unwrap_err();
    assert_eq!(err.code, "INVALID_CLUSTER_MIRROR_STATES", "{err:?}");
    assert!(err.message.contains("MIRRORING"), "{err:?}");

    // a takes b's shard, whose partitions then stop; the delete goes
    // ahead, and every host forgets the partitions it held.
    a.reconcile(&(0..SHARDS).collect()).await;
    for _ in 0..500 {
        match coordinator.delete_mirror("m", None).await {
            Ok(()) => break,
            Err(e) if e.code == "INVALID_CLUSTER_MIRROR_STATES" => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let holding = || {
        (0..SHARDS)
            .filter(|s| {
                let image = bed.logs[*s as usize].load_image().unwrap();
                image.mirrors_with_partitions().contains("m")
            })
            .collect::<Vec<_>>()
    };
    until(async || holding().is_empty()).await;
    assert_eq!(holding(), Vec::<i32>::new(), "every shard forgot m");

    // A shard still holding a partition of the old m (its host has not
    // read the delete yet) keeps the name from being taken again.
    let log = &bed.logs[moved as usize];
    let leftover = |value| {
        kmirror_events::Record::MirrorPartitionState(
            key((0..PARTITIONS)
                .find(|p| placement_shard(&key(*p), true, SHARDS) == moved)
                .unwrap()),
            value,
        )
    };
    let state = kmirror_events::MirrorPartitionStateValue::unknown();
    log.append(0, &[leftover(Some(state))]).unwrap();
    let err = coordinator
        .create_mirror("m", spread_props())
        .await
        .unwrap_err();
    assert_eq!(err.code, "INVALID_CLUSTER_MIRROR_STATES", "{err:?}");
    log.append(0, &[leftover(None)]).unwrap();
    coordinator
        .create_mirror("m", spread_props())
        .await
        .unwrap();
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn group_offsets_translate_through_the_map_of_the_shard_a_partition_is_placed_in() {
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;

    // b crashes and a fences its shard: the partitions placed there get a
    // marker, so their destination offsets run one past the source's.
    freeze(&b).await;
    a.reconcile(&(0..SHARDS).collect()).await;
    bed.append(1);
    bed.copied(4).await;
    for p in 0..PARTITIONS {
        bed.source.commit("g", "orders", p, 4, "meta");
    }

    // The coordinator's sync reads the moved partitions' maps in their
    // shard, as the follower read it.
    let want = |p| 4 + i64::from(placement_shard(&key(p), true, SHARDS) == moved);
    let synced = || {
        let committed = bed.dest.committed("g");
        (0..PARTITIONS).all(|p| {
            committed
                .get(&("orders".to_string(), p))
                .is_some_and(|c| c.offset == want(p))
        })
    };
    until(async || synced()).await;
    assert!(
        synced(),
        "every partition's group offset translated where it is placed: {:?}",
        bed.dest.committed("g")
    );
    a.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn every_partition_is_described_once_across_the_cluster_by_whoever_runs_it() {
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;
    let mut described = Vec::new();
    for (who, shards) in [("a", &a), ("b", &b)] {
        for (_, node) in shards.nodes().await {
            for p in node.describe(None).await.unwrap() {
                described.push((p.partition, who, p.state));
            }
        }
    }
    described.sort();
    let want: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let host = if placement_shard(&key(p), true, SHARDS) == moved {
                "b"
            } else {
                "a"
            };
            (p, host, "MIRRORING".to_string())
        })
        .collect();
    assert_eq!(described, want);
    let coordinator = a.node_for("m").await.unwrap();
    assert!(coordinator.spreads("m").await.unwrap());
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn a_spread_mirror_is_verified_and_translated_through_the_maps_where_its_partitions_are_placed(
) {
    let bed = Bed::new();
    let (a, b, _) = bed.split().await;
    let coordinator = a.node_for("m").await.unwrap();
    // Compared is what the maps record as copied: a host's checkpoint
    // may still be on its way.
    let verify = async || {
        coordinator
            .verify("m", &crate::verify::VerifyRequest::default())
            .await
            .unwrap()
    };
    until(async || verify().await.compared == 3 * PARTITIONS as u64).await;
    let report = verify().await;
    assert!(report.equal, "{report:?}");
    assert_eq!(
        report.compared,
        3 * PARTITIONS as u64,
        "every partition's records, wherever its map is: {report:?}"
    );
    for p in 0..PARTITIONS {
        let t = coordinator.translate("m", "orders", p, 2).await.unwrap();
        assert_eq!(
            (t.kind.as_str(), t.destination_offset),
            ("exact", Some(2)),
            "{t:?}"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

/// What would reach only the partitions placed in the coordinator's shard
/// is refused, and a refused failback changes nothing on the destination.
#[actix::test]
async fn operations_not_built_across_shards_are_refused_for_a_spread_mirror() {
    let bed = Bed::new();
    crate::cluster::DestinationCluster::create_topic(&bed.dest, "orders", PARTITIONS, Vec::new())
        .await
        .unwrap();
    let orders = |p| TopicPartition::new("orders", p);
    for p in 0..PARTITIONS {
        bed.dest
            .foreign_write(&orders(p), record(Some("old"), Some("v"), 500));
    }
    let a = bed.node("a");
    a.reconcile(&(0..SHARDS).collect()).await;
    let coordinator = a.node_for("m").await.unwrap();
    coordinator
        .create_mirror("m", spread_props())
        .await
        .unwrap();
    let refused = |e: NodeError, doing: &str| {
        assert_eq!(e.code, "INVALID_REQUEST", "{doing}: {e:?}");
        assert!(e.message.contains(SPREAD_KEY), "{doing}: {e:?}");
    };
    let from_scratch = crate::failback::FailbackRequest {
        mode: Some(kmirror_events::FailbackMode::FromScratch),
        dry_run: false,
    };
    let e = coordinator
        .start_with("m", &["orders".into()], &[], None, from_scratch)
        .await
        .unwrap_err();
    refused(e, "a failback");
    for p in 0..PARTITIONS {
        assert_eq!(bed.dest.records(&orders(p)).len(), 1, "partition {p} kept");
    }

    let topics = ["orders".to_string()];
    let e = coordinator.recover_topics("m", &topics).await.unwrap_err();
    refused(e, "recover");
    for options in [
        StopOptions {
            dry_run: true,
            ..StopOptions::default()
        },
        StopOptions {
            fence_source: true,
            ..StopOptions::default()
        },
    ] {
        let e = coordinator
            .stop_topics("m", &topics, options.clone())
            .await
            .unwrap_err();
        refused(e, &format!("{options:?}"));
    }
    a.shutdown().await;
    bed.close().await;
}

/// A node started without following the other shards runs no spread
/// mirror and says why; nothing it would decide on its own shard alone
/// (a delete, a start) goes ahead.
#[actix::test]
async fn a_node_that_does_not_follow_the_other_shards_runs_no_spread_mirror_and_says_why() {
    let bed = Bed::new();
    bed.append(2);
    let (a, _) = bed.one_node().await;
    bed.copied(2).await;
    a.reconcile(&BTreeSet::new()).await;
    let c = bed.node_following("c", false);
    c.reconcile(&(0..SHARDS).collect()).await;
    let coordinator = c.node_for("m").await.unwrap();
    let topics = ["orders".to_string()];
    let answers = [
        coordinator.describe(Some("m")).await.map(|_| ()),
        coordinator.delete_mirror("m", None).await,
        coordinator
            .start_topics("m", &topics, &[], None)
            .await
            .map(|_| ()),
        coordinator
            .stop_topics("m", &topics, StopOptions::default())
            .await
            .map(|_| ()),
    ];
    for answer in answers {
        let e = answer.unwrap_err();
        assert_eq!(e.code, "INVALID_CONFIG", "{e:?}");
        assert!(e.message.contains("spread_partitions"), "{e:?}");
    }
    let image = coordinator.image().await.unwrap();
    assert!(image.mirror("m").is_some(), "the mirror is still there");
    c.shutdown().await;
    bed.close().await;
}
