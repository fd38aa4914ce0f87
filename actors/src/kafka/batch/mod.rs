//! Raw v2 record batches, from a fetch response to a produce request.
//!
//! Why raw bytes and not decoded records: most batches are forwarded with
//! only header fields rewritten, copied once, never decompressed; only what
//! the destination would reject is decoded and re-encoded.
//!
//! - `view`: the header, read and rewritten in place; the batch iterator.
//! - `classify`: pass through, re-encode or drop, from the header alone.
//! - `codec`: kmirror's own record codec, and a batch builder for tests.
//! - `lz4`: the lz4 frame of Kafka's producer, read and written with lz4's
//!   block functions (the merge path's decompress and compress).
//! - `forward`: what is sent — pass-through copies, re-encoded and merged
//!   batches — and the merge policy.
//!
//! Dependencies run one way: `forward` → `classify` → `codec` → `lz4`, `view`.

mod classify;
mod codec;
mod forward;
mod lz4;
mod view;

pub use classify::{classify, AbortedTransactions, BatchAction, DropReason, ReencodeReason};
pub use codec::{
    decode_records, encode_batch, record_size_estimate, BatchBuilder, DecodedBatch, Record,
};
pub use forward::{
    encode_batches, merge, mergeable, prepare, whole, OutgoingBatch, SourceOffsets,
    MERGE_BEHIND_BELOW_BYTES, MERGE_BELOW_BYTES, MERGE_TARGET_BYTES,
};
pub use view::{
    stamp_producer, BatchIter, Codec, RecordBatch, TimestampType, HEADER_SIZE, LOG_OVERHEAD,
};
