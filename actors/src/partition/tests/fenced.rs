//! A clustered node's data path on a fenced destination: the abort markers
//! a takeover leaves become holes at alignment, and a produce refused for
//! lost ownership stops the partition without writing state, and a fence
//! kept alive past the producer expiry leaves a hole of its own.

use super::*;
use kmirror_events::OffsetMapHole;

/// The fence producer id of the in-memory destination's partitions.
const FENCE_PID: i64 = 900;

fn offsets(rig: &Rig) -> Vec<(i64, String)> {
    rig.dest
        .records(&rig.tp)
        .iter()
        .map(|r| {
            let v = String::from_utf8(r.record.value.clone().unwrap().to_vec()).unwrap();
            (r.offset, v)
        })
        .collect()
}

#[actix::test]
async fn a_takeovers_marker_becomes_a_hole_and_offsets_stay_exact() {
    let rig = rig().await;
    rig.dest.fenced(FENCE_PID);
    rig.append(3, 0);
    let first = rig.start(fast_retry());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    first.send(Shutdown).await.unwrap();
    // The next owner fences: one abort marker at offset 3.
    rig.dest.fence(vec![rig.tp.clone()]).await.unwrap();
    rig.append(2, 3);
    let second = rig.start(fast_retry());
    eventually("5 records", async || rig.dest.records(&rig.tp).len() == 5).await;
    eventually("MIRRORING", async || {
        state(&second).await.state == PartitionState::Mirroring
    })
    .await;
    let image = assert_one_marker_at_3(&rig, "the takeover").await;
    for (source, destination) in [(0, 0), (2, 2), (3, 4), (4, 5)] {
        assert_eq!(
            image.translate(&rig.key, source),
            Translation::Exact(destination),
            "source offset {source}"
        );
    }
    let map = image.offset_map(&rig.key);
    assert!(map.check().is_ok(), "{:?}", map.check());
}

#[actix::test]
async fn a_partition_fenced_before_it_ever_produced_aligns() {
    let rig = rig().await;
    rig.dest.fenced(FENCE_PID);
    // Fenced twice (two takeovers) before any copy: two markers, no producer recorded.
    rig.dest.fence(vec![rig.tp.clone()]).await.unwrap();
    rig.dest.fence(vec![rig.tp.clone()]).await.unwrap();
    rig.append(3, 0);
    let actor = rig.start(fast_retry());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    let got = offsets(&rig);
    println!("destination after two fences: {got:?}");
    assert_eq!(got[0], (2, "v0".to_string()));
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
    eventually("lengths checkpointed", async || {
        rig.image().await.translate(&rig.key, 2) == Translation::Exact(4)
    })
    .await;
    let image = rig.image().await;
    assert_eq!(image.translate(&rig.key, 0), Translation::Exact(2));
    assert_eq!(image.translate(&rig.key, 2), Translation::Exact(4));
    assert!(
        image.producer(&rig.key).is_some(),
        "the pump records its producer as before"
    );
}

#[actix::test]
async fn a_foreign_record_below_the_markers_still_fails_the_partition() {
    let rig = rig().await;
    rig.dest.fenced(FENCE_PID);
    rig.dest
        .foreign_write(&rig.tp, record(None, Some("intruder"), 1));
    rig.dest.fence(vec![rig.tp.clone()]).await.unwrap();
    rig.append(1, 0);
    let actor = rig.start(fast_retry());
    assert!(failed_for_good(&actor).await.contains("another producer"));
}

#[actix::test]
async fn lost_ownership_stops_the_partition_without_writing_state() {
    let rig = rig().await;
    rig.dest.fenced(FENCE_PID);
    rig.append(2, 0);
    let actor = rig.start(fast_retry());
    eventually("2 records", async || rig.dest.records(&rig.tp).len() == 2).await;
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rig.log.entries().len();
    rig.dest.fail_next_produce(
        &rig.tp,
        KafkaError::Fenced {
            resource: rig.tp.to_string(),
            reason: "INVALID_PRODUCER_EPOCH".into(),
        },
    );
    rig.append(1, 2);
    eventually("the actor stopped", async || !actor.connected()).await;
    let after = rig.log.entries();
    println!(
        "log records before the fenced produce: {before}, after: {}",
        after.len()
    );
    assert_eq!(
        after.len(),
        before,
        "no state written after losing the partition"
    );
    assert_eq!(rig.dest.records(&rig.tp).len(), 2);
    let h = history(&rig.log, &rig.key);
    assert!(
        h.iter().all(|s| s.0 != PartitionState::Failed),
        "not FAILED: {h:?}"
    );
}

/// A partition the new owner finds PAUSED and is told to stop never runs a
/// pump here: its position comes from the map and the destination, whose
/// end is now the fence's marker — which belongs to no source offset.
#[actix::test]
async fn a_paused_partition_stops_over_the_new_owners_marker() {
    let rig = rig().await;
    rig.dest.fenced(FENCE_PID);
    rig.append(3, 0);
    let first = rig.start(fast_retry());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    first.send(Desire(PartitionState::Paused)).await.unwrap();
    eventually("PAUSED", async || {
        state(&first).await.state == PartitionState::Paused
    })
    .await;
    first.send(Shutdown).await.unwrap();
    rig.dest.fence(vec![rig.tp.clone()]).await.unwrap();
    let second = rig.start_desiring(fast_retry(), PartitionState::Stopped);
    eventually("STOPPED", async || {
        state(&second).await.state == PartitionState::Stopped
    })
    .await;
    let lme = rig
        .image()
        .await
        .last_mirror_epochs(&rig.key)
        .cloned()
        .expect("LastMirrorEpochs recorded");
    assert_eq!(
        (lme.source_offset, lme.destination_end_offset),
        (3, 4),
        "three records mirrored; the destination ends after the marker"
    );
}

/// A clustered node keeps its fence alive: records stamped long ago (as
/// mirrored ones may be) would let the leader forget its producer at the
/// next check, so the pump writes a marker as soon as nothing is in flight
/// and records it as a one-offset hole before copying on; the next is due
/// a check interval later at the earliest.
#[actix::test]
async fn an_old_stamp_is_fenced_again_and_the_marker_becomes_a_hole() {
    let rig = rig().await;
    rig.dest.fenced(FENCE_PID);
    rig.dest.keep_alive(crate::kafka::fence::KeepAlive {
        expiration: Duration::from_secs(60),
        check_interval: Duration::from_secs(30),
        transactional_expiration: Duration::from_secs(3600),
    });
    rig.append(3, 0);
    let actor = rig.start(fast_retry());
    let end = async || rig.dest.settled_bounds(&rig.tp).await.unwrap().end;
    eventually("3 records and a marker", async || end().await == 4).await;
    rig.append(2, 3);
    eventually("5 records", async || rig.dest.records(&rig.tp).len() == 5).await;
    let image = assert_one_marker_at_3(&rig, "a re-fence").await;
    assert_eq!(image.translate(&rig.key, 2), Translation::Exact(2));
    assert_eq!(image.translate(&rig.key, 3), Translation::Exact(4));
    let map = image.offset_map(&rig.key);
    assert!(map.check().is_ok(), "{:?}", map.check());
    assert_eq!(end().await, 6, "no second marker yet");
    let progress = state(&actor).await.progress;
    assert_eq!(progress.refences, 1);
    assert!(!progress.offsets_identical);
}

/// Five records copied around one marker at destination offset 3 (a
/// takeover's or a re-fence's): offsets 0, 1, 2, 4, 5, the offset map's
/// only hole {3, 1}, and source 4 translated to destination 5. Returns the
/// image it read.
async fn assert_one_marker_at_3(rig: &Rig, after: &str) -> Arc<MirrorStateImage> {
    let got = offsets(rig);
    println!("destination after {after}: {got:?}");
    assert_eq!(
        got.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        vec![0, 1, 2, 4, 5],
        "the marker of {after} keeps offset 3"
    );
    eventually("lengths checkpointed", async || {
        rig.image().await.translate(&rig.key, 4) == Translation::Exact(5)
    })
    .await;
    let image = rig.image().await;
    let holes: Vec<OffsetMapHole> = image.offset_map(&rig.key).holes().copied().collect();
    assert_eq!(
        holes,
        vec![OffsetMapHole {
            destination_start: 3,
            length: 1
        }],
        "one marker after {after}"
    );
    image
}
