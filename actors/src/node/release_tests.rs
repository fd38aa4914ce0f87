//! A shard's handover on the in-memory clusters: a clean one (the previous
//! owner's `ShardRelease` ends the log) writes no fence marker, so the
//! destination's offsets stay the source's; any other costs one marker per
//! partition.

use std::sync::Arc;
use std::time::Duration;

use kmirror_events::{coordinator_partition, Record, TopicId};
use kmirror_store::MemLog;

use super::*;
use crate::cluster::memory::{record, MemoryDestination, MemorySource};
use crate::cluster::{ClusterView, SourceCluster};
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
