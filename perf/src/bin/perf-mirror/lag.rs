//! The lag family (`--lag`): the synthetic source appends at a steady
//! rate, the agent runs in this process (`Agent::start_observed`, 1 shard)
//! and every `Progress` event it reports is kept with the moment it came;
//! [`crate::measure::Lags`] turns them into each batch's delay. Nothing
//! else runs beside it: no child processes, no throughput window. With
//! `--rate-fraction`, a first phase measures the maximum rate the same way
//! (the agent in this process, the whole dataset available at once).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_dataplane::fetch::{ShardEvent, TelemetryEvent};
use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::procstat;
use ringmirror_perf::synthetic_source::{SourceOptions, SyntheticSource};

use crate::measure::{Lags, ProgressSeen};
use crate::mirror::log_table;
use crate::process::{free_bytes, tempdir_in};
use crate::{Args, TOPIC, report};

/// Runs the agent against a source appending at `--rate-mb-s` (or
/// `--rate-fraction` of the maximum measured first) for `--lag-seconds` and
/// prints the delays.
pub fn run_lag(args: &Args) -> anyhow::Result<()> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let source_cpu = args.source_cpu.unwrap_or(cpus - 1);
    let work_dir = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    // The maximum phase's dataset and files are freed only after the lag
    // phase: freeing GiBs just before it made this VM's free-page reporting
    // stall allocations (the page cache's among them) for ~100 ms every
    // ~2.4 s for about a minute (perf/RESULTS.md).
    let (max_rate, _max_phase) = match args.rate_fraction {
        Some(fraction) => {
            anyhow::ensure!(fraction > 0.0 && fraction <= 1.0, "--rate-fraction must be in (0, 1]");
            let (rate, leftovers) = max_rate(args, source_cpu, &work_dir)?;
            (Some(rate), Some(leftovers))
        }
        None => (None, None),
    };
    let rate = match (max_rate, args.rate_fraction) {
        (Some(max), Some(fraction)) => max * fraction,
        _ => args.rate_mb_s * 1e6,
    };
    // Enough data for the whole run and a margin (the clock starts at the first Fetch; the dataset
    // is held in memory, so at hundreds of MB/s a larger margin costs GiBs).
    let size = (rate * (args.lag_seconds as f64 + 2.0)) as u64;
    anyhow::ensure!(free_bytes(&work_dir)? > size + (2 << 30), "not enough free disk");
    let dataset = Arc::new(args.dataset(args.partitions, size / args.partitions.max(1) as u64, 0x1a9));
    let source = SyntheticSource::start(
        Arc::clone(&dataset),
        SourceOptions {
            rate_bytes_per_s: Some(rate),
            cpu: Some(source_cpu),
            sink_topic: None,
            port: 0,
            // As a Kafka broker does (KIP-227): an unchanged partition costs neither side a thing.
            fetch_sessions: true,
            ..SourceOptions::default()
        },
    )?;
    let root = tempdir_in(&work_dir, "ringmirror-perf-lag")?;
    let config = agent_config(args, &root.join("data"), &source)?;
    let seen: Arc<Mutex<ProgressSeen>> = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
    let observer_seen = Arc::clone(&seen);
    let observer = Box::new(move |event: &ShardEvent| {
        if let ShardEvent::Telemetry(TelemetryEvent::Progress { tp, log_end_offset, .. }) = event {
            let now = Instant::now();
            observer_seen
                .lock()
                .expect("lock")
                .push((tp.partition, *log_end_offset, now));
        }
    });
    let agent = Agent::start_observed(config, observer)?;
    let waited = Instant::now();
    while source.t0().is_none() {
        anyhow::ensure!(waited.elapsed() < Duration::from_secs(30), "the agent never fetched");
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = source.t0().expect("started");
    // From the first Fetch on: the agent's start-up (opening 1 000 partitions) is not lag-time work.
    let process0 = procstat::read(0)?;
    let source_cpu0 = source.stats().cpu;
    let end = t0 + Duration::from_secs(args.lag_seconds);
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let process1 = procstat::read(0)?;
    let source_cpu1 = source.stats().cpu;
    // Let the last batches land before stopping.
    std::thread::sleep(Duration::from_millis(200));
    agent.stop()?;
    let seen = std::mem::take(&mut *seen.lock().expect("lock"));

    let warmup = t0 + Duration::from_secs(args.lag_warmup_s);
    let lags = Lags::of(&seen, &dataset, &source, (t0, warmup, end))?;
    source.stop();
    let _ = std::fs::remove_dir_all(&root);
    let window = end.saturating_duration_since(t0).as_secs_f64();
    let process_cpu = process1.cpu().saturating_sub(process0.cpu()).as_secs_f64();
    let agent_cpu = process_cpu - source_cpu1.saturating_sub(source_cpu0).as_secs_f64();
    report::print_lag(args, (rate, max_rate), &dataset, &lags, 100.0 * agent_cpu / window);
    if let Some(dir) = &args.plot_dir {
        report::plot_lag(dir, args, rate, &lags)?;
    }
    Ok(())
}

/// The agent's configuration for `source`: 1 shard, the harness's fetch and log settings.
fn agent_config(args: &Args, data_dir: &Path, source: &SyntheticSource) -> anyhow::Result<AgentConfig> {
    AgentConfig::parse(&format!(
        "data_dir = {data_dir:?}\nshards = 1\n{}\n[[mirror]]\nname = \"perf\"\nbootstrap_servers = [{:?}]\n\
         topics = [{TOPIC:?}]\nfetch_max_wait_ms = {}\nfetch_min_bytes = 1\nfetch_max_bytes = {}\n\
         fetch_partition_max_bytes = {}\ningest = {:?}\n",
        log_table(&args.log_setting),
        source.addr().to_string(),
        args.fetch_max_wait_ms,
        args.fetch_max_bytes,
        args.fetch_partition_max_bytes,
        args.ingest
    ))
}

/// What the maximum phase leaves: its dataset and its data directory (removed on drop).
struct MaxPhaseLeftovers {
    _dataset: Arc<Dataset>,
    root: PathBuf,
}

impl Drop for MaxPhaseLeftovers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The maximum rate, bytes/s, to disk: the agent mirrors `--size-mb` over `--partitions` from a
/// source that has it all at once, timed from the source's first Fetch until it saw every
/// partition fetched at its end (the throughput scenarios' window) and then a `sync` of
/// everything written returned. Without the sync, the rate is the page cache's burst while
/// GiBs fit in it before write-back throttles writers (`vm.dirty_ratio`), which a steady append
/// at half of it can outrun; with it, the rate is what the disk sustains.
fn max_rate(args: &Args, source_cpu: usize, work_dir: &Path) -> anyhow::Result<(f64, MaxPhaseLeftovers)> {
    let size = args.size_mb << 20;
    anyhow::ensure!(free_bytes(work_dir)? > size + (2 << 30), "not enough free disk");
    let dataset = Arc::new(args.dataset(args.partitions, size / args.partitions.max(1) as u64, 0x3a7));
    let source = SyntheticSource::start(
        Arc::clone(&dataset),
        SourceOptions {
            rate_bytes_per_s: None,
            cpu: Some(source_cpu),
            sink_topic: None,
            port: 0,
            // As a Kafka broker does (KIP-227): an unchanged partition costs neither side a thing.
            fetch_sessions: true,
            ..SourceOptions::default()
        },
    )?;
    let root = tempdir_in(work_dir, "ringmirror-perf-max")?;
    let agent = Agent::start(agent_config(args, &root.join("data"), &source)?)?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);
    let first = loop {
        if let (Some(first), Some(_)) = (source.first_fetch(), source.caught_up()) {
            break first;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the maximum-rate run did not finish in {} s",
            args.timeout_s
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    // Also keeps the run's write-back from spilling into the lag phase.
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    let window = first.elapsed();
    agent.stop()?;
    source.stop();
    let rate = dataset.total_bytes() as f64 / window.as_secs_f64();
    Ok((
        rate,
        MaxPhaseLeftovers {
            _dataset: dataset,
            root,
        },
    ))
}
