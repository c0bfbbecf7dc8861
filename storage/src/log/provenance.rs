//! A partition's provenance, `mirror-source.checkpoint` in its directory:
//! which source's batches the log holds (the source cluster id and the
//! source topic id) and the first offset written here since rather than
//! fetched (end-of-mirroring markers: ABORTs and MIRROR_PID_RESET; local
//! Produce after STOPPED).
//!
//! It decides LME truncation when a mirror starts appending
//! ([`PartitionLog::converge_for_mirror`], DESIGN.md "Log convergence"): a
//! log holding only batches of the same source topic, with nothing written
//! here, is not cut — a retry, restart or re-add must not empty a DR copy,
//! and replication truncation (the fetcher's OffsetForLeaderEpoch and
//! diverging epochs) alone converges a log that is a prefix of the
//! source's. Anything else — another cluster or topic id, local writes, or
//! provenance not known — is cut as KIP-1279 says.
//!
//! The file is versioned text ending in a CRC32C of what precedes it,
//! written atomically (temp file, fsync, rename, directory fsync) before
//! the state it describes exists: before the first local byte, and only
//! after a truncation that removed the local batches is durable. A missing
//! file (a log written by an older version, or never mirrored) or one that
//! does not validate is unknown provenance, and the KIP's cut applies.

use std::fmt;
use std::path::Path;

use super::checkpoint::{topic_id_from_str, topic_id_to_string};
use super::error::Result;
use super::files::write_atomically;
use super::partition_log::PartitionLog;

pub(crate) const PROVENANCE_FILE: &str = "mirror-source.checkpoint";
const VERSION: &str = "0";
/// Longest source cluster id recorded: a Kafka string (i16 length).
const SOURCE_CLUSTER_ID_BYTES_MAX: usize = i16::MAX as usize;
/// Longest file accepted on read (a cluster id at its bound, and the rest).
const PROVENANCE_FILE_BYTES_MAX: u64 = SOURCE_CLUSTER_ID_BYTES_MAX as u64 + 256;

/// A source partition's identity as a mirror sees it: the source cluster
/// id and the source topic id (which the mirrored topic keeps).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MirrorSource {
    cluster_id: String,
    topic_id: [u8; 16],
}

impl MirrorSource {
    /// `None` when the pair cannot name a source: no cluster id (empty,
    /// longer than a Kafka string, or with control characters, which the
    /// file cannot hold) or the zero topic id (a source without topic ids).
    pub fn new(cluster_id: &str, topic_id: [u8; 16]) -> Option<Self> {
        let valid = !cluster_id.is_empty()
            && cluster_id.len() <= SOURCE_CLUSTER_ID_BYTES_MAX
            && !cluster_id.chars().any(char::is_control)
            && topic_id != [0; 16];
        valid.then(|| Self {
            cluster_id: cluster_id.to_owned(),
            topic_id,
        })
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }
}

impl fmt::Display for MirrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cluster {} topic id {}",
            self.cluster_id,
            topic_id_to_string(&self.topic_id)
        )
    }
}

/// What a partition's log holds, as far as it is known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The source whose batches the log holds; `None` for a log no named
    /// source wrote (a local topic's, or a source without ids).
    pub source: Option<MirrorSource>,
    /// The first offset written here rather than fetched from `source`;
    /// `None` when nothing was.
    pub first_local_offset: Option<i64>,
}

impl Provenance {
    /// Only batches of `source`, nothing written here: LME truncation has
    /// nothing to cut.
    pub fn holds_only(&self, source: &MirrorSource) -> bool {
        self.source.as_ref() == Some(source) && self.first_local_offset.is_none()
    }

    fn encode(&self) -> String {
        let source = match &self.source {
            Some(s) => format!("{} {}", topic_id_to_string(&s.topic_id), s.cluster_id),
            None => "none".to_owned(),
        };
        let local = self
            .first_local_offset
            .map_or_else(|| "none".to_owned(), |o| o.to_string());
        let body = format!("version: {VERSION}\nsource: {source}\nfirst_local_offset: {local}\n");
        let crc = crc32c::crc32c(body.as_bytes());
        format!("{body}crc32c: {crc:08x}\n")
    }

    fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let crc_at = text.rfind("crc32c: ").ok_or("no crc32c line")?;
        let (body, crc_line) = text.split_at(crc_at);
        let stored = crc_line
            .strip_prefix("crc32c: ")
            .and_then(|l| l.strip_suffix('\n'))
            .filter(|hex| hex.len() == 8)
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
            .ok_or("bad crc32c line")?;
        if crc32c::crc32c(body.as_bytes()) != stored {
            return Err("crc32c does not match".into());
        }
        let lines: Vec<&str> = body.split_terminator('\n').collect();
        let [version, source, local] = lines[..] else {
            return Err(format!("{} lines, expected 3 and the crc32c", lines.len()));
        };
        if version != format!("version: {VERSION}") {
            return Err(format!("unsupported {version:?}"));
        }
        let source = match source.strip_prefix("source: ").ok_or("no source line")? {
            "none" => None,
            named => {
                let (topic_id, cluster_id) = named.split_once(' ').ok_or("bad source line")?;
                let topic_id = topic_id_from_str(topic_id).ok_or("bad source topic id")?;
                Some(MirrorSource::new(cluster_id, topic_id).ok_or("bad source")?)
            }
        };
        let first_local_offset = match local
            .strip_prefix("first_local_offset: ")
            .ok_or("no first_local_offset line")?
        {
            "none" => None,
            offset => Some(
                offset
                    .parse::<i64>()
                    .ok()
                    .filter(|o| *o >= 0)
                    .ok_or("bad first_local_offset")?,
            ),
        };
        Ok(Self {
            source,
            first_local_offset,
        })
    }
}

/// The provenance recorded in `dir`; `None` (unknown) when there is no
/// file or it does not validate (with a warning: the KIP's cut applies).
pub(crate) fn load(dir: &Path) -> Option<Provenance> {
    use std::io::Read;
    let path = dir.join(PROVENANCE_FILE);
    let mut bytes = Vec::new();
    let read = std::fs::File::open(&path).and_then(|f| f.take(PROVENANCE_FILE_BYTES_MAX + 1).read_to_end(&mut bytes));
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!(path = %path.display(), "no provenance recorded");
            return None;
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the partition's provenance; it counts as unknown (LME truncation as KIP-1279 says)");
            return None;
        }
        Ok(_) => {}
    }
    let decoded = if bytes.len() as u64 > PROVENANCE_FILE_BYTES_MAX {
        Err("too long".to_string())
    } else {
        Provenance::decode(&bytes)
    };
    match decoded {
        Ok(p) => Some(p),
        Err(reason) => {
            tracing::warn!(path = %path.display(), reason, "damaged provenance file; it counts as unknown (LME truncation as KIP-1279 says)");
            None
        }
    }
}

fn store(dir: &Path, provenance: &Provenance) -> Result<()> {
    write_atomically(&dir.join(PROVENANCE_FILE), provenance.encode().as_bytes())
}

impl PartitionLog {
    /// What the log holds, if known.
    pub fn provenance(&self) -> Option<&Provenance> {
        self.provenance.as_ref()
    }

    /// Records `provenance` durably, when it changes.
    fn set_provenance(&mut self, provenance: Provenance) -> Result<()> {
        if self.provenance.as_ref() != Some(&provenance) {
            store(&self.dir, &provenance)?;
            self.provenance = Some(provenance);
        }
        Ok(())
    }

    /// Called before the first byte this agent writes itself (rather than
    /// fetches): from here on the log is no longer only its source's.
    pub(super) fn note_local_write(&mut self) -> Result<()> {
        if self.provenance.as_ref().is_some_and(|p| p.first_local_offset.is_some()) {
            return Ok(());
        }
        let source = self.provenance.as_ref().and_then(|p| p.source.clone());
        self.set_provenance(Provenance {
            source,
            first_local_offset: Some(self.log_end_offset()),
        })
    }

    /// Called once a truncation is durable: local batches it removed no
    /// longer count.
    pub(super) fn forget_truncated_local_writes(&mut self) -> Result<()> {
        let end = self.log_end_offset();
        match &self.provenance {
            Some(p) if p.first_local_offset.is_some_and(|first| first >= end) => {
                let source = p.source.clone();
                self.set_provenance(Provenance {
                    source,
                    first_local_offset: None,
                })
            }
            _ => Ok(()),
        }
    }

    /// LME truncation for a mirror that is about to append from `source`
    /// (PREPARING; `None`: a source that cannot be named). A log holding
    /// only `source`'s batches, with nothing written here, keeps every
    /// batch: replication truncation converges it. Any other log is cut at
    /// the start of the first epoch above `last_mirror_epoch`
    /// ([`PartitionLog::truncate_above_epoch`]). Either way the log is
    /// `source`'s from here on (what the cut leaves, the fetcher's
    /// replication truncation aligns with it), and that is recorded before
    /// the mirror appends. Returns the new log end when it cut.
    pub fn converge_for_mirror(
        &mut self,
        source: Option<&MirrorSource>,
        last_mirror_epoch: i32,
    ) -> Result<Option<i64>> {
        let kept = match (source, &self.provenance) {
            (Some(s), Some(p)) if p.holds_only(s) => true,
            (source, provenance) => {
                let why = match (source, provenance) {
                    (None, _) => "the source has no cluster id or topic id to check".to_owned(),
                    (_, None) => "its provenance is not known".to_owned(),
                    (
                        _,
                        Some(Provenance {
                            first_local_offset: Some(first),
                            ..
                        }),
                    ) => format!("it was written here from offset {first}"),
                    (_, Some(Provenance { source: Some(held), .. })) => format!("it holds {held}"),
                    (_, Some(Provenance { source: None, .. })) => "no named source wrote it".to_owned(),
                };
                tracing::info!(dir = %self.dir().display(), last_mirror_epoch, why, "LME truncation as KIP-1279 says");
                false
            }
        };
        let truncated = if kept {
            tracing::info!(dir = %self.dir().display(), log_end_offset = self.log_end_offset(), last_mirror_epoch,
                "the log holds only this source's batches: LME truncation cuts nothing, replication truncation converges it");
            None
        } else {
            self.truncate_above_epoch(last_mirror_epoch)?
        };
        self.set_provenance(Provenance {
            source: source.cloned(),
            first_local_offset: None,
        })?;
        Ok(truncated)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::batch::{BatchBuilder, BuildRecord};
    use crate::log::{LogConfig, OpenOptions};

    fn source(cluster: &str, id: u8) -> MirrorSource {
        MirrorSource::new(cluster, [id; 16]).expect("a valid source")
    }

    fn open(dir: &Path) -> PartitionLog {
        PartitionLog::open(OpenOptions::new(dir, LogConfig::default()))
            .unwrap()
            .0
    }

    /// Provenance of a log holding only `source`'s batches.
    fn only(source: &MirrorSource) -> Provenance {
        Provenance {
            source: Some(source.clone()),
            first_local_offset: None,
        }
    }

    /// A batch of `records` empty records at `base_offset`, in epoch `epoch`.
    fn batch(base_offset: i64, epoch: i32, records: usize) -> Vec<u8> {
        let record = BuildRecord {
            timestamp: 1_700_000_000_000,
            ..BuildRecord::default()
        };
        BatchBuilder {
            base_offset,
            partition_leader_epoch: epoch,
            records: vec![record; records],
            ..BatchBuilder::default()
        }
        .build()
    }

    /// A log of 30 records from `from`, in epochs 0 (0..10) and 3 (10..30),
    /// placed the way a mirror places it.
    fn mirrored_log(dir: &Path, from: &MirrorSource) -> PartitionLog {
        let mut log = open(dir);
        assert_eq!(
            log.converge_for_mirror(Some(from), -1).unwrap(),
            None,
            "an empty log has nothing to cut"
        );
        log.append(&batch(0, 0, 10), 0).unwrap();
        log.append(&batch(10, 3, 20), 0).unwrap();
        log
    }

    /// [`mirrored_log`], then failed over: its end-of-mirroring markers at
    /// offset 30, epoch 13.
    fn failed_over_log(dir: &Path, from: &MirrorSource) -> PartitionLog {
        let mut log = mirrored_log(dir, from);
        log.end_mirroring(13, from.cluster_id(), 0).unwrap();
        log
    }

    fn first_segment_inode(dir: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir.join("00000000000000000000.log")).unwrap().ino()
    }

    #[test]
    fn the_same_source_keeps_every_batch_across_placements_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let s = source("cluster-a", 1);
        let log = mirrored_log(dir.path(), &s);
        let inode = first_segment_inode(dir.path());
        log.close(0).unwrap();
        let mut log = open(dir.path());
        assert_eq!(log.provenance(), Some(&only(&s)));
        // A plain Kafka source answers -1: still nothing is cut.
        assert_eq!(log.converge_for_mirror(Some(&s), -1).unwrap(), None);
        assert_eq!(log.converge_for_mirror(Some(&s), 0).unwrap(), None);
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 30));
        assert_eq!(first_segment_inode(dir.path()), inode, "the segment was not rewritten");
    }

    #[test]
    fn another_cluster_or_topic_id_is_cut_as_the_kip_says() {
        for other in [source("cluster-b", 1), source("cluster-a", 2)] {
            let dir = tempfile::tempdir().unwrap();
            let mut log = mirrored_log(dir.path(), &source("cluster-a", 1));
            assert_eq!(log.converge_for_mirror(Some(&other), -1).unwrap(), Some(0), "{other}");
            assert_eq!(log.log_end_offset(), 0);
            assert_eq!(log.provenance().unwrap().source.as_ref(), Some(&other));
            // An LME the other source answers: cut above it, at offset 10.
            let dir = tempfile::tempdir().unwrap();
            let mut log = mirrored_log(dir.path(), &source("cluster-a", 1));
            assert_eq!(log.converge_for_mirror(Some(&other), 0).unwrap(), Some(10), "{other}");
        }
    }

    #[test]
    fn a_log_with_end_of_mirroring_markers_is_cut_and_then_belongs_to_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let s = source("cluster-a", 1);
        let log = failed_over_log(dir.path(), &s);
        let p = log.provenance().unwrap().clone();
        assert_eq!((p.source.as_ref(), p.first_local_offset), (Some(&s), Some(30)));
        log.close(0).unwrap();
        let mut log = open(dir.path());
        assert_eq!(log.provenance(), Some(&p), "recorded durably");
        // Mirroring again from the same source (a plain Kafka one): the
        // markers this agent wrote are not the source's, so all goes.
        assert_eq!(log.converge_for_mirror(Some(&s), -1).unwrap(), Some(0));
        assert_eq!(log.log_end_offset(), 0);
        assert_eq!(log.provenance(), Some(&only(&s)));
        // An agent source that mirrored our epochs up to 3: the cut is
        // above them, at our markers (epoch 13).
        let dir = tempfile::tempdir().unwrap();
        let mut log = failed_over_log(dir.path(), &s);
        assert_eq!(log.converge_for_mirror(Some(&s), 3).unwrap(), Some(30));
        assert_eq!(
            log.provenance().unwrap().first_local_offset,
            None,
            "the markers are gone"
        );
    }

    #[test]
    fn a_log_with_local_produce_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let s = source("cluster-a", 1);
        let mut log = mirrored_log(dir.path(), &s);
        for _ in 0..2 {
            log.append_produced(&mut batch(0, 0, 2), 20, 0).unwrap();
        }
        assert_eq!(log.provenance().unwrap().first_local_offset, Some(30));
        // A truncation that leaves a local batch keeps the log local.
        log.truncate_to(32).unwrap();
        assert_eq!(
            (log.log_end_offset(), log.provenance().unwrap().first_local_offset),
            (32, Some(30))
        );
        assert_eq!(log.converge_for_mirror(Some(&s), -1).unwrap(), Some(0));
    }

    #[test]
    fn a_truncation_below_the_first_local_offset_forgets_the_local_writes() {
        let dir = tempfile::tempdir().unwrap();
        let s = source("cluster-a", 1);
        let mut log = failed_over_log(dir.path(), &s);
        log.truncate_to(30).unwrap();
        assert_eq!(log.provenance(), Some(&only(&s)));
        log.close(0).unwrap();
        let mut log = open(dir.path());
        assert_eq!(
            log.converge_for_mirror(Some(&s), -1).unwrap(),
            None,
            "only the source's batches are left"
        );
        assert_eq!(log.log_end_offset(), 30);
    }

    #[test]
    fn unknown_provenance_and_unnamed_sources_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let s = source("cluster-a", 1);
        let log = mirrored_log(dir.path(), &s);
        log.close(0).unwrap();
        // A log written before provenance was recorded.
        std::fs::remove_file(dir.path().join(PROVENANCE_FILE)).unwrap();
        let mut log = open(dir.path());
        assert_eq!(log.provenance(), None);
        assert_eq!(log.converge_for_mirror(Some(&s), -1).unwrap(), Some(0));
        log.append(&batch(0, 0, 5), 0).unwrap();
        // A source without a cluster id or topic id: never kept.
        assert_eq!(MirrorSource::new("", [1; 16]), None);
        assert_eq!(MirrorSource::new("cluster-a", [0; 16]), None);
        assert_eq!(MirrorSource::new("line\nbreak", [1; 16]), None);
        assert_eq!(log.converge_for_mirror(None, -1).unwrap(), Some(0));
        assert_eq!(log.provenance(), Some(&Provenance::default()));
        log.append(&batch(0, 0, 5), 0).unwrap();
        assert_eq!(
            log.converge_for_mirror(Some(&s), -1).unwrap(),
            Some(0),
            "no named source wrote it"
        );
    }

    #[test]
    fn a_damaged_file_is_unknown_provenance() {
        let dir = tempfile::tempdir().unwrap();
        let s = source("cluster-a", 1);
        let log = mirrored_log(dir.path(), &s);
        log.close(0).unwrap();
        let path = dir.path().join(PROVENANCE_FILE);
        let good = std::fs::read(&path).unwrap();
        for bad in [&b""[..], b"garbage", &good[..good.len() - 3], &vec![b'x'; 40_000]] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(load(dir.path()), None, "{:?}", String::from_utf8_lossy(bad));
        }
        let mut log = open(dir.path());
        assert_eq!(log.converge_for_mirror(Some(&s), -1).unwrap(), Some(0));
    }

    fn any_provenance() -> impl Strategy<Value = Provenance> {
        let source = proptest::option::of(("[^\\p{Cc}]{1,40}", any::<[u8; 16]>()))
            .prop_map(|s| s.and_then(|(cluster, id)| MirrorSource::new(&cluster, id)));
        (source, proptest::option::of(0..i64::MAX)).prop_map(|(source, first_local_offset)| Provenance {
            source,
            first_local_offset,
        })
    }

    proptest! {
        #[test]
        fn the_file_round_trips(p in any_provenance()) {
            prop_assert_eq!(Provenance::decode(p.encode().as_bytes()), Ok(p));
        }

        /// A torn (cut short) or changed file never reads as another
        /// provenance: it is unknown, or (a hex digit's case) the same.
        #[test]
        fn a_torn_or_changed_file_is_never_another_provenance(
            p in any_provenance(),
            cut in any::<proptest::sample::Index>(),
            at in any::<proptest::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let good = p.encode().into_bytes();
            let torn = &good[..cut.index(good.len())];
            prop_assert!(Provenance::decode(torn).is_err());
            let mut changed = good.clone();
            let at = at.index(changed.len());
            changed[at] = byte;
            match Provenance::decode(&changed) {
                Ok(read) => prop_assert!(read == p, "{:?} read as {:?}", String::from_utf8_lossy(&changed), read),
                Err(_) => prop_assert!(changed != good),
            }
        }
    }
}
