//! The catalog: what this agent serves — its identity (node id, cluster id,
//! advertised address) and, per topic, the topic id, the partitions, the
//! shard that owns each, and the mirror it belongs to (a mirror topic is
//! read-only). Written rarely (a partition opened or closed), read by every
//! connection: a reader keeps a snapshot and takes the lock only when the
//! generation counter says the catalog changed, so serving requests never
//! contends on a lock shared between shards.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Who this agent is to its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    pub node_id: i32,
    pub cluster_id: String,
    /// The host and port clients are told to connect to.
    pub host: String,
    pub port: u16,
}

impl Default for ServerIdentity {
    fn default() -> Self {
        Self {
            node_id: 0,
            cluster_id: "ringmirror".into(),
            host: "127.0.0.1".into(),
            port: 9092,
        }
    }
}

/// One served partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionEntry {
    /// The shard whose registry holds the log.
    pub shard: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicEntry {
    pub name: String,
    pub id: [u8; 16],
    pub partitions: BTreeMap<i32, PartitionEntry>,
    /// The mirror that writes this topic (as of its latest registered
    /// partition); `None` for a local topic. Writability is decided per
    /// partition, by the owning shard.
    pub mirror: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub identity: ServerIdentity,
    topics: BTreeMap<String, TopicEntry>,
    names_by_id: HashMap<[u8; 16], String>,
}

impl Catalog {
    pub fn new(identity: ServerIdentity) -> Self {
        Self {
            identity,
            ..Self::default()
        }
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicEntry> {
        self.topics.values()
    }

    pub fn topic(&self, name: &str) -> Option<&TopicEntry> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &[u8; 16]) -> Option<&TopicEntry> {
        self.names_by_id.get(id).and_then(|name| self.topics.get(name))
    }

    /// The shard owning a partition, if it is served.
    pub fn owner(&self, topic: &str, partition: i32) -> Option<usize> {
        Some(self.topics.get(topic)?.partitions.get(&partition)?.shard)
    }

    /// Records that `shard` serves `partition` of `topic`. A topic's id is
    /// the first one given (a log without a recorded id gets one derived
    /// from its name, see [`derived_topic_id`]).
    pub fn add_partition(
        &mut self,
        topic: &str,
        id: Option<[u8; 16]>,
        partition: i32,
        shard: usize,
        mirror: Option<&str>,
    ) {
        let entry = self.topics.entry(topic.to_owned()).or_insert_with(|| TopicEntry {
            name: topic.to_owned(),
            id: id.unwrap_or_else(|| derived_topic_id(topic)),
            partitions: BTreeMap::new(),
            mirror: mirror.map(str::to_owned),
        });
        // The latest registration says who writes the topic now (a mirror
        // topic whose mirroring ended becomes local).
        entry.mirror = mirror.map(str::to_owned);
        entry.partitions.insert(partition, PartitionEntry { shard });
        self.names_by_id.insert(entry.id, topic.to_owned());
    }

    pub fn remove_partition(&mut self, topic: &str, partition: i32) {
        let Some(entry) = self.topics.get_mut(topic) else {
            return;
        };
        entry.partitions.remove(&partition);
        if entry.partitions.is_empty() {
            self.names_by_id.remove(&entry.id);
            self.topics.remove(topic);
        }
    }
}

/// A stable topic id for a log that has none on disk (written before ids
/// existed): a 128-bit FNV-1a of the name, with the UUID version nibble set
/// to 8 (custom) so that it never collides with a real v4 id.
pub fn derived_topic_id(topic: &str) -> [u8; 16] {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for &b in topic.as_bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    let mut id = h.to_be_bytes();
    id[6] = (id[6] & 0x0f) | 0x80;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

/// A new cluster id in Kafka's form: 16 random bytes, URL-safe base64
/// without padding (22 characters).
pub fn random_cluster_id() -> std::io::Result<String> {
    use base64::Engine;
    let bytes: [u8; 16] = random_bytes()?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Random bytes from the kernel.
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    use std::io::Read;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The catalog shared by every shard.
#[derive(Debug)]
pub struct CatalogHandle {
    current: Mutex<Arc<Catalog>>,
    generation: AtomicU64,
    /// Topics being created right now (so two creates cannot race).
    creating: Mutex<HashSet<String>>,
}

impl CatalogHandle {
    pub fn new(identity: ServerIdentity) -> Arc<Self> {
        Arc::new(Self {
            current: Mutex::new(Arc::new(Catalog::new(identity))),
            generation: AtomicU64::new(1),
            creating: Mutex::new(HashSet::new()),
        })
    }

    /// Claims `topic` for creation: false if it exists or is being created.
    pub fn try_reserve_topic(&self, topic: &str) -> bool {
        let mut creating = self.creating.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.snapshot().topic(topic).is_none() && creating.insert(topic.to_owned())
    }

    /// Ends a creation claimed with [`CatalogHandle::try_reserve_topic`].
    pub fn release_topic(&self, topic: &str) {
        self.creating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(topic);
    }

    /// Changes the catalog (copy on write: readers keep their snapshot).
    pub fn update(&self, f: impl FnOnce(&mut Catalog)) {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = Catalog::clone(&current);
        f(&mut next);
        *current = Arc::new(next);
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn snapshot(&self) -> Arc<Catalog> {
        Arc::clone(&self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// A reader's cached snapshot, refreshed when the generation moves.
pub struct CatalogView {
    handle: Arc<CatalogHandle>,
    generation: u64,
    snapshot: Arc<Catalog>,
}

impl CatalogView {
    pub fn new(handle: Arc<CatalogHandle>) -> Self {
        let generation = handle.generation.load(Ordering::Acquire);
        let snapshot = handle.snapshot();
        Self {
            handle,
            generation,
            snapshot,
        }
    }

    /// The current catalog (a lock is taken only after a change).
    pub fn get(&mut self) -> Arc<Catalog> {
        let generation = self.handle.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.snapshot = self.handle.snapshot();
            self.generation = generation;
        }
        Arc::clone(&self.snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_see_updates_and_ids_resolve() {
        let handle = CatalogHandle::new(ServerIdentity::default());
        let mut view = CatalogView::new(Arc::clone(&handle));
        assert!(view.get().topic("t").is_none());
        handle.update(|c| {
            c.add_partition("t", Some([7; 16]), 0, 1, Some("m"));
            c.add_partition("t", None, 1, 0, Some("m"));
        });
        let c = view.get();
        assert_eq!(c.owner("t", 0), Some(1));
        assert_eq!(c.owner("t", 1), Some(0));
        assert_eq!(c.topic_by_id(&[7; 16]).map(|t| t.name.as_str()), Some("t"));
        handle.update(|c| {
            c.remove_partition("t", 0);
            c.remove_partition("t", 1);
        });
        assert!(view.get().topic_by_id(&[7; 16]).is_none());
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        assert_eq!(derived_topic_id("a"), derived_topic_id("a"));
        assert_ne!(derived_topic_id("a"), derived_topic_id("b"));
        assert_eq!(derived_topic_id("a")[6] >> 4, 8);
    }
}
