//! The admin API's part in spread mirrors (`mirror.partitions.spread`):
//! what a request gathers from the nodes that host a mirror's partitions —
//! the partitions no node describes, filled in; a recover and a stop's dry
//! run, asked of every host (`POST /hosted/{name}/{operation}`), and how
//! the partitions each host runs stand, asked by the coordinator's
//! metadata sync for a keyless hold and by a switchover's drain — and what
//! a host asks of the coordinator:
//! a stopping partition's final group-offset pass (`POST
//! /hosted/{name}/final-sync`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::web::{Data, Path};
use actix_web::{HttpRequest, HttpResponse};
use kmirror_actors::hosted_sync::AskFinalSync;
use kmirror_actors::node::{Node, NodeError, PartitionDescription, PartitionFailover, StopOptions};
use kmirror_actors::spread::{AskHostedCopies, HostedCopy};
use kmirror_events::{MirrorPartitionKey, TopicId};
use serde::{Deserialize, Serialize};

use super::body::Body;
use super::error::{ApiError, Reply};
use super::route::{
    answer_of, ask_each, auth_of, call_peer, forwarded, to_json, NodeHandle, Owner,
    FAN_OUT_TIMEOUT, HOSTED_TIMEOUT,
};
use super::{to_value, OperationBody};
use crate::admin_auth::ClientAuth;

/// A partition of the mirror a `/hosted/{name}/final-sync` names.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HostedPartition {
    topic_id: TopicId,
    partition: i32,
}

/// Whether a final pass ran to its end.
#[derive(Serialize, Deserialize)]
struct FinalSyncAnswer {
    synced: bool,
}

/// How long a host's ask for a final pass waits for the coordinator's
/// answer: as long as the partition waits for the pass.
const ASK_FINAL_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a host's ask for a final pass, or a coordinator's for the hosts'
/// copies, goes: the node as the admin API reaches it (this process's
/// shards and the group's view of who owns what). Set once the clustered
/// node has started and emptied when it stops (the shards' settings hold
/// the askers: a cycle otherwise); an ask meanwhile fails: the partition
/// stops without the pass, the keyless hold stays.
pub(crate) type NodeRoute = Arc<Mutex<Option<NodeHandle>>>;

/// How a partition hosted here asks its mirror's coordinator for its final
/// group-offset pass (`kmirror_actors::hosted_sync`): the shard of this
/// process that coordinates the mirror, or the node that does, over HTTP,
/// found as an admin request's owner is ([`NodeHandle::owner_as`]).
pub(crate) fn final_sync_asker(route: NodeRoute, auth: ClientAuth) -> AskFinalSync {
    Arc::new(move |key: MirrorPartitionKey| {
        let (route, auth) = (route.clone(), auth.clone());
        Box::pin(async move {
            let asked = tokio::time::Instant::now();
            let node = route.lock().expect("final sync route").clone();
            let node = node.ok_or("the node is starting or stopping")?;
            let peer = match node.owner_as(&key.mirror_name, None).await {
                Ok(Owner::Here(here)) => {
                    return here
                        .final_sync_hosted(key, asked)
                        .await
                        .map_err(|e| e.to_string())
                }
                Ok(Owner::There(peer)) => peer,
                Err(e) => return Err(e.0.to_string()),
            };
            let path = format!("/hosted/{}/final-sync", key.mirror_name);
            let body = to_json(&HostedPartition {
                topic_id: key.topic_id,
                partition: key.partition,
            });
            let asked_peer = async {
                let response = call_peer(
                    auth,
                    &peer.url,
                    peer.generation,
                    "POST",
                    &path,
                    body,
                    ASK_FINAL_SYNC_TIMEOUT,
                )
                .await?;
                answer_of::<FinalSyncAnswer>(&peer.url, &path, response)
            };
            asked_peer
                .await
                .map(|a| a.synced)
                .map_err(|e| e.0.to_string())
        })
    })
}

/// How a spread mirror's coordinator asks every node how the partitions
/// it hosts stand, for a keyless hold and a switchover's drain (each of
/// its polls; `kmirror_actors::spread`): this process's shards and every
/// other member (`POST /hosted/{name}/copies`), each given
/// [`FAN_OUT_TIMEOUT`].
pub(crate) fn hosted_copies_asker(route: NodeRoute, auth: ClientAuth) -> AskHostedCopies {
    Arc::new(move |mirror: String| {
        let (route, auth) = (route.clone(), auth.clone());
        Box::pin(async move {
            let node = route.lock().expect("node route").clone();
            let node = node.ok_or("the node is starting or stopping")?;
            let operation = (mirror.as_str(), "copies");
            let (copies, silent): (Vec<HostedCopy>, _) =
                ask_hosts(&node, auth, operation, Vec::new(), FAN_OUT_TIMEOUT).await;
            match silent.first() {
                Some(e) => Err(e.0.to_string()),
                None => Ok(copies),
            }
        })
    })
}

/// `POST /hosted/{name}/final-sync`, asked by the node that hosts a
/// partition of a spread mirror this node coordinates, as it stops the
/// partition: the final group-offset pass over it (only from another
/// node; `Node::final_sync_hosted`).
pub(super) async fn hosted_final_sync(
    node: Data<NodeHandle>,
    req: HttpRequest,
    path: Path<String>,
    body: Body<HostedPartition>,
) -> Reply {
    let asked = tokio::time::Instant::now();
    let mirror = path.into_inner();
    if !forwarded(&req) {
        return Err(ApiError::invalid(format!(
            "/hosted/{mirror}/final-sync is asked by the node hosting a partition of a spread mirror, of its coordinator, as it stops it"
        )));
    }
    let Owner::Here(here) = node.owner(&mirror, &req).await? else {
        unreachable!("a forwarded request is served here or refused")
    };
    let p = body.into_inner();
    let key = MirrorPartitionKey::new(mirror, p.topic_id, p.partition);
    let synced = node
        .run(here, move |n| async move {
            n.final_sync_hosted(key, asked).await
        })
        .await??;
    Ok(HttpResponse::Ok().json(FinalSyncAnswer { synced }))
}

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
/// it hosts, and the answer names them all. If a node gave no answer, the
/// request fails naming it and what was recovered: recover again (it only
/// touches FAILED partitions).
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
    let (theirs, silent): (Vec<String>, _) = ask_hosts(
        node,
        auth_of(req),
        (mirror, "recover"),
        topics,
        HOSTED_TIMEOUT,
    )
    .await;
    if let Some(topics) = answer["topics"].as_array_mut() {
        topics.extend(theirs.into_iter().map(serde_json::Value::from));
        if !topics.is_empty() {
            answer["note"] = serde_json::Value::Null;
        }
    }
    match silent.is_empty() {
        true => Ok(answer),
        false => Err(not_all(
            mirror,
            &format!("recovered {}", answer["topics"]),
            &silent,
        )),
    }
}

/// What a hosted operation answers when some node gave no answer: its own
/// code, not the node's (whose 404 or 401 says nothing of this request),
/// and every node's reason.
fn not_all(mirror: &str, done: &str, silent: &[ApiError]) -> ApiError {
    let why: Vec<String> = silent.iter().map(|e| e.0.to_string()).collect();
    ApiError(NodeError::new(
        "COORDINATOR_NOT_AVAILABLE",
        format!(
            "{done}; {} node(s) hosting partitions of {mirror:?} gave no answer (one may have acted nonetheless): {}",
            silent.len(),
            why.join("; ")
        ),
    ))
}

/// The operations a spread mirror's coordinator asks of every host.
const HOSTED_OPERATIONS: &[&str] = &["recover", "preview-stop", "copies"];

/// `POST /hosted/{name}/{recover|preview-stop|copies}`, asked by a spread
/// mirror's coordinator of every other node (only a request from another
/// node: an operator's goes to the coordinator, which asks every host):
/// the FAILED partitions this node hosts of it recovered, the failover
/// reports a stop would record of those it hosts, or how they stand for
/// a keyless hold and a switchover's drain (`Node::hosted_copies`).
pub(super) async fn hosted_operation(
    node: Data<NodeHandle>,
    req: HttpRequest,
    path: Path<(String, String)>,
    body: Body<OperationBody>,
) -> Reply {
    let (mirror, operation) = path.into_inner();
    if !HOSTED_OPERATIONS.contains(&operation.as_str()) {
        return Err(super::no_operation(
            "hosted operation",
            &operation,
            HOSTED_OPERATIONS,
        ));
    }
    if !forwarded(&req) {
        let instead = match operation.as_str() {
            "recover" => format!("; send POST /mirrors/{mirror}/recover instead"),
            "preview-stop" => format!("; send POST /mirrors/{mirror}/stop with dry_run instead"),
            _ => String::new(),
        };
        return Err(ApiError::invalid(format!(
            "/hosted/{mirror}/{operation} is asked by a mirror's coordinator of the other nodes{instead}"
        )));
    }
    let (answers, failed) = hosted_here(&node, &mirror, &operation, body.into_inner().topics).await;
    match failed.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(HttpResponse::Ok().json(answers)),
    }
}

/// A hosted operation (see [`hosted_operation`]) on every node of this
/// process, each shard hosting the partitions placed in it; and the error
/// of each that failed.
async fn hosted_here(
    node: &NodeHandle,
    mirror: &str,
    operation: &str,
    topics: Vec<String>,
) -> (Vec<serde_json::Value>, Vec<ApiError>) {
    let (mut answers, mut failed) = (Vec::new(), Vec::new());
    for here in node.locals().await {
        let (m, t, op) = (mirror.to_string(), topics.clone(), operation.to_string());
        let answer = node
            .run(here, |n| async move {
                match op.as_str() {
                    "recover" => n.recover_hosted(&m, &t).await.map(to_value),
                    "preview-stop" => n.preview_hosted(&m, &t).await.map(to_value),
                    "copies" => Ok(to_value(n.hosted_copies(&m).await)),
                    other => unreachable!("{other} is not in HOSTED_OPERATIONS"),
                }
            })
            .await;
        match answer {
            Ok(Ok(answer)) => answers.extend(answer.as_array().cloned().unwrap_or_default()),
            Ok(Err(e)) => failed.push(ApiError(e)),
            Err(e) => failed.push(e),
        }
    }
    (answers, failed)
}

/// A hosted operation on every node, this process's and every other
/// member's (each given `timeout`), decoded; and the error of each node
/// that gave no answer.
async fn ask_hosts<T: serde::de::DeserializeOwned>(
    node: &NodeHandle,
    auth: ClientAuth,
    (mirror, operation): (&str, &str),
    topics: Vec<String>,
    timeout: Duration,
) -> (Vec<T>, Vec<ApiError>) {
    let (here, mut failed) = hosted_here(node, mirror, operation, topics.clone()).await;
    let mut all = Vec::new();
    for answer in here {
        match serde_json::from_value(answer) {
            Ok(a) => all.push(a),
            Err(e) => failed.push(ApiError(NodeError::new(
                "UNKNOWN_SERVER_ERROR",
                e.to_string(),
            ))),
        }
    }
    let body = to_json(&OperationBody {
        topics,
        ..OperationBody::default()
    });
    let path = format!("/hosted/{mirror}/{operation}");
    let peers = node.other_members();
    let (theirs, silent) = ask_each(node, auth, peers, ("POST", &path), body, timeout).await;
    all.extend(theirs);
    failed.extend(silent);
    (all, failed)
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
    let (theirs, silent): (Vec<PartitionFailover>, _) = ask_hosts(
        node,
        auth_of(req),
        (mirror, "preview-stop"),
        requested,
        HOSTED_TIMEOUT,
    )
    .await;
    if !silent.is_empty() {
        return Err(not_all(mirror, "nothing was changed", &silent));
    }
    let m = mirror.to_string();
    let report = node
        .run(here, move |n| async move {
            n.with_hosted_previews(&m, report, theirs).await
        })
        .await??;
    Ok(HttpResponse::Ok().json(report))
}
