//! The write-path prototypes (`segment-*`), run inside the discard child:
//! one file per partition, written at the tail like a segment — received
//! into a `MAP_SHARED` mapping after `fallocate` + `MADV_POPULATE_WRITE`
//! (inline, or ahead on a helper thread), or received into an aligned
//! buffer and `pwrite`n (inline, or on a writer thread). They isolate the
//! kernel's cost of each way of getting bytes into the page cache; they
//! never recover, index or serve what they write.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::discard::{AlignedBuf, DiscardMode};

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

/// The prototype segments of one discard child, one per partition.
pub struct SegmentWriter {
    segments: Vec<SegmentFile>,
    ahead: bool,
    /// Receive buffer of the pwrite mode.
    pwrite: Option<AlignedBuf>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    helper: Option<std::thread::JoinHandle<()>>,
    pub offload: Option<Offload>,
}

/// The writer thread of `segment-offload` and the buffers it hands back.
pub struct Offload {
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
    pub fn finish(&mut self) -> anyhow::Result<()> {
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
    pub fn new(dir: &Path, partitions: usize, mode: DiscardMode) -> anyhow::Result<Self> {
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
    pub async fn tail(&mut self, i: usize, len: usize) -> anyhow::Result<&mut [u8]> {
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

    pub fn commit(&mut self, i: usize, len: usize) -> anyhow::Result<()> {
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
