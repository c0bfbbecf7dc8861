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
//!    re-reading. A consumer that joins between the check and the commit
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
//! with the source connection's SASL credentials (no TLS yet).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::describe_share_group_offsets_request::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey, DescribeGroupsRequest,
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};
use regex::Regex;
use ringmirror_dataplane::client::error_codes as codes;
use ringmirror_dataplane::client::{ClientError, Connection, ConnectionOptions};
use ringmirror_dataplane::fetch::fetch_source_metadata;

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

/// A committed offset as OffsetFetch answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Committed {
    offset: i64,
    leader_epoch: i32,
    metadata: Option<String>,
}

impl Committed {
    /// The same commit, whether the metadata is null or empty (brokers
    /// store one as the other).
    fn same_as(&self, other: &Committed) -> bool {
        self.offset == other.offset
            && self.leader_epoch == other.leader_epoch
            && self.metadata.as_deref().unwrap_or_default() == other.metadata.as_deref().unwrap_or_default()
    }
}

/// Offsets by (topic, partition).
type ByPartition<O> = BTreeMap<(String, i32), O>;
type Offsets = ByPartition<Committed>;
/// Each group asked, and its offsets as read or why they were not.
type ReadResults<O> = Vec<(String, Result<ByPartition<O>, String>)>;
/// Partitions by topic, as requests list them.
type Topics = Vec<(String, Vec<i32>)>;

/// What the source says a listed group is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum GroupKind {
    Consumer,
    Share,
    Other(String),
}

/// A listed group's kind from the listing it came from, its group type
/// (v5+, may be empty) and protocol type; `None` for a classic group that
/// is not a consumer group (Connect's workers).
fn kind_of(share_listing: bool, group_type: &str, protocol_type: &str) -> Option<GroupKind> {
    let group_type = group_type.to_ascii_lowercase();
    match group_type.as_str() {
        GROUP_TYPE_SHARE => Some(GroupKind::Share),
        "" if share_listing => Some(GroupKind::Share),
        "" | GROUP_TYPE_CLASSIC => {
            (protocol_type.is_empty() || protocol_type == CONSUMER_PROTOCOL_TYPE).then_some(GroupKind::Consumer)
        }
        GROUP_TYPE_CONSUMER => Some(GroupKind::Consumer),
        _ => Some(GroupKind::Other(group_type)),
    }
}

/// Every kind each group id was listed as.
type Listing = BTreeMap<String, BTreeSet<GroupKind>>;

/// The groups a round writes, by type.
#[derive(Debug, Default, PartialEq, Eq)]
struct Planned {
    consumer: Vec<String>,
    share: Vec<String>,
}

/// Sorts what the source listed (`None`: it cannot list) into the consumer
/// and share groups to sync, and outcomes for the rest; share groups are
/// skipped for `share_unsupported` (why the destination cannot take them).
fn plan(
    listing: Option<Listing>,
    filter: &GroupFilter,
    share_unsupported: Option<&str>,
    report: &mut GroupSyncReport,
) -> Planned {
    report.listed = listing.is_some();
    let mut listing = listing.unwrap_or_default();
    // Named groups are synced even when not listed (their broker may not
    // have answered); a named group listed as another type stays that.
    for group in filter.named() {
        listing
            .entry(group.clone())
            .or_insert_with(|| BTreeSet::from([GroupKind::Consumer]));
    }
    let mut planned = Planned::default();
    for (group, kinds) in listing {
        if !filter.wants(&group) {
            continue;
        }
        if kinds.len() > 1 {
            tracing::warn!(group, kinds = ?kinds, "the source lists this group id as more than one group type; not synced");
            report.type_conflicts.insert(group);
            continue;
        }
        match kinds.into_iter().next() {
            Some(GroupKind::Consumer) => planned.consumer.push(group),
            Some(GroupKind::Share) => match share_unsupported {
                None => planned.share.push(group),
                Some(reason) => {
                    tracing::debug!(group, reason, "share group not synced");
                    report.groups.insert(
                        group,
                        GroupOutcome::Skipped {
                            reason: format!("share group: {reason}"),
                        },
                    );
                }
            },
            Some(GroupKind::Other(group_type)) => {
                report.groups.insert(
                    group,
                    GroupOutcome::Skipped {
                        reason: format!("group type {group_type:?} is not synced"),
                    },
                );
            }
            None => {}
        }
    }
    planned
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

/// The source connection and connections to other source brokers, opened
/// on demand and kept for one round.
struct SourceBrokers<'a> {
    source: &'a mut Connection,
    options: ConnectionOptions,
    others: HashMap<String, Connection>,
}

impl SourceBrokers<'_> {
    fn is_source(&self, addr: &str) -> bool {
        addr == self.source.addr()
    }

    async fn get(&mut self, addr: &str) -> Result<&mut Connection, ClientError> {
        if self.is_source(addr) {
            return Ok(&mut *self.source);
        }
        if !self.others.contains_key(addr) {
            let conn = Connection::connect(addr, self.options.clone()).await?;
            self.others.insert(addr.to_owned(), conn);
        }
        Ok(self.others.get_mut(addr).expect("connected above"))
    }

    /// After `e` at `addr`: `Err` when the source connection itself failed
    /// (the round ends), else what to report (a failed connection to
    /// another broker is dropped).
    fn failed(&mut self, addr: &str, e: ClientError) -> Result<String, ClientError> {
        if connection_failed(&e) {
            if self.is_source(addr) {
                return Err(e);
            }
            self.others.remove(addr);
        }
        Ok(e.to_string())
    }
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

// ---- listing ----

/// Every source broker's groups; `None` when the source does not serve
/// ListGroups.
async fn list_source_groups(
    brokers: &mut SourceBrokers<'_>,
    report: &mut GroupSyncReport,
) -> Result<Option<Listing>, ClientError> {
    if !brokers.source.advertises(ApiKey::ListGroups as i16) {
        return Ok(None);
    }
    let with_share = brokers.source.advertises(ApiKey::DescribeShareGroupOffsets as i16);
    let metadata = match fetch_source_metadata(brokers.source, Some(&[])).await {
        Ok(m) => m,
        Err(e) if connection_failed(&e) => return Err(e),
        Err(e) => {
            report.listing_errors.push(format!("{}: {e}", brokers.source.addr()));
            return Ok(Some(Listing::new()));
        }
    };
    let mut addrs: BTreeSet<String> = metadata.brokers.into_values().collect();
    if addrs.is_empty() {
        addrs.insert(brokers.source.addr().to_owned());
    }
    let mut listing = Listing::new();
    for addr in addrs {
        let listed = match brokers.get(&addr).await {
            Ok(conn) => list_at(conn, with_share).await,
            Err(e) => Err(e),
        };
        match listed {
            Ok(groups) => {
                for (group, kind) in groups {
                    listing.entry(group).or_default().insert(kind);
                }
            }
            Err(e) => {
                let error = brokers.failed(&addr, e)?;
                tracing::warn!(broker = addr, error, "cannot list the groups of a source broker");
                report.listing_errors.push(format!("{addr}: {error}"));
            }
        }
    }
    Ok(Some(listing))
}

/// The ListGroups requests for one broker: (share listing, request).
fn list_groups_requests(version: i16, with_share: bool) -> Vec<(bool, ListGroupsRequest)> {
    if version < 5 {
        // No types filter: every group is classic.
        return vec![(false, ListGroupsRequest::default())];
    }
    let types = |t: &[&'static str]| t.iter().map(|t| StrBytes::from_static_str(t)).collect();
    let mut requests = vec![(
        false,
        ListGroupsRequest::default().with_types_filter(types(&[GROUP_TYPE_CLASSIC, GROUP_TYPE_CONSUMER])),
    )];
    if with_share {
        requests.push((
            true,
            ListGroupsRequest::default().with_types_filter(types(&[GROUP_TYPE_SHARE])),
        ));
    }
    requests
}

fn listed_groups(share_listing: bool, response: &ListGroupsResponse) -> Vec<(String, GroupKind)> {
    response
        .groups
        .iter()
        .filter_map(|g| {
            kind_of(share_listing, &g.group_type, &g.protocol_type).map(|kind| (g.group_id.0.to_string(), kind))
        })
        .collect()
}

/// One broker's consumer groups (and share groups, `with_share`).
async fn list_at(conn: &mut Connection, with_share: bool) -> Result<Vec<(String, GroupKind)>, ClientError> {
    let (min, max) = LIST_GROUPS_VERSIONS;
    let version = conn.version_for::<ListGroupsRequest>(min, max)?;
    let mut groups = Vec::new();
    for (share_listing, request) in list_groups_requests(version, with_share) {
        let response = conn.request(&request, version).await?;
        if response.error_code != codes::NONE {
            return Err(ClientError::ErrorCode {
                addr: conn.addr().into(),
                api: "ListGroups",
                code: response.error_code,
            });
        }
        groups.extend(listed_groups(share_listing, &response));
    }
    Ok(groups)
}

// ---- what differs between the two kinds of groups ----

/// The offsets of one kind of group and the APIs that read and write them
/// (consumer groups: committed offsets, OffsetFetch and OffsetCommit;
/// share groups: start offsets, DescribeShareGroupOffsets and
/// AlterShareGroupOffsets). The steps around them — each group read at its
/// coordinator, batching, failures, writing only what changed — are the
/// same for both and written once, over this trait.
trait GroupOffsets {
    /// One partition's offset, as read and written.
    type Offset;
    type Read: Request;
    type Write: Request;
    /// API names, for errors.
    const READ_API: &'static str;
    const WRITE_API: &'static str;
    /// Our versions of the two APIs.
    const READ_VERSIONS: (i16, i16);
    const WRITE_VERSIONS: (i16, i16);
    /// What the offsets are, for logs.
    const WHAT: &'static str;

    /// The position `offset` sets (negative: none).
    fn position(offset: &Self::Offset) -> i64;
    /// Groups per read request at `version` when each names up to
    /// `partitions` partitions.
    fn groups_per_read(version: i16, partitions: usize) -> usize;
    /// The read of `asks` (groups, each with its partitions): all of each
    /// group's offsets instead when `all` and the API can.
    fn read_request(version: i16, asks: &[(String, Topics)], all: bool) -> Self::Read;
    /// The offsets in a read answer for each group `asked` (in order),
    /// those in `keep` only.
    fn read_answers(
        version: i16,
        asked: &[String],
        response: &<Self::Read as Request>::Response,
        keep: &BTreeSet<(String, i32)>,
    ) -> ReadResults<Self::Offset>;
    /// Whether the destination holds `source`'s offset already (`held`).
    fn unchanged(held: &Self::Offset, source: &Self::Offset) -> bool;
    fn write_request(version: i16, group: &str, offsets: &ByPartition<Self::Offset>) -> Self::Write;
    /// What a write did: (written, refused), or the group's outcome when it
    /// was refused as a whole.
    fn written(response: &<Self::Write as Request>::Response) -> Result<Written, GroupOutcome>;
}

/// Consumer groups' committed offsets.
struct ConsumerGroups;
/// Share groups' start offsets.
struct ShareGroups;

// ---- source offsets ----

/// Sorted (topic, partition) keys and their values by topic, as requests
/// list them.
fn by_topic_with<'a, V>(entries: impl IntoIterator<Item = (&'a (String, i32), V)>) -> Vec<(&'a str, Vec<(i32, V)>)> {
    let mut topics: Vec<(&str, Vec<(i32, V)>)> = Vec::new();
    for ((topic, partition), value) in entries {
        match topics.last_mut() {
            Some((t, ps)) if *t == topic => ps.push((*partition, value)),
            _ => topics.push((topic, vec![(*partition, value)])),
        }
    }
    topics
}

/// The mirrored partitions by topic.
fn by_topic<'a>(partitions: impl IntoIterator<Item = &'a (String, i32)>) -> Topics {
    by_topic_with(partitions.into_iter().map(|tp| (tp, ())))
        .into_iter()
        .map(|(topic, ps)| (topic.to_owned(), ps.into_iter().map(|(p, ())| p).collect()))
        .collect()
}

/// The offsets of `groups` (of kind `K`) at the source, each read at its
/// coordinator, for `mirrored` partitions; groups that fail are reported
/// and left out.
async fn fetch_source_offsets<K: GroupOffsets>(
    brokers: &mut SourceBrokers<'_>,
    groups: &[String],
    mirrored: &BTreeSet<(String, i32)>,
    report: &mut GroupSyncReport,
) -> Result<BTreeMap<String, ByPartition<K::Offset>>, ClientError> {
    let coordinators = find_coordinators(brokers, groups).await?;
    let mut by_coordinator: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (group, coordinator) in coordinators {
        match coordinator {
            Ok(addr) => by_coordinator.entry(addr).or_default().push(group),
            Err(error) => fail(report, group, format!("no coordinator at the source: {error}")),
        }
    }
    let topics = by_topic(mirrored);
    let mut out = BTreeMap::new();
    for (addr, groups) in by_coordinator {
        let asks: Vec<(String, Topics)> = groups.iter().map(|g| (g.clone(), topics.clone())).collect();
        let read = match brokers.get(&addr).await {
            // All of each group's offsets where the API can: one answer
            // whatever the partitions mirrored.
            Ok(conn) => read_offsets::<K>(conn, &asks, true, mirrored).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(results) => {
                for (group, offsets) in results {
                    match offsets {
                        Ok(offsets) => {
                            out.insert(group, offsets);
                        }
                        Err(error) => fail(report, group, format!("{} at the source: {error}", K::READ_API)),
                    }
                }
            }
            Err(e) => {
                let error = brokers.failed(&addr, e)?;
                for group in groups {
                    fail(
                        report,
                        group,
                        format!("{} at the source ({addr}): {error}", K::READ_API),
                    );
                }
            }
        }
    }
    Ok(out)
}

fn fail(report: &mut GroupSyncReport, group: String, error: String) {
    tracing::warn!(group, error, "group offsets not synced this round");
    report.groups.insert(group, GroupOutcome::Failed { error });
}

/// Each group's coordinator ("host:port") at the source, or why not.
async fn find_coordinators(
    brokers: &mut SourceBrokers<'_>,
    groups: &[String],
) -> Result<BTreeMap<String, Result<String, String>>, ClientError> {
    let source_addr = brokers.source.addr().to_owned();
    if !brokers.source.advertises(ApiKey::FindCoordinator as i16) {
        return Ok(groups.iter().map(|g| (g.clone(), Ok(source_addr.clone()))).collect());
    }
    let (min, max) = FIND_COORDINATOR_VERSIONS;
    let version = match brokers.source.version_for::<FindCoordinatorRequest>(min, max) {
        Ok(v) => v,
        Err(e) => return Ok(groups.iter().map(|g| (g.clone(), Err(e.to_string()))).collect()),
    };
    let mut out = BTreeMap::new();
    let chunk = if version >= 4 { GROUPS_PER_REQUEST } else { 1 };
    for keys in groups.chunks(chunk) {
        let request = find_coordinator_request(version, keys);
        match brokers.source.request(&request, version).await {
            Ok(response) => out.extend(coordinators_from(version, keys, &response)),
            Err(e) => {
                let error = brokers.failed(&source_addr, e)?;
                out.extend(keys.iter().map(|k| (k.clone(), Err(error.clone()))));
            }
        }
    }
    Ok(out)
}
fn find_coordinator_request(version: i16, keys: &[String]) -> FindCoordinatorRequest {
    let request = FindCoordinatorRequest::default();
    let request = if version >= 1 {
        request.with_key_type(KEY_TYPE_GROUP)
    } else {
        request
    };
    if version >= 4 {
        request.with_coordinator_keys(keys.iter().map(|k| s(k)).collect())
    } else {
        request.with_key(s(&keys[0]))
    }
}

fn coordinators_from(
    version: i16,
    keys: &[String],
    response: &FindCoordinatorResponse,
) -> Vec<(String, Result<String, String>)> {
    let answer = |code: i16, host: &StrBytes, port: i32| {
        if code != codes::NONE {
            Err(format!("FindCoordinator error code {code}"))
        } else {
            Ok(format!("{host}:{port}"))
        }
    };
    if version < 4 {
        return vec![(
            keys[0].clone(),
            answer(response.error_code, &response.host, response.port),
        )];
    }
    keys.iter()
        .map(|key| {
            let found = response
                .coordinators
                .iter()
                .find(|c| c.key.as_str() == key.as_str())
                .map_or_else(
                    || Err("FindCoordinator did not answer for the group".to_owned()),
                    |c| answer(c.error_code, &c.host, c.port),
                );
            (key.clone(), found)
        })
        .collect()
}

/// The OffsetFetch request of `version` for `groups` (one below v8): all
/// of each group's offsets when `all` (v7+ only), else `topics`.
fn offset_fetch_request(version: i16, groups: &[(String, Topics)], all: bool) -> OffsetFetchRequest {
    let all = all && version >= 7;
    let request = OffsetFetchRequest::default();
    let request = if version >= 7 {
        request.with_require_stable(false)
    } else {
        request
    };
    if version >= 8 {
        let groups = groups
            .iter()
            .map(|(group, topics)| {
                let topics = (!all).then(|| {
                    topics
                        .iter()
                        .map(|(t, ps)| {
                            OffsetFetchRequestTopics::default()
                                .with_name(TopicName(s(t)))
                                .with_partition_indexes(ps.clone())
                        })
                        .collect()
                });
                let g = OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(group)))
                    .with_topics(topics);
                if version >= 9 {
                    g.with_member_id(None).with_member_epoch(-1)
                } else {
                    g
                }
            })
            .collect();
        return request.with_groups(groups);
    }
    let (group, topics) = &groups[0];
    let topics = (!all).then(|| {
        topics
            .iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s(t)))
                    .with_partition_indexes(ps.clone())
            })
            .collect()
    });
    request.with_group_id(GroupId(s(group))).with_topics(topics)
}

/// One group's offsets in a read answer, each partition as (topic,
/// partition, error code, offset): those set (≥ 0), without error and in
/// `keep`. A coordinator error (loading, moved) fails the group, asked
/// again next round; another error leaves its partition out.
fn kept_offsets<'a, K: GroupOffsets>(
    keep: &BTreeSet<(String, i32)>,
    partitions: impl IntoIterator<Item = (&'a str, i32, i16, K::Offset)>,
) -> Result<ByPartition<K::Offset>, String> {
    let mut out = ByPartition::new();
    for (topic, partition, error_code, offset) in partitions {
        match error_code {
            codes::NONE => {}
            COORDINATOR_LOAD_IN_PROGRESS | codes::COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR => {
                return Err(format!("{} error code {error_code}", K::READ_API));
            }
            code => {
                tracing::debug!(topic, partition, code, "no {} read (partition error)", K::WHAT);
                continue;
            }
        }
        let tp = (topic.to_owned(), partition);
        if K::position(&offset) >= 0 && keep.contains(&tp) {
            out.insert(tp, offset);
        }
    }
    Ok(out)
}

/// Each group `asked` (in order) in the per-group answers of a batched
/// read (`id` names each answer), its offsets read by `offsets`.
fn per_group<G, O>(
    api: &str,
    asked: &[String],
    answers: &[G],
    id: impl Fn(&G) -> &str,
    offsets: impl Fn(&G) -> Result<ByPartition<O>, String>,
) -> ReadResults<O> {
    asked
        .iter()
        .map(|group| {
            let found = answers.iter().find(|g| id(g) == group.as_str());
            let offsets = found.map_or_else(|| Err(format!("{api} did not answer for the group")), &offsets);
            (group.clone(), offsets)
        })
        .collect()
}

/// The committed offsets in an OffsetFetch answer of `version` for each
/// group asked (`asked`, in order), those in `keep` only.
fn offsets_from(
    version: i16,
    asked: &[String],
    response: &OffsetFetchResponse,
    keep: &BTreeSet<(String, i32)>,
) -> ReadResults<Committed> {
    let group_error = |code: i16| match code {
        // Not there (any more): nothing committed.
        codes::NONE | codes::GROUP_ID_NOT_FOUND => Ok(()),
        code => Err(format!("OffsetFetch error code {code}")),
    };
    let committed = |offset, leader_epoch, metadata: &Option<StrBytes>| Committed {
        offset,
        leader_epoch,
        metadata: metadata.as_ref().map(|m| m.to_string()),
    };
    if version >= 8 {
        return per_group(
            ConsumerGroups::READ_API,
            asked,
            &response.groups,
            |g| g.group_id.0.as_str(),
            |g| {
                group_error(g.error_code)?;
                kept_offsets::<ConsumerGroups>(
                    keep,
                    g.topics.iter().flat_map(|t| {
                        t.partitions.iter().map(|p| {
                            let c = committed(p.committed_offset, p.committed_leader_epoch, &p.metadata);
                            (t.name.0.as_str(), p.partition_index, p.error_code, c)
                        })
                    }),
                )
            },
        );
    }
    let group = asked[0].clone();
    if version >= 2
        && let Err(e) = group_error(response.error_code)
    {
        return vec![(group, Err(e))];
    }
    let kept = kept_offsets::<ConsumerGroups>(
        keep,
        response.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| {
                let c = committed(p.committed_offset, p.committed_leader_epoch, &p.metadata);
                (t.name.0.as_str(), p.partition_index, p.error_code, c)
            })
        }),
    );
    vec![(group, kept)]
}

/// Offsets of kind `K` of `asks` (groups, each with its partitions) at
/// `conn`, their coordinator, in batches — all of each group's instead
/// when `all` and the API can; those in `keep` only.
async fn read_offsets<K: GroupOffsets>(
    conn: &mut Connection,
    asks: &[(String, Topics)],
    all: bool,
    keep: &BTreeSet<(String, i32)>,
) -> Result<ReadResults<K::Offset>, ClientError> {
    let (min, max) = K::READ_VERSIONS;
    let version = conn.version_for::<K::Read>(min, max)?;
    let widest = asks
        .iter()
        .map(|(_, ts)| ts.iter().map(|(_, ps)| ps.len()).sum::<usize>())
        .max()
        .unwrap_or(0);
    let mut out = Vec::with_capacity(asks.len());
    for batch in asks.chunks(K::groups_per_read(version, widest)) {
        let response = conn.request(&K::read_request(version, batch, all), version).await?;
        let asked: Vec<String> = batch.iter().map(|(g, _)| g.clone()).collect();
        out.extend(K::read_answers(version, &asked, &response, keep));
    }
    Ok(out)
}

// ---- destination ----

/// Whether a group in `state` (DescribeGroups) may take an admin commit.
fn is_inactive(state: &str) -> bool {
    state.eq_ignore_ascii_case("Empty") || state.eq_ignore_ascii_case("Dead")
}

/// Each group's state at the destination ("Dead" when unknown there), or
/// the error it was described with.
async fn destination_states(
    destination: &mut Connection,
    groups: &[String],
) -> Result<BTreeMap<String, Result<String, String>>, ClientError> {
    let (min, max) = DESCRIBE_GROUPS_VERSIONS;
    let version = destination.version_for::<DescribeGroupsRequest>(min, max)?;
    let mut out = BTreeMap::new();
    for batch in groups.chunks(GROUPS_PER_REQUEST) {
        let request = DescribeGroupsRequest::default().with_groups(batch.iter().map(|g| GroupId(s(g))).collect());
        let response = destination.request(&request, version).await?;
        for group in batch {
            let state = match response.groups.iter().find(|d| d.group_id.0.as_str() == group.as_str()) {
                None => Err("DescribeGroups did not answer for the group".to_owned()),
                Some(d) => match d.error_code {
                    codes::NONE => Ok(d.group_state.to_string()),
                    codes::GROUP_ID_NOT_FOUND => Ok("Dead".to_owned()),
                    code => Err(format!("DescribeGroups error code {code}")),
                },
            };
            out.insert(group.clone(), state);
        }
    }
    Ok(out)
}

/// The admin commit of `offsets` to `group`, at `version`.
fn offset_commit_request(version: i16, group: &str, offsets: &Offsets) -> OffsetCommitRequest {
    let topics = by_topic_with(offsets)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition, c)| {
                    let p = OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(c.offset)
                        .with_committed_metadata(c.metadata.as_deref().map(s));
                    if version >= 6 {
                        p.with_committed_leader_epoch(c.leader_epoch)
                    } else {
                        p
                    }
                })
                .collect();
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(partitions)
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(ADMIN_GENERATION)
        .with_member_id(StrBytes::default())
        .with_topics(topics);
    if version <= 4 {
        // "Keep for the broker's default retention."
        request.with_retention_time_ms(-1)
    } else {
        request
    }
}

/// Partitions written, and those refused with their error codes.
type Written = (usize, BTreeMap<(String, i32), i16>);

/// What a write answer's partitions — (topic, partition, error code) —
/// say was written and refused.
fn written<'a>(partitions: impl IntoIterator<Item = (&'a str, i32, i16)>) -> Written {
    let mut written = 0;
    let mut refused = BTreeMap::new();
    for (topic, partition, error_code) in partitions {
        if error_code == codes::NONE {
            written += 1;
        } else {
            refused.insert((topic.to_owned(), partition), error_code);
        }
    }
    (written, refused)
}

/// (committed, refused) from an OffsetCommit answer.
fn commit_results(response: &OffsetCommitResponse) -> Written {
    written(response.topics.iter().flat_map(|t| {
        t.partitions
            .iter()
            .map(move |p| (t.name.0.as_str(), p.partition_index, p.error_code))
    }))
}

impl GroupOffsets for ConsumerGroups {
    type Offset = Committed;
    type Read = OffsetFetchRequest;
    type Write = OffsetCommitRequest;
    const READ_API: &'static str = "OffsetFetch";
    const WRITE_API: &'static str = "OffsetCommit";
    const READ_VERSIONS: (i16, i16) = OFFSET_FETCH_VERSIONS;
    const WRITE_VERSIONS: (i16, i16) = OFFSET_COMMIT_VERSIONS;
    const WHAT: &'static str = "committed offsets";

    fn position(offset: &Committed) -> i64 {
        offset.offset
    }

    fn groups_per_read(version: i16, _partitions: usize) -> usize {
        if version >= 8 { GROUPS_PER_REQUEST } else { 1 }
    }

    fn read_request(version: i16, asks: &[(String, Topics)], all: bool) -> OffsetFetchRequest {
        offset_fetch_request(version, asks, all)
    }

    fn read_answers(
        version: i16,
        asked: &[String],
        response: &OffsetFetchResponse,
        keep: &BTreeSet<(String, i32)>,
    ) -> ReadResults<Committed> {
        offsets_from(version, asked, response, keep)
    }

    fn unchanged(held: &Committed, source: &Committed) -> bool {
        held.same_as(source)
    }

    fn write_request(version: i16, group: &str, offsets: &Offsets) -> OffsetCommitRequest {
        offset_commit_request(version, group, offsets)
    }

    fn written(response: &OffsetCommitResponse) -> Result<Written, GroupOutcome> {
        Ok(commit_results(response))
    }
}

/// Commits the source's offsets of each group that is not active at the
/// destination, nor a share group there (`held`: what the destination
/// lists, where it may hold share groups), where they differ from what the
/// destination holds.
async fn commit_at_destination(
    destination: &mut Connection,
    source_offsets: BTreeMap<String, Offsets>,
    held: Option<&HeldGroups>,
    report: &mut GroupSyncReport,
) -> Result<(), ClientError> {
    let mut candidates = BTreeMap::new();
    for (group, offsets) in source_offsets {
        // A group named but not listed (a source that cannot list) may not
        // exist there: only one with offsets is in conflict.
        let exists = report.listed || !offsets.is_empty();
        if exists && held.and_then(|h| h.get(&group)).is_some_and(|g| g.share) {
            conflict(report, group, CONSUMER_GROUP, SHARE_GROUP);
        } else if offsets.is_empty() {
            report.groups.insert(group, GroupOutcome::nothing_written(0));
        } else {
            candidates.insert(group, offsets);
        }
    }
    if candidates.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = candidates.keys().cloned().collect();
    let states = destination_states(destination, &names).await?;
    let mut inactive = BTreeMap::new();
    for (group, offsets) in candidates {
        match states.get(&group) {
            Some(Ok(state)) if is_inactive(state) => {
                inactive.insert(group, offsets);
            }
            Some(Ok(state)) => {
                tracing::debug!(group, state, "group active at the destination; offsets not synced");
                report
                    .groups
                    .insert(group, GroupOutcome::Active { state: state.clone() });
            }
            Some(Err(error)) => fail(report, group, format!("at the destination: {error}")),
            None => fail(report, group, "not described at the destination".into()),
        }
    }
    write_changed::<ConsumerGroups>(destination, inactive, report).await
}

/// Writes the source's offsets (`groups`, of kind `K`) at the destination,
/// after reading what it holds, so a partition that already has the same
/// offset is not written again; without an answer, everything is written.
async fn write_changed<K: GroupOffsets>(
    destination: &mut Connection,
    groups: BTreeMap<String, ByPartition<K::Offset>>,
    report: &mut GroupSyncReport,
) -> Result<(), ClientError> {
    if groups.is_empty() {
        return Ok(());
    }
    let asks: Vec<(String, Topics)> = groups.iter().map(|(g, o)| (g.clone(), by_topic(o.keys()))).collect();
    let keep: BTreeSet<(String, i32)> = groups.values().flat_map(|o| o.keys().cloned()).collect();
    let current: BTreeMap<String, ByPartition<K::Offset>> =
        match read_offsets::<K>(destination, &asks, false, &keep).await {
            Ok(results) => results
                .into_iter()
                .filter_map(|(g, o)| o.ok().map(|o| (g, o)))
                .collect(),
            Err(e) if connection_failed(&e) => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the destination's {}; writing all", K::WHAT);
                BTreeMap::new()
            }
        };
    let (min, max) = K::WRITE_VERSIONS;
    let version = destination.version_for::<K::Write>(min, max)?;
    for (group, offsets) in groups {
        let held = current.get(&group);
        let (changed, unchanged): (ByPartition<_>, ByPartition<_>) = offsets
            .into_iter()
            .partition(|(tp, o)| !held.and_then(|h| h.get(tp)).is_some_and(|h| K::unchanged(h, o)));
        let unchanged = unchanged.len();
        if changed.is_empty() {
            report.groups.insert(group, GroupOutcome::nothing_written(unchanged));
            continue;
        }
        let response = match destination
            .request(&K::write_request(version, &group, &changed), version)
            .await
        {
            Ok(r) => r,
            Err(e) if connection_failed(&e) => return Err(e),
            Err(e) => {
                fail(report, group, format!("{} at the destination: {e}", K::WRITE_API));
                continue;
            }
        };
        match K::written(&response) {
            Ok((committed, refused)) => {
                if !refused.is_empty() {
                    tracing::warn!(group, refused = ?refused, "the destination refused some {}", K::WHAT);
                }
                report.groups.insert(
                    group,
                    GroupOutcome::Synced {
                        committed,
                        unchanged,
                        refused,
                    },
                );
            }
            Err(GroupOutcome::TypeConflict { source, destination }) => {
                conflict(report, group, &source, &destination);
            }
            Err(outcome) => {
                tracing::warn!(group, outcome = ?outcome, "{} not synced", K::WHAT);
                report.groups.insert(group, outcome);
            }
        }
    }
    Ok(())
}

/// A group id at the destination, as its ListGroups says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeldGroup {
    /// A share group (else a group of the classic or consumer protocol).
    share: bool,
    /// Its state ("" below ListGroups v4).
    state: String,
}

type HeldGroups = BTreeMap<String, HeldGroup>;

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

/// Whether a listed group is a share group: its type (v5+) says so, or,
/// without one, its protocol type.
fn is_share_listing(group_type: &str, protocol_type: &str) -> bool {
    group_type.eq_ignore_ascii_case(GROUP_TYPE_SHARE) || (group_type.is_empty() && protocol_type == SHARE_PROTOCOL_TYPE)
}

fn held_groups(response: &ListGroupsResponse) -> HeldGroups {
    response
        .groups
        .iter()
        .map(|g| {
            let held = HeldGroup {
                share: is_share_listing(&g.group_type, &g.protocol_type),
                state: g.group_state.to_string(),
            };
            (g.group_id.0.to_string(), held)
        })
        .collect()
}

/// Every group at the destination, by id (one ListGroups, every type);
/// `None` when it cannot be listed (the destination still refuses a write
/// to a group of the other type, reported then).
async fn destination_groups(destination: &mut Connection) -> Result<Option<HeldGroups>, ClientError> {
    let (min, max) = LIST_GROUPS_VERSIONS;
    let Ok(version) = destination.version_for::<ListGroupsRequest>(min, max) else {
        return Ok(None);
    };
    match destination.request(&ListGroupsRequest::default(), version).await {
        Ok(response) => {
            if response.error_code != codes::NONE {
                // Some of its shards answered: what they hold still counts.
                tracing::debug!(code = response.error_code, "the destination listed its groups in part");
            }
            Ok(Some(held_groups(&response)))
        }
        Err(e) if connection_failed(&e) => Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "cannot list the destination's groups");
            Ok(None)
        }
    }
}

// ---- share groups ----

/// Start offsets by (topic, partition).
type ShareOffsets = ByPartition<i64>;

/// Groups per DescribeShareGroupOffsets request when each names
/// `partitions` partitions.
fn share_groups_per_request(partitions: usize) -> usize {
    (SHARE_PARTITIONS_PER_REQUEST / partitions.max(1)).clamp(1, GROUPS_PER_REQUEST)
}
/// DescribeShareGroupOffsets v0 of each group's partitions, by name.
fn describe_share_request(asks: &[(String, Topics)]) -> DescribeShareGroupOffsetsRequest {
    let groups = asks
        .iter()
        .map(|(group, topics)| {
            let topics = topics
                .iter()
                .map(|(t, ps)| {
                    DescribeShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(s(t)))
                        .with_partitions(ps.clone())
                })
                .collect();
            DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(s(group)))
                .with_topics(Some(topics))
        })
        .collect();
    DescribeShareGroupOffsetsRequest::default().with_groups(groups)
}

/// The start offsets in a DescribeShareGroupOffsets answer for each group
/// asked (in order): initialized (≥ 0), without error, in `keep`. A group
/// that is not a share group (any more) has none.
fn share_offsets_from(
    asked: &[String],
    response: &DescribeShareGroupOffsetsResponse,
    keep: &BTreeSet<(String, i32)>,
) -> ReadResults<i64> {
    per_group(
        ShareGroups::READ_API,
        asked,
        &response.groups,
        |g| g.group_id.0.as_str(),
        |g| match g.error_code {
            codes::NONE => kept_offsets::<ShareGroups>(
                keep,
                g.topics.iter().flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| (t.topic_name.0.as_str(), p.partition_index, p.error_code, p.start_offset))
                }),
            ),
            codes::GROUP_ID_NOT_FOUND => Ok(ShareOffsets::new()),
            code => Err(format!("DescribeShareGroupOffsets error code {code}")),
        },
    )
}

/// AlterShareGroupOffsets v0 of `offsets` for `group`.
fn alter_share_request(group: &str, offsets: &ShareOffsets) -> AlterShareGroupOffsetsRequest {
    let topics = by_topic_with(offsets)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition, start)| {
                    AlterShareGroupOffsetsRequestPartition::default()
                        .with_partition_index(partition)
                        .with_start_offset(*start)
                })
                .collect();
            AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(s(topic)))
                .with_partitions(partitions)
        })
        .collect();
    AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(topics)
}

/// What an AlterShareGroupOffsets answer did to `group`: (written,
/// refused), or the group's outcome when it was refused as a whole.
fn alter_results(response: &AlterShareGroupOffsetsResponse) -> Result<Written, GroupOutcome> {
    match response.error_code {
        codes::NONE => {}
        // Only a group of another type is "not found" by an alter (it
        // creates share groups).
        codes::GROUP_ID_NOT_FOUND => {
            return Err(GroupOutcome::TypeConflict {
                source: SHARE_GROUP.into(),
                destination: CONSUMER_GROUP.into(),
            });
        }
        codes::NON_EMPTY_GROUP => return Err(GroupOutcome::Active { state: "Stable".into() }),
        code => {
            let message = response.error_message.as_deref().unwrap_or_default();
            return Err(GroupOutcome::Failed {
                error: format!("AlterShareGroupOffsets at the destination: error code {code} {message}")
                    .trim_end()
                    .to_owned(),
            });
        }
    }
    Ok(written(response.responses.iter().flat_map(|t| {
        t.partitions
            .iter()
            .map(move |p| (t.topic_name.0.as_str(), p.partition_index, p.error_code))
    })))
}

impl GroupOffsets for ShareGroups {
    type Offset = i64;
    type Read = DescribeShareGroupOffsetsRequest;
    type Write = AlterShareGroupOffsetsRequest;
    const READ_API: &'static str = "DescribeShareGroupOffsets";
    const WRITE_API: &'static str = "AlterShareGroupOffsets";
    const READ_VERSIONS: (i16, i16) = DESCRIBE_SHARE_GROUP_OFFSETS_VERSIONS;
    const WRITE_VERSIONS: (i16, i16) = ALTER_SHARE_GROUP_OFFSETS_VERSIONS;
    const WHAT: &'static str = "start offsets";

    fn position(offset: &i64) -> i64 {
        *offset
    }

    fn groups_per_read(_version: i16, partitions: usize) -> usize {
        share_groups_per_request(partitions)
    }

    /// Always by name: Kafka 4.0 takes no null "all topics".
    fn read_request(_version: i16, asks: &[(String, Topics)], _all: bool) -> DescribeShareGroupOffsetsRequest {
        describe_share_request(asks)
    }

    fn read_answers(
        _version: i16,
        asked: &[String],
        response: &DescribeShareGroupOffsetsResponse,
        keep: &BTreeSet<(String, i32)>,
    ) -> ReadResults<i64> {
        share_offsets_from(asked, response, keep)
    }

    fn unchanged(held: &i64, source: &i64) -> bool {
        held == source
    }

    fn write_request(_version: i16, group: &str, offsets: &ShareOffsets) -> AlterShareGroupOffsetsRequest {
        alter_share_request(group, offsets)
    }

    fn written(response: &AlterShareGroupOffsetsResponse) -> Result<Written, GroupOutcome> {
        alter_results(response)
    }
}

/// Sets the source's start offsets of each share group that is neither
/// active at the destination nor a consumer group there, where they differ
/// from what the destination holds.
async fn alter_at_destination(
    destination: &mut Connection,
    source_offsets: BTreeMap<String, ShareOffsets>,
    held: Option<&HeldGroups>,
    report: &mut GroupSyncReport,
) -> Result<(), ClientError> {
    let mut candidates = BTreeMap::new();
    for (group, offsets) in source_offsets {
        match held.and_then(|h| h.get(&group)) {
            Some(g) if !g.share => conflict(report, group, SHARE_GROUP, CONSUMER_GROUP),
            Some(g) if !g.state.is_empty() && !is_inactive(&g.state) => {
                tracing::debug!(
                    group,
                    state = g.state,
                    "share group active at the destination; start offsets not synced"
                );
                report
                    .groups
                    .insert(group, GroupOutcome::Active { state: g.state.clone() });
            }
            _ if offsets.is_empty() => {
                report.groups.insert(group, GroupOutcome::nothing_written(0));
            }
            _ => {
                candidates.insert(group, offsets);
            }
        }
    }
    write_changed::<ShareGroups>(destination, candidates, report).await
}

#[cfg(test)]
mod tests;
