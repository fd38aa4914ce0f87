//! `kmirror verify` against the real test bed: a healthy mirror of a few
//! thousand records with duplicate header keys is equal, in full and in a
//! seeded sample; after Kafka's own `kafka-delete-records` on the
//! destination it names the first lost offset on both sides; and the exit
//! codes (0 equal, 3 differs, 1 could not verify, 2 usage). The
//! background check (`mirror.verify.interval.ms`) records its results,
//! which describe, `/metrics` and `kmirror log audit` show.

mod common;

use common::*;
use kmirror_tests::{bed, create_topic, kafka_tool_ok, kafka_tool_stdin, unique};
use serde_json::Value;

const RECORDS: usize = 3_000;

/// `RECORDS` keyed records, each with headers `h:a,h:b,n:<i>` (a duplicate
/// key), through Kafka's console producer.
fn produce_with_headers(topic: &str) {
    let input: String = (0..RECORDS)
        .map(|i| format!("h:a,h:b,n:{i}\tkey-{i}\tvalue-{i}\n"))
        .collect();
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &[
            "--bootstrap-server",
            &bed().source,
            "--topic",
            topic,
            "--property",
            "parse.key=true",
            "--property",
            "parse.headers=true",
        ],
        input.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn verify_json(daemon: &Daemon, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["verify", "--json"];
    all.extend(args);
    let out = daemon.cli(&all);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&out), stderr(&out)));
    (out.status.code().unwrap(), report)
}

#[test]
fn verify_proves_a_healthy_copy_and_names_records_lost_on_the_destination() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let topic = unique("verify");
    create_topic(&bed().source, &topic, 3, &[]);
    produce_with_headers(&topic);
    let mirror = unique("m");
    let props = write_properties(dir.path());
    let mut text = std::fs::read_to_string(&props).unwrap();
    text.push_str("mirror.verify.interval.ms=2000\n");
    std::fs::write(&props, text).unwrap();
    daemon.mirror_topics(&mirror, &props, &topic);

    // Verify compares what the map records as copied: wait for all of it.
    wait_for("every record mirrored and recorded", || {
        verify_json(&daemon, &["--mirror", &mirror]).1["compared"] == RECORDS
    });
    let started = std::time::Instant::now();
    let out = daemon.cli(&["verify", "--mirror", &mirror]);
    let full_took = started.elapsed();
    println!("{}", stdout(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("equal to its source: {RECORDS} records compared")));

    let started = std::time::Instant::now();
    let (code, sample) = verify_json(
        &daemon,
        &["--mirror", &mirror, "--sample", "50", "--seed", "7"],
    );
    let sample_took = started.elapsed();
    println!(
        "full verify of {RECORDS} records took {full_took:?}, a sample of 3 × 50 {sample_took:?}"
    );
    assert_eq!(code, 0, "{sample}");
    assert_eq!(sample["compared"], 150, "{sample}");
    let (_, again) = verify_json(
        &daemon,
        &["--mirror", &mirror, "--sample", "50", "--seed", "7"],
    );
    assert_eq!(again, sample, "the same seed compares the same records");
    println!(
        "sample of 50 per partition, seed 7: {} compared, {} differences",
        sample["compared"], sample["differences"]
    );

    // The background check has sampled every partition meanwhile.
    wait_for("a background verify of every partition", || {
        let out = daemon.cli_ok(&["mirror", "describe", "--mirror", &mirror, "--json"]);
        let parts: Value = serde_json::from_slice(&out.stdout).unwrap();
        parts
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["verify"]["compared"] == 100)
    });
    let out = daemon.cli_ok(&["mirror", "describe", "--mirror", &mirror, "--json"]);
    let parts: Value = serde_json::from_slice(&out.stdout).unwrap();
    for p in parts.as_array().unwrap() {
        assert_eq!(p["verify"]["differences"], 0, "{p}");
        assert_eq!(p["verify"]["sample"], 100, "{p}");
    }
    println!("background verify in describe: {}", parts[0]["verify"]);
    let (_, metrics) = daemon.http("GET", "/metrics", None);
    let lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kmirror_verify_") && l.contains(&mirror))
        .collect();
    println!("{}", lines.join("\n"));
    assert!(
        lines.contains(
            &format!("kmirror_verify_records_compared{{mirror=\"{mirror}\"}} 300").as_str()
        ),
        "{metrics}"
    );
    assert!(
        lines.contains(&format!("kmirror_verify_differences{{mirror=\"{mirror}\"}} 0").as_str()),
        "{metrics}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "kmirror_verify_last_timestamp_seconds{{mirror=\"{mirror}\"}} 1"
        ))),
        "{metrics}"
    );

    // Kafka's own tool deletes the first 10 records of the busiest
    // destination partition.
    let (_, full) = verify_json(&daemon, &["--mirror", &mirror]);
    let busiest = full["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|p| p["compared"].as_u64())
        .unwrap()["partition"]
        .as_i64()
        .unwrap();
    let offsets = dir.path().join("delete.json");
    std::fs::write(
        &offsets,
        format!(
            r#"{{"version":1,"partitions":[{{"topic":"{topic}","partition":{busiest},"offset":10}}]}}"#
        ),
    )
    .unwrap();
    kafka_tool_ok(
        "kafka-delete-records",
        &[
            "--bootstrap-server",
            &bed().destination,
            "--offset-json-file",
            offsets.to_str().unwrap(),
        ],
    );

    let out = daemon.cli(&["verify", "--mirror", &mirror]);
    let text = stdout(&out);
    println!("{text}");
    assert_eq!(out.status.code(), Some(3), "{text} {}", stderr(&out));
    assert!(
        text.contains(&format!(
            "FIRST DIFFERENCE {topic}-{busiest}: source offset 0 → destination offset 0, lost: destination lost records: source offset 0 → destination offset 0 is below the destination log start 10"
        )),
        "{text}"
    );
    let (code, lost) = verify_json(&daemon, &["--mirror", &mirror]);
    assert_eq!(code, 3);
    assert_eq!(lost["differences"], 10, "{lost}");
    assert_eq!(lost["equal"], false);
    let p = &lost["partitions"][busiest as usize];
    assert_eq!(p["first_difference"]["source_offset"], 0, "{p}");
    assert_eq!(p["first_difference"]["destination_offset"], 0, "{p}");
    assert_eq!(p["first_difference"]["field"], "lost", "{p}");
    assert_eq!(
        p["equal"].as_u64().unwrap() + 10,
        p["compared"].as_u64().unwrap()
    );

    // `--through` bounds the source range: the 10 deleted are all below 10.
    let (code, upto) = verify_json(&daemon, &["--mirror", &mirror, "--through", "10"]);
    assert_eq!(
        (code, upto["differences"].as_u64()),
        (3, Some(10)),
        "{upto}"
    );

    // Exit codes: 1 could not verify, 2 usage.
    let out = daemon.cli(&["verify", "--mirror", "no-such-mirror"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fails(&out, "UNKNOWN_CLUSTER_MIRROR", "no-such-mirror");
    let out = daemon.cli(&["verify", "--mirror", &mirror, "--topics", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fails(&out, "TOPIC_NOT_IN_CLUSTER_MIRROR", "nope");
    let out = daemon.cli(&[
        "verify",
        "--mirror",
        &mirror,
        "--sample",
        "5",
        "--through",
        "9",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_fails(&out, "INVALID_REQUEST", "--through");
    let (status, body) = daemon.http(
        "POST",
        &format!("/mirrors/{mirror}/verify"),
        Some(r#"{"sample":0}"#),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("sample"), "{body}");
    assert_eq!(daemon.terminate().code(), Some(0));

    // The background check's results are a line of the story.
    let data = dir.path().join("data");
    let out = kmirror(&[
        "log",
        "audit",
        "--data-dir",
        data.to_str().unwrap(),
        "--mirror",
        &mirror,
    ]);
    let audit = stdout(&out);
    let line = audit
        .lines()
        .find(|l| l.contains("verified a sample (seed"))
        .unwrap_or_else(|| panic!("no verify line in\n{audit}"));
    println!("audit: {line}");
    assert!(
        line.contains(&format!("{topic}[")) && line.contains("100 compared"),
        "{line}"
    );
}
