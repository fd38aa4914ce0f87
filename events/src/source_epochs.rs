//! The source leader epochs of the mirrored records, kept the way a Kafka
//! replica keeps its leader-epoch checkpoint: (epoch, start offset) entries,
//! each epoch covering the source offsets from its start to the next
//! entry's. KIP-320 tells a replica whether a leader's history is still its
//! own by asking the leader where the replica's last epoch ends on the
//! leader's log (OffsetForLeaderEpoch, or a Fetch carrying LastFetchedEpoch,
//! which answers with a DivergingEpoch); an end below the replica's
//! position means the leader's log parted from it there — an unclean leader
//! election — even when that leader has already grown past the position.
//! kmirror mirrors the same way: the offsets alone cannot see the second
//! case.

use serde::{Deserialize, Serialize};

/// Source offsets from `start_offset` on (up to the next entry's start)
/// were written by the leader of `epoch`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// A partition's entries, ascending in both epoch and start offset. Only
/// the newest [`MAX_SOURCE_EPOCHS`] are kept: a check needs the epoch of
/// the last mirrored record and, after an election, the ones just before.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct SourceEpochs {
    pub entries: Vec<EpochEntry>,
}

/// How many entries a partition keeps.
pub const MAX_SOURCE_EPOCHS: usize = 32;

impl SourceEpochs {
    /// The epoch the source record at `offset` was written in, if known.
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .map(|e| e.epoch)
    }

    /// Notes that the source batch at `start_offset` was written in
    /// `epoch`. Returns whether that added an entry (which must then be
    /// recorded before the batch is produced). Leader epochs only grow
    /// along a log; an older or equal one adds nothing.
    pub fn observe(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        match self.entries.last() {
            Some(last) if epoch <= last.epoch || start_offset <= last.start_offset => false,
            _ => {
                self.entries.push(EpochEntry {
                    epoch,
                    start_offset,
                });
                let over = self.entries.len().saturating_sub(MAX_SOURCE_EPOCHS);
                self.entries.drain(..over);
                true
            }
        }
    }

    /// Settles an entry recorded ahead (`ahead`: the source leader's epoch
    /// at our position, guessed at alignment so that an idle partition's
    /// next record needs no log write of its own) against the first batch
    /// fetched after it, written in `epoch` and starting at `start_offset`.
    /// A wrong guess is replaced by what [`Self::observe`] makes of the
    /// batch. Returns whether the entries changed (to record before the
    /// batch is produced).
    pub fn settle_ahead(&mut self, ahead: EpochEntry, epoch: i32, start_offset: i64) -> bool {
        if ahead.epoch == epoch && ahead.start_offset == start_offset {
            return false;
        }
        self.truncate_from(ahead.start_offset);
        self.observe(epoch, start_offset);
        true
    }

    /// Forgets what it knew from `offset` on: the records there were never
    /// mirrored (a write-ahead entry whose batch did not land) or are no
    /// longer the source's (cut at a divergence). Returns whether anything
    /// changed.
    pub fn truncate_from(&mut self, offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < offset);
        self.entries.len() != before
    }

    /// Where the mirrored history (up to `position`, exclusive) and a
    /// leader's part, from its answer for our epoch at `position − 1`:
    /// `leader_epoch` is the largest epoch at most ours that the leader
    /// knows and `end_offset` where that epoch ends on its log. As a Kafka
    /// follower truncates (KIP-279): to the smaller of the leader's end of
    /// that epoch and ours. `None` when nothing diverges before `position`,
    /// or when the answer is undefined (Kafka's for an epoch newer than any
    /// the leader knows, or an empty epoch cache), which says nothing about
    /// where; the offsets are then all there is.
    pub fn divergence(&self, leader_epoch: i32, end_offset: i64, position: i64) -> Option<i64> {
        if leader_epoch < 0 || end_offset < 0 {
            return None;
        }
        let ours_ends = self
            .entries
            .iter()
            .find(|e| e.epoch > leader_epoch)
            .map_or(position, |e| e.start_offset);
        let at = end_offset.min(ours_ends);
        (at < position).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epochs(entries: &[(i32, i64)]) -> SourceEpochs {
        SourceEpochs {
            entries: entries
                .iter()
                .map(|&(epoch, start_offset)| EpochEntry {
                    epoch,
                    start_offset,
                })
                .collect(),
        }
    }

    #[test]
    fn entries_follow_the_batches_epochs() {
        let mut e = SourceEpochs::default();
        assert_eq!(e.epoch_at(0), None);
        assert!(e.observe(0, 0));
        assert!(!e.observe(0, 10), "same epoch: nothing new");
        assert!(e.observe(3, 25));
        assert!(!e.observe(2, 30), "epochs never go back along a log");
        assert!(!e.observe(-1, 40), "no epoch (an old message format)");
        assert_eq!(e, epochs(&[(0, 0), (3, 25)]));
        assert_eq!(
            (e.epoch_at(24), e.epoch_at(25), e.epoch_at(1000)),
            (Some(0), Some(3), Some(3))
        );
        for i in 0..40 {
            e.observe(10 + i, 100 + i as i64);
        }
        assert_eq!(e.entries.len(), MAX_SOURCE_EPOCHS);
        assert_eq!(
            e.entries.last(),
            Some(&EpochEntry {
                epoch: 49,
                start_offset: 139
            })
        );
    }

    #[test]
    fn an_entry_recorded_ahead_stands_if_right_and_is_replaced_if_wrong() {
        let ahead = EpochEntry {
            epoch: 4,
            start_offset: 30,
        };
        let mut e = epochs(&[(0, 0), (4, 30)]);
        assert!(!e.settle_ahead(ahead, 4, 30), "the guess was right");
        assert_eq!(e, epochs(&[(0, 0), (4, 30)]));
        // A leader elected since: its epoch, not the guessed one.
        assert!(e.settle_ahead(ahead, 5, 30));
        assert_eq!(e, epochs(&[(0, 0), (5, 30)]));
        // A batch of the old leader's above the high watermark: no new epoch.
        let mut e = epochs(&[(0, 0), (4, 30)]);
        assert!(e.settle_ahead(ahead, 0, 30));
        assert_eq!(e, epochs(&[(0, 0)]));
        // The first batch starts further on (a compacted source).
        let mut e = epochs(&[(0, 0), (4, 30)]);
        assert!(e.settle_ahead(ahead, 4, 33));
        assert_eq!(e, epochs(&[(0, 0), (4, 33)]));
    }

    #[test]
    fn truncation_forgets_what_was_never_mirrored() {
        let mut e = epochs(&[(0, 0), (3, 25), (4, 40)]);
        assert!(e.truncate_from(40));
        assert!(!e.truncate_from(40));
        assert_eq!(e, epochs(&[(0, 0), (3, 25)]));
        assert!(e.truncate_from(0));
        assert!(e.entries.is_empty());
    }

    #[test]
    fn a_shorter_new_leader_diverges_where_our_epoch_ends_on_it() {
        // Mirrored 0..150 in epoch 0; the new leader has epoch 0 up to 100.
        let e = epochs(&[(0, 0)]);
        assert_eq!(e.divergence(0, 100, 150), Some(100));
    }

    #[test]
    fn a_longer_new_leader_diverges_where_our_epoch_ends_on_it_too() {
        // The new leader wrote 100..180 in epoch 2: epoch 0 still ends at
        // 100 on it, below our 150, however far its log goes.
        let e = epochs(&[(0, 0)]);
        assert_eq!(e.divergence(0, 100, 150), Some(100));
        // Same history (a clean election): our epoch ends at or past us.
        assert_eq!(e.divergence(0, 150, 150), None);
        assert_eq!(e.divergence(0, 180, 150), None);
    }

    #[test]
    fn a_leader_without_our_epoch_diverges_where_ours_began_at_the_latest() {
        // We mirrored epoch 5 from 120 (a leader the new one never knew);
        // the new leader answers epoch 3, which it ran up to 170.
        let e = epochs(&[(3, 0), (5, 120)]);
        assert_eq!(e.divergence(3, 170, 150), Some(120));
        assert_eq!(e.divergence(3, 110, 150), Some(110));
        // An epoch older than all we keep: ours started at the first entry.
        assert_eq!(e.divergence(1, 90, 150), Some(0));
    }

    #[test]
    fn an_undefined_answer_says_nothing() {
        let e = epochs(&[(0, 0)]);
        assert_eq!(e.divergence(-1, -1, 150), None);
    }
}
