//! The transaction coordinator: Kafka's transactions (KIP-98) for producers
//! writing the agent's writable topics, with Kafka's semantics.
//!
//! * [`record`]: the `__transaction_state` records, byte for byte.
//! * [`state`]: [`TransactionState`], Kafka's states and their legal
//!   predecessors.
//!
//! It must never do I/O or block.

pub mod record;
pub mod state;

pub use state::TransactionState;

/// What this module takes from the rest of the data plane, in one place:
/// batch varints and string limits, which move to their own crates with
/// issue 15.
mod external {
    pub(crate) use crate::batch::varint::{VarintError, read_unsigned, write_unsigned};
    pub(crate) use crate::limits::{STRING_BYTES_MAX, TooLong, put_string, string_length};
}
