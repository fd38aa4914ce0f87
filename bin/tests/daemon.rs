//! The `kmirror` binary as an operator runs it: `kmirror daemon` against
//! the real test bed, the admin API over HTTP, the CLI's exit codes and
//! error names, and a graceful SIGTERM.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kmirror_tests::{bed, create_topic, kafka_tool, kafka_tool_stdin, unique};
use serde_json::Value;

#[test]
fn settings_errors_name_the_key_and_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = kmirror(&["daemon"]);
    assert_eq!(out.status.code(), Some(2));
    assert_fails(&out, "INVALID_CONFIG", "data_dir");

    let config = dir.path().join("kmirror.toml");
    std::fs::write(
        &config,
        "data_dir = \"/tmp/unused\"\nadmin_listen = \"everywhere\"\n[destination]\nbootstrap_servers = \"127.0.0.1:9092\"\n",
    )
    .unwrap();
    let out = kmirror(&["daemon", "--config", config.to_str().unwrap()]);
    assert_fails(&out, "INVALID_CONFIG", "admin_listen");

    std::fs::write(
        &config,
        "data_dir = \"/tmp/unused\"\n[destination]\nbootstrap_servers = \"127.0.0.1:9092\"\nsecurity_protocol = \"TLS\"\n",
    )
    .unwrap();
    let out = kmirror(&["daemon", "--config", config.to_str().unwrap()]);
    assert_fails(&out, "INVALID_CONFIG", "destination.security_protocol");

    let out = Command::new(KMIRROR)
        .args([
            "daemon",
            "--config",
            config.to_str().unwrap(),
            "--destination",
            "127.0.0.1:9092",
        ])
        .env("KMIRROR_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    assert_fails(&out, "INVALID_CONFIG", "log_format");
}

#[test]
fn an_unreachable_destination_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let data = dir.path().join("data");
    let out = kmirror(&[
        "daemon",
        "--data-dir",
        data.to_str().unwrap(),
        "--destination",
        &format!("127.0.0.1:{port}"),
        "--admin-listen",
        &format!("127.0.0.1:{}", free_port()),
    ]);
    assert_fails(&out, "NETWORK_EXCEPTION", "destination");
}

#[test]
fn cli_errors_have_a_name_and_a_non_zero_exit() {
    let out = kmirror(&["mirror", "pause", "--mirror", "m"]);
    assert_eq!(out.status.code(), Some(2));
    assert_fails(&out, "INVALID_REQUEST", "--topics");

    let admin = format!("http://127.0.0.1:{}", free_port());
    let out = kmirror(&["mirror", "list", "--admin", &admin]);
    assert_fails(&out, "NETWORK_EXCEPTION", &admin);

    let out = kmirror(&[
        "mirror",
        "create",
        "--mirror",
        "m",
        "--mirror-config",
        "/nonexistent.properties",
        "--admin",
        &admin,
    ]);
    assert_fails(&out, "INVALID_CONFIG", "--mirror-config");

    let out = kmirror(&[
        "offsets",
        "translate",
        "--mirror",
        "m",
        "--topic",
        "t",
        "--partition",
        "x",
        "--offset",
        "1",
    ]);
    assert_fails(&out, "INVALID_REQUEST", "--partition");

    // Numbers of seconds that overflowed what was made of them: a panic
    // (exit 101) for `--interval 1e20`, a stop timeout wrapped to 384 ms
    // in a release build for `--timeout 18446744073709552`.
    let out = kmirror(&[
        "mirror",
        "describe",
        "--watch",
        "--interval",
        "1e20",
        "--admin",
        &admin,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_fails(&out, "INVALID_REQUEST", "--interval");
    let out = kmirror(&[
        "mirror",
        "stop",
        "--mirror",
        "m",
        "--topics",
        "t",
        "--timeout",
        "18446744073709552",
        "--admin",
        &admin,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_fails(&out, "INVALID_REQUEST", "--timeout");
}

#[test]
fn daemon_serves_the_admin_api_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());

    let (status, body) = daemon.http("GET", "/health", None);
    assert_eq!((status, body.contains("\"ok\"")), (200, true), "{body}");

    let (status, body) = daemon.http("POST", "/mirrors", Some("{\"name\": 5}"));
    assert_eq!(status, 400, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"], "INVALID_REQUEST");
    assert!(
        json["message"].as_str().unwrap().contains("invalid type"),
        "{body}"
    );

    let (status, body) = daemon.http("POST", "/mirrors/m/pause", Some("{\"topics\": []}"));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("topics"), "{body}");

    let (status, body) = daemon.http("GET", "/offsets/translate?mirror=m", None);
    assert_eq!(status, 400, "{body}");

    let (status, body) = daemon.http("GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(body.contains("kmirror_FailedPartitionState "), "{body}");

    let (status, body) = daemon.http("GET", "/state-offset", None);
    assert_eq!(status, 200, "{body}");

    let out = daemon.cli_ok(&["mirror", "list", "--json"]);
    assert!(serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .is_array());

    let out = daemon.cli_ok(&["mirror", "describe"]);
    assert!(stdout(&out).starts_with("MIRROR"), "{}", stdout(&out));

    let status = daemon.terminate();
    assert_eq!(status.code(), Some(0), "SIGTERM must exit 0");
}

fn describe(daemon: &Daemon, mirror: &str) -> Vec<Value> {
    let out = daemon.cli_ok(&["mirror", "describe", "--mirror", mirror, "--json"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn mirrored(daemon: &Daemon, mirror: &str, records: i64) -> bool {
    let parts = describe(daemon, mirror);
    parts.len() == 2
        && parts
            .iter()
            .all(|p| p["state"] == "MIRRORING" && p["lag"] == 0)
        && parts
            .iter()
            .map(|p| p["destination_offset"].as_i64().unwrap())
            .sum::<i64>()
            == records
}

fn in_state(daemon: &Daemon, mirror: &str, state: &str) -> bool {
    describe(daemon, mirror).iter().all(|p| p["state"] == state)
}

#[test]
fn a_mirror_lifecycle_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let topic = unique("cli-orders");
    create_topic(&bed().source, &topic, 2, &[]);
    produce(&topic, 0, 100);

    let mirror = unique("m");
    let props = write_properties(dir.path());
    daemon.cli_ok(&[
        "mirror",
        "create",
        "--mirror",
        &mirror,
        "--mirror-config",
        &props,
    ]);
    let out = daemon.cli(&[
        "mirror",
        "create",
        "--mirror",
        &mirror,
        "--mirror-config",
        &props,
    ]);
    assert_fails(&out, "CLUSTER_MIRROR_ALREADY_EXISTS", &mirror);

    let out = daemon.cli(&["mirror", "list", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mirror"] == mirror.as_str())
        .expect("listed");
    assert_eq!(listed["source_bootstrap"], bed().source.as_str());
    assert!(listed["source_cluster_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));

    daemon.cli_ok(&["mirror", "start", "--mirror", &mirror, "--topics", &topic]);
    wait_for("100 records mirrored", || mirrored(&daemon, &mirror, 100));

    let (_, metrics) = daemon.http("GET", "/metrics", None);
    let lag = format!(
        "kmirror_partition_lag_records{{mirror=\"{mirror}\",topic=\"{topic}\",partition=\"0\"}} 0"
    );
    assert!(
        metrics.lines().any(|l| l == lag),
        "no `{lag}` in\n{metrics}"
    );

    // The console producer's sticky partitioner may fill one partition only.
    let busy = describe(&daemon, &mirror)
        .into_iter()
        .find(|p| p["destination_offset"].as_i64() > Some(0))
        .expect("a partition with records");
    let partition = busy["partition"].to_string();
    let out = daemon.cli_ok(&[
        "offsets",
        "translate",
        "--mirror",
        &mirror,
        "--topic",
        &topic,
        "--partition",
        &partition,
        "--offset",
        "0",
        "--json",
    ]);
    let translation: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(translation["kind"], "exact", "{translation}");
    assert_eq!(translation["destination_offset"], 0, "{translation}");

    let out = daemon.cli(&["mirror", "delete", "--mirror", &mirror]);
    assert_fails(&out, "CLUSTER_MIRROR_NOT_EMPTY", "");

    let (_, body) = daemon.http("GET", "/state-offset", None);
    let before_pause =
        serde_json::from_str::<Value>(&body).unwrap()["state_validation_offset"].to_string();
    daemon.cli_ok(&["mirror", "pause", "--mirror", &mirror, "--topics", &topic]);
    wait_for("paused", || in_state(&daemon, &mirror, "PAUSED"));
    let out = daemon.cli(&["mirror", "pause", "--mirror", &mirror, "--topics", &topic]);
    assert_fails(&out, "MIRROR_TOPIC_ALREADY_PAUSED", "");
    let out = daemon.cli(&[
        "mirror",
        "resume",
        "--mirror",
        &mirror,
        "--topics",
        &topic,
        "--state-validation-offset",
        &before_pause,
    ]);
    assert_fails(&out, "INVALID_CLUSTER_MIRROR_STATES", "");
    daemon.cli_ok(&["mirror", "resume", "--mirror", &mirror, "--topics", &topic]);
    wait_for("resumed", || in_state(&daemon, &mirror, "MIRRORING"));

    // A restart resumes the mirror from the log alone.
    assert_eq!(daemon.terminate().code(), Some(0));
    produce(&topic, 100, 150);
    let daemon = Daemon::start(dir.path());
    wait_for("150 records mirrored after a restart", || {
        mirrored(&daemon, &mirror, 150)
    });

    // Failover: the stop answers once every partition is STOPPED, with
    // what was not mirrored (nothing: the mirror had caught up).
    let out = daemon.cli_ok(&["mirror", "stop", "--mirror", &mirror, "--topics", &topic]);
    assert!(in_state(&daemon, &mirror, "STOPPED"));
    let text = stdout(&out);
    assert!(text.contains("NOT-MIRRORED"), "{text}");
    assert!(
        text.contains("not mirrored: 0 records, 0 bytes, 0.000 s behind"),
        "{text}"
    );
    let out = daemon.cli_ok(&[
        "mirror",
        "stop",
        "--mirror",
        &mirror,
        "--topics",
        &topic,
        "--dry-run",
        "--json",
    ]);
    let dry: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["partitions"][0]["unmirrored"]["records"], 0, "{dry}");

    daemon.cli_ok(&["mirror", "delete", "--mirror", &mirror]);
    let out = daemon.cli(&["mirror", "describe", "--mirror", &mirror]);
    assert_fails(&out, "UNKNOWN_CLUSTER_MIRROR", "");

    assert_eq!(daemon.terminate().code(), Some(0));

    // The daemon's data dir is what the offline log tools read.
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let out = kmirror(&["log", "audit", "--data-dir", data, "--mirror", &mirror]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&topic), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("failover: stopped at source offset"),
        "{}",
        stdout(&out)
    );
}

/// A pseudo-random delay in `lo..hi` ms (no RNG crate needed for a test).
fn jitter_ms(lo: u64, hi: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    lo + nanos % (hi - lo)
}

#[test]
fn kill_minus_nine_ten_times_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("kill9");
    create_topic(&bed().source, &topic, 4, &[]);
    produce(&topic, 0, 20_000);
    // Kafka's Java producer keeps writing during all ten kills, so every
    // kill lands while records are being fetched, produced and mapped.
    // Long enough to outlast the ten rounds (400 s at 5 000 records/s, where
    // 15 000 lasted 133 s and a loaded machine's ten starts could take as
    // long); stopped after them.
    let load = Command::new(kmirror_tests::kafka_script())
        .args([
            "tool",
            "kafka-producer-perf-test",
            "--topic",
            &topic,
            "--num-records",
            "2000000",
            "--record-size",
            "100",
            "--throughput",
            "5000",
            "--producer-props",
        ])
        .arg(format!("bootstrap.servers={}", bed().source))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut load = ChildGuard(load);
    let mirror = unique("k");
    let props = write_properties(dir.path());
    let mut mid_copy = 0;
    for round in 0..10 {
        let daemon = Daemon::start(dir.path());
        if round == 0 {
            daemon.mirror_topics(&mirror, &props, &topic);
        }
        std::thread::sleep(Duration::from_millis(jitter_ms(100, 1_200)));
        kill9(daemon);
        let landed = records_on(&bed().destination, &topic);
        eprintln!("round {round}: killed with {landed} records on the destination");
        if landed > 0 && load.0.try_wait().unwrap().is_none() {
            mid_copy += 1;
        }
    }
    assert!(
        mid_copy >= 8,
        "only {mid_copy} of 10 kills landed during the copy"
    );
    assert!(
        load.0.try_wait().unwrap().is_none(),
        "the load producer stopped early"
    );
    let _ = load.0.kill();
    let _ = load.0.wait();
    let total = records_on(&bed().source, &topic);
    let daemon = Daemon::start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let parts = describe(&daemon, &mirror);
        let done = parts.len() == 4
            && parts
                .iter()
                .all(|p| p["state"] == "MIRRORING" && p["lag"] == 0)
            && parts
                .iter()
                .map(|p| p["destination_offset"].as_i64().unwrap())
                .sum::<i64>()
                == total as i64;
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "not caught up: {parts:#?}");
        std::thread::sleep(Duration::from_millis(250));
    }
    // Kafka's own consumer on both sides: every record exactly once, at the
    // same partition and offset.
    let read = |bootstrap: &str| -> Vec<String> {
        let out = kmirror_tests::kafka_tool_ok(
            "kafka-console-consumer",
            &[
                "--bootstrap-server",
                bootstrap,
                "--topic",
                &topic,
                "--from-beginning",
                "--max-messages",
                &total.to_string(),
                "--timeout-ms",
                "60000",
                "--property",
                "print.partition=true",
                "--property",
                "print.offset=true",
            ],
        );
        let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    let source = read(&bed().source);
    let destination = read(&bed().destination);
    assert_eq!(source.len(), total);
    assert_eq!(
        source, destination,
        "nothing lost, nothing duplicated, offsets identical"
    );
    assert_eq!(daemon.terminate().code(), Some(0));
}

/// Topics on a cluster, by Kafka's own `kafka-topics --list`.
fn topic_list(bootstrap: &str) -> Vec<String> {
    kmirror_tests::kafka_tool_ok("kafka-topics", &["--bootstrap-server", bootstrap, "--list"])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn discovery_recover_and_replay_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path()); // refresh interval 1 s
    let p = unique("disc");
    let props = dir.path().join("disc.properties");
    std::fs::write(
        &props,
        format!(
            "bootstrap.servers={}\nmirror.topics.include={p}-orders-.*\nmirror.topics.exclude={p}-orders-tmp.*\nmirror.failed.retry.max.attempts=1\n",
            bed().source
        ),
    )
    .unwrap();
    let mirror = unique("d");
    daemon.cli_ok(&[
        "mirror",
        "create",
        "--mirror",
        &mirror,
        "--mirror-config",
        props.to_str().unwrap(),
    ]);

    // Topics created after the mirror: discovered within two refresh
    // intervals; excluded and internal ones never.
    let (orders, tmp, internal, big) = (
        format!("{p}-orders-a"),
        format!("{p}-orders-tmp-b"),
        format!("__{p}-orders-internal"),
        format!("{p}-orders-big"),
    );
    // The destination refuses `big`'s 5 KB record until an operator acts;
    // with one attempt allowed, the partition stays FAILED until `recover`.
    create_topic(&bed().destination, &big, 1, &["max.message.bytes=2000"]);
    for t in [&orders, &tmp, &internal, &big] {
        create_topic(&bed().source, t, 1, &[]);
    }
    produce(&orders, 0, 50);
    let started = Instant::now();
    wait_for("discovery", || {
        describe(&daemon, &mirror)
            .iter()
            .any(|d| d["topic"] == orders.as_str())
    });
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "discovered after {:?}",
        started.elapsed()
    );
    wait_for("orders mirrored", || {
        describe(&daemon, &mirror)
            .iter()
            .any(|d| d["topic"] == orders.as_str() && d["destination_offset"] == 50)
    });
    let dest = topic_list(&bed().destination);
    assert!(
        dest.contains(&orders) && !dest.contains(&tmp) && !dest.contains(&internal),
        "{dest:?}"
    );
    assert!(describe(&daemon, &mirror)
        .iter()
        .all(|d| d["topic"] != tmp.as_str() && d["topic"] != internal.as_str()));

    let big_record = format!("{}\n", "x".repeat(5_000));
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &["--bootstrap-server", &bed().source, "--topic", &big],
        big_record.as_bytes(),
    );
    assert!(out.status.success());
    wait_for("big FAILED", || {
        describe(&daemon, &mirror)
            .iter()
            .any(|d| d["topic"] == big.as_str() && d["state"] == "FAILED")
    });
    let out = daemon.cli(&["mirror", "describe", "--mirror", &mirror, "--failed"]);
    let text = stdout(&out);
    assert!(
        text.contains("1/1") && text.contains("exceeds the destination limit"),
        "{text}"
    );
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        describe(&daemon, &mirror)
            .iter()
            .any(|d| d["topic"] == big.as_str() && d["state"] == "FAILED"),
        "attempts exhausted: no automatic retry"
    );
    kmirror_tests::kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            &big,
            "--add-config",
            "max.message.bytes=1048588",
        ],
    );
    daemon.cli_ok(&["mirror", "recover", "--mirror", &mirror, "--topics", &big]);
    wait_for("big mirrored after recover", || {
        describe(&daemon, &mirror).iter().any(|d| {
            d["topic"] == big.as_str() && d["state"] == "MIRRORING" && d["destination_offset"] == 1
        })
    });
    let out = daemon.cli(&["mirror", "recover", "--mirror", &mirror, "--topics", &big]);
    assert!(
        out.status.success(),
        "recovering nothing is not an error: {}",
        stderr(&out)
    );

    // The log alone rebuilds what the daemon reported.
    let reported = describe(&daemon, &mirror);
    assert_eq!(daemon.terminate().code(), Some(0));
    let data = dir.path().join("data");
    let out = kmirror(&[
        "log",
        "replay",
        "--data-dir",
        data.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let replayed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let topics = replayed["mirrors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == mirror.as_str())
        .expect("mirror in the replay")["topics"]
        .as_array()
        .unwrap()
        .clone();
    let mut names: Vec<&str> = topics.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    let mut expected = vec![big.as_str(), orders.as_str()];
    expected.sort();
    assert_eq!(names, expected);
    assert!(
        reported.iter().all(|d| d["state"] == "MIRRORING"),
        "{reported:?}"
    );
    assert!(topics.iter().all(|t| t["desired_state"] == "MIRRORING"));
    let out = kmirror(&[
        "log",
        "audit",
        "--data-dir",
        data.to_str().unwrap(),
        "--topic",
        &big,
    ]);
    let audit = stdout(&out);
    assert!(
        audit.contains("FAILED") && audit.contains("MIRRORING"),
        "{audit}"
    );

    // The maps agree with the destination; a destination that lost a
    // mirrored partition's records no longer does.
    let verify = |data: &Path| {
        kmirror(&[
            "log",
            "verify",
            "--data-dir",
            data.to_str().unwrap(),
            "--destination",
            &bed().destination,
        ])
    };
    let out = verify(&data);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    for args in [
        vec!["--delete", "--topic", orders.as_str()],
        vec!["--create", "--topic", orders.as_str(), "--partitions", "1"],
    ] {
        let mut all = vec!["--bootstrap-server", bed().destination.as_str()];
        all.extend(args);
        wait_for("kafka-topics", || {
            kafka_tool("kafka-topics", &all).status.success()
        });
    }
    let out = verify(&data);
    assert!(!out.status.success());
    assert!(
        stdout(&out).contains("the destination partition ends at 0"),
        "{}",
        stdout(&out)
    );
}
