//! `ringmirror dump-log`: prints the batches of a segment file in the shape
//! of Kafka's `kafka-dump-log.sh`, plus whether each CRC is valid, so an
//! operator can inspect what was mirrored without trusting our own reader
//! further than the header.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use ringmirror_storage::batch::{BatchIter, ControlRecord, ControlType, RecordBatch, TimestampType, decode_records};

/// Framing bound for dump-log: generous, since this is an inspection tool.
const DUMP_BATCH_BYTES_MAX: u32 = 1 << 30;
const DUMP_DECOMPRESSED_BYTES_MAX: usize = 1 << 30;

fn base_offset_from_name(path: &Path) -> Option<i64> {
    path.file_stem()?.to_str()?.parse().ok()
}

pub fn run(path: &Path, deep: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    // SAFETY: read-only map of a file we do not modify; a concurrent writer
    // may only append, which cannot invalidate mapped pages.
    let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("map {}", path.display()));
    let bytes: &[u8] = match &map {
        Ok(m) => m,
        Err(_) if file.metadata()?.len() == 0 => &[],
        Err(e) => anyhow::bail!("{e:#}"),
    };
    writeln!(out, "Dumping {}", path.display())?;
    if let Some(base) = base_offset_from_name(path) {
        writeln!(out, "Log starting offset: {base}")?;
    }
    let mut iter = BatchIter::new(bytes, DUMP_BATCH_BYTES_MAX);
    let mut failure = None;
    for item in iter.by_ref() {
        match item {
            Ok((position, batch)) => print_batch(out, position, &batch, deep)?,
            Err(e) => failure = Some(e),
        }
    }
    if let Some(e) = failure {
        writeln!(out, "Stopped at an invalid batch: {e}")?;
        anyhow::bail!("{}: {e}", path.display());
    }
    let trailing = bytes.len() - iter.position();
    if trailing > 0 {
        let zeros = bytes[iter.position()..].iter().all(|&b| b == 0);
        let what = if zeros {
            "zero (preallocated) bytes"
        } else {
            "bytes of a partial batch"
        };
        writeln!(out, "Found {trailing} {what} at the end of {}", path.display())?;
    }
    Ok(())
}

fn print_batch(out: &mut impl Write, position: usize, b: &RecordBatch<&[u8]>, deep: bool) -> anyhow::Result<()> {
    let ts_type = match b.timestamp_type() {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    };
    let control = if b.is_control() {
        ControlRecord::decode(b).ok()
    } else {
        None
    };
    write!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} producerEpoch: {} \
         partitionLeaderEpoch: {} isTransactional: {} isControl: {} position: {position} {ts_type}: {} size: {} \
         magic: {} compresscodec: {} crc: {} isvalid: {}",
        b.base_offset(),
        b.last_offset(),
        b.records_count(),
        b.base_sequence(),
        b.last_sequence(),
        b.producer_id(),
        b.producer_epoch(),
        b.partition_leader_epoch(),
        b.is_transactional(),
        b.is_control(),
        b.max_timestamp(),
        b.size_bytes(),
        b.magic(),
        b.compression().name(),
        b.crc(),
        b.crc_is_valid(),
    )?;
    if let Some(c) = &control {
        write!(out, " controlType: {}", c.control_type.name())?;
    }
    writeln!(out)?;
    if !deep {
        return Ok(());
    }
    if let Some(c) = control {
        match c.control_type {
            ControlType::Abort | ControlType::Commit => writeln!(
                out,
                "| offset: {} endTxnMarker: {} coordinatorEpoch: {}",
                b.base_offset(),
                c.control_type.name(),
                c.coordinator_epoch.unwrap_or(-1)
            )?,
            ControlType::MirrorPidReset => writeln!(
                out,
                "| offset: {} mirrorPidReset sourceClusterId: {}",
                b.base_offset(),
                c.source_cluster_id.as_deref().unwrap_or("")
            )?,
            ControlType::Unknown(t) => writeln!(out, "| offset: {} unknown control type {t}", b.base_offset())?,
        }
        return Ok(());
    }
    match decode_records(b, DUMP_DECOMPRESSED_BYTES_MAX) {
        Ok(records) => {
            for r in records {
                let keys: Vec<String> = r
                    .headers
                    .iter()
                    .map(|h| String::from_utf8_lossy(&h.key).into_owned())
                    .collect();
                writeln!(
                    out,
                    "| offset: {} {ts_type}: {} keySize: {} valueSize: {} headerKeys: [{}] key: {} payload: {}",
                    r.offset,
                    r.timestamp,
                    r.key.as_ref().map_or(-1, |k| k.len() as i64),
                    r.value.as_ref().map_or(-1, |v| v.len() as i64),
                    keys.join(","),
                    r.key.as_deref().map_or("null".into(), String::from_utf8_lossy),
                    r.value.as_deref().map_or("null".into(), String::from_utf8_lossy),
                )?;
            }
        }
        Err(e) => writeln!(out, "| records unreadable: {e}")?,
    }
    Ok(())
}
