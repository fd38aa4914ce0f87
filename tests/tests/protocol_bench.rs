//! Micro-benchmark (printed, not asserted): forwarding the raw batches of one
//! partition, fetch → produce, versus Kafka's `kafka-producer-perf-test`
//! writing the same shape into the same destination cluster.
//!
//! Run: `KMIRROR_BENCH_RECORDS=1000000 cargo test --release -p kmirror-tests
//! --test protocol_bench -- --ignored --nocapture`

mod protocol_common;

use std::time::{Duration, Instant};

use kmirror_actors::kafka::admin::Admin;
use kmirror_actors::kafka::batch::{classify, prepare};
use kmirror_actors::kafka::fetch::{FetchOptions, FetchSession, TopicPartition};
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_tests::{bed, kafka_tool_ok, unique};
use protocol_common::*;

fn perf_test(bootstrap: &str, topic: &str, records: usize, size: usize, codec: &str) -> (f64, f64) {
    let out = kafka_tool_ok(
        "kafka-producer-perf-test",
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            &size.to_string(),
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={bootstrap}"),
            &format!("compression.type={codec}"),
            "batch.size=65536",
            "linger.ms=5",
            "acks=all",
        ],
    );
    // Last line: "N records sent, R records/sec (M MB/sec), ..."
    let last = out
        .lines()
        .rev()
        .find(|l| l.contains("records sent"))
        .expect("perf-test summary")
        .to_owned();
    let num = |after: &str| -> f64 {
        let i = last.find(after).unwrap();
        last[..i]
            .trim_end()
            .rsplit([' ', '('])
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (num(" records/sec"), num(" MB/sec"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run with --ignored --nocapture (release build)"]
async fn forward_vs_producer_perf_test() {
    let records: usize = std::env::var("KMIRROR_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let size: usize = std::env::var("KMIRROR_BENCH_RECORD_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let codec = std::env::var("KMIRROR_BENCH_CODEC").unwrap_or_else(|_| "lz4".into());
    let bed = bed();
    let src = client(&bed.source).await;
    let dst = client(&bed.destination).await;
    let topic = unique("proto-bench");
    let baseline_topic = unique("proto-bench-java");
    create(&Admin::new(src.clone()), &topic, 1, &[]).await;
    create(&Admin::new(dst.clone()), &topic, 1, &[]).await;
    create(&Admin::new(dst.clone()), &baseline_topic, 1, &[]).await;
    perf_test(&bed.source, &topic, records, size, &codec);

    // Fetch task → channel → produce task, so fetching overlaps producing.
    let producer = IdempotentProducer::new(dst.clone()).await.unwrap();
    let pp = producer.partition(&topic, 0).unwrap();
    let (leader, epoch) = src.leader(&topic, 0).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(32);
    let start = Instant::now();
    let n = records as i64;
    let fetcher = tokio::spawn({
        let src = src.clone();
        let topic = topic.clone();
        async move {
            let opts = FetchOptions {
                partition_max_bytes: 8 << 20,
                ..Default::default()
            };
            let mut s = FetchSession::new(src, leader, opts);
            let tp = TopicPartition::new(&topic, 0);
            s.add(tp.clone(), 0, epoch, uuid::Uuid::nil());
            let mut pos = 0;
            let mut bytes = 0usize;
            while pos < n {
                for (_, r) in s.fetch().await.unwrap() {
                    let d = r.unwrap();
                    let mut ab = d.aborted();
                    for b in d.batches() {
                        let b = b.unwrap();
                        let a = classify(&b, ab.is_aborted(&b).unwrap(), 1_048_588, pos);
                        for out in prepare(&b, a, 1_048_588, pos).unwrap() {
                            bytes += out.len();
                            tx.send(out).await.unwrap();
                        }
                        pos = b.next_offset();
                    }
                }
            }
            bytes
        }
    });
    let (ack_tx, mut ack_rx) = tokio::sync::mpsc::channel(16);
    let acker = tokio::spawn(async move {
        let mut recs = 0i64;
        while let Some(t) = ack_rx.recv().await {
            let t: kmirror_actors::kafka::produce::ProduceTicket = t;
            recs += t.await.unwrap().record_count as i64;
        }
        recs
    });
    let mut batches = 0;
    while let Some(out) = rx.recv().await {
        batches += 1;
        ack_tx.send(pp.send(out).await.unwrap()).await.unwrap();
    }
    drop(ack_tx);
    let bytes = fetcher.await.unwrap();
    let forwarded = acker.await.unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(forwarded, n);
    let ours_rps = n as f64 / secs;
    let ours_mbps = (records * size) as f64 / secs / (1024.0 * 1024.0);

    let (java_rps, java_mbps) = perf_test(&bed.destination, &baseline_topic, records, size, &codec);
    eprintln!(
        "\nBENCH one partition, {records} records x {size} B, {codec}, {batches} batches ({:.1} MiB on the wire)\n\
         kmirror forward (fetch -> produce): {secs:.2} s, {ours_rps:.0} records/s, {ours_mbps:.1} MiB/s payload\n\
         kafka-producer-perf-test:           {java_rps:.0} records/s, {java_mbps:.1} MiB/s payload\n\
         ratio kmirror / perf-test:          {:.2}x\n",
        bytes as f64 / (1024.0 * 1024.0),
        ours_rps / java_rps
    );
    let _ = Duration::ZERO;
}
