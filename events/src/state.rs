//! The mirror partition states of KIP-1279's latest design and the §3.1
//! transition table.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A mirror partition's state, with the KIP's latest wire byte values.
///
/// The byte values changed four times during the KIP discussion; these are
/// the latest prototype's (§3.1). They are what we persist, so changing them
/// needs a new codec format version.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
#[repr(i8)]
pub enum PartitionState {
    LogAlignment = 0,
    EpochFencing = 1,
    UleRecovery = 2,
    Mirroring = 3,
    Pausing = 4,
    Paused = 5,
    Stopping = 6,
    Stopped = 7,
    Failed = 8,
    #[default]
    Unknown = -1,
}

impl PartitionState {
    /// Every state, for exhaustive tests and tables.
    pub const ALL: [PartitionState; 10] = [
        PartitionState::LogAlignment,
        PartitionState::EpochFencing,
        PartitionState::UleRecovery,
        PartitionState::Mirroring,
        PartitionState::Pausing,
        PartitionState::Paused,
        PartitionState::Stopping,
        PartitionState::Stopped,
        PartitionState::Failed,
        PartitionState::Unknown,
    ];

    /// The persisted byte.
    pub fn as_i8(self) -> i8 {
        self as i8
    }

    /// Decodes a persisted byte; unknown bytes are an error rather than
    /// UNKNOWN so that a log from a future version is never misread.
    pub fn from_i8(v: i8) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.as_i8() == v)
    }

    /// The KIP's name, used in CLI output, audit lines and JSON so that
    /// operators can match them against Kafka's documentation.
    pub fn kip_name(self) -> &'static str {
        match self {
            PartitionState::LogAlignment => "LOG_ALIGNMENT",
            PartitionState::EpochFencing => "EPOCH_FENCING",
            PartitionState::UleRecovery => "ULE_RECOVERY",
            PartitionState::Mirroring => "MIRRORING",
            PartitionState::Pausing => "PAUSING",
            PartitionState::Paused => "PAUSED",
            PartitionState::Stopping => "STOPPING",
            PartitionState::Stopped => "STOPPED",
            PartitionState::Failed => "FAILED",
            PartitionState::Unknown => "UNKNOWN",
        }
    }

    /// Whether no copy runs in this state: nothing of the partition's own
    /// is moving, so its mirror may be deleted, its topic started afresh
    /// elsewhere, or a hold placed for its copy let go. UNKNOWN counts, as
    /// a partition never started copies nothing; FAILED too, as a failed
    /// partition's pump has exited.
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            PartitionState::Stopped | PartitionState::Unknown | PartitionState::Failed
        )
    }

    /// Parses a KIP name (case-insensitive), for CLI filters.
    pub fn from_kip_name(s: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|st| st.kip_name().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kip_name())
    }
}

/// KIP-1279 §3.1 `isValidStateTransition(source, target)`.
///
/// This is the single gate every persisted state change goes through; a
/// self-transition is always valid so that a new leader can re-assert the
/// current state and re-run its side effect.
pub fn is_valid_transition(from: PartitionState, to: PartitionState) -> bool {
    use PartitionState::*;
    if from == to {
        return true;
    }
    match to {
        LogAlignment => matches!(from, Unknown | Stopped | Failed),
        EpochFencing => matches!(from, Mirroring),
        UleRecovery => matches!(from, Mirroring),
        Mirroring => matches!(
            from,
            LogAlignment | EpochFencing | Paused | UleRecovery | Failed | Mirroring
        ),
        Pausing => matches!(from, Mirroring),
        Paused => matches!(from, Pausing),
        Stopping => matches!(
            from,
            LogAlignment | EpochFencing | Mirroring | Pausing | Paused | UleRecovery | Failed
        ),
        Stopped => matches!(from, Stopping),
        Failed => true,
        // UNKNOWN is "no state recorded"; it is never a persisted target.
        Unknown => false,
    }
}

/// Where an automatic retry or a manual recover sends a FAILED partition.
///
/// The KIP retries "to PreviousState", but the §3.1 table forbids FAILED →
/// PAUSING/PAUSED/EPOCH_FENCING/ULE_RECOVERY/STOPPED (the KIP coordinator
/// would silently skip such a write and the partition would stay FAILED
/// forever). We map each to the nearest state the table allows from FAILED:
/// the recovery and pause states go back through MIRRORING (whose entry
/// re-detects the condition, and the leader's decision rule then re-applies a
/// desired PAUSED), STOPPED goes to STOPPING, UNKNOWN to LOG_ALIGNMENT.
pub fn retry_target(previous: PartitionState) -> PartitionState {
    use PartitionState::*;
    match previous {
        Unknown | LogAlignment => LogAlignment,
        Stopped | Stopping => Stopping,
        Mirroring | EpochFencing | UleRecovery | Pausing | Paused => Mirroring,
        // Cannot happen (PreviousState is never FAILED), but restart cleanly.
        Failed => LogAlignment,
    }
}

/// KIP-1279's `applyStateTransition`: where a partition in `current` goes
/// when its topic's desired state is `desired` (MIRRORING, PAUSED or
/// STOPPED); `None` means stay and re-run the current state's side effect.
///
/// One deliberate difference from the KIP: a FAILED partition may still be
/// stopped (the table allows FAILED → STOPPING), because a failover must not
/// wait for a sick partition to heal. Any other desire leaves FAILED to the
/// retry policy or an operator's recover.
pub fn next_state(current: PartitionState, desired: PartitionState) -> Option<PartitionState> {
    use PartitionState as S;
    match (current, desired) {
        (S::Failed, S::Stopped) => Some(S::Stopping),
        (S::Failed, _) => None,
        (S::Stopped, S::Stopped) | (S::Stopping, S::Stopped) => None,
        // Never started: nothing to stop (and UNKNOWN → STOPPING is not in
        // the table, so asking would be refused over and over).
        (S::Unknown, S::Stopped) => None,
        (_, S::Stopped) => Some(S::Stopping),
        (S::Paused, S::Paused) | (S::Pausing, S::Paused) => None,
        (S::Mirroring, S::Paused) => Some(S::Pausing),
        // Aligning first; the pause is applied once MIRRORING is reached.
        (S::LogAlignment, S::Paused) => None,
        (S::Paused, _) => Some(S::Mirroring),
        (S::Unknown | S::Stopped, _) => Some(S::LogAlignment),
        _ => None,
    }
}

impl Serialize for PartitionState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(self.kip_name())
        } else {
            s.serialize_i8(self.as_i8())
        }
    }
}

impl<'de> Deserialize<'de> for PartitionState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            PartitionState::from_kip_name(&s)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown partition state {s:?}")))
        } else {
            let v = i8::deserialize(d)?;
            PartitionState::from_i8(v).ok_or_else(|| {
                serde::de::Error::custom(format!("unknown partition state byte {v}"))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_match_kip() {
        assert_eq!(PartitionState::LogAlignment.as_i8(), 0);
        assert_eq!(PartitionState::Failed.as_i8(), 8);
        assert_eq!(PartitionState::Unknown.as_i8(), -1);
        for s in PartitionState::ALL {
            assert_eq!(PartitionState::from_i8(s.as_i8()), Some(s));
        }
    }

    #[test]
    fn next_states_are_allowed_transitions() {
        use PartitionState as S;
        for current in PartitionState::ALL {
            for desired in [S::Mirroring, S::Paused, S::Stopped] {
                if let Some(next) = next_state(current, desired) {
                    assert!(
                        is_valid_transition(current, next),
                        "{current} wanting {desired} -> {next}"
                    );
                }
            }
        }
        assert_eq!(next_state(S::Failed, S::Stopped), Some(S::Stopping));
        assert_eq!(next_state(S::Failed, S::Mirroring), None);
        assert_eq!(next_state(S::Mirroring, S::Paused), Some(S::Pausing));
        assert_eq!(next_state(S::Paused, S::Mirroring), Some(S::Mirroring));
        assert_eq!(next_state(S::Unknown, S::Mirroring), Some(S::LogAlignment));
        assert_eq!(next_state(S::Stopped, S::Stopped), None);
    }

    #[test]
    fn retry_targets_are_allowed() {
        for s in PartitionState::ALL {
            assert!(
                is_valid_transition(PartitionState::Failed, retry_target(s)),
                "{s}"
            );
        }
    }
}
