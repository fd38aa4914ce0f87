//! Brokers restarting under a mirror, against real Kafka: a source broker
//! and a destination broker stopped (SIGTERM) or killed (kill -9) mid-copy
//! and started again, and the leader of a mirrored partition killed on a
//! three-broker destination (RF 3) — each under Kafka's verifiable
//! producer, each checked record by record with Kafka's own tools, each
//! printing its `RELIABILITY|…` line. `KMIRROR_FAULTS_LONG=1` injects
//! each fault three times with longer outages.
//! Also: describe keeps answering, every partition listed, while a frozen
//! source holds a stop's partitions in STOPPING.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::fault_checks::*;
use common::*;
use kmirror_tests::{create_topic, unique, BrokerOp, PrivateBed};

const PARTITIONS: usize = 3;
const RATE: u32 = 300;

#[derive(Clone, Copy, Debug)]
enum Side {
    Source,
    Destination,
}

/// How many times a fault is injected, and how long each outage lasts.
fn schedule() -> (usize, Duration) {
    if long() {
        (3, Duration::from_secs(10))
    } else {
        (1, Duration::from_secs(3))
    }
}

/// Each partition's destination offset as `describe` shows it.
fn positions(daemon: &Daemon, mirror: &str) -> BTreeMap<i64, i64> {
    partitions(daemon, mirror)
        .unwrap_or_default()
        .iter()
        .map(|p| {
            (
                p["partition"].as_i64().unwrap_or(-1),
                p["destination_offset"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// The audit's state changes of `mirror`, and how many went to FAILED.
fn story(audit: &str) -> (Vec<&str>, usize) {
    let changes: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("MirrorPartitionState") && l.contains(" -> "))
        .collect();
    let failed = changes.iter().filter(|l| l.contains("-> FAILED")).count();
    (changes, failed)
}

/// Every partition's last state change in the audit is to MIRRORING, and
/// every FAILED on the way was a retryable one (an attempt number, never
/// "non-retryable").
fn assert_audit_ends_mirroring(audit: &str, topic: &str) {
    for p in 0..PARTITIONS {
        let label = format!("{topic}[{p}]");
        let last = audit
            .lines()
            .rfind(|l| {
                l.contains(&label) && l.contains("MirrorPartitionState") && l.contains(" -> ")
            })
            .unwrap_or_else(|| panic!("no state change of {label} in the audit:\n{audit}"));
        assert!(
            last.contains("-> MIRRORING"),
            "{label} ends {last}\n{audit}"
        );
    }
    assert!(
        !audit.contains("non-retryable"),
        "a broker restart is never final:\n{audit}"
    );
}

/// One fault on one side of `bed`: a mirror of a topic of its own under
/// the producer; `op` then `BrokerOp::Start` on `broker`, `injections`
/// times; then the checks and the `RELIABILITY` line.
fn restart_mid_copy(
    bed: &PrivateBed,
    dir: &Path,
    daemon: &mut Option<Daemon>,
    side: Side,
    op: BrokerOp,
    fault: &str,
) {
    let (injections, outage) = schedule();
    let data = dir.join("data");
    let topic = unique("brk");
    let mirror = unique("brkm");
    create_topic(&bed.source, &topic, PARTITIONS as u32, &[]);
    let mut producer = Producer::start(dir, &bed.source, &topic, RATE);
    let d = daemon.as_ref().unwrap();
    d.mirror_topics(&mirror, &fault_properties(dir, &bed.source), &topic);
    wait_secs("the mirror running", 60, || {
        partitions(d, &mirror).is_some_and(|p| {
            p.len() == PARTITIONS
                && p.iter().all(|p| {
                    p["state"] == "MIRRORING" && p["destination_offset"].as_i64() > Some(0)
                })
        })
    });

    let mut worst = Duration::ZERO;
    for i in 0..injections {
        std::thread::sleep(Duration::from_secs(2));
        let at = positions(d, &mirror);
        match side {
            Side::Source => bed.source_broker(1, op),
            Side::Destination => bed.destination_broker(1, op),
        }
        std::thread::sleep(outage);
        match side {
            Side::Source => bed.source_broker(1, BrokerOp::Start),
            Side::Destination => bed.destination_broker(1, BrokerOp::Start),
        }
        let recover = recovered_after(d, &mirror, &bed.source, &topic, 120);
        println!(
            "{fault} #{}: positions before {at:?}, caught up {:.1} s after the broker was back",
            i + 1,
            recover.as_secs_f64()
        );
        worst = worst.max(recover);
    }
    std::thread::sleep(Duration::from_secs(2));
    let acked = producer.stop();
    println!(
        "{fault}: the producer had {} sends acknowledged, {} refused",
        acked.len(),
        producer.failed_sends()
    );
    wait_secs("the destination equal to the source", 120, || {
        caught_up(d, &mirror, &bed.source, &topic, PARTITIONS)
    });
    let outcome = assert_exact_copy(&bed.source, &bed.destination, &topic, &acked);
    assert_translates_exactly(d, &mirror, &bed.source, &topic);

    // The audit reads the log offline: stop the daemon, read, restart.
    assert_eq!(daemon.take().unwrap().terminate().code(), Some(0));
    let text = audit(&data, &mirror);
    let (changes, failed) = story(&text);
    println!(
        "{fault}: audit has {} state changes, {failed} to FAILED:\n  {}",
        changes.len(),
        changes.join("\n  ")
    );
    assert_audit_ends_mirroring(&text, &topic);
    // The story. A destination restart moves the partition leader epoch,
    // which EPOCH_FENCING re-checks before copying on. A lost source fails
    // the partitions (retryable, an attempt number) and the retry copies
    // on — unless the fetch rode through a short outage on reconnects, and
    // then no state changed at all during it.
    match side {
        Side::Destination => assert!(
            changes
                .iter()
                .any(|l| l.contains("MIRRORING -> EPOCH_FENCING")),
            "{fault}: the audit shows MIRRORING -> EPOCH_FENCING:\n{text}"
        ),
        Side::Source if failed > 0 => {
            for p in 0..PARTITIONS {
                let label = format!("{topic}[{p}]");
                let failed_at = changes
                    .iter()
                    .position(|l| l.contains(&label) && l.contains("-> FAILED"));
                if let Some(at) = failed_at {
                    assert!(
                        changes[at].contains("attempt "),
                        "a retryable failure: {}",
                        changes[at]
                    );
                    assert!(
                        changes[at..]
                            .iter()
                            .any(|l| l.contains(&label) && l.contains("FAILED -> ")),
                        "{label} retried after it failed:\n{text}"
                    );
                }
            }
            println!("{fault}: story: FAILED (retryable), retried, MIRRORING again");
        }
        Side::Source => {
            assert_eq!(
                changes.len(),
                2 * PARTITIONS,
                "only the start's LOG_ALIGNMENT -> MIRRORING:\n{text}"
            );
            println!("{fault}: story: the fetch rode through the outage, no state changed");
        }
    }
    println!("{fault}: kmirror log verify: {}", log_verify(&data).trim());
    *daemon = Some(start_daemon(dir, &data, &bed.destination));
    reliability(fault, injections, outcome, worst);
}

#[test]
fn single_broker_restarts_mid_copy_lose_and_duplicate_nothing() {
    let bed = PrivateBed::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut daemon = Some(start_daemon(dir.path(), &data, &bed.destination));
    for (side, op, fault) in [
        (
            Side::Source,
            BrokerOp::Stop,
            "source broker restart (SIGTERM) mid-copy",
        ),
        (
            Side::Source,
            BrokerOp::Kill,
            "source broker kill -9 mid-copy",
        ),
        (
            Side::Destination,
            BrokerOp::Stop,
            "destination broker restart (SIGTERM) mid-copy",
        ),
        (
            Side::Destination,
            BrokerOp::Kill,
            "destination broker kill -9 mid-copy",
        ),
    ] {
        restart_mid_copy(&bed, dir.path(), &mut daemon, side, op, fault);
    }
    assert_eq!(daemon.take().unwrap().terminate().code(), Some(0));
}

/// The leader of `topic`'s partition `p` on a cluster, by `kafka-topics
/// --describe`, and the header line (its replication factor).
fn leader_of(bootstrap: &str, topic: &str, p: i32) -> (i32, String) {
    let (header, partitions) = kmirror_tests::mirror::describe_partitions(bootstrap, topic);
    let leader = partitions
        .iter()
        .find(|(partition, _, _)| *partition == p)
        .and_then(|(_, leader, _)| *leader)
        .unwrap_or_else(|| panic!("no leader of {topic}[{p}] in {partitions:?}"));
    (leader, header)
}

#[test]
fn the_destination_leader_killed_mid_copy_loses_and_duplicates_nothing() {
    let fault = "destination partition leader kill -9 mid-copy (RF 3)";
    let bed = PrivateBed::with_brokers(1, 3);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let daemon = start_daemon(dir.path(), &data, &bed.destination);
    let (injections, outage) = schedule();
    let topic = unique("lead");
    let mirror = unique("leadm");
    create_topic(&bed.source, &topic, PARTITIONS as u32, &[]);
    let mut producer = Producer::start(dir.path(), &bed.source, &topic, RATE);
    daemon.mirror_topics(&mirror, &fault_properties(dir.path(), &bed.source), &topic);
    wait_secs("the mirror running", 60, || {
        partitions(&daemon, &mirror).is_some_and(|p| {
            p.len() == PARTITIONS
                && p.iter().all(|p| {
                    p["state"] == "MIRRORING" && p["destination_offset"].as_i64() > Some(0)
                })
        })
    });
    let mut worst = Duration::ZERO;
    let mut victims = Vec::new();
    let mut fenced = Vec::new();
    for i in 0..injections {
        std::thread::sleep(Duration::from_secs(2));
        let (victim, header) = leader_of(&bed.destination, &topic, (i % PARTITIONS) as i32);
        assert!(header.contains("ReplicationFactor: 3"), "{header}");
        println!(
            "{fault} #{}: killing destination broker {victim}, leader of {topic}[{}]",
            i + 1,
            i % PARTITIONS
        );
        bed.destination_broker(victim as usize, BrokerOp::Kill);
        let killed = Instant::now();
        // Copying goes on through the new leader while the old one is down.
        std::thread::sleep(outage);
        let (now, _) = leader_of(&bed.destination, &topic, (i % PARTITIONS) as i32);
        assert_ne!(now, victim, "a new leader was elected");
        let during = positions(&daemon, &mirror);
        bed.destination_broker(victim as usize, BrokerOp::Start);
        println!(
            "{fault} #{}: new leader {now}; positions with the broker down {during:?}; back after {:.1} s",
            i + 1,
            killed.elapsed().as_secs_f64()
        );
        let recover = recovered_after(&daemon, &mirror, &bed.source, &topic, 120);
        worst = worst.max(recover);
        victims.push(victim);
        fenced.push(i % PARTITIONS);
    }
    std::thread::sleep(Duration::from_secs(2));
    let acked = producer.stop();
    wait_secs("the destination equal to the source", 120, || {
        caught_up(&daemon, &mirror, &bed.source, &topic, PARTITIONS)
    });
    let outcome = assert_exact_copy(&bed.source, &bed.destination, &topic, &acked);
    assert_translates_exactly(&daemon, &mirror, &bed.source, &topic);
    assert_eq!(daemon.terminate().code(), Some(0));
    let text = audit(&data, &mirror);
    let (changes, failed) = story(&text);
    println!(
        "{fault}: brokers killed {victims:?}; audit has {} state changes, {failed} to FAILED:\n  {}",
        changes.len(),
        changes.join("\n  ")
    );
    assert_audit_ends_mirroring(&text, &topic);
    // Each partition whose leader was killed went through EPOCH_FENCING
    // (the new leader's epoch re-checked before copying on).
    for p in fenced {
        let step = format!("{topic}[{p}] MIRRORING -> EPOCH_FENCING");
        assert!(
            changes.iter().any(|l| l.contains(&step)),
            "the audit shows {step}:\n{text}"
        );
    }
    println!("{fault}: kmirror log verify: {}", log_verify(&data).trim());
    reliability(fault, injections, outcome, worst);
}

/// Describe never waits on a frozen source: with the source broker frozen
/// (SIGSTOP: connections open, nothing answers), `mirror stop` leaves every
/// partition STOPPING, each waiting in its final group-offset pass and
/// failover report on the source (up to their timeouts); describe reads the
/// partitions' published status, not their mailboxes, so it keeps
/// answering — every partition listed — well inside its HTTP timeout.
#[test]
fn describe_answers_with_the_source_frozen_during_a_stop() {
    let bed = PrivateBed::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = start_daemon(dir.path(), &data, &bed.destination);
    let topic = unique("frz");
    let mirror = unique("frzm");
    create_topic(&bed.source, &topic, PARTITIONS as u32, &[]);
    produce_to(&bed.source, &topic, 0, 300);
    // Every group: the final pass reads the source's groups too.
    let props = fault_properties(dir.path(), &bed.source);
    let mut text = std::fs::read_to_string(&props).unwrap();
    text.push_str("mirror.groups.include=.*\n");
    std::fs::write(&props, text).unwrap();
    d.mirror_topics(&mirror, &props, &topic);
    wait_secs("the mirror caught up", 60, || {
        caught_up(&d, &mirror, &bed.source, &topic, PARTITIONS)
    });

    bed.stall_source();
    let stop = {
        let (admin, mirror, topic) = (d.admin(), mirror.clone(), topic.clone());
        std::thread::spawn(move || {
            kmirror(&[
                "mirror", "stop", "--mirror", &mirror, "--topics", &topic, "--admin", &admin,
            ])
        })
    };
    wait_secs("every partition STOPPING", 30, || {
        partitions(&d, &mirror)
            .is_some_and(|p| p.len() == PARTITIONS && p.iter().all(|p| p["state"] == "STOPPING"))
    });
    let mut times = Vec::new();
    let mut stopping = Vec::new();
    for _ in 0..10 {
        let at = Instant::now();
        let parts = partitions(&d, &mirror).expect("describe answers");
        let took = at.elapsed();
        times.push(took);
        assert_eq!(parts.len(), PARTITIONS, "every partition listed: {parts:?}");
        // The failover report gives up on the source after 10 s; a
        // partition may be STOPPED by the last calls.
        assert!(
            parts
                .iter()
                .all(|p| p["state"] == "STOPPING" || p["state"] == "STOPPED"),
            "{parts:?}"
        );
        stopping.push(parts.iter().filter(|p| p["state"] == "STOPPING").count());
        // Far below the 30 s the final pass may wait on the source.
        assert!(
            took < Duration::from_secs(5),
            "describe took {took:?} with the source frozen"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    times.sort();
    println!(
        "describe with the source frozen during a stop: 10 calls, median {:?}, max {:?}; partitions STOPPING at each: {stopping:?}",
        times[5],
        times[9]
    );
    assert_eq!(stopping[0], PARTITIONS, "the first calls answered mid-stop");

    bed.resume_source();
    let out = stop.join().unwrap();
    assert!(out.status.success(), "mirror stop: {}", stderr(&out));
    let parts = partitions(&d, &mirror).unwrap();
    assert!(parts.iter().all(|p| p["state"] == "STOPPED"), "{parts:?}");
    assert_eq!(d.terminate().code(), Some(0));
}
