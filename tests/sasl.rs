//! SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) against real peers:
//!
//! - **Our listener, read by real clients.** Agent A requires SASL (every
//!   mechanism enabled, users from `[[listener.users]]`): kcat lists its
//!   metadata (SCRAM-SHA-256) and consumes a topic (SCRAM-SHA-512);
//!   kafka-python (PLAIN, SCRAM-SHA-256) and confluent-kafka (SCRAM-SHA-512)
//!   read every record; librdkafka produced them (PLAIN). A wrong password
//!   fails with the authentication error in each client (kcat,
//!   kafka-python, confluent-kafka); a client without SASL has its Fetch
//!   connection closed; an unknown mechanism is refused with the enabled
//!   list; a v0 SaslHandshake (raw tokens, PLAIN and SCRAM) works too.
//! - **Agent to agent.** Agent B (its own listener SASL too, so the
//!   control plane's group and ACL sync log in to it as the agent's user)
//!   mirrors three topics of A, one mirror per mechanism (one created
//!   through the CLI, one with a password file): B serves A's batches
//!   byte for byte, a group's offsets and an ACL arrive from A, and topic
//!   configs are read; a mirror with a wrong password says so in `mirror
//!   describe`'s sync error. No password is in the API's answers (HTTP,
//!   CLI, in-process), nor anywhere in the agents' log (debug level); the
//!   stored definitions keep them, so B mirrors on after a restart.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, CreateTopicsRequest, CreateTopicsResponse, DescribeAclsResponse,
    GroupId, MetadataRequest, MetadataResponse, OffsetFetchRequest, OffsetFetchResponse, RequestHeader, ResponseHeader,
    SaslHandshakeRequest, SaslHandshakeResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use ringmirror::agent::Agent;
use ringmirror::config::{AgentConfig, MirrorConfig};
use ringmirror_control::admin::{AdminAnswer, AdminRequest, MirrorDescription};
use ringmirror_dataplane::client::{Connection, ConnectionOptions};
use ringmirror_dataplane::security::acls::{
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType,
};
use ringmirror_protocol::sasl::{ClientExchange, ClientStep, Mechanism, Password, SaslClientConfig, Secret};
use serde_json::Value;

use common::KafkaConnection;

/// Every wait is bounded by this.
const DEADLINE: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

// Distinctive passwords, looked for in logs and answers.
const ALICE_PASSWORD: &str = "alice-pw-5d0c8e77";
const MIRROR_PASSWORD: &str = "mirror-pw-91b3f2aa";
const READER_PASSWORD: &str = "reader-pw-0e6f4d21";
const WRONG_PASSWORD: &str = "wrong-pw-7a2c9b13";
const PASSWORDS: [&str; 4] = [ALICE_PASSWORD, MIRROR_PASSWORD, READER_PASSWORD, WRONG_PASSWORD];

/// Captures every line the agents of this binary log, at debug level.
fn capture() -> common::logs::LogsOnFailure {
    common::logs::capture("info,ringmirror=debug,ringmirror_dataplane=debug,ringmirror_control=debug")
}

fn assert_no_password(what: &str, text: &str) {
    for p in PASSWORDS {
        assert!(!text.contains(p), "{what} holds a password:\n{text}");
    }
}

fn step(started: Instant, what: &str) {
    eprintln!("{:>8.3} s  {what}", started.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------
// Agents
// ---------------------------------------------------------------------------

/// Agent A: a SASL listener with every mechanism; users alice and mirror.
fn source_config(data_dir: &Path) -> AgentConfig {
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [log]
        segment_bytes = 65536
        [listener]
        address = "127.0.0.1:0"
        sasl_mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        [[listener.users]]
        name = "alice"
        password = "{ALICE_PASSWORD}"
        [[listener.users]]
        name = "mirror"
        password = "{MIRROR_PASSWORD}"
        "#
    ))
    .expect("agent A config")
}

/// Agent B: a SCRAM-SHA-512 listener (user reader, from a users file), an
/// admin API.
fn destination_config(data_dir: &Path, users_file: &Path) -> AgentConfig {
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [log]
        segment_bytes = 65536
        [listener]
        address = "127.0.0.1:0"
        sasl_mechanisms = ["SCRAM-SHA-512"]
        users_file = {users_file:?}
        [admin]
        address = "127.0.0.1:0"
        "#
    ))
    .expect("agent B config")
}

fn listener(agent: &Agent) -> String {
    agent.listener_addr().expect("the agent listens").to_string()
}

// ---------------------------------------------------------------------------
// A blocking client that authenticates (framed, KIP-152) before its requests
// ---------------------------------------------------------------------------

/// A [`KafkaConnection`] authenticated as `user` with `mechanism`; the
/// broker's error message on failure.
fn sasl_connect(addr: &str, mechanism: Mechanism, user: &str, password: &str) -> Result<KafkaConnection, String> {
    common::sasl_connect(addr, mechanism, user, password, IO_TIMEOUT)
}

fn alice(addr: &str) -> KafkaConnection {
    sasl_connect(addr, Mechanism::Plain, "alice", ALICE_PASSWORD).expect("alice logs in")
}

fn reader(addr: &str) -> KafkaConnection {
    sasl_connect(addr, Mechanism::ScramSha512, "reader", READER_PASSWORD).expect("reader logs in")
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn create_topic(conn: &mut KafkaConnection, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(partitions)
            .with_replication_factor(1),
    ]);
    let r: CreateTopicsResponse = conn
        .request(ApiKey::CreateTopics as i16, 5, &request)
        .expect("CreateTopics");
    assert_eq!(r.topics[0].error_code, 0, "CreateTopics {topic}: {:?}", r.topics[0]);
}

/// librdkafka settings of a SASL client.
fn rdkafka_sasl(mechanism: &str, user: &str, password: &str) -> Vec<(String, String)> {
    vec![
        ("security.protocol".into(), "SASL_PLAINTEXT".into()),
        ("sasl.mechanisms".into(), mechanism.into()),
        ("sasl.username".into(), user.into()),
        ("sasl.password".into(), password.into()),
    ]
}

/// Produces records `seed..seed + count` to `topic` at `addr` with an
/// idempotent librdkafka producer logged in as alice (PLAIN: the rdkafka
/// crate is built without OpenSSL, which its SCRAM needs).
fn produce(addr: &str, topic: &str, partitions: i32, count: u64, seed: u64) {
    let sasl = rdkafka_sasl("PLAIN", "alice", ALICE_PASSWORD);
    let extra: Vec<(&str, &str)> = sasl.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    mock_source::produce_with(addr, topic, partitions, count, "lz4", seed, &extra)
        .unwrap_or_else(|e| panic!("produce to {topic} at {addr}: {e}"));
}

/// Every batch of each partition of `topic`, exactly as `conn`'s Fetches
/// see them, by partition.
fn batches(conn: &mut KafkaConnection, topic: &str, partitions: i32) -> BTreeMap<i32, common::Batches> {
    try_batches(conn, topic, partitions).expect("fetch")
}

/// [`batches`], or the first Fetch error (e.g. a partition an agent does
/// not serve yet, just after its start or a mirror's creation).
fn try_batches(
    conn: &mut KafkaConnection,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, common::Batches>, String> {
    (0..partitions)
        .map(|p| {
            let (responses, _) = conn.fetch_all(topic, p, 0, 10_000).map_err(|e| e.to_string())?;
            Ok((p, responses.into_iter().flatten().collect()))
        })
        .collect()
}

/// Each partition's end offset (its last batch's next offset).
fn ends(batches: &BTreeMap<i32, common::Batches>) -> BTreeMap<i32, i64> {
    batches
        .iter()
        .map(|(&p, b)| {
            let end = b.last().map_or(0, |(_, bytes)| common::batch_view(bytes).next_offset());
            (p, end)
        })
        .collect()
}

fn ends_arg(ends: &BTreeMap<i32, i64>) -> String {
    ends.iter()
        .map(|(p, e)| format!("{p}:{e}"))
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------------------
// Child processes: kcat, the Python clients, our CLI
// ---------------------------------------------------------------------------

type Output = common::ClientOutput;

/// Runs `cmd` to its end (killed, and the test failed, after CLIENT_TIMEOUT).
fn run(cmd: Command, what: &str) -> Output {
    common::run_client(cmd, what, "", CLIENT_TIMEOUT)
}

fn kcat(addr: &str, mechanism: &str, user: &str, password: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new("kcat");
    cmd.args(["-b", addr, "-X", "security.protocol=SASL_PLAINTEXT"])
        .args(["-X", &format!("sasl.mechanisms={mechanism}")])
        .args(["-X", &format!("sasl.username={user}")])
        .args(["-X", &format!("sasl.password={password}")])
        .args(args);
    run(cmd, &format!("kcat {mechanism} {}", args.join(" ")))
}

/// `tests/py/sasl_clients.py CLIENT ...`: its exit status and JSON.
fn python(
    client: &str,
    addr: &str,
    topic: &str,
    ends: &BTreeMap<i32, i64>,
    mechanism: &str,
    user: &str,
    password: &str,
) -> (Option<i32>, Value) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sasl_clients.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg(client)
        .args(["--bootstrap", addr, "--topic", topic, "--ends", &ends_arg(ends)])
        .args(["--mechanism", mechanism, "--username", user, "--password", password])
        .args(["--timeout", "15"]);
    let what = format!("sasl_clients.py {client} {mechanism} {user}");
    let out = run(cmd, &what);
    assert_ne!(
        out.status.code(),
        Some(3),
        "{what}: a Python package is missing (scripts/setup.sh installs them): {}",
        out.stderr
    );
    let json = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{what} printed no JSON ({e}): {}\n{}", out.stdout, out.stderr));
    (out.status.code(), json)
}

/// `ringmirror mirror ARGS --admin URL` (our CLI).
fn cli(admin: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ringmirror"));
    cmd.arg("mirror")
        .args(args)
        .args(["--admin", admin])
        .env("NO_COLOR", "1");
    let out = run(
        cmd,
        &format!("ringmirror mirror {}", args.first().copied().unwrap_or_default()),
    );
    assert!(
        out.status.success(),
        "ringmirror mirror {args:?}: {}\n{}",
        out.stdout,
        out.stderr
    );
    out
}

// ---------------------------------------------------------------------------
// Raw frames, for a v0 handshake (raw SASL tokens after it)
// ---------------------------------------------------------------------------

fn write_frame(stream: &mut TcpStream, body: &[u8]) {
    stream.write_all(&(body.len() as i32).to_be_bytes()).expect("write");
    stream.write_all(body).expect("write");
}

fn read_frame(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body)?;
    Ok(body)
}

fn request_frame<R: Encodable + HeaderVersion>(api: ApiKey, version: i16, id: i32, request: &R) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(id)
        .with_client_id(Some(StrBytes::from_static_str("sasl-v0-test")))
        .encode(&mut buf, R::header_version(version))
        .expect("header");
    request.encode(&mut buf, version).expect("body");
    buf.to_vec()
}

fn response<R: Decodable + HeaderVersion>(frame: Vec<u8>, version: i16) -> R {
    let mut buf = Bytes::from(frame);
    ResponseHeader::decode(&mut buf, R::header_version(version)).expect("header");
    R::decode(&mut buf, version).expect("body")
}

/// SaslHandshake v0, then the exchange in raw frames, then a Metadata
/// request on the same connection: the topics it lists.
fn v0_login_and_metadata(addr: &str, mechanism: Mechanism, user: &str, password: &str) -> Result<Vec<String>, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()));
    write_frame(&mut stream, &request_frame(ApiKey::SaslHandshake, 0, 1, &handshake));
    let r: SaslHandshakeResponse = response(read_frame(&mut stream).map_err(|e| e.to_string())?, 0);
    if r.error_code != 0 {
        return Err(format!("SaslHandshake v0: error code {}", r.error_code));
    }
    let (mut exchange, mut token) = ClientExchange::start(mechanism, user, &Secret::new(password))?;
    loop {
        write_frame(&mut stream, &token);
        // A refused exchange is a closed connection in v0.
        let answer = read_frame(&mut stream).map_err(|e| format!("after a raw token: {e}"))?;
        match exchange.step(&answer)? {
            ClientStep::Send(next) => token = next,
            ClientStep::Done => break,
        }
    }
    write_frame(
        &mut stream,
        &request_frame(ApiKey::Metadata, 4, 2, &MetadataRequest::default().with_topics(None)),
    );
    let m: MetadataResponse = response(read_frame(&mut stream).map_err(|e| e.to_string())?, 4);
    Ok(m.topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect())
}

/// What our client (`Connection`, as mirrors connect) reports for each
/// (address, mechanism, password) as user alice: the error, or
/// "authenticated".
fn our_client_errors(attempts: Vec<(String, Mechanism, &'static str)>) -> Vec<String> {
    common::on_glommio(move || async move {
        let mut out = Vec::new();
        for (addr, mechanism, password) in attempts {
            let options = ConnectionOptions {
                io_timeout: IO_TIMEOUT,
                sasl: Some(SaslClientConfig {
                    mechanism,
                    username: "alice".into(),
                    password: Password::Inline(Secret::new(password)),
                }),
                ..ConnectionOptions::default()
            };
            out.push(match Connection::connect(&addr, options).await {
                Ok(_) => "authenticated".to_string(),
                Err(e) => e.to_string(),
            });
        }
        out
    })
}

// ---------------------------------------------------------------------------
// Our listener, read by real clients
// ---------------------------------------------------------------------------

#[test]
fn real_clients_authenticate_at_our_listener_and_others_are_refused() {
    let _logs = capture();
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Agent::start(source_config(dir.path())).expect("start A");
    let addr = listener(&a);
    const TOPIC: &str = "events";
    create_topic(&mut alice(&addr), TOPIC, 2);
    produce(&addr, TOPIC, 2, 300, 0);
    let stored = batches(&mut alice(&addr), TOPIC, 2);
    let ends = ends(&stored);
    assert_eq!(ends.values().sum::<i64>(), 300, "{ends:?}");
    step(started, "A serves 300 records behind SASL");

    // kcat: metadata with SCRAM-SHA-256, every record with SCRAM-SHA-512.
    let out = kcat(&addr, "SCRAM-SHA-256", "alice", ALICE_PASSWORD, &["-L", "-t", TOPIC]);
    assert!(out.status.success(), "kcat -L: {}", out.stderr);
    assert!(
        out.stdout.contains(&format!("topic \"{TOPIC}\" with 2 partitions")),
        "{}",
        out.stdout
    );
    let out = kcat(
        &addr,
        "SCRAM-SHA-512",
        "mirror",
        MIRROR_PASSWORD,
        &["-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p %o\\n"],
    );
    assert!(out.status.success(), "kcat -C: {}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 300, "kcat -C read:\n{}", out.stdout);
    let out = kcat(&addr, "SCRAM-SHA-256", "alice", WRONG_PASSWORD, &["-L", "-m", "1"]);
    assert!(!out.status.success(), "kcat -L with a wrong password: {}", out.stdout);
    assert!(
        out.stderr.contains(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
        ),
        "kcat's error: {}",
        out.stderr
    );
    step(started, "kcat");

    // The Python clients: kafka-python with PLAIN and SCRAM-SHA-256,
    // confluent-kafka with SCRAM-SHA-512.
    for (client, mechanism) in [
        ("kafka-python", "PLAIN"),
        ("kafka-python", "SCRAM-SHA-256"),
        ("confluent", "SCRAM-SHA-512"),
    ] {
        let (status, json) = python(client, &addr, TOPIC, &ends, mechanism, "alice", ALICE_PASSWORD);
        assert_eq!(status, Some(0), "{client} {mechanism}: {json}");
        let counts: BTreeMap<i32, i64> = ends
            .keys()
            .map(|p| (*p, json["counts"][p.to_string()].as_i64().unwrap_or(-1)))
            .collect();
        assert_eq!(counts, ends, "{client} {mechanism} read: {json}");
    }
    let (status, json) = python(
        "kafka-python",
        &addr,
        TOPIC,
        &ends,
        "SCRAM-SHA-512",
        "alice",
        WRONG_PASSWORD,
    );
    assert_eq!(status, Some(5), "kafka-python with a wrong password: {json}");
    assert!(
        json["auth_error"]
            .as_str()
            .unwrap_or_default()
            .contains("Authentication failed"),
        "{json}"
    );
    let (status, json) = python("confluent", &addr, TOPIC, &ends, "PLAIN", "alice", WRONG_PASSWORD);
    assert_eq!(status, Some(5), "confluent-kafka with a wrong password: {json}");
    assert!(
        json["auth_error"]
            .as_str()
            .unwrap_or_default()
            .contains("Invalid username or password"),
        "{json}"
    );
    step(started, "kafka-python and confluent-kafka");

    // Without SASL: ApiVersions is answered, a Fetch closes the connection.
    let mut plain = KafkaConnection::connect(&addr, IO_TIMEOUT).expect("connect");
    assert!(
        plain.fetch(TOPIC, 0, 0, 1024).is_err(),
        "a Fetch without SASL was answered"
    );
    // Our own client's errors: a wrong password, and a mechanism not enabled.
    let wrong = sasl_connect(&addr, Mechanism::ScramSha512, "mirror", WRONG_PASSWORD)
        .err()
        .expect("refused");
    assert!(wrong.starts_with("error code 58: Authentication failed"), "{wrong}");
    let b_dir = tempfile::tempdir().expect("tempdir");
    let users = b_dir.path().join("users.toml");
    std::fs::write(
        &users,
        format!("[[users]]\nname = \"reader\"\npassword = \"{READER_PASSWORD}\"\n"),
    )
    .expect("users file");
    let b = Agent::start(destination_config(b_dir.path(), &users)).expect("start B");
    let plain_at_b = sasl_connect(&listener(&b), Mechanism::Plain, "reader", READER_PASSWORD)
        .err()
        .expect("refused");
    assert_eq!(plain_at_b, "SaslHandshake: error code 33");
    // A v0 handshake: raw tokens, PLAIN and SCRAM.
    assert_eq!(
        v0_login_and_metadata(&addr, Mechanism::Plain, "alice", ALICE_PASSWORD),
        Ok(vec![TOPIC.to_string()])
    );
    assert_eq!(
        v0_login_and_metadata(&addr, Mechanism::ScramSha256, "mirror", MIRROR_PASSWORD),
        Ok(vec![TOPIC.to_string()])
    );
    assert!(v0_login_and_metadata(&addr, Mechanism::ScramSha256, "alice", WRONG_PASSWORD).is_err());
    // Our own client (the one mirrors use) says what went wrong, never
    // with the password: at A, at B (SCRAM-SHA-512 only) and at a
    // listener without SASL (which answers ILLEGAL_SASL_STATE, as Kafka's
    // PLAINTEXT listeners do).
    let c_dir = tempfile::tempdir().expect("tempdir");
    let c = Agent::start(
        AgentConfig::parse(&format!(
            "data_dir = {:?}\nshards = 1\n[listener]\naddress = \"127.0.0.1:0\"\n",
            c_dir.path()
        ))
        .expect("agent C config"),
    )
    .expect("start C");
    let errors = our_client_errors(vec![
        (addr.clone(), Mechanism::ScramSha256, WRONG_PASSWORD),
        (listener(&b), Mechanism::Plain, READER_PASSWORD),
        (listener(&c), Mechanism::ScramSha512, READER_PASSWORD),
        (addr.clone(), Mechanism::ScramSha512, ALICE_PASSWORD),
    ]);
    eprintln!("our client's errors: {errors:#?}");
    assert!(
        errors[0].ends_with(
            "SASL authentication failed (SCRAM-SHA-256 as user \"alice\"): Authentication failed during authentication \
             due to invalid credentials with SASL mechanism SCRAM-SHA-256 (SASL_AUTHENTICATION_FAILED)"
        ),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].ends_with("the broker does not enable SASL mechanism PLAIN (it enables: SCRAM-SHA-512)"),
        "{}",
        errors[1]
    );
    assert!(errors[2].contains("ILLEGAL_SASL_STATE"), "{}", errors[2]);
    assert_eq!(errors[3], "authenticated");
    assert_no_password("our client's errors", &errors.join("\n"));
    c.stop().expect("stop C");
    step(started, "refusals and v0");

    b.stop().expect("stop B");
    a.stop().expect("stop A");
    let log = common::logs::all();
    assert!(
        log.contains("principal=\"User:alice\"") || log.contains("principal=User:alice"),
        "no authenticated principal logged"
    );
    assert!(
        log.contains("closing client connection before authentication"),
        "no refusal logged"
    );
    assert_no_password("the agents' log", &log);
}

// ---------------------------------------------------------------------------
// Agent to agent
// ---------------------------------------------------------------------------

/// A mirror of `topic` at A as `mirror` (quick fetches, a metadata round
/// a second) logging in with `mechanism`.
fn sasl_mirror(name: &str, source: &str, topic: &str, mechanism: Mechanism, password: Value) -> MirrorConfig {
    let mut definition = serde_json::json!({
        "name": name,
        "bootstrap_servers": [source],
        "topics": [topic],
        "fetch_max_wait_ms": 50,
        "fetch_partition_max_bytes": 32768,
        "metadata_refresh_interval_ms": 1000,
        "security_protocol": "sasl_plaintext",
        "sasl_mechanism": mechanism.name(),
        "sasl_username": "mirror",
    });
    definition
        .as_object_mut()
        .expect("an object")
        .extend(password.as_object().expect("an object").clone());
    serde_json::from_value(definition).expect("mirror definition")
}

fn describe(agent: &Agent, mirror: &str) -> MirrorDescription {
    match agent.admin(AdminRequest::DescribeMirror { mirror: mirror.into() }) {
        Ok(AdminAnswer::Mirror { mirror }) => mirror,
        other => panic!("describe {mirror}: {other:?}"),
    }
}

/// Waits until B serves every batch A serves of `topic`, byte for byte.
fn wait_mirrored(a: &str, b: &str, topic: &str, partitions: i32) {
    let theirs = batches(&mut alice(a), topic, partitions);
    assert!(theirs.values().all(|b| !b.is_empty()), "{topic}: nothing at A");
    common::wait_until(DEADLINE, &format!("B mirrors {topic} byte for byte"), || {
        // Until B serves the topic (it places a new mirror's partitions,
        // and a restarted agent opens them, after it answers), a Fetch
        // there is refused: waited on like a lag.
        let ours = try_batches(&mut reader(b), topic, partitions)?;
        if ours == theirs {
            Ok(())
        } else {
            let counts = |m: &BTreeMap<i32, common::Batches>| m.values().map(Vec::len).collect::<Vec<_>>();
            Err(format!("batches at B {:?}, at A {:?}", counts(&ours), counts(&theirs)))
        }
    });
}

/// Committed offsets of `group` for `topic`'s partitions, as `conn` answers.
fn committed(conn: &mut KafkaConnection, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes((0..partitions).collect()),
        ]));
    let r: OffsetFetchResponse = conn
        .request(ApiKey::OffsetFetch as i16, 6, &request)
        .expect("OffsetFetch");
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.committed_offset >= 0)
        .map(|p| (p.partition_index, p.committed_offset))
        .collect()
}

fn topic_read_acl(topic: &str) -> AclBinding {
    AclBinding::from_any_host(
        ResourceType::Topic,
        topic,
        PatternType::Literal,
        "User:alice",
        AclOperation::Read,
        AclPermissionType::Allow,
    )
}

fn acls(conn: &mut KafkaConnection) -> Vec<AclBinding> {
    let r: DescribeAclsResponse = conn
        .request(
            ApiKey::DescribeAcls as i16,
            2,
            &AclBindingFilter::any().to_describe_request(),
        )
        .expect("DescribeAcls");
    AclBinding::from_describe_response(&r).0
}

/// Every answer of B's admin API (HTTP and CLI) about its mirrors.
fn api_answers(b: &Agent) -> String {
    let admin = format!("http://{}", b.admin_addr().expect("an admin API"));
    let http = ureq::agent();
    let mut all = String::new();
    for path in [
        "/mirrors",
        "/mirrors/m-plain",
        "/mirrors/m-256",
        "/mirrors/m-512",
        "/mirrors/m-wrong",
        "/status",
        "/metrics",
    ] {
        let body = http
            .get(&format!("{admin}{path}"))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .body_mut()
            .read_to_string()
            .expect("body");
        all.push_str(&body);
    }
    for args in [
        &["list"][..],
        &["describe", "m-512"],
        &["describe", "m-wrong"],
        &["describe", "m-512", "--json"],
    ] {
        let out = cli(&admin, args);
        all.push_str(&out.stdout);
        all.push_str(&out.stderr);
    }
    all
}

#[test]
fn an_agent_mirrors_a_sasl_agent_with_every_mechanism() {
    let _logs = capture();
    let started = Instant::now();
    let a_dir = tempfile::tempdir().expect("tempdir");
    let b_dir = tempfile::tempdir().expect("tempdir");
    let a = Agent::start(source_config(a_dir.path())).expect("start A");
    let a_addr = listener(&a);
    let topics = [("t-plain", 2), ("t-256", 2), ("t-512", 1), ("t-wrong", 1)];
    for (topic, partitions) in topics {
        create_topic(&mut alice(&a_addr), topic, partitions);
        produce(&a_addr, topic, partitions, 120, 0);
    }
    // A group's offsets at A (committed by librdkafka, logged in as alice)
    // and an ACL there.
    let consumer: BaseConsumer = rdkafka_sasl("PLAIN", "alice", ALICE_PASSWORD)
        .into_iter()
        .fold(ClientConfig::new(), |mut c, (k, v)| {
            c.set(k, v);
            c
        })
        .set("bootstrap.servers", &a_addr)
        .set("group.id", "g1")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset("t-256", 0, Offset::Offset(17))
        .expect("offset");
    offsets
        .add_partition_offset("t-256", 1, Offset::Offset(42))
        .expect("offset");
    consumer.commit(&offsets, CommitMode::Sync).expect("commit at A");
    drop(consumer);
    let acl = topic_read_acl("t-256");
    let request = CreateAclsRequest::default().with_creations(vec![acl.to_creation()]);
    let r: CreateAclsResponse = alice(&a_addr)
        .request(ApiKey::CreateAcls as i16, 2, &request)
        .expect("CreateAcls");
    assert_eq!(r.results[0].error_code, 0);
    step(started, "A: four topics, a group, an ACL");

    // B: its listener takes SCRAM-SHA-512 only (its control plane logs in
    // as the agent's own user); mirrors created in-process, through the
    // CLI, and with a password file.
    let users = b_dir.path().join("users.toml");
    std::fs::write(
        &users,
        format!("[[users]]\nname = \"reader\"\npassword = \"{READER_PASSWORD}\"\n"),
    )
    .expect("users file");
    let password_file = b_dir.path().join("mirror.password");
    std::fs::write(&password_file, format!("{MIRROR_PASSWORD}\n")).expect("password file");
    let b_config = destination_config(b_dir.path(), &users);
    let b = Agent::start(b_config.clone()).expect("start B");
    let b_addr = listener(&b);
    let admin = format!("http://{}", b.admin_addr().expect("an admin API"));
    let inline = serde_json::json!({ "sasl_password": MIRROR_PASSWORD });
    let from_file = serde_json::json!({ "sasl_password_file": password_file });
    let wrong = serde_json::json!({ "sasl_password": WRONG_PASSWORD });
    for config in [
        sasl_mirror("m-plain", &a_addr, "t-plain", Mechanism::Plain, inline),
        sasl_mirror("m-256", &a_addr, "t-256", Mechanism::ScramSha256, from_file),
        sasl_mirror("m-wrong", &a_addr, "t-wrong", Mechanism::ScramSha512, wrong),
    ] {
        b.admin(AdminRequest::CreateMirror { config }).expect("create mirror");
    }
    cli(
        &admin,
        &[
            "create",
            "m-512",
            "--bootstrap-servers",
            &a_addr,
            "--topics",
            "t-512",
            "--fetch-max-wait-ms",
            "50",
            "--metadata-refresh-interval-ms",
            "1000",
            "--security-protocol",
            "sasl_plaintext",
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--sasl-username",
            "mirror",
            "--sasl-password",
            MIRROR_PASSWORD,
        ],
    );
    for (topic, partitions) in &topics[..3] {
        wait_mirrored(&a_addr, &b_addr, topic, *partitions);
    }
    step(started, "B mirrors the three topics byte for byte");

    // Group offsets and ACLs arrive through B's own SASL listener.
    let at_a = committed(&mut alice(&a_addr), "g1", "t-256", 2);
    assert_eq!(at_a, BTreeMap::from([(0, 17), (1, 42)]));
    common::wait_until(DEADLINE, "g1's offsets at B", || {
        let at_b = committed(&mut reader(&b_addr), "g1", "t-256", 2);
        if at_b == at_a { Ok(()) } else { Err(format!("{at_b:?}")) }
    });
    common::wait_until(DEADLINE, "the ACL at B", || {
        let at_b = acls(&mut reader(&b_addr));
        if at_b.contains(&acl) {
            Ok(())
        } else {
            Err(format!("{at_b:?}"))
        }
    });
    let d = common::wait_until(DEADLINE, "m-256's topic configs read", || {
        let d = describe(&b, "m-256");
        if d.topic_configs_synced_ms.is_some() {
            Ok(d)
        } else {
            Err(format!("{d:?}"))
        }
    });
    assert_eq!(d.sync_error, None);
    assert!(d.groups.contains_key("g1"), "{:?}", d.groups);
    // The wrong password: said in the mirror's sync error.
    let d = common::wait_until(DEADLINE, "m-wrong's error", || {
        let d = describe(&b, "m-wrong");
        d.sync_error.clone().ok_or_else(|| format!("{d:?}"))
    });
    assert!(
        d.contains("SASL authentication failed (SCRAM-SHA-512 as user \"mirror\")")
            && d.contains("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
        "{d}"
    );
    step(started, "group offsets, ACL, configs; the wrong password's error");

    // No password in any answer; the in-process answers show "***".
    let answers = api_answers(&b);
    assert_no_password("the admin API's answers", &answers);
    assert!(
        answers.contains("\"sasl_password\":\"***\"") && answers.contains("password=***"),
        "{answers}"
    );
    let d = describe(&b, "m-plain");
    assert_eq!(d.config.sasl_password.as_ref().map(Secret::expose), Some("***"));
    assert_no_password("the Debug of a description", &format!("{d:?}"));
    step(started, "answers checked");

    // The stored definitions keep the passwords: after a restart B goes on.
    b.stop().expect("stop B");
    produce(&a_addr, "t-plain", 2, 40, 120);
    produce(&a_addr, "t-512", 1, 40, 120);
    let b = Agent::start(b_config).expect("restart B");
    let b_addr = listener(&b);
    wait_mirrored(&a_addr, &b_addr, "t-plain", 2);
    wait_mirrored(&a_addr, &b_addr, "t-512", 1);
    step(started, "B mirrors on after a restart");

    b.stop().expect("stop B");
    a.stop().expect("stop A");
    assert_no_password("the agents' log", &common::logs::all());
}
