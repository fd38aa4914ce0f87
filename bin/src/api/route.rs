//! Where an admin request is served: this node's `Node`, one of a
//! clustered node's shards, or — forwarded over HTTP — the node of the
//! cluster that coordinates the mirror; and the fan-out that lists every
//! node's mirrors and partitions.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use kmirror_actors::node::{Node, NodeError};
use kmirror_actors::shards::{ClusterStatus, Shards};
use kmirror_actors::state_log::StateLogOptions;
use serde::Serialize;

use super::error::{ApiError, Reply};
use crate::admin_auth::ClientAuth;

/// The node as HTTP handlers reach it: one `Node`, or the shards of a
/// clustered node (a request about a mirror whose shard another node owns
/// is forwarded there, and listings fan out to every node). Every node call
/// runs on the System's main arbiter, where the node's actors live: a Kafka
/// connection the node opened while serving a request would otherwise
/// belong to the HTTP worker's runtime, and die with it when the admin API
/// stops first at shutdown.
#[derive(Clone)]
pub struct NodeHandle {
    target: Target,
    home: actix::ArbiterHandle,
}

#[derive(Clone)]
enum Target {
    Single(Node),
    Clustered {
        shards: Shards,
        status: tokio::sync::watch::Receiver<ClusterStatus>,
        state_log: Arc<StateLogOptions>,
    },
}

/// Where the requests about one mirror are served.
pub(super) enum Owner {
    Here(Node),
    There(Peer),
}

/// The node that coordinates a mirror, as this node's view of the group
/// says.
pub(super) struct Peer {
    /// Its admin URL.
    pub(super) url: String,
    /// The group generation of the view that named it.
    pub(super) generation: i32,
}

/// Marks a forwarded request and carries the forwarding node's group
/// generation. Its receiver serves it or refuses, never forwards again (two
/// nodes that disagree on the owner for a moment must not bounce a request
/// between them), and refuses when the sender has seen a newer generation
/// than its own: the receiver may have lost the mirror's shard in a
/// rebalance it has not heard of yet (a paused or partitioned node), so its
/// view of ownership is not to be trusted. An older sender generation is
/// fine: the receiver's newer view is the better one.
const FORWARDED: &str = "kmirror-forwarded";

/// How long a request waits for a shard assigned here to finish loading.
const SHARD_LOAD_WAIT: Duration = Duration::from_secs(30);

/// How long a forwarded request may take (a stop waits for its partitions).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How long a read fanned out to every node waits for each (see
/// [`fan_out_each`]).
pub(super) const FAN_OUT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a spread mirror's coordinator waits for each host's recover
/// or dry run: a host reads the coordinator's shard to its end (up to
/// 30 s), and a preview reads the source (up to 10 s, also when it is
/// down: the preview then says so).
pub(super) const HOSTED_TIMEOUT: Duration = Duration::from_secs(60);

impl NodeHandle {
    /// Must be called on the arbiter the node was started on.
    pub fn new(node: Node) -> Self {
        NodeHandle {
            target: Target::Single(node),
            home: actix::Arbiter::current(),
        }
    }

    /// A clustered node's shards, the membership's view of who owns what,
    /// and the state topic every shard is a partition of. Must be called on
    /// the arbiter the shards start on.
    pub fn clustered(
        shards: Shards,
        status: tokio::sync::watch::Receiver<ClusterStatus>,
        state_log: Arc<StateLogOptions>,
    ) -> Self {
        NodeHandle {
            target: Target::Clustered {
                shards,
                status,
                state_log,
            },
            home: actix::Arbiter::current(),
        }
    }

    /// Where `mirror`'s requests go. A forwarded request is never forwarded
    /// again.
    pub(super) async fn owner(&self, mirror: &str, req: &HttpRequest) -> Result<Owner, ApiError> {
        let forwarded = forwarded(req).then(|| forwarded_generation(req));
        self.owner_as(mirror, forwarded).await
    }

    /// [`Self::owner`] for a call this node makes itself (`forwarded`
    /// None) or one forwarded to it with the sender's generation, if any.
    pub(super) async fn owner_as(
        &self,
        mirror: &str,
        forwarded: Option<Option<i32>>,
    ) -> Result<Owner, ApiError> {
        let (shards, status) = match &self.target {
            Target::Single(node) => return Ok(Owner::Here(node.clone())),
            Target::Clustered { shards, status, .. } => (shards, status),
        };
        let shard = shards.shard_of(mirror);
        let status = status.borrow().clone();
        if let Some(theirs) = forwarded.flatten().filter(|&g| g > status.generation) {
            return Err(ApiError(NodeError::new(
                "NOT_COORDINATOR",
                format!(
                    "this node's view of the cluster (generation {}) is older than the forwarding node's ({theirs}): it may no longer coordinate mirror {mirror:?}; try again",
                    status.generation
                ),
            )));
        }
        let owner = status.owner(shard).ok_or_else(|| {
            ApiError(NodeError::new(
                "COORDINATOR_NOT_AVAILABLE",
                format!("no node coordinates state partition {shard} of mirror {mirror:?} yet (a rebalance is in progress); try again"),
            ))
        })?;
        if status.is_me(owner) {
            // Assigned here but maybe still loading (fence, then read to the
            // end): the request waits for it rather than fail a client that
            // cannot know.
            let deadline = tokio::time::Instant::now() + SHARD_LOAD_WAIT;
            loop {
                if let Some(node) = shards.node_for(mirror).await {
                    return Ok(Owner::Here(node));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(ApiError(NodeError::new(
                        "COORDINATOR_LOAD_IN_PROGRESS",
                        format!("state partition {shard} of mirror {mirror:?} is still loading on this node after {}s; try again", SHARD_LOAD_WAIT.as_secs()),
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        if forwarded.is_some() {
            return Err(ApiError(NodeError::new(
                "NOT_COORDINATOR",
                format!("this node does not coordinate mirror {mirror:?} (state partition {shard}); {} does", owner.url),
            )));
        }
        Ok(Owner::There(Peer {
            url: owner.url.clone(),
            generation: status.generation,
        }))
    }

    /// The nodes this process runs (one, or every running shard).
    pub(super) async fn locals(&self) -> Vec<Node> {
        match &self.target {
            Target::Single(node) => vec![node.clone()],
            Target::Clustered { shards, .. } => {
                shards.nodes().await.into_iter().map(|(_, n)| n).collect()
            }
        }
    }

    /// The other nodes' admin URLs, for a request this node did not get
    /// forwarded (a fan-out's own parts are not fanned out again).
    pub(super) fn peers(&self, req: &HttpRequest) -> Vec<String> {
        if forwarded(req) {
            return Vec::new();
        }
        self.other_members()
    }

    /// Every other member's URL, whoever asked: for an answer that is
    /// gathered where a request was forwarded to (the peers asked answer
    /// for themselves, as the request to them is marked forwarded).
    pub(super) fn other_members(&self) -> Vec<String> {
        match &self.target {
            Target::Clustered { status, .. } => {
                let status = status.borrow();
                status
                    .members
                    .iter()
                    .filter(|m| !status.is_me(m))
                    .map(|m| m.url.clone())
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// The state topic, on a clustered node: where the shards this node
    /// does not own are read from (read only).
    pub(super) fn state_log(&self) -> Option<Arc<StateLogOptions>> {
        match &self.target {
            Target::Clustered { state_log, .. } => Some(state_log.clone()),
            Target::Single(_) => None,
        }
    }

    pub(super) fn status(&self) -> Option<ClusterStatus> {
        match &self.target {
            Target::Clustered { status, .. } => Some(status.borrow().clone()),
            Target::Single(_) => None,
        }
    }

    /// One local node, for the calls that are not about a mirror (the
    /// single node, or any shard).
    pub(super) async fn any_local(&self) -> Result<Node, ApiError> {
        self.locals().await.into_iter().next().ok_or_else(|| {
            ApiError(NodeError::new(
                "COORDINATOR_NOT_AVAILABLE",
                "this node coordinates no state partition right now",
            ))
        })
    }

    pub(super) async fn run<T, F, Fut>(&self, node: Node, call: F) -> Result<T, ApiError>
    where
        F: FnOnce(Node) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.home.spawn_fn(move || {
            actix::spawn(async move {
                let _ = tx.send(call(node).await);
            });
        });
        rx.await.map_err(|_| {
            ApiError(NodeError::new(
                "COORDINATOR_NOT_AVAILABLE",
                "the node is shutting down",
            ))
        })
    }
}

/// Whether `req` came from another node (a forward, or a fan-out's part).
pub(super) fn forwarded(req: &HttpRequest) -> bool {
    req.headers().contains_key(FORWARDED)
}

/// Sends `req` (with `body`, JSON) to `peer` and answers with its answer.
pub(super) async fn forward(peer: &Peer, req: &HttpRequest, body: Option<Vec<u8>>) -> Reply {
    let response = call_peer(
        auth_of(req),
        &peer.url,
        peer.generation,
        req.method().as_str(),
        &path_and_query(req),
        body,
        FORWARD_TIMEOUT,
    )
    .await?;
    Ok(HttpResponse::build(
        StatusCode::from_u16(response.status).unwrap_or(StatusCode::BAD_GATEWAY),
    )
    .content_type("application/json")
    .body(response.body))
}

fn path_and_query(req: &HttpRequest) -> String {
    req.uri()
        .path_and_query()
        .map_or_else(|| req.path().to_owned(), |p| p.as_str().to_owned())
}

/// The generation a forwarded request carries (None: not forwarded, or a
/// value that is no generation).
fn forwarded_generation(req: &HttpRequest) -> Option<i32> {
    req.headers().get(FORWARDED)?.to_str().ok()?.parse().ok()
}

/// The token and TLS trust this node presents to its peers
/// (`Data<ClientAuth>`, when the daemon has any: the nodes of a cluster
/// share `admin_token`).
pub(super) fn auth_of(req: &HttpRequest) -> ClientAuth {
    req.app_data::<actix_web::web::Data<ClientAuth>>()
        .map(|a| ClientAuth::clone(a))
        .unwrap_or_default()
}

/// One request to another node of the cluster, marked as forwarded with
/// this node's group generation, presenting `auth`.
pub(super) async fn call_peer(
    auth: ClientAuth,
    url: &str,
    generation: i32,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
    read_timeout: Duration,
) -> Result<crate::http::Response, ApiError> {
    let unreachable = |e: String| {
        ApiError(NodeError::new(
            "COORDINATOR_NOT_AVAILABLE",
            format!("forwarding to {url}: {e}"),
        ))
    };
    let base = crate::http::BaseUrl::parse(url)
        .map_err(unreachable)?
        .with_exact_read_timeout(read_timeout)
        .with_auth(auth);
    let (method, path) = (method.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        let generation = generation.to_string();
        base.request_with(&method, &path, body.as_deref(), &[(FORWARDED, &generation)])
    })
    .await
    .map_err(|e| unreachable(e.to_string()))?
    .map_err(|e| unreachable(e.message))
}

/// Every other node's answer to `path`, decoded, asked all at once; and
/// the error of each node that gave none (an error answer, an unreachable
/// node: a listing then fails, as a partial one would hide mirrors). A
/// node that does not answer within [`FAN_OUT_TIMEOUT`] (a hung or
/// SIGSTOPped process, whose kernel still accepts the connection) is one
/// such: a read fanned out waits seconds for it, not a forward's half hour.
pub(super) async fn fan_out_each<T: serde::de::DeserializeOwned>(
    node: &NodeHandle,
    req: &HttpRequest,
    peers: Vec<String>,
    path: &str,
) -> (Vec<T>, Vec<ApiError>) {
    ask_each(
        node,
        auth_of(req),
        peers,
        ("GET", path),
        None,
        FAN_OUT_TIMEOUT,
    )
    .await
}

/// [`fan_out_each`] with any method, `body` (JSON) and the time each node
/// is given: a request every node answers for what it runs itself. An
/// error answer names the node that gave it.
pub(super) async fn ask_each<T: serde::de::DeserializeOwned>(
    node: &NodeHandle,
    auth: ClientAuth,
    peers: Vec<String>,
    (method, path): (&str, &str),
    body: Option<Vec<u8>>,
    read_timeout: Duration,
) -> (Vec<T>, Vec<ApiError>) {
    let generation = node.status().map_or(-1, |s| s.generation);
    let answers = futures_util::future::join_all(peers.iter().map(|url| {
        let (body, auth) = (body.clone(), auth.clone());
        async move {
            let response =
                call_peer(auth, url, generation, method, path, body, read_timeout).await?;
            answer_of::<Vec<T>>(url, path, response)
        }
    }))
    .await;
    let (mut all, mut errors) = (Vec::new(), Vec::new());
    for answer in answers {
        match answer {
            Ok(part) => all.extend(part),
            Err(e) => errors.push(e),
        }
    }
    (all, errors)
}

/// A peer's answer to `path`, decoded; an error answer keeps its code and
/// names the peer.
pub(super) fn answer_of<T: serde::de::DeserializeOwned>(
    url: &str,
    path: &str,
    response: crate::http::Response,
) -> Result<T, ApiError> {
    if response.status != 200 {
        let error = serde_json::from_slice::<NodeError>(&response.body).unwrap_or_else(|_| {
            NodeError::new(
                "COORDINATOR_NOT_AVAILABLE",
                String::from_utf8_lossy(&response.body).into_owned(),
            )
        });
        let message = format!("{url}{path} answered {}: {}", error.code, error.message);
        return Err(ApiError(NodeError::new(&error.code, message)));
    }
    serde_json::from_slice::<T>(&response.body).map_err(|e| {
        ApiError(NodeError::new(
            "COORDINATOR_NOT_AVAILABLE",
            format!("{url}{path} answered something else: {e}"),
        ))
    })
}

pub(super) fn to_json<T: Serialize>(body: &T) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(body).expect("bodies serialise"))
}
