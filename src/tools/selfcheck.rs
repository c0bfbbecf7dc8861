//! `ringmirror selfcheck`: the segment log's end-to-end crash test, and the
//! embedded default that runs without any Kafka.
//!
//! A child process (this binary again) appends a deterministic stream of
//! batches — keyed records with headers, idempotent and transactional
//! producers, COMMIT and ABORT markers, offset gaps as after compaction,
//! leader-epoch changes — and acknowledges each fsync on stdout. The parent
//! SIGKILLs it mid-append, tears the active segment's tail as a power cut
//! would, reopens the log (an unclean start: recovery scans from the
//! recovery point) and checks that every batch is byte-identical to the
//! generator's, that nothing acknowledged was lost, and that the log goes
//! on accepting appends and reopens cleanly without a scan.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use ringmirror_storage::batch::{BatchBuilder, BatchIter, BuildRecord, ControlType, RecordBatch};
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::{LogConfig, LogDir, PartitionLog, TopicPartition};

const TOPIC: &str = "selfcheck";
const TOPIC_ID: [u8; 16] = *b"ringmirror-self!";
/// Batches between acknowledged flushes in the writer.
const FLUSH_EVERY_BATCHES: u64 = 64;
const SEGMENT_BYTES: u64 = 32 * 1024 * 1024;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    }
}

/// The deterministic batch stream both processes agree on.
struct Generator {
    index: u64,
    next_offset: i64,
    rng: u64,
}

impl Generator {
    fn new() -> Self {
        Self {
            index: 0,
            next_offset: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64*: cheap, deterministic, good enough for test payloads.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn next_batch(&mut self) -> Vec<u8> {
        let i = self.index;
        self.index += 1;
        if i % 29 == 28 {
            self.next_offset += 5; // a compaction gap
        }
        let epoch = (i / 2000) as i32;
        let timestamp = 1_700_000_000_000 + i as i64 * 3;
        let producer = (i % 3) as i64 + 1;
        let marker = match (i % 17, i % 11) {
            (13, _) => Some((producer, ControlType::Commit)),
            (_, 7) => Some((((i + 1) % 3) as i64 + 1, ControlType::Abort)),
            _ => None,
        };
        let mut builder = match marker {
            Some((producer, kind)) => BatchBuilder::control_marker(
                0,
                epoch,
                producer,
                0,
                kind,
                BatchBuilder::end_txn_marker_value(1),
                timestamp,
            ),
            None => {
                let records = 1 + (self.next_u64() % 40) as usize;
                let value_bytes = 100 + (self.next_u64() % 2000) as usize;
                let mut recs = Vec::with_capacity(records);
                for r in 0..records {
                    let mut value = vec![0u8; value_bytes];
                    for chunk in value.chunks_mut(8) {
                        let word = self.next_u64().to_le_bytes();
                        chunk.copy_from_slice(&word[..chunk.len()]);
                    }
                    recs.push(BuildRecord {
                        timestamp: timestamp + r as i64,
                        key: Some(format!("key-{}", (i + r as u64) % 1000).into_bytes()),
                        value: Some(value),
                        headers: vec![("batch".into(), Some(i.to_be_bytes().to_vec()))],
                    });
                }
                BatchBuilder {
                    partition_leader_epoch: epoch,
                    producer_id: producer,
                    producer_epoch: 0,
                    base_sequence: (i as i32).wrapping_mul(64) & i32::MAX,
                    transactional: i % 5 == 0,
                    records: recs,
                    ..BatchBuilder::default()
                }
            }
        };
        builder.base_offset = self.next_offset;
        let bytes = builder.build();
        self.next_offset = RecordBatch::new(&bytes[..]).expect("built batch").next_offset();
        bytes
    }
}

fn partition() -> TopicPartition {
    TopicPartition::new(TOPIC, 0)
}

fn open_log(dir: &Path) -> anyhow::Result<(LogDir, PartitionLog, ringmirror_storage::log::RecoveryReport)> {
    let log_dir = LogDir::open(dir).context("open data dir")?;
    let (log, report) = log_dir.open_partition(&partition(), Some(TOPIC_ID), config(), now_ms())?;
    Ok((log_dir, log, report))
}

/// The child: append until `size_mb` is written, acknowledging each flush.
pub fn run_writer(dir: &Path, size_mb: u64) -> anyhow::Result<()> {
    let (mut log_dir, mut log, _) = open_log(dir)?;
    let mut generator = Generator::new();
    let mut written = 0u64;
    let mut stdout = std::io::stdout().lock();
    while written < size_mb << 20 {
        let batch = generator.next_batch();
        log.append(&batch, now_ms())?;
        written += batch.len() as u64;
        if generator.index % FLUSH_EVERY_BATCHES == 0 {
            log.flush(now_ms())?;
            log_dir.checkpoint([(&partition(), &log)])?;
            writeln!(stdout, "acked {} {written}", log.log_end_offset())?;
            stdout.flush()?;
        }
    }
    writeln!(stdout, "done")?;
    stdout.flush()?;
    // Wait to be killed: this process never closes the log cleanly.
    std::thread::sleep(std::time::Duration::from_secs(600));
    Ok(())
}

/// Segment files of a partition directory, in offset order.
fn segment_files(partition_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(partition_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    Ok(logs)
}

/// The end of the last whole, CRC-valid batch in a segment's bytes and the
/// offset after it (a kill may leave a half-copied batch behind it).
fn valid_end(bytes: &[u8]) -> (usize, Option<i64>) {
    let mut end = (0, None);
    for item in BatchIter::new(bytes, u32::MAX >> 1) {
        match item {
            Ok((position, b)) if b.crc_is_valid() => end = (position + b.size_bytes(), Some(b.next_offset())),
            _ => break,
        }
    }
    end
}

/// The offset after the last valid batch on disk.
fn on_disk_end(partition_dir: &Path) -> anyhow::Result<i64> {
    let mut end = 0;
    for path in segment_files(partition_dir)? {
        if let (_, Some(next)) = valid_end(&std::fs::read(&path)?) {
            end = next;
        }
    }
    Ok(end)
}

/// Writes the first half of the next batch right after the active
/// segment's valid data, as a write torn by a power cut leaves it.
fn tear_tail(partition_dir: &Path, next_batch: &[u8]) -> anyhow::Result<(PathBuf, usize)> {
    let active = segment_files(partition_dir)?.pop().context("no segment file")?;
    let mut bytes = std::fs::read(&active)?;
    let (end, _) = valid_end(&bytes);
    let torn = next_batch.len() / 2;
    bytes.truncate(end);
    bytes.extend_from_slice(&next_batch[..torn]);
    std::fs::write(&active, &bytes)?;
    Ok((active, torn))
}

pub fn run(data_dir: Option<PathBuf>, size_mb: u64) -> anyhow::Result<()> {
    let temp;
    let dir = match data_dir {
        Some(d) => d,
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_owned()
        }
    };
    println!("ringmirror selfcheck: data dir {}", dir.display());

    // 1. Write in a child process and SIGKILL it mid-append.
    let mut child = Command::new(std::env::current_exe()?)
        .args(["selfcheck", "--size-mb", &size_mb.to_string(), "--child-writer"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .context("start writer")?;
    let kill_after_bytes = (size_mb << 20) * 3 / 5;
    let mut acked_offset = 0i64;
    let mut acked_bytes = 0u64;
    let started = Instant::now();
    for line in BufReader::new(child.stdout.take().context("writer stdout")?).lines() {
        let line = line?;
        if let Some(rest) = line.strip_prefix("acked ") {
            let (offset, bytes) = rest.split_once(' ').context("ack line")?;
            acked_offset = offset.parse()?;
            acked_bytes = bytes.parse()?;
        }
        if line == "done" || acked_bytes >= kill_after_bytes {
            break;
        }
    }
    child.kill().context("SIGKILL writer")?;
    let status = child.wait()?;
    let write_secs = started.elapsed().as_secs_f64();
    ensure!(acked_offset > 0, "writer acknowledged nothing (exit status {status})");
    println!(
        "writer killed ({status}) after acknowledging offset {acked_offset} ({:.1} MiB in {write_secs:.2} s)",
        acked_bytes as f64 / 1048576.0
    );

    // 2. Tear the tail as a power cut would: half of the next batch.
    let mut expected = Generator::new();
    let log_dir = LogDir::open(&dir)?;
    let partition_dir = log_dir.partition_dir(&partition());
    drop(log_dir);
    let mut reference: Vec<Vec<u8>> = Vec::new();
    let on_disk_end = on_disk_end(&partition_dir)?;
    while expected.next_offset < on_disk_end {
        reference.push(expected.next_batch());
    }
    let next = expected.next_batch();
    let (torn_file, torn_bytes) = tear_tail(&partition_dir, &next)?;
    println!(
        "tore {torn_bytes} bytes of a half-written batch onto {}",
        torn_file.display()
    );

    // 3. Recover and verify.
    let started = Instant::now();
    let (log_dir, mut log, report) = open_log(&dir)?;
    let secs = started.elapsed().as_secs_f64();
    ensure!(
        !log_dir.was_clean_shutdown(),
        "the killed writer cannot have shut down cleanly"
    );
    println!(
        "recovered in {:.3} s: scanned from offset {:?}, {} batches ({:.1} MiB) re-validated at {:.2} GB/s, \
         {} bytes truncated ({}), {} segments deleted",
        secs,
        report.scanned_from_offset,
        report.batches_validated,
        report.bytes_validated as f64 / 1048576.0,
        report.bytes_validated as f64 / secs.max(1e-9) / 1e9,
        report.bytes_truncated,
        report.corruption.as_deref().unwrap_or("torn tail"),
        report.segments_deleted,
    );
    ensure!(
        report.bytes_truncated >= torn_bytes as u64,
        "the torn batch was not cut off"
    );
    let count = verify(&log, &reference)?;
    ensure!(
        log.log_end_offset() >= acked_offset,
        "lost acknowledged data: log end {} < acknowledged {acked_offset}",
        log.log_end_offset()
    );
    println!(
        "verified {count} batches byte-for-byte; log end offset {} ≥ acknowledged {acked_offset}; \
         {} ongoing transactions, last stable offset {}, {} aborted transactions indexed",
        log.log_end_offset(),
        log.producer_state().ongoing_transactions().count(),
        log.last_stable_offset(),
        log.aborted_transactions(0, i64::MAX).len()
    );

    // 4. The recovered log goes on: append, close cleanly, reopen without a scan.
    for _ in 0..100 {
        let batch = next_after(&mut expected, &mut reference);
        log.append(&batch, now_ms())?;
    }
    let end = log.log_end_offset();
    log_dir.close(vec![(partition(), log)], now_ms())?;
    let (log_dir, log, report) = open_log(&dir)?;
    ensure!(log_dir.was_clean_shutdown(), "clean close was not recorded");
    ensure!(report.scanned_from_offset.is_none(), "a clean start must not scan");
    ensure!(log.log_end_offset() == end, "clean reopen changed the log end");
    let count = verify(&log, &reference)?;
    println!("appended 100 more, closed cleanly, reopened without a scan: {count} batches verified");
    log_dir.close(vec![(partition(), log)], now_ms())?;
    println!("selfcheck passed");
    Ok(())
}

/// Continues the reference stream after the torn batch was dropped.
fn next_after(expected: &mut Generator, reference: &mut Vec<Vec<u8>>) -> Vec<u8> {
    let batch = expected.next_batch();
    reference.push(batch.clone());
    batch
}

/// Checks the log holds exactly the reference batches, in order, byte for byte.
fn verify(log: &PartitionLog, reference: &[Vec<u8>]) -> anyhow::Result<usize> {
    let mut i = 0;
    let mut mismatch = None;
    log.for_each_batch(|batch| {
        if mismatch.is_none() && reference.get(i).is_none_or(|want| want[..] != *batch.bytes()) {
            mismatch = Some((i, batch.base_offset()));
        }
        i += 1;
    })?;
    if let Some((index, offset)) = mismatch {
        bail!("batch {index} at offset {offset} differs from what was written");
    }
    ensure!(
        i == reference.len(),
        "log holds {i} batches, expected {}",
        reference.len()
    );
    Ok(i)
}
