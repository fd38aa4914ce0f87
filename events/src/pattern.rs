//! Topic and group filters: comma-separated regexes, exclude wins, internal
//! topics never mirrored.

use regex::Regex;

/// The items of comma-separated lists, in order: trimmed, blanks and
/// repeats dropped. Operators write lists by hand (`a, b,,a`) and add to
/// them from flags; every list the mirror reads goes through here, so all
/// agree on what an item is.
pub fn list_items<S: AsRef<str>>(lists: &[S]) -> Vec<&str> {
    let mut items: Vec<&str> = Vec::new();
    for item in lists
        .iter()
        .flat_map(|l| l.as_ref().split(','))
        .map(str::trim)
    {
        if !item.is_empty() && !items.contains(&item) {
            items.push(item);
        }
    }
    items
}

/// `existing` with the items of `added` appended, as one comma list (see
/// [`list_items`]).
pub fn join_lists<S: AsRef<str>>(existing: &str, added: &[S]) -> String {
    let lists: Vec<&str> = std::iter::once(existing)
        .chain(added.iter().map(AsRef::as_ref))
        .collect();
    list_items(&lists).join(",")
}

/// A pattern that does not compile, named so the operator can find it in
/// their config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid regular expression {pattern:?} in {field}: {message}")]
pub struct PatternError {
    pub field: String,
    pub pattern: String,
    pub message: String,
}

/// A comma-separated list of regexes, each matched against the whole name
/// like Java's `Pattern.matcher(name).matches()` (Kafka's configs use that,
/// so `orders` must not match `orders-dlq`).
#[derive(Debug, Clone)]
pub struct PatternList {
    source: String,
    regexes: Vec<Regex>,
}

impl PatternList {
    /// Parses `spec`; `field` names the config key for error messages. An
    /// empty spec matches nothing.
    pub fn parse(field: &str, spec: &str) -> Result<Self, PatternError> {
        let mut regexes = Vec::new();
        for p in list_items(&[spec]) {
            let re = Regex::new(&format!("^(?:{p})$")).map_err(|e| PatternError {
                field: field.to_string(),
                pattern: p.to_string(),
                message: e.to_string(),
            })?;
            regexes.push(re);
        }
        Ok(PatternList {
            source: spec.to_string(),
            regexes,
        })
    }

    pub fn is_match(&self, name: &str) -> bool {
        self.regexes.iter().any(|r| r.is_match(name))
    }

    pub fn is_empty(&self) -> bool {
        self.regexes.is_empty()
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }
}

/// Kafka's own internal topics, listed as well as caught by the `__` prefix
/// rule so the intent is visible.
pub const KAFKA_INTERNAL_TOPICS: &[&str] = &[
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
    "__cluster_metadata",
    "__remote_log_metadata",
    "__mirror_state",
];

/// Whether a topic is internal to Kafka, to MirrorMaker 2, or to a mirror,
/// and so must never be mirrored: copying them would corrupt the
/// destination's own coordinators or create mirror loops (JR25: internal
/// topics are always excluded).
pub fn is_internal_topic(name: &str) -> bool {
    name.starts_with("__")
        || KAFKA_INTERNAL_TOPICS.contains(&name)
        || name.ends_with(".internal")
        || name.starts_with("mm2-")
        || name == "heartbeats"
        || name.ends_with(".heartbeats")
        || name.ends_with(".checkpoints.internal")
}

/// A mirror's topic filter.
#[derive(Debug, Clone)]
pub struct TopicFilter {
    include: PatternList,
    exclude: PatternList,
}

impl TopicFilter {
    /// Errors name the mirror property the pattern is kept in (a start's
    /// `--topics` and `--exclude` are added to those), as the operator
    /// wrote it.
    pub fn new(include: &str, exclude: &str) -> Result<Self, PatternError> {
        Ok(TopicFilter {
            include: PatternList::parse("mirror.topics.include", include)?,
            exclude: PatternList::parse("mirror.topics.exclude", exclude)?,
        })
    }

    /// Whether auto-discovery should mirror `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        !self.is_excluded(topic) && self.include.is_match(topic)
    }

    /// Whether `topic` is barred even when named explicitly: exclude wins
    /// over include and over explicit naming, internal topics always.
    pub fn is_excluded(&self, topic: &str) -> bool {
        is_internal_topic(topic) || self.exclude.is_match(topic)
    }
}

/// A mirror's consumer-group filter (no internal rule; groups have none).
#[derive(Debug, Clone)]
pub struct GroupFilter {
    include: PatternList,
    exclude: PatternList,
}

impl GroupFilter {
    pub fn new(include: &str, exclude: &str) -> Result<Self, PatternError> {
        Ok(GroupFilter {
            include: PatternList::parse("mirror.groups.include", include)?,
            exclude: PatternList::parse("mirror.groups.exclude", exclude)?,
        })
    }

    pub fn matches(&self, group: &str) -> bool {
        !self.exclude.is_match(group) && self.include.is_match(group)
    }
}

/// The KIP's default `topic.properties.exclude`: topic configs a mirror never
/// copies, because they describe the destination cluster itself (replica
/// throttles, min ISR, unclean election), or because mirrored records keep
/// the source's timestamps and must not be re-validated or re-stamped.
/// Topic-level and broker-prefixed spellings are both listed. Beyond the
/// KIP's list: tiered storage (`remote.storage.enable` and the settings
/// that go with it) is a property of the destination's own deployment —
/// the KIP fails a mirror onto a tiered destination, and a destination
/// without a remote log manager refuses the key, and with it every other
/// change of that topic's alteration (IncrementalAlterConfigs is all or
/// nothing per topic), and its creation.
pub const DEFAULT_TOPIC_PROPERTIES_EXCLUDE: &[&str] = &[
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "mirror.replication.throttled.replicas",
    "mirror.support.unclean.leader.election",
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_and_exclude_wins() {
        let f = TopicFilter::new("orders, pay.*", "pay-secret").unwrap();
        assert!(f.matches("orders"));
        assert!(!f.matches("orders-dlq"));
        assert!(f.matches("payments"));
        assert!(!f.matches("pay-secret"));
        assert!(!TopicFilter::new(".*", "")
            .unwrap()
            .matches("__consumer_offsets"));
        assert!(!TopicFilter::new(".*", "")
            .unwrap()
            .matches("mm2-offset-syncs.a.internal"));
        assert!(!TopicFilter::new(".*", "").unwrap().matches("a.heartbeats"));
        assert!(!TopicFilter::new("", "").unwrap().matches("orders"));
    }

    #[test]
    fn comma_lists_are_trimmed_without_blanks_or_repeats() {
        assert_eq!(list_items(&[" a, b,,a ", "", "c,b"]), ["a", "b", "c"]);
        assert!(list_items::<&str>(&[]).is_empty());
        assert_eq!(
            join_lists("orders-.*, ,x", &["payments,x", " y "]),
            "orders-.*,x,payments,y"
        );
        assert_eq!(join_lists("", &[" a "]), "a");
        assert_eq!(join_lists::<String>("", &[]), "");
    }

    #[test]
    fn bad_regex_is_named() {
        let e = TopicFilter::new("ok,(bad", "").unwrap_err();
        assert_eq!(e.pattern, "(bad");
        assert_eq!(e.field, "mirror.topics.include");
        assert!(e.to_string().contains("(bad"));
    }
}
