//! A shard's handover on the in-memory clusters: a clean one (the previous
//! owner's `ShardRelease` ends the log) writes no fence marker, so the
//! destination's offsets stay the source's; any other costs one marker per
//! partition. A node's own admin operations touch the clusters no more once
//! its shutdown returned (its shard is then another node's).

use std::sync::Arc;
use std::time::Duration;

use kmirror_events::{coordinator_partition, FailbackMode, Record, TopicId};
use kmirror_store::MemLog;

use super::*;
use crate::cluster::memory::{record, MemoryDestination, MemorySource};
use crate::cluster::{ClusterView, SourceCluster};
use crate::failback::FailbackRequest;
use crate::kafka::batch::Codec;
use crate::kafka::fetch::TopicPartition;

const PARTITIONS: i32 = 2;

struct Bed {
    source: MemorySource,
    dest: MemoryDestination,
    log: Arc<MemLog>,
    shard: i32,
}

impl Bed {
    fn new() -> Bed {
        let source = MemorySource::new("src");
        source.create_topic("orders", TopicId([7; 16]), PARTITIONS);
        let dest = MemoryDestination::new("dst");
        dest.fenced(900);
        Bed {
            source,
            dest,
            log: Arc::new(MemLog::new()),
            shard: coordinator_partition("m", 4),
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

    /// A node owning the shard, on the shard's (shared) log.
    async fn start(&self) -> Node {
        let source = self.source.clone();
        let connect: SourceConnector = Arc::new(move |_props| {
            let source = source.clone();
            Box::pin(async move { Ok(Arc::new(source) as Arc<dyn SourceCluster>) })
        });
        Node::start(
            self.log.clone(),
            Arc::new(self.dest.clone()),
            connect,
            NodeSettings {
                refresh_interval: Duration::from_millis(100),
                state_topic_partitions: 4,
                shard: Some(self.shard),
                member: "node-a".into(),
                ..NodeSettings::default()
            },
        )
        .await
        .unwrap()
    }

    /// Per partition: (records, markers) on the destination.
    async fn destination(&self) -> Vec<(usize, i64)> {
        let mut out = Vec::new();
        for p in 0..PARTITIONS {
            let tp = TopicPartition::new("orders", p);
            let records = self.dest.records(&tp).len();
            let end = self.dest.bounds(&tp).await.unwrap().end;
            out.push((records, end - records as i64));
        }
        out
    }

    async fn copied(&self, node: &Node, n: usize) {
        for _ in 0..1000 {
            let d = self.destination().await;
            let parts = node.describe(Some("m")).await.unwrap();
            if d.iter().all(|(r, _)| *r == n)
                && parts.len() == PARTITIONS as usize
                && parts.iter().all(|p| p.state == "MIRRORING")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "{n} records per partition not copied: {:?}",
            self.destination().await
        );
    }

    /// The destination's `name`: its id and each partition's records.
    async fn dest_topic(&self, name: &str) -> Option<(TopicId, Vec<usize>)> {
        let topics = ClusterView::topics(&self.dest).await.unwrap();
        let t = topics.into_iter().find(|t| t.name == name)?;
        let records = (0..t.partitions)
            .map(|p| self.dest.records(&TopicPartition::new(name, p)).len())
            .collect();
        Some((t.topic_id, records))
    }

    fn last_record(&self) -> Record {
        let entries: Vec<_> = self.log.read(0).unwrap().map(|e| e.unwrap()).collect();
        entries.last().unwrap().record.clone()
    }
}

fn props() -> BTreeMap<String, String> {
    BTreeMap::from([("bootstrap.servers".to_string(), "memory:9092".to_string())])
}

#[actix::test]
async fn a_clean_handover_writes_no_marker_and_a_crash_one_per_partition() {
    let bed = Bed::new();
    bed.append(3);
    let first = bed.start().await;
    first.create_mirror("m", props()).await.unwrap();
    first
        .start_topics("m", &["orders".into()], &[], None)
        .await
        .unwrap();
    bed.copied(&first, 3).await;

    // A clean stop: the release is the log's last record, and the node
    // writes nothing after it.
    first.shutdown().await;
    let last = bed.last_record();
    println!("last record after the shutdown: {last:?}");
    assert!(
        matches!(&last, Record::ShardRelease(k, Some(r)) if k.shard == bed.shard && r.member == "node-a"),
        "{last:?}"
    );
    let refused = first.create_mirror("late", props()).await.unwrap_err();
    assert_eq!(refused.code, "NOT_COORDINATOR", "{refused:?}");

    // The next owner: no marker, the copy goes on at identical offsets.
    let second = bed.start().await;
    bed.append(2);
    bed.copied(&second, 5).await;
    let clean = bed.destination().await;
    println!("after a clean handover, per partition (records, markers): {clean:?}");
    assert_eq!(clean, vec![(5, 0); PARTITIONS as usize]);
    for p in second.describe(Some("m")).await.unwrap() {
        assert!(p.offsets_identical, "{p:?}");
    }

    // A crash: every pump stopped, but no release was written.
    futures_util::future::join_all(second.actors().await.iter().map(|a| a.send(StopMirror))).await;
    assert!(!matches!(bed.last_record(), Record::ShardRelease(..)));
    let third = bed.start().await;
    bed.append(1);
    bed.copied(&third, 6).await;
    let unclean = bed.destination().await;
    println!("after an unclean handover, per partition (records, markers): {unclean:?}");
    assert_eq!(unclean, vec![(6, 1); PARTITIONS as usize]);
    third.shutdown().await;
}

fn from_scratch() -> FailbackRequest {
    FailbackRequest {
        mode: Some(FailbackMode::FromScratch),
        dry_run: false,
    }
}

/// The review's worst case: a from-scratch failback deletes and re-creates
/// the destination topic. Were that to land after the release, it could
/// delete the topic the shard's next owner re-created and copies into. The
/// shutdown either cuts the start off before its delete or lets it finish
/// first; nothing happens after it returned.
#[actix::test]
async fn a_failback_under_way_touches_the_destination_no_more_once_the_shutdown_returned() {
    let bed = Bed::new();
    bed.append(3);
    DestinationCluster::create_topic(&bed.dest, "orders", PARTITIONS, Vec::new())
        .await
        .unwrap();
    for p in 0..PARTITIONS {
        for i in 0..4 {
            let r = record(Some("old"), Some(&i.to_string()), 500);
            bed.dest.foreign_write(&TopicPartition::new("orders", p), r);
        }
    }
    let before = bed.dest_topic("orders").await;
    let node = bed.start().await;
    node.create_mirror("m", props()).await.unwrap();

    bed.dest.hold_topic_configs(true);
    let start = actix::spawn({
        let node = node.clone();
        async move {
            node.start_with("m", &["orders".into()], &[], None, from_scratch())
                .await
        }
    });
    for _ in 0..500 {
        if bed.dest.topic_config_reads() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        bed.dest.topic_config_reads(),
        1,
        "the start never described"
    );
    let shutdown = actix::spawn({
        let node = node.clone();
        async move { node.shutdown().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    bed.dest.hold_topic_configs(false);
    shutdown.await.unwrap();
    let at_shutdown = bed.dest_topic("orders").await;
    let started_first = start.is_finished();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = bed.dest_topic("orders").await;
    println!("destination orders: before {before:?}, at shutdown {at_shutdown:?}, after {after:?}");
    assert_eq!(
        after, at_shutdown,
        "the destination topic changed after the shutdown returned"
    );
    let started = start.await.unwrap();
    println!("the start: {started:?} (finished before the shutdown returned: {started_first})");
    match &started {
        Ok(_) => assert!(started_first, "the start finished after the shutdown"),
        Err(e) => {
            assert_eq!(e.code, "NOT_COORDINATOR", "{e:?}");
            assert_eq!(at_shutdown, before, "a refused start changed the topic");
        }
    }
    let last = bed.last_record();
    assert!(matches!(last, Record::ShardRelease(..)), "{last:?}");
}

/// An operation that begins once the shutdown did is refused before it
/// touches a cluster, not only at its first append.
#[actix::test]
async fn an_operation_begun_after_the_shutdown_did_is_refused_and_touches_nothing() {
    let bed = Bed::new();
    let node = bed.start().await;
    node.create_mirror("m", props()).await.unwrap();
    node.shutdown().await;
    let refused = node
        .start_topics("m", &["orders".into()], &[], None)
        .await
        .unwrap_err();
    assert_eq!(refused.code, "NOT_COORDINATOR", "{refused:?}");
    assert_eq!(
        bed.dest_topic("orders").await,
        None,
        "a start after the shutdown created the destination topic"
    );
    let refused = node.unfence("m", &["orders".into()]).await.unwrap_err();
    assert_eq!(refused.code, "NOT_COORDINATOR", "{refused:?}");
}

/// A planned switchover waiting for the source to settle when the node
/// stops: its fence is lifted, records and all, before the release (the
/// next owner would find a fence with no record of it after), and the
/// wait is cut short rather than run to its timeout.
#[actix::test]
async fn a_switchover_under_way_lifts_its_source_fence_before_the_release() {
    let bed = Bed::new();
    bed.source.enable_acls();
    bed.append(3);
    let node = bed.start().await;
    node.create_mirror("m", props()).await.unwrap();
    node.start_topics("m", &["orders".into()], &[], None)
        .await
        .unwrap();
    bed.copied(&node, 3).await;
    // A super user's producer (ACLs do not fence it): the source never
    // settles.
    let writer = actix::spawn({
        let source = bed.source.clone();
        async move {
            for i in 0.. {
                let r = record(None, Some("busy"), 10_000 + i);
                source.append(&TopicPartition::new("orders", 0), &[r], Codec::None);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let stop = actix::spawn({
        let node = node.clone();
        async move {
            let options = StopOptions {
                fence_source: true,
                timeout: Duration::from_secs(60),
                ..StopOptions::default()
            };
            node.stop_topics("m", &["orders".into()], options).await
        }
    });
    for _ in 0..500 {
        if !bed.source.acl_list().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bed.source.acl_list().len(), 1, "the fence is not in force");
    let began = std::time::Instant::now();
    node.shutdown().await;
    let took = began.elapsed();
    let left = bed.source.acl_list();
    writer.abort();
    assert!(left.is_empty(), "the fence outlived the shutdown: {left:?}");
    assert!(took < Duration::from_secs(5), "the shutdown took {took:?}");
    let refused = stop.await.unwrap().unwrap_err();
    println!("the stop: {refused:?}");
    assert_eq!(refused.code, "NOT_COORDINATOR", "{refused:?}");
    assert!(refused.message.contains("removed again"), "{refused:?}");
    let last = bed.last_record();
    assert!(matches!(last, Record::ShardRelease(..)), "{last:?}");
}
