//! Consumer-group RPCs, apart from the rest of the admin surface because
//! they route to the group coordinator (found, and re-found when it moves)
//! rather than to a partition leader or any broker, and because translated
//! offsets are written into target groups through them.

use std::collections::BTreeMap;
use std::future::Future;

use futures_util::stream::{self, StreamExt};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseTopics;
use kafka_protocol::messages::{
    DescribeGroupsRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest, OffsetCommitRequest,
    OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::{opt_string, s, topic_name, Admin};
use crate::kafka::error::{KafkaError, ResponseError, Result};

/// A group's committed offsets by `(topic, partition)`.
pub type GroupCommits = BTreeMap<(String, i32), CommittedOffset>;

/// Groups per FindCoordinator and per OffsetFetch request of
/// [`Admin::offset_fetch_groups`]: keeps each answer to a bounded size.
const GROUPS_PER_OFFSET_FETCH: usize = 200;

/// One group's committed offsets from an OffsetFetch answer's topics. The
/// v0–7 answer (one group) and the v8+ one (many groups) are different
/// generated types with the same fields, hence a macro rather than a
/// function.
macro_rules! group_commits {
    ($group:expr, $topics:expr) => {{
        let group: &str = $group;
        let mut out = GroupCommits::new();
        for t in $topics {
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
        Ok::<GroupCommits, KafkaError>(out)
    }};
}

/// One group's answer in an OffsetFetch v8+ response.
fn group_commits(group: &str, topics: Vec<OffsetFetchResponseTopics>) -> Result<GroupCommits> {
    group_commits!(group, topics)
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

impl Admin {
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
                    out.extend(group_commits(group, g.topics)?);
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
                out = group_commits!(group, resp.topics)?;
            }
            Ok(out)
        })
        .await
    }

    /// Many groups' committed offsets (every partition they committed), in
    /// as few round trips as the brokers allow: the coordinators of all of
    /// them from FindCoordinator v4+ (many keys per request), then one
    /// OffsetFetch v8+ per coordinator for up to [`GROUPS_PER_OFFSET_FETCH`]
    /// groups. A thousand groups cost a handful of requests instead of two
    /// round trips each. A group the batch cannot answer — its coordinator
    /// moved or is loading, or a broker too old to batch — is asked on its
    /// own through [`Admin::offset_fetch`] and its retries. One answer per
    /// group, in the order given.
    pub async fn offset_fetch_groups(
        &self,
        groups: &[String],
    ) -> Result<Vec<(String, Result<GroupCommits>)>> {
        let mut answers: BTreeMap<String, Result<GroupCommits>> = BTreeMap::new();
        if !groups.is_empty() {
            let coordinators = self.find_coordinators(groups).await?;
            let mut by_node: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
            for (g, node) in &coordinators {
                by_node.entry(*node).or_default().push(g.as_str());
            }
            for (node, members) in by_node {
                let conn = self.client.connection(node).await?;
                if conn.version::<OffsetFetchRequest>()? < 8 {
                    continue;
                }
                for chunk in members.chunks(GROUPS_PER_OFFSET_FETCH) {
                    let req = OffsetFetchRequest::default().with_groups(
                        chunk
                            .iter()
                            .map(|g| {
                                OffsetFetchRequestGroup::default()
                                    .with_group_id(GroupId(s(g)))
                                    .with_topics(None)
                            })
                            .collect(),
                    );
                    let resp = conn.send(&req).await?;
                    for g in resp.groups {
                        let group = g.group_id.0.to_string();
                        if g.error_code != 0 {
                            continue; // asked again on its own below
                        }
                        answers.insert(group.clone(), group_commits(&group, g.topics));
                    }
                }
            }
        }
        let rest: Vec<String> = groups
            .iter()
            .filter(|g| !answers.contains_key(*g))
            .cloned()
            .collect();
        let singles: Vec<(String, Result<GroupCommits>)> = stream::iter(rest)
            .map(|g| async move {
                let answer = self.offset_fetch(&g, None).await;
                (g, answer)
            })
            .buffered(16)
            .collect()
            .await;
        answers.extend(singles);
        Ok(groups
            .iter()
            .map(|g| {
                let a = answers.remove(g).unwrap_or_else(|| Ok(BTreeMap::new()));
                (g.clone(), a)
            })
            .collect())
    }

    /// The coordinators of these groups, by FindCoordinator v4+ (many keys
    /// per request); groups it could not place now (an error, or a broker
    /// before v4) are left out, for the caller to ask one by one.
    async fn find_coordinators(&self, groups: &[String]) -> Result<BTreeMap<String, i32>> {
        let conn = self.client.any_connection().await?;
        let mut out = BTreeMap::new();
        if conn.version::<FindCoordinatorRequest>()? < 4 {
            return Ok(out);
        }
        for chunk in groups.chunks(GROUPS_PER_OFFSET_FETCH) {
            let req = FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(chunk.iter().map(|g| s(g)).collect());
            let resp = conn.send(&req).await?;
            for c in resp.coordinators {
                if c.error_code == 0 {
                    out.insert(c.key.to_string(), c.node_id.0);
                }
            }
        }
        let md = self.client.metadata();
        if out.values().any(|n| !md.brokers.contains_key(n)) {
            self.client.refresh_metadata(Some(&[])).await?;
        }
        Ok(out)
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
}
