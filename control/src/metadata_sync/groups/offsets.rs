//! The steps both kinds of groups share, written once over the
//! [`GroupOffsets`] trait: each group's offsets read at its coordinator in
//! batches, the partitions kept, and only the changed ones written at the
//! destination.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::protocol::Request;
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_protocol::error_codes as codes;

use super::coordinators::{SourceBrokers, find_coordinators};
use super::{
    COORDINATOR_LOAD_IN_PROGRESS, GroupOutcome, GroupSyncReport, NOT_COORDINATOR, conflict, connection_failed, fail,
};

/// Offsets by (topic, partition).
pub(super) type ByPartition<O> = BTreeMap<(String, i32), O>;

/// Each group asked, and its offsets as read or why they were not.
pub(super) type ReadResults<O> = Vec<(String, Result<ByPartition<O>, String>)>;

/// Partitions by topic, as requests list them.
pub(super) type Topics = Vec<(String, Vec<i32>)>;

/// The offsets of one kind of group and the APIs that read and write them
/// (consumer groups: committed offsets, OffsetFetch and OffsetCommit;
/// share groups: start offsets, DescribeShareGroupOffsets and
/// AlterShareGroupOffsets). The steps around them — each group read at its
/// coordinator, batching, failures, writing only what changed — are the
/// same for both and written once, over this trait.
pub(super) trait GroupOffsets {
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

/// Sorted (topic, partition) keys and their values by topic, as requests
/// list them.
pub(super) fn by_topic_with<'a, V>(
    entries: impl IntoIterator<Item = (&'a (String, i32), V)>,
) -> Vec<(&'a str, Vec<(i32, V)>)> {
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
pub(super) fn by_topic<'a>(partitions: impl IntoIterator<Item = &'a (String, i32)>) -> Topics {
    by_topic_with(partitions.into_iter().map(|tp| (tp, ())))
        .into_iter()
        .map(|(topic, ps)| (topic.to_owned(), ps.into_iter().map(|(p, ())| p).collect()))
        .collect()
}

/// The offsets of `groups` (of kind `K`) at the source, each read at its
/// coordinator, for `mirrored` partitions; groups that fail are reported
/// and left out.
pub(super) async fn fetch_source_offsets<K: GroupOffsets>(
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

/// One group's offsets in a read answer, each partition as (topic,
/// partition, error code, offset): those set (≥ 0), without error and in
/// `keep`. A coordinator error (loading, moved) fails the group, asked
/// again next round; another error leaves its partition out.
pub(super) fn kept_offsets<'a, K: GroupOffsets>(
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
pub(super) fn per_group<G, O>(
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

/// Offsets of kind `K` of `asks` (groups, each with its partitions) at
/// `conn`, their coordinator, in batches — all of each group's instead
/// when `all` and the API can; those in `keep` only.
pub(super) async fn read_offsets<K: GroupOffsets>(
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

/// Partitions written, and those refused with their error codes.
pub(super) type Written = (usize, BTreeMap<(String, i32), i16>);

/// What a write answer's partitions — (topic, partition, error code) —
/// say was written and refused.
pub(super) fn written<'a>(partitions: impl IntoIterator<Item = (&'a str, i32, i16)>) -> Written {
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

/// Writes the source's offsets (`groups`, of kind `K`) at the destination,
/// after reading what it holds, so a partition that already has the same
/// offset is not written again; without an answer, everything is written.
pub(super) async fn write_changed<K: GroupOffsets>(
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
