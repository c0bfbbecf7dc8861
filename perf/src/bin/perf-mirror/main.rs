//! `perf-mirror`: ringmirror's end-to-end throughput and lag harness.
//!
//! Throughput (default): one in-process synthetic source per run serves the
//! same pre-built dataset to each scenario in turn, and each scenario runs as
//! a child process so its CPU time and page faults are its own:
//!
//! * `discard-read`  — our client (`Connection` + `FetchResponseReader` on a
//!   glommio executor pinned like shard 0) receives each partition's records
//!   into a reused page-aligned buffer and drops them: the ceiling.
//! * `discard-unaligned` — the same, but each receive starts where the
//!   previous one ended modulo 4 KiB, as appends into a segment do.
//! * `discard-crc`   — `discard-read` plus CRC32C validation of every batch.
//! * `discard-skip`  — records pass through the connection's 64 KiB buffer
//!   (`Connection::skip`), batch headers peeked for the offsets.
//! * `segment-inline`, `segment-ahead`, `segment-pwrite` — prototypes of the
//!   write path, in the same child: receive into a `MAP_SHARED` file mapping
//!   after `fallocate` + `MADV_POPULATE_WRITE` (inline as `Segment::tail_mut`
//!   does, or ahead on a helper thread), or receive into an aligned buffer and
//!   `pwrite` it; all CRC-validate. They isolate the kernel's cost of each way
//!   of getting bytes into the page cache from the rest of the agent.
//! * `segment-offload` — `segment-pwrite` with the `fallocate` + `pwrite` on
//!   a writer thread (not pinned) fed from a pool of receive buffers: how much
//!   the page-cache write costs the receiving core once it may run elsewhere.
//! * `mirror-1`, `mirror-2`, `mirror-1-copy`, `mirror-1-uring`,
//!   `mirror-1-sqpoll` — `ringmirror run` with 1 or 2 shards (`-copy`:
//!   `ingest = "aligned_copy"`, `-uring`: `ingest = "uring"`, `-sqpoll`:
//!   `ingest = "uring_sqpoll"`, else `"mmap"`) mirroring to a temporary
//!   data dir on disk; afterwards the segments are compared byte-for-byte
//!   with the source. With `@baseline` (`mirror-1-copy@baseline`) the
//!   `--baseline-ringmirror` binary runs instead: two builds side by side.
//! * `rdkafka-consume` — an rdkafka `BaseConsumer` (assign, from the beginning,
//!   no commits) reading everything: the consumer half of MirrorMaker 2.
//! * `rdkafka-mirror` — the same consumer re-producing every record with an
//!   rdkafka `BaseProducer` into a sink topic of the source (the whole MM2 path).
//!
//! Serving (consumer scenarios): the same rdkafka consumer (pinned to the
//! last CPU) reads a whole topic from a server pinned to CPU 0, and the
//! server's CPU is measured as well as the consumer's:
//!
//! * `serve-zero-copy` — `ringmirror run` with a `[listener]`, no mirror and
//!   1 shard, serving a data dir that holds the dataset (mirrored from the
//!   synthetic source once per harness run, verified): records go from the
//!   segment files to the socket with sendfile.
//! * `serve-copy` — the same with `zero_copy = false` (pread into a buffer, write).
//! * `synthetic-consume` — the synthetic source serving the same dataset from
//!   memory: the fastest server we have.
//! * `mock-consume` — librdkafka's mock cluster (1 broker) in a helper process.
//!   It keeps only ~5 MiB per partition, so it gets its own smaller dataset
//!   (`--mock-partitions` × `--mock-partition-kib`, the same batches),
//!   produced into it before the timed read.
//! * `synthetic-consume-mockdata` — the synthetic source serving the mock's
//!   dataset, to tell the mock's cost from that dataset's shape.
//! * `serve-2c-each-shard`, `serve-2c-one-acceptor` — the agent with 2 shards
//!   (one per core here; "2c") and `[listener] accept = "each_shard"` or
//!   `"one_acceptor"`, read by `--serve-consumers` rdkafka consumers at once,
//!   each reading everything. Both CPUs run a shard, so the consumers are not
//!   pinned: they share the CPUs with the agent. The agent logs every client
//!   connection with the shard serving it; each consumer reports how many
//!   bytes each of its connections received, so the harness tells which shard
//!   served the connection that carried its records (librdkafka also opens
//!   connections that carry none: bootstrap, group coordinator).
//!
//! Their window is the consumers': from the first message any consumer gets
//! to the last; each consumer must see exactly the dataset's records and
//! value bytes.
//!
//! The window measured is the same for all: from the source's first Fetch
//! request to completion (the source saw every partition fetched at its end
//! offset, or the child said it was done). CPU and faults come from
//! `/proc/<pid>/stat` sampled at both ends. Each scenario runs `--repeats`
//! times, interleaved; the table shows medians.
//!
//! Lag (`--lag`): the source appends at a steady rate, the agent runs
//! in-process (`Agent::start_observed`), and each batch's delay from becoming
//! available at the source to the first `Progress` event whose log end offset
//! covers it goes into an HDR histogram. With `--rate-fraction`, the rate is
//! that fraction of the maximum, measured first in the same run.
//!
//! Where things are: `throughput` (the scenario list, the harness that runs
//! each in turn, the repeats), one module per scenario family —
//! `discard` (fetch-and-discard children), `segment` (the write-path
//! prototypes), `mirror` (`ringmirror run` mirroring, `perf record`),
//! `rdkafka` (the consumer/producer child), `serve` (consumers reading from
//! a server) with `mock` (librdkafka's mock cluster), `lag` — then
//! `measure` (the measured windows: CPU and faults from `/proc`, timers,
//! the lag histogram), `report` (the tables) and `process` (children and
//! their output). Rates, medians and the machine line are the library's
//! `summary`, shared with `perf-kafka`. This file holds the command line
//! and the dispatch to a child or a run, never a scenario's code.

mod discard;
mod lag;
mod measure;
mod mirror;
mod mock;
mod process;
mod rdkafka;
mod report;
mod segment;
mod serve;
mod throughput;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ringmirror_perf::dataset::{Dataset, DatasetSpec};

use crate::discard::{DiscardArgs, child_discard};
use crate::mock::{MockArgs, child_mock};
use crate::rdkafka::{RdkafkaArgs, child_rdkafka};

/// The topic every source serves.
const TOPIC: &str = "perf-source";
/// The topic `rdkafka-mirror` produces into at the source.
const SINK_TOPIC: &str = "perf-sink";

/// Without `--scenarios`: every scenario against the synthetic source but
/// `segment-offload` (the serving ones are asked for by name).
const DEFAULT_SCENARIOS: &str = "discard-read,discard-unaligned,discard-crc,discard-skip,segment-inline,segment-ahead,segment-pwrite,\
     mirror-1,mirror-1-copy,mirror-1-uring,mirror-2,rdkafka-consume,rdkafka-mirror";

#[derive(Parser)]
#[command(about = "ringmirror throughput and lag harness (everything on 127.0.0.1)")]
struct Args {
    #[command(subcommand)]
    child: Option<ChildCommand>,
    /// MiB of record batches over all partitions (throughput runs).
    #[arg(long, default_value_t = 2048)]
    size_mb: u64,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Value bytes per record.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Records per batch (16 × 1 KiB ≈ 16 KiB batches, Kafka's default batch.size).
    #[arg(long, default_value_t = 16)]
    batch_records: usize,
    /// Runs per scenario; the table shows medians.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Comma-separated scenarios, run in this order in every repeat.
    #[arg(long, default_value = DEFAULT_SCENARIOS)]
    scenarios: String,
    /// The ringmirror binary (default: next to this one).
    #[arg(long)]
    ringmirror: Option<PathBuf>,
    /// Another `ringmirror` build for the `mirror-*@baseline` scenarios
    /// (e.g. `mirror-1-copy,mirror-1-copy@baseline`: two builds side by side in one run).
    #[arg(long)]
    baseline_ringmirror: Option<PathBuf>,
    /// Also draw the results as PNG plots into this directory (e.g. `perf/`).
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// Where temporary data dirs go.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 500)]
    fetch_max_wait_ms: u64,
    #[arg(long, default_value_t = 1 << 20)]
    fetch_partition_max_bytes: i32,
    #[arg(long, default_value_t = 50 << 20)]
    fetch_max_bytes: i32,
    /// CPU for the source's threads (default: the last one; shard 0 and the
    /// discard client run on CPU 0).
    #[arg(long)]
    source_cpu: Option<usize>,
    /// Unmeasured warm-up runs of every scenario before the measured ones.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Pause after each run (after its data dir is synced and deleted).
    #[arg(long, default_value_t = 0.0)]
    settle_s: f64,
    /// Give up on one run after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// Record the agent of the first mirror-1 run with `perf record` into this file.
    #[arg(long)]
    perf_record: Option<PathBuf>,
    /// Call graph mode for --perf-record (`dwarf` or `fp`).
    #[arg(long, default_value = "dwarf")]
    perf_call_graph: String,
    /// Measure lag instead of throughput.
    #[arg(long)]
    lag: bool,
    /// Lag: the source's append rate over all partitions, MB/s (10^6 bytes).
    #[arg(long, default_value_t = 50.0)]
    rate_mb_s: f64,
    /// Lag: append at this fraction of the maximum rate instead of `--rate-mb-s`; the maximum is
    /// measured first in the same run (the agent mirroring `--size-mb` as fast as it can, timed
    /// until a sync of what it wrote returned: the rate the disk sustains, not the page cache's).
    #[arg(long)]
    rate_fraction: Option<f64>,
    /// Lag: how long to append.
    #[arg(long, default_value_t = 20)]
    lag_seconds: u64,
    /// Extra agent `[log]` settings, `key=value` (TOML value), repeatable,
    /// e.g. `--log-setting prefault_bytes=1048576`.
    #[arg(long)]
    log_setting: Vec<String>,
    /// Lag: the agent's ingest mode (`mmap`, `aligned_copy`, `uring` or `uring_sqpoll`).
    #[arg(long, default_value = "mmap")]
    ingest: String,
    /// Lag: batches that became available in the first seconds are left out (agent start-up).
    #[arg(long, default_value_t = 2)]
    lag_warmup_s: u64,
    /// mock-consume: partitions of the mock's dataset.
    #[arg(long, default_value_t = 128)]
    mock_partitions: i32,
    /// mock-consume: KiB of batches per partition (the mock keeps at most 5 MiB).
    #[arg(long, default_value_t = 4096)]
    mock_partition_kib: u64,
    /// serve-2c-*: rdkafka consumers reading at once, each reading everything.
    #[arg(long, default_value_t = 2)]
    serve_consumers: usize,
}

impl Args {
    /// A dataset of `--record-bytes` records, `--batch-records` to a batch,
    /// on the topic every source serves.
    fn dataset(&self, partitions: i32, bytes_per_partition: u64, seed: u64) -> Dataset {
        Dataset::build(DatasetSpec {
            topic: TOPIC.into(),
            partitions,
            bytes_per_partition,
            record_bytes: self.record_bytes,
            records_per_batch: self.batch_records,
            seed,
        })
    }
}

#[derive(Subcommand)]
enum ChildCommand {
    /// Internal: fetch everything with our client and drop it.
    #[command(hide = true)]
    Discard(DiscardArgs),
    /// Internal: read everything with an rdkafka consumer (and re-produce it).
    #[command(hide = true)]
    Rdkafka(RdkafkaArgs),
    /// Internal: run librdkafka's mock cluster until killed.
    #[command(hide = true)]
    MockCluster(MockArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,ringmirror=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let result = match &args.child {
        Some(ChildCommand::Discard(a)) => child_discard(a.clone()),
        Some(ChildCommand::Rdkafka(a)) => child_rdkafka(a),
        Some(ChildCommand::MockCluster(a)) => child_mock(a),
        None if args.lag => lag::run_lag(&args),
        None => throughput::run_throughput(&args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
