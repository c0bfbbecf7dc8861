//! The shard's append ring: one io_uring instance per shard through which
//! the fetchers hand segment writes to the kernel (`IOSQE_ASYNC`: the copy
//! into the page cache runs in the kernel's workers), so the shard's core
//! goes on receiving while the bytes are copied. With `ingest =
//! "uring_sqpoll"` the ring has a kernel submission thread instead (SQPOLL):
//! it takes writes off the queue without a system call and copies them
//! itself.
//!
//! Each write sits in a slot that names its partition and the log's
//! sequence number for it; completions arrive in any order and are routed
//! back to their log, which commits its writes strictly in order
//! ([`PartitionLog::complete_oldest_write`]): what readers see only ever
//! grows by whole, written batches. The slot owns the buffer the bytes were
//! received into until the kernel is done with it.
//!
//! Cost per shard, whatever the partition count: one ring file descriptor
//! and its mappings (the submission and completion rings and the entry
//! array), plus the slots' receive buffers.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use event_listener::Event;
use io_uring::{IoUring, opcode, squeue, types};

use crate::partition::ServedPartition;
use ringmirror_storage::log::{BeginWrite, LogError, PartitionLog, WriteTarget};

use super::ingest::{AlignedBuffer, IngestMode};
use ringmirror_storage::clock::now_ms;

/// Writes in flight on one shard's ring, over all of its logs.
const RING_WRITES_IN_FLIGHT_MAX: usize = 32;
/// A write smaller than this, with none in flight for its log, is a plain
/// pwrite: cheaper than a trip through the ring.
const RING_WRITE_BYTES_MIN: usize = 64 * 1024;
/// How often the completion queue is looked at while writes are in flight.
const REAP_INTERVAL: Duration = Duration::from_micros(50);

/// How long an SQPOLL ring's kernel thread keeps polling for writes after
/// the last one before it sleeps (and the next submit wakes it with a
/// system call).
const SQPOLL_IDLE_MS: u32 = 50;

/// How the kernel takes the ring's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RingKind {
    /// Submitted with io_uring_enter; each write runs in the kernel's
    /// io-wq workers (`IOSQE_ASYNC`).
    Async,
    /// A kernel thread polls the submission queue and writes itself.
    SqPoll,
}

impl RingKind {
    /// The ring an ingest mode writes through, if any.
    pub(crate) fn of(ingest: IngestMode) -> Option<Self> {
        match ingest {
            IngestMode::Uring => Some(Self::Async),
            IngestMode::UringSqpoll => Some(Self::SqPoll),
            IngestMode::Mmap | IngestMode::AlignedCopy => None,
        }
    }
}

thread_local! {
    /// Each shard is one thread: its ring of each kind, once set up (`None`
    /// inside: io_uring, or that kind of ring, unavailable).
    static SHARD_RINGS: RefCell<[Option<Option<Rc<AppendRing>>>; 2]> = const { RefCell::new([None, None]) };
}

pub(crate) struct AppendRing {
    kind: RingKind,
    ring: RefCell<IoUring>,
    slots: RefCell<Vec<Slot>>,
    /// Writes submitted whose completion has not been taken off the queue.
    kernel_in_flight: Cell<usize>,
    /// Wakes the reaper when a write goes in.
    submitted: Event,
    /// Tells long-polling readers on every shard that a log end moved.
    appended: Arc<Event>,
}

#[derive(Default)]
struct Slot {
    /// Owned by the write in flight, else a spare swapped for the next
    /// write's receive buffer (so steady state allocates nothing).
    buffer: AlignedBuffer,
    write: Option<SlotWrite>,
}

struct SlotWrite {
    partition: Rc<ServedPartition>,
    /// Keeps the segment file open until the kernel is done with it.
    _file: Arc<File>,
    seq: u64,
    bytes: Range<usize>,
    outcome: Option<std::io::Result<usize>>,
}

impl AppendRing {
    /// This shard's ring of `kind`, set up (with its reaper task) on first
    /// use; `None` when the kernel refuses it (said once, at WARN).
    pub(crate) fn for_this_shard(kind: RingKind, appended: &Arc<Event>) -> Option<Rc<Self>> {
        SHARD_RINGS.with(|cells| {
            cells.borrow_mut()[kind as usize]
                .get_or_insert_with(|| match Self::new(kind, Arc::clone(appended)) {
                    Ok(ring) => {
                        let ring = Rc::new(ring);
                        glommio::spawn_local(reap_while_shard_runs(Rc::clone(&ring))).detach();
                        Some(ring)
                    }
                    Err(error) => {
                        tracing::warn!(%error, ?kind, "io_uring ring unavailable; segment writes stay on the shard's core (ingest = aligned_copy)");
                        None
                    }
                })
                .clone()
        })
    }

    fn new(kind: RingKind, appended: Arc<Event>) -> std::io::Result<Self> {
        let entries = RING_WRITES_IN_FLIGHT_MAX as u32;
        let ring = match kind {
            RingKind::Async => IoUring::new(entries)?,
            RingKind::SqPoll => IoUring::builder().setup_sqpoll(SQPOLL_IDLE_MS).build(entries)?,
        };
        Ok(Self {
            kind,
            ring: RefCell::new(ring),
            slots: RefCell::new((0..RING_WRITES_IN_FLIGHT_MAX).map(|_| Slot::default()).collect()),
            kernel_in_flight: Cell::new(0),
            submitted: Event::new(),
            appended,
        })
    }

    /// Appends `buffer[bytes]` (whole, validated batches) to `partition`'s
    /// log through the ring: a small write with nothing in flight goes in
    /// with pwrite here; others are handed to the kernel (the buffer goes
    /// with them) and committed when done. Waits (blocking, one write's copy
    /// at most) only for room.
    pub(crate) fn append(
        &self,
        partition: &Rc<ServedPartition>,
        buffer: &mut AlignedBuffer,
        bytes: Range<usize>,
        now_ms: u64,
    ) -> Result<(), LogError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.reap();
        if bytes.len() < RING_WRITE_BYTES_MIN && partition.log.borrow().writes_in_flight() == 0 {
            return partition
                .log
                .borrow_mut()
                .append(&buffer.get_mut(bytes.end)[bytes], now_ms)
                .map(drop);
        }
        while !self.has_free_slot() {
            self.wait_for_a_completion();
        }
        loop {
            let begun = partition
                .log
                .borrow_mut()
                .begin_write(&buffer.get_mut(bytes.end)[bytes.clone()], now_ms)?;
            match begun {
                BeginWrite::Ready(target) => {
                    self.submit(partition, target, buffer, bytes);
                    return Ok(());
                }
                BeginWrite::Full => self.wait_for_a_completion(),
                BeginWrite::NeedsRoll => {
                    self.drain(partition);
                    return partition
                        .log
                        .borrow_mut()
                        .append(&buffer.get_mut(bytes.end)[bytes], now_ms)
                        .map(drop);
                }
            }
        }
    }

    pub(crate) fn kind(&self) -> RingKind {
        self.kind
    }

    fn has_free_slot(&self) -> bool {
        self.slots.borrow().iter().any(|s| s.write.is_none())
    }

    fn has_writes(&self) -> bool {
        self.slots.borrow().iter().any(|s| s.write.is_some())
    }

    /// Hands `buffer[bytes]` to the kernel to write at `target`, as write
    /// `target.seq` of `partition`'s log. The buffer is swapped for the
    /// slot's spare: nothing is copied. The caller made sure a slot is free.
    fn submit(
        &self,
        partition: &Rc<ServedPartition>,
        target: WriteTarget,
        buffer: &mut AlignedBuffer,
        bytes: Range<usize>,
    ) {
        let mut slots = self.slots.borrow_mut();
        let index = slots
            .iter()
            .position(|s| s.write.is_none())
            .expect("a free slot (checked by the caller)");
        let slot = &mut slots[index];
        std::mem::swap(&mut slot.buffer, buffer);
        let data = &slot.buffer.get_mut(bytes.end)[bytes.clone()];
        let len = u32::try_from(data.len()).expect("a fetch's partition bytes fit u32");
        // The SQPOLL thread is already off the shard's core: it writes
        // itself rather than handing each write on to a worker.
        let flags = match self.kind {
            RingKind::Async => squeue::Flags::ASYNC,
            RingKind::SqPoll => squeue::Flags::empty(),
        };
        let entry = opcode::Write::new(types::Fd(target.file.as_raw_fd()), data.as_ptr(), len)
            .offset(target.position)
            .build()
            .flags(flags)
            .user_data(index as u64);
        let mut write = SlotWrite {
            partition: Rc::clone(partition),
            _file: target.file,
            seq: target.seq,
            bytes,
            outcome: None,
        };
        let mut ring = self.ring.borrow_mut();
        // SAFETY: the entry points into the slot's buffer, which the slot
        // keeps (unmoved, unresized) until the completion is reaped, and
        // the file stays open as long (`_file`).
        let pushed = unsafe { ring.submission().push(&entry) };
        let submitted = match pushed {
            Ok(()) => ring.submit().map(drop),
            Err(_) => Err(std::io::Error::other("submission queue full")),
        };
        match submitted {
            Ok(()) => self.kernel_in_flight.set(self.kernel_in_flight.get() + 1),
            // Reported through the log like a failed write, so it fails the
            // partition instead of leaving a write that never completes.
            Err(e) => write.outcome = Some(Err(e)),
        }
        slot.write = Some(write);
        self.submitted.notify(1);
    }

    /// Takes finished writes off the completion queue and commits, log by
    /// log and in order, those whose predecessors are done.
    pub(crate) fn reap(&self) {
        let mut slots = self.slots.borrow_mut();
        {
            let mut ring = self.ring.borrow_mut();
            for cqe in ring.completion() {
                let write = slots[cqe.user_data() as usize]
                    .write
                    .as_mut()
                    .expect("a completion names a slot in use");
                write.outcome = Some(match cqe.result() {
                    n if n < 0 => Err(std::io::Error::from_raw_os_error(-n)),
                    n => Ok(n as usize),
                });
                self.kernel_in_flight.set(self.kernel_in_flight.get() - 1);
            }
        }
        let now = now_ms();
        let mut committed = false;
        for i in 0..slots.len() {
            let Some(write) = slots[i].write.as_ref().filter(|w| w.outcome.is_some()) else {
                continue;
            };
            let partition = Rc::clone(&write.partition);
            // A log borrowed elsewhere (a reader's job) is done next time.
            if let Ok(mut log) = partition.log.try_borrow_mut() {
                committed |= commit_in_order(&mut log, &partition, &mut slots, now);
            }
        }
        if committed {
            self.appended.notify(usize::MAX);
        }
    }

    /// Blocks the shard's thread until the kernel finishes some write (one
    /// page-cache copy at most), then reaps. Only for appends that cannot go
    /// on otherwise: every slot busy, the log's own limit reached, or all its
    /// writes needed in before a roll, a cut or a close.
    pub(crate) fn wait_for_a_completion(&self) {
        if self.kernel_in_flight.get() > 0
            && let Err(error) = self.ring.borrow().submitter().submit_and_wait(1)
        {
            tracing::warn!(%error, "waiting for a segment write");
        }
        self.reap();
    }

    /// Completes every write in flight for `partition`'s log.
    pub(crate) fn drain(&self, partition: &ServedPartition) {
        loop {
            self.reap();
            let pending = partition.log.try_borrow().map_or(0, |log| log.writes_in_flight());
            // With the kernel idle, what is left waits for a log borrowed
            // elsewhere: the caller's next step reports it.
            if pending == 0 || self.kernel_in_flight.get() == 0 {
                return;
            }
            self.wait_for_a_completion();
        }
    }
}

impl Drop for AppendRing {
    fn drop(&mut self) {
        // The kernel may still read the slots' buffers: wait it out.
        let ring = self.ring.get_mut();
        while *self.kernel_in_flight.get_mut() > 0 {
            if ring.submitter().submit_and_wait(1).is_err() {
                return;
            }
            let reaped = ring.completion().count();
            *self.kernel_in_flight.get_mut() -= reaped;
        }
    }
}

/// Commits `log`'s finished writes from its oldest on, freeing their slots
/// and those of writes a failure abandoned. Returns whether any committed.
fn commit_in_order(log: &mut PartitionLog, partition: &Rc<ServedPartition>, slots: &mut [Slot], now_ms: u64) -> bool {
    let mine = |w: &SlotWrite| Rc::ptr_eq(&w.partition, partition) && w.outcome.is_some();
    for slot in slots.iter_mut() {
        if slot
            .write
            .as_ref()
            .is_some_and(|w| mine(w) && !log.write_is_pending(w.seq))
        {
            slot.write = None;
        }
    }
    let mut committed = false;
    while let Some(seq) = log.oldest_write_seq() {
        let Some(slot) = slots
            .iter_mut()
            .find(|s| s.write.as_ref().is_some_and(|w| mine(w) && w.seq == seq))
        else {
            break;
        };
        let write = slot.write.take().expect("found above");
        let outcome = write.outcome.expect("finished");
        let bytes = &slot.buffer.get_mut(write.bytes.end)[write.bytes];
        if log.complete_oldest_write(seq, outcome, bytes, now_ms).is_err() {
            // The log took the failure (logged there); the fetcher stops the
            // partition at its next append.
            break;
        }
        committed = true;
    }
    committed
}

/// Commits writes as they finish, for as long as the shard runs: polls the
/// completion queue while writes are in flight, sleeps otherwise.
async fn reap_while_shard_runs(ring: Rc<AppendRing>) {
    loop {
        ring.reap();
        if !ring.has_writes() {
            let listener = ring.submitted.listen();
            if !ring.has_writes() {
                listener.await;
                continue;
            }
        }
        glommio::timer::sleep(REAP_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;
    use ringmirror_storage::batch::{BatchBuilder, BatchIter, BuildRecord};
    use ringmirror_storage::log::{LogConfig, OpenOptions};

    /// `count` one-record batches from offset 0, each `value_bytes` large
    /// (above the pwrite threshold, so each goes through the ring).
    fn batches(count: usize, value_bytes: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| {
                BatchBuilder {
                    base_offset: i as i64,
                    records: vec![BuildRecord {
                        timestamp: 1_700_000_000_000 + i as i64,
                        key: None,
                        value: Some(vec![i as u8; value_bytes]),
                        headers: Vec::new(),
                    }],
                    ..Default::default()
                }
                .build()
            })
            .collect()
    }

    /// Reads what became visible since `from_offset` back from the file and
    /// checks it is whole batches, exactly the ones appended. Returns the
    /// new visible end.
    fn check_newly_visible(partition: &ServedPartition, all: &[Vec<u8>], from_offset: i64) -> i64 {
        let log = partition.log.borrow();
        let end = log.log_end_offset();
        let mut offset = from_offset;
        while offset < end {
            let slice = log.read(offset, 1 << 20).unwrap();
            assert!(
                slice.len > 0 && slice.end_offset <= end,
                "a read reaches past the visible end"
            );
            let bytes = slice.to_vec().unwrap();
            for item in BatchIter::new(&bytes, u32::MAX >> 1) {
                let (_, batch) = item.unwrap();
                assert!(batch.crc_is_valid(), "a visible batch is not fully written");
                assert_eq!(batch.bytes(), &all[batch.base_offset() as usize][..]);
                offset = batch.next_offset();
            }
        }
        assert_eq!(log.read(end, 1 << 20).unwrap().len, 0);
        end
    }

    /// This process's io_uring file descriptors and mappings.
    fn ring_files_and_mappings() -> (usize, usize) {
        let files = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().contains("io_uring"))
            .count();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        (files, maps.lines().filter(|l| l.contains("io_uring")).count())
    }

    #[test]
    fn a_concurrent_reader_sees_only_whole_written_batches_up_to_the_visible_end() {
        a_reader_sees_only_whole_written_batches(RingKind::Async);
    }

    #[test]
    fn through_an_sqpoll_ring_a_reader_sees_only_whole_written_batches_too() {
        a_reader_sees_only_whole_written_batches(RingKind::SqPoll);
    }

    /// The ring tests count this process's io_uring descriptors: one at a
    /// time, or one's executor's rings show up in the other's count.
    static RING_FD_COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn a_reader_sees_only_whole_written_batches(kind: RingKind) {
        let _one_at_a_time = RING_FD_COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .spawn(move || async move {
                let dir = tempfile::tempdir().unwrap();
                // Small segments: some appends meet a roll with writes in flight.
                let config = LogConfig {
                    segment_bytes: 2 << 20,
                    ..LogConfig::default()
                };
                let log = PartitionLog::open(OpenOptions::new(dir.path().join("t-0"), config))
                    .unwrap()
                    .0;
                let partition = ServedPartition::new(log, None);
                let before = ring_files_and_mappings();
                let ring = AppendRing::for_this_shard(kind, &Arc::new(Event::new())).expect("io_uring on this kernel");
                let after = ring_files_and_mappings();
                assert_eq!(after.0 - before.0, 1, "one ring fd per shard");
                assert!(after.1 - before.1 <= 3, "the ring's mappings: {before:?} → {after:?}");
                let all = Rc::new(batches(150, 100 * 1024));
                let done = Rc::new(Cell::new(false));
                let reader = glommio::spawn_local({
                    let (partition, all, done) = (Rc::clone(&partition), Rc::clone(&all), Rc::clone(&done));
                    async move {
                        let (mut seen_end, mut moves) = (0, 0);
                        loop {
                            let finished = done.get();
                            let end = check_newly_visible(&partition, &all, seen_end);
                            moves += usize::from(end > seen_end);
                            seen_end = end;
                            if finished {
                                return (seen_end, moves);
                            }
                            glommio::executor().yield_now().await;
                        }
                    }
                });
                let mut buffer = AlignedBuffer::default();
                let mut in_flight_max = 0;
                for batch in all.iter() {
                    buffer.get_mut(batch.len()).copy_from_slice(batch);
                    ring.append(&partition, &mut buffer, 0..batch.len(), 0).unwrap();
                    in_flight_max = in_flight_max.max(partition.log.borrow().writes_in_flight());
                    glommio::executor().yield_now().await;
                }
                assert!(in_flight_max > 0, "no write went through the ring");
                let deadline = Instant::now() + Duration::from_secs(20);
                while partition.log.borrow().writes_in_flight() > 0 {
                    assert!(Instant::now() < deadline, "writes still in flight");
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
                done.set(true);
                let (seen_end, moves) = reader.await;
                assert_eq!(seen_end, all.len() as i64);
                assert!(moves > 1, "the end moved once only: nothing overlapped");
                assert_eq!(check_newly_visible(&partition, &all, 0), all.len() as i64);
                assert!(
                    partition.log.borrow().segment_base_offsets().len() > 1,
                    "no roll happened"
                );
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
