//! The rdkafka family (`rdkafka-consume`, `rdkafka-mirror`) and the
//! consumer child every serving scenario reads with: an rdkafka
//! `BaseConsumer` (assign, from the beginning, no commits) reads every
//! record to the partitions' end offsets, optionally re-producing each into
//! a sink topic with a `BaseProducer` (MirrorMaker 2's path). The child
//! prints `first` at its first message, `done <value bytes> <records>` at
//! the end and then `conns` (its connections to the server: local port,
//! bytes received); `perf-kafka` runs the same child. The consumer assigns
//! its partitions itself: it never joins its group or commits offsets.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::procstat;
use ringmirror_perf::synthetic_source::SyntheticSource;

use crate::measure::Measured;
use crate::throughput::{Harness, SourceRun};
use crate::{SINK_TOPIC, TOPIC};

#[derive(clap::Args, Clone, Debug)]
pub struct RdkafkaArgs {
    #[arg(long)]
    addr: String,
    /// End offset of each partition, comma-separated.
    #[arg(long)]
    ends: String,
    /// Re-produce every record into this topic.
    #[arg(long)]
    produce_to: Option<String>,
    /// The bootstrap servers of --produce-to's cluster (default: --addr).
    #[arg(long)]
    produce_addr: Option<String>,
    #[arg(long)]
    fetch_max_wait_ms: u64,
    #[arg(long)]
    fetch_partition_max_bytes: i32,
    #[arg(long)]
    fetch_max_bytes: i32,
    /// Pin the consumer (all its threads) to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

/// The child: reads (and re-produces) everything, reporting on stdout.
pub fn child_rdkafka(a: &RdkafkaArgs) -> anyhow::Result<()> {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::{Offset, TopicPartitionList};

    let ends: Vec<i64> = a.ends.split(',').map(str::parse).collect::<Result<_, _>>()?;
    if let Some(cpu) = a.cpu {
        // Before librdkafka starts its threads, so that they inherit the mask.
        procstat::pin_current_thread(cpu);
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &a.addr)
        .set("group.id", "ringmirror-perf-baseline")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", a.fetch_max_wait_ms.to_string())
        .set("fetch.max.bytes", a.fetch_max_bytes.to_string())
        .set("max.partition.fetch.bytes", a.fetch_partition_max_bytes.to_string())
        .create()
        .context("create consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..ends.len() {
        tpl.add_partition_offset(TOPIC, p as i32, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let producer: Option<BaseProducer> = a
        .produce_to
        .as_ref()
        .map(|_| {
            ClientConfig::new()
                .set("bootstrap.servers", a.produce_addr.as_ref().unwrap_or(&a.addr))
                .set("linger.ms", "5")
                .set("acks", "all")
                .set("queue.buffering.max.kbytes", "1048576")
                .set("queue.buffering.max.messages", "1000000")
                .create()
        })
        .transpose()
        .context("create producer")?;
    let mut done = vec![false; ends.len()];
    for (p, &end) in ends.iter().enumerate() {
        done[p] = end == 0;
    }
    let (mut messages, mut bytes) = (0u64, 0u64);
    while done.iter().any(|d| !d) {
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(e)) => {
                eprintln!("consumer: {e}");
                continue;
            }
            Some(Ok(m)) => m,
        };
        if messages == 0 {
            // Starts the serving scenarios' window.
            println!("first");
        }
        let payload = message.payload().unwrap_or_default();
        let key = message.key();
        messages += 1;
        bytes += (payload.len() + key.map_or(0, <[u8]>::len)) as u64;
        let partition = message.partition();
        if let (Some(producer), Some(sink)) = (&producer, &a.produce_to) {
            let mut record = BaseRecord::<[u8], [u8]>::to(sink).partition(partition).payload(payload);
            if let Some(k) = key {
                record = record.key(k);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(1));
                    }
                    Err((e, _)) => bail!("produce: {e}"),
                }
            }
            if messages % 1024 == 0 {
                producer.poll(Duration::ZERO);
            }
        }
        let p = partition as usize;
        if message.offset() + 1 >= ends[p] {
            done[p] = true;
        }
    }
    if let Some(producer) = &producer {
        producer.flush(Duration::from_secs(120)).context("flush producer")?;
    }
    println!("done {bytes} {messages}");
    // After "done", so outside the window; while the consumer still holds
    // its connections.
    let server_port = a.addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok());
    let conns: Vec<String> = server_port
        .map(tcp_connections_to)
        .unwrap_or_default()
        .iter()
        .map(|(port, received)| format!("{port}:{received}"))
        .collect();
    println!("conns {}", conns.join(" "));
    Ok(())
}

/// A consumer's connections to its server: (local port, bytes received).
pub type Conns = Vec<(u16, u64)>;

/// This process's IPv4 TCP connections to port `server_port`, from its open
/// descriptors.
fn tcp_connections_to(server_port: u16) -> Conns {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for fd in fds
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        let (Some(local), Some(peer)) = (inet_port(fd, libc::getsockname), inet_port(fd, libc::getpeername)) else {
            continue;
        };
        if peer != server_port {
            continue;
        }
        // SAFETY: a zeroed tcp_info is valid; getsockopt writes at most `len` bytes into it.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&raw mut info).cast(), &mut len) };
        if rc == 0 {
            found.push((local, info.tcpi_bytes_received));
        }
    }
    found
}

/// The port of `fd`'s local or peer address (`get`: getsockname or
/// getpeername), if `fd` is an IPv4 socket.
fn inet_port(
    fd: i32,
    get: unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int,
) -> Option<u16> {
    // SAFETY: a zeroed sockaddr_in is valid; `get` writes at most `len` bytes
    // into it and fails on descriptors that are not sockets.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let rc = unsafe { get(fd, (&raw mut addr).cast(), &mut len) };
    (rc == 0 && addr.sin_family == libc::AF_INET as libc::sa_family_t).then(|| u16::from_be(addr.sin_port))
}

impl Harness<'_> {
    /// The rdkafka consumer child reading all of `dataset` from `addr`.
    pub fn rdkafka_command(&self, addr: &str, dataset: &Dataset, cpu: Option<usize>) -> Command {
        let ends: Vec<String> = dataset.end_offsets().iter().map(i64::to_string).collect();
        let mut cmd = Command::new(&self.exe);
        cmd.arg("rdkafka")
            .arg("--addr")
            .arg(addr)
            .arg("--ends")
            .arg(ends.join(","));
        if let Some(cpu) = cpu {
            cmd.arg("--cpu").arg(cpu.to_string());
        }
        self.fetch_args(&mut cmd);
        cmd
    }

    /// `rdkafka-consume` (`produce` false) or `rdkafka-mirror`: the child,
    /// unpinned, timed from the source's first Fetch to its "done".
    pub fn run_rdkafka(&self, produce: bool, source: &SyntheticSource, run: &SourceRun) -> anyhow::Result<Measured> {
        let mut cmd = self.rdkafka_command(&run.addr, &self.dataset, None);
        if produce {
            cmd.arg("--produce-to").arg(SINK_TOPIC);
        }
        let m = self.measure_child(cmd, source, run, "rdkafka")?;
        if produce {
            let produced = source.stats().record_bytes_produced;
            anyhow::ensure!(produced > 0, "nothing reached the sink");
        }
        Ok(m)
    }
}
