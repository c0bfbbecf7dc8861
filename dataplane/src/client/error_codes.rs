//! Kafka error codes the mirror acts on, by name.

pub const NONE: i16 = 0;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const REPLICA_NOT_AVAILABLE: i16 = 9;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
pub const FENCED_LEADER_EPOCH: i16 = 74;
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
pub const OFFSET_NOT_AVAILABLE: i16 = 78;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const INCONSISTENT_TOPIC_ID: i16 = 103;
pub const READ_ONLY_TOPIC: i16 = 134;

/// Errors after which the partition's leader or epoch must be looked up again.
pub fn needs_metadata(code: i16) -> bool {
    matches!(
        code,
        UNKNOWN_TOPIC_OR_PARTITION
            | LEADER_NOT_AVAILABLE
            | NOT_LEADER_OR_FOLLOWER
            | REPLICA_NOT_AVAILABLE
            | KAFKA_STORAGE_ERROR
            | FENCED_LEADER_EPOCH
            | UNKNOWN_LEADER_EPOCH
            | OFFSET_NOT_AVAILABLE
            | UNKNOWN_TOPIC_ID
            | INCONSISTENT_TOPIC_ID
    )
}
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const INVALID_REQUEST: i16 = 42;
