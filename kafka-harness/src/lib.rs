//! Apache Kafka as a peer, for the integration tests and `perf/`: a KRaft
//! cluster on loopback (one controller and some brokers, each its own JVM
//! with a small heap, formatted with Kafka's StorageTool), Kafka's CLI tools,
//! and the Java test driver (`tests/kafka/src/main/java`, Kafka's own client
//! library) — all from the classpath `scripts/setup.sh` resolves from Maven
//! Central into `tests/kafka/target/`. Long-running ones (a Streams
//! application, a group member, a Connect worker) run in the
//! [`Background`], their output lines watched as they come.
//!
//! This crate only starts and drives Kafka processes; it knows nothing of
//! ringmirror (no dependency on the agent's crates).
//!
//! A cluster is stopped (every JVM SIGKILLed) when it is dropped, and in any
//! case when the process ends: its JVMs are spawned by one thread that
//! lives as long as the process, with `PR_SET_PDEATHSIG`, so a cluster shared
//! by a test binary's tests outlives each test but never the binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

mod background;
mod process;

pub use background::{Background, spawn_driver};
pub use process::{ChildGuard, free_addr};

/// Bounds a cluster's start (every broker answering and registered).
const START_DEADLINE: Duration = Duration::from_secs(90);
/// Bounds one run of a tool or of the driver.
const TOOL_DEADLINE: Duration = Duration::from_secs(120);
/// The heap of each broker and controller JVM: small, several fit here.
pub const BROKER_HEAP: &str = "-Xmx320m";
/// The heap of a tool's or the driver's JVM.
const TOOL_HEAP: &str = "-Xmx192m";
/// The Kafka release `tests/kafka/pom.xml` resolves.
pub const KAFKA_VERSION: &str = "4.3.1";

/// `tests/kafka/` of this checkout (next to this crate's directory).
fn kafka_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("kafka")
}

/// The driver's classes and Kafka's jars, as `scripts/setup.sh` left them.
pub fn classpath() -> String {
    static CLASSPATH: OnceLock<String> = OnceLock::new();
    CLASSPATH
        .get_or_init(|| {
            let target = kafka_dir().join("target");
            let jars = std::fs::read_to_string(target.join("classpath.txt")).unwrap_or_else(|e| {
                panic!(
                    "these tests need Apache Kafka's jars ({}: {e}); scripts/setup.sh resolves them \
                     (mvn -f tests/kafka/pom.xml package)",
                    target.join("classpath.txt").display()
                )
            });
            format!("{}:{}", target.join("classes").display(), jars.trim())
        })
        .clone()
}

/// The JVM settings of the tests' processes: quick to start (C1 only,
/// SerialGC), slower to run.
pub const QUICK_JVM_FLAGS: &[&str] = &["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"];

/// The JVM settings Kafka's own scripts run brokers and tools with
/// (`KAFKA_JVM_PERFORMANCE_OPTS` in `kafka-run-class.sh`): for measurements.
pub const KAFKA_JVM_FLAGS: &[&str] = &[
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
];

/// A `java` command on Kafka's classpath with `heap` (e.g. `-Xmx320m`),
/// quiet logging and [`QUICK_JVM_FLAGS`], running `main_class`.
pub fn java(main_class: &str, heap: &str) -> Command {
    java_with(main_class, heap, QUICK_JVM_FLAGS)
}

/// [`java`] with other JVM `flags` (e.g. [`KAFKA_JVM_FLAGS`]).
pub fn java_with(main_class: &str, heap: &str, flags: &[&str]) -> Command {
    let mut command = Command::new("java");
    command
        .arg(heap)
        .args(flags)
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            kafka_dir().join("log4j2.properties").display()
        ))
        .arg("-cp")
        .arg(classpath())
        .arg(main_class)
        .stdin(Stdio::null());
    command
}

/// Runs `command` (bounded by [`TOOL_DEADLINE`]) and returns its output.
fn run_bounded(mut command: Command, what: &str) -> Output {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut command, what.to_owned()).unwrap_or_else(|e| panic!("start {what}: {e}"));
    let stdout = child.child().stdout.take().expect("piped stdout");
    let stderr = child.child().stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || read_all(stdout));
    let err = std::thread::spawn(move || read_all(stderr));
    let status = child
        .wait_timeout(TOOL_DEADLINE)
        .unwrap_or_else(|| panic!("{what} did not finish within {TOOL_DEADLINE:?}"));
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// A pipe read to its end (what arrived before an error, if one ends it).
fn read_all(mut pipe: impl std::io::Read) -> Vec<u8> {
    let mut bytes = Vec::new();
    let _ = pipe.read_to_end(&mut bytes);
    bytes
}

/// Runs Kafka's tool `main_class` (e.g. `org.apache.kafka.tools.TopicCommand`)
/// with `args`; panics with its output unless it exits 0, else returns stdout.
pub fn tool(main_class: &str, args: &[&str]) -> String {
    let output = tool_output(main_class, args);
    assert!(
        output.status.success(),
        "{main_class} {args:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// [`tool`] without the check: the whole output, whatever the exit status.
pub fn tool_output(main_class: &str, args: &[&str]) -> Output {
    let mut command = java(main_class, TOOL_HEAP);
    command.args(args);
    run_bounded(command, main_class)
}

/// Runs the Java test driver's `command` against `bootstrap` with `args`
/// (see `Driver.java` for the commands and their output lines); panics
/// unless it exits 0, else returns its stdout lines.
pub fn driver(command: &str, bootstrap: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec![command, "--bootstrap", bootstrap];
    all.extend_from_slice(args);
    tool("ringmirror.kafka.Driver", &all)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The cluster id [`KafkaClusterSpec::default`] formats with: a base64
/// UUID of 16 bytes, as `kafka-storage random-uuid` makes.
pub const DEFAULT_CLUSTER_ID: &str = "cnJpbmdtaXJyb3ItdGVzdA";

/// What a KRaft cluster is started with.
#[derive(Debug, Clone)]
pub struct KafkaClusterSpec {
    pub brokers: usize,
    /// Extra `server.properties` lines for every broker.
    pub broker_properties: Vec<(String, String)>,
    /// Extra `server.properties` lines for the controller.
    pub controller_properties: Vec<(String, String)>,
    /// Listeners besides PLAINTEXT (the inter-broker one): (name, security
    /// protocol), each on a port of its own on every broker.
    pub listeners: Vec<(String, String)>,
    /// `kafka-storage format --add-scram` arguments for the controller
    /// (SCRAM credentials in the bootstrap metadata).
    pub scram: Vec<String>,
    pub cluster_id: String,
    /// The JVM settings of every node ([`QUICK_JVM_FLAGS`] unless changed).
    pub jvm_flags: &'static [&'static str],
}

impl Default for KafkaClusterSpec {
    fn default() -> Self {
        Self {
            brokers: 3,
            broker_properties: Vec::new(),
            controller_properties: Vec::new(),
            listeners: Vec::new(),
            scram: Vec::new(),
            cluster_id: DEFAULT_CLUSTER_ID.to_owned(),
            jvm_flags: QUICK_JVM_FLAGS,
        }
    }
}

impl KafkaClusterSpec {
    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.broker_properties.push((key.to_owned(), value.to_owned()));
        self
    }

    /// A `server.properties` line for the controller.
    pub fn with_controller(mut self, key: &str, value: &str) -> Self {
        self.controller_properties.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Another listener `name` speaking `protocol` (e.g. SASL_SSL) on every broker.
    pub fn listener(mut self, name: &str, protocol: &str) -> Self {
        self.listeners.push((name.to_owned(), protocol.to_owned()));
        self
    }

    /// A SCRAM credential made at format time, e.g.
    /// `SCRAM-SHA-512=[name=admin,password=secret]`.
    pub fn scram(mut self, credential: &str) -> Self {
        self.scram.push(credential.to_owned());
        self
    }
}

static SHARED: OnceLock<KafkaCluster> = OnceLock::new();

extern "C" fn remove_shared_cluster() {
    if let Some(cluster) = SHARED.get() {
        cluster.remove();
    }
}

/// One Kafka process of a cluster.
struct Node {
    id: i32,
    properties: PathBuf,
    log_dir: PathBuf,
    log_file: PathBuf,
    addr: String,
    /// The addresses of the spec's other listeners, by listener name.
    listeners: BTreeMap<String, String>,
    process: Mutex<Option<ChildGuard>>,
}

/// A KRaft cluster on loopback: node 1 is the controller, brokers are 2…
pub struct KafkaCluster {
    dir: tempfile::TempDir,
    controller: Node,
    brokers: Vec<Node>,
    /// Every broker's address, comma-separated.
    pub bootstrap: String,
    pub cluster_id: String,
    jvm_flags: &'static [&'static str],
}

impl KafkaCluster {
    /// Formats and starts a cluster as `spec` says; returns once every
    /// broker answers and has registered with the controller.
    pub fn start(spec: KafkaClusterSpec) -> Self {
        let dir = tempfile::tempdir().expect("kafka temp dir");
        let cluster_id = spec.cluster_id.clone();
        let controller_addr = free_addr();
        let voters = format!("1@{controller_addr}");
        let node = |id: i32, addr: String, listeners: BTreeMap<String, String>, lines: Vec<String>| {
            let log_dir = dir.path().join(format!("node-{id}"));
            let properties = dir.path().join(format!("node-{id}.properties"));
            let mut text = lines.join("\n");
            text.push_str(&format!(
                "\nnode.id={id}\ncontroller.quorum.voters={voters}\nlog.dirs={}\n",
                log_dir.display()
            ));
            std::fs::write(&properties, text).expect("write server.properties");
            Node {
                id,
                properties,
                log_dir,
                log_file: dir.path().join(format!("node-{id}.log")),
                addr,
                listeners,
                process: Mutex::new(None),
            }
        };
        let mut controller_lines = vec![
            "process.roles=controller".to_owned(),
            format!("listeners=CONTROLLER://{controller_addr}"),
            "controller.listener.names=CONTROLLER".into(),
            "num.io.threads=2".into(),
            "num.network.threads=1".into(),
        ];
        controller_lines.extend(spec.controller_properties.iter().map(|(k, v)| format!("{k}={v}")));
        let controller = node(1, controller_addr.clone(), BTreeMap::new(), controller_lines);
        let replication = spec.brokers.min(3);
        let brokers: Vec<Node> = (0..spec.brokers)
            .map(|i| {
                let addr = free_addr();
                let others: BTreeMap<String, String> = spec
                    .listeners
                    .iter()
                    .map(|(name, _)| (name.clone(), free_addr()))
                    .collect();
                let listeners: String = others.iter().map(|(name, a)| format!(",{name}://{a}")).collect();
                let protocols: String = spec.listeners.iter().map(|(name, p)| format!(",{name}:{p}")).collect();
                let mut lines = vec![
                    "process.roles=broker".to_owned(),
                    format!("listeners=PLAINTEXT://{addr}{listeners}"),
                    "inter.broker.listener.name=PLAINTEXT".into(),
                    "controller.listener.names=CONTROLLER".into(),
                    format!("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}"),
                    format!("offsets.topic.replication.factor={replication}"),
                    format!("transaction.state.log.replication.factor={replication}"),
                    format!("share.coordinator.state.topic.replication.factor={replication}"),
                    "transaction.state.log.min.isr=1".into(),
                    "offsets.topic.num.partitions=3".into(),
                    "transaction.state.log.num.partitions=3".into(),
                    "share.coordinator.state.topic.num.partitions=3".into(),
                    "group.initial.rebalance.delay.ms=0".into(),
                    "num.io.threads=2".into(),
                    "num.network.threads=2".into(),
                    "background.threads=2".into(),
                    "num.replica.fetchers=1".into(),
                    "log.cleaner.threads=1".into(),
                    "num.recovery.threads.per.data.dir=1".into(),
                    "auto.create.topics.enable=false".into(),
                ];
                lines.extend(spec.broker_properties.iter().map(|(k, v)| format!("{k}={v}")));
                node(i as i32 + 2, addr, others, lines)
            })
            .collect();
        for n in std::iter::once(&controller).chain(&brokers) {
            let props = n.properties.display().to_string();
            let mut args = vec!["format", "-t", &cluster_id, "-c", &props, "--ignore-formatted"];
            if n.id == controller.id {
                for credential in &spec.scram {
                    args.extend(["--add-scram", credential.as_str()]);
                }
            }
            tool("kafka.tools.StorageTool", &args);
        }
        let bootstrap = brokers.iter().map(|b| b.addr.clone()).collect::<Vec<_>>().join(",");
        let cluster = Self {
            dir,
            controller,
            brokers,
            bootstrap,
            cluster_id,
            jvm_flags: spec.jvm_flags,
        };
        cluster.launch(&cluster.controller);
        for b in &cluster.brokers {
            cluster.launch(b);
        }
        cluster.wait_ready(START_DEADLINE);
        cluster
    }

    /// The cluster shared by the tests of one test binary (started by the
    /// first caller with `spec`; later callers get the same cluster).
    /// Statics are never dropped: its JVMs are killed and its files removed
    /// when the test process exits.
    pub fn shared(spec: impl FnOnce() -> KafkaClusterSpec) -> &'static KafkaCluster {
        SHARED.get_or_init(|| {
            let cluster = KafkaCluster::start(spec());
            // SAFETY: registers a plain function with no arguments for exit(3).
            unsafe { libc::atexit(remove_shared_cluster) };
            cluster
        })
    }

    /// Kills every JVM of the cluster and removes its files.
    fn remove(&self) {
        for n in std::iter::once(&self.controller).chain(&self.brokers) {
            if let Some(child) = n.process.lock().unwrap_or_else(|e| e.into_inner()).take() {
                child.kill();
            }
        }
        let _ = std::fs::remove_dir_all(self.dir.path());
    }

    fn node(&self, id: i32) -> &Node {
        std::iter::once(&self.controller)
            .chain(&self.brokers)
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no Kafka node {id}"))
    }

    fn launch(&self, n: &Node) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log_file)
            .expect("kafka log file");
        let mut command = java_with("kafka.Kafka", BROKER_HEAP, self.jvm_flags);
        command
            .arg(&n.properties)
            .stdout(log.try_clone().expect("kafka log file"))
            .stderr(log);
        let child = spawn_for_process_lifetime(command, format!("kafka node {}", n.id));
        *n.process.lock().expect("node lock") = Some(child);
    }

    /// The brokers' ids.
    pub fn broker_ids(&self) -> Vec<i32> {
        self.brokers.iter().map(|b| b.id).collect()
    }

    pub fn broker_addr(&self, id: i32) -> &str {
        &self.node(id).addr
    }

    /// The process id of node `id`'s JVM (1: the controller), while it runs
    /// (for reading its CPU time from `/proc`).
    pub fn pid(&self, id: i32) -> Option<u32> {
        self.node(id)
            .process
            .lock()
            .expect("node lock")
            .as_ref()
            .map(ChildGuard::id)
    }

    /// Every broker's address on the spec's listener `name`, comma-separated.
    pub fn listener_bootstrap(&self, name: &str) -> String {
        self.brokers
            .iter()
            .map(|b| {
                b.listeners
                    .get(name)
                    .unwrap_or_else(|| panic!("no Kafka listener {name}"))
                    .as_str()
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Broker `id`'s log directory (where its `<topic>-<partition>/` are).
    pub fn log_dir(&self, id: i32) -> &Path {
        &self.node(id).log_dir
    }

    /// SIGKILLs broker `id` (an unclean stop; its files stay). The broker
    /// starts again when the returned guard is dropped or restarted.
    #[must_use = "the broker restarts when this guard is dropped"]
    pub fn kill_broker(&self, id: i32) -> BrokerDown<'_> {
        if let Some(child) = self.node(id).process.lock().expect("node lock").take() {
            child.kill();
        }
        BrokerDown {
            cluster: self,
            id,
            restarted: false,
        }
    }

    /// SIGTERM to broker `id` and waits for it to exit (a controlled
    /// shutdown). The broker starts again when the returned guard is dropped
    /// or restarted.
    #[must_use = "the broker restarts when this guard is dropped"]
    pub fn stop_broker(&self, id: i32) -> BrokerDown<'_> {
        let mut guard = self.node(id).process.lock().expect("node lock");
        if let Some(mut child) = guard.take() {
            child.signal(libc::SIGTERM);
            if child.wait_timeout(Duration::from_secs(60)).is_none() {
                child.kill();
            }
        }
        BrokerDown {
            cluster: self,
            id,
            restarted: false,
        }
    }

    /// Until every running broker is registered (the Metadata answer lists it).
    fn wait_ready(&self, deadline: Duration) {
        let started = Instant::now();
        let running: Vec<i32> = self
            .brokers
            .iter()
            .filter(|b| b.process.lock().expect("node lock").is_some())
            .map(|b| b.id)
            .collect();
        loop {
            let listed = self.registered_brokers();
            if running.iter().all(|id| listed.contains(id)) {
                return;
            }
            assert!(
                started.elapsed() < deadline,
                "Kafka brokers {running:?} not ready within {deadline:?} (registered: {listed:?})\n{}",
                self.logs_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The broker ids a Metadata answer lists (from any broker that answers).
    fn registered_brokers(&self) -> Vec<i32> {
        self.brokers
            .iter()
            .find_map(|b| process::metadata_broker_ids(&b.addr, Duration::from_secs(2)).ok())
            .unwrap_or_default()
    }

    /// The last lines of every node's log, for failure messages.
    pub fn logs_tail(&self) -> String {
        let mut out = String::new();
        for n in std::iter::once(&self.controller).chain(&self.brokers) {
            let text = std::fs::read_to_string(&n.log_file).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- kafka node {} ({}) ---\n", n.id, n.log_file.display()));
            for line in &lines[lines.len().saturating_sub(20)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Creates `topic` with `partitions`, replicated to every broker (up to
    /// 3), with `configs` — through the Java driver (Kafka's Admin).
    pub fn create_topic(&self, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
        let partitions = partitions.to_string();
        let replication = self.brokers.len().min(3).to_string();
        let configs: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec![
            "--topic",
            topic,
            "--partitions",
            &partitions,
            "--replication",
            &replication,
        ];
        for c in &configs {
            args.extend(["--config", c.as_str()]);
        }
        driver("create-topic", &self.bootstrap, &args);
    }

    /// Each partition's current leader (broker id), from Kafka's Admin.
    pub fn leaders(&self, topic: &str) -> BTreeMap<i32, i32> {
        driver("describe-topic", &self.bootstrap, &["--topic", topic])
            .iter()
            .filter_map(|line| {
                let mut f = line.split(' ');
                (f.next() == Some("partition")).then(|| {
                    let p = f.next().expect("partition").parse().expect("partition number");
                    let leader = f.next().expect("leader").parse().expect("leader id");
                    (p, leader)
                })
            })
            .collect()
    }
}

/// Spawns `command` from a thread that lives as long as the test process,
/// so `PR_SET_PDEATHSIG` ends the child with the process, not with the test
/// thread that asked for it.
fn spawn_for_process_lifetime(command: Command, what: String) -> ChildGuard {
    type Request = (Command, String, mpsc::Sender<std::io::Result<ChildGuard>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("kafka-spawner".into())
            .spawn(move || {
                for (mut command, what, reply) in rx {
                    let _ = reply.send(ChildGuard::spawn(&mut command, what));
                }
                // The senders live in a static: this thread never gets here
                // before the process ends.
                std::thread::park();
            })
            .expect("start the spawner thread");
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .expect("spawner lock")
        .send((command, what.clone(), reply))
        .expect("spawner thread alive");
    answer
        .recv()
        .expect("spawner answered")
        .unwrap_or_else(|e| panic!("start {what}: {e}"))
}

/// A broker [`KafkaCluster::stop_broker`] or [`KafkaCluster::kill_broker`]
/// took down: it starts again on [`BrokerDown::restart`] or, so that a
/// failing test does not leave the shared cluster short of a broker for the
/// tests after it, when dropped.
pub struct BrokerDown<'a> {
    cluster: &'a KafkaCluster,
    id: i32,
    restarted: bool,
}

impl BrokerDown<'_> {
    /// Starts the broker again and waits until every broker answers.
    pub fn restart(mut self) {
        self.restarted = true;
        self.cluster.launch(self.cluster.node(self.id));
        self.cluster.wait_ready(START_DEADLINE);
    }
}

impl Drop for BrokerDown<'_> {
    fn drop(&mut self) {
        if self.restarted {
            return;
        }
        self.cluster.launch(self.cluster.node(self.id));
        if !std::thread::panicking() {
            self.cluster.wait_ready(START_DEADLINE);
        }
    }
}
