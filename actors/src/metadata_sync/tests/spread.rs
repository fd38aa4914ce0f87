//! The sync of a spread mirror, whose partitions' records are in the
//! shards their keys route to and read here through a follower.

use kmirror_events::{placement_shard, MirrorPartitionStateValue, PartitionState};
use kmirror_store::EventLog;

use super::*;
use crate::spread::{follow_logs, Followed, HostedCopy};

const SHARDS: i32 = 4;

/// A spread mirror's sync, coordinating shard `own` where its partition 0
/// is placed, whose partition 1 (`away`) is placed in shard `placed`, each shard read by a follower;
/// `rig` makes the rig from the spread it is given.
struct Spread {
    logs: Vec<Arc<MemLog>>,
    away: MirrorPartitionKey,
    placed: i32,
    followed: Followed,
    follower: tokio::task::JoinHandle<()>,
    /// What the hosts answer when the sync asks how their copies stand.
    hosts: Arc<Mutex<Result<Vec<HostedCopy>, String>>>,
}

impl Spread {
    async fn rig<F, Fut>(rig: F) -> (Rig, Spread)
    where
        F: FnOnce(Box<dyn FnOnce(Arc<MemLog>) -> Option<Hosting>>) -> Fut,
        Fut: std::future::Future<Output = Rig>,
    {
        let away = MirrorPartitionKey::new("m", ID, 1);
        let placed = placement_shard(&away, true, SHARDS);
        // The shard of partition 0, which the coordinator's board holds.
        let own = placement_shard(&MirrorPartitionKey::new("m", ID, 0), true, SHARDS);
        assert_ne!(own, placed, "the two partitions in two shards");
        let logs: Vec<Arc<MemLog>> = (0..SHARDS).map(|_| Arc::new(MemLog::new())).collect();
        let shared = Arc::new(Mutex::new(None));
        let hosts = Arc::new(Mutex::new(Err("no node answered".to_string())));
        let (others, out, answer) = (logs.clone(), shared.clone(), hosts.clone());
        let r = rig(Box::new(move |log| {
            let read: Vec<Arc<dyn EventLog>> = (0..SHARDS)
                .map(|s| {
                    let log = if s == own { &log } else { &others[s as usize] };
                    log.clone() as Arc<dyn EventLog>
                })
                .collect();
            let (followed, task) = follow_logs(read, Duration::from_millis(10));
            *out.lock().unwrap() = Some((followed.clone(), task));
            let answer = answer.clone();
            Some(Hosting {
                shard: own,
                followed,
                hosted_copies: Some(Arc::new(move |_| {
                    let answer = answer.lock().unwrap().clone();
                    Box::pin(async move { answer })
                })),
            })
        }))
        .await;
        let (followed, follower) = shared.lock().unwrap().take().unwrap();
        let spread = Spread {
            logs,
            away,
            placed,
            followed,
            follower,
            hosts,
        };
        (r, spread)
    }

    /// `away`'s host records `value`, and the follower has read it.
    async fn host_records(&self, value: MirrorPartitionStateValue) {
        self.logs[self.placed as usize]
            .append(
                0,
                &[Record::MirrorPartitionState(self.away.clone(), Some(value))],
            )
            .unwrap();
        self.followed
            .read_to_end(self.placed, Duration::from_secs(5))
            .await
            .unwrap();
    }

    /// `away`'s host records `state`.
    async fn host_state(&self, state: PartitionState) {
        self.host_records(MirrorPartitionStateValue {
            state,
            ..MirrorPartitionStateValue::unknown()
        })
        .await
    }
}

/// A partition placed in another shard refused a record without a key by
/// the compacted destination: the coordinator, whose board holds only its
/// own partitions (behind, none refused), reads the refusal in the
/// partition's shard and holds the topic, so that the partition's retry
/// copies.
#[actix::test]
async fn a_keyless_refusal_of_a_partition_placed_elsewhere_holds_the_topic() {
    let (r, spread) = Spread::rig(|spread| rig_with(&[], spread)).await;
    compacted(&r, &[], (KeylessCopy::Behind, 1)).await;
    let policy = || r.dest.topic_config(TOPIC).get("cleanup.policy").cloned();
    spread.host_state(PartitionState::Mirroring).await;
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(policy().as_deref(), Some("compact"), "nothing refused yet");

    spread
        .host_records(MirrorPartitionStateValue {
            state: PartitionState::Failed,
            error_message: Some(crate::kafka::produce::keyless_refusal(
                "Produce to t-1: INVALID_RECORD (Compacted topic cannot accept message without key)",
            )),
            previous_state: PartitionState::Mirroring,
            ..MirrorPartitionStateValue::unknown()
        })
        .await;
    assert!(r.sync().await.errors.is_empty());
    let c = r.dest.topic_config(TOPIC);
    for (k, v) in kmirror_events::KEYLESS_HOLD {
        assert_eq!(c.get(k).map(String::as_str), Some(v), "{k}");
    }
    spread.follower.abort();
}

/// A failover of a spread mirror during a keyless hold: the hold is let go
/// only once the partitions placed in other shards are STOPPED too, as
/// the follower read them.
#[actix::test]
async fn a_spread_topic_stopped_during_a_keyless_hold_waits_for_partitions_placed_elsewhere() {
    let (r, spread) = Spread::rig(|spread| held_with(&[], spread)).await;
    spread.host_state(PartitionState::Mirroring).await;
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

    spread.host_state(PartitionState::Stopped).await;
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(policy().as_deref(), Some("compact"));
    spread.follower.abort();
}

/// A keyless hold on a topic whose partitions run in two shards is let go
/// while the topic is mirrored only once every partition caught up: the
/// board holds the coordinator's own one (caught up), and the hosts are
/// asked for the other. A host behind, no host running it, a node that
/// gives no answer, or the board's own partition reported by a host (a
/// stale one) while the other is not, keeps the hold.
#[actix::test]
async fn a_keyless_hold_on_a_spread_topic_is_let_go_once_every_host_caught_up() {
    let (r, spread) = Spread::rig(|spread| held_with(&[], spread)).await;
    spread.host_state(PartitionState::Mirroring).await;
    r.keyless
        .lock()
        .unwrap()
        .insert(ID, (KeylessCopy::CaughtUp, 1));
    let policy = || r.dest.topic_config(TOPIC).get("cleanup.policy").cloned();
    let (away, own) = (spread.away.partition, 1 - spread.away.partition);
    let answer = |a: Result<Vec<(i32, KeylessCopy)>, &str>| {
        *spread.hosts.lock().unwrap() = a
            .map(|copies| {
                copies
                    .into_iter()
                    .map(|(partition, copy)| HostedCopy {
                        topic_id: ID,
                        partition,
                        copy,
                        position: None,
                    })
                    .collect()
            })
            .map_err(str::to_string);
    };
    for held in [
        Err("a node gave no answer"),
        Ok(vec![(away, KeylessCopy::Behind)]),
        Ok(vec![
            (away, KeylessCopy::Behind),
            (away, KeylessCopy::CaughtUp),
        ]),
        Ok(vec![]),
        Ok(vec![(own, KeylessCopy::CaughtUp)]),
    ] {
        answer(held.clone());
        assert!(r.sync().await.errors.is_empty());
        assert_eq!(policy().as_deref(), Some("delete"), "{held:?}");
    }
    answer(Ok(vec![(away, KeylessCopy::CaughtUp)]));
    assert!(r.sync().await.errors.is_empty());
    assert_eq!(policy().as_deref(), Some("compact"));
    spread.follower.abort();
}
