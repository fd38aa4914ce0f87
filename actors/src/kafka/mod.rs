//! The Kafka protocol layer: kmirror's only door to Kafka.
//!
//! Built on the `kafka-protocol` crate's typed messages; everything that
//! touches records works on raw `Bytes` so the data path copies each batch
//! once (into the produce request) and never re-encodes what can pass
//! through; [`batch`] says what cannot, and why.
//!
//! - [`config`]: Kafka client properties → [`ClientConfig`].
//! - [`conn`]: one broker connection (framing, pipelining, versions, TLS, SASL).
//! - [`client`]: a cluster client (connections per broker, metadata).
//! - [`batch`]: raw v2 batches: header view, classifier, record codec,
//!   forwarding and merging.
//! - [`fetch`]: multi-partition fetch stream per broker.
//! - [`produce`]: idempotent producer with per-partition pipelines.
//! - [`admin`]: admin RPCs.
//! - [`fence`]: ownership of a unit of work by transactional id, enforced
//!   by the brokers' producer epochs (the clustered daemon's fencing).
//! - [`membership`]: a member of a kmirror group on the destination (Connect-style).
//!
//! # The data path, as the PartitionActor drives it
//!
//! ```text
//! source: KafkaClient ──leader()──▶ FetchSession (one per source broker, many partitions)
//!            fetch() ─▶ FetchedPartition { records: Bytes (zero-copy), hw, lso, log start, aborted }
//!            batches() ─▶ RecordBatch (header view, no decompression)
//!            AbortedTransactions::is_aborted + classify(batch, aborted, max.message.bytes, position)
//!            prepare() ─▶ Vec<OutgoingBatch> (pass-through: one copy + header rewrite;
//!                                             re-encode: compacted, LogAppendTime, too large, resume mid-batch)
//! destination: IdempotentProducer ─▶ PartitionProducer (one per partition; ≤5 in flight; ordered)
//!            send(batch) ─▶ ProduceTicket ─▶ ProduceAck { base_offset, source_offsets, … }
//!                                             = one run of the offset map
//! ```
//!
//! Why these seams: the fetch side is shared per broker (one request for all
//! its partitions, incremental sessions), the produce side is per partition
//! (sequences are per partition) but coalesced per broker into shared
//! Produce requests, and everything in between is pure functions over bytes
//! (`batch`) that are unit-tested without Kafka. Errors tell the caller what
//! to do: [`fetch::FetchError::LeaderChanged`] → re-route the partition;
//! `OffsetOutOfRange` → consult ListOffsets and the offset map;
//! [`KafkaError::ProducerFenced`] → reconcile with the destination end
//! offset and start a new producer; [`KafkaError::Fenced`] → ownership is
//! lost, stop writing; anything `is_retriable()` → back off.

pub mod admin;
pub mod batch;
pub mod budget;
pub mod client;
pub mod config;
pub mod conn;
pub mod error;
#[cfg(test)]
mod fake_wire;
pub mod fence;
pub mod fetch;
pub mod lease;
pub mod membership;
pub mod produce;
mod sasl;
mod tls;

pub use client::{BrokerInfo, ClusterMetadata, KafkaClient, PartitionMetadata, TopicMetadata};
pub use config::{ClientConfig, Jitter, SaslConfig, SaslMechanism, SecurityProtocol};
pub use conn::BrokerConnection;
pub use error::{KafkaError, ResponseError, Result};
pub use tls::TlsConfig;
