//! Incremental fetch sessions (KIP-227) on the agent's listener, checked at
//! the protocol level with requests encoded by the `kafka-protocol` crate: a
//! full request with epoch 0 creates a session; later requests send only
//! what changed and name what to forget; answers carry only partitions with
//! news; a stale epoch or an unknown session id is refused with the
//! protocol's error codes.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;

const TOPIC: &str = "sessions";
const DEADLINE: Duration = Duration::from_secs(60);
const VERSION: i16 = 12;
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

fn request(session_id: i32, epoch: i32, partitions: &[(i32, i64)], forget: &[i32]) -> FetchRequest {
    let mut r = FetchRequest::default();
    r.replica_id = (-1).into();
    r.max_wait_ms = 300;
    r.min_bytes = 1;
    r.max_bytes = 1 << 20;
    r.session_id = session_id;
    r.session_epoch = epoch;
    if !partitions.is_empty() {
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_static_str(TOPIC));
        for &(partition, offset) in partitions {
            let mut p = FetchPartition::default();
            p.partition = partition;
            p.fetch_offset = offset;
            p.current_leader_epoch = -1;
            p.last_fetched_epoch = -1;
            p.partition_max_bytes = 1 << 20;
            t.partitions.push(p);
        }
        r.topics.push(t);
    }
    if !forget.is_empty() {
        let mut f = ForgottenTopic::default();
        f.topic = TopicName(StrBytes::from_static_str(TOPIC));
        f.partitions = forget.to_vec();
        r.forgotten_topics_data.push(f);
    }
    r
}

/// (partition, records bytes) of each partition in the answer.
fn answered(r: &FetchResponse) -> Vec<(i32, usize)> {
    r.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.records.as_ref().map_or(0, |b| b.len())))
        .collect()
}

fn wait_mirrored(agent: &Agent, source: &str) -> [i64; 2] {
    let ends = [0, 1].map(|p| common::source_high_watermark(source, TOPIC, p, DEADLINE));
    common::wait_mirrored(agent, TOPIC, &BTreeMap::from([(0, ends[0]), (1, ends[1])]), DEADLINE);
    ends
}

#[test]
fn sessions_send_only_what_changed() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 2, 1).expect("topic");
    let source = cluster.bootstrap_servers();
    mock_source::produce(&source, TOPIC, 2, 200, "lz4", 0).expect("produce");
    let dir = tempfile::tempdir().unwrap();
    let config = common::serving_mirror_config(dir.path(), &source, &[TOPIC], "");
    let agent = Agent::start(config).expect("agent");
    let ends = wait_mirrored(&agent, &source);
    let addr = agent.listener_addr().unwrap().to_string();
    let mut c = common::KafkaConnection::connect(&addr, Duration::from_secs(10)).unwrap();
    let fetch = |c: &mut common::KafkaConnection, r: &FetchRequest| -> FetchResponse {
        c.request::<_, FetchResponse>(ApiKey::Fetch as i16, VERSION, r)
            .expect("fetch")
    };

    // A full request creates the session; both partitions are answered.
    let created = fetch(&mut c, &request(0, 0, &[(0, ends[0]), (1, ends[1])], &[]));
    assert_eq!(created.error_code, 0);
    assert_ne!(created.session_id, 0, "no session created");
    let id = created.session_id;
    assert_eq!(answered(&created), vec![(0, 0), (1, 0)]);

    // Nothing changed: the incremental answer (after the long poll) is empty.
    let quiet = fetch(&mut c, &request(id, 1, &[], &[]));
    assert_eq!((quiet.error_code, quiet.session_id), (0, id));
    assert!(answered(&quiet).is_empty(), "{:?}", answered(&quiet));

    // New data in partition 0 only: only partition 0 comes back, with records.
    mock_source::produce_with(&source, TOPIC, 1, 10, "none", 1000, &[]).expect("produce");
    let grown = wait_mirrored(&agent, &source);
    assert!(grown[0] > ends[0]);
    let news = fetch(&mut c, &request(id, 2, &[], &[]));
    let parts = answered(&news);
    assert_eq!(parts.len(), 1, "{parts:?}");
    assert_eq!(parts[0].0, 0);
    assert!(parts[0].1 > 0);

    // A stale epoch and an unknown session are refused.
    assert_eq!(
        fetch(&mut c, &request(id, 2, &[], &[])).error_code,
        INVALID_FETCH_SESSION_EPOCH
    );
    assert_eq!(
        fetch(&mut c, &request(id + 1000, 1, &[], &[])).error_code,
        FETCH_SESSION_ID_NOT_FOUND
    );

    // Move partition 0 to its end and forget partition 1: new data in both
    // partitions is then reported for partition 0 only.
    let moved = fetch(&mut c, &request(id, 3, &[(0, grown[0])], &[1]));
    assert_eq!(moved.error_code, 0);
    mock_source::produce(&source, TOPIC, 2, 20, "none", 2000).expect("produce");
    wait_mirrored(&agent, &source);
    let after = fetch(&mut c, &request(id, 4, &[], &[]));
    let parts = answered(&after);
    assert_eq!(parts.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0], "{parts:?}");

    // Epoch -1 closes the session and answers in full without one.
    let closed = fetch(&mut c, &request(id, -1, &[(0, 0), (1, 0)], &[]));
    assert_eq!((closed.error_code, closed.session_id), (0, 0));
    assert_eq!(answered(&closed).len(), 2);
    assert_eq!(
        fetch(&mut c, &request(id, 5, &[], &[])).error_code,
        FETCH_SESSION_ID_NOT_FOUND
    );
    agent.stop().expect("stop");
}
