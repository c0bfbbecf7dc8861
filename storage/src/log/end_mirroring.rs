//! Ending a mirror on a partition's log (failover): after the last fetched
//! batch, an ABORT marker for every transaction still open — its producer at
//! the source may never send the marker, and readers of this copy must not
//! wait for it — then a MIRROR_PID_RESET record naming the source cluster,
//! which tells every reader (and our own producer state) to forget the
//! source's producer ids. Both go in at the destination leader epoch. The
//! steps are idempotent, so a stop interrupted by a crash simply runs again:
//! aborted transactions are no longer open, and a log that already ends with
//! the reset gets no second one.

use crate::batch::{
    BatchBuilder, ControlRecord, ControlType, NO_PRODUCER_ID, RecordBatch, encode_mirror_pid_reset_value,
};

use super::error::Result;
use super::partition_log::PartitionLog;

/// What ending the mirror appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndedMirroring {
    /// ABORT markers written for transactions left open by the source.
    pub aborted_transactions: usize,
    /// Whether the MIRROR_PID_RESET record was written now (false: it was
    /// already there, from an interrupted earlier attempt).
    pub wrote_pid_reset: bool,
    /// The log end after the markers: local writes start here.
    pub log_end_offset: i64,
}

impl PartitionLog {
    /// Appends the markers that end mirroring at `leader_epoch`, and flushes.
    /// A cluster id the record cannot hold is refused before anything is written.
    pub fn end_mirroring(&mut self, leader_epoch: i32, source_cluster_id: &str, now_ms: u64) -> Result<EndedMirroring> {
        let reset_value = encode_mirror_pid_reset_value(source_cluster_id)?;
        // Recorded before the first marker: the log is not only the source's any more.
        self.note_local_write()?;
        let timestamp = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let open: Vec<(i64, i16, i32)> = self
            .producer_state()
            .ongoing_transactions()
            .filter_map(|(producer_id, _)| {
                let p = self.producer_state().producer(producer_id)?;
                Some((producer_id, p.producer_epoch, p.coordinator_epoch.max(0)))
            })
            .collect();
        for &(producer_id, producer_epoch, coordinator_epoch) in &open {
            let marker = BatchBuilder::control_marker(
                self.log_end_offset(),
                leader_epoch,
                producer_id,
                producer_epoch,
                ControlType::Abort,
                BatchBuilder::end_txn_marker_value(coordinator_epoch),
                timestamp,
            );
            self.append(&marker.build(), now_ms)?;
            crate::failpoint::crash_point("end-mirroring:abort-written");
        }
        crate::failpoint::crash_point("end-mirroring:aborts-written");
        let wrote_pid_reset = !self.ends_with_pid_reset()?;
        if wrote_pid_reset {
            let reset = BatchBuilder::control_marker(
                self.log_end_offset(),
                leader_epoch,
                NO_PRODUCER_ID,
                -1,
                ControlType::MirrorPidReset,
                reset_value,
                timestamp,
            );
            self.append(&reset.build(), now_ms)?;
            crate::failpoint::crash_point("end-mirroring:pid-reset-written");
        }
        self.flush(now_ms)?;
        Ok(EndedMirroring {
            aborted_transactions: open.len(),
            wrote_pid_reset,
            log_end_offset: self.log_end_offset(),
        })
    }

    /// Whether the last batch is a MIRROR_PID_RESET record.
    fn ends_with_pid_reset(&self) -> Result<bool> {
        let end = self.log_end_offset();
        if end <= self.log_start_offset() {
            return Ok(false);
        }
        let slice = self.read(end - 1, 1)?;
        let bytes = slice.to_vec().map_err(super::error::LogError::io("read", self.dir()))?;
        let Ok(batch) = RecordBatch::new(&bytes[..]) else {
            return Ok(false);
        };
        Ok(batch.is_control()
            && ControlRecord::decode(&batch).is_ok_and(|r| r.control_type == ControlType::MirrorPidReset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BuildRecord;
    use crate::log::{LogConfig, OpenOptions};

    fn transactional(base_offset: i64, producer_id: i64) -> Vec<u8> {
        BatchBuilder {
            base_offset,
            partition_leader_epoch: 3,
            producer_id,
            producer_epoch: 2,
            base_sequence: 0,
            transactional: true,
            records: vec![BuildRecord {
                timestamp: 1,
                value: Some(b"v".to_vec()),
                ..BuildRecord::default()
            }],
            ..BatchBuilder::default()
        }
        .build()
    }

    #[test]
    fn aborts_open_transactions_then_resets_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = PartitionLog::open(OpenOptions::new(dir.path(), LogConfig::default())).unwrap();
        log.append(&transactional(0, 7), 0).unwrap();
        log.append(&transactional(1, 8), 0).unwrap();
        assert_eq!(log.last_stable_offset(), 0);
        let ended = log.end_mirroring(10, "source-cluster", 5).unwrap();
        assert_eq!(
            ended,
            EndedMirroring {
                aborted_transactions: 2,
                wrote_pid_reset: true,
                log_end_offset: 5
            }
        );
        // Nothing is open any more, both transactions are in the txn index,
        // producer state is gone, the markers carry the new epoch.
        assert_eq!(log.last_stable_offset(), 5);
        assert_eq!(log.aborted_transactions(0, 5).len(), 2);
        assert_eq!(log.producer_state().producers().count(), 0);
        assert_eq!(
            log.epoch_cache().latest().map(|e| (e.epoch, e.start_offset)),
            Some((10, 2))
        );
        // Run again (a stop interrupted after its markers): nothing more.
        let again = log.end_mirroring(10, "source-cluster", 6).unwrap();
        assert_eq!(
            (again.aborted_transactions, again.wrote_pid_reset, again.log_end_offset),
            (0, false, 5)
        );
    }

    #[test]
    fn a_cluster_id_the_record_cannot_hold_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = PartitionLog::open(OpenOptions::new(dir.path(), LogConfig::default())).unwrap();
        log.append(&transactional(0, 7), 0).unwrap();
        let refused = log.end_mirroring(10, &"c".repeat(40_000), 5).unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("source cluster id is 40000 bytes, longer than Kafka allows"),
            "{refused}"
        );
        // No ABORT marker either: the transaction is still open.
        assert_eq!((log.log_end_offset(), log.last_stable_offset()), (1, 0));
        // The longest id that fits is written, and read back.
        let longest = "c".repeat(i16::MAX as usize);
        assert!(log.end_mirroring(10, &longest, 6).unwrap().wrote_pid_reset);
        let last = log.read(2, 1).unwrap().to_vec().unwrap();
        let reset = ControlRecord::decode(&RecordBatch::new(&last[..]).unwrap()).unwrap();
        assert_eq!(reset.source_cluster_id.as_deref(), Some(longest.as_str()));
    }
}
