//! Where a shard's transaction coordinator persists its transactional ids:
//! [`TransactionStore`], a [`CompactedLog`] per shard at
//! `<data dir>/__ringmirror/transaction-state-<shard>/` holding Kafka's
//! `__transaction_state` records (key: the transactional id; value: its
//! metadata; a tombstone for an expired id), so Kafka's own tools can read
//! it (`kafka-dump-log --transaction-log-decoder`).
//!
//! The coordinator writes through [`TransactionStateLog`]: an append is
//! durable (flushed) when it returns, and a torn, unacknowledged last batch
//! is cut by the log's recovery on the next open. [`TransactionStore::rebalance`]
//! moves ids to their shard when the agent starts with another number of
//! shards. Owns no transaction semantics: values are bytes here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::external::{CompactedLog, KeyedRecord, LiveValues, LogError};
use super::record::decode_key;
use super::transaction_shard;

/// The agent's internal state directory under the data dir (the group
/// stores' too): not a `<topic>-<n>` directory, so never served as a topic.
const INTERNAL_DIR: &str = "__ringmirror";
/// The name of shard `n`'s log is `transaction-state-<n>`.
const LOG_NAME_PREFIX: &str = "transaction-state-";

/// The log a transaction coordinator persists its records to.
pub trait TransactionStateLog {
    /// Appends `records` as one batch and returns once it is durable.
    fn append(&mut self, records: Vec<KeyedRecord>) -> Result<(), LogError>;
}

/// One shard's transaction log on disk.
pub struct TransactionStore {
    log: CompactedLog,
}

fn log_name(shard: usize) -> String {
    format!("{LOG_NAME_PREFIX}{shard}")
}

impl TransactionStore {
    /// Opens (creating) shard `shard`'s log under `data_dir` and returns it
    /// with every live record (the log completes or undoes an interrupted
    /// compaction, and cuts a torn tail, first).
    pub fn open(data_dir: &Path, shard: usize, compact_min_bytes: u64) -> Result<(Self, LiveValues), LogError> {
        let (log, values) = CompactedLog::open(&data_dir.join(INTERNAL_DIR), &log_name(shard), compact_min_bytes)?;
        Ok((Self { log }, values))
    }

    /// Moves every record to the log of its shard among `shards` (run
    /// before any coordinator opens, when the agent starts): the record is
    /// appended to its new shard's log first, then a tombstone to the old
    /// one, so a crash in between leaves it in both and the next run moves
    /// it again. A log of a shard beyond `shards` left with nothing live is
    /// removed. Returns how many records moved.
    pub fn rebalance(data_dir: &Path, shards: usize, compact_min_bytes: u64) -> Result<usize, LogError> {
        let root = data_dir.join(INTERNAL_DIR);
        let mut moved = 0;
        for from in existing_shards(&root)? {
            let (mut source, values) = Self::open(data_dir, from, compact_min_bytes)?;
            let mut live = values.len();
            let mut by_target: BTreeMap<usize, Vec<KeyedRecord>> = BTreeMap::new();
            let mut tombstones = Vec::new();
            for (key, value) in values {
                let Ok(id) = decode_key(&key) else {
                    continue;
                };
                let to = transaction_shard(&id, shards);
                if to != from {
                    tombstones.push(KeyedRecord {
                        key: key.clone(),
                        value: None,
                        timestamp_ms: None,
                    });
                    by_target.entry(to).or_default().push(KeyedRecord {
                        key,
                        value: Some(value),
                        timestamp_ms: None,
                    });
                }
            }
            // Each target is another shard's log, opened alone and closed
            // before the next source is opened: one writer per log.
            for (to, records) in by_target {
                let (mut target, _) = Self::open(data_dir, to, compact_min_bytes)?;
                target.append(records)?;
            }
            live -= tombstones.len();
            moved += tombstones.len();
            source.append(tombstones)?;
            drop(source);
            if from >= shards && live == 0 {
                let dir = root.join(log_name(from));
                std::fs::remove_dir_all(&dir).map_err(LogError::io("remove dir", &dir))?;
            }
        }
        if moved > 0 {
            tracing::info!(moved, shards, "moved transactional ids to their shards");
        }
        Ok(moved)
    }
}

/// The shards whose log exists under `root` (leftovers of an interrupted
/// compaction, `.compacted` and `.old`, are settled by opening the log).
fn existing_shards(root: &Path) -> Result<Vec<usize>, LogError> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LogError::io("read dir", root)(e)),
    };
    let mut shards = Vec::new();
    for entry in entries {
        let path: PathBuf = entry.map_err(LogError::io("read dir", root))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let base = name
            .strip_suffix(".compacted")
            .or_else(|| name.strip_suffix(".old"))
            .unwrap_or(name);
        if let Some(shard) = base.strip_prefix(LOG_NAME_PREFIX).and_then(|n| n.parse().ok()) {
            shards.push(shard);
        }
    }
    shards.sort_unstable();
    shards.dedup();
    Ok(shards)
}

impl TransactionStateLog for TransactionStore {
    fn append(&mut self, records: Vec<KeyedRecord>) -> Result<(), LogError> {
        self.log.append(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::encode_key;

    fn put(id: &str, value: &[u8]) -> KeyedRecord {
        KeyedRecord {
            key: encode_key(id).unwrap(),
            value: Some(value.to_vec()),
            timestamp_ms: None,
        }
    }

    fn ids(values: &LiveValues) -> Vec<String> {
        values.keys().map(|k| decode_key(k).unwrap()).collect()
    }

    #[test]
    fn records_survive_reopen_in_the_internal_dir() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, values) = TransactionStore::open(dir.path(), 3, u64::MAX).unwrap();
        assert!(values.is_empty());
        store.append(vec![put("a", b"1"), put("b", b"2")]).unwrap();
        store
            .append(vec![KeyedRecord {
                key: encode_key("a").unwrap(),
                value: None,
                timestamp_ms: None,
            }])
            .unwrap();
        drop(store);
        let (_, values) = TransactionStore::open(dir.path(), 3, u64::MAX).unwrap();
        assert_eq!(ids(&values), ["b"]);
        assert!(dir.path().join("__ringmirror/transaction-state-3").is_dir());
    }

    #[test]
    fn rebalance_moves_each_id_to_its_shard_and_drops_emptied_logs() {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..40).map(|i| format!("txn-{i}")).collect();
        // Written by an agent of 4 shards.
        for shard in 0..4 {
            let (mut store, _) = TransactionStore::open(dir.path(), shard, u64::MAX).unwrap();
            let mine: Vec<KeyedRecord> = names
                .iter()
                .filter(|n| transaction_shard(n, 4) == shard)
                .map(|n| put(n, n.as_bytes()))
                .collect();
            store.append(mine).unwrap();
        }
        let moved = TransactionStore::rebalance(dir.path(), 2, u64::MAX).unwrap();
        assert!(moved > 0);
        let mut seen = Vec::new();
        for shard in 0..2 {
            let (_, values) = TransactionStore::open(dir.path(), shard, u64::MAX).unwrap();
            for (key, value) in &values {
                let id = decode_key(key).unwrap();
                assert_eq!(transaction_shard(&id, 2), shard, "{id}");
                assert_eq!(value, id.as_bytes());
                seen.push(id);
            }
        }
        seen.sort();
        let mut expected = names.clone();
        expected.sort();
        assert_eq!(seen, expected);
        for gone in 2..4 {
            assert!(
                !dir.path()
                    .join(format!("__ringmirror/transaction-state-{gone}"))
                    .exists()
            );
        }
        // Nothing left to move.
        assert_eq!(TransactionStore::rebalance(dir.path(), 2, u64::MAX).unwrap(), 0);
    }
}
