//! Unclean leader elections on the in-memory source: a source that is now
//! shorter than the mirrored position, one whose new leader has already
//! grown past it with other records (only its leader epochs show that), and
//! a clean leader change, which is no divergence. Detected at alignment
//! (OffsetForLeaderEpoch for the last mirrored record's epoch) and while
//! copying (a fetch's DivergingEpoch).

use super::*;

/// Six records in two batches (offsets 0..4 and 4..6, leader epoch 0),
/// mirrored.
async fn mirrored_six(ule: bool) -> (Rig, Started) {
    let mut rig = rig().await;
    rig.ule = ule;
    rig.append(4, 0);
    rig.append(2, 4);
    let actor = rig.start(fast_retry());
    eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    (rig, actor)
}

/// [`mirrored_six`], stopped; then the source's log ends at 4, in the same
/// leader epoch (what the offsets alone see of an unclean election).
async fn mirrored_six_then_truncated(ule: bool) -> Rig {
    let (rig, actor) = mirrored_six(ule).await;
    actor.send(Shutdown).await.unwrap();
    rig.source.truncate_to(&rig.tp, 4);
    rig
}

/// The source's new leader held offsets 0..4 only and has since taken five
/// records of its own (v100..v104): its log ends at 9, past the mirrored 6.
fn diverge_past_the_mirrored_position(rig: &Rig) {
    rig.source.unclean_election(&rig.tp, 4);
    rig.append(5, 100);
}

async fn failed_for_truncation(actor: &Started) -> String {
    let error = failed_for_good(actor).await;
    assert!(
        error.starts_with("Detected log truncation during mirroring")
            && error.contains("below the mirrored position 6")
            && error.ends_with(
                "This implies unclean leader election in source cluster, but mirror.support.unclean.leader.election is disabled."
            ),
        "{error}"
    );
    error
}

/// The repair: source offsets 0..4 kept their destination offsets, the
/// divergent 4..6 stay on the destination as a hole, the new leader's
/// records follow them and translate exactly. Stops the actor (so the map
/// is checkpointed).
async fn repaired(rig: &Rig, actor: Started) {
    eventually("11 records", async || rig.dest.records(&rig.tp).len() == 11).await;
    eventually("MIRRORING, caught up", async || {
        let s = state(&actor).await;
        s.state == PartitionState::Mirroring && s.progress.lag() == 0
    })
    .await;
    actor.send(Shutdown).await.unwrap();
    assert_eq!(
        rig.values(),
        ["v0", "v1", "v2", "v3", "v4", "v5", "v100", "v101", "v102", "v103", "v104"]
    );
    let image = rig.image().await;
    assert_eq!(image.translate(&rig.key, 3), Translation::Exact(3));
    for offset in 4..9 {
        assert_eq!(
            image.translate(&rig.key, offset),
            Translation::Exact(offset + 2),
            "the new leader's offset {offset}"
        );
    }
    let gaps = image.gaps(&rig.key);
    assert_eq!(
        gaps.iter()
            .map(|g| (g.source_start, g.source_end))
            .collect::<Vec<_>>(),
        [(4, 6)]
    );
    assert!(
        gaps[0].reason.contains("destination offsets 4..6"),
        "{gaps:?}"
    );
    let holes: Vec<_> = image.offset_map(&rig.key).holes().copied().collect();
    assert_eq!(
        holes,
        [kmirror_events::OffsetMapHole {
            destination_start: 4,
            length: 2
        }]
    );
    // The new leader's epoch is what later fetches are checked against.
    let epochs = image.source_epochs(&rig.key);
    assert_eq!(epochs.epoch_at(3), Some(0));
    assert_eq!(epochs.epoch_at(8), Some(1));
}

#[actix::test]
async fn a_new_leader_already_past_the_mirrored_position_is_caught_at_alignment() {
    for ule in [false, true] {
        let (rig, actor) = mirrored_six(ule).await;
        actor.send(Shutdown).await.unwrap();
        // While kmirror is down. The source now ends at 9, past the
        // mirrored 6: only the leader epochs tell its 4..9 are not ours.
        diverge_past_the_mirrored_position(&rig);
        let actor = rig.start(fast_retry());
        if !ule {
            failed_for_truncation(&actor).await;
            assert_eq!(rig.dest.records(&rig.tp).len(), 6, "nothing copied");
            continue;
        }
        repaired(&rig, actor).await;
        let states: Vec<_> = history(&rig.log, &rig.key).iter().map(|h| h.0).collect();
        assert!(!states.contains(&PartitionState::Failed), "{states:?}");
    }
}

#[actix::test]
async fn a_diverging_epoch_is_caught_by_the_fetch_while_mirroring() {
    use PartitionState as S;
    for ule in [false, true] {
        let (rig, actor) = mirrored_six(ule).await;
        // While the pump fetches at 6 with last fetched epoch 0: the
        // source's leader answers that epoch 0 ends at 4 on its log.
        diverge_past_the_mirrored_position(&rig);
        if !ule {
            failed_for_truncation(&actor).await;
            let states: Vec<_> = history(&rig.log, &rig.key).iter().map(|h| h.0).collect();
            assert_eq!(states, [S::LogAlignment, S::Mirroring, S::Failed]);
            assert_eq!(rig.dest.records(&rig.tp).len(), 6, "nothing copied");
            continue;
        }
        repaired(&rig, actor).await;
        let states: Vec<_> = history(&rig.log, &rig.key).iter().map(|h| h.0).collect();
        assert_eq!(
            states,
            [S::LogAlignment, S::Mirroring, S::UleRecovery, S::Mirroring],
            "the fetch saw it while MIRRORING"
        );
    }
}

#[actix::test]
async fn a_clean_source_leader_change_is_no_divergence() {
    let rig = rig().await;
    rig.append(3, 0);
    let actor = rig.start(fast_retry());
    eventually("3 records", async || rig.dest.records(&rig.tp).len() == 3).await;
    // The leader moves (the pump follows it, sending its last fetched
    // epoch 0 to the new leader) and writes in epoch 1.
    rig.source.fail_next_fetch(
        &rig.tp,
        FetchError::LeaderChanged {
            error: kafka_protocol::ResponseError::NotLeaderOrFollower,
            new_leader: Some((2, 1)),
            offset: 3,
        },
    );
    assert_eq!(rig.source.elect_leader(&rig.tp), 1);
    rig.append(3, 3);
    eventually("6 records", async || rig.dest.records(&rig.tp).len() == 6).await;
    actor.send(Shutdown).await.unwrap();
    let epochs = rig.image().await.source_epochs(&rig.key);
    assert_eq!(
        epochs
            .entries
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect::<Vec<_>>(),
        [(0, 0), (1, 3)],
        "the epochs of the mirrored records"
    );
    // Aligned again after a restart: the leader's epoch 1 reaches past 6.
    rig.append(1, 6);
    let actor = rig.start(fast_retry());
    eventually("7 records", async || rig.dest.records(&rig.tp).len() == 7).await;
    assert_eq!(rig.values(), ["v0", "v1", "v2", "v3", "v4", "v5", "v6"]);
    let s = state(&actor).await;
    assert_eq!((s.state, s.error), (PartitionState::Mirroring, None));
    assert!(rig.image().await.gaps(&rig.key).is_empty());
    let states: Vec<_> = history(&rig.log, &rig.key).iter().map(|h| h.0).collect();
    assert!(
        !states.contains(&PartitionState::Failed) && !states.contains(&PartitionState::UleRecovery),
        "{states:?}"
    );
}

#[actix::test]
async fn a_truncated_source_fails_unless_unclean_election_is_supported() {
    // With leader epochs the source's answer for the last mirrored epoch
    // shows it; a source without them (before KIP-320) leaves the offsets.
    for (ule, epochs) in [(false, true), (true, true), (false, false), (true, false)] {
        // An unclean election on the source: it now ends at 4 (below the
        // mirrored 6); later it takes new records at offsets 4 and 5.
        let rig = mirrored_six_then_truncated(ule).await;
        if !epochs {
            rig.source.without_epochs();
        }
        let actor = rig.start(fast_retry());
        if !ule {
            eventually("FAILED", async || {
                state(&actor).await.state == PartitionState::Failed
            })
            .await;
            let s = state(&actor).await;
            assert_eq!(s.retry_attempt, -1);
            assert!(s
                .error
                .unwrap()
                .contains("mirror.support.unclean.leader.election is disabled"));
            continue;
        }
        eventually("divergence recorded", async || {
            !rig.image().await.gaps(&rig.key).is_empty()
        })
        .await;
        rig.append(2, 100);
        eventually("8 records", async || rig.dest.records(&rig.tp).len() == 8).await;
        assert_eq!(
            rig.values(),
            ["v0", "v1", "v2", "v3", "v4", "v5", "v100", "v101"]
        );
        eventually("MIRRORING", async || {
            state(&actor).await.state == PartitionState::Mirroring
        })
        .await;
        actor.send(Shutdown).await.unwrap();
        let image = rig.image().await;
        assert_eq!(image.translate(&rig.key, 3), Translation::Exact(3));
        assert_eq!(
            image.translate(&rig.key, 4),
            Translation::Exact(6),
            "offset 4 is the new record"
        );
        let gap = &image.gaps(&rig.key)[0];
        assert_eq!((gap.source_start, gap.source_end), (4, 6));
        assert!(
            gap.reason.contains("destination offsets 4..6"),
            "{}",
            gap.reason
        );
    }
}

#[actix::test]
async fn an_unclean_election_repair_survives_the_next_alignment() {
    // The source now ends at 4; the destination keeps what it had at 4 and 5.
    let rig = mirrored_six_then_truncated(true).await;
    let actor = rig.start(fast_retry());
    eventually("repaired and MIRRORING", async || {
        !rig.image().await.gaps(&rig.key).is_empty()
            && state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    actor.send(Shutdown).await.unwrap();
    // Restarted before any new run exists: the kept records must not be
    // taken for source offsets 4 and 5, which the source now reuses.
    rig.append(2, 100);
    let actor = rig.start(fast_retry());
    eventually("8 records", async || rig.dest.records(&rig.tp).len() == 8).await;
    eventually("caught up", async || {
        state(&actor).await.progress.lag() == 0
    })
    .await;
    actor.send(Shutdown).await.unwrap();
    // Restarted after the next run exists: alignment must not stretch the
    // cut run back over the kept records either.
    rig.append(1, 102);
    let actor = rig.start(fast_retry());
    eventually("9 records", async || rig.dest.records(&rig.tp).len() == 9).await;
    eventually("MIRRORING, caught up", async || {
        let s = state(&actor).await;
        s.state == PartitionState::Mirroring && s.progress.lag() == 0
    })
    .await;
    assert_eq!(
        rig.values(),
        ["v0", "v1", "v2", "v3", "v4", "v5", "v100", "v101", "v102"]
    );
    let s = state(&actor).await;
    assert_eq!((s.retry_attempt, s.error), (0, None));
    actor.send(Shutdown).await.unwrap();
    let image = rig.image().await;
    assert_eq!(image.translate(&rig.key, 3), Translation::Exact(3));
    assert_eq!(image.translate(&rig.key, 4), Translation::Exact(6));
    assert_eq!(image.translate(&rig.key, 6), Translation::Exact(8));
}
