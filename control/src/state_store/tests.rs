use super::*;
use proptest::prelude::*;
use std::os::unix::fs::MetadataExt;

fn config(name: &str) -> MirrorConfig {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "bootstrap_servers": ["source:9092"],
        "topics": ["orders"],
    }))
    .unwrap()
}

fn mirror(name: &str, created_ms: u64) -> MirrorRecord {
    MirrorRecord {
        config: config(name),
        source_cluster_id: Some("src-cluster".into()),
        created_ms,
    }
}

fn pkey(mirror: &str, topic: u8, partition: i32) -> PartitionStateKey {
    PartitionStateKey {
        mirror: mirror.into(),
        topic_id: [topic; 16],
        partition,
    }
}

fn precord(seed: u32) -> PartitionRecord {
    PartitionRecord {
        topic: format!("topic-{}", seed % 3),
        state: MirrorPartitionState::ALL[seed as usize % MirrorPartitionState::ALL.len()],
        last_mirror_epoch: seed as i32 % 7 - 1,
        destination_leader_epoch: seed as i32 % 11 + 10,
        retry_attempt: seed % 4,
        error: (seed % 5 == 0).then(|| format!("error {seed}")),
        updated_ms: u64::from(seed) * 1000,
    }
}

#[test]
fn keys_encode_canonically_and_pick_a_stable_partition() {
    let m = StateKey::Mirror { name: "dr".into() };
    assert_eq!(encode_key(&m), [0, 0, 0, 0, 0, 2, b'd', b'r']);
    let p = StateKey::Partition(PartitionStateKey {
        mirror: "dr".into(),
        topic_id: [9; 16],
        partition: 258,
    });
    let bytes = encode_key(&p);
    assert_eq!(
        bytes,
        [&[0, 0, 0, 1, 0, 2, b'd', b'r'][..], &[9; 16], &[0, 0, 1, 2]].concat()
    );
    assert_eq!(decode_key(&bytes), Some(p.clone()));
    assert_eq!(decode_key(&encode_key(&m)), Some(m.clone()));
    // Not canonical, another version or kind, cut short: not our keys.
    assert_eq!(decode_key(&[bytes.as_slice(), &[0]].concat()), None);
    assert_eq!(decode_key(&[0, 1, 0, 0, 0, 0]), None);
    assert_eq!(decode_key(&[0, 0, 0, 2, 0, 0]), None);
    assert_eq!(decode_key(&bytes[..bytes.len() - 1]), None);
    assert_eq!(state_partition(&p, 50), (stable_hash(bytes) % 50) as u32);
    assert!(state_partition(&m, STATE_PARTITIONS_DEFAULT) < STATE_PARTITIONS_DEFAULT);
}

fn ckey(mirror: &str, topic: &str) -> TopicConfigKey {
    TopicConfigKey {
        mirror: mirror.into(),
        topic: topic.into(),
    }
}

fn crecord(seed: u32) -> TopicConfigRecord {
    let mut configs = BTreeMap::from([("retention.ms".to_owned(), (u64::from(seed) * 1000).to_string())]);
    if seed % 2 == 0 {
        configs.insert("cleanup.policy".into(), "compact".into());
    }
    if seed % 7 == 0 {
        configs.clear();
    }
    TopicConfigRecord {
        configs,
        updated_ms: u64::from(seed),
    }
}

#[test]
fn topic_config_keys_encode_canonically() {
    let k = StateKey::TopicConfigs(ckey("dr", "orders"));
    let bytes = encode_key(&k);
    assert_eq!(bytes, [&[0, 0, 0, 2, 0, 2, b'd', b'r', 0, 6][..], b"orders"].concat());
    assert_eq!(decode_key(&bytes), Some(k.clone()));
    // Cut short, with a byte too many, or a kind this version does not know.
    assert_eq!(decode_key(&bytes[..bytes.len() - 1]), None);
    assert_eq!(decode_key(&[bytes.as_slice(), &[0]].concat()), None);
    assert_eq!(decode_key(&[0, 0, 0, 3, 0, 0]), None);
    // Not the partition key of the same mirror.
    let p = StateKey::Partition(pkey("dr", 1, 0));
    assert_ne!(encode_key(&p)[..4], bytes[..4]);
}

#[test]
fn topic_configs_round_trip_and_go_with_their_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MirrorStateStore::open(dir.path(), 8).unwrap();
    for name in ["a", "b"] {
        store.put_mirror(&mirror(name, 1)).unwrap();
        store.put_partition(pkey(name, 1, 0), precord(1)).unwrap();
        for (i, topic) in ["orders", "payments", "empty"].into_iter().enumerate() {
            store.put_topic_configs(ckey(name, topic), crecord(i as u32)).unwrap();
        }
    }
    // Overwritten, an empty record kept, one removed.
    store.put_topic_configs(ckey("a", "orders"), crecord(3)).unwrap();
    store.put_topic_configs(ckey("a", "empty"), crecord(7)).unwrap();
    store.remove_topic_configs(&ckey("b", "payments")).unwrap();
    store.remove_topic_configs(&ckey("b", "never-stored")).unwrap();
    let configs = store.topic_configs().clone();
    assert_eq!(configs.len(), 5);
    assert_eq!(configs[&ckey("a", "orders")], crecord(3));
    assert!(configs[&ckey("a", "empty")].configs.is_empty());
    assert!(!configs.contains_key(&ckey("b", "payments")));
    drop(store);
    let mut store = MirrorStateStore::open(dir.path(), 8).unwrap();
    assert_eq!(store.topic_configs(), &configs);
    // The JSON value: version 0 and the record's fields.
    let json: serde_json::Value = serde_json::from_slice(&encode_value(&crecord(2))).unwrap();
    assert_eq!(json["version"].as_u64(), Some(0));
    assert_eq!(json["configs"]["cleanup.policy"].as_str(), Some("compact"));
    assert_eq!(json["updated_ms"].as_u64(), Some(2));
    // Deleting a mirror takes its topics' configs along, and only those.
    store.delete_mirror("a").unwrap();
    let left = |s: &MirrorStateStore| s.topic_configs().keys().cloned().collect::<Vec<_>>();
    assert_eq!(left(&store), [ckey("b", "empty"), ckey("b", "orders")]);
    drop(store);
    let store = MirrorStateStore::open(dir.path(), 8).unwrap();
    assert_eq!(left(&store), [ckey("b", "empty"), ckey("b", "orders")]);
    assert_eq!(store.mirrors().keys().collect::<Vec<_>>(), ["b"]);
    assert!(matches!(
        MirrorStateStore::open(dir.path(), 8)
            .unwrap()
            .put_topic_configs(ckey("b", &"t".repeat(40_000)), crecord(1)),
        Err(StateStoreError::NameTooLong { bytes: 40_000 })
    ));
}

/// A topic-config record of a later version (extra fields) loads; an
/// undecodable one is skipped.
#[test]
fn newer_topic_config_records_load() {
    let dir = tempfile::tempdir().unwrap();
    drop(MirrorStateStore::open(dir.path(), 1).unwrap());
    let mut newer = serde_json::to_value(crecord(4)).unwrap();
    newer["version"] = 1.into();
    newer["source_topic_id"] = "abc".into();
    let raw = |key: TopicConfigKey, value: Vec<u8>| KeyedRecord {
        key: encode_key(&StateKey::TopicConfigs(key)),
        value: Some(value),
        timestamp_ms: None,
    };
    let (mut log, _) = CompactedLog::open(dir.path(), "mirror-state-0", u64::MAX).unwrap();
    log.append(vec![
        raw(ckey("dr", "orders"), serde_json::to_vec(&newer).unwrap()),
        raw(ckey("dr", "bad"), br#"{"version":0,"configs":{"a":1}}"#.to_vec()),
    ])
    .unwrap();
    drop(log);
    let store = MirrorStateStore::open(dir.path(), 1).unwrap();
    let loaded: Vec<_> = store.topic_configs().iter().collect();
    assert_eq!(loaded, [(&ckey("dr", "orders"), &crecord(4))]);
}

#[test]
fn states_are_stored_under_their_kafka_names() {
    for state in MirrorPartitionState::ALL {
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(json, format!("\"{state}\""));
        assert_eq!(serde_json::from_str::<MirrorPartitionState>(&json).unwrap(), state);
    }
}

#[test]
fn records_round_trip_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MirrorStateStore::open(dir.path(), STATE_PARTITIONS_DEFAULT).unwrap();
    store.put_mirror(&mirror("dr", 1)).unwrap();
    store.put_mirror(&mirror("dr", 2)).unwrap();
    store.put_partition(pkey("dr", 1, 0), precord(1)).unwrap();
    store
        .put_partitions((0..20).map(|p| (pkey("dr", 2, p), precord(p as u32))).collect())
        .unwrap();
    let (mirrors, partitions) = (store.mirrors().clone(), store.partitions().clone());
    assert_eq!(mirrors["dr"], mirror("dr", 2));
    assert_eq!(partitions.len(), 21);
    drop(store); // no clean close: every write was flushed
    let store = MirrorStateStore::open(dir.path(), STATE_PARTITIONS_DEFAULT).unwrap();
    assert_eq!(store.mirrors(), &mirrors);
    assert_eq!(store.partitions(), &partitions);
    // Partitions are created on their first write only.
    let created = list_partitions(dir.path()).unwrap();
    assert!(!created.is_empty() && created.len() < 22, "{created:?}");
    let value = encode_value(&precord(5));
    let json: serde_json::Value = serde_json::from_slice(&value).unwrap();
    assert_eq!(
        (json["version"].as_u64(), json["state"].as_str()),
        (Some(0), Some("PAUSED"))
    );
}

#[test]
fn deleting_a_mirror_tombstones_it_and_its_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MirrorStateStore::open(dir.path(), 8).unwrap();
    for name in ["a", "b"] {
        store.put_mirror(&mirror(name, 1)).unwrap();
        store
            .put_partitions((0..10).map(|p| (pkey(name, 3, p), precord(p as u32))).collect())
            .unwrap();
    }
    store.delete_mirror("a").unwrap();
    store.remove_partition(&pkey("b", 3, 0)).unwrap();
    store.delete_mirror("never-existed").unwrap();
    let check = |store: &MirrorStateStore| {
        assert_eq!(store.mirrors().keys().collect::<Vec<_>>(), ["b"]);
        let keys: Vec<_> = store
            .partitions()
            .keys()
            .map(|k| (k.mirror.as_str(), k.partition))
            .collect();
        assert_eq!(keys, (1..10).map(|p| ("b", p)).collect::<Vec<_>>());
    };
    check(&store);
    drop(store);
    check(&MirrorStateStore::open(dir.path(), 8).unwrap());
}

#[test]
fn compaction_keeps_the_latest_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MirrorStateStore::open_with(dir.path(), 1, 16 * 1024).unwrap();
    for i in 0..300 {
        store.put_partition(pkey("dr", 1, (i % 3) as i32), precord(i)).unwrap();
        if i % 50 == 0 {
            store.put_mirror(&mirror("dr", u64::from(i))).unwrap();
        }
    }
    store.put_partition(pkey("dr", 1, 7), precord(7)).unwrap();
    store.remove_partition(&pkey("dr", 1, 7)).unwrap();
    let size = store.logs[&0].size_bytes();
    assert!(size < 32 * 1024, "compacted: {size}");
    drop(store);
    let store = MirrorStateStore::open_with(dir.path(), 1, 16 * 1024).unwrap();
    assert_eq!(store.mirrors()["dr"].created_ms, 250);
    let latest: Vec<_> = store
        .partitions()
        .iter()
        .map(|(k, r)| (k.partition, r.clone()))
        .collect();
    assert_eq!(latest, [(0, precord(297)), (1, precord(298)), (2, precord(299))]);
}

#[test]
fn another_partition_count_is_refused_while_records_exist() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MirrorStateStore::open(dir.path(), 4).unwrap();
    store.put_mirror(&mirror("dr", 1)).unwrap();
    store.put_partition(pkey("dr", 1, 0), precord(1)).unwrap();
    drop(store);
    let err = MirrorStateStore::open(dir.path(), 8).err().unwrap();
    assert!(
        matches!(
            err,
            StateStoreError::PartitionCountMismatch {
                on_disk: 4,
                requested: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("strand"), "{err}");
    assert!(matches!(
        MirrorStateStore::open(dir.path(), 0),
        Err(StateStoreError::InvalidPartitionCount(0))
    ));
    // Once only tombstones are left, the count may change.
    let mut store = MirrorStateStore::open(dir.path(), 4).unwrap();
    assert_eq!(store.num_partitions(), 4);
    store.delete_mirror("dr").unwrap();
    drop(store);
    let mut store = MirrorStateStore::open(dir.path(), 8).unwrap();
    assert_eq!(store.num_partitions(), 8);
    assert!(list_partitions(dir.path()).unwrap().is_empty());
    store.put_mirror(&mirror("dr", 2)).unwrap();
    drop(store);
    let store = MirrorStateStore::open(dir.path(), 8).unwrap();
    assert_eq!(store.mirrors()["dr"].created_ms, 2);
    // A partition the recorded count cannot have is not silently ignored.
    std::fs::create_dir(dir.path().join("mirror-state-9")).unwrap();
    let err = MirrorStateStore::open(dir.path(), 8).err().unwrap();
    assert!(matches!(err, StateStoreError::CorruptPartitionCount { .. }), "{err}");
}

/// Records written by a later version (extra fields, also inside the
/// config) load; records this version cannot decode are skipped.
#[test]
fn unknown_fields_are_ignored_and_undecodable_records_skipped() {
    let dir = tempfile::tempdir().unwrap();
    drop(MirrorStateStore::open(dir.path(), 1).unwrap());
    let mut newer = serde_json::to_value(mirror("dr", 5)).unwrap();
    newer["version"] = 1.into();
    newer["owner"] = "someone".into();
    newer["config"]["compression"] = "zstd".into();
    let mut future_state = serde_json::to_value(precord(1)).unwrap();
    future_state["version"] = 0.into();
    future_state["state"] = "RESHARDING".into();
    let good = serde_json::to_vec(&Versioned {
        version: 0,
        record: precord(2),
    })
    .unwrap();
    let raw = |key: StateKey, value: &[u8]| KeyedRecord {
        key: encode_key(&key),
        value: Some(value.to_vec()),
        timestamp_ms: None,
    };
    let (mut log, _) = CompactedLog::open(dir.path(), "mirror-state-0", u64::MAX).unwrap();
    log.append(vec![
        raw(
            StateKey::Mirror { name: "dr".into() },
            &serde_json::to_vec(&newer).unwrap(),
        ),
        raw(
            StateKey::Partition(pkey("dr", 1, 1)),
            &serde_json::to_vec(&future_state).unwrap(),
        ),
        raw(StateKey::Partition(pkey("dr", 1, 2)), &good),
        raw(StateKey::Partition(pkey("dr", 1, 3)), b"not json"),
        KeyedRecord {
            key: b"\x00\x07unknown key version".to_vec(),
            value: Some(b"{}".to_vec()),
            timestamp_ms: None,
        },
    ])
    .unwrap();
    drop(log);
    let store = MirrorStateStore::open(dir.path(), 1).unwrap();
    assert_eq!(store.mirrors()["dr"], mirror("dr", 5));
    let loaded: Vec<_> = store.partitions().iter().collect();
    assert_eq!(loaded, [(&pkey("dr", 1, 2), &precord(2))]);
}

#[derive(Debug, Clone)]
enum Op {
    PutMirror(usize, u64),
    DeleteMirror(usize),
    PutPartitions(Vec<(usize, u32)>),
    RemovePartition(usize),
    PutTopicConfigs(usize, u32),
    RemoveTopicConfigs(usize),
    /// Drop without a clean close and reopen.
    Crash,
    /// A partition write torn by a crash: never acknowledged, so lost.
    TornPut(usize, u32, u8),
}

const NAMES: [&str; 3] = ["a", "b", "dr-east"];
const PROP_PARTITIONS: u32 = 3;

fn key_of(i: usize) -> PartitionStateKey {
    pkey(NAMES[i % 3], (i / 3 % 2) as u8, (i / 6) as i32)
}

const TOPICS: [&str; 3] = ["orders", "payments", "x"];

fn config_key_of(i: usize) -> TopicConfigKey {
    ckey(NAMES[i % 3], TOPICS[i / 3 % 3])
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..NAMES.len(), any::<u64>()).prop_map(|(n, t)| Op::PutMirror(n, t)),
        1 => (0..NAMES.len()).prop_map(Op::DeleteMirror),
        4 => prop::collection::vec((0..24usize, any::<u32>()), 1..6).prop_map(Op::PutPartitions),
        2 => (0..24usize).prop_map(Op::RemovePartition),
        2 => (0..9usize, any::<u32>()).prop_map(|(k, s)| Op::PutTopicConfigs(k, s)),
        1 => (0..9usize).prop_map(Op::RemoveTopicConfigs),
        1 => Just(Op::Crash),
        1 => (0..24usize, any::<u32>(), any::<u8>()).prop_map(|(k, s, c)| Op::TornPut(k, s, c)),
    ]
}

#[derive(Default)]
struct Model {
    mirrors: BTreeMap<String, MirrorRecord>,
    partitions: BTreeMap<PartitionStateKey, PartitionRecord>,
    topic_configs: BTreeMap<TopicConfigKey, TopicConfigRecord>,
}

fn segment_file(dir: &Path, partition: u32) -> PathBuf {
    dir.join(format!("{LOG_PREFIX}{partition}/00000000000000000000.log"))
}

/// The tear: puts the record, crashes, and cuts the last batch at `cut`
/// (a fraction of its length), unless the write compacted the log (then
/// no tail holds the write alone: it counts as acknowledged).
fn torn_put(
    dir: &Path,
    mut store: MirrorStateStore,
    key: PartitionStateKey,
    record: PartitionRecord,
    cut: u8,
    model: &mut Model,
) -> MirrorStateStore {
    let partition = state_partition(&StateKey::Partition(key.clone()), PROP_PARTITIONS);
    let inode = |path: &Path| std::fs::metadata(path).ok().map(|m| m.ino());
    let file = segment_file(dir, partition);
    let before = (inode(&file), store.logs.get(&partition).map_or(0, |l| l.size_bytes()));
    store.put_partition(key.clone(), record.clone()).unwrap();
    let after = store.logs[&partition].size_bytes();
    drop(store);
    if before.0.is_none() || before.0 == inode(&file) {
        let batch_bytes = after - before.1;
        let keep = batch_bytes * u64::from(cut) / 256;
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(before.1 + keep).unwrap();
    } else {
        model.partitions.insert(key, record);
    }
    MirrorStateStore::open_with(dir, PROP_PARTITIONS, 2048).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random writes, crashes and torn writes against a pair of maps:
    /// after every step the store holds exactly what was acknowledged.
    #[test]
    fn random_operations_match_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let open = || MirrorStateStore::open_with(dir.path(), PROP_PARTITIONS, 2048).unwrap();
        let mut store = open();
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::PutMirror(n, t) => {
                    let record = mirror(NAMES[n], t);
                    store.put_mirror(&record).unwrap();
                    model.mirrors.insert(NAMES[n].into(), record);
                }
                Op::DeleteMirror(n) => {
                    store.delete_mirror(NAMES[n]).unwrap();
                    model.mirrors.remove(NAMES[n]);
                    model.partitions.retain(|k, _| k.mirror != NAMES[n]);
                    model.topic_configs.retain(|k, _| k.mirror != NAMES[n]);
                }
                Op::PutPartitions(writes) => {
                    let writes: Vec<_> = writes.into_iter().map(|(k, s)| (key_of(k), precord(s))).collect();
                    store.put_partitions(writes.clone()).unwrap();
                    model.partitions.extend(writes);
                }
                Op::RemovePartition(k) => {
                    store.remove_partition(&key_of(k)).unwrap();
                    model.partitions.remove(&key_of(k));
                }
                Op::PutTopicConfigs(k, s) => {
                    store.put_topic_configs(config_key_of(k), crecord(s)).unwrap();
                    model.topic_configs.insert(config_key_of(k), crecord(s));
                }
                Op::RemoveTopicConfigs(k) => {
                    store.remove_topic_configs(&config_key_of(k)).unwrap();
                    model.topic_configs.remove(&config_key_of(k));
                }
                Op::Crash => {
                    drop(store);
                    store = open();
                }
                Op::TornPut(k, s, cut) => {
                    store = torn_put(dir.path(), store, key_of(k), precord(s), cut, &mut model);
                }
            }
            prop_assert_eq!(store.mirrors(), &model.mirrors);
            prop_assert_eq!(store.partitions(), &model.partitions);
            prop_assert_eq!(store.topic_configs(), &model.topic_configs);
        }
        drop(store);
        let store = open();
        prop_assert_eq!(store.mirrors(), &model.mirrors);
        prop_assert_eq!(store.partitions(), &model.partitions);
        prop_assert_eq!(store.topic_configs(), &model.topic_configs);
    }
}
