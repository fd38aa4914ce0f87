//! The pure half of metadata sync: which destination groups are active,
//! where a translated group offset lands, which topic configs are copied,
//! the `acls.include` rules, and a mirror's sync settings.
//!
//! The MetadataSyncActor does the I/O; everything it decides is decided
//! here, so the decisions are unit-tested without a cluster and replayable.

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;

use crate::offset_map::Translation;
use crate::pattern::{list_items, PatternError, PatternList, DEFAULT_TOPIC_PROPERTIES_EXCLUDE};
use crate::record::MirrorConfig;

mod keyless;
pub use keyless::{
    keyless_hold, keyless_hold_refuses, marker_name, release_stopped, ConfigChange, ConfigPlan,
    Hold, KeylessCopy, TopicConfigs, KEYLESS_HOLD, KEYLESS_HOLD_MARKER,
};

/// Destination group states in which a group has (or is getting) live
/// members (KIP-1279 JR20). A standalone commit into such a group would be
/// refused by the coordinator or, worse, overwrite what its live consumers
/// are committing, so offset sync skips it. Classic groups report
/// `PreparingRebalance`, KIP-848 groups `ASSIGNING`; both spellings compare
/// equal after normalisation.
pub const ACTIVE_GROUP_STATES: &[&str] = &[
    "STABLE",
    "PREPARINGREBALANCE",
    "COMPLETINGREBALANCE",
    "ASSIGNING",
    "RECONCILING",
];

/// Whether a destination group in `state` must be left alone. EMPTY, DEAD
/// and states we do not know are synced, as the KIP does (its ListGroups
/// filter only returns the active ones).
pub fn is_active_group_state(state: &str) -> bool {
    let norm: String = state
        .chars()
        .filter(|c| *c != '_' && *c != ' ')
        .collect::<String>()
        .to_ascii_uppercase();
    ACTIVE_GROUP_STATES.contains(&norm.as_str())
}

/// The destination offset to commit for a source group's committed offset,
/// or `None` when nothing has been mirrored yet.
///
/// The translation is exact; the clamp to the destination's
/// `[log_start, end]` guarantees a consumer never positions beyond what is
/// actually on the destination (the recorded map can lag the live copy by
/// its checkpoint delay, and a committed offset past the end would make the
/// consumer skip records once they arrive) nor below its log start.
pub fn group_offset_target(translation: Translation, log_start: i64, end: i64) -> Option<i64> {
    let d = translation.destination_offset()?;
    Some(d.min(end).max(log_start))
}

/// The mirror's configs the sync reads, parsed once per tick from the
/// mirror config so an `--alter` takes effect without a restart.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    /// How often group offsets are synced (`mirror.groups.sync.interval.ms`,
    /// default 1 s: the staleness goal of issue 7).
    pub group_interval: Duration,
    /// `acls.include`.
    pub acls: AclRules,
    /// The mirror's own `topic.properties.exclude`, on top of the KIP's
    /// default list, which always applies.
    pub properties_exclude: PatternList,
}

/// Config keys of the sync settings, each with its `mirror.`-prefixed alias
/// (the KIP's text uses both spellings, see the reference §6.2).
pub const GROUP_SYNC_INTERVAL_KEY: &str = "mirror.groups.sync.interval.ms";
pub const ACLS_INCLUDE_KEY: &str = "acls.include";
pub const TOPIC_PROPERTIES_EXCLUDE_KEY: &str = "topic.properties.exclude";
/// How often the daemon verifies a seeded sample of every partition
/// (`kmirror verify`'s background check); 0 or absent: never.
pub const VERIFY_INTERVAL_KEY: &str = "mirror.verify.interval.ms";

/// `mirror.verify.interval.ms`: `None` when off (absent or 0); anything but
/// a whole number of milliseconds is an error naming the key.
pub fn verify_interval(config: &MirrorConfig) -> Result<Option<Duration>, PatternError> {
    let Some(v) = config.source_properties.get(VERIFY_INTERVAL_KEY) else {
        return Ok(None);
    };
    match v.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(ms) => Ok(Some(Duration::from_millis(ms))),
        Err(_) => Err(PatternError {
            field: VERIFY_INTERVAL_KEY.into(),
            pattern: v.into(),
            message: "expected a number of milliseconds (0 or absent: off)".into(),
        }),
    }
}

fn prop<'a>(config: &'a MirrorConfig, key: &str) -> Option<&'a str> {
    config
        .source_properties
        .get(key)
        .or_else(|| config.source_properties.get(&format!("mirror.{key}")))
        .map(String::as_str)
}

impl SyncSettings {
    /// Reads the settings from a mirror config; errors name the key.
    pub fn from_config(config: &MirrorConfig) -> Result<Self, PatternError> {
        let group_interval = match prop(config, GROUP_SYNC_INTERVAL_KEY) {
            None => Duration::from_secs(1),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(PatternError {
                        field: GROUP_SYNC_INTERVAL_KEY.into(),
                        pattern: v.into(),
                        message: "expected a positive number of milliseconds".into(),
                    })
                }
            },
        };
        Ok(SyncSettings {
            group_interval,
            acls: AclRules::parse(prop(config, ACLS_INCLUDE_KEY).unwrap_or("*"))?,
            properties_exclude: PatternList::parse(
                TOPIC_PROPERTIES_EXCLUDE_KEY,
                prop(config, TOPIC_PROPERTIES_EXCLUDE_KEY).unwrap_or(""),
            )?,
        })
    }

    /// Whether a source topic config is copied to the destination: not in
    /// the KIP's default exclude list, not a `mirror.*` key (those describe
    /// the mirror on this cluster), not in the mirror's own exclude list.
    pub fn copies_config(&self, name: &str) -> bool {
        !DEFAULT_TOPIC_PROPERTIES_EXCLUDE.contains(&name)
            && !name.starts_with("mirror.")
            && !self.properties_exclude.is_match(name)
    }

    /// The destination config changes that make `destination` carry every
    /// copied `source` config: `(name, from, to)`. Keys only the
    /// destination has are never touched (the KIP never deletes them).
    pub fn config_changes(
        &self,
        source: &[(String, String)],
        destination: &BTreeMap<String, Option<String>>,
    ) -> Vec<(String, Option<String>, String)> {
        source
            .iter()
            .filter(|(k, _)| self.copies_config(k))
            .filter_map(|(k, v)| {
                let current = destination.get(k).cloned().flatten();
                (current.as_deref() != Some(v.as_str())).then(|| (k.clone(), current, v.clone()))
            })
            .collect()
    }
}

/// One ACL binding by name, the form the sync and the log speak. The
/// protocol layer's numeric codes convert with [`AclEntry::from_codes`] and
/// [`AclEntry::codes`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclEntry {
    /// `TOPIC` or `GROUP` (the resource types the sync copies).
    pub resource_type: String,
    /// `LITERAL` or `PREFIXED`.
    pub pattern_type: String,
    pub resource_name: String,
    pub principal: String,
    pub host: String,
    /// `READ`, `WRITE`, `ALL`, …
    pub operation: String,
    /// `ALLOW` or `DENY`.
    pub permission_type: String,
}

const RESOURCE_TYPES: &[(i8, &str)] = &[
    (2, "TOPIC"),
    (3, "GROUP"),
    (4, "CLUSTER"),
    (5, "TRANSACTIONAL_ID"),
    (6, "DELEGATION_TOKEN"),
    (7, "USER"),
];
const PATTERN_TYPES: &[(i8, &str)] = &[(3, "LITERAL"), (4, "PREFIXED")];
const OPERATIONS: &[(i8, &str)] = &[
    (2, "ALL"),
    (3, "READ"),
    (4, "WRITE"),
    (5, "CREATE"),
    (6, "DELETE"),
    (7, "ALTER"),
    (8, "DESCRIBE"),
    (9, "CLUSTER_ACTION"),
    (10, "DESCRIBE_CONFIGS"),
    (11, "ALTER_CONFIGS"),
    (12, "IDEMPOTENT_WRITE"),
    (13, "CREATE_TOKENS"),
    (14, "DESCRIBE_TOKENS"),
    (15, "TWO_PHASE_COMMIT"),
];
const PERMISSIONS: &[(i8, &str)] = &[(2, "DENY"), (3, "ALLOW")];

fn name_of(table: &[(i8, &'static str)], code: i8) -> Option<&'static str> {
    table.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}
fn code_of(table: &[(i8, &'static str)], name: &str) -> Option<i8> {
    table
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|(c, _)| *c)
}

impl AclEntry {
    /// From Kafka's numeric codes; `None` for codes we do not sync (ANY,
    /// MATCH, UNKNOWN).
    #[allow(clippy::too_many_arguments)]
    pub fn from_codes(
        resource_type: i8,
        pattern_type: i8,
        resource_name: &str,
        principal: &str,
        host: &str,
        operation: i8,
        permission_type: i8,
    ) -> Option<Self> {
        Some(AclEntry {
            resource_type: name_of(RESOURCE_TYPES, resource_type)?.into(),
            pattern_type: name_of(PATTERN_TYPES, pattern_type)?.into(),
            resource_name: resource_name.into(),
            principal: principal.into(),
            host: host.into(),
            operation: name_of(OPERATIONS, operation)?.into(),
            permission_type: name_of(PERMISSIONS, permission_type)?.into(),
        })
    }

    /// Kafka's codes: `(resource type, pattern type, operation, permission)`.
    pub fn codes(&self) -> Option<(i8, i8, i8, i8)> {
        Some((
            code_of(RESOURCE_TYPES, &self.resource_type)?,
            code_of(PATTERN_TYPES, &self.pattern_type)?,
            code_of(OPERATIONS, &self.operation)?,
            code_of(PERMISSIONS, &self.permission_type)?,
        ))
    }

    /// The binding that fences every writer of `topic` out (a planned
    /// switchover's `--fence-source`): DENY WRITE on the literal topic for
    /// every principal from every host. Kafka's super users are never
    /// denied by an ACL, so they are not fenced.
    pub fn write_fence(topic: &str) -> Self {
        AclEntry {
            resource_type: "TOPIC".into(),
            pattern_type: "LITERAL".into(),
            resource_name: topic.into(),
            principal: "User:*".into(),
            host: "*".into(),
            operation: "WRITE".into(),
            permission_type: "DENY".into(),
        }
    }

    /// The text form used as `AclSyncKey::binding`:
    /// `resourceType;patternType;name;principal;host;operation;permission`.
    pub fn canonical(&self) -> String {
        format!(
            "{};{};{};{};{};{};{}",
            self.resource_type,
            self.pattern_type,
            self.resource_name,
            self.principal,
            self.host,
            self.operation,
            self.permission_type
        )
    }

    /// Parses [`canonical`](Self::canonical). Group names may contain `;`,
    /// so the name is whatever lies between the first two and the last four
    /// fields.
    pub fn parse_canonical(s: &str) -> Option<Self> {
        let mut head = s.splitn(3, ';');
        let resource_type = head.next()?.to_string();
        let pattern_type = head.next()?.to_string();
        let rest = head.next()?;
        let mut tail: Vec<&str> = rest.rsplitn(5, ';').collect();
        if tail.len() != 5 {
            return None;
        }
        tail.reverse();
        Some(AclEntry {
            resource_type,
            pattern_type,
            resource_name: tail[0].into(),
            principal: tail[1].into(),
            host: tail[2].into(),
            operation: tail[3].into(),
            permission_type: tail[4].into(),
        })
    }
}

/// One `acls.include` rule:
/// `resourceType;resourceName(regex);operation;permissionType;principal`,
/// `*` a wildcard, trailing fields optional (= `*`).
#[derive(Debug, Clone)]
pub struct AclRule {
    source: String,
    resource_type: Option<String>,
    resource_name: Option<Regex>,
    operation: Option<String>,
    permission_type: Option<String>,
    principal: Option<String>,
}

/// The resource types the sync copies. Cluster, transactional-id, token and
/// user ACLs describe the destination cluster itself.
pub const SYNCED_ACL_RESOURCE_TYPES: &[&str] = &["TOPIC", "GROUP"];

impl AclRule {
    fn parse(rule: &str) -> Result<Self, PatternError> {
        let err = |message: String| PatternError {
            field: ACLS_INCLUDE_KEY.into(),
            pattern: rule.into(),
            message,
        };
        let fields: Vec<&str> = rule.split(';').map(str::trim).collect();
        if fields.len() > 5 {
            return Err(err(format!(
                "{} fields; expected at most 5: resourceType;resourceName;operation;permissionType;principal",
                fields.len()
            )));
        }
        let field = |i: usize| {
            fields
                .get(i)
                .copied()
                .filter(|f| !f.is_empty() && *f != "*")
        };
        let resource_type = match field(0) {
            None => None,
            Some(t) => {
                let up = t.to_ascii_uppercase();
                if !SYNCED_ACL_RESOURCE_TYPES.contains(&up.as_str()) {
                    return Err(err(format!(
                        "resource type {t:?}: only TOPIC, GROUP or * are synced"
                    )));
                }
                Some(up)
            }
        };
        let resource_name = match field(1) {
            None => None,
            Some(n) => Some(
                Regex::new(&format!("^(?:{n})$"))
                    .map_err(|e| err(format!("resource name regex {n:?}: {e}")))?,
            ),
        };
        let operation = match field(2) {
            None => None,
            Some(o) => Some(
                name_of(
                    OPERATIONS,
                    code_of(OPERATIONS, o)
                        .ok_or_else(|| err(format!("unknown operation {o:?}")))?,
                )
                .expect("round trip")
                .to_string(),
            ),
        };
        let permission_type = match field(3) {
            None => None,
            Some(p) => Some(
                name_of(
                    PERMISSIONS,
                    code_of(PERMISSIONS, p).ok_or_else(|| {
                        err(format!("permission type {p:?}: expected ALLOW or DENY"))
                    })?,
                )
                .expect("round trip")
                .to_string(),
            ),
        };
        let principal = field(4).map(str::to_string);
        if let Some(p) = &principal {
            if !p.contains(':') {
                return Err(err(format!(
                    "principal {p:?}: expected type:name, e.g. User:alice"
                )));
            }
        }
        Ok(AclRule {
            source: rule.to_string(),
            resource_type,
            resource_name,
            operation,
            permission_type,
            principal,
        })
    }

    fn matches(&self, e: &AclEntry) -> bool {
        self.resource_type
            .as_ref()
            .is_none_or(|t| *t == e.resource_type)
            && self
                .resource_name
                .as_ref()
                .is_none_or(|r| r.is_match(&e.resource_name))
            && self.operation.as_ref().is_none_or(|o| *o == e.operation)
            && self
                .permission_type
                .as_ref()
                .is_none_or(|p| *p == e.permission_type)
            && self.principal.as_ref().is_none_or(|p| *p == e.principal)
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

/// `acls.include`: comma-separated [`AclRule`]s; an empty list syncs no ACL.
#[derive(Debug, Clone)]
pub struct AclRules {
    rules: Vec<AclRule>,
}

impl AclRules {
    /// Parses a comma-separated list of rules; errors name the rule and
    /// what is wrong with it.
    pub fn parse(spec: &str) -> Result<Self, PatternError> {
        let rules = list_items(&[spec])
            .into_iter()
            .map(AclRule::parse)
            .collect::<Result<_, _>>()?;
        Ok(AclRules { rules })
    }

    /// Whether `entry` is synced: a topic or group ACL with a literal or
    /// prefixed pattern that some rule matches.
    pub fn matches(&self, entry: &AclEntry) -> bool {
        SYNCED_ACL_RESOURCE_TYPES.contains(&entry.resource_type.as_str())
            && matches!(entry.pattern_type.as_str(), "LITERAL" | "PREFIXED")
            && self.rules.iter().any(|r| r.matches(entry))
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether ACL sync copies `entry`: what [`Self::matches`] selects, and
    /// every topic or group DENY as soon as any rule is set. A DENY only
    /// narrows access, while an ALLOW copied without the DENY beside it on
    /// the source (`acls.include = TOPIC;.*;READ;ALLOW`, say) would grant on
    /// the destination what the source refuses.
    pub fn syncs(&self, entry: &AclEntry) -> bool {
        self.matches(entry)
            || (!self.rules.is_empty()
                && entry.permission_type == "DENY"
                && SYNCED_ACL_RESOURCE_TYPES.contains(&entry.resource_type.as_str())
                && matches!(entry.pattern_type.as_str(), "LITERAL" | "PREFIXED"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(rt: &str, pt: &str, name: &str, principal: &str, op: &str, perm: &str) -> AclEntry {
        AclEntry {
            resource_type: rt.into(),
            pattern_type: pt.into(),
            resource_name: name.into(),
            principal: principal.into(),
            host: "*".into(),
            operation: op.into(),
            permission_type: perm.into(),
        }
    }

    #[test]
    fn active_states_in_both_spellings() {
        for s in [
            "Stable",
            "STABLE",
            "PreparingRebalance",
            "CompletingRebalance",
            "ASSIGNING",
            "Reconciling",
            "PREPARING_REBALANCE",
        ] {
            assert!(is_active_group_state(s), "{s}");
        }
        for s in ["Empty", "EMPTY", "Dead", "", "Whatever"] {
            assert!(!is_active_group_state(s), "{s}");
        }
    }

    #[test]
    fn offsets_clamp_to_what_the_destination_has() {
        use Translation::*;
        assert_eq!(group_offset_target(Exact(5), 0, 10), Some(5));
        assert_eq!(group_offset_target(InGap(7), 0, 10), Some(7));
        // The map lags the live copy: never beyond the destination end...
        assert_eq!(group_offset_target(AtEnd(12), 0, 10), Some(10));
        // ... and never below its log start.
        assert_eq!(group_offset_target(Exact(2), 4, 10), Some(4));
        assert_eq!(group_offset_target(Empty, 0, 10), None);
    }

    #[test]
    fn the_verify_interval_is_off_unless_set_and_named_when_bad() {
        let cfg = |v: Option<&str>| MirrorConfig {
            source_properties: v
                .map(|v| (VERIFY_INTERVAL_KEY.to_string(), v.to_string()))
                .into_iter()
                .collect(),
            ..Default::default()
        };
        assert_eq!(verify_interval(&cfg(None)).unwrap(), None);
        assert_eq!(verify_interval(&cfg(Some("0"))).unwrap(), None);
        assert_eq!(
            verify_interval(&cfg(Some(" 60000 "))).unwrap(),
            Some(Duration::from_secs(60))
        );
        for bad in ["-1", "1m", ""] {
            let e = verify_interval(&cfg(Some(bad))).unwrap_err();
            assert_eq!(e.field, "mirror.verify.interval.ms", "{bad}");
        }
    }

    #[test]
    fn config_changes_skip_excluded_and_equal() {
        let cfg = MirrorConfig {
            source_properties: [(
                "topic.properties.exclude".to_string(),
                "segment.bytes".to_string(),
            )]
            .into(),
            ..Default::default()
        };
        let s = SyncSettings::from_config(&cfg).unwrap();
        let source = vec![
            ("retention.ms".to_string(), "1000".to_string()),
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("segment.bytes".to_string(), "1000000".to_string()),
            ("min.insync.replicas".to_string(), "2".to_string()),
            ("mirror.anything".to_string(), "x".to_string()),
            // Tiered storage describes the destination's own deployment:
            // a destination without it refused the key, and with it every
            // other change of the topic's alteration.
            ("remote.storage.enable".to_string(), "true".to_string()),
            ("local.retention.ms".to_string(), "1000".to_string()),
        ];
        let dest: BTreeMap<String, Option<String>> = [
            ("retention.ms".to_string(), Some("604800000".to_string())),
            ("cleanup.policy".to_string(), Some("compact".to_string())),
        ]
        .into();
        assert_eq!(
            s.config_changes(&source, &dest),
            vec![(
                "retention.ms".to_string(),
                Some("604800000".to_string()),
                "1000".to_string()
            )]
        );
        assert_eq!(s.group_interval, Duration::from_secs(1));
    }

    #[test]
    fn a_deny_is_synced_whatever_the_rules_select() {
        let allow_only = AclRules::parse("TOPIC;orders.*;READ;ALLOW").unwrap();
        let deny = acl(
            "TOPIC",
            "LITERAL",
            "orders-secret",
            "User:alice",
            "READ",
            "DENY",
        );
        assert!(!allow_only.matches(&deny));
        assert!(allow_only.syncs(&deny));
        assert!(allow_only.syncs(&acl("GROUP", "PREFIXED", "g", "User:*", "ALL", "DENY")));
        assert!(!allow_only.syncs(&acl(
            "TOPIC", "LITERAL", "payments", "User:a", "READ", "ALLOW"
        )));
        assert!(!allow_only.syncs(&acl(
            "CLUSTER",
            "LITERAL",
            "kafka-cluster",
            "User:a",
            "ALTER",
            "DENY"
        )));
        assert!(
            !AclRules::parse("").unwrap().syncs(&deny),
            "an empty acls.include syncs nothing"
        );
    }

    #[test]
    fn acl_rules_parse_and_match() {
        let all = AclRules::parse("*").unwrap();
        assert!(all.matches(&acl("TOPIC", "LITERAL", "t", "User:a", "READ", "ALLOW")));
        assert!(all.matches(&acl("GROUP", "PREFIXED", "g", "User:a", "READ", "ALLOW")));
        assert!(!all.matches(&acl(
            "CLUSTER",
            "LITERAL",
            "kafka-cluster",
            "User:a",
            "ALTER",
            "ALLOW"
        )));

        let r = AclRules::parse("topic;orders-.*;read, GROUP;*;*;ALLOW;User:bob").unwrap();
        assert!(r.matches(&acl(
            "TOPIC", "LITERAL", "orders-1", "User:x", "READ", "DENY"
        )));
        assert!(r.matches(&acl(
            "TOPIC", "PREFIXED", "orders-", "User:x", "READ", "ALLOW"
        )));
        assert!(!r.matches(&acl(
            "TOPIC", "LITERAL", "orders", "User:x", "READ", "ALLOW"
        )));
        assert!(!r.matches(&acl(
            "TOPIC", "LITERAL", "orders-1", "User:x", "WRITE", "ALLOW"
        )));
        assert!(r.matches(&acl("GROUP", "LITERAL", "g", "User:bob", "READ", "ALLOW")));
        assert!(!r.matches(&acl("GROUP", "LITERAL", "g", "User:eve", "READ", "ALLOW")));
        assert!(AclRules::parse("").unwrap().is_empty());
    }

    #[test]
    fn acl_rule_errors_name_the_rule() {
        for (spec, needle) in [
            ("CLUSTER", "only TOPIC, GROUP"),
            ("TOPIC;(bad", "regex"),
            ("TOPIC;x;FLY", "unknown operation"),
            ("TOPIC;x;READ;MAYBE", "ALLOW or DENY"),
            ("TOPIC;x;READ;ALLOW;alice", "type:name"),
            ("TOPIC;x;READ;ALLOW;User:a;extra", "at most 5"),
        ] {
            let e = AclRules::parse(spec).unwrap_err();
            assert_eq!(e.field, "acls.include");
            assert!(e.message.contains(needle), "{spec}: {e}");
            assert!(e.to_string().contains(spec.split(',').next().unwrap()));
        }
    }

    #[test]
    fn a_write_fence_denies_every_writer_of_one_topic() {
        let f = AclEntry::write_fence("orders");
        assert_eq!(f.canonical(), "TOPIC;LITERAL;orders;User:*;*;WRITE;DENY");
        assert_eq!(f.codes(), Some((2, 3, 4, 2)));
    }

    #[test]
    fn canonical_round_trips_even_with_semicolons() {
        let e = acl("GROUP", "LITERAL", "we;ird", "User:a", "READ", "ALLOW");
        assert_eq!(AclEntry::parse_canonical(&e.canonical()), Some(e.clone()));
        let (rt, pt, op, perm) = e.codes().unwrap();
        assert_eq!(
            AclEntry::from_codes(rt, pt, "we;ird", "User:a", "*", op, perm),
            Some(e)
        );
        assert_eq!(AclEntry::from_codes(1, 3, "x", "User:a", "*", 3, 3), None);
    }
}
