//! The operator's status page (`GET /ui`) and the log reads it shows
//! (`GET /audit`).
//!
//! The page is one self-contained HTML file compiled into the binary: no
//! asset server, no CDN, so it works on an air-gapped host. It only polls
//! the public JSON endpoints, so anything it shows a script can read too.
//! `/audit` tells a mirror's records exactly as `kmirror log audit` does,
//! by the same code (`log_cmd::audit::walk`), from the node's live log.

use std::collections::VecDeque;

use actix_web::web::{self, Data, Query};
use actix_web::{HttpRequest, HttpResponse};
use kmirror_actors::node::NodeError;
use kmirror_events::RecordType;
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

fn record_type_names() -> Vec<&'static str> {
    (0..=u8::MAX)
        .filter_map(RecordType::from_u8)
        .map(RecordType::name)
        .collect()
}

/// The newest records of a mirror (a topic, a partition), oldest first,
/// each as `{"offset", "timestamp_ms", "time", "type", "text"}`.
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
        let filter = AuditFilter {
            mirror: Some(q.mirror),
            topic_ids: topic_filter,
            partition: q.partition,
            types,
            ..AuditFilter::default()
        };
        let mut newest: VecDeque<AuditLine> = VecDeque::with_capacity(limit);
        walk(log.as_ref(), &names, &filter, true, false, |_, line| {
            if newest.len() == limit {
                newest.pop_front();
            }
            newest.extend(line);
            Ok(())
        })
        .map_err(|e| {
            ApiError(NodeError::new(
                "KAFKA_STORAGE_ERROR",
                format!("reading the event log: {e}"),
            ))
        })?;
        Ok(newest.iter().map(AuditLine::to_json).collect())
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
