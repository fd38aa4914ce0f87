//! Admin RPCs the mirror needs: topic creation and config sync, offsets,
//! leader-epoch lookups, groups and their offsets, ACLs, DeleteRecords.
//!
//! Each call is routed where Kafka wants it (any broker for controller
//! operations, the partition leader for ListOffsets/OffsetForLeaderEpoch/
//! DeleteRecords, the group coordinator for group RPCs, every broker for
//! ListGroups) and errors come back as [`KafkaError::Broker`] naming the RPC
//! and resource. Leader-routed calls retry once after a metadata refresh when
//! leadership moved.

use std::collections::BTreeMap;
use std::future::Future;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DeleteRecordsRequest, DescribeAclsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, FindCoordinatorRequest, GroupId, IncrementalAlterConfigsRequest,
    ListGroupsRequest, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest,
    OffsetForLeaderEpochRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::client::{BrokerInfo, KafkaClient};
use super::error::{KafkaError, ResponseError, Result};
use super::fetch::IsolationLevel;

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
    /// Whether the value is explicitly set on the resource itself (what a
    /// config sync copies) rather than inherited.
    pub fn is_explicit(&self) -> bool {
        self.source == 1 || self.source == 2
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

/// Which offset ListOffsets should return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// Log start offset.
    Earliest,
    /// Log end offset (high watermark, or LSO under read_committed).
    Latest,
    /// First offset whose timestamp is ≥ the given ms.
    Timestamp(i64),
}

/// A ListOffsets answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// Offset (-1 if no record matches a timestamp query).
    pub offset: i64,
    /// Timestamp of that record (-1 for earliest/latest).
    pub timestamp: i64,
    /// Leader epoch of that offset.
    pub leader_epoch: i32,
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

/// A group as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    /// Group id.
    pub group_id: String,
    /// Protocol type (`consumer`, `connect`, or empty for a standalone-commit group).
    pub protocol_type: String,
    /// State (`Stable`, `Empty`, …; upper-case for some group types).
    pub state: String,
    /// Group type (`classic`, `consumer`, `share`).
    pub group_type: String,
    /// Node id of the broker that listed it (its coordinator).
    pub coordinator: i32,
}

/// A group as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Group id.
    pub group_id: String,
    /// State.
    pub state: String,
    /// Protocol type.
    pub protocol_type: String,
    /// Member ids.
    pub members: Vec<String>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Offset.
    pub offset: i64,
    /// Leader epoch recorded with it (-1 if none).
    pub leader_epoch: i32,
    /// Metadata string.
    pub metadata: Option<String>,
}

/// An ACL binding. Numeric codes are Kafka's (`AclOperation`, `ResourceType`, …).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AclBinding {
    /// 2 topic, 3 group, 4 cluster, 5 transactional id, 6 delegation token, 7 user.
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: String,
    /// 3 literal, 4 prefixed.
    pub pattern_type: i8,
    /// `User:alice`.
    pub principal: String,
    /// `*` or an IP.
    pub host: String,
    /// 2 all, 3 read, 4 write, 5 create, 6 delete, 7 alter, 8 describe, …
    pub operation: i8,
    /// 2 deny, 3 allow.
    pub permission_type: i8,
}

/// An ACL filter; `None` matches anything. Codes as in [`AclBinding`], plus
/// 1 = ANY for types, patterns, operations and permissions.
#[derive(Debug, Clone, Default)]
pub struct AclFilter {
    /// Resource type (1 = any).
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: Option<String>,
    /// Pattern type (1 = any, 2 = match).
    pub pattern_type: i8,
    /// Principal.
    pub principal: Option<String>,
    /// Host.
    pub host: Option<String>,
    /// Operation (1 = any).
    pub operation: i8,
    /// Permission (1 = any).
    pub permission_type: i8,
}

impl AclFilter {
    /// Matches every ACL.
    pub fn any() -> Self {
        AclFilter {
            resource_type: 1,
            pattern_type: 1,
            operation: 1,
            permission_type: 1,
            ..Default::default()
        }
    }
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
        let mut attempt = 0;
        loop {
            let (leader, epoch) = self.client.leader(topic, partition).await?;
            match f(leader, epoch).await {
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
                // Metadata propagates asynchronously; wait until leaders are known.
                for _ in 0..50 {
                    let md = self.client.refresh_metadata(Some(&names)).await?;
                    if names.iter().all(|n| {
                        md.topic(n).is_some_and(|t| {
                            !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader >= 0)
                        })
                    }) {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
        Ok(out)
    }

    /// CreatePartitions: grows `topic` to `total` partitions.
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
        self.client
            .refresh_metadata(Some(&[topic.to_owned()]))
            .await?;
        Ok(())
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

    /// ListOffsets for one partition, on its leader.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        spec: OffsetSpec,
        isolation: IsolationLevel,
    ) -> Result<ListedOffset> {
        let ts = match spec {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
        };
        self.on_leader(topic, partition, |leader, epoch| async move {
            let req = ListOffsetsRequest::default()
                .with_replica_id((-1).into())
                .with_isolation_level(matches!(isolation, IsolationLevel::ReadCommitted) as i8)
                .with_timeout_ms(self.timeout_ms())
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_current_leader_epoch(epoch)
                        .with_timestamp(ts)])]);
            let resp = self.client.send_to(leader, &req).await?;
            let p = resp
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .find(|p| p.partition_index == partition)
                .ok_or_else(|| {
                    KafkaError::Protocol("ListOffsets response without our partition".into())
                })?;
            KafkaError::check(
                p.error_code,
                || format!("ListOffsets {topic}-{partition}"),
                None,
            )?;
            Ok(ListedOffset {
                offset: p.offset,
                timestamp: p.timestamp,
                leader_epoch: p.leader_epoch,
            })
        })
        .await
    }

    /// OffsetForLeaderEpoch: the end offset of `leader_epoch` on the current
    /// leader, as `(epoch, end offset)` — the largest epoch ≤ the one asked
    /// and where it ended. This is how divergence after a leader change is found.
    pub async fn offset_for_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64)> {
        self.on_leader(topic, partition, |leader, current| async move {
            let req = OffsetForLeaderEpochRequest::default()
                .with_replica_id((-1).into())
                .with_topics(vec![OffsetForLeaderTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![OffsetForLeaderPartition::default()
                        .with_partition(partition)
                        .with_current_leader_epoch(current)
                        .with_leader_epoch(leader_epoch)])]);
            let resp = self.client.send_to(leader, &req).await?;
            let p = resp
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .find(|p| p.partition == partition)
                .ok_or_else(|| {
                    KafkaError::Protocol(
                        "OffsetForLeaderEpoch response without our partition".into(),
                    )
                })?;
            KafkaError::check(
                p.error_code,
                || format!("OffsetForLeaderEpoch {topic}-{partition}"),
                None,
            )?;
            Ok((p.leader_epoch, p.end_offset))
        })
        .await
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

    /// ListGroups on every broker (each lists only the groups it
    /// coordinates), optionally filtered by state (e.g. `["Empty", "Dead"]`;
    /// Kafka compares case-insensitively).
    pub async fn list_groups(&self, states: &[&str]) -> Result<Vec<ListedGroup>> {
        let req =
            ListGroupsRequest::default().with_states_filter(states.iter().map(|x| s(x)).collect());
        let ids: Vec<i32> = self.client.metadata().brokers.keys().copied().collect();
        let mut out = Vec::new();
        for id in ids {
            let conn = self.client.connection(id).await?;
            let v = conn.version::<ListGroupsRequest>()?;
            if !states.is_empty() && v < 4 {
                return Err(KafkaError::UnsupportedVersion {
                    api: "ListGroups (state filter)",
                    broker: conn.broker().to_owned(),
                    broker_range: format!("..{v}"),
                    our_range: "4..".into(),
                });
            }
            let resp = conn.send(&req).await?;
            KafkaError::check(
                resp.error_code,
                || format!("ListGroups on broker {id}"),
                None,
            )?;
            out.extend(resp.groups.into_iter().map(|g| ListedGroup {
                group_id: g.group_id.0.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: g.group_state.to_string(),
                group_type: g.group_type.to_string(),
                coordinator: id,
            }));
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// FindCoordinator for a group; returns the coordinator's node id.
    pub async fn find_coordinator(&self, group: &str) -> Result<i32> {
        let mut attempt = 0;
        loop {
            let conn = self.client.any_connection().await?;
            let v = conn.version::<FindCoordinatorRequest>()?;
            let req = if v >= 4 {
                FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(vec![s(group)])
            } else {
                FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_key(s(group))
            };
            let resp = conn.send(&req).await?;
            let (code, msg, node, host, port) = if v >= 4 {
                let c = resp.coordinators.into_iter().next().ok_or_else(|| {
                    KafkaError::Protocol("FindCoordinator without coordinators".into())
                })?;
                (c.error_code, c.error_message, c.node_id.0, c.host, c.port)
            } else {
                (
                    resp.error_code,
                    resp.error_message,
                    resp.node_id.0,
                    resp.host,
                    resp.port,
                )
            };
            match KafkaError::check(code, || format!("FindCoordinator {group}"), msg.as_deref()) {
                Ok(()) => {
                    if !self.client.metadata().brokers.contains_key(&node) {
                        tracing::debug!(node, %host, port, "coordinator not in metadata yet; refreshing");
                        self.client.refresh_metadata(Some(&[])).await?;
                    }
                    return Ok(node);
                }
                Err(e) if e.is_retriable() && attempt < 10 => {
                    tokio::time::sleep(self.client.retry_backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn on_coordinator<T, F, Fut>(&self, group: &str, f: F) -> Result<T>
    where
        F: Fn(i32) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            let node = self.find_coordinator(group).await?;
            match f(node).await {
                Err(e)
                    if attempt < 5
                        && matches!(
                            e.response_error(),
                            Some(
                                ResponseError::NotCoordinator
                                    | ResponseError::CoordinatorNotAvailable
                                    | ResponseError::CoordinatorLoadInProgress
                            )
                        ) =>
                {
                    tokio::time::sleep(self.client.retry_backoff(attempt)).await;
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    /// DescribeGroups (classic groups), on each group's coordinator.
    pub async fn describe_groups(&self, groups: &[&str]) -> Result<Vec<GroupDescription>> {
        let mut out = Vec::new();
        for &group in groups {
            let d = self
                .on_coordinator(group, |node| async move {
                    let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
                    let resp = self.client.send_to(node, &req).await?;
                    let g = resp.groups.into_iter().next().ok_or_else(|| {
                        KafkaError::Protocol("DescribeGroups without groups".into())
                    })?;
                    KafkaError::check(
                        g.error_code,
                        || format!("DescribeGroups {group}"),
                        g.error_message.as_deref(),
                    )?;
                    Ok(GroupDescription {
                        group_id: g.group_id.0.to_string(),
                        state: g.group_state.to_string(),
                        protocol_type: g.protocol_type.to_string(),
                        members: g.members.iter().map(|m| m.member_id.to_string()).collect(),
                    })
                })
                .await?;
            out.push(d);
        }
        Ok(out)
    }

    /// OffsetFetch: a group's committed offsets (all partitions if `topics` is `None`).
    pub async fn offset_fetch(
        &self,
        group: &str,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<BTreeMap<(String, i32), CommittedOffset>> {
        self.on_coordinator(group, |node| async move {
            let conn = self.client.connection(node).await?;
            let v = conn.version::<OffsetFetchRequest>()?;
            let mut out = BTreeMap::new();
            if v >= 8 {
                let req = OffsetFetchRequest::default().with_groups(vec![
                    OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s(group)))
                        .with_topics(topics.map(|ts| {
                            ts.iter()
                                .map(|(t, ps)| {
                                    OffsetFetchRequestTopics::default()
                                        .with_name(topic_name(t))
                                        .with_partition_indexes(ps.clone())
                                })
                                .collect()
                        })),
                ]);
                let resp = conn.send(&req).await?;
                for g in resp.groups {
                    KafkaError::check(g.error_code, || format!("OffsetFetch {group}"), None)?;
                    for t in g.topics {
                        for p in t.partitions {
                            KafkaError::check(
                                p.error_code,
                                || {
                                    format!(
                                        "OffsetFetch {group} {}-{}",
                                        t.name.0, p.partition_index
                                    )
                                },
                                None,
                            )?;
                            if p.committed_offset >= 0 {
                                out.insert(
                                    (t.name.0.to_string(), p.partition_index),
                                    CommittedOffset {
                                        offset: p.committed_offset,
                                        leader_epoch: p.committed_leader_epoch,
                                        metadata: opt_string(&p.metadata),
                                    },
                                );
                            }
                        }
                    }
                }
            } else {
                let req = OffsetFetchRequest::default()
                    .with_group_id(GroupId(s(group)))
                    .with_topics(topics.map(|ts| {
                        ts.iter()
                            .map(|(t, ps)| {
                                OffsetFetchRequestTopic::default()
                                    .with_name(topic_name(t))
                                    .with_partition_indexes(ps.clone())
                            })
                            .collect()
                    }));
                let resp = conn.send(&req).await?;
                KafkaError::check(resp.error_code, || format!("OffsetFetch {group}"), None)?;
                for t in resp.topics {
                    for p in t.partitions {
                        KafkaError::check(
                            p.error_code,
                            || format!("OffsetFetch {group} {}-{}", t.name.0, p.partition_index),
                            None,
                        )?;
                        if p.committed_offset >= 0 {
                            out.insert(
                                (t.name.0.to_string(), p.partition_index),
                                CommittedOffset {
                                    offset: p.committed_offset,
                                    leader_epoch: p.committed_leader_epoch,
                                    metadata: opt_string(&p.metadata),
                                },
                            );
                        }
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    /// OffsetCommit as a standalone (simple) commit: generation -1 and an
    /// empty member id, which Kafka accepts only for a group with no active
    /// members. This is how translated offsets are written into EMPTY groups.
    pub async fn offset_commit(
        &self,
        group: &str,
        offsets: &BTreeMap<(String, i32), CommittedOffset>,
    ) -> Result<()> {
        let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for ((t, p), o) in offsets {
            by_topic.entry(t.as_str()).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*p)
                    .with_committed_offset(o.offset)
                    .with_committed_leader_epoch(o.leader_epoch)
                    .with_committed_metadata(o.metadata.as_deref().map(s)),
            );
        }
        let md = self.client.metadata();
        let topics: Vec<OffsetCommitRequestTopic> = by_topic
            .into_iter()
            .map(|(t, ps)| {
                OffsetCommitRequestTopic::default()
                    .with_name(topic_name(t))
                    .with_topic_id(md.topic(t).map(|m| m.topic_id).unwrap_or_default())
                    .with_partitions(ps)
            })
            .collect();
        self.on_coordinator(group, |node| {
            let topics = topics.clone();
            async move {
                let req = OffsetCommitRequest::default()
                    .with_group_id(GroupId(s(group)))
                    .with_generation_id_or_member_epoch(-1)
                    .with_member_id(StrBytes::from_static_str(""))
                    .with_group_instance_id(None)
                    .with_retention_time_ms(-1)
                    .with_topics(topics);
                let resp = self.client.send_to(node, &req).await?;
                for t in resp.topics {
                    for p in t.partitions {
                        KafkaError::check(
                            p.error_code,
                            || format!("OffsetCommit {group} {}-{}", t.name.0, p.partition_index),
                            None,
                        )?;
                    }
                }
                Ok(())
            }
        })
        .await
    }

    /// DescribeAcls.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>> {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(filter.resource_type)
            .with_resource_name_filter(filter.resource_name.as_deref().map(s))
            .with_pattern_type_filter(filter.pattern_type)
            .with_principal_filter(filter.principal.as_deref().map(s))
            .with_host_filter(filter.host.as_deref().map(s))
            .with_operation(filter.operation)
            .with_permission_type(filter.permission_type);
        let resp = self.client.send_any(&req).await?;
        KafkaError::check(
            resp.error_code,
            || "DescribeAcls".into(),
            resp.error_message.as_deref(),
        )?;
        let mut out = Vec::new();
        for r in resp.resources {
            for a in r.acls {
                out.push(AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.to_string(),
                    pattern_type: r.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission_type: a.permission_type,
                });
            }
        }
        out.sort();
        Ok(out)
    }

    /// CreateAcls.
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<()> {
        let req = CreateAclsRequest::default().with_creations(
            acls.iter()
                .map(|a| {
                    AclCreation::default()
                        .with_resource_type(a.resource_type)
                        .with_resource_name(s(&a.resource_name))
                        .with_resource_pattern_type(a.pattern_type)
                        .with_principal(s(&a.principal))
                        .with_host(s(&a.host))
                        .with_operation(a.operation)
                        .with_permission_type(a.permission_type)
                })
                .collect(),
        );
        let resp = self.client.send_any(&req).await?;
        for r in resp.results {
            KafkaError::check(
                r.error_code,
                || "CreateAcls".into(),
                r.error_message.as_deref(),
            )?;
        }
        Ok(())
    }

    /// DeleteAcls; returns the ACLs that were deleted.
    pub async fn delete_acls(&self, filters: &[AclFilter]) -> Result<Vec<AclBinding>> {
        let req = DeleteAclsRequest::default().with_filters(
            filters
                .iter()
                .map(|f| {
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(f.resource_type)
                        .with_resource_name_filter(f.resource_name.as_deref().map(s))
                        .with_pattern_type_filter(f.pattern_type)
                        .with_principal_filter(f.principal.as_deref().map(s))
                        .with_host_filter(f.host.as_deref().map(s))
                        .with_operation(f.operation)
                        .with_permission_type(f.permission_type)
                })
                .collect(),
        );
        let resp = self.client.send_any(&req).await?;
        let mut out = Vec::new();
        for r in resp.filter_results {
            KafkaError::check(
                r.error_code,
                || "DeleteAcls".into(),
                r.error_message.as_deref(),
            )?;
            for m in r.matching_acls {
                KafkaError::check(
                    m.error_code,
                    || "DeleteAcls".into(),
                    m.error_message.as_deref(),
                )?;
                out.push(AclBinding {
                    resource_type: m.resource_type,
                    resource_name: m.resource_name.to_string(),
                    pattern_type: m.pattern_type,
                    principal: m.principal.to_string(),
                    host: m.host.to_string(),
                    operation: m.operation,
                    permission_type: m.permission_type,
                });
            }
        }
        Ok(out)
    }

    /// DeleteRecords: moves the log start offset of a partition to
    /// `before_offset` (-1: the high watermark). Returns the new low watermark.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before_offset: i64,
    ) -> Result<i64> {
        self.on_leader(topic, partition, |leader, _| async move {
            let req = DeleteRecordsRequest::default()
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![DeleteRecordsPartition::default()
                        .with_partition_index(partition)
                        .with_offset(before_offset)])])
                .with_timeout_ms(self.timeout_ms());
            let resp = self.client.send_to(leader, &req).await?;
            let p = resp
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .find(|p| p.partition_index == partition)
                .ok_or_else(|| {
                    KafkaError::Protocol("DeleteRecords response without our partition".into())
                })?;
            KafkaError::check(
                p.error_code,
                || format!("DeleteRecords {topic}-{partition}"),
                None,
            )?;
            Ok(p.low_watermark)
        })
        .await
    }
}
