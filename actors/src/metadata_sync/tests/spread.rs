//! The sync of a spread mirror, whose partitions' records are in the
//! shards their keys route to and read here through a follower.

use kmirror_events::{placement_shard, MirrorPartitionStateValue, PartitionState};
use kmirror_store::EventLog;

use super::*;
use crate::spread::follow_logs;

const SHARDS: i32 = 4;

/// A failover of a spread mirror during a keyless hold: the hold is let go
/// only once the partitions placed in other shards are STOPPED too, as
/// the follower read them.
#[actix::test]
async fn a_spread_topic_stopped_during_a_keyless_hold_waits_for_partitions_placed_elsewhere() {
    let away = MirrorPartitionKey::new("m", ID, 1);
    let placed = placement_shard(&away, true, SHARDS);
    let own = (placed + 1) % SHARDS;
    let logs: Vec<Arc<MemLog>> = (0..SHARDS).map(|_| Arc::new(MemLog::new())).collect();
    let mut follow = None;
    let r = held_with(&[], |log| {
        let read: Vec<Arc<dyn EventLog>> = (0..SHARDS)
            .map(|s| {
                let log = if s == own { &log } else { &logs[s as usize] };
                log.clone() as Arc<dyn EventLog>
            })
            .collect();
        let (followed, task) = follow_logs(read, Duration::from_millis(10));
        follow = Some((followed.clone(), task));
        Some(Hosting {
            shard: own,
            followed,
        })
    })
    .await;
    let (followed, follower) = follow.unwrap();
    let (logs, away, followed) = (&logs, &away, &followed);
    let host_records = |state| async move {
        let value = MirrorPartitionStateValue {
            state,
            ..MirrorPartitionStateValue::unknown()
        };
        logs[placed as usize]
            .append(
                0,
                &[Record::MirrorPartitionState(away.clone(), Some(value))],
            )
            .unwrap();
        followed
            .read_to_end(placed, Duration::from_secs(5))
            .await
            .unwrap();
    };
    host_records(PartitionState::Mirroring).await;
    r.coordinator
        .send(Execute::new(Command::StopTopics {
            mirror: "m".into(),
            topics: vec![ID],
        }))
        .await
        .unwrap()
        .unwrap();
    let policy = || r.dest.topic_config(TOPIC).get("cleanup.policy").cloned();

    // Every partition in the coordinator's shard is idle; the one placed
    // elsewhere still copies, so the hold stays.
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(policy().as_deref(), Some("delete"));

    host_records(PartitionState::Stopped).await;
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(policy().as_deref(), Some("compact"));
    follower.abort();
}
