//! Objects in object storage (S3, GCS, Azure Blob, HTTP(S)) as a byte source beside local
//! files: the formats describe where a batch's bytes are exactly as for a local file, and the
//! executor fetches them by ranged requests, merged ([`COALESCE`]) and many in flight at once
//! ([`IN_FLIGHT`]), on the process's one tokio runtime ([`runtime`]).
//!
//! Opening reads the metadata each format needs (the ZIP end records and central directory,
//! NPY headers, libhdf5's superblock, object headers and chunk index) through
//! [`Source::read_meta`], which serves it from blocks of [`META_BLOCK`] bytes and records
//! every range read; [`index_cache`] keeps those ranges on disk, keyed by URL, ETag and size,
//! so the next open of the same object (every DataLoader worker among them) makes no
//! metadata request.
//!
//! Every request names the object as it was when opened (`If-Match` with its strong ETag, else
//! `If-Unmodified-Since` with its Last-Modified time) and every answer is checked against its
//! size, ETag and Last-Modified time: an object replaced while it is read is an error, never
//! a mix of old and new bytes. What a server that sends neither validator cannot tell apart (a
//! replacement of the same size) is said in docs/remote.md; such objects are never cached.

pub mod block_cache;
pub(crate) mod errors;
pub mod index_cache;
pub mod runtime;
pub mod store;

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::{GetOptions, GetRange, ObjectMeta};

use crate::error::{Error, ErrorKind, Result};
use crate::source::{Coalesce, Source};
pub use block_cache::{BlockCache, ObjectBlocks};
use errors::{changed, classify};
pub use index_cache::IndexCache;
pub use store::{glob, has_glob, is_url, StoreOptions};
use store::{locate, Located};

/// How a batch's ranges of one object are merged: ranges at most `gap` apart are fetched as
/// one request, up to `max_len` bytes. Measured on loopback with 20 ms added (benches/
/// test_bench_remote.py): a request costs a round trip, and 256 KiB moves in well under one,
/// so fetching up to that much unused to save a request pays; merged requests longer than
/// 8 MiB only serialise what parallel requests would fetch at once.
pub const COALESCE: Coalesce = Coalesce {
    gap: 256 << 10,
    max_len: 8 << 20,
};

/// Requests of one batch in flight at once.
pub const IN_FLIGHT: usize = 32;

/// Metadata reads are served from blocks of this many bytes: libhdf5 reads a file's
/// metadata a few hundred bytes at a time, mostly close together.
pub const META_BLOCK: u64 = 256 << 10;

/// Metadata blocks kept per object (4 MiB): during an open, and for what libhdf5 reads
/// later (variable-length data, datasets it reads itself).
const META_BLOCKS_KEPT: usize = 16;

/// The on-disk caches an object is read with: the index cache's folder (metadata), and the
/// data cache's folder and bound (`cache_dir=`, `cache_bytes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caches {
    /// Where the index cache lives, if anywhere.
    pub index: Option<std::path::PathBuf>,
    /// Where fetched data blocks are kept, and at most how many bytes of them.
    pub data: Option<(std::path::PathBuf, u64)>,
}

/// What the object was when it was opened: every later answer must agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStamp {
    /// Length in bytes.
    pub len: u64,
    /// The ETag, when the server gives one (weak ones keep their `W/`).
    pub etag: Option<String>,
    /// The Last-Modified time in seconds since 1970, when the server gives one.
    pub modified: Option<i64>,
}

/// How old a local file must be for its metadata to be kept in the index cache.
#[cfg(unix)]
const RACY_SECONDS: std::time::Duration = std::time::Duration::from_secs(3);

/// The index cache entry, under `dir`, of the local file at `path`: keyed by its canonical
/// path, size, modification time (to the nanosecond), device and inode, so that a file
/// rewritten or replaced is never taken for the one whose metadata was kept. `None` for what
/// is not a regular file.
#[cfg(unix)]
pub fn local_index(dir: &std::path::Path, path: &std::path::Path) -> Option<IndexCache> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    // A file modified in the last seconds may be rewritten within the same clock tick, keeping
    // its size, inode and modification time: its key would then name other bytes. Such a file
    // is not cached (git's "racy" entries, handled alike).
    let age = std::time::SystemTime::now()
        .duration_since(meta.modified().ok()?)
        .unwrap_or_default();
    if age < RACY_SECONDS {
        return None;
    }
    let canonical = std::fs::canonicalize(path).ok()?;
    let stamp = ObjectStamp {
        len: meta.len(),
        etag: Some(format!(
            "{}:{}:{}.{:09}",
            meta.dev(),
            meta.ino(),
            meta.mtime(),
            meta.mtime_nsec()
        )),
        modified: Some(meta.mtime()),
    };
    Some(IndexCache::load(
        dir,
        &format!("file://{}", canonical.display()),
        &stamp,
    ))
}

/// No local index cache where files have no inode to key it by.
#[cfg(not(unix))]
pub fn local_index(_dir: &std::path::Path, _path: &std::path::Path) -> Option<IndexCache> {
    None
}

/// An ETag without its weak marker: two tags name the same object when these agree (RFC 9110
/// 8.8.3.2, weak comparison).
fn opaque(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// What a request asks the server to check before it answers.
#[derive(Debug, Clone, Default)]
struct Precondition {
    if_match: Option<String>,
    if_unmodified_since: Option<DateTime<Utc>>,
}

impl ObjectStamp {
    fn of(meta: &ObjectMeta) -> ObjectStamp {
        // object_store gives the epoch for an answer without Last-Modified.
        let modified = Some(meta.last_modified.timestamp()).filter(|&t| t != 0);
        ObjectStamp {
            len: meta.size,
            etag: meta.e_tag.clone(),
            modified,
        }
    }

    /// Whether the server gave anything that changes when the object does (an ETag or a
    /// Last-Modified time). Without either, a replacement of the same size cannot be told
    /// apart, so nothing of such an object is cached on disk.
    pub fn validated(&self) -> bool {
        self.etag.is_some() || self.modified.is_some()
    }

    /// The key the on-disk caches keep this object's entries under: another size, ETag or
    /// Last-Modified time is another object.
    pub fn cache_key(&self, url: &str) -> String {
        let modified = self.modified.map_or("-".to_string(), |t| t.to_string());
        format!(
            "{url}\n{}\n{}\n{modified}\n",
            self.len,
            self.etag.as_deref().unwrap_or("-")
        )
    }

    /// The request's precondition: `If-Match` with a strong ETag (a weak one never matches
    /// it, RFC 9110 13.1.1, so a strict server would refuse every read); without one,
    /// `If-Unmodified-Since` with the Last-Modified time.
    fn precondition(&self) -> Precondition {
        let if_match = self.etag.clone().filter(|e| !e.starts_with("W/"));
        let if_unmodified_since = match if_match {
            Some(_) => None,
            None => self.modified.and_then(|t| DateTime::from_timestamp(t, 0)),
        };
        Precondition {
            if_match,
            if_unmodified_since,
        }
    }

    /// How `now` (what an answer says of the object) shows it is another object, if it does.
    fn changed_to(&self, now: &ObjectStamp) -> Option<String> {
        if now.len != self.len {
            return Some(format!("it was {} bytes, now {}", self.len, now.len));
        }
        if let (Some(was), Some(is)) = (&self.etag, &now.etag) {
            if opaque(was) != opaque(is) {
                return Some("its ETag changed".into());
            }
        }
        if let (Some(was), Some(is)) = (self.modified, now.modified) {
            if was != is {
                return Some("its Last-Modified time changed".into());
            }
        }
        None
    }
}

/// Counts of what was fetched (for benchmarks and `stats()`).
#[derive(Debug, Default)]
pub struct Fetched {
    /// Requests made.
    pub requests: AtomicU64,
    /// Bytes received.
    pub bytes: AtomicU64,
}

/// One object, opened: its URL, what it was when opened, and the client that reads it (made
/// again in a forked child, whose inherited connections belong to the parent).
pub struct RemoteFile {
    url: String,
    options: StoreOptions,
    stamp: ObjectStamp,
    /// Metadata blocks fetched, most recently used last.
    blocks: Mutex<Vec<(u64, Bytes)>>,
    index: Option<IndexCache>,
    /// The on-disk cache of fetched data (`cache_dir=`), when there is one.
    data: Option<ObjectBlocks>,
    fetched: Arc<Fetched>,
    /// The last failed metadata read, for parsers that only see "cannot read" (see
    /// [`RemoteFile::take_failure`]).
    failure: Mutex<Option<Error>>,
}

/// Where an open fetches its first bytes (with the object's size and ETag in the same
/// answer, so no separate HEAD request is made).
#[derive(Debug, Clone, Copy)]
pub enum FirstRead {
    /// The first `n` bytes (NPY headers, HDF5 superblocks).
    Head(u64),
    /// The last `n` bytes (a ZIP archive's end records and directory).
    Tail(u64),
}

impl FirstRead {
    fn range(self) -> GetRange {
        match self {
            FirstRead::Head(n) => GetRange::Bounded(0..n.max(1)),
            FirstRead::Tail(n) => GetRange::Suffix(n.max(1)),
        }
    }
}

impl RemoteFile {
    /// Opens the object at `url`: one request, for its first or last bytes (`first`), which
    /// also tells its size and ETag. With an index cache, metadata recorded for this very
    /// object (same URL, ETag and size) is served from it.
    pub fn open(
        url: &str,
        options: StoreOptions,
        first: FirstRead,
        caches: &Caches,
    ) -> Result<RemoteFile> {
        let located = Arc::new(locate_object(url, &options)?);
        let fetched = Arc::new(Fetched::default());
        let (meta, at, bytes) = get(&located, url, first.range(), &fetched)?;
        let stamp = ObjectStamp::of(&meta);
        let file = RemoteFile::with_stamp(url, options, stamp, caches, fetched);
        if !bytes.is_empty() {
            file.remember_block(at, bytes);
        }
        Ok(file)
    }

    /// The object opened before as `stamp` (a reader unpickled in a worker): no request is
    /// made until a read, and every read checks the object is still what `stamp` says.
    pub fn restore(
        url: &str,
        options: StoreOptions,
        stamp: ObjectStamp,
        caches: &Caches,
    ) -> Result<RemoteFile> {
        // The URL and options are checked (and the client made) now, not at the first read.
        locate_object(url, &options)?;
        Ok(RemoteFile::with_stamp(
            url,
            options,
            stamp,
            caches,
            Arc::default(),
        ))
    }

    fn with_stamp(
        url: &str,
        options: StoreOptions,
        stamp: ObjectStamp,
        caches: &Caches,
        fetched: Arc<Fetched>,
    ) -> RemoteFile {
        // An object the server gives no validator for is never cached: a replacement of the
        // same size would read another object's entries.
        let cached = stamp.validated();
        let index = caches
            .index
            .as_deref()
            .filter(|_| cached)
            .map(|dir| IndexCache::load(dir, url, &stamp));
        let data = caches
            .data
            .as_ref()
            .filter(|_| cached)
            .map(|(dir, bytes)| BlockCache::open(dir, *bytes).object(url, &stamp));
        RemoteFile {
            data,
            url: url.to_string(),
            options,
            stamp,
            blocks: Mutex::new(Vec::new()),
            index,
            fetched,
            failure: Mutex::new(None),
        }
    }

    /// The error of the last metadata read that failed, once: a parser reading through
    /// [`crate::source::SourceReader`] sees an `io::Error` with its text only, and the caller
    /// recovers the request's own error (its kind, the URL, the status) here.
    pub fn take_failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The URL the object was opened by.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The options its client was made with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// The caches it is read with.
    pub fn caches(&self) -> Caches {
        Caches {
            index: self.index.as_ref().map(|i| i.dir().to_path_buf()),
            data: self.data.as_ref().map(|d| {
                let (dir, bytes) = d.cache().config();
                (dir.parent().unwrap_or(dir).to_path_buf(), bytes)
            }),
        }
    }

    /// Its size and ETag when opened.
    pub fn stamp(&self) -> &ObjectStamp {
        &self.stamp
    }

    /// Requests made and bytes received so far.
    pub fn fetched(&self) -> (u64, u64) {
        (
            self.fetched.requests.load(Ordering::Relaxed),
            self.fetched.bytes.load(Ordering::Relaxed),
        )
    }

    /// The object's entry in the index cache, when there is one.
    pub fn index_cache(&self) -> Option<&IndexCache> {
        self.index.as_ref()
    }

    /// Whether the metadata read so far all came from the index cache.
    pub fn index_hit(&self) -> bool {
        self.index.as_ref().is_some_and(|i| i.was_hit())
    }

    /// Writes the metadata ranges read since opening to the index cache (when there is one
    /// and they are new), and lets the open's blocks go; call once the format has read what it
    /// needs. A reader of many objects (shards, `.npy` files) so keeps no metadata per object.
    pub fn save_index(&self) {
        if let Some(index) = &self.index {
            index.save();
        }
        self.blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// This process's client for the object (from the process-wide cache of clients, which
    /// a forked child fills afresh).
    fn client(&self) -> Result<Arc<Located>> {
        locate(&self.url, &self.options).map(Arc::new)
    }

    fn check_range(&self, offset: u64, len: usize) -> Result<Range<u64>> {
        let end = offset.checked_add(len as u64);
        match end {
            Some(end) if end <= self.stamp.len => Ok(offset..end),
            _ => Err(Error::new(
                ErrorKind::Changed,
                &self.url,
                format!(
                    "read of {len} bytes at offset {offset} runs past the end of the {}-byte object",
                    self.stamp.len
                ),
            )),
        }
    }

    /// Fetches `range`, checked against the stamp (from the data cache when it has it).
    fn fetch(&self, range: Range<u64>) -> Result<Bytes> {
        let len = (range.end - range.start) as usize;
        fetch_all(std::iter::once((self, range.start, len)))
            .pop()
            .expect("one range, one result")
    }

    fn check_answer(&self, meta: &ObjectMeta, got: u64, want: u64) -> Result<()> {
        if let Some(how) = self.stamp.changed_to(&ObjectStamp::of(meta)) {
            return Err(changed(&self.url, &how));
        }
        if got != want {
            return Err(Error::new(
                ErrorKind::Io,
                &self.url,
                format!("the server sent {got} bytes for a {want}-byte range"),
            ));
        }
        Ok(())
    }

    /// Reads metadata (what a format parses at open, or libhdf5 asks for): from the index
    /// cache when it holds the range, else from a cached block, else by fetching the block
    /// around it. Every range read is recorded for the index cache.
    fn read_metadata(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let range = self.check_range(offset, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(index) = &self.index {
            if index.read(offset, buf) {
                return Ok(());
            }
        }
        if !self.read_blocks(offset, buf) {
            let start = offset - offset % META_BLOCK;
            let end = range
                .end
                .div_ceil(META_BLOCK)
                .saturating_mul(META_BLOCK)
                .min(self.stamp.len)
                .max(range.end);
            let bytes = self.fetch(start..end).map_err(|e| {
                let copy = Error::new(e.kind(), e.location(), e.message());
                *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                copy
            })?;
            let at = (offset - start) as usize;
            buf.copy_from_slice(&bytes[at..at + buf.len()]);
            self.remember_block(start, bytes);
        }
        if let Some(index) = &self.index {
            index.record(offset, buf);
        }
        Ok(())
    }

    fn read_blocks(&self, offset: u64, buf: &mut [u8]) -> bool {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let end = offset + buf.len() as u64;
        let hit = blocks
            .iter()
            .rposition(|(s, b)| *s <= offset && end <= s + b.len() as u64);
        match hit {
            Some(i) => {
                let (s, b) = blocks.remove(i);
                let at = (offset - s) as usize;
                buf.copy_from_slice(&b[at..at + buf.len()]);
                blocks.push((s, b));
                true
            }
            None => false,
        }
    }

    fn remember_block(&self, start: u64, bytes: Bytes) {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if blocks.len() >= META_BLOCKS_KEPT {
            blocks.remove(0);
        }
        blocks.push((start, bytes));
    }
}

/// [`locate`] for a URL that must name an object (not a bucket or a host).
fn locate_object(url: &str, options: &StoreOptions) -> Result<Located> {
    let located = locate(url, options)?;
    if located.path.as_ref().is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            url,
            "the URL names a bucket or a server, not an object",
        ));
    }
    Ok(located)
}

/// One GET of `range` of `url` (with no precondition: the first request of an open): the
/// object's metadata as the answer tells it, where the bytes start, and the bytes.
fn get(
    located: &Arc<Located>,
    url: &str,
    range: GetRange,
    fetched: &Arc<Fetched>,
) -> Result<(ObjectMeta, u64, Bytes)> {
    let located = located.clone();
    let url = url.to_string();
    let fetched = fetched.clone();
    runtime::block_on(async move {
        fetch_async(&located, &url, range, Precondition::default(), &fetched).await
    })
}

async fn fetch_async(
    located: &Located,
    url: &str,
    range: GetRange,
    precondition: Precondition,
    fetched: &Fetched,
) -> Result<(ObjectMeta, u64, Bytes)> {
    let options = GetOptions {
        if_match: precondition.if_match,
        if_unmodified_since: precondition.if_unmodified_since,
        range: Some(range),
        ..GetOptions::default()
    };
    fetched.requests.fetch_add(1, Ordering::Relaxed);
    let timer = crate::stats::start();
    let result = located
        .store
        .get_opts(&located.path, options)
        .await
        .map_err(|e| classify(url, e))?;
    let (meta, start) = (result.meta.clone(), result.range.start);
    let bytes = result.bytes().await.map_err(|e| classify(url, e))?;
    timer.stop(crate::stats::Stage::Network, bytes.len());
    fetched
        .bytes
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok((meta, start, bytes))
}

impl Source for RemoteFile {
    fn len(&self) -> u64 {
        self.stamp.len
    }

    fn name(&self) -> &str {
        &self.url
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let range = self.check_range(offset, buf.len())?;
        if buf.is_empty() {
            return Ok(());
        }
        let bytes = self.fetch(range)?;
        buf.copy_from_slice(&bytes);
        Ok(())
    }

    fn coalesce(&self) -> Option<Coalesce> {
        Some(COALESCE)
    }

    fn waits(&self) -> bool {
        true
    }

    fn read_ranges(&self, ranges: &[(u64, usize)]) -> Vec<Result<Bytes>> {
        fetch_all(ranges.iter().map(|&(offset, len)| (self, offset, len)))
    }

    /// Every read of objects: all in flight together, up to [`IN_FLIGHT`] (a list of `.npy`
    /// objects, one sample each, is one batch of requests).
    fn read_many(&self, reads: &[(&dyn Source, u64, usize)]) -> Option<Vec<Result<Bytes>>> {
        let objects: Option<Vec<(&RemoteFile, u64, usize)>> = reads
            .iter()
            .map(|&(s, offset, len)| Some((s.as_any().downcast_ref::<RemoteFile>()?, offset, len)))
            .collect();
        Some(fetch_all(objects?.into_iter()))
    }

    fn read_meta(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_metadata(offset, buf)
    }

    /// Writes the metadata ranges read since opening to the index cache (when there is one
    /// and they are new), and lets the open's blocks go.
    fn opened(&self) {
        self.save_index();
    }

    fn cause(&self, otherwise: Error) -> Error {
        self.take_failure().unwrap_or(otherwise)
    }

    fn parsed(&self, name: &str) -> Option<Bytes> {
        self.index.as_ref()?.blob(name)
    }

    fn keep_parsed(&self, name: &str, bytes: Vec<u8>) {
        if let Some(index) = &self.index {
            index.put_blob(name, bytes);
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A request ready to go: the range's place, its object's client, URL, precondition and
/// counters, and the range.
type Request = (
    usize,
    Arc<Located>,
    String,
    Precondition,
    Arc<Fetched>,
    Range<u64>,
);

/// Fetches `(object, offset, len)` ranges, up to [`IN_FLIGHT`] requests at once, each result
/// in its range's place, each checked against its object's stamp.
fn fetch_all<'a>(items: impl Iterator<Item = (&'a RemoteFile, u64, usize)>) -> Vec<Result<Bytes>> {
    let mut out: Vec<Result<Bytes>> = Vec::new();
    let mut wanted: Vec<Request> = Vec::new();
    let mut files: Vec<&RemoteFile> = Vec::new();
    // For a range fetched whole blocks at a time (the data cache): where the range starts
    // in what was fetched, and its length.
    let mut cuts: Vec<Option<(usize, usize)>> = Vec::new();
    for (k, (file, offset, len)) in items.enumerate() {
        files.push(file);
        cuts.push(None);
        let request = file.check_range(offset, len).and_then(|r| {
            if r.is_empty() {
                return Ok(None);
            }
            let r = match &file.data {
                Some(blocks) => {
                    if let Some(bytes) = blocks.assemble(r.start, r.end) {
                        return Ok(Some(Err(bytes)));
                    }
                    let span = blocks.aligned(r.start, r.end);
                    cuts[k] = Some(((r.start - span.start) as usize, len));
                    span
                }
                None => r,
            };
            let client = file.client()?;
            Ok(Some(Ok((
                k,
                client,
                file.url.clone(),
                file.stamp.precondition(),
                file.fetched.clone(),
                r,
            ))))
        });
        match request {
            Ok(Some(Ok(req))) => {
                wanted.push(req);
                out.push(Ok(Bytes::new()));
            }
            Ok(Some(Err(cached))) => out.push(Ok(cached)),
            Ok(None) => out.push(Ok(Bytes::new())),
            Err(e) => out.push(Err(e)),
        }
    }
    if wanted.is_empty() {
        return out;
    }
    let answers = runtime::block_on(async move {
        use futures::StreamExt;
        Ok(futures::stream::iter(wanted)
            .map(|(k, client, url, condition, fetched, r)| async move {
                let want = r.end - r.start;
                let got =
                    fetch_async(&client, &url, GetRange::Bounded(r), condition, &fetched).await;
                (k, want, got)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await)
    });
    match answers {
        Ok(answers) => {
            for (k, want, got) in answers {
                out[k] = got.and_then(|(meta, at, bytes)| {
                    files[k].check_answer(&meta, bytes.len() as u64, want)?;
                    match (cuts[k], &files[k].data) {
                        (Some((skip, len)), Some(blocks)) => {
                            blocks.store(at, &bytes);
                            Ok(bytes.slice(skip..skip + len))
                        }
                        _ => Ok(bytes),
                    }
                });
            }
        }
        Err(e) => {
            // No request could be made: every range fails the same way.
            for slot in out.iter_mut().filter(|s| s.is_ok()) {
                *slot = Err(Error::new(e.kind(), e.location(), e.message()));
            }
        }
    }
    out
}

/// Opens many objects at once ([`IN_FLIGHT`] requests in flight), each as
/// [`RemoteFile::open`] does; with `stamps`, as [`RemoteFile::restore`] does (no request).
pub fn open_many(
    urls: &[String],
    options: &StoreOptions,
    first: FirstRead,
    caches: &Caches,
    stamps: Option<Vec<ObjectStamp>>,
) -> Result<Vec<RemoteFile>> {
    if let Some(stamps) = stamps {
        return urls
            .iter()
            .zip(stamps)
            .map(|(u, s)| RemoteFile::restore(u, options.clone(), s, caches))
            .collect();
    }
    let located: Vec<Arc<Located>> = urls
        .iter()
        .map(|u| locate_object(u, options).map(Arc::new))
        .collect::<Result<_>>()?;
    let range = first.range();
    let jobs: Vec<(usize, Arc<Located>, String)> = located
        .iter()
        .zip(urls)
        .enumerate()
        .map(|(k, (l, u))| (k, l.clone(), u.clone()))
        .collect();
    let mut answers = runtime::block_on(async move {
        use futures::StreamExt;
        Ok(futures::stream::iter(jobs)
            .map(|(k, l, u)| {
                let range = range.clone();
                async move {
                    let fetched = Arc::new(Fetched::default());
                    let got = fetch_async(&l, &u, range, Precondition::default(), &fetched).await;
                    (k, fetched, got)
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await)
    })?;
    answers.sort_by_key(|(k, _, _)| *k);
    answers
        .into_iter()
        .map(|(k, fetched, got)| {
            let (meta, at, bytes) = got?;
            let file = RemoteFile::with_stamp(
                &urls[k],
                options.clone(),
                ObjectStamp::of(&meta),
                caches,
                fetched,
            );
            if !bytes.is_empty() {
                file.remember_block(at, bytes);
            }
            Ok(file)
        })
        .collect()
}
