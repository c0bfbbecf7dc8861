//! ringmirror's Kafka wire code, sans IO: bytes in, typed values out, and
//! back. Every length read off the wire is checked before it sizes an
//! allocation.
//!
//! * [`request`] checks a request frame's header against the APIs and
//!   versions we serve and decodes its body.
//! * [`wire`] is the hand-written wire code: the Fetch response parser and
//!   writer (record bytes never copied), KIP-1279's DescribeClusterMirrors,
//!   DescribeShareGroupOffsets v1.
//! * [`error_codes`] names the Kafka error codes we act on.
//! * [`sasl`] is the SASL mechanisms (PLAIN, SCRAM) as exchanges of
//!   messages, for our client and our listener.
//! * [`lazy_alloc`] maps huge allocations lazily, so lying lengths cannot
//!   abort a process that decodes with `kafka-protocol`.
//!
//! Safe code only, but for the allocator in [`lazy_alloc`].

#![deny(unsafe_code)]

pub mod error_codes;
#[allow(unsafe_code)]
pub mod lazy_alloc;
pub mod request;
pub mod sasl;
pub mod wire;
