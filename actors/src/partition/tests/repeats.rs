//! A destination leader that forgot kmirror's producer (its state expired:
//! `producer.id.expiration.ms` counts from record timestamps, which a
//! mirror keeps) and so took a retry twice. The repeat must not be taken
//! for the next source records: that would skip as many of them.

use super::*;

/// Every source offset below `n` translates exactly to a destination
/// record holding its value.
async fn every_record_mapped_once(rig: &Rig, n: i64) -> Result<(), String> {
    let image = rig.image().await;
    let records = rig.dest.records(&rig.tp);
    for source in 0..n {
        let Translation::Exact(d) = image.translate(&rig.key, source) else {
            return Err(format!("source offset {source} is not mapped"));
        };
        let value = records
            .iter()
            .find(|r| r.offset == d)
            .and_then(|r| r.record.value.clone());
        if value.as_deref() != Some(format!("v{source}").as_bytes()) {
            return Err(format!(
                "source offset {source} maps to {d}, holding {value:?}"
            ));
        }
    }
    Ok(())
}

/// Source offsets 0 and 1 copied and recorded; source offset 2 landed
/// twice (destination 2 and 3) while the acknowledgements were held, and
/// the actor went away before any came back, so nothing recorded it.
async fn repeat_above_the_map() -> Rig {
    let rig = rig().await;
    rig.append(2, 0);
    let actor = rig.start(fast_retry());
    eventually("2 records mapped", async || {
        every_record_mapped_once(&rig, 2).await.is_ok()
    })
    .await;
    rig.dest.hold_acks(true);
    rig.dest.duplicate_next_produce(&rig.tp);
    rig.append(1, 2);
    eventually("the repeat landed", async || {
        rig.dest.records(&rig.tp).len() == 4
    })
    .await;
    // The acknowledgement comes only once the shutdown began: it stops the
    // pump, and nothing records it.
    let shutdown = actor.send(Shutdown);
    rig.dest.hold_acks(false);
    shutdown.await.unwrap();
    rig
}

/// The acknowledgement names the second copy: the pump re-aligns (it is
/// not another writer's), the repeat becomes a hole, and the copy goes on
/// after it. Before, the partition failed for good as a foreign write.
#[actix::test]
async fn a_retry_taken_twice_is_a_hole_and_the_copy_goes_on() {
    let rig = rig().await;
    rig.append(2, 0);
    let actor = rig.start(fast_retry());
    eventually("2 records", async || rig.dest.records(&rig.tp).len() == 2).await;
    rig.dest.duplicate_next_produce(&rig.tp);
    rig.append(3, 2);
    eventually("every record mapped once", async || {
        every_record_mapped_once(&rig, 5).await.is_ok()
    })
    .await;
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
    let h = history(&rig.log, &rig.key);
    assert!(
        h.iter()
            .any(|(s, _, attempt)| *s == PartitionState::Failed && *attempt > 0),
        "a retryable failure: {h:?}"
    );
    // It goes on copying after the hole.
    rig.append(2, 5);
    eventually("7 records mapped", async || {
        every_record_mapped_once(&rig, 7).await.is_ok()
    })
    .await;
    actor.send(Shutdown).await.unwrap();
}

/// The next alignment finds both copies above the recorded map, all
/// kmirror's ([`repeat_above_the_map`]). Before, it stretched the
/// run over both, so source offsets 3 and 4 were never copied.
#[actix::test]
async fn a_repeat_above_the_map_at_restart_is_never_taken_for_the_next_records() {
    let rig = repeat_above_the_map().await;
    rig.append(2, 3);
    let actor = rig.start(fast_retry());
    eventually("every record mapped once", async || {
        every_record_mapped_once(&rig, 5).await.is_ok()
    })
    .await;
    if let Err(e) = every_record_mapped_once(&rig, 5).await {
        panic!("{e}");
    }
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
    actor.send(Shutdown).await.unwrap();
}

/// A stop that finds the repeat (the partition never ran again) records
/// the position before it, and the repeat as a hole: LastMirrorEpochs
/// counts source offset 2 once. Before, the stop stretched the map over
/// both copies (source offset 4, one past the source's end).
#[actix::test]
async fn a_stop_ends_before_a_repeat() {
    let rig = repeat_above_the_map().await;
    let actor = rig.start_desiring(fast_retry(), PartitionState::Paused);
    super::stopped::stopped(&actor).await;
    let lme = rig.last_mirror_epochs().await;
    assert_eq!(
        (lme.source_offset, lme.destination_end_offset),
        (3, 4),
        "source offset 2 copied once, at destination offset 2"
    );
    let image = rig.image().await;
    assert_eq!(image.translate(&rig.key, 2), Translation::Exact(2));
    let holes: Vec<_> = image.offset_map(&rig.key).holes().copied().collect();
    assert_eq!(
        holes,
        vec![kmirror_events::OffsetMapHole {
            destination_start: 3,
            length: 1
        }]
    );
}

/// A batch taken in place of a refused one: the first batch of a fresh
/// producer fails, the one sent behind it lands at its offset (the leader
/// holds no state for the id yet, and Kafka takes any sequence then; see
/// `protocol_idempotence.rs`). The next alignment makes it a hole and
/// copies both again. Before, the run was stretched over it: source
/// offset 0 translated to a copy of source offset 1, and was never copied.
#[actix::test]
async fn a_batch_in_place_of_a_refused_one_is_a_hole() {
    let rig = rig().await;
    rig.dest.hold_acks(true);
    rig.dest.fail_next_produce(
        &rig.tp,
        KafkaError::Unknown("injected: not enough replicas".into()),
    );
    rig.append(1, 0);
    let actor = rig.start(fast_retry());
    // The first produce is tried (and refused) meanwhile; its answer waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rig.dest.records(&rig.tp).is_empty());
    rig.append(1, 1);
    eventually("the batch behind it landed", async || {
        rig.dest.records(&rig.tp).len() == 1
    })
    .await;
    rig.dest.hold_acks(false);
    eventually("every record mapped once", async || {
        every_record_mapped_once(&rig, 2).await.is_ok()
    })
    .await;
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
    actor.send(Shutdown).await.unwrap();
}
