//! Append and replay throughput for 1,000,000 records (printed, not
//! asserted). Run: `cargo bench -p kmirror-store --bench log_bench`.
//! Set `KMIRROR_BENCH_RECORDS` to change the count.

use std::time::Instant;

use kmirror_events::*;
use kmirror_store::{EventLog, FsyncPolicy, SledLog, SledOptions};

fn record(i: u64) -> Record {
    let topic = TopicId([(i % 10) as u8 + 1; 16]);
    let key = MirrorPartitionKey::new("bench-mirror", topic, ((i / 10) % 100) as i32);
    if i.is_multiple_of(4) {
        Record::MirrorPartitionState(
            key,
            Some(MirrorPartitionStateValue {
                state: PartitionState::Mirroring,
                leader_epoch: 3,
                state_epoch: (i / 1000) as i32,
                error_message: None,
                retry_attempt: 0,
                previous_state: PartitionState::LogAlignment,
            }),
        )
    } else {
        let s = i as i64 * 100;
        Record::OffsetMapRun(
            OffsetMapRunKey {
                partition: key,
                source_start: s,
            },
            Some(OffsetMapRun {
                source_start: s,
                destination_start: s,
                length: 100,
            }),
        )
    }
}

/// What an append costs the coordinator while a reader (describe, sync,
/// discovery) holds the image: the next append must not change what the
/// reader sees, so it clones the image first.
fn append_while_a_reader_holds_the_image() {
    let (partitions, runs) = (100i32, 2000i64);
    let mut image = MirrorStateImage::new();
    let mut offset = 0u64;
    let key = |p: i32| MirrorPartitionKey::new("bench-mirror", TopicId([1; 16]), p);
    let run = |p: i32, r: i64, len: i64| {
        Record::OffsetMapRun(
            OffsetMapRunKey {
                partition: key(p),
                source_start: r * 2,
            },
            Some(OffsetMapRun {
                source_start: r * 2,
                destination_start: r,
                length: len,
            }),
        )
    };
    for p in 0..partitions {
        for r in 0..runs {
            image.replay(offset, run(p, r, 1));
            offset += 1;
        }
    }
    let appends = 2000;
    let t = std::time::Instant::now();
    for i in 0..appends {
        let reader = image.clone();
        image.replay(offset, run(i % partitions, runs - 1, 1));
        offset += 1;
        drop(reader);
    }
    let per = t.elapsed().as_secs_f64() / appends as f64;
    println!(
        "append while a reader holds the image ({partitions} partitions x {runs} runs): {:.1} us per append",
        per * 1e6
    );
}

fn main() {
    append_while_a_reader_holds_the_image();
    let n: u64 = std::env::var("KMIRROR_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let batch_size = 1000u64;
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> = (0..n).map(record).collect();

    for (label, fsync) in [
        ("fsync every batch", FsyncPolicy::EveryBatch),
        ("fsync never", FsyncPolicy::Never),
    ] {
        let path = dir.path().join(label.replace(' ', "-"));
        let log = SledLog::open_with(
            &path,
            SledOptions {
                fsync,
                ..Default::default()
            },
        )
        .unwrap();
        let t = Instant::now();
        for chunk in records.chunks(batch_size as usize) {
            log.append(0, chunk).unwrap();
        }
        log.flush().unwrap();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "append ({label}, batches of {batch_size}): {n} records in {secs:.2} s = {:.0} records/s",
            n as f64 / secs
        );
        drop(log);

        let t = Instant::now();
        let log = SledLog::open_with(
            &path,
            SledOptions {
                fsync,
                ..Default::default()
            },
        )
        .unwrap();
        let open = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut entries = Vec::with_capacity(n as usize);
        for e in log.read(0).unwrap() {
            entries.push(e.unwrap());
        }
        let cold = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut folded = MirrorStateImage::new();
        for e in entries {
            folded.replay(e.offset, e.record);
        }
        println!(
            "  cold read+decode {:.0} records/s; fold only {:.0} records/s",
            n as f64 / cold,
            n as f64 / t.elapsed().as_secs_f64()
        );
        drop(folded);
        let t = Instant::now();
        let image = log.replay_all().unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(image.end_offset(), n);
        println!(
            "replay ({label}): {n} records in {secs:.2} s = {:.0} records/s (open {open:.2} s; {} partitions, {} offset-map runs)",
            n as f64 / secs,
            image.summary().partitions,
            image.summary().offset_runs
        );
        let t = Instant::now();
        let mut count = 0u64;
        for e in log.read(0).unwrap() {
            e.unwrap();
            count += 1;
        }
        let secs = t.elapsed().as_secs_f64();
        println!("  read+decode only: {:.0} records/s", count as f64 / secs);
        let t = Instant::now();
        log.write_snapshot(&image).unwrap();
        let snap = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let loaded = log.load_image().unwrap();
        println!(
            "  snapshot write {snap:.2} s; load_image from snapshot {:.3} s",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(loaded, image);
    }
}
