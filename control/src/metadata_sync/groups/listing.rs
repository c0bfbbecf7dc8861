//! Which groups there are: the source's groups listed at every source
//! broker (consumer groups and, where the source speaks the share-group
//! APIs, share groups), sorted into the groups a round writes by type
//! ([`plan`]), and the destination's groups by id, so that no group
//! overwrites one of the other type.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{ApiKey, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_dataplane::fetch::fetch_source_metadata;
use ringmirror_protocol::error_codes as codes;

use super::coordinators::SourceBrokers;
use super::{
    CONSUMER_PROTOCOL_TYPE, GROUP_TYPE_CLASSIC, GROUP_TYPE_CONSUMER, GROUP_TYPE_SHARE, GroupFilter, GroupOutcome,
    GroupSyncReport, LIST_GROUPS_VERSIONS, SHARE_PROTOCOL_TYPE, connection_failed,
};

/// What the source says a listed group is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum GroupKind {
    Consumer,
    Share,
    Other(String),
}

/// A listed group's kind from the listing it came from, its group type
/// (v5+, may be empty) and protocol type; `None` for a classic group that
/// is not a consumer group (Connect's workers).
pub(super) fn kind_of(share_listing: bool, group_type: &str, protocol_type: &str) -> Option<GroupKind> {
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
pub(super) type Listing = BTreeMap<String, BTreeSet<GroupKind>>;

/// The groups a round writes, by type.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Planned {
    pub(super) consumer: Vec<String>,
    pub(super) share: Vec<String>,
}

/// Sorts what the source listed (`None`: it cannot list) into the consumer
/// and share groups to sync, and outcomes for the rest; share groups are
/// skipped for `share_unsupported` (why the destination cannot take them).
pub(super) fn plan(
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

/// Every source broker's groups; `None` when the source does not serve
/// ListGroups.
pub(super) async fn list_source_groups(
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
pub(super) fn list_groups_requests(version: i16, with_share: bool) -> Vec<(bool, ListGroupsRequest)> {
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

pub(super) fn listed_groups(share_listing: bool, response: &ListGroupsResponse) -> Vec<(String, GroupKind)> {
    response
        .groups
        .iter()
        .filter_map(|g| {
            kind_of(share_listing, &g.group_type, &g.protocol_type).map(|kind| (g.group_id.0.to_string(), kind))
        })
        .collect()
}

/// One broker's consumer groups (and share groups, `with_share`).
pub(super) async fn list_at(conn: &mut Connection, with_share: bool) -> Result<Vec<(String, GroupKind)>, ClientError> {
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

/// A group id at the destination, as its ListGroups says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HeldGroup {
    /// A share group (else a group of the classic or consumer protocol).
    pub(super) share: bool,
    /// Its state ("" below ListGroups v4).
    pub(super) state: String,
}

pub(super) type HeldGroups = BTreeMap<String, HeldGroup>;

/// Whether a listed group is a share group: its type (v5+) says so, or,
/// without one, its protocol type.
pub(super) fn is_share_listing(group_type: &str, protocol_type: &str) -> bool {
    group_type.eq_ignore_ascii_case(GROUP_TYPE_SHARE) || (group_type.is_empty() && protocol_type == SHARE_PROTOCOL_TYPE)
}

pub(super) fn held_groups(response: &ListGroupsResponse) -> HeldGroups {
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
pub(super) async fn destination_groups(destination: &mut Connection) -> Result<Option<HeldGroups>, ClientError> {
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
