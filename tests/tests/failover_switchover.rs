//! A planned switchover (`stop --fence-source`) under a continuous producer,
//! against a real source with the StandardAuthorizer: every record the
//! producer got acknowledged is on the destination, the producer is refused
//! once the fence is in force, and `unfence` removes exactly kmirror's ACL.
//!
//! The pair runs `scripts/kafka up --security`: under `--authorizer` alone
//! every PLAINTEXT client is ANONYMOUS, a super user, and Kafka never denies
//! a super user — a fence could not stop it. Here the producer is a SCRAM
//! user of its own (`writer`, allowed WRITE on the topic) on the SASL
//! listener, as an application would be; kmirror reads over PLAINTEXT as
//! the super user. Its own test binary: the pair is started once and alone.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kmirror_actors::node::StopOptions;
use kmirror_tests::mirror::{mirror_props, node_on, wait_caught_up};
use kmirror_tests::wire::fetch_all;
use kmirror_tests::{create_topic, kafka_script, kafka_tool_ok, unique, OwnPair};

/// What the producer printed: acknowledged values, and refusals.
#[derive(Default)]
struct Acks {
    acked: BTreeSet<String>,
    refused: u64,
    other_errors: Vec<String>,
}

/// A JSON string or number field of one of the producer's lines.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = &line[line.find(&format!("\"{name}\":"))? + name.len() + 3..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    rest.split(['"', ',', '}']).next()
}

/// Kafka's `kafka-verifiable-producer`, writing increasing integers as
/// `writer` until killed; a thread tallies its JSON lines.
struct Producer {
    child: Child,
    acks: Arc<Mutex<Acks>>,
}

impl Producer {
    fn start(bootstrap: &str, topic: &str, config: &std::path::Path) -> Self {
        let mut child = Command::new(kafka_script())
            .args(["tool", "kafka-verifiable-producer", "--bootstrap-server"])
            .args([bootstrap, "--topic", topic, "--throughput", "1000"])
            .args(["--acks", "-1", "--producer.config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kafka-verifiable-producer");
        let acks = Arc::new(Mutex::new(Acks::default()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let tally = acks.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let mut a = tally.lock().unwrap();
                match field(&line, "name") {
                    Some("producer_send_success") => {
                        a.acked.insert(field(&line, "value").unwrap().to_string());
                    }
                    Some("producer_send_error") if line.contains("TopicAuthorization") => {
                        a.refused += 1
                    }
                    Some("producer_send_error") => a.other_errors.push(line),
                    _ => {}
                }
            }
        });
        Producer { child, acks }
    }

    fn acked(&self) -> usize {
        self.acks.lock().unwrap().acked.len()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kafka-acls --list` lines naming `topic`, sorted (Kafka lists them in
/// no fixed order).
fn acls_on(bootstrap: &str, topic: &str) -> BTreeSet<String> {
    kafka_tool_ok(
        "kafka-acls",
        &["--bootstrap-server", bootstrap, "--list", "--topic", topic],
    )
    .lines()
    .filter(|l| l.contains("principal="))
    .map(|l| l.trim().to_string())
    .collect()
}

#[actix::test]
async fn a_fenced_switchover_under_a_continuous_producer_loses_nothing() {
    let pair = OwnPair::start("kmirror-switchover-bed", &["--security"]);
    let source_sasl = pair.get("CLUSTER_1_SASL");
    let topic = unique("switchover");
    create_topic(&pair.source, &topic, 3, &[]);
    // An application's own user, allowed to write this topic only.
    kafka_tool_ok(
        "kafka-configs",
        &[
            "--bootstrap-server",
            &pair.source,
            "--alter",
            "--add-config",
            "SCRAM-SHA-512=[password=writer-secret]",
            "--entity-type",
            "users",
            "--entity-name",
            "writer",
        ],
    );
    kafka_tool_ok(
        "kafka-acls",
        &[
            "--bootstrap-server",
            &pair.source,
            "--add",
            "--allow-principal",
            "User:writer",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--topic",
            &topic,
        ],
    );
    let allowed = acls_on(&pair.source, &topic);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("writer.properties");
    std::fs::write(
        &config,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"writer\" password=\"writer-secret\";\n",
    )
    .unwrap();

    let node = node_on(&dir.path().join("log"), &pair.destination).await;
    let mut props = mirror_props();
    props.insert("bootstrap.servers".into(), pair.source.clone());
    node.create_mirror("planned", props).await.unwrap();
    node.start_topics("planned", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, "planned", 0, Duration::from_secs(60)).await;

    let producer = Producer::start(&source_sasl, &topic, &config);
    let start = Instant::now();
    while producer.acked() < 3_000 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the producer got {} acks in 60 s",
            producer.acked()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let report = node
        .stop_topics(
            "planned",
            std::slice::from_ref(&topic),
            StopOptions {
                fence_source: true,
                ..StopOptions::default()
            },
        )
        .await
        .unwrap();
    let acked_at_stop = producer.acked();
    let fence = report.fence.as_ref().expect("fenced");
    let binding = format!("TOPIC;LITERAL;{topic};User:*;*;WRITE;DENY");
    assert_eq!((fence.mode.as_str(), &fence.acls), ("acl", &vec![binding]));
    for p in &report.partitions {
        assert_eq!(p.state, "STOPPED", "{p:?}");
        assert_eq!(p.unmirrored.as_ref().unwrap().records, 0, "{p:?}");
    }
    // The producer keeps trying and is refused; nothing more is acknowledged.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (acked, refused, others) = {
        let a = producer.acks.lock().unwrap();
        (a.acked.clone(), a.refused, a.other_errors.clone())
    };
    drop(producer);
    // An ack counted after the stop returned may be for a record appended
    // before the fence (the producer's output is read by a thread). That
    // nothing was appended after it is shown below: the source holds exactly
    // what the destination does, and the stop mirrored no more after it.
    println!(
        "{} acks counted after the stop returned",
        acked.len() - acked_at_stop
    );
    assert!(refused > 0, "the producer was never refused");
    assert!(others.is_empty(), "other producer errors: {others:?}");

    let mut on_destination = BTreeSet::new();
    let (mut source_count, mut destination_count) = (0, 0);
    for p in 0..3 {
        let dst = fetch_all(&pair.destination, &topic, p).unwrap();
        let src = fetch_all(&pair.source, &topic, p).unwrap();
        let values = |rs: &[kafka_protocol::records::Record]| -> Vec<String> {
            rs.iter()
                .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into())
                .collect()
        };
        assert_eq!(values(&dst), values(&src), "partition {p} mirrored exactly");
        source_count += src.len();
        destination_count += dst.len();
        on_destination.extend(values(&dst));
    }
    let lost: Vec<_> = acked.difference(&on_destination).collect();
    println!(
        "switchover: {} records acknowledged to the producer, {destination_count} on the destination ({source_count} on the source), {} lost; {refused} sends refused after the fence",
        acked.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged but not mirrored: {lost:?}");
    assert_eq!(
        destination_count,
        acked.len(),
        "nothing unacknowledged either"
    );

    // The fence is kmirror's one DENY binding; unfence removes exactly it.
    let fenced = acls_on(&pair.source, &topic);
    assert_eq!(fenced.len(), allowed.len() + 1, "{fenced:?}");
    assert!(fenced.iter().any(|l| l.contains("DENY")), "{fenced:?}");
    let unfenced = node
        .unfence("planned", std::slice::from_ref(&topic))
        .await
        .unwrap();
    assert_eq!(unfenced.removed_acls, fence.acls);
    assert_eq!(
        acls_on(&pair.source, &topic),
        allowed,
        "the writer's own stay"
    );
    node.shutdown().await;
}
