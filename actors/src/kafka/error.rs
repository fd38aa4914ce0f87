//! Errors of the protocol layer.
//!
//! One error type for the whole layer so that callers (the PartitionActor and
//! friends) can decide what to do from the *kind* of failure: retry after a
//! metadata refresh, back off and reconnect, or fail the partition. Kafka error
//! codes are kept as [`ResponseError`] so the original code is never lost.

use std::time::Duration;

pub use kafka_protocol::ResponseError;

/// Result alias for the protocol layer.
pub type Result<T, E = KafkaError> = std::result::Result<T, E>;

/// Everything that can go wrong talking to Kafka.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// A client property is missing or invalid; `key` is the Kafka property name
    /// so the operator knows exactly which line of the config to fix.
    #[error("invalid client configuration `{key}`: {message}")]
    Config {
        /// The Kafka client property at fault.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// The TCP connection or TLS session failed.
    #[error("I/O error talking to {broker}: {source}")]
    Io {
        /// `host:port` of the broker.
        broker: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// TLS configuration or handshake problem.
    #[error("TLS error with {broker}: {message}")]
    Tls {
        /// `host:port` of the broker.
        broker: String,
        /// What went wrong.
        message: String,
    },
    /// SASL authentication was refused (wrong password, unknown user, mechanism
    /// not enabled). Not retriable: retrying would only lock accounts or spin.
    #[error("authentication failed with {broker} ({mechanism}): {message}")]
    Authentication {
        /// `host:port` of the broker.
        broker: String,
        /// SASL mechanism that was attempted.
        mechanism: String,
        /// The broker's message, or ours.
        message: String,
    },
    /// A request got no answer within `request.timeout.ms`. The connection
    /// it was sent on is closed, as Kafka's own clients do, because a late
    /// answer could otherwise be matched to nothing or arrive after a retry.
    #[error("request {api} to {broker} timed out after {timeout:?}")]
    Timeout {
        /// Name of the API.
        api: &'static str,
        /// `host:port` of the broker.
        broker: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The connection closed while requests were in flight, or before.
    #[error("connection to {broker} closed: {reason}")]
    Disconnected {
        /// `host:port` of the broker.
        broker: String,
        /// Why.
        reason: String,
    },
    /// The broker supports no version of an API that this layer can speak.
    #[error("broker {broker} supports no usable version of {api} (broker {broker_range}, ours {our_range})")]
    UnsupportedVersion {
        /// Name of the API.
        api: &'static str,
        /// `host:port` of the broker.
        broker: String,
        /// Versions the broker advertised.
        broker_range: String,
        /// Versions we can encode.
        our_range: String,
    },
    /// A frame could not be encoded or decoded.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A Kafka error code in a response. `context` says which RPC and which
    /// resource (topic, partition, group) it is about.
    #[error("{context}: {error}{}", message.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
    Broker {
        /// The error code.
        error: ResponseError,
        /// The RPC and resource the error is about.
        context: String,
        /// The broker's error message if it sent one.
        message: Option<String>,
    },
    /// A record batch is malformed (bad magic, truncated, bad CRC, bad varint).
    #[error("invalid record batch: {0}")]
    InvalidBatch(String),
    /// A record (or a single record of a batch being split) is larger than the
    /// destination accepts; it can never be written without a config change.
    #[error("record of {size} bytes exceeds the destination limit of {max} bytes")]
    RecordTooLarge {
        /// Encoded size of the smallest unit we could produce.
        size: usize,
        /// The limit (`max.message.bytes`).
        max: usize,
    },
    /// Topic, partition or broker is not in the metadata.
    #[error("unknown {0}")]
    Unknown(String),
    /// The producer hit a state it cannot recover from by retrying (sequence
    /// out of order, fenced epoch, …). The caller must reconcile with the
    /// destination's end offset and start a new producer.
    #[error("producer for {partition} failed: {reason}")]
    ProducerFenced {
        /// `topic-partition`.
        partition: String,
        /// Why.
        reason: String,
    },
    /// Lost ownership: a newer owner acquired the transactional id this
    /// write ran under and fenced the partition (the broker answered
    /// INVALID_PRODUCER_EPOCH or PRODUCER_FENCED to a producer built by
    /// `IdempotentProducer::under_fence`, or the coordinator did to a
    /// fence of ours). Unlike [`KafkaError::ProducerFenced`], starting a new
    /// producer is wrong: the unit of work belongs to someone else now.
    #[error("fenced: {resource} is owned by a newer producer epoch ({reason})")]
    Fenced {
        /// The partition (`topic-partition`) or transactional id.
        resource: String,
        /// What the broker said.
        reason: String,
    },
    /// The client, producer or session was shut down.
    #[error("closed")]
    Closed,
}

impl KafkaError {
    /// A [`KafkaError::Config`]: the one way to report a bad client property,
    /// so every such error names its key the same way.
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        KafkaError::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    /// Builds a [`KafkaError::Broker`] from a response error code, or `None` for 0.
    pub fn from_code(code: i16, context: impl Into<String>, message: Option<&str>) -> Option<Self> {
        if code == 0 {
            return None;
        }
        let error = ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code));
        Some(KafkaError::Broker {
            error,
            context: context.into(),
            message: message.map(str::to_owned),
        })
    }

    /// Converts a response error code into `Ok(())` or the error.
    pub fn check(code: i16, context: impl FnOnce() -> String, message: Option<&str>) -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(Self::from_code(code, context(), message).expect("non-zero"))
        }
    }

    /// A copy of this error for each of several waiters (one failed
    /// request shared by many partitions). Kind and retriability are kept;
    /// an I/O source error becomes [`KafkaError::Disconnected`].
    pub fn duplicate(&self) -> KafkaError {
        match self {
            KafkaError::Config { key, message } => KafkaError::config(key, message),
            KafkaError::Io { broker, source } => KafkaError::Disconnected {
                broker: broker.clone(),
                reason: source.to_string(),
            },
            KafkaError::Tls { broker, message } => KafkaError::Tls {
                broker: broker.clone(),
                message: message.clone(),
            },
            KafkaError::Authentication {
                broker,
                mechanism,
                message,
            } => KafkaError::Authentication {
                broker: broker.clone(),
                mechanism: mechanism.clone(),
                message: message.clone(),
            },
            KafkaError::Timeout {
                api,
                broker,
                timeout,
            } => KafkaError::Timeout {
                api,
                broker: broker.clone(),
                timeout: *timeout,
            },
            KafkaError::Disconnected { broker, reason } => KafkaError::Disconnected {
                broker: broker.clone(),
                reason: reason.clone(),
            },
            KafkaError::UnsupportedVersion {
                api,
                broker,
                broker_range,
                our_range,
            } => KafkaError::UnsupportedVersion {
                api,
                broker: broker.clone(),
                broker_range: broker_range.clone(),
                our_range: our_range.clone(),
            },
            KafkaError::Protocol(m) => KafkaError::Protocol(m.clone()),
            KafkaError::Broker {
                error,
                context,
                message,
            } => KafkaError::Broker {
                error: *error,
                context: context.clone(),
                message: message.clone(),
            },
            KafkaError::InvalidBatch(m) => KafkaError::InvalidBatch(m.clone()),
            KafkaError::RecordTooLarge { size, max } => KafkaError::RecordTooLarge {
                size: *size,
                max: *max,
            },
            KafkaError::Unknown(m) => KafkaError::Unknown(m.clone()),
            KafkaError::ProducerFenced { partition, reason } => KafkaError::ProducerFenced {
                partition: partition.clone(),
                reason: reason.clone(),
            },
            KafkaError::Fenced { resource, reason } => KafkaError::Fenced {
                resource: resource.clone(),
                reason: reason.clone(),
            },
            KafkaError::Closed => KafkaError::Closed,
        }
    }

    /// The Kafka error code if this is a broker error.
    pub fn response_error(&self) -> Option<ResponseError> {
        match self {
            KafkaError::Broker { error, .. } => Some(*error),
            _ => None,
        }
    }

    /// Whether retrying the same operation (after a backoff, and a metadata
    /// refresh if [`KafkaError::needs_metadata_refresh`]) can succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            KafkaError::Io { .. }
            | KafkaError::Timeout { .. }
            | KafkaError::Disconnected { .. } => true,
            KafkaError::Broker { error, .. } => error.is_retriable(),
            _ => false,
        }
    }

    /// Whether a retry after a metadata refresh may find the partition
    /// served: our view of its leader is stale, or we know none yet
    /// (`Unknown` is what `KafkaClient::leader` answers for a partition that
    /// Metadata lists without a leader, or not at all — a topic just made).
    pub fn awaits_leader(&self) -> bool {
        self.needs_metadata_refresh() || matches!(self, KafkaError::Unknown(_))
    }

    /// Whether the error means our view of leaders is stale.
    pub fn needs_metadata_refresh(&self) -> bool {
        matches!(
            self.response_error(),
            Some(
                ResponseError::NotLeaderOrFollower
                    | ResponseError::UnknownTopicOrPartition
                    | ResponseError::FencedLeaderEpoch
                    | ResponseError::UnknownLeaderEpoch
                    | ResponseError::LeaderNotAvailable
                    | ResponseError::UnknownTopicId
                    | ResponseError::NotCoordinator
                    | ResponseError::CoordinatorNotAvailable
            )
        ) || matches!(
            self,
            KafkaError::Disconnected { .. } | KafkaError::Io { .. }
        )
    }
}

pub(crate) fn protocol_err(context: &str, e: impl std::fmt::Display) -> KafkaError {
    KafkaError::Protocol(format!("{context}: {e}"))
}
