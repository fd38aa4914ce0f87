//! Records kmirror did not write, found in a mirror partition at alignment.

use super::*;

/// A run opened ahead (length 0, recorded before anything is produced into
/// it) whose copy never started — its sink did not open, or the process
/// died before the producer was recorded — while someone else wrote into
/// the destination partition. No mirror producer is recorded, so nothing
/// above the recorded end can be kmirror's: the partition fails, rather
/// than stretching the run over the intruder's records and skipping as
/// many source records.
#[actix::test]
async fn records_above_a_run_opened_ahead_with_no_producer_recorded_are_foreign() {
    let rig = rig().await;
    rig.record_runs(vec![run(0, 0, 0)]).await;
    for _ in 0..2 {
        rig.dest
            .foreign_write(&rig.tp, record(None, Some("intruder"), 1));
    }
    rig.append(3, 0);
    let actor = rig.start(fast_retry());
    let error = failed_for_good(&actor).await;
    assert!(error.contains("another producer"), "{error}");
    assert_eq!(
        rig.dest.records(&rig.tp).len(),
        2,
        "nothing of ours appended"
    );
    // Its stop completes and records that nothing was mirrored. Before, it
    // stretched the run opened ahead over the intruder's two records
    // (source offset 2).
    super::stopped::stopped(&actor).await;
    let lme = rig.last_mirror_epochs().await;
    assert_eq!((lme.source_offset, lme.destination_end_offset), (0, 0));
}
