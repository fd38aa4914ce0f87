//! A spread mirror on the in-memory clusters: its partitions run in the
//! shards their keys route to, each shard a node of its own that reads the
//! others through a follower; a stop waits for partitions placed anywhere,
//! and a shard handed to another node takes its hosted partitions along.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kmirror_events::sync::GROUP_SYNC_INTERVAL_KEY;
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
const OTHER_BOOTSTRAP: &str = "memory:9093";

struct Bed {
    source: MemorySource,
    /// A second source cluster, at `OTHER_BOOTSTRAP`, with the same topic.
    other: MemorySource,
    /// The members that cannot reach either source now.
    cut: Arc<std::sync::Mutex<BTreeSet<String>>>,
    dest: MemoryDestination,
    logs: Vec<Arc<MemLog>>,
    followed: Followed,
    follower: tokio::task::JoinHandle<()>,
    /// Every node made, where a host's ask for a final group-offset pass
    /// finds its mirror's coordinator (the daemon asks over HTTP).
    nodes: Arc<std::sync::Mutex<Vec<Shards>>>,
}

impl Bed {
    fn new() -> Bed {
        let source = MemorySource::new("src");
        source.create_topic("orders", TOPIC_ID, PARTITIONS);
        let other = MemorySource::new("other");
        other.create_topic("orders", TOPIC_ID, PARTITIONS);
        let dest = MemoryDestination::new("dst");
        dest.fenced(900);
        let logs: Vec<Arc<MemLog>> = (0..SHARDS).map(|_| Arc::new(MemLog::new())).collect();
        let (followed, follower) = follow(&logs, Duration::from_millis(10));
        Bed {
            source,
            other,
            cut: Arc::default(),
            dest,
            logs,
            followed,
            follower,
            nodes: Arc::default(),
        }
    }

    /// A node of the cluster (its shards are given by `reconcile`).
    fn node(&self, member: &str) -> Shards {
        self.node_following(member, true)
    }

    /// A node that follows the other shards or not (the daemon's
    /// `cluster.spread_partitions`).
    fn node_following(&self, member: &str, follows: bool) -> Shards {
        self.node_with(member, follows.then(|| self.followed.clone()))
    }

    /// A node whose follower is `followed` (None: it follows nothing).
    fn node_with(&self, member: &str, followed: Option<Followed>) -> Shards {
        let follows = followed.is_some();
        let (source, other) = (self.source.clone(), self.other.clone());
        let (logs, cut, me) = (self.logs.clone(), self.cut.clone(), member.to_string());
        let nodes = self.nodes.clone();
        let every = self.nodes.clone();
        // The daemon asks every member over HTTP.
        let ask_hosted_copies: crate::spread::AskHostedCopies = Arc::new(move |mirror| {
            let nodes = every.lock().unwrap().clone();
            Box::pin(async move {
                let mut copies = Vec::new();
                for shards in nodes {
                    for (_, n) in shards.nodes().await {
                        copies.extend(n.hosted_copies(&mirror).await);
                    }
                }
                Ok(copies)
            })
        });
        let ask_final_sync: crate::hosted_sync::AskFinalSync = Arc::new(move |key| {
            let nodes = nodes.lock().unwrap().clone();
            Box::pin(async move {
                for shards in nodes {
                    if let Some(coordinator) = shards.node_for(&key.mirror_name).await {
                        return coordinator
                            .final_sync_hosted(key, tokio::time::Instant::now())
                            .await
                            .map_err(|e| e.to_string());
                    }
                }
                Err(format!("no node coordinates {:?}", key.mirror_name))
            })
        });
        let shards = Shards::new(ShardsSpec {
            destination: Arc::new(self.dest.clone()),
            connect_source: Arc::new(move |props| {
                let source = match props.get("bootstrap.servers") {
                    Some(b) if b == OTHER_BOOTSTRAP => other.clone(),
                    _ => source.clone(),
                };
                let reached = !cut.lock().unwrap().contains(&me);
                Box::pin(async move {
                    if !reached {
                        return Err(crate::kafka::KafkaError::Io {
                            broker: "memory:9092".into(),
                            source: std::io::Error::new(
                                std::io::ErrorKind::ConnectionRefused,
                                "source unreachable from here",
                            ),
                        });
                    }
                    Ok(Arc::new(source) as Arc<dyn SourceCluster>)
                })
            }),
            settings: NodeSettings {
                refresh_interval: Duration::from_millis(100),
                state_topic_partitions: SHARDS,
                member: member.into(),
                followed,
                accept_spread: follows,
                ask_final_sync: Some(ask_final_sync),
                ask_hosted_copies: Some(ask_hosted_copies),
                ..NodeSettings::default()
            },
            open_log: Arc::new(move |shard| {
                let log = logs[shard as usize].clone() as Arc<dyn EventLog>;
                Box::pin(async move { Ok(log) })
            }),
        });
        self.nodes.lock().unwrap().push(shards.clone());
        shards
    }

    /// Cuts `member` from the sources, or lets it reach them again.
    fn cut(&self, member: &str, cut: bool) {
        let mut members = self.cut.lock().unwrap();
        if cut {
            members.insert(member.to_string());
        } else {
            members.remove(member);
        }
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
        let coordinator = mirror_orders(&a).await;
        (a, coordinator)
    }

    /// Two nodes: `b` owns one shard that partitions of `m` are placed
    /// in, away from the coordinator's; `a` owns the others. `m` is
    /// created, spread, and its 3 records per partition copied.
    async fn split(&self) -> (Shards, Shards, i32) {
        self.append(3);
        let (a, b, moved) = self.two_nodes().await;
        let coordinator = mirror_orders(&a).await;
        assert!(spreads(coordinator.image().await.unwrap().mirror("m").unwrap()).unwrap());
        self.copied(3).await;
        (a, b, moved)
    }

    /// [`Bed::split`]'s nodes, with no mirror yet.
    async fn two_nodes(&self) -> (Shards, Shards, i32) {
        self.two_nodes_with(self.followed.clone()).await
    }

    /// [`Bed::two_nodes`], `a` following the shards through `followed`.
    async fn two_nodes_with(&self, followed: Followed) -> (Shards, Shards, i32) {
        let (a, b) = (self.node_with("a", Some(followed)), self.node("b"));
        let home = coordinator_partition("m", SHARDS);
        let moved = (0..PARTITIONS)
            .map(|p| placement_shard(&key(p), true, SHARDS))
            .find(|s| *s != home)
            .expect("a partition placed away from the coordinator");
        a.reconcile(&(0..SHARDS).filter(|s| *s != moved).collect())
            .await;
        b.reconcile(&BTreeSet::from([moved])).await;
        (a, b, moved)
    }

    async fn close(self) {
        self.nodes.lock().unwrap().clear();
        self.follower.abort();
        let _ = self.follower.await;
    }
}

/// A follower of `logs` that reads them every `every`, and its task.
fn follow(logs: &[Arc<MemLog>], every: Duration) -> (Followed, tokio::task::JoinHandle<()>) {
    crate::spread::follow_logs(
        logs.iter()
            .map(|l| l.clone() as Arc<dyn EventLog>)
            .collect(),
        every,
    )
}

/// `m` created (spread) on its coordinator among `node`'s shards, and
/// `orders` started: the coordinator.
async fn mirror_orders(node: &Shards) -> Node {
    mirror_orders_with(node, spread_props()).await
}

/// [`mirror_orders`] with `props`.
async fn mirror_orders_with(node: &Shards, props: BTreeMap<String, String>) -> Node {
    let coordinator = node.node_for("m").await.unwrap();
    coordinator.create_mirror("m", props).await.unwrap();
    coordinator
        .start_topics("m", &["orders".into()], &[], None)
        .await
        .unwrap();
    coordinator
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
async fn a_mirror_created_again_with_another_source_is_hosted_from_the_new_one() {
    let bed = Bed::new();
    let (a, b, moved) = bed.two_nodes().await;
    let coordinator = a.node_for("m").await.unwrap();
    coordinator
        .create_mirror("m", spread_props())
        .await
        .unwrap();
    let (_, host) = b.nodes().await.pop().unwrap();
    let hosts = async || host.inner.mirrors.lock().await.hosted.contains_key("m");
    until(hosts).await;
    assert!(hosts().await, "b hosts m, created on the first source");

    // Deleted and created again, on the second source, before b's host
    // reads the delete: the follower may hand it both at once.
    host.stop_following_hosted().await;
    coordinator.delete_mirror("m", None).await.unwrap();
    let mut props = spread_props();
    props.insert("bootstrap.servers".into(), OTHER_BOOTSTRAP.into());
    coordinator.create_mirror("m", props).await.unwrap();
    host.follow_hosted();
    for p in 0..PARTITIONS {
        let records = (0..2)
            .map(|i| record(Some(&format!("k{i}")), Some("new"), 1_000))
            .collect::<Vec<_>>();
        bed.other
            .append(&TopicPartition::new("orders", p), &records, Codec::None);
    }
    bed.append(5);
    coordinator
        .start_topics("m", &["orders".into()], &[], None)
        .await
        .unwrap();

    bed.copied(2).await;
    for p in 0..PARTITIONS {
        let values: Vec<_> = bed
            .dest
            .records(&TopicPartition::new("orders", p))
            .iter()
            .map(|r| r.record.value.clone())
            .collect();
        assert!(
            values.iter().all(|v| v.as_deref() == Some(&b"new"[..])),
            "partition {p} (placed in {}, b hosts {moved}) is copied from the new source: {values:?}",
            placement_shard(&key(p), true, SHARDS)
        );
    }
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

/// The partitions of `m` placed in `shard`.
fn placed_in(shard: i32) -> Vec<i32> {
    (0..PARTITIONS)
        .filter(|p| placement_shard(&key(*p), true, SHARDS) == shard)
        .collect()
}

/// Every partition `node`'s shards describe, as (partition, state, error).
async fn described(node: &Shards) -> Vec<(i32, String, Option<String>)> {
    let mut all = Vec::new();
    for (_, n) in node.nodes().await {
        all.extend(n.describe(None).await.unwrap());
    }
    let mut all: Vec<_> = all
        .into_iter()
        .map(|d| (d.partition, d.state, d.error))
        .collect();
    all.sort();
    all
}

#[actix::test]
async fn a_host_that_cannot_make_its_source_client_describes_why_and_hosts_once_it_can() {
    let bed = Bed::new();
    bed.append(3);
    bed.cut("b", true);
    let (a, b, moved) = bed.two_nodes().await;
    mirror_orders(&a).await;

    until(async || !described(&b).await.is_empty()).await;
    let there = described(&b).await;
    assert_eq!(
        there.iter().map(|(p, ..)| *p).collect::<Vec<_>>(),
        placed_in(moved),
        "b describes the partitions placed in its shard though it cannot run them"
    );
    for (p, state, error) in &there {
        assert_eq!(state, "UNKNOWN", "partition {p} never started");
        let error = error.as_deref().unwrap_or_default();
        assert!(
            error.contains("cannot run on this node") && error.contains("source unreachable"),
            "partition {p}: {error}"
        );
    }

    bed.cut("b", false);
    bed.copied(3).await;
    until(async || described(&b).await.iter().all(|(_, _, e)| e.is_none())).await;
    assert!(
        described(&b)
            .await
            .iter()
            .all(|(_, state, e)| state == "MIRRORING" && e.is_none()),
        "b hosts them now: {:?}",
        described(&b).await
    );
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

#[actix::test]
async fn a_partition_whose_host_is_down_is_described_by_its_coordinator() {
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;
    let coordinator = a.node_for("m").await.unwrap();
    let mut all = Vec::new();
    for node in [&a, &b] {
        for (_, n) in node.nodes().await {
            all.extend(n.describe(None).await.unwrap());
        }
    }
    assert_eq!(all.len(), PARTITIONS as usize);
    let none = coordinator.undescribed(&all, &[]).await.unwrap();
    assert!(none.is_empty(), "every partition is described: {none:?}");

    // b is down: its partitions are described by nobody but the coordinator.
    freeze(&b).await;
    let log = &bed.logs[moved as usize];
    let read = async || bed.followed.now().shards[moved as usize].next == log.end_offset();
    until(read).await;
    let recorded = log.load_image().unwrap();
    let mut seen = Vec::new();
    for (_, n) in a.nodes().await {
        seen.extend(n.describe(None).await.unwrap());
    }
    let filled = coordinator.undescribed(&seen, &[]).await.unwrap();
    // Any node that follows the coordinator's shard fills in the same.
    for (shard, n) in a.nodes().await {
        let theirs = n.undescribed(&seen, &[]).await.unwrap();
        assert_eq!(
            format!("{theirs:?}"),
            format!("{filled:?}"),
            "filled in by the node of shard {shard}"
        );
    }
    let mut partitions: Vec<i32> = filled.iter().map(|d| d.partition).collect();
    partitions.sort();
    assert_eq!(partitions, placed_in(moved));
    for d in &filled {
        let state = recorded.partition_state(&key(d.partition)).map(|v| v.state);
        assert!(
            state.is_some(),
            "partition {} has a state in its shard",
            d.partition
        );
        assert_eq!(
            (d.topic.as_str(), Some(d.state.as_str())),
            ("orders", state.map(|s| s.kip_name())),
            "{d:?}"
        );
        assert_eq!(d.source_offset, -1, "{d:?}");
        let error = d.error.as_deref().unwrap_or_default();
        assert!(
            error.contains(&format!("state partition {moved}")),
            "{error}"
        );
    }
    a.shutdown().await;
    bed.close().await;
}

/// `--recover` of a spread mirror: the coordinator recovers the FAILED
/// partitions it runs, each host those it hosts (the API asks every node),
/// each recorded where the partition is placed; they copy again at once,
/// not after their retry's backoff.
#[actix::test]
async fn recover_reaches_the_failed_partitions_wherever_they_are_hosted() {
    let bed = Bed::new();
    bed.append(1);
    let (a, b, moved) = bed.two_nodes().await;
    let mut props = spread_props();
    for k in [
        kmirror_events::retry::INITIAL_BACKOFF_MS_KEY,
        kmirror_events::retry::MAX_BACKOFF_MS_KEY,
    ] {
        props.insert(k.to_string(), "600000".into());
    }
    let coordinator = mirror_orders_with(&a, props).await;
    bed.copied(1).await;
    let home = coordinator_partition("m", SHARDS);
    let (there, here) = (placed_in(moved)[0], placed_in(home)[0]);
    for p in [there, here] {
        bed.dest.fail_next_produce(
            &TopicPartition::new("orders", p),
            crate::kafka::KafkaError::Unknown("injected".into()),
        );
    }
    bed.append(1);
    let failed = async || {
        described(&a)
            .await
            .into_iter()
            .chain(described(&b).await)
            .filter(|(_, state, _)| state == "FAILED")
            .map(|(p, ..)| p)
            .collect::<BTreeSet<_>>()
    };
    until(async || failed().await.len() == 2).await;
    assert_eq!(failed().await, BTreeSet::from([there, here]));

    let topics = ["orders".to_string()];
    let own = coordinator.recover_topics("m", &topics).await.unwrap();
    assert_eq!(own.topics, [format!("orders-{here}")]);
    let (_, host) = b.nodes().await.pop().unwrap();
    let hosted = host.recover_hosted("m", &topics).await.unwrap();
    assert_eq!(hosted, [format!("orders-{there}")]);
    bed.copied(2).await;
    assert!(failed().await.is_empty());
    for p in [there, here] {
        let placed = placement_shard(&key(p), true, SHARDS);
        let image = bed.logs[placed as usize].load_image().unwrap();
        assert_eq!(
            image.partition_state(&key(p)).map(|v| v.state),
            Some(kmirror_events::PartitionState::Mirroring),
            "partition {p}'s recovery recorded in its own shard"
        );
    }
    let nothing = coordinator.recover_hosted("m", &topics).await.unwrap();
    assert!(nothing.is_empty(), "the coordinator hosts nothing of m");
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

/// `stop --dry-run` of a spread mirror: the coordinator previews the
/// partitions it runs, each host those it hosts (the API asks every node),
/// and a partition no node previewed is listed as such; nothing changes.
#[actix::test]
async fn a_dry_run_stop_previews_every_partition_wherever_it_is_hosted() {
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;
    let coordinator = a.node_for("m").await.unwrap();
    let topics = ["orders".to_string()];
    let dry_run = StopOptions {
        dry_run: true,
        ..StopOptions::default()
    };
    let own = coordinator
        .stop_topics("m", &topics, dry_run)
        .await
        .unwrap();
    let numbers = |ps: &[PartitionFailover]| {
        let mut n: Vec<i32> = ps.iter().map(|p| p.partition).collect();
        n.sort();
        n
    };
    let (_, host) = b.nodes().await.pop().unwrap();
    let on_b = host.preview_hosted("m", &topics).await.unwrap();
    assert_eq!(numbers(&on_b), placed_in(moved), "b previews what it hosts");
    // Every node hosts what is placed in its shard, a's other shards too.
    let mut theirs = on_b;
    for (_, n) in a.nodes().await {
        theirs.extend(n.preview_hosted("m", &topics).await.unwrap());
    }
    let all = coordinator
        .with_hosted_previews("m", own.clone(), theirs)
        .await
        .unwrap();
    assert!(all.dry_run);
    assert_eq!(
        numbers(&all.partitions),
        (0..PARTITIONS).collect::<Vec<_>>()
    );
    for p in &all.partitions {
        assert_eq!(p.state, "MIRRORING", "{p:?}");
        assert_eq!(p.source_offset, 3, "{p:?}");
        assert!(p.source_error.is_none(), "{p:?}");
    }

    // b's answer missing: its partitions are listed, not previewed.
    let without_b: Vec<_> = all
        .partitions
        .iter()
        .filter(|p| !placed_in(moved).contains(&p.partition))
        .cloned()
        .collect();
    let partial = coordinator
        .with_hosted_previews(
            "m",
            StopReport {
                partitions: Vec::new(),
                ..own
            },
            without_b,
        )
        .await
        .unwrap();
    assert_eq!(
        numbers(&partial.partitions),
        (0..PARTITIONS).collect::<Vec<_>>()
    );
    for p in &partial.partitions {
        let hosted = placed_in(moved).contains(&p.partition);
        assert_eq!(
            p.source_error
                .as_deref()
                .is_some_and(|e| e.contains("not previewed")),
            hosted,
            "{p:?}"
        );
    }
    bed.append(1);
    bed.copied(4).await;
    a.shutdown().await;
    b.shutdown().await;
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

/// `m` (spread) created on `a`'s coordinator shard with group syncs an
/// hour apart, `orders` started, `n` records per partition copied, and the
/// first periodic group pass run (no group yet): from here on only a
/// stop's final passes sync a group. The coordinator.
async fn mirror_hourly(bed: &Bed, a: &Shards, n: usize) -> Node {
    let coordinator = a.node_for("m").await.unwrap();
    let mut props = spread_props();
    props.insert(GROUP_SYNC_INTERVAL_KEY.into(), "3600000".into());
    coordinator.create_mirror("m", props).await.unwrap();
    coordinator
        .start_topics("m", &["orders".into()], &[], None)
        .await
        .unwrap();
    bed.append(n);
    bed.copied(n).await;
    let first_pass = async || {
        coordinator
            .sync_metrics()
            .await
            .iter()
            .any(|m| m.last_group_sync_ms > 0)
    };
    until(first_pass).await;
    assert!(first_pass().await, "the first periodic pass ran");
    coordinator
}

/// A consumer of group `g` commits `offset` on every partition, then the
/// coordinator stops `orders`: as the stop answers, the destination holds
/// `offset` for every partition `checked` (placed in that shard, or all).
async fn commit_and_stop(bed: &Bed, coordinator: &Node, offset: i64, checked: Option<i32>) {
    for p in 0..PARTITIONS {
        bed.source.commit("g", "orders", p, offset, "meta");
    }
    let report = coordinator
        .stop_topics("m", &["orders".into()], StopOptions::default())
        .await
        .unwrap();
    assert!(report.partitions.iter().all(|p| p.state == "STOPPED"));
    let committed = bed.dest.committed("g");
    for p in 0..PARTITIONS {
        let placed = placement_shard(&key(p), true, SHARDS);
        if checked.is_some_and(|s| s != placed) {
            continue;
        }
        assert_eq!(
            committed.get(&("orders".to_string(), p)).map(|c| c.offset),
            Some(offset),
            "partition {p}, placed in shard {placed}: {committed:?}"
        );
    }
}

/// As a stop answers, every partition's group offset is on the
/// destination, those hosted away from the coordinator too (their hosts
/// asked the coordinator for their final passes): consumers moving there
/// miss nothing.
#[actix::test]
async fn a_hosted_partitions_final_group_pass_is_run_by_its_coordinator_before_it_stops() {
    let bed = Bed::new();
    let (a, b, _) = bed.two_nodes().await;
    let coordinator = mirror_hourly(&bed, &a, 3).await;
    commit_and_stop(&bed, &coordinator, 2, None).await;
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

/// The coordinator's follower reads the logs every half second, its host's
/// at once: the coordinator's view of the host's shard may lack the host's
/// last runs when the host asks for its final pass, which reads that shard
/// to its end first, and translates with the map the host left (with the
/// view as it was, offsets past the view's last run would translate to
/// its end: consumers re-reading what they had processed).
#[actix::test]
async fn a_hosted_partitions_final_pass_translates_with_the_map_its_host_left() {
    let bed = Bed::new();
    let (slow, slow_follower) = follow(&bed.logs, Duration::from_millis(500));
    let (a, b, moved) = bed.two_nodes_with(slow).await;
    let coordinator = mirror_hourly(&bed, &a, 3).await;
    // Two more records copied, and the stop follows at once: b's last runs
    // are written, the coordinator's view of b's shard is up to half a
    // second old.
    bed.append(2);
    bed.copied(5).await;
    commit_and_stop(&bed, &coordinator, 5, Some(moved)).await;
    a.shutdown().await;
    b.shutdown().await;
    slow_follower.abort();
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

/// A switchover of a spread mirror drains every partition to the source's
/// settled end wherever it is hosted — the hosts report where their
/// copies are — and only then stops them all: nothing is left behind.
#[actix::test]
async fn a_switchover_of_a_spread_mirror_drains_the_partitions_every_node_hosts() {
    // Given a spread mirror copying on two nodes, b hosting some of it,
    // and records still arriving on every partition
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;
    assert!(!placed_in(moved).is_empty());
    let coordinator = a.node_for("m").await.unwrap();
    bed.dest.hold_acks(true);
    bed.append(2);
    // When it is switched over (the source has no authorizer: quiet mode)
    // while no copy is acknowledged
    let switching = tokio::spawn({
        let coordinator = coordinator.clone();
        async move {
            coordinator
                .stop_topics("m", &["orders".into()], switchover())
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Then it waits, stopping nothing, until every copy is acknowledged
    assert!(!switching.is_finished());
    for p in 0..PARTITIONS {
        let shard = placement_shard(&key(p), true, SHARDS);
        let image = bed.logs[shard as usize].load_image().unwrap();
        assert_eq!(
            image.partition_state(&key(p)).map(|s| s.state),
            Some(kmirror_events::PartitionState::Mirroring)
        );
    }
    bed.dest.hold_acks(false);
    let report = switching.await.unwrap().unwrap();
    // and every partition, hosted or not, was drained before it stopped
    assert_eq!(
        report.fence.as_ref().map(|f| f.mode.as_str()),
        Some("quiet")
    );
    assert_eq!(report.partitions.len(), PARTITIONS as usize, "{report:?}");
    for p in &report.partitions {
        assert_eq!(p.state, "STOPPED", "{p:?}");
        assert_eq!(p.source_offset, 5, "{p:?}");
        assert!(
            p.unmirrored.as_ref().is_none_or(|u| u.records == 0),
            "{p:?}"
        );
    }
    assert_eq!(bed.counts(), vec![5; PARTITIONS as usize]);
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

fn switchover() -> StopOptions {
    StopOptions {
        fence_source: true,
        quiet: Duration::from_millis(300),
        timeout: Duration::from_secs(20),
        ..StopOptions::default()
    }
}

/// A switchover whose hosts cannot all say where their copies are is
/// refused before the source's writers are stopped: nothing changes.
#[actix::test]
async fn a_switchover_is_refused_before_the_fence_while_a_host_runs_nothing() {
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;
    assert!(freeze(&b).await > 0);
    let coordinator = a.node_for("m").await.unwrap();
    let e = coordinator
        .stop_topics("m", &["orders".into()], switchover())
        .await
        .unwrap_err();
    assert_eq!(e.code, "COORDINATOR_NOT_AVAILABLE", "{e:?}");
    for p in placed_in(moved) {
        assert!(e.message.contains(&format!("orders-{p}")), "{e:?}");
    }
    let image = coordinator.image().await.unwrap();
    let topic = image.topic_by_name("m", "orders").unwrap();
    assert_eq!(
        topic.change.desired_state,
        kmirror_events::PartitionState::Mirroring
    );
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

/// A final pass asked of a coordinator that cannot run the mirror (its
/// source unreachable from there) is refused saying why, not as if the
/// mirror had moved to another node.
#[actix::test]
async fn a_final_pass_asked_where_the_mirror_cannot_run_says_why() {
    let bed = Bed::new();
    let (a, b, moved) = bed.split().await;
    let own: BTreeSet<i32> = (0..SHARDS).filter(|s| *s != moved).collect();
    a.reconcile(&BTreeSet::new()).await;
    bed.cut("a", true);
    a.reconcile(&own).await;
    let coordinator = a.node_for("m").await.unwrap();
    let hosted = key(placed_in(moved)[0]);
    let e = coordinator
        .final_sync_hosted(hosted, tokio::time::Instant::now())
        .await
        .unwrap_err();
    assert_ne!(e.code, "NOT_COORDINATOR", "{e:?}");
    assert!(e.message.contains("source unreachable from here"), "{e:?}");
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

/// The background check runs where each partition is placed: a host
/// verifies the partitions it hosts (their maps are in its shard) and
/// records each result there, as the coordinator does for its own.
#[actix::test]
async fn a_spread_mirrors_background_check_runs_where_each_partition_is_placed() {
    // Given a spread mirror checked every 50 ms, some partitions hosted
    // by b away from the coordinator on a
    let bed = Bed::new();
    bed.append(3);
    let (a, b, moved) = bed.two_nodes().await;
    let mut props = spread_props();
    props.insert("mirror.verify.interval.ms".into(), "50".into());
    mirror_orders_with(&a, props).await;
    bed.copied(3).await;
    // When the checks ran over the whole copy
    let verified = async || {
        let mut all = Vec::new();
        for node in [&a, &b] {
            for (_, n) in node.nodes().await {
                for d in n.describe(None).await.unwrap() {
                    all.push((d.partition, d.verify.map(|v| (v.compared, v.differences))));
                }
            }
        }
        all.sort();
        all
    };
    until(async || {
        let all = verified().await;
        all.len() == PARTITIONS as usize && all.iter().all(|(_, v)| *v == Some((3, 0)))
    })
    .await;
    // Then every partition has its result, the hosted ones included, each
    // recorded in the shard it is placed in
    let all = verified().await;
    assert_eq!(
        all,
        (0..PARTITIONS)
            .map(|p| (p, Some((3, 0))))
            .collect::<Vec<_>>()
    );
    for p in placed_in(moved) {
        let image = bed.logs[moved as usize].load_image().unwrap();
        assert!(image.verify_result(&key(p)).is_some(), "partition {p}");
    }
    a.shutdown().await;
    b.shutdown().await;
    bed.close().await;
}

/// A failback, which would reach only the partitions placed in the
/// coordinator's shard, is refused and changes nothing on the destination.
#[actix::test]
async fn a_failback_of_a_spread_mirror_is_refused_and_changes_nothing() {
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
