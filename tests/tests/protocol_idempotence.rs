//! Idempotence under a cut connection: a loopback proxy in front of the
//! destination broker forwards Produce requests but drops the connection
//! instead of relaying the first Produce response. The broker has appended
//! the batch; the producer never heard so. It must retry (same producer id,
//! epoch and sequences) and the destination must hold exactly one copy —
//! unless the broker forgot the producer before the retry came, which the
//! last test shows it does for old record timestamps, and what kmirror's
//! alignment reads instead (`partition/tail.rs`).

mod protocol_common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kmirror_actors::kafka::admin::{Admin, OffsetSpec};
use kmirror_actors::kafka::batch::{
    encode_batch, Codec, OutgoingBatch, Record, RecordBatch, SourceOffsets,
};
use kmirror_actors::kafka::fetch::IsolationLevel;
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_actors::kafka::{ClientConfig, KafkaClient};
use kmirror_tests::wire::raw_batches;
use kmirror_tests::{bed, unique};
use protocol_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Proxy {
    addr: String,
    drop_next_produce_response: Arc<AtomicBool>,
    /// How long a connection accepted after a cut waits before it is
    /// relayed (0: at once): the retry reaches the broker that much later.
    hold_after_cut_ms: Arc<AtomicU64>,
    dropped: Arc<AtomicUsize>,
    produce_requests: Arc<AtomicUsize>,
}

async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let n = r.read_i32().await.ok()?;
    let mut buf = vec![0u8; n as usize + 4];
    buf[..4].copy_from_slice(&n.to_be_bytes());
    r.read_exact(&mut buf[4..]).await.ok()?;
    Some(buf)
}

async fn start_proxy(upstream: String) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let drop_flag = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicUsize::new(0));
    let produce_requests = Arc::new(AtomicUsize::new(0));
    let hold = Arc::new(AtomicU64::new(0));
    let (d, dc, pr, h) = (
        drop_flag.clone(),
        dropped.clone(),
        produce_requests.clone(),
        hold.clone(),
    );
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let upstream = upstream.clone();
            let (d, dc, pr) = (d.clone(), dc.clone(), pr.clone());
            let held = match dc.load(Ordering::SeqCst) {
                0 => 0,
                _ => h.load(Ordering::SeqCst),
            };
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(held)).await;
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let produce_ids = Arc::new(Mutex::new(HashSet::new()));
                let ids = produce_ids.clone();
                let up = async move {
                    while let Some(f) = read_frame(&mut cr).await {
                        let api_key = i16::from_be_bytes([f[4], f[5]]);
                        let corr = i32::from_be_bytes(f[8..12].try_into().unwrap());
                        if api_key == 0 {
                            ids.lock().unwrap().insert(corr);
                            pr.fetch_add(1, Ordering::SeqCst);
                        }
                        if sw.write_all(&f).await.is_err() {
                            return;
                        }
                    }
                };
                let down = async move {
                    while let Some(f) = read_frame(&mut sr).await {
                        let corr = i32::from_be_bytes(f[4..8].try_into().unwrap());
                        let is_produce = produce_ids.lock().unwrap().contains(&corr);
                        if is_produce && d.swap(false, Ordering::SeqCst) {
                            dc.fetch_add(1, Ordering::SeqCst);
                            return; // cut both directions: the answer is lost
                        }
                        if cw.write_all(&f).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! { _ = up => {}, _ = down => {} }
            });
        }
    });
    Proxy {
        addr,
        drop_next_produce_response: drop_flag,
        hold_after_cut_ms: hold,
        dropped,
        produce_requests,
    }
}

fn batch(i: usize, n: usize) -> OutgoingBatch {
    let records: Vec<Record> = (0..n)
        .map(|j| Record {
            offset_delta: j as i32,
            timestamp: 1_700_000_000_000 + j as i64,
            key: Some(Bytes::from(format!("b{i}-r{j}"))),
            value: Some(Bytes::from(vec![b'x'; 100])),
            headers: vec![(Bytes::from_static(b"i"), Some(Bytes::from(i.to_string())))],
        })
        .collect();
    OutgoingBatch::new(
        encode_batch(&records, Codec::Lz4).unwrap(),
        n as i32,
        SourceOffsets::Range {
            first: (i * n) as i64,
            last: (i * n + n - 1) as i64,
        },
    )
}

/// An idempotent producer whose connections to `bootstrap`'s broker go
/// through a [`Proxy`].
async fn producer_via_proxy(bootstrap: &str, direct: &KafkaClient) -> (Proxy, IdempotentProducer) {
    let proxy = start_proxy(bootstrap.to_owned()).await;
    let mut cfg = ClientConfig::plaintext(&proxy.addr);
    let advertised = direct.metadata().brokers.values().next().unwrap().address();
    cfg.address_map.insert(advertised, proxy.addr.clone());
    cfg.request_timeout = std::time::Duration::from_secs(10);
    let via_proxy = KafkaClient::connect(cfg).await.unwrap();
    let producer = IdempotentProducer::new(via_proxy).await.unwrap();
    (proxy, producer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connection_after_produce_request_leaves_one_copy() {
    let bed = bed();
    let topic = unique("proto-idem");
    let direct = client(&bed.destination).await;
    let admin = Admin::new(direct.clone());
    create(&admin, &topic, 1, &[]).await;

    let (proxy, producer) = producer_via_proxy(&bed.destination, &direct).await;
    let pp = producer.partition(&topic, 0).unwrap();

    // 1) A single batch whose response is lost.
    proxy
        .drop_next_produce_response
        .store(true, Ordering::SeqCst);
    let ack = pp
        .send(batch(0, 10))
        .await
        .unwrap()
        .await
        .expect("retried produce succeeds");
    assert_eq!(
        proxy.dropped.load(Ordering::SeqCst),
        1,
        "the proxy cut one response"
    );
    assert!(
        proxy.produce_requests.load(Ordering::SeqCst) >= 2,
        "the batch was sent again"
    );
    assert_eq!(
        ack.base_offset, 0,
        "the duplicate reports the first copy's offset"
    );

    // 2) Five pipelined batches; the first response is lost, all five were in flight.
    proxy
        .drop_next_produce_response
        .store(true, Ordering::SeqCst);
    let mut tickets = Vec::new();
    for i in 1..=5 {
        tickets.push(pp.send(batch(i, 10)).await.unwrap());
    }
    let mut offsets = Vec::new();
    for t in tickets {
        offsets.push(t.await.expect("pipelined batch acked").base_offset);
    }
    assert_eq!(proxy.dropped.load(Ordering::SeqCst), 2);
    assert_eq!(
        offsets,
        vec![10, 20, 30, 40, 50],
        "order kept, no duplicates"
    );

    let end = admin
        .list_offset(
            &topic,
            0,
            OffsetSpec::Latest,
            IsolationLevel::ReadUncommitted,
        )
        .await
        .unwrap();
    assert_eq!(end.offset, 60, "exactly one copy of each of the 6 batches");
}

/// A retry the broker takes twice: the producer's state is forgotten
/// between the first copy and the retry. `producer.id.expiration.ms`
/// counts from the batch's record timestamps (2023 here, as a mirrored
/// backlog keeps them), so the state expires at the next check, however
/// recently the producer wrote. The retry then lands at a new offset; the
/// stored copies carry the same producer id, epoch and base sequence,
/// which is what kmirror's alignment reads to make the repeat a hole
/// rather than the next source records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_producer_state_expired_lands_twice() {
    let cluster = kmirror_tests::OwnCluster::start(&[
        "producer.id.expiration.ms=600000".into(),
        "producer.id.expiration.check.interval.ms=200".into(),
    ]);
    let topic = unique("proto-idem-expired");
    let direct = client(&cluster.bootstrap).await;
    let admin = Admin::new(direct.clone());
    create(&admin, &topic, 1, &[]).await;
    let (proxy, producer) = producer_via_proxy(&cluster.bootstrap, &direct).await;
    proxy.hold_after_cut_ms.store(3000, Ordering::SeqCst);
    proxy
        .drop_next_produce_response
        .store(true, Ordering::SeqCst);
    let pp = producer.partition(&topic, 0).unwrap();
    let ack = pp
        .send(batch(0, 10))
        .await
        .unwrap()
        .await
        .expect("the retry is acknowledged");
    assert_eq!(proxy.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(
        ack.base_offset, 10,
        "the retry was appended again, not recognised as a duplicate"
    );
    let stored = raw_batches(&cluster.bootstrap, &topic, 0, 0).unwrap();
    let parsed: Vec<RecordBatch> = stored
        .iter()
        .map(|b| RecordBatch::new(b.bytes.clone()).unwrap())
        .collect();
    let facts: Vec<_> = parsed
        .iter()
        .map(|b| {
            (
                b.base_offset(),
                b.producer_id(),
                b.producer_epoch(),
                b.base_sequence(),
            )
        })
        .collect();
    let (id, epoch) = (parsed[0].producer_id(), parsed[0].producer_epoch());
    assert_eq!(facts, vec![(0, id, epoch, 0), (10, id, epoch, 0)]);
    assert_eq!(parsed[0].crc(), parsed[1].crc(), "the same batch");
}

/// A batch taken in place of a refused one: a fresh producer id's first
/// batch (sequence 0, a record without a key) is refused by a compacted
/// topic, and the batch sent behind it (sequence 1, keyed) is appended at
/// offset 0, as the broker holds no state for the id yet. Above kmirror's
/// map it would pass for the refused batch's records; alignment's
/// `out_of_sequence` tells it by its first sequence not being 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_behind_a_refused_first_one_is_appended_in_its_place() {
    let bed = bed();
    let topic = unique("proto-idem-refused");
    let direct = client(&bed.destination).await;
    let admin = Admin::new(direct.clone());
    create(&admin, &topic, 1, &[("cleanup.policy", "compact")]).await;
    let producer = IdempotentProducer::new(direct.clone()).await.unwrap();
    let pp = producer.partition(&topic, 0).unwrap();
    let keyless = Record {
        offset_delta: 0,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from_static(b"no key")),
        headers: vec![],
    };
    let refused = OutgoingBatch::new(
        encode_batch(&[keyless], Codec::None).unwrap(),
        1,
        SourceOffsets::Range { first: 0, last: 0 },
    );
    let first = pp.send(refused).await.unwrap();
    let second = pp.send(batch(1, 3)).await.unwrap();
    let (first, second) = (first.await, second.await);
    println!("refused first batch: {first:?}; the one behind it: {second:?}");
    assert!(first.is_err(), "a compacted topic refuses a keyless record");
    let stored = raw_batches(&bed.destination, &topic, 0, 0).unwrap();
    let stored: Vec<_> = stored
        .iter()
        .map(|b| RecordBatch::new(b.bytes.clone()).unwrap())
        .map(|b| (b.base_offset(), b.base_sequence(), b.record_count()))
        .collect();
    assert_eq!(
        stored,
        vec![(0, 1, 3)],
        "the batch behind the refused one took its offset, at sequence 1"
    );
}
