//! Network faults between the kmirror daemon and both clusters, against
//! real Kafka: connection resets every few seconds (source side, then
//! destination side), a black hole to the source and to the destination,
//! and added latency on both. The daemon reaches each cluster only through
//! a test's own [`FaultProxy`] (the bed's brokers advertise the proxy's port,
//! `scripts/kafka up --proxied`), while Kafka's verifiable producer writes
//! to the source directly, without pause, through every fault.
//!
//! Each test checks, per partition, that the destination holds the source's
//! records at the same offsets in the same order (none lost, none twice),
//! that every value the producer saw acknowledged is there, that
//! `kmirror offsets translate` still answers exactly, and what
//! `kmirror log audit` tells; then it prints its `RELIABILITY|…` line.
//! `KMIRROR_FAULTS_LONG=1` runs the durations (`scripts/faults`);
//! without it each fault is played briefly, once or twice.

mod common;

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::fault_checks::{
    assert_exact_copy, assert_translates_exactly, audit, long, reliability, Producer,
};
use common::*;
use kmirror_actors::kafka::admin::{Admin, OffsetSpec};
use kmirror_actors::kafka::fetch::IsolationLevel;
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_tests::proxy::{Direction, FaultProxy, FaultRng};
use kmirror_tests::{create_topic, unique, ProxiedBed};
use serde_json::Value;

const PARTITIONS: i32 = 3;
/// Records a second from the verifiable producer.
const RATE: u32 = 400;
/// `request.timeout.ms` of the daemon's clients on both sides: shorter than
/// a 30 s black hole, so requests time out inside it and connections are
/// reopened (with Kafka's default, 30 s, the hole ends just as they would).
const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// One bed for the binary, a proxied listener per test.
fn bed() -> &'static ProxiedBed {
    static BED: OnceLock<ProxiedBed> = OnceLock::new();
    BED.get_or_init(|| ProxiedBed::start(8))
}

/// A mirror of one topic through a test's proxies, under a live producer.
struct Run {
    name: &'static str,
    source: FaultProxy,
    destination: FaultProxy,
    daemon: Option<Daemon>,
    producer: Producer,
    dir: tempfile::TempDir,
    topic: String,
    mirror: String,
    rng: FaultRng,
    /// Carries the proxies' tasks; dropped last.
    rt: tokio::runtime::Runtime,
}

impl Run {
    fn start(name: &'static str) -> Run {
        let rng = FaultRng::from_env(name);
        let bed = bed();
        let slot = bed.take_slot();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let source = rt.block_on(FaultProxy::listen(
            &slot.source.listen,
            &slot.source.upstream,
        ));
        let destination = rt.block_on(FaultProxy::listen(
            &slot.destination.listen,
            &slot.destination.upstream,
        ));
        let dir = tempfile::tempdir().unwrap();
        let topic = unique("netfault");
        create_topic(&bed.source, &topic, PARTITIONS as u32, &[]);
        let producer = Producer::start(dir.path(), &bed.source, &topic, RATE);
        let port = free_port();
        let text = format!(
            "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\n[destination]\nbootstrap_servers = \"{}\"\nrequest_timeout_ms = {REQUEST_TIMEOUT_MS}\n",
            dir.path().join("data").display(),
            slot.destination.listen
        );
        let daemon = Daemon::start_config(dir.path(), port, &text);
        let props = dir.path().join("source.properties");
        std::fs::write(
            &props,
            format!(
                "bootstrap.servers={}\nrequest.timeout.ms={REQUEST_TIMEOUT_MS}\n",
                slot.source.listen
            ),
        )
        .unwrap();
        let mirror = unique("net");
        daemon.mirror_topics(&mirror, props.to_str().unwrap(), &topic);
        let run = Run {
            name,
            rt,
            source,
            destination,
            daemon: Some(daemon),
            producer,
            dir,
            topic,
            mirror,
            rng,
        };
        wait_secs("the mirror copying", 90, || {
            let parts = run.describe();
            parts.len() == PARTITIONS as usize
                && parts.iter().all(|p| p["state"] == "MIRRORING")
                && run.destination_sum(&parts) > 0
        });
        assert!(
            run.source.connections() > 0 && run.destination.connections() > 0,
            "the daemon reaches both clusters through the proxies"
        );
        run
    }

    fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().unwrap()
    }

    /// `mirror describe --json` through the admin API (never fails: an
    /// unanswered call is an empty list).
    fn describe(&self) -> Vec<Value> {
        let path = format!("/mirrors/{}/partitions", self.mirror);
        match self.daemon().try_http("GET", &path, None) {
            Ok((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    fn destination_sum(&self, parts: &[Value]) -> i64 {
        parts
            .iter()
            .map(|p| p["destination_offset"].as_i64().unwrap_or(0))
            .sum()
    }

    /// The source's end offsets summed, read directly (not through a proxy).
    fn source_end(&self) -> i64 {
        let source = bed().source.clone();
        let topic = self.topic.clone();
        self.rt.block_on(async move {
            let config = ClientConfig {
                bootstrap_servers: vec![source],
                ..ClientConfig::default()
            };
            let admin = Admin::new(KafkaClient::connect(config).await.expect("source"));
            let mut sum = 0;
            for p in 0..PARTITIONS {
                sum += admin
                    .list_offset(
                        &topic,
                        p,
                        OffsetSpec::Latest,
                        IsolationLevel::ReadUncommitted,
                    )
                    .await
                    .expect("source end offset")
                    .offset;
            }
            sum
        })
    }

    /// Seconds from now (the end of a fault) until the destination holds
    /// everything the source held now.
    fn time_to_recover(&self) -> f64 {
        self.time_to_recover_past(Duration::ZERO)
    }

    /// Seconds from now until the destination holds everything the source
    /// holds after `settle`: with a fault still in force, only records
    /// produced after it prove the copy goes on (those in flight may land
    /// anyway).
    fn time_to_recover_past(&self, settle: Duration) -> f64 {
        let healed = Instant::now();
        std::thread::sleep(settle);
        let target = self.source_end();
        wait_secs("the destination to catch up after the fault", 300, || {
            let parts = self.describe();
            parts.len() == PARTITIONS as usize && self.destination_sum(&parts) >= target
        });
        healed.elapsed().as_secs_f64()
    }

    /// Stops the load, waits for the copy to be complete, checks it and
    /// the daemon's story, and prints the RELIABILITY line.
    fn finish(mut self, fault: &str, story: Story, injected: usize, recover_secs: f64) {
        let acked = self.producer.stop();
        assert!(acked.len() > 100, "the producer ran: {} acked", acked.len());
        let total = self.source_end();
        wait_secs("the final catch-up", 120, || {
            let parts = self.describe();
            parts.len() == PARTITIONS as usize
                && parts
                    .iter()
                    .all(|p| p["state"] == "MIRRORING" && p["lag"] == 0)
                && self.destination_sum(&parts) == total
        });
        let bed = bed();
        let outcome = assert_exact_copy(&bed.source, &bed.destination, &self.topic, &acked);
        assert_translates_exactly(self.daemon(), &self.mirror, &bed.source, &self.topic);
        let daemon = self.daemon.take().unwrap();
        assert_eq!(daemon.terminate().code(), Some(0), "SIGTERM exits 0");
        let story_text = audit(&self.dir.path().join("data"), &self.mirror);
        let story_lines = story_text.clone();
        let failed: Vec<&str> = story_lines
            .lines()
            .filter(|l| l.contains("-> FAILED"))
            .collect();
        for l in &failed {
            assert!(!l.contains("non-retryable"), "{fault}: {l}\n{story_text}");
        }
        match story {
            Story::NoFailure => assert!(
                failed.is_empty(),
                "{fault}: a transient network fault must not fail a partition, yet:\n{}",
                failed.join("\n")
            ),
            Story::FailedAndRetried => assert!(
                !failed.is_empty(),
                "{fault}: an outage longer than the request timeout shows as FAILED (retryable):\n{story_text}\ndaemon log:\n{}",
                daemon_log_about(self.dir.path(), "fetch")
            ),
        }
        for p in 0..PARTITIONS {
            let label = format!("{}/{}[{p}]", self.mirror, self.topic);
            let last = story_lines
                .lines()
                .rfind(|l| l.contains("MirrorPartitionState") && l.contains(&label))
                .unwrap_or_else(|| panic!("no state change of {label}:\n{story_text}"));
            assert!(
                last.contains("-> MIRRORING"),
                "{fault}: {label} ends MIRRORING: {last}\n{story_text}"
            );
        }
        println!(
            "{}: audit: {} FAILED (retryable) transitions, each partition MIRRORING again",
            self.name,
            failed.len()
        );
        for l in failed.iter().take(3) {
            println!("{}: audit: {l}", self.name);
        }
        reliability(
            fault,
            injected,
            outcome,
            Duration::from_secs_f64(recover_secs),
        );
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // The daemon goes before the proxies and the runtime that carries them.
        self.daemon.take();
        self.source.heal();
        self.destination.heal();
    }
}

/// What `kmirror log audit` must tell after the fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Story {
    /// Every partition stayed MIRRORING: the fault was absorbed by
    /// reconnecting and retrying inside the client.
    NoFailure,
    /// At least one MIRRORING -> FAILED (retryable), and every partition
    /// MIRRORING again at the end.
    FailedAndRetried,
}

/// The daemon's log lines that mention `word`, the last 30.
fn daemon_log_about(dir: &Path, word: &str) -> String {
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(word)).collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Resets every connection through `side` at seeded intervals of 2–5 s,
/// for a minute (long) or about 5 s (short).
fn resets(name: &'static str, fault: &str, destination_side: bool) {
    let mut run = Run::start(name);
    let length = Duration::from_secs(if long() { 60 } else { 5 });
    let started = Instant::now();
    let mut injected = 0;
    while started.elapsed() < length {
        let wait = run
            .rng
            .between(Duration::from_secs(2), Duration::from_secs(5));
        std::thread::sleep(wait);
        let proxy = if destination_side {
            &run.destination
        } else {
            &run.source
        };
        let n = proxy.reset_connections();
        injected += 1;
        println!(
            "{name}: reset {n} connections at {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let recover = run.time_to_recover();
    println!("{name}: caught up {recover:.1} s after the last reset");
    let fault = format!("{fault} for {} s", length.as_secs());
    run.finish(&fault, Story::NoFailure, injected, recover);
}

#[test]
fn connection_resets_to_the_source() {
    resets(
        "resets-source",
        "connection resets every 2-5 s, source side",
        false,
    );
}

#[test]
fn connection_resets_to_the_destination() {
    resets(
        "resets-destination",
        "connection resets every 2-5 s, destination side",
        true,
    );
}

/// Everything through `side` stalls for 30 s (long) or 4 s (short).
fn black_hole(name: &'static str, fault: &str, destination_side: bool) {
    let run = Run::start(name);
    let length = Duration::from_secs(if long() { 30 } else { 4 });
    let proxy = if destination_side {
        &run.destination
    } else {
        &run.source
    };
    proxy.black_hole(true);
    println!("{name}: black hole for {} s", length.as_secs());
    std::thread::sleep(length);
    proxy.black_hole(false);
    let recover = run.time_to_recover();
    println!("{name}: caught up {recover:.1} s after the black hole");
    // Long, the hole outlasts the request timeout twice over: the source
    // side then tells it as FAILED and retried; the destination's producer
    // keeps retrying its batches within `delivery.timeout.ms` (120 s).
    let story = if long() && !destination_side {
        Story::FailedAndRetried
    } else {
        Story::NoFailure
    };
    run.finish(
        &format!("{fault} ({} s)", length.as_secs()),
        story,
        1,
        recover,
    );
}

#[test]
fn a_black_hole_to_the_source() {
    black_hole("black-hole-source", "black hole to the source", false);
}

#[test]
fn a_black_hole_to_the_destination() {
    black_hole(
        "black-hole-destination",
        "black hole to the destination",
        true,
    );
}

/// How long the copy trails the source, sampled `samples` times: from
/// reading the source's end offsets (directly) until the daemon reports the
/// destination holding as much. Mean and max, in seconds.
fn mirror_delay(run: &Run, samples: usize) -> (f64, f64) {
    let (mut sum, mut max) = (0.0, 0.0f64);
    for _ in 0..samples {
        let start = Instant::now();
        let target = run.source_end();
        loop {
            let parts = run.describe();
            if parts.len() == PARTITIONS as usize && run.destination_sum(&parts) >= target {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the copy stalled"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let d = start.elapsed().as_secs_f64();
        sum += d;
        max = max.max(d);
        std::thread::sleep(Duration::from_millis(200));
    }
    (sum / samples.max(1) as f64, max)
}

#[test]
fn added_latency_on_both_sides() {
    let name = "latency";
    let run = Run::start(name);
    let samples = if long() { 60 } else { 8 };
    let (base, base_max) = mirror_delay(&run, samples);
    let delay = Duration::from_millis(200);
    for proxy in [&run.source, &run.destination] {
        proxy.set_latency(delay, delay);
    }
    let (slow, slow_max) = mirror_delay(&run, samples);
    for proxy in [&run.source, &run.destination] {
        proxy.heal();
    }
    println!(
        "{name}: 200 ms added each way on both sides: the copy trails the source by {base:.3} s -> {slow:.3} s on average (added {:.3} s), at most {base_max:.3} s -> {slow_max:.3} s ({samples} samples each)",
        slow - base
    );
    let recover = run.time_to_recover();
    let fault = format!(
        "200 ms added latency each way, both sides (the copy trails by +{:.2} s)",
        slow - base
    );
    run.finish(&fault, Story::NoFailure, 1, recover);
}

/// The connections open now go half-open — the source's requests and the
/// destination's answers vanish, sockets kept open, as when a peer is gone
/// without a FIN — and stay so: new connections work. The daemon must
/// notice (its requests time out) and reconnect; time to recover counts
/// from the injection.
#[test]
fn half_open_connections_on_both_sides() {
    let name = "half-open";
    let run = Run::start(name);
    let rounds = if long() { 3 } else { 1 };
    let mut worst = 0.0f64;
    for round in 0..rounds {
        let s = run.source.half_open(Direction::ToBroker);
        let d = run.destination.half_open(Direction::ToClient);
        println!("{name}: round {round}: {s} source and {d} destination connections half-open");
        let recover = run.time_to_recover_past(Duration::from_secs(1));
        println!("{name}: round {round}: caught up {recover:.1} s after");
        worst = worst.max(recover);
        run.source.heal();
        run.destination.heal();
        std::thread::sleep(Duration::from_secs(2));
    }
    run.finish(
        "half-open connections (no FIN), both sides",
        Story::NoFailure,
        rounds,
        worst,
    );
}
