//! CoordinatorActor: the only writer of `__mirror_state` records.
//!
//! Shaped like Kafka's `CoordinatorShard`: an operation is a
//! [`Command`]; the actor decides it against its image
//! ([`kmirror_events::decide`]), appends the records durably, folds them
//! ([`MirrorStateImage::apply`]) and only then replies — so whoever asked
//! performs its side effect after the record that decides it is durable.
//! On start it rebuilds the image from the log (newest snapshot + tail).
//!
//! One node owns every `__mirror_state` partition today, so one actor serves
//! them all; the routing hash (`coordinator_partition`) is already how keys
//! would be split when nodes form a cluster. Messages are handled one at a
//! time (`AtomicResponse`): a decision never sees an image that an
//! in-flight append is about to change. The blocking store calls run on
//! tokio's blocking pool, never on the arbiter thread.

use std::sync::Arc;

use actix::prelude::*;
use kmirror_events::{
    decide, Command, DecideError, MirrorPartitionKey, MirrorPartitionStateValue, MirrorStateImage,
    Offset, OffsetMapRun, Record, StateValidation,
};
use kmirror_store::{EventLog, StoreError};

/// Wall-clock milliseconds, stamped into each appended batch (the domain
/// has no clock of its own).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Why an operation was not applied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CoordinatorError {
    #[error(transparent)]
    Refused(#[from] DecideError),
    #[error("INVALID_CLUSTER_MIRROR_STATES: a topic's mirror state changed after offset {state_validation_offset}")]
    Stale { state_validation_offset: Offset },
    #[error("event log: {0}")]
    Store(String),
}

impl CoordinatorError {
    /// The KIP error name, for replies and CLI output.
    pub fn kip_name(&self) -> &'static str {
        match self {
            CoordinatorError::Refused(e) => e.kip_name(),
            CoordinatorError::Stale { .. } => "INVALID_CLUSTER_MIRROR_STATES",
            CoordinatorError::Store(_) => "KAFKA_STORAGE_ERROR",
        }
    }
}

/// What an applied operation wrote.
#[derive(Debug, Clone)]
pub struct Applied {
    /// Log offset of the first record (the end offset when nothing was written).
    pub offset: Offset,
    pub records: Vec<Record>,
}

/// Decide, append, apply.
#[derive(Message)]
#[rtype(result = "Result<Applied, CoordinatorError>")]
pub struct Execute {
    pub command: Command,
    /// Operations a client validated first carry the StateValidationOffset
    /// lock; internal bookkeeping (progress, failures) appends without one.
    pub state_validation: Option<StateValidation>,
}

impl Execute {
    pub fn new(command: Command) -> Self {
        Execute {
            command,
            state_validation: None,
        }
    }
}

/// What a PartitionActor needs to (re)start: its stored state and map.
#[derive(Debug, Clone, Default)]
pub struct PartitionView {
    pub state: Option<MirrorPartitionStateValue>,
    pub runs: Vec<OffsetMapRun>,
}

/// Reads one partition's state and offset map.
#[derive(Message)]
#[rtype(result = "PartitionView")]
pub struct ReadPartition(pub MirrorPartitionKey);

/// A copy of the whole image (for describe, audits and the control plane).
#[derive(Message)]
#[rtype(result = "Arc<MirrorStateImage>")]
pub struct ReadImage;

pub struct CoordinatorActor {
    log: Arc<dyn EventLog>,
    image: Arc<MirrorStateImage>,
}

impl CoordinatorActor {
    /// Loads the image from `log` (blocking: call before starting the actor,
    /// or from a blocking context).
    pub fn load(log: Arc<dyn EventLog>) -> Result<Self, StoreError> {
        let image = log.load_image()?;
        Ok(CoordinatorActor {
            log,
            image: Arc::new(image),
        })
    }
}

impl Actor for CoordinatorActor {
    type Context = Context<Self>;
}

impl Handler<Execute> for CoordinatorActor {
    type Result = AtomicResponse<Self, Result<Applied, CoordinatorError>>;

    fn handle(&mut self, msg: Execute, _ctx: &mut Context<Self>) -> Self::Result {
        let records = match decide(&self.image, &msg.command) {
            Ok(r) => r,
            Err(e) => return AtomicResponse::new(Box::pin(fut::ready(Err(e.into())))),
        };
        let log = self.log.clone();
        let to_append = records.clone();
        let append = async move {
            tokio::task::spawn_blocking(move || match &msg.state_validation {
                Some(lock) => log.append_if_unchanged(now_ms(), lock, &to_append),
                None => log.append(now_ms(), &to_append),
            })
            .await
            .map_err(|e| CoordinatorError::Store(e.to_string()))?
            .map_err(|e| match e {
                StoreError::InvalidClusterMirrorStates {
                    state_validation_offset,
                    ..
                } => CoordinatorError::Stale {
                    state_validation_offset,
                },
                other => CoordinatorError::Store(other.to_string()),
            })
        };
        AtomicResponse::new(Box::pin(append.into_actor(self).map(
            move |res, act, _ctx| {
                let offset = res?;
                let image = Arc::make_mut(&mut act.image);
                for (o, r) in (offset..).zip(records.iter()) {
                    image.apply(o, r);
                }
                Ok(Applied { offset, records })
            },
        )))
    }
}

impl Handler<ReadPartition> for CoordinatorActor {
    type Result = MessageResult<ReadPartition>;

    fn handle(&mut self, msg: ReadPartition, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(PartitionView {
            state: self.image.partition_state(&msg.0).cloned(),
            runs: self.image.offset_runs(&msg.0),
        })
    }
}

impl Handler<ReadImage> for CoordinatorActor {
    type Result = MessageResult<ReadImage>;

    fn handle(&mut self, _msg: ReadImage, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.image.clone())
    }
}
