//! A clustered daemon's node: membership in the group on the destination,
//! the shards it owns, each with its log in the state topic.
//!
//! The group's units are the state topic's partitions (`state-N`); the
//! leader spreads them over the members (balanced by capacity, sticky,
//! incremental). A node runs exactly the shards its membership assigns:
//! every change of assignment reconciles [`Shards`], and a node that is
//! told it is out stops every shard at once. A shard's log is opened under
//! the shard's own transactional id (`kmirror-<cluster>-state-<N>`): the
//! new owner bumps the producer epoch and writes an abort marker on the
//! partition *before* loading it, so nothing the previous owner still
//! sends lands after the new owner read the log — the broker refuses it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kmirror_actors::cluster::kafka::KafkaCluster;
use kmirror_actors::kafka::admin::{Admin, ConfigResource};
use kmirror_actors::kafka::fence::{acquire, fence_partitions};
use kmirror_actors::kafka::fetch::{FetchOptions, TopicPartition};
use kmirror_actors::kafka::lease::Lease;
use kmirror_actors::kafka::membership::{
    HeldUnits, MemberMetadata, MemberSettings, Membership, MembershipHandle,
};
use kmirror_actors::kafka::produce::IdempotentProducer;
use kmirror_actors::kafka::KafkaClient;
use kmirror_actors::node::{NodeError, NodeSettings, SourceConnector};
use kmirror_actors::shards::{ClusterStatus, MemberStatus, Shards, ShardsSpec};
use kmirror_actors::state_log::{KafkaLog, StateFollower, StateLogOptions};
use kmirror_store::EventLog;
use tokio::sync::watch;

use crate::admin_auth::ClientAuth;
use crate::api::spread::{final_sync_asker, hosted_copies_asker, NodeRoute};
use crate::api::NodeHandle;
use crate::settings::{ClusterSettings, DaemonSettings};

/// How long the one transaction a fence opens may stay open.
const FENCE_TXN_TIMEOUT: Duration = Duration::from_secs(60);

/// How soon a shard that could not start is tried again.
const RETRY_SHARDS: Duration = Duration::from_secs(5);

/// The unit name of a shard in the group's assignment.
fn unit(shard: i32) -> String {
    format!("state-{shard}")
}

fn shard_of_unit(unit: &str) -> Option<i32> {
    unit.strip_prefix("state-")?.parse().ok()
}

/// The transactional id that fences a shard's log.
fn state_transactional_id(cluster: &str, shard: i32) -> String {
    format!("kmirror-{cluster}-state-{shard}")
}

/// The destination's group coordinator refuses a session timeout outside
/// its `group.min/max.session.timeout.ms` (INVALID_SESSION_TIMEOUT), and a
/// member retries a refused join forever: a node would run, owning
/// nothing. Said at start instead, naming the setting. Bounds that cannot
/// be read (no DescribeConfigs permission) are left to the join.
async fn check_session_timeout(client: &KafkaClient, session: Duration) -> Result<(), String> {
    let Some(&broker) = client.metadata().brokers.keys().next() else {
        return Ok(());
    };
    let Ok(configs) = Admin::new(client.clone())
        .describe_configs(&ConfigResource::Broker(broker))
        .await
    else {
        return Ok(());
    };
    let bound = |name: &str| {
        configs
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.value.as_deref()?.parse::<u128>().ok())
    };
    let ms = session.as_millis();
    let refused = match (
        bound("group.min.session.timeout.ms"),
        bound("group.max.session.timeout.ms"),
    ) {
        (Some(min), _) if ms < min => Some(("below", "group.min.session.timeout.ms", min)),
        (_, Some(max)) if ms > max => Some(("above", "group.max.session.timeout.ms", max)),
        _ => None,
    };
    match refused {
        Some((side, name, bound)) => Err(format!(
            "INVALID_CONFIG: cluster.session_timeout_ms = {ms} is {side} the destination's {name} ({bound}): its group coordinator would refuse every join"
        )),
        None => Ok(()),
    }
}

/// A running clustered node.
pub struct Clustered {
    pub shards: Shards,
    pub status: watch::Receiver<ClusterStatus>,
    /// The state topic, each shard a partition of it.
    pub state_log: Arc<StateLogOptions>,
    membership: MembershipHandle,
    follower: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
    /// With `cluster.spread_partitions`: every shard as read here.
    state_follower: Option<StateFollower>,
    /// With the follower: what tells the membership each shard's weight.
    weigher: Option<tokio::task::JoinHandle<()>>,
    /// Where hosted partitions ask for their final pass, and coordinators
    /// for the hosts' copies: emptied at
    /// shutdown, since the shards' own settings hold it.
    route: NodeRoute,
}

impl Clustered {
    /// Joins the group and starts following its assignment. Must run on
    /// the arbiter the node's actors live on.
    pub async fn start(
        settings: &DaemonSettings,
        cluster: &ClusterSettings,
        mut node_settings: NodeSettings,
        connect_source: SourceConnector,
        peers: ClientAuth,
    ) -> Result<Clustered, String> {
        // Named in the release each shard leaves when it goes.
        node_settings.member = cluster.advertised_url.clone();
        let bootstrap = &settings.destination["bootstrap.servers"];
        let connect = || async {
            KafkaClient::from_properties(&settings.destination)
                .await
                .map_err(|e| format!("NETWORK_EXCEPTION: destination {bootstrap}: {e}"))
        };
        let mut log_options = StateLogOptions::new(bootstrap);
        log_options.client = settings.destination.clone();
        log_options.topic = node_settings.state_topic.clone();
        log_options.partitions = node_settings.state_topic_partitions;
        // A node counting the shards otherwise would load shards no mirror
        // routes to, miss the others' mirrors, and let a mirror be created
        // twice under one name.
        let checks = connect().await?;
        let partitions =
            kmirror_actors::state_log::ensure_state_topic(&checks, &log_options).await?;
        if partitions != node_settings.state_topic_partitions {
            return Err(format!(
                "INVALID_CONFIG: state_topic_num_partitions is {}, but the state topic {} has {partitions} partitions: every node must route mirrors by the topic's own count (set state_topic_num_partitions = {partitions})",
                node_settings.state_topic_partitions, node_settings.state_topic
            ));
        }
        check_session_timeout(&checks, cluster.session_timeout).await?;
        drop(checks);
        let (_units_tx, units) = watch::channel(
            (0..node_settings.state_topic_partitions)
                .map(unit)
                .collect(),
        );
        // With the follower (below), shards weigh what runs in them.
        let (weights_tx, weights) = watch::channel(BTreeMap::new());
        let membership = MembershipHandle::start_weighted(
            connect().await?,
            &format!("kmirror-{}", cluster.id),
            MemberMetadata {
                admin_url: cluster.advertised_url.clone(),
                capacity: cluster.capacity,
            },
            MemberSettings {
                session_timeout: cluster.session_timeout,
                heartbeat_interval: cluster.heartbeat_interval,
                rebalance_timeout: cluster.rebalance_timeout,
            },
            units,
            (cluster.spread_partitions && cluster.balance_partitions).then_some(weights),
        );
        // Every write is under the membership's lease, and every destination
        // partition under a transactional id of its own: a node acquiring a
        // shard fences the shard's partitions before it aligns them (see
        // `Node::start`).
        let lease = membership.lease();
        let destination = Arc::new(
            KafkaCluster::new(connect().await?, FetchOptions::default())
                .fenced(&format!("kmirror-{}-data", cluster.id))
                .leased(lease.clone()),
        );
        // Spread mirrors are read across shards: every shard, followed
        // read-only, whoever owns it (see `kmirror_actors::spread`).
        // Started after the last step that can fail, so it is always
        // closed by `shutdown`.
        let route = NodeRoute::default();
        let mut weigher = None;
        let state_follower = if cluster.spread_partitions {
            let ends = connect().await?;
            let follower = StateFollower::start(&log_options)
                .await
                .map_err(|e| format!("NETWORK_EXCEPTION: following the state topic: {e}"))?;
            let followed = follower.followed(ends, &log_options.topic);
            if cluster.balance_partitions {
                let publish = followed.clone().publish_weights(unit, weights_tx);
                weigher = Some(tokio::spawn(publish));
            }
            node_settings.followed = Some(followed);
            node_settings.accept_spread = true;
            node_settings.ask_hosted_copies =
                Some(hosted_copies_asker(route.clone(), peers.clone()));
            node_settings.ask_final_sync = Some(final_sync_asker(route.clone(), peers));
            Some(follower)
        } else {
            None
        };
        let cluster_id = cluster.id.clone();
        let state_log = Arc::new(log_options.clone());
        let open_log: kmirror_actors::shards::ShardLogOpener = Arc::new(move |shard| {
            let options = log_options.clone();
            let tid = state_transactional_id(&cluster_id, shard);
            let lease = lease.clone();
            Box::pin(async move {
                let opened = tokio::task::spawn_blocking(move || {
                    let topic = options.topic.clone();
                    KafkaLog::open_with(
                        &options,
                        shard,
                        Box::new(move |client: KafkaClient| {
                            Box::pin(async move {
                                // Not while the lease has run out (a pause
                                // since the group gave us the shard): the
                                // group may have given it on already.
                                lease.before_taking(&tid, FENCE_TXN_TIMEOUT).await?;
                                let shard_tp = [TopicPartition::new(&topic, shard)];
                                let fence =
                                    acquire(&client, &tid, FENCE_TXN_TIMEOUT, &shard_tp).await?;
                                fence_partitions(&client, &fence, &shard_tp).await?;
                                Ok(IdempotentProducer::under_fence(client, &fence).leased(&lease))
                            })
                        }),
                    )
                })
                .await
                .map_err(|e| NodeError::new("KAFKA_STORAGE_ERROR", e.to_string()))?;
                let log = opened.map_err(|e| {
                    NodeError::new(
                        "KAFKA_STORAGE_ERROR",
                        format!("opening state partition {shard}: {e}"),
                    )
                })?;
                Ok(Arc::new(log) as Arc<dyn EventLog>)
            })
        });
        let shards = Shards::new(ShardsSpec {
            destination,
            connect_source,
            settings: node_settings,
            open_log,
        });
        let (status_tx, status) = watch::channel(ClusterStatus {
            cluster_id: cluster.id.clone(),
            generation: -1,
            ..ClusterStatus::default()
        });
        *route.lock().expect("node route") = Some(NodeHandle::clustered(
            shards.clone(),
            status.clone(),
            state_log.clone(),
        ));
        let (stop, stopping) = watch::channel(false);
        let follower = actix::spawn(follow(
            Follow {
                membership: membership.membership(),
                lease: membership.lease(),
                held: membership.held_reporter(),
                shards: shards.clone(),
                status: status_tx,
                cluster_id: cluster.id.clone(),
            },
            stopping,
        ));
        Ok(Clustered {
            shards,
            status,
            state_log,
            membership,
            follower,
            stop,
            state_follower,
            weigher,
            route,
        })
    }

    /// Stops every shard (each pump closed, each log flushed), then leaves
    /// the group, so the others take the work over at once. The follower
    /// is told to stop and awaited, never aborted: a shard it is starting
    /// must be running (and so stopped below) or not started at all.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.follower.await;
        self.shards.shutdown().await;
        self.route.lock().expect("node route").take();
        if let Some(w) = self.weigher {
            w.abort();
            let _ = w.await;
        }
        // Closed once no shard reads it any more.
        if let Some(f) = self.state_follower {
            f.close().await;
        }
        self.membership.close().await;
    }
}

/// What the follower works with.
struct Follow {
    membership: watch::Receiver<Membership>,
    /// Granted each assignment's term before the shards are made to follow
    /// it (see `Lease::grant`).
    lease: Lease,
    held: HeldUnits,
    shards: Shards,
    status: watch::Sender<ClusterStatus>,
    cluster_id: String,
}

/// Makes the running shards follow the membership, and publishes who owns
/// what for routing and `kmirror cluster status`, until `stop`.
async fn follow(mut f: Follow, mut stop: watch::Receiver<bool>) {
    // The lease term the running shards were started in.
    let mut started_in: Option<u64> = None;
    loop {
        let m = f.membership.borrow_and_update().clone();
        // Shards are opened and fenced only on the strength of this
        // assignment: should the member be out of the group before it
        // takes one, the taking fails (a shard the group gave on meanwhile
        // would otherwise be fenced away from its new owner).
        f.lease.grant(m.lease_term);
        let owned: BTreeSet<i32> = m
            .assignment
            .iter()
            .filter_map(|u| shard_of_unit(u))
            .collect();
        if started_in.is_some_and(|t| t != m.lease_term) {
            // Out of the group and back since the running shards started,
            // without this follower seeing the empty assignment between:
            // their producers hold tickets of the old term and can write
            // nothing more. Stopped here, those still owned start afresh.
            tracing::warn!(
                "this member was out of the group since its shards started; restarting them"
            );
            f.shards.reconcile(&BTreeSet::new()).await;
            f.held.report(BTreeSet::new());
        }
        started_in = Some(m.lease_term);
        // Routing follows the assignment at once: a request for a shard
        // still starting here is answered COORDINATOR_LOAD_IN_PROGRESS, one
        // for a shard that went is forwarded to its new owner.
        let _ = f.status.send(status_of(&m, &f.cluster_id));
        // Let go of what was revoked first and say so: the member waits for
        // it before rejoining, and only then are those shards given to
        // another node (a clean handover). Then start what is new.
        let running = f.shards.owned().await;
        let kept: BTreeSet<i32> = running.intersection(&owned).copied().collect();
        f.shards.reconcile(&kept).await;
        // What is being started counts as held: a revocation arriving
        // meanwhile makes the member wait for it to be let go before it
        // rejoins, not give it on while this node may still fence it.
        f.held.report(owned.iter().map(|s| unit(*s)).collect());
        let failed = f.shards.reconcile(&owned).await;
        f.held
            .report(f.shards.owned().await.into_iter().map(unit).collect());
        for (shard, e) in &failed {
            tracing::warn!(shard, error = %e, "state partition not started; trying again");
        }
        let retry = async {
            if failed.is_empty() {
                std::future::pending::<()>().await
            }
            tokio::time::sleep(RETRY_SHARDS).await
        };
        tokio::select! {
            changed = f.membership.changed() => if changed.is_err() { return },
            () = retry => {}
            // A shard whose log broke is reopened by the next reconcile.
            _ = f.shards.log_failed() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

fn status_of(m: &Membership, cluster_id: &str) -> ClusterStatus {
    ClusterStatus {
        cluster_id: cluster_id.to_owned(),
        generation: m.generation_id,
        member_id: m.member_id.clone(),
        leader: m.leader.clone(),
        members: m
            .members
            .iter()
            .map(|g| MemberStatus {
                member_id: g.member_id.clone(),
                url: g.admin_url.clone(),
                capacity: g.capacity,
                shards: g.units.iter().filter_map(|u| shard_of_unit(u)).collect(),
            })
            .collect(),
    }
}
