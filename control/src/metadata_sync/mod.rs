//! Metadata sync (KIP-1279's MirrorMetadataManager; DESIGN.md): the steps
//! a mirror's metadata round runs after reading the source's metadata, each
//! a standalone async function over our Kafka client that returns a
//! report. The coordinator (`coordinator::sync_round`) decides which
//! partitions and topics each step covers and keeps the reports; nothing
//! here holds mirror state or imports the coordinator.
//!
//! * [`topic_config_sync`] — each mirrored topic's config overrides from the
//!   source (DescribeConfigs), minus a documented exclude list (throttles,
//!   placement, tiered storage), and what changed since the last round.
//! * [`groups`] — consumer groups' committed offsets and share groups'
//!   start offsets from the source into our group coordinator, for
//!   mirrored partitions, skipping groups active here.
//! * [`acl_sync`] — the source's ACLs onto our listener, within the
//!   mirror's ACL include setting: missing ones created, extra ones deleted.
//! * [`deletion`] — when a topic absent at the source counts as deleted:
//!   several rounds, some minutes, by name and by id, never an ACL error.

pub mod acl_sync;
pub mod deletion;
pub mod groups;
pub mod topic_config_sync;
