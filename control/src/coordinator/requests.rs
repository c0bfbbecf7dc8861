//! Operator requests ([`AdminRequest`]): answered at once, the state
//! changes they ask for written before they are acted on — create, update
//! and delete mirrors, add and remove topics, pause, resume, stop and
//! restart partitions, sync now.

use std::collections::BTreeMap;
use std::time::Instant;

use ringmirror_dataplane::shard::ShardCommand;
use ringmirror_storage::failpoint::crash_point;

use super::{Core, Mirror, internal, new_mirror, now_ms};
use crate::admin::{AdminAnswer, AdminError, AdminRequest, TopicPartitionName};
use crate::mirror::{MirrorConfig, TopicSelection};
use crate::state::MirrorPartitionState as State;
use crate::state_store::{MirrorRecord, PartitionStateKey, TopicConfigKey};

impl Core {
    pub(super) fn handle(&mut self, request: AdminRequest) -> Result<AdminAnswer, AdminError> {
        match request {
            AdminRequest::CreateMirror { mut config } => self.create_mirror(&mut config),
            AdminRequest::UpdateMirror { mut config } => {
                config.normalize();
                let name = config.name.clone();
                self.update_config(&name, |c| {
                    config.keep_password_of(c);
                    *c = config;
                })?;
                let m = self.mirrors.get_mut(&name).expect("updated");
                m.group_filter = m
                    .record
                    .config
                    .group_filter()
                    .map_err(|e| AdminError::Invalid(e.to_string()))?;
                m.reported_missing.clear();
                m.reported_conflicts.clear();
                let settings = m.record.config.settings();
                for shard in &self.shards {
                    let command = ShardCommand::UpdateMirror {
                        settings: settings.clone(),
                    };
                    if let Err(e) = shard.try_send(command) {
                        tracing::error!(mirror = name, error = %e, "shard did not take the updated settings");
                    }
                }
                tracing::info!(mirror = name, "mirror definition updated");
                Ok(AdminAnswer::Accepted {
                    mirror: name,
                    partitions: Vec::new(),
                })
            }
            AdminRequest::ListMirrors => Ok(AdminAnswer::Mirrors {
                mirrors: self.mirrors.keys().map(|n| self.summary(n)).collect(),
            }),
            AdminRequest::DescribeMirror { mirror } => Ok(AdminAnswer::Mirror {
                mirror: self.describe(&mirror)?,
            }),
            AdminRequest::DeleteMirror { mirror } => self.delete_mirror(&mirror),
            AdminRequest::AddTopics { mirror, topics } => self.add_topics(&mirror, topics),
            AdminRequest::RemoveTopics { mirror, topics } => self.remove_topics(&mirror, &topics),
            AdminRequest::Pause { mirror, topics } => self.change(&mirror, &topics, Change::Pause),
            AdminRequest::Resume { mirror, topics } => self.change(&mirror, &topics, Change::Resume),
            AdminRequest::Stop { mirror, topics } => self.change(&mirror, &topics, Change::Stop),
            AdminRequest::Restart { mirror, topics } => self.change(&mirror, &topics, Change::Restart),
            AdminRequest::Sync { mirror } => {
                let m = self
                    .mirrors
                    .get_mut(&mirror)
                    .ok_or_else(|| AdminError::UnknownMirror { mirror: mirror.clone() })?;
                m.metadata.next_sync = Instant::now();
                Ok(AdminAnswer::Accepted {
                    mirror,
                    partitions: Vec::new(),
                })
            }
            AdminRequest::CheckDivergence { mirror, topics } => self.check_divergence(&mirror, &topics),
            AdminRequest::StartVerify {
                mirror,
                topics,
                from_offset,
                bytes_per_s,
            } => self.start_verify(&mirror, &topics, from_offset, bytes_per_s),
            AdminRequest::VerifyStatus { mirror } => match &self.mirror(&mirror)?.verify {
                Some(job) => Ok(AdminAnswer::Verify { job: job.clone() }),
                None => Err(AdminError::Invalid(format!("no verification of {mirror:?} has run"))),
            },
            AdminRequest::Status => Ok(AdminAnswer::Status {
                partitions: self.views(),
            }),
            AdminRequest::Metrics => Ok(AdminAnswer::Metrics {
                metrics: self.metrics(),
            }),
        }
    }

    fn create_mirror(&mut self, config: &mut MirrorConfig) -> Result<AdminAnswer, AdminError> {
        config.normalize();
        config.validate().map_err(|e| AdminError::Invalid(e.to_string()))?;
        if self.mirrors.contains_key(&config.name) {
            return Err(AdminError::MirrorExists {
                mirror: config.name.clone(),
            });
        }
        let record = MirrorRecord {
            config: config.clone(),
            source_cluster_id: None,
            created_ms: now_ms(),
        };
        let mirror = new_mirror(record.clone())?;
        self.store.put_mirror(&record).map_err(internal)?;
        tracing::info!(mirror = config.name, "mirror created");
        self.mirrors.insert(config.name.clone(), mirror);
        Ok(AdminAnswer::Accepted {
            mirror: config.name.clone(),
            partitions: Vec::new(),
        })
    }

    pub(super) fn mirror(&self, name: &str) -> Result<&Mirror, AdminError> {
        self.mirrors
            .get(name)
            .ok_or_else(|| AdminError::UnknownMirror { mirror: name.into() })
    }

    fn keys_of_mirror(&self, name: &str) -> Vec<PartitionStateKey> {
        self.partitions.keys().filter(|k| k.mirror == name).cloned().collect()
    }

    /// Stops fetching a partition and forgets it; its data stays, served
    /// read-only (with the source's topic configs no more).
    fn forget_partition(&mut self, key: &PartitionStateKey) -> Result<(), AdminError> {
        let p = self
            .partitions
            .remove(key)
            .ok_or_else(|| internal("unknown partition"))?;
        self.store.remove_partition(key).map_err(internal)?;
        self.by_tp.remove(&(key.mirror.clone(), p.tp.clone()));
        let topic_left = !self
            .partitions
            .iter()
            .any(|(k, q)| k.mirror == key.mirror && q.tp.topic == p.tp.topic);
        let config_key = TopicConfigKey {
            mirror: key.mirror.clone(),
            topic: p.tp.topic.clone(),
        };
        if topic_left && self.store.topic_configs().contains_key(&config_key) {
            self.store.remove_topic_configs(&config_key).map_err(internal)?;
            self.catalog.publish_topic_configs(&p.tp.topic, BTreeMap::new());
        }
        if p.placed {
            let shard = self.shard_of(key, &p.tp);
            let _ = self.shards[shard].try_send(ShardCommand::RemovePartition {
                mirror: key.mirror.clone(),
                tp: p.tp,
            });
        }
        Ok(())
    }

    fn delete_mirror(&mut self, name: &str) -> Result<AdminAnswer, AdminError> {
        self.mirror(name)?;
        let keys = self.keys_of_mirror(name);
        let mut moved = Vec::new();
        for key in &keys {
            let p = &self.partitions[key];
            moved.push(TopicPartitionName {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition,
            });
            self.forget_partition(key)?;
        }
        self.store.delete_mirror(name).map_err(internal)?;
        self.mirrors.remove(name);
        tracing::info!(
            mirror = name,
            partitions = moved.len(),
            "mirror deleted; its data stays, read-only"
        );
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: moved,
        })
    }

    fn update_config(&mut self, name: &str, edit: impl FnOnce(&mut MirrorConfig)) -> Result<(), AdminError> {
        let m = self.mirror(name)?;
        let mut record = m.record.clone();
        edit(&mut record.config);
        record
            .config
            .validate()
            .map_err(|e| AdminError::Invalid(e.to_string()))?;
        let selection = TopicSelection::new(&record.config).map_err(|e| AdminError::Invalid(e.to_string()))?;
        self.store.put_mirror(&record).map_err(internal)?;
        let m = self.mirrors.get_mut(name).expect("checked");
        if m.record.config.bootstrap_servers != record.config.bootstrap_servers
            || m.record.config.sasl_client() != record.config.sasl_client()
            || m.record.config.tls_client() != record.config.tls_client()
        {
            // The next round reaches the new servers (and checks their
            // cluster id against the recorded one).
            m.conn = None;
        }
        m.record = record;
        m.selection = selection;
        m.metadata.next_sync = Instant::now();
        Ok(())
    }

    fn add_topics(&mut self, name: &str, topics: Vec<String>) -> Result<AdminAnswer, AdminError> {
        if topics.is_empty() {
            return Err(AdminError::Invalid("no topics given".into()));
        }
        self.update_config(name, |c| {
            for t in topics {
                if !c.topics.contains(&t) {
                    c.topics.push(t);
                }
            }
        })?;
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: Vec::new(),
        })
    }

    fn remove_topics(&mut self, name: &str, topics: &[String]) -> Result<AdminAnswer, AdminError> {
        let m = self.mirror(name)?;
        for t in topics {
            if !m.record.config.topics.contains(t) {
                let covered = self
                    .partitions
                    .iter()
                    .any(|(k, p)| k.mirror == name && &p.tp.topic == t);
                return Err(if covered {
                    AdminError::Invalid(format!(
                        "{t:?} is mirrored through topics_include; change topics_exclude to stop covering it"
                    ))
                } else {
                    AdminError::TopicNotInMirror {
                        mirror: name.into(),
                        topic: t.clone(),
                    }
                });
            }
        }
        self.update_config(name, |c| c.topics.retain(|t| !topics.contains(t)))?;
        let selection = self.mirrors[name].selection.clone();
        let keys: Vec<PartitionStateKey> = self
            .partitions
            .iter()
            .filter(|(k, p)| k.mirror == name && topics.contains(&p.tp.topic) && !selection.wants(&p.tp.topic))
            .map(|(k, _)| k.clone())
            .collect();
        let mut moved = Vec::new();
        for key in keys {
            let p = &self.partitions[&key];
            moved.push(TopicPartitionName {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition,
            });
            self.forget_partition(&key)?;
        }
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: moved,
        })
    }

    /// Pause, resume, stop or restart the partitions of some topics (all
    /// when none are named). Each named topic must be in the mirror and
    /// have at least one partition the change applies to.
    fn change(&mut self, name: &str, topics: &[String], change: Change) -> Result<AdminAnswer, AdminError> {
        self.mirror(name)?;
        let mut by_topic: BTreeMap<String, Vec<PartitionStateKey>> = BTreeMap::new();
        for (k, p) in self.partitions.iter().filter(|(k, _)| k.mirror == name) {
            by_topic.entry(p.tp.topic.clone()).or_default().push(k.clone());
        }
        let chosen: Vec<String> = if topics.is_empty() {
            by_topic.keys().cloned().collect()
        } else {
            topics.to_vec()
        };
        let mut targets = Vec::new();
        let mut first_refusal = None;
        for topic in &chosen {
            let keys = by_topic.get(topic).ok_or_else(|| AdminError::TopicNotInMirror {
                mirror: name.into(),
                topic: topic.clone(),
            })?;
            let states: Vec<State> = keys.iter().map(|k| self.partitions[k].record.state).collect();
            let applicable: Vec<&PartitionStateKey> = keys
                .iter()
                .zip(&states)
                .filter(|(k, s)| change.applies_to(**s, self.partitions[*k].placed))
                .map(|(k, _)| k)
                .collect();
            if applicable.is_empty() {
                let refusal = change.refusal(name, topic, &states);
                if !topics.is_empty() {
                    return Err(refusal);
                }
                first_refusal.get_or_insert(refusal);
            }
            targets.extend(applicable.into_iter().cloned());
        }
        // The whole mirror asked, and none of it can take the change.
        if targets.is_empty()
            && let Some(refusal) = first_refusal
        {
            return Err(refusal);
        }
        if change == Change::Stop {
            // Every partition's STOPPING is written before any is acted
            // on: a crash in between leaves the whole request to finish.
            for key in &targets {
                self.set_state(key, State::Stopping, |_| {})?;
            }
            crash_point("stop:stopping-written");
        }
        let mut moved = Vec::new();
        for key in targets {
            let tp = self.partitions[&key].tp.clone();
            match change {
                Change::Pause => {
                    // PAUSED once the shard says no fetch will include it.
                    self.set_state(&key, State::Pausing, |_| {})?;
                    crash_point("pause:pausing-written");
                    self.send(
                        &key,
                        ShardCommand::Pause {
                            mirror: name.into(),
                            tp: tp.clone(),
                        },
                    );
                }
                Change::Resume => {
                    self.set_state(&key, State::Mirroring, |_| {})?;
                    // What the pause held back (configs, groups, ACLs, new
                    // topics) is synced at once.
                    if let Some(m) = self.mirrors.get_mut(name) {
                        m.metadata.next_sync = Instant::now();
                    }
                    self.send(
                        &key,
                        ShardCommand::Resume {
                            mirror: name.into(),
                            tp: tp.clone(),
                        },
                    );
                }
                Change::Stop => self.stop_partition(&key)?,
                Change::Restart => self.restart_partition(&key, false),
            }
            moved.push(TopicPartitionName {
                topic: tp.topic,
                partition: tp.partition,
            });
        }
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: moved,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Pause,
    Resume,
    Stop,
    Restart,
}

impl Change {
    /// Whether a partition in `state` (on its shard or not) takes the change.
    fn applies_to(self, state: State, placed: bool) -> bool {
        match self {
            // A partition still waiting for its last mirror epoch is not on
            // a shard yet: it is paused once it is.
            Self::Pause => {
                matches!(state, State::Mirroring | State::EpochFencing) || (state == State::Preparing && placed)
            }
            Self::Resume => state == State::Paused,
            Self::Stop => state.can_move_to(State::Stopping),
            Self::Restart => state == State::Failed,
        }
    }

    /// Why nothing of `topic` could take the change.
    fn refusal(self, mirror: &str, topic: &str, states: &[State]) -> AdminError {
        let (mirror, topic) = (mirror.to_owned(), topic.to_owned());
        let stopping = states.iter().any(|s| matches!(s, State::Stopping | State::Stopped));
        let preparing = states.contains(&State::Preparing);
        match self {
            _ if stopping => AdminError::BeingStopped { mirror, topic },
            Self::Pause if preparing => AdminError::InvalidTransition(format!(
                "{mirror:?}: {topic:?} is still PREPARING; pause it once it is mirroring"
            )),
            Self::Pause => AdminError::AlreadyPaused { mirror, topic },
            Self::Resume => AdminError::NotPaused { mirror, topic },
            Self::Restart => AdminError::NotFailed { mirror, topic },
            Self::Stop => AdminError::BeingStopped { mirror, topic },
        }
    }
}
