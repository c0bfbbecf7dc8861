//! Per-log settings, named after Kafka's topic configs where one exists.

/// `cleanup.policy`: what happens to old records of a local topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CleanupPolicy {
    /// No compaction: records go only with whole segments (Kafka's default).
    #[default]
    Delete,
    /// The log cleaner keeps the latest record of each key (see
    /// [`PartitionLog::clean`](super::PartitionLog::clean)).
    Compact,
}

/// Settings of one partition log. Defaults follow Kafka's. Deserializes
/// from the agent's `[log]` table (Kafka's names, with underscores).
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll a non-empty segment this long after its first append.
    pub segment_ms: u64,
    /// `index.interval.bytes`: bytes between sparse index entries.
    pub index_interval_bytes: u64,
    /// `segment.index.bytes`: the most an offset or time index may hold.
    pub segment_index_bytes: u64,
    /// `flush.messages`: fsync after this many records (u64::MAX: never).
    pub flush_messages: u64,
    /// `flush.ms`: fsync when this long has passed since the last (u64::MAX: never).
    pub flush_ms: u64,
    /// The largest batch accepted (framing bound against lying lengths).
    pub max_batch_bytes: u32,
    /// The most disk space reserved ahead of the write position with
    /// fallocate (so a full disk is an error on reservation rather than a
    /// SIGBUS on write): the ceiling of a partition's step, which follows
    /// its recent append rate (see `log/reserve.rs`).
    pub preallocate_bytes: u64,
    /// Pages faulted in (MADV_POPULATE_WRITE) ahead of the write position,
    /// when receiving straight into the mapping; 0 turns pre-faulting off.
    /// Never beyond the room reserved, so it follows the same step and budget.
    pub prefault_bytes: u64,
    /// The agent's budget of disk reserved ahead of its partitions' data,
    /// split evenly across shards: once a shard's share is spent, writes
    /// get exactly the room they need (never refused nor delayed for it).
    /// Agent-wide, read by the agent when it starts its shards.
    pub reserve_budget_bytes: u64,
    /// A partition that appended nothing for this long gives its room
    /// reserved ahead of its data back to the file system (checked by each
    /// shard every half of it).
    pub reserve_release_idle_ms: u64,
    /// `cleanup.policy`: `compact` turns the log cleaner on for local
    /// topics (mirrored partitions follow their source byte for byte).
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long the cleaner keeps a tombstone (a
    /// record with a null value) and a COMMIT/ABORT marker whose
    /// transaction left nothing behind, counted from the largest timestamp
    /// of its segment.
    pub delete_retention_ms: u64,
    /// `min.cleanable.dirty.ratio`: the periodic cleaner cleans a log only
    /// once the bytes not cleaned yet are at least this share of the
    /// cleanable bytes (0 cleans on every pass).
    pub min_cleanable_dirty_ratio: f64,
    /// `log.cleaner.backoff.ms`: how often each shard looks for a compacted
    /// local partition to clean (one partition per pass), and applies
    /// retention to local partitions.
    pub log_cleaner_interval_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`: the memory one cleaning pass's
    /// offset map may take; a log with more distinct keys in its dirty
    /// part is cleaned in several passes (each shard cleans one partition
    /// at a time, so a shard holds at most one such map).
    pub log_cleaner_dedupe_buffer_size: u64,
    /// `retention.ms` for local partitions (`cleanup.policy` with delete):
    /// sealed segments whose newest record is older go. None (the default,
    /// unlike Kafka's 7 days): kept, unless the topic's synced config says.
    pub retention_ms: Option<u64>,
    /// `retention.bytes` for local partitions: the oldest sealed segments
    /// go while the log is larger. None (the default): no bound.
    pub retention_bytes: Option<u64>,
}

// The ratio is a plain number (never NaN in a sane config; a NaN compares
// unequal to itself, which only makes two configs differ).
impl Eq for LogConfig {}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            flush_messages: u64::MAX,
            flush_ms: u64::MAX,
            max_batch_bytes: 64 * 1024 * 1024,
            preallocate_bytes: 16 * 1024 * 1024,
            prefault_bytes: 8 * 1024 * 1024,
            // 64 partitions at the full 16 MiB step, or 16 384 at the
            // 64 KiB floor: ~2 % of a 60 GB disk, where 16 MiB for each
            // of 10 000 partitions asked for 156 GiB.
            reserve_budget_bytes: 1 << 30,
            reserve_release_idle_ms: 30_000,
            cleanup_policy: CleanupPolicy::Delete,
            delete_retention_ms: 86_400_000,
            min_cleanable_dirty_ratio: 0.5,
            log_cleaner_interval_ms: 15_000,
            log_cleaner_dedupe_buffer_size: 128 * 1024 * 1024,
            retention_ms: None,
            retention_bytes: None,
        }
    }
}
