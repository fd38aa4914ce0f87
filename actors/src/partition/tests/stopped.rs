//! A stop of a partition no pump of this process left knowingly (PAUSED
//! or FAILED since start-up, or its pump failed): what LastMirrorEpochs
//! records comes from the map, the destination and the recorded source
//! epochs (`position::stopped_position`). A failover must not wait for a
//! sick partition to heal, and what it records is what a failback trusts.

use super::*;

/// The log records 3 of the 6 records copied before a crash (the last
/// checkpoint was lost with it).
async fn crashed_after_copying_six(rig: &Rig) {
    rig.append(6, 0);
    let actor = rig.start(fast_retry());
    eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
    actor.send(Shutdown).await.unwrap();
    rig.record_runs(vec![run(0, 0, 3)]).await;
}

/// Asks for STOPPED and waits for it.
pub(super) async fn stopped(actor: &Started) {
    actor.send(Desire(PartitionState::Stopped)).await.unwrap();
    eventually("STOPPED", async || {
        state(actor).await.state == PartitionState::Stopped
    })
    .await;
}

/// Another producer wrote to the mirror partition after kmirror's
/// unrecorded appends: the partition fails for good, and its stop still
/// completes, at the last record kmirror wrote — not over the intruder's
/// (which would tell a failback the intruder's record was the copy of the
/// source's seventh). Before, the stop either stretched the map over the
/// foreign record (source offset 7) or, once that failed, retried forever.
#[actix::test]
async fn a_stop_after_a_foreign_write_ends_at_kmirrors_last_record() {
    let rig = rig().await;
    crashed_after_copying_six(&rig).await;
    rig.dest
        .foreign_write(&rig.tp, record(None, Some("foreign"), 0));
    rig.append(2, 6);
    let actor = rig.start(fast_retry());
    let error = failed_for_good(&actor).await;
    assert!(error.contains("producer id -1"), "{error}");
    stopped(&actor).await;
    let image = rig.image().await;
    let lme = image.last_mirror_epochs(&rig.key).unwrap();
    assert_eq!((lme.source_offset, lme.destination_end_offset), (6, 6));
    assert_eq!(
        image.offset_map(&rig.key).recorded_destination_end(),
        6,
        "the map records kmirror's appends as LastMirrorEpochs counts them"
    );
    assert_eq!(rig.dest.records(&rig.tp).len(), 7, "nothing appended");
}

/// Records lost on the destination (an unclean election there): FAILED
/// for good, and the stop completes with the destination's end, below the
/// map's, so a failback refuses a delta. Before, it retried forever.
#[actix::test]
async fn a_stop_after_records_were_lost_on_the_destination_completes() {
    let rig = rig().await;
    rig.append(6, 0);
    let actor = rig.start(fast_retry());
    eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
    actor.send(Shutdown).await.unwrap();
    rig.dest.truncate_to(&rig.tp, 4);
    let actor = rig.start(fast_retry());
    failed_for_good(&actor).await;
    stopped(&actor).await;
    let image = rig.image().await;
    let lme = image.last_mirror_epochs(&rig.key).unwrap();
    assert_eq!((lme.source_offset, lme.destination_end_offset), (6, 4));
    assert_ne!(
        image.offset_map(&rig.key).recorded_destination_end(),
        lme.destination_end_offset
    );
}

/// kmirror's own unrecorded appends, the source down when the stop comes
/// (the disaster a failover is for): the stop records the map stretched
/// over them, as a pump's alignment would, and the source leader epoch of
/// the last mirrored record from what was recorded. Before, the map kept
/// 3 while LastMirrorEpochs said 6 (a failback then refused delta), and
/// the epoch was −1 (a failback then skipped its divergence check).
#[actix::test]
async fn a_stop_with_the_source_down_records_the_map_and_the_epoch_it_mirrored() {
    let rig = rig().await;
    rig.source.elect_leader(&rig.tp);
    rig.source.elect_leader(&rig.tp);
    crashed_after_copying_six(&rig).await;
    rig.source.set_unreachable(true);
    let actor = rig.start(fast_retry());
    eventually("FAILED", async || {
        state(&actor).await.state == PartitionState::Failed
    })
    .await;
    stopped(&actor).await;
    let image = rig.image().await;
    let lme = image.last_mirror_epochs(&rig.key).unwrap();
    assert_eq!(
        (
            lme.source_offset,
            lme.destination_end_offset,
            lme.source_leader_epoch
        ),
        (6, 6, 2),
        "{lme:?}"
    );
    assert_eq!(image.offset_map(&rig.key).recorded_destination_end(), 6);
}

/// A partition restarted and stopped before it copied anything new: its
/// last mirrored record's epoch is the recorded one. Before, it was 0
/// (`Progress`'s default), and a failback asked the old source where
/// epoch 0 ends and refused a delta as diverged.
#[actix::test]
async fn a_stop_before_any_new_copy_records_the_epoch_last_mirrored() {
    let rig = rig().await;
    rig.source.elect_leader(&rig.tp);
    rig.source.elect_leader(&rig.tp);
    rig.append(4, 0);
    let actor = rig.start(fast_retry());
    eventually("4 records", async || rig.dest.records(&rig.tp).len() == 4).await;
    actor.send(Shutdown).await.unwrap();
    let actor = rig.start(fast_retry());
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    stopped(&actor).await;
    let lme = rig.last_mirror_epochs().await;
    assert_eq!(
        (lme.source_offset, lme.source_leader_epoch),
        (4, 2),
        "{lme:?}"
    );
}
