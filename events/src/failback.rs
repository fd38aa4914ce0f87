//! Failback as decisions: what a reverse mirror does with a topic that a
//! mirror in the other direction copied, from that mirror's history and
//! what the two clusters hold now.
//!
//! Names, in the reverse mirror's terms: its **source** is the old
//! destination (where producers went after the failover), its
//! **destination** is the old source. The forward mirror copied destination
//! offsets to source offsets through its map and stopped at
//! LastMirrorEpochs: everything before that position is the same on both
//! clusters, so only what follows it needs deciding. Kafka cannot truncate a
//! partition, so `delta` keeps the destination's records after that position
//! (exported to a quarantine topic by the caller) as a hole in the reverse
//! map, and copies only what the source got after the failover. When the
//! histories cannot be shown to agree up to that position, only
//! `from-scratch` (re-create the destination topic, copy everything) is safe.

use crate::offset_map::OffsetMap;
use crate::record::{
    FailbackMode, FailbackPlan, LastMirrorEpochsValue, OffsetMapHole, OffsetMapRun,
};

/// A partition's ends and agreement checks as read from the clusters now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionFacts {
    /// The reverse mirror's destination (the forward mirror's source).
    pub destination_log_start: i64,
    pub destination_end: i64,
    /// End offset, on the destination, of the leader epoch the forward
    /// mirror last copied from (OffsetForLeaderEpoch); None when unknown.
    pub destination_end_of_epoch: Option<i64>,
    /// The reverse mirror's source (the forward mirror's destination).
    pub source_log_start: i64,
    pub source_end: i64,
    /// End offset, on the source, of the leader epoch the forward mirror
    /// stopped in; None when unknown.
    pub source_end_of_epoch: Option<i64>,
}

/// What to do with a non-empty divergent tail (`mirror.failback.divergent.tail`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailPolicy {
    Quarantine,
    Refuse,
}

/// One partition's failback, ready to record and carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionPlan {
    pub plan: FailbackPlan,
    /// The reverse map to seed (`delta`): the forward runs turned around,
    /// and every destination range that belongs to no source offset.
    pub runs: Vec<OffsetMapRun>,
    pub holes: Vec<OffsetMapHole>,
}

/// Why a partition cannot fail back as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FailbackRefusal {
    #[error("only from-scratch is possible: {0}")]
    OnlyFromScratch(String),
    #[error("the destination holds {count} records after the last mirrored position ({start}..{end}) and mirror.failback.divergent.tail=refuse")]
    DivergentTail { start: i64, end: i64, count: i64 },
}

/// Why `delta` cannot be trusted for this partition, if it cannot.
fn delta_obstacle(
    lme: Option<&LastMirrorEpochsValue>,
    forward: &OffsetMap,
    facts: &PartitionFacts,
) -> Option<String> {
    let Some(lme) = lme else {
        return Some("the forward mirror recorded no LastMirrorEpochs for it".into());
    };
    // The forward map covers its destination up to where it stopped:
    // runs, and holes (records it kept there that map to nothing).
    let mirrored_to = forward.recorded_destination_end();
    if mirrored_to != lme.destination_end_offset {
        return Some(format!(
            "the forward mirror's map ends at {mirrored_to} on the old destination, its LastMirrorEpochs at {}",
            lme.destination_end_offset
        ));
    }
    if facts.destination_end < lme.source_offset {
        return Some(format!(
            "the old source now ends at {}, below the last mirrored position {} (an unclean election there?)",
            facts.destination_end, lme.source_offset
        ));
    }
    // Without the epoch of the last mirrored record, a history that was
    // cut short and regrew to past the position looks like one that
    // agrees: only offsets would be compared.
    if lme.source_offset > 0 && lme.source_leader_epoch < 0 {
        return Some(format!(
            "the leader epoch of the last mirrored record (before {}) is unknown, so the old source's history cannot be checked against the mirrored one",
            lme.source_offset
        ));
    }
    if let Some(end) = facts
        .destination_end_of_epoch
        .filter(|_| lme.source_leader_epoch >= 0)
    {
        if end < lme.source_offset {
            return Some(format!(
                "on the old source, leader epoch {} ends at {end}, before the last mirrored position {}: its history diverged",
                lme.source_leader_epoch, lme.source_offset
            ));
        }
    }
    if facts.source_end < lme.destination_end_offset {
        return Some(format!(
            "the old destination now ends at {}, below the last mirrored position {}",
            facts.source_end, lme.destination_end_offset
        ));
    }
    if let Some(end) = facts
        .source_end_of_epoch
        .filter(|_| lme.destination_leader_epoch >= 0)
    {
        if end < lme.destination_end_offset {
            return Some(format!(
                "on the old destination, leader epoch {} ends at {end}, before the last mirrored position {}: its history diverged",
                lme.destination_leader_epoch, lme.destination_end_offset
            ));
        }
    }
    None
}

/// Decides one partition's failback. `requested` is the operator's choice
/// (None: `delta` when possible, else a refusal that says why only
/// `from-scratch` is); `forward` is the forward mirror's map of this
/// partition (its source offsets are this mirror's destination offsets).
pub fn plan_partition(
    forward_mirror: &str,
    lme: Option<&LastMirrorEpochsValue>,
    forward: &OffsetMap,
    facts: &PartitionFacts,
    requested: Option<FailbackMode>,
    tail: TailPolicy,
    quarantine_topic: &str,
) -> Result<PartitionPlan, FailbackRefusal> {
    let obstacle = delta_obstacle(lme, forward, facts);
    let mode = match (requested, &obstacle) {
        (Some(FailbackMode::FromScratch), _) => FailbackMode::FromScratch,
        (_, Some(why)) => return Err(FailbackRefusal::OnlyFromScratch(why.clone())),
        (_, None) => FailbackMode::Delta,
    };
    if mode == FailbackMode::FromScratch {
        return Ok(PartitionPlan {
            plan: FailbackPlan {
                forward_mirror: forward_mirror.to_string(),
                mode,
                destination_position: -1,
                source_position: -1,
                divergent_start: facts.destination_log_start,
                divergent_end: facts.destination_end,
                copy_start: facts.source_log_start,
                copy_end: facts.source_end,
                quarantine_topic: None,
                reason: obstacle,
            },
            runs: Vec::new(),
            holes: Vec::new(),
        });
    }
    let lme = lme.expect("delta has LastMirrorEpochs");
    let (agreed, source_position) = (lme.source_offset, lme.destination_end_offset);
    let divergent = facts.destination_end - agreed;
    if divergent > 0 && tail == TailPolicy::Refuse {
        return Err(FailbackRefusal::DivergentTail {
            start: agreed,
            end: facts.destination_end,
            count: divergent,
        });
    }
    // The forward runs turned around; every destination range between and
    // after them (markers, aborted or compacted records, the divergent tail)
    // belongs to no source offset.
    let runs: Vec<OffsetMapRun> = forward
        .runs()
        .filter(|r| r.length > 0)
        .map(|r| OffsetMapRun {
            source_start: r.destination_start,
            destination_start: r.source_start,
            length: r.length,
        })
        .collect();
    let mut holes = Vec::new();
    let mut at = runs
        .first()
        .map_or(facts.destination_log_start, |r| r.destination_start);
    for r in &runs {
        if r.destination_start > at {
            holes.push(OffsetMapHole {
                destination_start: at,
                length: r.destination_start - at,
            });
        }
        at = r.destination_end();
    }
    if facts.destination_end > at {
        holes.push(OffsetMapHole {
            destination_start: at,
            length: facts.destination_end - at,
        });
    }
    Ok(PartitionPlan {
        plan: FailbackPlan {
            forward_mirror: forward_mirror.to_string(),
            mode,
            destination_position: agreed,
            source_position,
            divergent_start: agreed,
            divergent_end: facts.destination_end.max(agreed),
            copy_start: source_position,
            copy_end: facts.source_end,
            quarantine_topic: (divergent > 0).then(|| quarantine_topic.to_string()),
            reason: None,
        },
        runs,
        holes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offset_map::translate;

    fn run(s: i64, d: i64, l: i64) -> OffsetMapRun {
        OffsetMapRun {
            source_start: s,
            destination_start: d,
            length: l,
        }
    }

    fn forward(runs: &[OffsetMapRun]) -> OffsetMap {
        let mut m = OffsetMap::default();
        for r in runs {
            m.put_run(r.source_start, Some(*r));
        }
        m
    }

    fn lme(source_offset: i64, destination_end: i64) -> LastMirrorEpochsValue {
        LastMirrorEpochsValue {
            last_mirror_epoch: 0,
            last_mirror_offset: destination_end,
            source_offset,
            source_leader_epoch: 0,
            destination_end_offset: destination_end,
            destination_leader_epoch: 0,
        }
    }

    fn facts(destination_end: i64, source_end: i64) -> PartitionFacts {
        PartitionFacts {
            destination_log_start: 0,
            destination_end,
            destination_end_of_epoch: Some(destination_end),
            source_log_start: 0,
            source_end,
            source_end_of_epoch: Some(source_end),
        }
    }

    fn plan(
        lme: Option<&LastMirrorEpochsValue>,
        map: &OffsetMap,
        f: &PartitionFacts,
        requested: Option<FailbackMode>,
    ) -> Result<PartitionPlan, FailbackRefusal> {
        plan_partition("ab", lme, map, f, requested, TailPolicy::Quarantine, "t.q")
    }

    #[test]
    fn delta_keeps_what_agrees_quarantines_the_tail_and_copies_what_came_after() {
        // A→B copied A 0..100 (a marker at 60 dropped) to B 0..99, stopped
        // there; A got 5 more records B never saw; B got 20 after failover.
        let map = forward(&[run(0, 0, 60), run(61, 60, 39)]);
        let l = lme(100, 99);
        let p = plan(Some(&l), &map, &facts(105, 119), None).unwrap();
        assert_eq!(p.plan.mode, FailbackMode::Delta);
        assert_eq!((p.plan.divergent_start, p.plan.divergent_end), (100, 105));
        assert_eq!((p.plan.copy_start, p.plan.copy_end), (99, 119));
        assert_eq!(p.plan.quarantine_topic.as_deref(), Some("t.q"));
        assert_eq!(p.runs, vec![run(0, 0, 60), run(60, 61, 39)]);
        let holes: Vec<_> = p
            .holes
            .iter()
            .map(|h| (h.destination_start, h.length))
            .collect();
        assert_eq!(holes, vec![(60, 1), (100, 5)]);
        // Consumers on B: an offset before the failover translates exactly;
        // the first record B got after it lands after the quarantined tail.
        let mut reverse = OffsetMap::default();
        for r in &p.runs {
            reverse.put_run(r.source_start, Some(*r));
        }
        for h in &p.holes {
            reverse.put_hole(h.destination_start, Some(*h));
        }
        assert!(reverse.check().is_ok());
        assert_eq!(reverse.translate(70), crate::Translation::Exact(71));
        assert_eq!(reverse.translate(99), crate::Translation::AtEnd(105));
        assert_eq!(translate(&p.runs, 59), crate::Translation::Exact(59));
    }

    #[test]
    fn a_map_seeded_by_an_earlier_failback_fails_back_again() {
        // B→A after a delta: B 0..300 → A 0..300, A 300..350 quarantined (a
        // hole), B 300..340 → A 350..390; stopped at B 340 / A 390. A got
        // 10 more; B nothing.
        let mut map = forward(&[run(0, 0, 300), run(300, 350, 40)]);
        map.put_hole(
            300,
            Some(OffsetMapHole {
                destination_start: 300,
                length: 50,
            }),
        );
        let l = lme(340, 390);
        let p = plan(Some(&l), &map, &facts(340, 400), None).unwrap();
        assert_eq!(p.plan.mode, FailbackMode::Delta);
        assert_eq!((p.plan.divergent_start, p.plan.divergent_end), (340, 340));
        assert_eq!((p.plan.copy_start, p.plan.copy_end), (390, 400));
        // A 300..350 never goes to B: no run maps it.
        assert_eq!(p.runs, vec![run(0, 0, 300), run(350, 300, 40)]);
        assert!(p.holes.is_empty());
    }

    #[test]
    fn histories_that_do_not_agree_allow_only_from_scratch() {
        let map = forward(&[run(0, 0, 100)]);
        let l = lme(100, 100);
        // The old source lost records it had sent (an unclean election).
        let e = plan(Some(&l), &map, &facts(90, 100), None).unwrap_err();
        assert!(
            matches!(e, FailbackRefusal::OnlyFromScratch(ref w) if w.contains("below the last mirrored position")),
            "{e}"
        );
        // Its epoch ends before the position (shorter history, then regrown).
        let mut f = facts(120, 100);
        f.destination_end_of_epoch = Some(95);
        assert!(plan(Some(&l), &map, &f, None).is_err());
        // The epoch of the last mirrored record unknown: the regrown
        // history above would pass on offsets alone.
        let mut unknown = l.clone();
        unknown.source_leader_epoch = -1;
        let e = plan(Some(&unknown), &map, &facts(120, 100), None).unwrap_err();
        assert!(
            matches!(e, FailbackRefusal::OnlyFromScratch(ref w) if w.contains("epoch of the last mirrored record")),
            "{e}"
        );
        // No LastMirrorEpochs at all.
        assert!(plan(None, &map, &facts(100, 100), None).is_err());
        // Asked for, from-scratch is always possible.
        let p = plan(
            None,
            &map,
            &facts(100, 130),
            Some(FailbackMode::FromScratch),
        )
        .unwrap();
        assert_eq!(p.plan.mode, FailbackMode::FromScratch);
        assert_eq!((p.plan.copy_start, p.plan.copy_end), (0, 130));
        assert_eq!((p.plan.divergent_start, p.plan.divergent_end), (0, 100));
        assert!(p.plan.reason.unwrap().contains("no LastMirrorEpochs"));
    }

    #[test]
    fn a_divergent_tail_can_be_refused() {
        let map = forward(&[run(0, 0, 10)]);
        let l = lme(10, 10);
        let e = plan_partition(
            "ab",
            Some(&l),
            &map,
            &facts(12, 10),
            None,
            TailPolicy::Refuse,
            "t.q",
        )
        .unwrap_err();
        assert_eq!(
            e,
            FailbackRefusal::DivergentTail {
                start: 10,
                end: 12,
                count: 2
            }
        );
        // Nothing diverged: refuse has nothing to refuse.
        assert!(plan_partition(
            "ab",
            Some(&l),
            &map,
            &facts(10, 10),
            None,
            TailPolicy::Refuse,
            "t.q"
        )
        .is_ok());
    }
}
