//! [`TransactionMetadata`]: one transactional id's producer id, epochs,
//! state and partitions, and its transitions, as Kafka's
//! `TransactionMetadata` (transaction-coordinator module) defines them —
//! for clients of transaction version 1 (see the module documentation of
//! [`super`] for why, and what version 2 would add).
//!
//! Every transition is two steps. A `prepare_*` method computes the new
//! metadata as a [`TxnTransitMetadata`] and checks it with the rules of
//! Kafka's `prepareTransitionTo` and `completeTransitionTo` (legal previous
//! state, producer id and epoch, partitions, timestamps), without changing
//! anything; the coordinator persists it and only then applies it with
//! [`TransactionMetadata::complete_transition`]. So an illegal transition is
//! never written, and a failed write changes nothing — Kafka's pending
//! state and its `hasFailedEpochFence` flag (which stop a second transition
//! or a second epoch bump while a write is in flight) have no counterpart:
//! writes here are synchronous.
//!
//! Owns no I/O and no clock: times are arguments.

use std::collections::BTreeSet;

use super::external::TopicPartition;
use super::record::{PartitionsSchema, TransactionLogValue};
use super::state::TransactionState;

/// `RecordBatch.NO_PRODUCER_ID` and `NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// The client transaction version of every transition made here: version
/// 1 clients are recorded as version 0, as Kafka records them (its
/// `endTransactionWithTV1` and AddPartitionsToTxn up to version 3 pass
/// `TransactionVersion.TV_0`).
pub const CLIENT_TRANSACTION_VERSION_1: i16 = 0;

/// Whether `epoch` leaves no room for another bump: the coordinator must
/// always be able to fence (bump) once more (`isEpochExhausted`).
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// A transactional id's metadata at its coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionMetadata {
    pub producer_id: i64,
    /// The producer id before the last transition (Kafka sets it to the
    /// current producer id on every transition; it differs only after a
    /// producer id rotation).
    pub prev_producer_id: i64,
    /// Kept from the record; set only by version 2 transitions.
    pub next_producer_id: i64,
    /// Kept from the record (a later Kafka's tag 3); never set here.
    pub next_producer_epoch: i16,
    pub producer_epoch: i16,
    /// The epoch before the last KIP-360 bump, so that a retried
    /// InitProducerId gets the same answer; not persisted (-1 after a load).
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TransactionState,
    /// The open transaction's partitions; `__consumer_offsets-<n>` stands
    /// for the offsets of groups on shard `n` (AddOffsetsToTxn). While
    /// markers are written, those already written are removed (as Kafka's
    /// `removePartition`), so DescribeTransactions shows what is left.
    pub partitions: BTreeSet<TopicPartition>,
    /// When the open transaction's first partition was added; -1 when none is open.
    pub txn_start_timestamp_ms: i64,
    pub txn_last_update_timestamp_ms: i64,
    pub client_transaction_version: i16,
}

/// A transition computed and checked, not yet persisted nor applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnTransitMetadata(TransactionMetadata);

impl TxnTransitMetadata {
    /// The metadata after the transition.
    pub fn target(&self) -> &TransactionMetadata {
        &self.0
    }
}

/// Why a transition cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The request's epoch is neither the current one nor the one a
    /// retried KIP-360 bump came from (`Errors.PRODUCER_FENCED`).
    #[error("the producer is fenced by a newer epoch")]
    ProducerFenced,
    /// A transition Kafka refuses with an `IllegalStateException` (a bug,
    /// or metadata that should not exist); answered UNKNOWN_SERVER_ERROR.
    #[error("illegal transition from {from:?} to {to:?}: {why}")]
    Illegal {
        from: TransactionState,
        to: TransactionState,
        why: &'static str,
    },
}

type Result<T> = std::result::Result<T, TransitionError>;

/// Why a stored value is not metadata we can hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("unknown transaction state id {0}")]
    UnknownState(i8),
    /// Dead and PrepareEpochFence are never persisted by a coordinator.
    #[error("a stored transaction in the transient state {0:?}")]
    TransientState(TransactionState),
}

impl TransactionMetadata {
    /// A transactional id's first metadata, before its first InitProducerId
    /// is persisted (`TransactionCoordinator.handleInitProducerId`).
    pub fn new(producer_id: i64, txn_timeout_ms: i32, now_ms: i64) -> Self {
        Self {
            producer_id,
            prev_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            next_producer_epoch: NO_PRODUCER_EPOCH,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            state: TransactionState::Empty,
            partitions: BTreeSet::new(),
            txn_start_timestamp_ms: -1,
            txn_last_update_timestamp_ms: now_ms,
            client_transaction_version: CLIENT_TRANSACTION_VERSION_1,
        }
    }

    /// The metadata a stored value holds (`TransactionLog.read`): the
    /// partitions of an Empty transaction are ignored, the last epoch is
    /// unknown.
    pub fn from_log_value(v: &TransactionLogValue) -> std::result::Result<Self, LoadError> {
        let state =
            TransactionState::from_id(v.transaction_status).ok_or(LoadError::UnknownState(v.transaction_status))?;
        if matches!(state, TransactionState::Dead | TransactionState::PrepareEpochFence) {
            return Err(LoadError::TransientState(state));
        }
        let partitions = match (&v.transaction_partitions, state) {
            (Some(topics), s) if s != TransactionState::Empty => topics
                .iter()
                .flat_map(|t| t.partition_ids.iter().map(|&p| TopicPartition::new(t.topic.clone(), p)))
                .collect(),
            _ => BTreeSet::new(),
        };
        Ok(Self {
            producer_id: v.producer_id,
            prev_producer_id: v.previous_producer_id,
            next_producer_id: v.next_producer_id,
            next_producer_epoch: v.next_producer_epoch,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms: v.transaction_timeout_ms,
            state,
            partitions,
            txn_start_timestamp_ms: v.transaction_start_timestamp_ms,
            txn_last_update_timestamp_ms: v.transaction_last_update_timestamp_ms,
            client_transaction_version: v.client_transaction_version,
        })
    }

    /// The value to persist (`TransactionLog.valueToBytes`): no partitions
    /// (null) when Empty, else the partitions by topic.
    pub fn to_log_value(&self) -> TransactionLogValue {
        let transaction_partitions = (self.state != TransactionState::Empty).then(|| {
            let mut topics: Vec<PartitionsSchema> = Vec::new();
            for tp in &self.partitions {
                match topics.last_mut() {
                    Some(t) if t.topic == tp.topic => t.partition_ids.push(tp.partition),
                    _ => topics.push(PartitionsSchema {
                        topic: tp.topic.clone(),
                        partition_ids: vec![tp.partition],
                    }),
                }
            }
            topics
        });
        TransactionLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.prev_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            next_producer_epoch: self.next_producer_epoch,
            transaction_timeout_ms: self.txn_timeout_ms,
            transaction_status: self.state.id(),
            transaction_partitions,
            transaction_last_update_timestamp_ms: self.txn_last_update_timestamp_ms,
            transaction_start_timestamp_ms: self.txn_start_timestamp_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }

    pub fn is_producer_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    /// Fencing the producer of an ongoing transaction: the bumped epoch,
    /// in the transient PrepareEpochFence state (never persisted; the
    /// abort that follows, [`Self::prepare_abort_after_fence`], is). At
    /// `i16::MAX` the epoch stays, so the fence cannot overflow.
    pub fn prepare_fence_producer_epoch(&self) -> Result<TxnTransitMetadata> {
        let mut to = self.clone();
        to.state = TransactionState::PrepareEpochFence;
        if self.producer_epoch < i16::MAX {
            to.producer_epoch = self.producer_epoch + 1;
        } else {
            tracing::error!(
                producer_id = self.producer_id,
                "fencing a producer whose epoch is already i16::MAX"
            );
        }
        self.checked(to)
    }

    /// InitProducerId on an idle transactional id (KIP-360): no expected
    /// epoch bumps the epoch and forgets the last one; the current epoch
    /// (or none yet) bumps it and remembers the current one; the last
    /// epoch is a retry of a bump that succeeded and gets the same epoch;
    /// any other is fenced.
    pub fn prepare_increment_producer_epoch(
        &self,
        txn_timeout_ms: i32,
        expected_epoch: Option<i16>,
        now_ms: i64,
    ) -> Result<TxnTransitMetadata> {
        if self.is_producer_epoch_exhausted() {
            return Err(self.illegal(TransactionState::Empty, "no producer epoch is left to bump to"));
        }
        let mut to = self.clone();
        let bumped = self.producer_epoch + 1;
        match expected_epoch {
            None => {
                to.producer_epoch = bumped;
                to.last_producer_epoch = NO_PRODUCER_EPOCH;
            }
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                to.producer_epoch = bumped;
                to.last_producer_epoch = self.producer_epoch;
            }
            Some(e) if e == self.last_producer_epoch => {}
            Some(_) => return Err(TransitionError::ProducerFenced),
        }
        to.state = TransactionState::Empty;
        to.txn_timeout_ms = txn_timeout_ms;
        to.partitions.clear();
        to.txn_start_timestamp_ms = -1;
        to.txn_last_update_timestamp_ms = now_ms;
        self.checked(to)
    }

    /// InitProducerId once the epochs of the producer id are exhausted: a
    /// new producer id at epoch 0; the old epoch is remembered when the
    /// request named it (so the producer's retry is recognised).
    pub fn prepare_producer_id_rotation(
        &self,
        new_producer_id: i64,
        txn_timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> Result<TxnTransitMetadata> {
        if matches!(
            self.state,
            TransactionState::Ongoing | TransactionState::PrepareCommit | TransactionState::PrepareAbort
        ) {
            return Err(self.illegal(TransactionState::Empty, "a transaction is still pending"));
        }
        let mut to = self.clone();
        to.state = TransactionState::Empty;
        to.producer_id = new_producer_id;
        to.producer_epoch = 0;
        to.last_producer_epoch = if record_last_epoch {
            self.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        to.txn_timeout_ms = txn_timeout_ms;
        to.partitions.clear();
        to.txn_start_timestamp_ms = -1;
        to.txn_last_update_timestamp_ms = now_ms;
        self.checked(to)
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn): the partitions join the
    /// transaction, which starts now if none was open.
    pub fn prepare_add_partitions<'a>(
        &self,
        added: impl IntoIterator<Item = &'a TopicPartition>,
        now_ms: i64,
    ) -> Result<TxnTransitMetadata> {
        let mut to = self.clone();
        if matches!(
            self.state,
            TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort
        ) {
            to.txn_start_timestamp_ms = now_ms;
        }
        to.partitions.extend(added.into_iter().cloned());
        to.state = TransactionState::Ongoing;
        to.txn_last_update_timestamp_ms = now_ms;
        to.client_transaction_version = CLIENT_TRANSACTION_VERSION_1;
        self.checked(to)
    }

    /// EndTxn: PrepareCommit or PrepareAbort, epochs unchanged (version 1).
    pub fn prepare_abort_or_commit(&self, new_state: TransactionState, now_ms: i64) -> Result<TxnTransitMetadata> {
        let mut to = self.clone();
        to.state = new_state;
        to.next_producer_id = NO_PRODUCER_ID;
        to.txn_last_update_timestamp_ms = now_ms;
        to.client_transaction_version = CLIENT_TRANSACTION_VERSION_1;
        self.checked(to)
    }

    /// The abort that follows a fence: the ongoing transaction goes to
    /// PrepareAbort at the fenced epoch, the last epoch forgotten (Kafka's
    /// `endTransactionWithTV1` on a pending PrepareEpochFence).
    pub fn prepare_abort_after_fence(&self, fence: &TxnTransitMetadata, now_ms: i64) -> Result<TxnTransitMetadata> {
        if fence.0.state != TransactionState::PrepareEpochFence || self.state != TransactionState::Ongoing {
            return Err(self.illegal(TransactionState::PrepareAbort, "an abort after a fence needs the fence"));
        }
        let mut fenced = self.clone();
        fenced.producer_epoch = fence.0.producer_epoch;
        fenced.last_producer_epoch = NO_PRODUCER_EPOCH;
        fenced.prepare_abort_or_commit(TransactionState::PrepareAbort, now_ms)
    }

    /// Every marker is written: CompleteCommit or CompleteAbort, no partitions.
    pub fn prepare_complete(&self, now_ms: i64) -> Result<TxnTransitMetadata> {
        let mut to = self.clone();
        to.state = match self.state {
            TransactionState::PrepareCommit => TransactionState::CompleteCommit,
            _ => TransactionState::CompleteAbort,
        };
        to.next_producer_id = NO_PRODUCER_ID;
        to.partitions.clear();
        to.txn_last_update_timestamp_ms = now_ms;
        self.checked(to)
    }

    /// Expiry of an idle transactional id (its tombstone is written, then
    /// it is forgotten).
    pub fn prepare_dead(&self) -> Result<TxnTransitMetadata> {
        let mut to = self.clone();
        to.state = TransactionState::Dead;
        to.partitions.clear();
        self.checked(to)
    }

    /// Applies a transition once its record is persisted.
    pub fn complete_transition(&mut self, transit: TxnTransitMetadata) {
        *self = transit.0;
    }

    fn illegal(&self, to: TransactionState, why: &'static str) -> TransitionError {
        TransitionError::Illegal {
            from: self.state,
            to,
            why,
        }
    }

    /// Kafka's `prepareTransitionTo` and `completeTransitionTo` checks, on
    /// the whole transition before anything is written.
    fn checked(&self, mut to: TransactionMetadata) -> Result<TxnTransitMetadata> {
        let illegal = |why| Err(self.illegal(to.state, why));
        if to.producer_id < 0 {
            return illegal("a negative producer id");
        }
        if to.state != TransactionState::Dead && to.producer_epoch < 0 {
            return illegal("a negative producer epoch");
        }
        if !to.state.valid_previous().contains(&self.state) {
            return illegal("not a valid previous state");
        }
        let same_producer = to.producer_id == self.producer_id && to.producer_epoch == self.producer_epoch;
        let ok = match to.state {
            TransactionState::Empty => {
                let bumped = to.producer_epoch == self.producer_epoch.wrapping_add(1)
                    || (to.producer_epoch == 0 && to.producer_id != self.producer_id);
                (to.producer_epoch == self.producer_epoch || bumped)
                    && to.partitions.is_empty()
                    && to.txn_start_timestamp_ms == -1
            }
            TransactionState::Ongoing => {
                same_producer && to.partitions.is_superset(&self.partitions) && to.txn_timeout_ms == self.txn_timeout_ms
            }
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                same_producer
                    && to.partitions == self.partitions
                    && to.txn_timeout_ms == self.txn_timeout_ms
                    && to.txn_start_timestamp_ms == self.txn_start_timestamp_ms
            }
            TransactionState::CompleteCommit | TransactionState::CompleteAbort => {
                same_producer && to.txn_timeout_ms == self.txn_timeout_ms && to.txn_start_timestamp_ms != -1
            }
            TransactionState::PrepareEpochFence => {
                to.producer_id == self.producer_id
                    && (to.producer_epoch == self.producer_epoch.saturating_add(1) || self.producer_epoch == i16::MAX)
            }
            TransactionState::Dead => true,
        };
        if !ok {
            return illegal("unexpected metadata for the new state");
        }
        to.prev_producer_id = self.producer_id;
        Ok(TxnTransitMetadata(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TransactionState::*;

    const T0: i64 = 1_700_000_000_000;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn apply(m: &mut TransactionMetadata, prepare: impl FnOnce(&TransactionMetadata) -> Result<TxnTransitMetadata>) {
        let t = prepare(m).unwrap();
        m.complete_transition(t);
    }

    fn initialized(epoch: i16, state: TransactionState) -> TransactionMetadata {
        TransactionMetadata {
            producer_epoch: epoch,
            state,
            prev_producer_id: 1000,
            ..TransactionMetadata::new(1000, 60_000, T0)
        }
    }

    fn ongoing() -> TransactionMetadata {
        let mut m = initialized(4, Empty);
        apply(&mut m, |m| m.prepare_add_partitions(&[tp("t", 0)], T0 + 1));
        m
    }

    #[test]
    fn a_new_producer_gets_epoch_zero_and_no_last_epoch() {
        let mut m = TransactionMetadata::new(1000, 60_000, T0);
        apply(&mut m, |m| m.prepare_increment_producer_epoch(30_000, None, T0 + 1));
        assert_eq!(
            (
                m.producer_epoch,
                m.last_producer_epoch,
                m.txn_timeout_ms,
                m.prev_producer_id
            ),
            (0, -1, 30_000, 1000)
        );
        assert_eq!(
            (m.state, m.txn_start_timestamp_ms, m.txn_last_update_timestamp_ms),
            (Empty, -1, T0 + 1)
        );
    }

    /// TransactionMetadataTest: testBumpEpochNotAllowedIfEpochsExhausted,
    /// testEpochBumpWithCurrentEpochProvided, testAttemptedEpochBumpWithNewlyCreatedMetadata,
    /// testEpochBumpWithLastEpochProvided, testEpochBumpWithInvalidEpochProvided.
    #[test]
    fn kip_360_bumps_retries_and_fences() {
        let m = initialized(4, CompleteCommit);
        let bumped = m.prepare_increment_producer_epoch(60_000, Some(4), T0).unwrap();
        assert_eq!(
            (bumped.target().producer_epoch, bumped.target().last_producer_epoch),
            (5, 4)
        );
        let mut after = m.clone();
        after.complete_transition(bumped);
        let retried = after.prepare_increment_producer_epoch(60_000, Some(4), T0 + 1).unwrap();
        assert_eq!(
            (retried.target().producer_epoch, retried.target().last_producer_epoch),
            (5, 4)
        );
        assert_eq!(
            after.prepare_increment_producer_epoch(60_000, Some(3), T0),
            Err(TransitionError::ProducerFenced)
        );
        // A just-created id accepts any expected epoch (UNKNOWN_PRODUCER_ID recovery).
        let fresh = TransactionMetadata::new(7, 60_000, T0);
        let t = fresh.prepare_increment_producer_epoch(60_000, Some(9), T0).unwrap();
        assert_eq!((t.target().producer_epoch, t.target().last_producer_epoch), (0, -1));
        let exhausted = initialized(i16::MAX - 1, Empty);
        assert!(matches!(
            exhausted.prepare_increment_producer_epoch(60_000, None, T0),
            Err(TransitionError::Illegal { .. })
        ));
    }

    #[test]
    fn rotation_starts_a_new_producer_id_at_epoch_zero() {
        let m = initialized(i16::MAX - 1, CompleteAbort);
        let t = m.prepare_producer_id_rotation(2000, 60_000, T0, true).unwrap();
        let to = t.target();
        assert_eq!(
            (
                to.producer_id,
                to.prev_producer_id,
                to.producer_epoch,
                to.last_producer_epoch
            ),
            (2000, 1000, 0, i16::MAX - 1)
        );
        let t = m.prepare_producer_id_rotation(2000, 60_000, T0, false).unwrap();
        assert_eq!(t.target().last_producer_epoch, -1);
        assert!(ongoing().prepare_producer_id_rotation(2000, 60_000, T0, false).is_err());
    }

    #[test]
    fn adding_partitions_starts_the_transaction_once() {
        let mut m = ongoing();
        assert_eq!((m.state, m.txn_start_timestamp_ms), (Ongoing, T0 + 1));
        apply(&mut m, |m| m.prepare_add_partitions(&[tp("t", 1), tp("u", 0)], T0 + 5));
        assert_eq!(m.txn_start_timestamp_ms, T0 + 1);
        assert_eq!(m.partitions, [tp("t", 0), tp("t", 1), tp("u", 0)].into());
        let value = m.to_log_value();
        let topics: Vec<_> = value
            .transaction_partitions
            .unwrap()
            .into_iter()
            .map(|t| (t.topic, t.partition_ids))
            .collect();
        assert_eq!(topics, [("t".to_owned(), vec![0, 1]), ("u".to_owned(), vec![0])]);
    }

    #[test]
    fn commit_then_complete_keeps_the_epoch_and_empties_the_partitions() {
        let mut m = ongoing();
        apply(&mut m, |m| m.prepare_abort_or_commit(PrepareCommit, T0 + 2));
        assert_eq!((m.state, m.producer_epoch, m.partitions.len()), (PrepareCommit, 4, 1));
        apply(&mut m, |m| m.prepare_complete(T0 + 3));
        assert_eq!((m.state, m.producer_epoch, m.partitions.len()), (CompleteCommit, 4, 0));
        assert_eq!(m.txn_start_timestamp_ms, T0 + 1);
        assert_eq!(m.to_log_value().transaction_partitions, Some(Vec::new()));
    }

    #[test]
    fn a_fence_bumps_the_epoch_into_the_abort() {
        let m = ongoing();
        let fence = m.prepare_fence_producer_epoch().unwrap();
        assert_eq!(
            (fence.target().state, fence.target().producer_epoch),
            (PrepareEpochFence, 5)
        );
        let abort = m.prepare_abort_after_fence(&fence, T0 + 9).unwrap();
        let to = abort.target();
        assert_eq!(
            (to.state, to.producer_epoch, to.last_producer_epoch),
            (PrepareAbort, 5, -1)
        );
        assert_eq!(to.partitions, m.partitions);
        // At i16::MAX the epoch stays (it cannot overflow).
        let mut top = ongoing();
        top.producer_epoch = i16::MAX;
        assert_eq!(
            top.prepare_fence_producer_epoch().unwrap().target().producer_epoch,
            i16::MAX
        );
        assert!(initialized(3, Empty).prepare_fence_producer_epoch().is_err());
    }

    /// Every (from, to) pair outside Kafka's `validPreviousStates` is refused.
    #[test]
    fn transitions_from_invalid_states_are_refused() {
        for from in TransactionState::ALL {
            let m = TransactionMetadata {
                state: from,
                partitions: [tp("t", 0)].into(),
                txn_start_timestamp_ms: T0,
                ..initialized(2, from)
            };
            let tries: [(TransactionState, Result<TxnTransitMetadata>); 5] = [
                (Ongoing, m.prepare_add_partitions(&[tp("t", 0)], T0)),
                (PrepareCommit, m.prepare_abort_or_commit(PrepareCommit, T0)),
                (PrepareAbort, m.prepare_abort_or_commit(PrepareAbort, T0)),
                (Dead, m.prepare_dead()),
                (PrepareEpochFence, m.prepare_fence_producer_epoch()),
            ];
            for (to, result) in tries {
                let legal = to.valid_previous().contains(&from);
                assert_eq!(result.is_ok(), legal, "{from:?} -> {to:?}: {result:?}");
            }
        }
    }

    #[test]
    fn values_round_trip_through_metadata() {
        let mut m = ongoing();
        m.last_producer_epoch = -1;
        let loaded = TransactionMetadata::from_log_value(&m.to_log_value()).unwrap();
        assert_eq!(loaded, m);
        let mut value = m.to_log_value();
        value.transaction_status = 6;
        assert_eq!(
            TransactionMetadata::from_log_value(&value),
            Err(LoadError::TransientState(Dead))
        );
        value.transaction_status = 42;
        assert_eq!(
            TransactionMetadata::from_log_value(&value),
            Err(LoadError::UnknownState(42))
        );
        // An Empty value's partitions are ignored, as Kafka ignores them.
        let mut empty = initialized(1, Empty).to_log_value();
        assert_eq!(empty.transaction_partitions, None);
        empty.transaction_partitions = m.to_log_value().transaction_partitions;
        assert!(
            TransactionMetadata::from_log_value(&empty)
                .unwrap()
                .partitions
                .is_empty()
        );
    }
}
