//! What every broker, disk and process fault suite checks after its fault,
//! and the one `RELIABILITY|…` line it prints when it passes (collected by
//! `scripts/faults` into the README's table).
//!
//! The checks read both clusters with Kafka's own tools, never kmirror's
//! client: a test of kmirror's copy must not trust kmirror's reading of it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kmirror_tests::{kafka_script, kafka_tool_ok};
use serde_json::Value;

use super::{ChildGuard, Daemon};

/// `KMIRROR_FAULTS_LONG=1`: the full durations and injection
/// counts; otherwise one short injection that still checks everything.
pub fn long() -> bool {
    std::env::var("KMIRROR_FAULTS_LONG").is_ok_and(|v| v == "1")
}

/// Mirror properties for a fault test: retries come back quickly (the
/// default backoff grows to five minutes, longer than any test waits).
pub fn fault_properties(dir: &Path, source: &str) -> String {
    let file = dir.join("source.properties");
    std::fs::write(
        &file,
        format!(
            "bootstrap.servers={source}\nmirror.failed.retry.initial.backoff.ms=200\nmirror.failed.retry.max.backoff.ms=2000\nmirror.failed.retry.max.attempts=1000\n"
        ),
    )
    .unwrap();
    file.to_str().unwrap().to_owned()
}

/// A daemon on `dir/data` copying into `destination`.
pub fn start_daemon(dir: &Path, data: &Path, destination: &str) -> Daemon {
    let port = super::free_port();
    let text = format!(
        "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\n[destination]\nbootstrap_servers = \"{destination}\"\n",
        data.display()
    );
    Daemon::start_config(dir, port, &text)
}

/// Kafka's verifiable producer (unique values "0", "1", …, acks=all,
/// idempotent) writing its per-record reports to a file, so the test
/// learns which sends the source acknowledged.
pub struct Producer {
    child: Option<ChildGuard>,
    out: PathBuf,
}

impl Producer {
    pub fn start(dir: &Path, bootstrap: &str, topic: &str, rate: u32) -> Producer {
        let out = dir.join(format!("producer-{topic}.jsonl"));
        let file = std::fs::File::create(&out).unwrap();
        // Round robin: every partition gets records from the first second
        // (the default sticky partitioner fills one for a whole batch).
        let config = dir.join(format!("producer-{topic}.properties"));
        std::fs::write(
            &config,
            "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner\n",
        )
        .unwrap();
        let child = Command::new(kafka_script())
            .args([
                "tool",
                "kafka-verifiable-producer",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--throughput",
                &rate.to_string(),
                "--max-messages",
                "-1",
                "--acks",
                "-1",
                "--producer.config",
                config.to_str().unwrap(),
            ])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("start kafka-verifiable-producer");
        Producer {
            child: Some(ChildGuard(child)),
            out,
        }
    }

    /// Stops it and returns the values the source acknowledged.
    pub fn stop(&mut self) -> BTreeSet<String> {
        if let Some(mut c) = self.child.take() {
            // SIGTERM: the tool flushes and reports what is in flight.
            let _ = Command::new("kill")
                .args(["-TERM", &c.0.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while c.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.0.kill();
            let _ = c.0.wait();
        }
        self.acked()
    }

    /// The values acknowledged so far.
    pub fn acked(&self) -> BTreeSet<String> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["name"] == "producer_send_success")
            .filter_map(|v| v["value"].as_str().map(str::to_owned))
            .collect()
    }

    /// Sends the source refused (the producer's own count).
    pub fn failed_sends(&self) -> usize {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains("\"producer_send_error\""))
            .count()
    }
}

/// End offset per partition of `topic`, by `kafka-get-offsets`.
pub fn end_offsets(bootstrap: &str, topic: &str) -> BTreeMap<i32, i64> {
    kafka_tool_ok(
        "kafka-get-offsets",
        &["--bootstrap-server", bootstrap, "--topic", topic],
    )
    .lines()
    .filter_map(|l| {
        let mut f = l.split(':');
        let (_, p, o) = (f.next()?, f.next()?, f.next()?);
        Some((p.trim().parse().ok()?, o.trim().parse().ok()?))
    })
    .collect()
}

/// Every committed record of `topic`, per partition in offset order, as
/// (offset, value), read by Kafka's console consumer.
pub fn records(bootstrap: &str, topic: &str, total: i64) -> BTreeMap<i32, Vec<(i64, String)>> {
    let mut by_partition: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    if total == 0 {
        return by_partition;
    }
    let out = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            &total.to_string(),
            "--timeout-ms",
            "30000",
            "--property",
            "print.partition=true",
            "--property",
            "print.offset=true",
        ],
    );
    for line in out.lines() {
        let mut fields = line.splitn(3, '\t');
        let (Some(p), Some(o), Some(v)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let (Some(p), Some(o)) = (
            p.strip_prefix("Partition:").and_then(|p| p.parse().ok()),
            o.strip_prefix("Offset:").and_then(|o| o.parse().ok()),
        ) else {
            continue;
        };
        by_partition.entry(p).or_default().push((o, v.to_owned()));
    }
    for r in by_partition.values_mut() {
        r.sort();
    }
    by_partition
}

/// What the comparison of the two clusters found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Source records, or acknowledged values, missing on the destination.
    pub lost: usize,
    /// Destination records beyond one per value.
    pub duplicated: usize,
    /// Records compared.
    pub checked: usize,
}

/// Compares `topic` on both clusters and against the acknowledged values;
/// asserts 0 lost, 0 duplicated, same values at the same offsets in the
/// same order per partition, and nothing on the destination the source
/// lacks.
pub fn assert_exact_copy(
    source: &str,
    destination: &str,
    topic: &str,
    acked: &BTreeSet<String>,
) -> Outcome {
    let (src_end, dst_end) = (end_offsets(source, topic), end_offsets(destination, topic));
    assert_eq!(
        src_end, dst_end,
        "end offsets of {topic}: source vs destination"
    );
    let total: i64 = src_end.values().sum();
    let (a, b) = (
        records(source, topic, total),
        records(destination, topic, total),
    );
    let count = |m: &BTreeMap<i32, Vec<(i64, String)>>| m.values().map(Vec::len).sum::<usize>();
    assert_eq!(
        count(&a) as i64,
        total,
        "the console consumer read the source"
    );
    let src_values: BTreeSet<&String> = a.values().flatten().map(|(_, v)| v).collect();
    let dst_values: BTreeSet<&String> = b.values().flatten().map(|(_, v)| v).collect();
    let lost = src_values.difference(&dst_values).count()
        + acked.iter().filter(|v| !dst_values.contains(v)).count();
    let duplicated = count(&b) - dst_values.len();
    let foreign = dst_values.difference(&src_values).count();
    let outcome = Outcome {
        lost,
        duplicated,
        checked: count(&b),
    };
    assert_eq!(
        (lost, duplicated, foreign),
        (0, 0, 0),
        "(lost, duplicated, on the destination only) of {topic}: {outcome:?}"
    );
    for (p, recs) in &a {
        let theirs = b.get(p).map(Vec::as_slice).unwrap_or_default();
        if theirs != recs.as_slice() {
            let first = recs.iter().zip(theirs).position(|(x, y)| x != y);
            panic!(
                "partition {p}: destination differs from the source ({} vs {} records, first difference at index {first:?})",
                theirs.len(),
                recs.len()
            );
        }
    }
    outcome
}

/// `mirror`'s partitions as `daemon` describes them, or None while it does
/// not answer.
pub fn partitions(daemon: &Daemon, mirror: &str) -> Option<Vec<Value>> {
    match daemon.try_http("GET", &format!("/mirrors/{mirror}/partitions"), None) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// Every one of `n` partitions MIRRORING, lag 0, and its destination end
/// equal to the source's end offset.
pub fn caught_up(daemon: &Daemon, mirror: &str, source: &str, topic: &str, n: usize) -> bool {
    let Some(parts) = partitions(daemon, mirror) else {
        return false;
    };
    if parts.len() != n
        || !parts
            .iter()
            .all(|p| p["state"] == "MIRRORING" && p["lag"] == 0)
    {
        return false;
    }
    let ends = end_offsets(source, topic);
    parts.iter().all(|p| {
        let part = p["partition"].as_i64().unwrap_or(-1) as i32;
        ends.get(&part).copied() == p["destination_offset"].as_i64()
    })
}

/// Waits up to `secs` for `check` to hold of `mirror`'s partitions as
/// describe shows them, returning how long it took; a timeout shows each
/// partition as last seen, so a red run says which one stuck and where.
pub fn wait_partitions(
    daemon: &Daemon,
    mirror: &str,
    what: &str,
    secs: u64,
    mut check: impl FnMut(&[Value]) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let parts = partitions(daemon, mirror);
        if parts.as_deref().is_some_and(&mut check) {
            return start.elapsed();
        }
        if start.elapsed() >= Duration::from_secs(secs) {
            let shown: Vec<String> = parts
                .unwrap_or_default()
                .iter()
                .map(|p| {
                    format!(
                        "{} {} lag {} destination {} retry {} error {}",
                        p["partition"],
                        p["state"],
                        p["lag"],
                        p["destination_offset"],
                        p["retry_attempt"],
                        p["error"]
                    )
                })
                .collect();
            panic!(
                "timed out after {secs} s waiting for {what}; partitions:\n  {}",
                shown.join("\n  ")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// From now (a fault's end) until every partition of `mirror` is
/// MIRRORING with the source's records of now all copied, the source's
/// end offsets read by Kafka's `kafka-get-offsets`. On a live stream a
/// "lag 0" reading can be rare under load (something is always in
/// flight), so the target is fixed at the fault's end instead; describe is
/// polled while the tool starts (seconds on a loaded machine), so that
/// time does not count.
pub fn recovered_after(
    daemon: &Daemon,
    mirror: &str,
    source: &str,
    topic: &str,
    secs: u64,
) -> Duration {
    let start = Instant::now();
    let (target, seen) = std::thread::scope(|s| {
        let read = s.spawn(|| end_offsets(source, topic));
        let mut seen = Vec::new();
        while !read.is_finished() {
            seen.push((start.elapsed(), partitions(daemon, mirror)));
            std::thread::sleep(Duration::from_millis(200));
        }
        (read.join().unwrap(), seen)
    });
    let copied = |parts: &[Value]| {
        parts.len() == target.len()
            && parts.iter().all(|p| {
                let part = p["partition"].as_i64().unwrap_or(-1) as i32;
                p["state"] == "MIRRORING"
                    && p["source_offset"].as_i64() >= target.get(&part).copied()
            })
    };
    if let Some((at, _)) = seen
        .iter()
        .find(|(_, parts)| parts.as_deref().is_some_and(copied))
    {
        return *at;
    }
    let what = format!("the mirror to copy the source's ends of the fault's end {target:?}");
    wait_partitions(daemon, mirror, &what, secs, copied);
    start.elapsed()
}

/// `kmirror offsets translate` of every non-empty partition's first and
/// last offsets: exact, and the same offset (kmirror preserves offsets
/// here).
pub fn assert_translates_exactly(daemon: &Daemon, mirror: &str, source: &str, topic: &str) {
    for (p, end) in end_offsets(source, topic) {
        if end == 0 {
            continue;
        }
        for offset in [0, end - 1] {
            let out = daemon.cli(&[
                "offsets",
                "translate",
                "--mirror",
                mirror,
                "--topic",
                topic,
                "--partition",
                &p.to_string(),
                "--offset",
                &offset.to_string(),
                "--json",
            ]);
            assert!(out.status.success(), "{}", super::stderr(&out));
            let t: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(t["kind"], "exact", "{topic}[{p}]@{offset}: {t}");
            assert_eq!(
                t["destination_offset"], offset,
                "{topic}[{p}]@{offset}: {t}"
            );
        }
    }
}

/// `kmirror log audit` of `mirror` over the data dir `data` (its daemon
/// stopped: sled holds the directory's lock).
pub fn audit(data: &Path, mirror: &str) -> String {
    let out = super::kmirror(&[
        "log",
        "audit",
        "--data-dir",
        data.to_str().unwrap(),
        "--mirror",
        mirror,
    ]);
    assert!(out.status.success(), "log audit: {}", super::stderr(&out));
    super::stdout(&out)
}

/// `kmirror log verify` over the data dir `data`: asserts it finds the log
/// sound and returns its verdict.
pub fn log_verify(data: &Path) -> String {
    let out = super::kmirror(&["log", "verify", "--data-dir", data.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "log verify: {}{}",
        super::stdout(&out),
        super::stderr(&out)
    );
    super::stdout(&out)
}

/// The `RELIABILITY|…` line `scripts/faults` collects.
pub fn reliability(fault: &str, injected: usize, outcome: Outcome, recover: Duration) {
    println!(
        "RELIABILITY|{fault}|{injected}|{}|{}|{:.1}|{}",
        outcome.lost,
        outcome.duplicated,
        recover.as_secs_f64(),
        outcome.checked
    );
}
