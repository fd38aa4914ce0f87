//! What a PartitionActor is started with.

use std::sync::Arc;

use actix::{Addr, Recipient};
use kmirror_events::{MirrorPartitionKey, MirrorPartitionStateValue, PartitionState, RetryPolicy};

use super::{board::StatusBoard, risk};
use crate::cluster::{DestinationCluster, SourceCluster};
use crate::coordinator::CoordinatorActor;
use crate::failback::SourceHistory;
use crate::kafka::Jitter;
use crate::metadata_sync::FinalSync;
use crate::publisher::WaitPublished;
use crate::spread::StillMirroring;

/// Everything a PartitionActor is started with.
pub struct PartitionSpec {
    pub key: MirrorPartitionKey,
    pub topic: String,
    pub source: Arc<dyn SourceCluster>,
    pub destination: Arc<dyn DestinationCluster>,
    pub coordinator: Addr<CoordinatorActor>,
    pub retry: RetryPolicy,
    /// Spreads the retries of partitions that failed together (the
    /// node's, injected so tests can make a retry's delay exact).
    pub jitter: Jitter,
    /// The topic's desired state when the actor starts.
    pub desired: PartitionState,
    /// `mirror.support.unclean.leader.election` (a mirror property here:
    /// stock Kafka refuses unknown topic configs).
    pub support_unclean_leader_election: bool,
    /// Where STOPPING asks for the last group-offset pass over this
    /// partition (None: no metadata sync runs, as in some tests).
    pub final_sync: Option<Recipient<FinalSync>>,
    /// Where STOPPING waits for its LastMirrorEpochs to reach the state
    /// topic, which a failback reads (None: nothing is published).
    pub published: Option<Recipient<WaitPublished>>,
    /// The source's history, for the mirror-loop rule at alignment.
    pub history: Option<Arc<SourceHistory>>,
    /// How often the at-risk figures are sampled, and the retention margin
    /// below which the partition warns.
    pub risk: kmirror_events::RiskSettings,
    /// The mirror's batched source reads for those samples (one per mirror).
    pub risk_reads: risk::RiskReads,
    /// Where the actor publishes its status for describe (one per mirror).
    pub board: StatusBoard,
    /// The partition's recorded state when the actor is made, if any: shown
    /// until the actor has read its own at start.
    pub stored: Option<MirrorPartitionStateValue>,
    /// For a partition hosted away from its mirror's coordinator: asked
    /// before it copies whether the coordinator's shard, read to its end,
    /// still mirrors its topic (see `partition/hosted.rs`).
    pub still_mirroring: Option<StillMirroring>,
}
