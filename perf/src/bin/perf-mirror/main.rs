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
//! * `mirror-1`, `mirror-2`, `mirror-1-copy` — `ringmirror run` with 1 or 2
//!   shards (`-copy`: `ingest = "aligned_copy"`) mirroring to a temporary
//!   data dir on disk; afterwards the segments are compared byte-for-byte
//!   with the source.
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
//! covers it goes into an HDR histogram.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use glommio::{LocalExecutorBuilder, Placement};
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use ringmirror_dataplane::batch::{BatchIter, Validation, validate_batches};
use ringmirror_dataplane::client::{Connection, ConnectionOptions};
use ringmirror_dataplane::fetch::fetch_source_metadata;
use ringmirror_dataplane::serve::AcceptMode;
use ringmirror_dataplane::wire::{FetchResponseReader, FetchStep};
use ringmirror_perf::dataset::{Dataset, DatasetSpec};
use ringmirror_perf::log_files::log_files;
use ringmirror_perf::procstat::{self, ProcStat};
use ringmirror_perf::synthetic_source::{SourceOptions, SyntheticSource};

const TOPIC: &str = "perf-source";
const SINK_TOPIC: &str = "perf-sink";
const BATCH_HEADER_BYTES: usize = 61;
/// Where every server of the consumer scenarios runs: the agent's shard 0 is
/// pinned there, so the synthetic source and the mock are too.
const SERVER_CPU: usize = 0;
/// librdkafka's mock cluster deletes a partition's oldest message sets once
/// it holds more than this (`mpart->max_size` in rdkafka_mock.c).
const MOCK_PARTITION_MAX_BYTES: u64 = 5 << 20;
/// How long a server may take to start listening.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The agent's shards in the `serve-2c-*` scenarios: one per core of the
/// 2-CPU machine these were written for.
const SERVE_MANY_SHARDS: usize = 2;
/// The agent's log filter in the serving scenarios: its default plus the
/// listener's debug lines, which name the shard serving each connection.
const AGENT_SERVE_LOG_FILTER: &str = "warn,ringmirror=info,ringmirror_dataplane::serve::listener=debug";
const DEFAULT_SCENARIOS: &str = "discard-read,discard-unaligned,discard-crc,discard-skip,segment-inline,segment-ahead,segment-pwrite,\
     mirror-1,mirror-1-copy,mirror-2,rdkafka-consume,rdkafka-mirror";

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
    /// Lag: how long to append.
    #[arg(long, default_value_t = 20)]
    lag_seconds: u64,
    /// Extra agent `[log]` settings, `key=value` (TOML value), repeatable,
    /// e.g. `--log-setting prefault_bytes=1048576`.
    #[arg(long)]
    log_setting: Vec<String>,
    /// Lag: the agent's ingest mode (`mmap` or `aligned_copy`).
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DiscardMode {
    Read,
    Unaligned,
    Crc,
    Skip,
    /// Prototype of the agent's write path: receive into a MAP_SHARED file
    /// mapping, fallocate + MADV_POPULATE_WRITE inline before each receive
    /// (as `Segment::tail_mut` does), CRC-validate.
    SegmentInline,
    /// The same, with fallocate + MADV_POPULATE_WRITE done ahead by a helper thread.
    SegmentAhead,
    /// Alternative write path: receive into a page-aligned buffer, CRC-validate,
    /// fallocate ahead and `pwrite` into the file (no mapping, no zero-fill).
    SegmentPwrite,
    /// `SegmentPwrite` with the fallocate + pwrite on a writer thread (not
    /// pinned), fed from a pool of receive buffers: how much of the
    /// page-cache write can leave the receiving core.
    SegmentOffload,
}

#[derive(clap::Args, Clone, Debug)]
struct DiscardArgs {
    #[arg(long)]
    addr: String,
    #[arg(long, value_enum)]
    mode: DiscardMode,
    #[arg(long, default_value_t = 0)]
    cpu: usize,
    #[arg(long)]
    fetch_max_wait_ms: i32,
    #[arg(long)]
    fetch_partition_max_bytes: i32,
    #[arg(long)]
    fetch_max_bytes: i32,
    /// Where the segment modes write their files.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(clap::Args, Clone, Debug)]
struct RdkafkaArgs {
    #[arg(long)]
    addr: String,
    /// End offset of each partition, comma-separated.
    #[arg(long)]
    ends: String,
    /// Re-produce every record into this topic.
    #[arg(long)]
    produce_to: Option<String>,
    /// The bootstrap servers of --produce-to's cluster (default: --addr).
    #[arg(long)]
    produce_addr: Option<String>,
    #[arg(long)]
    fetch_max_wait_ms: u64,
    #[arg(long)]
    fetch_partition_max_bytes: i32,
    #[arg(long)]
    fetch_max_bytes: i32,
    /// Pin the consumer (all its threads) to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

#[derive(clap::Args, Clone, Debug)]
struct MockArgs {
    #[arg(long)]
    partitions: i32,
    /// Pin the mock (all its threads) to this CPU.
    #[arg(long)]
    cpu: usize,
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
        None if args.lag => run_lag(&args),
        None => run_throughput(&args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------- children

/// A page-aligned, pre-faulted receive buffer, reused for every response.
struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    const ALIGN: usize = 4096;

    fn new(len: usize) -> Self {
        let len = len.next_multiple_of(Self::ALIGN);
        let layout = std::alloc::Layout::from_size_align(len, Self::ALIGN).expect("layout");
        // SAFETY: non-zero size; the pointer is checked; write_bytes stays in the allocation.
        let ptr = unsafe {
            let ptr = std::alloc::alloc(layout);
            assert!(!ptr.is_null(), "out of memory");
            std::ptr::write_bytes(ptr, 0, len); // fault every page in now
            ptr
        };
        Self { ptr, len }
    }

    /// `len` bytes starting `offset` bytes into the buffer, growing it if needed.
    fn slice(&mut self, offset: usize, len: usize) -> &mut [u8] {
        if offset + len > self.len {
            *self = Self::new((offset + len) * 2);
        }
        // SAFETY: in bounds of an allocation this value owns exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, Self::ALIGN).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

fn child_discard(a: DiscardArgs) -> anyhow::Result<()> {
    let bytes = LocalExecutorBuilder::new(Placement::Fixed(a.cpu))
        .name("discard")
        .spawn(move || async move { discard_loop(&a).await })
        .map_err(|e| anyhow::anyhow!("start executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e}"))??;
    println!("done {bytes}");
    Ok(())
}

/// The offset after the last whole batch in `buf` (or `from` if none).
fn next_offset_after(buf: &[u8], from: i64) -> i64 {
    BatchIter::new(buf, u32::MAX)
        .map_while(Result::ok)
        .last()
        .map_or(from, |(_, b)| b.next_offset())
}

async fn discard_loop(a: &DiscardArgs) -> anyhow::Result<u64> {
    let mut conn = Connection::connect(&a.addr, ConnectionOptions::default()).await?;
    let metadata = fetch_source_metadata(&mut conn, Some(&[TOPIC.to_string()])).await?;
    let mut partitions: Vec<(i32, i32)> = metadata
        .partitions
        .iter()
        .filter(|(tp, _)| tp.topic == TOPIC)
        .map(|(tp, p)| (tp.partition, p.leader_epoch))
        .collect();
    partitions.sort_unstable();
    anyhow::ensure!(!partitions.is_empty(), "topic {TOPIC} has no partitions at the source");
    let n = partitions.len();
    let mut offsets = vec![0i64; n];
    let mut high_watermarks = vec![-1i64; n];
    let mut buf = AlignedBuf::new(2 * a.fetch_partition_max_bytes.max(1 << 20) as usize);
    let mut appended = 0usize; // for Unaligned: where the next receive would start in a segment
    let version = conn.version_for::<FetchRequest>(4, 16)?;
    let mut segments = match a.mode {
        DiscardMode::SegmentInline
        | DiscardMode::SegmentAhead
        | DiscardMode::SegmentPwrite
        | DiscardMode::SegmentOffload => {
            let dir = a
                .data_dir
                .as_deref()
                .context("--data-dir is needed for the segment modes")?;
            Some(SegmentWriter::new(dir, n, a.mode)?)
        }
        _ => None,
    };
    let mut total = 0u64;
    loop {
        if (0..n).all(|i| high_watermarks[i] >= 0 && offsets[i] >= high_watermarks[i]) {
            if let Some(offload) = segments.as_mut().and_then(|s| s.offload.as_mut()) {
                offload.finish()?;
            }
            return Ok(total);
        }
        let mut request = FetchRequest::default();
        request.replica_id = BrokerId(-1);
        request.max_wait_ms = a.fetch_max_wait_ms;
        request.min_bytes = 1;
        request.max_bytes = a.fetch_max_bytes;
        request.session_id = 0;
        request.session_epoch = -1;
        let mut topic = FetchTopic::default();
        topic.topic = TopicName(StrBytes::from_static_str(TOPIC));
        for (i, &(partition, epoch)) in partitions.iter().enumerate() {
            let mut p = FetchPartition::default();
            p.partition = partition;
            p.current_leader_epoch = epoch;
            p.fetch_offset = offsets[i];
            p.last_fetched_epoch = -1;
            p.log_start_offset = -1;
            p.partition_max_bytes = a.fetch_partition_max_bytes;
            topic.partitions.push(p);
        }
        request.topics = vec![topic];
        let correlation_id = conn.send(&request, version).await?;
        let frame_len = conn.read_frame_len().await?;
        let mut reader = FetchResponseReader::new(version, frame_len)?;
        let mut current = None;
        loop {
            let (consumed, step) = reader.advance(conn.buffered())?;
            conn.consume(consumed);
            match step {
                FetchStep::NeedMore => {
                    let unread = reader.remaining().saturating_sub(conn.buffered().len());
                    anyhow::ensure!(unread > 0, "response ended early");
                    conn.fill(unread).await?;
                }
                FetchStep::Header => {
                    let h = reader.header();
                    anyhow::ensure!(h.correlation_id == correlation_id, "correlation id mismatch");
                    anyhow::ensure!(h.error_code == 0, "fetch error {}", h.error_code);
                }
                FetchStep::Topic => {}
                FetchStep::Records { records_len } => {
                    let index = partitions
                        .iter()
                        .position(|&(p, _)| p == reader.partition().partition_index)
                        .context("response for a partition not asked for")?;
                    current = Some(index);
                    let from = offsets[index];
                    offsets[index] = match a.mode {
                        DiscardMode::Read => {
                            let dst = buf.slice(0, records_len);
                            conn.read_exact_into(dst).await?;
                            next_offset_after(dst, from)
                        }
                        DiscardMode::Unaligned => {
                            let dst = buf.slice(appended % 4096, records_len);
                            conn.read_exact_into(dst).await?;
                            appended += records_len;
                            next_offset_after(dst, from)
                        }
                        DiscardMode::Crc => {
                            let dst = buf.slice(0, records_len);
                            conn.read_exact_into(dst).await?;
                            let range = validate_batches(
                                dst,
                                &Validation {
                                    next_offset: from,
                                    max_batch_bytes: 64 << 20,
                                    fetch_epoch: Some(partitions[index].1),
                                    last_epoch: None,
                                },
                            );
                            anyhow::ensure!(range.error.is_none(), "bad batch: {:?}", range.error);
                            range.next_offset
                        }
                        DiscardMode::Skip => skip_batches(&mut conn, records_len, from).await?,
                        DiscardMode::SegmentInline
                        | DiscardMode::SegmentAhead
                        | DiscardMode::SegmentPwrite
                        | DiscardMode::SegmentOffload => {
                            let segments = segments.as_mut().expect("segment modes have segments");
                            let dst = segments.tail(index, records_len).await?;
                            conn.read_exact_into(dst).await?;
                            let range = validate_batches(
                                dst,
                                &Validation {
                                    next_offset: from,
                                    max_batch_bytes: 64 << 20,
                                    fetch_epoch: Some(partitions[index].1),
                                    last_epoch: None,
                                },
                            );
                            anyhow::ensure!(range.error.is_none(), "bad batch: {:?}", range.error);
                            segments.commit(index, range.valid_bytes)?;
                            range.next_offset
                        }
                    };
                    total += records_len as u64;
                    reader.records_consumed();
                }
                FetchStep::PartitionEnd => {
                    if let Some(i) = current.take() {
                        let p = reader.partition();
                        anyhow::ensure!(
                            p.error_code == 0,
                            "partition {} error {}",
                            p.partition_index,
                            p.error_code
                        );
                        high_watermarks[i] = p.high_watermark;
                    }
                }
                FetchStep::Done => break,
            }
        }
    }
}

/// Bytes reserved (fallocate) and pre-faulted (MADV_POPULATE_WRITE) per step,
/// as the agent's defaults (`preallocate_bytes` 16 MiB, `prefault_bytes` 8 MiB).
const RESERVE_STEP: usize = 16 << 20;
const PREFAULT_STEP: usize = 8 << 20;
/// How far ahead of the write position the helper keeps pages populated.
const AHEAD_BYTES: usize = 32 << 20;
/// Virtual size of each segment mapping.
const SEGMENT_MAP_BYTES: usize = 8 << 30;

/// One file per partition, mapped shared, written at the tail like a segment.
struct SegmentFile {
    file: std::fs::File,
    map: *mut u8,
    size: usize,
    allocated: usize,
    /// Populated up to here (shared with the helper in ahead mode).
    populated: Arc<std::sync::atomic::AtomicUsize>,
    /// Ahead mode: the helper populates up to here.
    wanted: Arc<std::sync::atomic::AtomicUsize>,
}

// SAFETY: the mapping is only written by the owning thread; the helper only
// calls fallocate/madvise on ranges ahead of the write position.
unsafe impl Send for SegmentFile {}

fn reserve_and_populate(file: &std::fs::File, map: *mut u8, allocated: &mut usize, from: usize, to: usize) {
    use std::os::fd::AsRawFd;
    if to > *allocated {
        let target = to.max(*allocated + RESERVE_STEP);
        // SAFETY: plain syscall on our file.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, *allocated as i64, (target - *allocated) as i64) };
        assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
        *allocated = target;
    }
    // SAFETY: the range lies inside the mapping.
    let rc = unsafe { libc::madvise(map.add(from).cast(), to - from, libc::MADV_POPULATE_WRITE) };
    assert_eq!(rc, 0, "madvise: {}", std::io::Error::last_os_error());
}

struct SegmentWriter {
    segments: Vec<SegmentFile>,
    ahead: bool,
    /// Receive buffer of the pwrite mode.
    pwrite: Option<AlignedBuf>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    helper: Option<std::thread::JoinHandle<()>>,
    offload: Option<Offload>,
}

/// The writer thread of `segment-offload` and the buffers it hands back.
struct Offload {
    jobs: Option<std::sync::mpsc::Sender<WriteJob>>,
    free: std::sync::mpsc::Receiver<AlignedBuf>,
    /// The buffer the current receive goes into.
    current: Option<AlignedBuf>,
    writer: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

struct WriteJob {
    segment: usize,
    at: usize,
    len: usize,
    buf: AlignedBuf,
}

/// Buffers in flight between the receiving core and the writer thread.
const OFFLOAD_BUFFERS: usize = 8;

impl Offload {
    fn start(segments: &[SegmentFile], buffer_bytes: usize) -> anyhow::Result<Self> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let files = segments
            .iter()
            .map(|s| s.file.try_clone())
            .collect::<std::io::Result<Vec<_>>>()?;
        let (jobs, job_rx) = std::sync::mpsc::channel::<WriteJob>();
        let (free_tx, free) = std::sync::mpsc::channel();
        for _ in 0..OFFLOAD_BUFFERS {
            free_tx.send(AlignedBuf::new(buffer_bytes)).expect("receiver alive");
        }
        let writer = std::thread::spawn(move || -> anyhow::Result<()> {
            let mut allocated = vec![0usize; files.len()];
            for job in job_rx {
                let file = &files[job.segment];
                let end = job.at + job.len;
                if end > allocated[job.segment] {
                    let target = end.max(allocated[job.segment] + RESERVE_STEP);
                    let from = allocated[job.segment];
                    // SAFETY: plain syscall on our file.
                    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, from as i64, (target - from) as i64) };
                    anyhow::ensure!(rc == 0, "fallocate: {}", std::io::Error::last_os_error());
                    allocated[job.segment] = target;
                }
                let mut buf = job.buf;
                file.write_all_at(buf.slice(0, job.len), job.at as u64)?;
                // The receiving side may have finished; then the buffer just goes.
                let _ = free_tx.send(buf);
            }
            Ok(())
        });
        Ok(Self {
            jobs: Some(jobs),
            free,
            current: None,
            writer: Some(writer),
        })
    }

    /// A buffer for the next receive, waiting (without blocking the executor) for one to come back.
    async fn buffer(&mut self, len: usize) -> anyhow::Result<&mut [u8]> {
        while self.current.is_none() {
            match self.free.try_recv() {
                Ok(buf) => self.current = Some(buf),
                Err(std::sync::mpsc::TryRecvError::Empty) => glommio::timer::sleep(Duration::from_micros(20)).await,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => anyhow::bail!("the writer thread failed"),
            }
        }
        Ok(self.current.as_mut().expect("just set").slice(0, len))
    }

    fn write(&mut self, segment: usize, at: usize, len: usize) -> anyhow::Result<()> {
        let buf = self.current.take().context("commit without a receive")?;
        let job = WriteJob { segment, at, len, buf };
        self.jobs
            .as_ref()
            .expect("open until finish")
            .send(job)
            .map_err(|_| anyhow::anyhow!("the writer thread failed"))
    }

    /// Waits for every queued write.
    fn finish(&mut self) -> anyhow::Result<()> {
        drop(self.jobs.take());
        match self.writer.take() {
            Some(writer) => writer
                .join()
                .map_err(|_| anyhow::anyhow!("the writer thread panicked"))?,
            None => Ok(()),
        }
    }
}

// SAFETY: an `AlignedBuf` owns its allocation exclusively; moving it to the
// writer thread moves that ownership.
unsafe impl Send for AlignedBuf {}

impl SegmentWriter {
    fn new(dir: &Path, partitions: usize, mode: DiscardMode) -> anyhow::Result<Self> {
        let ahead = mode == DiscardMode::SegmentAhead;
        use std::os::fd::AsRawFd;
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        std::fs::create_dir_all(dir)?;
        let mut segments = Vec::with_capacity(partitions);
        for p in 0..partitions {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(dir.join(format!("{p:020}.log")))?;
            // SAFETY: a fresh shared mapping of our own file.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    SEGMENT_MAP_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            anyhow::ensure!(map != libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
            segments.push(SegmentFile {
                file,
                map: map.cast(),
                size: 0,
                allocated: 0,
                populated: Arc::new(AtomicUsize::new(0)),
                wanted: Arc::new(AtomicUsize::new(0)),
            });
        }
        let offload = match mode {
            DiscardMode::SegmentOffload => Some(Offload::start(&segments, 4 << 20)?),
            _ => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let helper = if ahead {
            // The helper owns its own handles to the files and mappings.
            let jobs: Vec<(std::fs::File, usize, Arc<AtomicUsize>, Arc<AtomicUsize>)> = segments
                .iter()
                .map(|s| {
                    Ok((
                        s.file.try_clone()?,
                        s.map as usize,
                        Arc::clone(&s.populated),
                        Arc::clone(&s.wanted),
                    ))
                })
                .collect::<std::io::Result<_>>()?;
            let stop = Arc::clone(&stop);
            Some(std::thread::spawn(move || {
                let mut allocated = vec![0usize; jobs.len()];
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let mut idle = true;
                    for (i, (file, map, populated, wanted)) in jobs.iter().enumerate() {
                        let from = populated.load(std::sync::atomic::Ordering::Acquire);
                        if from < wanted.load(std::sync::atomic::Ordering::Acquire) {
                            let to = (from + PREFAULT_STEP).min(SEGMENT_MAP_BYTES);
                            reserve_and_populate(file, *map as *mut u8, &mut allocated[i], from, to);
                            populated.store(to, std::sync::atomic::Ordering::Release);
                            idle = false;
                        }
                    }
                    if idle {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }))
        } else {
            None
        };
        Ok(Self {
            segments,
            ahead,
            pwrite: (mode == DiscardMode::SegmentPwrite).then(|| AlignedBuf::new(4 << 20)),
            stop,
            helper,
            offload,
        })
    }

    /// Room for `len` bytes at partition `i`'s tail, reserved and pre-faulted.
    async fn tail(&mut self, i: usize, len: usize) -> anyhow::Result<&mut [u8]> {
        use std::sync::atomic::Ordering;
        let s = &mut self.segments[i];
        let end = s.size + len;
        anyhow::ensure!(end <= SEGMENT_MAP_BYTES, "segment full");
        if let Some(buf) = &mut self.pwrite {
            return Ok(buf.slice(0, len));
        }
        if let Some(offload) = &mut self.offload {
            return offload.buffer(len).await;
        }
        if self.ahead {
            s.wanted.fetch_max(end + AHEAD_BYTES, Ordering::AcqRel);
            while s.populated.load(Ordering::Acquire) < end {
                glommio::timer::sleep(Duration::from_micros(20)).await;
            }
        } else {
            let populated = s.populated.load(Ordering::Relaxed);
            if end > populated {
                let to = end.max(populated + PREFAULT_STEP).next_multiple_of(4096);
                reserve_and_populate(&s.file, s.map, &mut s.allocated, populated, to);
                s.populated.store(to, Ordering::Relaxed);
            }
        }
        // SAFETY: inside the mapping, populated, and only this thread writes the tail.
        Ok(unsafe { std::slice::from_raw_parts_mut(s.map.add(s.size), len) })
    }

    fn commit(&mut self, i: usize, len: usize) -> anyhow::Result<()> {
        use std::os::unix::fs::FileExt;
        let s = &mut self.segments[i];
        if let Some(buf) = &mut self.pwrite {
            let end = s.size + len;
            if end > s.allocated {
                use std::os::fd::AsRawFd;
                let target = end.max(s.allocated + RESERVE_STEP);
                // SAFETY: plain syscall on our file.
                let rc = unsafe {
                    libc::fallocate(s.file.as_raw_fd(), 0, s.allocated as i64, (target - s.allocated) as i64)
                };
                anyhow::ensure!(rc == 0, "fallocate: {}", std::io::Error::last_os_error());
                s.allocated = target;
            }
            s.file.write_all_at(buf.slice(0, len), s.size as u64)?;
        }
        if let Some(offload) = &mut self.offload {
            offload.write(i, s.size, len)?;
        }
        s.size += len;
        Ok(())
    }
}

impl Drop for SegmentWriter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(offload) = &mut self.offload
            && let Err(e) = offload.finish()
        {
            eprintln!("segment-offload: {e:#}");
        }
        if let Some(h) = self.helper.take() {
            let _ = h.join();
        }
        for s in &self.segments {
            // SAFETY: unmapping our own mapping; nothing borrows it any more.
            unsafe { libc::munmap(s.map.cast(), SEGMENT_MAP_BYTES) };
        }
    }
}

/// Drops `len` record bytes through the connection's own buffer, peeking
/// at batch headers only; returns the offset after the last whole batch.
async fn skip_batches(conn: &mut Connection, len: usize, from: i64) -> anyhow::Result<i64> {
    let mut left = len;
    let mut next = from;
    let mut header = [0u8; BATCH_HEADER_BYTES];
    while left >= BATCH_HEADER_BYTES {
        conn.read_exact_into(&mut header).await?;
        left -= BATCH_HEADER_BYTES;
        let base = i64::from_be_bytes(header[0..8].try_into().expect("8 bytes"));
        let size = 12 + i32::from_be_bytes(header[8..12].try_into().expect("4 bytes")).max(0) as usize;
        let rest = size.saturating_sub(BATCH_HEADER_BYTES);
        if rest > left {
            break;
        }
        conn.skip(rest).await?;
        left -= rest;
        let last_delta = i32::from_be_bytes(header[23..27].try_into().expect("4 bytes"));
        next = base + i64::from(last_delta) + 1;
    }
    conn.skip(left).await?;
    Ok(next)
}

fn child_rdkafka(a: &RdkafkaArgs) -> anyhow::Result<()> {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::{Offset, TopicPartitionList};

    let ends: Vec<i64> = a.ends.split(',').map(str::parse).collect::<Result<_, _>>()?;
    if let Some(cpu) = a.cpu {
        // Before librdkafka starts its threads, so that they inherit the mask.
        procstat::pin_current_thread(cpu);
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &a.addr)
        .set("group.id", "ringmirror-perf-baseline")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", a.fetch_max_wait_ms.to_string())
        .set("fetch.max.bytes", a.fetch_max_bytes.to_string())
        .set("max.partition.fetch.bytes", a.fetch_partition_max_bytes.to_string())
        .create()
        .context("create consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..ends.len() {
        tpl.add_partition_offset(TOPIC, p as i32, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let producer: Option<BaseProducer> = a
        .produce_to
        .as_ref()
        .map(|_| {
            ClientConfig::new()
                .set("bootstrap.servers", a.produce_addr.as_ref().unwrap_or(&a.addr))
                .set("linger.ms", "5")
                .set("acks", "all")
                .set("queue.buffering.max.kbytes", "1048576")
                .set("queue.buffering.max.messages", "1000000")
                .create()
        })
        .transpose()
        .context("create producer")?;
    let mut done = vec![false; ends.len()];
    for (p, &end) in ends.iter().enumerate() {
        done[p] = end == 0;
    }
    let (mut messages, mut bytes) = (0u64, 0u64);
    while done.iter().any(|d| !d) {
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(e)) => {
                eprintln!("consumer: {e}");
                continue;
            }
            Some(Ok(m)) => m,
        };
        if messages == 0 {
            // Starts the serving scenarios' window.
            println!("first");
        }
        let payload = message.payload().unwrap_or_default();
        let key = message.key();
        messages += 1;
        bytes += (payload.len() + key.map_or(0, <[u8]>::len)) as u64;
        let partition = message.partition();
        if let (Some(producer), Some(sink)) = (&producer, &a.produce_to) {
            let mut record = BaseRecord::<[u8], [u8]>::to(sink).partition(partition).payload(payload);
            if let Some(k) = key {
                record = record.key(k);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(1));
                    }
                    Err((e, _)) => bail!("produce: {e}"),
                }
            }
            if messages % 1024 == 0 {
                producer.poll(Duration::ZERO);
            }
        }
        let p = partition as usize;
        if message.offset() + 1 >= ends[p] {
            done[p] = true;
        }
    }
    if let Some(producer) = &producer {
        producer.flush(Duration::from_secs(120)).context("flush producer")?;
    }
    println!("done {bytes} {messages}");
    // After "done", so outside the window; while the consumer still holds
    // its connections.
    let server_port = a.addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok());
    let conns: Vec<String> = server_port
        .map(tcp_connections_to)
        .unwrap_or_default()
        .iter()
        .map(|(port, received)| format!("{port}:{received}"))
        .collect();
    println!("conns {}", conns.join(" "));
    Ok(())
}

/// A consumer's connections to its server: (local port, bytes received).
type Conns = Vec<(u16, u64)>;

/// This process's IPv4 TCP connections to port `server_port`, from its open
/// descriptors.
fn tcp_connections_to(server_port: u16) -> Conns {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for fd in fds
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        let (Some(local), Some(peer)) = (inet_port(fd, libc::getsockname), inet_port(fd, libc::getpeername)) else {
            continue;
        };
        if peer != server_port {
            continue;
        }
        // SAFETY: a zeroed tcp_info is valid; getsockopt writes at most `len` bytes into it.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&raw mut info).cast(), &mut len) };
        if rc == 0 {
            found.push((local, info.tcpi_bytes_received));
        }
    }
    found
}

/// The port of `fd`'s local or peer address (`get`: getsockname or
/// getpeername), if `fd` is an IPv4 socket.
fn inet_port(
    fd: i32,
    get: unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int,
) -> Option<u16> {
    // SAFETY: a zeroed sockaddr_in is valid; `get` writes at most `len` bytes
    // into it and fails on descriptors that are not sockets.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let rc = unsafe { get(fd, (&raw mut addr).cast(), &mut len) };
    (rc == 0 && addr.sin_family == libc::AF_INET as libc::sa_family_t).then(|| u16::from_be(addr.sin_port))
}

fn child_mock(a: &MockArgs) -> anyhow::Result<()> {
    // Before librdkafka starts the mock's threads, so that they inherit the mask.
    procstat::pin_current_thread(a.cpu);
    let cluster = rdkafka::mocking::MockCluster::new(1).context("start the mock cluster")?;
    cluster
        .create_topic(TOPIC, a.partitions, 1)
        .context("create the mock's topic")?;
    println!("bootstrap {}", cluster.bootstrap_servers());
    // The mock runs on its own threads; the harness kills this process when done.
    loop {
        std::thread::park();
    }
}

// ---------------------------------------------------------------- throughput

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Discard(DiscardMode),
    /// `copy`: the agent's `ingest = "aligned_copy"` instead of the default `"mmap"`.
    Mirror {
        shards: usize,
        copy: bool,
    },
    Rdkafka {
        produce: bool,
    },
    /// The rdkafka consumer reading everything from `Server`.
    Consume(Server),
}

/// What serves the consumer of a serving scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    /// `ringmirror run` with a `[listener]` and no mirror, 1 shard.
    Agent { zero_copy: bool },
    /// The same with `SERVE_MANY_SHARDS` shards, read by several consumers.
    AgentShards { accept: AcceptMode },
    /// The synthetic source, serving the main dataset or the mock's.
    Synthetic { mock_data: bool },
    /// librdkafka's mock cluster in a helper process.
    Mock,
}

impl Scenario {
    fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "discard-read" => Self::Discard(DiscardMode::Read),
            "discard-unaligned" => Self::Discard(DiscardMode::Unaligned),
            "discard-crc" => Self::Discard(DiscardMode::Crc),
            "discard-skip" => Self::Discard(DiscardMode::Skip),
            "segment-inline" => Self::Discard(DiscardMode::SegmentInline),
            "segment-ahead" => Self::Discard(DiscardMode::SegmentAhead),
            "segment-pwrite" => Self::Discard(DiscardMode::SegmentPwrite),
            "segment-offload" => Self::Discard(DiscardMode::SegmentOffload),
            "rdkafka-consume" => Self::Rdkafka { produce: false },
            "rdkafka-mirror" => Self::Rdkafka { produce: true },
            "serve-zero-copy" => Self::Consume(Server::Agent { zero_copy: true }),
            "serve-copy" => Self::Consume(Server::Agent { zero_copy: false }),
            "serve-2c-each-shard" => Self::Consume(Server::AgentShards {
                accept: AcceptMode::EachShard,
            }),
            "serve-2c-one-acceptor" => Self::Consume(Server::AgentShards {
                accept: AcceptMode::OneAcceptor,
            }),
            "synthetic-consume" => Self::Consume(Server::Synthetic { mock_data: false }),
            "synthetic-consume-mockdata" => Self::Consume(Server::Synthetic { mock_data: true }),
            "mock-consume" => Self::Consume(Server::Mock),
            s if s.starts_with("mirror-") => {
                let rest = &s["mirror-".len()..];
                let (shards, copy) = match rest.strip_suffix("-copy") {
                    Some(n) => (n, true),
                    None => (rest, false),
                };
                Self::Mirror {
                    shards: shards.parse().context("mirror-<shards>[-copy]")?,
                    copy,
                }
            }
            other => bail!("unknown scenario {other:?}"),
        })
    }

    fn name(&self) -> String {
        match self {
            Self::Discard(DiscardMode::Read) => "discard-read".into(),
            Self::Discard(DiscardMode::Unaligned) => "discard-unaligned".into(),
            Self::Discard(DiscardMode::Crc) => "discard-crc".into(),
            Self::Discard(DiscardMode::Skip) => "discard-skip".into(),
            Self::Discard(DiscardMode::SegmentInline) => "segment-inline".into(),
            Self::Discard(DiscardMode::SegmentAhead) => "segment-ahead".into(),
            Self::Discard(DiscardMode::SegmentPwrite) => "segment-pwrite".into(),
            Self::Discard(DiscardMode::SegmentOffload) => "segment-offload".into(),
            Self::Mirror { shards, copy: false } => format!("mirror-{shards}"),
            Self::Mirror { shards, copy: true } => format!("mirror-{shards}-copy"),
            Self::Rdkafka { produce: false } => "rdkafka-consume".into(),
            Self::Rdkafka { produce: true } => "rdkafka-mirror".into(),
            Self::Consume(Server::Agent { zero_copy: true }) => "serve-zero-copy".into(),
            Self::Consume(Server::Agent { zero_copy: false }) => "serve-copy".into(),
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::EachShard,
            }) => "serve-2c-each-shard".into(),
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::OneAcceptor,
            }) => "serve-2c-one-acceptor".into(),
            Self::Consume(Server::Synthetic { mock_data: false }) => "synthetic-consume".into(),
            Self::Consume(Server::Synthetic { mock_data: true }) => "synthetic-consume-mockdata".into(),
            Self::Consume(Server::Mock) => "mock-consume".into(),
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            Self::Discard(DiscardMode::Read) => "our client, records into a reused aligned buffer, dropped",
            Self::Discard(DiscardMode::Unaligned) => "same, receive offset = bytes so far mod 4096 (like appends)",
            Self::Discard(DiscardMode::Crc) => "discard-read + CRC32C/offset validation",
            Self::Discard(DiscardMode::Skip) => "our client, records through its 64 KiB buffer (skip)",
            Self::Discard(DiscardMode::SegmentInline) => {
                "prototype: recv into mmapped file, fallocate+MADV_POPULATE_WRITE inline, CRC"
            }
            Self::Discard(DiscardMode::SegmentAhead) => "same, fallocate+populate ahead on a helper thread",
            Self::Discard(DiscardMode::SegmentPwrite) => {
                "prototype: recv into aligned buffer, CRC, fallocate ahead + pwrite"
            }
            Self::Discard(DiscardMode::SegmentOffload) => "segment-pwrite with the pwrite on a writer thread",
            Self::Mirror { copy: false, .. } => {
                "ringmirror run (ingest mmap): recv into the segment mapping, validate, commit"
            }
            Self::Mirror { copy: true, .. } => {
                "ringmirror run (ingest aligned_copy): recv into aligned buffer, validate, copy in"
            }
            Self::Rdkafka { produce: false } => "rdkafka BaseConsumer reads every record",
            Self::Rdkafka { produce: true } => "rdkafka consumer → BaseProducer into a sink (MM2's path)",
            Self::Consume(Server::Agent { zero_copy: true }) => {
                "ringmirror run, [listener] only, 1 shard: records sent from the segments with sendfile"
            }
            Self::Consume(Server::Agent { zero_copy: false }) => {
                "same, zero_copy = false: records pread into a buffer, then written"
            }
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::EachShard,
            }) => "ringmirror run, 2 shards, sendfile, accept = each_shard: every shard accepts (SO_REUSEPORT)",
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::OneAcceptor,
            }) => "same, accept = one_acceptor: shard 0 accepts and hands connections out in turn",
            Self::Consume(Server::Synthetic { mock_data: false }) => {
                "synthetic source, records written from memory with writev (the fastest server)"
            }
            Self::Consume(Server::Synthetic { mock_data: true }) => "synthetic source serving the mock's dataset",
            Self::Consume(Server::Mock) => {
                "librdkafka mock cluster (1 broker, helper process): one message set per partition per Fetch"
            }
        }
    }
}

/// One measured run.
#[derive(Debug, Clone)]
struct Measured {
    wall: Duration,
    bytes: u64,
    stat: ProcStat,
    source_cpu: Duration,
    /// Busy CPU of the machine outside the measured child, the server and
    /// this harness (kernel writeback threads, other users of the machine).
    others_cpu: Duration,
    /// Serving scenarios: the server's CPU (`stat` is then the consumers').
    server: Option<ServerCpu>,
    /// Serving from the agent: which shards served the connections.
    spread: Option<Spread>,
}

/// CPU of the server the consumers read from, over the window.
#[derive(Debug, Clone)]
struct ServerCpu {
    cpu: Duration,
    /// The user/system split, when the server is a process of its own (agent,
    /// mock); the synthetic source's threads only count their total.
    stat: Option<ProcStat>,
    /// The agent's shard threads' CPU, by shard; empty for other servers.
    shards: Vec<Duration>,
}

/// Where an agent served its client connections (from its debug log).
#[derive(Debug, Clone)]
struct Spread {
    /// Connections each shard served; the harness's readiness probe is left out.
    connections: Vec<usize>,
    /// Per consumer: the shard that served its connection with the most bytes
    /// received (the one its Fetch requests went on), if the log names it.
    fetch_shards: Vec<Option<usize>>,
}

impl Measured {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.wall.as_secs_f64()
    }
    fn cpu_s_per_gb(&self) -> f64 {
        self.stat.cpu().as_secs_f64() / (self.bytes as f64 / 1e9)
    }
    fn faults_per_gb(&self) -> f64 {
        self.stat.minflt as f64 / (self.bytes as f64 / 1e9)
    }
    fn server_cpu_s_per_gb(&self) -> Option<f64> {
        self.server
            .as_ref()
            .map(|s| s.cpu.as_secs_f64() / (self.bytes as f64 / 1e9))
    }
    /// The agent's shard threads' CPU per GB served, "shard 0 / shard 1 / …".
    fn shard_cpu_s_per_gb(&self) -> String {
        let shards = self.server.as_ref().map_or(&[][..], |s| &s.shards[..]);
        let per_gb: Vec<String> = shards
            .iter()
            .map(|cpu| format!("{:.3}", cpu.as_secs_f64() / (self.bytes as f64 / 1e9)))
            .collect();
        per_gb.join(" / ")
    }
}

impl Spread {
    /// Connections per shard, "shard 0 / shard 1 / …".
    fn per_shard(&self) -> String {
        let counts: Vec<String> = self.connections.iter().map(usize::to_string).collect();
        counts.join(" / ")
    }

    /// The consumers' Fetch connections per shard, "shard 0 / shard 1 / …",
    /// and how many the log did not name.
    fn fetch_per_shard(&self) -> String {
        let mut counts = vec![0; self.connections.len()];
        for shard in self.fetch_shards.iter().flatten() {
            counts[*shard] += 1;
        }
        let counts: Vec<String> = counts.iter().map(usize::to_string).collect();
        let unknown = self.fetch_shards.iter().filter(|s| s.is_none()).count();
        if unknown > 0 {
            format!("{} ({unknown} not found)", counts.join(" / "))
        } else {
            counts.join(" / ")
        }
    }
}

enum DoneSignal {
    /// The source saw every partition fetched at its end offset.
    SourceCaughtUp,
    /// The child printed a line starting with "done".
    ChildSaysDone,
}

struct Watched {
    child: Child,
    /// The measured process: the child, or the workload of a `perf record` child.
    pid: u32,
    /// `perf record --control` FIFO: events are enabled for the measured window only.
    perf_control: Option<std::fs::File>,
    /// The child's stdout lines, with when each arrived.
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    /// The thread collecting `lines`; it ends when the child's stdout closes.
    reader: Option<std::thread::JoinHandle<()>>,
    log: PathBuf,
}

impl Watched {
    /// The first line the child printed starting with `prefix`, and when.
    fn line(&self, prefix: &str) -> Option<(Instant, String)> {
        self.lines
            .lock()
            .expect("lines lock")
            .iter()
            .find(|(_, l)| l.starts_with(prefix))
            .cloned()
    }

    /// The first line starting with `prefix` once the child has exited and
    /// all it printed has been read.
    fn last_words(&mut self, prefix: &str) -> Option<String> {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.line(prefix).map(|(_, line)| line)
    }

    /// Waits for a line starting with `prefix`; fails if the child exits first.
    fn wait_line(&self, prefix: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((_, line)) = self.line(prefix) {
                return Ok(line);
            }
            anyhow::ensure!(
                !exited_unreaped(self.child.id()),
                "child exited; its log:\n{}",
                log_tail(&self.log)
            );
            anyhow::ensure!(Instant::now() < deadline, "no {prefix:?} line after {timeout:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn spawn_watched(mut cmd: Command, log: &Path) -> anyhow::Result<Watched> {
    let log_file = std::fs::File::create(log)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("spawn {cmd:?}"))?;
    let stdout = child.stdout.take().expect("piped");
    let lines: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let seen = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            seen.lock().expect("lines lock").push((Instant::now(), line));
        }
    });
    Ok(Watched {
        pid: child.id(),
        perf_control: None,
        child,
        lines,
        reader: Some(reader),
        log: log.to_path_buf(),
    })
}

/// The pid of the program `perf record` runs, once it has exec'd.
fn workload_pid(perf_pid: u32, program: &Path) -> anyhow::Result<u32> {
    let name: String = program
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(15).collect())
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let children =
            std::fs::read_to_string(format!("/proc/{perf_pid}/task/{perf_pid}/children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == name {
                return Ok(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    bail!("perf record did not start {}", program.display())
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Waits for the measured window of a running child and samples it at both ends.
fn measure(
    w: &mut Watched,
    source: &SyntheticSource,
    signal: DoneSignal,
    bytes: u64,
    timeout: Duration,
) -> anyhow::Result<Measured> {
    let pid = w.pid;
    let deadline = Instant::now() + timeout;
    let mut start: Option<(Instant, ProcStat, ProcStat, Duration)> = None;
    loop {
        if start.is_none()
            && let Some(first) = source.first_fetch()
        {
            start = Some((
                first,
                procstat::read(pid)?,
                procstat::read(0)?,
                procstat::machine_busy(),
            ));
            if let Some(ctl) = &mut w.perf_control {
                ctl.write_all(b"enable\n")?;
            }
        }
        let done_at = match signal {
            DoneSignal::SourceCaughtUp => source.caught_up(),
            DoneSignal::ChildSaysDone => w.line("done").map(|(t, _)| t),
        };
        if let (Some(done_at), Some((first, stat0, own0, busy0))) = (done_at, start) {
            if let Some(ctl) = &mut w.perf_control {
                ctl.write_all(b"disable\n")?;
            }
            let stat1 = procstat::read(pid).context("the child exited before it could be sampled")?;
            let own1 = procstat::read(0)?;
            let busy1 = procstat::machine_busy();
            let stat = stat1.since(&stat0);
            let own = own1.since(&own0).cpu();
            return Ok(Measured {
                wall: done_at.saturating_duration_since(first),
                bytes,
                stat,
                // The harness process: the source's threads and a polling loop.
                source_cpu: own,
                others_cpu: busy1
                    .saturating_sub(busy0)
                    .saturating_sub(stat.cpu())
                    .saturating_sub(own),
                server: None,
                spread: None,
            });
        }
        if exited_unreaped(w.child.id()) {
            // Its "done" line may still be on its way through the pipe; a
            // zombie can still be sampled.
            std::thread::sleep(Duration::from_millis(200));
            if done_at.is_none() && w.line("done").is_none() && !matches!(signal, DoneSignal::SourceCaughtUp) {
                bail!("child exited early; its log:\n{}", log_tail(&w.log));
            }
            if matches!(signal, DoneSignal::SourceCaughtUp) && source.caught_up().is_none() {
                bail!("child exited early; its log:\n{}", log_tail(&w.log));
            }
            continue;
        }
        if Instant::now() > deadline {
            let _ = w.child.kill();
            bail!("run timed out after {timeout:?}; child log:\n{}", log_tail(&w.log));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Who serves a consumer, for sampling its CPU.
enum ServerProbe<'a> {
    /// In this process: the source counts its threads' CPU itself.
    Source(&'a SyntheticSource),
    /// A child process (agent, mock helper).
    Process(u32),
}

impl ServerProbe<'_> {
    fn sample(&self) -> anyhow::Result<ServerCpu> {
        Ok(match self {
            Self::Source(source) => ServerCpu {
                cpu: source.stats().cpu,
                stat: None,
                shards: Vec::new(),
            },
            Self::Process(pid) => {
                let stat = procstat::read(*pid).context("the server exited")?;
                let mut shards = Vec::new();
                // glommio names every thread of a shard (its executor and its
                // helper threads) `shard-<i>-<executor id>`.
                for (name, thread) in procstat::read_threads(*pid)? {
                    let shard = name.strip_prefix("shard-").and_then(|rest| rest.split('-').next());
                    if let Some(i) = shard.and_then(|i| i.parse::<usize>().ok()) {
                        if shards.len() <= i {
                            shards.resize(i + 1, Duration::ZERO);
                        }
                        shards[i] += thread.cpu();
                    }
                }
                ServerCpu {
                    cpu: stat.cpu(),
                    stat: Some(stat),
                    shards,
                }
            }
        })
    }
}

impl ServerCpu {
    /// What was used between `earlier` and `self`.
    fn since(&self, earlier: &ServerCpu) -> ServerCpu {
        ServerCpu {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            stat: self.stat.zip(earlier.stat).map(|(b, a)| b.since(&a)),
            shards: self
                .shards
                .iter()
                .enumerate()
                .map(|(i, b)| b.saturating_sub(earlier.shards.get(i).copied().unwrap_or_default()))
                .collect(),
        }
    }
}

/// Waits for the consumer children's window — the first message any of them
/// gets ("first") to the last one's last ("done") — and samples the server
/// and the machine at both ends, and each consumer at the start and at its
/// own "done". The window is the consumers' because neither the agent nor the
/// mock can say when their first Fetch came in.
fn measure_consumers(
    consumers: &mut [Watched],
    server: &ServerProbe,
    bytes: u64,
    timeout: Duration,
) -> anyhow::Result<Measured> {
    let deadline = Instant::now() + timeout;
    let mut start: Option<(Instant, Vec<ProcStat>, ServerCpu, ProcStat, Duration)> = None;
    let mut ends: Vec<Option<(Instant, ProcStat)>> = vec![None; consumers.len()];
    loop {
        if start.is_none()
            && let Some(first) = consumers.iter().filter_map(|w| w.line("first")).map(|(t, _)| t).min()
        {
            let stats = consumers
                .iter()
                .map(|w| procstat::read(w.pid))
                .collect::<std::io::Result<_>>()?;
            start = Some((
                first,
                stats,
                server.sample()?,
                procstat::read(0)?,
                procstat::machine_busy(),
            ));
        }
        if let Some((first, stats0, server0, own0, busy0)) = &start {
            for ((w, end), stat0) in consumers.iter().zip(ends.iter_mut()).zip(stats0) {
                if end.is_none()
                    && let Some((done_at, _)) = w.line("done")
                {
                    let stat = procstat::read(w.pid)
                        .context("a consumer exited before it could be sampled")?
                        .since(stat0);
                    *end = Some((done_at, stat));
                }
            }
            if ends.iter().all(Option::is_some) {
                let ends: Vec<(Instant, ProcStat)> = ends.into_iter().flatten().collect();
                let done_at = ends.iter().map(|(t, _)| *t).max().expect("at least one consumer");
                let stat = ends.iter().fold(ProcStat::default(), |sum, (_, s)| ProcStat {
                    utime: sum.utime + s.utime,
                    stime: sum.stime + s.stime,
                    minflt: sum.minflt + s.minflt,
                    majflt: sum.majflt + s.majflt,
                });
                let server_cpu = server.sample()?.since(server0);
                let own = procstat::read(0)?.since(own0).cpu();
                let busy = procstat::machine_busy().saturating_sub(*busy0);
                // The synthetic source's CPU is part of this process's.
                let outside = match server {
                    ServerProbe::Source(_) => Duration::ZERO,
                    ServerProbe::Process(_) => server_cpu.cpu,
                };
                return Ok(Measured {
                    wall: done_at.saturating_duration_since(*first),
                    bytes,
                    stat,
                    source_cpu: own,
                    others_cpu: busy
                        .saturating_sub(stat.cpu())
                        .saturating_sub(own)
                        .saturating_sub(outside),
                    server: Some(server_cpu),
                    spread: None,
                });
            }
        }
        for (w, end) in consumers.iter().zip(&ends) {
            if end.is_none() && exited_unreaped(w.child.id()) {
                // Its last lines may still be on their way through the pipe.
                std::thread::sleep(Duration::from_millis(200));
                if w.line("done").is_none() {
                    bail!("consumer exited early; its log:\n{}", log_tail(&w.log));
                }
            }
        }
        if let ServerProbe::Process(pid) = server {
            anyhow::ensure!(!exited_unreaped(*pid), "the server exited during the run");
        }
        if Instant::now() > deadline {
            for w in consumers.iter_mut() {
                let _ = w.child.kill();
            }
            let logs: Vec<String> = consumers.iter().map(|w| log_tail(&w.log)).collect();
            bail!("run timed out after {timeout:?}; consumer logs:\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Checks a consumer's `done <value bytes> <records>` line against the dataset.
fn check_consumed(done: &str, dataset: &Dataset) -> anyhow::Result<()> {
    let mut fields = done.split_whitespace().skip(1).map(str::parse::<u64>);
    let (Some(Ok(bytes)), Some(Ok(records))) = (fields.next(), fields.next()) else {
        bail!("cannot read the consumer's {done:?}");
    };
    let want_records = dataset.total_records();
    let want_bytes = want_records * dataset.spec.record_bytes as u64;
    anyhow::ensure!(
        (bytes, records) == (want_bytes, want_records),
        "the consumer read {records} records, {bytes} value bytes; the dataset has {want_records}, {want_bytes}"
    );
    Ok(())
}

/// A port free on 127.0.0.1 right now (the agent needs one in its config).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `addr` accepts connections, or the server exits; returns the
/// local port of the connection that got through (the server counts it too).
fn wait_listening(addr: &str, server: &Watched) -> anyhow::Result<u16> {
    let deadline = Instant::now() + SERVER_START_TIMEOUT;
    loop {
        if let Ok(probe) = std::net::TcpStream::connect(addr) {
            return Ok(probe.local_addr()?.port());
        }
        anyhow::ensure!(
            !exited_unreaped(server.child.id()),
            "the server exited; its log:\n{}",
            log_tail(&server.log)
        );
        anyhow::ensure!(Instant::now() < deadline, "{addr} did not accept connections");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Client port → serving shard, from the agent's "client connected" lines
/// (`peer="127.0.0.1:<port>" shard=<i>`), in the order they were logged.
fn connections_in_log(log: &Path) -> anyhow::Result<Vec<(u16, usize)>> {
    let text = std::fs::read_to_string(log).with_context(|| format!("read {}", log.display()))?;
    text.lines()
        .filter(|line| line.contains("client connected"))
        .map(|line| {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(|v| v.trim_matches('"'))
            };
            let port = field("peer=").and_then(|p| p.rsplit_once(':')?.1.parse().ok());
            let shard = field("shard=").and_then(|s| s.parse().ok());
            port.zip(shard)
                .with_context(|| format!("cannot read the agent's log line {line:?}"))
        })
        .collect()
}

/// Where the agent whose log is `agent_log` served its connections; `probe`
/// is the harness's readiness check, `conns` each consumer's "conns" report.
fn spread_of(agent_log: &Path, shards: usize, probe: u16, conns: &[Conns]) -> anyhow::Result<Spread> {
    let served = connections_in_log(agent_log)?;
    let mut connections = vec![0; shards];
    for &(_, shard) in served.iter().filter(|(port, _)| *port != probe) {
        *connections
            .get_mut(shard)
            .with_context(|| format!("the agent logged shard {shard} of {shards}"))? += 1;
    }
    let fetch_shards = conns
        .iter()
        .map(|c| {
            let (port, _) = c.iter().max_by_key(|(_, received)| *received)?;
            // The last use of a port is this consumer's (ports can be reused).
            served.iter().rev().find(|(p, _)| p == port).map(|&(_, shard)| shard)
        })
        .collect();
    Ok(Spread {
        connections,
        fetch_shards,
    })
}

/// A consumer's `conns <port>:<bytes received> …` line.
fn parse_conns(line: &str) -> anyhow::Result<Conns> {
    line.split_whitespace()
        .skip(1)
        .map(|c| {
            let (port, received) = c.split_once(':').context("port:bytes")?;
            Ok((port.parse()?, received.parse()?))
        })
        .collect::<anyhow::Result<_>>()
        .with_context(|| format!("cannot read the consumer's {line:?}"))
}

/// Removes the consumer-group state an earlier serving agent left in
/// `data_dir`. Every shard opens a group offsets log at start, and an agent
/// refuses another shard count once such logs exist, so the 1- and 2-shard
/// scenarios could not take turns on one data dir otherwise. The consumers
/// commit nothing, so the logs are empty; removing them every time also
/// starts every run from the same state.
fn forget_groups(data_dir: &Path) -> anyhow::Result<()> {
    let dir = data_dir.join(ringmirror::agent::AGENT_STATE_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("group-offsets-") {
            std::fs::remove_dir_all(entry.path())?;
        } else if name == "group-shards" {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Produces `dataset` into the mock at `bootstrap`, one batch per partition
/// per request: the mock stores a request's records as one message set and
/// counts only its first batch's records, so this keeps its offsets equal to
/// the dataset's (checked against each response's base offset).
fn produce_into(bootstrap: &str, dataset: &Dataset) -> anyhow::Result<()> {
    use std::io::Read;

    use bytes::BytesMut;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

    const VERSION: i16 = 8;
    let addr = bootstrap.split(',').next().context("empty bootstrap list")?;
    let mut stream = std::net::TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    stream.set_nodelay(true)?;
    let rounds = dataset.partitions.iter().map(|p| p.batches.len()).max().unwrap_or(0);
    let mut buf = BytesMut::new();
    for round in 0..rounds {
        let mut topic = TopicProduceData::default();
        topic.name = TopicName(StrBytes::from_static_str(TOPIC));
        for (p, part) in dataset.partitions.iter().enumerate() {
            if let Some(b) = part.batches.get(round) {
                topic.partition_data.push(
                    PartitionProduceData::default()
                        .with_index(p as i32)
                        .with_records(Some(part.bytes.slice(b.pos..b.end_pos()))),
                );
            }
        }
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![topic]);
        let correlation_id = round as i32;
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(VERSION)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("perf-mirror")));
        buf.clear();
        buf.extend_from_slice(&[0; 4]);
        header.encode(&mut buf, ProduceRequest::header_version(VERSION))?;
        request.encode(&mut buf, VERSION)?;
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        stream.write_all(&buf)?;
        let mut len = [0u8; 4];
        stream.read_exact(&mut len)?;
        let mut frame = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
        stream.read_exact(&mut frame)?;
        let mut frame = bytes::Bytes::from(frame);
        let header = ResponseHeader::decode(&mut frame, ProduceResponse::header_version(VERSION))?;
        anyhow::ensure!(header.correlation_id == correlation_id, "correlation id mismatch");
        let response = ProduceResponse::decode(&mut frame, VERSION)?;
        for p in response.responses.iter().flat_map(|t| &t.partition_responses) {
            let want = dataset.partitions[p.index as usize].batches[round].base_offset;
            anyhow::ensure!(
                p.error_code == 0 && p.base_offset == want,
                "mock partition {}: error {}, base offset {} (want {want})",
                p.index,
                p.error_code,
                p.base_offset
            );
        }
    }
    Ok(())
}

/// Whether `pid` has exited, without reaping it (its `/proc` entry stays readable).
fn exited_unreaped(pid: u32) -> bool {
    // SAFETY: waitid with a valid out-pointer; WNOWAIT leaves the child waitable.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid for a filled-in SIGCHLD siginfo.
    rc == 0 && unsafe { info.si_pid() } != 0
}

fn wait_exit(child: &mut Child, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Ok(child.wait()?);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn free_bytes(path: &Path) -> anyhow::Result<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid C string and out-pointer.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    anyhow::ensure!(
        rc == 0,
        "statvfs {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// Compares every partition's segments with what the source served.
fn verify_mirror(data_dir: &Path, dataset: &Dataset) -> anyhow::Result<()> {
    for (p, part) in dataset.partitions.iter().enumerate() {
        let dir = data_dir.join(format!("{TOPIC}-{p}"));
        let logs = log_files(&dir)?;
        let mut at = 0usize;
        for log in &logs {
            let bytes = std::fs::read(log)?;
            let take = bytes.len().min(part.bytes.len() - at);
            anyhow::ensure!(
                bytes[..take] == part.bytes[at..at + take],
                "{}: differs from the source",
                log.display()
            );
            anyhow::ensure!(
                bytes[take..].iter().all(|&b| b == 0),
                "{}: non-zero bytes past the data",
                log.display()
            );
            at += take;
        }
        anyhow::ensure!(
            at == part.bytes.len(),
            "{}: {} of {} bytes mirrored",
            dir.display(),
            at,
            part.bytes.len()
        );
    }
    Ok(())
}

struct Harness<'a> {
    args: &'a Args,
    dataset: Arc<Dataset>,
    exe: PathBuf,
    ringmirror: PathBuf,
    work_dir: PathBuf,
    source_cpu: usize,
    perf_recorded: bool,
    /// Serving scenarios: a data dir holding the dataset, mirrored once.
    serve_data: Option<PathBuf>,
    /// mock-consume: the dataset that fits the mock.
    mock_dataset: Option<Arc<Dataset>>,
    /// Where the consumer of the serving scenarios runs.
    consumer_cpu: usize,
}

impl Harness<'_> {
    fn start_source(&self) -> anyhow::Result<SyntheticSource> {
        Ok(SyntheticSource::start(
            Arc::clone(&self.dataset),
            SourceOptions {
                rate_bytes_per_s: None,
                cpu: Some(self.source_cpu),
                sink_topic: Some(SINK_TOPIC.into()),
                port: 0,
            },
        )?)
    }

    fn fetch_args(&self, cmd: &mut Command) {
        let a = self.args;
        cmd.arg("--fetch-max-wait-ms")
            .arg(a.fetch_max_wait_ms.to_string())
            .arg("--fetch-partition-max-bytes")
            .arg(a.fetch_partition_max_bytes.to_string())
            .arg("--fetch-max-bytes")
            .arg(a.fetch_max_bytes.to_string());
    }

    /// The rdkafka consumer child reading all of `dataset` from `addr`.
    fn rdkafka_command(&self, addr: &str, dataset: &Dataset, cpu: Option<usize>) -> Command {
        let ends: Vec<String> = dataset.end_offsets().iter().map(i64::to_string).collect();
        let mut cmd = Command::new(&self.exe);
        cmd.arg("rdkafka")
            .arg("--addr")
            .arg(addr)
            .arg("--ends")
            .arg(ends.join(","));
        if let Some(cpu) = cpu {
            cmd.arg("--cpu").arg(cpu.to_string());
        }
        self.fetch_args(&mut cmd);
        cmd
    }

    /// Runs `consumers` consumers at once (pinned to `cpu`, if given), each
    /// reading all of `dataset` from a started server, and checks what each
    /// read; also returns each one's connections (`conns`).
    fn consume(
        &self,
        addr: &str,
        dataset: &Dataset,
        server: &ServerProbe,
        run_dir: &Path,
        (consumers, cpu): (usize, Option<usize>),
    ) -> anyhow::Result<(Measured, Vec<Conns>)> {
        let mut ws = (0..consumers)
            .map(|i| {
                let log = run_dir.join(format!("consumer-{i}.log"));
                spawn_watched(self.rdkafka_command(addr, dataset, cpu), &log)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let m = measure_consumers(
            &mut ws,
            server,
            consumers as u64 * dataset.total_bytes(),
            Duration::from_secs(self.args.timeout_s),
        );
        let statuses = ws
            .iter_mut()
            .map(|w| wait_exit(&mut w.child, Duration::from_secs(30)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let m = m?;
        let mut conns = Vec::with_capacity(consumers);
        for (w, status) in ws.iter_mut().zip(statuses) {
            anyhow::ensure!(status.success(), "consumer failed: {}", log_tail(&w.log));
            check_consumed(&w.line("done").expect("measured").1, dataset)?;
            let line = w
                .last_words("conns ")
                .context("the consumer did not report its connections")?;
            conns.push(parse_conns(&line)?);
        }
        Ok((m, conns))
    }

    fn run_consumer(&self, server: Server, run_dir: &Path) -> anyhow::Result<Measured> {
        match server {
            Server::Synthetic { mock_data } => {
                let dataset = if mock_data {
                    self.mock_dataset.as_ref().context("no mock dataset")?
                } else {
                    &self.dataset
                };
                let source = SyntheticSource::start(
                    Arc::clone(dataset),
                    SourceOptions {
                        rate_bytes_per_s: None,
                        cpu: Some(SERVER_CPU),
                        // librdkafka uses message format v2 (Fetch v4+) only
                        // with brokers that also offer Produce v3+: without a
                        // sink topic the source offers no Produce and the
                        // consumer never fetches.
                        sink_topic: Some(SINK_TOPIC.into()),
                        port: 0,
                    },
                )?;
                let addr = source.addr().to_string();
                let m = self.consume(
                    &addr,
                    dataset,
                    &ServerProbe::Source(&source),
                    run_dir,
                    (1, Some(self.consumer_cpu)),
                );
                source.stop();
                Ok(m?.0)
            }
            // One shard: it is pinned to CPU 0 (SERVER_CPU), and every
            // partition and the consumer's connection land on it.
            Server::Agent { zero_copy } => self.run_agent(
                &format!("shards = 1\n\n[listener]\nzero_copy = {zero_copy}\n"),
                1,
                (1, Some(self.consumer_cpu)),
                run_dir,
            ),
            // The shards are pinned to CPU 0 and 1 by the agent, so no CPU
            // is the consumers' own: they run unpinned, where the kernel
            // puts them.
            Server::AgentShards { accept } => {
                let accept = match accept {
                    AcceptMode::EachShard => "each_shard",
                    AcceptMode::OneAcceptor => "one_acceptor",
                };
                self.run_agent(
                    &format!("shards = {SERVE_MANY_SHARDS}\n\n[listener]\naccept = {accept:?}\n"),
                    SERVE_MANY_SHARDS,
                    (self.args.serve_consumers, None),
                    run_dir,
                )
            }
            Server::Mock => {
                let dataset = self.mock_dataset.as_ref().context("no mock dataset")?;
                let mut cmd = Command::new(&self.exe);
                cmd.arg("mock-cluster")
                    .arg("--partitions")
                    .arg(dataset.partitions.len().to_string())
                    .arg("--cpu")
                    .arg(SERVER_CPU.to_string());
                let mut mock = spawn_watched(cmd, &run_dir.join("mock.log"))?;
                let m = mock.wait_line("bootstrap ", SERVER_START_TIMEOUT).and_then(|line| {
                    let bootstrap = line["bootstrap ".len()..].to_string();
                    produce_into(&bootstrap, dataset).context("produce into the mock")?;
                    self.consume(
                        &bootstrap,
                        dataset,
                        &ServerProbe::Process(mock.pid),
                        run_dir,
                        (1, Some(self.consumer_cpu)),
                    )
                });
                let _ = mock.child.kill();
                let _ = mock.child.wait();
                Ok(m?.0)
            }
        }
    }

    /// Serves the mirrored dataset with `ringmirror run` (`config`: the
    /// shard count and the `[listener]` table, whose address is added here)
    /// to `consumers` and finds where its `shards` served their connections.
    fn run_agent(
        &self,
        config: &str,
        shards: usize,
        consumers: (usize, Option<usize>),
        run_dir: &Path,
    ) -> anyhow::Result<Measured> {
        let data_dir = self.serve_data.as_ref().context("no mirrored data to serve")?;
        forget_groups(data_dir)?;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let config_path = run_dir.join("agent.toml");
        std::fs::write(
            &config_path,
            format!("data_dir = {data_dir:?}\n{config}address = {addr:?}\n"),
        )?;
        let mut cmd = Command::new(&self.ringmirror);
        cmd.arg("run")
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", AGENT_SERVE_LOG_FILTER)
            // Plain log lines, for connections_in_log.
            .env("NO_COLOR", "1");
        let agent_log = run_dir.join("agent.log");
        let mut agent = spawn_watched(cmd, &agent_log)?;
        let m = wait_listening(&addr, &agent).and_then(|probe| {
            let server = ServerProbe::Process(agent.pid);
            let (m, conns) = self.consume(&addr, &self.dataset, &server, run_dir, consumers)?;
            Ok((m, probe, conns))
        });
        // SAFETY: signalling our own child.
        unsafe { libc::kill(agent.pid as i32, libc::SIGTERM) };
        let status = wait_exit(&mut agent.child, Duration::from_secs(60))?;
        let (mut m, probe, conns) = m.with_context(|| format!("agent log:\n{}", log_tail(&agent_log)))?;
        anyhow::ensure!(status.success(), "agent failed ({status}): {}", log_tail(&agent_log));
        m.spread = Some(spread_of(&agent_log, shards, probe, &conns)?);
        Ok(m)
    }

    fn run(&mut self, scenario: Scenario, run_dir: &Path) -> anyhow::Result<Measured> {
        if let Scenario::Consume(server) = scenario {
            return self.run_consumer(server, run_dir);
        }
        let source = self.start_source()?;
        let addr = source.addr().to_string();
        let bytes = self.dataset.total_bytes();
        let timeout = Duration::from_secs(self.args.timeout_s);
        let log = run_dir.join("child.log");
        match scenario {
            Scenario::Discard(mode) => {
                let mut cmd = Command::new(&self.exe);
                cmd.arg("discard").arg("--addr").arg(&addr).arg("--cpu").arg("0");
                cmd.arg("--mode")
                    .arg(mode.to_possible_value().expect("value").get_name());
                cmd.arg("--data-dir").arg(run_dir.join("segments"));
                self.fetch_args(&mut cmd);
                let mut w = spawn_watched(cmd, &log)?;
                let m = measure(&mut w, &source, DoneSignal::ChildSaysDone, bytes, timeout)?;
                let status = wait_exit(&mut w.child, Duration::from_secs(30))?;
                anyhow::ensure!(status.success(), "discard child failed: {}", log_tail(&log));
                Ok(m)
            }
            Scenario::Rdkafka { produce } => {
                let mut cmd = self.rdkafka_command(&addr, &self.dataset, None);
                if produce {
                    cmd.arg("--produce-to").arg(SINK_TOPIC);
                }
                let mut w = spawn_watched(cmd, &log)?;
                let m = measure(&mut w, &source, DoneSignal::ChildSaysDone, bytes, timeout)?;
                let status = wait_exit(&mut w.child, Duration::from_secs(30))?;
                anyhow::ensure!(status.success(), "rdkafka child failed: {}", log_tail(&log));
                if produce {
                    let produced = source.stats().record_bytes_produced;
                    anyhow::ensure!(produced > 0, "nothing reached the sink");
                }
                Ok(m)
            }
            Scenario::Mirror { shards, copy } => {
                let data_dir = run_dir.join("data");
                let a = self.args;
                let config = format!(
                    "data_dir = {data_dir:?}\nshards = {shards}\n{}\n[[mirror]]\nname = \"perf\"\n\
                     bootstrap_servers = [{addr:?}]\ntopics = [{TOPIC:?}]\nfetch_max_wait_ms = {}\n\
                     fetch_min_bytes = 1\nfetch_max_bytes = {}\nfetch_partition_max_bytes = {}\ningest = {:?}\n",
                    log_table(&a.log_setting),
                    a.fetch_max_wait_ms,
                    a.fetch_max_bytes,
                    a.fetch_partition_max_bytes,
                    if copy { "aligned_copy" } else { "mmap" }
                );
                let config_path = run_dir.join("agent.toml");
                std::fs::write(&config_path, config)?;
                let profile = match (&a.perf_record, shards, self.perf_recorded) {
                    (Some(out), 1, false) => Some(out.clone()),
                    _ => None,
                };
                if profile.is_some() {
                    let fifo =
                        std::ffi::CString::new(run_dir.join("perf-control.fifo").as_os_str().as_encoded_bytes())?;
                    // SAFETY: a valid C string.
                    anyhow::ensure!(
                        unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } == 0,
                        "mkfifo: {}",
                        std::io::Error::last_os_error()
                    );
                }
                let mut cmd;
                let control = run_dir.join("perf-control.fifo");
                if let Some(out) = &profile {
                    // perf starts the agent itself, so no sample is lost to attaching late.
                    self.perf_recorded = true;
                    let call_graph = if a.perf_call_graph == "fp" { "fp" } else { "dwarf,16384" };
                    cmd = Command::new("perf");
                    cmd.args([
                        "record",
                        "-F",
                        "999",
                        "-e",
                        "cpu-clock",
                        "--call-graph",
                        call_graph,
                        "-D",
                        "-1",
                        "-o",
                    ])
                    .arg(out)
                    .arg(format!("--control=fifo:{}", control.display()))
                    .arg("--")
                    .arg(&self.ringmirror);
                } else {
                    cmd = Command::new(&self.ringmirror);
                }
                cmd.arg("run").arg("--config").arg(&config_path);
                let mut w = spawn_watched(cmd, &log)?;
                if profile.is_some() {
                    w.pid = workload_pid(w.child.id(), &self.ringmirror)?;
                    w.perf_control = Some(std::fs::OpenOptions::new().read(true).write(true).open(&control)?);
                }
                let m = measure(&mut w, &source, DoneSignal::SourceCaughtUp, bytes, timeout);
                // SAFETY: signalling our own child (or perf's, which we started).
                unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
                let status = wait_exit(&mut w.child, Duration::from_secs(60))?;
                let m = m?;
                anyhow::ensure!(status.success(), "agent failed ({status}): {}", log_tail(&log));
                source.stop();
                verify_mirror(&data_dir, &self.dataset).context("mirrored data")?;
                Ok(m)
            }
            Scenario::Consume(_) => unreachable!("serving scenarios are run above"),
        }
    }
}

/// The agent's `[log]` table from `key=value` settings (empty without any).
fn log_table(settings: &[String]) -> String {
    if settings.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = settings.iter().map(|kv| kv.replacen('=', " = ", 1)).collect();
    format!("\n[log]\n{}\n", lines.join("\n"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn machine_line() -> String {
    let uname = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpus} CPUs ({model}), Linux {uname}")
}

fn run_throughput(args: &Args) -> anyhow::Result<()> {
    let scenarios: Vec<Scenario> = args
        .scenarios
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Scenario::parse)
        .collect::<anyhow::Result<_>>()?;
    let exe = std::env::current_exe()?;
    let ringmirror = args
        .ringmirror
        .clone()
        .unwrap_or_else(|| exe.with_file_name("ringmirror"));
    let serving = scenarios
        .iter()
        .any(|s| matches!(s, Scenario::Consume(Server::Agent { .. } | Server::AgentShards { .. })));
    if serving || scenarios.iter().any(|s| matches!(s, Scenario::Mirror { .. })) {
        anyhow::ensure!(
            ringmirror.exists(),
            "{} not found: cargo build --release -p ringmirror",
            ringmirror.display()
        );
    }
    let work_dir = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let size = args.size_mb << 20;
    // The serving scenarios keep one mirrored copy for the whole run.
    let need = if serving { 3 } else { 2 } * size + (2 << 30);
    let free = free_bytes(&work_dir)?;
    anyhow::ensure!(
        free > need,
        "{} has {} MiB free; need {} MiB",
        work_dir.display(),
        free >> 20,
        need >> 20
    );
    let load_before = loadavg();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let source_cpu = args.source_cpu.unwrap_or(cpus - 1);
    let built = Instant::now();
    let dataset = Arc::new(Dataset::build(DatasetSpec {
        topic: TOPIC.into(),
        partitions: args.partitions,
        bytes_per_partition: size / args.partitions.max(1) as u64,
        record_bytes: args.record_bytes,
        records_per_batch: args.batch_records,
        seed: 0x5eed,
    }));
    eprintln!(
        "dataset: {} partitions, {:.1} MB in {}-byte batches of {} × {}-byte records ({} records), built in {:.1} s",
        args.partitions,
        dataset.total_bytes() as f64 / 1e6,
        dataset.batch_bytes(),
        args.batch_records,
        args.record_bytes,
        dataset.total_records(),
        built.elapsed().as_secs_f64()
    );
    let mock_dataset = scenarios
        .iter()
        .any(|s| {
            matches!(
                s,
                Scenario::Consume(Server::Mock | Server::Synthetic { mock_data: true })
            )
        })
        .then(|| {
            Dataset::build(DatasetSpec {
                topic: TOPIC.into(),
                partitions: args.mock_partitions,
                bytes_per_partition: args.mock_partition_kib << 10,
                record_bytes: args.record_bytes,
                records_per_batch: args.batch_records,
                seed: 0x5eed,
            })
        })
        .map(Arc::new);
    if let Some(d) = &mock_dataset {
        let largest = d.partitions.iter().map(|p| p.bytes.len() as u64).max().unwrap_or(0);
        anyhow::ensure!(
            largest <= MOCK_PARTITION_MAX_BYTES,
            "the mock keeps at most {MOCK_PARTITION_MAX_BYTES} bytes per partition; {largest} asked (--mock-partition-kib)"
        );
        eprintln!(
            "mock dataset: {} partitions, {:.1} MB",
            args.mock_partitions,
            d.total_bytes() as f64 / 1e6
        );
    }
    let root = tempdir_in(&work_dir, "ringmirror-perf")?;
    let mut harness = Harness {
        args,
        dataset: Arc::clone(&dataset),
        exe,
        ringmirror,
        work_dir: root.clone(),
        source_cpu,
        perf_recorded: false,
        serve_data: None,
        mock_dataset: mock_dataset.clone(),
        consumer_cpu: cpus - 1,
    };
    let mut results: Vec<(Scenario, Vec<Measured>)> = scenarios.iter().map(|&s| (s, Vec::new())).collect();
    let outcome = (|| -> anyhow::Result<()> {
        if serving {
            let dir = harness.work_dir.join("serve-source");
            std::fs::create_dir_all(&dir)?;
            let m = harness
                .run(Scenario::Mirror { shards: 1, copy: true }, &dir)
                .context("mirror the dataset to serve")?;
            // SAFETY: sync has no preconditions.
            unsafe { libc::sync() };
            eprintln!(
                "mirrored the dataset to serve ({:.0} MB/s, verified byte-for-byte)",
                m.mb_s()
            );
            harness.serve_data = Some(dir.join("data"));
        }
        for repeat in 0..args.warmup + args.repeats {
            let warmup = repeat < args.warmup;
            for (scenario, runs) in results.iter_mut() {
                let run_dir = harness.work_dir.join(format!("{}-{repeat}", scenario.name()));
                std::fs::create_dir_all(&run_dir)?;
                let m = harness
                    .run(*scenario, &run_dir)
                    .with_context(|| format!("{} run {}", scenario.name(), repeat + 1))?;
                eprintln!(
                    "  {:<18} {} {}: {:>8.1} MB/s  {:>6.3} s wall  CPU {:.2} s (user {:.2}, sys {:.2})  minflt {}  majflt {}  source CPU {:.2} s  others {:.2} s",
                    scenario.name(),
                    if warmup { "warm-up" } else { "run" },
                    if warmup { repeat + 1 } else { repeat + 1 - args.warmup },
                    m.mb_s(),
                    m.wall.as_secs_f64(),
                    m.stat.cpu().as_secs_f64(),
                    m.stat.utime.as_secs_f64(),
                    m.stat.stime.as_secs_f64(),
                    m.stat.minflt,
                    m.stat.majflt,
                    m.source_cpu.as_secs_f64(),
                    m.others_cpu.as_secs_f64()
                );
                if let Some(server) = &m.server {
                    eprintln!(
                        "  {:<18} server CPU {:.2} s ({:.3} s/GB); the CPU above is the consumers'",
                        "",
                        server.cpu.as_secs_f64(),
                        m.server_cpu_s_per_gb().unwrap_or_default()
                    );
                }
                if let Some(spread) = m.spread.as_ref().filter(|s| s.connections.len() > 1) {
                    eprintln!(
                        "  {:<18} connections per shard {}, Fetch connections per shard {}, agent CPU per shard {} s/GB",
                        "",
                        spread.per_shard(),
                        spread.fetch_per_shard(),
                        m.shard_cpu_s_per_gb()
                    );
                }
                if !warmup {
                    runs.push(m);
                }
                // Write back what the mirror dirtied before the next run, outside any window.
                // SAFETY: sync has no preconditions.
                unsafe { libc::sync() };
                std::fs::remove_dir_all(&run_dir)?;
                std::thread::sleep(Duration::from_secs_f64(args.settle_s));
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&root);
    outcome?;
    let load_after = loadavg();
    let (serving_results, others): (Vec<_>, Vec<_>) = results
        .into_iter()
        .partition(|(s, _)| matches!(s, Scenario::Consume(_)));
    if !others.is_empty() {
        print_table(args, &dataset, &others);
    }
    if !serving_results.is_empty() {
        print_serving_table(
            args,
            &dataset,
            mock_dataset.as_deref(),
            &serving_results,
            (&load_before, &load_after),
        );
    }
    Ok(())
}

/// The 1, 5 and 15 minute load averages, from `/proc/loadavg`.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn tempdir_in(base: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = base.join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}

fn print_table(args: &Args, dataset: &Dataset, results: &[(Scenario, Vec<Measured>)]) {
    println!();
    println!(
        "{}; dataset {:.0} MB, {} partitions, {}-byte batches ({} × {} B records); medians of {} runs; \
         fetch max_wait {} ms, min_bytes 1, partition_max {} B, max {} B",
        machine_line(),
        dataset.total_bytes() as f64 / 1e6,
        args.partitions,
        dataset.batch_bytes(),
        args.batch_records,
        args.record_bytes,
        args.repeats,
        args.fetch_max_wait_ms,
        args.fetch_partition_max_bytes,
        args.fetch_max_bytes
    );
    println!();
    println!(
        "| scenario | MB/s | CPU s/GB | user s/GB | sys s/GB | minor faults/GB | major faults | source CPU % | others' CPU % | what |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
    let mut medians = std::collections::BTreeMap::new();
    for (scenario, runs) in results {
        if runs.is_empty() {
            continue;
        }
        let gb = |m: &Measured| m.bytes as f64 / 1e9;
        let mb_s = median(runs.iter().map(Measured::mb_s).collect());
        let cpu = median(runs.iter().map(Measured::cpu_s_per_gb).collect());
        let user = median(runs.iter().map(|m| m.stat.utime.as_secs_f64() / gb(m)).collect());
        let sys = median(runs.iter().map(|m| m.stat.stime.as_secs_f64() / gb(m)).collect());
        let faults = median(runs.iter().map(Measured::faults_per_gb).collect());
        let major = median(runs.iter().map(|m| m.stat.majflt as f64).collect());
        let source = median(
            runs.iter()
                .map(|m| 100.0 * m.source_cpu.as_secs_f64() / m.wall.as_secs_f64())
                .collect(),
        );
        let others = median(
            runs.iter()
                .map(|m| 100.0 * m.others_cpu.as_secs_f64() / m.wall.as_secs_f64())
                .collect(),
        );
        println!(
            "| {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            scenario.name(),
            mb_s,
            cpu,
            user,
            sys,
            faults,
            major,
            source,
            others,
            scenario.describe()
        );
        medians.insert(scenario.name(), (mb_s, cpu));
    }
    println!();
    let ratio = |a: &str, b: &str| match (medians.get(a), medians.get(b)) {
        (Some(x), Some(y)) => Some((x.0 / y.0, x.1 / y.1)),
        _ => None,
    };
    // The fastest fetch-and-discard variant is the ceiling this source allows.
    let ceiling = medians
        .iter()
        .filter(|(name, _)| name.starts_with("discard-"))
        .max_by(|a, b| a.1.0.total_cmp(&b.1.0))
        .map(|(name, m)| (name.clone(), *m));
    if let Some((name, (best, _))) = &ceiling {
        for a in ["mirror-1", "mirror-1-copy", "mirror-2", "segment-pwrite"] {
            if let Some((mb_s, _)) = medians.get(a) {
                println!(
                    "- {a} / fastest fetch-and-discard ({name}): throughput {:.2}",
                    mb_s / best
                );
            }
        }
    }
    for (a, b) in [
        ("mirror-1", "discard-read"),
        ("mirror-1-copy", "discard-read"),
        ("mirror-2", "discard-read"),
        ("discard-crc", "discard-read"),
        ("segment-inline", "discard-read"),
        ("segment-ahead", "discard-read"),
        ("segment-pwrite", "discard-read"),
        ("rdkafka-consume", "mirror-1"),
        ("rdkafka-mirror", "mirror-1"),
    ] {
        if let Some((throughput, cpu)) = ratio(a, b) {
            println!("- {a} / {b}: throughput {throughput:.2}, CPU per GB {cpu:.2}");
        }
    }
}

fn print_serving_table(
    args: &Args,
    dataset: &Dataset,
    mock_dataset: Option<&Dataset>,
    results: &[(Scenario, Vec<Measured>)],
    (load_before, load_after): (&str, &str),
) {
    let shape = |d: &Dataset| {
        format!(
            "{:.0} MB, {} partitions",
            d.total_bytes() as f64 / 1e6,
            d.partitions.len()
        )
    };
    let many = |s: &Scenario| matches!(s, Scenario::Consume(Server::AgentShards { .. }));
    let mut setups = Vec::new();
    if results.iter().any(|(s, _)| !many(s)) {
        setups.push(format!(
            "an rdkafka consumer pinned to CPU {} reads everything from a server pinned to CPU {SERVER_CPU}",
            std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
        ));
    }
    if results.iter().any(|(s, _)| many(s)) {
        setups.push(format!(
            "serve-2c-*: {} unpinned rdkafka consumers at once, each reading everything, from an agent with \
             {SERVE_MANY_SHARDS} shards (pinned by the agent to CPU 0..{}), sharing the CPUs with it; MB/s and CPU \
             per GB over all consumers' bytes",
            args.serve_consumers,
            SERVE_MANY_SHARDS - 1
        ));
    }
    println!();
    println!(
        "{}; serving: {}; {}-byte batches ({} × {} B records); medians of {} runs; consumer fetch.wait.max.ms {}, \
         max.partition.fetch.bytes {}, fetch.max.bytes {}; load average {load_before} before, {load_after} after",
        machine_line(),
        setups.join("; "),
        dataset.batch_bytes(),
        args.batch_records,
        args.record_bytes,
        args.repeats,
        args.fetch_max_wait_ms,
        args.fetch_partition_max_bytes,
        args.fetch_max_bytes
    );
    println!();
    println!(
        "| scenario | MB/s | server CPU s/GB | server user s/GB | server sys s/GB | consumer CPU s/GB | others' CPU % | data | what |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    let mut medians = std::collections::BTreeMap::new();
    for (scenario, runs) in results {
        if runs.is_empty() {
            continue;
        }
        let gb = |m: &Measured| m.bytes as f64 / 1e9;
        let mb_s = median(runs.iter().map(Measured::mb_s).collect());
        let server = median(runs.iter().filter_map(Measured::server_cpu_s_per_gb).collect());
        let split = |f: fn(&ProcStat) -> Duration| {
            let v: Vec<f64> = runs
                .iter()
                .filter_map(|m| m.server.as_ref()?.stat.map(|s| f(&s).as_secs_f64() / gb(m)))
                .collect();
            if v.is_empty() {
                "–".to_string()
            } else {
                format!("{:.3}", median(v))
            }
        };
        let consumer = median(runs.iter().map(Measured::cpu_s_per_gb).collect());
        let others = median(
            runs.iter()
                .map(|m| 100.0 * m.others_cpu.as_secs_f64() / m.wall.as_secs_f64())
                .collect(),
        );
        let data = match scenario {
            Scenario::Consume(Server::Mock | Server::Synthetic { mock_data: true }) => {
                mock_dataset.map_or_else(String::new, shape)
            }
            Scenario::Consume(Server::AgentShards { .. }) => {
                format!("{} consumers × {}", args.serve_consumers, shape(dataset))
            }
            _ => shape(dataset),
        };
        println!(
            "| {} | {:.0} | {:.3} | {} | {} | {:.3} | {:.0} | {} | {} |",
            scenario.name(),
            mb_s,
            server,
            split(|s| s.utime),
            split(|s| s.stime),
            consumer,
            others,
            data,
            scenario.describe()
        );
        medians.insert(scenario.name(), (mb_s, server));
    }
    println!();
    println!(
        "The synthetic source's CPU is its connection threads' (no user/system split); the mock's is its helper process's."
    );
    for (a, b, note) in [
        ("serve-zero-copy", "synthetic-consume", ""),
        ("serve-copy", "synthetic-consume", ""),
        ("serve-zero-copy", "serve-copy", ""),
        ("mock-consume", "synthetic-consume-mockdata", ""),
        (
            "synthetic-consume-mockdata",
            "synthetic-consume",
            " (different datasets)",
        ),
        ("serve-zero-copy", "mock-consume", " (different datasets)"),
        ("serve-2c-one-acceptor", "serve-2c-each-shard", ""),
    ] {
        if let (Some(x), Some(y)) = (medians.get(a), medians.get(b)) {
            println!(
                "- {a} / {b}: throughput {:.2}, server CPU per GB {:.2}{note}",
                x.0 / y.0,
                x.1 / y.1
            );
        }
    }
    // Where connections land varies from run to run (SO_REUSEPORT hashes the
    // clients' ports), so every run is shown, not only medians.
    let spread_runs: Vec<(&Scenario, usize, &Measured, &Spread)> = results
        .iter()
        .flat_map(|(scenario, runs)| {
            runs.iter().enumerate().filter_map(move |(i, m)| {
                let spread = m.spread.as_ref().filter(|s| s.connections.len() > 1)?;
                Some((scenario, i + 1, m, spread))
            })
        })
        .collect();
    if spread_runs.is_empty() {
        return;
    }
    println!();
    println!(
        "| scenario | run | MB/s | agent CPU s/GB | agent CPU per shard, s/GB | connections per shard | consumers' Fetch connections per shard | others' CPU % |"
    );
    println!("| --- | ---: | ---: | ---: | --- | --- | --- | ---: |");
    for (scenario, run, m, spread) in spread_runs {
        println!(
            "| {} | {run} | {:.0} | {:.3} | {} | {} | {} | {:.0} |",
            scenario.name(),
            m.mb_s(),
            m.server_cpu_s_per_gb().unwrap_or_default(),
            m.shard_cpu_s_per_gb(),
            spread.per_shard(),
            spread.fetch_per_shard(),
            100.0 * m.others_cpu.as_secs_f64() / m.wall.as_secs_f64()
        );
    }
    println!();
    println!(
        "Connections: every connection the consumers opened, as the agent logged them (the harness's readiness probe left out); \
         a consumer's Fetch connection is the one that received the most bytes."
    );
}

// ---------------------------------------------------------------- lag

fn run_lag(args: &Args) -> anyhow::Result<()> {
    use hdrhistogram::Histogram;
    use ringmirror::agent::Agent;
    use ringmirror::config::AgentConfig;
    use ringmirror_dataplane::fetch::{ShardEvent, TelemetryEvent};

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rate = args.rate_mb_s * 1e6;
    // Enough data for the whole run and some margin.
    let size = (rate * (args.lag_seconds as f64 + 5.0)) as u64;
    let work_dir = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    anyhow::ensure!(free_bytes(&work_dir)? > size + (2 << 30), "not enough free disk");
    let dataset = Arc::new(Dataset::build(DatasetSpec {
        topic: TOPIC.into(),
        partitions: args.partitions,
        bytes_per_partition: size / args.partitions.max(1) as u64,
        record_bytes: args.record_bytes,
        records_per_batch: args.batch_records,
        seed: 0x1a9,
    }));
    let source = SyntheticSource::start(
        Arc::clone(&dataset),
        SourceOptions {
            rate_bytes_per_s: Some(rate),
            cpu: Some(args.source_cpu.unwrap_or(cpus - 1)),
            sink_topic: None,
            port: 0,
        },
    )?;
    let root = tempdir_in(&work_dir, "ringmirror-perf-lag")?;
    let data_dir = root.join("data");
    let config = AgentConfig::parse(&format!(
        "data_dir = {data_dir:?}\nshards = 1\n{}\n[[mirror]]\nname = \"perf\"\nbootstrap_servers = [{:?}]\n\
         topics = [{TOPIC:?}]\nfetch_max_wait_ms = {}\nfetch_min_bytes = 1\nfetch_max_bytes = {}\n\
         fetch_partition_max_bytes = {}\ningest = {:?}\n",
        log_table(&args.log_setting),
        source.addr().to_string(),
        args.fetch_max_wait_ms,
        args.fetch_max_bytes,
        args.fetch_partition_max_bytes,
        args.ingest
    ))?;
    type Seen = Vec<(i32, i64, Instant)>;
    let seen: Arc<Mutex<Seen>> = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
    let observer_seen = Arc::clone(&seen);
    let observer = Box::new(move |event: &ShardEvent| {
        if let ShardEvent::Telemetry(TelemetryEvent::Progress { tp, log_end_offset, .. }) = event {
            let now = Instant::now();
            observer_seen
                .lock()
                .expect("lock")
                .push((tp.partition, *log_end_offset, now));
        }
    });
    let process0 = procstat::read(0)?;
    let agent = Agent::start_observed(config, observer)?;
    let waited = Instant::now();
    while source.t0().is_none() {
        anyhow::ensure!(waited.elapsed() < Duration::from_secs(30), "the agent never fetched");
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = source.t0().expect("started");
    let source_cpu0 = source.stats().cpu;
    let end = t0 + Duration::from_secs(args.lag_seconds);
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let process1 = procstat::read(0)?;
    let source_cpu1 = source.stats().cpu;
    // Let the last batches land before stopping.
    std::thread::sleep(Duration::from_millis(200));
    agent.stop()?;
    let seen = std::mem::take(&mut *seen.lock().expect("lock"));

    let warmup = t0 + Duration::from_secs(args.lag_warmup_s);
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut measured = 0u64;
    let mut missing = 0u64;
    // (available since t0, delay, partition) of batches that waited 20 ms or more.
    let mut slow: Vec<(Duration, Duration, usize)> = Vec::new();
    for (p, part) in dataset.partitions.iter().enumerate() {
        let mut next = 0usize;
        for &(partition, leo, at) in seen.iter().filter(|e| e.0 == p as i32) {
            debug_assert_eq!(partition, p as i32);
            while next < part.batches.len() && part.batches[next].next_offset <= leo {
                let available = source.available_at(p, next).expect("t0 set");
                if available >= warmup && available <= end {
                    let delay = at.saturating_duration_since(available);
                    histogram.record((delay.as_micros() as u64).max(1))?;
                    measured += 1;
                    if delay >= Duration::from_millis(20) {
                        slow.push((available.saturating_duration_since(t0), delay, p));
                    }
                }
                next += 1;
            }
        }
        // Batches available within the window but never reported committed.
        while next < part.batches.len() {
            match source.available_at(p, next) {
                Some(a) if a <= end => {
                    if a >= warmup {
                        missing += 1;
                    }
                }
                _ => break,
            }
            next += 1;
        }
    }
    source.stop();
    let _ = std::fs::remove_dir_all(&root);
    let window = end.saturating_duration_since(t0).as_secs_f64();
    let process_cpu = process1.cpu().saturating_sub(process0.cpu()).as_secs_f64();
    let agent_cpu = process_cpu - source_cpu1.saturating_sub(source_cpu0).as_secs_f64();
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    println!();
    println!(
        "{}; lag at {:.0} MB/s over {} partitions ({:.0} batches/s of {} B), {} s (first {} s left out), \
         1 shard, ingest {}, fetch min_bytes 1, max_wait {} ms (the source long-polls: a waiting Fetch is answered as soon \
         as a batch becomes available)",
        machine_line(),
        args.rate_mb_s,
        args.partitions,
        rate / dataset.batch_bytes() as f64,
        dataset.batch_bytes(),
        args.lag_seconds,
        args.lag_warmup_s,
        args.ingest,
        args.fetch_max_wait_ms
    );
    println!();
    println!("| batches | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | not committed | agent CPU (approx.) |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {:.0} % of a core |",
        measured,
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(0.999),
        histogram.max() as f64 / 1000.0,
        missing,
        100.0 * agent_cpu / window
    );
    if !slow.is_empty() {
        // Episodes: runs of slow batches less than 50 ms apart.
        slow.sort();
        let mut episodes: Vec<(Duration, Duration, Duration)> = Vec::new(); // start, end, worst delay
        for &(at, delay, _) in &slow {
            match episodes.last_mut() {
                Some(e) if at <= e.1 + Duration::from_millis(50) => {
                    e.1 = at;
                    e.2 = e.2.max(delay);
                }
                _ => episodes.push((at, at, delay)),
            }
        }
        let list: Vec<String> = episodes
            .iter()
            .take(12)
            .map(|(a, _, worst)| format!("{:.2}s:{:.0}ms", a.as_secs_f64(), worst.as_secs_f64() * 1e3))
            .collect();
        println!();
        println!(
            "{} batches waited ≥ 20 ms, in {} episodes (batch available at t0+, worst delay): {}",
            slow.len(),
            episodes.len(),
            list.join(" ")
        );
    }
    Ok(())
}
