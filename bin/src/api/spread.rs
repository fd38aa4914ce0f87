//! The admin API's part in spread mirrors (`mirror.partitions.spread`):
//! what a request gathers from the nodes that host a mirror's partitions —
//! the partitions no node describes, filled in; a recover and a stop's dry
//! run, asked of every host (`POST /hosted/{name}/{operation}`).

use actix_web::web::{Data, Path};
use actix_web::{HttpRequest, HttpResponse};
use kmirror_actors::node::{Node, NodeError, PartitionDescription, PartitionFailover, StopOptions};

use super::body::Body;
use super::error::{ApiError, Reply};
use super::route::{ask_each, to_json, NodeHandle};
use super::{to_value, OperationBody};

/// `described` (every node's answer) and the partitions of spread mirrors
/// no node described, filled in by `gatherer` (`Node::undescribed`): a
/// partition is shown, not missing, while its host is down, starting it or
/// silent (`silent`, the peers' errors).
pub(super) async fn with_undescribed(
    node: &NodeHandle,
    gatherer: Option<Node>,
    mut described: Vec<PartitionDescription>,
    silent: &[ApiError],
) -> Result<Vec<PartitionDescription>, ApiError> {
    let Some(gatherer) = gatherer else {
        return Ok(described);
    };
    let seen = described.clone();
    let silent: Vec<String> = silent.iter().map(|e| e.0.to_string()).collect();
    let missing = node
        .run(
            gatherer,
            |n| async move { n.undescribed(&seen, &silent).await },
        )
        .await??;
    described.extend(missing);
    Ok(described)
}

/// A recover of a spread mirror, after its coordinator's (`answer`): every
/// node (this process's other shards too) recovers the FAILED partitions
/// it hosts, and the answer names them all. A node that does not answer fails the request, naming
/// it, after the others recovered theirs: recover again.
pub(super) async fn recover_hosted_too(
    node: &NodeHandle,
    req: &HttpRequest,
    (coordinator, mirror): (Node, &str),
    topics: Vec<String>,
    mut answer: serde_json::Value,
) -> Result<serde_json::Value, ApiError> {
    let m = mirror.to_string();
    if !node
        .run(coordinator, |n| async move { n.spreads(&m).await })
        .await??
    {
        return Ok(answer);
    }
    let (theirs, silent): (Vec<String>, _) =
        ask_hosts(node, req, (mirror, "recover"), topics).await?;
    if let Some(topics) = answer["topics"].as_array_mut() {
        topics.extend(theirs.into_iter().map(serde_json::Value::from));
        if !topics.is_empty() {
            answer["note"] = serde_json::Value::Null;
        }
    }
    match silent.into_iter().next() {
        Some(ApiError(e)) => Err(ApiError(NodeError::new(
            &e.code,
            format!(
                "recovered {}; a node hosting partitions of {mirror:?} did not: {}",
                answer["topics"], e.message
            ),
        ))),
        None => Ok(answer),
    }
}

/// `POST /hosted/{name}/{recover|preview-stop}`, asked by a spread
/// mirror's coordinator of every other node: the FAILED partitions this
/// node hosts of it recovered, or the failover reports a stop would record
/// of those it hosts.
pub(super) async fn hosted_operation(
    node: Data<NodeHandle>,
    path: Path<(String, String)>,
    body: Body<OperationBody>,
) -> Reply {
    let (mirror, operation) = path.into_inner();
    let answers = hosted_here(&node, &mirror, &operation, body.into_inner().topics).await?;
    Ok(HttpResponse::Ok().json(answers))
}

/// A hosted operation (see [`hosted_operation`]) on every node of this
/// process: each shard hosts the partitions placed in it.
async fn hosted_here(
    node: &NodeHandle,
    mirror: &str,
    operation: &str,
    topics: Vec<String>,
) -> Result<Vec<serde_json::Value>, ApiError> {
    let mut answers = Vec::new();
    for here in node.locals().await {
        let (m, t, op) = (mirror.to_string(), topics.clone(), operation.to_string());
        let answer = node
            .run(here, |n| async move {
                match op.as_str() {
                    "recover" => n.recover_hosted(&m, &t).await.map(to_value),
                    "preview-stop" => n.preview_hosted(&m, &t).await.map(to_value),
                    _ => Err(NodeError::new(
                        "NOT_FOUND",
                        format!("no hosted operation `{op}`; expected recover, preview-stop"),
                    )),
                }
            })
            .await??;
        answers.extend(answer.as_array().cloned().unwrap_or_default());
    }
    Ok(answers)
}

/// A hosted operation on every node, this process's and every other
/// member's, decoded; and the error of each member that gave no answer.
async fn ask_hosts<T: serde::de::DeserializeOwned>(
    node: &NodeHandle,
    req: &HttpRequest,
    (mirror, operation): (&str, &str),
    topics: Vec<String>,
) -> Result<(Vec<T>, Vec<ApiError>), ApiError> {
    let here = hosted_here(node, mirror, operation, topics.clone()).await?;
    let mut all: Vec<T> = here
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError(NodeError::new("UNKNOWN_SERVER_ERROR", e.to_string())))?;
    let body = to_json(&OperationBody {
        topics,
        ..OperationBody::default()
    });
    let path = format!("/hosted/{mirror}/{operation}");
    let (theirs, silent) = ask_each(node, req, node.other_members(), ("POST", &path), body).await;
    all.extend(theirs);
    Ok((all, silent))
}

/// `stop --dry-run`: the coordinator's preview and, for a spread mirror,
/// every other node's of the partitions it hosts. A node that gives none
/// fails the request, naming it (nothing changed: ask again).
pub(super) async fn preview_stop(
    node: &NodeHandle,
    req: &HttpRequest,
    (here, mirror): (Node, &str),
    topics: Vec<String>,
    options: StopOptions,
) -> Reply {
    let (m, requested) = (mirror.to_string(), topics.clone());
    let (report, spreads) = node
        .run(here.clone(), move |n| async move {
            let report = n.stop_topics(&m, &topics, options).await?;
            Ok::<_, NodeError>((report, n.spreads(&m).await?))
        })
        .await??;
    if !spreads {
        return Ok(HttpResponse::Ok().json(report));
    }
    let (theirs, silent): (Vec<PartitionFailover>, _) =
        ask_hosts(node, req, (mirror, "preview-stop"), requested).await?;
    if let Some(ApiError(e)) = silent.into_iter().next() {
        return Err(ApiError(NodeError::new(
            &e.code,
            format!(
                "a node hosting partitions of {mirror:?} gave no preview: {}",
                e.message
            ),
        )));
    }
    let m = mirror.to_string();
    let report = node
        .run(here, move |n| async move {
            n.with_hosted_previews(&m, report, theirs).await
        })
        .await??;
    Ok(HttpResponse::Ok().json(report))
}
