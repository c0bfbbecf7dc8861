//! Hand-written Kafka wire code for the hot path.
//!
//! The `kafka-protocol` crate handles request/response schemas everywhere
//! else; only the Fetch paths, where record bytes must not be copied, are
//! written by hand here.
//!
//! * [`fetch_response`] is a sans-IO, streaming parser for Fetch responses
//!   (v4–v16) that stops at each partition's `records` so the caller can
//!   receive them straight into the log tail.
//! * [`fetch_response_writer`] encodes Fetch responses with placeholders
//!   for records, which are sent straight from the segment files.

pub mod describe_cluster_mirrors;
pub mod fetch_response;
pub mod fetch_response_writer;

pub use fetch_response::{
    FETCH_RESPONSE_MAX_VERSION, FETCH_RESPONSE_MIN_VERSION, FetchHeader, FetchParseError, FetchPartition,
    FetchResponseReader, FetchStep, NodeEndpoint, TopicRef,
};
pub use fetch_response_writer::{EncodedFetchResponse, FetchResponseWriter, PartitionAnswer, TopicKey};
