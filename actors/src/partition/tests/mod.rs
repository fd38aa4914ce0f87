//! PartitionActor on the in-memory clusters: every state and transition,
//! with injected faults. (Kafka behaviour itself is tested in `tests/`.)
//! Unclean leader elections on the source are in [`unclean`].

mod failback;
mod fenced;
mod foreign;
mod hosted;
mod repeats;
pub(crate) mod sequences;
mod stopped;
mod unclean;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use kmirror_events::{
    MirrorConfig, MirrorPartitionKey, MirrorStateImage, OffsetMapRun, PartitionState, RetryPolicy,
    TopicId, Translation,
};
use kmirror_store::{EventLog, MemLog};

use super::*;
use crate::cluster::memory::{record, Fixture, MemoryDestination, MemorySource};
use crate::cluster::DestinationCluster;
use crate::coordinator::{CoordinatorActor, ReadImage};
use crate::kafka::batch::Codec;
use crate::kafka::fetch::{FetchError, TopicPartition};
use crate::kafka::KafkaError;
use crate::test_util::eventually;

const TOPIC: &str = "orders";
const ID: TopicId = TopicId([7; 16]);

struct Rig {
    log: Arc<MemLog>,
    coordinator: Addr<CoordinatorActor>,
    source: MemorySource,
    dest: MemoryDestination,
    tp: TopicPartition,
    key: MirrorPartitionKey,
    ule: bool,
    history: Option<Arc<crate::failback::SourceHistory>>,
    /// As a host's (see `partition/hosted.rs`).
    still_mirroring: Option<crate::spread::StillMirroring>,
}

async fn rig() -> Rig {
    let config = MirrorConfig {
        source_bootstrap: "memory:9092".into(),
        topics_exclude: "__.*".into(),
        groups_include: ".*".into(),
        source_cluster_id: "src".into(),
        ..Default::default()
    };
    let f = Fixture::new(config, TOPIC, ID, 1).await;
    Rig {
        log: f.log,
        coordinator: f.coordinator,
        source: f.source,
        dest: f.dest,
        tp: TopicPartition::new(TOPIC, 0),
        key: MirrorPartitionKey::new("m", ID, 0),
        ule: false,
        history: None,
        still_mirroring: None,
    }
}

/// A started actor and the board it publishes to: the tests read its
/// status where describe does.
struct Started {
    addr: Addr<PartitionActor>,
    board: StatusBoard,
    key: MirrorPartitionKey,
}

impl std::ops::Deref for Started {
    type Target = Addr<PartitionActor>;
    fn deref(&self) -> &Addr<PartitionActor> {
        &self.addr
    }
}

impl Rig {
    fn start(&self, retry: RetryPolicy) -> Started {
        self.start_desiring(retry, PartitionState::Mirroring)
    }

    /// An actor whose topic's desired state is `desired` from the start.
    fn start_desiring(&self, retry: RetryPolicy, desired: PartitionState) -> Started {
        let board = StatusBoard::default();
        let addr = PartitionActor::new(PartitionSpec {
            key: self.key.clone(),
            topic: TOPIC.into(),
            source: Arc::new(self.source.clone()),
            destination: Arc::new(self.dest.clone()),
            coordinator: self.coordinator.clone(),
            retry,
            // The lowest sample: a retry waits 0.8x its backoff, exactly.
            jitter: Arc::new(|| 0.0),
            desired,
            support_unclean_leader_election: self.ule,
            final_sync: None,
            published: None,
            history: self.history.clone(),
            risk: Default::default(),
            risk_reads: crate::partition::risk::RiskReads::new(Arc::new(self.source.clone())),
            board: board.clone(),
            stored: None,
            still_mirroring: self.still_mirroring.clone(),
        })
        .start();
        Started {
            addr,
            board,
            key: self.key.clone(),
        }
    }

    fn append(&self, n: usize, from: usize) {
        let records: Vec<_> = (from..from + n)
            .map(|i| {
                record(
                    Some(&format!("k{i}")),
                    Some(&format!("v{i}")),
                    1_000 + i as i64,
                )
            })
            .collect();
        self.source.append(&self.tp, &records, Codec::Lz4);
    }

    /// Records `runs` in the partition's map, as a checkpoint would.
    async fn record_runs(&self, runs: Vec<OffsetMapRun>) {
        self.coordinator
            .send(crate::coordinator::Execute::new(
                kmirror_events::Command::SetOffsetRuns {
                    key: self.key.clone(),
                    upsert: runs,
                    remove: vec![],
                    holes: vec![],
                },
            ))
            .await
            .unwrap()
            .unwrap();
    }

    /// The partition's recorded LastMirrorEpochs (it must have one).
    async fn last_mirror_epochs(&self) -> kmirror_events::LastMirrorEpochsValue {
        self.image()
            .await
            .last_mirror_epochs(&self.key)
            .cloned()
            .expect("LastMirrorEpochs recorded")
    }

    async fn image(&self) -> Arc<MirrorStateImage> {
        self.coordinator.send(ReadImage).await.unwrap()
    }

    fn values(&self) -> Vec<String> {
        self.dest
            .records(&self.tp)
            .iter()
            .map(|r| String::from_utf8(r.record.value.clone().unwrap().to_vec()).unwrap())
            .collect()
    }
}

/// Waits until the partition is FAILED for good (not retryable); its
/// error.
async fn failed_for_good(actor: &Started) -> String {
    eventually("FAILED for good", async || {
        let s = state(actor).await;
        s.state == PartitionState::Failed && s.retry_attempt == -1
    })
    .await;
    state(actor).await.error.unwrap_or_default()
}

/// The status as describe reads it: from the board, never the mailbox.
async fn state(a: &Started) -> PartitionStatus {
    a.board
        .status(&a.key)
        .expect("the partition is on its board")
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        initial_backoff_ms: 20,
        max_backoff_ms: 200,
        ..RetryPolicy::default()
    }
}

fn history(log: &MemLog, key: &MirrorPartitionKey) -> Vec<(PartitionState, PartitionState, i16)> {
    log.entries()
        .into_iter()
        .filter_map(|e| match e.record {
            kmirror_events::Record::MirrorPartitionState(k, Some(v)) if &k == key => {
                Some((v.state, v.previous_state, v.retry_attempt))
            }
            _ => None,
        })
        .collect()
}

#[actix::test]
async fn mirrors_a_contiguous_partition_with_identical_offsets() {
    let rig = rig().await;
    rig.append(10, 0);
    rig.append(5, 10);
    let actor = rig.start(RetryPolicy::default());
    eventually("15 records mirrored", async || {
        rig.dest.records(&rig.tp).len() == 15
    })
    .await;
    let expected: Vec<String> = (0..15).map(|i| format!("v{i}")).collect();
    assert_eq!(rig.values(), expected);
    eventually("MIRRORING and caught up", async || {
        let s = state(&actor).await;
        s.state == PartitionState::Mirroring && s.progress.lag() == 0
    })
    .await;
    let s = state(&actor).await;
    assert!(s.progress.offsets_identical);
    actor.send(Shutdown).await.unwrap();
    let image = rig.image().await;
    assert_eq!(
        image.offset_runs(&rig.key),
        vec![OffsetMapRun {
            source_start: 0,
            destination_start: 0,
            length: 15
        }]
    );
    let states: Vec<_> = history(&rig.log, &rig.key).iter().map(|h| h.0).collect();
    assert_eq!(
        states,
        vec![PartitionState::LogAlignment, PartitionState::Mirroring]
    );
}

#[actix::test]
async fn small_source_batches_are_merged_with_every_offset_exact() {
    let rig = rig().await;
    for i in 0..40 {
        rig.append(3, i * 3); // 40 batches of 3 records: offsets 0..120
    }
    let actor = rig.start(RetryPolicy::default());
    eventually("120 records mirrored", async || {
        rig.dest.records(&rig.tp).len() == 120
    })
    .await;
    let expected: Vec<String> = (0..120).map(|i| format!("v{i}")).collect();
    assert_eq!(rig.values(), expected);
    let stored = rig.dest.records(&rig.tp);
    assert!(stored
        .iter()
        .enumerate()
        .all(|(i, r)| r.offset == i as i64 && r.record.timestamp == 1_000 + i as i64));
    // The in-memory source hands out 8 batches per fetch: one append each.
    assert_eq!(rig.dest.batches(&rig.tp), 5);
    eventually("caught up", async || {
        state(&actor).await.progress.lag() == 0
    })
    .await;
    assert!(state(&actor).await.progress.offsets_identical);
    actor.send(Shutdown).await.unwrap();
    assert_eq!(
        rig.image().await.offset_runs(&rig.key),
        vec![OffsetMapRun {
            source_start: 0,
            destination_start: 0,
            length: 120
        }]
    );
}

#[actix::test]
async fn larger_batches_pass_through_until_the_partition_falls_behind() {
    let rig = rig().await;
    // 40 KiB batches: above the always-merge size, below the behind one.
    let value = "x".repeat(1000);
    let append = |from: usize| {
        let records: Vec<_> = (from..from + 40)
            .map(|i| record(Some(&format!("k{i}")), Some(&value), 1_000 + i as i64))
            .collect();
        rig.source.append(&rig.tp, &records, Codec::None);
    };
    for i in 0..3 {
        append(i * 40);
    }
    let actor = rig.start(RetryPolicy::default());
    eventually("120 records", async || {
        rig.dest.records(&rig.tp).len() == 120
    })
    .await;
    // Three batches fit the five in-flight slots: forwarded as they are.
    assert_eq!(rig.dest.batches(&rig.tp), 3);
    for i in 3..11 {
        append(i * 40);
    }
    eventually("440 records", async || {
        rig.dest.records(&rig.tp).len() == 440
    })
    .await;
    // Eight in one fetch do not: merged into one.
    assert_eq!(rig.dest.batches(&rig.tp), 4);
    let stored = rig.dest.records(&rig.tp);
    assert!(stored.iter().enumerate().all(|(i, r)| r.offset == i as i64
        && r.record.key.as_deref() == Some(format!("k{i}").as_bytes())));
    actor.send(Shutdown).await.unwrap();
}

#[actix::test]
async fn compacted_batches_map_every_offset_exactly() {
    let rig = rig().await;
    rig.append(3, 0); // offsets 0..3
                      // A compacted batch spanning 3..10 that kept offsets 4, 5 and 9.
    let kept = [(1, "a"), (2, "b"), (6, "c")].map(|(d, v)| (d, record(Some(v), Some(v), 5_000)));
    rig.source.append_compacted(&rig.tp, &kept, 7);
    rig.append(2, 100); // offsets 10, 11
    let actor = rig.start(RetryPolicy::default());
    eventually("8 records", async || rig.dest.records(&rig.tp).len() == 8).await;
    assert_eq!(
        rig.values(),
        ["v0", "v1", "v2", "a", "b", "c", "v100", "v101"]
    );
    actor.send(Shutdown).await.unwrap();
    let image = rig.image().await;
    let expect = [
        (0, Translation::Exact(0)),
        (2, Translation::Exact(2)),
        (3, Translation::InGap(3)),
        (4, Translation::Exact(3)),
        (5, Translation::Exact(4)),
        (6, Translation::InGap(5)),
        (9, Translation::Exact(5)),
        (10, Translation::Exact(6)),
        (11, Translation::Exact(7)),
        (12, Translation::AtEnd(8)),
    ];
    for (source, t) in expect {
        assert_eq!(
            image.translate(&rig.key, source),
            t,
            "source offset {source}"
        );
    }
}

#[actix::test]
async fn a_retryable_produce_failure_retries_back_to_mirroring_without_duplicates() {
    let rig = rig().await;
    rig.append(4, 0);
    rig.dest.fail_next_produce(
        &rig.tp,
        KafkaError::Unknown("injected: broker not available".into()),
    );
    rig.dest.fail_next_produce(
        &rig.tp,
        KafkaError::Unknown("injected: broker not available".into()),
    );
    let actor = rig.start(fast_retry());
    eventually("4 records", async || rig.dest.records(&rig.tp).len() == 4).await;
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    rig.append(3, 4);
    eventually("7 records", async || rig.dest.records(&rig.tp).len() == 7).await;
    let expected: Vec<String> = (0..7).map(|i| format!("v{i}")).collect();
    assert_eq!(rig.values(), expected, "nothing lost, nothing twice");
    let h = history(&rig.log, &rig.key);
    let failed: Vec<_> = h.iter().filter(|s| s.0 == PartitionState::Failed).collect();
    assert_eq!(failed.len(), 2, "{h:?}");
    assert_eq!(failed[0].1, PartitionState::Mirroring, "PreviousState kept");
    assert_eq!((failed[0].2, failed[1].2), (1, 2), "RetryAttempt counts up");
    assert_eq!(h.last().unwrap().0, PartitionState::Mirroring);
    assert_eq!(
        state(&actor).await.retry_attempt,
        0,
        "a successful fetch clears the failure"
    );
}

/// Starts the partition with retries 30 s apart, copies one record, then
/// fails the produce of the next: FAILED, its retry pending.
async fn failed_with_a_retry_pending(rig: &Rig) -> Started {
    rig.append(1, 0);
    let actor = rig.start(RetryPolicy {
        initial_backoff_ms: 30_000,
        max_backoff_ms: 30_000,
        ..RetryPolicy::default()
    });
    eventually("1 record", async || rig.dest.records(&rig.tp).len() == 1).await;
    assert_eq!(state(&actor).await.next_retry_at_ms, None, "none pending");
    rig.dest.fail_next_produce(
        &rig.tp,
        KafkaError::Unknown("injected: broker not available".into()),
    );
    rig.append(1, 1);
    eventually("FAILED", async || {
        state(&actor).await.state == PartitionState::Failed
    })
    .await;
    actor
}

/// The status says when a FAILED partition's pending retry fires (the
/// status page counts down to it), and nothing while none is pending. The
/// delay is the policy's backoff under the node's jitter (the rig's gives
/// 0.8x): 24 s after the failure.
#[actix::test]
async fn a_pending_retry_reports_when_it_fires() {
    let rig = rig().await;
    let before = crate::coordinator::now_ms();
    let actor = failed_with_a_retry_pending(&rig).await;
    let after = crate::coordinator::now_ms();
    let at = state(&actor)
        .await
        .next_retry_at_ms
        .expect("a retry pending");
    assert!(
        (before + 24_000..=after + 24_000).contains(&at),
        "{at}: not 24 s after the failure (between {before} and {after})"
    );
}

/// A FAILED partition told once to stop stops, though its retry is still
/// pending: that timer is FAILED's, not a STOPPING step's, and must not
/// hold the stop until some later message happens to re-enter it (the
/// MirrorActor no longer re-sends an unchanged desired state).
#[actix::test]
async fn a_failed_partition_told_once_to_stop_stops_with_its_retry_pending() {
    let rig = rig().await;
    let actor = failed_with_a_retry_pending(&rig).await;
    assert!(state(&actor).await.next_retry_at_ms.is_some());
    actor.do_send(Desire(PartitionState::Stopped));
    eventually("STOPPED", async || {
        state(&actor).await.state == PartitionState::Stopped
    })
    .await;
}

/// A pump told to stop (its partition FAILED from outside) may still be
/// finishing its in-flight produce when the retry wants a pump again: that
/// pump is not the one to copy on, and its end must start the next one,
/// not leave the partition MIRRORING with nothing copying.
#[actix::test]
async fn a_retry_before_the_stopped_pump_ended_still_copies_on() {
    let rig = rig().await;
    rig.append(1, 0);
    let actor = rig.start(fast_retry());
    eventually("1 record", async || rig.dest.records(&rig.tp).len() == 1).await;
    rig.dest.hold_acks(true);
    rig.append(1, 1);
    eventually("the second produced", async || {
        rig.dest.records(&rig.tp).len() == 2
    })
    .await;
    actor.do_send(Fail {
        message: "injected: the source became another cluster".into(),
        retryable: true,
    });
    eventually("FAILED, then retried", async || {
        history(&rig.log, &rig.key)
            .iter()
            .any(|s| s.1 == PartitionState::Failed)
    })
    .await;
    rig.dest.hold_acks(false);
    rig.append(1, 2);
    eventually("the third copied", async || {
        rig.dest.records(&rig.tp).len() == 3
    })
    .await;
    let expected: Vec<String> = (0..3).map(|i| format!("v{i}")).collect();
    assert_eq!(rig.values(), expected, "nothing lost, nothing twice");
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
}

#[actix::test]
async fn a_foreign_write_fails_the_partition_for_good() {
    let rig = rig().await;
    rig.append(2, 0);
    let actor = rig.start(fast_retry());
    eventually("2 records", async || rig.dest.records(&rig.tp).len() == 2).await;
    rig.dest
        .foreign_write(&rig.tp, record(None, Some("intruder"), 1));
    rig.append(1, 2);
    // The next alignment finds the intruder's batch (the produce that
    // landed after it only stops the pump).
    let error = failed_for_good(&actor).await;
    assert!(error.contains("another producer"), "{error}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        state(&actor).await.state,
        PartitionState::Failed,
        "no retry"
    );
}

#[actix::test]
async fn pause_resume_and_stop_record_their_states_and_last_mirror_epochs() {
    let rig = rig().await;
    rig.append(3, 0);
    let actor = rig.start(RetryPolicy::default());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    actor.send(Desire(PartitionState::Paused)).await.unwrap();
    eventually("PAUSED", async || {
        state(&actor).await.state == PartitionState::Paused
    })
    .await;
    rig.append(2, 3);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rig.dest.records(&rig.tp).len(), 3, "no copy while paused");
    actor.send(Desire(PartitionState::Mirroring)).await.unwrap();
    eventually("5 records", async || rig.dest.records(&rig.tp).len() == 5).await;
    actor.send(Desire(PartitionState::Stopped)).await.unwrap();
    eventually("STOPPED", async || {
        state(&actor).await.state == PartitionState::Stopped
    })
    .await;
    let states: Vec<_> = history(&rig.log, &rig.key).iter().map(|h| h.0).collect();
    use PartitionState as S;
    assert_eq!(
        states,
        [
            S::LogAlignment,
            S::Mirroring,
            S::Pausing,
            S::Paused,
            S::Mirroring,
            S::Stopping,
            S::Stopped
        ]
    );
    let image = rig.image().await;
    let lme = image
        .last_mirror_epochs(&rig.key)
        .expect("LastMirrorEpochs recorded");
    assert_eq!((lme.source_offset, lme.destination_end_offset), (5, 5));
}

#[actix::test]
async fn retention_overtaking_the_mirror_is_recorded_as_a_gap() {
    let rig = rig().await;
    rig.append(5, 0);
    let actor = rig.start(RetryPolicy::default());
    eventually("5 records", async || rig.dest.records(&rig.tp).len() == 5).await;
    actor.send(Shutdown).await.unwrap();
    // While kmirror is down, 5 more arrive and retention deletes up to 8.
    rig.append(5, 5);
    rig.source.delete_before(&rig.tp, 8);
    let actor = rig.start(RetryPolicy::default());
    eventually("7 records", async || rig.dest.records(&rig.tp).len() == 7).await;
    assert_eq!(rig.values(), ["v0", "v1", "v2", "v3", "v4", "v8", "v9"]);
    actor.send(Shutdown).await.unwrap();
    let image = rig.image().await;
    let gaps = image.gaps(&rig.key);
    assert_eq!(gaps.len(), 1);
    assert_eq!((gaps[0].source_start, gaps[0].source_end), (5, 8));
    assert_eq!(image.translate(&rig.key, 6), Translation::InGap(5));
    assert_eq!(image.translate(&rig.key, 8), Translation::Exact(5));
}

#[actix::test]
async fn a_recreated_source_topic_fails_naming_both_ids() {
    let rig = rig().await;
    let new_id = TopicId([9; 16]);
    rig.source.recreate_topic(TOPIC, new_id, 1);
    let actor = rig.start(fast_retry());
    eventually("FAILED", async || {
        state(&actor).await.state == PartitionState::Failed
    })
    .await;
    let s = state(&actor).await;
    assert_eq!(s.retry_attempt, -1);
    let e = s.error.unwrap();
    assert!(
        e.contains(&new_id.to_string()) && e.contains(&ID.to_string()),
        "{e}"
    );
}

#[actix::test]
async fn a_restart_resumes_from_the_map_and_the_destination() {
    let rig = rig().await;
    rig.append(6, 0);
    let actor = rig.start(RetryPolicy::default());
    eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
    actor.send(Shutdown).await.unwrap();
    rig.append(4, 6);
    // A new actor over the same log, as after a daemon restart.
    let actor = rig.start(RetryPolicy::default());
    eventually("10 records", async || rig.dest.records(&rig.tp).len() == 10).await;
    let expected: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    assert_eq!(rig.values(), expected);
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
}

#[actix::test]
async fn fetch_errors_are_retried_with_the_position_kept() {
    let rig = rig().await;
    rig.append(3, 0);
    rig.source.fail_next_fetch(
        &rig.tp,
        FetchError::Other(KafkaError::Unknown("injected".into())),
    );
    let actor = rig.start(fast_retry());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    assert_eq!(rig.values(), ["v0", "v1", "v2"]);
    assert_eq!(
        rig.log.read(0).unwrap().count() as u64,
        rig.log.end_offset(),
        "every record readable"
    );
}

#[actix::test]
async fn a_destination_leader_change_goes_through_epoch_fencing() {
    let rig = rig().await;
    rig.append(3, 0);
    let actor = rig.start(RetryPolicy::default());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    rig.dest.set_leader_epoch(&rig.tp, 5);
    // Noticed at the next 1 s checkpoint.
    for _ in 0..300 {
        if history(&rig.log, &rig.key)
            .iter()
            .any(|h| h.0 == PartitionState::EpochFencing)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eventually("MIRRORING again", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    rig.append(2, 3);
    eventually("5 records", async || rig.dest.records(&rig.tp).len() == 5).await;
    assert_eq!(rig.values(), ["v0", "v1", "v2", "v3", "v4"]);
    // An idle pump looks at the destination's epoch on its first fetch
    // after the 1 s checkpoint, and records EPOCH_FENCING only after that
    // fetch's produces are acknowledged: the history may trail the copy.
    use PartitionState as S;
    let want = [S::LogAlignment, S::Mirroring, S::EpochFencing, S::Mirroring];
    let states = || -> Vec<_> { history(&rig.log, &rig.key).iter().map(|h| h.0).collect() };
    eventually("EPOCH_FENCING, then MIRRORING", async || {
        states().len() >= want.len()
    })
    .await;
    assert_eq!(states(), want);
}

#[actix::test]
async fn a_source_leader_move_is_followed_without_a_failure() {
    let rig = rig().await;
    rig.append(3, 0);
    rig.source.fail_next_fetch(
        &rig.tp,
        FetchError::LeaderChanged {
            error: kafka_protocol::ResponseError::NotLeaderOrFollower,
            new_leader: Some((2, 7)),
            offset: 0,
        },
    );
    let actor = rig.start(fast_retry());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    rig.append(2, 3);
    eventually("5 records", async || rig.dest.records(&rig.tp).len() == 5).await;
    assert_eq!(rig.values(), ["v0", "v1", "v2", "v3", "v4"]);
    let states: Vec<_> = history(&rig.log, &rig.key).iter().map(|h| h.0).collect();
    assert_eq!(
        states,
        [PartitionState::LogAlignment, PartitionState::Mirroring],
        "no FAILED"
    );
    assert_eq!(state(&actor).await.retry_attempt, 0);
}

#[actix::test]
async fn a_produce_timeout_is_retried_from_the_destination_end() {
    let rig = rig().await;
    rig.append(4, 0);
    rig.dest.fail_next_produce(
        &rig.tp,
        KafkaError::Timeout {
            api: "Produce",
            broker: "127.0.0.1:9092".into(),
            timeout: Duration::from_secs(30),
        },
    );
    let actor = rig.start(fast_retry());
    eventually("4 records", async || rig.dest.records(&rig.tp).len() == 4).await;
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    assert_eq!(rig.values(), ["v0", "v1", "v2", "v3"]);
    let h = history(&rig.log, &rig.key);
    let failed: Vec<_> = h.iter().filter(|s| s.0 == PartitionState::Failed).collect();
    assert_eq!(failed.len(), 1, "{h:?}");
}

#[actix::test]
async fn a_partition_stopped_while_paused_since_start_up_records_where_its_copy_stands() {
    let rig = rig().await;
    rig.append(6, 0);
    let actor = rig.start(fast_retry());
    eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
    actor.do_send(Desire(PartitionState::Paused));
    eventually("PAUSED", async || {
        state(&actor).await.state == PartitionState::Paused
    })
    .await;
    actor.send(Shutdown).await.unwrap();
    // A new process: the partition is PAUSED and no pump runs before STOP.
    let actor = rig.start_desiring(fast_retry(), PartitionState::Paused);
    eventually("PAUSED again", async || {
        state(&actor).await.state == PartitionState::Paused
    })
    .await;
    actor.do_send(Desire(PartitionState::Stopped));
    eventually("STOPPED", async || {
        state(&actor).await.state == PartitionState::Stopped
    })
    .await;
    let lme = rig.last_mirror_epochs().await;
    assert_eq!(
        (
            lme.source_offset,
            lme.destination_end_offset,
            lme.last_mirror_offset
        ),
        (6, 6, 6),
        "{lme:?}"
    );
}

#[actix::test]
async fn appends_above_the_last_checkpoint_are_kmirrors_only_if_its_producer_wrote_them() {
    for foreign in [false, true] {
        let rig = rig().await;
        rig.append(6, 0);
        let actor = rig.start(fast_retry());
        eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
        actor.send(Shutdown).await.unwrap();
        // A crash before the last checkpoint: the log knows 3 of the 6.
        rig.record_runs(vec![run(0, 0, 3)]).await;
        if foreign {
            rig.dest
                .foreign_write(&rig.tp, record(None, Some("foreign"), 0));
        }
        rig.append(2, 6);
        let actor = rig.start(fast_retry());
        if foreign {
            eventually("FAILED", async || {
                state(&actor).await.state == PartitionState::Failed
            })
            .await;
            let s = state(&actor).await;
            assert_eq!(s.retry_attempt, -1);
            assert!(s.error.unwrap().contains("producer id -1"));
            assert_eq!(rig.dest.records(&rig.tp).len(), 7, "nothing more appended");
        } else {
            eventually("8 records", async || rig.dest.records(&rig.tp).len() == 8).await;
            let expected: Vec<String> = (0..8).map(|i| format!("v{i}")).collect();
            assert_eq!(rig.values(), expected);
            assert_eq!(state(&actor).await.retry_attempt, 0);
        }
        actor.send(Shutdown).await.unwrap();
    }
}

#[actix::test]
async fn a_source_topic_recreated_while_mirroring_fails_the_partition_and_copies_nothing_of_it() {
    let rig = rig().await;
    rig.append(6, 0);
    let actor = rig.start(fast_retry());
    eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
    rig.source.recreate_topic(TOPIC, TopicId([8; 16]), 1);
    rig.append(10, 100);
    eventually("FAILED", async || {
        state(&actor).await.state == PartitionState::Failed
    })
    .await;
    let s = state(&actor).await;
    assert_eq!(s.retry_attempt, -1);
    assert!(s.error.unwrap().contains("re-created"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rig.dest.records(&rig.tp).len(), 6);
}

#[actix::test]
async fn a_pending_retry_is_not_postponed_by_each_refresh() {
    let rig = rig().await;
    rig.append(4, 0);
    rig.dest.fail_next_produce(
        &rig.tp,
        KafkaError::Timeout {
            api: "Produce",
            broker: "127.0.0.1:9092".into(),
            timeout: Duration::from_secs(30),
        },
    );
    // The retry waits longer than the MirrorActor's refresh, which tells
    // every partition its desired state each time.
    let actor = rig.start(RetryPolicy {
        initial_backoff_ms: 300,
        max_backoff_ms: 300,
        ..RetryPolicy::default()
    });
    eventually("FAILED", async || {
        state(&actor).await.state == PartitionState::Failed
    })
    .await;
    for _ in 0..40 {
        actor.do_send(Desire(PartitionState::Mirroring));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rig.dest.records(&rig.tp).len(), 4, "retried within 2 s");
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
}

#[actix::test]
async fn a_mirror_copying_this_topic_back_from_the_destination_is_a_loop() {
    use kmirror_events::{MirrorConfigKey, MirrorTopicStateChange, MirrorTopicStateKey, Record};
    let mut rig = rig().await;
    // The source's state topic says: mirror "back" copies `orders` from
    // this destination ("dst") into the source, and is MIRRORING.
    let history = [
        Record::MirrorConfig(
            MirrorConfigKey {
                mirror_name: "back".into(),
            },
            Some(MirrorConfig {
                source_bootstrap: "dst:9092".into(),
                source_cluster_id: "dst".into(),
                ..Default::default()
            }),
        ),
        Record::MirrorTopicStateChange(
            MirrorTopicStateKey {
                topic_id: TopicId([2; 16]),
            },
            Some(MirrorTopicStateChange {
                topic_id: TopicId([2; 16]),
                mirror_name: "back".into(),
                desired_state: PartitionState::Mirroring,
                topic_name: TOPIC.into(),
                partition_count: 1,
            }),
        ),
    ];
    let state_tp = TopicPartition::new("__kmirror_state", 0);
    rig.source
        .create_topic("__kmirror_state", TopicId([3; 16]), 1);
    let published: Vec<_> = history
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (key, value) = crate::state_topic::encode(r, i as u64, 0);
            crate::kafka::batch::Record {
                offset_delta: 0,
                timestamp: 0,
                key: Some(key),
                value,
                headers: vec![],
            }
        })
        .collect();
    rig.source.append(&state_tp, &published, Codec::None);
    rig.history = Some(Arc::new(crate::failback::SourceHistory::new(
        "__kmirror_state",
    )));
    rig.append(3, 0);
    let actor = rig.start(fast_retry());
    assert!(failed_for_good(&actor)
        .await
        .contains("Detected mirror loop"));
    assert!(rig.dest.records(&rig.tp).is_empty());
}

/// Every open partition holds its pump, a task as large as the future's
/// largest await point, for as long as it is open: 10 000 idle partitions
/// hold 10 000 of them. The pump's rare steps and `forward` are boxed so
/// that the idle loop carries only its own state: 1 960 B in a test build,
/// 2 536 B with them inline. A pump that outgrows the bound should box
/// what it added, not raise it.
#[actix::test]
async fn an_idle_pump_task_stays_small() {
    const PUMP_FUTURE_BOUND: usize = 2_250;
    let rig = rig().await;
    let (_stop, stop) = tokio::sync::watch::channel(false);
    let cx = super::context::PumpContext {
        key: rig.key.clone(),
        tp: rig.tp.clone(),
        source: Arc::new(rig.source.clone()),
        destination: Arc::new(rig.dest.clone()),
        coordinator: rig.coordinator.clone(),
        progress: Default::default(),
        stop,
        support_unclean_leader_election: false,
        on_aligned: None,
        may_copy: None,
        on_healthy: None,
        history: None,
    };
    let size = std::mem::size_of_val(&pump::run(cx));
    println!("pump task future: {size} B");
    assert!(size <= PUMP_FUTURE_BOUND, "pump future {size} B");
}

fn run(source_start: i64, destination_start: i64, length: i64) -> OffsetMapRun {
    OffsetMapRun {
        source_start,
        destination_start,
        length,
    }
}

/// Records written to the log from entry `from` on.
fn written_since(log: &MemLog, from: usize) -> Vec<kmirror_events::Record> {
    log.entries()[from..]
        .iter()
        .map(|e| e.record.clone())
        .collect()
}

/// A caught-up partition's next record waits on no log write of its own:
/// the run it opens and the epoch it was written in are recorded at
/// alignment, so all it causes is its background checkpoint. (10 000
/// idle partitions fed a record now and then each paid two flushes
/// before.)
#[actix::test]
async fn an_idle_partitions_next_record_waits_on_no_log_write() {
    use kmirror_events::Record;
    let rig = rig().await;
    let actor = rig.start(RetryPolicy::default());
    eventually("the run and the epoch recorded ahead", async || {
        let image = rig.image().await;
        image.offset_runs(&rig.key) == vec![run(0, 0, 0)]
            && image.source_epochs(&rig.key).epoch_at(0) == Some(0)
    })
    .await;
    let before = rig.log.entries().len();
    rig.append(1, 0);
    eventually("the record's checkpoint", async || {
        rig.image().await.offset_runs(&rig.key) == vec![run(0, 0, 1)]
    })
    .await;
    // (The pump's producer and MIRRORING may land after the wait above.)
    let written: Vec<_> = written_since(&rig.log, before)
        .into_iter()
        .filter(|r| matches!(r, Record::OffsetMapRun(..) | Record::SourceEpochs(..)))
        .collect();
    assert!(
        matches!(written.as_slice(), [Record::OffsetMapRun(_, Some(r))] if r.length == 1),
        "of runs and epochs, only the checkpoint: {written:?}"
    );
    actor.send(Shutdown).await.unwrap();
}

/// An epoch recorded ahead that the next record proves wrong (a leader
/// elected between alignment and the record) is replaced before that
/// record is produced. (A run opened ahead that a gap proves wrong:
/// `cursor::tests::a_run_opened_ahead_gives_way_to_the_run_a_gap_opens`.)
#[actix::test]
async fn an_epoch_recorded_ahead_gives_way_to_the_one_the_next_record_shows() {
    let rig = rig().await;
    let actor = rig.start(RetryPolicy::default());
    eventually("the run recorded ahead", async || {
        rig.image().await.offset_runs(&rig.key) == vec![run(0, 0, 0)]
    })
    .await;
    let epoch = rig.source.elect_leader(&rig.tp);
    rig.append(2, 0);
    eventually("2 records checkpointed", async || {
        rig.image().await.offset_runs(&rig.key) == vec![run(0, 0, 2)]
    })
    .await;
    let image = rig.image().await;
    assert_eq!(
        image.source_epochs(&rig.key).entries,
        vec![kmirror_events::EpochEntry {
            epoch,
            start_offset: 0
        }],
        "the new leader's epoch, not the guessed one"
    );
    assert_eq!(
        (image.translate(&rig.key, 0), image.translate(&rig.key, 1)),
        (Translation::Exact(0), Translation::Exact(1))
    );
    actor.send(Shutdown).await.unwrap();
}
