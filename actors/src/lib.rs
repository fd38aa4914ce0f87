//! kmirror's running system: the actors, the cluster adapters they talk
//! through, and the Kafka protocol layer underneath.
//!
//! - [`kafka`]: kmirror's only door to Kafka.
//! - [`cluster`]: what the actors need from a source and a destination, as
//!   traits, over Kafka and in memory.
//! - [`coordinator`]: CoordinatorActor, the only writer of state records.
//! - [`partition`]: PartitionActor and its data path.
//! - [`metadata_sync`]: MetadataSyncActor (group offsets, configs,
//!   partition counts, ACLs).

pub mod cluster;
pub mod coordinator;
pub mod failback;
pub mod hosted_sync;
pub mod kafka;
pub mod metadata_sync;
pub mod mirror;
pub mod node;
pub mod partition;
pub mod props;
pub mod providers;
pub mod publisher;
mod refresh;
pub mod shards;
pub mod spread;
pub mod state_log;
pub mod state_topic;
#[cfg(test)]
mod test_util;
pub mod verify;
