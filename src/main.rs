//! The `ringmirror` command: CLI entry point and wiring.
//!
//! Subcommands: `run` (the mirroring agent), `selfcheck` (the embedded
//! default: writes a partition log, kills the writer mid-append, recovers
//! and verifies) and `dump-log` (prints a segment file's batches, like
//! Kafka's `kafka-dump-log.sh`).

mod dump_log;
mod selfcheck;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ringmirror",
    version,
    about = "Offset-exact, byte-for-byte mirror of Apache Kafka topics"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mirror the configured topics until SIGINT/SIGTERM, then stop cleanly.
    Run {
        /// The agent's TOML configuration.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Write a partition log in a child process, SIGKILL it mid-append,
    /// tear the tail, recover, and verify every acknowledged batch.
    Selfcheck {
        /// Where to write (a fresh temporary directory by default; kept when given).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Megabytes the writer appends before it is killed (it may be killed earlier).
        #[arg(long, default_value_t = 256)]
        size_mb: u64,
        /// Internal: run as the writer child in this directory.
        #[arg(long, hide = true)]
        child_writer: Option<PathBuf>,
    },
    /// Print every batch of a segment `.log` file, like kafka-dump-log.sh.
    DumpLog {
        /// The segment file (`<20-digit base offset>.log`).
        path: PathBuf,
        /// Also print every record (decompressing batches).
        #[arg(long)]
        deep: bool,
    },
}

/// Runs the agent until SIGINT or SIGTERM, logging a status line now and then.
fn run(config_path: &std::path::Path) -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

    let config = ringmirror::config::AgentConfig::load(config_path)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let agent = ringmirror::agent::Agent::start(config)?;
    let mut last_status = std::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if last_status.elapsed() >= STATUS_INTERVAL {
            last_status = std::time::Instant::now();
            let status = agent.status();
            let lag: i64 = status
                .values()
                .map(|s| (s.high_watermark - s.log_end_offset).max(0))
                .sum();
            let stopped = status.values().filter(|s| s.stopped.is_some()).count();
            tracing::info!(partitions = status.len(), total_lag = lag, stopped, "mirroring");
        }
    }
    tracing::info!("signal received; stopping");
    agent.stop()
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,ringmirror=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => run(&config),
        Command::Selfcheck {
            child_writer: Some(dir),
            size_mb,
            ..
        } => selfcheck::run_writer(&dir, size_mb),
        Command::Selfcheck {
            data_dir,
            size_mb,
            child_writer: None,
        } => selfcheck::run(data_dir, size_mb),
        Command::DumpLog { path, deep } => dump_log::run(&path, deep, &mut std::io::stdout().lock()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
