//! The decisions on one partition's own records (its state, map,
//! producer, epochs and reports): [`Command::placed_partition`]'s
//! commands, which the partition's host decides where the partition is
//! placed, reading its mirror and topic in `topics`.

use super::{require_mirror, topic_label};
use crate::command::{Command, DecideError};
use crate::image::MirrorStateImage;
use crate::record::*;
use crate::state::{is_valid_transition, retry_target, PartitionState};

/// Checks that the partition belongs to a live topic of a live mirror, so a
/// late writer cannot resurrect keys a mirror delete tombstoned.
fn require_partition(
    image: &MirrorStateImage,
    key: &MirrorPartitionKey,
) -> Result<(), DecideError> {
    require_mirror(image, &key.mirror_name)?;
    let topic = image
        .topic(&key.topic_id)
        .filter(|t| t.change.mirror_name == key.mirror_name)
        .ok_or_else(|| DecideError::TopicNotInClusterMirror {
            topic: topic_label(image, &key.topic_id),
            mirror: key.mirror_name.clone(),
        })?;
    if key.partition < 0 || key.partition >= topic.change.partition_count {
        return Err(DecideError::UnknownTopicOrPartition {
            topic: topic_label(image, &key.topic_id),
            partition: key.partition,
            count: topic.change.partition_count,
        });
    }
    Ok(())
}

fn stored_or_default(
    image: &MirrorStateImage,
    key: &MirrorPartitionKey,
) -> MirrorPartitionStateValue {
    image
        .partition_state(key)
        .cloned()
        .unwrap_or_else(MirrorPartitionStateValue::unknown)
}

fn fence(
    stored: &MirrorPartitionStateValue,
    leader_epoch: i32,
    expected_state_epoch: i32,
) -> Result<(), DecideError> {
    if leader_epoch != -1 && stored.leader_epoch > leader_epoch {
        return Err(DecideError::FencedLeaderEpoch {
            stored: stored.leader_epoch,
            request: leader_epoch,
        });
    }
    if expected_state_epoch != -1 && stored.state_epoch > expected_state_epoch {
        return Err(DecideError::FencedStateEpoch {
            stored: stored.state_epoch,
            expected: expected_state_epoch,
        });
    }
    Ok(())
}

/// Builds the value for a transition that passed fencing and the table.
fn transition_value(
    stored: &MirrorPartitionStateValue,
    target: PartitionState,
    leader_epoch: i32,
    failure: Option<(String, bool)>,
) -> MirrorPartitionStateValue {
    let mut v = stored.clone();
    v.leader_epoch = stored.leader_epoch.max(leader_epoch);
    v.state_epoch = stored.state_epoch.saturating_add(1);
    v.state = target;
    if target == PartitionState::Failed {
        // KIP withResolvedErrorInfo: an older PreviousState is kept when
        // already FAILED, so a retry goes back to where the trouble began.
        v.previous_state = if stored.state == PartitionState::Failed {
            stored.previous_state
        } else {
            stored.state
        };
        let (message, retryable) = failure.unwrap_or((String::new(), true));
        v.error_message = Some(message);
        v.retry_attempt = if !retryable || stored.retry_attempt == -1 {
            -1
        } else {
            stored.retry_attempt.max(0).saturating_add(1)
        };
    } else {
        v.previous_state = stored.state;
        // The error stays until something proves it fixed: a successful
        // fetch (ClearFailure), a recover, or a terminal/paused state. We do
        // not clear on LOG_ALIGNMENT as the prototype does: a partition that
        // keeps failing alignment would otherwise restart its attempt count
        // and retry forever.
        if matches!(target, PartitionState::Stopped | PartitionState::Paused) {
            v.error_message = None;
            v.retry_attempt = 0;
        }
    }
    v
}

fn transition(
    (image, topics): (&MirrorStateImage, &MirrorStateImage),
    key: &MirrorPartitionKey,
    target: PartitionState,
    leader_epoch: i32,
    expected_state_epoch: i32,
    failure: Option<(String, bool)>,
) -> Result<Vec<Record>, DecideError> {
    require_partition(topics, key)?;
    let stored = stored_or_default(image, key);
    fence(&stored, leader_epoch, expected_state_epoch)?;
    if !is_valid_transition(stored.state, target) {
        return Err(DecideError::InvalidTransition {
            key: key.clone(),
            from: stored.state,
            to: target,
        });
    }
    let v = transition_value(&stored, target, leader_epoch, failure);
    Ok(vec![Record::MirrorPartitionState(key.clone(), Some(v))])
}

/// Decides a command [`Command::placed_partition`] names a partition for.
pub(super) fn decide(
    image: &MirrorStateImage,
    topics: &MirrorStateImage,
    command: &Command,
) -> Result<Vec<Record>, DecideError> {
    use PartitionState as S;
    match command {
        Command::TransitionPartition {
            key,
            target,
            leader_epoch,
            expected_state_epoch,
        } => transition(
            (image, topics),
            key,
            *target,
            *leader_epoch,
            *expected_state_epoch,
            None,
        ),
        Command::FailPartition {
            key,
            leader_epoch,
            error_message,
            retryable,
        } => transition(
            (image, topics),
            key,
            S::Failed,
            *leader_epoch,
            -1,
            Some((error_message.clone(), *retryable)),
        ),
        Command::RecoverPartition { key, leader_epoch } => {
            require_partition(topics, key)?;
            let stored = stored_or_default(image, key);
            fence(&stored, *leader_epoch, -1)?;
            if stored.state != S::Failed {
                return Err(DecideError::InvalidClusterMirrorStates(format!(
                    "partition {} of {} is {}, not FAILED",
                    key.partition,
                    topic_label(topics, &key.topic_id),
                    stored.state
                )));
            }
            let target = retry_target(stored.previous_state);
            let mut v = transition_value(&stored, target, *leader_epoch, None);
            v.error_message = None;
            v.retry_attempt = 0;
            Ok(vec![Record::MirrorPartitionState(key.clone(), Some(v))])
        }
        Command::ClearFailure { key, leader_epoch } => {
            require_partition(topics, key)?;
            let stored = stored_or_default(image, key);
            fence(&stored, *leader_epoch, -1)?;
            if stored.state == S::Failed
                || (stored.error_message.is_none() && stored.retry_attempt == 0)
            {
                return Ok(vec![]);
            }
            let mut v = stored.clone();
            v.leader_epoch = stored.leader_epoch.max(*leader_epoch);
            v.error_message = None;
            v.retry_attempt = 0;
            Ok(vec![Record::MirrorPartitionState(key.clone(), Some(v))])
        }
        Command::RecordLastMirrorEpochs { key, value } => {
            require_partition(topics, key)?;
            Ok(vec![Record::LastMirrorEpochs(
                key.clone(),
                Some(value.clone()),
            )])
        }
        Command::SetOffsetRuns {
            key,
            upsert,
            remove,
            holes,
        } => {
            require_partition(topics, key)?;
            image
                .offset_map(key)
                .check_change(upsert, remove, holes)
                .map_err(|e| DecideError::InvalidRequest(e.to_string()))?;
            let run_key = |source_start| OffsetMapRunKey {
                partition: key.clone(),
                source_start,
            };
            let hole_key = |destination_start| OffsetMapHoleKey {
                partition: key.clone(),
                destination_start,
            };
            Ok(remove
                .iter()
                .map(|s| Record::OffsetMapRun(run_key(*s), None))
                .chain(
                    upsert
                        .iter()
                        .map(|r| Record::OffsetMapRun(run_key(r.source_start), Some(*r))),
                )
                .chain(
                    holes
                        .iter()
                        .map(|h| Record::OffsetMapHole(hole_key(h.destination_start), Some(*h))),
                )
                .collect())
        }
        Command::RecordProducer { key, producer } => {
            require_partition(topics, key)?;
            Ok(vec![Record::MirrorProducer(key.clone(), Some(*producer))])
        }
        Command::RecordSourceEpochs { key, epochs } => {
            require_partition(topics, key)?;
            let ascending = epochs
                .entries
                .windows(2)
                .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset);
            if !ascending || epochs.entries.len() > MAX_SOURCE_EPOCHS {
                return Err(DecideError::InvalidRequest(format!(
                    "source epochs must ascend in epoch and offset, at most {MAX_SOURCE_EPOCHS}: {epochs:?}"
                )));
            }
            let value = (!epochs.entries.is_empty()).then(|| epochs.clone());
            Ok(vec![Record::SourceEpochs(key.clone(), value)])
        }
        Command::RecordGap { key, gap } => {
            require_partition(topics, key)?;
            if gap.source_end <= gap.source_start {
                return Err(DecideError::InvalidRequest(format!("empty gap {gap:?}")));
            }
            Ok(vec![Record::GapDetected(
                OffsetMapRunKey {
                    partition: key.clone(),
                    source_start: gap.source_start,
                },
                Some(gap.clone()),
            )])
        }
        Command::RecordVerifyResult { key, value } => {
            require_partition(topics, key)?;
            Ok(vec![Record::VerifyResult(key.clone(), Some(value.clone()))])
        }
        Command::RecordFailoverReport { key, value } => {
            require_partition(topics, key)?;
            Ok(vec![Record::FailoverReport(
                key.clone(),
                Some(value.clone()),
            )])
        }
        other => Err(DecideError::InvalidRequest(format!(
            "not a partition's own operation: {other:?}"
        ))),
    }
}
