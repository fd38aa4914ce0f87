//! The step a partition hosted away from its mirror's coordinator takes
//! before its pump copies: read the coordinator's shard to its end and
//! find the topic still to be mirrored.
//!
//! Why: a host decides a start (or a FAILED partition's retry) on its
//! follower's view of the coordinator shard, which lags. A `--stop` or a
//! delete is recorded there, and its check then reads the host's shard to
//! its end for each partition's state. Were the host to copy on its
//! lagging view, a stop could find the partition idle just before the
//! host's LOG_ALIGNMENT (or MIRRORING) landed, answer, and the host copy
//! on until it read the stop. With this step each side writes first and
//! then reads the other to its end: the host's state is durable before it
//! reads the coordinator's shard (a pump starts only after the state that
//! runs it was written), the stop before its check reads the host's. So
//! either the host reads the stop and does not copy, or the stop finds
//! the partition busy and waits for its STOPPED.

use actix::prelude::*;
use tokio::sync::oneshot;

use super::PartitionActor;

/// How soon the coordinator's shard is asked again while the topic is not
/// mirrored there or could not be read.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl PartitionActor {
    /// Lets the pump copy (`go`): at once, or for a hosted partition once
    /// the coordinator's shard says its topic is still to be mirrored,
    /// asked again every [`RETRY`] until then. A pump that ended closes
    /// `go`, which ends the asking; a topic no longer mirrored is moved on
    /// by the desired state the host reads next, which ends the pump.
    pub(super) fn let_copy(&self, go: oneshot::Sender<()>, ctx: &mut Context<Self>) {
        let Some(still_mirroring) = self.spec.still_mirroring.clone() else {
            let _ = go.send(());
            return;
        };
        let (key, tp) = (self.spec.key.clone(), self.tp.clone());
        let ask = async move {
            while !go.is_closed() {
                match still_mirroring(key.clone()).await {
                    Ok(true) => {
                        let _ = go.send(());
                        return;
                    }
                    Ok(false) => {
                        tracing::info!(partition = %tp, "the coordinator's shard does not mirror this topic now; not copying")
                    }
                    Err(e) => {
                        tracing::warn!(partition = %tp, error = %e, "the coordinator's shard could not be read to its end; asking again")
                    }
                }
                tokio::time::sleep(RETRY).await;
            }
        };
        ctx.spawn(ask.into_actor(self));
    }
}
