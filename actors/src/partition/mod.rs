//! PartitionActor: one mirrored partition, driven through the KIP's states.
//!
//! The actor owns the state machine; the copy itself runs in [`pump`] as a
//! task of its own. Every transition is a record written through the
//! CoordinatorActor first, and the side effect of the new state (start or
//! stop the pump, record LastMirrorEpochs, schedule a retry) happens only
//! after the coordinator replied, i.e. after the record is durable.
//!
//! The decision rule is the KIP's `applyStateTransition`
//! ([`kmirror_events::next_state`]): a desired topic state (MIRRORING /
//! PAUSED / STOPPED, from the MirrorActor) and the partition's current
//! state give the next state.

pub mod board;
mod context;
pub mod cursor;
pub mod failover;
mod hosted;
mod idle_fence;
mod position;
pub mod pump;
mod retry;
pub mod risk;
mod spec;
mod tail;

pub use board::{PartitionStatus, StatusBoard};
pub use context::{Progress, PumpExit};
pub use spec::PartitionSpec;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use kmirror_events::{
    next_state, Command, FailoverReport, LastMirrorEpochsValue, MirrorPartitionStateValue,
    PartitionState,
};
use tokio::sync::watch;

use self::context::PumpContext;
use self::idle_fence::IdleFence;
use crate::coordinator::{CoordinatorError, Execute, ReadPartition};
use crate::kafka::fetch::TopicPartition;
use crate::metadata_sync::FinalSync;
use crate::publisher::WaitPublished;

/// How long STOPPING waits for the final group-offset pass: a failover must
/// not wait on a source that is gone.
const FINAL_SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long STOPPING waits for its LastMirrorEpochs to reach the state
/// topic on the destination.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(30);
/// How soon STOPPING tries again when its position could not be recorded.
const STOPPING_RETRY: Duration = Duration::from_secs(1);

/// What the topic should be doing (the MirrorTopicStateChange's desired
/// state): MIRRORING, PAUSED or STOPPED.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub struct Desire(pub PartitionState);

/// Operator recovery of a FAILED partition (`RecoverMirrorTopics`).
#[derive(Message)]
#[rtype(result = "Result<(), CoordinatorError>")]
pub struct Recover;

/// A failure found outside the partition (its source became another
/// cluster): recorded as FAILED by the partition itself, so its pump stops.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Fail {
    pub message: String,
    pub retryable: bool,
}

/// Stop the copy (finishing what is in flight, map durable) and stop the
/// actor, leaving the recorded state as it is so a restart resumes.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// The failover report as a stop would record it now, without changing
/// anything (`stop --dry-run`).
#[derive(Message)]
#[rtype(result = "(PartitionStatus, Result<FailoverReport, String>)")]
pub struct PreviewFailover;

#[derive(Message)]
#[rtype(result = "()")]
struct PumpEnded {
    generation: u64,
    exit: PumpExit,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Aligned {
    generation: u64,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Healthy {
    generation: u64,
}

struct RunningPump {
    generation: u64,
    stop: watch::Sender<bool>,
    /// Opened once MIRRORING is durable; until then the pump only aligns.
    may_copy: Option<tokio::sync::oneshot::Sender<()>>,
}

pub struct PartitionActor {
    spec: PartitionSpec,
    tp: TopicPartition,
    state: MirrorPartitionStateValue,
    desired: PartitionState,
    progress: Arc<Mutex<Progress>>,
    pump: Option<RunningPump>,
    idle_fence: Option<IdleFence>,
    generation: u64,
    /// The last pump ended having drained what it sent and checkpointed
    /// (Stopped, EpochMoved): its progress is where the copy stands. One
    /// that failed may have failed before alignment (its progress never
    /// set) or left batches to land after it; a stop then reads the
    /// position from the map and the destination (`stopped_position`), as
    /// for a partition no pump ran for here.
    position_known: bool,
    retry_timer: Option<SpawnHandle>,
    /// The deadline of `retry_timer` when it is a FAILED partition's retry
    /// (not STOPPING's re-entry), in epoch ms; None once it fired.
    retry_at_ms: Option<i64>,
    /// The state epoch of the FAILED state last reported as final, so a
    /// desired state sent again (its topic changed) does not repeat the
    /// warning.
    reported_final: Option<i32>,
    shutting_down: bool,
    shutdown_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    risk: risk::Risk,
    /// Its place on the mirror's board; see [`Self::publish`].
    slot: board::Slot,
}

impl PartitionActor {
    pub fn new(spec: PartitionSpec) -> Self {
        let tp = TopicPartition::new(&spec.topic, spec.key.partition);
        let desired = spec.desired;
        let risk = risk::Risk::new(spec.risk, spec.risk_reads.clone());
        let state = spec
            .stored
            .clone()
            .unwrap_or_else(MirrorPartitionStateValue::unknown);
        let progress = Arc::new(Mutex::new(Progress::default()));
        let slot = spec.board.join(
            spec.key.clone(),
            spec.topic.clone(),
            progress.clone(),
            risk.clone(),
            board::ActorPart {
                state: state.clone(),
                next_retry_at_ms: None,
                pumped: false,
            },
        );
        PartitionActor {
            spec,
            tp,
            state,
            desired,
            progress,
            pump: None,
            idle_fence: None,
            generation: 0,
            position_known: false,
            retry_timer: None,
            retry_at_ms: None,
            reported_final: None,
            shutting_down: false,
            shutdown_waiters: Vec::new(),
            risk,
            slot,
        }
    }

    /// Publishes what only the actor knows to the board. Called wherever
    /// the recorded state, the pending retry or the pump generation
    /// changes: describe reads nothing else of the actor.
    fn publish(&self) {
        self.slot.publish(self.part());
    }

    fn part(&self) -> board::ActorPart {
        board::ActorPart {
            state: self.state.clone(),
            // The deadline only while its timer is pending and the
            // partition still FAILED (a taken timer leaves a stale one).
            next_retry_at_ms: self.retry_at_ms.filter(|_| {
                self.retry_timer.is_some() && self.state.state == PartitionState::Failed
            }),
            pumped: self.generation > 0,
        }
    }

    /// Writes the transition to `target`, then enters it.
    fn transition(&mut self, target: PartitionState, ctx: &mut Context<Self>) {
        let command = Command::TransitionPartition {
            key: self.spec.key.clone(),
            target,
            leader_epoch: -1,
            expected_state_epoch: self.state.state_epoch,
        };
        self.write(command, ctx);
    }

    /// Sends a command to the coordinator and, once durable, adopts the
    /// partition state it wrote and runs that state's side effect.
    fn write(&mut self, command: Command, ctx: &mut Context<Self>) {
        let fut = self.spec.coordinator.send(Execute::new(command));
        ctx.wait(fut.into_actor(self).map(|res, act, ctx| {
            match res {
                Ok(Ok(applied)) => {
                    for r in applied.records {
                        if let kmirror_events::Record::MirrorPartitionState(k, Some(v)) = r {
                            if k == act.spec.key {
                                act.state = v;
                            }
                        }
                    }
                    act.enter(ctx);
                }
                Ok(Err(e)) => {
                    tracing::warn!(partition = %act.tp, error = %e, "state write refused; re-reading state");
                    act.reload(ctx);
                }
                Err(e) => {
                    tracing::error!(partition = %act.tp, error = %e, "coordinator unavailable");
                }
            }
        }));
    }

    /// Re-reads the stored state and acts on it.
    fn reload(&mut self, ctx: &mut Context<Self>) {
        let fut = self
            .spec
            .coordinator
            .send(ReadPartition(self.spec.key.clone()));
        ctx.wait(fut.into_actor(self).map(|res, act, ctx| {
            if let Ok(view) = res {
                act.state = view
                    .state
                    .unwrap_or_else(MirrorPartitionStateValue::unknown);
            }
            act.enter(ctx);
        }));
    }

    /// Runs the side effect of the current state, then moves on if the
    /// desired state asks for it.
    fn enter(&mut self, ctx: &mut Context<Self>) {
        use PartitionState as S;
        if self.state.state != S::Failed {
            self.cancel_failed_retry(ctx);
        }
        self.publish();
        if self.shutting_down {
            return;
        }
        if let Some(next) = next_state(self.state.state, self.desired) {
            if next != self.state.state {
                return self.transition(next, ctx);
            }
        }
        match self.state.state {
            S::LogAlignment | S::Mirroring => self.start_pump(ctx),
            S::Pausing | S::Stopping => {
                if self.pump.is_none() && self.retry_timer.is_some() {
                    // A failed STOPPING step is already due again.
                } else if self.pump.is_none() {
                    self.after_pump_stopped(ctx);
                } else {
                    self.stop_pump();
                }
            }
            S::Paused | S::Stopped | S::Unknown => self.stop_pump(),
            S::Failed => {
                self.stop_pump();
                self.schedule_retry(ctx);
            }
            S::EpochFencing | S::UleRecovery => self.start_pump(ctx),
        }
        self.keep_fence_idle();
    }

    /// A PAUSED or FAILED partition is still a mirror partition, to be
    /// copied on from its map, so with no pump its fence is kept alive
    /// here; any other state, or a pump, ends that (after a marker under
    /// way).
    fn keep_fence_idle(&mut self) {
        let idle = matches!(
            self.state.state,
            PartitionState::Paused | PartitionState::Failed
        ) && self.pump.is_none()
            && !self.shutting_down;
        if !idle {
            // Detached: it ends after the marker under way, if any.
            drop(self.idle_fence.take().map(IdleFence::end));
        } else if self.idle_fence.is_none() {
            let (d, tp, p) = (&self.spec.destination, &self.tp, &self.progress);
            self.idle_fence = Some(IdleFence::start(d.clone(), tp.clone(), p.clone()));
        }
    }

    fn start_pump(&mut self, ctx: &mut Context<Self>) {
        // Only MIRRORING copies; the recovery states align first and wait.
        let copying = self.state.state == PartitionState::Mirroring;
        if let Some(p) = &mut self.pump {
            if *p.stop.borrow() {
                // Told to stop on the way through another state (FAILED
                // from outside, then retried): it is finishing what is in
                // flight, and its end (`PumpEnded`) starts the next one.
                return;
            }
            if let Some(go) = p.may_copy.take_if(|_| copying) {
                self.let_copy(go, ctx);
            }
            // Still aligning: the Aligned message moves us on.
            return;
        }
        self.generation += 1;
        self.position_known = false;
        self.publish();
        let generation = self.generation;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (go_tx, go_rx) = tokio::sync::oneshot::channel();
        let mut may_copy = Some(go_tx);
        if let Some(go) = may_copy.take_if(|_| copying) {
            self.let_copy(go, ctx);
        }
        let addr = ctx.address();
        let aligned_addr = addr.clone();
        let healthy_addr = addr.clone();
        let cx = PumpContext {
            key: self.spec.key.clone(),
            tp: self.tp.clone(),
            source: self.spec.source.clone(),
            destination: self.spec.destination.clone(),
            coordinator: self.spec.coordinator.clone(),
            progress: self.progress.clone(),
            stop: stop_rx,
            support_unclean_leader_election: self.spec.support_unclean_leader_election,
            on_aligned: Some(Box::new(move || {
                aligned_addr.do_send(Aligned { generation })
            })),
            may_copy: Some(go_rx),
            on_healthy: Some(Box::new(move || {
                healthy_addr.do_send(Healthy { generation })
            })),
            history: self.spec.history.clone(),
        };
        // The keep-alive's marker under way ends first: the sink's renewal
        // would otherwise meet its open transaction.
        let idle = self.idle_fence.take().map(IdleFence::end);
        tokio::spawn(async move {
            if let Some(idle) = idle {
                let _ = idle.await;
            }
            let exit = pump::run(cx).await;
            addr.do_send(PumpEnded { generation, exit });
        });
        self.pump = Some(RunningPump {
            generation,
            stop: stop_tx,
            may_copy,
        });
    }

    fn stop_pump(&mut self) {
        if let Some(p) = &self.pump {
            let _ = p.stop.send(true);
        }
    }

    /// PAUSING → PAUSED; STOPPING → the final group-offset pass beside the
    /// failover report, then LastMirrorEpochs and the report, then STOPPED.
    /// The pump has stopped, so the map is durable and nothing more can
    /// land: the last sync and the recorded position see the copy as it
    /// will stay.
    fn after_pump_stopped(&mut self, ctx: &mut Context<Self>) {
        match self.state.state {
            PartitionState::Pausing => self.transition(PartitionState::Paused, ctx),
            PartitionState::Stopping => {
                let spec = &self.spec;
                let (key, tp) = (spec.key.clone(), self.tp.clone());
                let (source, destination) = (spec.source.clone(), spec.destination.clone());
                let (coordinator, final_sync) = (spec.coordinator.clone(), spec.final_sync.clone());
                let published = spec.published.clone();
                // A pump that ended cleanly here knows the position it
                // left; otherwise (PAUSED or FAILED since start-up, or its
                // pump failed) the map and the destination say where the
                // copy stands.
                let ran = self
                    .position_known
                    .then(|| self.progress.lock().unwrap().clone());
                let fut = async move {
                    let p = match ran {
                        Some(p) => p,
                        None => {
                            let stopped = position::stopped_position(
                                &key,
                                &tp,
                                &*source,
                                &*destination,
                                &coordinator,
                            )
                            .await
                            .map_err(CoordinatorError::Unavailable)?;
                            // What the reading aligned is durable before
                            // LastMirrorEpochs, which must agree with it.
                            if let Some(correction) = stopped.correction {
                                coordinator.send(Execute::new(correction)).await??;
                            }
                            stopped.progress
                        }
                    };
                    let mut pass = match &final_sync {
                        Some(sync) => sync.send(FinalSync(key.clone())).await.ok(),
                        None => None,
                    };
                    let abort = pass.as_ref().map(|p| p.abort.clone());
                    let ended = pass.as_mut().and_then(|p| p.ended.take());
                    let sync = async move {
                        let Some(pass) = pass else { return true };
                        let ended = tokio::time::timeout(FINAL_SYNC_TIMEOUT, pass.done).await;
                        matches!(ended, Ok(Ok(true)))
                    };
                    // What the source held beyond the position, or why it
                    // could not be read: bounded, never a reason to wait.
                    let report = failover::report(&key, &tp, &*source, &*destination, &p);
                    let (report, synced) = failover::beside_final_sync(report, sync).await;
                    if let (false, Some(abort)) = (synced, abort) {
                        // A pass still waiting on the source would commit
                        // its old offsets over the consumers' new ones.
                        abort.abort();
                        // One run by the coordinator ends by its own
                        // deadline, before this one's.
                        if let Some(ended) = ended {
                            let _ = tokio::time::timeout(FINAL_SYNC_TIMEOUT, ended).await;
                        }
                        tracing::warn!(partition = %tp, "the final group-offset sync failed or did not finish (source unreadable, a commit refused, or {FINAL_SYNC_TIMEOUT:?}); stopping without it: consumers moving to the destination find the offsets of the last periodic sync");
                    }
                    let value = LastMirrorEpochsValue {
                        last_mirror_epoch: p.destination_leader_epoch,
                        last_mirror_offset: p.destination_offset,
                        source_offset: p.source_offset,
                        source_leader_epoch: p.source_leader_epoch,
                        destination_end_offset: p.destination_offset,
                        destination_leader_epoch: p.destination_leader_epoch,
                    };
                    let applied = coordinator
                        .send(Execute::new(Command::RecordLastMirrorEpochs {
                            key: key.clone(),
                            value,
                        }))
                        .await??;
                    coordinator
                        .send(Execute::new(Command::RecordFailoverReport {
                            key,
                            value: report,
                        }))
                        .await??;
                    if let Some(published) = published {
                        let done = tokio::time::timeout(
                            PUBLISH_TIMEOUT,
                            published.send(WaitPublished(applied.offset)),
                        )
                        .await;
                        if !matches!(done, Ok(Ok(true))) {
                            tracing::warn!(partition = %tp, "LastMirrorEpochs did not reach the state topic in {PUBLISH_TIMEOUT:?}; a failback from another daemon will not find this position until it does");
                        }
                    }
                    Ok::<_, CoordinatorError>(())
                };
                ctx.wait(fut.into_actor(self).map(|res, act, ctx| match res {
                    Ok(()) => act.transition(PartitionState::Stopped, ctx),
                    Err(e) => {
                        tracing::error!(partition = %act.tp, error = %e, "recording LastMirrorEpochs failed; retrying");
                        // One retry pending at a time: every desired state
                        // the MirrorActor sends meanwhile would start another.
                        if act.retry_timer.is_none() {
                            act.retry_at_ms = None;
                            act.retry_timer = Some(ctx.run_later(STOPPING_RETRY, |act, ctx| {
                                act.retry_timer = None;
                                act.enter(ctx)
                            }));
                        }
                    }
                }));
            }
            _ => {}
        }
    }
}

impl Actor for PartitionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // The first sample once the stored state is known: a MIRRORING
        // partition then counts from its pump, rather than reading where a
        // stopped copy stands. The later ones on the mirror's common beat.
        let fut = self
            .spec
            .coordinator
            .send(ReadPartition(self.spec.key.clone()));
        ctx.wait(fut.into_actor(self).map(|res, act, ctx| {
            if let Ok(view) = res {
                act.state = view
                    .state
                    .unwrap_or_else(MirrorPartitionStateValue::unknown);
            }
            act.enter(ctx);
            act.sample_risk();
        }));
        ctx.run_later(self.risk.until_next_tick(), |act, ctx| {
            act.sample_risk();
            ctx.run_interval(act.risk.settings.refresh_interval, |act, _| {
                act.sample_risk()
            });
        });
    }
}

impl Handler<Desire> for PartitionActor {
    type Result = ();
    fn handle(&mut self, msg: Desire, ctx: &mut Context<Self>) {
        self.desired = msg.0;
        self.enter(ctx);
    }
}

impl Handler<Aligned> for PartitionActor {
    type Result = ();
    fn handle(&mut self, msg: Aligned, ctx: &mut Context<Self>) {
        use PartitionState as S;
        let aligning = matches!(
            self.state.state,
            S::LogAlignment | S::EpochFencing | S::UleRecovery
        );
        if msg.generation == self.generation && aligning {
            self.transition(S::Mirroring, ctx);
        }
    }
}

impl Handler<Healthy> for PartitionActor {
    type Result = ();
    fn handle(&mut self, msg: Healthy, ctx: &mut Context<Self>) {
        let failure_stored = self.state.error_message.is_some() || self.state.retry_attempt != 0;
        if msg.generation == self.generation && failure_stored {
            self.write(
                Command::ClearFailure {
                    key: self.spec.key.clone(),
                    leader_epoch: -1,
                },
                ctx,
            );
        }
    }
}

impl Handler<PumpEnded> for PartitionActor {
    type Result = ();
    fn handle(&mut self, msg: PumpEnded, ctx: &mut Context<Self>) {
        if self.pump.as_ref().map(|p| p.generation) != Some(msg.generation) {
            return;
        }
        self.pump = None;
        self.position_known = matches!(msg.exit, PumpExit::Stopped | PumpExit::EpochMoved { .. });
        self.keep_fence_idle();
        if self.shutting_down {
            for w in self.shutdown_waiters.drain(..) {
                let _ = w.send(());
            }
            ctx.stop();
            return;
        }
        match msg.exit {
            // PAUSING and STOPPING move on; a state that wants a pump
            // again since this one was told to stop starts the next.
            PumpExit::Stopped => self.enter(ctx),
            PumpExit::SourceTruncated { message } => {
                if self.spec.support_unclean_leader_election
                    && self.state.state == PartitionState::Mirroring
                {
                    tracing::warn!(partition = %self.tp, "{message}; recovering (ULE_RECOVERY)");
                    self.transition(PartitionState::UleRecovery, ctx);
                } else {
                    self.write(
                        Command::FailPartition {
                            key: self.spec.key.clone(),
                            leader_epoch: -1,
                            error_message: message,
                            retryable: false,
                        },
                        ctx,
                    );
                }
            }
            PumpExit::EpochMoved { from, to } => {
                tracing::info!(partition = %self.tp, from, to, "destination leader epoch moved; re-checking the tail");
                if self.state.state == PartitionState::Mirroring {
                    self.transition(PartitionState::EpochFencing, ctx);
                } else {
                    self.enter(ctx);
                }
            }
            PumpExit::LostOwnership { message } => {
                tracing::warn!(partition = %self.tp, reason = %message, "another node owns this partition now (fenced at the destination); its actor stops here without writing state");
                ctx.stop();
            }
            PumpExit::Failed { message, retryable } => {
                tracing::warn!(partition = %self.tp, retryable, error = %message, "partition failed");
                self.write(
                    Command::FailPartition {
                        key: self.spec.key.clone(),
                        leader_epoch: -1,
                        error_message: message,
                        retryable,
                    },
                    ctx,
                );
            }
        }
    }
}

impl Handler<Fail> for PartitionActor {
    type Result = ();
    fn handle(&mut self, msg: Fail, ctx: &mut Context<Self>) {
        let already = self.state.state == PartitionState::Failed
            && (self.state.retry_attempt == -1 || msg.retryable);
        if !already {
            self.write(
                Command::FailPartition {
                    key: self.spec.key.clone(),
                    leader_epoch: -1,
                    error_message: msg.message,
                    retryable: msg.retryable,
                },
                ctx,
            );
        }
    }
}

impl Handler<Recover> for PartitionActor {
    type Result = ResponseActFuture<Self, Result<(), CoordinatorError>>;
    fn handle(&mut self, _msg: Recover, _ctx: &mut Context<Self>) -> Self::Result {
        let fut = self
            .spec
            .coordinator
            .send(Execute::new(Command::RecoverPartition {
                key: self.spec.key.clone(),
                leader_epoch: -1,
            }));
        Box::pin(fut.into_actor(self).map(|res, act, ctx| {
            let applied = res.map_err(|e| CoordinatorError::Store(e.to_string()))??;
            for r in applied.records {
                if let kmirror_events::Record::MirrorPartitionState(k, Some(v)) = r {
                    if k == act.spec.key {
                        act.state = v;
                    }
                }
            }
            if let Some(h) = act.retry_timer.take() {
                ctx.cancel_future(h);
            }
            act.enter(ctx);
            Ok(())
        }))
    }
}

impl PartitionActor {
    /// The status as describe shows it, built here (for a message that
    /// goes through the mailbox anyway: `stop --dry-run`).
    fn status(&self) -> PartitionStatus {
        let part = self.part();
        let progress = self.progress.lock().unwrap().clone();
        PartitionStatus {
            key: self.spec.key.clone(),
            topic: self.spec.topic.clone(),
            state: self.state.state,
            retry_attempt: self.state.retry_attempt,
            error: self.state.error_message.clone(),
            risk: self
                .risk
                .view(self.state.state, &progress, self.ran(&progress)),
            progress,
            next_retry_at_ms: part.next_retry_at_ms,
        }
    }

    /// Whether a pump of this process has placed the copy, so its
    /// progress is the position (else the map and destination say).
    fn ran(&self, p: &Progress) -> bool {
        board::ran(self.generation > 0, self.state.state, p)
    }

    /// One at-risk sample, in the background (see [`risk`]).
    fn sample_risk(&self) {
        let progress = self.progress.lock().unwrap().clone();
        let copying = self.pump.is_some() && self.state.state == PartitionState::Mirroring;
        if copying && self.risk.caught_up(&progress) {
            return;
        }
        let ran = self.ran(&progress);
        let spec = &self.spec;
        actix::spawn(self.risk.clone().tick(
            spec.key.clone(),
            self.tp.clone(),
            spec.source.clone(),
            spec.destination.clone(),
            spec.coordinator.clone(),
            self.state.state,
            progress,
            ran,
        ));
    }
}

impl Handler<PreviewFailover> for PartitionActor {
    type Result = ResponseFuture<(PartitionStatus, Result<FailoverReport, String>)>;
    fn handle(&mut self, _msg: PreviewFailover, _ctx: &mut Context<Self>) -> Self::Result {
        let status = self.status();
        let spec = &self.spec;
        let (key, tp) = (spec.key.clone(), self.tp.clone());
        let (source, destination) = (spec.source.clone(), spec.destination.clone());
        let coordinator = spec.coordinator.clone();
        // As STOPPING would read it: a copy running or ended cleanly here
        // knows its position; otherwise the map and the destination say.
        let ran = (self.pump.is_some() || self.position_known).then(|| status.progress.clone());
        Box::pin(async move {
            let position = match ran {
                Some(p) => Ok(p),
                None => {
                    position::stopped_position(&key, &tp, &*source, &*destination, &coordinator)
                        .await
                        .map(|s| s.progress)
                }
            };
            let report = match position {
                Ok(p) => Ok(failover::report(&key, &tp, &*source, &*destination, &p).await),
                Err(e) => Err(e),
            };
            (status, report)
        })
    }
}

impl Handler<Shutdown> for PartitionActor {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _msg: Shutdown, ctx: &mut Context<Self>) -> Self::Result {
        self.shutting_down = true;
        if let Some(h) = self.retry_timer.take() {
            ctx.cancel_future(h);
        }
        self.publish();
        if self.pump.is_none() {
            ctx.stop();
            let idle = self.idle_fence.take().map(IdleFence::end);
            return Box::pin(async move {
                if let Some(idle) = idle {
                    let _ = idle.await;
                }
            });
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shutdown_waiters.push(tx);
        self.stop_pump();
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
