//! RPO now, the retention-race alarm and `describe --watch`, against real
//! Kafka and a running daemon. Every figure kmirror reports is checked
//! against one measured without kmirror's code: Kafka's own
//! `kafka-get-offsets` on both clusters (where the figure races retention,
//! a ListOffsets read at once, then the tool's).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kmirror_tests::{bed, create_topic, kafka_script, kafka_tool_ok, unique, OwnPair};
use serde_json::Value;

/// A single-partition mirror's only partition, as `describe --json` gives it.
fn partition(daemon: &Daemon, mirror: &str) -> Value {
    let (status, body) = daemon.http("GET", &format!("/mirrors/{mirror}/partitions"), None);
    assert_eq!(status, 200, "{body}");
    let parts: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(parts.len(), 1, "{body}");
    parts[0].clone()
}

/// Partition 0's log start, read in-process at once. Where it races
/// retention, Kafka's tool is too slow: its JVM start (seconds on a loaded
/// machine) can outlast the 5 s margin the warning gives.
fn log_start_now(bootstrap: &str, topic: &str) -> i64 {
    use kmirror_actors::kafka::admin::{Admin, OffsetSpec};
    use kmirror_actors::kafka::fetch::IsolationLevel;
    use kmirror_actors::kafka::{ClientConfig, KafkaClient};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = KafkaClient::connect(ClientConfig::plaintext(bootstrap))
            .await
            .unwrap();
        Admin::new(c)
            .list_offset(
                topic,
                0,
                OffsetSpec::Earliest,
                IsolationLevel::ReadUncommitted,
            )
            .await
            .unwrap()
            .offset
    })
}

/// Partition 0's offset at `time` (-1 latest, -2 earliest), by Kafka's tool.
fn offset_at(bootstrap: &str, topic: &str, time: &str) -> i64 {
    let out = kafka_tool_ok(
        "kafka-get-offsets",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--time",
            time,
        ],
    );
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{topic}:0:"))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no offset of {topic}:0 in {out}"))
}

/// Kafka's perf producer: `n` records of `size` bytes at `per_second`.
fn perf_producer(bootstrap: &str, topic: &str, n: u32, size: u32, per_second: u32) -> ChildGuard {
    let child = Command::new(kafka_script())
        .args(["tool", "kafka-producer-perf-test", "--topic", topic])
        .args(["--num-records", &n.to_string()])
        .args(["--record-size", &size.to_string()])
        .args(["--throughput", &per_second.to_string()])
        .args([
            "--producer-props",
            &format!("bootstrap.servers={bootstrap}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kafka-producer-perf-test");
    ChildGuard(child)
}

/// Creates and starts a mirror of `topic` with `props` beside the bootstrap.
fn mirror_topic(daemon: &Daemon, dir: &Path, source: &str, topic: &str, props: &[&str]) -> String {
    let file = dir.join("source.properties");
    let text = format!("bootstrap.servers={source}\n{}\n", props.join("\n"));
    std::fs::write(&file, text).unwrap();
    let mirror = unique("risk");
    let file = file.to_str().unwrap();
    daemon.mirror_topics(&mirror, file, topic);
    mirror
}

fn metric(daemon: &Daemon, name: &str, mirror: &str, topic: &str) -> f64 {
    let (_, text) = daemon.http("GET", "/metrics", None);
    let series =
        format!("kmirror_{name}{{mirror=\"{mirror}\",topic=\"{topic}\",partition=\"0\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or_else(|| panic!("no `{series}` in /metrics"))
}

#[test]
fn rpo_equals_the_end_offset_difference_while_paused_and_watch_prints_plain_lines() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let (source, destination) = (&bed().source, &bed().destination);
    let topic = unique("rpo");
    create_topic(source, &topic, 1, &[]);
    let before_last_mirrored = Instant::now();
    produce(&topic, 0, 100);
    let mirror = mirror_topic(
        &daemon,
        dir.path(),
        source,
        &topic,
        &["mirror.risk.refresh.interval.ms=500"],
    );
    wait_for("100 records mirrored", || {
        let p = partition(&daemon, &mirror);
        p["state"] == "MIRRORING" && p["destination_offset"] == 100 && p["at_risk_records"] == 0
    });
    daemon.cli_ok(&["mirror", "pause", "--mirror", &mirror, "--topics", &topic]);
    wait_for("paused", || {
        partition(&daemon, &mirror)["state"] == "PAUSED"
    });

    // While a producer runs, the figure stays between the source's end
    // offsets measured before and after. A sample is refreshed every 0.5 s;
    // 2 s between `before` and the describe leave a loaded machine's late
    // refresh 1.5 s.
    let producer = perf_producer(source, &topic, 3_000, 200, 200);
    let mut checks = 0;
    while checks < 3 {
        let before = offset_at(source, &topic, "-1");
        std::thread::sleep(Duration::from_secs(2));
        let p = partition(&daemon, &mirror);
        let after = offset_at(source, &topic, "-1");
        let (position, at_risk) = (
            p["source_offset"].as_i64().unwrap(),
            p["at_risk_records"].as_i64().unwrap(),
        );
        println!("producing: source end {before}..{after}, position {position}, at risk {at_risk}");
        assert_eq!(position, 100, "{p}");
        assert!(
            before - position <= at_risk && at_risk <= after - position,
            "at_risk_records {at_risk} outside [{}, {}]: {p}",
            before - position,
            after - position
        );
        checks += 1;
    }
    let mut producer = producer;
    assert!(producer.0.wait().unwrap().success(), "perf producer failed");

    // Once the producer stopped: exactly the difference of the two
    // clusters' end offsets, as Kafka's own tool reads them.
    std::thread::sleep(Duration::from_millis(1_500));
    let source_end = offset_at(source, &topic, "-1");
    let destination_end = offset_at(destination, &topic, "-1");
    let p = partition(&daemon, &mirror);
    let since = before_last_mirrored.elapsed().as_secs_f64();
    println!(
        "stopped: source end {source_end}, destination end {destination_end}, describe {p}, {since:.1} s since the last mirrored record was produced"
    );
    assert_eq!(source_end, 3_100);
    assert_eq!(p["at_risk_records"], source_end - destination_end, "{p}");
    let bytes = p["at_risk_bytes"].as_i64().unwrap();
    assert!(bytes >= 3_000 * 200, "{p}");
    let secs = p["at_risk_seconds"].as_f64().unwrap();
    assert!(secs > 0.0 && secs <= since, "{p}");
    assert_eq!(p["retention_warning"], false, "{p}");
    assert_eq!(p["retention_margin_records"], 100, "{p}");
    assert_eq!(
        metric(&daemon, "partition_at_risk_records", &mirror, &topic),
        3_000.0
    );
    assert_eq!(
        metric(&daemon, "partition_at_risk_bytes", &mirror, &topic),
        bytes as f64
    );
    assert_eq!(
        metric(&daemon, "partition_retention_warning", &mirror, &topic),
        0.0
    );

    let text = stdout(&daemon.cli_ok(&["mirror", "describe", "--mirror", &mirror]));
    println!("{text}");
    assert!(
        text.contains(&format!(
            "Mirror {mirror}: a failover now loses 3000 records"
        )),
        "{text}"
    );

    // --watch without a terminal: plain lines, one block per refresh;
    // Ctrl-C (SIGINT) ends it with exit 0.
    let admin = daemon.admin();
    let mut watch = ChildGuard(
        Command::new(KMIRROR)
            .args(["mirror", "describe", "--watch", "--interval", "0.5"])
            .args(["--mirror", &mirror, "--admin", &admin])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Four intervals and more, so that two refreshes fit even when the
    // process starts slowly.
    std::thread::sleep(Duration::from_millis(3_000));
    let pid = watch.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = std::mem::replace(&mut watch.0, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("--watch printed:\n{text}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains('\x1b'), "no ANSI codes without a terminal");
    let refreshes = text
        .lines()
        .filter(|l| l.starts_with("--- describe at "))
        .count();
    assert!(refreshes >= 2, "{text}");
    assert!(
        text.lines()
            .filter(|l| l.starts_with(&mirror) && l.contains("PAUSED") && l.contains("3000 rec"))
            .count()
            >= 2,
        "{text}"
    );
}

#[test]
fn the_retention_alarm_fires_before_retention_deletes_unmirrored_records() {
    // Kafka checks retention every second here, so a gap comes quickly.
    // The 2 MiB kept is the brokers' default, not the topic's: the alarm
    // must read the retention in force, wherever it is set.
    let pair = OwnPair::start(
        "kmirror-risk",
        &[
            "--broker-config",
            "log.retention.check.interval.ms=1000",
            "--broker-config",
            "log.retention.bytes=2097152",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let daemon = Daemon::start_config(
        dir.path(),
        port,
        &format!(
            "data_dir = \"{}\"\nadmin_listen = \"127.0.0.1:{port}\"\nmetadata_refresh_interval_ms = 1000\n[destination]\nbootstrap_servers = \"{}\"\n",
            dir.path().join("data").display(),
            pair.destination
        ),
    );
    let topic = unique("race");
    // 1 MiB segments (Kafka's minimum).
    create_topic(&pair.source, &topic, 1, &["segment.bytes=1048576"]);
    produce_to(&pair.source, &topic, 0, 10);
    let mirror = mirror_topic(
        &daemon,
        dir.path(),
        &pair.source,
        &topic,
        &[
            "mirror.risk.refresh.interval.ms=500",
            "mirror.retention.margin.ms=5000",
        ],
    );
    wait_for("10 records mirrored", || {
        partition(&daemon, &mirror)["destination_offset"] == 10
    });
    daemon.cli_ok(&["mirror", "pause", "--mirror", &mirror, "--topics", &topic]);
    wait_for("paused", || {
        partition(&daemon, &mirror)["state"] == "PAUSED"
    });
    let p = partition(&daemon, &mirror);
    assert_eq!(p["retention_warning"], false, "{p}");

    // ~200 KiB/s: 2 MiB of room lasts ~10 s, deletion starts past 3 MiB.
    let started = Instant::now();
    let _producer = perf_producer(&pair.source, &topic, 6_000, 1_000, 200);
    let deadline = Instant::now() + Duration::from_secs(60);
    let warned = loop {
        let p = partition(&daemon, &mirror);
        if p["retention_warning"] == true {
            break p;
        }
        assert!(Instant::now() < deadline, "no retention warning: {p}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let log_start = log_start_now(&pair.source, &topic);
    let by_tool = offset_at(&pair.source, &topic, "-2");
    println!(
        "warned after {:.1} s: {warned}; source log start then {log_start} (kafka-get-offsets a moment later: {by_tool})",
        started.elapsed().as_secs_f64()
    );
    assert!(
        by_tool >= log_start,
        "Kafka's tool read an earlier log start ({by_tool}) than ListOffsets before it ({log_start})"
    );
    assert!(
        log_start <= 10,
        "the warning came after retention passed the mirror's position 10 (log start {log_start})"
    );
    assert_eq!(
        warned["retention_margin_records"],
        10 - log_start,
        "{warned}"
    );
    assert!(warned["retention_margin_ms"]
        .as_i64()
        .is_some_and(|m| (0..5_000).contains(&m)));
    // The metrics say the same (read a moment later: the estimate moves
    // with the producer's rate, so the check waits for a consistent pair).
    wait_for("the warning in /metrics", || {
        metric(&daemon, "partition_retention_warning", &mirror, &topic) == 1.0
            && metric(&daemon, "partition_retention_margin_ms", &mirror, &topic) < 5_000.0
    });
    wait_for("the warning in describe's text", || {
        let text = stdout(&daemon.cli_ok(&["mirror", "describe", "--mirror", &mirror]));
        text.contains("WARN ") && text.contains("RETENTION WARNING")
    });

    // The race is then lost: Kafka deletes what was not mirrored…
    wait_for("the source's log start past the mirrored position", || {
        offset_at(&pair.source, &topic, "-2") > 10
    });
    let gone = offset_at(&pair.source, &topic, "-2");
    println!(
        "log start {gone} after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    wait_for("describe shows the gap", || {
        partition(&daemon, &mirror)["retention_margin_records"]
            .as_i64()
            .is_some_and(|m| m < 0)
    });
    // …and a resume records it as a gap, as before.
    daemon.cli_ok(&["mirror", "resume", "--mirror", &mirror, "--topics", &topic]);
    wait_for("resumed past the gap", || {
        partition(&daemon, &mirror)["source_offset"].as_i64() > Some(gone)
    });
    let out = daemon.cli_ok(&[
        "offsets",
        "translate",
        "--mirror",
        &mirror,
        "--topic",
        &topic,
        "--partition",
        "0",
        "--offset",
        "10",
        "--json",
    ]);
    let t: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(t["kind"], "gap", "{t}");

    // The daemon said so once, when the warning started.
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    let warnings = log
        .lines()
        .filter(|l| l.contains("about to delete records not mirrored"))
        .count();
    assert_eq!(warnings, 1, "{log}");
}
