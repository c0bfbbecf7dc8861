//! What an operator may ask of the mirror coordinator, and what it answers:
//! the admin API's vocabulary, shared by the coordinator (which carries the
//! requests out), the HTTP server (which maps routes and status codes onto
//! them) and the CLI (which prints the answers). Requests travel to the
//! coordinator as [`AdminCall`]s over a channel; state changes are
//! asynchronous, so an accepted change answers at once with the partitions
//! it moved and the states show the progress.
//!
//! The admin API's parts, beside this vocabulary:
//!
//! * [`http`] — the admin API server (HTTP/JSON), which hands requests to
//!   the coordinator as [`AdminCall`]s.
//! * [`auth`] — who may use the admin API: bearer tokens to callers (the
//!   admin token, principals), ClusterMirror ACLs per route and mirror.
//! * [`tls`] — the admin API's listener, in clear or HTTPS.
//! * [`metrics`] — `/metrics`: a [`MetricsSnapshot`] in Prometheus' text
//!   format.

use ringmirror_dataplane::security::acls::{
    AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType, WILDCARD,
};
use serde::{Deserialize, Serialize};

pub mod auth;
pub mod http;
pub mod metrics;
pub mod tls;

use crate::mirror::MirrorConfig;
use crate::state::InvalidTransition;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum AdminRequest {
    CreateMirror {
        config: MirrorConfig,
    },
    /// Replace a mirror's definition (same name). The topic selection, sync
    /// filters and source servers take effect at the next metadata round
    /// (topics no longer selected stop: STOPPED, data kept; a source with
    /// another cluster id halts sync); fetch settings apply to partitions
    /// placed from then on (all of them after a restart).
    UpdateMirror {
        config: MirrorConfig,
    },
    ListMirrors,
    DescribeMirror {
        mirror: String,
    },
    /// Forget a mirror: its partitions stop being fetched and stay on disk
    /// as read-only data (nothing at the destination is deleted).
    DeleteMirror {
        mirror: String,
    },
    AddTopics {
        mirror: String,
        topics: Vec<String>,
    },
    RemoveTopics {
        mirror: String,
        topics: Vec<String>,
    },
    /// Pause, resume, stop (failover) or restart the named topics of a
    /// mirror; an empty list means every topic of the mirror.
    Pause {
        mirror: String,
        topics: Vec<String>,
    },
    Resume {
        mirror: String,
        topics: Vec<String>,
    },
    Stop {
        mirror: String,
        topics: Vec<String>,
    },
    Restart {
        mirror: String,
        topics: Vec<String>,
    },
    /// Run the mirror's metadata sync (topics, configs, groups, ACLs) now
    /// rather than at the end of its refresh interval.
    Sync {
        mirror: String,
    },
    /// Compare the named topics' (none: all) mirroring partitions' last
    /// batches with the source's now; a difference is truncated and
    /// reported as a divergence (`mirror describe`, the metric).
    CheckDivergence {
        mirror: String,
        topics: Vec<String>,
    },
    /// Start comparing every batch the named topics' (none: all)
    /// mirroring partitions hold from `from_offset` with the source's, at
    /// most `bytes_per_s` per partition (`mirror verify`); replaces the
    /// mirror's previous verification.
    StartVerify {
        mirror: String,
        topics: Vec<String>,
        from_offset: i64,
        bytes_per_s: u64,
    },
    /// The mirror's latest verification: progress, or what it found.
    VerifyStatus {
        mirror: String,
    },
    /// Every partition of every mirror.
    Status,
    /// Everything `/metrics` reports.
    Metrics,
}

/// One request and where its answer goes.
pub struct AdminCall {
    pub request: AdminRequest,
    pub reply: async_channel::Sender<Result<AdminAnswer, AdminError>>,
}

// One answer per admin request, a few a minute: the size of the largest
// variant costs nothing, and boxing it would only complicate construction.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum AdminAnswer {
    /// A change was accepted; these partitions (topic, partition) move.
    Accepted {
        mirror: String,
        partitions: Vec<TopicPartitionName>,
    },
    Mirrors {
        mirrors: Vec<MirrorSummary>,
    },
    Mirror {
        mirror: MirrorDescription,
    },
    Status {
        partitions: Vec<PartitionView>,
    },
    Metrics {
        metrics: MetricsSnapshot,
    },
    /// A mirror's latest verification (`mirror verify`).
    Verify {
        job: VerifyJob,
    },
    /// ClusterMirror ACLs: all of them (`GET /acls`), or those a change
    /// created or deleted. Answered by the HTTP server, not the coordinator.
    Acls {
        acls: Vec<MirrorAcl>,
    },
}

/// A verification of a mirror's batches against the source's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyJob {
    pub mirror: String,
    /// Counts the mirror's verifications since the agent started.
    pub id: u64,
    pub started_ms: u64,
    pub from_offset: i64,
    pub bytes_per_s: u64,
    /// Every partition has a result.
    pub done: bool,
    pub partitions: Vec<PartitionVerify>,
}

/// One partition's part of a [`VerifyJob`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionVerify {
    pub topic: String,
    pub partition: i32,
    /// `running`, `identical`, `differs` or `incomplete`.
    pub result: String,
    pub first_differing_offset: Option<i64>,
    pub batches_compared: u64,
    pub bytes_compared: u64,
    pub error: Option<String>,
}

impl VerifyJob {
    /// The command's exit status: 0 identical, 1 a difference, 3 not
    /// completed (a difference wins: it was seen).
    pub fn exit_code(&self) -> u8 {
        if self.partitions.iter().any(|p| p.result == "differs") {
            1
        } else if self.partitions.iter().all(|p| p.result == "identical") {
            0
        } else {
            3
        }
    }
}

/// `POST /mirrors/{name}/verify`: the topics (none: all), where to start,
/// and the rate limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyBody {
    #[serde(default)]
    pub topics: Vec<String>,
    #[serde(default)]
    pub from_offset: i64,
    #[serde(default = "VerifyBody::default_bytes_per_s")]
    pub bytes_per_s: u64,
}

impl VerifyBody {
    /// 32 MiB/s per partition unless asked otherwise.
    pub const BYTES_PER_S_DEFAULT: u64 = 32 << 20;

    fn default_bytes_per_s() -> u64 {
        Self::BYTES_PER_S_DEFAULT
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicPartitionName {
    pub topic: String,
    pub partition: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MirrorSummary {
    pub name: String,
    pub bootstrap_servers: Vec<String>,
    pub source_cluster_id: Option<String>,
    pub partitions: usize,
    /// Partitions per state name (MIRRORING, PAUSED, ...).
    pub states: std::collections::BTreeMap<String, usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MirrorDescription {
    pub config: MirrorConfig,
    pub source_cluster_id: Option<String>,
    pub created_ms: u64,
    /// Source topics the mirror covers now (named or discovered).
    pub topics: Vec<String>,
    pub partitions: Vec<PartitionView>,
    /// The last time the source's metadata was read, and the last error.
    pub last_sync_ms: Option<u64>,
    pub sync_error: Option<String>,
    /// The last topic config sync, and per topic what it found.
    #[serde(default)]
    pub topic_configs_synced_ms: Option<u64>,
    #[serde(default)]
    pub topic_configs: std::collections::BTreeMap<String, String>,
    /// The last ACL sync, and what it did.
    #[serde(default)]
    pub acls_synced_ms: Option<u64>,
    #[serde(default)]
    pub acls: String,
    /// Mirrored topics absent at the source waiting for confirmation
    /// before they are stopped ("absent since …, round k of n"), recreated
    /// ones, and topics the source refuses to describe (sync errors).
    #[serde(default)]
    pub topic_checks: Vec<crate::metadata_sync::deletion::TopicCheck>,
    /// The last consumer group offset sync, and what it did per group.
    #[serde(default)]
    pub groups_synced_ms: Option<u64>,
    #[serde(default)]
    pub groups: std::collections::BTreeMap<String, String>,
    /// What happened to partitions' logs that an operator must hear of
    /// (divergences from the source), newest last, the latest few.
    #[serde(default)]
    pub partition_events: Vec<PartitionEvent>,
}

/// A partition's log diverged from the source's: our batches from
/// `first_differing_offset` on were not the source's any more, and the log
/// was cut to `truncated_to` (`bytes_lost` bytes) to mirror its new history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionEvent {
    pub at_ms: u64,
    pub topic: String,
    pub partition: i32,
    pub first_differing_offset: i64,
    pub truncated_to: i64,
    pub bytes_lost: u64,
}

/// One mirrored partition as the operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionView {
    pub mirror: String,
    pub topic: String,
    pub partition: i32,
    /// The source topic id, as a UUID string.
    pub topic_id: String,
    /// A state name: UNKNOWN, PREPARING, MIRRORING, EPOCH_FENCING,
    /// PAUSING, PAUSED, STOPPING, STOPPED, FAILED.
    pub state: String,
    /// The source's high watermark at the last fetch (-1: not known yet).
    pub source_offset: i64,
    /// Our log end offset.
    pub destination_offset: i64,
    pub lag_messages: i64,
    /// How long the partition has been behind (0 when caught up).
    pub lag_seconds: f64,
    pub last_mirror_epoch: i32,
    pub destination_leader_epoch: i32,
    pub retry_attempt: u32,
    pub error: Option<String>,
}

/// Counters and gauges for `/metrics` (rendered by the HTTP server).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    pub partitions: Vec<PartitionMetrics>,
    pub mirrors: Vec<MirrorMetrics>,
    /// The agent's event queues (`None`: not measured, nothing rendered).
    #[serde(default)]
    pub shard_events: Option<ShardEventMetrics>,
    /// Each shard's disk reserved ahead of its logs' data.
    #[serde(default)]
    pub shard_storage: Vec<ShardStorageMetrics>,
}

/// One shard's disk reserved ahead of its partitions' data, and its budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStorageMetrics {
    pub shard: usize,
    /// What the shard's active segments hold reserved (fallocate) ahead of
    /// their data and writes in flight.
    pub reserved_ahead_bytes: u64,
    /// The shard's share of `reserve_budget_bytes`.
    pub reserve_budget_bytes: u64,
    /// Reserved bytes idle partitions gave back, since start.
    pub reserve_released_bytes: u64,
}

/// The agent's queues of shard events (shards → control plane).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEventMetrics {
    /// Telemetry events (progress, statistics, checkpoints) dropped because
    /// a queue was full, since start.
    pub telemetry_dropped: u64,
    /// State events (acknowledgements, stops) sent and not yet acted on;
    /// these are never dropped.
    pub state_queued: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionMetrics {
    pub view: PartitionView,
    pub bytes_mirrored: u64,
    pub batches_mirrored: u64,
    pub epoch_bumps: u64,
    /// Batches refused for a bad CRC or framing (fetched again).
    pub crc_failures: u64,
    pub truncations: u64,
    /// Cuts because the source rewrote history we had mirrored.
    #[serde(default)]
    pub divergences: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MirrorMetrics {
    pub mirror: String,
    /// Fetch errors by Kafka error code.
    pub fetch_errors: std::collections::BTreeMap<i16, u64>,
    /// Fetch round-trip latency quantiles in microseconds: (quantile, value).
    pub fetch_latency_us: Vec<(f64, u64)>,
    pub fetches: u64,
    /// 1 when metadata sync is halted (such as a changed source cluster id).
    pub sync_halted: bool,
    /// Mirrored topics whose last round answered an authorization error.
    #[serde(default)]
    pub topic_sync_errors: usize,
    /// Mirrored topics absent at the source, deletion not confirmed yet.
    #[serde(default)]
    pub topic_deletions_pending: usize,
    /// Topics seen recreated at the source under a new topic id (each id once).
    #[serde(default)]
    pub topic_recreations: u64,
}

/// Why a request was refused. Each maps onto one HTTP status; over HTTP it
/// travels as an [`ErrorBody`] (its kind and message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("unknown mirror {mirror:?}")]
    UnknownMirror { mirror: String },
    #[error("mirror {mirror:?} exists")]
    MirrorExists { mirror: String },
    #[error("topic {topic:?} is not in mirror {mirror:?}")]
    TopicNotInMirror { mirror: String, topic: String },
    #[error("{mirror:?}: {topic:?} is already paused")]
    AlreadyPaused { mirror: String, topic: String },
    #[error("{mirror:?}: {topic:?} is not paused")]
    NotPaused { mirror: String, topic: String },
    #[error("{mirror:?}: {topic:?} is being stopped or is stopped")]
    BeingStopped { mirror: String, topic: String },
    #[error("{mirror:?}: {topic:?} has no FAILED partition to restart")]
    NotFailed { mirror: String, topic: String },
    #[error("{0}")]
    InvalidTransition(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl AdminError {
    /// The HTTP status this error answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::UnknownMirror { .. } | Self::TopicNotInMirror { .. } => 404,
            Self::MirrorExists { .. }
            | Self::AlreadyPaused { .. }
            | Self::NotPaused { .. }
            | Self::BeingStopped { .. }
            | Self::NotFailed { .. }
            | Self::InvalidTransition(_) => 409,
            Self::Invalid(_) => 400,
            Self::Unavailable(_) => 503,
            Self::Internal(_) => 500,
        }
    }
}

impl AdminError {
    /// The snake_case name of the error's kind: the `error` field of the
    /// HTTP API's error bodies (`{"error": kind, "message": Display}`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::UnknownMirror { .. } => "unknown_mirror",
            Self::MirrorExists { .. } => "mirror_exists",
            Self::TopicNotInMirror { .. } => "topic_not_in_mirror",
            Self::AlreadyPaused { .. } => "already_paused",
            Self::NotPaused { .. } => "not_paused",
            Self::BeingStopped { .. } => "being_stopped",
            Self::NotFailed { .. } => "not_failed",
            Self::InvalidTransition(_) => "invalid_transition",
            Self::Invalid(_) => "invalid",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }
}

/// The body of every error answer of the HTTP API: the error's
/// [kind](AdminError::kind) and its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
}

impl From<&AdminError> for ErrorBody {
    fn from(e: &AdminError) -> Self {
        Self {
            error: e.kind().into(),
            message: e.to_string(),
        }
    }
}

/// The body of the topic routes: topics to add or remove, or the topics a
/// pause, resume, stop or restart applies to (absent or empty: all of the
/// mirror's topics).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicsBody {
    #[serde(default)]
    pub topics: Vec<String>,
}

impl From<InvalidTransition> for AdminError {
    fn from(e: InvalidTransition) -> Self {
        Self::InvalidTransition(e.to_string())
    }
}

/// One ClusterMirror ACL as the admin API shows and takes it: who
/// (principal, host) may or may not (permission type) do what (operation)
/// to which mirrors (a name, `*`, or with PREFIXED a prefix of names).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorAcl {
    /// `User:<name>`, or `User:*` for every principal.
    pub principal: String,
    /// CREATE, ALTER, DESCRIBE or ALL (case-insensitive).
    pub operation: AclOperation,
    /// The mirror's name, `*` (every mirror), or a prefix.
    pub mirror: String,
    /// LITERAL (the default) or PREFIXED.
    #[serde(default = "literal")]
    pub pattern_type: PatternType,
    /// ALLOW (the default) or DENY.
    #[serde(default = "allow")]
    pub permission_type: AclPermissionType,
    /// The client's IP address, or `*` (the default): any.
    #[serde(default = "any_host")]
    pub host: String,
}

fn literal() -> PatternType {
    PatternType::Literal
}

fn allow() -> AclPermissionType {
    AclPermissionType::Allow
}

fn any_host() -> String {
    WILDCARD.into()
}

/// The operations a ClusterMirror ACL may name: those the admin API checks.
pub const MIRROR_ACL_OPERATIONS: [AclOperation; 4] = [
    AclOperation::All,
    AclOperation::Create,
    AclOperation::Alter,
    AclOperation::Describe,
];

impl MirrorAcl {
    /// The binding stored for it (resource type ClusterMirror).
    pub fn binding(&self) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::ClusterMirror,
            resource_name: self.mirror.clone(),
            pattern_type: self.pattern_type,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation,
            permission_type: self.permission_type,
        }
    }

    /// The ACL a ClusterMirror binding is (`None` for other types).
    pub fn from_binding(b: &AclBinding) -> Option<Self> {
        (b.resource_type == ResourceType::ClusterMirror).then(|| Self {
            principal: b.principal.clone(),
            operation: b.operation,
            mirror: b.resource_name.clone(),
            pattern_type: b.pattern_type,
            permission_type: b.permission_type,
            host: b.host.clone(),
        })
    }

    /// Whether it may be created: Kafka's rules for any binding, and an
    /// operation the admin API checks (a typo would grant nothing).
    pub fn validate(&self) -> Result<(), String> {
        if !MIRROR_ACL_OPERATIONS.contains(&self.operation) {
            return Err(format!(
                "a ClusterMirror ACL's operation is CREATE, ALTER, DESCRIBE or ALL, not {}",
                self.operation
            ));
        }
        self.binding().validate()
    }
}

/// The body of `POST /acls` and `DELETE /acls`: the ACLs to create or
/// delete (exactly these).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclsBody {
    pub acls: Vec<MirrorAcl>,
}
