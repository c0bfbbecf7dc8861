//! The mirroring family (`mirror-<shards>[-copy]`): `ringmirror run` as a
//! child mirroring the synthetic source's topic into a data dir on disk,
//! timed from the source's side (first Fetch to caught up), optionally
//! under `perf record` (events enabled for the window only), and its
//! segments compared byte for byte with the source's batches afterwards.
//! The serving scenarios mirror their data dir with it once per run. The
//! agent runs as users run it, from a config file: never in this process.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::log_files::{check_logs_hold, log_files};
use ringmirror_perf::synthetic_source::SyntheticSource;

use crate::TOPIC;
use crate::measure::{DoneSignal, Measured, measure};
use crate::process::{log_tail, spawn_watched, wait_exit};
use crate::throughput::{Harness, SourceRun};

/// The pid of the program `perf record` runs, once it has exec'd.
fn workload_pid(perf_pid: u32, program: &Path) -> anyhow::Result<u32> {
    let name: String = program
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(15).collect())
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let children =
            std::fs::read_to_string(format!("/proc/{perf_pid}/task/{perf_pid}/children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == name {
                return Ok(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    bail!("perf record did not start {}", program.display())
}

/// Compares every partition's segments with what the source served.
fn verify_mirror(data_dir: &Path, dataset: &Dataset) -> anyhow::Result<()> {
    for (p, part) in dataset.partitions.iter().enumerate() {
        let dir = data_dir.join(format!("{TOPIC}-{p}"));
        check_logs_hold(&log_files(&dir)?, &part.bytes)
            .with_context(|| format!("{}: compared with the source", dir.display()))?;
    }
    Ok(())
}

/// The agent's `[log]` table from `key=value` settings (empty without any).
pub fn log_table(settings: &[String]) -> String {
    if settings.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = settings.iter().map(|kv| kv.replacen('=', " = ", 1)).collect();
    format!("\n[log]\n{}\n", lines.join("\n"))
}

impl Harness<'_> {
    /// `agent run` (a `ringmirror` binary) with `shards` shards and `ingest` mirrors the source into
    /// `<run dir>/data`; the first run with 1 shard is profiled when `--perf-record` asks.
    pub fn run_mirror(
        &mut self,
        (shards, ingest): (usize, &str),
        agent: &Path,
        source: SyntheticSource,
        run: &SourceRun,
    ) -> anyhow::Result<Measured> {
        let data_dir = run.dir.join("data");
        let a = self.args;
        let config = format!(
            "data_dir = {data_dir:?}\nshards = {shards}\n{}\n[[mirror]]\nname = \"perf\"\n\
             bootstrap_servers = [{:?}]\ntopics = [{TOPIC:?}]\nfetch_max_wait_ms = {}\n\
             fetch_min_bytes = 1\nfetch_max_bytes = {}\nfetch_partition_max_bytes = {}\ningest = {:?}\n",
            log_table(&a.log_setting),
            run.addr,
            a.fetch_max_wait_ms,
            a.fetch_max_bytes,
            a.fetch_partition_max_bytes,
            ingest
        );
        let config_path = run.dir.join("agent.toml");
        std::fs::write(&config_path, config)?;
        let profile = match (&a.perf_record, shards, self.perf_recorded) {
            (Some(out), 1, false) => Some(out.clone()),
            _ => None,
        };
        if profile.is_some() {
            let fifo = std::ffi::CString::new(run.dir.join("perf-control.fifo").as_os_str().as_encoded_bytes())?;
            // SAFETY: a valid C string.
            anyhow::ensure!(
                unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } == 0,
                "mkfifo: {}",
                std::io::Error::last_os_error()
            );
        }
        let mut cmd;
        let control = run.dir.join("perf-control.fifo");
        if let Some(out) = &profile {
            // perf starts the agent itself, so no sample is lost to attaching late.
            self.perf_recorded = true;
            let call_graph = if a.perf_call_graph == "fp" { "fp" } else { "dwarf,16384" };
            cmd = Command::new("perf");
            cmd.args([
                "record",
                "-F",
                "999",
                "-e",
                "cpu-clock",
                "--call-graph",
                call_graph,
                "-D",
                "-1",
                "-o",
            ])
            .arg(out)
            .arg(format!("--control=fifo:{}", control.display()))
            .arg("--")
            .arg(agent);
        } else {
            cmd = Command::new(agent);
        }
        cmd.arg("run").arg("--config").arg(&config_path);
        let mut w = spawn_watched(cmd, &run.log)?;
        if profile.is_some() {
            w.pid = workload_pid(w.child.id(), agent)?;
            w.perf_control = Some(std::fs::OpenOptions::new().read(true).write(true).open(&control)?);
        }
        let m = measure(&mut w, &source, DoneSignal::SourceCaughtUp, run.bytes, run.timeout);
        // SAFETY: signalling our own child (or perf's, which we started).
        unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
        let status = wait_exit(&mut w.child, Duration::from_secs(60))?;
        let m = m?;
        anyhow::ensure!(status.success(), "agent failed ({status}): {}", log_tail(&run.log));
        source.stop();
        verify_mirror(&data_dir, &self.dataset).context("mirrored data")?;
        Ok(m)
    }
}
