//! DescribeClusterMirrors (KIP-1279, API 99) against real peers: an agent
//! answers a peer's last-mirror-epoch (LME) lookups and describes its
//! mirrors from the reports the control plane publishes; librdkafka's
//! mock cluster, a plain Kafka that does not know API 99, gets -1 for
//! every partition without being asked. ApiVersions for the usual clients
//! (kcat, kafka-python, confluent-kafka) is covered by `serve_clients`.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::{Encodable, StrBytes};
use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_dataplane::client::mirror_epochs::last_mirror_epochs;
use ringmirror_dataplane::client::{Connection, ConnectionOptions};
use ringmirror_dataplane::partition::{
    LastMirrorEpoch, MirrorPartitionState, MirrorReport, MirrorReports, PartitionReport, TopicReport,
};
use ringmirror_protocol::wire::describe_cluster_mirrors::{
    API_KEY, DescribeClusterMirrorsRequest, DescribeClusterMirrorsResponse,
};

const IO_TIMEOUT: Duration = Duration::from_secs(10);
const ORDERS: [u8; 16] = [1; 16];
const EVENTS: [u8; 16] = [2; 16];
const UNKNOWN: [u8; 16] = [9; 16];
/// KIP-1279's UNKNOWN_CLUSTER_MIRROR has no code yet: RESOURCE_NOT_FOUND.
const RESOURCE_NOT_FOUND: i16 = 91;
/// How long published reports must stay to count as published, and how
/// many tries they get.
const PUBLISH_SETTLE: Duration = Duration::from_millis(200);
const PUBLISH_ATTEMPTS: usize = 25;

/// Publishes `reports` in place of the control plane. The agent's own
/// control plane publishes its reports once it is up (and on each change,
/// which an agent without mirrors never has), so ours are published again
/// until they stay.
fn publish(agent: &Agent, reports: MirrorReports) {
    let handle = agent.mirror_reports();
    let ours = Arc::new(reports);
    for _ in 0..PUBLISH_ATTEMPTS {
        handle.publish(Arc::clone(&ours));
        std::thread::sleep(PUBLISH_SETTLE);
        if Arc::ptr_eq(&handle.current(), &ours) {
            return;
        }
    }
    panic!("the control plane keeps replacing the published reports");
}

fn listener_only(dir: &std::path::Path) -> AgentConfig {
    AgentConfig::parse(&format!(
        "data_dir = {dir:?}\nshards = 2\n[listener]\naddress = \"127.0.0.1:0\"\n"
    ))
    .expect("agent config")
}

fn partition(lme: i32, lag: i64) -> PartitionReport {
    PartitionReport {
        source_offset: 100,
        destination_offset: 100 - lag,
        lag,
        state: MirrorPartitionState::Mirroring,
        last_mirror_epoch: LastMirrorEpoch::new(lme),
        ..PartitionReport::default()
    }
}

fn topic(id: [u8; 16], partitions: &[(i32, i32)]) -> TopicReport {
    TopicReport {
        topic_id: id,
        partitions: partitions.iter().map(|&(p, lme)| (p, partition(lme, 2))).collect(),
    }
}

/// Mirror "dr" (from cluster-a: orders 0 and 1) and "eu" (source not
/// known yet: events 0), with orders-1 at LME `orders_1`.
fn reports(orders_1: i32) -> MirrorReports {
    let dr = MirrorReport {
        source_cluster_id: Some("cluster-a".into()),
        topics: BTreeMap::from([("orders".into(), topic(ORDERS, &[(0, 5), (1, orders_1)]))]),
        ..MirrorReport::default()
    };
    let eu = MirrorReport {
        source_cluster_id: None,
        topics: BTreeMap::from([("events".into(), topic(EVENTS, &[(0, 3)]))]),
        ..MirrorReport::default()
    };
    MirrorReports {
        mirrors: BTreeMap::from([("dr".into(), dr), ("eu".into(), eu)]),
    }
}

fn lookups() -> Vec<([u8; 16], Vec<i32>)> {
    vec![(ORDERS, vec![0, 1, 2]), (EVENTS, vec![0]), (UNKNOWN, vec![0, 1])]
}

/// What `last_mirror_epochs` gives for `lookups()` asked as `cluster`, and
/// the answer to a describe of `names`, over one connection to `addr`.
fn ask(
    addr: String,
    cluster: &'static str,
    names: Vec<String>,
) -> (BTreeMap<([u8; 16], i32), i32>, DescribeClusterMirrorsResponse) {
    common::on_glommio(move || async move {
        let mut conn = Connection::connect(&addr, ConnectionOptions::default())
            .await
            .expect("connect");
        assert!(conn.advertises(API_KEY), "ApiVersions lists DescribeClusterMirrors");
        let epochs = last_mirror_epochs(&mut conn, cluster, &lookups())
            .await
            .expect("lookup")
            .into_iter()
            .map(|(partition, lme)| (partition, lme.get()))
            .collect();
        let request = DescribeClusterMirrorsRequest {
            mirror_names: names,
            ..DescribeClusterMirrorsRequest::default()
        };
        let body = conn
            .request_encoded(API_KEY, "DescribeClusterMirrors", 0, |buf| {
                request.encode(buf).map_err(|e| e.to_string())
            })
            .await
            .expect("describe");
        let described = DescribeClusterMirrorsResponse::decode(&body).expect("decode the describe");
        (epochs, described)
    })
}

#[test]
fn an_agent_answers_lme_lookups_and_describes_its_mirrors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = Agent::start(listener_only(dir.path())).expect("agent");
    let addr = agent.listener_addr().expect("listening").to_string();
    publish(&agent, reports(7));

    let (epochs, all) = ask(addr.clone(), "cluster-a", Vec::new());
    let expected = BTreeMap::from([
        ((ORDERS, 0), 5),
        ((ORDERS, 1), 7),
        // Not mirrored here, and a topic id we do not know.
        ((ORDERS, 2), -1),
        ((EVENTS, 0), 3),
        ((UNKNOWN, 0), -1),
        ((UNKNOWN, 1), -1),
    ]);
    assert_eq!(epochs, expected);
    // No names: every mirror, with every reported partition.
    let summary: Vec<_> = all
        .mirrors
        .iter()
        .flat_map(|m| {
            m.topics.iter().flat_map(move |t| {
                t.partitions.iter().map(move |p| {
                    (
                        m.mirror_name.as_str(),
                        t.topic_name.as_str(),
                        p.partition_index,
                        p.last_mirror_epoch,
                        p.lag,
                    )
                })
            })
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("dr", "orders", 0, 5, 2),
            ("dr", "orders", 1, 7, 2),
            ("eu", "events", 0, 3, 2),
        ]
    );
    let p = &all.mirrors[0].topics[0].partitions[0];
    assert_eq!((p.source_offset, p.destination_offset), (100, 98));
    assert_eq!(p.state, "MIRRORING");
    assert!(all.mirrors.iter().all(|m| m.error_code == 0));

    // Asked by another cluster: "dr" comes from cluster-a and does not
    // count; "eu", whose source is not known yet, still does.
    let (epochs, named) = ask(addr.clone(), "cluster-b", vec!["eu".into(), "missing".into()]);
    assert_eq!(epochs.get(&(ORDERS, 0)), Some(&-1));
    assert_eq!(epochs.get(&(EVENTS, 0)), Some(&3));
    let entries: Vec<_> = named
        .mirrors
        .iter()
        .map(|m| (m.mirror_name.as_str(), m.error_code, m.topics.len()))
        .collect();
    assert_eq!(entries, [("eu", 0, 1), ("missing", RESOURCE_NOT_FOUND, 0)]);

    // A new snapshot is what the next request sees.
    publish(&agent, reports(8));
    let (epochs, _) = ask(addr, "cluster-a", Vec::new());
    assert_eq!(epochs.get(&(ORDERS, 1)), Some(&8));

    agent.stop().expect("stop");
}

/// The frame on the wire, read with a plain socket rather than our client:
/// a v2 request header in, a v1 response header (correlation id, then an
/// empty tagged-field section) out, then the documented body.
#[test]
fn the_agent_frames_describe_cluster_mirrors_as_a_flexible_api() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = Agent::start(listener_only(dir.path())).expect("agent");
    publish(&agent, reports(7));
    let addr = agent.listener_addr().expect("listening");

    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(API_KEY)
        .with_request_api_version(0)
        .with_correlation_id(77)
        .with_client_id(Some(StrBytes::from_static_str("raw")))
        .encode(&mut frame, 2)
        .expect("encode header");
    let request = DescribeClusterMirrorsRequest {
        mirror_names: vec!["dr".into()],
        ..DescribeClusterMirrorsRequest::default()
    };
    request.encode(&mut frame).expect("encode body");
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.write_all(&(frame.len() as i32).to_be_bytes()).unwrap();
    stream.write_all(&frame).unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("response size");
    let mut response = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut response).expect("response");
    assert_eq!(i32::from_be_bytes(response[..4].try_into().unwrap()), 77);
    assert_eq!(response[4], 0, "no tagged fields in the response header");
    let body = DescribeClusterMirrorsResponse::decode(&response[5..]).expect("decode");
    assert_eq!(body.mirrors.len(), 1);
    assert_eq!(body.mirrors[0].mirror_name, "dr");
    drop(stream);
    agent.stop().expect("stop");
}

/// A plain Kafka source (the mock speaks no API 99) never mirrored from
/// anyone: every partition gets -1 ("truncate all"), without a request the
/// mock would close the connection over.
#[test]
fn a_plain_kafka_source_has_no_last_mirror_epochs() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let (advertised, epochs, still_open) = common::on_glommio(move || async move {
        let mut conn = Connection::connect(&bootstrap, ConnectionOptions::default())
            .await
            .expect("connect");
        let epochs = last_mirror_epochs(&mut conn, "cluster-a", &lookups()).await;
        // The connection still answers: nothing was sent that the mock
        // does not know.
        let version = conn
            .version_for::<kafka_protocol::messages::ApiVersionsRequest>(0, 2)
            .expect("ApiVersions");
        let still_open = conn
            .request(&kafka_protocol::messages::ApiVersionsRequest::default(), version)
            .await
            .map(|r| r.error_code);
        (conn.advertises(API_KEY), epochs, still_open.map_err(|e| e.to_string()))
    });
    assert!(!advertised);
    let epochs = epochs.expect("lookup");
    assert_eq!(epochs.len(), 6);
    assert!(epochs.values().all(|&lme| lme == LastMirrorEpoch::NONE), "{epochs:?}");
    assert_eq!(still_open, Ok(0));
}
