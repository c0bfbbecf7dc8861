//! Hand-written Kafka wire code.
//!
//! The `kafka-protocol` crate handles request/response schemas everywhere
//! else; written by hand here are the Fetch paths, where record bytes must
//! not be copied, and the APIs (or versions) that crate does not know.
//!
//! * [`fetch_response`] is a sans-IO, streaming parser for Fetch responses
//!   (v4–v16) that stops at each partition's `records` so the caller can
//!   receive them straight into the log tail.
//! * [`fetch_response_writer`] encodes Fetch responses with placeholders
//!   for records, which are sent straight from the segment files.
//! * [`describe_cluster_mirrors`]: KIP-1279's DescribeClusterMirrors.
//! * [`share_group_offsets`]: DescribeShareGroupOffsets v1 (KIP-1226's lag).

mod compact;
pub mod describe_cluster_mirrors;
pub mod fetch_response;
pub mod fetch_response_writer;
pub mod share_group_offsets;

pub use fetch_response::{
    FETCH_RESPONSE_MAX_VERSION, FETCH_RESPONSE_MIN_VERSION, FetchHeader, FetchParseError, FetchPartition,
    FetchResponseReader, FetchStep, NodeEndpoint, TopicRef,
};
pub use fetch_response_writer::{EncodedFetchResponse, FetchResponseWriter, PartitionAnswer, TopicKey};
