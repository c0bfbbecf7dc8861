//! `perf-kafka`: ringmirror side by side with Apache Kafka's own ways of
//! copying a topic, in one run, from one source cluster and one data set.
//!
//! The run starts a KRaft source cluster (`ringmirror-kafka-harness`, the
//! tests' cluster, with the JVM settings of Kafka's own scripts): broker 2
//! leads every partition of the topic, broker 3 is an empty, idle broker.
//! Kafka's `ProducerPerformance` loads `--size-mb` into the topic; then each
//! mechanism copies all of it, one after the other:
//!
//! * `ringmirror` — `ringmirror run` (a child process) mirroring the topic;
//!   done when its listener's high watermarks are the source's; afterwards
//!   its `.log` files are compared byte-for-byte with the leader's.
//! * `follower` — Kafka's replica fetcher: a reassignment adds broker 3 to
//!   every partition's replicas; done when broker 3 is in every ISR.
//! * `mirrormaker2` — MirrorMaker 2 in dedicated mode
//!   (`org.apache.kafka.connect.mirror.MirrorMaker`) into a second,
//!   single-broker cluster; done when the target topic has every record.
//! * `rdkafka` — `perf-mirror`'s rdkafka consumer → producer baseline into
//!   the same second cluster.
//!
//! Each is measured over its window, from the first record (or byte) seen
//! at the destination to the last, with CPU from `/proc/<pid>/stat` of every
//! process involved: the mechanism's own (agent; follower JVM; MM2 JVM and
//! the destination broker; rdkafka child and the destination broker) and the
//! source leader's. Rates are per GB (10^9 bytes) of the leader's `.log`
//! files. The machine is shared and noisy: the table gives ratios measured
//! side by side, never a bound on absolute time. On stderr, each window also
//! says where its first process's CPU went, by thread name (shard, replica
//! fetcher, JIT compiler, GC …).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use ringmirror_kafka_harness::{self as kafka, ChildGuard, KAFKA_JVM_FLAGS, KafkaCluster, KafkaClusterSpec};
use ringmirror_perf::log_files::{check_logs_hold, log_files};
use ringmirror_perf::procstat::{self, ProcStat};
use ringmirror_perf::summary::{cpu_s_per_gb, loadavg, mb_per_s};

/// The source topic: the name `perf-mirror`'s rdkafka child reads.
const TOPIC: &str = "perf-source";
/// The topic the rdkafka baseline produces into at the destination.
const SINK_TOPIC: &str = "perf-sink";
/// MirrorMaker 2's names for the two clusters; its default replication
/// policy names the target topic `<source alias>.<topic>`.
const MM2_SOURCE: &str = "source";
const MM2_TARGET: &str = "target";
/// The source broker leading every partition, and the empty one that
/// becomes their follower (node 1 is the controller).
const LEADER: i32 = 2;
const FOLLOWER: i32 = 3;
/// How often a window's progress is looked at. Each look is a few requests
/// to the destination (ListOffsets, Metadata), whose CPU the window counts:
/// not too often.
const POLL: Duration = Duration::from_millis(50);
/// Bounds one client request of the harness (watermarks, metadata).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Bounds a child's exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Parser)]
#[command(about = "ringmirror vs a Kafka follower, MirrorMaker 2 and an rdkafka consumer → producer, one run")]
struct Args {
    /// MiB of records (values) loaded into the source topic.
    #[arg(long, default_value_t = 1024)]
    size_mb: u64,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Value bytes per record.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// The loading producer's `batch.size` (Kafka's default: 16 KiB).
    #[arg(long, default_value_t = 16384)]
    batch_bytes: usize,
    /// Comma-separated mechanisms, run in this order.
    #[arg(long, default_value = "ringmirror,follower,mirrormaker2,rdkafka")]
    scenarios: String,
    /// The agent's shards; MirrorMaker 2 gets as many tasks (`tasks.max`).
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// The ringmirror binary (default: next to this one).
    #[arg(long)]
    ringmirror: Option<PathBuf>,
    /// The perf-mirror binary, for the rdkafka baseline (default: next to this one).
    #[arg(long)]
    perf_mirror: Option<PathBuf>,
    /// Heap of the MirrorMaker 2 and loading producer JVMs (brokers: the harness's).
    #[arg(long, default_value = "-Xmx384m")]
    heap: String,
    /// Extra mm2.properties lines, `key=value`, repeatable.
    #[arg(long)]
    mm2_setting: Vec<String>,
    /// Gives up on one mechanism after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Where the agent's data dir and the logs go (default: a temp dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mechanism {
    Ringmirror,
    Follower,
    MirrorMaker2,
    Rdkafka,
}

impl Mechanism {
    fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "ringmirror" => Self::Ringmirror,
            "follower" => Self::Follower,
            "mirrormaker2" => Self::MirrorMaker2,
            "rdkafka" => Self::Rdkafka,
            other => bail!("unknown scenario {other:?} (ringmirror, follower, mirrormaker2, rdkafka)"),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Ringmirror => "ringmirror",
            Self::Follower => "follower",
            Self::MirrorMaker2 => "mirrormaker2",
            Self::Rdkafka => "rdkafka",
        }
    }
}

/// A process whose CPU a window counts.
struct Probe {
    name: String,
    pid: u32,
}

/// One mechanism's measured window.
#[derive(Debug, Clone)]
struct Row {
    mechanism: Mechanism,
    /// From starting the mechanism to the first record at the destination.
    startup: Duration,
    /// From the first record at the destination to the last.
    wall: Duration,
    /// CPU of each of the mechanism's processes over the window.
    cpu: Vec<(String, Duration)>,
    /// CPU of the source leader over the window (serving the copy).
    source_cpu: Duration,
    /// Busy CPU of the whole machine over the window (all processes).
    machine_cpu: Duration,
}

impl Row {
    fn mechanism_cpu(&self) -> Duration {
        self.cpu.iter().map(|(_, c)| *c).sum()
    }
}

/// A window's progress, as its poll function sees it.
enum Progress {
    /// Nothing at the destination yet.
    Waiting,
    /// Some but not all of it.
    Started,
    Done,
}

/// Polls `progress` until done and samples `probes`, the source leader and
/// the machine when the first data shows and when the last does.
fn measure(
    mechanism: Mechanism,
    started: Instant,
    probes: &[Probe],
    source: &Probe,
    timeout: Duration,
    mut progress: impl FnMut() -> anyhow::Result<Progress>,
) -> anyhow::Result<Row> {
    let sample = || -> anyhow::Result<(Instant, Vec<ProcStat>, ProcStat, Duration)> {
        let stats = probes
            .iter()
            .map(|p| procstat::read(p.pid).with_context(|| format!("{} exited", p.name)))
            .collect::<anyhow::Result<_>>()?;
        let source = procstat::read(source.pid).context("the source leader exited")?;
        Ok((Instant::now(), stats, source, procstat::machine_busy()))
    };
    let mut first = None;
    let mut threads0 = Vec::new();
    loop {
        let p = progress()?;
        if first.is_none() && !matches!(p, Progress::Waiting) {
            first = Some(sample()?);
            threads0 = procstat::read_threads(probes[0].pid)?;
        }
        if let (Progress::Done, Some((t0, stats0, source0, busy0))) = (&p, &first) {
            let (t1, stats1, source1, busy1) = sample()?;
            eprintln!(
                "{} CPU by thread: {}",
                probes[0].name,
                busiest_threads(&threads0, &procstat::read_threads(probes[0].pid)?)
            );
            return Ok(Row {
                mechanism,
                startup: t0.duration_since(started),
                wall: t1.duration_since(*t0),
                cpu: probes
                    .iter()
                    .zip(stats1.iter().zip(stats0))
                    .map(|(p, (b, a))| (p.name.clone(), b.since(a).cpu()))
                    .collect(),
                source_cpu: source1.since(source0).cpu(),
                machine_cpu: busy1.saturating_sub(*busy0),
            });
        }
        anyhow::ensure!(
            started.elapsed() < timeout,
            "{} not done after {timeout:?}",
            mechanism.name()
        );
        std::thread::sleep(POLL);
    }
}

/// The busiest thread names between two `procstat::read_threads` readings
/// (CPU summed over the live threads of one name; a thread that exited in
/// between is missed): where a process's CPU went.
fn busiest_threads(before: &[(String, ProcStat)], after: &[(String, ProcStat)]) -> String {
    let by_name = |threads: &[(String, ProcStat)]| {
        let mut sums = std::collections::BTreeMap::<String, Duration>::new();
        for (name, stat) in threads {
            *sums.entry(name.clone()).or_default() += stat.cpu();
        }
        sums
    };
    let before = by_name(before);
    let mut used: Vec<(String, Duration)> = by_name(after)
        .into_iter()
        .map(|(name, cpu)| {
            let earlier = before.get(&name).copied().unwrap_or_default();
            (name, cpu.saturating_sub(earlier))
        })
        .collect();
    used.sort_by_key(|(_, cpu)| std::cmp::Reverse(*cpu));
    used.iter()
        .take(6)
        .map(|(name, cpu)| format!("{name} {:.2} s", cpu.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A plain client of `bootstrap` for watermarks and metadata.
fn client(bootstrap: &str) -> anyhow::Result<BaseConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "ringmirror-perf-kafka-probe")
        .set("enable.auto.commit", "false")
        .create()
        .with_context(|| format!("client of {bootstrap}"))
}

/// Each partition's high watermark of `topic` (0 where not answered yet).
fn high_watermarks(client: &BaseConsumer, topic: &str, partitions: i32) -> Vec<i64> {
    (0..partitions)
        .map(|p| {
            client
                .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
                .map_or(0, |(_, high)| high)
        })
        .collect()
}

/// The progress of copying `ends` into `topic` as `client` sees its high watermarks.
fn watermark_progress(client: &BaseConsumer, topic: &str, ends: &[i64]) -> Progress {
    let highs = high_watermarks(client, topic, ends.len() as i32);
    if highs.iter().all(|&h| h == 0) {
        Progress::Waiting
    } else if highs.as_slice() == ends {
        Progress::Done
    } else {
        Progress::Started
    }
}

/// The `<topic>-<partition>/*.log` files of `topic` under `log_dir`, by
/// partition, in offset order.
fn partition_logs(log_dir: &Path, topic: &str, partitions: i32) -> anyhow::Result<Vec<Vec<PathBuf>>> {
    (0..partitions)
        .map(|p| log_files(&log_dir.join(format!("{topic}-{p}"))))
        .collect()
}

/// Bytes of `topic`'s `.log` files under `log_dir`.
fn log_bytes(log_dir: &Path, topic: &str, partitions: i32) -> anyhow::Result<u64> {
    let mut total = 0;
    for path in partition_logs(log_dir, topic, partitions)?.iter().flatten() {
        total += std::fs::metadata(path)?.len();
    }
    Ok(total)
}

/// Whether `ours` holds, partition by partition, exactly the batches of
/// `kafka`'s `.log` files (ours may end in zeroed, reserved space).
fn same_logs(ours: &Path, kafka: &Path, partitions: i32) -> anyhow::Result<()> {
    let ours = partition_logs(ours, TOPIC, partitions)?;
    let theirs = partition_logs(kafka, TOPIC, partitions)?;
    for (p, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
        let mut leader = Vec::new();
        for path in theirs {
            leader.extend(std::fs::read(path)?);
        }
        check_logs_hold(ours, &leader).with_context(|| format!("partition {p}: ours against the leader's"))?;
    }
    Ok(())
}

/// Sends SIGTERM and waits (bounded) for `child` to exit.
fn stop(mut child: ChildGuard) {
    child.signal(libc::SIGTERM);
    if child.wait_timeout(STOP_TIMEOUT).is_none() {
        child.kill();
    }
}

/// A binary next to this one.
fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    Ok(std::env::current_exe()?.with_file_name(name))
}

struct Run<'a> {
    args: &'a Args,
    work: PathBuf,
    source: KafkaCluster,
    /// The second cluster, started when a mechanism first needs it.
    destination: Option<KafkaCluster>,
    /// The source topic's end offsets once loaded.
    ends: Vec<i64>,
    /// Bytes of the leader's `.log` files of the topic: the GB of "per GB".
    bytes: u64,
}

impl Run<'_> {
    fn leader(&self) -> anyhow::Result<Probe> {
        Ok(Probe {
            name: "source leader".into(),
            pid: self.source.pid(LEADER).context("the source leader is not running")?,
        })
    }

    /// The second cluster (1 broker), started on first use.
    fn destination(&mut self) -> &KafkaCluster {
        self.destination.get_or_insert_with(|| {
            eprintln!("starting the destination cluster (controller + broker 2) …");
            KafkaCluster::start(KafkaClusterSpec {
                brokers: 1,
                cluster_id: "cmluZ21pcnJvci1wZXJmLWRzdA".into(),
                jvm_flags: KAFKA_JVM_FLAGS,
                ..KafkaClusterSpec::default()
            })
        });
        self.destination.as_ref().expect("just started")
    }

    /// Creates the topic with every partition on the leader alone and
    /// loads it with Kafka's `ProducerPerformance`.
    fn load(&mut self) -> anyhow::Result<Duration> {
        let a = self.args;
        let assignment = vec![LEADER.to_string(); a.partitions as usize].join(",");
        kafka::tool(
            "org.apache.kafka.tools.TopicCommand",
            &[
                "--bootstrap-server",
                &self.source.bootstrap,
                "--create",
                "--topic",
                TOPIC,
                "--replica-assignment",
                &assignment,
            ],
        );
        let records = (a.size_mb << 20) / a.record_bytes as u64;
        let mut command = kafka::java_with("org.apache.kafka.tools.ProducerPerformance", &a.heap, KAFKA_JVM_FLAGS);
        command
            .args(["--topic", TOPIC, "--num-records", &records.to_string()])
            .args(["--record-size", &a.record_bytes.to_string(), "--throughput", "-1"])
            .arg("--producer-props")
            .arg(format!("bootstrap.servers={}", self.source.bootstrap))
            .args(["acks=1", "linger.ms=5", "compression.type=none"])
            .arg(format!("batch.size={}", a.batch_bytes))
            .stdout(std::fs::File::create(self.work.join("load.log"))?)
            .stderr(std::fs::File::create(self.work.join("load.err"))?);
        let started = Instant::now();
        let mut producer = ChildGuard::spawn(&mut command, "ProducerPerformance")?;
        let status = producer
            .wait_timeout(Duration::from_secs(a.timeout_s))
            .context("loading timed out")?;
        anyhow::ensure!(
            status.success(),
            "ProducerPerformance failed: see {}",
            self.work.display()
        );
        let took = started.elapsed();
        let probe = client(&self.source.bootstrap)?;
        self.ends = high_watermarks(&probe, TOPIC, a.partitions);
        anyhow::ensure!(
            self.ends.iter().sum::<i64>() == records as i64,
            "the topic holds {:?} records, {records} were produced",
            self.ends
        );
        self.bytes = log_bytes(self.source.log_dir(LEADER), TOPIC, a.partitions)?;
        Ok(took)
    }

    fn run(&mut self, mechanism: Mechanism) -> anyhow::Result<Row> {
        match mechanism {
            Mechanism::Ringmirror => self.ringmirror(),
            Mechanism::Follower => self.follower(),
            Mechanism::MirrorMaker2 => self.mirrormaker2(),
            Mechanism::Rdkafka => self.rdkafka(),
        }
    }

    fn ringmirror(&mut self) -> anyhow::Result<Row> {
        let a = self.args;
        let data_dir = self.work.join("ringmirror-data");
        let listener = kafka::free_addr();
        let config = format!(
            "data_dir = {data_dir:?}\nshards = {}\n\n[listener]\naddress = {listener:?}\n\n[[mirror]]\n\
             name = \"perf\"\nbootstrap_servers = [{:?}]\ntopics = [{TOPIC:?}]\n",
            a.shards, self.source.bootstrap
        );
        let config_path = self.work.join("ringmirror.toml");
        std::fs::write(&config_path, config)?;
        let ringmirror = a.ringmirror.clone().map_or_else(|| sibling("ringmirror"), Ok)?;
        let mut command = Command::new(&ringmirror);
        command
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.work.join("ringmirror.log"))?);
        let started = Instant::now();
        let agent = ChildGuard::spawn(&mut command, "ringmirror run")
            .with_context(|| format!("start {}", ringmirror.display()))?;
        let probes = [Probe {
            name: "agent".into(),
            pid: agent.id(),
        }];
        let at_agent = client(&listener)?;
        let row = measure(
            Mechanism::Ringmirror,
            started,
            &probes,
            &self.leader()?,
            Duration::from_secs(a.timeout_s),
            || Ok(watermark_progress(&at_agent, TOPIC, &self.ends)),
        );
        stop(agent);
        let row = row?;
        same_logs(&data_dir, self.source.log_dir(LEADER), a.partitions).context("mirrored data")?;
        Ok(row)
    }

    fn follower(&mut self) -> anyhow::Result<Row> {
        let a = self.args;
        let partitions: Vec<String> = (0..a.partitions)
            .map(|p| format!(r#"{{"topic":"{TOPIC}","partition":{p},"replicas":[{LEADER},{FOLLOWER}]}}"#))
            .collect();
        let plan = self.work.join("reassignment.json");
        std::fs::write(
            &plan,
            format!(r#"{{"version":1,"partitions":[{}]}}"#, partitions.join(",")),
        )?;
        let bootstrap = self.source.bootstrap.clone();
        let plan_arg = plan.display().to_string();
        let started = Instant::now();
        // A JVM of its own, run beside the window: it submits the plan and exits.
        let reassign = std::thread::spawn(move || {
            kafka::tool(
                "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--reassignment-json-file",
                    &plan_arg,
                    "--execute",
                ],
            )
        });
        let probes = [Probe {
            name: "follower broker".into(),
            pid: self.source.pid(FOLLOWER).context("the follower is not running")?,
        }];
        let metadata = client(&self.source.bootstrap)?;
        let follower_dir = self.source.log_dir(FOLLOWER).to_path_buf();
        let row = measure(
            Mechanism::Follower,
            started,
            &probes,
            &self.leader()?,
            Duration::from_secs(a.timeout_s),
            || {
                let created = (0..a.partitions).any(|p| follower_dir.join(format!("{TOPIC}-{p}")).exists());
                if !created {
                    return Ok(Progress::Waiting);
                }
                let md = metadata.fetch_metadata(Some(TOPIC), REQUEST_TIMEOUT)?;
                let in_sync = md.topics().iter().all(|t| {
                    t.partitions().len() == a.partitions as usize
                        && t.partitions().iter().all(|p| p.isr().contains(&FOLLOWER))
                });
                Ok(if in_sync { Progress::Done } else { Progress::Started })
            },
        )?;
        reassign
            .join()
            .map_err(|_| anyhow::anyhow!("the reassignment tool failed"))?;
        let copied = log_bytes(&follower_dir, TOPIC, a.partitions)?;
        anyhow::ensure!(
            copied == self.bytes,
            "the follower holds {copied} bytes, the leader {}",
            self.bytes
        );
        Ok(row)
    }

    fn mirrormaker2(&mut self) -> anyhow::Result<Row> {
        let a = self.args;
        let source = self.source.bootstrap.clone();
        self.destination();
        let destination = self.destination.as_ref().expect("started");
        let mut lines = vec![
            format!("clusters = {MM2_SOURCE}, {MM2_TARGET}"),
            format!("{MM2_SOURCE}.bootstrap.servers = {source}"),
            format!("{MM2_TARGET}.bootstrap.servers = {}", destination.bootstrap),
            format!("{MM2_SOURCE}->{MM2_TARGET}.enabled = true"),
            format!("{MM2_SOURCE}->{MM2_TARGET}.topics = {TOPIC}"),
            format!("{MM2_TARGET}->{MM2_SOURCE}.enabled = false"),
            format!("tasks.max = {}", a.shards),
            // Single-broker destination; the source's internal topics too.
            "replication.factor = 1".into(),
            "offset-syncs.topic.replication.factor = 1".into(),
            "heartbeats.topic.replication.factor = 1".into(),
            "checkpoints.topic.replication.factor = 1".into(),
            "offset.storage.replication.factor = 1".into(),
            "status.storage.replication.factor = 1".into(),
            "config.storage.replication.factor = 1".into(),
            // Only records: no config, ACL or group sync, no heartbeats.
            "sync.topic.configs.enabled = false".into(),
            "sync.topic.acls.enabled = false".into(),
            "emit.heartbeats.enabled = false".into(),
            "emit.checkpoints.enabled = false".into(),
            "sync.group.offsets.enabled = false".into(),
        ];
        lines.extend(a.mm2_setting.iter().map(|kv| kv.replacen('=', " = ", 1)));
        let properties = self.work.join("mm2.properties");
        std::fs::write(&properties, lines.join("\n") + "\n")?;
        let target = client(&destination.bootstrap)?;
        let destination_broker = Probe {
            name: "destination broker".into(),
            pid: destination.pid(2).context("the destination broker is not running")?,
        };
        let mut command = kafka::java_with("org.apache.kafka.connect.mirror.MirrorMaker", &a.heap, KAFKA_JVM_FLAGS);
        command
            .arg(&properties)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.work.join("mm2.log"))?);
        let started = Instant::now();
        let mm2 = ChildGuard::spawn(&mut command, "MirrorMaker 2")?;
        let probes = [
            Probe {
                name: "MM2".into(),
                pid: mm2.id(),
            },
            destination_broker,
        ];
        let target_topic = format!("{MM2_SOURCE}.{TOPIC}");
        let row = measure(
            Mechanism::MirrorMaker2,
            started,
            &probes,
            &self.leader()?,
            Duration::from_secs(a.timeout_s),
            || Ok(watermark_progress(&target, &target_topic, &self.ends)),
        );
        stop(mm2);
        row
    }

    fn rdkafka(&mut self) -> anyhow::Result<Row> {
        let a = self.args;
        let partitions = a.partitions;
        let source = self.source.bootstrap.clone();
        let destination = self.destination();
        destination.create_topic(SINK_TOPIC, partitions, &[]);
        let destination_bootstrap = destination.bootstrap.clone();
        let destination_broker = Probe {
            name: "destination broker".into(),
            pid: destination.pid(2).context("the destination broker is not running")?,
        };
        let perf_mirror = a.perf_mirror.clone().map_or_else(|| sibling("perf-mirror"), Ok)?;
        let ends: Vec<String> = self.ends.iter().map(i64::to_string).collect();
        let mut command = Command::new(&perf_mirror);
        command
            .args(["rdkafka", "--addr", &source, "--ends", &ends.join(",")])
            .args(["--produce-to", SINK_TOPIC, "--produce-addr", &destination_bootstrap])
            // librdkafka's defaults.
            .args(["--fetch-max-wait-ms", "500", "--fetch-partition-max-bytes", "1048576"])
            .args(["--fetch-max-bytes", "52428800"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.work.join("rdkafka.log"))?);
        let started = Instant::now();
        let mut child = ChildGuard::spawn(&mut command, "rdkafka consumer → producer")
            .with_context(|| format!("start {}", perf_mirror.display()))?;
        let stdout = child.child().stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let probes = [
            Probe {
                name: "rdkafka".into(),
                pid: child.id(),
            },
            destination_broker,
        ];
        let (mut first, mut done) = (false, None);
        let row = measure(
            Mechanism::Rdkafka,
            started,
            &probes,
            &self.leader()?,
            Duration::from_secs(a.timeout_s),
            || {
                for line in lines.try_iter() {
                    first |= line == "first";
                    if line.starts_with("done ") {
                        done = Some(line);
                    }
                }
                Ok(match (first, &done) {
                    (_, Some(_)) => Progress::Done,
                    (true, None) => Progress::Started,
                    (false, None) => Progress::Waiting,
                })
            },
        );
        let status = child
            .wait_timeout(STOP_TIMEOUT)
            .context("the rdkafka child did not exit")?;
        let row = row?;
        anyhow::ensure!(status.success(), "the rdkafka child failed ({status})");
        let records: i64 = done
            .as_deref()
            .and_then(|d| d.split_whitespace().nth(2)?.parse().ok())
            .context("no record count in the child's done line")?;
        anyhow::ensure!(
            records == self.ends.iter().sum::<i64>(),
            "the rdkafka child copied {records} records"
        );
        Ok(row)
    }
}

/// The table, then each goal of issue 16 against what was measured.
fn report(rows: &[Row], bytes: u64) -> String {
    let ours = rows.iter().find(|r| r.mechanism == Mechanism::Ringmirror);
    let mut out = String::from(
        "| mechanism | MB/s | start → first s | first → all s | CPU s/GB | CPU × ringmirror | processes (CPU s/GB) | \
         source leader CPU s/GB | machine CPU s/GB |\n| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n",
    );
    for r in rows {
        let cpu = cpu_s_per_gb(r.mechanism_cpu(), bytes);
        let ratio = ours.map_or(f64::NAN, |o| cpu / cpu_s_per_gb(o.mechanism_cpu(), bytes));
        let processes: Vec<String> = r
            .cpu
            .iter()
            .map(|(name, c)| format!("{name} {:.3}", cpu_s_per_gb(*c, bytes)))
            .collect();
        out.push_str(&format!(
            "| {} | {:.0} | {:.1} | {:.1} | {cpu:.3} | {ratio:.2} | {} | {:.3} | {:.3} |\n",
            r.mechanism.name(),
            mb_per_s(bytes, r.wall),
            r.startup.as_secs_f64(),
            r.wall.as_secs_f64(),
            processes.join(", "),
            cpu_s_per_gb(r.source_cpu, bytes),
            cpu_s_per_gb(r.machine_cpu, bytes),
        ));
    }
    if let Some(ours) = ours {
        for line in goals(ours, rows) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// Issue 16's goals, each with the ratio measured.
fn goals(ours: &Row, rows: &[Row]) -> Vec<String> {
    let find = |m: Mechanism| rows.iter().find(|r| r.mechanism == m);
    let cpu = |r: &Row| r.mechanism_cpu().as_secs_f64();
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let mut lines = Vec::new();
    if let Some(f) = find(Mechanism::Follower) {
        let ratio = cpu(ours) / cpu(f);
        lines.push(format!(
            "ringmirror CPU / follower CPU = {ratio:.2} (goal ≤ 0.5: {})",
            verdict(ratio <= 0.5)
        ));
    }
    if let Some(m) = find(Mechanism::MirrorMaker2) {
        let ratio = cpu(m) / cpu(ours);
        let speed = m.wall.as_secs_f64() / ours.wall.as_secs_f64();
        lines.push(format!(
            "MM2 + destination CPU / ringmirror CPU = {ratio:.1} (goal ≥ 10: {}); ringmirror MB/s / MM2 MB/s = {speed:.2} (goal > 1: {})",
            verdict(ratio >= 10.0),
            verdict(speed > 1.0)
        ));
    }
    lines
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mechanisms = args
        .scenarios
        .split(',')
        .map(Mechanism::parse)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let temp;
    let work = match &args.work_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            dir.clone()
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    eprintln!("starting the source cluster (controller + brokers {LEADER}, {FOLLOWER}) …");
    let source = KafkaCluster::start(KafkaClusterSpec {
        brokers: 2,
        jvm_flags: KAFKA_JVM_FLAGS,
        ..KafkaClusterSpec::default()
    });
    let mut run = Run {
        args: &args,
        work,
        source,
        destination: None,
        ends: Vec::new(),
        bytes: 0,
    };
    let load = run.load()?;
    eprintln!(
        "loaded {} records, {} bytes of batches in {:.1} s ({:.0} MB/s); work dir {}",
        run.ends.iter().sum::<i64>(),
        run.bytes,
        load.as_secs_f64(),
        mb_per_s(run.bytes, load),
        run.work.display()
    );
    let mut rows = Vec::new();
    for m in mechanisms {
        eprintln!("{} …", m.name());
        let row = run.run(m).with_context(|| m.name())?;
        eprintln!(
            "{}: {:.0} MB/s, {:.3} CPU s/GB",
            m.name(),
            mb_per_s(run.bytes, row.wall),
            cpu_s_per_gb(row.mechanism_cpu(), run.bytes)
        );
        rows.push(row);
    }
    println!(
        "{} partitions, {} records of {} B, {} bytes of batches; {}",
        args.partitions,
        run.ends.iter().sum::<i64>(),
        args.record_bytes,
        run.bytes,
        procstat_machine()
    );
    print!("{}", report(&rows, run.bytes));
    Ok(())
}

/// CPUs and load average, for the record of a run.
fn procstat_machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpus} CPUs, load average {}", loadavg())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mechanism: Mechanism, wall_s: u64, cpu_s: &[u64]) -> Row {
        Row {
            mechanism,
            startup: Duration::from_secs(1),
            wall: Duration::from_secs(wall_s),
            cpu: cpu_s
                .iter()
                .map(|&c| ("p".to_owned(), Duration::from_secs(c)))
                .collect(),
            source_cpu: Duration::from_secs(1),
            machine_cpu: Duration::from_secs(wall_s * 2),
        }
    }

    #[test]
    fn goals_compare_the_sum_of_each_mechanisms_processes() {
        let rows = [
            row(Mechanism::Ringmirror, 2, &[1]),
            row(Mechanism::Follower, 4, &[3]),
            row(Mechanism::MirrorMaker2, 10, &[8, 4]),
        ];
        let lines = goals(&rows[0], &rows);
        assert_eq!(lines[0], "ringmirror CPU / follower CPU = 0.33 (goal ≤ 0.5: met)");
        assert_eq!(
            lines[1],
            "MM2 + destination CPU / ringmirror CPU = 12.0 (goal ≥ 10: met); ringmirror MB/s / MM2 MB/s = 5.00 (goal > 1: met)"
        );
        let table = report(&rows, 1_000_000_000);
        assert!(
            table.contains("| mirrormaker2 | 100 | 1.0 | 10.0 | 12.000 | 12.00 | p 8.000, p 4.000 | 1.000 | 20.000 |")
        );
    }
}
