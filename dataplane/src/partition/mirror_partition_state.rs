//! The mirror partition state machine (KIP-1279's states): which state a
//! mirrored partition is in, and which moves between states are allowed.
//! Pure logic — the coordinator persists each accepted transition before
//! acting on it, and an invalid request is an error, never a silent no-op.
//! It sits below both planes so that the reports the control plane
//! publishes to the listener carry the state itself, not its name.
//!
//! ```text
//! UNKNOWN → PREPARING → MIRRORING ⇄ EPOCH_FENCING
//!                        MIRRORING → PAUSING → PAUSED → MIRRORING (resume)
//! any live state → STOPPING → STOPPED (writable)
//! any state → FAILED → PREPARING (retry or operator restart)
//! ```

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MirrorPartitionState {
    /// No state cached for the partition yet.
    Unknown,
    /// Fetching the last mirror epoch from the source and truncating to align.
    Preparing,
    /// A fetcher is running.
    Mirroring,
    /// A destination epoch bump was requested; back to mirroring when it lands.
    EpochFencing,
    /// Removing the fetcher for a pause.
    Pausing,
    /// No fetcher, no metadata sync, read-only.
    Paused,
    /// Failover in progress: fetcher removed, epoch bumped, markers written.
    Stopping,
    /// Failover done: the partition is writable.
    Stopped,
    /// Something went wrong; retried with backoff or restarted by an operator.
    Failed,
}

impl MirrorPartitionState {
    pub const ALL: [Self; 9] = [
        Self::Unknown,
        Self::Preparing,
        Self::Mirroring,
        Self::EpochFencing,
        Self::Pausing,
        Self::Paused,
        Self::Stopping,
        Self::Stopped,
        Self::Failed,
    ];

    /// The name Kafka's tools show (DescribeClusterMirrors' state string).
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Preparing => "PREPARING",
            Self::Mirroring => "MIRRORING",
            Self::EpochFencing => "EPOCH_FENCING",
            Self::Pausing => "PAUSING",
            Self::Paused => "PAUSED",
            Self::Stopping => "STOPPING",
            Self::Stopped => "STOPPED",
            Self::Failed => "FAILED",
        }
    }

    /// Whether `self → to` is one of the machine's transitions.
    pub fn can_move_to(self, to: Self) -> bool {
        use MirrorPartitionState::*;
        match (self, to) {
            // FAILED is reachable from any state.
            (_, Failed) => true,
            (Unknown, Preparing)
            | (Preparing, Mirroring)
            | (Mirroring, EpochFencing)
            | (EpochFencing, Mirroring)
            | (Preparing | Mirroring | EpochFencing, Pausing)
            | (Pausing, Paused)
            | (Paused, Mirroring)
            | (Stopping, Stopped)
            | (Failed, Preparing) => true,
            // Failover must work whatever the mirror was doing — a failed or
            // paused mirror is exactly what an operator fails over from.
            (Preparing | Mirroring | EpochFencing | Pausing | Paused | Failed, Stopping) => true,
            _ => false,
        }
    }

    /// Moves to `to`, or says why not.
    pub fn transition(self, to: Self) -> Result<Self, InvalidTransition> {
        if self.can_move_to(to) {
            Ok(to)
        } else {
            Err(InvalidTransition { from: self, to })
        }
    }
}

impl fmt::Display for MirrorPartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a mirror partition cannot go from {from} to {to}")]
pub struct InvalidTransition {
    pub from: MirrorPartitionState,
    pub to: MirrorPartitionState,
}

#[cfg(test)]
mod tests {
    use super::MirrorPartitionState::*;
    use super::*;
    use proptest::prelude::*;

    /// The transitions, written out once more as a list (the model the
    /// match in `can_move_to` is checked against).
    const VALID: &[(MirrorPartitionState, MirrorPartitionState)] = &[
        (Unknown, Preparing),
        (Preparing, Mirroring),
        (Mirroring, EpochFencing),
        (EpochFencing, Mirroring),
        (Preparing, Pausing),
        (Mirroring, Pausing),
        (EpochFencing, Pausing),
        (Pausing, Paused),
        (Paused, Mirroring),
        (Preparing, Stopping),
        (Mirroring, Stopping),
        (EpochFencing, Stopping),
        (Pausing, Stopping),
        (Paused, Stopping),
        (Failed, Stopping),
        (Stopping, Stopped),
        (Failed, Preparing),
    ];

    fn valid(from: MirrorPartitionState, to: MirrorPartitionState) -> bool {
        to == Failed || VALID.contains(&(from, to))
    }

    #[test]
    fn every_pair_is_accepted_or_refused_as_listed() {
        for from in MirrorPartitionState::ALL {
            for to in MirrorPartitionState::ALL {
                assert_eq!(from.can_move_to(to), valid(from, to), "{from} -> {to}");
                match from.transition(to) {
                    Ok(state) => assert_eq!(state, to),
                    Err(e) => assert_eq!(e, InvalidTransition { from, to }),
                }
            }
        }
    }

    proptest! {
        /// Random operation sequences against the model: an accepted move
        /// changes the state to its target, a refused one leaves it as it
        /// was; STOPPED is left only through FAILED.
        #[test]
        fn random_sequences_follow_the_model(targets in prop::collection::vec(0usize..9, 1..60)) {
            let mut state = Unknown;
            for i in targets {
                let to = MirrorPartitionState::ALL[i];
                let before = state;
                match state.transition(to) {
                    Ok(next) => {
                        prop_assert!(valid(before, to));
                        state = next;
                    }
                    Err(_) => prop_assert!(!valid(before, to)),
                }
                if before == Stopped && state != Stopped {
                    prop_assert_eq!(state, Failed);
                }
            }
        }
    }
}
