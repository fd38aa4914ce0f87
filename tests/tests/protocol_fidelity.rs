//! Fidelity matrix: records written by Kafka's Java console producer (null
//! header values, duplicate header keys, header order, null keys, null
//! values), for each codec and uncompressed, are fetched by kmirror's
//! protocol layer from the source, forwarded to the destination, and read by
//! Kafka's console consumer on both sides: the printed records (key, value,
//! headers, timestamp, partition) must be identical; offsets too, since the
//! source starts at 0.

mod protocol_common;

use kmirror_actors::kafka::admin::Admin;
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_tests::{bed, kafka_tool_ok, kafka_tool_stdin, unique};
use protocol_common::*;

/// Console-producer input: `headers \t key \t value`, with `NULL` as the null marker.
fn input() -> (String, usize) {
    let mut lines = vec![
        "dup:1,dup:2,solo:x,dup:3\tk-dup\tv-dup".to_owned(),
        "nullhdr:NULL,after:ok\tk-nullhdr\tv-nullhdr".to_owned(),
        "h:a\tNULL\tvalue-of-null-key".to_owned(),
        "h:b\tk-null-value\tNULL".to_owned(),
        "h:c\tNULL\tNULL".to_owned(),
        "empty:,z:NULL,a:NULL\tk-empty\t".to_owned(),
        "ü:värde,ü:zwei\tklé ✓\tvalüe ✓ with spaces and = , : signs".to_owned(),
        "order-b:1,order-a:2,order-b:3\tk-order\tv-order".to_owned(),
    ];
    for i in 0..300 {
        lines.push(format!(
            "seq:{i},dup:{},dup:NULL\tkey-{}\t{}",
            i % 7,
            i % 13,
            "x".repeat(i % 50)
        ));
    }
    let n = lines.len();
    (lines.join("\n") + "\n", n)
}

fn consume(bootstrap: &str, topic: &str, n: usize) -> Vec<String> {
    let out = kafka_tool_ok(
        "kafka-console-consumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            &n.to_string(),
            "--timeout-ms",
            "30000",
            "--property",
            "print.key=true",
            "--property",
            "print.headers=true",
            "--property",
            "print.timestamp=true",
            "--property",
            "print.partition=true",
            "--property",
            "print.offset=true",
            "--property",
            "print.value=true",
        ],
    );
    out.lines().map(str::to_owned).collect()
}

/// Drops the `Offset:` field; maps the timestamp type label (a LogAppendTime
/// source is mirrored as CreateTime with the same value).
fn normalize(line: &str) -> String {
    line.split('\t')
        .filter(|f| !f.starts_with("Offset:"))
        .map(|f| {
            f.replacen("LogAppendTime:", "Time:", 1)
                .replacen("CreateTime:", "Time:", 1)
        })
        .collect::<Vec<_>>()
        .join("\t")
}

async fn run_case(codec: &str, topic_configs: &[(&str, &str)]) {
    run_case_with(codec, topic_configs, &[], 1_048_588).await
}

async fn run_case_with(
    codec: &str,
    topic_configs: &[(&str, &str)],
    dest_configs: &[(&str, &str)],
    max_message_bytes: usize,
) {
    let bed = bed();
    let topic = unique(&format!("proto-fid-{codec}"));
    let src = client(&bed.source).await;
    let dst = client(&bed.destination).await;
    create(&Admin::new(src.clone()), &topic, 1, topic_configs).await;
    create(&Admin::new(dst.clone()), &topic, 1, dest_configs).await;
    let (text, n) = input();
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &[
            "--bootstrap-server",
            &bed.source,
            "--topic",
            &topic,
            // Not `compression.type`: the console producer overrides that
            // property with its own option's value (default none).
            "--compression-codec",
            codec,
            "--producer-property",
            "linger.ms=200",
            "--property",
            "parse.key=true",
            "--property",
            "parse.headers=true",
            "--property",
            "null.marker=NULL",
        ],
        text.as_bytes(),
    );
    assert!(
        out.status.success(),
        "console producer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        kmirror_tests::wire::codecs(&bed.source, &topic, 0),
        vec![codec.to_string()],
        "the source holds {codec} batches"
    );
    let producer = IdempotentProducer::new(dst.clone()).await.unwrap();
    let stats = forward_partition(&src, &producer, &topic, 0, n as i64, max_message_bytes).await;
    eprintln!(
        "{codec} {topic_configs:?}: {stats:?}",
        stats = (
            stats.batches_in,
            stats.passed_through,
            stats.reencoded,
            stats.records
        )
    );
    assert_eq!(stats.records, n as i64);
    let a = consume(&bed.source, &topic, n);
    let b = consume(&bed.destination, &topic, n);
    assert_eq!(a.len(), n, "source consumer read everything");
    assert_eq!(b.len(), n, "destination consumer read everything");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(normalize(x), normalize(y));
    }
    // And the offsets themselves match (source is contiguous from 0).
    let offs = |v: &Vec<String>| {
        v.iter()
            .map(|l| {
                l.split('\t')
                    .find(|f| f.starts_with("Offset:"))
                    .unwrap()
                    .to_owned()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(offs(&a), offs(&b));
    // Byte-exact too: nulls stay `None` (the console prints both null and
    // the string "null" as `null`), header keys and values byte for byte.
    let ra = read_all(&src, &topic, 0, n as i64).await;
    let rb = read_all(&dst, &topic, 0, n as i64).await;
    assert_eq!(ra.len(), rb.len());
    for ((oa, a), (ob, b)) in ra.iter().zip(&rb) {
        assert_eq!(oa, ob);
        assert_eq!(
            (&a.key, &a.value, &a.headers, a.timestamp),
            (&b.key, &b.value, &b.headers, b.timestamp)
        );
    }
    assert!(ra.iter().any(|(_, r)| r.key.is_none()) && ra.iter().any(|(_, r)| r.value.is_none()));
    assert!(ra
        .iter()
        .any(|(_, r)| r.headers.iter().any(|(_, v)| v.is_none())));
    // Spot-check that the interesting shapes really were produced.
    let joined = a.join("\n");
    assert!(
        joined.contains("dup:1,dup:2,solo:x,dup:3"),
        "duplicate header keys in order:\n{}",
        &a[0]
    );
    assert!(
        joined.contains("nullhdr:NULL") || joined.contains("nullhdr:null"),
        "{}",
        &a[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_none() {
    run_case("none", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_gzip() {
    run_case("gzip", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_snappy() {
    run_case("snappy", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_lz4() {
    run_case("lz4", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_zstd() {
    run_case("zstd", &[]).await;
}

/// A LogAppendTime source: batches are re-encoded so each record carries the
/// source's append time, which the destination (CreateTime) shows unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_log_append_time_source() {
    run_case("gzip", &[("message.timestamp.type", "LogAppendTime")]).await;
}

/// A destination whose `max.message.bytes` is smaller than the source
/// batches: batches are split (re-encoded) and still read back identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_split_for_small_destination_limit() {
    run_case_with("snappy", &[], &[("max.message.bytes", "2048")], 2048).await;
}

/// A compacted source (offset gaps inside batches) is re-encoded with dense
/// offsets; every surviving record arrives identical, and the acks carry the
/// exact source offsets of each record for the offset map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_compacted_source() {
    use kmirror_actors::kafka::batch::SourceOffsets;
    let bed = bed();
    let topic = unique("proto-fid-compact");
    let src = client(&bed.source).await;
    let dst = client(&bed.destination).await;
    create(
        &Admin::new(src.clone()),
        &topic,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "500"),
            ("min.cleanable.dirty.ratio", "0.0001"),
            ("min.compaction.lag.ms", "0"),
            ("max.compaction.lag.ms", "1000"),
        ],
    )
    .await;
    create(&Admin::new(dst.clone()), &topic, 1, &[]).await;
    let mut lines: Vec<String> = (0..400)
        .map(|i| format!("seq:{i},dup:a,dup:NULL\tkey-{}\tvalue-{i}", i % 17))
        .collect();
    lines.push("h:x\tkey-tomb\tNULL".to_owned());
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &[
            "--bootstrap-server",
            &bed.source,
            "--topic",
            &topic,
            "--compression-codec",
            "gzip",
            "--producer-property",
            "linger.ms=200",
            "--property",
            "parse.key=true",
            "--property",
            "parse.headers=true",
            "--property",
            "null.marker=NULL",
        ],
        (lines.join("\n") + "\n").as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Roll the segment (segment.ms) with a later write, then wait for the cleaner.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let out = kafka_tool_stdin(
        "kafka-console-producer",
        &[
            "--bootstrap-server",
            &bed.source,
            "--topic",
            &topic,
            "--property",
            "parse.key=true",
        ],
        b"roll\tlast\n",
    );
    assert!(out.status.success());
    let end = 402;
    let mut compacted = false;
    for _ in 0..60 {
        let recs = read_all(&src, &topic, 0, end).await;
        if recs.len() < end as usize {
            compacted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(compacted, "the source cleaner did not compact within 30 s");
    let surviving = read_all(&src, &topic, 0, end).await;
    let producer = IdempotentProducer::new(dst.clone()).await.unwrap();
    let stats = forward_partition(&src, &producer, &topic, 0, end, 1_048_588).await;
    eprintln!(
        "compacted: {} of {end} records survive; batches in {}, passed {}, re-encoded {}",
        surviving.len(),
        stats.batches_in,
        stats.passed_through,
        stats.reencoded
    );
    assert!(stats.reencoded > 0, "a compacted batch must be re-encoded");
    assert_eq!(stats.records, surviving.len() as i64);
    // Offset map: the acks list exactly the surviving source offsets, in order.
    let mut mapped = Vec::new();
    for a in &stats.acks {
        match &a.source_offsets {
            SourceOffsets::Range { first, last } => mapped.extend(*first..=*last),
            SourceOffsets::List(v) => mapped.extend(v.iter().copied()),
        }
    }
    assert_eq!(
        mapped,
        surviving.iter().map(|(o, _)| *o).collect::<Vec<_>>()
    );
    let dst_recs = read_all(&dst, &topic, 0, surviving.len() as i64).await;
    assert_eq!(dst_recs.len(), surviving.len());
    for ((_, a), (_, b)) in surviving.iter().zip(&dst_recs) {
        assert_eq!(
            (&a.key, &a.value, &a.headers, a.timestamp),
            (&b.key, &b.value, &b.headers, b.timestamp)
        );
    }
    // And Kafka's own consumer agrees on both sides (offsets differ: dense on the destination).
    let a = consume(&bed.source, &topic, surviving.len());
    let b = consume(&bed.destination, &topic, surviving.len());
    assert_eq!(
        a.iter().map(|l| normalize(l)).collect::<Vec<_>>(),
        b.iter().map(|l| normalize(l)).collect::<Vec<_>>()
    );
}

/// Aborted transactions on the source (written here with raw transactional
/// RPCs: InitProducerId, AddPartitionsToTxn, Produce, EndTxn) are recognised
/// from the fetch response's aborted-transaction list and dropped; committed
/// ones arrive; markers never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fidelity_aborted_transactions_dropped() {
    use bytes::Bytes;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest, ProduceRequest, TopicName,
        TransactionalId,
    };
    use kafka_protocol::protocol::StrBytes;
    use kmirror_actors::kafka::admin::OffsetSpec;
    use kmirror_actors::kafka::batch::{BatchBuilder, Codec, Record};
    use kmirror_actors::kafka::fetch::IsolationLevel;
    use std::time::Duration;

    let bed = bed();
    let topic = unique("proto-fid-abort");
    let src = client(&bed.source).await;
    let dst = client(&bed.destination).await;
    let admin = Admin::new(src.clone());
    create(&admin, &topic, 1, &[]).await;
    create(&Admin::new(dst.clone()), &topic, 1, &[]).await;
    let node = *src.metadata().brokers.keys().next().unwrap();
    let conn = src.connection(node).await.unwrap();
    let txn = TransactionalId(StrBytes::from_string(unique("proto-txn")));
    let t = Duration::from_secs(30);

    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn.clone()))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    // FindCoordinator is what makes a fresh cluster create __transaction_state
    // (InitProducerId alone only answers COORDINATOR_NOT_AVAILABLE, forever).
    let find = kafka_protocol::messages::FindCoordinatorRequest::default()
        .with_key(txn.0.clone())
        .with_key_type(1);
    let (pid, epoch) = 'init: {
        for _ in 0..300 {
            let c = conn.send_versioned(&find, 3, t).await.unwrap();
            if c.error_code == 0 {
                let r = conn.send_versioned(&init, 4, t).await.unwrap();
                if r.error_code == 0 {
                    break 'init (r.producer_id, r.producer_epoch);
                }
            }
            // COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE while __transaction_state starts.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no transaction coordinator within 60 s");
    };
    let mut seq = 0;
    let mut expected = Vec::new();
    for (i, commit) in [false, true, false, true].into_iter().enumerate() {
        let add = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn.clone())
            .with_v3_and_below_producer_id(pid)
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(vec![0])]);
        // CONCURRENT_TRANSACTIONS (51) while the previous EndTxn completes: retry.
        for attempt in 0.. {
            let r = conn.send_versioned(&add, 3, t).await.unwrap();
            let code = r
                .results_by_topic_v3_and_below
                .iter()
                .flat_map(|tr| tr.results_by_partition.iter())
                .map(|p| p.partition_error_code)
                .find(|&c| c != 0)
                .unwrap_or(0);
            if code == 0 {
                break;
            }
            assert!(
                code == 51 && attempt < 100,
                "AddPartitionsToTxn error {code}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let recs: Vec<Record> = (0..5)
            .map(|j| Record {
                offset_delta: j,
                timestamp: 1_700_000_000_000,
                key: Some(Bytes::from(format!("txn{i}-{j}"))),
                value: Some(Bytes::from(if commit { "committed" } else { "aborted" })),
                headers: vec![],
            })
            .collect();
        if commit {
            expected.extend(recs.iter().map(|r| r.key.clone()));
        }
        let b = BatchBuilder {
            codec: Codec::Lz4,
            transactional: true,
            producer: (pid.0, epoch, seq),
            ..BatchBuilder::new(recs)
        }
        .build()
        .unwrap();
        seq += 5;
        let produce = ProduceRequest::default()
            .with_transactional_id(Some(txn.clone()))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.clone())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(b.as_bytes().clone()))])]);
        let r = conn.send_versioned(&produce, 11, t).await.unwrap();
        assert_eq!(
            r.responses[0].partition_responses[0].error_code, 0,
            "transactional produce"
        );
        let end = EndTxnRequest::default()
            .with_transactional_id(txn.clone())
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_committed(commit);
        let r = conn.send_versioned(&end, 4, t).await.unwrap();
        assert_eq!(r.error_code, 0, "EndTxn");
    }
    // 4 × (5 records + 1 marker).
    let mut lso = 0;
    for _ in 0..100 {
        lso = admin
            .list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadCommitted)
            .await
            .unwrap()
            .offset;
        if lso == 24 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(lso, 24, "all transactions completed");
    let producer = IdempotentProducer::new(dst.clone()).await.unwrap();
    let stats = forward_partition(&src, &producer, &topic, 0, 24, 1_048_588).await;
    assert_eq!(stats.records, 10);
    assert_eq!(stats.dropped, 6, "2 aborted batches + 4 markers");
    let got: Vec<_> = read_all(&dst, &topic, 0, 10)
        .await
        .into_iter()
        .map(|(_, r)| r.key)
        .collect();
    assert_eq!(got, expected);
}
