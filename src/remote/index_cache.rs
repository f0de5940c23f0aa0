//! The on-disk index cache: the metadata ranges an open of a remote object read (ZIP end
//! records and directory, NPY headers, libhdf5's superblock, object headers and chunk-index
//! nodes), kept in one file per object under `<cache dir>/index/`, named by a hash of the key
//! and holding the key itself: the URL, the size, the ETag and the Last-Modified time
//! (`ObjectStamp::cache_key`). The next open of that same object replays the ranges from disk
//! and makes no metadata request; an object with a new size, ETag or Last-Modified time has
//! another key, so its old entry is never read for it (and an object the server gives neither
//! validator for is not cached at all). Entries are written
//! whole to a temporary file and renamed into place, so a reader never sees half of one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use super::ObjectStamp;

const MAGIC: &[u8] = b"packread-index 2\n";

/// Entries larger than this are not written (metadata is far smaller).
const MAX_ENTRY_BYTES: usize = 256 << 20;

/// The cache entry of one object: the ranges loaded from disk and those read since.
pub struct IndexCache {
    dir: PathBuf,
    path: PathBuf,
    key: Vec<u8>,
    /// Ranges from disk, by offset.
    loaded: Vec<(u64, Bytes)>,
    /// Ranges read from the object since it was opened.
    new: Mutex<Vec<(u64, Vec<u8>)>>,
    /// What the formats parsed from the metadata (an HDF5 dataset's chunk table), by name:
    /// from disk, and put since.
    blobs: Vec<(String, Bytes)>,
    new_blobs: Mutex<Vec<(String, Vec<u8>)>>,
    hit: AtomicBool,
    missed: AtomicBool,
    /// Set once saved: reads after the open (data libhdf5 reads itself) are not metadata.
    saved: AtomicBool,
}

/// FNV-1a, 64 bits: a file name for the key (the key itself is checked inside the file).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Where the entry of `url` as `stamp` describes it lives under `dir` (a file named by a hash
/// of the key, which the file itself holds).
pub fn entry_path(dir: &Path, url: &str, stamp: &ObjectStamp) -> PathBuf {
    let key = stamp.cache_key(url);
    dir.join("index")
        .join(format!("{:016x}.pridx", fnv1a(key.as_bytes())))
}

impl IndexCache {
    /// The entry for `url` as `stamp` describes it, under `dir` (loaded if it is there and
    /// intact; empty otherwise).
    pub fn load(dir: &Path, url: &str, stamp: &ObjectStamp) -> IndexCache {
        let key = stamp.cache_key(url).into_bytes();
        let path = entry_path(dir, url, stamp);
        let (loaded, blobs) = std::fs::read(&path)
            .ok()
            .and_then(|bytes| parse(&bytes, &key))
            .unwrap_or_default();
        IndexCache {
            dir: dir.to_path_buf(),
            path,
            key,
            loaded,
            new: Mutex::new(Vec::new()),
            blobs,
            new_blobs: Mutex::new(Vec::new()),
            hit: AtomicBool::new(false),
            missed: AtomicBool::new(false),
            saved: AtomicBool::new(false),
        }
    }

    /// The cache folder this entry lives under.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fills `buf` from a loaded range holding all of it.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        let end = offset + buf.len() as u64;
        let i = self.loaded.partition_point(|(s, _)| *s <= offset);
        let found = self.loaded[..i]
            .iter()
            .rev()
            .take(8)
            .find(|(s, b)| end <= s + b.len() as u64);
        match found {
            Some((s, b)) => {
                let at = (offset - s) as usize;
                buf.copy_from_slice(&b[at..at + buf.len()]);
                self.hit.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Notes a range read from the object (to be saved).
    pub fn record(&self, offset: u64, bytes: &[u8]) {
        if self.saved.load(Ordering::Relaxed) {
            return;
        }
        self.missed.store(true, Ordering::Relaxed);
        self.new
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((offset, bytes.to_vec()));
    }

    /// What a format put under `name` when this object was opened before.
    pub fn blob(&self, name: &str) -> Option<Bytes> {
        let found = self
            .blobs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.clone());
        if found.is_some() {
            self.hit.store(true, Ordering::Relaxed);
        }
        found
    }

    /// Keeps `bytes` under `name` for the next open (saved with the ranges).
    pub fn put_blob(&self, name: &str, bytes: Vec<u8>) {
        if !self.saved.load(Ordering::Relaxed) {
            self.new_blobs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((name.to_string(), bytes));
        }
    }

    /// Whether every metadata read so far came from disk.
    pub fn was_hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed) && !self.missed.load(Ordering::Relaxed)
    }

    /// Writes the loaded and new ranges as the object's entry, if any are new. A failure to
    /// write (a read-only or full disk) only means the next open reads the metadata again.
    pub fn save(&self) {
        self.saved.store(true, Ordering::Relaxed);
        let new = std::mem::take(&mut *self.new.lock().unwrap_or_else(|e| e.into_inner()));
        let new_blobs =
            std::mem::take(&mut *self.new_blobs.lock().unwrap_or_else(|e| e.into_inner()));
        if new.is_empty() && new_blobs.is_empty() {
            return;
        }
        let mut blobs: Vec<(&str, &[u8])> = new_blobs
            .iter()
            .map(|(n, b)| (n.as_str(), &b[..]))
            .collect();
        for (n, b) in &self.blobs {
            if !blobs.iter().any(|(m, _)| m == n) {
                blobs.push((n, b));
            }
        }
        let mut all: Vec<(u64, &[u8])> = self
            .loaded
            .iter()
            .map(|(s, b)| (*s, &b[..]))
            .chain(new.iter().map(|(s, b)| (*s, &b[..])))
            .collect();
        all.sort_by_key(|(s, b)| (*s, std::cmp::Reverse(b.len())));
        all.dedup_by(|b, a| a.0 <= b.0 && b.0 + b.1.len() as u64 <= a.0 + a.1.len() as u64);
        let total: usize = all.iter().map(|(_, b)| b.len() + 12).sum::<usize>()
            + blobs
                .iter()
                .map(|(n, b)| n.len() + b.len() + 16)
                .sum::<usize>();
        if total > MAX_ENTRY_BYTES {
            return;
        }
        let mut out = Vec::with_capacity(total + MAGIC.len() + self.key.len() + 16);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.key.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&(all.len() as u64).to_le_bytes());
        for (s, b) in &all {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        out.extend_from_slice(&(blobs.len() as u64).to_le_bytes());
        for (n, b) in &blobs {
            out.extend_from_slice(&(n.len() as u64).to_le_bytes());
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(&(b.len() as u64).to_le_bytes());
            out.extend_from_slice(b);
        }
        let _ = write_atomic(&self.path, &out);
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

/// What an entry holds: its ranges, by offset, and its named blobs.
type Entry = (Vec<(u64, Bytes)>, Vec<(String, Bytes)>);

/// The ranges and blobs of an entry whose key is `key`; `None` if it is another object's,
/// damaged or cut short.
fn parse(bytes: &[u8], key: &[u8]) -> Option<Entry> {
    let mut rest = bytes.strip_prefix(MAGIC)?;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
        rest = tail;
        Some(head)
    };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let key_len = usize::try_from(u64_of(take(8)?)).ok()?;
    if take(key_len)? != key {
        return None;
    }
    let count = u64_of(take(8)?);
    let mut ranges = Vec::new();
    for _ in 0..count {
        let start = u64_of(take(8)?);
        let len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        ranges.push((start, Bytes::copy_from_slice(take(len)?)));
    }
    let count = u64_of(take(8)?);
    let mut blobs = Vec::new();
    for _ in 0..count {
        let name_len = usize::try_from(u64_of(take(8)?)).ok()?;
        let name = String::from_utf8(take(name_len)?.to_vec()).ok()?;
        let len = usize::try_from(u64_of(take(8)?)).ok()?;
        blobs.push((name, Bytes::copy_from_slice(take(len)?)));
    }
    if !rest.is_empty() {
        return None;
    }
    ranges.sort_by_key(|(s, _)| *s);
    Some((ranges, blobs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(etag: &str) -> ObjectStamp {
        ObjectStamp {
            len: 1000,
            etag: Some(etag.into()),
            modified: None,
        }
    }

    #[test]
    fn ranges_come_back_for_the_same_object_only() {
        let dir = tempfile::tempdir().unwrap();
        let c = IndexCache::load(dir.path(), "s3://b/k", &stamp("\"a\""));
        c.record(10, b"hello");
        c.record(100, b"world!");
        c.put_blob("chunks:/x", vec![1, 2, 3]);
        c.save();
        let again = IndexCache::load(dir.path(), "s3://b/k", &stamp("\"a\""));
        let mut buf = [0u8; 3];
        assert!(again.read(11, &mut buf));
        assert_eq!(&buf, b"ell");
        assert!(again.read(101, &mut buf));
        assert_eq!(&buf, b"orl");
        assert!(!again.read(13, &mut buf), "runs past the recorded range");
        assert_eq!(&again.blob("chunks:/x").unwrap()[..], &[1, 2, 3]);
        assert!(again.blob("chunks:/y").is_none());
        assert!(again.was_hit());
        // A new ETag (the object was replaced) finds nothing.
        let other = IndexCache::load(dir.path(), "s3://b/k", &stamp("\"b\""));
        assert!(!other.read(11, &mut buf));
    }

    #[test]
    fn a_damaged_entry_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let c = IndexCache::load(dir.path(), "u", &stamp("e"));
        c.record(0, b"abcdef");
        c.save();
        let bytes = std::fs::read(&c.path).unwrap();
        std::fs::write(&c.path, &bytes[..bytes.len() - 2]).unwrap();
        let again = IndexCache::load(dir.path(), "u", &stamp("e"));
        let mut buf = [0u8; 2];
        assert!(!again.read(0, &mut buf));
    }
}
