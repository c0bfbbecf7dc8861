//! The binary's tools besides the agent: `demo` (a source, a serving
//! agent and a mirroring one, verified byte for byte), `selfcheck` (the
//! partition log's crash test) and `dump-log` (a segment file's batches,
//! as Kafka's `kafka-dump-log.sh` prints them).

pub mod demo;
pub mod dump_log;
pub mod selfcheck;
