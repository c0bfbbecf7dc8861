//! ringmirror's end-to-end performance harness.
//!
//! * [`dataset`] pre-builds valid v2 record batches in memory.
//! * [`synthetic_source`] serves them over the Kafka protocol on 127.0.0.1,
//!   either all at once (fixed dataset) or appended at a steady rate, cheaply
//!   enough that the source is never the bottleneck.
//! * [`log_files`] lists a partition directory's segments and checks that
//!   they hold the expected bytes, to compare logs.
//! * [`procstat`] reads a process's CPU time and page faults from `/proc`.
//! * [`plot`] draws PNG plots of the results (bars per scenario, lag CDFs).
//! * [`summary`] turns measurements into the reports' units (MB/s, CPU
//!   s/GB), medians and the machine's line.
//!
//! The binaries are `synthetic-source` (the source alone), `perf-mirror`
//! (the harness: fetch-and-discard, mirroring, the rdkafka baseline, lag,
//! and consumers reading from the agent's listener, the source and the mock)
//! and `perf-kafka` (ringmirror beside a Kafka follower broker, MirrorMaker 2
//! and the rdkafka baseline, all copying from one Apache Kafka cluster that
//! `ringmirror-kafka-harness` starts).

pub mod dataset;
pub mod log_files;
pub mod plot;
pub mod procstat;
pub mod summary;
pub mod synthetic_source;
