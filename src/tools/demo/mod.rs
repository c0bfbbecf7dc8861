//! `ringmirror demo`: the whole product in one process, on generated data.
//!
//! 1. Writes a source data directory (`source/`) the way a Kafka broker
//!    would hold it: keyed records in lz4 and gzip batches from idempotent
//!    producers (`orders`), transactions from two producers per partition
//!    with COMMIT and ABORT markers, one left open (`payments`), and a
//!    compacted topic whose offsets have gaps inside and between batches
//!    (`inventory`), across a few leader epochs.
//! 2. Starts a *source agent* serving that directory on a Kafka listener,
//!    and a *mirror agent* that mirrors every topic from it into `mirror/`
//!    — the same Fetch path that mirrors a Kafka cluster — showing progress.
//! 3. Stops both agents (so each directory is read by the log's own reader
//!    with nothing writing) and verifies that every partition of `mirror/`
//!    holds the source's batches byte for byte at the same offsets, with the
//!    same leader-epoch checkpoint, log start and end, last stable offset,
//!    aborted transactions and topic id.
//!
//! The rate it reports is the mirror agent's own, from its events: from
//! the first partition placed on a shard (its fetcher starts there) to the
//! last batch committed at the source's end — not the agents' start-up.
//!
//! With `--keep-running` both agents start again afterwards, on the ports
//! they had (the mirror keeps the source address it stored), and serve
//! until SIGINT or SIGTERM, for Kafka clients such as kcat and for
//! `ringmirror status` at the mirror agent's admin API to look at.
//!
//! `generate` writes the source, `verify` compares; the run itself (the
//! agents, the progress, `--keep-running`) is here.

mod generate;
mod verify;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use ringmirror_dataplane::fetch::{ShardEvent, StateEvent, TelemetryEvent};
use ringmirror_storage::log::{LogConfig, TopicPartition};

use crate::agent::{Agent, EventObserver};
use crate::config::AgentConfig;

pub use self::generate::{Codec, compress_batch};
use self::generate::{Generated, TOPICS, generate};
use self::verify::DIFFERENCES_SHOWN;
pub use self::verify::{Verification, verify};

/// The mirror's name in the mirror agent's configuration.
const MIRROR_NAME: &str = "demo";
/// The smallest `--size`: every partition still gets a few dozen batches.
const MIN_SIZE_BYTES: u64 = 1 << 20;
/// Mirroring fails when no partition has moved for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often progress is redrawn from the agent's status.
pub(super) const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// Parses `--size`: bytes with an optional suffix, KiB/MiB/GiB (also K/M/G)
/// or KB/MB/GB (powers of ten).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let bad = || format!("{text:?}: expected a size such as 256MiB or 1GiB");
    let number: u64 = number.parse().map_err(|_| bad())?;
    let unit_bytes: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(bad()),
    };
    let bytes = number.checked_mul(unit_bytes).ok_or_else(bad)?;
    if bytes < MIN_SIZE_BYTES {
        return Err(format!("{text:?}: the demo needs at least 1MiB"));
    }
    Ok(bytes)
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// Segments small enough that every partition rolls a few, so the mirror
/// is read across segment boundaries too.
fn log_config(size_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes: (size_bytes / 16).clamp(256 << 10, 64 << 20),
        ..LogConfig::default()
    }
}

pub(super) fn bar_style(template: &str) -> anyhow::Result<ProgressStyle> {
    Ok(ProgressStyle::with_template(template)?.progress_chars("=> "))
}

/// Where the two agents listen: the first time on free loopback ports;
/// with `--keep-running` again on the same ones, because the mirror agent
/// keeps the source address its mirror was created with (`__mirror_state`
/// wins over the configuration file), so a source agent on another port
/// would leave it retrying a dead one.
struct Listeners {
    source: SocketAddr,
    mirror: SocketAddr,
    /// The mirror agent's admin API, for `ringmirror status`.
    admin: Option<SocketAddr>,
}

impl Listeners {
    const ANY_LOOPBACK: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

    fn any_free() -> Self {
        Self {
            source: Self::ANY_LOOPBACK,
            mirror: Self::ANY_LOOPBACK,
            admin: None,
        }
    }
}

/// An agent listening on `listen` (and serving its admin API on `admin`);
/// `mirror` is TOML for its `[[mirror]]` table, if any.
fn agent_config(
    dir: &Path,
    config: LogConfig,
    (listen, admin): (SocketAddr, Option<SocketAddr>),
    mirror: &str,
) -> anyhow::Result<AgentConfig> {
    let admin = admin.map_or_else(String::new, |addr| format!("[admin]\naddress = \"{addr}\""));
    AgentConfig::parse(&format!(
        r#"
        data_dir = {dir:?}
        [log]
        segment_bytes = {segment_bytes}
        [listener]
        address = "{listen}"
        {admin}
        {mirror}
        "#,
        segment_bytes = config.segment_bytes,
    ))
}

fn source_agent_config(dir: &Path, config: LogConfig, listen: SocketAddr) -> anyhow::Result<AgentConfig> {
    agent_config(dir, config, (listen, None), "")
}

fn mirror_agent_config(
    dir: &Path,
    config: LogConfig,
    at: &Listeners,
    source: SocketAddr,
) -> anyhow::Result<AgentConfig> {
    let mirror =
        format!("[[mirror]]\nname = \"{MIRROR_NAME}\"\nbootstrap_servers = [\"{source}\"]\ntopics_include = \".*\"");
    agent_config(dir, config, (at.mirror, at.admin), &mirror)
}

/// Starts the source agent on `source_dir` and the mirror agent on
/// `mirror_dir` (handing its events to `observer`), mirroring every topic
/// from the former, both listening where `at` says.
fn start_agents(
    (source_dir, mirror_dir): (&Path, &Path),
    config: LogConfig,
    at: &Listeners,
    observer: EventObserver,
) -> anyhow::Result<(Agent, Agent)> {
    let source = Agent::start(source_agent_config(source_dir, config, at.source)?).context("start the source agent")?;
    let source_addr = source.listener_addr().context("the source agent does not listen")?;
    match Agent::start_observed(mirror_agent_config(mirror_dir, config, at, source_addr)?, observer) {
        Ok(mirror) => Ok((source, mirror)),
        Err(e) => {
            // The source agent is stopped either way; the start error is the news.
            let _ = source.stop();
            Err(e.context("start the mirror agent"))
        }
    }
}

/// When the mirror agent mirrored, as its own events tell: from the first
/// partition placed on its shard (its fetcher starts there, after the
/// agent's start-up and first metadata round) to the progress report that
/// brings the last partition to the source's end offset. Each moment is
/// taken on the agent's events thread as the event arrives, so polling the
/// status cannot blur it.
#[derive(Debug, Default)]
struct MirroringClock {
    started: Option<Instant>,
    caught_up: Option<Instant>,
    /// Partitions short of their end offset, with that offset.
    behind: BTreeMap<TopicPartition, i64>,
}

impl MirroringClock {
    /// A clock for mirroring `generated`, and the observer that keeps it.
    fn observe(generated: &Generated) -> (Arc<Mutex<Self>>, EventObserver) {
        let behind = generated
            .partitions
            .iter()
            .filter(|(_, facts)| facts.end_offset > 0)
            .map(|(tp, facts)| (tp.clone(), facts.end_offset))
            .collect();
        let clock = Arc::new(Mutex::new(Self {
            behind,
            ..Self::default()
        }));
        let kept = Arc::clone(&clock);
        let observer: EventObserver = Box::new(move |event: &ShardEvent| {
            let now = Instant::now();
            let mut clock = kept.lock().expect("mirroring clock lock");
            match event {
                ShardEvent::State(StateEvent::Placed { mirror, .. }) if mirror == MIRROR_NAME => {
                    clock.started.get_or_insert(now);
                }
                ShardEvent::Telemetry(TelemetryEvent::Progress {
                    mirror,
                    tp,
                    log_end_offset,
                    ..
                }) if mirror == MIRROR_NAME && clock.behind.get(tp).is_some_and(|end| log_end_offset >= end) => {
                    clock.behind.remove(tp);
                    if clock.behind.is_empty() {
                        clock.caught_up = Some(now);
                    }
                }
                _ => {}
            }
        });
        (clock, observer)
    }

    /// From the first partition placed to the last one caught up.
    fn mirroring_time(&self) -> Option<Duration> {
        Some(self.caught_up?.saturating_duration_since(self.started?))
    }
}

/// Follows the mirror agent until every partition reaches the source's end,
/// drawing a bar of mirrored bytes and a lag line per partition.
fn follow_mirroring(mirror: &Agent, generated: &Generated, stop: &AtomicBool) -> anyhow::Result<()> {
    let multi = MultiProgress::new();
    let total = multi.add(ProgressBar::new(generated.sum(|f| f.bytes)).with_style(bar_style(
        "mirroring  {bar:40.green/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {elapsed}",
    )?));
    // Lag is drawn from the same state as the position, so the two always agree.
    let line_style = bar_style("  {prefix:<12} {bar:24} {pos:>9}/{len:<9} offsets, lag {lag}")?.with_key(
        "lag",
        |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}", state.len().unwrap_or(0).saturating_sub(state.pos()));
        },
    );
    let lines: Vec<ProgressBar> = generated
        .partitions
        .iter()
        .map(|(tp, facts)| {
            multi.add(
                ProgressBar::new(facts.end_offset.max(0) as u64)
                    .with_style(line_style.clone())
                    .with_prefix(tp.to_string()),
            )
        })
        .collect();
    let mut last_move = (Instant::now(), 0u64);
    loop {
        ensure!(!stop.load(Ordering::Relaxed), "interrupted");
        let status = mirror.status();
        let mut mirrored = 0;
        let mut caught_up = true;
        for ((tp, facts), line) in generated.partitions.iter().zip(&lines) {
            let state = status.get(&(MIRROR_NAME.to_owned(), tp.clone()));
            if let Some(reason) = state.and_then(|s| s.stopped.as_ref()) {
                bail!("{tp} stopped mirroring: {reason:?}");
            }
            let end = state.map_or(0, |s| s.log_end_offset);
            mirrored += facts.bytes_below(end);
            caught_up &= end >= facts.end_offset;
            line.set_position(end.clamp(0, facts.end_offset) as u64);
        }
        total.set_position(mirrored);
        if caught_up {
            break;
        }
        if mirrored != last_move.1 {
            last_move = (Instant::now(), mirrored);
        } else if last_move.0.elapsed() >= STALL_TIMEOUT {
            let behind: Vec<String> = lines
                .iter()
                .filter(|l| l.position() < l.length().unwrap_or(0))
                .map(|l| format!("{} at {}/{}", l.prefix(), l.position(), l.length().unwrap_or(0)))
                .collect();
            bail!(
                "mirroring made no progress for {} s; behind: {}",
                STALL_TIMEOUT.as_secs(),
                behind.join(", ")
            );
        }
        std::thread::sleep(PROGRESS_INTERVAL);
    }
    total.finish();
    for line in &lines {
        line.finish();
    }
    Ok(())
}

/// Serves from both agents until SIGINT or SIGTERM, then stops them.
fn keep_running(source: Agent, mirror: Agent, stop: &AtomicBool) -> anyhow::Result<()> {
    let (Some(source_addr), Some(mirror_addr), Some(admin_addr)) =
        (source.listener_addr(), mirror.listener_addr(), mirror.admin_addr())
    else {
        bail!("an agent does not listen");
    };
    println!();
    println!("both agents are running; Ctrl-C stops them");
    println!("  source agent  {source_addr}  (serves source/)");
    println!("  mirror agent  {mirror_addr}  (mirrors every topic from the source into mirror/, and serves it)");
    println!("  admin API     http://{admin_addr}  (the mirror agent's)");
    println!("try:");
    println!("  kcat -b {mirror_addr} -L");
    println!("  kcat -b {mirror_addr} -C -t orders -e");
    println!("  kcat -b {source_addr} -C -t payments -e");
    println!("  ringmirror status --admin http://{admin_addr}");
    std::io::stdout().flush()?;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("signal received; stopping both agents");
    let mirrored = mirror.stop();
    source.stop()?;
    mirrored
}

/// `ringmirror demo`.
pub fn run(data_dir: Option<PathBuf>, size_bytes: u64, keep: bool) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let temp;
    let dir = match data_dir {
        Some(dir) => dir,
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_owned()
        }
    };
    let (source_dir, mirror_dir) = (dir.join("source"), dir.join("mirror"));
    for d in [&source_dir, &mirror_dir] {
        let used = std::fs::read_dir(d).is_ok_and(|mut entries| entries.next().is_some());
        ensure!(!used, "{} is not empty: give the demo a fresh --data-dir", d.display());
    }
    let config = log_config(size_bytes);
    println!("ringmirror demo: data dir {} (source/ and mirror/)", dir.display());

    let started = Instant::now();
    let generated = generate(&source_dir, size_bytes, config, &stop)?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "source: {} topics, {} partitions, {} records in {} batches, {} written in {secs:.1} s",
        TOPICS.len(),
        generated.partitions.len(),
        generated.sum(|f| f.records),
        generated.sum(|f| f.batches),
        mib(generated.sum(|f| f.bytes)),
    );
    println!("  orders     keyed records, lz4 and gzip batches, idempotent producers");
    println!(
        "  payments   transactions of two producers per partition: {} committed, {} aborted, {} open",
        generated.topic_sum("payments", |f| f.committed),
        generated.topic_sum("payments", |f| f.aborted),
        generated.topic_sum("payments", |f| f.open),
    );
    println!(
        "  inventory  compacted: {} of {} offsets removed (gaps inside and between batches)",
        generated.topic_sum("inventory", |f| f.end_offset as u64 - f.records),
        generated.topic_sum("inventory", |f| f.end_offset as u64),
    );

    let started = Instant::now();
    let (clock, observer) = MirroringClock::observe(&generated);
    let (source, mirror) = start_agents((&source_dir, &mirror_dir), config, &Listeners::any_free(), observer)?;
    let (Some(source_addr), Some(mirror_addr)) = (source.listener_addr(), mirror.listener_addr()) else {
        bail!("an agent does not listen");
    };
    println!("source agent serving source/ on {source_addr}; mirror agent mirroring every topic from it into mirror/");
    let followed = follow_mirroring(&mirror, &generated, &stop);
    let secs = started.elapsed().as_secs_f64();
    let mirror_stopped = mirror.stop();
    source.stop().context("stop the source agent")?;
    followed?;
    mirror_stopped.context("stop the mirror agent")?;
    let bytes = generated.sum(|f| f.bytes);
    let mirroring = clock
        .lock()
        .expect("mirroring clock lock")
        .mirroring_time()
        .context("the mirror agent reported no start or no end of mirroring")?;
    println!(
        "mirrored {} at {:.1} MiB/s ({:.2} s from the first partition placed to the last batch committed; \
         {secs:.1} s with both agents' start-up), both agents stopped cleanly",
        mib(bytes),
        bytes as f64 / mirroring.as_secs_f64().max(1e-9) / 1048576.0,
        mirroring.as_secs_f64()
    );

    let v = verify(&source_dir, &mirror_dir)?;
    if !v.differences.is_empty() {
        println!("verified: the mirror DIFFERS from the source");
        for d in v.differences.iter().take(DIFFERENCES_SHOWN) {
            println!("  {d}");
        }
        if v.differences.len() > DIFFERENCES_SHOWN {
            println!("  … and {} more", v.differences.len() - DIFFERENCES_SHOWN);
        }
        bail!("{} differences between mirror/ and source/", v.differences.len());
    }
    println!(
        "verified: identical — {} partitions, {} batches, {}: the same bytes at the same offsets",
        v.partitions,
        v.batches,
        mib(v.bytes)
    );
    println!(
        "  and the same leader-epoch checkpoints, log start/end and last stable offsets, aborted transactions, topic ids"
    );
    if keep {
        let kept = Listeners {
            source: source_addr,
            mirror: mirror_addr,
            admin: Some(Listeners::ANY_LOOPBACK),
        };
        let (source, mirror) = start_agents((&source_dir, &mirror_dir), config, &kept, Box::new(|_| {}))?;
        keep_running(source, mirror, &stop)?;
    }
    Ok(())
}
