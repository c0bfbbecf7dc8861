//! The metadata round of each mirror (KIP-1279's MirrorMetadataManager,
//! run by the coordinator): the source's metadata, applied to the
//! partitions' lifecycle, then each metadata sync step — deletion checks,
//! topic configs, consumer and share group offsets, ACLs — over the mirror's source connection and our
//! own listener, with its report kept for `mirror describe`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_dataplane::fetch::SourceMetadata;

use super::connections::{connection, source_metadata, source_options};
use super::{BACKOFF_DOUBLINGS_MAX, Core, FINAL_GROUP_SYNC_MAX, SYNC_RETRY_MIN, now_ms};
use crate::metadata_sync::acl_sync::{AclSyncReport, sync_acls};
use crate::metadata_sync::deletion::{self, NO_TOPIC_ID, Round, Sighting};
use crate::metadata_sync::groups::{GroupSyncReport, sync_group_offsets};
use crate::metadata_sync::topic_config_sync::{diff, fetch_topic_configs_report};
use crate::state::MirrorPartitionState as State;
use crate::state_store::{PartitionStateKey, TopicConfigKey, TopicConfigRecord};

/// KIP-1279's MirrorMetadataManager of one mirror: when its metadata round
/// is next due, how the last rounds went, and what each sync step last did
/// (for `mirror describe`). The round itself ([`Core::sync_mirror`]) runs
/// on the coordinator, whose partitions it applies the source's metadata to.
pub(super) struct MirrorMetadataManager {
    pub next_sync: Instant,
    /// Rounds failed in a row, for the backoff.
    failures: u32,
    pub last_sync_ms: Option<u64>,
    pub sync_error: Option<String>,
    /// The last consumer group offset sync: when, and what it did.
    pub group_sync: Option<(u64, GroupSyncReport)>,
    /// The last topic config sync: when, and per topic what changed (or
    /// why the source did not describe it).
    pub config_sync: Option<(u64, BTreeMap<String, String>)>,
    /// The last ACL sync: when, and what it did.
    pub acl_sync: Option<(u64, AclSyncReport)>,
}

impl MirrorMetadataManager {
    /// A mirror's first round is due at once.
    pub fn new() -> Self {
        Self {
            next_sync: Instant::now(),
            failures: 0,
            last_sync_ms: None,
            sync_error: None,
            group_sync: None,
            config_sync: None,
            acl_sync: None,
        }
    }

    /// The source's metadata was read: the next round is a `refresh` away.
    fn round_succeeded(&mut self, refresh: Duration) {
        self.failures = 0;
        self.next_sync = Instant::now() + refresh;
        self.last_sync_ms = Some(now_ms());
    }

    /// The source's metadata could not be read: the next round comes after
    /// a backoff doubling from `SYNC_RETRY_MIN` up to `refresh`, returned.
    fn round_failed(&mut self, refresh: Duration, error: String) -> Duration {
        self.failures += 1;
        let backoff = SYNC_RETRY_MIN
            .saturating_mul(1 << self.failures.min(BACKOFF_DOUBLINGS_MAX))
            .min(refresh);
        self.sync_error = Some(error);
        self.next_sync = Instant::now() + backoff;
        backoff
    }
}

impl Core {
    pub(super) async fn sync_due_mirrors(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .mirrors
            .iter()
            .filter(|(_, m)| m.metadata.next_sync <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.sync_mirror(&name).await;
        }
    }

    async fn sync_mirror(&mut self, name: &str) {
        let Some(m) = self.mirrors.get_mut(name) else {
            return;
        };
        let refresh = Duration::from_millis(m.record.config.metadata_refresh_interval_ms);
        match source_metadata(m).await {
            Ok(metadata) => {
                m.metadata.round_succeeded(refresh);
                self.apply_metadata(name, &metadata);
                self.check_deletions(name, &metadata).await;
                self.sync_topic_configs(name).await;
                self.sync_groups(name).await;
                self.sync_acls(name).await;
            }
            Err(e) => {
                m.conn = None;
                let backoff = m.metadata.round_failed(refresh, e.to_string());
                tracing::warn!(mirror = name, error = %e, retry_in = ?backoff, "cannot read source metadata");
            }
        }
    }

    /// Failover: one last group offset sync before partitions of `name`
    /// stop, since the periodic round may be up to a refresh interval old
    /// and consumers resume here at what it copied. Bounded by
    /// [`FINAL_GROUP_SYNC_MAX`]: a dead source delays the failover by that
    /// at most, and its connections are dropped for the next round.
    pub(super) async fn final_group_sync(&mut self, name: &str) {
        let synced = futures_lite::future::or(
            async {
                self.sync_groups(name).await;
                true
            },
            async {
                glommio::timer::sleep(FINAL_GROUP_SYNC_MAX).await;
                false
            },
        )
        .await;
        if !synced {
            tracing::warn!(mirror = name, waited = ?FINAL_GROUP_SYNC_MAX, "no last group offset sync before the failover: the source did not answer in time");
            if let Some(m) = self.mirrors.get_mut(name) {
                m.conn = None;
            }
            self.listener_conn = None;
        }
    }

    /// Commits the source's consumer group offsets for the partitions this
    /// mirror is mirroring at our listener, for groups not active here.
    async fn sync_groups(&mut self, name: &str) {
        let mirrored: BTreeSet<(String, i32)> = self
            .partitions
            .iter()
            .filter(|(k, p)| k.mirror == name && matches!(p.record.state, State::Mirroring | State::EpochFencing))
            .map(|(_, p)| (p.tp.topic.clone(), p.tp.partition))
            .collect();
        if mirrored.is_empty()
            || self.mirrors.get(name).is_none_or(|m| m.halted)
            || self.listener_connection(name).await.is_none()
        {
            return;
        }
        let m = self.mirrors.get_mut(name).expect("checked");
        let destination = self.listener_conn.as_mut().expect("connected");
        let filter = m.group_filter.clone();
        let source = match connection(m).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "cannot reach the source for group offsets");
                m.conn = None;
                return;
            }
        };
        let result = sync_group_offsets(source, destination, &mirrored, &filter).await;
        match result {
            Ok(report) => {
                let committed = report.committed();
                if committed > 0 {
                    tracing::info!(mirror = name, committed, "group offsets synced from the source");
                }
                m.metadata.group_sync = Some((now_ms(), report));
            }
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "group offset sync failed; next round tries again");
                m.conn = None;
                self.listener_conn = None;
            }
        }
    }

    /// Creates the source's ACLs (those the mirror's `acls_include`
    /// selects) at our listener and deletes the ones the source lost.
    /// ACLs are the mirror's, not a topic's: a paused mirror (every topic
    /// paused) syncs none.
    async fn sync_acls(&mut self, name: &str) {
        if self.mirrors.get(name).is_none_or(|m| m.halted)
            || self.mirror_paused(name)
            || self.listener_connection(name).await.is_none()
        {
            return;
        }
        let m = self.mirrors.get_mut(name).expect("checked");
        let destination = self.listener_conn.as_mut().expect("connected");
        let include = m.record.config.acls_include.clone();
        let source = match connection(m).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "cannot reach the source for ACLs");
                m.conn = None;
                return;
            }
        };
        let result = sync_acls(source, destination, &include).await;
        match result {
            Ok(report) => {
                if report.changed() {
                    tracing::info!(
                        mirror = name,
                        created = report.created.len(),
                        deleted = report.deleted.len(),
                        "ACLs synced from the source"
                    );
                }
                for e in &report.errors {
                    tracing::warn!(mirror = name, error = e, "ACL sync");
                }
                m.metadata.acl_sync = Some((now_ms(), report));
            }
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "ACL sync failed; next round tries again");
                m.conn = None;
                self.listener_conn = None;
            }
        }
    }

    /// Copies the source's topic-level config overrides of the topics this
    /// mirror is mirroring: written to `__mirror_state` when they change,
    /// then served by the listener (DescribeConfigs).
    async fn sync_topic_configs(&mut self, name: &str) {
        let topics: Vec<String> = self
            .partitions
            .iter()
            .filter(|(k, p)| {
                k.mirror == name
                    && matches!(
                        p.record.state,
                        State::Preparing | State::Mirroring | State::EpochFencing
                    )
            })
            .map(|(_, p)| p.tp.topic.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            // A paused topic's new partition (PREPARING) does not bring
            // its configs back into the sync.
            .filter(|t| !self.topic_paused(name, t))
            .collect();
        let Some(m) = self.mirrors.get_mut(name) else {
            return;
        };
        if m.halted || topics.is_empty() {
            return;
        }
        let source = match connection(m).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "cannot reach the source for topic configs");
                m.conn = None;
                return;
            }
        };
        let report = match fetch_topic_configs_report(source, &topics).await {
            Ok(report) => report,
            Err(e @ ClientError::NoCommonVersion { .. }) => {
                // Such as librdkafka's mock: the connection is fine.
                tracing::debug!(mirror = name, error = %e, "the source serves no DescribeConfigs; topic configs not synced");
                return;
            }
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "topic config sync failed; next round tries again");
                m.conn = None;
                return;
            }
        };
        let mut outcome: BTreeMap<String, String> = report
            .errors
            .into_iter()
            .map(|(topic, error)| (topic, format!("not described: {error}")))
            .collect();
        let none = BTreeMap::new();
        for (topic, synced) in report.topics {
            let key = TopicConfigKey {
                mirror: name.to_owned(),
                topic: topic.clone(),
            };
            let held = self.store.topic_configs().get(&key);
            let first = held.is_none();
            let change = diff(held.map_or(&none, |r| &r.configs), &synced.configs);
            if first || !change.is_empty() {
                let record = TopicConfigRecord {
                    configs: synced.configs.clone(),
                    updated_ms: now_ms(),
                };
                if let Err(e) = self.store.put_topic_configs(key, record) {
                    tracing::error!(mirror = name, topic, error = %e, "cannot record a topic's configs");
                    continue;
                }
                if !change.is_empty() {
                    tracing::info!(mirror = name, topic, %change, "topic configs synced from the source");
                }
            }
            outcome.insert(
                topic.clone(),
                format!("{} override(s); last round: {change}", synced.configs.len()),
            );
            self.catalog.publish_topic_configs(&topic, synced.configs);
        }
        if let Some(m) = self.mirrors.get_mut(name) {
            m.metadata.config_sync = Some((now_ms(), outcome));
        }
    }

    /// Deletion checks, after a metadata round: a mirrored topic the
    /// round's answer does not show with its topic id is asked for by name
    /// and by id at one broker (another each round); [`DeletionChecks`]
    /// counts the answers, and a confirmed deletion (or recreation under a
    /// new id) stops the topic's partitions (STOPPED, data kept, writable).
    /// Paused topics are not checked (no metadata sync while paused).
    async fn check_deletions(&mut self, name: &str, metadata: &SourceMetadata) {
        let Some(m) = self.mirrors.get(name) else { return };
        if m.halted {
            return;
        }
        let watched: BTreeMap<String, [u8; 16]> = self
            .partitions
            .iter()
            .filter(|(k, p)| {
                k.mirror == name
                    && p.record.state.can_move_to(State::Stopping)
                    && !matches!(p.record.state, State::Pausing | State::Paused)
            })
            .map(|(k, p)| (p.tp.topic.clone(), k.topic_id))
            .collect();
        let m = self.mirrors.get_mut(name).expect("checked");
        m.deletion.retain(|t| watched.contains_key(t));
        let round = Round {
            policy: m.record.config.deletion_policy(),
            brokers_known: metadata.brokers.len(),
            now: Instant::now(),
            now_ms: now_ms(),
        };
        let mut candidates = Vec::new();
        for (topic, id) in watched {
            match metadata.topics.get(&topic) {
                Some((seen, _)) if *seen == id || *seen == NO_TOPIC_ID || id == NO_TOPIC_ID => {
                    m.deletion.observe(&topic, id, Sighting::Present, round);
                }
                _ => candidates.push((topic, id)),
            }
        }
        if candidates.is_empty() {
            return;
        }
        let mut brokers: Vec<(i32, String)> = metadata.brokers.iter().map(|(id, a)| (*id, a.clone())).collect();
        brokers.sort();
        if brokers.is_empty() {
            return;
        }
        let (broker, addr) = brokers[m.probe_turn % brokers.len()].clone();
        m.probe_turn = m.probe_turn.wrapping_add(1);
        let answer = match Connection::connect(&addr, source_options(m)).await {
            Ok(mut conn) => deletion::probe(&mut conn, broker, &candidates).await,
            Err(e) => Err(e),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                // A failed probe is no evidence either way.
                tracing::warn!(mirror = name, broker, addr, error = %e, "cannot ask the source about topics missing from its metadata; next round tries again");
                return;
            }
        };
        let mut confirmed = Vec::new();
        for (topic, id) in candidates {
            let sighting = answer.sighting(&topic, id, m.record.source_cluster_id.as_deref());
            let denied_before = m.deletion.sync_error(&topic).is_some();
            let observed = m.deletion.observe(&topic, id, sighting, round);
            if let Some(new_id) = observed.new_recreation {
                tracing::warn!(
                    mirror = name,
                    topic,
                    mirrored_id = deletion::uuid_string(&id),
                    new_id = deletion::uuid_string(&new_id),
                    "topic recreated at the source under another topic id; the mirrored one is stopped once its id is confirmed absent"
                );
            }
            match sighting {
                Sighting::Denied { code } if !denied_before => tracing::warn!(
                    mirror = name,
                    topic,
                    error = deletion::error_name(code),
                    "the source refuses to describe a mirrored topic; it is not stopped for that (grant DESCRIBE)"
                ),
                Sighting::Absent { .. } if !observed.confirmed => tracing::info!(
                    mirror = name,
                    topic,
                    broker,
                    "mirrored topic absent at the source; stopped once confirmed"
                ),
                _ => {}
            }
            if observed.confirmed {
                let reason = match sighting {
                    Sighting::Absent {
                        recreated_as: Some(_), ..
                    } => "recreated at the source (confirmed)",
                    _ => "deleted at the source (confirmed)",
                };
                confirmed.push((topic, reason));
            }
        }
        for (topic, reason) in confirmed {
            if let Some(m) = self.mirrors.get_mut(name) {
                m.deletion.forget(&topic);
            }
            let keys: Vec<PartitionStateKey> = self
                .partitions
                .iter()
                .filter(|(k, p)| {
                    k.mirror == name
                        && p.tp.topic == topic
                        && p.record.state.can_move_to(State::Stopping)
                        && !matches!(p.record.state, State::Pausing | State::Paused)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for key in keys {
                self.stop_for(&key, reason);
            }
        }
    }
}
