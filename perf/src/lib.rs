//! ringmirror's end-to-end performance harness.
//!
//! * [`dataset`] pre-builds valid v2 record batches in memory.
//! * [`synthetic_source`] serves them over the Kafka protocol on 127.0.0.1,
//!   either all at once (fixed dataset) or appended at a steady rate, cheaply
//!   enough that the source is never the bottleneck.
//! * [`procstat`] reads a process's CPU time and page faults from `/proc`.
//!
//! The binaries are `synthetic-source` (the source alone) and `perf-mirror`
//! (the harness: fetch-and-discard, mirroring, the rdkafka baseline, lag,
//! and consumers reading from the agent's listener, the source and the mock).

pub mod dataset;
pub mod procstat;
pub mod synthetic_source;
