//! The keyless hold: how the metadata sync lets a compacted destination
//! take the records without a key that its source took before it became
//! compacted (README, ARCHITECTURE "The keyless hold").

use std::collections::BTreeMap;

use super::SyncSettings;
use crate::record::TopicConfigSync;

/// A destination config change: `(name, from, to)`; `to` `None` removes
/// the destination's override.
pub type ConfigChange = (String, Option<String>, Option<String>);

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

/// Where a topic's copy stands, for [`SyncSettings::topic_config_changes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeylessCopy {
    /// A partition was refused a record without a key by the destination.
    Refused,
    /// No refusal, but a partition has not copied all the source holds.
    Behind,
    /// Every partition has copied all the source holds.
    CaughtUp,
}

/// Whether the destination is held as [`KEYLESS_HOLD`] says. The source's
/// policy is never copied as this (a source at `delete` refuses nothing),
/// so the destination's own configs are the hold's durable state: a
/// restart finds it and lets it go only once the copy has caught up.
pub fn keyless_hold_in_place(destination: &BTreeMap<String, Option<String>>) -> bool {
    KEYLESS_HOLD
        .iter()
        .all(|(k, v)| destination.get(*k).and_then(|d| d.as_deref()) == Some(*v))
}

impl SyncSettings {
    /// [`Self::config_changes`], with the keyless hold ([`KEYLESS_HOLD`]):
    /// put in place on a refusal, kept while the copy is behind, and let go
    /// once it caught up. The hold's records keep the destination's own
    /// value of each key it changes (`overrides`: the topic's overrides,
    /// needed only while it is refused or held; `None` when the key was the
    /// broker's default), and let go, a hold key the source does not set
    /// goes back to it, as `recorded` (the last `TopicConfigSync` of that
    /// key) kept it.
    pub fn topic_config_changes(
        &self,
        source: &[(String, String)],
        destination: &BTreeMap<String, Option<String>>,
        overrides: &BTreeMap<String, String>,
        copy: KeylessCopy,
        recorded: impl Fn(&str) -> Option<TopicConfigSync>,
    ) -> Vec<ConfigChange> {
        let held = keyless_hold_in_place(destination);
        let hold = copy == KeylessCopy::Refused || (held && copy == KeylessCopy::Behind);
        let is_hold_key = |k: &str| KEYLESS_HOLD.iter().any(|(h, _)| *h == k);
        let mut changes: Vec<ConfigChange> = self
            .config_changes(source, destination)
            .into_iter()
            .filter(|(k, _, _)| !(hold && is_hold_key(k)))
            .map(|(k, from, to)| (k, from, Some(to)))
            .collect();
        if hold {
            for (k, v) in KEYLESS_HOLD {
                let current = destination.get(k).and_then(|c| c.as_deref());
                if current != Some(v) {
                    changes.push((
                        k.to_string(),
                        overrides.get(k).cloned(),
                        Some(v.to_string()),
                    ));
                }
            }
        } else if held {
            let sets = |k: &str| source.iter().any(|(s, _)| s == k && self.copies_config(s));
            changes.extend(
                undo_keyless_hold(destination, recorded)
                    .into_iter()
                    .filter(|(k, _, _)| !sets(k)),
            );
        }
        changes
    }
}

/// Puts each key a keyless hold changed back to what its record kept
/// (`recorded`: the last `TopicConfigSync` of that key), if the
/// destination is held ([`keyless_hold_in_place`]). A topic stopped during a hold
/// (a failover) is let go this way: its copy is over, and the source may
/// be gone.
pub fn undo_keyless_hold(
    destination: &BTreeMap<String, Option<String>>,
    recorded: impl Fn(&str) -> Option<TopicConfigSync>,
) -> Vec<ConfigChange> {
    if !keyless_hold_in_place(destination) {
        return Vec::new();
    }
    KEYLESS_HOLD
        .iter()
        .filter_map(|(k, v)| {
            let current = destination.get(*k).cloned().flatten();
            let r = recorded(k)?;
            (r.to.as_deref() == Some(*v) && r.from != current)
                .then(|| (k.to_string(), current, r.from))
        })
        .collect()
}

/// Whether the records say a keyless hold may be in place: the last change
/// of the topic's `cleanup.policy` made it the hold's. Read before asking
/// the destination about a stopped topic, so that only such topics are.
pub fn keyless_hold_recorded(recorded: impl Fn(&str) -> Option<TopicConfigSync>) -> bool {
    let (policy, held) = KEYLESS_HOLD[0];
    recorded(policy).is_some_and(|r| r.to.as_deref() == Some(held))
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

    fn change(k: &str, from: &str, to: Option<&str>) -> ConfigChange {
        (
            k.to_string(),
            Some(from.to_string()),
            to.map(str::to_string),
        )
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
        let none = |_: &str| None;
        // The destination's own overrides: retention.ms is the broker's.
        let own: BTreeMap<String, String> = pairs(&[("cleanup.policy", "compact")])
            .into_iter()
            .collect();
        // Given a compacted destination, when a partition is refused a
        // keyless record, then the destination is held: nothing deleted by
        // time or size, so it loses nothing the source keeps.
        assert_eq!(
            s.topic_config_changes(&source, &compacted, &own, Behind, none),
            vec![]
        );
        assert_eq!(
            s.topic_config_changes(&source, &compacted, &own, Refused, none),
            vec![
                change("cleanup.policy", "compact", Some("delete")),
                ("retention.ms".to_string(), None, Some("-1".to_string())),
            ]
        );
        // Held, it stays held while the copy is behind or refused again,
        // whatever the source says of the hold's keys...
        let held = values(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "-1"),
            ("retention.bytes", "-1"),
            ("segment.ms", "1000"),
        ]);
        assert!(keyless_hold_in_place(&held));
        assert!(!keyless_hold_in_place(&compacted));
        assert_eq!(
            s.topic_config_changes(&source, &held, &own, Behind, none),
            vec![]
        );
        assert_eq!(
            s.topic_config_changes(&source, &held, &own, Refused, none),
            vec![]
        );
        // ... while every other config still follows the source.
        let source2 = pairs(&[("cleanup.policy", "compact"), ("segment.ms", "2000")]);
        assert_eq!(
            s.topic_config_changes(&source2, &held, &own, Behind, none),
            vec![change("segment.ms", "1000", Some("2000"))]
        );
        // Caught up, the source's policy returns, and a hold key the source
        // does not set goes back to what it was before the hold, as its
        // record kept it (None: the override is removed).
        let recorded = |k: &str| match k {
            "retention.ms" => Some(TopicConfigSync {
                from: Some("604800000".into()),
                to: Some("-1".into()),
            }),
            "retention.bytes" => Some(TopicConfigSync {
                from: None,
                to: Some("-1".into()),
            }),
            _ => None,
        };
        assert_eq!(
            s.topic_config_changes(&source, &held, &own, CaughtUp, recorded),
            vec![
                change("cleanup.policy", "delete", Some("compact")),
                change("retention.ms", "-1", Some("604800000")),
                change("retention.bytes", "-1", None),
            ]
        );
        // A key the source sets follows the source, not the record.
        let source3 = pairs(&[
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "1000"),
        ]);
        assert_eq!(
            s.topic_config_changes(&source3, &held, &own, CaughtUp, recorded),
            vec![
                change("cleanup.policy", "delete", Some("compact,delete")),
                change("retention.ms", "-1", Some("1000")),
                change("retention.bytes", "-1", None),
            ]
        );
        // Stopped during the hold (a failover, the source perhaps gone):
        // every key the hold changed goes back as its record kept it.
        let recorded_policy = |k: &str| match k {
            "cleanup.policy" => Some(TopicConfigSync {
                from: Some("compact".into()),
                to: Some("delete".into()),
            }),
            _ => recorded(k),
        };
        assert!(keyless_hold_recorded(recorded_policy));
        assert!(!keyless_hold_recorded(recorded));
        assert_eq!(
            undo_keyless_hold(&held, recorded_policy),
            vec![
                change("cleanup.policy", "delete", Some("compact")),
                change("retention.ms", "-1", Some("604800000")),
                change("retention.bytes", "-1", None),
            ]
        );
        assert_eq!(undo_keyless_hold(&compacted, recorded_policy), vec![]);
        // Not held (a destination the operator or the source set so), a
        // caught-up copy changes nothing but what the source says.
        assert_eq!(
            s.topic_config_changes(&source, &compacted, &own, CaughtUp, recorded),
            vec![]
        );
    }
}
