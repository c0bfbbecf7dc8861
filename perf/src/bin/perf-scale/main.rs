//! `perf-scale`: one agent, many partitions (issue 16 item 2), measured.
//!
//! For each partition count P of `--partitions`, an in-process synthetic
//! source serves one topic of P partitions, and the release `ringmirror`
//! agent runs as a child (`run --config`, its open files limit raised)
//! mirroring it into a fresh data dir. One topic of P partitions rather than
//! P topics: the source serves one topic, and the agent's per-partition
//! costs (logs, files, mappings, fetch state, `__mirror_state`, `/status`)
//! are the same; per-topic costs (topic configs, the catalog's topic map)
//! are not exercised.
//!
//! Each partition has `--head-batches` batches from the start (its
//! history), then the source appends at `--rate-mb-s` over all partitions
//! (spread evenly) for `--loaded-s` seconds, then nothing. Measured, in order:
//!
//! 1. **first start**: from spawn until `GET /mirrors` counts P partitions
//!    MIRRORING, and until `GET /status` shows every partition holding its
//!    head (the first bytes of each on disk);
//! 2. **loaded**: the largest RSS while the source appends (nothing, shown
//!    as 0, where the first start outlasts the `--loaded-s` window);
//! 3. **idle** (everything mirrored, the source appends nothing): RSS, open
//!    files, mappings, disk allocated beyond the data, the Fetch requests
//!    the source receives over `--idle-s` (count and bytes each), the
//!    largest Fetch request, `GET /status` and `GET /metrics` (time,
//!    bytes), and a metadata sync round asked for (time, and the Metadata
//!    answers the source sent meanwhile);
//! 4. **restart after a clean stop** (SIGTERM): the stop's time, and from
//!    spawn until every partition is MIRRORING at its log end again;
//! 5. **restart after SIGKILL**: the same, with recovery.
//!
//! The source grants incremental fetch sessions (KIP-227) as Kafka does,
//! unless `--sessionless`. Every wait has a timeout; the agent is stopped and the work dir removed
//! at the end, also on error. `--plot-dir` draws `scale-rss.png` and
//! `scale-startup.png`.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use ringmirror_perf::dataset::{Dataset, DatasetSpec};
use ringmirror_perf::synthetic_source::{SourceOptions, SyntheticSource};
use ringmirror_perf::{plot, summary};

mod probe;
#[path = "../perf-mirror/process.rs"]
#[allow(dead_code)]
mod process;

use process::{Watched, log_tail, spawn_watched, wait_exit};

const TOPIC: &str = "scale";
const MIB: f64 = 1024.0 * 1024.0;
/// A poll of the admin API waits at most this long for an answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// How often conditions are polled.
const POLL: Duration = Duration::from_millis(100);

#[derive(Parser, Debug)]
#[command(about = "One agent mirroring many partitions: RSS, files, start-up, Fetch sizes")]
struct Args {
    /// Partition counts to measure, in order.
    #[arg(long, value_delimiter = ',', default_value = "1000,3000,10000")]
    partitions: Vec<usize>,
    /// The agent binary.
    #[arg(long, default_value = "target/release/ringmirror")]
    agent: PathBuf,
    /// Shards of the agent.
    #[arg(long, default_value_t = 2)]
    shards: usize,
    /// Append rate over all partitions while loaded (MB/s, spread evenly).
    #[arg(long, default_value_t = 20.0)]
    rate_mb_s: f64,
    /// How long the source appends after the head.
    #[arg(long, default_value_t = 4.0)]
    loaded_s: f64,
    /// Batches each partition has from the start.
    #[arg(long, default_value_t = 1)]
    head_batches: usize,
    /// Records per batch (1 KB values).
    #[arg(long, default_value_t = 4)]
    records_per_batch: usize,
    /// The idle window in which Fetch requests are counted.
    #[arg(long, default_value_t = 3.0)]
    idle_s: f64,
    /// `[log] preallocate_bytes` of the agent (None: its default, 16 MiB).
    #[arg(long)]
    preallocate_bytes: Option<u64>,
    /// The source answers without fetch sessions (every Fetch a full one).
    #[arg(long)]
    sessionless: bool,
    /// `[log] segment_index_bytes` of the agent (None: its default, 10 MiB).
    #[arg(long)]
    segment_index_bytes: Option<u64>,
    /// Where work dirs go (removed at the end).
    #[arg(long, default_value = "/tmp")]
    work_dir: PathBuf,
    /// Draw `scale-rss.png` and `scale-startup.png` here.
    #[arg(long)]
    plot_dir: Option<PathBuf>,
}

/// What one partition count measured.
#[derive(Debug, Default, Clone)]
struct Row {
    partitions: usize,
    mirroring_s: f64,
    first_bytes_s: f64,
    rss_loaded: u64,
    rate_mb_s: f64,
    rss_idle: u64,
    files: usize,
    mappings: usize,
    disk_allocated: u64,
    data_bytes: u64,
    idle_fetches: u64,
    idle_fetch_bytes: u64,
    fetch_bytes_max: u64,
    status: (Duration, usize),
    /// A metadata sync round asked for: its time, Metadata requests and answer bytes at the source.
    sync_round: (Duration, u64, u64),
    metrics: (Duration, usize),
    stop_s: f64,
    restart_s: f64,
    kill_restart_s: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.agent.exists(), "no agent binary at {}", args.agent.display());
    println!("{}", summary::machine_line());
    let mut rows = Vec::new();
    for &p in &args.partitions {
        let dir = process::tempdir_in(&args.work_dir, &format!("perf-scale-{p}"))?;
        let row = measure(&args, p, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        let row = row.with_context(|| format!("{p} partitions"))?;
        print_row(&row);
        rows.push(row);
    }
    print_table(&args, &rows);
    if let Some(dir) = &args.plot_dir {
        draw(dir, &rows)?;
    }
    Ok(())
}

/// A free loopback port for the admin API (kept across restarts).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The agent's config file.
fn config(args: &Args, data_dir: &Path, source: SocketAddr, admin: SocketAddr) -> String {
    let settings: Vec<String> = [
        ("preallocate_bytes", args.preallocate_bytes),
        ("segment_index_bytes", args.segment_index_bytes),
    ]
    .iter()
    .filter_map(|(key, value)| value.map(|v| format!("{key} = {v}\n")))
    .collect();
    let log = if settings.is_empty() {
        String::new()
    } else {
        format!("\n[log]\n{}", settings.concat())
    };
    format!(
        "data_dir = {data_dir:?}\nshards = {}\n\n[admin]\naddress = \"{admin}\"\n{log}\n[[mirror]]\nname = \"scale\"\n\
         bootstrap_servers = [\"{source}\"]\ntopics = [{TOPIC:?}]\n",
        args.shards
    )
}

/// The number of open files a Kafka-like service runs with.
const NOFILE: libc::rlim_t = 1 << 20;

/// Starts the agent with its open files limit raised (root may raise the
/// hard limit; otherwise the soft one goes to the hard one).
fn spawn_agent(args: &Args, config: &Path, log: &Path) -> anyhow::Result<Watched> {
    let mut cmd = Command::new(&args.agent);
    cmd.arg("run").arg("--config").arg(config);
    // SAFETY: only async-signal-safe calls (getrlimit, setrlimit) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let raised = libc::rlimit {
                rlim_cur: NOFILE,
                rlim_max: NOFILE,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                let mut now = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut now);
                now.rlim_cur = now.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &now);
            }
            Ok(())
        });
    }
    spawn_watched(cmd, log)
}

/// Polls `done` until it holds; fails after `timeout` or when the agent exits.
fn wait_for(
    what: &str,
    agent: &Watched,
    timeout: Duration,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        // An agent still starting has no admin API yet: not ready, not an error.
        if done().unwrap_or(false) {
            return Ok(Instant::now());
        }
        if process::exited_unreaped(agent.child.id()) {
            bail!(
                "the agent exited waiting for {what}; its log:\n{}",
                log_tail(&agent.log)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{what}: not after {timeout:?}; the agent's log:\n{}",
                log_tail(&agent.log)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// Signals the agent and waits for it to exit.
fn stop(agent: &mut Watched, signal: i32, timeout: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(agent.child.id() as i32, signal) };
    let status = wait_exit(&mut agent.child, timeout)?;
    let took = started.elapsed();
    anyhow::ensure!(
        signal == libc::SIGKILL || status.success(),
        "the agent failed ({status}): {}",
        log_tail(&agent.log)
    );
    anyhow::ensure!(took < timeout, "the agent did not stop within {timeout:?}");
    Ok(took)
}

/// Starts the agent on an existing data dir and times it until every
/// partition is MIRRORING at `ends` again.
fn restart(
    args: &Args,
    files: &RunFiles,
    admin: SocketAddr,
    ends: &[i64],
    timeout: Duration,
) -> anyhow::Result<(Watched, f64)> {
    let spawned = Instant::now();
    let agent = spawn_agent(args, &files.config, &files.log)?;
    let p = ends.len();
    let served = wait_for("every partition serving again", &agent, timeout, || {
        Ok(probe::mirroring(admin, ANSWER_TIMEOUT)? == p as u64
            && probe::mirrored_to(admin, ends, ANSWER_TIMEOUT)?.0 == p)
    })?;
    Ok((agent, (served - spawned).as_secs_f64()))
}

struct RunFiles {
    data: PathBuf,
    config: PathBuf,
    log: PathBuf,
}

fn measure(args: &Args, p: usize, dir: &Path) -> anyhow::Result<Row> {
    let batch_bytes_approx = args.records_per_batch * 1100;
    let per_partition_rate = args.rate_mb_s * 1e6 / p as f64;
    let loaded_bytes = (per_partition_rate * args.loaded_s) as u64;
    let head_bytes = args.head_batches * batch_bytes_approx;
    let dataset = Arc::new(Dataset::build(DatasetSpec {
        topic: TOPIC.into(),
        partitions: p as i32,
        bytes_per_partition: head_bytes as u64 + loaded_bytes,
        record_bytes: 1000,
        records_per_batch: args.records_per_batch,
        seed: 16,
    }));
    let batch = dataset.batch_bytes();
    let head_ends: Vec<i64> = dataset
        .partitions
        .iter()
        .map(|d| {
            d.batches[..args.head_batches.min(d.batches.len())]
                .last()
                .map_or(0, |b| b.next_offset)
        })
        .collect();
    let ends = dataset.end_offsets();
    let source = SyntheticSource::start(
        Arc::clone(&dataset),
        SourceOptions {
            rate_bytes_per_s: Some(args.rate_mb_s * 1e6),
            head_bytes: args.head_batches * batch,
            fetch_sessions: !args.sessionless,
            ..SourceOptions::default()
        },
    )?;
    let files = RunFiles {
        data: dir.join("data"),
        config: dir.join("agent.toml"),
        log: dir.join("agent.log"),
    };
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    std::fs::write(&files.config, config(args, &files.data, source.addr(), admin))?;
    // Generous, but bounded: 60 s plus 20 ms per partition.
    let timeout = Duration::from_secs(60) + Duration::from_millis(20) * p as u32;
    let mut row = Row {
        partitions: p,
        ..Row::default()
    };

    // 1. First start.
    let spawned = Instant::now();
    let mut agent = spawn_agent(args, &files.config, &files.log)?;
    let result = (|| -> anyhow::Result<()> {
        let pid = agent.child.id();
        let mirroring = wait_for("every partition MIRRORING", &agent, timeout, || {
            Ok(probe::mirroring(admin, ANSWER_TIMEOUT)? == p as u64)
        })?;
        row.mirroring_s = (mirroring - spawned).as_secs_f64();
        let first = wait_for("the first bytes of every partition", &agent, timeout, || {
            Ok(probe::mirrored_to(admin, &head_ends, ANSWER_TIMEOUT)?.0 == p)
        })?;
        row.first_bytes_s = (first - spawned).as_secs_f64();

        // 2. Loaded: until the source has served everything.
        let t0 = source.t0().context("the source was never fetched from")?;
        let loaded_until = t0 + Duration::from_secs_f64(args.loaded_s);
        let sent_before = source.stats().record_bytes_sent;
        let loaded_from = Instant::now();
        while Instant::now() < loaded_until {
            row.rss_loaded = row.rss_loaded.max(probe::rss_bytes(pid)?);
            std::thread::sleep(POLL);
        }
        let sent = source.stats().record_bytes_sent - sent_before;
        row.rate_mb_s = summary::mb_per_s(sent, loaded_from.elapsed());
        wait_for("every partition mirrored to its end", &agent, timeout, || {
            Ok(probe::mirrored_to(admin, &ends, ANSWER_TIMEOUT)?.0 == p)
        })?;

        // 3. Idle.
        let before = source.stats();
        std::thread::sleep(Duration::from_secs_f64(args.idle_s));
        let after = source.stats();
        row.idle_fetches = after.fetch_requests - before.fetch_requests;
        row.idle_fetch_bytes = after.fetch_request_bytes - before.fetch_request_bytes;
        row.fetch_bytes_max = after.fetch_request_bytes_max;
        row.rss_idle = probe::rss_bytes(pid)?;
        row.files = probe::open_files(pid)?;
        row.mappings = probe::mappings(pid)?;
        (row.disk_allocated, _) = probe::disk_usage(&files.data)?;
        row.data_bytes = dataset.total_bytes();
        let status = probe::get(admin, "/status", ANSWER_TIMEOUT)?;
        row.status = (status.took, status.body.len());
        let metrics = probe::get(admin, "/metrics", ANSWER_TIMEOUT)?;
        anyhow::ensure!(metrics.status == 200, "GET /metrics: {}", metrics.status);
        row.metrics = (metrics.took, metrics.body.len());
        row.sync_round = sync_round(admin, &source)?;
        Ok(())
    })();
    let stop_timeout = Duration::from_secs(30) + Duration::from_millis(30) * p as u32;
    if let Err(e) = result {
        let _ = stop(&mut agent, libc::SIGKILL, stop_timeout);
        return Err(e);
    }

    // 4. A clean stop, and a start after it.
    row.stop_s = stop(&mut agent, libc::SIGTERM, stop_timeout)?.as_secs_f64();
    let (mut agent, took) = restart(args, &files, admin, &ends, timeout)?;
    row.restart_s = took;

    // 5. SIGKILL, and a start with recovery.
    stop(&mut agent, libc::SIGKILL, stop_timeout)?;
    let (mut agent, took) = restart(args, &files, admin, &ends, timeout)?;
    row.kill_restart_s = took;
    stop(&mut agent, libc::SIGTERM, stop_timeout)?;
    source.stop();
    Ok(row)
}

/// Asks for a metadata sync round (`POST /mirrors/scale/sync`) and times
/// it: the coordinator answers `GET /mirrors/scale` only between rounds,
/// so the first answer showing a sync after the ask marks the round's end.
fn sync_round(admin: SocketAddr, source: &SyntheticSource) -> anyhow::Result<(Duration, u64, u64)> {
    let before = source.stats();
    let started = Instant::now();
    let asked_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    let asked = probe::request(admin, "POST", "/mirrors/scale/sync", ANSWER_TIMEOUT)?;
    anyhow::ensure!(asked.status / 100 == 2, "POST /mirrors/scale/sync: {}", asked.status);
    let deadline = started + ANSWER_TIMEOUT;
    loop {
        let described = probe::get(admin, "/mirrors/scale", ANSWER_TIMEOUT)?;
        let synced_ms = described.json()?["mirror"]["last_sync_ms"].as_u64().unwrap_or(0);
        if synced_ms >= asked_ms {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "no metadata round within {ANSWER_TIMEOUT:?}");
        std::thread::sleep(POLL);
    }
    let took = started.elapsed();
    let after = source.stats();
    Ok((
        took,
        after.metadata_requests - before.metadata_requests,
        after.metadata_response_bytes - before.metadata_response_bytes,
    ))
}

fn print_row(r: &Row) {
    println!(
        "P={}: mirroring {:.2} s, first bytes {:.2} s, RSS idle {:.1} MiB, restart {:.2} s, after SIGKILL {:.2} s",
        r.partitions,
        r.mirroring_s,
        r.first_bytes_s,
        r.rss_idle as f64 / MIB,
        r.restart_s,
        r.kill_restart_s
    );
}

fn print_table(args: &Args, rows: &[Row]) {
    let preallocate = args
        .preallocate_bytes
        .map_or("16 MiB (default)".to_string(), |b| format!("{b} B"));
    let index = args
        .segment_index_bytes
        .map_or("10 MiB (default)".to_string(), |b| format!("{b} B"));
    println!(
        "\none topic of P partitions, {} shards, preallocate_bytes {preallocate}, segment_index_bytes {index}, {} head batch(es) of {} records, \
         then {} MB/s over all partitions for {} s, fetch sessions {}\n",
        args.shards,
        args.head_batches,
        args.records_per_batch,
        args.rate_mb_s,
        args.loaded_s,
        if args.sessionless { "off" } else { "on" }
    );
    let header = [
        "P",
        "all MIRRORING s",
        "first bytes s",
        "loaded MB/s",
        "RSS loaded MiB",
        "RSS idle MiB",
        "RSS idle KiB/part",
        "open files",
        "mappings",
        "disk beyond data MiB",
        "idle Fetch/s",
        "idle Fetch B",
        "largest Fetch B",
        "/status ms, KB",
        "/metrics ms, KB",
        "sync round ms, Metadata answers, KB",
        "clean stop s",
        "start after stop s",
        "start after SIGKILL s",
    ];
    println!("| {} |", header.join(" | "));
    println!("|{}", " ---: |".repeat(header.len()));
    for r in rows {
        let per_fetch = r.idle_fetch_bytes.checked_div(r.idle_fetches).unwrap_or(0);
        let cells = [
            r.partitions.to_string(),
            format!("{:.2}", r.mirroring_s),
            format!("{:.2}", r.first_bytes_s),
            format!("{:.1}", r.rate_mb_s),
            format!("{:.0}", r.rss_loaded as f64 / MIB),
            format!("{:.0}", r.rss_idle as f64 / MIB),
            format!("{:.1}", r.rss_idle as f64 / 1024.0 / r.partitions as f64),
            r.files.to_string(),
            r.mappings.to_string(),
            format!("{:.0}", r.disk_allocated.saturating_sub(r.data_bytes) as f64 / MIB),
            format!("{:.1}", r.idle_fetches as f64 / args.idle_s),
            per_fetch.to_string(),
            r.fetch_bytes_max.to_string(),
            format!("{:.0}, {:.0}", r.status.0.as_secs_f64() * 1e3, r.status.1 as f64 / 1e3),
            format!(
                "{:.0}, {:.0}",
                r.metrics.0.as_secs_f64() * 1e3,
                r.metrics.1 as f64 / 1e3
            ),
            format!(
                "{:.0}, {}, {:.0}",
                r.sync_round.0.as_secs_f64() * 1e3,
                r.sync_round.1,
                r.sync_round.2 as f64 / 1e3
            ),
            format!("{:.2}", r.stop_s),
            format!("{:.2}", r.restart_s),
            format!("{:.2}", r.kill_restart_s),
        ];
        println!("| {} |", cells.join(" | "));
    }
}

fn draw(dir: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let series = |f: fn(&Row) -> f64| rows.iter().map(|r| (r.partitions as f64, f(r))).collect::<Vec<_>>();
    plot::lines(
        &dir.join("scale-rss.png"),
        "Agent RSS vs partitions (one agent)",
        ("partitions", "RSS, MiB"),
        &[
            ("idle".into(), series(|r| r.rss_idle as f64 / MIB)),
            (
                "loaded".into(),
                // Not sampled where start-up outlasted the append window.
                rows.iter()
                    .filter(|r| r.rss_loaded > 0)
                    .map(|r| (r.partitions as f64, r.rss_loaded as f64 / MIB))
                    .collect(),
            ),
        ],
    )?;
    plot::lines(
        &dir.join("scale-startup.png"),
        "Start-up vs partitions (one agent)",
        ("partitions", "seconds until every partition serves"),
        &[
            ("first start (all MIRRORING)".into(), series(|r| r.mirroring_s)),
            ("after a clean stop".into(), series(|r| r.restart_s)),
            ("after SIGKILL".into(), series(|r| r.kill_restart_s)),
        ],
    )?;
    Ok(())
}
