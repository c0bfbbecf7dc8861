//! The serving family: consumers reading a whole topic from a server —
//! the agent's listener (`serve-zero-copy`, `serve-copy`, and with 2 shards
//! and several consumers `serve-2c-*`), the synthetic source
//! (`synthetic-consume*`) or librdkafka's mock (`mock-consume`, with
//! [`crate::mock`]). It starts the server, runs the consumers, checks what
//! each read and, for the agent, finds from its debug log which shard
//! served which connection. The window is the consumers'
//! ([`crate::measure::measure_consumers`]); this module never times.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ringmirror_dataplane::kafka::AcceptMode;
use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::synthetic_source::{SourceOptions, SyntheticSource};

use crate::SINK_TOPIC;
use crate::measure::{Measured, ServerProbe, measure_consumers};
use crate::mock::produce_into;
use crate::process::{Watched, exited_unreaped, log_tail, spawn_watched, wait_exit};
use crate::rdkafka::Conns;
use crate::throughput::{Harness, Server};

/// Where every server of the consumer scenarios runs: the agent's shard 0 is
/// pinned there, so the synthetic source and the mock are too.
pub const SERVER_CPU: usize = 0;

/// How long a server may take to start listening.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The agent's shards in the `serve-2c-*` scenarios: one per core of the
/// 2-CPU machine these were written for.
pub const SERVE_MANY_SHARDS: usize = 2;
/// The agent's log filter in the serving scenarios: its default plus the
/// listener's debug lines, which name the shard serving each connection.
const AGENT_SERVE_LOG_FILTER: &str = "warn,ringmirror=info,ringmirror_dataplane::kafka::listener=debug";

/// Where an agent served its client connections (from its debug log).
#[derive(Debug, Clone)]
pub struct Spread {
    /// Connections each shard served; the harness's readiness probe is left out.
    pub connections: Vec<usize>,
    /// Per consumer: the shard that served its connection with the most bytes
    /// received (the one its Fetch requests went on), if the log names it.
    fetch_shards: Vec<Option<usize>>,
}

impl Spread {
    /// Connections per shard, "shard 0 / shard 1 / …".
    pub fn per_shard(&self) -> String {
        let counts: Vec<String> = self.connections.iter().map(usize::to_string).collect();
        counts.join(" / ")
    }

    /// The consumers' Fetch connections per shard, "shard 0 / shard 1 / …",
    /// and how many the log did not name.
    pub fn fetch_per_shard(&self) -> String {
        let mut counts = vec![0; self.connections.len()];
        for shard in self.fetch_shards.iter().flatten() {
            counts[*shard] += 1;
        }
        let counts: Vec<String> = counts.iter().map(usize::to_string).collect();
        let unknown = self.fetch_shards.iter().filter(|s| s.is_none()).count();
        if unknown > 0 {
            format!("{} ({unknown} not found)", counts.join(" / "))
        } else {
            counts.join(" / ")
        }
    }
}

/// Checks a consumer's `done <value bytes> <records>` line against the dataset.
fn check_consumed(done: &str, dataset: &Dataset) -> anyhow::Result<()> {
    let mut fields = done.split_whitespace().skip(1).map(str::parse::<u64>);
    let (Some(Ok(bytes)), Some(Ok(records))) = (fields.next(), fields.next()) else {
        bail!("cannot read the consumer's {done:?}");
    };
    let want_records = dataset.total_records();
    let want_bytes = want_records * dataset.spec.record_bytes as u64;
    anyhow::ensure!(
        (bytes, records) == (want_bytes, want_records),
        "the consumer read {records} records, {bytes} value bytes; the dataset has {want_records}, {want_bytes}"
    );
    Ok(())
}

/// A port free on 127.0.0.1 right now (the agent needs one in its config).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `addr` accepts connections, or the server exits; returns the
/// local port of the connection that got through (the server counts it too).
fn wait_listening(addr: &str, server: &Watched) -> anyhow::Result<u16> {
    let deadline = Instant::now() + SERVER_START_TIMEOUT;
    loop {
        if let Ok(probe) = std::net::TcpStream::connect(addr) {
            return Ok(probe.local_addr()?.port());
        }
        anyhow::ensure!(
            !exited_unreaped(server.child.id()),
            "the server exited; its log:\n{}",
            log_tail(&server.log)
        );
        anyhow::ensure!(Instant::now() < deadline, "{addr} did not accept connections");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Client port → serving shard, from the agent's "client connected" lines
/// (`peer="127.0.0.1:<port>" shard=<i>`), in the order they were logged.
fn connections_in_log(log: &Path) -> anyhow::Result<Vec<(u16, usize)>> {
    let text = std::fs::read_to_string(log).with_context(|| format!("read {}", log.display()))?;
    text.lines()
        .filter(|line| line.contains("client connected"))
        .map(|line| {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(|v| v.trim_matches('"'))
            };
            let port = field("peer=").and_then(|p| p.rsplit_once(':')?.1.parse().ok());
            let shard = field("shard=").and_then(|s| s.parse().ok());
            port.zip(shard)
                .with_context(|| format!("cannot read the agent's log line {line:?}"))
        })
        .collect()
}

/// Where the agent whose log is `agent_log` served its connections; `probe`
/// is the harness's readiness check, `conns` each consumer's "conns" report.
fn spread_of(agent_log: &Path, shards: usize, probe: u16, conns: &[Conns]) -> anyhow::Result<Spread> {
    let served = connections_in_log(agent_log)?;
    let mut connections = vec![0; shards];
    for &(_, shard) in served.iter().filter(|(port, _)| *port != probe) {
        *connections
            .get_mut(shard)
            .with_context(|| format!("the agent logged shard {shard} of {shards}"))? += 1;
    }
    let fetch_shards = conns
        .iter()
        .map(|c| {
            let (port, _) = c.iter().max_by_key(|(_, received)| *received)?;
            // The last use of a port is this consumer's (ports can be reused).
            served.iter().rev().find(|(p, _)| p == port).map(|&(_, shard)| shard)
        })
        .collect();
    Ok(Spread {
        connections,
        fetch_shards,
    })
}

/// A consumer's `conns <port>:<bytes received> …` line.
fn parse_conns(line: &str) -> anyhow::Result<Conns> {
    line.split_whitespace()
        .skip(1)
        .map(|c| {
            let (port, received) = c.split_once(':').context("port:bytes")?;
            Ok((port.parse()?, received.parse()?))
        })
        .collect::<anyhow::Result<_>>()
        .with_context(|| format!("cannot read the consumer's {line:?}"))
}

/// Removes the consumer-group state an earlier serving agent left in
/// `data_dir`. Every shard opens a group offsets log at start, and an agent
/// refuses another shard count once such logs exist, so the 1- and 2-shard
/// scenarios could not take turns on one data dir otherwise. The consumers
/// commit nothing, so the logs are empty; removing them every time also
/// starts every run from the same state.
fn forget_groups(data_dir: &Path) -> anyhow::Result<()> {
    let dir = data_dir.join(ringmirror::agent::AGENT_STATE_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("group-offsets-") {
            std::fs::remove_dir_all(entry.path())?;
        } else if name == "group-shards" {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

impl Harness<'_> {
    /// Runs `consumers` consumers at once (pinned to `cpu`, if given), each
    /// reading all of `dataset` from a started server, and checks what each
    /// read; also returns each one's connections (`conns`).
    fn consume(
        &self,
        addr: &str,
        dataset: &Dataset,
        server: &ServerProbe,
        run_dir: &Path,
        (consumers, cpu): (usize, Option<usize>),
    ) -> anyhow::Result<(Measured, Vec<Conns>)> {
        let mut ws = (0..consumers)
            .map(|i| {
                let log = run_dir.join(format!("consumer-{i}.log"));
                spawn_watched(self.rdkafka_command(addr, dataset, cpu), &log)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let m = measure_consumers(
            &mut ws,
            server,
            consumers as u64 * dataset.total_bytes(),
            Duration::from_secs(self.args.timeout_s),
        );
        let statuses = ws
            .iter_mut()
            .map(|w| wait_exit(&mut w.child, Duration::from_secs(30)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let m = m?;
        let mut conns = Vec::with_capacity(consumers);
        for (w, status) in ws.iter_mut().zip(statuses) {
            anyhow::ensure!(status.success(), "consumer failed: {}", log_tail(&w.log));
            check_consumed(&w.line("done").expect("measured").1, dataset)?;
            let line = w
                .last_words("conns ")
                .context("the consumer did not report its connections")?;
            conns.push(parse_conns(&line)?);
        }
        Ok((m, conns))
    }

    /// A serving scenario: starts `server`, runs its consumers, stops it.
    pub fn run_consumer(&self, server: Server, run_dir: &Path) -> anyhow::Result<Measured> {
        match server {
            Server::Synthetic { mock_data } => {
                let dataset = if mock_data {
                    self.mock_dataset.as_ref().context("no mock dataset")?
                } else {
                    &self.dataset
                };
                let source = SyntheticSource::start(
                    Arc::clone(dataset),
                    SourceOptions {
                        rate_bytes_per_s: None,
                        cpu: Some(SERVER_CPU),
                        // librdkafka uses message format v2 (Fetch v4+) only
                        // with brokers that also offer Produce v3+: without a
                        // sink topic the source offers no Produce and the
                        // consumer never fetches.
                        sink_topic: Some(SINK_TOPIC.into()),
                        port: 0,
                        ..SourceOptions::default()
                    },
                )?;
                let addr = source.addr().to_string();
                let m = self.consume(
                    &addr,
                    dataset,
                    &ServerProbe::Source(&source),
                    run_dir,
                    (1, Some(self.consumer_cpu)),
                );
                source.stop();
                Ok(m?.0)
            }
            // One shard: it is pinned to CPU 0 (SERVER_CPU), and every
            // partition and the consumer's connection land on it.
            Server::Agent { zero_copy } => self.run_agent(
                &format!("shards = 1\n\n[listener]\nzero_copy = {zero_copy}\n"),
                1,
                (1, Some(self.consumer_cpu)),
                run_dir,
            ),
            // The shards are pinned to CPU 0 and 1 by the agent, so no CPU
            // is the consumers' own: they run unpinned, where the kernel
            // puts them.
            Server::AgentShards { accept } => {
                let accept = match accept {
                    AcceptMode::EachShard => "each_shard",
                    AcceptMode::OneAcceptor => "one_acceptor",
                };
                self.run_agent(
                    &format!("shards = {SERVE_MANY_SHARDS}\n\n[listener]\naccept = {accept:?}\n"),
                    SERVE_MANY_SHARDS,
                    (self.args.serve_consumers, None),
                    run_dir,
                )
            }
            Server::Mock => {
                let dataset = self.mock_dataset.as_ref().context("no mock dataset")?;
                let mut cmd = Command::new(&self.exe);
                cmd.arg("mock-cluster")
                    .arg("--partitions")
                    .arg(dataset.partitions.len().to_string())
                    .arg("--cpu")
                    .arg(SERVER_CPU.to_string());
                let mut mock = spawn_watched(cmd, &run_dir.join("mock.log"))?;
                let m = mock.wait_line("bootstrap ", SERVER_START_TIMEOUT).and_then(|line| {
                    let bootstrap = line["bootstrap ".len()..].to_string();
                    produce_into(&bootstrap, dataset).context("produce into the mock")?;
                    self.consume(
                        &bootstrap,
                        dataset,
                        &ServerProbe::Process(mock.pid),
                        run_dir,
                        (1, Some(self.consumer_cpu)),
                    )
                });
                let _ = mock.child.kill();
                let _ = mock.child.wait();
                Ok(m?.0)
            }
        }
    }

    /// Serves the mirrored dataset with `ringmirror run` (`config`: the
    /// shard count and the `[listener]` table, whose address is added here)
    /// to `consumers` and finds where its `shards` served their connections.
    fn run_agent(
        &self,
        config: &str,
        shards: usize,
        consumers: (usize, Option<usize>),
        run_dir: &Path,
    ) -> anyhow::Result<Measured> {
        let data_dir = self.serve_data.as_ref().context("no mirrored data to serve")?;
        forget_groups(data_dir)?;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let config_path = run_dir.join("agent.toml");
        std::fs::write(
            &config_path,
            format!("data_dir = {data_dir:?}\n{config}address = {addr:?}\n"),
        )?;
        let mut cmd = Command::new(&self.ringmirror);
        cmd.arg("run")
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", AGENT_SERVE_LOG_FILTER)
            // Plain log lines, for connections_in_log.
            .env("NO_COLOR", "1");
        let agent_log = run_dir.join("agent.log");
        let mut agent = spawn_watched(cmd, &agent_log)?;
        let m = wait_listening(&addr, &agent).and_then(|probe| {
            let server = ServerProbe::Process(agent.pid);
            let (m, conns) = self.consume(&addr, &self.dataset, &server, run_dir, consumers)?;
            Ok((m, probe, conns))
        });
        // SAFETY: signalling our own child.
        unsafe { libc::kill(agent.pid as i32, libc::SIGTERM) };
        let status = wait_exit(&mut agent.child, Duration::from_secs(60))?;
        let (mut m, probe, conns) = m.with_context(|| format!("agent log:\n{}", log_tail(&agent_log)))?;
        anyhow::ensure!(status.success(), "agent failed ({status}): {}", log_tail(&agent_log));
        m.spread = Some(spread_of(&agent_log, shards, probe, &conns)?);
        Ok(m)
    }
}
