//! The catalog: what this agent serves — its identity (node id, cluster id,
//! advertised address) and, per topic, the topic id, the partitions, the
//! shard that owns each, the mirror it belongs to (a mirror topic is
//! read-only) and its config overrides (synced from the mirror's source by
//! the control plane, served by DescribeConfigs). Written rarely (a
//! partition opened or closed, a config synced), read by every connection:
//! a reader keeps a snapshot and takes the lock only when the generation
//! counter says the catalog changed, so serving requests never contends on
//! a lock shared between shards.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ringmirror_storage::topic_config::TopicConfigMap;

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
    /// The topic's config overrides (Kafka names → values), as the control
    /// plane last published them ([`Catalog::set_topic_configs`]); empty by
    /// default. DescribeConfigs answers them as the topic's own settings
    /// (DYNAMIC_TOPIC_CONFIG).
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub identity: ServerIdentity,
    topics: BTreeMap<String, TopicEntry>,
    names_by_id: HashMap<[u8; 16], String>,
    /// Overrides of topics with no partition served right now: published
    /// before the first partition registers (the control plane publishes
    /// while the shards are still opening the logs), or kept from when the
    /// last partition went (a partition moving between shards, a restart of
    /// a failed one). A topic entry takes them when it appears.
    detached_configs: BTreeMap<String, TopicConfigMap>,
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

    /// A topic's config overrides as last published, whether or not any of
    /// its partitions is served (`None`: none were published).
    pub fn topic_configs(&self, topic: &str) -> Option<&TopicConfigMap> {
        match self.topics.get(topic) {
            Some(entry) => Some(&entry.configs),
            None => self.detached_configs.get(topic),
        }
    }

    /// Replaces a topic's config overrides (an empty map clears them);
    /// returns whether anything changed. They stay with the topic's name
    /// whatever happens to its partitions: set before the topic is served,
    /// they apply once its first partition registers; kept while it has
    /// none. Clear them (empty map) for a topic that is gone for good.
    pub fn set_topic_configs(&mut self, topic: &str, configs: TopicConfigMap) -> bool {
        if let Some(entry) = self.topics.get_mut(topic) {
            if entry.configs == configs {
                return false;
            }
            entry.configs = configs;
            return true;
        }
        if configs.is_empty() {
            return self.detached_configs.remove(topic).is_some();
        }
        if self.detached_configs.get(topic) == Some(&configs) {
            return false;
        }
        self.detached_configs.insert(topic.to_owned(), configs);
        true
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
            configs: self.detached_configs.remove(topic).unwrap_or_default(),
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
            if let Some(entry) = self.topics.remove(topic)
                && !entry.configs.is_empty()
            {
                self.detached_configs.insert(topic.to_owned(), entry.configs);
            }
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
///
/// Changes are made in place on a working copy; readers get an immutable
/// snapshot, copied from it at the first read after a change. So a burst of
/// changes with no read in between (every partition registering at start,
/// a mirror's first partitions) costs one copy, not one per change: P
/// registrations cost O(P), not O(P²) (issue 16's defect 1).
#[derive(Debug)]
pub struct CatalogHandle {
    catalog: Mutex<Versions>,
    generation: AtomicU64,
    /// Snapshots copied from the working catalog so far.
    copies: AtomicU64,
    /// Topics being created right now (so two creates cannot race).
    creating: Mutex<HashSet<String>>,
}

/// The working catalog and its last published snapshot.
#[derive(Debug)]
struct Versions {
    working: Catalog,
    /// `None` after a change until the next read publishes one.
    published: Option<Arc<Catalog>>,
}

impl CatalogHandle {
    pub fn new(identity: ServerIdentity) -> Arc<Self> {
        let catalog = Catalog::new(identity);
        Arc::new(Self {
            catalog: Mutex::new(Versions {
                published: Some(Arc::new(catalog.clone())),
                working: catalog,
            }),
            generation: AtomicU64::new(1),
            copies: AtomicU64::new(0),
            creating: Mutex::new(HashSet::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Versions> {
        self.catalog.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims `topic` for creation: false if it exists or is being created.
    pub fn try_reserve_topic(&self, topic: &str) -> bool {
        let mut creating = self.creating.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.lock().working.topic(topic).is_none() && creating.insert(topic.to_owned())
    }

    /// Ends a creation claimed with [`CatalogHandle::try_reserve_topic`].
    pub fn release_topic(&self, topic: &str) {
        self.creating
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(topic);
    }

    /// Changes the catalog (readers keep their snapshot; the next read
    /// sees the change); returns what `f` returns.
    pub fn update<R>(&self, f: impl FnOnce(&mut Catalog) -> R) -> R {
        let mut versions = self.lock();
        let out = f(&mut versions.working);
        versions.published = None;
        self.generation.fetch_add(1, Ordering::Release);
        out
    }

    /// Publishes a topic's config overrides (see
    /// [`Catalog::set_topic_configs`]); returns whether they changed. Callable
    /// from any thread (the control plane's); unchanged overrides change
    /// nothing and leave readers' snapshots valid, so publishing every
    /// metadata round is cheap.
    pub fn publish_topic_configs(&self, topic: &str, configs: TopicConfigMap) -> bool {
        let mut versions = self.lock();
        if !versions.working.set_topic_configs(topic, configs) {
            return false;
        }
        versions.published = None;
        self.generation.fetch_add(1, Ordering::Release);
        true
    }

    /// The current catalog; copied from the working one if it changed
    /// since the last read.
    pub fn snapshot(&self) -> Arc<Catalog> {
        let mut versions = self.lock();
        let Versions { working, published } = &mut *versions;
        let snapshot = published.get_or_insert_with(|| {
            self.copies.fetch_add(1, Ordering::Relaxed);
            Arc::new(working.clone())
        });
        Arc::clone(snapshot)
    }

    /// Snapshots copied so far (each an O(partitions) copy).
    pub fn copies(&self) -> u64 {
        self.copies.load(Ordering::Relaxed)
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

    fn configs(pairs: &[(&str, &str)]) -> TopicConfigMap {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn topic_configs_survive_partitions_coming_and_going() {
        let handle = CatalogHandle::new(ServerIdentity::default());
        let mut view = CatalogView::new(Arc::clone(&handle));
        let retention = configs(&[("retention.ms", "1000")]);
        // Published before the topic is served: kept for it.
        assert!(handle.update(|c| c.set_topic_configs("t", retention.clone())));
        assert_eq!(view.get().topic_configs("t"), Some(&retention));
        assert!(view.get().topic("t").is_none(), "no partition, no topic");
        handle.update(|c| c.add_partition("t", Some([1; 16]), 0, 0, Some("m")));
        assert_eq!(view.get().topic("t").unwrap().configs, retention);
        // More partitions, one removed: unchanged.
        handle.update(|c| {
            c.add_partition("t", None, 1, 1, Some("m"));
            c.remove_partition("t", 0);
        });
        assert_eq!(view.get().topic("t").unwrap().configs, retention);
        // The last partition goes and comes back (moved, restarted).
        handle.update(|c| c.remove_partition("t", 1));
        assert!(view.get().topic("t").is_none());
        assert_eq!(view.get().topic_configs("t"), Some(&retention));
        handle.update(|c| c.add_partition("t", None, 1, 0, Some("m")));
        assert_eq!(view.get().topic("t").unwrap().configs, retention);
        // Replaced, then cleared; other topics untouched.
        let compact = configs(&[("cleanup.policy", "compact")]);
        handle.update(|c| {
            c.add_partition("u", None, 0, 0, None);
            assert!(c.set_topic_configs("t", compact.clone()));
            assert!(!c.set_topic_configs("t", compact.clone()), "same again: no change");
        });
        let c = view.get();
        assert_eq!(c.topic("t").unwrap().configs, compact);
        assert!(c.topic("u").unwrap().configs.is_empty());
        assert_eq!(c.topic_configs("nothing"), None);
        handle.update(|c| assert!(c.set_topic_configs("t", TopicConfigMap::new())));
        assert!(view.get().topic("t").unwrap().configs.is_empty());
        // Cleared while detached: gone.
        handle.update(|c| {
            assert!(c.set_topic_configs("gone", retention.clone()));
            assert!(c.set_topic_configs("gone", TopicConfigMap::new()));
            assert!(!c.set_topic_configs("gone", TopicConfigMap::new()));
        });
        assert_eq!(view.get().topic_configs("gone"), None);
    }

    #[test]
    fn publishing_from_another_thread_moves_the_generation_only_on_change() {
        fn shared<T: Send + Sync>(_: &T) {}
        let handle = CatalogHandle::new(ServerIdentity::default());
        shared(&handle);
        handle.update(|c| c.add_partition("t", None, 0, 0, Some("m")));
        let generation = || handle.generation.load(Ordering::Acquire);
        let before = generation();
        let publisher = Arc::clone(&handle);
        let changed = std::thread::spawn(move || {
            let retention = configs(&[("retention.ms", "5")]);
            [
                publisher.publish_topic_configs("t", retention.clone()),
                publisher.publish_topic_configs("t", retention),
                publisher.publish_topic_configs("never-served", TopicConfigMap::new()),
            ]
        })
        .join()
        .unwrap();
        assert_eq!(changed, [true, false, false]);
        assert_eq!(generation(), before + 1, "only the change moved the generation");
        assert_eq!(
            handle.snapshot().topic("t").unwrap().configs,
            configs(&[("retention.ms", "5")])
        );
    }

    /// Registering P partitions with no read in between copies the catalog
    /// once, at the next read, not once per partition; a read between
    /// changes copies again, an unchanged catalog never.
    #[test]
    fn a_burst_of_registrations_costs_one_copy() {
        let handle = CatalogHandle::new(ServerIdentity::default());
        let mut view = CatalogView::new(Arc::clone(&handle));
        for p in 0..1000 {
            handle.update(|c| c.add_partition("t", None, p, p as usize % 2, Some("m")));
        }
        assert_eq!(handle.copies(), 0);
        assert_eq!(view.get().topic("t").unwrap().partitions.len(), 1000);
        assert_eq!(view.get().owner("t", 999), Some(1));
        assert_eq!(handle.copies(), 1);
        handle.update(|c| c.remove_partition("t", 0));
        assert!(view.get().owner("t", 0).is_none());
        assert!(view.get().owner("t", 1).is_some());
        assert_eq!(handle.copies(), 2);
        assert!(!handle.publish_topic_configs("t", TopicConfigMap::new()));
        let _ = handle.snapshot();
        assert_eq!(handle.copies(), 2, "nothing changed: no copy");
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        assert_eq!(derived_topic_id("a"), derived_topic_id("a"));
        assert_ne!(derived_topic_id("a"), derived_topic_id("b"));
        assert_eq!(derived_topic_id("a")[6] >> 4, 8);
    }
}
