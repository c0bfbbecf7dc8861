//! The measured windows, and nothing else: when a run's window opens and
//! closes (the source's first Fetch and its catching up, or the children's
//! own "first"/"done" lines), CPU time and page faults of every process
//! involved sampled from `/proc` at both ends, the machine's busy time, and
//! for lag runs the histogram of each batch's delay. It starts no process
//! and prints no table (see `throughput`/`serve`, and `report`).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::procstat::{self, ProcStat};
use ringmirror_perf::summary::{GB, cpu_s_per_gb, mb_per_s};
use ringmirror_perf::synthetic_source::SyntheticSource;

use crate::process::{Watched, exited_unreaped, log_tail};
use crate::serve::Spread;

/// One measured run.
#[derive(Debug, Clone)]
pub struct Measured {
    pub wall: Duration,
    pub bytes: u64,
    pub stat: ProcStat,
    pub source_cpu: Duration,
    /// Busy CPU of the machine outside the measured child, the server and
    /// this harness (kernel writeback threads, other users of the machine).
    pub others_cpu: Duration,
    /// Serving scenarios: the server's CPU (`stat` is then the consumers').
    pub server: Option<ServerCpu>,
    /// Serving from the agent: which shards served the connections.
    pub spread: Option<Spread>,
}

/// CPU of the server the consumers read from, over the window.
#[derive(Debug, Clone)]
pub struct ServerCpu {
    pub cpu: Duration,
    /// The user/system split, when the server is a process of its own (agent,
    /// mock); the synthetic source's threads only count their total.
    pub stat: Option<ProcStat>,
    /// The agent's shard threads' CPU, by shard; empty for other servers.
    pub shards: Vec<Duration>,
}

impl Measured {
    pub fn mb_s(&self) -> f64 {
        mb_per_s(self.bytes, self.wall)
    }
    pub fn cpu_s_per_gb(&self) -> f64 {
        cpu_s_per_gb(self.stat.cpu(), self.bytes)
    }
    pub fn faults_per_gb(&self) -> f64 {
        self.stat.minflt as f64 / (self.bytes as f64 / GB)
    }
    pub fn server_cpu_s_per_gb(&self) -> Option<f64> {
        self.server.as_ref().map(|s| cpu_s_per_gb(s.cpu, self.bytes))
    }
    /// The agent's shard threads' CPU per GB served, "shard 0 / shard 1 / …".
    pub fn shard_cpu_s_per_gb(&self) -> String {
        let shards = self.server.as_ref().map_or(&[][..], |s| &s.shards[..]);
        let per_gb: Vec<String> = shards
            .iter()
            .map(|cpu| format!("{:.3}", cpu_s_per_gb(*cpu, self.bytes)))
            .collect();
        per_gb.join(" / ")
    }
}

/// What closes a child's window.
pub enum DoneSignal {
    /// The source saw every partition fetched at its end offset.
    SourceCaughtUp,
    /// The child printed a line starting with "done".
    ChildSaysDone,
}

/// Waits for the measured window of a running child and samples it at both ends.
pub fn measure(
    w: &mut Watched,
    source: &SyntheticSource,
    signal: DoneSignal,
    bytes: u64,
    timeout: Duration,
) -> anyhow::Result<Measured> {
    let pid = w.pid;
    let deadline = Instant::now() + timeout;
    let mut start: Option<(Instant, ProcStat, ProcStat, Duration)> = None;
    loop {
        if start.is_none()
            && let Some(first) = source.first_fetch()
        {
            start = Some((
                first,
                procstat::read(pid)?,
                procstat::read(0)?,
                procstat::machine_busy(),
            ));
            if let Some(ctl) = &mut w.perf_control {
                ctl.write_all(b"enable\n")?;
            }
        }
        let done_at = match signal {
            DoneSignal::SourceCaughtUp => source.caught_up(),
            DoneSignal::ChildSaysDone => w.line("done").map(|(t, _)| t),
        };
        if let (Some(done_at), Some((first, stat0, own0, busy0))) = (done_at, start) {
            if let Some(ctl) = &mut w.perf_control {
                ctl.write_all(b"disable\n")?;
            }
            let stat1 = procstat::read(pid).context("the child exited before it could be sampled")?;
            let own1 = procstat::read(0)?;
            let busy1 = procstat::machine_busy();
            let stat = stat1.since(&stat0);
            let own = own1.since(&own0).cpu();
            return Ok(Measured {
                wall: done_at.saturating_duration_since(first),
                bytes,
                stat,
                // The harness process: the source's threads and a polling loop.
                source_cpu: own,
                others_cpu: busy1
                    .saturating_sub(busy0)
                    .saturating_sub(stat.cpu())
                    .saturating_sub(own),
                server: None,
                spread: None,
            });
        }
        if exited_unreaped(w.child.id()) {
            // Its "done" line may still be on its way through the pipe; a
            // zombie can still be sampled.
            std::thread::sleep(Duration::from_millis(200));
            if done_at.is_none() && w.line("done").is_none() && !matches!(signal, DoneSignal::SourceCaughtUp) {
                bail!("child exited early; its log:\n{}", log_tail(&w.log));
            }
            if matches!(signal, DoneSignal::SourceCaughtUp) && source.caught_up().is_none() {
                bail!("child exited early; its log:\n{}", log_tail(&w.log));
            }
            continue;
        }
        if Instant::now() > deadline {
            let _ = w.child.kill();
            bail!("run timed out after {timeout:?}; child log:\n{}", log_tail(&w.log));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Who serves a consumer, for sampling its CPU.
pub enum ServerProbe<'a> {
    /// In this process: the source counts its threads' CPU itself.
    Source(&'a SyntheticSource),
    /// A child process (agent, mock helper).
    Process(u32),
}

impl ServerProbe<'_> {
    fn sample(&self) -> anyhow::Result<ServerCpu> {
        Ok(match self {
            Self::Source(source) => ServerCpu {
                cpu: source.stats().cpu,
                stat: None,
                shards: Vec::new(),
            },
            Self::Process(pid) => {
                let stat = procstat::read(*pid).context("the server exited")?;
                let mut shards = Vec::new();
                // glommio names every thread of a shard (its executor and its
                // helper threads) `shard-<i>-<executor id>`.
                for (name, thread) in procstat::read_threads(*pid)? {
                    let shard = name.strip_prefix("shard-").and_then(|rest| rest.split('-').next());
                    if let Some(i) = shard.and_then(|i| i.parse::<usize>().ok()) {
                        if shards.len() <= i {
                            shards.resize(i + 1, Duration::ZERO);
                        }
                        shards[i] += thread.cpu();
                    }
                }
                ServerCpu {
                    cpu: stat.cpu(),
                    stat: Some(stat),
                    shards,
                }
            }
        })
    }
}

impl ServerCpu {
    /// What was used between `earlier` and `self`.
    fn since(&self, earlier: &ServerCpu) -> ServerCpu {
        ServerCpu {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            stat: self.stat.zip(earlier.stat).map(|(b, a)| b.since(&a)),
            shards: self
                .shards
                .iter()
                .enumerate()
                .map(|(i, b)| b.saturating_sub(earlier.shards.get(i).copied().unwrap_or_default()))
                .collect(),
        }
    }
}

/// Waits for the consumer children's window — the first message any of them
/// gets ("first") to the last one's last ("done") — and samples the server
/// and the machine at both ends, and each consumer at the start and at its
/// own "done". The window is the consumers' because neither the agent nor the
/// mock can say when their first Fetch came in.
pub fn measure_consumers(
    consumers: &mut [Watched],
    server: &ServerProbe,
    bytes: u64,
    timeout: Duration,
) -> anyhow::Result<Measured> {
    let deadline = Instant::now() + timeout;
    let mut start: Option<(Instant, Vec<ProcStat>, ServerCpu, ProcStat, Duration)> = None;
    let mut ends: Vec<Option<(Instant, ProcStat)>> = vec![None; consumers.len()];
    loop {
        if start.is_none()
            && let Some(first) = consumers.iter().filter_map(|w| w.line("first")).map(|(t, _)| t).min()
        {
            let stats = consumers
                .iter()
                .map(|w| procstat::read(w.pid))
                .collect::<std::io::Result<_>>()?;
            start = Some((
                first,
                stats,
                server.sample()?,
                procstat::read(0)?,
                procstat::machine_busy(),
            ));
        }
        if let Some((first, stats0, server0, own0, busy0)) = &start {
            for ((w, end), stat0) in consumers.iter().zip(ends.iter_mut()).zip(stats0) {
                if end.is_none()
                    && let Some((done_at, _)) = w.line("done")
                {
                    let stat = procstat::read(w.pid)
                        .context("a consumer exited before it could be sampled")?
                        .since(stat0);
                    *end = Some((done_at, stat));
                }
            }
            if ends.iter().all(Option::is_some) {
                let ends: Vec<(Instant, ProcStat)> = ends.into_iter().flatten().collect();
                let done_at = ends.iter().map(|(t, _)| *t).max().expect("at least one consumer");
                let stat = ends.iter().fold(ProcStat::default(), |sum, (_, s)| ProcStat {
                    utime: sum.utime + s.utime,
                    stime: sum.stime + s.stime,
                    minflt: sum.minflt + s.minflt,
                    majflt: sum.majflt + s.majflt,
                });
                let server_cpu = server.sample()?.since(server0);
                let own = procstat::read(0)?.since(own0).cpu();
                let busy = procstat::machine_busy().saturating_sub(*busy0);
                // The synthetic source's CPU is part of this process's.
                let outside = match server {
                    ServerProbe::Source(_) => Duration::ZERO,
                    ServerProbe::Process(_) => server_cpu.cpu,
                };
                return Ok(Measured {
                    wall: done_at.saturating_duration_since(*first),
                    bytes,
                    stat,
                    source_cpu: own,
                    others_cpu: busy
                        .saturating_sub(stat.cpu())
                        .saturating_sub(own)
                        .saturating_sub(outside),
                    server: Some(server_cpu),
                    spread: None,
                });
            }
        }
        for (w, end) in consumers.iter().zip(&ends) {
            if end.is_none() && exited_unreaped(w.child.id()) {
                // Its last lines may still be on their way through the pipe.
                std::thread::sleep(Duration::from_millis(200));
                if w.line("done").is_none() {
                    bail!("consumer exited early; its log:\n{}", log_tail(&w.log));
                }
            }
        }
        if let ServerProbe::Process(pid) = server {
            anyhow::ensure!(!exited_unreaped(*pid), "the server exited during the run");
        }
        if Instant::now() > deadline {
            for w in consumers.iter_mut() {
                let _ = w.child.kill();
            }
            let logs: Vec<String> = consumers.iter().map(|w| log_tail(&w.log)).collect();
            bail!("run timed out after {timeout:?}; consumer logs:\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// A lag run's progress reports: (partition, log end offset, when the
/// agent's events thread handed it over).
pub type ProgressSeen = Vec<(i32, i64, Instant)>;

/// Each batch's delay from becoming available at the source to the first
/// `Progress` report whose log end offset covers it.
pub struct Lags {
    /// Delays in microseconds, of the batches available inside the window.
    pub histogram: Histogram<u64>,
    pub measured: u64,
    /// Batches available inside the window but never reported committed.
    pub missing: u64,
    /// (available since t0, delay, partition) of batches that waited 20 ms
    /// or more, in time order.
    pub slow: Vec<(Duration, Duration, usize)>,
}

impl Lags {
    /// The delays of the batches of `dataset` that `source` made available
    /// from `warmup` to `end` (`t0`: its first append), as `seen` reports them.
    pub fn of(
        seen: &[(i32, i64, Instant)],
        dataset: &Dataset,
        source: &SyntheticSource,
        (t0, warmup, end): (Instant, Instant, Instant),
    ) -> anyhow::Result<Self> {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let mut measured = 0u64;
        let mut missing = 0u64;
        // (available since t0, delay, partition) of batches that waited 20 ms or more.
        let mut slow: Vec<(Duration, Duration, usize)> = Vec::new();
        for (p, part) in dataset.partitions.iter().enumerate() {
            let mut next = 0usize;
            for &(partition, leo, at) in seen.iter().filter(|e| e.0 == p as i32) {
                debug_assert_eq!(partition, p as i32);
                while next < part.batches.len() && part.batches[next].next_offset <= leo {
                    let available = source.available_at(p, next).expect("t0 set");
                    if available >= warmup && available <= end {
                        let delay = at.saturating_duration_since(available);
                        histogram.record((delay.as_micros() as u64).max(1))?;
                        measured += 1;
                        if delay >= Duration::from_millis(20) {
                            slow.push((available.saturating_duration_since(t0), delay, p));
                        }
                    }
                    next += 1;
                }
            }
            // Batches available within the window but never reported committed.
            while next < part.batches.len() {
                match source.available_at(p, next) {
                    Some(a) if a <= end => {
                        if a >= warmup {
                            missing += 1;
                        }
                    }
                    _ => break,
                }
                next += 1;
            }
        }
        slow.sort();
        Ok(Self {
            histogram,
            measured,
            missing,
            slow,
        })
    }
}
