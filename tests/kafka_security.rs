//! Apache Kafka with security on as the source: one KRaft cluster (one
//! controller, three brokers; see `tests/common/kafka.rs`) with a SASL_SSL
//! listener (SCRAM-SHA-512, a server certificate our test CA signed,
//! Kafka's StandardAuthorizer, `super.users` admin), an SSL listener that
//! requires client certificates, and PLAINTEXT between the brokers and to
//! the controller (whose principal, ANONYMOUS, is a super user, as the
//! harness's own plaintext Admin and producers are).
//!
//! - **SASL_SSL**: an agent mirrors the SASL_SSL listener as admin; its
//!   batches equal, byte for byte, what the PLAINTEXT listener of the same
//!   brokers serves (the same logs: the raw-Fetch comparison reads those).
//! - **SSL with client certificates**: with our client certificate the
//!   topic is mirrored byte for byte; without one the mirror shows a TLS
//!   sync error and holds nothing.
//! - **ACLs** created at Kafka (Kafka's Admin over SASL_SSL as admin)
//!   arrive at the agent (Kafka's kafka-acls lists the same bindings at
//!   both) and are enforced on our SCRAM listener for the same users: alice
//!   reads with Kafka's Java consumer, bob is refused with
//!   TOPIC_AUTHORIZATION_FAILED.
//! - **Share groups**: start offsets set at Kafka with kafka-share-groups
//!   `--reset-offsets` arrive; `--describe` at both shows the same start
//!   offsets.
//! - **Another cluster's id**: a running mirror pointed at a second Kafka
//!   cluster (other cluster id) halts sync with the reason shown; no
//!   partition moves and our data stays what the first cluster served.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ringmirror::agent::Agent;
use ringmirror_control::admin::{AdminAnswer, AdminRequest};
use ringmirror_storage::log::TopicPartition;

use common::kafka::{KafkaCluster, KafkaClusterSpec, driver, tool, tool_output};
use common::pki::{Pki, make_pki};

const DEADLINE: Duration = Duration::from_secs(60);
const ADMIN_PASSWORD: &str = "admin-secret-5d2e9b";
/// The listener names of the cluster's secured listeners.
const SASL_SSL: &str = "SASL_SSL";
const SSL: &str = "SSL";
/// The principal Kafka gives our client certificate (its subject).
const CERT_PRINCIPAL: &str = "User:CN=ringmirror";
const ACL_COMMAND: &str = "org.apache.kafka.tools.AclCommand";

/// The test PKI, in a directory that lives as long as the test process.
fn pki() -> &'static (tempfile::TempDir, Pki, PathBuf) {
    static PKI: OnceLock<(tempfile::TempDir, Pki, PathBuf)> = OnceLock::new();
    PKI.get_or_init(|| {
        let dir = tempfile::tempdir().expect("pki dir");
        let pki = make_pki(dir.path());
        // Kafka's PEM key store: the (PKCS#8, unencrypted) key and its chain in one file.
        let keystore = dir.path().join("server-keystore.pem");
        let mut pem = std::fs::read(&pki.server_key).expect("server key");
        pem.extend(std::fs::read(&pki.server_cert).expect("server certificate"));
        std::fs::write(&keystore, pem).expect("write the key store");
        (dir, pki, keystore)
    })
}

fn cluster() -> &'static KafkaCluster {
    KafkaCluster::shared(|| {
        let (_, pki, keystore) = pki();
        let supers = format!("User:admin;User:ANONYMOUS;{CERT_PRINCIPAL}");
        let authorizer = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
        KafkaClusterSpec::default()
            .listener(SASL_SSL, "SASL_SSL")
            .listener(SSL, "SSL")
            .scram(&format!("SCRAM-SHA-512=[name=admin,password={ADMIN_PASSWORD}]"))
            .with("sasl.enabled.mechanisms", "SCRAM-SHA-512")
            .with(
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            )
            .with("ssl.keystore.type", "PEM")
            .with("ssl.keystore.location", &keystore.display().to_string())
            .with("ssl.truststore.type", "PEM")
            .with("ssl.truststore.location", &pki.ca.display().to_string())
            .with("listener.name.ssl.ssl.client.auth", "required")
            .with("authorizer.class.name", authorizer)
            .with("super.users", &supers)
            .with_controller("authorizer.class.name", authorizer)
            .with_controller("super.users", &supers)
    })
}

/// Kafka client settings for the SASL_SSL listener as admin.
fn admin_client_props() -> Vec<String> {
    let (_, pki, _) = pki();
    let mut props = scram_client_props("SASL_SSL", "admin", ADMIN_PASSWORD);
    props.push("ssl.truststore.type=PEM".into());
    props.push(format!("ssl.truststore.location={}", pki.ca.display()));
    props
}

/// Kafka client settings to log in with SCRAM-SHA-512 as `user` over `protocol`.
fn scram_client_props(protocol: &str, user: &str, password: &str) -> Vec<String> {
    vec![
        format!("security.protocol={protocol}"),
        "sasl.mechanism=SCRAM-SHA-512".into(),
        format!(
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"{user}\" password=\"{password}\";"
        ),
    ]
}

/// The Java driver's `--prop` arguments for `props`.
fn prop_args(props: &[String]) -> Vec<&str> {
    props.iter().flat_map(|p| ["--prop", p.as_str()]).collect()
}

/// Produces `args` to `topic` at `bootstrap`; returns each partition's
/// end offset after it, as Kafka acknowledged (non-transactional records).
fn produce_at(bootstrap: &str, topic: &str, args: &[&str]) -> BTreeMap<i32, i64> {
    let mut all = vec!["--topic", topic];
    all.extend_from_slice(args);
    let mut ends = BTreeMap::new();
    for line in driver("produce", bootstrap, &all) {
        if let Some((p, o)) = line.strip_prefix("produced ").and_then(|l| l.split_once(' ')) {
            let end = ends.entry(p.parse().expect("partition")).or_insert(0);
            *end = (*end).max(o.parse::<i64>().expect("offset") + 1);
        }
    }
    ends
}

/// [`produce_at`] the cluster's PLAINTEXT listener.
fn produce(topic: &str, args: &[&str]) -> BTreeMap<i32, i64> {
    produce_at(&cluster().bootstrap, topic, args)
}

/// An agent whose listener has `listener` (TOML for `[listener]`),
/// mirroring `topics` from `bootstrap` as "dr" with `security` (TOML for
/// the `[[mirror]]` table).
fn agent(data_dir: &Path, listener: &str, bootstrap: &str, topics: &[&str], security: &str) -> Agent {
    common::kafka::mirror_agent(data_dir, bootstrap, topics, listener, "", security)
}

/// The `[[mirror]]` settings to log in to the SASL_SSL listener as admin.
fn sasl_ssl_security() -> String {
    let (_, pki, _) = pki();
    format!(
        r#"security_protocol = "sasl_ssl"
        sasl_mechanism = "SCRAM-SHA-512"
        sasl_username = "admin"
        sasl_password = {ADMIN_PASSWORD:?}
        ssl_ca_location = {:?}"#,
        pki.ca
    )
}

/// Waits until the agent's log of every partition of `topic` reaches the
/// end Kafka acknowledged to the producer (a follower, which a Fetch at
/// v11+ may be answered by, can report an older high watermark), then
/// until every broker's answer agrees, so the comparisons after it see
/// the whole log.
fn wait_caught_up(agent: &Agent, topic: &str, ends: &BTreeMap<i32, i64>) {
    common::wait_mirrored(agent, topic, ends, DEADLINE);
    for (&p, &end) in ends {
        common::wait_until(DEADLINE, &format!("{topic}-{p}: every broker at {end}"), || {
            // The high watermark of each broker that answers (the leader,
            // and followers where they serve consumers).
            let seen: Vec<i64> = cluster()
                .bootstrap
                .split(',')
                .filter_map(|b| {
                    let conn = common::KafkaConnection::connect(b, Duration::from_secs(5)).ok()?;
                    let f = conn.with_max_wait_ms(0).fetch(topic, p, 0, 1).ok()?;
                    (matches!(f.error_code, 0 | 1) && f.high_watermark >= 0).then_some(f.high_watermark)
                })
                .collect();
            if !seen.is_empty() && seen.iter().all(|&hw| hw == end) {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        });
    }
}

fn tps(topic: &str, partitions: i32) -> Vec<TopicPartition> {
    (0..partitions).map(|p| TopicPartition::new(topic, p)).collect()
}

#[test]
fn kafkas_sasl_ssl_listener_is_mirrored_byte_for_byte() {
    let c = cluster();
    c.create_topic("over-sasl-ssl", 2, &[]);
    let mut ends = BTreeMap::new();
    for (p, codec) in ["zstd", "lz4"].iter().enumerate() {
        let p = p.to_string();
        ends.extend(produce(
            "over-sasl-ssl",
            &[
                "--partition",
                &p,
                "--codec",
                codec,
                "--count",
                "300",
                "--value-bytes",
                "500",
                "--headers",
                "--batch",
                "--idempotent",
            ],
        ));
    }
    assert_eq!(ends.len(), 2);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let sasl_ssl = c.listener_bootstrap(SASL_SSL);
    let agent = agent(&data, "", &sasl_ssl, &["over-sasl-ssl"], &sasl_ssl_security());
    wait_caught_up(&agent, "over-sasl-ssl", &ends);
    let d = common::describe_mirror(&agent, "dr");
    assert_eq!(
        (d.source_cluster_id.as_deref(), d.sync_error.as_deref()),
        (Some(c.cluster_id.as_str()), None)
    );
    agent.stop().expect("clean stop");
    // What the brokers serve on PLAINTEXT (the same logs) equals what we hold.
    let both = common::assert_mirrors_source(&data, &c.bootstrap, &tps("over-sasl-ssl", 2));
    assert!(both.values().all(|(_, ours)| !ours.batches.is_empty()));
}

/// The `[[mirror]]` settings for the SSL listener, with or without our
/// client certificate.
fn ssl_security(with_certificate: bool) -> String {
    let (_, pki, _) = pki();
    let mut s = format!("security_protocol = \"ssl\"\nssl_ca_location = {:?}\n", pki.ca);
    if with_certificate {
        s.push_str(&format!(
            "ssl_certificate_location = {:?}\nssl_key_location = {:?}\n",
            pki.client_cert, pki.client_key
        ));
    }
    s
}

#[test]
fn kafkas_ssl_listener_requiring_client_certificates_is_mirrored_with_ours_only() {
    let c = cluster();
    c.create_topic("over-mtls", 1, &[]);
    c.create_topic("no-cert", 1, &[]);
    let ends: Vec<BTreeMap<i32, i64>> = ["over-mtls", "no-cert"]
        .iter()
        .map(|topic| produce(topic, &["--count", "200", "--codec", "gzip", "--batch", "--null-keys"]))
        .collect();
    let ssl = c.listener_bootstrap(SSL);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = agent(&data, "", &ssl, &["over-mtls"], &ssl_security(true));
    wait_caught_up(&agent, "over-mtls", &ends[0]);

    // The same agent, a mirror without a client certificate: Kafka ends
    // the handshake, the mirror says so and holds nothing.
    let mut config = common::describe_mirror(&agent, "dr").config;
    config.name = "no-cert".into();
    config.topics = vec!["no-cert".into()];
    config.ssl_certificate_location = None;
    config.ssl_key_location = None;
    agent
        .admin(AdminRequest::CreateMirror { config })
        .expect("create mirror no-cert");
    let error = common::wait_until(DEADLINE, "no-cert's sync error", || {
        match common::describe_mirror(&agent, "no-cert").sync_error {
            Some(e) => Ok(e),
            None => Err("no error yet".into()),
        }
    });
    eprintln!("no-cert: {error}");
    assert!(error.contains("TLS") && error.contains("client certificate"), "{error}");
    let d = common::describe_mirror(&agent, "no-cert");
    assert_eq!((d.source_cluster_id.as_deref(), d.partitions.len()), (None, 0), "{d:?}");
    assert!(
        !agent.status().keys().any(|(mirror, _)| mirror == "no-cert"),
        "nothing of no-cert is mirrored"
    );
    agent.stop().expect("clean stop");
    assert!(!data.join("no-cert-0").exists(), "no log of no-cert");
    common::assert_mirrors_source(&data, &c.bootstrap, &tps("over-mtls", 1));
}

/// Kafka's tool `class` against `bootstrap` with `props` as its client
/// settings (a `--command-config` file in `dir`) and `args`; its stdout.
fn admin_tool(class: &str, bootstrap: &str, props: &[String], dir: &Path, args: &[&str]) -> String {
    let config = dir.join(format!("client-{}.properties", bootstrap.replace([':', ','], "_")));
    std::fs::write(&config, props.join("\n")).expect("write the command config");
    let config = config.display().to_string();
    let mut all = vec!["--bootstrap-server", bootstrap, "--command-config", &config];
    all.extend_from_slice(args);
    tool(class, &all)
}

/// Kafka's kafka-acls `--list` at `bootstrap` with `props` as its client
/// settings: one line per binding, resource and entry, sorted.
fn list_acls(bootstrap: &str, props: &[String], dir: &Path) -> Vec<String> {
    let text = admin_tool(ACL_COMMAND, bootstrap, props, dir, &["--list"]);
    let mut bindings = Vec::new();
    let mut resource = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("Current ACLs for resource") {
            resource = line.to_owned();
        } else if line.starts_with("(principal=") {
            bindings.push(format!("{resource} {line}"));
        }
    }
    bindings.sort();
    bindings
}

/// Kafka client settings for our SCRAM listener as `user`.
fn our_client_props(user: &str, password: &str) -> Vec<String> {
    scram_client_props("SASL_PLAINTEXT", user, password)
}

#[test]
fn acls_created_at_kafka_arrive_and_are_enforced_for_the_same_users() {
    let c = cluster();
    c.create_topic("guarded", 2, &[]);
    let ends = produce("guarded", &["--count", "80", "--batch"]);
    let sasl_ssl = c.listener_bootstrap(SASL_SSL);
    let admin = admin_client_props();
    for (resource_type, name) in [("topic", "guarded"), ("group", "alice-readers")] {
        let mut args = vec![
            "--principal",
            "User:alice",
            "--resource-type",
            resource_type,
            "--resource-name",
            name,
            "--operation",
            "read",
        ];
        args.extend(prop_args(&admin));
        assert_eq!(driver("create-acl", &sasl_ssl, &args), ["ok"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let at_kafka = list_acls(&sasl_ssl, &admin, dir.path());
    assert_eq!(at_kafka.len(), 2, "{at_kafka:#?}");

    let listener = r#"sasl_mechanisms = ["SCRAM-SHA-512"]
        authorizer = "acl"
        super_users = ["User:admin"]
        [[listener.users]]
        name = "admin"
        password = "our-admin-pw"
        [[listener.users]]
        name = "alice"
        password = "alice-pw"
        [[listener.users]]
        name = "bob"
        password = "bob-pw""#;
    let data = dir.path().join("data");
    let agent = agent(&data, listener, &sasl_ssl, &["guarded"], &sasl_ssl_security());
    wait_caught_up(&agent, "guarded", &ends);
    let ours = agent.listener_addr().expect("listening").to_string();
    let our_admin = our_client_props("admin", "our-admin-pw");
    // DescribeAcls at both: the same bindings.
    common::wait_until(DEADLINE, "the ACLs synced", || {
        let here = list_acls(&ours, &our_admin, dir.path());
        if here == at_kafka {
            Ok(())
        } else {
            Err(format!("ours {here:#?} vs Kafka's {at_kafka:#?}"))
        }
    });

    // alice reads every record in her group; bob is refused the topic.
    let mut alice = vec![
        "--topic",
        "guarded",
        "--group",
        "alice-readers",
        "--commit",
        "--idle-ms",
        "2000",
    ];
    let alice_props = our_client_props("alice", "alice-pw");
    alice.extend(prop_args(&alice_props));
    let read = driver("consume", &ours, &alice);
    assert_eq!(read.last().map(String::as_str), Some("end 80"), "{read:?}");
    let bob_props = our_client_props("bob", "bob-pw");
    let mut bob = vec![
        "consume",
        "--bootstrap",
        &ours,
        "--topic",
        "guarded",
        "--idle-ms",
        "2000",
    ];
    bob.extend(prop_args(&bob_props));
    let refused = tool_output("ringmirror.kafka.Driver", &bob);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "bob read: {}",
        String::from_utf8_lossy(&refused.stdout)
    );
    assert!(
        stderr.contains("TopicAuthorizationException"),
        "bob's refusal: {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&refused.stdout).contains("record "),
        "bob read no record"
    );
    agent.stop().expect("clean stop");
}

#[test]
fn another_clusters_id_halts_sync_and_moves_nothing() {
    let c = cluster();
    c.create_topic("halting", 2, &[]);
    let ends = produce("halting", &["--count", "60", "--batch"]);
    assert_eq!(ends.len(), 2, "{ends:?}");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = agent(&data, "", &c.bootstrap, &["halting"], "");
    wait_caught_up(&agent, "halting", &ends);
    // Each partition's state and offsets, as the agent reports them.
    let snapshot = |agent: &Agent| {
        let d = common::describe_mirror(agent, "dr");
        let states: Vec<(String, i32, String)> = d
            .partitions
            .iter()
            .map(|p| (p.topic.clone(), p.partition, p.state.clone()))
            .collect();
        (states, format!("{:?}", agent.status()))
    };
    let before = snapshot(&agent);
    assert_eq!(before.0.len(), 2);
    assert!(before.0.iter().all(|(_, _, s)| s == "MIRRORING"), "{before:?}");

    // A second cluster, another id, a topic of the same name holding more.
    let other = KafkaCluster::start(KafkaClusterSpec {
        brokers: 1,
        cluster_id: "b3RoZXItY2x1c3Rlci1pZA".into(),
        ..KafkaClusterSpec::default()
    });
    other.create_topic("halting", 2, &[]);
    produce_at(&other.bootstrap, "halting", &["--count", "500", "--batch"]);
    let mut config = common::describe_mirror(&agent, "dr").config;
    config.bootstrap_servers = vec![other.bootstrap.clone()];
    match agent.admin(AdminRequest::UpdateMirror { config }) {
        Ok(AdminAnswer::Accepted { .. }) => {}
        other => panic!("mirror update answered {other:?}"),
    }
    let error = common::wait_until(DEADLINE, "sync halts", || {
        match common::describe_mirror(&agent, "dr").sync_error {
            Some(e) if e.contains(&other.cluster_id) => Ok(e),
            e => Err(format!("{e:?}")),
        }
    });
    eprintln!("halted: {error}");
    assert!(error.contains(&c.cluster_id), "{error}");
    let d = common::describe_mirror(&agent, "dr");
    assert_eq!(d.source_cluster_id.as_deref(), Some(c.cluster_id.as_str()));
    // No partition moved: the same states and log ends as before, for a while.
    for _ in 0..3 {
        agent
            .admin(AdminRequest::Sync { mirror: "dr".into() })
            .expect("sync now");
        assert_eq!(snapshot(&agent), before, "partitions after the halt");
        let e = common::describe_mirror(&agent, "dr").sync_error;
        assert!(e.as_deref().is_some_and(|e| e.contains(&other.cluster_id)), "{e:?}");
    }
    agent.stop().expect("clean stop");
    // Our data is still what the first cluster serves.
    common::assert_mirrors_source(&data, &c.bootstrap, &tps("halting", 2));
}

const SHARE_GROUPS_COMMAND: &str = "org.apache.kafka.tools.consumer.group.ShareGroupCommand";

/// kafka-share-groups `--describe --group G` at `bootstrap`: the GROUP,
/// TOPIC, PARTITION, START-OFFSET and LAG columns of `topic`'s rows,
/// sorted (none while the group does not exist there). Kafka 4.2+ answers
/// LAG in DescribeShareGroupOffsets v1 (KIP-1226), as our listener does.
fn describe_share_group(bootstrap: &str, dir: &Path, group: &str, topic: &str) -> Vec<String> {
    let text = admin_tool(
        SHARE_GROUPS_COMMAND,
        bootstrap,
        &[],
        dir,
        &["--describe", "--group", group],
    );
    let mut lines = text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>());
    // No header: the group is not there (yet): "Group G not found".
    let Some(header) = lines.find(|cells| cells.first() == Some(&"GROUP")) else {
        return Vec::new();
    };
    let column = |name: &str| {
        header
            .iter()
            .position(|&c| c == name)
            .unwrap_or_else(|| panic!("no {name} column in {header:?}"))
    };
    let wanted = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"].map(column);
    let mut rows: Vec<String> = lines
        .filter(|cells| cells.get(wanted[1]) == Some(&topic))
        .map(|cells| {
            wanted
                .iter()
                .map(|&i| cells.get(i).copied().unwrap_or(""))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn share_group_start_offsets_set_at_kafka_arrive() {
    let c = cluster();
    c.create_topic("shared-work", 2, &[]);
    let ends = produce("shared-work", &["--count", "90", "--batch"]);
    assert_eq!(ends.len(), 2, "{ends:?}");
    let out = tool(
        SHARE_GROUPS_COMMAND,
        &[
            "--bootstrap-server",
            &c.bootstrap,
            "--reset-offsets",
            "--group",
            "workers",
            "--topic",
            "shared-work",
            "--to-latest",
            "--execute",
        ],
    );
    assert!(out.contains("NEW-OFFSET"), "{out}");
    // Records after the start offsets: a lag of their count per partition.
    let mut after = ends.clone();
    after.extend(produce("shared-work", &["--count", "40", "--batch"]));
    let dir = tempfile::tempdir().unwrap();
    let at_kafka = describe_share_group(&c.bootstrap, dir.path(), "workers", "shared-work");
    assert_eq!(at_kafka.len(), 2, "{at_kafka:#?}");
    for (p, start) in &ends {
        let lag = after[p] - start;
        assert!(
            at_kafka.contains(&format!("workers shared-work {p} {start} {lag}")),
            "partition {p} starts at {start} with lag {lag} at Kafka: {at_kafka:#?}"
        );
    }
    let data = dir.path().join("data");
    let agent = agent(
        &data,
        "",
        &c.listener_bootstrap(SASL_SSL),
        &["shared-work"],
        &sasl_ssl_security(),
    );
    wait_caught_up(&agent, "shared-work", &after);
    let ours = agent.listener_addr().expect("listening").to_string();
    common::wait_until(DEADLINE, "the share group synced", || {
        let here = describe_share_group(&ours, dir.path(), "workers", "shared-work");
        if here == at_kafka {
            Ok(())
        } else {
            Err(format!("ours {here:#?} vs Kafka's {at_kafka:#?}"))
        }
    });
    agent.stop().expect("clean stop");
}
