//! The coordinator's core without its thread: what a metadata round that
//! finds many new partitions costs in `__mirror_state`.

use std::collections::HashMap;

use ringmirror_dataplane::fetch::{SourceMetadata, SourcePartition, StateEvent};

use super::*;

fn core(dir: &std::path::Path, state_partitions: u32) -> Core {
    let (shard, _) = async_channel::unbounded();
    Core {
        store: MirrorStateStore::open(dir, state_partitions).expect("open the state store"),
        shards: vec![shard],
        mirrors: BTreeMap::new(),
        partitions: BTreeMap::new(),
        by_tp: HashMap::new(),
        local_cluster_id: "local".into(),
        listener_addr: None,
        listener_sasl: None,
        listener_tls: None,
        listener_conn: None,
        reports: Arc::default(),
        catalog: CatalogHandle::new(Default::default()),
        reports_dirty: false,
        telemetry_dirty: false,
        published_at: std::time::Instant::now(),
        event_counts: ShardEventCounts::default(),
        reserve_budgets: Vec::new(),
        placed: Vec::new(),
    }
}

fn metadata(topic: &str, id: [u8; 16], partitions: i32) -> SourceMetadata {
    SourceMetadata {
        cluster_id: Some("source".into()),
        partitions: (0..partitions)
            .map(|p| {
                let source = SourcePartition {
                    leader: 0,
                    leader_epoch: 3,
                    topic_id: id,
                    error_code: 0,
                };
                (TopicPartition::new(topic, p), source)
            })
            .collect(),
        topics: HashMap::from([(topic.to_owned(), (id, partitions))]),
        ..SourceMetadata::default()
    }
}

/// A mirror that first sees P partitions records them PREPARING, and once
/// placed MIRRORING, in one flushed append per state partition each (at
/// most 4 here), not one per partition; a recreated topic (another id) is
/// not mixed in, and its partitions cost no append.
#[test]
fn new_partitions_are_recorded_in_one_append_per_state_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut core = core(dir.path(), 4);
    let config: MirrorConfig = toml::from_str("name = \"m\"\nbootstrap_servers = [\"s:9092\"]\ntopics = [\"t\"]")
        .expect("a mirror definition");
    let record = MirrorRecord {
        config,
        source_cluster_id: Some("source".into()),
        created_ms: 0,
    };
    core.store.put_mirror(&record).expect("put the mirror");
    core.mirrors
        .insert("m".into(), new_mirror(record).expect("a valid mirror"));
    let before = core.store.appends();
    core.apply_metadata("m", &metadata("t", [1; 16], 1000));
    assert!(
        core.store.appends() - before <= 4,
        "{} appends",
        core.store.appends() - before
    );
    assert_eq!(core.partitions.len(), 1000);
    assert_eq!(core.store.partitions().len(), 1000);
    assert!(core.store.partitions().values().all(|r| r.state == State::Preparing));
    assert_eq!(core.mirrors["m"].to_prepare.len(), 1000);

    // Their shard places them: MIRRORING, again one append per state partition.
    for p in 0..1000 {
        core.on_event(ShardEvent::State(StateEvent::Placed {
            mirror: "m".into(),
            tp: TopicPartition::new("t", p),
            log_end_offset: 0,
            truncated_to: None,
        }));
    }
    assert!(core.store.partitions().values().all(|r| r.state == State::Preparing));
    let before = core.store.appends();
    core.record_placed();
    assert!(
        core.store.appends() - before <= 4,
        "{} appends",
        core.store.appends() - before
    );
    assert!(core.store.partitions().values().all(|r| r.state == State::Mirroring));
    assert!(core.partitions.values().all(|p| p.record.state == State::Mirroring));

    let before = core.store.appends();
    core.apply_metadata("m", &metadata("t", [2; 16], 1001));
    assert_eq!(core.store.appends(), before, "the recreated topic is not recorded");
    assert_eq!(core.partitions.len(), 1000);
    assert!(core.mirrors["m"].reported_conflicts.contains("t"));
}
