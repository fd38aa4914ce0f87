//! The final group-offset pass of a spread mirror's partition that runs
//! away from its coordinator (see [`crate::spread`]).
//!
//! A partition being stopped has one last group-offset pass run over it
//! before it records STOPPED, so consumers fail over with exactly the
//! offsets they had. Only the coordinator's MetadataSyncActor syncs a
//! mirror's groups: it lists them, and it is the one writer of the
//! mirror's GroupOffsetSync records, which are decided before any commit.
//! So a host's PartitionActor asks the coordinator, wherever it runs,
//! through the daemon ([`AskFinalSync`]: this process's shard, or the
//! coordinator's node over HTTP), and waits as it waits for a local pass.
//! The coordinator reads the partition's shard to its end before it
//! translates, so the pass sees the map the host left.
//!
//! A local pass is aborted when its partition stops waiting; this one runs
//! elsewhere. The coordinator ends it by a deadline of its own, counted
//! from the ask's arrival and shorter than the partition's wait
//! (`Node::final_sync_hosted`), and the partition, if it stopped waiting,
//! waits for the ask's answer ([`FinalPass::ended`]) before it records
//! STOPPED: nothing is committed once consumers may move, unless the ask
//! took longer than the difference (10 s) to arrive and its answer was
//! lost.

use std::sync::Arc;

use actix::prelude::*;
use futures_util::future::AbortHandle;
use kmirror_events::MirrorPartitionKey;
use tokio::sync::oneshot;

use crate::cluster::BoxFuture;
use crate::metadata_sync::{FinalPass, FinalSync};

/// Asks a spread mirror's coordinator for the final pass over one
/// partition hosted here: `Ok(true)` once that pass ran to its end,
/// answered only once it is over there (ended or abandoned by its
/// deadline).
pub type AskFinalSync =
    Arc<dyn Fn(MirrorPartitionKey) -> BoxFuture<'static, Result<bool, String>> + Send + Sync>;

/// A host MirrorActor's stand-in for the MetadataSyncActor it does not
/// run: it answers a partition's [`FinalSync`] by asking the coordinator.
pub struct HostedFinalSync {
    ask: AskFinalSync,
}

impl HostedFinalSync {
    pub fn new(ask: AskFinalSync) -> Self {
        HostedFinalSync { ask }
    }
}

impl Actor for HostedFinalSync {
    type Context = Context<Self>;
}

impl Handler<FinalSync> for HostedFinalSync {
    type Result = MessageResult<FinalSync>;
    fn handle(&mut self, msg: FinalSync, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, done) = oneshot::channel();
        let (over, ended) = oneshot::channel();
        let key = msg.0;
        let ask = (self.ask)(key.clone());
        ctx.spawn(actix::fut::wrap_future(async move {
            let synced = ask.await.unwrap_or_else(|e| {
                tracing::warn!(partition = ?key, error = %e, "asking the coordinator for the final group-offset pass failed");
                false
            });
            let _ = tx.send(synced);
            let _ = over.send(());
        }));
        MessageResult(FinalPass {
            done,
            // Nothing to abort here: the pass runs at the coordinator.
            abort: AbortHandle::new_pair().0,
            ended: Some(ended),
        })
    }
}
