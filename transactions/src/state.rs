//! [`TransactionState`]: the states of a transactional id at its
//! coordinator, with Kafka's ids (written in `__transaction_state`), names
//! (shown by DescribeTransactions and ListTransactions, and accepted as
//! ListTransactions filters) and legal predecessors — Kafka's
//! `org.apache.kafka.coordinator.transaction.TransactionState`.
//!
//! Owns the table only; the transitions themselves (and what each one
//! changes) are [`super::metadata`]'s.

/// A transactional id's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionState {
    /// No transaction open (after InitProducerId).
    Empty,
    /// Partitions or a group's offsets were added; the transaction is open.
    Ongoing,
    /// EndTxn(commit) was persisted; COMMIT markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a fence or a timeout was persisted; ABORT markers are
    /// being written.
    PrepareAbort,
    /// Every COMMIT marker is written.
    CompleteCommit,
    /// Every ABORT marker is written.
    CompleteAbort,
    /// The transactional id expired and is being removed.
    Dead,
    /// An ongoing transaction's producer is being fenced (a newer
    /// InitProducerId or a timeout); never persisted: the abort that
    /// follows is.
    PrepareEpochFence,
}

impl TransactionState {
    pub const ALL: [Self; 8] = [
        Self::Empty,
        Self::Ongoing,
        Self::PrepareCommit,
        Self::PrepareAbort,
        Self::CompleteCommit,
        Self::CompleteAbort,
        Self::Dead,
        Self::PrepareEpochFence,
    ];

    /// The id in a `TransactionLogValue`'s `TransactionStatus`.
    pub fn id(self) -> i8 {
        match self {
            Self::Empty => 0,
            Self::Ongoing => 1,
            Self::PrepareCommit => 2,
            Self::PrepareAbort => 3,
            Self::CompleteCommit => 4,
            Self::CompleteAbort => 5,
            Self::Dead => 6,
            Self::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Kafka's name for the state (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
            Self::Dead => "Dead",
            Self::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states a transition into this one may start from (Kafka's
    /// `validPreviousStates`). Empty, CompleteCommit and CompleteAbort lead
    /// to PrepareAbort only for transaction version 2 clients.
    pub fn valid_previous(self) -> &'static [Self] {
        use TransactionState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether an idle transactional id in this state may expire
    /// (`transactional.id.expiration.ms`).
    pub fn expiration_allowed(self) -> bool {
        matches!(self, Self::Empty | Self::CompleteCommit | Self::CompleteAbort)
    }

    /// Whether markers are being written (EndTxn was persisted, the
    /// transaction is not complete yet).
    pub fn is_completing(self) -> bool {
        matches!(self, Self::PrepareCommit | Self::PrepareAbort)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_kafkas_and_round_trip() {
        let table: Vec<(i8, &str)> = TransactionState::ALL.iter().map(|s| (s.id(), s.name())).collect();
        assert_eq!(
            table,
            [
                (0, "Empty"),
                (1, "Ongoing"),
                (2, "PrepareCommit"),
                (3, "PrepareAbort"),
                (4, "CompleteCommit"),
                (5, "CompleteAbort"),
                (6, "Dead"),
                (7, "PrepareEpochFence"),
            ]
        );
        for s in TransactionState::ALL {
            assert_eq!(TransactionState::from_id(s.id()), Some(s));
            assert_eq!(TransactionState::from_name(s.name()), Some(s));
        }
        assert_eq!(TransactionState::from_id(8), None);
        assert_eq!(TransactionState::from_name("ongoing"), None);
    }

    #[test]
    fn only_idle_states_expire() {
        let expiring: Vec<_> = TransactionState::ALL
            .into_iter()
            .filter(|s| s.expiration_allowed())
            .collect();
        assert_eq!(
            expiring,
            [
                TransactionState::Empty,
                TransactionState::CompleteCommit,
                TransactionState::CompleteAbort
            ]
        );
    }
}
