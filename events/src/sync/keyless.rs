//! The keyless hold: how the metadata sync lets a compacted destination
//! take the records without a key that its source took before it became
//! compacted (README, ARCHITECTURE "The keyless hold").
//!
//! The hold is its own records, never inferred from the destination's
//! values: the ordinary sync writes `delete` and `-1` too (a source with
//! infinite retention), and a hold read from values would undo what the
//! source set. Each hold key `k` has a marker, a `TopicConfigSync` named
//! [`marker_name`]`(k)` whose `from` is the destination's override before
//! the hold (`None`: the broker's default) and whose `to` is the hold's
//! value while it holds, `None` once let go. `mirror.*` names are never
//! copied from a source, so no source config can forge one.

use std::collections::BTreeMap;

use super::SyncSettings;
use crate::ids::TopicId;
use crate::image::MirrorStateImage;
use crate::record::TopicConfigSync;

/// A destination config change: `(name, from, to)`; `to` `None` removes
/// the destination's override.
pub type ConfigChange = (String, Option<String>, Option<String>);

/// A topic's hold: each held key's destination override from before it
/// (`None`: the broker's default).
pub type Hold = BTreeMap<String, Option<String>>;

/// A topic's effective config values (`None`: sensitive).
type Values = BTreeMap<String, Option<String>>;

/// What a topic's destination holds while records without a key are copied
/// into it: a topic altered from `delete` to `compact` keeps the keyless
/// records it took before (Kafka checks keys at produce, not when the policy
/// changes), and a compacted destination refuses them. Held at `delete`
/// with nothing deleted by time or size, the destination takes them and
/// loses nothing the source keeps; once the copy has caught up, the
/// source's policy returns, and the destination's cleaner drops keyless
/// records as the source's does.
pub const KEYLESS_HOLD: [(&str, &str); 3] = [
    ("cleanup.policy", "delete"),
    ("retention.ms", "-1"),
    ("retention.bytes", "-1"),
];

/// The prefix of the hold's marker names ([`marker_name`]).
pub const KEYLESS_HOLD_MARKER: &str = "mirror.keyless.hold.";

/// The name of the marker that records the hold of config `key`.
pub fn marker_name(key: &str) -> String {
    format!("{KEYLESS_HOLD_MARKER}{key}")
}

/// Where a topic's copy stands, for [`SyncSettings::topic_config_plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum KeylessCopy {
    /// A partition was refused a record without a key by the destination.
    Refused,
    /// No refusal, but a partition has not copied all the source holds
    /// (or is not known to have: not on the board yet).
    Behind,
    /// Every partition has copied all the source holds.
    CaughtUp,
}

impl KeylessCopy {
    /// Where a topic stands whose partitions stand at `self` and `other`:
    /// a refusal anywhere refuses, a copy behind anywhere is behind.
    pub fn and(self, other: KeylessCopy) -> KeylessCopy {
        use KeylessCopy::*;
        match (self, other) {
            (Refused, _) | (_, Refused) => Refused,
            (Behind, _) | (_, Behind) => Behind,
            (CaughtUp, CaughtUp) => CaughtUp,
        }
    }
}

/// A topic's hold as its markers say: each held key's destination override
/// from before the hold (`None`: the broker's default). Only markers that
/// hold count (a cleared one belongs to an earlier hold, and its `from` may
/// be stale); `None` when none does.
pub fn keyless_hold(recorded: impl Fn(&str) -> Option<TopicConfigSync>) -> Option<Hold> {
    let hold: Hold = KEYLESS_HOLD
        .iter()
        .filter_map(|(k, _)| {
            let m = recorded(&marker_name(k)).filter(|m| m.to.is_some())?;
            Some((k.to_string(), m.from))
        })
        .collect();
    (!hold.is_empty()).then_some(hold)
}

/// Why a keyless hold refuses an operation, if one does:
/// - DeleteMirror of `mirror` (`start` `None`) while a topic of it is
///   held: the markers are the only record of what to put back, and
///   without them the topic stays at infinite retention;
/// - starting the topic `start` (id and name) in `mirror` while another
///   mirror, or an earlier topic of that name, holds its destination: the
///   new copy's hold would take the old hold's values for the topic's own,
///   and the old hold would never be let go.
pub fn keyless_hold_refuses(
    image: &MirrorStateImage,
    mirror: &str,
    start: Option<(TopicId, &str)>,
) -> Option<String> {
    let name = |id: &TopicId| image.topic(id).map(|t| t.change.topic_name.as_str());
    let (k, _) = image.topic_configs().find(|(k, v)| {
        k.config_name.starts_with(KEYLESS_HOLD_MARKER)
            && v.to.is_some()
            && match start {
                None => k.mirror_name == mirror,
                Some((id, topic)) => {
                    (k.mirror_name != mirror || k.topic_id != id)
                        && name(&k.topic_id) == Some(topic)
                }
            }
    })?;
    Some(format!(
        "topic {} ({}) is held at cleanup.policy=delete by mirror {}'s keyless hold until \
         its copy catches up or its partitions are STOPPED: retry then",
        name(&k.topic_id).unwrap_or("?"),
        k.topic_id,
        k.mirror_name
    ))
}

/// What one sync pass does to one topic's configs, in this order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ConfigPlan {
    /// Recorded first: the hold's markers, when it is placed.
    pub mark: Vec<ConfigChange>,
    /// Recorded, then made on the destination.
    pub changes: Vec<ConfigChange>,
    /// Recorded once `changes` are made: the markers cleared, when the hold
    /// is let go.
    pub unmark: Vec<ConfigChange>,
}

impl ConfigPlan {
    pub fn is_empty(&self) -> bool {
        self.mark.is_empty() && self.changes.is_empty() && self.unmark.is_empty()
    }
}

impl KeylessCopy {
    /// Whether a plan reads [`TopicConfigs::overrides`]: only when a hold
    /// may be placed or is held. Otherwise they may be left empty.
    pub fn reads_for_hold(self, held: bool) -> bool {
        self == KeylessCopy::Refused || held
    }
}

/// The topic's configs as the sync reads them from both clusters.
pub struct TopicConfigs<'a> {
    /// The source's explicitly set configs.
    pub source: &'a [(String, String)],
    /// Whether the source's effective `cleanup.policy` compacts: only then
    /// is a refusal the case the hold is for (a compacted destination under
    /// a source that deletes is the ordinary sync's to mend, and holding it
    /// would flap). Read only to place a hold (refused, not held).
    pub source_compacts: bool,
    /// The destination's effective values.
    pub destination: &'a Values,
    /// The destination's explicitly set configs. Read as
    /// [`KeylessCopy::reads_for_hold`] says.
    pub overrides: &'a BTreeMap<String, String>,
}

impl SyncSettings {
    /// [`Self::config_changes`], with the keyless hold ([`KEYLESS_HOLD`]):
    /// placed on a refusal (a marker recorded first for each hold key that
    /// has none, keeping the destination's own override, so a placing cut
    /// short is completed before anything is altered), kept while the copy
    /// is refused or behind, and let go once it caught up. Let go, a hold
    /// key the source sets follows the source, and any other goes back to
    /// what its marker kept; the markers are cleared last, so a release cut
    /// short leaves the hold recorded, and a later pass lets it go again.
    pub fn topic_config_plan(
        &self,
        c: &TopicConfigs<'_>,
        copy: KeylessCopy,
        hold: Option<&Hold>,
    ) -> ConfigPlan {
        let place = hold.is_none() && copy == KeylessCopy::Refused && c.source_compacts;
        let holding = place || (hold.is_some() && copy != KeylessCopy::CaughtUp);
        let is_hold_key = |k: &str| KEYLESS_HOLD.iter().any(|(h, _)| *h == k);
        let mut plan = ConfigPlan {
            changes: self
                .config_changes(c.source, c.destination)
                .into_iter()
                .filter(|(k, _, _)| !(holding && is_hold_key(k)))
                .map(|(k, from, to)| (k, from, Some(to)))
                .collect(),
            ..Default::default()
        };
        if holding {
            for (k, v) in KEYLESS_HOLD {
                if !hold.is_some_and(|h| h.contains_key(k)) {
                    let before = c.overrides.get(k).cloned();
                    plan.mark
                        .push((marker_name(k), before, Some(v.to_string())));
                }
                let current = c.destination.get(k).cloned().flatten();
                if current.as_deref() != Some(v) {
                    plan.changes
                        .push((k.to_string(), current, Some(v.to_string())));
                }
            }
        } else if let Some(hold) = hold {
            let sets = |k: &str| {
                c.source
                    .iter()
                    .any(|(s, _)| s == k && self.copies_config(s))
            };
            plan.changes
                .extend(restore(c.destination, c.overrides, hold, |k| !sets(k)));
            plan.unmark = unmark(hold);
        }
        plan
    }
}

/// Lets go the hold of a topic whose copy is over (stopped: a failover, the
/// source perhaps gone): every hold key goes back to what its marker kept,
/// then the markers are cleared. `destination` `None`: the topic is gone
/// (or is another one now), and only the markers are cleared.
pub fn release_stopped(
    destination: Option<(&Values, &BTreeMap<String, String>)>,
    hold: &Hold,
) -> ConfigPlan {
    ConfigPlan {
        mark: Vec::new(),
        changes: destination.map_or_else(Vec::new, |(values, overrides)| {
            restore(values, overrides, hold, |_| true)
        }),
        unmark: unmark(hold),
    }
}

/// The changes that put each held key that `restores` back to its override
/// from before the hold (`None`: remove the destination's override). A key
/// no longer at the hold's value was set since (by an operator, after a
/// failover) or already put back, and stays as it is.
fn restore(
    destination: &Values,
    overrides: &BTreeMap<String, String>,
    hold: &Hold,
    restores: impl Fn(&str) -> bool,
) -> Vec<ConfigChange> {
    KEYLESS_HOLD
        .iter()
        .filter(|(k, _)| restores(k))
        .filter_map(|(k, v)| {
            let before = hold.get(*k)?;
            let current = destination.get(*k).cloned().flatten();
            if current.as_deref() != Some(*v) {
                return None;
            }
            let differs = match before {
                Some(b) => b != v,
                None => overrides.contains_key(*k),
            };
            differs.then(|| (k.to_string(), current, before.clone()))
        })
        .collect()
}

fn unmark(hold: &Hold) -> Vec<ConfigChange> {
    hold.iter()
        .map(|(k, before)| (marker_name(k), before.clone(), None))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::MirrorConfig;

    fn pairs(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn values(kv: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), Some(v.to_string())))
            .collect()
    }

    fn ch(k: &str, from: Option<&str>, to: Option<&str>) -> ConfigChange {
        (
            k.to_string(),
            from.map(str::to_string),
            to.map(str::to_string),
        )
    }

    /// The markers a plan records, as [`keyless_hold`] reads them back.
    fn read_back(marks: &[ConfigChange]) -> Option<BTreeMap<String, Option<String>>> {
        keyless_hold(|name| {
            marks
                .iter()
                .find(|(k, _, _)| k == name)
                .map(|(_, from, to)| TopicConfigSync {
                    from: from.clone(),
                    to: to.clone(),
                })
        })
    }

    #[test]
    fn a_keyless_refusal_holds_the_destination_until_the_copy_caught_up() {
        use KeylessCopy::*;
        let s = SyncSettings::from_config(&MirrorConfig::default()).unwrap();
        let source = pairs(&[("cleanup.policy", "compact"), ("segment.ms", "1000")]);
        let compacted = values(&[
            ("cleanup.policy", "compact"),
            ("retention.ms", "604800000"),
            ("retention.bytes", "-1"),
            ("segment.ms", "1000"),
        ]);
        // The destination's own overrides: retention.* are the broker's.
        let own: BTreeMap<String, String> = pairs(&[("cleanup.policy", "compact")])
            .into_iter()
            .collect();
        let at = |source, destination, overrides| TopicConfigs {
            source,
            source_compacts: true,
            destination,
            overrides,
        };
        // Given a compacted destination, not refused: nothing to do.
        assert!(s
            .topic_config_plan(&at(&source, &compacted, &own), Behind, None)
            .is_empty());
        // When a partition is refused a keyless record, then the hold's
        // markers are recorded first, every hold key with the override it
        // had, and the destination is held: nothing deleted by time or size.
        let placed = s.topic_config_plan(&at(&source, &compacted, &own), Refused, None);
        assert_eq!(
            placed,
            ConfigPlan {
                mark: vec![
                    ch(
                        "mirror.keyless.hold.cleanup.policy",
                        Some("compact"),
                        Some("delete")
                    ),
                    ch("mirror.keyless.hold.retention.ms", None, Some("-1")),
                    ch("mirror.keyless.hold.retention.bytes", None, Some("-1")),
                ],
                changes: vec![
                    ch("cleanup.policy", Some("compact"), Some("delete")),
                    ch("retention.ms", Some("604800000"), Some("-1")),
                ],
                unmark: vec![],
            }
        );
        let hold = read_back(&placed.mark).expect("held");
        // Held, it stays held while the copy is behind or refused again,
        // whatever the source says of the hold's keys...
        let held = values(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "-1"),
            ("retention.bytes", "-1"),
            ("segment.ms", "1000"),
        ]);
        let held_own: BTreeMap<String, String> = pairs(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "-1"),
            ("retention.bytes", "-1"),
        ])
        .into_iter()
        .collect();
        for copy in [Behind, Refused] {
            assert!(s
                .topic_config_plan(&at(&source, &held, &held_own), copy, Some(&hold))
                .is_empty());
        }
        // ... and put back if the destination lost it (the markers were
        // recorded, the alteration not made), markers untouched...
        assert_eq!(
            s.topic_config_plan(&at(&source, &compacted, &own), Behind, Some(&hold)),
            ConfigPlan {
                changes: vec![
                    ch("cleanup.policy", Some("compact"), Some("delete")),
                    ch("retention.ms", Some("604800000"), Some("-1")),
                ],
                ..Default::default()
            }
        );
        // ... while every other config still follows the source.
        let source2 = pairs(&[("cleanup.policy", "compact"), ("segment.ms", "2000")]);
        assert_eq!(
            s.topic_config_plan(&at(&source2, &held, &held_own), Behind, Some(&hold))
                .changes,
            vec![ch("segment.ms", Some("1000"), Some("2000"))]
        );
        // Caught up, the source's policy returns, a hold key the source
        // does not set goes back to its override from before the hold
        // (None: removed), and the markers are cleared last.
        let released = s.topic_config_plan(&at(&source, &held, &held_own), CaughtUp, Some(&hold));
        assert_eq!(
            released,
            ConfigPlan {
                mark: vec![],
                changes: vec![
                    ch("cleanup.policy", Some("delete"), Some("compact")),
                    ch("retention.ms", Some("-1"), None),
                    ch("retention.bytes", Some("-1"), None),
                ],
                unmark: vec![
                    ch("mirror.keyless.hold.cleanup.policy", Some("compact"), None),
                    ch("mirror.keyless.hold.retention.bytes", None, None),
                    ch("mirror.keyless.hold.retention.ms", None, None),
                ],
            }
        );
        let markers: Vec<ConfigChange> = placed.mark.into_iter().chain(released.unmark).collect();
        assert_eq!(read_back(&markers[3..]), None, "let go");
        // A key the source sets follows the source, not the marker.
        let source3 = pairs(&[
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "1000"),
        ]);
        assert_eq!(
            s.topic_config_plan(&at(&source3, &held, &held_own), CaughtUp, Some(&hold))
                .changes,
            vec![
                ch("cleanup.policy", Some("delete"), Some("compact,delete")),
                ch("retention.ms", Some("-1"), Some("1000")),
                ch("retention.bytes", Some("-1"), None),
            ]
        );
        // Stopped during the hold (a failover, the source perhaps gone):
        // every hold key goes back to what its marker kept.
        assert_eq!(
            release_stopped(Some((&held, &held_own)), &hold).changes,
            vec![
                ch("cleanup.policy", Some("delete"), Some("compact")),
                ch("retention.ms", Some("-1"), None),
                ch("retention.bytes", Some("-1"), None),
            ]
        );
        // Already put back (a release interrupted before its markers were
        // cleared), or the topic gone: only the markers.
        for gone in [Some((&compacted, &own)), None] {
            let again = release_stopped(gone, &hold);
            assert!(again.changes.is_empty());
            assert_eq!(again.unmark.len(), 3);
        }
        // A key set since (by an operator, after a failover) stays.
        let mut promoted = held.clone();
        promoted.insert("retention.ms".into(), Some("1000".into()));
        let mut promoted_own = held_own.clone();
        promoted_own.insert("retention.ms".into(), "1000".into());
        assert_eq!(
            release_stopped(Some((&promoted, &promoted_own)), &hold).changes,
            vec![
                ch("cleanup.policy", Some("delete"), Some("compact")),
                ch("retention.bytes", Some("-1"), None),
            ]
        );
    }

    /// A hold whose placing was cut short (one marker recorded, nothing
    /// altered) is completed, markers first, before it alters anything; a
    /// marker cleared by an earlier hold is no part of it.
    #[test]
    fn a_hold_cut_short_is_completed_markers_first() {
        let s = SyncSettings::from_config(&MirrorConfig::default()).unwrap();
        let source = pairs(&[("cleanup.policy", "compact")]);
        let compacted = values(&[
            ("cleanup.policy", "compact"),
            ("retention.ms", "604800000"),
            ("retention.bytes", "-1"),
        ]);
        let own: BTreeMap<String, String> =
            pairs(&[("cleanup.policy", "compact"), ("retention.ms", "604800000")])
                .into_iter()
                .collect();
        let recorded = |name: &str| {
            let m = |from: &str, to: Option<&str>| TopicConfigSync {
                from: Some(from.into()),
                to: to.map(str::to_string),
            };
            match name.strip_prefix(KEYLESS_HOLD_MARKER)? {
                "cleanup.policy" => Some(m("compact", Some("delete"))),
                // An earlier hold's, cleared: its `from` is stale.
                "retention.ms" => Some(m("1", None)),
                _ => None,
            }
        };
        let hold = keyless_hold(recorded).expect("held");
        assert_eq!(
            hold,
            BTreeMap::from([("cleanup.policy".to_string(), Some("compact".to_string()))])
        );
        let c = TopicConfigs {
            source: &source,
            source_compacts: true,
            destination: &compacted,
            overrides: &own,
        };
        assert_eq!(
            s.topic_config_plan(&c, KeylessCopy::Behind, Some(&hold)),
            ConfigPlan {
                mark: vec![
                    ch(
                        "mirror.keyless.hold.retention.ms",
                        Some("604800000"),
                        Some("-1")
                    ),
                    ch("mirror.keyless.hold.retention.bytes", None, Some("-1")),
                ],
                changes: vec![
                    ch("cleanup.policy", Some("compact"), Some("delete")),
                    ch("retention.ms", Some("604800000"), Some("-1")),
                ],
                unmark: vec![],
            }
        );
    }

    /// Review findings against the first hold, which read "held" from the
    /// destination's values.
    #[test]
    fn only_the_hold_s_own_markers_say_held() {
        use KeylessCopy::*;
        let s = SyncSettings::from_config(&MirrorConfig::default()).unwrap();
        // A source with infinite retention, copied by the ordinary sync,
        // has the hold's very values; caught up, nothing is undone.
        let infinite = pairs(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "-1"),
            ("retention.bytes", "-1"),
        ]);
        let dest = values(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "-1"),
            ("retention.bytes", "-1"),
        ]);
        let own: BTreeMap<String, String> = infinite.iter().cloned().collect();
        let c = TopicConfigs {
            source: &infinite,
            source_compacts: false,
            destination: &dest,
            overrides: &own,
        };
        assert!(s.topic_config_plan(&c, CaughtUp, None).is_empty());
        // A source that no longer sets retention.ms: the destination keeps
        // the -1 the sync copied (the KIP never deletes a key), and nothing
        // claims it back to the override of some earlier hold.
        let without = pairs(&[("cleanup.policy", "delete")]);
        let c = TopicConfigs {
            source: &without,
            ..c
        };
        assert!(s.topic_config_plan(&c, CaughtUp, None).is_empty());
        // A refusal under a source that does not compact (a destination
        // compacted by its operator) places no hold, which would flap: the
        // ordinary sync mends the policy.
        let compacted = values(&[("cleanup.policy", "compact")]);
        let c = TopicConfigs {
            destination: &compacted,
            overrides: &BTreeMap::new(),
            ..c
        };
        assert_eq!(
            s.topic_config_plan(&c, Refused, None),
            ConfigPlan {
                changes: vec![ch("cleanup.policy", Some("compact"), Some("delete"))],
                ..Default::default()
            }
        );
        // Markers a release cleared are no hold.
        let cleared = |name: &str| {
            name.starts_with(KEYLESS_HOLD_MARKER)
                .then(|| TopicConfigSync {
                    from: Some("compact".into()),
                    to: None,
                })
        };
        assert_eq!(keyless_hold(cleared), None);
        assert_eq!(keyless_hold(|_| None), None);
    }
}
