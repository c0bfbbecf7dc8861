//! Kafka's text checkpoint files: a version line, a count line, then one
//! entry per line. Used for `leader-epoch-checkpoint` ("epoch offset"),
//! `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint`
//! ("topic partition offset"), plus `partition.metadata`.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::error::{LogError, Result};
use super::files::write_atomically;

pub(crate) const CHECKPOINT_VERSION: u32 = 0;

/// Writes a checkpoint file atomically.
pub(crate) fn write_checkpoint<I: IntoIterator<Item = String>>(path: &Path, entries: I) -> Result<()> {
    let entries: Vec<String> = entries.into_iter().collect();
    let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for entry in entries {
        text.push_str(&entry);
        text.push('\n');
    }
    write_atomically(path, text.as_bytes())
}

/// Reads a checkpoint file's entry lines; a missing file has none.
pub(crate) fn read_checkpoint(path: &Path) -> Result<Vec<String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LogError::io("read", path)(e)),
    };
    let corrupt = |reason: String| LogError::CorruptFile {
        path: path.to_owned(),
        reason,
    };
    let mut lines = text.lines();
    let version = lines.next().ok_or_else(|| corrupt("empty file".into()))?;
    if version.trim() != CHECKPOINT_VERSION.to_string() {
        return Err(corrupt(format!("unsupported version {version:?}")));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| corrupt("missing entry count".into()))?;
    let entries: Vec<String> = lines.filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
    if entries.len() != count {
        return Err(corrupt(format!("expected {count} entries, found {}", entries.len())));
    }
    Ok(entries)
}

/// Kafka's textual topic id: URL-safe base64 without padding.
pub fn topic_id_to_string(id: &[u8; 16]) -> String {
    URL_SAFE_NO_PAD.encode(id)
}

pub fn topic_id_from_str(s: &str) -> Option<[u8; 16]> {
    URL_SAFE_NO_PAD.decode(s.trim()).ok()?.try_into().ok()
}

/// Writes `partition.metadata` (version 0, topic_id).
pub(crate) fn write_partition_metadata(path: &Path, topic_id: &[u8; 16]) -> Result<()> {
    let text = format!("version: 0\ntopic_id: {}\n", topic_id_to_string(topic_id));
    write_atomically(path, text.as_bytes())
}

/// Reads the topic id from `partition.metadata`, if the file exists.
pub(crate) fn read_partition_metadata(path: &Path) -> Result<Option<[u8; 16]>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io("read", path)(e)),
    };
    let corrupt = |reason: &str| LogError::CorruptFile {
        path: path.to_owned(),
        reason: reason.into(),
    };
    let mut version = None;
    let mut topic_id = None;
    for line in text.lines() {
        match line.split_once(':') {
            Some(("version", v)) => version = Some(v.trim().to_owned()),
            Some(("topic_id", v)) => topic_id = Some(topic_id_from_str(v).ok_or_else(|| corrupt("bad topic_id"))?),
            _ => {}
        }
    }
    if version.as_deref() != Some("0") {
        return Err(corrupt("unsupported version"));
    }
    topic_id.map(Some).ok_or_else(|| corrupt("missing topic_id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_and_rejects_bad_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp");
        write_checkpoint(&path, ["3 0".to_string(), "5 120".to_string()]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0\n2\n3 0\n5 120\n");
        assert_eq!(read_checkpoint(&path).unwrap(), vec!["3 0", "5 120"]);
        std::fs::write(&path, "0\n3\n1 2\n").unwrap();
        assert!(matches!(read_checkpoint(&path), Err(LogError::CorruptFile { .. })));
        assert!(read_checkpoint(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn partition_metadata_uses_kafka_topic_id_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("partition.metadata");
        let id = [7u8; 16];
        write_partition_metadata(&path, &id).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "version: 0\ntopic_id: BwcHBwcHBwcHBwcHBwcHBw\n");
        assert_eq!(read_partition_metadata(&path).unwrap(), Some(id));
    }
}
