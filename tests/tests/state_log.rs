//! `KafkaLog`, the event log in one partition of the compacted state topic,
//! against real Kafka: it keeps the `EventLog` contract (the same image as
//! an in-memory log fed the same records), its StateValidationOffset lock,
//! a load that survives the broker compacting the partition meanwhile, how
//! long 10 000 partitions' state takes to load, and that Kafka's own
//! console consumer reads the records; and that `StateFollower` reads every
//! shard to the image a load gives (while the broker compacts, and across
//! a killed leader), and keeps up.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_actors::state_log::{FollowedState, KafkaLog, StateFollower, StateLogOptions};
use kmirror_events::{
    LastMirrorEpochsValue, MirrorConfig, MirrorConfigKey, MirrorPartitionKey,
    MirrorPartitionStateValue, MirrorStateImage, MirrorTopicStateChange, MirrorTopicStateKey,
    Offset, OffsetMapRun, OffsetMapRunKey, PartitionState, Record, StateValidation, TopicId,
};
use kmirror_store::{EventLog, MemLog, StoreError};
use kmirror_tests::{
    bed, create_topic, kafka_tool_ok, kafka_tool_stdin, unique, BrokerOp, PrivateBed,
};

fn options(topic: &str, partitions: i32) -> StateLogOptions {
    StateLogOptions {
        topic: topic.to_string(),
        partitions,
        ..StateLogOptions::new(&bed().destination)
    }
}

fn config(mirror: &str) -> Record {
    Record::MirrorConfig(
        MirrorConfigKey {
            mirror_name: mirror.into(),
        },
        Some(MirrorConfig {
            source_bootstrap: "127.0.0.1:1".into(),
            ..Default::default()
        }),
    )
}

fn topic_change(id: TopicId, mirror: &str, state: PartitionState) -> Record {
    Record::MirrorTopicStateChange(
        MirrorTopicStateKey { topic_id: id },
        Some(MirrorTopicStateChange {
            topic_id: id,
            mirror_name: mirror.into(),
            desired_state: state,
            topic_name: "orders".into(),
            partition_count: 4,
        }),
    )
}

fn partition_state(key: &MirrorPartitionKey, state: PartitionState, epoch: i32) -> Record {
    Record::MirrorPartitionState(
        key.clone(),
        Some(MirrorPartitionStateValue {
            state,
            leader_epoch: 0,
            state_epoch: epoch,
            error_message: None,
            retry_attempt: 0,
            previous_state: PartitionState::default(),
        }),
    )
}

fn epochs(key: &MirrorPartitionKey, offset: i64) -> Record {
    Record::LastMirrorEpochs(
        key.clone(),
        Some(LastMirrorEpochsValue {
            last_mirror_epoch: 0,
            last_mirror_offset: offset,
            source_offset: offset,
            source_leader_epoch: -1,
            destination_end_offset: offset,
            destination_leader_epoch: -1,
        }),
    )
}

fn run(key: &MirrorPartitionKey, length: i64) -> Record {
    Record::OffsetMapRun(
        OffsetMapRunKey {
            partition: key.clone(),
            source_start: 0,
        },
        Some(OffsetMapRun {
            source_start: 0,
            destination_start: 0,
            length,
        }),
    )
}

/// The batches of a small mirror's life: created, started, copying,
/// checkpointed, a partition removed (tombstones), paused.
fn history(mirror: &str) -> Vec<Vec<Record>> {
    let id = TopicId([7; 16]);
    let keys: Vec<_> = (0..4)
        .map(|p| MirrorPartitionKey::new(mirror, id, p))
        .collect();
    let mut batches = vec![
        vec![config(mirror)],
        vec![topic_change(id, mirror, PartitionState::Mirroring)],
        keys.iter()
            .map(|k| partition_state(k, PartitionState::LogAlignment, 1))
            .collect(),
        keys.iter()
            .map(|k| partition_state(k, PartitionState::Mirroring, 2))
            .collect(),
    ];
    for len in [10, 20, 30] {
        batches.push(keys.iter().map(|k| run(k, len)).collect());
    }
    batches.push(vec![
        keys[3].clone().tombstone_of_state(),
        epochs(&keys[0], 30),
    ]);
    batches.push(vec![topic_change(id, mirror, PartitionState::Paused)]);
    batches
}

trait TombstoneOfState {
    fn tombstone_of_state(self) -> Record;
}
impl TombstoneOfState for MirrorPartitionKey {
    fn tombstone_of_state(self) -> Record {
        Record::MirrorPartitionState(self, None)
    }
}

/// Waits (at most `secs`) until `follower` has read shard `p` below `end`;
/// the state it then published.
fn read_to(
    rt: &tokio::runtime::Runtime,
    follower: &StateFollower,
    p: i32,
    end: Offset,
    secs: u64,
) -> Option<std::sync::Arc<FollowedState>> {
    rt.block_on(follower.wait_for(Duration::from_secs(secs), |s| {
        s.shard(p).unwrap().has_read(end)
    }))
}

#[test]
fn appends_read_back_and_reopen_to_the_image_of_a_memory_log() {
    let topic = unique("state-log");
    let log = KafkaLog::open(&options(&topic, 3), 1).expect("open");
    assert_eq!(log.end_offset(), 0);
    let mem = MemLog::new();
    for (i, batch) in history("east").iter().enumerate() {
        let ts = 1_700_000_000_000 + i as i64;
        let a = log.append(ts, batch).expect("append");
        let b = mem.append(ts, batch).unwrap();
        assert_eq!(a, b, "batch {i} lands at the offset a memory log gives it");
    }
    assert_eq!(log.append(0, &[]).unwrap(), mem.end_offset());
    assert_eq!(log.end_offset(), mem.end_offset());
    let read: Vec<_> = log.read(0).unwrap().map(Result::unwrap).collect();
    assert_eq!(read, mem.entries(), "read(0) gives back every record");
    let tail: Vec<_> = log.read(5).unwrap().map(Result::unwrap).collect();
    assert_eq!(tail.first().map(|e| e.offset), Some(5));
    let mem_image = mem.load_image().unwrap();
    assert_eq!(log.load_image().unwrap(), mem_image);

    // latest: a value (fetched from the broker) and a tombstone (from the index).
    let id = TopicId([7; 16]);
    let change_key = topic_change(id, "east", PartitionState::Paused).key();
    assert_eq!(
        log.latest(&change_key).unwrap(),
        mem.latest(&change_key).unwrap()
    );
    let gone = MirrorPartitionKey::new("east", id, 3)
        .tombstone_of_state()
        .key();
    assert_eq!(log.latest(&gone).unwrap(), mem.latest(&gone).unwrap());
    assert!(log.latest(&gone).unwrap().unwrap().record.is_tombstone());

    // The StateValidationOffset lock: a view older than the last change of
    // the topic is refused, a current one is taken.
    let last_change = mem.latest(&change_key).unwrap().unwrap().offset;
    let stale = StateValidation {
        offset: last_change,
        topics: vec![id],
    };
    let refused = log
        .append_if_unchanged(
            1,
            &stale,
            &[topic_change(id, "east", PartitionState::Mirroring)],
        )
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::InvalidClusterMirrorStates { changed_at, .. } if changed_at == last_change),
        "{refused}"
    );
    let end_before = log.end_offset();
    let fresh = StateValidation {
        offset: end_before,
        topics: vec![id],
    };
    let at = log
        .append_if_unchanged(
            1_700_000_000_100,
            &fresh,
            &[topic_change(id, "east", PartitionState::Mirroring)],
        )
        .unwrap();
    assert_eq!(at, end_before);
    mem.append(
        1_700_000_000_100,
        &[topic_change(id, "east", PartitionState::Mirroring)],
    )
    .unwrap();
    let end = log.end_offset();
    drop(log);

    // Reopen: the same end and image, from the broker alone.
    let t = Instant::now();
    let log = KafkaLog::open(&options(&topic, 3), 1).expect("reopen");
    let report = log.load_report();
    let image = log.load_image().unwrap();
    println!(
        "reopened {topic}-1: {} records, {} keys, end {} in {:?} (load_image {:?})",
        report.records,
        report.keys,
        report.end,
        report.elapsed,
        t.elapsed()
    );
    assert_eq!(log.end_offset(), end);
    assert_eq!(image, mem.load_image().unwrap());
    let refused = log.append_if_unchanged(1, &stale, &[]).unwrap_err();
    assert!(matches!(
        refused,
        StoreError::InvalidClusterMirrorStates { .. }
    ));

    // Kafka's own consumer reads the records where the log put them.
    let out = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--topic",
            &topic,
            "--partition",
            "1",
            "--offset",
            "earliest",
            "--property",
            "print.key=true",
            "--property",
            "print.offset=true",
            "--timeout-ms",
            "10000",
        ],
    );
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("Offset:")).collect();
    println!(
        "kafka-console-consumer read {} records of {topic}-1; last: {:?}",
        lines.len(),
        lines.last().map(|l| l.chars().take(80).collect::<String>())
    );
    assert_eq!(lines.len() as u64, end, "{out}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("127.0.0.1:1") && l.contains("east")),
        "the mirror config's key and value: {out}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with("null")),
        "the tombstone has a null value: {out}"
    );
    // Nothing went to the other partitions.
    let other = KafkaLog::open_read_only(&options(&topic, 3), Some(0)).unwrap();
    assert_eq!(other.end_offset(), 0);
}

#[test]
fn an_existing_topic_that_is_not_compacted_is_refused() {
    let topic = unique("state-delete");
    create_topic(&bed().destination, &topic, 1, &["cleanup.policy=delete"]);
    let err = KafkaLog::open(&options(&topic, 1), 0)
        .err()
        .expect("refused");
    let text = err.to_string();
    println!("{text}");
    assert!(
        text.contains("cleanup.policy") && text.contains(&topic),
        "{text}"
    );
    let err = KafkaLog::open(&options(&unique("state-none"), 2), 5)
        .err()
        .expect("no partition 5");
    assert!(err.to_string().contains("no partition 5"), "{err}");
}

#[test]
fn a_load_while_the_broker_compacts_gives_the_newest_image() {
    let topic = unique("state-compacting");
    let mut opts = options(&topic, 1);
    opts.topic_configs = BTreeMap::from([
        ("segment.ms".into(), "100".into()),
        ("min.cleanable.dirty.ratio".into(), "0.01".into()),
        ("delete.retention.ms".into(), "3600000".into()),
        ("min.compaction.lag.ms".into(), "0".into()),
    ]);
    let log = KafkaLog::open(&opts, 0).expect("open");
    // A follower reads along while the cleaner rewrites the segments.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let follower = rt.block_on(StateFollower::start(&opts)).expect("follow");
    let mem = MemLog::new();
    let id = TopicId([3; 16]);
    let keys: Vec<_> = (0..50)
        .map(|p| MirrorPartitionKey::new("busy", id, p))
        .collect();
    // Rounds of superseding records, spaced so segments roll (segment.ms)
    // and the cleaner, which never touches the active segment, has work.
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed().as_secs() < 8 {
        rounds += 1;
        let batch: Vec<Record> = keys.iter().map(|k| run(k, rounds)).collect();
        log.append(rounds, &batch).unwrap();
        mem.append(rounds, &batch).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let appended = log.end_offset();
    let want = mem.load_image().unwrap();
    // Load again and again while the cleaner runs: until it has halved the
    // partition, or 30 s (its backoff is 1 s, but a loaded machine delays it).
    let mut fewest = u64::MAX;
    let t = Instant::now();
    let mut loads = 0;
    while t.elapsed().as_secs() < 30 {
        let reopened = KafkaLog::open(&opts, 0).expect("reopen while compacting");
        let image = reopened.load_image().unwrap();
        assert_eq!(image.offset_maps().count(), want.offset_maps().count());
        assert_eq!(image, want, "load {loads} folds to the newest state");
        fewest = fewest.min(reopened.load_report().records);
        loads += 1;
        if fewest < appended / 2 && loads >= 3 {
            break;
        }
    }
    println!(
        "{rounds} rounds, {appended} records appended; {loads} loads while compacting, the smallest read {fewest} records"
    );
    // The follower that read along, and one started now: it reads the
    // compacted segments, where a fetch can answer a merged batch starting
    // below its position.
    let late = rt.block_on(StateFollower::start(&opts)).expect("follow");
    for (which, f) in [("read along", follower), ("started late", late)] {
        let followed = read_to(&rt, &f, 0, appended, 10)
            .unwrap_or_else(|| panic!("the follower that {which} read every round"));
        assert_eq!(
            followed.shard(0).unwrap().image,
            want,
            "the follower that {which} folds to the newest state"
        );
        rt.block_on(f.close());
    }
    assert!(
        fewest < appended,
        "the broker compacted the partition during the loads ({fewest} of {appended} left)"
    );
}

#[test]
fn ten_thousand_partitions_of_state_load() {
    let topic = unique("state-10k");
    let log = KafkaLog::open(&options(&topic, 1), 0).expect("open");
    let id = TopicId([5; 16]);
    let t = Instant::now();
    let mut mem = MemLog::new();
    let mut batch = Vec::new();
    for p in 0..10_000 {
        let k = MirrorPartitionKey::new("big", id, p);
        batch.push(epochs(&k, p as i64));
        batch.push(partition_state(&k, PartitionState::Mirroring, 2));
        batch.push(run(&k, 1000 + p as i64));
        if batch.len() >= 3000 {
            log.append(1, &batch).unwrap();
            mem.append(1, &batch).unwrap();
            batch.clear();
        }
    }
    println!("appended 30 000 records in {:?}", t.elapsed());
    drop(log);
    let t = Instant::now();
    let log = KafkaLog::open(&options(&topic, 1), 0).expect("reopen");
    let opened = t.elapsed();
    let image = log.load_image().unwrap();
    let total = t.elapsed();
    let r = log.load_report();
    println!(
        "10 000 partitions: open (index of {} keys from {} records) {:?}, load_image {:?}, total {:?}",
        r.keys,
        r.records,
        opened,
        total - opened,
        total
    );
    assert_eq!(r.records, 30_000);
    assert_eq!(image, std::mem::take(&mut mem).load_image().unwrap());
    assert_eq!(image.offset_maps().count(), 10_000);

    // A follower reads the same from the start, to the same image.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = Instant::now();
    let follower = rt
        .block_on(StateFollower::start(&options(&topic, 1)))
        .expect("follow");
    let end = log.end_offset();
    let state = read_to(&rt, &follower, 0, end, 60)
        .expect("the follower read 10 000 partitions' state within 60 s");
    println!(
        "10 000 partitions: followed from the start in {:?}",
        t.elapsed()
    );
    assert_eq!(state.shard(0).unwrap().image, image);
    rt.block_on(follower.close());
}

/// Every node follows every shard read-only (`StateFollower`), the way the
/// KIP's partition leaders and coordinators read each other's records: a
/// shard followed from its log start folds to the image a load of the
/// partition gives, a new record is seen within a fetch wait, and a record
/// nothing can decode (written by Kafka's own console producer) stops its
/// shard alone.
#[test]
fn a_follower_reads_every_shard_and_keeps_up() {
    let topic = unique("state-follow");
    let opts = options(&topic, 3);
    let logs = [
        KafkaLog::open(&opts, 1).expect("open 1"),
        KafkaLog::open(&opts, 2).expect("open 2"),
    ];
    for (log, mirror) in logs.iter().zip(["east", "west"]) {
        for (i, batch) in history(mirror).iter().enumerate() {
            log.append(1_700_000_000_000 + i as i64, batch).unwrap();
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let follower = rt.block_on(StateFollower::start(&opts)).expect("follow");
    let caught_up = |s: &FollowedState| s.shards.iter().all(|s| s.caught_up());
    let state = rt
        .block_on(follower.wait_for(Duration::from_secs(30), |s| caught_up(s)))
        .expect("every shard read within 30 s");
    assert_eq!(state.shards.len(), 3);
    assert_eq!(state.shards[0].image, MirrorStateImage::default());
    assert_eq!(state.shards[0].next, 0);
    for (p, log) in [(1, &logs[0]), (2, &logs[1])] {
        let shard = state.shard(p).unwrap();
        assert_eq!(shard.next, log.end_offset(), "shard {p} read to its end");
        assert_eq!(
            shard.image,
            log.load_image().unwrap(),
            "shard {p} folds to the image a load gives"
        );
    }

    // A new record is followed within a fetch wait and a round trip.
    let mut latencies = Vec::new();
    for round in 0..5 {
        let key = MirrorPartitionKey::new("east", TopicId([7; 16]), 0);
        let t = Instant::now();
        logs[0].append(round, &[epochs(&key, 100 + round)]).unwrap();
        let end = logs[0].end_offset();
        rt.block_on(follower.wait_for(Duration::from_secs(10), |s| {
            s.shard(1).unwrap().has_read(end)
        }))
        .expect("the new record followed within 10 s");
        latencies.push(t.elapsed());
    }
    println!("append to followed: {latencies:?}");
    let state = follower.watch().borrow().clone();
    assert_eq!(state.shard(1).unwrap().image, logs[0].load_image().unwrap());

    // A record nothing can decode stops its shard, and only that one.
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--topic",
            &topic,
            "--property",
            "parse.key=true",
        ],
        b"not-a-key\tnot-a-record\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = rt
        .block_on(follower.wait_for(Duration::from_secs(30), |s| {
            s.shards.iter().any(|s| s.stopped.is_some())
        }))
        .expect("the bad record is read within 30 s");
    let stopped: Vec<usize> = (0..3)
        .filter(|&p| state.shards[p].stopped.is_some())
        .collect();
    assert_eq!(stopped.len(), 1, "one shard stopped: {state:?}");
    let bad = &state.shards[stopped[0]];
    let error = bad.stopped.clone().unwrap();
    assert!(
        error.contains(&format!("record at offset {} is damaged", bad.next)),
        "stopped at the bad record, with nothing of its answer folded: {error}"
    );
    // The others go on: a shard that still follows sees its next record.
    let (p, log) = if stopped[0] == 1 {
        (2, &logs[1])
    } else {
        (1, &logs[0])
    };
    log.append(9, &[config("north")]).unwrap();
    let end = log.end_offset();
    let state = read_to(&rt, &follower, p, end, 10).expect("the other shards still followed");
    assert_eq!(state.shard(p).unwrap().image, log.load_image().unwrap());
    rt.block_on(follower.close());
}

/// A destination broker leading a shard is killed: the follower finds the
/// new leaders and reads on from where it was, to the image a load of each
/// partition gives (destination of 3 brokers, the state topic at RF 3). At
/// RF 1 the shard has no leader until the broker is back: the others are
/// followed meanwhile, and it again after.
#[test]
fn a_follower_reads_on_after_a_shard_leader_is_killed() {
    let bed = PrivateBed::with_brokers(1, 3);
    let topic = unique("state-follow-kill");
    let opts = StateLogOptions {
        topic: topic.clone(),
        partitions: 3,
        ..StateLogOptions::new(&bed.destination)
    };
    let mirrors = ["east", "west", "north"];
    let logs: Vec<KafkaLog> = (0..3)
        .map(|p| KafkaLog::open(&opts, p).expect("open"))
        .collect();
    for (log, mirror) in logs.iter().zip(mirrors) {
        for (i, batch) in history(mirror).iter().enumerate() {
            log.append(i as i64, batch).unwrap();
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let follower = rt.block_on(StateFollower::start(&opts)).expect("follow");
    rt.block_on(follower.wait_for(Duration::from_secs(30), |s| {
        s.shards.iter().all(|s| s.caught_up())
    }))
    .expect("every shard read");

    let leader = rt.block_on(async {
        let config = ClientConfig::from_properties(&opts.client).unwrap();
        let client = KafkaClient::connect(config).await.unwrap();
        client.leader(&topic, 0).await.unwrap().0
    });
    println!("killing broker {leader}, the leader of shard 0");
    bed.destination_broker(leader as usize, BrokerOp::Kill);
    drop(logs);
    let killed = Instant::now();
    // Each shard written again by a log reopened on the new leaders.
    let mut ends = Vec::new();
    let mut logs = Vec::new();
    for (p, mirror) in mirrors.iter().enumerate() {
        // Until the controller fenced the killed broker, its partitions
        // still name it leader: the log's owner opens again, as a node does.
        let log = loop {
            match KafkaLog::open(&opts, p as i32) {
                Ok(log) => break log,
                Err(e) if killed.elapsed() < Duration::from_secs(30) => {
                    println!("shard {p} not open yet: {e}");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!("shard {p} not open 30 s after the kill: {e}"),
            }
        };
        log.append(99, &[config(&format!("{mirror}-after"))])
            .unwrap();
        ends.push(log.end_offset());
        logs.push(log);
    }
    let state = rt
        .block_on(follower.wait_for(Duration::from_secs(60), |s| {
            (0..3).all(|p| s.shard(p).unwrap().has_read(ends[p as usize]))
        }))
        .expect("every shard followed on the new leaders within 60 s");
    println!(
        "every shard followed to its new record {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    for (p, log) in logs.iter().enumerate() {
        assert_eq!(
            state.shards[p].image,
            log.load_image().unwrap(),
            "shard {p} folds to the image a load gives"
        );
    }
    rt.block_on(follower.close());
    bed.destination_broker(leader as usize, BrokerOp::Start);

    // At replication factor 1 a killed leader leaves its shard with no
    // leader at all: the others are followed meanwhile, and the shard
    // again once its broker is back.
    let topic = unique("state-follow-leaderless");
    let opts = StateLogOptions {
        topic: topic.clone(),
        partitions: 3,
        replication_factor: 1,
        ..StateLogOptions::new(&bed.destination)
    };
    let logs: Vec<KafkaLog> = (0..3)
        .map(|p| KafkaLog::open(&opts, p).expect("open"))
        .collect();
    for (log, mirror) in logs.iter().zip(mirrors) {
        log.append(1, &[config(mirror)]).unwrap();
    }
    let follower = rt.block_on(StateFollower::start(&opts)).expect("follow");
    rt.block_on(follower.wait_for(Duration::from_secs(30), |s| {
        s.shards.iter().all(|s| s.caught_up())
    }))
    .expect("every shard read");
    let leaders: Vec<i32> = rt.block_on(async {
        let config = ClientConfig::from_properties(&opts.client).unwrap();
        let client = KafkaClient::connect(config).await.unwrap();
        let mut out = Vec::new();
        for p in 0..3 {
            out.push(client.leader(&topic, p).await.unwrap().0);
        }
        out
    });
    let victim = leaders[0];
    println!("leaders {leaders:?}; killing broker {victim}");
    bed.destination_broker(victim as usize, BrokerOp::Kill);
    // Until the controller fences the broker, metadata still names it.
    rt.block_on(follower.wait_for(Duration::from_secs(60), |s| {
        s.shards[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("no leader"))
    }))
    .expect("the follower saw shard 0 without a leader within 60 s");
    let others: Vec<usize> = (0..3).filter(|&p| leaders[p] != victim).collect();
    for &p in &others {
        logs[p].append(2, &[config("while-leaderless")]).unwrap();
    }
    let ends: Vec<Offset> = logs.iter().map(|l| l.end_offset()).collect();
    rt.block_on(follower.wait_for(Duration::from_secs(30), |s| {
        others.iter().all(|&p| s.shards[p].has_read(ends[p]))
    }))
    .expect("the shards with a leader followed while another has none");
    drop(logs);
    bed.destination_broker(victim as usize, BrokerOp::Start);
    let back = Instant::now();
    let log = loop {
        match KafkaLog::open(&opts, 0) {
            Ok(log) => break log,
            Err(e) if back.elapsed() < Duration::from_secs(60) => {
                println!("shard 0 not open yet: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("shard 0 not open 60 s after its broker came back: {e}"),
        }
    };
    log.append(3, &[config("back")]).unwrap();
    let end = log.end_offset();
    let state = read_to(&rt, &follower, 0, end, 60)
        .expect("the leaderless shard followed again once its broker is back");
    println!(
        "shard 0 followed again {:.1} s after its broker was started",
        back.elapsed().as_secs_f64()
    );
    assert_eq!(state.shards[0].image, log.load_image().unwrap());
    rt.block_on(follower.close());
}

/// A node that takes a shard fences it first: an abort marker (a control
/// batch) lands in the state topic. A failback reads the topic of the
/// cluster it fails back to (`state_topic::read_image`), and must skip the
/// marker as every reader of the log does. Before, its six-byte value was
/// decoded as a record ("record truncated") and the failback refused.
#[test]
fn a_failback_reads_a_state_topic_past_a_shards_fence_marker() {
    use kmirror_actors::cluster::kafka::KafkaCluster;
    use kmirror_actors::kafka::fence::{acquire, fence_partitions};
    use kmirror_actors::kafka::fetch::{FetchOptions, TopicPartition};

    let topic = unique("state-fenced");
    let log = KafkaLog::open(&options(&topic, 1), 0).expect("open");
    log.append(1, &[config("east")]).unwrap();
    drop(log);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = KafkaClient::connect(ClientConfig::plaintext(&bed().destination))
            .await
            .unwrap();
        let shard = [TopicPartition::new(&topic, 0)];
        let fence = acquire(
            &client,
            &unique("state-fence"),
            Duration::from_secs(60),
            &shard,
        )
        .await
        .unwrap();
        fence_partitions(&client, &fence, &shard).await.unwrap();
        let cluster = KafkaCluster::new(client, FetchOptions::default());
        let image = kmirror_actors::state_topic::read_image(&cluster, &topic)
            .await
            .expect("the marker is skipped")
            .expect("the topic exists");
        assert!(image.mirror("east").is_some(), "{:?}", image.summary());
    });
}
