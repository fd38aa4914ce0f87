//! The MirrorActor on the in-memory clusters.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use kmirror_events::{Command, MirrorConfig, PartitionState, RetryPolicy, TopicId};

use super::*;
use crate::cluster::memory::{record, Fixture};
use crate::coordinator::Execute;
use crate::kafka::batch::Codec;
use crate::kafka::fetch::TopicPartition;
use crate::test_util::eventually;

const TOPIC: &str = "orders";
const ID: TopicId = TopicId([5; 16]);

/// One mirror partition of `TOPIC` on the in-memory clusters.
async fn fixture() -> Fixture {
    let config = MirrorConfig {
        source_bootstrap: "memory:9092".into(),
        topics_exclude: "__.*".into(),
        source_cluster_id: "src".into(),
        ..Default::default()
    };
    Fixture::new(config, TOPIC, ID, 1).await
}

/// Appends three records at source offsets `from..from + 3`.
fn append_three(f: &Fixture, tp: &TopicPartition, from: usize) {
    let records: Vec<_> = (from..from + 3)
        .map(|i| record(None, Some(&format!("v{i}")), i as i64))
        .collect();
    f.source.append(tp, &records, Codec::None);
}

fn start_mirror(f: &Fixture, refresh_interval: Duration, board: StatusBoard) -> Addr<MirrorActor> {
    MirrorActor::new(MirrorSpec {
        name: "m".into(),
        source: Arc::new(f.source.clone()),
        destination: Arc::new(f.dest.clone()),
        coordinator: f.coordinator.clone(),
        retry: RetryPolicy::default(),
        jitter: Arc::new(rand::random),
        refresh_interval,
        published: None,
        history: None,
        board,
        placement: Placement::Whole,
        hosted_final_sync: None,
    })
    .start()
}

/// A reconcile (a refresh tick, a grown topic) that runs while the
/// mirror stops must not start partitions again: they would outlive
/// the stop, keep the coordinator (and the event log) alive, and write
/// after the node released its work.
#[actix::test]
async fn a_reconcile_during_the_stop_starts_no_partition_again() {
    let f = fixture().await;
    let tp = TopicPartition::new(TOPIC, 0);
    let append = |from: usize| append_three(&f, &tp, from);
    append(0);
    let mirror = start_mirror(&f, Duration::from_secs(60), StatusBoard::default());
    eventually("3 records", async || f.dest.records(&tp).len() == 3).await;
    let stop = mirror.send(StopMirror);
    mirror.do_send(Reconcile);
    stop.await.unwrap();
    append(3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        f.dest.records(&tp).len(),
        3,
        "nothing copied after the mirror stopped"
    );
}

/// Refreshes that find a topic as it was tell its partitions nothing,
/// so what changes must still reach them: a pause, a resume, and
/// partitions the source grew, each between refreshes that changed
/// nothing.
#[actix::test]
async fn a_topic_changed_between_quiet_refreshes_still_reaches_its_partitions() {
    let f = fixture().await;
    let p0 = TopicPartition::new(TOPIC, 0);
    append_three(&f, &p0, 0);
    let board = StatusBoard::default();
    let mirror = start_mirror(&f, Duration::from_millis(20), board.clone());
    eventually("3 records", async || f.dest.records(&p0).len() == 3).await;
    let state = |partition: i32| {
        let key = MirrorPartitionKey::new("m", ID, partition);
        board.status(&key).map(|s| s.state)
    };
    let run = async |command: Command| {
        f.coordinator
            .send(Execute::new(command))
            .await
            .unwrap()
            .unwrap();
        mirror.send(Reconcile).await.unwrap();
    };

    tokio::time::sleep(Duration::from_millis(100)).await;
    run(Command::PauseTopics {
        mirror: "m".into(),
        topics: vec![ID],
    })
    .await;
    eventually("PAUSED", async || state(0) == Some(PartitionState::Paused)).await;
    append_three(&f, &p0, 3);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        f.dest.records(&p0).len(),
        3,
        "a paused partition copies nothing"
    );

    run(Command::ResumeTopics {
        mirror: "m".into(),
        topics: vec![ID],
    })
    .await;
    eventually("6 records after the resume", async || {
        f.dest.records(&p0).len() == 6
    })
    .await;

    // The mirror's metadata sync grows the destination and records the
    // count; its PartitionsGrew makes the mirror reconcile.
    tokio::time::sleep(Duration::from_millis(100)).await;
    f.source.add_partitions(TOPIC, 2);
    let p1 = TopicPartition::new(TOPIC, 1);
    append_three(&f, &p1, 0);
    eventually("the grown partition copied", async || {
        f.dest.partition_count(TOPIC) == 2 && f.dest.records(&p1).len() == 3
    })
    .await;
    assert_eq!(state(1), Some(PartitionState::Mirroring));
}

/// Random pauses, resumes, grown partitions and records, each told
/// once between quiet 20 ms refreshes (which tell a partition nothing):
/// resumed at the end, every partition copies every record once, in
/// order, and a stop then reaches each one. 16 seeds run (400 passed
/// with its first, inline generator); with `told` keeping a topic's first
/// entry, seed 3 leaves a partition PAUSED.
#[actix::test]
async fn any_sequence_of_operations_reaches_every_partition() {
    for seed in 1..=16u64 {
        let f = fixture().await;
        let board = StatusBoard::default();
        let mirror = start_mirror(&f, Duration::from_millis(20), board.clone());
        let run = async |command: Command| {
            // Refused (a resume of what is not paused) is an answer too.
            let _ = f.coordinator.send(Execute::new(command)).await.unwrap();
            mirror.send(Reconcile).await.unwrap();
        };
        let ids = || vec![ID];
        let mut counts = vec![0usize];
        let mut rng = crate::partition::tests::sequences::Rng::new(seed);
        let mut below = |n: u64| rng.below(n);
        for _ in 0..12 {
            match below(6) {
                0 => {
                    run(Command::PauseTopics {
                        mirror: "m".into(),
                        topics: ids(),
                    })
                    .await
                }
                1 => {
                    run(Command::ResumeTopics {
                        mirror: "m".into(),
                        topics: ids(),
                    })
                    .await
                }
                2 if counts.len() < 4 => {
                    counts.push(0);
                    f.source.add_partitions(TOPIC, counts.len() as i32);
                }
                3 | 4 => {
                    let p = below(counts.len() as u64) as usize;
                    let tp = TopicPartition::new(TOPIC, p as i32);
                    append_three(&f, &tp, counts[p]);
                    counts[p] += 3;
                }
                _ => tokio::time::sleep(Duration::from_millis(below(60))).await,
            }
        }
        run(Command::ResumeTopics {
            mirror: "m".into(),
            topics: ids(),
        })
        .await;
        let state = |p: usize| {
            let key = MirrorPartitionKey::new("m", ID, p as i32);
            board.status(&key).map(|s| s.state)
        };
        let values = |p: usize| -> Vec<String> {
            let tp = TopicPartition::new(TOPIC, p as i32);
            let records = f.dest.records(&tp);
            let value = |r: &crate::cluster::memory::StoredRecord| {
                String::from_utf8_lossy(r.record.value.as_deref().unwrap_or_default()).into_owned()
            };
            records.iter().map(value).collect()
        };
        let copied = || {
            f.dest.partition_count(TOPIC) as usize == counts.len()
                && (0..counts.len()).all(|p| {
                    state(p) == Some(PartitionState::Mirroring)
                        && values(p) == (0..counts[p]).map(|i| format!("v{i}")).collect::<Vec<_>>()
                })
        };
        for _ in 0..500 {
            if copied() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seen: Vec<_> = (0..counts.len()).map(|p| (state(p), values(p))).collect();
        assert!(copied(), "seed {seed}: sent {counts:?}, seen {seen:?}");
        run(Command::StopTopics {
            mirror: "m".into(),
            topics: ids(),
        })
        .await;
        eventually("every partition STOPPED", async || {
            (0..counts.len()).all(|p| state(p) == Some(PartitionState::Stopped))
        })
        .await;
        mirror.send(StopMirror).await.unwrap();
    }
}

#[actix::test]
async fn a_source_that_became_another_cluster_stops_every_partition_copying() {
    let f = fixture().await;
    let tp = TopicPartition::new(TOPIC, 0);
    let append = |from: usize| append_three(&f, &tp, from);
    append(0);
    let board = StatusBoard::default();
    let _mirror = start_mirror(&f, Duration::from_millis(50), board.clone());
    eventually("3 records", async || f.dest.records(&tp).len() == 3).await;
    // The bootstrap now reaches another cluster, which has data too.
    f.source.set_cluster_id("other");
    eventually("FAILED", async || {
        let s = board.statuses();
        !s.is_empty() && s.iter().all(|p| p.state == PartitionState::Failed)
    })
    .await;
    append(3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        f.dest.records(&tp).len(),
        3,
        "nothing copied after the failure"
    );
    let s = &board.statuses()[0];
    assert_eq!(s.retry_attempt, -1);
    assert!(s
        .error
        .as_deref()
        .unwrap()
        .contains("source cluster id changed"));
}
