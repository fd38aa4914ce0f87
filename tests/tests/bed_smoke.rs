//! Proves the test bed is real Apache Kafka: Kafka's own Java tools and a
//! minimal independent Rust client agree on what the brokers hold.

use kmirror_tests::{bed, create_topic, kafka_tool_ok, unique, wire};

#[test]
fn two_clusters_are_distinct_real_kafka() {
    let bed = bed();
    eprintln!(
        "Apache Kafka {} at source {} and destination {}",
        bed.kafka_version, bed.source, bed.destination
    );
    let (source_id, _) = wire::metadata(&bed.source, None).unwrap();
    let (dest_id, _) = wire::metadata(&bed.destination, None).unwrap();
    assert_eq!(source_id.len(), 22, "a KRaft cluster id: {source_id}");
    assert_ne!(source_id, dest_id, "the two clusters must be independent");
}

#[test]
fn java_producer_records_read_back_by_java_and_rust() {
    let bed = bed();
    for bootstrap in [&bed.source, &bed.destination] {
        let topic = unique("smoke");
        create_topic(bootstrap, &topic, 1, &[]);
        let (_, partitions) = wire::metadata(bootstrap, Some(&topic)).unwrap();
        assert_eq!(partitions, Some(1));
        let props = format!("bootstrap.servers={bootstrap}");
        let perf = kafka_tool_ok(
            "kafka-producer-perf-test",
            &[
                "--topic",
                &topic,
                "--num-records",
                "10000",
                "--record-size",
                "100",
                "--throughput",
                "-1",
                "--producer-props",
                &props,
                "acks=all",
            ],
        );
        assert!(perf.contains("10000 records sent"), "{perf}");

        let consumed = kafka_tool_ok(
            "kafka-console-consumer",
            &[
                "--bootstrap-server",
                bootstrap,
                "--topic",
                &topic,
                "--from-beginning",
                "--max-messages",
                "10000",
                "--timeout-ms",
                "30000",
            ],
        );
        assert_eq!(consumed.lines().count(), 10_000);

        let records = wire::fetch_all(bootstrap, &topic, 0).unwrap();
        assert_eq!(records.len(), 10_000);
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.offset, i as i64);
            assert_eq!(r.value.as_ref().map(|v| v.len()), Some(100));
        }
    }
}
