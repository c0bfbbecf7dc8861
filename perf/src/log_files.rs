//! A partition directory's segment files on disk (ours or a Kafka
//! broker's: the same layout), for comparing what two logs hold.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The `.log` files in partition directory `dir`, in offset order (their
/// names are 20-digit base offsets).
pub fn log_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    Ok(logs)
}
