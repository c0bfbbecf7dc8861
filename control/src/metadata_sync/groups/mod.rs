//! Group offset sync (issue 6; DESIGN.md, "MirrorMetadataManager"): once
//! per metadata round, the committed offsets of the source's consumer
//! groups, and the start offsets of its share groups, for the partitions
//! this mirror serves are written into our own group coordinator, so
//! consumers that fail over to the mirror resume where they were. Because
//! the mirror keeps the source's offsets, they are copied as they are,
//! never translated.
//!
//! One round ([`sync_group_offsets`]):
//!
//! 1. **List** the source's groups: ListGroups at every source broker (each
//!    lists the groups it coordinates), consumer groups (types `classic` and
//!    `consumer`; classic groups of another protocol type, such as Connect's,
//!    are not consumer groups) and, where the source speaks the share-group
//!    APIs (ApiVersions lists DescribeShareGroupOffsets, key 90), share
//!    groups in a listing of their own (ListGroups v5+ types filter). A
//!    name listed as more than one type is logged and skipped
//!    ([`GroupSyncReport::type_conflicts`]). A source that does not serve
//!    ListGroups (librdkafka's mock cluster) cannot be listed: only the
//!    groups the filter names are synced there, as consumer groups
//!    ([`GroupFilter::named`]).
//! 2. **Filter** the group ids ([`GroupFilter`]: named ids and an include
//!    regex, minus an exclude regex, whole ids; by default every group).
//!    Nothing is excluded by default: Kafka has no internal consumer
//!    groups, and offsets of internal topics (`__consumer_offsets`, …) are
//!    dropped anyway, since such topics are never mirrored.
//! 3. **Fetch** each group's offsets at its coordinator (FindCoordinator
//!    key type 0, batched from v4 — share groups too: Kafka's key type 2 is
//!    the share *coordinator* of share-partition state, not the group's;
//!    connections to other brokers are opened on demand and kept for the
//!    call). Consumer groups: OffsetFetch, batched by coordinator with v8+,
//!    one group per request before; sources speaking v7+ are asked for all
//!    of a group's offsets, older ones (and the mock, which mishandles
//!    "all") for the mirrored partitions by name. Share groups:
//!    DescribeShareGroupOffsets v0 for the mirrored partitions by name
//!    (Kafka 4.0 takes no null "all topics"), batched by coordinator; a
//!    partition without a start offset answers -1 and is left out. Only
//!    partitions in `mirrored` are kept.
//! 4. **Check the destination**. Where it holds share groups (it speaks
//!    DescribeShareGroupOffsets and AlterShareGroupOffsets), one ListGroups
//!    there says what each id is: a consumer group never overwrites a
//!    share group of the same name, nor a share group a consumer group —
//!    the group is logged and reported ([`GroupOutcome::TypeConflict`]) and
//!    the others go on. Consumer groups: DescribeGroups at our listener; a
//!    group in any state but Empty or Dead (a group the destination does
//!    not know is Dead) is active there and left alone
//!    ([`GroupOutcome::Active`]). Share groups: one listed in a state but
//!    Empty is left alone likewise (never, at our listener: it serves no
//!    share consumers).
//! 5. **Write** the rest at the destination, after reading what it holds
//!    (OffsetFetch; DescribeShareGroupOffsets) to drop partitions that
//!    already have the same offset (so a quiet group costs no writes).
//!    Consumer groups: an admin ("simple") commit — generation -1, no
//!    member id, as Kafka's `AdminClient.alterConsumerGroupOffsets` does —
//!    with each partition's committed leader epoch and metadata. Share
//!    groups: AlterShareGroupOffsets (as `AdminClient.alterShareGroupOffsets`),
//!    which creates the group at the destination if need be. An offset
//!    ahead of the destination's log end (the mirror lags) is written as it
//!    is: a consumer resuming there waits for the data rather than
//!    re-reading. At failover, before the partition takes writes, the
//!    data plane moves such an offset back to the mirrored log end
//!    (`GroupCoordinator::clamp_offsets_to_log_end`). A consumer that joins between the check and the commit
//!    is safe: the coordinator refuses a generation -1 commit to a group
//!    with members (UNKNOWN_MEMBER_ID, per partition in
//!    [`GroupOutcome::Synced::refused`]); likewise a group of the other
//!    type created meanwhile refuses the write (GROUP_ID_NOT_FOUND),
//!    reported as a type conflict for a share group.
//!
//! A destination without the share-group APIs gets no share groups: they
//! are reported as skipped ([`SHARE_GROUPS_UNSUPPORTED`]), never committed
//! as consumer groups.
//!
//! Errors: a failure of the `source` or `destination` connection itself
//! (I/O, framing), or a destination we cannot ask (no common version of
//! DescribeGroups or OffsetCommit), ends the round with `Err`, so the
//! caller reconnects. Everything else — an error code, another source
//! broker that cannot be reached, a version we share none of with a
//! source broker — is reported per group (or per broker, for listings) and
//! the round goes on.
//!
//! Connections to other source brokers use default [`ConnectionOptions`]
//! with the source connection's SASL credentials and TLS settings.
//!
//! Here: the filter, the report and the round; [`listing`] (groups at the
//! source and the destination), [`coordinators`] (source brokers, each
//! group's coordinator), [`offsets`] (the steps both kinds share),
//! [`consumer`] and [`share`] (what differs between them).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest};
use kafka_protocol::protocol::StrBytes;
use regex::Regex;
use ringmirror_dataplane::client::{ClientError, Connection, ConnectionOptions};

mod consumer;
mod coordinators;
mod listing;
mod offsets;
mod share;

use consumer::{ConsumerGroups, commit_at_destination};
use coordinators::SourceBrokers;
use listing::{destination_groups, list_source_groups, plan};
use offsets::fetch_source_offsets;
use share::{ShareGroups, alter_at_destination};

/// ListGroups v5 group types (case-insensitive on the wire).
const GROUP_TYPE_CLASSIC: &str = "classic";
const GROUP_TYPE_CONSUMER: &str = "consumer";
const GROUP_TYPE_SHARE: &str = "share";
/// The protocol type of consumer groups (classic groups of other types,
/// such as Kafka Connect's "connect", are not consumer groups).
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";
/// The protocol type Kafka lists share groups with (below ListGroups v5,
/// the only sign of one).
const SHARE_PROTOCOL_TYPE: &str = "share";
/// FindCoordinator key type of groups, share groups included (key type
/// 2, "share", finds the share coordinator of a share-partition's state).
const KEY_TYPE_GROUP: i8 = 0;
/// An admin commit: no generation, no member.
const ADMIN_GENERATION: i32 = -1;
/// Groups per batched request (FindCoordinator v4+, OffsetFetch v8+,
/// DescribeGroups), which keeps each answer small.
const GROUPS_PER_REQUEST: usize = 100;
/// Group-partitions per DescribeShareGroupOffsets request (each group
/// names every partition asked).
const SHARE_PARTITIONS_PER_REQUEST: usize = 10_000;
/// Group coordinator errors that are about the coordinator, not the group.
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const NOT_COORDINATOR: i16 = 16;
/// Why share groups are skipped where the destination cannot take them.
pub const SHARE_GROUPS_UNSUPPORTED: &str = "destination does not support share groups";
/// Group types in [`GroupOutcome::TypeConflict`].
pub const CONSUMER_GROUP: &str = "consumer";
pub const SHARE_GROUP: &str = "share";

/// The API versions used here (ours; the highest both sides speak wins).
const LIST_GROUPS_VERSIONS: (i16, i16) = (0, 5);
const FIND_COORDINATOR_VERSIONS: (i16, i16) = (0, 5);
const OFFSET_FETCH_VERSIONS: (i16, i16) = (1, 9);
const DESCRIBE_GROUPS_VERSIONS: (i16, i16) = (0, 6);
const CONSUMER_GROUP_DESCRIBE_VERSIONS: (i16, i16) = (0, 1);
const OFFSET_COMMIT_VERSIONS: (i16, i16) = (2, 9);
const DESCRIBE_SHARE_GROUP_OFFSETS_VERSIONS: (i16, i16) = (0, 0);
const ALTER_SHARE_GROUP_OFFSETS_VERSIONS: (i16, i16) = (0, 0);

/// Which group ids are synced: ids named explicitly and ids matching the
/// include regex, minus ids matching the exclude regex (which wins, also
/// over named ids). Regexes match whole ids. The default is every group.
#[derive(Debug, Clone)]
pub struct GroupFilter {
    named: BTreeSet<String>,
    include: Option<Regex>,
    exclude: Option<Regex>,
}

impl Default for GroupFilter {
    fn default() -> Self {
        Self::all()
    }
}

impl GroupFilter {
    /// Every group.
    pub fn all() -> Self {
        Self {
            named: BTreeSet::new(),
            include: Some(Regex::new(".*").expect("valid")),
            exclude: None,
        }
    }

    /// `named` ids, plus ids matching `include`, minus ids matching
    /// `exclude` (`None`: no include, no exclude).
    pub fn new(
        named: impl IntoIterator<Item = impl Into<String>>,
        include: Option<&str>,
        exclude: Option<&str>,
    ) -> Result<Self, regex::Error> {
        let whole = |r: &str| Regex::new(&format!("^(?:{r})$"));
        Ok(Self {
            named: named.into_iter().map(Into::into).collect(),
            include: include.map(whole).transpose()?,
            exclude: exclude.map(whole).transpose()?,
        })
    }

    pub fn wants(&self, group: &str) -> bool {
        (self.named.contains(group) || self.include.as_ref().is_some_and(|r| r.is_match(group)))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(group))
    }

    /// Ids named explicitly: the only groups synced from a source that
    /// cannot list its groups.
    pub fn named(&self) -> &BTreeSet<String> {
        &self.named
    }
}

/// What became of one group in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupOutcome {
    /// Written at the destination (committed offsets of a consumer group,
    /// start offsets of a share group): `committed` partitions written,
    /// `unchanged` ones already there with the same offset, and partitions
    /// the destination refused (error code; UNKNOWN_TOPIC_OR_PARTITION for
    /// a partition it does not serve yet, UNKNOWN_MEMBER_ID when a consumer
    /// joined since the check).
    Synced {
        committed: usize,
        unchanged: usize,
        refused: BTreeMap<(String, i32), i16>,
    },
    /// Left alone: active at the destination, in this state.
    Active { state: String },
    /// Left alone: the destination holds a group of another type under
    /// this id (`source` and `destination` are [`CONSUMER_GROUP`] or
    /// [`SHARE_GROUP`]); a consumer group never overwrites a share group,
    /// nor the other way round.
    TypeConflict { source: String, destination: String },
    /// Not a group this sync writes (a share group the destination cannot
    /// take, another group type).
    Skipped { reason: String },
    /// Not synced this round.
    Failed { error: String },
}

impl GroupOutcome {
    /// Synced with nothing to write: `unchanged` partitions already there.
    fn nothing_written(unchanged: usize) -> Self {
        GroupOutcome::Synced {
            committed: 0,
            unchanged,
            refused: BTreeMap::new(),
        }
    }
}

/// One round's result, per group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSyncReport {
    /// Every group the filter wants that the source listed (or, for a
    /// source that cannot list, that the filter names).
    pub groups: BTreeMap<String, GroupOutcome>,
    /// Group ids the source listed as more than one group type (a consumer
    /// group and a share group of the same name): logged and skipped. (A
    /// conflict with the destination is the group's outcome,
    /// [`GroupOutcome::TypeConflict`].)
    pub type_conflicts: BTreeSet<String>,
    /// Whether the source listed its groups (ListGroups).
    pub listed: bool,
    /// Source brokers whose groups could not be listed this round.
    pub listing_errors: Vec<String>,
}

impl GroupSyncReport {
    /// Partitions committed at the destination, over all groups.
    pub fn committed(&self) -> usize {
        self.groups
            .values()
            .map(|o| match o {
                GroupOutcome::Synced { committed, .. } => *committed,
                _ => 0,
            })
            .sum()
    }

    pub fn outcome(&self, group: &str) -> Option<&GroupOutcome> {
        self.groups.get(group)
    }
}

/// Whether `e` means the connection itself is unusable (as opposed to an
/// answer we could not use).
fn connection_failed(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Io { .. }
            | ClientError::Resolve { .. }
            | ClientError::FrameTooLarge { .. }
            | ClientError::CorrelationMismatch { .. }
    )
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Syncs the committed offsets of the source's consumer groups (those
/// `groups` wants) for the `mirrored` (topic, partition)s into the
/// destination's group coordinator; see the module documentation.
///
/// `source` is a connection to any source broker; `destination` one to our
/// own listener, the coordinator of every group. Returns `Err` only when
/// one of those two connections fails, or the destination speaks no common
/// version of the group APIs; the rest is in the report.
pub async fn sync_group_offsets(
    source: &mut Connection,
    destination: &mut Connection,
    mirrored: &BTreeSet<(String, i32)>,
    groups: &GroupFilter,
) -> Result<GroupSyncReport, ClientError> {
    let mut report = GroupSyncReport::default();
    if mirrored.is_empty() {
        return Ok(report);
    }
    let share_destination = takes_share_groups(destination);
    // Other source brokers are reached with the source connection's
    // credentials and TLS settings.
    let options = ConnectionOptions {
        client_id: "ringmirror-group-sync".into(),
        sasl: source.options().sasl.clone(),
        tls: source.options().tls.clone(),
        ..ConnectionOptions::default()
    };
    let mut brokers = SourceBrokers {
        source,
        options,
        others: HashMap::new(),
    };
    let listing = list_source_groups(&mut brokers, &mut report).await?;
    let unsupported = (!share_destination).then_some(SHARE_GROUPS_UNSUPPORTED);
    let planned = plan(listing, groups, unsupported, &mut report);
    if planned.consumer.is_empty() && planned.share.is_empty() {
        return Ok(report);
    }
    // Only a destination with share groups can hold an id as another type.
    let held = if share_destination {
        destination_groups(destination).await?
    } else {
        None
    };
    if !planned.consumer.is_empty() {
        let source_offsets =
            fetch_source_offsets::<ConsumerGroups>(&mut brokers, &planned.consumer, mirrored, &mut report).await?;
        commit_at_destination(destination, source_offsets, held.as_ref(), &mut report).await?;
    }
    if !planned.share.is_empty() {
        let source_offsets =
            fetch_source_offsets::<ShareGroups>(&mut brokers, &planned.share, mirrored, &mut report).await?;
        alter_at_destination(destination, source_offsets, held.as_ref(), &mut report).await?;
    }
    let failed = report
        .groups
        .values()
        .filter(|o| matches!(o, GroupOutcome::Failed { .. }))
        .count();
    tracing::debug!(
        groups = report.groups.len(),
        committed = report.committed(),
        failed,
        conflicts = report.type_conflicts.len(),
        "group offsets synced"
    );
    Ok(report)
}

/// Whether the destination takes share groups' start offsets: it speaks
/// DescribeShareGroupOffsets and AlterShareGroupOffsets at versions we do.
fn takes_share_groups(destination: &Connection) -> bool {
    let (min, max) = DESCRIBE_SHARE_GROUP_OFFSETS_VERSIONS;
    let describe = destination.version_for::<DescribeShareGroupOffsetsRequest>(min, max);
    let (min, max) = ALTER_SHARE_GROUP_OFFSETS_VERSIONS;
    let alter = destination.version_for::<AlterShareGroupOffsetsRequest>(min, max);
    describe.is_ok() && alter.is_ok()
}

fn fail(report: &mut GroupSyncReport, group: String, error: String) {
    tracing::warn!(group, error, "group offsets not synced this round");
    report.groups.insert(group, GroupOutcome::Failed { error });
}

fn conflict(report: &mut GroupSyncReport, group: String, source: &str, destination: &str) {
    tracing::warn!(
        group,
        source,
        destination,
        "a {source} group at the source, a {destination} group of the same id at the destination; not synced"
    );
    report.groups.insert(
        group,
        GroupOutcome::TypeConflict {
            source: source.to_owned(),
            destination: destination.to_owned(),
        },
    );
}

#[cfg(test)]
mod tests;
