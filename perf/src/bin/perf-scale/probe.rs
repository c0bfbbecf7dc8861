//! What the harness reads of a running agent: its resident memory, open
//! files and mappings from `/proc`, the disk its data dir holds, and its
//! admin API (`GET` over a plain HTTP/1.0 connection, timed, with the
//! answer's size). It never starts or stops anything.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Resident memory of `pid` (`VmRSS`), in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kib: u64 = line.split_whitespace().nth(1).context("VmRSS value")?.parse()?;
    Ok(kib * 1024)
}

/// Open file descriptors of `pid`.
pub fn open_files(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// Memory mappings of `pid` (lines of `/proc/<pid>/maps`).
pub fn mappings(pid: u32) -> anyhow::Result<usize> {
    let maps = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(maps.iter().filter(|&&b| b == b'\n').count())
}

/// Disk a directory tree holds: (allocated bytes, st_blocks × 512; apparent bytes, st_size).
pub fn disk_usage(dir: &Path) -> anyhow::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut allocated, mut apparent) = (0u64, 0u64);
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                allocated += meta.blocks() * 512;
                apparent += meta.size();
            }
        }
    }
    Ok((allocated, apparent))
}

/// One admin API answer: its status code, body and how long it took.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    pub took: Duration,
}

impl Answer {
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body).context("admin API answer is not JSON")
    }
}

/// `GET path` on the admin API.
pub fn get(admin: SocketAddr, path: &str, timeout: Duration) -> anyhow::Result<Answer> {
    request(admin, "GET", path, timeout)
}

/// `method path` (no body) on the admin API; HTTP/1.0, so the server
/// closes after the answer and no chunked encoding is involved.
pub fn request(admin: SocketAddr, method: &str, path: &str, timeout: Duration) -> anyhow::Result<Answer> {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&admin, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {admin}\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let took = started.elapsed();
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("{method} {path}: no HTTP header in {} bytes", raw.len());
    };
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{method} {path}: bad status line {head:?}"))?;
    Ok(Answer {
        status,
        body: raw[split + 4..].to_vec(),
        took,
    })
}

/// How many of the mirror's partitions are MIRRORING (`GET /mirrors`).
pub fn mirroring(admin: SocketAddr, timeout: Duration) -> anyhow::Result<u64> {
    let answer = get(admin, "/mirrors", timeout)?;
    anyhow::ensure!(answer.status == 200, "GET /mirrors: {}", answer.status);
    let json = answer.json()?;
    Ok(json["mirrors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["states"]["MIRRORING"].as_u64())
        .sum())
}

/// How many partitions in `GET /status` are MIRRORING with a destination
/// offset of at least `at_least[partition]`; and the answer.
pub fn mirrored_to(admin: SocketAddr, at_least: &[i64], timeout: Duration) -> anyhow::Result<(usize, Answer)> {
    let answer = get(admin, "/status", timeout)?;
    anyhow::ensure!(answer.status == 200, "GET /status: {}", answer.status);
    let json = answer.json()?;
    let done = json["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            let partition = p["partition"].as_u64().unwrap_or(u64::MAX) as usize;
            p["state"] == "MIRRORING"
                && at_least
                    .get(partition)
                    .is_some_and(|&want| p["destination_offset"].as_i64().unwrap_or(-1) >= want)
        })
        .count();
    Ok((done, answer))
}
