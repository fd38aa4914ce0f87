//! Start-up after a day of a busy mirror's checkpoints (printed, not
//! asserted). Every partition records its acknowledged run length once a
//! second through the CoordinatorActor, into a sled log, as the daemon
//! does; then the log is opened and the image loaded as a restarted daemon
//! would. Run: `cargo bench -p kmirror-actors --bench startup_bench`.
//! `KMIRROR_BENCH_PARTITIONS` (default 20) and `KMIRROR_BENCH_SECONDS`
//! (default 86400) size the day; `KMIRROR_BENCH_SNAPSHOTS=0` turns the
//! coordinator's snapshots and compaction off, for comparison.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use kmirror_actors::coordinator::{CoordinatorActor, Execute};
use kmirror_events::{Command, MirrorConfig, MirrorPartitionKey, OffsetMapRun, TopicId, TopicRef};
use kmirror_store::{EventLog, FsyncPolicy, SledLog, SledOptions};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(path: &std::path::Path) -> SledLog {
    SledLog::open_with(
        path,
        SledOptions {
            // The simulation measures start-up, not the disk's fsync rate.
            fsync: FsyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap()
}

fn main() {
    let partitions = env("KMIRROR_BENCH_PARTITIONS", 20) as i32;
    let seconds = env("KMIRROR_BENCH_SECONDS", 86_400);
    let snapshots = env("KMIRROR_BENCH_SNAPSHOTS", 1) != 0;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let id = TopicId([9; 16]);
    let t = Instant::now();
    System::new().block_on(async {
        let log: Arc<dyn EventLog> = Arc::new(open(&path));
        let mut coordinator = CoordinatorActor::load(log.clone()).unwrap();
        if !snapshots {
            coordinator = coordinator.snapshot_every(u64::MAX);
        }
        let coordinator = coordinator.start();
        for command in [
            Command::CreateMirror {
                name: "busy".into(),
                config: MirrorConfig {
                    source_bootstrap: "source:9092".into(),
                    ..Default::default()
                },
            },
            Command::StartTopics {
                mirror: "busy".into(),
                topics: vec![TopicRef {
                    topic_id: id,
                    name: "orders".into(),
                    partition_count: partitions,
                    destination_topic_id: None,
                }],
                include: vec![],
                exclude: vec![],
                seeds: vec![],
            },
        ] {
            coordinator
                .send(Execute::new(command))
                .await
                .unwrap()
                .unwrap();
        }
        for second in 1..=seconds as i64 {
            for p in 0..partitions {
                coordinator
                    .send(Execute::new(Command::SetOffsetRuns {
                        key: MirrorPartitionKey::new("busy", id, p),
                        upsert: vec![OffsetMapRun {
                            source_start: 0,
                            destination_start: 0,
                            length: second * 1000,
                        }],
                        remove: vec![],
                        holes: vec![],
                    }))
                    .await
                    .unwrap()
                    .unwrap();
            }
        }
        log.flush().unwrap();
    });
    let checkpoints = seconds * partitions as u64;
    println!(
        "simulated {seconds} s of checkpoints for {partitions} partitions ({checkpoints} records, snapshots {}) in {:.1} s",
        if snapshots { "on" } else { "off" },
        t.elapsed().as_secs_f64()
    );
    // The daemon is gone; a new one opens the log and loads the image.
    let t = Instant::now();
    let log: Arc<dyn EventLog> = Arc::new(open(&path));
    let opened = t.elapsed().as_secs_f64();
    let loaded = CoordinatorActor::load(log.clone()).unwrap();
    let total = t.elapsed().as_secs_f64();
    drop(loaded);
    let stored = log.read(0).unwrap().count();
    println!(
        "start-up: open {opened:.3} s, load {:.3} s, total {total:.3} s; {stored} records stored, end offset {}",
        total - opened,
        log.end_offset()
    );
}
