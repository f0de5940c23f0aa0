//! The optional on-disk cache of fetched data (`cache_dir=`): an object's bytes in blocks of
//! [`BLOCK`], one file a block under `<cache_dir>/blocks/<object key>/`, the key a hash of
//! the URL, size, ETag and Last-Modified time (so a replaced object never reads another's
//! blocks; an object with neither validator is not cached). Repeated
//! epochs on one node then read the blocks from local disk. The folder is bounded by
//! `max_bytes`: when a write takes it past the bound, the least recently used blocks (oldest
//! modification time; a hit touches its block) are removed until it is 90 % full. Several
//! processes (DataLoader workers) may share one folder: blocks are written whole to a
//! temporary file and renamed into place, and a block of the wrong length is ignored.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::ObjectStamp;

/// Bytes of one cached block: large enough that a block costs one request worth making,
/// small enough that a batch of scattered samples does not fetch much it does not use.
pub const BLOCK: u64 = 1 << 20;

/// A cache folder, shared by every object read with it in this process.
pub struct BlockCache {
    dir: PathBuf,
    max_bytes: u64,
    used: AtomicU64,
    evicting: Mutex<()>,
}

/// One object's place in a [`BlockCache`].
pub struct ObjectBlocks {
    cache: Arc<BlockCache>,
    dir: PathBuf,
    len: u64,
}

/// This process's caches, by folder and bound.
static CACHES: Mutex<Vec<Arc<BlockCache>>> = Mutex::new(Vec::new());

impl BlockCache {
    /// The cache in `dir` (made on first use), holding at most `max_bytes`.
    pub fn open(dir: &Path, max_bytes: u64) -> Arc<BlockCache> {
        let dir = dir.join("blocks");
        let mut caches = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = caches
            .iter()
            .find(|c| c.dir == dir && c.max_bytes == max_bytes)
        {
            return c.clone();
        }
        let used = files(&dir).iter().map(|(_, len, _)| len).sum();
        let cache = Arc::new(BlockCache {
            dir,
            max_bytes,
            used: AtomicU64::new(used),
            evicting: Mutex::new(()),
        });
        caches.push(cache.clone());
        cache
    }

    /// The blocks of the object at `url` as `stamp` describes it.
    pub fn object(self: &Arc<Self>, url: &str, stamp: &ObjectStamp) -> ObjectBlocks {
        let key = stamp.cache_key(url);
        ObjectBlocks {
            cache: self.clone(),
            dir: self.dir.join(format!(
                "{:016x}",
                super::index_cache::fnv1a(key.as_bytes())
            )),
            len: stamp.len,
        }
    }

    /// The cache's folder (`<cache_dir>/blocks`) and bound.
    pub fn config(&self) -> (&Path, u64) {
        (&self.dir, self.max_bytes)
    }

    fn added(&self, bytes: u64) {
        let used = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if used > self.max_bytes {
            self.evict();
        }
    }

    /// Removes the least recently used blocks until the folder is 90 % full (counted afresh:
    /// other processes write to it too).
    fn evict(&self) {
        let Ok(_one) = self.evicting.try_lock() else {
            return;
        };
        let mut all = files(&self.dir);
        all.sort_by_key(|(_, _, mtime)| *mtime);
        let mut used: u64 = all.iter().map(|(_, len, _)| len).sum();
        let goal = self.max_bytes / 10 * 9;
        for (path, len, _) in all {
            if used <= goal {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                used -= len;
            }
        }
        self.used.store(used, Ordering::Relaxed);
    }
}

/// Every block file under `dir`: path, length, modification time.
fn files(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let Ok(objects) = std::fs::read_dir(dir) else {
        return out;
    };
    for object in objects.flatten() {
        let Ok(blocks) = std::fs::read_dir(object.path()) else {
            continue;
        };
        for block in blocks.flatten() {
            if let Ok(meta) = block.metadata() {
                if meta.is_file() {
                    let mtime = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                    out.push((block.path(), meta.len(), mtime));
                }
            }
        }
    }
    out
}

impl ObjectBlocks {
    /// The blocks a range of the object lies in.
    pub fn blocks_of(&self, start: u64, end: u64) -> std::ops::Range<u64> {
        start / BLOCK..end.div_ceil(BLOCK)
    }

    /// Bytes of block `b` (the last one may be short).
    pub fn block_len(&self, b: u64) -> u64 {
        BLOCK.min(self.len.saturating_sub(b * BLOCK))
    }

    /// The cache it lives in.
    pub fn cache(&self) -> &BlockCache {
        &self.cache
    }

    /// The block-aligned span holding `start..end` (what is fetched to cache it).
    pub fn aligned(&self, start: u64, end: u64) -> std::ops::Range<u64> {
        let blocks = self.blocks_of(start, end);
        blocks.start * BLOCK..(blocks.end * BLOCK).min(self.len)
    }

    /// `start..end` from cached blocks, if every block it lies in is cached.
    pub fn assemble(&self, start: u64, end: u64) -> Option<Bytes> {
        let mut out = Vec::with_capacity((end - start) as usize);
        crate::stats::count(crate::stats::Event::DataLooks, 1);
        for b in self.blocks_of(start, end) {
            let block = self.get(b)?;
            let from = start.saturating_sub(b * BLOCK) as usize;
            let to = ((end - b * BLOCK) as usize).min(block.len());
            out.extend_from_slice(&block[from..to]);
        }
        crate::stats::count(crate::stats::Event::DataHits, 1);
        Some(out.into())
    }

    /// Keeps the whole blocks of `bytes`, fetched from offset `at` (block-aligned).
    pub fn store(&self, at: u64, bytes: &Bytes) {
        if at % BLOCK != 0 {
            return;
        }
        let mut off = 0usize;
        let mut b = at / BLOCK;
        while off < bytes.len() {
            let n = self.block_len(b) as usize;
            if off + n > bytes.len() {
                break;
            }
            self.put(b, &bytes.slice(off..off + n));
            off += n;
            b += 1;
        }
    }

    /// Block `b`, if it is cached whole.
    pub fn get(&self, b: u64) -> Option<Vec<u8>> {
        let path = self.dir.join(b.to_string());
        let bytes = std::fs::read(&path).ok()?;
        if bytes.len() as u64 != self.block_len(b) {
            return None;
        }
        // Most recently used now (eviction removes the oldest first).
        let _ = std::fs::File::options()
            .append(true)
            .open(&path)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        Some(bytes)
    }

    /// Keeps block `b`; a failure to write only means it is fetched again.
    pub fn put(&self, b: u64, bytes: &Bytes) {
        if bytes.len() as u64 != self.block_len(b) || bytes.len() as u64 > self.cache.max_bytes {
            return;
        }
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let tmp = self.dir.join(format!(
                ".{b}.{}.{:?}.tmp",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, self.dir.join(b.to_string()))
        };
        if write().is_ok() {
            self.cache.added(bytes.len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(len: u64) -> ObjectStamp {
        ObjectStamp {
            len,
            etag: Some("\"e\"".into()),
            modified: None,
        }
    }

    #[test]
    fn blocks_come_back_and_the_folder_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::open(dir.path(), 3 * BLOCK);
        let obj = cache.object("s3://b/k", &stamp(10 * BLOCK));
        let block = Bytes::from(vec![7u8; BLOCK as usize]);
        for b in 0..5 {
            obj.put(b, &block);
        }
        let kept: Vec<u64> = (0..5).filter(|&b| obj.get(b).is_some()).collect();
        assert!(kept.len() <= 3, "{kept:?}");
        assert!(kept.contains(&4), "the newest block stays: {kept:?}");
        // Another ETag: another object.
        let other = cache.object(
            "s3://b/k",
            &ObjectStamp {
                len: 10 * BLOCK,
                etag: Some("\"f\"".into()),
                modified: None,
            },
        );
        assert!(other.get(4).is_none());
        // A short last block, and a block of the wrong length ignored (in a cache of its own:
        // in the full one, the block would start an eviction that orders blocks by their
        // modification times, which coarse file system clocks make equal).
        let own = tempfile::tempdir().unwrap();
        let cache = BlockCache::open(own.path(), 3 * BLOCK);
        let short = cache.object("s3://b/short", &stamp(BLOCK + 10));
        assert_eq!(short.block_len(1), 10);
        short.put(1, &Bytes::from(vec![1u8; 11]));
        assert!(short.get(1).is_none());
        short.put(1, &Bytes::from(vec![1u8; 10]));
        assert_eq!(short.get(1).unwrap(), vec![1u8; 10]);
    }
}
