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
/// ElectLeaders: the partition's preferred leader already leads.
pub const ELECTION_NOT_NEEDED: i16 = 84;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_CONFIG: i16 = 40;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const NOT_ENOUGH_REPLICAS: i16 = 19;
pub const INVALID_TXN_STATE: i16 = 48;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
pub const INVALID_RECORD: i16 = 87;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
pub const PRODUCER_FENCED: i16 = 90;
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
pub const TRANSACTION_ABORTABLE: i16 = 120;
pub const INVALID_REGULAR_EXPRESSION: i16 = 128;
// KIP-848's consumer group protocol (Kafka's `Errors`).
pub const FENCED_MEMBER_EPOCH: i16 = 110;
pub const UNRELEASED_INSTANCE_ID: i16 = 111;
pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
pub const STALE_MEMBER_EPOCH: i16 = 113;
