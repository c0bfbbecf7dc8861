//! The harness's child processes and its scratch space: spawning a child
//! with its stdout lines collected (each with when it arrived) and its
//! stderr in a log file, waiting for lines or exit without reaping (so a
//! finished child can still be sampled in `/proc`), bounded waits for exit,
//! free disk and a work directory. It never measures: `measure` does.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

/// A child process whose stdout lines are collected as they come.
pub struct Watched {
    pub child: Child,
    /// The measured process: the child, or the workload of a `perf record` child.
    pub pid: u32,
    /// `perf record --control` FIFO: events are enabled for the measured window only.
    pub perf_control: Option<std::fs::File>,
    /// The child's stdout lines, with when each arrived.
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    /// The thread collecting `lines`; it ends when the child's stdout closes.
    reader: Option<JoinHandle<()>>,
    pub log: PathBuf,
}

impl Watched {
    /// The first line the child printed starting with `prefix`, and when.
    pub fn line(&self, prefix: &str) -> Option<(Instant, String)> {
        self.lines
            .lock()
            .expect("lines lock")
            .iter()
            .find(|(_, l)| l.starts_with(prefix))
            .cloned()
    }

    /// The first line starting with `prefix` once the child has exited and
    /// all it printed has been read.
    pub fn last_words(&mut self, prefix: &str) -> Option<String> {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.line(prefix).map(|(_, line)| line)
    }

    /// Waits for a line starting with `prefix`; fails if the child exits first.
    pub fn wait_line(&self, prefix: &str, timeout: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((_, line)) = self.line(prefix) {
                return Ok(line);
            }
            anyhow::ensure!(
                !exited_unreaped(self.child.id()),
                "child exited; its log:\n{}",
                log_tail(&self.log)
            );
            anyhow::ensure!(Instant::now() < deadline, "no {prefix:?} line after {timeout:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Starts `cmd` with its stderr in `log`.
pub fn spawn_watched(mut cmd: Command, log: &Path) -> anyhow::Result<Watched> {
    let log_file = std::fs::File::create(log)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("spawn {cmd:?}"))?;
    let stdout = child.stdout.take().expect("piped");
    let lines: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let seen = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            seen.lock().expect("lines lock").push((Instant::now(), line));
        }
    });
    Ok(Watched {
        pid: child.id(),
        perf_control: None,
        child,
        lines,
        reader: Some(reader),
        log: log.to_path_buf(),
    })
}

/// The last lines of a child's log, for an error message.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Whether `pid` has exited, without reaping it (its `/proc` entry stays readable).
pub fn exited_unreaped(pid: u32) -> bool {
    // SAFETY: waitid with a valid out-pointer; WNOWAIT leaves the child waitable.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid for a filled-in SIGCHLD siginfo.
    rc == 0 && unsafe { info.si_pid() } != 0
}

/// Waits for `child` to exit, killing it after `timeout`.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Ok(child.wait()?);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Bytes available to us on the file system holding `path`.
pub fn free_bytes(path: &Path) -> anyhow::Result<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: valid C string and out-pointer.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    anyhow::ensure!(
        rc == 0,
        "statvfs {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// A fresh work directory under `base`, named for this process.
pub fn tempdir_in(base: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    let dir = base.join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}
