//! The fetch-and-discard family (`discard-*`) and the child process every
//! `discard-*` and `segment-*` scenario runs in: our client
//! (`Connection` + `FetchResponseReader` on a glommio executor pinned like
//! shard 0) fetches every partition to its end and receives the records
//! into a reused page-aligned buffer (or the prototype segments of
//! [`crate::segment`]), optionally validating them. It measures nothing
//! itself: it prints `done <bytes>`, and the harness times the window from
//! the source's side.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use clap::ValueEnum;
use glommio::{LocalExecutorBuilder, Placement};
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use ringmirror_dataplane::client::{Connection, ConnectionOptions};
use ringmirror_dataplane::fetch::fetch_source_metadata;
use ringmirror_perf::synthetic_source::SyntheticSource;
use ringmirror_protocol::wire::{FetchResponseReader, FetchStep};
use ringmirror_storage::batch::{BatchIter, ValidatedRange, Validation, validate_batches};

use crate::TOPIC;
use crate::measure::Measured;
use crate::segment::SegmentWriter;
use crate::throughput::{Harness, SourceRun};

/// A v2 batch header up to and including its records count.
const BATCH_HEADER_BYTES: usize = 61;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiscardMode {
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
pub struct DiscardArgs {
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

/// A page-aligned, pre-faulted receive buffer, reused for every response.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    const ALIGN: usize = 4096;

    pub fn new(len: usize) -> Self {
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
    pub fn slice(&mut self, offset: usize, len: usize) -> &mut [u8] {
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

/// The child: fetches everything from `a.addr`, then prints `done <bytes>`.
pub fn child_discard(a: DiscardArgs) -> anyhow::Result<()> {
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
        let request = fetch_request(a, &partitions, &offsets);
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
                            validate(dst, from, partitions[index].1)?.next_offset
                        }
                        DiscardMode::Skip => skip_batches(&mut conn, records_len, from).await?,
                        DiscardMode::SegmentInline
                        | DiscardMode::SegmentAhead
                        | DiscardMode::SegmentPwrite
                        | DiscardMode::SegmentOffload => {
                            let segments = segments.as_mut().expect("segment modes have segments");
                            let dst = segments.tail(index, records_len).await?;
                            conn.read_exact_into(dst).await?;
                            let range = validate(dst, from, partitions[index].1)?;
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

/// A sessionless Fetch of every partition (`(partition, leader epoch)`)
/// from its offset in `offsets`, as a consumer sends it.
fn fetch_request(a: &DiscardArgs, partitions: &[(i32, i32)], offsets: &[i64]) -> FetchRequest {
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
    request
}

/// Validates the records received for a partition fetched from `from` at
/// leader epoch `epoch`, as the agent does before committing them.
fn validate(records: &[u8], from: i64, epoch: i32) -> anyhow::Result<ValidatedRange> {
    let range = validate_batches(
        records,
        &Validation {
            next_offset: from,
            max_batch_bytes: 64 << 20,
            fetch_epoch: Some(epoch),
            last_epoch: None,
        },
    );
    anyhow::ensure!(range.error.is_none(), "bad batch: {:?}", range.error);
    Ok(range)
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

impl Harness<'_> {
    /// A `discard-*` or `segment-*` scenario: the discard child in `mode`,
    /// pinned to CPU 0, timed from the source's first Fetch to its "done".
    pub fn run_discard(
        &self,
        mode: DiscardMode,
        source: &SyntheticSource,
        run: &SourceRun,
    ) -> anyhow::Result<Measured> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("discard").arg("--addr").arg(&run.addr).arg("--cpu").arg("0");
        cmd.arg("--mode")
            .arg(mode.to_possible_value().expect("value").get_name());
        cmd.arg("--data-dir").arg(run.dir.join("segments"));
        self.fetch_args(&mut cmd);
        self.measure_child(cmd, source, run, "discard")
    }
}
