//! kmirror's pure domain: the `__mirror_state` records, the partition state
//! machine as functions, the codec, pattern filters, coordinator routing and
//! the retry policy.
//!
//! Nothing here does I/O, reads a clock or draws random numbers: callers pass
//! time and jitter in. That keeps every decision replayable and testable.

pub mod assign;
pub mod backoff;
mod bounded;
pub mod codec;
pub mod command;
pub mod failback;
pub mod ids;
pub mod image;
pub mod machine;
pub mod offset_map;
pub mod pattern;
pub mod record;
pub mod retry;
pub mod risk;
pub mod routing;
pub mod source_epochs;
pub mod state;
pub mod sync;

pub use backoff::ExponentialBackoff;
pub use codec::{CodecError, Envelope, FORMAT_VERSION};
pub use command::{Command, DecideError, MapSeed, TopicRef};
pub use ids::{Offset, TopicId};
pub use image::{ImageSummary, MirrorStateImage, ReleaseEntry, StateValidation, TopicEntry};
pub use machine::{decide, decide_and_apply, decide_hosted};
pub use offset_map::{translate, MapError, OffsetMap, Translation};
pub use pattern::{
    is_internal_topic, join_lists, list_items, GroupFilter, PatternError, PatternList, TopicFilter,
    DEFAULT_TOPIC_PROPERTIES_EXCLUDE,
};
pub use record::*;
pub use retry::{RetryDecision, RetryPolicy};
pub use risk::{retention_margin, RetentionInputs, RetentionMargin, RiskSettings};
pub use routing::{
    coordinator_partition, java_string_hash_code, kafka_abs, partition_loads,
    partition_state_partition, placement_shard, spreads, SPREAD_KEY,
};
pub use state::{is_valid_transition, next_state, retry_target, PartitionState};
pub use sync::{
    group_offset_target, is_active_group_state, keyless_hold, marker_name, release_stopped,
    verify_interval, AclEntry, AclRules, ConfigChange, ConfigPlan, Hold, KeylessCopy, SyncSettings,
    TopicConfigs, KEYLESS_HOLD, KEYLESS_HOLD_MARKER, VERIFY_INTERVAL_KEY,
};
