//! Writes a small, realistic event log for trying `kmirror log` by hand:
//! `cargo run -p kmirror-store --example demo_log -- /tmp/kmirror-demo`.

use kmirror_events::*;
use kmirror_store::{EventLog, SledLog};

fn main() {
    let dir = std::env::args().nth(1).expect("usage: demo_log DIR");
    let log = SledLog::open(&dir).expect("open");
    let mut image = log.load_image().expect("load");
    let mut now = 1_777_000_000_000i64;
    let mut run = |image: &mut MirrorStateImage, cmd: Command| {
        now += 1500;
        let records = decide(image, &cmd).unwrap_or_else(|e| panic!("{}: {e}", e.kip_name()));
        let base = log.append(now, &records).expect("append");
        for (i, r) in records.into_iter().enumerate() {
            image.replay(base + i as u64, r);
        }
    };
    let orders = TopicId(*b"orders-topic-id!");
    let config = MirrorConfig {
        source_bootstrap: "src-1:9092,src-2:9092".into(),
        topics_include: "orders,payments.*".into(),
        topics_exclude: "payments-secret".into(),
        groups_include: ".*".into(),
        source_cluster_id: "Zq0Y3bD1TxyUjyQ9HmTf1A".into(),
        ..Default::default()
    };
    run(
        &mut image,
        Command::CreateMirror {
            name: "dr".into(),
            config,
        },
    );
    run(
        &mut image,
        Command::StartTopics {
            mirror: "dr".into(),
            topics: vec![TopicRef {
                topic_id: orders,
                name: "orders".into(),
                partition_count: 3,
                destination_topic_id: None,
            }],
            include: vec![],
            exclude: vec![],
            seeds: vec![],
        },
    );
    for p in 0..3 {
        let key = MirrorPartitionKey::new("dr", orders, p);
        let t = |target| Command::TransitionPartition {
            key: key.clone(),
            target,
            leader_epoch: 1,
            expected_state_epoch: -1,
        };
        run(&mut image, t(PartitionState::LogAlignment));
        run(&mut image, t(PartitionState::Mirroring));
        run(
            &mut image,
            Command::SetOffsetRuns {
                key: key.clone(),
                upsert: vec![OffsetMapRun {
                    source_start: 0,
                    destination_start: 0,
                    length: 100,
                }],
                remove: vec![],
                holes: vec![],
            },
        );
        if p == 1 {
            run(
                &mut image,
                Command::FailPartition {
                    key: key.clone(),
                    leader_epoch: 1,
                    error_message: "source leader not available".into(),
                    retryable: true,
                },
            );
            run(&mut image, t(PartitionState::Mirroring));
            run(
                &mut image,
                Command::ClearFailure {
                    key: key.clone(),
                    leader_epoch: 1,
                },
            );
        }
        run(
            &mut image,
            Command::SetOffsetRuns {
                key: key.clone(),
                upsert: vec![OffsetMapRun {
                    source_start: 120,
                    destination_start: 100,
                    length: 50,
                }],
                remove: vec![],
                holes: vec![],
            },
        );
    }
    run(
        &mut image,
        Command::StopTopics {
            mirror: "dr".into(),
            topics: vec![orders],
        },
    );
    for p in 0..3 {
        let key = MirrorPartitionKey::new("dr", orders, p);
        run(
            &mut image,
            Command::TransitionPartition {
                key: key.clone(),
                target: PartitionState::Stopping,
                leader_epoch: 1,
                expected_state_epoch: -1,
            },
        );
        run(
            &mut image,
            Command::RecordLastMirrorEpochs {
                key: key.clone(),
                value: LastMirrorEpochsValue {
                    last_mirror_epoch: 1,
                    last_mirror_offset: 150,
                    source_offset: 170,
                    source_leader_epoch: 4,
                    destination_end_offset: 150,
                    destination_leader_epoch: 1,
                },
            },
        );
        run(
            &mut image,
            Command::TransitionPartition {
                key,
                target: PartitionState::Stopped,
                leader_epoch: 1,
                expected_state_epoch: -1,
            },
        );
    }
    println!("wrote {} records to {dir}", log.end_offset());
}
