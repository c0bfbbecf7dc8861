//! The throughput run: the scenario list (`--scenarios`), the `Harness`
//! that runs one scenario once — a fresh synthetic source per run, the
//! scenario's own family module doing the rest — and the loop of warm-ups
//! and repeats, interleaved, whose medians `report` prints. Every
//! measurement is the family's `Measured`; this module only orders runs,
//! checks preconditions (binaries, free disk) and cleans up after each.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ringmirror_dataplane::kafka::AcceptMode;
use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::summary::loadavg;
use ringmirror_perf::synthetic_source::{SourceOptions, SyntheticSource};

use crate::discard::DiscardMode;
use crate::measure::{DoneSignal, Measured, measure};
use crate::mock::MOCK_PARTITION_MAX_BYTES;
use crate::process::{free_bytes, log_tail, spawn_watched, tempdir_in, wait_exit};
use crate::{Args, SINK_TOPIC, report};

/// How a scenario name asks for the `--baseline-ringmirror` binary.
const BASELINE_SUFFIX: &str = "@baseline";

/// One scenario, as `--scenarios` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Discard(DiscardMode),
    /// The agent's `ingest`: `"mmap"`, or `"aligned_copy"` (`-copy`), or
    /// `"uring"` (`-uring`); `baseline` (`@baseline`): run by the
    /// `--baseline-ringmirror` binary, to compare two builds in one run.
    Mirror {
        shards: usize,
        ingest: &'static str,
        baseline: bool,
    },
    Rdkafka {
        produce: bool,
    },
    /// The rdkafka consumer reading everything from `Server`.
    Consume(Server),
}

/// What serves the consumer of a serving scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `ringmirror run` with a `[listener]` and no mirror, 1 shard.
    Agent { zero_copy: bool },
    /// The same with `SERVE_MANY_SHARDS` shards, read by several consumers.
    AgentShards { accept: AcceptMode },
    /// The synthetic source, serving the main dataset or the mock's.
    Synthetic { mock_data: bool },
    /// librdkafka's mock cluster in a helper process.
    Mock,
}

impl Scenario {
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "discard-read" => Self::Discard(DiscardMode::Read),
            "discard-unaligned" => Self::Discard(DiscardMode::Unaligned),
            "discard-crc" => Self::Discard(DiscardMode::Crc),
            "discard-skip" => Self::Discard(DiscardMode::Skip),
            "segment-inline" => Self::Discard(DiscardMode::SegmentInline),
            "segment-ahead" => Self::Discard(DiscardMode::SegmentAhead),
            "segment-pwrite" => Self::Discard(DiscardMode::SegmentPwrite),
            "segment-offload" => Self::Discard(DiscardMode::SegmentOffload),
            "rdkafka-consume" => Self::Rdkafka { produce: false },
            "rdkafka-mirror" => Self::Rdkafka { produce: true },
            "serve-zero-copy" => Self::Consume(Server::Agent { zero_copy: true }),
            "serve-copy" => Self::Consume(Server::Agent { zero_copy: false }),
            "serve-2c-each-shard" => Self::Consume(Server::AgentShards {
                accept: AcceptMode::EachShard,
            }),
            "serve-2c-one-acceptor" => Self::Consume(Server::AgentShards {
                accept: AcceptMode::OneAcceptor,
            }),
            "synthetic-consume" => Self::Consume(Server::Synthetic { mock_data: false }),
            "synthetic-consume-mockdata" => Self::Consume(Server::Synthetic { mock_data: true }),
            "mock-consume" => Self::Consume(Server::Mock),
            s if s.starts_with("mirror-") => {
                let (rest, baseline) = match s["mirror-".len()..].strip_suffix(BASELINE_SUFFIX) {
                    Some(rest) => (rest, true),
                    None => (&s["mirror-".len()..], false),
                };
                let (shards, ingest) = if let Some(n) = rest.strip_suffix("-copy") {
                    (n, "aligned_copy")
                } else if let Some(n) = rest.strip_suffix("-uring") {
                    (n, "uring")
                } else if let Some(n) = rest.strip_suffix("-sqpoll") {
                    (n, "uring_sqpoll")
                } else {
                    (rest, "mmap")
                };
                Self::Mirror {
                    shards: shards
                        .parse()
                        .context("mirror-<shards>[-copy|-uring|-sqpoll][@baseline]")?,
                    ingest,
                    baseline,
                }
            }
            other => bail!("unknown scenario {other:?}"),
        })
    }

    pub fn name(&self) -> String {
        match self {
            Self::Discard(DiscardMode::Read) => "discard-read".into(),
            Self::Discard(DiscardMode::Unaligned) => "discard-unaligned".into(),
            Self::Discard(DiscardMode::Crc) => "discard-crc".into(),
            Self::Discard(DiscardMode::Skip) => "discard-skip".into(),
            Self::Discard(DiscardMode::SegmentInline) => "segment-inline".into(),
            Self::Discard(DiscardMode::SegmentAhead) => "segment-ahead".into(),
            Self::Discard(DiscardMode::SegmentPwrite) => "segment-pwrite".into(),
            Self::Discard(DiscardMode::SegmentOffload) => "segment-offload".into(),
            Self::Mirror {
                shards,
                ingest,
                baseline,
            } => {
                let suffix = match *ingest {
                    "aligned_copy" => "-copy",
                    "uring" => "-uring",
                    "uring_sqpoll" => "-sqpoll",
                    _ => "",
                };
                let build = if *baseline { BASELINE_SUFFIX } else { "" };
                format!("mirror-{shards}{suffix}{build}")
            }
            Self::Rdkafka { produce: false } => "rdkafka-consume".into(),
            Self::Rdkafka { produce: true } => "rdkafka-mirror".into(),
            Self::Consume(Server::Agent { zero_copy: true }) => "serve-zero-copy".into(),
            Self::Consume(Server::Agent { zero_copy: false }) => "serve-copy".into(),
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::EachShard,
            }) => "serve-2c-each-shard".into(),
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::OneAcceptor,
            }) => "serve-2c-one-acceptor".into(),
            Self::Consume(Server::Synthetic { mock_data: false }) => "synthetic-consume".into(),
            Self::Consume(Server::Synthetic { mock_data: true }) => "synthetic-consume-mockdata".into(),
            Self::Consume(Server::Mock) => "mock-consume".into(),
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Self::Discard(DiscardMode::Read) => "our client, records into a reused aligned buffer, dropped",
            Self::Discard(DiscardMode::Unaligned) => "same, receive offset = bytes so far mod 4096 (like appends)",
            Self::Discard(DiscardMode::Crc) => "discard-read + CRC32C/offset validation",
            Self::Discard(DiscardMode::Skip) => "our client, records through its 64 KiB buffer (skip)",
            Self::Discard(DiscardMode::SegmentInline) => {
                "prototype: recv into mmapped file, fallocate+MADV_POPULATE_WRITE inline, CRC"
            }
            Self::Discard(DiscardMode::SegmentAhead) => "same, fallocate+populate ahead on a helper thread",
            Self::Discard(DiscardMode::SegmentPwrite) => {
                "prototype: recv into aligned buffer, CRC, fallocate ahead + pwrite"
            }
            Self::Discard(DiscardMode::SegmentOffload) => "segment-pwrite with the pwrite on a writer thread",
            Self::Mirror { baseline: true, .. } => "the same mirror scenario, run by the --baseline-ringmirror binary",
            Self::Mirror {
                ingest: "aligned_copy", ..
            } => "ringmirror run (ingest aligned_copy): recv into aligned buffer, validate, copy in",
            Self::Mirror { ingest: "uring", .. } => {
                "ringmirror run (ingest uring): recv into aligned buffer, validate, write via the shard's io_uring"
            }
            Self::Mirror {
                ingest: "uring_sqpoll", ..
            } => "ringmirror run (ingest uring_sqpoll): the same through a ring with a kernel SQPOLL thread",
            Self::Mirror { .. } => "ringmirror run (ingest mmap): recv into the segment mapping, validate, commit",
            Self::Rdkafka { produce: false } => "rdkafka BaseConsumer reads every record",
            Self::Rdkafka { produce: true } => "rdkafka consumer → BaseProducer into a sink (MM2's path)",
            Self::Consume(Server::Agent { zero_copy: true }) => {
                "ringmirror run, [listener] only, 1 shard: records sent from the segments with sendfile"
            }
            Self::Consume(Server::Agent { zero_copy: false }) => {
                "same, zero_copy = false: records pread into a buffer, then written"
            }
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::EachShard,
            }) => "ringmirror run, 2 shards, sendfile, accept = each_shard: every shard accepts (SO_REUSEPORT)",
            Self::Consume(Server::AgentShards {
                accept: AcceptMode::OneAcceptor,
            }) => "same, accept = one_acceptor: shard 0 accepts and hands connections out in turn",
            Self::Consume(Server::Synthetic { mock_data: false }) => {
                "synthetic source, records written from memory with writev (the fastest server)"
            }
            Self::Consume(Server::Synthetic { mock_data: true }) => "synthetic source serving the mock's dataset",
            Self::Consume(Server::Mock) => {
                "librdkafka mock cluster (1 broker, helper process): one message set per partition per Fetch"
            }
        }
    }
}

/// What every run of a throughput harness shares; each scenario family
/// adds its `run_*` method in its own module.
pub struct Harness<'a> {
    pub args: &'a Args,
    pub dataset: Arc<Dataset>,
    /// This binary, started again as the children (`discard`, `rdkafka`, `mock-cluster`).
    pub exe: PathBuf,
    pub ringmirror: PathBuf,
    /// `@baseline` scenarios: another build of `ringmirror`.
    pub baseline_ringmirror: Option<PathBuf>,
    pub work_dir: PathBuf,
    source_cpu: usize,
    pub perf_recorded: bool,
    /// Serving scenarios: a data dir holding the dataset, mirrored once.
    pub serve_data: Option<PathBuf>,
    /// mock-consume: the dataset that fits the mock.
    pub mock_dataset: Option<Arc<Dataset>>,
    /// Where the consumer of the serving scenarios runs.
    pub consumer_cpu: usize,
}

/// One run of a scenario against the synthetic source.
pub struct SourceRun {
    /// Where the source listens.
    pub addr: String,
    /// The dataset's bytes: what the run moves.
    pub bytes: u64,
    pub timeout: Duration,
    /// The run's own directory, removed after it.
    pub dir: PathBuf,
    /// The child's stderr.
    pub log: PathBuf,
}

impl Harness<'_> {
    fn start_source(&self) -> anyhow::Result<SyntheticSource> {
        Ok(SyntheticSource::start(
            Arc::clone(&self.dataset),
            SourceOptions {
                rate_bytes_per_s: None,
                cpu: Some(self.source_cpu),
                sink_topic: Some(SINK_TOPIC.into()),
                port: 0,
                ..SourceOptions::default()
            },
        )?)
    }

    /// The fetch settings every child gets from `--fetch-*`.
    pub fn fetch_args(&self, cmd: &mut Command) {
        let a = self.args;
        cmd.arg("--fetch-max-wait-ms")
            .arg(a.fetch_max_wait_ms.to_string())
            .arg("--fetch-partition-max-bytes")
            .arg(a.fetch_partition_max_bytes.to_string())
            .arg("--fetch-max-bytes")
            .arg(a.fetch_max_bytes.to_string());
    }

    /// Runs `scenario` once in `run_dir`.
    pub fn run(&mut self, scenario: Scenario, run_dir: &Path) -> anyhow::Result<Measured> {
        if let Scenario::Consume(server) = scenario {
            return self.run_consumer(server, run_dir);
        }
        let source = self.start_source()?;
        let run = SourceRun {
            addr: source.addr().to_string(),
            bytes: self.dataset.total_bytes(),
            timeout: Duration::from_secs(self.args.timeout_s),
            dir: run_dir.to_path_buf(),
            log: run_dir.join("child.log"),
        };
        match scenario {
            Scenario::Discard(mode) => self.run_discard(mode, &source, &run),
            Scenario::Rdkafka { produce } => self.run_rdkafka(produce, &source, &run),
            Scenario::Mirror {
                shards,
                ingest,
                baseline,
            } => {
                let agent = if baseline {
                    self.baseline_ringmirror
                        .clone()
                        .context("@baseline needs --baseline-ringmirror")?
                } else {
                    self.ringmirror.clone()
                };
                self.run_mirror((shards, ingest), &agent, source, &run)
            }
            Scenario::Consume(_) => unreachable!("serving scenarios are run above"),
        }
    }

    /// Measures child `cmd` (named `what` in errors) from the source's
    /// first Fetch to its "done" line, and checks it exits cleanly.
    pub fn measure_child(
        &self,
        cmd: Command,
        source: &SyntheticSource,
        run: &SourceRun,
        what: &str,
    ) -> anyhow::Result<Measured> {
        let mut w = spawn_watched(cmd, &run.log)?;
        let m = measure(&mut w, source, DoneSignal::ChildSaysDone, run.bytes, run.timeout)?;
        let status = wait_exit(&mut w.child, Duration::from_secs(30))?;
        anyhow::ensure!(status.success(), "{what} child failed: {}", log_tail(&run.log));
        Ok(m)
    }
}

/// Runs every scenario of `--scenarios`, `--warmup` + `--repeats` times
/// interleaved, and prints the tables.
pub fn run_throughput(args: &Args) -> anyhow::Result<()> {
    let scenarios: Vec<Scenario> = args
        .scenarios
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Scenario::parse)
        .collect::<anyhow::Result<_>>()?;
    let exe = std::env::current_exe()?;
    let ringmirror = args
        .ringmirror
        .clone()
        .unwrap_or_else(|| exe.with_file_name("ringmirror"));
    let serving = scenarios
        .iter()
        .any(|s| matches!(s, Scenario::Consume(Server::Agent { .. } | Server::AgentShards { .. })));
    if serving || scenarios.iter().any(|s| matches!(s, Scenario::Mirror { .. })) {
        anyhow::ensure!(
            ringmirror.exists(),
            "{} not found: cargo build --release -p ringmirror",
            ringmirror.display()
        );
    }
    if scenarios
        .iter()
        .any(|s| matches!(s, Scenario::Mirror { baseline: true, .. }))
    {
        let baseline = args
            .baseline_ringmirror
            .as_ref()
            .context("@baseline scenarios need --baseline-ringmirror")?;
        anyhow::ensure!(baseline.exists(), "{} not found", baseline.display());
    }
    let work_dir = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let size = args.size_mb << 20;
    // The serving scenarios keep one mirrored copy for the whole run.
    let need = if serving { 3 } else { 2 } * size + (2 << 30);
    let free = free_bytes(&work_dir)?;
    anyhow::ensure!(
        free > need,
        "{} has {} MiB free; need {} MiB",
        work_dir.display(),
        free >> 20,
        need >> 20
    );
    let load_before = loadavg();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let source_cpu = args.source_cpu.unwrap_or(cpus - 1);
    let (dataset, mock_dataset) = datasets(args, &scenarios, size)?;
    let root = tempdir_in(&work_dir, "ringmirror-perf")?;
    let mut harness = Harness {
        args,
        dataset: Arc::clone(&dataset),
        exe,
        ringmirror,
        baseline_ringmirror: args.baseline_ringmirror.clone(),
        work_dir: root.clone(),
        source_cpu,
        perf_recorded: false,
        serve_data: None,
        mock_dataset: mock_dataset.clone(),
        consumer_cpu: cpus - 1,
    };
    let mut results: Vec<(Scenario, Vec<Measured>)> = scenarios.iter().map(|&s| (s, Vec::new())).collect();
    let outcome = run_all(&mut harness, serving, &mut results);
    let _ = std::fs::remove_dir_all(&root);
    outcome?;
    let load_after = loadavg();
    let (serving_results, others): (Vec<_>, Vec<_>) = results
        .into_iter()
        .partition(|(s, _)| matches!(s, Scenario::Consume(_)));
    if !others.is_empty() {
        report::print_table(args, &dataset, &others);
        if let Some(dir) = &args.plot_dir {
            report::plot_throughput(dir, &others)?;
        }
    }
    if !serving_results.is_empty() {
        report::print_serving_table(
            args,
            &dataset,
            mock_dataset.as_deref(),
            &serving_results,
            (&load_before, &load_after),
        );
    }
    Ok(())
}

/// The dataset every source serves, and the mock's when a scenario reads from the mock.
fn datasets(args: &Args, scenarios: &[Scenario], size: u64) -> anyhow::Result<(Arc<Dataset>, Option<Arc<Dataset>>)> {
    let built = Instant::now();
    let dataset = Arc::new(args.dataset(args.partitions, size / args.partitions.max(1) as u64, 0x5eed));
    eprintln!(
        "dataset: {} partitions, {:.1} MB in {}-byte batches of {} × {}-byte records ({} records), built in {:.1} s",
        args.partitions,
        dataset.total_bytes() as f64 / 1e6,
        dataset.batch_bytes(),
        args.batch_records,
        args.record_bytes,
        dataset.total_records(),
        built.elapsed().as_secs_f64()
    );
    let mock_dataset = scenarios
        .iter()
        .any(|s| {
            matches!(
                s,
                Scenario::Consume(Server::Mock | Server::Synthetic { mock_data: true })
            )
        })
        .then(|| args.dataset(args.mock_partitions, args.mock_partition_kib << 10, 0x5eed))
        .map(Arc::new);
    if let Some(d) = &mock_dataset {
        let largest = d.partitions.iter().map(|p| p.bytes.len() as u64).max().unwrap_or(0);
        anyhow::ensure!(
            largest <= MOCK_PARTITION_MAX_BYTES,
            "the mock keeps at most {MOCK_PARTITION_MAX_BYTES} bytes per partition; {largest} asked (--mock-partition-kib)"
        );
        eprintln!(
            "mock dataset: {} partitions, {:.1} MB",
            args.mock_partitions,
            d.total_bytes() as f64 / 1e6
        );
    }
    Ok((dataset, mock_dataset))
}

/// Mirrors the data the serving scenarios serve (once), then runs every
/// scenario in turn, repeat after repeat; measured runs go into `results`.
fn run_all(harness: &mut Harness, serving: bool, results: &mut [(Scenario, Vec<Measured>)]) -> anyhow::Result<()> {
    let args = harness.args;
    if serving {
        let dir = harness.work_dir.join("serve-source");
        std::fs::create_dir_all(&dir)?;
        let m = harness
            .run(
                Scenario::Mirror {
                    shards: 1,
                    ingest: "aligned_copy",
                    baseline: false,
                },
                &dir,
            )
            .context("mirror the dataset to serve")?;
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        eprintln!(
            "mirrored the dataset to serve ({:.0} MB/s, verified byte-for-byte)",
            m.mb_s()
        );
        harness.serve_data = Some(dir.join("data"));
    }
    for repeat in 0..args.warmup + args.repeats {
        let warmup = repeat < args.warmup;
        for (scenario, runs) in results.iter_mut() {
            let run_dir = harness.work_dir.join(format!("{}-{repeat}", scenario.name()));
            std::fs::create_dir_all(&run_dir)?;
            let m = harness
                .run(*scenario, &run_dir)
                .with_context(|| format!("{} run {}", scenario.name(), repeat + 1))?;
            let label = if warmup { "warm-up" } else { "run" };
            let number = if warmup { repeat + 1 } else { repeat + 1 - args.warmup };
            report::print_run(&scenario.name(), label, number, &m);
            if !warmup {
                runs.push(m);
            }
            // Write back what the mirror dirtied before the next run, outside any window.
            // SAFETY: sync has no preconditions.
            unsafe { libc::sync() };
            std::fs::remove_dir_all(&run_dir)?;
            std::thread::sleep(Duration::from_secs_f64(args.settle_s));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scenario `--scenarios` names, the default ones and the rest.
    const NAMES: &str = "discard-read,discard-unaligned,discard-crc,discard-skip,segment-inline,segment-ahead,\
        segment-pwrite,segment-offload,mirror-1,mirror-1-copy,mirror-1-uring,mirror-2,mirror-4-copy,mirror-1-copy@baseline,mirror-2@baseline,rdkafka-consume,rdkafka-mirror,\
        serve-zero-copy,serve-copy,serve-2c-each-shard,serve-2c-one-acceptor,synthetic-consume,\
        synthetic-consume-mockdata,mock-consume";

    #[test]
    fn every_scenario_name_parses_back_to_itself() {
        for name in NAMES.split(',').chain(crate::DEFAULT_SCENARIOS.split(',')) {
            let scenario = Scenario::parse(name).unwrap();
            assert_eq!(scenario.name(), name);
            assert!(!scenario.describe().is_empty());
        }
    }

    #[test]
    fn an_unknown_or_malformed_scenario_is_refused() {
        for name in [
            "discard",
            "mirror-",
            "mirror-x",
            "mirror-1-mmap",
            "mirror-1@",
            "mirror-1@before",
            "serve",
        ] {
            assert!(Scenario::parse(name).is_err(), "{name:?} was accepted");
        }
    }
}
