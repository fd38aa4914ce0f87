//! The Kafka protocol layer: kmirror's only door to Kafka.
//!
//! Built on the `kafka-protocol` crate's typed messages; everything that
//! touches records works on raw `Bytes` so the data path copies each batch
//! once (into the produce request) and never re-encodes what can pass
//! through. See `shared/reference/broker-validation.md` for the rules the
//! forward path obeys.
//!
//! - [`config`]: Kafka client properties → [`ClientConfig`].
//! - [`conn`]: one broker connection (framing, pipelining, versions, TLS, SASL).
//! - [`client`]: a cluster client (connections per broker, metadata).
//! - [`batch`]: raw v2 batches, classifier, rewrite, record codec.
//! - [`fetch`]: multi-partition fetch stream per broker.
//! - [`produce`]: idempotent producer with per-partition pipelines.
//! - [`admin`]: admin RPCs.

pub mod admin;
pub mod batch;
pub mod client;
pub mod config;
pub mod conn;
pub mod error;
pub mod fetch;
pub mod produce;
mod sasl;
mod tls;

pub use client::{BrokerInfo, ClusterMetadata, KafkaClient, PartitionMetadata, TopicMetadata};
pub use config::{ClientConfig, SaslConfig, SaslMechanism, SecurityProtocol, TlsConfig};
pub use conn::BrokerConnection;
pub use error::{KafkaError, ResponseError, Result};
