//! The `ringmirror` command: CLI entry point and wiring.
//!
//! Subcommands: `run` (the mirroring agent), `demo` (generates a source,
//! serves it with one agent, mirrors it with another and verifies the
//! mirror byte for byte), `selfcheck` (the embedded default: writes a
//! partition log, kills the writer mid-append, recovers and verifies) and
//! `dump-log` (prints a segment file's batches, like Kafka's
//! `kafka-dump-log.sh`); `mirror …`, `status` and `acls …` talk to a running agent's
//! admin API (`ringmirror::cli_admin`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ringmirror_protocol::lazy_alloc::LazyHugeAlloc;

/// Client requests can claim billions of array elements in a few bytes and
/// the protocol decoders reserve that much up front; served lazily, such a
/// reservation costs address space instead of aborting the agent.
#[global_allocator]
static ALLOCATOR: LazyHugeAlloc = LazyHugeAlloc;

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
    /// Generate a source data dir, serve it with one agent and mirror it
    /// with another (both in this process), then verify the mirror byte for
    /// byte, offset for offset.
    Demo {
        /// Where to put `source/` and `mirror/` (a fresh temporary directory by default; kept when given).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// How much the source holds: bytes, or with a suffix such as 64MiB or 1GiB.
        #[arg(long, default_value = "512MiB", value_parser = ringmirror::tools::demo::parse_size)]
        size: u64,
        /// Keep both agents serving after verification, until SIGINT/SIGTERM.
        #[arg(long)]
        keep_running: bool,
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
    /// Create, inspect and control mirrors of a running agent (admin API).
    Mirror {
        #[command(flatten)]
        admin: ringmirror::cli_admin::AdminArgs,
        #[command(subcommand)]
        command: ringmirror::cli_admin::MirrorCommand,
    },
    /// Who may create, alter and describe which mirrors: the ClusterMirror ACLs (admin API).
    Acls {
        #[command(flatten)]
        admin: ringmirror::cli_admin::AdminArgs,
        #[command(subcommand)]
        command: ringmirror::cli_admin::AclCommand,
    },
    /// Every mirrored partition's state, offsets and lag (admin API).
    Status {
        #[command(flatten)]
        admin: ringmirror::cli_admin::AdminArgs,
        /// Redraw every interval until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// How often --watch redraws.
        #[arg(long, default_value_t = 2000, value_name = "MS")]
        interval_ms: u64,
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
    let cli = Cli::parse();
    // The demo draws progress bars on stderr and reports on stdout: only
    // warnings should come between.
    let default_filter = match cli.command {
        Command::Demo { .. } => "warn",
        _ => "warn,ringmirror=info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Run { config } => run(&config),
        Command::Demo {
            data_dir,
            size,
            keep_running,
        } => ringmirror::tools::demo::run(data_dir, size, keep_running),
        Command::Selfcheck {
            child_writer: Some(dir),
            size_mb,
            ..
        } => ringmirror::tools::selfcheck::run_writer(&dir, size_mb),
        Command::Selfcheck {
            data_dir,
            size_mb,
            child_writer: None,
        } => ringmirror::tools::selfcheck::run(data_dir, size_mb),
        Command::DumpLog { path, deep } => ringmirror::tools::dump_log::run(&path, deep, &mut std::io::stdout().lock()),
        Command::Mirror { admin, command } => {
            let verifying = matches!(command, ringmirror::cli_admin::MirrorCommand::Verify { .. });
            match ringmirror::cli_admin::mirror(&admin, command) {
                Ok((out, code)) => {
                    print!("{out}");
                    return ExitCode::from(code);
                }
                // A verification that could not even start did not complete.
                Err(e) if verifying => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(ringmirror::cli_admin::VERIFY_INCOMPLETE_EXIT);
                }
                Err(e) => Err(e),
            }
        }
        Command::Acls { admin, command } => ringmirror::cli_admin::acls(&admin, command).map(|out| print!("{out}")),
        Command::Status {
            admin,
            watch,
            interval_ms,
        } => ringmirror::cli_admin::status(&admin, watch, std::time::Duration::from_millis(interval_ms)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
