//! Compares the batches we hold with the source's bytes for the same
//! offsets, by their headers only: base offset, length, partition leader
//! epoch and CRC (which covers everything from the attributes on, so two
//! batches with equal headers hold equal records). Pure: no I/O, nothing
//! decoded past the header.
//!
//! Kafka's log cleaner may have rewritten or removed a batch at the source
//! since we copied it: `MemoryRecords.filterTo` rebuilds a batch that lost
//! records, or whose tombstones or markers get a delete horizon (then with
//! every record, re-based timestamps and another size), through
//! `buildRetainedRecordsInto`, which keeps the original v2 batch's base and
//! last offset, producer fields and leader epoch; batches left empty are
//! dropped. Such a batch is skipped — neither a match nor a difference — so
//! a compacted source never looks diverged. The price: a rewrite under the
//! same epoch that keeps offsets, producer and sequence and holds fewer
//! records is not seen by headers alone.

use super::header::RecordBatch;
use super::iter::BatchIter;

/// The header fields of one of our batches that a comparison needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    pub base_offset: i64,
    pub last_offset: i64,
    pub size_bytes: usize,
    pub partition_leader_epoch: i32,
    pub crc: u32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
    /// The cleaner set a delete horizon (attributes bit 6) when it rewrote it.
    pub has_delete_horizon: bool,
}

/// The attributes bit Kafka's cleaner sets on a batch it gave a delete
/// horizon (`DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK`).
const DELETE_HORIZON_FLAG: i16 = 0x40;

impl BatchSummary {
    pub fn of<B: AsRef<[u8]>>(batch: &RecordBatch<B>) -> Self {
        Self {
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            size_bytes: batch.size_bytes(),
            partition_leader_epoch: batch.partition_leader_epoch(),
            crc: batch.crc(),
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            base_sequence: batch.base_sequence(),
            records_count: batch.records_count(),
            has_delete_horizon: batch.attributes() & DELETE_HORIZON_FLAG != 0,
        }
    }

    /// Like [`BatchSummary::of`], with the CRC computed over the batch's
    /// bytes rather than the one it carries: a byte changed on our disk
    /// then differs from the source's (`mirror verify`).
    pub fn of_contents<B: AsRef<[u8]>>(batch: &RecordBatch<B>) -> Self {
        Self {
            crc: batch.computed_crc(),
            ..Self::of(batch)
        }
    }

    /// The offset after the batch.
    pub fn end_offset(&self) -> i64 {
        self.last_offset + 1
    }

    fn same_batch(&self, source: &Self) -> bool {
        self.base_offset == source.base_offset
            && self.size_bytes == source.size_bytes
            && self.partition_leader_epoch == source.partition_leader_epoch
            && self.crc == source.crc
    }

    /// Whether `source` may be what Kafka's cleaner makes of this batch:
    /// the same offsets, producer and epoch, and fewer records or a delete
    /// horizon ours has not (its size may differ either way: a delete
    /// horizon re-bases the timestamps).
    fn cleaned_into(&self, source: &Self) -> bool {
        self.base_offset == source.base_offset
            && self.last_offset == source.last_offset
            && self.partition_leader_epoch == source.partition_leader_epoch
            && self.producer_id == source.producer_id
            && self.producer_epoch == source.producer_epoch
            && self.base_sequence == source.base_sequence
            && (source.records_count < self.records_count
                || (source.records_count == self.records_count
                    && source.has_delete_horizon
                    && !self.has_delete_horizon))
    }
}

/// What a comparison of our batches with the source's bytes found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison {
    /// Our batches compared: matched, skipped or the differing one.
    pub batches_compared: usize,
    /// Our batches found identical at the source.
    pub batches_matched: usize,
    /// The offset after the last batch found identical (`None`: none was).
    pub last_matching_end: Option<i64>,
    /// The base offset of our first batch that the source holds otherwise.
    pub first_differing_offset: Option<i64>,
}

impl Comparison {
    /// The source's bytes ended before all of `ours` could be compared and
    /// no difference was found: the rest needs another read.
    pub fn incomplete(&self, ours: &[BatchSummary]) -> bool {
        self.first_differing_offset.is_none() && self.batches_compared < ours.len()
    }
}

/// Compares `ours` (in offset order) with the whole batches in `source`,
/// which should start at or below `ours[0]`'s base offset (a Fetch answer
/// from there). Stops at the first difference, or where `source`'s whole
/// batches end (a partial last batch is not read).
///
/// A batch of ours is identical when the source has a batch with the same
/// base offset, length, leader epoch and CRC; it differs when the source
/// has another batch at its base offset, or a batch that overlaps it from
/// another base; it is skipped when the source no longer holds it (the
/// source's next batch starts past its end: removed by the cleaner) or
/// holds a cleaned form of it.
pub fn compare_batches(ours: &[BatchSummary], source: &[u8], max_batch_bytes: u32) -> Comparison {
    let mut found = Comparison {
        batches_compared: 0,
        batches_matched: 0,
        last_matching_end: None,
        first_differing_offset: None,
    };
    let mut theirs = BatchIter::new(source, max_batch_bytes)
        .map_while(Result::ok)
        .map(|(_, batch)| BatchSummary::of(&batch))
        .peekable();
    for our in ours {
        // Source batches wholly below ours are ones we do not hold.
        while theirs.next_if(|s| s.last_offset < our.base_offset).is_some() {}
        let Some(their) = theirs.peek() else { break };
        found.batches_compared += 1;
        if our.same_batch(their) {
            found.batches_matched += 1;
            found.last_matching_end = Some(our.end_offset());
            theirs.next();
        } else if our.cleaned_into(their) {
            theirs.next();
        } else if their.base_offset > our.last_offset {
            // Removed at the source; its next batch comes later.
        } else {
            found.first_differing_offset = Some(our.base_offset);
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::batch::{BatchBuilder, BuildRecord};

    const MAX: u32 = 1 << 20;

    fn batch(base_offset: i64, records: usize, epoch: i32, seed: u8) -> Vec<u8> {
        BatchBuilder {
            base_offset,
            partition_leader_epoch: epoch,
            records: (0..records)
                .map(|i| BuildRecord {
                    timestamp: 1_700_000_000_000 + i as i64,
                    key: Some(vec![seed, i as u8]),
                    value: Some(vec![seed; 10 + i]),
                    headers: Vec::new(),
                })
                .collect(),
            ..BatchBuilder::default()
        }
        .build()
    }

    fn summaries(bytes: &[u8]) -> Vec<BatchSummary> {
        BatchIter::new(bytes, MAX)
            .map(|b| BatchSummary::of(&b.unwrap().1))
            .collect()
    }

    fn log(batches: &[Vec<u8>]) -> Vec<u8> {
        batches.concat()
    }

    #[test]
    fn identical_batches_match_to_the_last_end() {
        let bytes = log(&[batch(0, 3, 1, 1), batch(3, 2, 1, 2), batch(5, 4, 2, 3)]);
        let c = compare_batches(&summaries(&bytes), &bytes, MAX);
        assert_eq!(c.first_differing_offset, None);
        assert_eq!(c.last_matching_end, Some(9));
        assert_eq!(c.batches_matched, 3);
    }

    #[test]
    fn rewritten_batch_at_the_same_offset_differs_there() {
        let ours = log(&[batch(0, 3, 1, 1), batch(3, 2, 1, 2), batch(5, 4, 1, 3)]);
        let theirs = log(&[batch(0, 3, 1, 1), batch(3, 2, 1, 9), batch(5, 4, 1, 3)]);
        let c = compare_batches(&summaries(&ours), &theirs, MAX);
        assert_eq!(c.first_differing_offset, Some(3));
        assert_eq!(c.last_matching_end, Some(3));
    }

    #[test]
    fn same_records_under_another_epoch_differ() {
        let ours = log(&[batch(0, 3, 1, 1)]);
        let theirs = log(&[batch(0, 3, 2, 1)]);
        assert_eq!(
            compare_batches(&summaries(&ours), &theirs, MAX).first_differing_offset,
            Some(0)
        );
    }

    #[test]
    fn source_batch_straddling_ours_differs() {
        let ours = log(&[batch(0, 2, 1, 1), batch(2, 2, 1, 2)]);
        let theirs = log(&[batch(0, 1, 1, 1), batch(1, 3, 1, 2)]);
        let c = compare_batches(&summaries(&ours), &theirs, MAX);
        assert_eq!(c.first_differing_offset, Some(0));
        assert_eq!(c.last_matching_end, None);
    }

    #[test]
    fn source_starting_below_ours_is_read_from_our_base() {
        let all = [batch(0, 3, 1, 1), batch(3, 2, 1, 2), batch(5, 4, 1, 3)];
        let ours = log(&all[1..]);
        let c = compare_batches(&summaries(&ours), &log(&all), MAX);
        assert_eq!((c.first_differing_offset, c.last_matching_end), (None, Some(9)));
    }

    #[test]
    fn batch_removed_by_the_source_cleaner_is_skipped() {
        let ours = log(&[batch(0, 3, 1, 1), batch(3, 2, 1, 2), batch(5, 4, 1, 3)]);
        let theirs = log(&[batch(0, 3, 1, 1), batch(5, 4, 1, 3)]);
        let c = compare_batches(&summaries(&ours), &theirs, MAX);
        assert_eq!(c.first_differing_offset, None);
        assert_eq!((c.batches_compared, c.batches_matched), (3, 2));
        assert_eq!(c.last_matching_end, Some(9));
    }

    #[test]
    fn batch_cleaned_at_the_source_is_skipped() {
        let ours = log(&[batch(10, 4, 3, 1), batch(14, 2, 3, 2)]);
        let cleaned = BatchBuilder {
            base_offset: 10,
            partition_leader_epoch: 3,
            records: vec![BuildRecord {
                timestamp: 1,
                key: Some(vec![1]),
                value: None,
                headers: Vec::new(),
            }],
            offset_deltas: Some(vec![2]),
            last_offset_delta: Some(3),
            ..BatchBuilder::default()
        }
        .build();
        let theirs = log(&[cleaned, batch(14, 2, 3, 2)]);
        let c = compare_batches(&summaries(&ours), &theirs, MAX);
        assert_eq!(c.first_differing_offset, None);
        assert_eq!((c.batches_compared, c.batches_matched), (2, 1));
    }

    #[test]
    fn batch_given_a_delete_horizon_at_the_source_is_skipped() {
        // Every record kept, other timestamps: another CRC, maybe another size.
        let ours = log(&[batch(0, 3, 1, 1)]);
        let mut rewritten = batch(0, 3, 1, 1);
        use crate::batch::header::{OFF_ATTRIBUTES, OFF_BASE_TIMESTAMP, OFF_CRC};
        rewritten[OFF_ATTRIBUTES + 1] |= DELETE_HORIZON_FLAG as u8;
        rewritten[OFF_BASE_TIMESTAMP..OFF_BASE_TIMESTAMP + 8].copy_from_slice(&1_800_000_000_000i64.to_be_bytes());
        let crc = crc32c::crc32c(&rewritten[OFF_ATTRIBUTES..]);
        rewritten[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let c = compare_batches(&summaries(&ours), &rewritten, MAX);
        assert_eq!(
            (c.first_differing_offset, c.batches_compared, c.batches_matched),
            (None, 1, 0)
        );
    }

    #[test]
    fn control_and_transactional_batches_compare_by_their_bytes() {
        let txn = BatchBuilder {
            base_offset: 0,
            partition_leader_epoch: 4,
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
            records: vec![BuildRecord::default()],
            ..BatchBuilder::default()
        }
        .build();
        let marker = BatchBuilder::control_marker(
            1,
            4,
            7,
            0,
            crate::batch::ControlType::Commit,
            BatchBuilder::end_txn_marker_value(0),
            5,
        )
        .build();
        let bytes = log(&[txn, marker]);
        let c = compare_batches(&summaries(&bytes), &bytes, MAX);
        assert_eq!((c.first_differing_offset, c.last_matching_end), (None, Some(2)));
    }

    #[test]
    fn a_byte_changed_in_our_copy_differs_by_its_computed_crc() {
        let theirs = log(&[batch(0, 3, 1, 1), batch(3, 2, 1, 2)]);
        let mut ours = theirs.clone();
        let first_len = summaries(&theirs)[0].size_bytes;
        ours[first_len + 70] ^= 1;
        let by_header = summaries(&ours);
        assert_eq!(compare_batches(&by_header, &theirs, MAX).first_differing_offset, None);
        let by_contents: Vec<BatchSummary> = BatchIter::new(&ours, MAX)
            .map(|b| BatchSummary::of_contents(&b.unwrap().1))
            .collect();
        assert_eq!(
            compare_batches(&by_contents, &theirs, MAX).first_differing_offset,
            Some(3)
        );
    }

    #[test]
    fn short_source_read_is_incomplete_not_different() {
        let all = log(&[batch(0, 3, 1, 1), batch(3, 2, 1, 2)]);
        let ours = summaries(&all);
        let first_len = ours[0].size_bytes;
        // The second batch arrives cut short (Fetch's max bytes).
        let c = compare_batches(&ours, &all[..first_len + 20], MAX);
        assert!(c.incomplete(&ours));
        assert_eq!(c.last_matching_end, Some(3));
        assert!(!compare_batches(&ours, &all, MAX).incomplete(&ours));
    }

    proptest! {
        /// Against the model (a Vec of batches per side): the first
        /// differing offset is the base of the first batch the source
        /// replaced, and everything before it matches.
        #[test]
        fn first_difference_is_the_first_replaced_batch(
            sizes in proptest::collection::vec(1usize..5, 1..12),
            replaced_from in proptest::option::of(0usize..12),
        ) {
            let mut base = 0;
            let mut ours = Vec::new();
            let mut theirs = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                ours.push(batch(base, n, 1, i as u8));
                let rewritten = replaced_from.is_some_and(|r| i >= r);
                theirs.push(batch(base, n, 1, if rewritten { 200 + i as u8 } else { i as u8 }));
                base += n as i64;
            }
            let ours_summaries = summaries(&log(&ours));
            let c = compare_batches(&ours_summaries, &log(&theirs), MAX);
            match replaced_from.filter(|&r| r < sizes.len()) {
                Some(r) => {
                    prop_assert_eq!(c.first_differing_offset, Some(ours_summaries[r].base_offset));
                    prop_assert_eq!(c.batches_matched, r);
                    prop_assert_eq!(c.last_matching_end, (r > 0).then(|| ours_summaries[r].base_offset));
                }
                None => {
                    prop_assert_eq!(c.first_differing_offset, None);
                    prop_assert_eq!(c.last_matching_end, Some(base));
                }
            }
        }

        /// A source that dropped any subset of our batches (its cleaner
        /// removed them) never differs.
        #[test]
        fn removed_batches_never_differ(
            sizes in proptest::collection::vec(1usize..5, 1..12),
            kept in proptest::collection::vec(any::<bool>(), 12),
        ) {
            let mut base = 0;
            let mut ours = Vec::new();
            let mut theirs = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                let b = batch(base, n, 2, i as u8);
                if kept[i] {
                    theirs.push(b.clone());
                }
                ours.push(b);
                base += n as i64;
            }
            let ours_summaries = summaries(&log(&ours));
            let c = compare_batches(&ours_summaries, &log(&theirs), MAX);
            prop_assert_eq!(c.first_differing_offset, None);
            prop_assert_eq!(c.batches_matched, kept[..sizes.len()].iter().filter(|&&k| k).count());
        }
    }
}
