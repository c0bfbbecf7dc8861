//! Divergence checks and `mirror verify` asked by the operator: which
//! partitions they run on, the commands sent to the shards, and the
//! verification job their `Verified` events fill in.

use ringmirror_dataplane::fetch::VerifyOutcome;
use ringmirror_dataplane::shard::ShardCommand;
use ringmirror_storage::log::TopicPartition;

use super::{Core, now_ms};
use crate::admin::{AdminAnswer, AdminError, PartitionVerify, TopicPartitionName, VerifyJob};
use crate::state::MirrorPartitionState as State;
use crate::state_store::PartitionStateKey;

impl Core {
    /// The mirror's placed, mirroring partitions of `topics` (none: all).
    fn mirroring_partitions(
        &self,
        name: &str,
        topics: &[String],
    ) -> Result<Vec<(PartitionStateKey, TopicPartition)>, AdminError> {
        self.mirror(name)?;
        if let Some(topic) = topics.iter().find(|t| {
            !self
                .partitions
                .iter()
                .any(|(k, p)| k.mirror == name && &p.tp.topic == *t)
        }) {
            return Err(AdminError::TopicNotInMirror {
                mirror: name.into(),
                topic: topic.clone(),
            });
        }
        Ok(self
            .partitions
            .iter()
            .filter(|(k, p)| {
                k.mirror == name
                    && p.placed
                    && p.record.state == State::Mirroring
                    && (topics.is_empty() || topics.contains(&p.tp.topic))
            })
            .map(|(k, p)| (k.clone(), p.tp.clone()))
            .collect())
    }

    /// Asks the shards for a divergence check of the mirror's mirroring
    /// partitions of `topics` (none: all).
    pub(super) fn check_divergence(&self, name: &str, topics: &[String]) -> Result<AdminAnswer, AdminError> {
        let mut checked = Vec::new();
        for (key, tp) in self.mirroring_partitions(name, topics)? {
            checked.push(TopicPartitionName {
                topic: tp.topic.clone(),
                partition: tp.partition,
            });
            self.send(
                &key,
                ShardCommand::CheckDivergence {
                    mirror: name.into(),
                    tp,
                },
            );
        }
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: checked,
        })
    }

    /// Starts a verification of the mirror's mirroring partitions of
    /// `topics` (none: all) on their shards; their `Verified` events fill it in.
    pub(super) fn start_verify(
        &mut self,
        name: &str,
        topics: &[String],
        from_offset: i64,
        bytes_per_s: u64,
    ) -> Result<AdminAnswer, AdminError> {
        if bytes_per_s == 0 {
            return Err(AdminError::Invalid("bytes_per_s must be above 0".into()));
        }
        let targets = self.mirroring_partitions(name, topics)?;
        let m = self.mirrors.get_mut(name).expect("checked");
        m.verifications += 1;
        let job = VerifyJob {
            mirror: name.into(),
            id: m.verifications,
            started_ms: now_ms(),
            from_offset,
            bytes_per_s,
            done: targets.is_empty(),
            partitions: targets
                .iter()
                .map(|(_, tp)| PartitionVerify {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    result: "running".into(),
                    first_differing_offset: None,
                    batches_compared: 0,
                    bytes_compared: 0,
                    error: None,
                })
                .collect(),
        };
        m.verify = Some(job.clone());
        for (key, tp) in targets {
            self.send(
                &key,
                ShardCommand::Verify {
                    mirror: name.into(),
                    tp,
                    from_offset,
                    bytes_per_s,
                },
            );
        }
        Ok(AdminAnswer::Verify { job })
    }

    /// A partition's verification ended: record it in the mirror's job.
    pub(super) fn on_verified(&mut self, mirror: &str, tp: &TopicPartition, outcome: VerifyOutcome) {
        let Some(job) = self.mirrors.get_mut(mirror).and_then(|m| m.verify.as_mut()) else {
            return;
        };
        let Some(p) = job
            .partitions
            .iter_mut()
            .find(|p| p.topic == tp.topic && p.partition == tp.partition && p.result == "running")
        else {
            return;
        };
        match outcome {
            VerifyOutcome::Identical {
                batches_compared,
                bytes_compared,
            } => {
                p.result = "identical".into();
                p.batches_compared = batches_compared;
                p.bytes_compared = bytes_compared;
            }
            VerifyOutcome::Differs { first_differing_offset } => {
                tracing::warn!(mirror, %tp, first_differing_offset, "mirror verify: our batch differs from the source's");
                p.result = "differs".into();
                p.first_differing_offset = Some(first_differing_offset);
            }
            VerifyOutcome::Incomplete { error } => {
                p.result = "incomplete".into();
                p.error = Some(error);
            }
        }
        job.done = job.partitions.iter().all(|p| p.result != "running");
    }
}
