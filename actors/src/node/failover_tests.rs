//! Failover on the in-memory clusters: the report a stop waits for and
//! answers with, the dry run that changes nothing, an unreachable source,
//! and the planned switchover's source fence (ACL or quiet period), its
//! refusals and its removal.

use std::sync::Arc;
use std::time::Duration;

use kmirror_events::{AclEntry, MirrorPartitionKey, TopicId};
use kmirror_store::MemLog;

use super::*;
use crate::cluster::memory::{record, MemoryDestination, MemorySource};
use crate::cluster::{acl_binding, AclBinding, ClusterView, SourceCluster};
use crate::kafka::batch::Codec;
use crate::kafka::fetch::TopicPartition;

const TOPIC: &str = "orders";

struct Rig {
    source: MemorySource,
    dest: MemoryDestination,
    node: Node,
    tp: TopicPartition,
}

/// Mirror `m` of a one-partition `orders`, started, with `mirrored`
/// records copied (one batch of five per call to `append`).
async fn rig(mirrored: i64) -> Rig {
    rig_with(mirrored, &[]).await
}

/// [`rig`], the mirror created with these properties as well.
async fn rig_with(mirrored: i64, extra: &[(&str, &str)]) -> Rig {
    let source = MemorySource::new("src");
    source.create_topic(TOPIC, TopicId([7; 16]), 1);
    let dest = MemoryDestination::new("dst");
    let connect: SourceConnector = {
        let source = source.clone();
        Arc::new(move |_props| {
            let source = source.clone();
            Box::pin(async move { Ok(Arc::new(source) as Arc<dyn SourceCluster>) })
        })
    };
    let node = Node::start(
        Arc::new(MemLog::new()),
        Arc::new(dest.clone()),
        connect,
        NodeSettings {
            refresh_interval: Duration::from_millis(200),
            ..NodeSettings::default()
        },
    )
    .await
    .unwrap();
    let mut props = BTreeMap::from([("bootstrap.servers".to_string(), "memory:9092".to_string())]);
    props.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    node.create_mirror("m", props).await.unwrap();
    let rig = Rig {
        source,
        dest,
        node,
        tp: TopicPartition::new(TOPIC, 0),
    };
    rig.append(mirrored, 1_000);
    rig.node
        .start_topics("m", &[TOPIC.into()], &[], None)
        .await
        .unwrap();
    rig.until(|p| p.state == "MIRRORING" && p.destination_offset == mirrored)
        .await;
    rig
}

impl Rig {
    /// Appends `n` records in batches of five, timestamps from `ts` up.
    fn append(&self, n: i64, ts: i64) {
        let mut i = 0;
        while i < n {
            let records: Vec<_> = (i..n.min(i + 5))
                .map(|j| record(Some("k"), Some(&format!("value-{j}")), ts + j))
                .collect();
            self.source.append(&self.tp, &records, Codec::None);
            i += 5;
        }
    }

    async fn until(&self, done: impl Fn(&PartitionDescription) -> bool) {
        for _ in 0..500 {
            let parts = self.node.describe(Some("m")).await.unwrap();
            if parts.iter().all(&done) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{:#?}", self.node.describe(Some("m")).await.unwrap());
    }

    async fn pause(&self) {
        self.node
            .change_topics("m", TopicChange::Pause, &[TOPIC.into()], None)
            .await
            .unwrap();
        self.until(|p| p.state == "PAUSED").await;
    }

    async fn stop(&self, options: StopOptions) -> Result<StopReport, NodeError> {
        self.node.stop_topics("m", &[TOPIC.into()], options).await
    }

    /// The source's batch bytes in `[from, to)`, as stored.
    async fn bytes(&self, from: i64, to: i64) -> i64 {
        let h = self
            .source
            .batch_headers(&self.tp, from, to, usize::MAX)
            .await
            .unwrap();
        h.batches.iter().map(|b| b.size as i64).sum()
    }

    async fn image(&self) -> Arc<MirrorStateImage> {
        self.node.image().await.unwrap()
    }
}

fn fence_of(topic: &str) -> (String, AclBinding) {
    let e = AclEntry::write_fence(topic);
    (e.canonical(), acl_binding(&e).unwrap())
}

fn options() -> StopOptions {
    StopOptions {
        timeout: Duration::from_secs(10),
        ..StopOptions::default()
    }
}

fn fenced() -> StopOptions {
    StopOptions {
        fence_source: true,
        ..options()
    }
}

#[actix::test]
async fn a_stop_waits_for_stopped_and_reports_exactly_what_was_not_mirrored() {
    let r = rig(10).await;
    r.pause().await;
    // Held back: 12 records in three batches, the newest 3.5 s after the
    // newest mirrored one (timestamps 1000..1009 mirrored).
    r.append(12, 4_498);
    let expected_bytes = r.bytes(10, 22).await;
    let report = r.stop(options()).await.unwrap();
    assert_eq!(report.topics, vec![TOPIC.to_string()]);
    assert!(!report.dry_run && report.fence.is_none(), "{report:?}");
    let p = &report.partitions[0];
    assert_eq!((p.state.as_str(), p.partition), ("STOPPED", 0));
    assert_eq!((p.source_offset, p.destination_offset), (10, 10));
    assert!(p.source_reachable && p.source_error.is_none(), "{p:?}");
    let u = p.unmirrored.as_ref().unwrap();
    assert_eq!((u.source_high_watermark, u.records), (22, 12));
    assert_eq!((u.bytes, u.bytes_at_least), (expected_bytes, false));
    assert!(expected_bytes > 0);
    assert_eq!(u.seconds_behind, 3.5);
    // Recorded before STOPPED, as the audit reads it.
    let image = r.image().await;
    let key = MirrorPartitionKey::new("m", TopicId([7; 16]), 0);
    let recorded = image.failover_report(&key).unwrap();
    assert_eq!(recorded.unmirrored.as_ref().unwrap().records, 12);
    assert_eq!(image.last_mirror_epochs(&key).unwrap().source_offset, 10);
    // Stopping again answers at once with the same report.
    let again = r.stop(options()).await.unwrap();
    assert_eq!(again.partitions[0].unmirrored.as_ref().unwrap().records, 12);
}

#[actix::test]
async fn a_dry_run_reports_the_same_and_changes_nothing() {
    let r = rig(10).await;
    r.pause().await;
    r.append(7, 2_009);
    let before = r.node.state_validation_offset().await;
    let dry = r
        .stop(StopOptions {
            dry_run: true,
            ..options()
        })
        .await
        .unwrap();
    assert!(dry.dry_run);
    let p = &dry.partitions[0];
    assert_eq!(p.state, "PAUSED");
    let u = p.unmirrored.as_ref().unwrap();
    assert_eq!((p.source_offset, u.records), (10, 7));
    assert_eq!(u.seconds_behind, 1.006);
    assert_eq!(u.bytes, r.bytes(10, 17).await);
    assert_eq!(
        r.node.state_validation_offset().await,
        before,
        "a dry run appends nothing"
    );
    r.until(|p| p.state == "PAUSED").await;
    // And the real stop then reports what the dry run said.
    let real = r.stop(options()).await.unwrap();
    let q = &real.partitions[0];
    assert_eq!(
        (q.source_offset, q.unmirrored.as_ref().unwrap().records),
        (10, 7)
    );
    assert_eq!(q.unmirrored.as_ref().unwrap().bytes, u.bytes);
}

#[actix::test]
async fn a_stop_with_the_source_unreachable_still_stops_and_says_so() {
    let r = rig(10).await;
    r.source.set_unreachable(true);
    let report = r.stop(options()).await.unwrap();
    let p = &report.partitions[0];
    assert_eq!(p.state, "STOPPED");
    assert_eq!((p.source_offset, p.destination_offset), (10, 10));
    assert!(!p.source_reachable && p.unmirrored.is_none(), "{p:?}");
    assert!(
        p.source_error.as_deref().unwrap().contains("unreachable"),
        "{p:?}"
    );
}

#[actix::test]
async fn fence_source_denies_writes_drains_stops_and_unfence_removes_only_its_acl() {
    let r = rig(10).await;
    r.source.enable_acls();
    let operators = AclBinding {
        resource_type: 2,
        resource_name: TOPIC.into(),
        pattern_type: 3,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: 3,
        permission_type: 3,
    };
    r.source.add_acl(operators.clone());
    // Records the mirror has not copied yet when the switchover begins.
    r.append(15, 5_000);
    let report = r.stop(fenced()).await.unwrap();
    let (binding, fence) = fence_of(TOPIC);
    let f = report.fence.as_ref().unwrap();
    assert_eq!((f.mode.as_str(), f.acls.clone()), ("acl", vec![binding]));
    let p = &report.partitions[0];
    assert_eq!((p.state.as_str(), p.source_offset), ("STOPPED", 25));
    let u = p.unmirrored.as_ref().unwrap();
    assert_eq!((u.records, u.bytes, u.seconds_behind), (0, 0, 0.0));
    assert_eq!(r.dest.records(&r.tp).len(), 25, "drained to lag 0");
    let mut both = vec![operators.clone(), fence];
    both.sort();
    assert_eq!(r.source.acl_list(), both);
    assert_eq!(r.image().await.source_fences_of("m").count(), 1);

    let removed = r.node.unfence("m", &[TOPIC.into()]).await.unwrap();
    assert_eq!(removed.removed_acls, f.acls);
    assert_eq!(r.source.acl_list(), vec![operators], "the operator's stays");
    assert_eq!(r.image().await.source_fences_of("m").count(), 0);
    let none = r.node.unfence("m", &[TOPIC.into()]).await.unwrap();
    assert!(none.removed_acls.is_empty() && none.note.is_some());
}

#[actix::test]
async fn starting_the_topics_again_or_deleting_the_mirror_removes_the_fence() {
    let r = rig(5).await;
    r.source.enable_acls();
    r.stop(fenced()).await.unwrap();
    assert_eq!(r.source.acl_list().len(), 1);
    let started = r
        .node
        .start_topics("m", &[TOPIC.into()], &[], None)
        .await
        .unwrap();
    assert!(
        started.note.as_deref().unwrap().contains("write fence"),
        "{started:?}"
    );
    assert!(r.source.acl_list().is_empty());
    r.until(|p| p.state == "MIRRORING").await;
    r.stop(fenced()).await.unwrap();
    assert_eq!(r.source.acl_list().len(), 1);
    r.node.delete_mirror("m", None).await.unwrap();
    assert!(r.source.acl_list().is_empty());
}

#[actix::test]
async fn fence_source_refuses_a_partition_that_cannot_drain_and_changes_nothing() {
    let r = rig(5).await;
    r.source.enable_acls();
    r.pause().await;
    let before = r.node.state_validation_offset().await;
    let e = r.stop(fenced()).await.unwrap_err();
    assert_eq!(e.code, "INVALID_CLUSTER_MIRROR_STATES");
    assert!(e.message.contains("orders-0 (PAUSED)"), "{e}");
    assert!(r.source.acl_list().is_empty());
    assert_eq!(r.node.state_validation_offset().await, before);
    r.until(|p| p.state == "PAUSED").await;
    let e = r
        .stop(StopOptions {
            dry_run: true,
            ..fenced()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, "INVALID_REQUEST");
}

#[actix::test]
async fn without_an_authorizer_the_fence_waits_for_quiet_and_gives_up_on_a_busy_source() {
    let r = rig(5).await;
    // A producer that keeps writing: the source never goes quiet.
    let writer = {
        let (source, tp) = (r.source.clone(), r.tp.clone());
        tokio::spawn(async move {
            for i in 0.. {
                source.append(&tp, &[record(None, Some("busy"), 10_000 + i)], Codec::None);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let busy = StopOptions {
        fence_source: true,
        timeout: Duration::from_millis(1_500),
        quiet: Duration::from_millis(500),
        ..StopOptions::default()
    };
    let e = r.stop(busy.clone()).await.unwrap_err();
    assert_eq!(e.code, "REQUEST_TIMED_OUT");
    assert!(e.message.contains("no authorizer"), "{e}");
    assert!(e.message.contains("nothing was fenced or stopped"), "{e}");
    r.until(|p| p.state == "MIRRORING").await;
    writer.abort();
    let report = r
        .stop(StopOptions {
            timeout: Duration::from_secs(10),
            ..busy
        })
        .await
        .unwrap();
    let f = report.fence.as_ref().unwrap();
    assert_eq!(f.mode, "quiet");
    assert!(f.acls.is_empty() && f.quiet_ms >= 500, "{f:?}");
    let p = &report.partitions[0];
    assert_eq!(p.unmirrored.as_ref().unwrap().records, 0);
    assert_eq!(
        p.source_offset,
        r.source.bounds(&r.tp).await.unwrap().end,
        "drained to the source's end"
    );
}

/// Describe reads the mirror's status board, never a partition's mailbox.
/// With the source's group reads stalled, a stopping partition waits in its
/// final group-offset pass (its handler holds the mailbox for up to the
/// pass's 30 s timeout; `stop --dry-run`, which asks the actor, shows it
/// busy) and describe still answers at once, showing it STOPPING.
#[actix::test]
async fn describe_answers_while_a_partition_waits_on_a_stalled_source() {
    let r = rig_with(10, &[("mirror.groups.include", ".*")]).await;
    r.source.commit("g", TOPIC, 0, 5, "");
    r.source.hold_group_reads(true);
    let node = r.node.clone();
    let stop = actix::spawn(async move { node.stop_topics("m", &[TOPIC.into()], options()).await });
    r.until(|p| p.state == "STOPPING").await;
    // Wait until the partition is inside its final pass.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let dry_run = StopOptions {
        dry_run: true,
        ..options()
    };
    let topics = [TOPIC.to_string()];
    let asked = r.node.stop_topics("m", &topics, dry_run);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), asked)
            .await
            .is_err(),
        "the partition's mailbox is busy: a dry run waits"
    );
    let at = std::time::Instant::now();
    let parts = tokio::time::timeout(Duration::from_secs(2), r.node.describe(Some("m")))
        .await
        .expect("describe answers while the partition waits on the source")
        .unwrap();
    println!(
        "describe answered in {:?} with the partition's mailbox busy: {:?}",
        at.elapsed(),
        parts.iter().map(|p| &p.state).collect::<Vec<_>>()
    );
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].state, "STOPPING");
    assert_eq!(parts[0].destination_offset, 10);
    r.source.hold_group_reads(false);
    let report = stop.await.unwrap().unwrap();
    assert_eq!(report.partitions[0].state, "STOPPED");
    r.until(|p| p.state == "STOPPED").await;
}
