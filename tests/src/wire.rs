//! A deliberately minimal, blocking Kafka client over the `kafka-protocol`
//! crate, for the test bed's own smoke tests.
//!
//! It shares no code with kmirror's protocol layer on purpose: the smoke
//! tests prove the bed is a real Kafka broker without trusting the code under
//! test. One request at a time, one connection per call, no retries.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::{Record, RecordBatchDecoder};

const METADATA_VERSION: i16 = 12;
const FETCH_VERSION: i16 = 12;

/// One request to `bootstrap`, or to its first broker when it lists several.
fn call<R: Request>(bootstrap: &str, req: &R, version: i16) -> Result<R::Response> {
    let broker = bootstrap.split(',').next().unwrap_or(bootstrap);
    let mut stream = TcpStream::connect(broker).with_context(|| format!("connect {broker}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("kmirror-bed-smoke")));
    let mut body = BytesMut::new();
    header.encode(&mut body, R::header_version(version))?;
    req.encode(&mut body, version)?;
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    stream.write_all(&frame)?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf)?;
    let mut buf = Bytes::from(buf);
    let correlation = buf.get_i32();
    if correlation != 7 {
        bail!("correlation id {correlation}, expected 7");
    }
    if R::Response::header_version(version) >= 1 {
        // Flexible response header: an empty tagged-field section.
        let tags = buf.get_u8();
        if tags != 0 {
            bail!("unexpected tagged fields in response header");
        }
    }
    R::Response::decode(&mut buf, version)
}

/// Cluster id and, for `topic`, its partition count.
pub fn metadata(bootstrap: &str, topic: Option<&str>) -> Result<(String, Option<usize>)> {
    let topics = topic.map(|t| {
        vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(t.to_string())))),
        ]
    });
    let resp: MetadataResponse = call(
        bootstrap,
        &MetadataRequest::default().with_topics(topics),
        METADATA_VERSION,
    )?;
    let cluster_id = resp.cluster_id.map(|c| c.to_string()).unwrap_or_default();
    let partitions = topic.and_then(|_| resp.topics.first().map(|t| t.partitions.len()));
    Ok((cluster_id, partitions))
}

/// The address of `partition`'s leader: a fetch is answered only there.
fn leader(bootstrap: &str, topic: &str, partition: i32) -> Result<String> {
    let resp: MetadataResponse = call(
        bootstrap,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(topic.to_string())))),
        ])),
        METADATA_VERSION,
    )?;
    let id = resp
        .topics
        .first()
        .and_then(|t| t.partitions.iter().find(|p| p.partition_index == partition))
        .map(|p| p.leader_id)
        .with_context(|| format!("no metadata for {topic}/{partition}"))?;
    let broker = resp
        .brokers
        .iter()
        .find(|b| b.node_id == id)
        .with_context(|| format!("{topic}/{partition} has no leader (leader id {})", id.0))?;
    Ok(format!("{}:{}", broker.host, broker.port))
}

/// Every record of one partition, fetched from offset 0 up to the high watermark.
pub fn fetch_all(bootstrap: &str, topic: &str, partition: i32) -> Result<Vec<Record>> {
    Ok(fetch_batches(bootstrap, topic, partition)?
        .into_iter()
        .flatten()
        .collect())
}

/// The data batches of one partition as the broker stores them (the records
/// of each), so a test can see how a log is batched, not only what it holds.
pub fn fetch_batches(bootstrap: &str, topic: &str, partition: i32) -> Result<Vec<Vec<Record>>> {
    let mut out = Vec::new();
    for raw in raw_batches(bootstrap, topic, partition, 0)? {
        let mut batch = raw.bytes;
        for set in RecordBatchDecoder::decode_all(&mut batch)? {
            let kept: Vec<Record> = set.records.into_iter().filter(|r| !r.control).collect();
            if !kept.is_empty() {
                out.push(kept);
            }
        }
    }
    Ok(out)
}

/// The codecs of a partition's data batches as stored, in order, each run
/// of one codec once ("none", "gzip", "snappy", "lz4", "zstd"): a test of
/// a codec first checks that its data really has it.
pub fn codecs(bootstrap: &str, topic: &str, partition: i32) -> Vec<String> {
    const NAMES: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
    let mut out: Vec<String> = raw_batches(bootstrap, topic, partition, 0)
        .expect("read the stored batches")
        .iter()
        .filter(|b| !b.is_control)
        .map(|b| {
            let codec = usize::from(b.bytes[22] & 0x07);
            NAMES
                .get(codec)
                .map_or_else(|| format!("codec {codec}"), |n| n.to_string())
        })
        .collect();
    out.dedup();
    out
}

/// One stored batch: its header fields read by hand (the v2 layout) and
/// its bytes as the broker keeps them.
pub struct RawBatch {
    pub base_offset: i64,
    /// One past the batch's last offset.
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub is_control: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub bytes: Bytes,
}

/// Every batch of one partition from the one holding `from` up to the high
/// watermark, as stored.
pub fn raw_batches(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    from: i64,
) -> Result<Vec<RawBatch>> {
    let leader = leader(bootstrap, topic, partition)?;
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let req = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_isolation_level(1)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(4 << 20)])]);
        let resp: FetchResponse = call(&leader, &req, FETCH_VERSION)?;
        let p = &resp.responses[0].partitions[0];
        if p.error_code != 0 {
            bail!("fetch error code {}", p.error_code);
        }
        let mut records = p.records.clone().unwrap_or_default();
        // A fetch may end in a partial batch; stop at it and fetch again.
        while records.remaining() >= 61 {
            let batch_len = 12 + i32::from_be_bytes(records[8..12].try_into()?) as usize;
            if records.remaining() < batch_len {
                break;
            }
            let bytes = records.split_to(batch_len);
            let i64_at = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
            let base_offset = i64_at(0);
            let last_delta = i32::from_be_bytes(bytes[23..27].try_into()?) as i64;
            let next_offset = base_offset + last_delta + 1;
            let attributes = i16::from_be_bytes(bytes[21..23].try_into()?);
            if next_offset > offset {
                offset = next_offset;
                out.push(RawBatch {
                    base_offset,
                    next_offset,
                    max_timestamp: i64_at(35),
                    is_control: attributes & 0x20 != 0,
                    producer_id: i64_at(43),
                    producer_epoch: i16::from_be_bytes(bytes[51..53].try_into()?),
                    bytes,
                });
            }
        }
        if offset >= p.high_watermark {
            return Ok(out);
        }
    }
}
