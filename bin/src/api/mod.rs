//! The daemon's admin HTTP+JSON API (documented in the README).
//!
//! Thin on purpose: every handler validates its input, calls one `Node`
//! method and serialises the answer. Errors leave through [`ApiError`] only,
//! so every refusal has the same `{"error": CODE, "message": …}` shape and
//! the same code-to-status mapping.

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::web::{self, Data, Path, Query};
use actix_web::{HttpRequest, HttpResponse};
use kmirror_actors::failback::FailbackRequest;
use kmirror_actors::kafka::budget::MemoryBudget;
use kmirror_actors::node::{
    MirrorListing, Node, NodeError, NodeMetrics, PartitionDescription, StopOptions, TopicChange,
};
use kmirror_actors::verify::VerifyRequest;
use kmirror_events::FailbackMode;

pub mod auth;
mod body;
mod error;
#[cfg(test)]
mod fuzz;
mod route;
pub(crate) mod spread;
mod ui;

use body::Body;
use error::{body_error, Reply};
pub use error::{ApiError, MAX_BODY_BYTES};
pub use route::NodeHandle;
use route::{fan_out_each, forward, to_json, Owner};
use serde::{Deserialize, Serialize};

/// The largest `sample` a verify takes per partition: each sampled offset
/// is held and fetched, and larger samples of a big partition are better
/// asked as a whole-partition compare.
const MAX_SAMPLE: u64 = 1_000_000;

/// Body of `POST /mirrors`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    pub name: String,
    /// The mirror's Kafka-style properties (`bootstrap.servers`, …).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// Body of `POST /mirrors/{name}/{start|stop|pause|resume|recover|unfence}`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationBody {
    /// Topic names or regexes.
    #[serde(default)]
    pub topics: Vec<String>,
    /// Only for `start`: patterns that are never mirrored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// The optimistic lock: refuse if a topic's state changed after this
    /// event-log offset (see `GET /state-offset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_validation_offset: Option<u64>,
    /// Only for `start`: take topics back by `delta` or `from-scratch`
    /// (absent: `delta` where a failback is possible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failback: Option<String>,
    /// Only for `start` (the failback plans) and `stop` (the failover
    /// report): answer what would happen, change nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// Only for `stop`: a planned switchover — fence the source's writers,
    /// drain to lag 0, then stop.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fence_source: bool,
    /// Only for `stop`: how long each wait may take, in ms (default 60 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Only for `stop --fence-source` from a source without an authorizer:
    /// how long its end offsets must stay unchanged, in ms (default 5 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescribeQuery {
    #[serde(default)]
    failed: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    state_validation_offset: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateOffsetQuery {
    mirror: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TranslateQuery {
    mirror: String,
    topic: String,
    partition: i32,
    offset: i64,
}

/// Registers every route; the daemon and the tests share it.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.app_data(
        web::JsonConfig::default()
            .limit(MAX_BODY_BYTES)
            .content_type_required(false)
            .error_handler(|e, _| body_error(e).into()),
    )
    .app_data(
        web::QueryConfig::default()
            .error_handler(|e, _| ApiError::invalid(format!("bad query string: {e}")).into()),
    )
    .app_data(
        web::PathConfig::default()
            .error_handler(|e, _| ApiError::invalid(format!("bad path: {e}")).into()),
    )
    .service(
        resource("/mirrors")
            .route(web::get().to(list))
            .route(web::post().to(create)),
    )
    .service(resource("/mirrors/{name}").route(web::delete().to(delete)))
    .service(resource("/mirrors/{name}/partitions").route(web::get().to(describe_one)))
    .service(resource("/mirrors/{name}/verify").route(web::post().to(verify)))
    .service(resource("/mirrors/{name}/{operation}").route(web::post().to(operate)))
    .service(resource("/partitions").route(web::get().to(describe_all)))
    .service(resource("/hosted/{name}/final-sync").route(web::post().to(spread::hosted_final_sync)))
    .service(resource("/hosted/{name}/{operation}").route(web::post().to(spread::hosted_operation)))
    .service(resource("/offsets/translate").route(web::get().to(translate)))
    .service(resource("/state-offset").route(web::get().to(state_validation_offset)))
    .service(resource("/metrics").route(web::get().to(metrics)))
    .service(resource("/cluster").route(web::get().to(cluster)))
    .service(resource("/health").route(web::get().to(health)))
    .service(resource("/ui").route(web::get().to(ui::page)))
    .service(resource("/audit").route(web::get().to(ui::audit)))
    .default_service(web::to(|req: HttpRequest| async move {
        ApiError(NodeError::new(
            "NOT_FOUND",
            format!("no such endpoint: {} {}", req.method(), req.path()),
        ))
    }));
}

fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(|req: HttpRequest| async move {
        ApiError(NodeError::new(
            "METHOD_NOT_ALLOWED",
            format!("{} is not supported on {}", req.method(), req.path()),
        ))
    }))
}

async fn list(node: Data<NodeHandle>, req: HttpRequest) -> Reply {
    let mut mirrors: Vec<MirrorListing> =
        gather(&node, &req, node.peers(&req), "/mirrors", |n| async move {
            Ok(n.list_mirrors().await)
        })
        .await?;
    mirrors.sort_by(|a, b| a.mirror.cmp(&b.mirror));
    Ok(HttpResponse::Ok().json(mirrors))
}

/// Every node's answer to a listing: this process's nodes through `local`,
/// `peers` through `path`; a peer's error fails it.
async fn gather<T, F, Fut>(
    node: &NodeHandle,
    req: &HttpRequest,
    peers: Vec<String>,
    path: &str,
    local: F,
) -> Result<Vec<T>, ApiError>
where
    T: serde::de::DeserializeOwned + Send + 'static,
    F: Fn(Node) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Vec<T>, NodeError>> + 'static,
{
    let (all, silent) = gather_each(node, req, peers, path, local).await?;
    match silent.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(all),
    }
}

/// [`gather`], and the error of each peer that gave no answer.
async fn gather_each<T, F, Fut>(
    node: &NodeHandle,
    req: &HttpRequest,
    peers: Vec<String>,
    path: &str,
    local: F,
) -> Result<(Vec<T>, Vec<ApiError>), ApiError>
where
    T: serde::de::DeserializeOwned + Send + 'static,
    F: Fn(Node) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Vec<T>, NodeError>> + 'static,
{
    let mut all = Vec::new();
    for here in node.locals().await {
        all.extend(node.run(here, local.clone()).await??);
    }
    let (theirs, silent) = fan_out_each::<T>(node, req, peers, path).await;
    all.extend(theirs);
    Ok((all, silent))
}

async fn create(node: Data<NodeHandle>, req: HttpRequest, body: Body<CreateBody>) -> Reply {
    let body = body.into_inner();
    if body.name.trim().is_empty() {
        return Err(ApiError::invalid("name: must not be empty"));
    }
    let here = match node.owner(&body.name, &req).await? {
        Owner::There(peer) => return forward(&peer, &req, to_json(&body)).await,
        Owner::Here(here) => here,
    };
    let CreateBody { name, properties } = body;
    let mirror = name.clone();
    let listing = node
        .run(here, |n| async move {
            n.create_mirror(&mirror, properties).await
        })
        .await??;
    tracing::info!(mirror = %name, "mirror created");
    Ok(HttpResponse::Created().json(listing))
}

async fn delete(
    node: Data<NodeHandle>,
    req: HttpRequest,
    name: Path<String>,
    query: Query<DeleteQuery>,
) -> Reply {
    let here = match node.owner(&name, &req).await? {
        Owner::There(peer) => return forward(&peer, &req, None).await,
        Owner::Here(here) => here,
    };
    let (mirror, offset) = (name.clone(), query.state_validation_offset);
    node.run(here, move |n| async move {
        n.delete_mirror(&mirror, offset).await
    })
    .await??;
    tracing::info!(mirror = %name, "mirror deleted");
    Ok(HttpResponse::Ok().json(serde_json::json!({ "mirror": *name, "deleted": true })))
}

fn failed_only(partitions: Vec<PartitionDescription>, failed: bool) -> Reply {
    let partitions: Vec<PartitionDescription> = partitions
        .into_iter()
        .filter(|p| !failed || p.state == "FAILED")
        .collect();
    Ok(HttpResponse::Ok().json(partitions))
}

async fn describe_one(
    node: Data<NodeHandle>,
    req: HttpRequest,
    name: Path<String>,
    query: Query<DescribeQuery>,
) -> Reply {
    let here = match node.owner(&name, &req).await? {
        Owner::There(peer) => return forward(&peer, &req, None).await,
        Owner::Here(here) => here,
    };
    let mirror = name.into_inner();
    let asked = mirror.clone();
    // `None`: a spread mirror, described below.
    let own = node
        .run(here.clone(), |n| async move {
            if n.spreads(&asked).await? {
                return Ok(None);
            }
            n.describe(Some(&asked)).await.map(Some)
        })
        .await??;
    if let Some(partitions) = own {
        return failed_only(partitions, query.failed);
    }
    // A spread mirror's partitions run wherever their keys place them:
    // every node's, as `/partitions` gathers them — asked of every other
    // member even when this request was forwarded here. A member that
    // does not answer hides none: its partitions are filled in below.
    let (all, silent) = gather_each(
        &node,
        &req,
        node.other_members(),
        "/partitions",
        |n| async move { n.describe(None).await },
    )
    .await?;
    for e in &silent {
        tracing::warn!(mirror = %mirror, error = %e.0, "a node did not describe its partitions; its coordinator describes them");
    }
    let all = spread::with_undescribed(&node, Some(here), all, &silent).await?;
    failed_only(
        all.into_iter().filter(|p| p.mirror == mirror).collect(),
        query.failed,
    )
}

/// Every partition of every mirror: this node's shards and, fanned out,
/// every other node's (DescribeClusterMirrors answers across brokers).
async fn describe_all(
    node: Data<NodeHandle>,
    req: HttpRequest,
    query: Query<DescribeQuery>,
) -> Reply {
    let partitions: Vec<PartitionDescription> = gather(
        &node,
        &req,
        node.peers(&req),
        "/partitions",
        |n| async move { n.describe(None).await },
    )
    .await?;
    // A fan-out's part answers for its node only; whoever gathered fills in.
    let gatherer = match route::forwarded(&req) {
        true => None,
        false => node.locals().await.into_iter().next(),
    };
    let mut partitions = spread::with_undescribed(&node, gatherer, partitions, &[]).await?;
    partitions.sort_by(|a, b| {
        (&a.mirror, &a.topic, a.partition).cmp(&(&b.mirror, &b.topic, b.partition))
    });
    failed_only(partitions, query.failed)
}

/// The verbs of `POST /mirrors/{name}/{operation}`.
const OPERATIONS: [&str; 6] = ["start", "stop", "pause", "resume", "recover", "unfence"];

/// NOT_FOUND for a `what` (an operation, a hosted operation) that is not
/// one of `expected`.
fn no_operation(what: &str, operation: &str, expected: &[&str]) -> ApiError {
    ApiError(NodeError::new(
        "NOT_FOUND",
        format!("no {what} `{operation}`; expected {}", expected.join(", ")),
    ))
}

fn to_value<T: Serialize>(answer: T) -> serde_json::Value {
    serde_json::to_value(answer).expect("answers serialise")
}

async fn operate(
    node: Data<NodeHandle>,
    req: HttpRequest,
    path: Path<(String, String)>,
    body: Body<OperationBody>,
) -> Reply {
    let (mirror, operation) = path.into_inner();
    let here = match node.owner(&mirror, &req).await? {
        Owner::There(peer) => return forward(&peer, &req, to_json(&body.into_inner())).await,
        Owner::Here(here) => here,
    };
    let OperationBody {
        topics,
        exclude,
        state_validation_offset: offset,
        failback,
        dry_run,
        fence_source,
        timeout_ms,
        quiet_ms,
    } = body.into_inner();
    if !OPERATIONS.contains(&operation.as_str()) {
        return Err(no_operation("operation", &operation, &OPERATIONS));
    }
    if topics.iter().all(|t| t.trim().is_empty()) {
        return Err(ApiError::invalid(
            "topics: name at least one topic or pattern",
        ));
    }
    if !exclude.is_empty() && operation != "start" {
        return Err(ApiError::invalid(
            "exclude: only start takes exclude patterns",
        ));
    }
    if offset.is_some() && ["recover", "unfence"].contains(&operation.as_str()) {
        return Err(ApiError::invalid(format!(
            "state_validation_offset: {operation} does not take one"
        )));
    }
    if failback.is_some() && operation != "start" {
        return Err(ApiError::invalid("failback: only start takes it"));
    }
    if dry_run && !["start", "stop"].contains(&operation.as_str()) {
        return Err(ApiError::invalid("dry_run: only start and stop take it"));
    }
    let failback = FailbackRequest {
        mode: match failback.as_deref() {
            None => None,
            Some(m) => Some(FailbackMode::parse(m).ok_or_else(|| {
                ApiError::invalid(format!("failback: `{m}` is neither delta nor from-scratch"))
            })?),
        },
        dry_run,
    };
    let stop_only = [
        ("fence_source", fence_source),
        ("timeout_ms", timeout_ms.is_some()),
        ("quiet_ms", quiet_ms.is_some()),
    ];
    if let Some((field, _)) = stop_only.iter().find(|(_, set)| *set) {
        if operation != "stop" {
            return Err(ApiError::invalid(format!("{field}: only stop takes it")));
        }
    }
    if timeout_ms == Some(0) {
        return Err(ApiError::invalid("timeout_ms: must be at least 1"));
    }
    let defaults = StopOptions::default();
    let options = StopOptions {
        state_validation_offset: offset,
        dry_run,
        fence_source,
        timeout: timeout_ms.map_or(defaults.timeout, Duration::from_millis),
        quiet: quiet_ms.map_or(defaults.quiet, Duration::from_millis),
    };
    if operation == "stop" && dry_run {
        return spread::preview_stop(&node, &req, (here, &mirror), topics, options).await;
    }
    let change = match operation.as_str() {
        "pause" => Some(TopicChange::Pause),
        "resume" => Some(TopicChange::Resume),
        _ => None,
    };
    let (m, op) = (mirror.clone(), operation.clone());
    let (coordinator, requested) = (here.clone(), topics.clone());
    let answer = node
        .run(here, move |n| async move {
            match (op.as_str(), change) {
                (_, Some(change)) => n
                    .change_topics(&m, change, &topics, offset)
                    .await
                    .map(to_value),
                ("stop", _) => n.stop_topics(&m, &topics, options).await.map(to_value),
                ("start", _) => n
                    .start_with(&m, &topics, &exclude, offset, failback)
                    .await
                    .map(to_value),
                ("unfence", _) => n.unfence(&m, &topics).await.map(to_value),
                _ => n.recover_topics(&m, &topics).await.map(to_value),
            }
        })
        .await??;
    let answer = match operation.as_str() {
        "recover" => {
            spread::recover_hosted_too(&node, &req, (coordinator, &mirror), requested, answer)
                .await?
        }
        _ => answer,
    };
    tracing::info!(%mirror, %operation, topics = %answer["topics"], "operation applied");
    Ok(HttpResponse::Ok().json(answer))
}

/// `POST /mirrors/{name}/verify`: 200 with the report whether or not the
/// copy is equal (`equal` says); 4xx only for a bad request.
async fn verify(
    node: Data<NodeHandle>,
    req: HttpRequest,
    path: Path<String>,
    body: Body<VerifyRequest>,
) -> Reply {
    let mirror = path.into_inner();
    let here = match node.owner(&mirror, &req).await? {
        Owner::There(peer) => return forward(&peer, &req, to_json(&body.into_inner())).await,
        Owner::Here(here) => here,
    };
    let request = body.into_inner();
    if request.through.is_some() && request.sample.is_some() {
        return Err(ApiError::invalid(
            "through, sample: give one of them, not both",
        ));
    }
    if request.through.is_some_and(|t| t < 0) {
        return Err(ApiError::invalid("through: must be an offset, 0 or more"));
    }
    if request.sample == Some(0) {
        return Err(ApiError::invalid("sample: must be at least 1"));
    }
    if request.sample.is_some_and(|n| n > MAX_SAMPLE) {
        return Err(ApiError::invalid(format!(
            "sample: at most {MAX_SAMPLE} records per partition (a whole partition is compared without it)"
        )));
    }
    if request.timeout_ms == Some(0) {
        return Err(ApiError::invalid("timeout_ms: must be at least 1"));
    }
    let m = mirror.clone();
    let report = node
        .run(here, move |n| async move { n.verify(&m, &request).await })
        .await??;
    tracing::info!(%mirror, equal = report.equal, compared = report.compared, differences = report.differences, "verified");
    Ok(HttpResponse::Ok().json(report))
}

async fn translate(node: Data<NodeHandle>, req: HttpRequest, q: Query<TranslateQuery>) -> Reply {
    let TranslateQuery {
        mirror,
        topic,
        partition,
        offset,
    } = q.into_inner();
    let here = match node.owner(&mirror, &req).await? {
        Owner::There(peer) => return forward(&peer, &req, None).await,
        Owner::Here(here) => here,
    };
    let t = node
        .run(here, move |n| async move {
            n.translate(&mirror, &topic, partition, offset).await
        })
        .await??;
    Ok(HttpResponse::Ok().json(t))
}

/// The StateValidationOffset of the log that decides `mirror`'s topics. A
/// clustered daemon has one log per shard, so it must be told the mirror.
async fn state_validation_offset(
    node: Data<NodeHandle>,
    req: HttpRequest,
    q: Query<StateOffsetQuery>,
) -> Reply {
    let here = match (&q.mirror, node.status()) {
        (Some(mirror), _) => match node.owner(mirror, &req).await? {
            Owner::There(peer) => return forward(&peer, &req, None).await,
            Owner::Here(here) => here,
        },
        (None, None) => node.any_local().await?,
        (None, Some(_)) => {
            return Err(ApiError::invalid(
                "mirror: a clustered daemon keeps one log per coordinator; name the mirror (?mirror=NAME)",
            ))
        }
    };
    let offset = node
        .run(here, |n| async move { n.state_validation_offset().await })
        .await?;
    // `state_offset` is the deprecated name, answered for one more release.
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "state_validation_offset": offset,
        "state_offset": offset,
    })))
}

/// This node's figures (each node of a cluster is scraped on its own).
async fn metrics(node: Data<NodeHandle>, memory: Option<Data<MemoryBudget>>) -> Reply {
    let mut figures = NodeMetrics::default();
    for local in node.locals().await {
        figures.merge(
            node.run(local, |n| async move { n.metrics().await })
                .await?,
        );
    }
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(crate::metrics::render(
            &figures,
            memory.as_ref().map(|m| m.get_ref()),
        )))
}

/// Members, generation and who owns which state partition.
async fn cluster(node: Data<NodeHandle>) -> Reply {
    let status = node.status().ok_or_else(|| {
        ApiError::invalid("this daemon is not clustered (no [cluster] id in its settings)")
    })?;
    Ok(HttpResponse::Ok().json(status))
}

async fn health() -> Reply {
    Ok(HttpResponse::Ok().json(serde_json::json!({ "status": "ok" })))
}

#[cfg(test)]
mod tests;
