//! Appending what a producer sent to a local (writable) topic, as a Kafka
//! leader does: one record batch per partition, checked (framing, CRC,
//! record count, no control batches), its base offset and
//! partition leader epoch stamped in place (both lie outside the CRC, so the
//! batch is otherwise stored as sent), and — for idempotent and
//! transactional producers — the epoch and sequence checked, so that a
//! retried batch is acknowledged with its first offset instead of being
//! appended twice. A transactional batch (its transaction verified by the
//! caller) stays open until its marker, which the transaction coordinator
//! has appended here ([`PartitionLog::append_txn_marker`]).

use crate::batch::{BatchBuilder, ControlType, RecordBatch};

use super::error::LogError;
use super::partition_log::PartitionLog;

/// Byte ranges of the batch header fields stamped at append.
const BASE_OFFSET: std::ops::Range<usize> = 0..8;
const PARTITION_LEADER_EPOCH: std::ops::Range<usize> = 12..16;

/// Why a produced batch was not appended. Each maps to one Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    #[error("record batch CRC does not match its contents")]
    CorruptMessage,
    #[error("record batch of {size} bytes is above the limit of {max}")]
    MessageTooLarge { size: usize, max: u32 },
    #[error("producer {producer_id}: sequence {got} does not follow {last}")]
    OutOfOrderSequence { producer_id: i64, got: i32, last: i32 },
    #[error("producer {producer_id}: epoch {got} is older than {current}")]
    InvalidProducerEpoch { producer_id: i64, got: i16, current: i16 },
    #[error("a transactional batch without a producer id")]
    TransactionalWithoutProducerId,
    #[error("transaction marker of coordinator epoch {got} is older than {current}")]
    CoordinatorFenced { got: i32, current: i32 },
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Where a produced batch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    pub base_offset: i64,
    /// The batch was a retry of one already appended (nothing was written).
    pub duplicate: bool,
}

impl PartitionLog {
    /// Appends one producer batch at the log end with `leader_epoch`,
    /// rewriting its base offset and epoch in `batch`.
    pub fn append_produced(
        &mut self,
        batch: &mut [u8],
        leader_epoch: i32,
        now_ms: u64,
    ) -> Result<Produced, ProduceError> {
        let max = self.config().max_batch_bytes;
        if batch.len() > max as usize {
            return Err(ProduceError::MessageTooLarge { size: batch.len(), max });
        }
        let view = RecordBatch::new(&*batch).map_err(|e| ProduceError::InvalidRecord(e.to_string()))?;
        if view.size_bytes() != batch.len() {
            return Err(ProduceError::InvalidRecord(
                "a produce request carries exactly one record batch per partition".into(),
            ));
        }
        if !view.crc_is_valid() {
            return Err(ProduceError::CorruptMessage);
        }
        if view.is_control() {
            return Err(ProduceError::InvalidRecord(
                "producers may not write control batches".into(),
            ));
        }
        if view.is_transactional() && view.producer_id() < 0 {
            return Err(ProduceError::TransactionalWithoutProducerId);
        }
        if view.records_count() != view.last_offset_delta().saturating_add(1) {
            return Err(ProduceError::InvalidRecord(format!(
                "{} records with a last offset delta of {}",
                view.records_count(),
                view.last_offset_delta()
            )));
        }
        if view.producer_id() >= 0
            && let Some(base_offset) = self.check_sequence(&view)?
        {
            return Ok(Produced {
                base_offset,
                duplicate: true,
            });
        }
        self.note_local_write()?;
        let base_offset = self.log_end_offset();
        batch[BASE_OFFSET].copy_from_slice(&base_offset.to_be_bytes());
        batch[PARTITION_LEADER_EPOCH].copy_from_slice(&leader_epoch.to_be_bytes());
        self.append(batch, now_ms)?;
        Ok(Produced {
            base_offset,
            duplicate: false,
        })
    }

    /// Appends a transaction's COMMIT (`commit`) or ABORT marker for
    /// `producer_id` at `leader_epoch` and flushes, as a Kafka leader does
    /// for the coordinator's WriteTxnMarkers. Checked as Kafka's
    /// `ProducerStateManager` checks a marker: an epoch older than the
    /// producer's is refused (InvalidProducerEpoch: the marker is fenced),
    /// and so is a coordinator epoch older than the producer's last.
    /// Writing a marker for a transaction already ended is harmless.
    pub fn append_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        leader_epoch: i32,
        now_ms: u64,
    ) -> Result<(), ProduceError> {
        if let Some(known) = self.producer_state().producer(producer_id) {
            if producer_epoch < known.producer_epoch {
                return Err(ProduceError::InvalidProducerEpoch {
                    producer_id,
                    got: producer_epoch,
                    current: known.producer_epoch,
                });
            }
            if coordinator_epoch < known.coordinator_epoch {
                return Err(ProduceError::CoordinatorFenced {
                    got: coordinator_epoch,
                    current: known.coordinator_epoch,
                });
            }
        }
        self.note_local_write()?;
        let control_type = if commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        let timestamp = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let marker = BatchBuilder::control_marker(
            self.log_end_offset(),
            leader_epoch,
            producer_id,
            producer_epoch,
            control_type,
            BatchBuilder::end_txn_marker_value(coordinator_epoch),
            timestamp,
        );
        self.append(&marker.build(), now_ms)?;
        self.flush(now_ms)?;
        Ok(())
    }

    /// Kafka's idempotence rules for one batch of an idempotent producer:
    /// `Some(base offset)` when it repeats a recent batch, `None` when it
    /// may be appended.
    fn check_sequence(&self, batch: &RecordBatch<&[u8]>) -> Result<Option<i64>, ProduceError> {
        let producer_id = batch.producer_id();
        let (epoch, first, last) = (batch.producer_epoch(), batch.base_sequence(), batch.last_sequence());
        let state = self.producer_state();
        // A producer we have not seen, or one with a new epoch, starts its
        // sequences at 0.
        let starts_afresh = || {
            if first == 0 {
                Ok(None)
            } else {
                Err(ProduceError::OutOfOrderSequence {
                    producer_id,
                    got: first,
                    last: -1,
                })
            }
        };
        let Some(known) = state.producer(producer_id) else {
            return starts_afresh();
        };
        if epoch < known.producer_epoch {
            return Err(ProduceError::InvalidProducerEpoch {
                producer_id,
                got: epoch,
                current: known.producer_epoch,
            });
        }
        if epoch > known.producer_epoch {
            return starts_afresh();
        }
        let next = if known.last_sequence == i32::MAX {
            0
        } else {
            known.last_sequence + 1
        };
        if let Some((_, _, base_offset)) = state.duplicate_of(producer_id, first, last) {
            return Ok(Some(base_offset));
        }
        if first == next {
            Ok(None)
        } else {
            Err(ProduceError::OutOfOrderSequence {
                producer_id,
                got: first,
                last: known.last_sequence,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, BuildRecord};
    use crate::log::{LogConfig, OpenOptions};

    fn open(dir: &std::path::Path) -> PartitionLog {
        PartitionLog::open(OpenOptions::new(dir, LogConfig::default()))
            .unwrap()
            .0
    }

    fn idempotent(producer_id: i64, epoch: i16, sequence: i32, records: usize) -> Vec<u8> {
        BatchBuilder {
            producer_id,
            producer_epoch: epoch,
            base_sequence: sequence,
            records: (0..records)
                .map(|i| BuildRecord {
                    timestamp: 1000 + i as i64,
                    key: Some(b"k".to_vec()),
                    value: Some(format!("v{i}").into_bytes()),
                    headers: Vec::new(),
                })
                .collect(),
            ..BatchBuilder::default()
        }
        .build()
    }

    /// Local writes roll segments like any append, also after the end of
    /// mirroring (whose markers come at a new leader epoch).
    #[test]
    fn produced_batches_roll_segments() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 4096,
            segment_index_bytes: 65536,
            preallocate_bytes: 65536,
            prefault_bytes: 0,
            ..LogConfig::default()
        };
        let mut log = PartitionLog::open(OpenOptions::new(dir.path(), config)).unwrap().0;
        log.end_mirroring(11, "source", 0).unwrap();
        for _ in 0..200 {
            let mut b = idempotent(-1, -1, -1, 1);
            log.append_produced(&mut b, 12, 0).unwrap();
        }
        let segments = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".log"))
            .count();
        assert!(segments > 3, "{segments} segments for {} bytes", log.size_bytes());
    }

    #[test]
    fn assigns_offsets_and_stamps_the_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let mut a = idempotent(-1, -1, -1, 3);
        assert_eq!(log.append_produced(&mut a, 7, 0).unwrap().base_offset, 0);
        let mut b = idempotent(-1, -1, -1, 2);
        assert_eq!(log.append_produced(&mut b, 7, 0).unwrap().base_offset, 3);
        assert_eq!(log.log_end_offset(), 5);
        let stored = log.read(3, 1 << 20).unwrap().to_vec().unwrap();
        let view = RecordBatch::new(&stored[..]).unwrap();
        assert_eq!((view.base_offset(), view.partition_leader_epoch()), (3, 7));
        assert!(view.crc_is_valid());
    }

    #[test]
    fn retries_are_acknowledged_not_appended_and_gaps_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let first = idempotent(42, 0, 0, 2);
        let second = idempotent(42, 0, 2, 2);
        assert_eq!(log.append_produced(&mut first.clone(), 0, 0).unwrap().base_offset, 0);
        assert_eq!(log.append_produced(&mut second.clone(), 0, 0).unwrap().base_offset, 2);
        // Both retried: same offsets back, nothing written.
        let retried = log.append_produced(&mut first.clone(), 0, 0).unwrap();
        assert_eq!(
            retried,
            Produced {
                base_offset: 0,
                duplicate: true
            }
        );
        assert_eq!(log.append_produced(&mut second.clone(), 0, 0).unwrap().base_offset, 2);
        assert_eq!(log.log_end_offset(), 4);
        // A gap in sequences, an old epoch: refused.
        assert!(matches!(
            log.append_produced(&mut idempotent(42, 0, 9, 1), 0, 0),
            Err(ProduceError::OutOfOrderSequence { .. })
        ));
        // A new epoch restarts at 0; then the old epoch is fenced.
        assert_eq!(
            log.append_produced(&mut idempotent(42, 1, 0, 1), 0, 0)
                .unwrap()
                .base_offset,
            4
        );
        assert!(matches!(
            log.append_produced(&mut idempotent(42, 0, 4, 1), 0, 0),
            Err(ProduceError::InvalidProducerEpoch { .. })
        ));
    }

    #[test]
    fn refuses_bad_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let mut corrupt = idempotent(-1, -1, -1, 1);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        assert!(matches!(
            log.append_produced(&mut corrupt, 0, 0),
            Err(ProduceError::CorruptMessage)
        ));
        let mut two = idempotent(-1, -1, -1, 1);
        two.extend_from_slice(&idempotent(-1, -1, -1, 1));
        assert!(matches!(
            log.append_produced(&mut two, 0, 0),
            Err(ProduceError::InvalidRecord(_))
        ));
        assert_eq!(log.log_end_offset(), 0);
    }
}
