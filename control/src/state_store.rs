//! [`MirrorStateStore`]: the `__mirror_state` log — each mirror's definition,
//! each mirrored partition's state and each mirrored topic's synced config
//! overrides, written (and flushed) before the coordinator acts on it, and
//! loaded back on start.
//!
//! `mirror.topic.num.partitions` state partitions, each a [`CompactedLog`]
//! `<dir>/mirror-state-<n>/` created on its first write; a key lives in
//! partition [`state_partition`]. The partition count is recorded in
//! `<dir>/mirror-state.json` before any partition exists, and opening with
//! another count while records exist is refused: a key's partition depends
//! on the count, so its records would be stranded.
//!
//! Keys are binary and canonical (one encoding per key, so compaction keeps
//! exactly the latest record): i16 version 0, i16 kind (0 mirror,
//! 1 partition, 2 topic configs), the mirror name as a Kafka STRING (i16
//! length, UTF-8), then for a partition its 16-byte topic id and i32
//! partition, for topic configs the topic name as a STRING; big-endian.
//! Topic configs are keyed by name, not id: they follow the name the
//! source serves them under (a topic recreated at the source keeps its
//! overrides' key, and the next sync overwrites them).
//! Values are JSON objects with `"version": 0`. A later version may only add
//! fields, so unknown fields are ignored on load (even inside the mirror
//! config, which refuses them when read from the agent's TOML file); an
//! incompatible change needs a new key version. A record that does not
//! decode is logged and skipped, never fatal.
//!
//! Never reads the data plane's topic logs; this is state only.

use std::collections::{BTreeMap, BTreeSet, btree_map::Entry};
use std::io::Write;
use std::path::{Path, PathBuf};

use ringmirror_dataplane::partition::stable_hash;
use ringmirror_storage::log::{CompactedLog, KeyedRecord, LogError};
use serde::{Deserialize, Serialize};

use crate::mirror::MirrorConfig;
use crate::state::MirrorPartitionState;

/// The default `mirror.topic.num.partitions` (KIP-1279 and DESIGN.md).
pub const STATE_PARTITIONS_DEFAULT: u32 = 50;
/// The most state partitions a store takes (each is an open log).
pub const STATE_PARTITIONS_MAX: u32 = 1024;
/// A state partition's log is compacted only once it is larger than this.
const COMPACT_MIN_BYTES: u64 = 1 << 20;
const PARTITION_COUNT_FILE: &str = "mirror-state.json";
const LOG_PREFIX: &str = "mirror-state-";
const KEY_VERSION: i16 = 0;
const KEY_KIND_MIRROR: i16 = 0;
const KEY_KIND_PARTITION: i16 = 1;
const KEY_KIND_TOPIC_CONFIGS: i16 = 2;
const VALUE_VERSION: u16 = 0;
/// The longest mirror (or topic) name a key's Kafka STRING can hold.
const MIRROR_NAME_BYTES_MAX: usize = i16::MAX as usize;

/// A mirrored partition's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionStateKey {
    pub mirror: String,
    pub topic_id: [u8; 16],
    pub partition: i32,
}

/// A mirrored topic's configs' key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicConfigKey {
    pub mirror: String,
    pub topic: String,
}

/// A key of `__mirror_state`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StateKey {
    Mirror { name: String },
    Partition(PartitionStateKey),
    TopicConfigs(TopicConfigKey),
}

/// A mirror's definition as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorRecord {
    pub config: MirrorConfig,
    pub source_cluster_id: Option<String>,
    pub created_ms: u64,
}

/// A mirrored partition's state as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub topic: String,
    pub state: MirrorPartitionState,
    pub last_mirror_epoch: i32,
    pub destination_leader_epoch: i32,
    pub retry_attempt: u32,
    pub error: Option<String>,
    pub updated_ms: u64,
}

/// A mirrored topic's config overrides as last synced from the source
/// (what the destination serves; see `topic_config_sync`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfigRecord {
    pub configs: BTreeMap<String, String>,
    pub updated_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StateStoreError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state partition {partition}: {source}")]
    Log { partition: u32, source: LogError },
    #[error("corrupt {path}: {reason}")]
    CorruptPartitionCount { path: PathBuf, reason: String },
    #[error(
        "{dir} holds mirror state in {on_disk} partitions, not {requested}: changing \
         mirror.topic.num.partitions would strand its records"
    )]
    PartitionCountMismatch { dir: PathBuf, on_disk: u32, requested: u32 },
    #[error("mirror.topic.num.partitions must be 1 to {STATE_PARTITIONS_MAX}, not {0}")]
    InvalidPartitionCount(u32),
    #[error("a mirror or topic name of {bytes} bytes is longer than a key can hold ({MIRROR_NAME_BYTES_MAX})")]
    NameTooLong { bytes: usize },
}

type Result<T> = std::result::Result<T, StateStoreError>;

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StateStoreError {
    let path = path.to_owned();
    move |source| StateStoreError::Io { op, path, source }
}

/// The state partition `key` lives in, out of `num_partitions`.
pub fn state_partition(key: &StateKey, num_partitions: u32) -> u32 {
    (stable_hash(encode_key(key)) % u64::from(num_partitions)) as u32
}

fn check_name(name: &str) -> Result<()> {
    if name.len() > MIRROR_NAME_BYTES_MAX {
        return Err(StateStoreError::NameTooLong { bytes: name.len() });
    }
    Ok(())
}

/// The canonical key bytes. Writers check the names with [`check_name`]
/// first; for a longer name the length wraps, which no stored key has.
fn encode_key(key: &StateKey) -> Vec<u8> {
    let (kind, mirror) = match key {
        StateKey::Mirror { name } => (KEY_KIND_MIRROR, name),
        StateKey::Partition(p) => (KEY_KIND_PARTITION, &p.mirror),
        StateKey::TopicConfigs(t) => (KEY_KIND_TOPIC_CONFIGS, &t.mirror),
    };
    let mut out = Vec::with_capacity(26 + mirror.len());
    out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(mirror.len() as i16).to_be_bytes());
    out.extend_from_slice(mirror.as_bytes());
    match key {
        StateKey::Mirror { .. } => {}
        StateKey::Partition(p) => {
            out.extend_from_slice(&p.topic_id);
            out.extend_from_slice(&p.partition.to_be_bytes());
        }
        StateKey::TopicConfigs(t) => {
            out.extend_from_slice(&(t.topic.len() as i16).to_be_bytes());
            out.extend_from_slice(t.topic.as_bytes());
        }
    }
    out
}

fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = bytes.split_first_chunk::<N>()?;
    *bytes = rest;
    Some(*head)
}

/// A Kafka STRING (i16 length, UTF-8; not null).
fn take_string(bytes: &mut &[u8]) -> Option<String> {
    let len = usize::try_from(i16::from_be_bytes(take(bytes)?)).ok()?;
    let (s, rest) = bytes.split_at_checked(len)?;
    *bytes = rest;
    Some(std::str::from_utf8(s).ok()?.to_owned())
}

/// The key `bytes` encode; `None` for another version or kind, or bytes
/// that are not exactly one canonical key.
fn decode_key(mut bytes: &[u8]) -> Option<StateKey> {
    let b = &mut bytes;
    if i16::from_be_bytes(take(b)?) != KEY_VERSION {
        return None;
    }
    let kind = i16::from_be_bytes(take(b)?);
    let mirror = take_string(b)?;
    let key = match kind {
        KEY_KIND_MIRROR => StateKey::Mirror { name: mirror },
        KEY_KIND_PARTITION => StateKey::Partition(PartitionStateKey {
            mirror,
            topic_id: take(b)?,
            partition: i32::from_be_bytes(take(b)?),
        }),
        KEY_KIND_TOPIC_CONFIGS => StateKey::TopicConfigs(TopicConfigKey {
            mirror,
            topic: take_string(b)?,
        }),
        _ => return None,
    };
    bytes.is_empty().then_some(key)
}

/// A value as stored: the record's fields and the value format's version.
#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    version: u16,
    #[serde(flatten)]
    record: T,
}

fn encode_value<T: Serialize>(record: &T) -> Vec<u8> {
    let value = Versioned {
        version: VALUE_VERSION,
        record,
    };
    serde_json::to_vec(&value).expect("state records have string keys and no fallible fields")
}

/// The field names `T`'s derived `Deserialize` reads, as it announces them
/// to `deserialize_struct` (to a deserializer that stops right there).
fn struct_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error as _, Visitor, value::Error};
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Fields<'_> {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> std::result::Result<V::Value, Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> std::result::Result<V::Value, Error> {
            *self.0 = fields;
            Err(Error::custom("only the field names were wanted"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

fn decode_mirror(value: &[u8]) -> serde_json::Result<MirrorRecord> {
    let mut json: serde_json::Value = serde_json::from_slice(value)?;
    // `MirrorConfig` refuses unknown fields (typos in the TOML file); fields
    // a later version added are dropped here instead.
    if let Some(config) = json.get_mut("config").and_then(|c| c.as_object_mut()) {
        let known = struct_fields::<MirrorConfig>();
        config.retain(|field, _| known.contains(&field.as_str()));
    }
    Ok(serde_json::from_value::<Versioned<MirrorRecord>>(json)?.record)
}

fn decode_partition(value: &[u8]) -> serde_json::Result<PartitionRecord> {
    Ok(serde_json::from_slice::<Versioned<PartitionRecord>>(value)?.record)
}

fn decode_topic_configs(value: &[u8]) -> serde_json::Result<TopicConfigRecord> {
    Ok(serde_json::from_slice::<Versioned<TopicConfigRecord>>(value)?.record)
}

/// What `<dir>/mirror-state.json` holds.
#[derive(Serialize, Deserialize)]
struct PartitionCount {
    version: u16,
    num_partitions: u32,
}

fn read_partition_count(dir: &Path) -> Result<Option<u32>> {
    let path = dir.join(PARTITION_COUNT_FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read", &path)(e)),
    };
    let count: PartitionCount = serde_json::from_slice(&text).map_err(|e| StateStoreError::CorruptPartitionCount {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(Some(count.num_partitions))
}

fn fsync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync dir", dir))
}

/// Replaces the partition count file: a crash leaves the old or the new one.
fn write_partition_count(dir: &Path, num_partitions: u32) -> Result<()> {
    let path = dir.join(PARTITION_COUNT_FILE);
    let tmp = dir.join(format!("{PARTITION_COUNT_FILE}.tmp"));
    let json = serde_json::to_vec(&PartitionCount {
        version: 0,
        num_partitions,
    })
    .expect("two numbers serialize");
    let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    file.write_all(&json).map_err(io("write", &tmp))?;
    file.sync_all().map_err(io("fsync", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    fsync_dir(dir)
}

/// State partitions with a log in `dir` (also one only left as the
/// `.compacted` or `.old` directory of an interrupted compaction).
fn list_partitions(dir: &Path) -> Result<BTreeSet<u32>> {
    let mut partitions = BTreeSet::new();
    for entry in std::fs::read_dir(dir).map_err(io("list", dir))? {
        let name = entry.map_err(io("list", dir))?.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(LOG_PREFIX)) else {
            continue;
        };
        let (number, suffix) = rest.split_once('.').unwrap_or((rest, ""));
        if let (Ok(p), "" | "compacted" | "old") = (number.parse(), suffix) {
            partitions.insert(p);
        }
    }
    Ok(partitions)
}

/// `__mirror_state`: mirror definitions, partition states and topic
/// configs, in memory and in the state partitions' logs (see the module doc).
pub struct MirrorStateStore {
    dir: PathBuf,
    num_partitions: u32,
    compact_min_bytes: u64,
    /// Open logs by state partition; one is created on its first write.
    logs: BTreeMap<u32, CompactedLog>,
    mirrors: BTreeMap<String, MirrorRecord>,
    partitions: BTreeMap<PartitionStateKey, PartitionRecord>,
    topic_configs: BTreeMap<TopicConfigKey, TopicConfigRecord>,
    /// Flushed appends (one batch each) since open.
    appends: u64,
}

impl MirrorStateStore {
    /// Opens (creating) the store in `dir` with `num_partitions` state
    /// partitions and loads every existing partition.
    pub fn open(dir: &Path, num_partitions: u32) -> Result<Self> {
        Self::open_with(dir, num_partitions, COMPACT_MIN_BYTES)
    }

    fn open_with(dir: &Path, num_partitions: u32, compact_min_bytes: u64) -> Result<Self> {
        if !(1..=STATE_PARTITIONS_MAX).contains(&num_partitions) {
            return Err(StateStoreError::InvalidPartitionCount(num_partitions));
        }
        std::fs::create_dir_all(dir).map_err(io("create dir", dir))?;
        let recorded = read_partition_count(dir)?;
        let existing = list_partitions(dir)?;
        // The count is written before any partition exists, so the
        // partitions found must fit the count recorded.
        let layout = recorded.unwrap_or(num_partitions);
        let misfit = match (recorded, existing.last()) {
            (None, Some(_)) => Some("missing while state partitions exist".to_owned()),
            (Some(n), Some(&last)) if last >= n => Some(format!("says {n} partitions, but partition {last} exists")),
            _ => None,
        };
        if let Some(reason) = misfit {
            return Err(StateStoreError::CorruptPartitionCount {
                path: dir.join(PARTITION_COUNT_FILE),
                reason,
            });
        }
        let mut store = Self {
            dir: dir.to_owned(),
            num_partitions: layout,
            compact_min_bytes,
            logs: BTreeMap::new(),
            mirrors: BTreeMap::new(),
            partitions: BTreeMap::new(),
            topic_configs: BTreeMap::new(),
            appends: 0,
        };
        let mut live_records = 0;
        for partition in existing {
            live_records += store.load_partition(partition)?;
        }
        if layout != num_partitions {
            // Undecodable records count too: a later version may read them.
            if live_records > 0 {
                return Err(StateStoreError::PartitionCountMismatch {
                    dir: dir.to_owned(),
                    on_disk: layout,
                    requested: num_partitions,
                });
            }
            // Only tombstones are left: nothing is stranded by the change.
            for partition in std::mem::take(&mut store.logs).into_keys() {
                let path = dir.join(format!("{LOG_PREFIX}{partition}"));
                std::fs::remove_dir_all(&path).map_err(io("remove dir", &path))?;
            }
            store.num_partitions = num_partitions;
        }
        if recorded != Some(num_partitions) {
            write_partition_count(dir, num_partitions)?;
        }
        Ok(store)
    }

    /// Opens state partition `partition`'s log and loads its records;
    /// returns how many live records it holds, decodable or not.
    fn load_partition(&mut self, partition: u32) -> Result<usize> {
        let name = format!("{LOG_PREFIX}{partition}");
        let (log, values) = CompactedLog::open(&self.dir, &name, self.compact_min_bytes)
            .map_err(|source| StateStoreError::Log { partition, source })?;
        self.logs.insert(partition, log);
        let live_records = values.len();
        for (key, value) in values {
            let Some(decoded) = decode_key(&key) else {
                tracing::warn!(partition, key = ?key, "skipping a __mirror_state record with an unknown key");
                continue;
            };
            let home = state_partition(&decoded, self.num_partitions);
            if home != partition {
                tracing::warn!(partition, home, key = ?decoded, "skipping a __mirror_state record in the wrong partition");
                continue;
            }
            let loaded = match decoded.clone() {
                StateKey::Mirror { name } => decode_mirror(&value).map(|r| {
                    self.mirrors.insert(name, r);
                }),
                StateKey::Partition(key) => decode_partition(&value).map(|r| {
                    self.partitions.insert(key, r);
                }),
                StateKey::TopicConfigs(key) => decode_topic_configs(&value).map(|r| {
                    self.topic_configs.insert(key, r);
                }),
            };
            if let Err(e) = loaded {
                tracing::warn!(partition, key = ?decoded, error = %e, "skipping an undecodable __mirror_state record");
            }
        }
        Ok(live_records)
    }

    pub fn num_partitions(&self) -> u32 {
        self.num_partitions
    }

    pub fn mirrors(&self) -> &BTreeMap<String, MirrorRecord> {
        &self.mirrors
    }

    pub fn partitions(&self) -> &BTreeMap<PartitionStateKey, PartitionRecord> {
        &self.partitions
    }

    /// Every mirrored topic's configs as last synced, by (mirror, topic).
    pub fn topic_configs(&self) -> &BTreeMap<TopicConfigKey, TopicConfigRecord> {
        &self.topic_configs
    }

    /// Appends `records` to state partition `partition` as one batch,
    /// flushed before this returns.
    fn write(&mut self, partition: u32, records: Vec<(StateKey, Option<Vec<u8>>)>) -> Result<()> {
        let log_error = |source| StateStoreError::Log { partition, source };
        let log = match self.logs.entry(partition) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let name = format!("{LOG_PREFIX}{partition}");
                let (log, values) = CompactedLog::open(&self.dir, &name, self.compact_min_bytes).map_err(log_error)?;
                debug_assert!(values.is_empty(), "every existing partition was loaded on open");
                e.insert(log)
            }
        };
        let records = records
            .into_iter()
            .map(|(key, value)| KeyedRecord {
                key: encode_key(&key),
                value,
                timestamp_ms: None,
            })
            .collect();
        self.appends += 1;
        log.append(records).map_err(log_error)
    }

    /// Flushed appends to the state partitions since open (each one batch
    /// and one flush): what a change of many partitions costs.
    pub fn appends(&self) -> u64 {
        self.appends
    }

    /// Stores a mirror's definition under its name.
    pub fn put_mirror(&mut self, record: &MirrorRecord) -> Result<()> {
        let name = record.config.name.clone();
        check_name(&name)?;
        let key = StateKey::Mirror { name: name.clone() };
        let partition = state_partition(&key, self.num_partitions);
        self.write(partition, vec![(key, Some(encode_value(record)))])?;
        self.mirrors.insert(name, record.clone());
        Ok(())
    }

    /// Deletes a mirror, every partition state and every topic's configs of
    /// it (tombstones). The partitions and configs go first and the mirror
    /// last, so a crash part-way leaves the mirror, and the delete can be
    /// retried.
    pub fn delete_mirror(&mut self, name: &str) -> Result<()> {
        check_name(name)?;
        let first = PartitionStateKey {
            mirror: name.to_owned(),
            topic_id: [0; 16],
            partition: i32::MIN,
        };
        let keys: Vec<_> = self
            .partitions
            .range(first..)
            .take_while(|(k, _)| k.mirror == name)
            .map(|(k, _)| k.clone())
            .collect();
        self.remove_partitions(keys)?;
        let first = TopicConfigKey {
            mirror: name.to_owned(),
            topic: String::new(),
        };
        let keys: Vec<_> = self
            .topic_configs
            .range(first..)
            .take_while(|(k, _)| k.mirror == name)
            .map(|(k, _)| StateKey::TopicConfigs(k.clone()))
            .collect();
        self.tombstone(keys)?;
        let key = StateKey::Mirror { name: name.to_owned() };
        let partition = state_partition(&key, self.num_partitions);
        self.write(partition, vec![(key, None)])?;
        self.mirrors.remove(name);
        Ok(())
    }

    pub fn put_partition(&mut self, key: PartitionStateKey, record: PartitionRecord) -> Result<()> {
        self.put_partitions(vec![(key, record)])
    }

    /// Stores partition states, one batch per state partition. Each batch
    /// is durable and visible before the next is written; on an error the
    /// batches before it stay written.
    pub fn put_partitions(&mut self, records: Vec<(PartitionStateKey, PartitionRecord)>) -> Result<()> {
        let mut groups: BTreeMap<u32, Vec<(PartitionStateKey, PartitionRecord)>> = BTreeMap::new();
        for (key, record) in records {
            check_name(&key.mirror)?;
            let partition = state_partition(&StateKey::Partition(key.clone()), self.num_partitions);
            groups.entry(partition).or_default().push((key, record));
        }
        for (partition, group) in groups {
            let writes = group
                .iter()
                .map(|(key, record)| (StateKey::Partition(key.clone()), Some(encode_value(record))))
                .collect();
            self.write(partition, writes)?;
            self.partitions.extend(group);
        }
        Ok(())
    }

    /// Deletes a partition's state (a tombstone).
    pub fn remove_partition(&mut self, key: &PartitionStateKey) -> Result<()> {
        check_name(&key.mirror)?;
        self.remove_partitions(vec![key.clone()])
    }

    /// Tombstones `keys`, one batch per state partition.
    fn remove_partitions(&mut self, keys: Vec<PartitionStateKey>) -> Result<()> {
        self.tombstone(keys.into_iter().map(StateKey::Partition).collect())
    }

    /// Tombstones `keys` (partition states or topic configs), one batch per
    /// state partition; each batch is durable before it leaves memory.
    fn tombstone(&mut self, keys: Vec<StateKey>) -> Result<()> {
        let mut groups: BTreeMap<u32, Vec<StateKey>> = BTreeMap::new();
        for key in keys {
            let partition = state_partition(&key, self.num_partitions);
            groups.entry(partition).or_default().push(key);
        }
        for (partition, group) in groups {
            let writes = group.iter().map(|key| (key.clone(), None)).collect();
            self.write(partition, writes)?;
            for key in group {
                match key {
                    StateKey::Mirror { name } => {
                        self.mirrors.remove(&name);
                    }
                    StateKey::Partition(key) => {
                        self.partitions.remove(&key);
                    }
                    StateKey::TopicConfigs(key) => {
                        self.topic_configs.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }

    /// Stores a mirrored topic's configs as synced (flushed before this
    /// returns). An empty map is a record too: "synced, no overrides".
    pub fn put_topic_configs(&mut self, key: TopicConfigKey, record: TopicConfigRecord) -> Result<()> {
        check_name(&key.mirror)?;
        check_name(&key.topic)?;
        let state_key = StateKey::TopicConfigs(key.clone());
        let partition = state_partition(&state_key, self.num_partitions);
        self.write(partition, vec![(state_key, Some(encode_value(&record)))])?;
        self.topic_configs.insert(key, record);
        Ok(())
    }

    /// Deletes a topic's synced configs (a tombstone), as when the topic
    /// leaves the mirror.
    pub fn remove_topic_configs(&mut self, key: &TopicConfigKey) -> Result<()> {
        check_name(&key.mirror)?;
        check_name(&key.topic)?;
        self.tombstone(vec![StateKey::TopicConfigs(key.clone())])
    }
}

#[cfg(test)]
mod tests;
