//! Producer ids for idempotent producers writing local topics: unique for
//! the life of the data directory. Ids are handed out from blocks whose end
//! is written (durably) to `__ringmirror/producer-id-block` before any id in
//! the block is used, so a restart never hands out an id twice.

use std::path::PathBuf;
use std::sync::Mutex;

/// Ids reserved per write of the block file.
const BLOCK_SIZE: i64 = 1000;

pub struct ProducerIds {
    path: PathBuf,
    /// (next id, end of the reserved block).
    state: Mutex<(i64, i64)>,
}

impl ProducerIds {
    /// Reads the last reserved block end from `dir` (created if missing).
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("producer-id-block");
        let end = match std::fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse::<i64>()
                .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        Ok(Self {
            path,
            state: Mutex::new((end, end)),
        })
    }

    /// A new producer id.
    pub fn next(&self) -> std::io::Result<i64> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0 >= state.1 {
            let end = state.1 + BLOCK_SIZE;
            write_durably(&self.path, end.to_string().as_bytes())?;
            state.1 = end;
        }
        let id = state.0;
        state.0 += 1;
        Ok(id)
    }

    /// From now on hands out only ids above `producer_id` (one found in a
    /// transaction log, so it is never handed out again); the new block
    /// end is written before this returns.
    pub fn reserve_through(&self, producer_id: i64) -> std::io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if producer_id < state.0 {
            return Ok(());
        }
        let end = producer_id.saturating_add(1).saturating_add(BLOCK_SIZE);
        write_durably(&self.path, end.to_string().as_bytes())?;
        *state = (producer_id + 1, end);
        Ok(())
    }
}

fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_unique_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let a = ProducerIds::open(dir.path()).unwrap();
        let first: Vec<i64> = (0..3).map(|_| a.next().unwrap()).collect();
        assert_eq!(first, vec![0, 1, 2]);
        drop(a);
        let b = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(b.next().unwrap(), BLOCK_SIZE);
    }

    #[test]
    fn reserved_ids_are_never_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let a = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(a.next().unwrap(), 0);
        a.reserve_through(5000).unwrap();
        assert_eq!(a.next().unwrap(), 5001);
        // An id below the next one changes nothing.
        a.reserve_through(10).unwrap();
        assert_eq!(a.next().unwrap(), 5002);
        drop(a);
        let b = ProducerIds::open(dir.path()).unwrap();
        assert!(b.next().unwrap() > 5002);
    }
}
