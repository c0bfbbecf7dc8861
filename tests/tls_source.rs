//! Mirroring over TLS (`security_protocol = "ssl"`): the source is the
//! tansu broker behind an OpenSSL TLS endpoint (`socat`), which tansu
//! advertises, so every connection — bootstrap, metadata, fetchers, group
//! sync, the coordinator's — goes through TLS. Certificates are made with
//! the `openssl` command (`common::pki`): a CA, a server certificate for
//! the IP address 127.0.0.1 only, and a second, unrelated CA.
//!
//! - With the CA (`ssl_ca_location`) and the host name checked (the
//!   default), the topic's batches arrive byte for byte, with its topic id,
//!   and a consumer group's offsets are synced. confluent-kafka produces
//!   through the same TLS endpoint, so the endpoint is checked with a real
//!   client too.
//! - Connecting as `localhost` (a name the certificate does not hold): the
//!   mirror refuses the certificate, with the reason in `mirror describe`;
//!   with `ssl_endpoint_identification_algorithm = ""` the same connection
//!   is taken and its topic mirrored.
//! - With another CA the certificate is refused, with the reason.
//! - Mutual TLS: a source that requires a client certificate refuses a
//!   mirror without one and takes ours (`ssl_certificate_location`,
//!   `ssl_key_location`).
//! - Our own listener with TLS: read by confluent-kafka and kcat, closed
//!   to a client in clear, mirrored by another agent over TLS (see the
//!   test).
//! - `sasl_ssl`: an agent with a SASL listener behind the same kind of
//!   endpoint is mirrored with SASL inside TLS (and produced to by
//!   confluent-kafka the same way).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ringmirror::agent::Agent;
use ringmirror_control::admin::AdminRequest;
use ringmirror_control::mirror::MirrorConfig;
use ringmirror_storage::log::TopicPartition;

use common::ChildGuard;
use common::pki::{Pki, make_pki};
use common::tansu::{Tansu, free_addr, tansu_binary};

const DEADLINE: Duration = Duration::from_secs(30);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// An OpenSSL TLS endpoint on `listen` forwarding each connection in
/// clear to `target` (socat, one process per connection).
fn tls_endpoint(pki: &Pki, listen: &str, target: &str) -> ChildGuard {
    tls_endpoint_with(pki, listen, target, "verify=0".into())
}

/// [`tls_endpoint`] that requires a client certificate the CA signed.
fn mutual_tls_endpoint(pki: &Pki, listen: &str, target: &str) -> ChildGuard {
    tls_endpoint_with(pki, listen, target, format!("verify=1,cafile={}", pki.ca.display()))
}

fn tls_endpoint_with(pki: &Pki, listen: &str, target: &str, verify: String) -> ChildGuard {
    let (host, port) = listen.rsplit_once(':').expect("host:port");
    let mut command = Command::new("socat");
    command
        .arg(format!(
            "OPENSSL-LISTEN:{port},bind={host},reuseaddr,fork,cert={},key={},{verify}",
            pki.server_cert.display(),
            pki.server_key.display()
        ))
        .arg(format!("TCP:{target}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = ChildGuard::spawn(&mut command, "socat TLS endpoint")
        .expect("these tests need socat (scripts/setup.sh installs it)");
    let started = Instant::now();
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(started.elapsed() < DEADLINE, "socat does not listen on {listen}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// confluent-kafka (librdkafka with OpenSSL) through the TLS endpoint,
/// with the client settings `extra` (SASL, say): creates `topics` (name,
/// partitions) and produces `records` lz4 records to every partition of
/// each; group "billing" commits offset 3 of the first one's partition 0.
fn produce_over_tls(bootstrap: &str, ca: &Path, extra: serde_json::Value, topics: &[(&str, i32)], records: usize) {
    let script = r#"
import json, sys
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, ca, extra, records = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
topics = [(t.split(":")[0], int(t.split(":")[1])) for t in sys.argv[5:]]
tls = dict({"bootstrap.servers": bootstrap, "security.protocol": "ssl", "ssl.ca.location": ca}, **extra)
admin = AdminClient(tls)
for name, f in admin.create_topics([NewTopic(t, p, 1) for t, p in topics]).items():
    f.result(30)
producer = Producer(dict(tls, **{"compression.type": "lz4", "linger.ms": 5, "enable.idempotence": True}))
for name, partitions in topics:
    for n in range(records):
        for p in range(partitions):
            producer.produce(name, key=b"k%d" % (n % 4), value=(b"%s-%d-%d " % (name.encode(), p, n)) * 6, partition=p)
assert producer.flush(30) == 0, "records left unsent"
consumer = Consumer(dict(tls, **{"group.id": "billing", "enable.auto.commit": False}))
consumer.commit(offsets=[TopicPartition(topics[0][0], 0, 3)], asynchronous=False)
consumer.close()
print("ok")
"#;
    let mut command = Command::new("python3");
    command
        .arg("-c")
        .arg(script)
        .arg(bootstrap)
        .arg(ca)
        .arg(extra.to_string())
        .arg(records.to_string());
    for (topic, partitions) in topics {
        command.arg(format!("{topic}:{partitions}"));
    }
    let out = common::run_client(command, "confluent-kafka over TLS", "", CLIENT_TIMEOUT);
    assert!(
        out.status.success() && out.stdout.trim() == "ok",
        "confluent-kafka over TLS: {}\n{}",
        out.stdout,
        out.stderr
    );
}

/// Mirror `name` of `topic` at `bootstrap` over TLS, with the settings
/// `tls` (and any others) laid over.
fn mirror_definition(name: &str, bootstrap: &str, topic: &str, tls: serde_json::Value) -> MirrorConfig {
    let mut definition = serde_json::json!({
        "name": name,
        "bootstrap_servers": [bootstrap],
        "topics": [topic],
        "fetch_max_wait_ms": 50,
        "metadata_refresh_interval_ms": 1000,
        "security_protocol": "ssl",
    });
    definition
        .as_object_mut()
        .expect("an object")
        .extend(tls.as_object().expect("an object").clone());
    serde_json::from_value(definition).expect("mirror definition")
}

/// Waits until mirror "dr" at `agent` has synced `group`.
fn wait_group_synced(agent: &Agent, group: &str) {
    common::wait_until(DEADLINE, &format!("{group} synced"), || {
        let d = common::describe_mirror(agent, "dr");
        match d.groups.get(group) {
            Some(outcome) if outcome.starts_with("synced") => Ok(()),
            other => Err(format!("{other:?} {:?}", d.sync_error)),
        }
    });
}

/// Waits until `mirror`'s last round failed with an error holding `says`.
fn wait_sync_error(agent: &Agent, mirror: &str, says: &str) -> String {
    common::wait_until(
        DEADLINE,
        &format!("{mirror}'s sync error"),
        || match common::describe_mirror(agent, mirror).sync_error {
            Some(e) if e.contains(says) => Ok(e),
            other => Err(format!("{other:?}")),
        },
    )
}

/// Every batch of `topic`-`partition` the plaintext `tansu` holds and the
/// agent `ours` serves are the same bytes at the same offsets.
fn assert_same_batches(tansu: &str, ours: &str, topic: &str, partition: i32) {
    let source = common::source_partition_log(tansu, topic, partition, DEADLINE);
    assert!(!source.batches.is_empty(), "{topic}-{partition}: nothing produced");
    let mirrored = common::wait_until(DEADLINE, &format!("{topic}-{partition} caught up"), || {
        let m = common::source_partition_log(ours, topic, partition, DEADLINE);
        if m.high_watermark >= source.high_watermark {
            Ok(m)
        } else {
            Err(format!("at {} of {}", m.high_watermark, source.high_watermark))
        }
    });
    assert_eq!(mirrored.high_watermark, source.high_watermark, "{topic}-{partition}");
    assert!(
        mirrored.batches == source.batches,
        "{topic}-{partition}: our batches differ from the source's"
    );
}

/// tansu with an OpenSSL endpoint in front of it that it advertises, so
/// that every connection of its clients is TLS.
struct TansuBehindTls {
    pki: Pki,
    tansu: Tansu,
    /// The TLS endpoint's address.
    tls: String,
    _endpoint: ChildGuard,
}

impl TansuBehindTls {
    fn start(dir: &Path, cluster_id: &str, endpoint: fn(&Pki, &str, &str) -> ChildGuard) -> Self {
        let pki = make_pki(dir);
        let (plain, tls) = (free_addr(), free_addr());
        let tansu = Tansu::start_advertising(&tansu_binary(), &plain, &tls, cluster_id, dir.join("tansu.log"));
        let endpoint = endpoint(&pki, &tls, &plain);
        Self {
            pki,
            tansu,
            tls,
            _endpoint: endpoint,
        }
    }
}

/// An agent serving on loopback, mirroring nothing yet.
fn agent(data_dir: &Path) -> (Agent, String) {
    let agent = Agent::start(common::serving_config(data_dir, "")).expect("agent");
    let addr = agent.listener_addr().expect("listening").to_string();
    (agent, addr)
}

fn create_mirror(agent: &Agent, config: MirrorConfig) {
    agent
        .admin(AdminRequest::CreateMirror { config })
        .expect("create a mirror");
}

#[test]
fn a_source_behind_tls_is_mirrored_with_its_ca_and_refused_without() {
    let _logs = common::logs::capture("info");
    let dir = tempfile::tempdir().unwrap();
    let TansuBehindTls { pki, tansu, tls, .. } = &TansuBehindTls::start(dir.path(), "tls-cluster", tls_endpoint);
    produce_over_tls(tls, &pki.ca, serde_json::json!({}), &[("orders", 2), ("trades", 1)], 40);
    let (agent, ours) = agent(&dir.path().join("data"));
    let port = tls.rsplit_once(':').expect("host:port").1;
    let ca = serde_json::json!({ "ssl_ca_location": pki.ca });
    let create = |config: MirrorConfig| create_mirror(&agent, config);

    // The CA, the host name checked: mirrored, groups synced.
    create(mirror_definition("dr", tls, "orders", ca.clone()));
    for p in 0..2 {
        assert_same_batches(&tansu.addr, &ours, "orders", p);
    }
    wait_group_synced(&agent, "billing");
    let d = common::describe_mirror(&agent, "dr");
    assert_eq!(
        (d.source_cluster_id.as_deref(), d.sync_error),
        (Some("tls-cluster"), None)
    );

    // Another name for the same endpoint: refused while the name is
    // checked, taken when it is not.
    let by_name = format!("localhost:{port}");
    create(mirror_definition("by-name", &by_name, "trades", ca.clone()));
    let refused = wait_sync_error(&agent, "by-name", "TLS handshake");
    eprintln!("by-name: {refused}");
    assert!(
        refused.contains("not valid for name") && refused.contains("localhost"),
        "{refused}"
    );
    agent
        .admin(AdminRequest::DeleteMirror {
            mirror: "by-name".into(),
        })
        .expect("delete by-name");
    let mut any_name = ca.clone();
    any_name["ssl_endpoint_identification_algorithm"] = "".into();
    create(mirror_definition("any-name", &by_name, "trades", any_name));
    assert_same_batches(&tansu.addr, &ours, "trades", 0);

    // A CA that did not sign the certificate.
    let other = serde_json::json!({ "ssl_ca_location": pki.other_ca });
    create(mirror_definition("other-ca", tls, "nothing", other));
    let refused = wait_sync_error(&agent, "other-ca", "TLS handshake");
    eprintln!("other-ca: {refused}");
    assert!(refused.contains("UnknownIssuer"), "{refused}");

    agent.stop().expect("stop the agent");
}

/// A user of agent A's SASL listener.
const MIRROR_USER: &str = "mirror";
const MIRROR_PASSWORD: &str = "mirror-pw-4e1f0a9c";

/// Every batch of `topic`-`partition` at `addr` (a SASL PLAIN listener,
/// logged in as the mirror user).
fn batches_with_sasl(addr: &str, topic: &str, partition: i32) -> common::Batches {
    let mut conn = common::sasl_connect(
        addr,
        ringmirror_protocol::sasl::Mechanism::Plain,
        MIRROR_USER,
        MIRROR_PASSWORD,
        Duration::from_secs(10),
    )
    .expect("log in to agent A");
    let (responses, _) = conn.fetch_all(topic, partition, 0, 1000).expect("fetch from agent A");
    responses.into_iter().flatten().collect()
}

/// `security_protocol = "sasl_ssl"`: agent A requires SASL PLAIN and sits
/// behind the TLS endpoint it advertises; confluent-kafka produces to it
/// through TLS with SASL, and agent B mirrors it the same way: A's batches
/// arrive byte for byte and the group's offsets are synced.
#[test]
fn sasl_inside_tls_to_an_agent_behind_tls() {
    let _logs = common::logs::capture("info");
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let tls = free_addr();
    let port = tls.rsplit_once(':').expect("host:port").1;
    let a = Agent::start(common::serving_config(
        &dir.path().join("a"),
        &format!(
            r#"advertised_port = {port}
            sasl_mechanisms = ["PLAIN"]
            [[listener.users]]
            name = "{MIRROR_USER}"
            password = "{MIRROR_PASSWORD}"
            "#
        ),
    ))
    .expect("agent A");
    let a_addr = a.listener_addr().expect("A listens").to_string();
    let _endpoint = tls_endpoint(&pki, &tls, &a_addr);
    let sasl = serde_json::json!({
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "PLAIN",
        "sasl.username": MIRROR_USER,
        "sasl.password": MIRROR_PASSWORD,
    });
    produce_over_tls(&tls, &pki.ca, sasl, &[("ledger", 2)], 30);

    let b = Agent::start(common::serving_config(&dir.path().join("b"), "")).expect("agent B");
    let b_addr = b.listener_addr().expect("B listens").to_string();
    let settings = serde_json::json!({
        "security_protocol": "sasl_ssl",
        "ssl_ca_location": pki.ca,
        "sasl_mechanism": "PLAIN",
        "sasl_username": MIRROR_USER,
        "sasl_password": MIRROR_PASSWORD,
    });
    b.admin(AdminRequest::CreateMirror {
        config: mirror_definition("dr", &tls, "ledger", settings),
    })
    .expect("create the mirror");
    for p in 0..2 {
        let at_a = batches_with_sasl(&a_addr, "ledger", p);
        assert!(!at_a.is_empty(), "ledger-{p}: nothing produced");
        let end = at_a
            .last()
            .map(|(base, bytes)| common::batch_view(bytes).next_offset().max(*base));
        let at_b = common::wait_until(DEADLINE, &format!("ledger-{p} mirrored"), || {
            let m = common::source_partition_log(&b_addr, "ledger", p, DEADLINE);
            if Some(m.high_watermark) >= end {
                Ok(m.batches)
            } else {
                Err(format!("at {} of {end:?}", m.high_watermark))
            }
        });
        assert!(at_b == at_a, "ledger-{p}: B's batches differ from A's");
    }
    wait_group_synced(&b, "billing");
    b.stop().expect("stop B");
    a.stop().expect("stop A");
}

/// A source that requires a client certificate (mutual TLS): a mirror
/// without one is refused, with the reason; with ours
/// (`ssl_certificate_location`, `ssl_key_location`) it is mirrored.
#[test]
fn a_source_that_requires_a_client_certificate_gets_ours() {
    let _logs = common::logs::capture("info");
    let dir = tempfile::tempdir().unwrap();
    let TansuBehindTls { pki, tansu, tls, .. } = &TansuBehindTls::start(dir.path(), "mutual-tls", mutual_tls_endpoint);
    let client_cert = serde_json::json!({
        "ssl.certificate.location": pki.client_cert,
        "ssl.key.location": pki.client_key,
    });
    produce_over_tls(tls, &pki.ca, client_cert, &[("orders", 2)], 20);
    let (agent, ours) = agent(&dir.path().join("data"));
    let create = |config: MirrorConfig| create_mirror(&agent, config);
    create(mirror_definition(
        "no-cert",
        tls,
        "orders",
        serde_json::json!({ "ssl_ca_location": pki.ca }),
    ));
    let refused = common::wait_until(DEADLINE, "no-cert's sync error", || {
        match common::describe_mirror(&agent, "no-cert").sync_error {
            Some(e) => Ok(e),
            None => Err("none yet".into()),
        }
    });
    eprintln!("no-cert: {refused}");
    // TLS 1.3 servers refuse after the handshake (the alert comes with the
    // first answer), TLS 1.2 ones during it.
    assert!(
        refused.contains(tls.as_str())
            && (refused.contains("CertificateRequired") || refused.contains("HandshakeFailure")),
        "{refused}"
    );
    agent
        .admin(AdminRequest::DeleteMirror {
            mirror: "no-cert".into(),
        })
        .expect("delete no-cert");

    create(mirror_definition(
        "dr",
        tls,
        "orders",
        serde_json::json!({
            "ssl_ca_location": pki.ca,
            "ssl_certificate_location": pki.client_cert,
            "ssl_key_location": pki.client_key,
        }),
    ));
    for p in 0..2 {
        assert_same_batches(&tansu.addr, &ours, "orders", p);
    }
    assert_eq!(common::describe_mirror(&agent, "dr").sync_error, None);
    agent.stop().expect("stop the agent");
}

/// TLS on our own listener (`[listener] ssl_certificate_location`,
/// `ssl_key_location`), both ways: agent A serves a local topic over TLS
/// to confluent-kafka (which creates it, produces and commits), kcat and
/// kafka-python;
/// a client in clear is closed; agent B, its listener TLS too, mirrors A
/// over TLS — A's log byte for byte — and syncs A's group into its own
/// listener (the agent's own connection trusts exactly its certificate).
#[test]
fn our_listener_serves_tls() {
    let _logs = common::logs::capture("info");
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let tls_listener = format!(
        "ssl_certificate_location = {:?}\nssl_key_location = {:?}\n",
        pki.server_cert, pki.server_key
    );
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    let a = Agent::start(common::serving_config(&a_dir, &tls_listener)).expect("agent A");
    let a_addr = a.listener_addr().expect("A listens").to_string();
    produce_over_tls(&a_addr, &pki.ca, serde_json::json!({}), &[("orders", 2)], 50);

    // A client in clear gets no answer.
    let clear = common::KafkaConnection::connect(&a_addr, Duration::from_secs(5)).and_then(|mut c| {
        c.request::<_, kafka_protocol::messages::ApiVersionsResponse>(
            kafka_protocol::messages::ApiKey::ApiVersions as i16,
            3,
            &kafka_protocol::messages::ApiVersionsRequest::default(),
        )
    });
    assert!(clear.is_err(), "a client in clear was answered: {clear:?}");

    // kcat (Debian's librdkafka, OpenSSL) reads every record.
    let mut kcat = Command::new("kcat");
    kcat.args(["-b", &a_addr, "-X", "security.protocol=ssl", "-X"])
        .arg(format!("ssl.ca.location={}", pki.ca.display()))
        .args([
            "-C",
            "-t",
            "orders",
            "-p",
            "1",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o\\n",
        ]);
    let out = common::run_client(kcat, "kcat over TLS", "", CLIENT_TIMEOUT);
    assert!(out.status.success(), "kcat: {}", out.stderr);
    let offsets: Vec<i64> = out.stdout.lines().map(|l| l.parse().expect("an offset")).collect();
    assert_eq!(offsets, (0..50).collect::<Vec<i64>>(), "kcat over TLS");
    // kafka-python (Python's ssl module) too.
    let script = r#"
import sys
from kafka import KafkaConsumer, TopicPartition
consumer = KafkaConsumer(bootstrap_servers=sys.argv[1], security_protocol="SSL", ssl_cafile=sys.argv[2],
                         ssl_check_hostname=True, enable_auto_commit=False, consumer_timeout_ms=30000)
tp = TopicPartition("orders", 0)
consumer.assign([tp])
consumer.seek_to_beginning(tp)
offsets = []
for m in consumer:
    offsets.append(m.offset)
    if len(offsets) == 50:
        break
print(offsets == list(range(50)))
"#;
    let mut python = Command::new("python3");
    python.arg("-c").arg(script).arg(&a_addr).arg(&pki.ca);
    let out = common::run_client(python, "kafka-python over TLS", "", CLIENT_TIMEOUT);
    assert!(
        out.status.success() && out.stdout.trim() == "True",
        "kafka-python over TLS: {}\n{}",
        out.stdout,
        out.stderr
    );

    let b = Agent::start(common::serving_config(&b_dir, &tls_listener)).expect("agent B");
    create_mirror(
        &b,
        mirror_definition(
            "dr",
            &a_addr,
            "orders",
            serde_json::json!({ "ssl_ca_location": pki.ca }),
        ),
    );
    let ends = BTreeMap::from([(0, 50), (1, 50)]);
    common::wait_mirrored(&b, "orders", &ends, DEADLINE);
    wait_group_synced(&b, "billing");
    b.stop().expect("stop B");
    a.stop().expect("stop A");
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new("orders", p)).collect();
    let (at_a, at_b) = (
        common::mirrored_partition_logs(&a_dir, &tps),
        common::mirrored_partition_logs(&b_dir, &tps),
    );
    for tp in &tps {
        assert_eq!(at_a[tp].batches.len(), at_b[tp].batches.len(), "{tp}: batches");
        assert!(at_a[tp].batches == at_b[tp].batches, "{tp}: B's log differs from A's");
        assert_eq!(at_b[tp].log_end_offset, 50, "{tp}");
    }
}
