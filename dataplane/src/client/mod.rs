//! A Kafka protocol client on a glommio executor: connections with
//! size-prefixed framing and correlation ids, ApiVersions negotiation, and
//! the few requests the mirror needs (Metadata, ListOffsets,
//! OffsetForLeaderEpoch, Fetch), TLS, SASL (PLAIN, SCRAM) after ApiVersions.
//! Schemas come from the `kafka-protocol`
//! crate; Fetch responses are read as a stream (see [`ringmirror_protocol::wire`]) so
//! record bytes can go straight into the log.

pub mod backoff;
mod connection;
mod error;
pub mod mirror_epochs;
mod requests;
mod sasl;
mod tls;

pub use backoff::jittered_backoff;
pub use connection::{Connection, ConnectionOptions};
pub use error::ClientError;
pub use requests::{
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, PartitionFetch, end_offset_for_epoch, fetch_partition, list_offset,
};
pub use tls::{ClientCertFiles, TlsClientConfig, ca_certificates};
