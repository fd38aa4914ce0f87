//! The global memory budget (`max_memory_bytes`) against real Kafka: a
//! backlog on 100 partitions copied by a daemon whose budget is small, and
//! the daemon's peak RSS (VmHWM, read from /proc) compared with the budget.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kmirror_tests::{bed, create_topic, kafka_script, unique};

/// `VmHWM` or `VmRSS` of a process, in KiB.
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Kafka's perf producer writing `n` records of `size` bytes as fast as it can.
fn backlog(bootstrap: &str, topic: &str, n: u32, size: u32) {
    let status = Command::new(kafka_script())
        .args(["tool", "kafka-producer-perf-test", "--topic", topic])
        .args(["--num-records", &n.to_string()])
        .args(["--record-size", &size.to_string()])
        .args(["--throughput", "-1"])
        .args([
            "--producer-props",
            &format!("bootstrap.servers={bootstrap}"),
            "acks=1",
            "linger.ms=5",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("spawn kafka-producer-perf-test");
    assert!(status.success(), "kafka-producer-perf-test failed");
}

const MIB: u64 = 1024 * 1024;

/// A gauge without labels from `/metrics`.
fn gauge(daemon: &Daemon, name: &str) -> u64 {
    let (_, text) = daemon.http("GET", "/metrics", None);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// How many of the mirror's partitions are in `state`.
fn in_state(daemon: &Daemon, mirror: &str, state: &str) -> usize {
    let (status, body) = daemon.http("GET", &format!("/mirrors/{mirror}/partitions"), None);
    assert_eq!(status, 200, "{body}");
    let parts: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    parts.iter().filter(|p| p["state"] == state).count()
}

/// A budget of 16 MiB and a 150 MB backlog over 100 partitions: every byte
/// arrives, and the peak RSS stays within the budget plus what the same
/// daemon held with the 100 partitions mirroring and nothing to copy.
#[test]
fn a_backlog_on_100_partitions_stays_within_the_memory_budget() {
    let b = bed();
    let topic = unique("budget");
    create_topic(&b.source, &topic, 100, &[]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let budget: u64 = std::env::var("BUDGET_MIB")
        .map(|v| v.parse().unwrap())
        .unwrap_or(16)
        * MIB;
    let text = format!(
        "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nmax_memory_bytes = {budget}\n[destination]\nbootstrap_servers = \"{}\"\n",
        dir.path().join("data").display(),
        b.destination
    );
    let daemon = Daemon::start_config(dir.path(), port, &text);
    let pid = daemon.child.id();
    let props = write_properties(dir.path());
    let mirror = unique("budget");
    daemon.mirror_topics(&mirror, &props, &topic);
    wait_for("100 partitions MIRRORING", || {
        in_state(&daemon, &mirror, "MIRRORING") == 100
    });
    std::thread::sleep(Duration::from_secs(2));
    let idle = proc_kib(pid, "VmRSS:") * 1024;

    // The backlog builds while the mirror is paused.
    daemon.cli_ok(&["mirror", "pause", "--mirror", &mirror, "--topics", &topic]);
    wait_for("100 partitions PAUSED", || {
        in_state(&daemon, &mirror, "PAUSED") == 100
    });
    let (records, size) = (150_000u32, 1000u32);
    backlog(&b.source, &topic, records, size);
    let started = Instant::now();
    daemon.cli_ok(&["mirror", "resume", "--mirror", &mirror, "--topics", &topic]);
    let (mut copied, mut in_flight) = (0, 0u64);
    while copied < records as usize {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{copied} of {records} records copied in 300 s"
        );
        in_flight = in_flight.max(gauge(&daemon, "kmirror_memory_in_flight_bytes"));
        std::thread::sleep(Duration::from_millis(100));
        copied = records_on(&b.destination, &topic);
    }
    let copy = started.elapsed();
    let peak = proc_kib(pid, "VmHWM:") * 1024;
    let mib = |b: u64| b as f64 / MIB as f64;
    println!(
        "memory budget {} MiB: {records} records ({} MB) over 100 partitions copied in {:.1} s; RSS {:.1} MiB mirroring with nothing to copy, peak {:.1} MiB while copying; most charged to the budget at one look {:.1} MiB",
        budget / MIB,
        records as u64 * size as u64 / 1_000_000,
        copy.as_secs_f64(),
        mib(idle),
        mib(peak),
        mib(in_flight),
    );
    // Beyond the budget: one response over its reservation (a first batch
    // larger than the limit), the allocator's slack, and the event log's
    // growth during the copy.
    let slack = 16 * MIB;
    assert!(
        peak <= idle + budget + slack,
        "peak RSS {:.1} MiB above {:.1} MiB idle + the budget {} MiB + {} MiB",
        mib(peak),
        mib(idle),
        budget / MIB,
        slack / MIB
    );
    daemon.terminate();
}

/// Every mirror reads its source through fetches of its own, all within
/// the one budget: mirrors with nothing to copy, long-polling their
/// brokers, must not keep the budget from a mirror that has records.
#[test]
fn idle_mirrors_do_not_starve_a_busy_one() {
    let b = bed();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = format!(
        "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nmax_memory_bytes = {}\n[destination]\nbootstrap_servers = \"{}\"\n",
        dir.path().join("data").display(),
        4 * MIB,
        b.destination
    );
    let daemon = Daemon::start_config(dir.path(), port, &text);
    let props = write_properties(dir.path());
    for _ in 0..4 {
        let topic = unique("idle");
        create_topic(&b.source, &topic, 1, &[]);
        let mirror = unique("idle");
        daemon.mirror_topics(&mirror, &props, &topic);
        wait_for("the idle mirror MIRRORING", || {
            in_state(&daemon, &mirror, "MIRRORING") == 1
        });
    }
    let topic = unique("busy");
    create_topic(&b.source, &topic, 1, &[]);
    produce(&topic, 0, 500);
    let mirror = unique("busy");
    let started = Instant::now();
    daemon.mirror_topics(&mirror, &props, &topic);
    wait_for("the busy mirror's 500 records on the destination", || {
        records_on(&b.destination, &topic) == 500
    });
    println!(
        "beside 4 idle mirrors, a 4 MiB budget let a fifth copy 500 records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    daemon.terminate();
}
