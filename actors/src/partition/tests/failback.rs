//! A partition a delta failback took back: its map is the forward
//! mirror's turned around, and the copy resumes at the plan's `copy_start`
//! even where that map ends before it.

use kmirror_events::{Command, FailbackMode, FailbackPlan};

use super::stopped::stopped;
use super::*;

/// The delta plan: the copy resumes at 8, where the destination ends at 6.
fn plan() -> FailbackPlan {
    FailbackPlan {
        forward_mirror: "back".into(),
        mode: FailbackMode::Delta,
        destination_position: 6,
        source_position: 8,
        divergent_start: 6,
        divergent_end: 6,
        copy_start: 8,
        copy_end: 8,
        quarantine_topic: None,
        reason: None,
    }
}

/// The forward mirror copied this partition's source 0..6 to 0..6 and
/// stopped at 8 (its last two records, on the source only, were a
/// divergent tail an earlier failback quarantined: a hole in its map, no
/// run). The delta plan says the copy resumes at 8.
async fn failed_back_at_eight(rig: &Rig) {
    rig.append(8, 0);
    for i in 0..6 {
        rig.dest.foreign_write(
            &rig.tp,
            record(Some(&format!("k{i}")), Some(&format!("v{i}")), 0),
        );
    }
    rig.record_runs(vec![run(0, 0, 6)]).await;
    rig.coordinator
        .send(crate::coordinator::Execute::new(
            Command::RecordFailbackPlan {
                key: rig.key.clone(),
                plan: plan(),
            },
        ))
        .await
        .unwrap()
        .unwrap();
}

/// Before, the copy resumed where the turned-around map ended (6) and
/// wrote the quarantined records 6 and 7 into the destination.
#[actix::test]
async fn the_copy_resumes_at_the_plans_copy_start_not_where_the_turned_map_ends() {
    let rig = rig().await;
    failed_back_at_eight(&rig).await;
    let actor = rig.start(fast_retry());
    eventually("MIRRORING", async || {
        let s = state(&actor).await;
        s.state == PartitionState::Mirroring && s.progress.source_offset == 8
    })
    .await;
    rig.append(2, 8);
    eventually("2 more", async || rig.dest.records(&rig.tp).len() == 8).await;
    let expected: Vec<String> = [0, 1, 2, 3, 4, 5, 8, 9]
        .iter()
        .map(|i| format!("v{i}"))
        .collect();
    assert_eq!(rig.values(), expected);
    eventually("8 translated to 6, once checkpointed", async || {
        rig.image().await.offset_map(&rig.key).translate(8) == Translation::Exact(6)
    })
    .await;
    actor.send(Shutdown).await.unwrap();
}

/// Stopped before copying anything, the partition records where the plan
/// put it, with the source's leader epoch there: a failback later can go
/// by delta. Before, the epoch was −1 (the seeded map has no recorded
/// epochs), and the next failback had to copy everything again.
#[actix::test]
async fn a_stop_before_any_copy_records_the_plans_position_with_its_epoch() {
    let rig = rig().await;
    failed_back_at_eight(&rig).await;
    let actor = rig.start(fast_retry());
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    stopped(&actor).await;
    let lme = rig.last_mirror_epochs().await;
    assert_eq!((lme.source_offset, lme.destination_end_offset), (8, 6));
    assert!(lme.source_leader_epoch >= 0, "{lme:?}");
}

/// Stopped while FAILED (the source unreachable, the disaster a failover
/// is for): the stop goes by `stopped_position`, and records the same
/// position a pump's stop does.
#[actix::test]
async fn a_stop_of_a_failed_partition_records_the_plans_position_too() {
    let rig = rig().await;
    failed_back_at_eight(&rig).await;
    rig.source.set_unreachable(true);
    let actor = rig.start(fast_retry());
    eventually("FAILED", async || {
        state(&actor).await.state == PartitionState::Failed
    })
    .await;
    stopped(&actor).await;
    let lme = rig.last_mirror_epochs().await;
    assert_eq!((lme.source_offset, lme.destination_end_offset), (8, 6));
}

/// The floor lasts until something is copied after the plan: from then on
/// the map says where the copy is, even cut back below `copy_start` by a
/// repair of its own (an unclean election on the source), whose records
/// below it must be copied again.
#[test]
fn the_plans_floor_ends_once_the_map_reaches_past_the_plan() {
    let view = |runs: Vec<OffsetMapRun>, holes| crate::coordinator::PartitionView {
        state: None,
        runs,
        holes,
        producer: None,
        source_epochs: Default::default(),
        failback: Some(plan()),
    };
    assert_eq!(view(vec![run(0, 0, 6)], vec![]).failback_floor(), Some(8));
    // Opened ahead at the plan's position, nothing in it yet.
    assert_eq!(
        view(vec![run(0, 0, 6), run(8, 6, 0)], vec![]).failback_floor(),
        Some(8)
    );
    assert_eq!(
        view(vec![run(0, 0, 6), run(8, 6, 3)], vec![]).failback_floor(),
        None
    );
    // Copied 8..11 to 6..9, then cut back to 7 by a repair: 6..9 a hole.
    let repaired = vec![kmirror_events::OffsetMapHole {
        destination_start: 6,
        length: 3,
    }];
    assert_eq!(view(vec![run(0, 0, 6)], repaired).failback_floor(), None);
}
