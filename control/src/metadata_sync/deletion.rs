//! Deciding that a mirrored topic is gone at the source — never from one
//! answer. A KRaft broker that has just restarted, one whose metadata lags
//! and a revoked DESCRIBE ACL all answer as if a topic did not exist, and
//! stopping a mirror partition (STOPPED, writable) cannot be undone without
//! a full failback. So a topic counts as deleted (or recreated under another
//! topic id) only when the source, with the recorded cluster id, says it is
//! absent **by name and by topic id** on at least
//! [`ConfirmPolicy::rounds_min`] metadata rounds in a row, spread over at
//! least [`ConfirmPolicy::confirm`], and — where the source has several
//! brokers — from more than one broker.
//!
//! This module owns that evidence: [`probe`] asks one broker for some topics
//! by name and by id (Metadata v12 for ids), [`ProbeAnswer::sighting`]
//! reads one topic's answer as a [`Sighting`], and [`DeletionChecks`] (one
//! per mirror) counts the sightings, resets on a present one, never counts
//! an authorization error (a sync error instead) and says when a deletion
//! is confirmed. The coordinator runs the rounds and stops what is confirmed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_protocol::error_codes::{
    NONE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
};
use serde::{Deserialize, Serialize};

/// A source that reports no topic ids (Metadata below v10) gives this.
pub const NO_TOPIC_ID: [u8; 16] = [0; 16];
/// The first Metadata version whose request may name topics by id alone.
const METADATA_BY_ID_VERSION: i16 = 12;

/// How much evidence a mirror wants before it stops a topic deleted (or
/// recreated) at the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfirmPolicy {
    /// Rounds in a row that found the topic absent, at least.
    pub rounds_min: u32,
    /// Time from the first absent answer to the confirming one, at least.
    pub confirm: Duration,
}

/// What one round found about one mirrored topic (name and topic id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sighting {
    /// The name answers with the mirrored topic id, or the id answers.
    Present,
    /// Neither the name (with our id) nor our id is at the source, as
    /// `broker` answered. `recreated_as`: the name is there under another
    /// topic id. `by_id`: the id was asked for too (false for a source that
    /// cannot look topics up by id, or a topic mirrored without an id).
    Absent {
        broker: i32,
        recreated_as: Option<[u8; 16]>,
        by_id: bool,
    },
    /// The source refused to describe the topic (an ACL): never evidence
    /// of anything, shown as a sync error.
    Denied { code: i16 },
    /// Nothing conclusive: another error, no entry, a failed probe or an
    /// answer from another cluster. Neither counts nor resets.
    Unclear,
}

/// One pending deletion, or the sync error, of a mirrored topic, as
/// `mirror describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicCheck {
    pub topic: String,
    /// The mirrored topic id (UUID string).
    pub topic_id: String,
    /// "deleted": absent at the source, confirmation pending;
    /// "recreated": the name has another topic id now, the mirrored id is
    /// absent, confirmation pending; "sync_error": the source answered an
    /// error that is not an absence (the topic is not stopped for it).
    pub kind: String,
    /// Since when (ms since the epoch) the topic is absent; for a sync
    /// error, the last round that answered it.
    pub since_ms: u64,
    /// Rounds that found it absent so far, and the rounds and time the
    /// mirror wants before it stops the topic.
    pub round: u32,
    pub rounds_min: u32,
    pub confirm_ms: u64,
    /// Brokers that answered absent (ids).
    pub brokers: Vec<i32>,
    /// The id the name has now, for "recreated".
    pub new_topic_id: Option<String>,
    /// Whether the absence was also checked by topic id.
    pub by_id: bool,
    /// The Kafka error code of a sync error.
    pub error_code: Option<i16>,
}

/// One metadata round, as [`DeletionChecks::observe`] counts it.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    pub policy: ConfirmPolicy,
    /// How many brokers the source lists.
    pub brokers_known: usize,
    pub now: Instant,
    /// The same moment as wall-clock ms (shown in `mirror describe`).
    pub now_ms: u64,
}

/// What [`DeletionChecks::observe`] concluded for a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// The absence is confirmed: stop the topic's partitions.
    pub confirmed: bool,
    /// The name was found under this new topic id for the first time
    /// (alert once per change).
    pub new_recreation: Option<[u8; 16]>,
}

#[derive(Debug, Clone)]
struct Watch {
    topic_id: [u8; 16],
    since: Instant,
    since_ms: u64,
    rounds: u32,
    brokers: BTreeSet<i32>,
    recreated_as: Option<[u8; 16]>,
    by_id: bool,
}

/// One mirror's pending deletions, sync errors and seen recreations.
/// Kept in memory only: after a restart the evidence is gathered again,
/// which only ever delays a stop.
#[derive(Debug, Clone, Default)]
pub struct DeletionChecks {
    /// By mirrored topic name (a mirror holds one topic id per name).
    watches: BTreeMap<String, Watch>,
    /// Topics whose last round answered an authorization error: (code, when).
    errors: BTreeMap<String, (i16, u64)>,
    /// The new id each recreated topic was last alerted for.
    recreations: BTreeMap<String, [u8; 16]>,
    recreations_total: u64,
}

impl DeletionChecks {
    /// Counts one round's sighting of `topic` (mirrored as `topic_id`).
    pub fn observe(&mut self, topic: &str, topic_id: [u8; 16], sighting: Sighting, round: Round) -> Observed {
        let Round {
            policy,
            brokers_known,
            now,
            now_ms,
        } = round;
        let mut observed = Observed {
            confirmed: false,
            new_recreation: None,
        };
        match sighting {
            Sighting::Present => {
                self.watches.remove(topic);
                self.errors.remove(topic);
                self.recreations.remove(topic);
            }
            Sighting::Denied { code } => {
                self.errors.insert(topic.to_owned(), (code, now_ms));
            }
            Sighting::Unclear => {}
            Sighting::Absent {
                broker,
                recreated_as,
                by_id,
            } => {
                self.errors.remove(topic);
                let fresh = || Watch {
                    topic_id,
                    since: now,
                    since_ms: now_ms,
                    rounds: 0,
                    brokers: BTreeSet::new(),
                    recreated_as: None,
                    by_id: true,
                };
                let watch = self.watches.entry(topic.to_owned()).or_insert_with(fresh);
                if watch.topic_id != topic_id {
                    *watch = fresh();
                }
                watch.rounds += 1;
                watch.brokers.insert(broker);
                watch.recreated_as = recreated_as;
                // Shown as "by id" only if every counted round asked by id.
                watch.by_id &= by_id;
                observed.confirmed = watch.rounds >= policy.rounds_min
                    && now.duration_since(watch.since) >= policy.confirm
                    && (watch.brokers.len() >= 2 || brokers_known < 2);
                if let Some(new_id) = recreated_as
                    && self.recreations.get(topic) != Some(&new_id)
                {
                    self.recreations.insert(topic.to_owned(), new_id);
                    self.recreations_total += 1;
                    observed.new_recreation = Some(new_id);
                }
            }
        }
        observed
    }

    /// Forgets what is known of topics `keep` does not keep (no longer
    /// mirrored, stopped, or paused: a paused topic has no metadata sync,
    /// and starts from nothing when resumed).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.watches.retain(|t, _| keep(t));
        self.errors.retain(|t, _| keep(t));
    }

    /// Forgets one topic's evidence (it was stopped).
    pub fn forget(&mut self, topic: &str) {
        self.watches.remove(topic);
        self.errors.remove(topic);
    }

    /// The authorization error the last round answered for `topic`.
    pub fn sync_error(&self, topic: &str) -> Option<i16> {
        self.errors.get(topic).map(|(code, _)| *code)
    }

    /// Topics absent at the source, waiting for confirmation.
    pub fn pending(&self) -> usize {
        self.watches.len()
    }

    /// Topics whose last round answered an authorization error.
    pub fn sync_errors(&self) -> usize {
        self.errors.len()
    }

    /// Recreated topics alerted since start (each new topic id once).
    pub fn recreations_total(&self) -> u64 {
        self.recreations_total
    }

    /// The pending deletions and sync errors, for `mirror describe`.
    pub fn checks(&self, policy: ConfirmPolicy, mirrored_id: impl Fn(&str) -> Option<[u8; 16]>) -> Vec<TopicCheck> {
        let pending = self.watches.iter().map(|(topic, w)| TopicCheck {
            topic: topic.clone(),
            topic_id: uuid_string(&w.topic_id),
            kind: if w.recreated_as.is_some() {
                "recreated"
            } else {
                "deleted"
            }
            .into(),
            since_ms: w.since_ms,
            round: w.rounds,
            rounds_min: policy.rounds_min,
            confirm_ms: policy.confirm.as_millis() as u64,
            brokers: w.brokers.iter().copied().collect(),
            new_topic_id: w.recreated_as.as_ref().map(uuid_string),
            by_id: w.by_id,
            error_code: None,
        });
        let errors = self.errors.iter().map(|(topic, &(code, at_ms))| TopicCheck {
            topic: topic.clone(),
            topic_id: uuid_string(&mirrored_id(topic).unwrap_or(NO_TOPIC_ID)),
            kind: "sync_error".into(),
            since_ms: at_ms,
            round: 0,
            rounds_min: policy.rounds_min,
            confirm_ms: policy.confirm.as_millis() as u64,
            brokers: Vec::new(),
            new_topic_id: None,
            by_id: false,
            error_code: Some(code),
        });
        pending.chain(errors).collect()
    }
}

/// One broker's answer about some topics, asked by name and by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeAnswer {
    pub broker: i32,
    pub cluster_id: Option<String>,
    /// Name → (error code, topic id).
    pub by_name: HashMap<String, (i16, [u8; 16])>,
    /// Topic id → error code; `None` when the broker cannot be asked by id.
    pub by_id: Option<HashMap<[u8; 16], i16>>,
}

/// How one half of a probe (name or id) answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    Present,
    Absent,
    OtherId([u8; 16]),
    Denied(i16),
    NotAsked,
    Unclear,
}

impl ProbeAnswer {
    /// What the answer says of `topic`, mirrored as `topic_id`, given the
    /// cluster id the mirror recorded (another cluster's answer is unclear).
    pub fn sighting(&self, topic: &str, topic_id: [u8; 16], recorded_cluster: Option<&str>) -> Sighting {
        if recorded_cluster.is_some_and(|recorded| self.cluster_id.as_deref() != Some(recorded)) {
            return Sighting::Unclear;
        }
        let name = match self.by_name.get(topic) {
            Some(&(NONE, id)) if id == topic_id || id == NO_TOPIC_ID || topic_id == NO_TOPIC_ID => Half::Present,
            Some(&(NONE, id)) => Half::OtherId(id),
            Some(&(UNKNOWN_TOPIC_OR_PARTITION, _)) => Half::Absent,
            Some(&(TOPIC_AUTHORIZATION_FAILED, _)) => Half::Denied(TOPIC_AUTHORIZATION_FAILED),
            _ => Half::Unclear,
        };
        let id = match &self.by_id {
            _ if topic_id == NO_TOPIC_ID => Half::NotAsked,
            None => Half::NotAsked,
            Some(ids) => match ids.get(&topic_id) {
                Some(&NONE) => Half::Present,
                Some(&(UNKNOWN_TOPIC_ID | UNKNOWN_TOPIC_OR_PARTITION)) => Half::Absent,
                Some(&TOPIC_AUTHORIZATION_FAILED) => Half::Denied(TOPIC_AUTHORIZATION_FAILED),
                _ => Half::Unclear,
            },
        };
        match (name, id) {
            (Half::Denied(code), _) | (_, Half::Denied(code)) => Sighting::Denied { code },
            (Half::Present, _) | (_, Half::Present) => Sighting::Present,
            (Half::Absent | Half::OtherId(_), Half::Absent | Half::NotAsked) => Sighting::Absent {
                broker: self.broker,
                recreated_as: match name {
                    Half::OtherId(new) => Some(new),
                    _ => None,
                },
                by_id: id == Half::Absent,
            },
            _ => Sighting::Unclear,
        }
    }
}

/// Asks `conn` (broker `broker`) for `topics` by name, and — where the
/// broker speaks Metadata v12 — by topic id in a second request (Kafka
/// ignores names in a request that carries ids).
pub async fn probe(
    conn: &mut Connection,
    broker: i32,
    topics: &[(String, [u8; 16])],
) -> Result<ProbeAnswer, ClientError> {
    let version = conn.version_for::<MetadataRequest>(1, METADATA_BY_ID_VERSION)?;
    let mut by_name = MetadataRequest::default();
    by_name.allow_auto_topic_creation = false;
    by_name.topics = Some(
        topics
            .iter()
            .map(|(name, _)| {
                let mut t = MetadataRequestTopic::default();
                t.name = Some(TopicName(StrBytes::from_string(name.clone())));
                t
            })
            .collect(),
    );
    let response = conn.request(&by_name, version).await?;
    let mut answer = ProbeAnswer {
        broker,
        cluster_id: response.cluster_id.map(|c| c.to_string()),
        ..ProbeAnswer::default()
    };
    for t in response.topics {
        if let Some(name) = t.name {
            answer
                .by_name
                .insert(name.0.to_string(), (t.error_code, *t.topic_id.as_bytes()));
        }
    }
    let ids: Vec<[u8; 16]> = topics
        .iter()
        .map(|(_, id)| *id)
        .filter(|id| *id != NO_TOPIC_ID)
        .collect();
    if version >= METADATA_BY_ID_VERSION && !ids.is_empty() {
        let mut by_id = MetadataRequest::default();
        by_id.allow_auto_topic_creation = false;
        by_id.topics = Some(
            ids.iter()
                .map(|id| {
                    let mut t = MetadataRequestTopic::default();
                    t.topic_id = uuid::Uuid::from_bytes(*id);
                    // By id alone (the default name is an empty string).
                    t.name = None;
                    t
                })
                .collect(),
        );
        let response = conn.request(&by_id, version).await?;
        if response.cluster_id.map(|c| c.to_string()) != answer.cluster_id {
            // Two answers from two clusters: neither is evidence.
            answer.cluster_id = None;
        }
        answer.by_id = Some(
            response
                .topics
                .iter()
                .map(|t| (*t.topic_id.as_bytes(), t.error_code))
                .collect(),
        );
    }
    Ok(answer)
}

/// A Kafka error code as operators read it.
pub fn error_name(code: i16) -> String {
    match code {
        TOPIC_AUTHORIZATION_FAILED => "TOPIC_AUTHORIZATION_FAILED".into(),
        UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION".into(),
        UNKNOWN_TOPIC_ID => "UNKNOWN_TOPIC_ID".into(),
        other => format!("error code {other}"),
    }
}

/// A topic id as a UUID string.
pub fn uuid_string(id: &[u8; 16]) -> String {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: [u8; 16] = [7; 16];
    const NEW_ID: [u8; 16] = [9; 16];

    fn policy() -> ConfirmPolicy {
        ConfirmPolicy {
            rounds_min: 3,
            confirm: Duration::from_secs(120),
        }
    }

    fn round(brokers_known: usize, now: Instant, now_ms: u64) -> Round {
        Round {
            policy: policy(),
            brokers_known,
            now,
            now_ms,
        }
    }

    fn absent(broker: i32) -> Sighting {
        Sighting::Absent {
            broker,
            recreated_as: None,
            by_id: true,
        }
    }

    /// Feeds `sightings` one per 30 s round (from `t0`); the rounds at
    /// which each answer confirmed.
    fn run(checks: &mut DeletionChecks, brokers: usize, sightings: &[Sighting]) -> Vec<bool> {
        let t0 = Instant::now();
        sightings
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let at = Duration::from_secs(30 * i as u64);
                checks
                    .observe("t", ID, *s, round(brokers, t0 + at, at.as_millis() as u64))
                    .confirmed
            })
            .collect()
    }

    #[test]
    fn a_deletion_is_confirmed_after_the_rounds_and_the_time_not_before() {
        let mut checks = DeletionChecks::default();
        // Rounds at 0, 30, 60 s: three rounds but not two minutes yet.
        let got = run(&mut checks, 1, &[absent(1); 5]);
        assert_eq!(got, [false, false, false, false, true]);
        let shown = checks.checks(policy(), |_| Some(ID));
        assert_eq!(
            (shown[0].kind.as_str(), shown[0].round, shown[0].since_ms),
            ("deleted", 5, 0)
        );
    }

    #[test]
    fn the_time_alone_is_not_enough_either() {
        let mut checks = DeletionChecks::default();
        let t0 = Instant::now();
        let mut at = |secs: u64| {
            let now = t0 + Duration::from_secs(secs);
            checks.observe("t", ID, absent(1), round(1, now, secs * 1000)).confirmed
        };
        assert!(!at(0));
        assert!(!at(500), "two rounds over a long outage are still two");
        assert!(at(530));
    }

    #[test]
    fn a_present_round_resets_and_unclear_or_denied_rounds_do_not_count() {
        let mut checks = DeletionChecks::default();
        let denied = Sighting::Denied {
            code: TOPIC_AUTHORIZATION_FAILED,
        };
        let rounds = [
            absent(1),
            absent(1),
            Sighting::Present,
            absent(1),
            Sighting::Unclear,
            denied,
            absent(1),
            absent(1),
            absent(1),
            absent(1),
            absent(1),
        ];
        let got = run(&mut checks, 1, &rounds);
        // Counting starts again at round 3 (90 s) and confirms at the third
        // absent round after it, 120 s later (the unclear and denied rounds
        // between counted in neither way).
        assert_eq!(got.iter().position(|c| *c), Some(7));
        assert_eq!(checks.sync_errors(), 0, "an absent answer clears the sync error");
    }

    #[test]
    fn authorization_errors_never_confirm_and_show_as_sync_errors() {
        let mut checks = DeletionChecks::default();
        let denied = Sighting::Denied {
            code: TOPIC_AUTHORIZATION_FAILED,
        };
        assert!(run(&mut checks, 1, &[denied; 20]).iter().all(|c| !c));
        assert_eq!((checks.pending(), checks.sync_errors()), (0, 1));
        let shown = checks.checks(policy(), |_| Some(ID));
        assert_eq!(shown[0].kind, "sync_error");
        assert_eq!(shown[0].error_code, Some(TOPIC_AUTHORIZATION_FAILED));
        checks.observe("t", ID, Sighting::Present, round(1, Instant::now(), 0));
        assert_eq!(checks.sync_errors(), 0);
    }

    #[test]
    fn several_brokers_must_agree() {
        let mut checks = DeletionChecks::default();
        assert!(
            run(&mut checks, 3, &[absent(1); 8]).iter().all(|c| !c),
            "one broker of three"
        );
        let mut checks = DeletionChecks::default();
        let got = run(&mut checks, 3, &[absent(1), absent(2), absent(1), absent(2), absent(1)]);
        assert_eq!(got, [false, false, false, false, true]);
        assert_eq!(checks.checks(policy(), |_| None)[0].brokers, [1, 2]);
    }

    #[test]
    fn a_recreation_is_alerted_once_per_new_id_and_confirmed_like_a_deletion() {
        let mut checks = DeletionChecks::default();
        let recreated = |id| Sighting::Absent {
            broker: 1,
            recreated_as: Some(id),
            by_id: true,
        };
        let t0 = Instant::now();
        let mut alerts = Vec::new();
        let mut confirmed = Vec::new();
        for i in 0..5u64 {
            let o = checks.observe(
                "t",
                ID,
                recreated(NEW_ID),
                round(1, t0 + Duration::from_secs(30 * i), 0),
            );
            alerts.push(o.new_recreation);
            confirmed.push(o.confirmed);
        }
        assert_eq!(alerts, [Some(NEW_ID), None, None, None, None]);
        assert_eq!(confirmed, [false, false, false, false, true]);
        assert_eq!(checks.recreations_total(), 1);
        let shown = &checks.checks(policy(), |_| Some(ID))[0];
        assert_eq!(shown.kind, "recreated");
        assert_eq!(shown.new_topic_id.as_deref(), Some(uuid_string(&NEW_ID).as_str()));
        // Recreated once more: a new alert.
        let again = checks.observe("t", ID, recreated([3; 16]), round(1, t0, 0));
        assert_eq!((again.new_recreation, checks.recreations_total()), (Some([3; 16]), 2));
    }

    fn answer(name: Option<(i16, [u8; 16])>, id: Option<Option<i16>>) -> ProbeAnswer {
        ProbeAnswer {
            broker: 4,
            cluster_id: Some("c".into()),
            by_name: name.map(|n| ("t".to_owned(), n)).into_iter().collect(),
            by_id: id.map(|code| code.map(|c| (ID, c)).into_iter().collect()),
        }
    }

    #[test]
    fn a_probe_answer_is_read_by_name_and_by_id() {
        let sight = |a: ProbeAnswer| a.sighting("t", ID, Some("c"));
        let gone = Sighting::Absent {
            broker: 4,
            recreated_as: None,
            by_id: true,
        };
        assert_eq!(sight(answer(Some((3, NO_TOPIC_ID)), Some(Some(100)))), gone);
        assert_eq!(sight(answer(Some((0, ID)), Some(Some(100)))), Sighting::Present);
        // Absent by name but present by id (a lagging name lookup): present.
        assert_eq!(sight(answer(Some((3, NO_TOPIC_ID)), Some(Some(0)))), Sighting::Present);
        assert_eq!(
            sight(answer(Some((0, NEW_ID)), Some(Some(100)))),
            Sighting::Absent {
                broker: 4,
                recreated_as: Some(NEW_ID),
                by_id: true
            }
        );
        // Recreated but the old id still answers: not gone.
        assert_eq!(sight(answer(Some((0, NEW_ID)), Some(Some(0)))), Sighting::Present);
        assert_eq!(
            sight(answer(Some((29, NO_TOPIC_ID)), Some(Some(29)))),
            Sighting::Denied { code: 29 }
        );
        assert_eq!(
            sight(answer(Some((3, NO_TOPIC_ID)), Some(Some(29)))),
            Sighting::Denied { code: 29 }
        );
        // The id not answered at all, or another error: unclear.
        assert_eq!(sight(answer(Some((3, NO_TOPIC_ID)), Some(None))), Sighting::Unclear);
        assert_eq!(
            sight(answer(Some((5, NO_TOPIC_ID)), Some(Some(100)))),
            Sighting::Unclear
        );
        assert_eq!(sight(answer(None, Some(Some(100)))), Sighting::Unclear);
        // A source without lookups by id: the name alone.
        assert_eq!(
            sight(answer(Some((3, NO_TOPIC_ID)), None)),
            Sighting::Absent {
                broker: 4,
                recreated_as: None,
                by_id: false
            }
        );
        // Another cluster's answer is no evidence.
        assert_eq!(
            answer(Some((3, NO_TOPIC_ID)), Some(Some(100))).sighting("t", ID, Some("other")),
            Sighting::Unclear
        );
    }
}
