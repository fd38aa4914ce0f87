//! The operator's status page (`GET /ui`) and the log reads it shows
//! (`GET /audit`).
//!
//! The page is one self-contained HTML file compiled into the binary: no
//! asset server, no CDN, so it works on an air-gapped host. It only polls
//! the public JSON endpoints, so anything it shows a script can read too.
//! `/audit` tells a mirror's records exactly as `kmirror log audit` does,
//! by the same code (`log_cmd::audit::walk`), from the coordinator's live
//! log (and a spread mirror's from the shards its partitions are placed
//! in, read from the state topic).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use actix_web::web::{self, Data, Query};
use actix_web::{HttpRequest, HttpResponse};
use kmirror_actors::node::NodeError;
use kmirror_actors::state_log::KafkaLog;
use kmirror_events::{
    coordinator_partition, placement_shard, MirrorPartitionKey, MirrorStateImage, RecordType,
    TopicId,
};
use kmirror_store::EventLog;
use serde::Deserialize;

use super::error::{ApiError, Reply};
use super::route::{forward, NodeHandle, Owner};
use crate::log_cmd::audit::{names_of, topic_ids, walk, AuditFilter, AuditLine};

const PAGE: &str = include_str!("ui/index.html");

/// Answered when `limit` is not given: what fits a panel of the page.
const DEFAULT_AUDIT_LIMIT: usize = 50;
/// A bound on one answer, so a client cannot ask the whole log at once.
const MAX_AUDIT_LIMIT: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    /// Required: on a clustered daemon the mirror says whose log to read.
    mirror: String,
    topic: Option<String>,
    partition: Option<i32>,
    /// The newest `limit` matching records (default 50, at most 1000).
    limit: Option<usize>,
    /// Comma-separated record type names, e.g. `FailoverReport,FailbackPlan`
    /// for the failover/failback history.
    #[serde(rename = "type")]
    types: Option<String>,
}

pub(super) async fn page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("cache-control", "no-store"))
        .body(PAGE)
}

fn record_types() -> impl Iterator<Item = RecordType> {
    (0..=u8::MAX).filter_map(RecordType::from_u8)
}

fn record_type_names() -> Vec<&'static str> {
    record_types().map(RecordType::name).collect()
}

/// The newest records of a mirror (a topic, a partition), oldest first,
/// each as `{"offset", "timestamp_ms", "time", "type", "text"}`, and, for
/// a spread mirror, the `"shard"` (state-topic partition) whose offset it is.
pub(super) async fn audit(node: Data<NodeHandle>, req: HttpRequest, q: Query<AuditQuery>) -> Reply {
    let q = q.into_inner();
    let limit = q.limit.unwrap_or(DEFAULT_AUDIT_LIMIT);
    if !(1..=MAX_AUDIT_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit: {limit} is not between 1 and {MAX_AUDIT_LIMIT}"
        )));
    }
    let types: Vec<String> = q
        .types
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    let known = record_type_names();
    if let Some(bad) = types.iter().find(|t| !known.contains(&t.as_str())) {
        return Err(ApiError::invalid(format!(
            "type: no record type `{bad}`; expected one of {}",
            known.join(", ")
        )));
    }
    let here = match node.owner(&q.mirror, &req).await? {
        Owner::There(peer) => return forward(&peer, &req, None).await,
        Owner::Here(here) => here,
    };
    let (log, image) = node
        .run(here, |n| async move { n.log_and_image().await })
        .await??;
    // A spread mirror's partitions have their records in the shards they
    // are placed in: those are read from the state topic to their ends
    // (read only), beside the coordinator's live log.
    let spread = node.state_log().filter(|_| image.spreads(&q.mirror));
    let lines = web::block(move || -> Result<Vec<serde_json::Value>, ApiError> {
        let names = names_of(&image);
        let topic_filter = match &q.topic {
            None => None,
            Some(t) => {
                let ids = topic_ids(&names, t);
                if ids.is_empty() {
                    return Err(ApiError(NodeError::new(
                        "TOPIC_NOT_IN_CLUSTER_MIRROR",
                        format!("topic: no topic {t:?} in the event log"),
                    )));
                }
                Some(ids)
            }
        };
        let mut logs: Vec<(Option<i32>, Arc<dyn EventLog>)> = vec![(None, log)];
        if let Some(options) = &spread {
            let own = coordinator_partition(&q.mirror, options.partitions);
            logs[0].0 = Some(own);
            let topics = topic_filter.as_deref();
            for shard in placed_shards(&image, &q, topics, &types, options.partitions) {
                if shard != own {
                    let log = KafkaLog::open_read_only(options, Some(shard)).map_err(|e| {
                        ApiError(NodeError::new(
                            "KAFKA_STORAGE_ERROR",
                            format!("reading state partition {shard}: {e}"),
                        ))
                    })?;
                    logs.push((Some(shard), Arc::new(log)));
                }
            }
        }
        let filter = AuditFilter {
            mirror: Some(q.mirror),
            topic_ids: topic_filter,
            partition: q.partition,
            types,
            ..AuditFilter::default()
        };
        let mut newest: Vec<VecDeque<AuditLine>> = Vec::new();
        for (_, log) in &logs {
            let mut lines = VecDeque::with_capacity(limit);
            walk(log.as_ref(), &names, &filter, true, false, |_, line| {
                if lines.len() == limit {
                    lines.pop_front();
                }
                lines.extend(line);
                Ok(())
            })
            .map_err(|e| {
                ApiError(NodeError::new(
                    "KAFKA_STORAGE_ERROR",
                    format!("reading the event log: {e}"),
                ))
            })?;
            newest.push(lines);
        }
        let shards: Vec<Option<i32>> = logs.iter().map(|(s, _)| *s).collect();
        Ok(merge_newest(newest, limit)
            .into_iter()
            .map(|(i, line)| {
                let mut json = line.to_json();
                if let Some(shard) = shards[i] {
                    json["shard"] = shard.into();
                }
                json
            })
            .collect())
    })
    .await
    .map_err(|e| {
        ApiError(NodeError::new(
            "COORDINATOR_NOT_AVAILABLE",
            format!("the log read did not finish: {e}"),
        ))
    })??;
    Ok(HttpResponse::Ok().json(lines))
}

/// The shards where the partition records `q` asks for are placed: those
/// of each partition of the topics `topics` names (whichever mirror holds
/// them now), or of the mirror's topics; none when only topic-level
/// `types` are asked for (the coordinator's shard holds those).
fn placed_shards(
    image: &MirrorStateImage,
    q: &AuditQuery,
    topics: Option<&[TopicId]>,
    types: &[String],
    partitions: i32,
) -> BTreeSet<i32> {
    let placed_type = |name: &String| record_types().any(|t| t.name() == name && t.placed());
    if !types.is_empty() && !types.iter().any(placed_type) {
        return BTreeSet::new();
    }
    let counts: Vec<(TopicId, i32)> = match topics {
        Some(ids) => ids
            .iter()
            .filter_map(|id| Some((*id, image.topic(id)?.change.partition_count)))
            .collect(),
        None => image
            .topics_of(&q.mirror)
            .map(|t| (t.change.topic_id, t.change.partition_count))
            .collect(),
    };
    counts
        .into_iter()
        .flat_map(|(id, count)| {
            (0..count)
                .filter(|p| q.partition.is_none_or(|want| want == *p))
                .map(move |p| {
                    let key = MirrorPartitionKey::new(q.mirror.as_str(), id, p);
                    placement_shard(&key, true, partitions)
                })
        })
        .collect()
}

/// The newest `limit` lines of several logs, oldest first, each with the
/// index of its log. Each log's lines keep their log order (a shard's
/// owners may stamp with clocks a little apart); between logs, the older
/// head goes first.
fn merge_newest(mut logs: Vec<VecDeque<AuditLine>>, limit: usize) -> Vec<(usize, AuditLine)> {
    let mut merged = Vec::new();
    loop {
        let next = logs
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.front().map(|line| (line.timestamp_ms, i)))
            .min();
        let Some((_, i)) = next else { break };
        merged.extend(logs[i].pop_front().map(|line| (i, line)));
    }
    let skip = merged.len().saturating_sub(limit);
    merged.split_off(skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(timestamp_ms: i64, offset: u64) -> AuditLine {
        AuditLine {
            offset,
            timestamp_ms,
            record_type: "OffsetMapRun",
            text: String::new(),
        }
    }

    #[test]
    fn the_newest_lines_of_several_shards_merge_by_time_each_in_its_log_order() {
        // Shard 0's second owner stamped a little behind its first.
        let a = VecDeque::from([line(10, 0), line(30, 1), line(25, 2)]);
        let b = VecDeque::from([line(20, 0), line(40, 1)]);
        let merged: Vec<(usize, u64)> = merge_newest(vec![a, b], 4)
            .into_iter()
            .map(|(i, l)| (i, l.offset))
            .collect();
        assert_eq!(merged, [(1, 0), (0, 1), (0, 2), (1, 1)]);
    }
}
