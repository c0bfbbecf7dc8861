//! Mirror reports: what the control plane tells the listener about each
//! mirror, for `DescribeClusterMirrors` (API 99). For each mirror, topic
//! and partition: offsets, lag, state, retries, error, and the last mirror
//! epoch (LME). A peer asks for the LMEs before it fails back (it truncates
//! its log above them); `mirror describe` shows the rest.
//!
//! The control plane publishes whole snapshots (copy on write). A request
//! reads the current one once, under a read lock. The API is rare, so
//! unlike the catalog it needs no generation counter to keep readers off
//! the lock. The data plane only reads the reports: it never computes them.

use std::collections::{BTreeMap, HashMap};

use super::{LastMirrorEpoch, MirrorPartitionState};
use std::sync::{Arc, PoisonError, RwLock};

/// Every mirror's report, by mirror name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorReports {
    pub mirrors: BTreeMap<String, MirrorReport>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorReport {
    /// The source cluster's id, once known. An LME lookup from another
    /// cluster skips this mirror: its epochs are those of a different
    /// source's log.
    pub source_cluster_id: Option<String>,
    /// By topic name.
    pub topics: BTreeMap<String, TopicReport>,
    /// The names the mirror takes from its source (its topic filter)
    /// while it mirrors: the listener never auto-creates a local topic
    /// under one of them (see `kafka::auto_create`).
    pub covers: TopicCover,
}

/// Whether a mirror's topic filter takes a topic name; covering none by
/// default. A function, so that the data plane needs no copy of the
/// control plane's filter (regexes and all).
#[derive(Clone, Default)]
pub struct TopicCover(Option<Arc<CoversFn>>);

/// Whether a topic name is covered.
type CoversFn = dyn Fn(&str) -> bool + Send + Sync;

impl TopicCover {
    pub fn new(covers: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(covers)))
    }

    pub fn covers(&self, topic: &str) -> bool {
        self.0.as_ref().is_some_and(|f| f(topic))
    }
}

impl std::fmt::Debug for TopicCover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "TopicCover(filter)"
        } else {
            "TopicCover(none)"
        })
    }
}

/// Two covers are equal when they are the same filter (or both none).
impl PartialEq for TopicCover {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for TopicCover {}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicReport {
    /// The topic id, the source's (mirrors keep it). LME lookups name
    /// topics by id.
    pub topic_id: [u8; 16],
    pub partitions: BTreeMap<i32, PartitionReport>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReport {
    /// The source's high watermark; -1 when unknown.
    pub source_offset: i64,
    /// Our log end offset; -1 when unknown.
    pub destination_offset: i64,
    /// -1 when unknown.
    pub lag: i64,
    /// The mirror partition's state; the wire carries its name.
    pub state: MirrorPartitionState,
    /// Retries so far in FAILED.
    pub retry_attempt: i16,
    /// Why the partition failed, in FAILED.
    pub error_message: Option<String>,
    /// The last source leader epoch mirrored.
    pub last_mirror_epoch: LastMirrorEpoch,
}

impl Default for PartitionReport {
    fn default() -> Self {
        Self {
            source_offset: -1,
            destination_offset: -1,
            lag: -1,
            state: MirrorPartitionState::Unknown,
            retry_attempt: 0,
            error_message: None,
            last_mirror_epoch: LastMirrorEpoch::NONE,
        }
    }
}

impl MirrorReports {
    /// The first mirror (by name) whose topic filter takes `topic`.
    pub fn covering(&self, topic: &str) -> Option<&str> {
        self.mirrors
            .iter()
            .find(|(_, m)| m.covers.covers(topic))
            .map(|(name, _)| name.as_str())
    }

    /// The LME of every (topic id, partition) as `requesting_cluster_id`
    /// may use it: the highest across the mirrors that hold the partition,
    /// skipping mirrors whose known source is another cluster. A lookup
    /// answers -1 for a partition missing here.
    pub fn last_mirror_epochs(&self, requesting_cluster_id: Option<&str>) -> HashMap<([u8; 16], i32), LastMirrorEpoch> {
        let mut epochs = HashMap::new();
        let eligible =
            self.mirrors
                .values()
                .filter(|m| match (requesting_cluster_id, m.source_cluster_id.as_deref()) {
                    (Some(requester), Some(source)) => requester == source,
                    _ => true,
                });
        for topic in eligible.flat_map(|m| m.topics.values()) {
            for (&partition, report) in &topic.partitions {
                let epoch = epochs
                    .entry((topic.topic_id, partition))
                    .or_insert(LastMirrorEpoch::NONE);
                *epoch = report.last_mirror_epoch.max(*epoch);
            }
        }
        epochs
    }
}

/// The current reports, shared by every shard's connections.
#[derive(Debug, Default)]
pub struct MirrorReportsHandle {
    current: RwLock<Arc<MirrorReports>>,
}

impl MirrorReportsHandle {
    /// Replaces the reports (requests already answering keep theirs).
    pub fn publish(&self, reports: Arc<MirrorReports>) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = reports;
    }

    pub fn current(&self) -> Arc<MirrorReports> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(id: u8, lmes: &[(i32, i32)]) -> TopicReport {
        TopicReport {
            topic_id: [id; 16],
            partitions: lmes
                .iter()
                .map(|&(p, lme)| {
                    let report = PartitionReport {
                        last_mirror_epoch: LastMirrorEpoch::new(lme),
                        ..PartitionReport::default()
                    };
                    (p, report)
                })
                .collect(),
        }
    }

    fn mirror(source: Option<&str>, topics: Vec<(&str, TopicReport)>) -> MirrorReport {
        MirrorReport {
            source_cluster_id: source.map(str::to_owned),
            topics: topics.into_iter().map(|(name, t)| (name.to_owned(), t)).collect(),
            ..MirrorReport::default()
        }
    }

    #[test]
    fn the_highest_epoch_of_the_requesters_mirrors_wins() {
        let reports = MirrorReports {
            mirrors: BTreeMap::from([
                (
                    "from-a".into(),
                    mirror(Some("A"), vec![("t", topic(1, &[(0, 7), (1, -1)]))]),
                ),
                ("old-from-a".into(), mirror(None, vec![("t", topic(1, &[(0, 9)]))])),
                ("from-c".into(), mirror(Some("C"), vec![("t", topic(1, &[(0, 30)]))])),
            ]),
        };
        let from_a = reports.last_mirror_epochs(Some("A"));
        assert_eq!(from_a.get(&([1; 16], 0)), Some(&LastMirrorEpoch::new(9)));
        assert_eq!(from_a.get(&([1; 16], 1)), Some(&LastMirrorEpoch::NONE));
        assert_eq!(from_a.get(&([2; 16], 0)), None);
        // Without a cluster id every mirror counts.
        assert_eq!(
            reports.last_mirror_epochs(None).get(&([1; 16], 0)),
            Some(&LastMirrorEpoch::new(30))
        );
    }

    #[test]
    fn readers_keep_their_snapshot_across_a_publish() {
        let handle = MirrorReportsHandle::default();
        let before = handle.current();
        assert!(before.mirrors.is_empty());
        let next = MirrorReports {
            mirrors: BTreeMap::from([("m".into(), MirrorReport::default())]),
        };
        handle.publish(Arc::new(next.clone()));
        assert!(before.mirrors.is_empty());
        assert_eq!(*handle.current(), next);
    }

    #[test]
    fn a_name_is_covered_by_the_first_mirror_whose_filter_takes_it() {
        let covering = |prefix: &'static str| MirrorReport {
            covers: TopicCover::new(move |t| t.starts_with(prefix)),
            ..MirrorReport::default()
        };
        let reports = MirrorReports {
            mirrors: BTreeMap::from([
                ("a".into(), covering("orders.")),
                ("b".into(), covering("orders")),
                ("idle".into(), MirrorReport::default()),
            ]),
        };
        assert_eq!(reports.covering("orders.eu"), Some("a"));
        assert_eq!(reports.covering("orders-us"), Some("b"));
        assert_eq!(reports.covering("payments"), None);
        assert_eq!(MirrorReports::default().covering("orders.eu"), None);
        let cover = TopicCover::new(|_| true);
        assert_eq!(cover, cover.clone());
        assert_ne!(cover, TopicCover::new(|_| true));
        assert_eq!(TopicCover::default(), TopicCover::default());
    }
}
