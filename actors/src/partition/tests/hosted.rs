//! A partition hosted away from its mirror's coordinator copies only once
//! the coordinator's shard, read to its end, still mirrors its topic
//! (`partition/hosted.rs`): its state may say MIRRORING (written first, so
//! a stop that reads it waits), its pump holds until then.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

#[actix::test]
async fn a_hosted_partition_copies_only_once_its_coordinator_still_mirrors_it() {
    let mut rig = rig().await;
    let mirroring = Arc::new(AtomicBool::new(false));
    let asked = Arc::new(AtomicUsize::new(0));
    rig.still_mirroring = Some({
        let (mirroring, asked) = (mirroring.clone(), asked.clone());
        Arc::new(move |_key| {
            asked.fetch_add(1, Ordering::SeqCst);
            let answer = mirroring.load(Ordering::SeqCst);
            Box::pin(async move { Ok(answer) })
        })
    });
    rig.append(4, 0);
    let actor = rig.start(fast_retry());
    eventually("asked", async || asked.load(Ordering::SeqCst) > 0).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
    assert!(rig.dest.records(&rig.tp).is_empty(), "nothing copied");

    // Asked again while it waits: found mirrored, it copies.
    mirroring.store(true, Ordering::SeqCst);
    eventually("4 records copied", async || {
        rig.dest.records(&rig.tp).len() == 4
    })
    .await;
    assert_eq!(state(&actor).await.state, PartitionState::Mirroring);
}

#[actix::test]
async fn a_hosted_partition_whose_topic_was_stopped_meanwhile_stops_without_copying() {
    let mut rig = rig().await;
    rig.still_mirroring = Some(Arc::new(|_key| Box::pin(async { Ok(false) })));
    rig.append(4, 0);
    let actor = rig.start(fast_retry());
    eventually("MIRRORING", async || {
        state(&actor).await.state == PartitionState::Mirroring
    })
    .await;
    stopped::stopped(&actor).await;
    assert!(rig.dest.records(&rig.tp).is_empty(), "nothing copied");
}
