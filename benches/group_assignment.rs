//! The cost of KIP-848's server-side assignment and of a heartbeat, both of
//! which run on the group's shard inside a ConsumerGroupHeartbeat (so they
//! hold up every other request of that shard while they run).
//!
//! A group of 300 members subscribed to 10 topics of 100 partitions each:
//! the `uniform` assignment from nothing, after one member joins a balanced
//! group (the sticky case), `range` from nothing, and a heartbeat of a
//! member of the settled group that changes nothing (what every member
//! sends every heartbeat interval). The budget: a rebalance well under a
//! millisecond per hundred members, a steady heartbeat in microseconds.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ringmirror_dataplane::groups::assignors::{self, AssignmentSpec};
use ringmirror_dataplane::groups::consumer_protocol::{HeartbeatRequest, TopicMetadata};
use ringmirror_dataplane::groups::{GroupConfig, GroupCoordinator};
use uuid::Uuid;

const MEMBERS: usize = 300;
const TOPICS: u128 = 10;
const PARTITIONS_PER_TOPIC: i32 = 100;

fn topic_name(t: u128) -> String {
    format!("topic-{t}")
}

fn group_assignment(c: &mut Criterion) {
    let mut group = c.benchmark_group("group_assignment");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    let counts: BTreeMap<Uuid, i32> = (1..=TOPICS)
        .map(|t| (Uuid::from_u128(t), PARTITIONS_PER_TOPIC))
        .collect();
    let all: BTreeSet<Uuid> = counts.keys().copied().collect();
    let members: BTreeMap<String, BTreeSet<Uuid>> =
        (0..MEMBERS).map(|m| (format!("member-{m:04}"), all.clone())).collect();
    let none = BTreeMap::new();
    let fresh = AssignmentSpec {
        subscriptions: &members,
        partition_counts: &counts,
        previous: &none,
    };
    group.bench_function("uniform_from_nothing", |b| {
        b.iter(|| black_box(assignors::assign(assignors::UNIFORM, &fresh)))
    });
    let balanced = assignors::assign(assignors::UNIFORM, &fresh);
    let mut grown = members.clone();
    grown.insert("member-new".into(), all.clone());
    let joined = AssignmentSpec {
        subscriptions: &grown,
        partition_counts: &counts,
        previous: &balanced,
    };
    group.bench_function("uniform_one_member_joins", |b| {
        b.iter(|| black_box(assignors::assign(assignors::UNIFORM, &joined)))
    });
    group.bench_function("range_from_nothing", |b| {
        b.iter(|| black_box(assignors::assign(assignors::RANGE, &fresh)))
    });

    let dir = tempfile::tempdir().expect("temp dir");
    let mut coordinator = GroupCoordinator::open(dir.path(), 0, GroupConfig::default()).expect("coordinator");
    let lookup = |name: &str| {
        (1..=TOPICS).find(|t| topic_name(*t) == name).map(|t| TopicMetadata {
            id: Uuid::from_u128(t),
            partitions: PARTITIONS_PER_TOPIC,
        })
    };
    let now = Instant::now();
    let mut epochs = BTreeMap::new();
    for m in 0..MEMBERS {
        let id = format!("member-{m:04}");
        let joined = coordinator.consumer_heartbeat(
            HeartbeatRequest {
                group_id: "g".into(),
                member_id: id.clone(),
                member_epoch: 0,
                rebalance_timeout_ms: 30_000,
                subscribed_topic_names: Some((1..=TOPICS).map(topic_name).collect()),
                owned: Some(BTreeMap::new()),
                ..HeartbeatRequest::default()
            },
            &lookup,
            now,
        );
        epochs.insert(id, (joined.member_epoch, joined.assignment.unwrap_or_default()));
    }
    // Everyone reports what it owns until the group settles.
    for _ in 0..4 {
        for (id, (epoch, owned)) in epochs.iter_mut() {
            let r = coordinator.consumer_heartbeat(
                HeartbeatRequest {
                    group_id: "g".into(),
                    member_id: id.clone(),
                    member_epoch: *epoch,
                    rebalance_timeout_ms: -1,
                    owned: Some(owned.clone()),
                    ..HeartbeatRequest::default()
                },
                &lookup,
                now,
            );
            assert_eq!(r.error, 0, "{r:?}");
            *epoch = r.member_epoch;
            if let Some(a) = r.assignment {
                *owned = a;
            }
        }
    }
    let (id, (epoch, _)) = epochs.iter().next().expect("a member");
    let steady = HeartbeatRequest {
        group_id: "g".into(),
        member_id: id.clone(),
        member_epoch: *epoch,
        rebalance_timeout_ms: -1,
        ..HeartbeatRequest::default()
    };
    group.bench_function("steady_heartbeat_of_300", |b| {
        b.iter(|| black_box(coordinator.consumer_heartbeat(steady.clone(), &lookup, now)))
    });
    group.finish();
}

criterion_group!(benches, group_assignment);
criterion_main!(benches);
