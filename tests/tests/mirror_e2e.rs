//! The whole mirror, in process, against real Kafka: a `Node` (coordinator,
//! MirrorActor, PartitionActors, the sled log) copies topics written by
//! Kafka's Java producer, and Kafka's Java consumer reads both sides.

use std::time::{Duration, Instant};

use kmirror_tests::mirror::{
    alter_configs, consume_sorted, consume_sorted_with, lines, mirror_props, node, open_log,
    produce, produce_with, topic_overrides, wait_caught_up, without_offsets,
};
use kmirror_tests::{bed, create_topic, kafka_tool_ok, unique, wire};

#[actix::test]
async fn eight_partitions_every_codec_identical_through_kafkas_own_consumer() {
    let topic = unique("e2e-orders");
    create_topic(&bed().source, &topic, 8, &[]);
    let per_codec = 40_000; // 200,000 records in all
    let codecs = ["none", "gzip", "snappy", "lz4", "zstd"];
    for codec in codecs {
        produce(&topic, &lines(per_codec, codec), codec);
    }
    assert_eq!(
        wire::codecs(&bed().source, &topic, 0),
        codecs.map(String::from),
        "the source holds every codec's batches"
    );
    let total = per_codec * codecs.len();
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("m1", mirror_props())
        .await
        .expect("create mirror");
    let report = node
        .start_topics("m1", std::slice::from_ref(&topic), &[], None)
        .await
        .expect("start");
    assert_eq!(report.topics, vec![topic.clone()]);
    wait_caught_up(&node, "m1", total as u64, Duration::from_secs(120)).await;

    let a = consume_sorted(&bed().source, &topic, total, 60_000);
    let b = consume_sorted(&bed().destination, &topic, total, 60_000);
    assert_eq!(a.len(), total);
    assert_eq!(
        a, b,
        "key, value, headers, timestamp, partition and offset all identical"
    );
    // The console producer writes batches of at most 16 KiB: kmirror merges
    // them into far fewer destination batches (the same records, checked
    // above through Kafka's own consumer).
    let batches = |bootstrap: &str| wire::fetch_batches(bootstrap, &topic, 0).unwrap().len();
    let (source_batches, destination_batches) =
        (batches(&bed().source), batches(&bed().destination));
    assert!(
        destination_batches * 4 <= source_batches,
        "small batches merged: {source_batches} source batches, {destination_batches} on the destination"
    );
    for p in node.describe(Some("m1")).await.unwrap() {
        assert!(p.offsets_identical, "{p:?}");
        // The map answers only what a checkpoint made durable, and the
        // checkpoint may trail the copy (by design: a pump records run
        // lengths at most a second apart, or once idle); it must get there.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let t = node
                .translate("m1", &topic, p.partition, p.source_offset - 1)
                .await
                .unwrap();
            let got = (t.kind, t.destination_offset);
            if got == ("exact".to_string(), Some(p.destination_offset - 1)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "partition {}: translation of its last record still {got:?} after 15 s, expected exact at {}",
                p.partition,
                p.destination_offset - 1
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    node.shutdown().await;
}

#[actix::test]
async fn a_compacted_source_with_gaps_translates_every_offset() {
    let topic = unique("e2e-compact");
    create_topic(
        &bed().source,
        &topic,
        1,
        &[
            "cleanup.policy=compact",
            "segment.ms=300",
            "min.cleanable.dirty.ratio=0.0001",
            "min.compaction.lag.ms=0",
            "max.compaction.lag.ms=500",
        ],
    );
    let mut input = String::new();
    for i in 0..600 {
        input.push_str(&format!("seq:{i}\tkey-{}\tvalue-{i}\n", i % 23));
    }
    produce(&topic, &input, "gzip");
    tokio::time::sleep(Duration::from_millis(700)).await;
    produce(&topic, "roll:1\troll\tlast\n", "none");
    // Wait for the cleaner: fewer records than offsets.
    let start = Instant::now();
    let surviving = loop {
        let rows = consume_sorted(&bed().source, &topic, 601, 15_000);
        if rows.len() < 601 {
            break rows;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no compaction");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("mc", mirror_props()).await.unwrap();
    node.start_topics("mc", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, "mc", surviving.len() as u64, Duration::from_secs(60)).await;
    let b = consume_sorted(&bed().destination, &topic, surviving.len(), 60_000);
    let strip = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|l| {
                l.split('\t')
                    .filter(|f| !f.starts_with("Offset:"))
                    .collect::<Vec<_>>()
                    .join("\t")
            })
            .collect()
    };
    assert_eq!(
        strip(&surviving),
        strip(&b),
        "the same records in the same order"
    );
    // Every surviving source offset translates to where its record landed
    // (once the acknowledged map is checkpointed, ≤ 100 ms after the copy
    // went idle).
    let offset_of = |l: &String| -> i64 {
        l.split('\t')
            .find_map(|f| f.strip_prefix("Offset:"))
            .unwrap()
            .parse()
            .unwrap()
    };
    let last = offset_of(surviving.last().unwrap());
    let start = Instant::now();
    while node.translate("mc", &topic, 0, last).await.unwrap().kind != "exact" {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "map not checkpointed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (src, dst) in surviving.iter().zip(&b) {
        let t = node
            .translate("mc", &topic, 0, offset_of(src))
            .await
            .unwrap();
        assert_eq!(
            (t.kind.as_str(), t.destination_offset),
            ("exact", Some(offset_of(dst))),
            "{src}"
        );
    }
    let p = &node.describe(Some("mc")).await.unwrap()[0];
    assert!(!p.offsets_identical, "{p:?} {surviving:?}");
    node.shutdown().await;
}

#[actix::test]
async fn only_committed_transactional_records_arrive() {
    // Kafka's TransactionalMessageCopier writes the source topic in
    // transactions of 50, aborting some at random (and re-sending their
    // records in a later, committed transaction).
    let input = unique("e2e-txn-in");
    let topic = unique("e2e-txn");
    create_topic(&bed().source, &input, 1, &[]);
    create_topic(&bed().source, &topic, 1, &[]);
    produce(&input, &lines(1_000, "txn"), "none");
    kmirror_tests::kafka_tool_ok(
        "kafka-transactional-message-copier",
        &[
            "--broker-list",
            &bed().source,
            "--input-topic",
            &input,
            "--input-partition",
            "0",
            "--output-topic",
            &topic,
            "--transactional-id",
            &unique("copier"),
            "--transaction-size",
            "50",
            "--enable-random-aborts",
            "--max-messages",
            "1000",
        ],
    );
    let committed = consume_sorted_with(
        &bed().source,
        &topic,
        1_000,
        60_000,
        &["--isolation-level", "read_committed"],
    );
    assert_eq!(committed.len(), 1_000);
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("mt", mirror_props()).await.unwrap();
    node.start_topics("mt", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, "mt", 1_000, Duration::from_secs(60)).await;
    let mirrored = consume_sorted(&bed().destination, &topic, 1_001, 15_000);
    assert_eq!(
        without_offsets(&committed),
        without_offsets(&mirrored),
        "exactly the committed records, in order"
    );
    let p = &node.describe(Some("mt")).await.unwrap()[0];
    assert_eq!(
        p.destination_offset, 1_000,
        "no aborted record and no marker on the destination"
    );
    assert!(
        p.source_offset > 1_000,
        "the source had markers (and aborted data) to skip: {p:?}"
    );
    node.shutdown().await;
}

/// Records whose values lz4 cannot shrink (random hex), written by Kafka's
/// Java producer with lz4 in small batches: kmirror merges them and, the
/// source's compression having saved nothing, stores the merged frame's
/// blocks instead of compressing them again. The destination broker
/// validates those batches (it decompresses every lz4 batch it takes in)
/// and Kafka's own consumer reads the same records on both sides.
#[actix::test]
async fn merged_lz4_of_incompressible_values_reads_back_identical() {
    let topic = unique("e2e-lz4-stored");
    create_topic(&bed().source, &topic, 1, &[]);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut input = String::new();
    let n = 3_000;
    for i in 0..n {
        let value: String = (0..25)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                format!("{:016x}", rng)
            })
            .collect();
        input.push_str(&format!("seq:{i}\tkey-{}\t{value}\n", i % 17));
    }
    produce_with(
        &bed().source,
        &topic,
        &input,
        &["compression.type=lz4", "linger.ms=50", "batch.size=8192"],
    );
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("ml", mirror_props()).await.unwrap();
    node.start_topics("ml", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    wait_caught_up(&node, "ml", n as u64, Duration::from_secs(120)).await;
    let a = consume_sorted(&bed().source, &topic, n, 60_000);
    let b = consume_sorted(&bed().destination, &topic, n, 60_000);
    assert_eq!(a.len(), n);
    assert_eq!(a, b, "the same records, offsets and all");
    let batches = |bootstrap: &str| wire::raw_batches(bootstrap, &topic, 0, 0).unwrap();
    let (source, destination) = (batches(&bed().source), batches(&bed().destination));
    assert!(
        destination.len() * 4 <= source.len(),
        "merged: {} source batches, {} on the destination",
        source.len(),
        destination.len()
    );
    assert_eq!(
        (
            wire::codecs(&bed().source, &topic, 0),
            wire::codecs(&bed().destination, &topic, 0)
        ),
        (vec!["lz4".to_string()], vec!["lz4".to_string()]),
        "lz4 batches on both sides"
    );
    node.shutdown().await;
}

/// A caught-up partition's next record waits on no log write of its own,
/// on real Kafka: alignment records the run it opens and the leader epoch
/// it will be written in (ListOffsets' epoch, which must be the one Kafka
/// stamps on the batch), before the pump's producer is recorded; after the
/// record, the log holds only its checkpoint. A wrong epoch guess would
/// show as a second `SourceEpochs` record after the producer.
#[actix::test]
async fn an_idle_partitions_first_record_needs_no_log_write_before_its_produce() {
    use kmirror_events::Record;
    use kmirror_store::EventLog;

    let topic = unique("e2e-ahead");
    create_topic(&bed().source, &topic, 1, &[]);
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("ahead", mirror_props()).await.unwrap();
    node.start_topics("ahead", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    let start = Instant::now();
    while node.describe(Some("ahead")).await.unwrap()[0].state != "MIRRORING" {
        assert!(start.elapsed() < Duration::from_secs(60), "never MIRRORING");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    produce(&topic, &lines(1, "ahead"), "none");
    wait_caught_up(&node, "ahead", 1, Duration::from_secs(60)).await;
    // The checkpoint of the record (lazy, at most a few hundred ms later).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    node.shutdown().await;
    drop(node);

    let log = open_log(dir.path()).await;
    let mut story = Vec::new();
    for e in log.read(0).unwrap() {
        match e.unwrap().record {
            Record::OffsetMapRun(_, Some(r)) => story.push(format!(
                "run {}+{} len {}",
                r.source_start, r.destination_start, r.length
            )),
            Record::SourceEpochs(_, Some(e)) => story.push(format!("epochs {:?}", e.entries)),
            Record::MirrorProducer(_, Some(_)) => story.push("producer".into()),
            _ => {}
        }
    }
    println!("the partition's story in the log: {story:?}");
    let producer = story.iter().position(|s| s == "producer").unwrap();
    let (before, after) = story.split_at(producer);
    assert!(
        before.iter().any(|s| s == "run 0+0 len 0")
            && before.iter().any(|s| s.starts_with("epochs")),
        "the run and the epoch recorded at alignment: {story:?}"
    );
    assert_eq!(
        after[1..],
        ["run 0+0 len 1".to_string()],
        "after the producer, only the record's checkpoint: {story:?}"
    );
    let a = consume_sorted(&bed().source, &topic, 1, 30_000);
    let b = consume_sorted(&bed().destination, &topic, 1, 30_000);
    assert_eq!(a, b);
}

/// One start of many topics creates each on the destination with its own
/// source's partition count and explicit configs (read several topics at a
/// time, so one topic's answer must never reach another), and grows the
/// one made beforehand with too few partitions; Kafka's own tools read
/// them back.
#[actix::test]
async fn a_start_of_many_topics_creates_each_as_its_source_is() {
    let prefix = unique("e2e-many");
    let topics: Vec<String> = (0..12).map(|i| format!("{prefix}-{i}")).collect();
    for (i, topic) in topics.iter().enumerate() {
        let retention = format!("retention.ms={}", 3_600_000 + i);
        create_topic(&bed().source, topic, 1 + (i % 3) as u32, &[&retention]);
    }
    create_topic(&bed().destination, &topics[5], 1, &[]);
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("many", mirror_props()).await.unwrap();
    let started = node
        .start_topics("many", &[format!("{prefix}-.*")], &[], None)
        .await
        .unwrap();
    assert_eq!(started.topics.len(), 12, "{started:?}");
    let described = kafka_tool_ok(
        "kafka-topics",
        &["--bootstrap-server", &bed().destination, "--describe"],
    );
    for (i, topic) in topics.iter().enumerate() {
        let head = described
            .lines()
            .find(|l| l.starts_with(&format!("Topic: {topic}\t")))
            .unwrap_or_else(|| panic!("{topic} not on the destination: {described}"));
        assert!(
            head.contains(&format!("PartitionCount: {}", 1 + i % 3)),
            "{head}"
        );
        assert!(
            head.contains(&format!("retention.ms={}", 3_600_000 + i)) || i == 5,
            "{head}"
        );
        assert!(
            head.contains("message.timestamp.before.max.ms=9223372036854775807") || i == 5,
            "{head}"
        );
    }
    node.shutdown().await;
}

/// A topic altered from `delete` to `compact` keeps the keyless records it
/// took before (Kafka checks keys at produce, not when the policy
/// changes), and the destination, created compacted, refuses them. The
/// partition fails saying why; the metadata sync holds the destination at
/// `delete` with nothing deleted by time or size; the retry copies every
/// record at its offset; caught up, the destination is compacted again and
/// the hold's overrides are gone — as Kafka's own tools read both sides.
#[actix::test]
async fn keyless_records_from_before_a_topic_became_compacted_are_copied_under_a_hold() {
    let topic = unique("e2e-keyless");
    create_topic(&bed().source, &topic, 1, &[]);
    produce(
        &topic,
        "seq:0\tNULL\tbefore\nseq:1\tNULL\tbefore-too\n",
        "none",
    );
    alter_configs("topics", &topic, "--add-config", "cleanup.policy=compact");
    produce(&topic, "seq:2\tk\tafter\n", "none");
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path()).await;
    node.create_mirror("kl", mirror_props()).await.unwrap();
    node.start_topics("kl", std::slice::from_ref(&topic), &[], None)
        .await
        .unwrap();
    let start = Instant::now();
    let error = loop {
        let p = node.describe(Some("kl")).await.unwrap().remove(0);
        if p.state == "FAILED" {
            break p.error.unwrap_or_default();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not FAILED: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        error.contains("without key") && error.contains("holds the destination topic"),
        "{error}"
    );
    wait_caught_up(&node, "kl", 3, Duration::from_secs(60)).await;
    assert_eq!(
        consume_sorted(&bed().destination, &topic, 3, 10_000),
        consume_sorted(&bed().source, &topic, 3, 10_000),
        "every record at its offset"
    );
    let start = Instant::now();
    loop {
        let overrides = topic_overrides(&bed().destination, &topic);
        if overrides.get("cleanup.policy").map(String::as_str) == Some("compact")
            && !overrides.contains_key("retention.ms")
            && !overrides.contains_key("retention.bytes")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still held: {overrides:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    node.shutdown().await;
}
