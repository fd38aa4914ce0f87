//! Admin RPCs the mirror needs, routed where Kafka wants them, so that
//! callers (topic creation and config sync, offsets, leader-epoch lookups,
//! groups and their offsets, ACLs, DeleteRecords) never pick a broker.
//!
//! Each call goes to any broker for controller operations, to the partition
//! leader for ListOffsets/OffsetForLeaderEpoch/DeleteRecords, to the group
//! coordinator for group RPCs (`groups.rs`), to every broker for ListGroups;
//! errors come back as [`KafkaError::Broker`] naming the RPC and resource.
//! Leader-routed calls retry once after a metadata refresh when leadership
//! moved. This file holds the [`Admin`] handle, the routing helpers and the
//! topic, config and cluster RPCs; log offsets (`offsets.rs`), group and ACL
//! RPCs live beside it because each is a family with its own types and
//! routing.

use std::collections::BTreeMap;
use std::future::Future;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::client::{BrokerInfo, KafkaClient};
use super::error::{KafkaError, Result};
use super::fetch::IsolationLevel;

mod acls;
mod groups;
mod offsets;

pub use acls::{AclBinding, AclFilter};
pub use groups::{CommittedOffset, GroupDescription, ListedGroup};
pub use offsets::{ListedOffset, OffsetSpec};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}
fn topic_name(v: &str) -> TopicName {
    TopicName(s(v))
}
fn opt_string(v: &Option<StrBytes>) -> Option<String> {
    v.as_ref().map(|x| x.to_string())
}

/// A topic to create.
#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    /// Name.
    pub name: String,
    /// Partition count (-1: broker default).
    pub partitions: i32,
    /// Replication factor (-1: broker default).
    pub replication_factor: i16,
    /// Topic configs.
    pub configs: BTreeMap<String, String>,
}

/// A config resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    /// A topic.
    Topic(String),
    /// A broker by node id.
    Broker(i32),
}

impl ConfigResource {
    fn kind(&self) -> i8 {
        match self {
            ConfigResource::Topic(_) => 2,
            ConfigResource::Broker(_) => 4,
        }
    }
    fn name(&self) -> String {
        match self {
            ConfigResource::Topic(t) => t.clone(),
            ConfigResource::Broker(b) => b.to_string(),
        }
    }
}

/// One config entry as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Key.
    pub name: String,
    /// Value (`None` for sensitive or unset).
    pub value: Option<String>,
    /// Read-only.
    pub read_only: bool,
    /// Kafka's ConfigSource id: 1 topic, 4 static broker, 5 default, …
    pub source: i8,
    /// Sensitive (value hidden).
    pub is_sensitive: bool,
}

impl ConfigEntry {
    /// Whether the value is explicitly set on the topic itself (what a
    /// config sync copies) rather than inherited: DescribeConfigs'
    /// DYNAMIC_TOPIC_CONFIG (1) only. 2 is DYNAMIC_BROKER_CONFIG, a value
    /// set on the one broker that answered; copied, it became a permanent
    /// override of every mirrored topic.
    pub fn is_explicit(&self) -> bool {
        self.source == 1
    }
}

/// An IncrementalAlterConfigs operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    /// Set a value.
    Set(String, String),
    /// Remove the override (back to default).
    Delete(String),
    /// Append to a list config.
    Append(String, String),
    /// Remove from a list config.
    Subtract(String, String),
}

/// DescribeCluster's answer.
#[derive(Debug, Clone)]
pub struct ClusterDescription {
    /// Cluster id.
    pub cluster_id: String,
    /// Controller id.
    pub controller_id: i32,
    /// Brokers.
    pub brokers: Vec<BrokerInfo>,
}

/// Admin operations on one cluster.
#[derive(Debug, Clone)]
pub struct Admin {
    client: KafkaClient,
}

impl Admin {
    /// Wraps a client.
    pub fn new(client: KafkaClient) -> Self {
        Admin { client }
    }

    /// The client.
    pub fn client(&self) -> &KafkaClient {
        &self.client
    }

    fn timeout_ms(&self) -> i32 {
        self.client
            .config()
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32
    }

    /// Runs `f(leader)` for a partition, once more after a metadata refresh if
    /// leadership moved.
    async fn on_leader<T, F, Fut>(&self, topic: &str, partition: i32, f: F) -> Result<T>
    where
        F: Fn(i32, i32) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.again_while_moved(topic, || async {
            let (leader, epoch) = self.client.leader(topic, partition).await?;
            f(leader, epoch).await
        })
        .await
    }

    /// Runs `ask`, and again after a refresh of `topic`'s metadata and a
    /// backoff (up to 3 times) while it answers that leadership moved.
    async fn again_while_moved<T, F, Fut>(&self, topic: &str, ask: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            match ask().await {
                Err(e) if attempt < 3 && e.needs_metadata_refresh() => {
                    self.client
                        .refresh_metadata(Some(&[topic.to_owned()]))
                        .await?;
                    tokio::time::sleep(self.client.retry_backoff(attempt)).await;
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    /// CreateTopics. Returns each topic's id, or its error (TOPIC_ALREADY_EXISTS included).
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<Vec<(String, Result<Uuid>)>> {
        let req = CreateTopicsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(topic_name(&t.name))
                            .with_num_partitions(t.partitions)
                            .with_replication_factor(t.replication_factor)
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(s(k))
                                            .with_value(Some(s(v)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
            .with_timeout_ms(self.timeout_ms())
            .with_validate_only(validate_only);
        let resp = self.client.send_any(&req).await?;
        let out: Vec<(String, Result<Uuid>)> = resp
            .topics
            .into_iter()
            .map(|t| {
                let name = t.name.0.to_string();
                let r = KafkaError::check(
                    t.error_code,
                    || format!("CreateTopics {name}"),
                    t.error_message.as_deref(),
                )
                .map(|_| t.topic_id);
                (name, r)
            })
            .collect();
        if !validate_only {
            let names: Vec<String> = out
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(n, _)| n.clone())
                .collect();
            if !names.is_empty() {
                self.wait_served(&names).await?;
            }
        }
        Ok(out)
    }

    /// Waits, up to the request timeout, until every partition of `topics`
    /// is served by its leader: the callers start them next.
    ///
    /// A broker lists a new partition in Metadata once it replays the
    /// creation, and with a leader, before it has made the partition's log
    /// (a millisecond or more each, so seconds for thousands); until then
    /// the leader answers NOT_LEADER_OR_FOLLOWER. A start of one topic of
    /// 6 000 partitions had them fail alignment 25 000 times over 45 s,
    /// each failure a FAILED partition and a retry backoff. A partition
    /// still not served at the deadline is left to its own retries.
    async fn wait_served(&self, topics: &[String]) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.client.config().request_timeout;
        let pause = || tokio::time::sleep(std::time::Duration::from_millis(100));
        let mut waiting: Vec<(String, i32)> = loop {
            let md = self.client.refresh_metadata(Some(topics)).await?;
            let known = topics.iter().all(|n| {
                md.topic(n).is_some_and(|t| {
                    !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader >= 0)
                })
            });
            if known || tokio::time::Instant::now() >= deadline {
                break topics
                    .iter()
                    .filter_map(|n| md.topic(n))
                    .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), p.partition)))
                    .collect();
            }
            pause().await;
        };
        while !waiting.is_empty() && tokio::time::Instant::now() < deadline {
            let listed = self
                .list_offsets_many(
                    &waiting,
                    OffsetSpec::Latest,
                    IsolationLevel::ReadUncommitted,
                )
                .await;
            waiting = waiting
                .into_iter()
                .zip(listed)
                .filter(|(_, r)| r.as_ref().is_err_and(KafkaError::awaits_leader))
                .map(|(tp, _)| tp)
                .collect();
            if !waiting.is_empty() {
                pause().await;
            }
        }
        Ok(())
    }

    /// CreatePartitions: grows `topic` to `total` partitions, and waits
    /// until Metadata lists them and their leaders serve them (the caller
    /// starts them next; see [`Admin::wait_served`]).
    pub async fn create_partitions(&self, topic: &str, total: i32) -> Result<()> {
        let req = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic_name(topic))
                .with_count(total)
                .with_assignments(None)])
            .with_timeout_ms(self.timeout_ms());
        let resp = self.client.send_any(&req).await?;
        for r in resp.results {
            KafkaError::check(
                r.error_code,
                || format!("CreatePartitions {topic}"),
                r.error_message.as_deref(),
            )?;
        }
        // The broker answers Metadata from its image, which replays the
        // change a moment after the controller accepted it: the new
        // partitions are wanted right away (they are started next).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let md = self
                .client
                .refresh_metadata(Some(&[topic.to_owned()]))
                .await?;
            let have = md.topic(topic).map_or(0, |t| t.partitions.len());
            if have >= usize::try_from(total).unwrap_or(0) {
                return self.wait_served(&[topic.to_owned()]).await;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(KafkaError::Unknown(format!(
                    "{topic} has {have} partitions 30 s after CreatePartitions to {total}"
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Deletes a topic (DeleteTopics v6, by name) and waits until metadata
    /// no longer lists it, so a topic of the same name can be created next.
    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        let req = DeleteTopicsRequest::default()
            .with_topics(vec![
                kafka_protocol::messages::delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(topic_name(topic))),
            ])
            .with_timeout_ms(self.timeout_ms());
        let resp = self.client.send_any(&req).await?;
        for r in resp.responses {
            KafkaError::check(
                r.error_code,
                || format!("DeleteTopics {topic}"),
                r.error_message.as_deref(),
            )?;
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let md = self.client.refresh_metadata(None).await?;
            if md.topic(topic).is_none() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(KafkaError::Unknown(format!(
                    "{topic} is still listed 30 s after DeleteTopics"
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// DescribeConfigs for one resource (broker resources go to that broker).
    pub async fn describe_configs(&self, resource: &ConfigResource) -> Result<Vec<ConfigEntry>> {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource.kind())
                .with_resource_name(s(&resource.name()))
                .with_configuration_keys(None),
        ]);
        let resp = match resource {
            ConfigResource::Broker(id) => self.client.send_to(*id, &req).await?,
            ConfigResource::Topic(_) => self.client.send_any(&req).await?,
        };
        let mut out = Vec::new();
        for r in resp.results {
            KafkaError::check(
                r.error_code,
                || format!("DescribeConfigs {resource:?}"),
                r.error_message.as_deref(),
            )?;
            out.extend(r.configs.into_iter().map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: opt_string(&c.value),
                read_only: c.read_only,
                source: c.config_source,
                is_sensitive: c.is_sensitive,
            }));
        }
        Ok(out)
    }

    /// IncrementalAlterConfigs on one resource.
    pub async fn incremental_alter_configs(
        &self,
        resource: &ConfigResource,
        ops: &[AlterConfigOp],
    ) -> Result<()> {
        let configs = ops
            .iter()
            .map(|op| {
                let (name, op_code, value) = match op {
                    AlterConfigOp::Set(k, v) => (k, 0, Some(s(v))),
                    AlterConfigOp::Delete(k) => (k, 1, None),
                    AlterConfigOp::Append(k, v) => (k, 2, Some(s(v))),
                    AlterConfigOp::Subtract(k, v) => (k, 3, Some(s(v))),
                };
                AlterableConfig::default()
                    .with_name(s(name))
                    .with_config_operation(op_code)
                    .with_value(value)
            })
            .collect();
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource.kind())
                .with_resource_name(s(&resource.name()))
                .with_configs(configs),
        ]);
        let resp = match resource {
            ConfigResource::Broker(id) => self.client.send_to(*id, &req).await?,
            ConfigResource::Topic(_) => self.client.send_any(&req).await?,
        };
        for r in resp.responses {
            KafkaError::check(
                r.error_code,
                || format!("IncrementalAlterConfigs {resource:?}"),
                r.error_message.as_deref(),
            )?;
        }
        Ok(())
    }

    /// DescribeCluster.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let resp = self
            .client
            .send_any(&DescribeClusterRequest::default())
            .await?;
        KafkaError::check(
            resp.error_code,
            || "DescribeCluster".into(),
            resp.error_message.as_deref(),
        )?;
        Ok(ClusterDescription {
            cluster_id: resp.cluster_id.to_string(),
            controller_id: resp.controller_id.0,
            brokers: resp
                .brokers
                .iter()
                .map(|b| BrokerInfo {
                    node_id: b.broker_id.0,
                    host: b.host.to_string(),
                    port: b.port as u16,
                    rack: opt_string(&b.rack),
                })
                .collect(),
        })
    }
}
