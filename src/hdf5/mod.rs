//! HDF5: libhdf5 (through `hdf5-metno`, statically linked) answers where each dataset's bytes
//! are, once, at open; batches are then read with `pread` and decoded by the shared executor,
//! outside libhdf5's global lock. Datasets the fast path cannot decode (other filters,
//! compact or external storage) are read by libhdf5 itself, under its lock.

mod attrs;
mod cache;
mod memory;
mod meta;
mod types;
mod vlen;

use std::collections::{BTreeMap, HashMap};
use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdf5_sys::h5d::{H5Dget_space, H5Dget_type, H5Dread};
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{H5S_seloper_t, H5Sclose, H5Screate_simple, H5Sselect_hyperslab};
use hdf5_sys::h5t::H5Tclose;

pub use attrs::AttrValue;
pub use cache::ChunkCache;
pub use memory::MemoryFile;
pub use meta::{ChunkLoc, DatasetMeta, Filter, Layout, Vlen, VlenKind};
use meta::{
    FILTER_BITSHUFFLE, FILTER_BLOSC, FILTER_DEFLATE, FILTER_FLETCHER32, FILTER_LZ4, FILTER_LZF,
    FILTER_SHUFFLE, FILTER_ZSTD,
};
pub use vlen::RaggedPlan;

use crate::codec::{BitshuffleInner, Faults, Pipeline, Step, Wrapper};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{execute, scatter, Dest, Extent, Piece};
use crate::plan::{check_out_len, resolve_indices, ChunkRead, Tiling};
use crate::pool;
use crate::source::{SharedFile, Source};

const HDF5_FAULTS: Faults = Faults::both(ErrorKind::Hdf5);

/// Default budget for decoded chunks kept between batches (Python re-exports it).
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;

/// Which datasets a reader serves.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every dataset whose first dimension is the file's common sample count.
    All,
    /// These, by path.
    Names(Vec<String>),
}

impl Selection {
    /// An explicit list names at least one dataset, each once.
    fn check(&self) -> Result<()> {
        let Selection::Names(names) = self else {
            return Ok(());
        };
        if names.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "datasets= is an empty list: name at least one dataset (None reads them all)",
            ));
        }
        let mut seen: Vec<String> = names.iter().map(|n| normalize(n)).collect();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                format!("datasets= names {:?} more than once", w[0]),
            ));
        }
        Ok(())
    }
}

/// How a dataset's samples are read.
#[derive(Debug)]
enum ReadPath {
    /// One block at this file offset.
    Contiguous(u64),
    /// Never written: every sample is the fill value.
    Fill,
    /// Chunks decoded by packread.
    Chunked { filters: Vec<FilterStep> },
    /// libhdf5 reads it; the reason is kept for `info`.
    Library(String),
    /// Nobody can: the error to raise when it is read.
    Unreadable(String),
}

/// One filter of the write pipeline, as packread decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilterStep {
    Deflate,
    Shuffle(usize),
    Fletcher32,
    Lzf,
    Blosc,
    Zstd,
    Lz4,
    Bitshuffle {
        itemsize: usize,
        block: usize,
        inner: BitshuffleInner,
    },
}

/// A dataset of the reader.
#[derive(Debug)]
pub struct Hdf5Dataset {
    meta: DatasetMeta,
    dtype: DType,
    path: ReadPath,
    /// Bytes of one sample (one index along the first axis).
    sample_bytes: usize,
    /// Bytes of one chunk, when chunked.
    chunk_bytes: usize,
    /// How chunks map onto samples (computed once, at open; empty unless chunked).
    tiling: Tiling,
}

impl Hdf5Dataset {
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    pub fn dtype(&self) -> &DType {
        &self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.meta.shape
    }

    /// Shape of one sample.
    pub fn sample_shape(&self) -> &[usize] {
        &self.meta.shape[1..]
    }

    pub fn sample_bytes(&self) -> usize {
        self.sample_bytes
    }

    pub fn chunks(&self) -> Option<&[usize]> {
        match &self.meta.layout {
            Layout::Chunked { chunk, .. } => Some(chunk),
            _ => None,
        }
    }

    pub fn filters(&self) -> &[Filter] {
        &self.meta.filters
    }

    /// The dataset's attributes, in name order.
    pub fn attrs(&self) -> &[(String, AttrValue)] {
        &self.meta.attrs
    }

    /// What a variable-length dataset's sequences hold (`None` for fixed-size data).
    pub fn vlen(&self) -> Option<&Vlen> {
        self.meta.vlen.as_ref()
    }

    /// How packread reads this dataset, in words.
    pub fn read_path(&self) -> String {
        match &self.path {
            ReadPath::Contiguous(_) => "contiguous: pread".into(),
            ReadPath::Fill => "never written: fill value".into(),
            ReadPath::Chunked { .. } => "chunked: pread + decode in parallel".into(),
            ReadPath::Library(why) => format!("libhdf5 ({why})"),
            ReadPath::Unreadable(why) => format!("unreadable ({why})"),
        }
    }
}

/// How much of the file a dataset takes, from what was read at open (no data is read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage {
    /// Bytes of the dataset's data in the file (chunks as stored, compressed or not); `None`
    /// where libhdf5 keeps the data (compact, external or virtual storage). For
    /// variable-length data, the heap IDs only.
    pub stored_bytes: Option<u64>,
    /// Chunks written (absent ones read as the fill value); 0 when not chunked.
    pub chunks_written: usize,
    /// Chunks stored with a filter skipped (PyTables stores chunks blosc cannot shrink so).
    pub chunks_unfiltered: usize,
}

impl Hdf5Dataset {
    pub fn storage(&self) -> Storage {
        match &self.meta.layout {
            Layout::Chunked { chunks, .. } => Storage {
                stored_bytes: Some(chunks.values().map(|c| c.size).sum()),
                chunks_written: chunks.len(),
                chunks_unfiltered: chunks.values().filter(|c| c.mask != 0).count(),
            },
            Layout::Contiguous { addr } => Storage {
                stored_bytes: Some(if addr.is_some() {
                    (self.meta.shape.iter().product::<usize>() * self.dtype.itemsize()) as u64
                } else {
                    0
                }),
                chunks_written: 0,
                chunks_unfiltered: 0,
            },
            Layout::Other(_) => Storage {
                stored_bytes: None,
                chunks_written: 0,
                chunks_unfiltered: 0,
            },
        }
    }
}

/// Where a file's bytes are read from.
enum Backing {
    File(SharedFile),
    Memory(MemoryFile),
}

impl Backing {
    fn len(&self) -> u64 {
        match self {
            Backing::File(f) => f.len(),
            Backing::Memory(m) => m.len(),
        }
    }
}

impl Source for Backing {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            Backing::File(f) => f.read_at(file, offset, buf),
            Backing::Memory(m) => m.read_at(file, offset, buf),
        }
    }

    fn name(&self, file: u32) -> String {
        match self {
            Backing::File(f) => f.name(file),
            Backing::Memory(m) => m.name(file),
        }
    }
}

/// What to open: a path, or a whole file's bytes.
enum Input {
    Path(PathBuf),
    /// `name` is used in messages only.
    Memory {
        name: String,
        bytes: Arc<[u8]>,
    },
}

/// An HDF5 file opened for batch reads along the first axis.
pub struct Hdf5File {
    source: Backing,
    h5: LibraryHandle,
    location: String,
    datasets: Vec<Hdf5Dataset>,
    samples: usize,
    skipped: Vec<(String, String)>,
    cache: ChunkCache,
    /// Where the objects of the global heap collections read so far are (variable-length
    /// data), so later batches read only the objects they need.
    heaps: vlen::HeapIndex,
    threads: Option<usize>,
}

pub(crate) fn h5err(location: &str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Hdf5, location, msg)
}

extern "C" {
    // Declared here: the binding in hdf5-sys takes a pointer, the C function an unsigned int.
    fn H5PLset_loading_state(plugin_control_mask: std::ffi::c_uint) -> i32;
}

/// The process that first used libhdf5; any other is a forked child.
static LIBRARY_PID: AtomicU32 = AtomicU32::new(0);
/// How long a forked child waits for libhdf5's lock before giving up.
const CHILD_LOCK_WAIT: Duration = Duration::from_secs(2);
/// How long `fork` waits for other threads to leave libhdf5 (see [`at_fork`]).
const FORK_LOCK_WAIT: Duration = Duration::from_secs(1);
/// Whether the fork handler took libhdf5's lock for the fork in progress.
static FORK_HELD: AtomicBool = AtomicBool::new(false);

/// Fork handlers: take libhdf5's lock before `fork` (waiting a little for other threads to
/// leave the library) and release it on both sides, so a child does not inherit a lock held
/// by a thread that does not exist there. A thread stuck in libhdf5 longer than the wait is
/// left alone; the child then gets an error from [`with_library`] rather than a hang.
fn at_fork() {
    extern "C" fn prepare() {
        if let Some(guard) = hdf5_sys::LOCK.try_lock_for(FORK_LOCK_WAIT) {
            std::mem::forget(guard);
            FORK_HELD.store(true, Ordering::SeqCst);
        }
    }
    extern "C" fn release() {
        if FORK_HELD.swap(false, Ordering::SeqCst) {
            // SAFETY: `prepare` took the lock on this very thread (also in the child, where
            // the forking thread is the only one) and forgot its guard.
            unsafe { hdf5_sys::LOCK.force_unlock() };
        }
    }
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: plain function pointers with no captured state.
        unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
    });
}

/// Runs `f` holding libhdf5's global lock. In a forked child the lock may have been held by a
/// parent thread at the moment of the fork, and then it is never released: after a while
/// that is an error, not a hang. Plugin loading is switched off once: the only plugins around
/// (hdf5plugin's) are built against h5py's libhdf5, not the one packread links.
fn with_library<T>(location: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    at_fork();
    let pid = std::process::id();
    let first = LIBRARY_PID
        .compare_exchange(0, pid, Ordering::Relaxed, Ordering::Relaxed)
        .map_or_else(|p| p, |_| pid);
    let _guard = if first == pid {
        hdf5_sys::LOCK.lock()
    } else {
        hdf5_sys::LOCK
            .try_lock_for(CHILD_LOCK_WAIT)
            .ok_or_else(|| {
                h5err(
                    location,
                    "libhdf5 is locked by a thread of the parent process, taken when this process \
                 was forked; open HDF5 readers only in the process that uses them, or use the \
                 'spawn' start method",
                )
            })?
    };
    hdf5_metno::sync::sync(|| {
        static PLUGINS_OFF: std::sync::Once = std::sync::Once::new();
        // SAFETY: lock held; a plain setting of the library.
        PLUGINS_OFF.call_once(|| unsafe {
            H5PLset_loading_state(0);
        });
        f()
    })
}

fn normalize(name: &str) -> String {
    if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/{name}")
    }
}

impl Hdf5File {
    /// Opens the file at `path`; batches read it with `pread`.
    pub fn open(
        path: PathBuf,
        selection: Selection,
        cache_bytes: usize,
        threads: Option<usize>,
    ) -> Result<Hdf5File> {
        Hdf5File::open_input(Input::Path(path), selection, cache_bytes, threads)
    }

    /// Opens a whole file held in memory (`name` is used in messages); libhdf5 reads the
    /// bytes in place, and so do batches.
    pub fn open_memory(
        name: String,
        bytes: Arc<[u8]>,
        selection: Selection,
        cache_bytes: usize,
        threads: Option<usize>,
    ) -> Result<Hdf5File> {
        Hdf5File::open_input(
            Input::Memory { name, bytes },
            selection,
            cache_bytes,
            threads,
        )
    }

    fn open_input(
        input: Input,
        selection: Selection,
        cache_bytes: usize,
        threads: Option<usize>,
    ) -> Result<Hdf5File> {
        selection.check()?;
        let (location, source) = match input {
            Input::Path(path) => (
                path.display().to_string(),
                Backing::File(SharedFile::open(path)?),
            ),
            Input::Memory { name, bytes } => {
                (name.clone(), Backing::Memory(MemoryFile { name, bytes }))
            }
        };
        let file_len = source.len();
        let (h5, image, metas) = with_library(&location, || {
            let (h5, image) = match &source {
                Backing::File(f) => (
                    hdf5_metno::File::open(f.library_path())
                        .map_err(|e| h5err(&location, format!("cannot open as HDF5: {e}")))?,
                    None,
                ),
                Backing::Memory(m) => {
                    // SAFETY: HDF5 lock held; the image is kept in the LibraryHandle, which
                    // closes the file before dropping it.
                    let (id, image) = unsafe { memory::open_image(&location, m.bytes.clone())? };
                    // SAFETY: a file id just opened, owned by the new handle.
                    let file = unsafe { hdf5_metno::from_id::<hdf5_metno::File>(id) }
                        .map_err(|e| h5err(&location, format!("cannot open as HDF5: {e}")))?;
                    (file, Some(image))
                }
            };
            // SAFETY: open file id, HDF5 lock held.
            let all = unsafe { meta::dataset_names(h5.id(), &location)? };
            let wanted: Vec<String> = match &selection {
                Selection::All => all.clone(),
                // Names may reach a dataset through soft or hard links, as in h5py.
                Selection::Names(names) => names.iter().map(|n| normalize(n)).collect(),
            };
            // SAFETY: open file id, HDF5 lock held.
            let facts = unsafe { meta::file_facts(h5.id(), &location)? };
            let mut metas = Vec::with_capacity(wanted.len());
            for name in &wanted {
                let ds = h5.dataset(name).map_err(|e| {
                    if all.contains(name) {
                        h5err(
                            &format!("{location}:{name}"),
                            format!("cannot open dataset: {e}"),
                        )
                    } else {
                        Error::new(
                            ErrorKind::Key,
                            &location,
                            format!("no dataset {name:?} (datasets: {all:?})"),
                        )
                    }
                })?;
                // SAFETY: open dataset id, HDF5 lock held.
                metas.push(unsafe {
                    meta::dataset_meta(ds.id(), name, &location, file_len, facts)?
                });
            }
            Ok((h5, image, metas))
        })?;
        let (datasets, samples, skipped) = select(metas, &selection, &location)?;
        Ok(Hdf5File {
            source,
            h5: LibraryHandle {
                file: ManuallyDrop::new(h5),
                image: ManuallyDrop::new(image),
                pid: std::process::id(),
            },
            location,
            datasets,
            samples,
            skipped,
            cache: ChunkCache::new(cache_bytes),
            heaps: vlen::HeapIndex::default(),
            threads,
        })
    }

    pub fn location(&self) -> &str {
        &self.location
    }

    pub fn datasets(&self) -> &[Hdf5Dataset] {
        &self.datasets
    }

    /// Datasets left out of an `All` selection, with the reason.
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// The number of samples (the common first dimension).
    pub fn len(&self) -> usize {
        self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }

    /// What reading `rows` samples of the datasets at `which` costs, at most: a sample in a
    /// chunk of several costs its whole chunk (see [`pool::Work`]).
    pub fn work(&self, rows: usize, which: &[usize]) -> pool::Work {
        // libhdf5's own reads take its global lock and may wait on it (or on a slow external
        // file): never inline, so batch_async always returns at once.
        if which
            .iter()
            .any(|&w| matches!(self.datasets[w].path, ReadPath::Library(_)))
        {
            return pool::Work {
                units: usize::MAX,
                bytes: u64::MAX,
            };
        }
        let per_row: u64 = which
            .iter()
            .map(|&w| {
                let ds = &self.datasets[w];
                ds.sample_bytes.max(ds.chunk_bytes) as u64
            })
            .sum();
        pool::Work {
            units: rows.saturating_mul(which.len()),
            bytes: (rows as u64).saturating_mul(per_row),
        }
    }

    pub fn position(&self, name: &str) -> Result<usize> {
        let name = normalize(name);
        self.datasets
            .iter()
            .position(|d| d.meta.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.datasets.iter().map(|d| d.name()).collect();
                Error::new(
                    ErrorKind::Key,
                    &self.location,
                    format!("no dataset {name:?} in this reader (datasets: {known:?})"),
                )
            })
    }

    /// Reads samples `idx` of the datasets at positions `which` into `outs` (one each, holding
    /// the samples one after another in C order).
    pub fn read_batch(&self, idx: &[i64], which: &[usize], outs: &mut [&mut [u8]]) -> Result<()> {
        let rows = resolve_indices(idx, self.samples, &self.location)?;
        if which.len() != outs.len() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "one output per dataset is needed",
            ));
        }
        for (&w, out) in which.iter().zip(outs.iter()) {
            check_out_len(out.len(), rows.len(), self.datasets[w].sample_bytes)?;
        }
        // Plan every dataset, then run all their extents in one parallel pass.
        let mut plan = BatchPlan::default();
        for (slot, &w) in which.iter().enumerate() {
            let ds = &self.datasets[w];
            match &ds.path {
                ReadPath::Library(_) => plan.library.push((slot, w)),
                ReadPath::Unreadable(why) => {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!("{}:{}", self.location, ds.name()),
                        why.clone(),
                    ));
                }
                _ => self.plan_dataset(w, slot, &rows, &mut plan)?,
            }
        }
        let BatchPlan {
            mut extents,
            labels,
            cached,
            fresh,
            library,
        } = plan;
        let n_outs = outs.len();
        // Chunks to be cached decode into buffers of their own (outputs after the callers').
        // Allocated as the cache keeps them (one allocation, no copy into the cache after).
        let mut fresh_arcs: Vec<Arc<[u8]>> = fresh
            .iter()
            .map(|f| std::iter::repeat_n(0u8, f.len).collect())
            .collect();
        for (k, f) in fresh.iter().enumerate() {
            extents[f.extent].out = (n_outs + k) as u32;
        }
        {
            let mut all: Vec<&mut [u8]> = outs.iter_mut().map(|o| &mut **o).collect();
            for b in &mut fresh_arcs {
                all.push(Arc::get_mut(b).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Internal,
                        &self.location,
                        "a fresh chunk is shared",
                    )
                })?);
            }
            pool::install_with(self.threads, || {
                execute(&self.source, &extents, &mut all, HDF5_FAULTS)
            })
            .map_err(|f| {
                let (w, addr) = labels[f.extent];
                f.error.at(format!(
                    "{}:{} (chunk at byte {addr})",
                    self.location,
                    self.datasets[w].name()
                ))
            })?;
        }
        // Pieces of cached and freshly decoded multi-sample chunks.
        for (k, f) in fresh.iter().enumerate() {
            self.cache.insert(f.key, fresh_arcs[k].clone());
        }
        let mut by_slot: BTreeMap<usize, Vec<ScatterFrom>> = BTreeMap::new();
        for c in &cached {
            by_slot
                .entry(c.slot)
                .or_default()
                .push((&c.bytes, &c.pieces));
        }
        for (k, f) in fresh.iter().enumerate() {
            by_slot
                .entry(f.slot)
                .or_default()
                .push((&fresh_arcs[k], &f.pieces));
        }
        for (slot, from) in by_slot {
            pool::install_with(self.threads, || scatter(&from, outs[slot]))?;
        }
        for (slot, w) in library {
            self.read_with_library(w, &rows, outs[slot])?;
        }
        Ok(())
    }

    /// Plans the reads of dataset `w` for `rows` into output `slot`.
    fn plan_dataset(
        &self,
        w: usize,
        slot: usize,
        rows: &[usize],
        plan: &mut BatchPlan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        let sb = ds.sample_bytes;
        match &ds.path {
            ReadPath::Contiguous(addr) => {
                for (k, &i) in rows.iter().enumerate() {
                    let mut e = Extent::raw(0, addr + (i * sb) as u64, sb, Dest::At(k * sb));
                    e.out = slot as u32;
                    plan.push(e, (w, addr + (i * sb) as u64));
                }
            }
            ReadPath::Fill => {
                for k in 0..rows.len() {
                    plan.push(
                        fill_extent(&ds.meta.fill, sb, slot, Dest::At(k * sb)),
                        (w, 0),
                    );
                }
            }
            ReadPath::Chunked { filters } => self.plan_chunked(w, slot, rows, filters, plan)?,
            ReadPath::Library(_) | ReadPath::Unreadable(_) => unreachable!("planned elsewhere"),
        }
        Ok(())
    }

    fn plan_chunked(
        &self,
        w: usize,
        slot: usize,
        rows: &[usize],
        filters: &[FilterStep],
        plan: &mut BatchPlan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        let Layout::Chunked { chunk, chunks, .. } = &ds.meta.layout else {
            unreachable!("chunked read path on a chunked layout");
        };
        let sb = ds.sample_bytes;
        let c0 = chunk[0];
        let exact = ds.tiling.is_exact();
        for ChunkRead {
            linear,
            uses,
            pieces,
        } in ds.tiling.reads(rows)
        {
            let key = (w as u32, linear);
            if let Some(bytes) = self.cache.get(key) {
                plan.cached.push(Cached {
                    slot,
                    bytes,
                    pieces,
                });
                continue;
            }
            let loc = chunks.get(&linear).copied();
            let mut extent = match loc {
                None => fill_extent(&ds.meta.fill, ds.chunk_bytes, slot, Dest::At(0)),
                Some(loc) => chunk_extent(loc, filters, ds.chunk_bytes, slot),
            };
            let addr = loc.map_or(0, |l| l.addr);
            if exact && uses.len() == 1 {
                extent.dest = Dest::At(uses[0].0 * sb);
            } else if c0 > 1 && loc.is_some() && self.cache.fits(ds.chunk_bytes) {
                // Holds several samples: decode once, keep it for the next batch.
                plan.fresh.push(Fresh {
                    extent: plan.extents.len(),
                    slot,
                    key,
                    len: ds.chunk_bytes,
                    pieces,
                });
                extent.dest = Dest::At(0);
            } else {
                extent.dest = Dest::Scatter(pieces);
            }
            plan.push(extent, (w, addr));
        }
        Ok(())
    }

    /// libhdf5 reads each requested sample, under its lock, in the stored byte order.
    fn read_with_library(&self, w: usize, rows: &[usize], out: &mut [u8]) -> Result<()> {
        let ds = &self.datasets[w];
        let at = format!("{}:{}", self.location, ds.name());
        let sb = ds.sample_bytes;
        with_library(&at, || -> Result<()> {
            let h5ds = self
                .h5
                .file
                .dataset(ds.name())
                .map_err(|e| h5err(&at, format!("cannot open dataset: {e}")))?;
            let rank = ds.meta.shape.len();
            let mut mem_dims: Vec<u64> = ds.meta.shape.iter().map(|&d| d as u64).collect();
            mem_dims[0] = 1;
            // SAFETY: valid ids, HDF5 lock held; each read fills exactly `sb` bytes of `out`.
            unsafe {
                let ftype = H5Dget_type(h5ds.id());
                let fspace = H5Dget_space(h5ds.id());
                let mspace = H5Screate_simple(rank as i32, mem_dims.as_ptr(), std::ptr::null());
                let mut result = Ok(());
                for (k, &i) in rows.iter().enumerate() {
                    let mut start = vec![0u64; rank];
                    start[0] = i as u64;
                    let ok = H5Sselect_hyperslab(
                        fspace,
                        H5S_seloper_t::H5S_SELECT_SET,
                        start.as_ptr(),
                        std::ptr::null(),
                        mem_dims.as_ptr(),
                        std::ptr::null(),
                    ) >= 0
                        && H5Dread(
                            h5ds.id(),
                            ftype,
                            mspace,
                            fspace,
                            H5P_DEFAULT,
                            out[k * sb..].as_mut_ptr().cast(),
                        ) >= 0;
                    if !ok {
                        let why = hdf5_metno::Error::query()
                            .map(|e| e.to_string())
                            .unwrap_or_default();
                        result = Err(h5err(
                            &at,
                            format!("libhdf5 could not read sample {i}: {why}"),
                        ));
                        break;
                    }
                }
                H5Sclose(mspace);
                H5Sclose(fspace);
                H5Tclose(ftype);
                result
            }
        })
    }
}

/// Decoded bytes and the pieces to copy out of them.
type ScatterFrom<'a> = (&'a [u8], &'a [Piece]);

/// The datasets a selection keeps, the sample count, and what was left out (with why).
type Selected = (Vec<Hdf5Dataset>, usize, Vec<(String, String)>);

/// libhdf5's handle on the file. A forked child never closes it: the parent may have held
/// libhdf5's lock at the moment of the fork, and closing would wait on it forever.
/// For a file in memory, the image libhdf5 reads in place outlives the file (and in a child,
/// where the file is never closed, is never freed).
struct LibraryHandle {
    file: ManuallyDrop<hdf5_metno::File>,
    image: ManuallyDrop<Option<Box<memory::Image>>>,
    pid: u32,
}

impl Drop for LibraryHandle {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // SAFETY: dropped once, here, the file before the image it reads.
            unsafe {
                ManuallyDrop::drop(&mut self.file);
                ManuallyDrop::drop(&mut self.image);
            }
        }
    }
}

/// Extents and side work of one batch.
#[derive(Default)]
struct BatchPlan {
    extents: Vec<Extent>,
    /// Per extent: (dataset, file offset) for messages.
    labels: Vec<(usize, u64)>,
    cached: Vec<Cached>,
    fresh: Vec<Fresh>,
    library: Vec<(usize, usize)>,
}

impl BatchPlan {
    fn push(&mut self, e: Extent, label: (usize, u64)) {
        self.extents.push(e);
        self.labels.push(label);
    }
}

/// A chunk already in the cache and where its pieces go.
struct Cached {
    slot: usize,
    bytes: Arc<[u8]>,
    pieces: Vec<Piece>,
}

/// A chunk decoded into a buffer of its own, to be scattered and then cached.
struct Fresh {
    extent: usize,
    slot: usize,
    key: (u32, u64),
    len: usize,
    pieces: Vec<Piece>,
}

fn fill_extent(fill: &[u8], len: usize, slot: usize, dest: Dest) -> Extent {
    Extent {
        file: 0,
        offset: 0,
        stored_len: 0,
        pipeline: Pipeline::new(vec![Step::Fill(fill.into())]),
        decoded_len: len,
        out: slot as u32,
        dest,
    }
}

/// The extent decoding one stored chunk: the filters in reverse, skipping those its mask
/// says were not applied.
fn chunk_extent(loc: ChunkLoc, filters: &[FilterStep], chunk_bytes: usize, slot: usize) -> Extent {
    let mut steps = Vec::with_capacity(filters.len());
    for (i, f) in filters.iter().enumerate().rev() {
        if i < 32 && loc.mask & (1 << i) != 0 {
            continue;
        }
        if *f == FilterStep::Shuffle(1) {
            continue; // shuffling 1-byte elements changes nothing
        }
        steps.push(match f {
            FilterStep::Deflate => Step::Inflate(Wrapper::Zlib),
            FilterStep::Shuffle(n) => Step::Unshuffle { itemsize: *n },
            FilterStep::Fletcher32 => Step::Fletcher32,
            FilterStep::Lzf => Step::Lzf,
            FilterStep::Blosc => Step::Blosc,
            FilterStep::Zstd => Step::Zstd,
            FilterStep::Lz4 => Step::Lz4,
            FilterStep::Bitshuffle {
                itemsize,
                block,
                inner,
            } => Step::Bitshuffle {
                itemsize: *itemsize,
                block: *block,
                inner: *inner,
            },
        });
    }
    Extent {
        file: 0,
        offset: loc.addr,
        stored_len: loc.size as usize,
        pipeline: Pipeline::new(steps),
        decoded_len: chunk_bytes,
        out: slot as u32,
        dest: Dest::At(0),
    }
}

/// Keeps the datasets a selection asks for, checks they share the sample count, and decides
/// how each is read.
fn select(metas: Vec<DatasetMeta>, selection: &Selection, location: &str) -> Result<Selected> {
    let mut skipped = Vec::new();
    let explicit = matches!(selection, Selection::Names(_));
    let mut usable = Vec::new();
    for m in metas {
        let at = format!("{location}:{}", m.name);
        let problem = if m.shape.is_empty() {
            Some("is a scalar (no first axis to index)".to_string())
        } else if m.vlen.is_some() && m.shape.len() != 1 {
            Some("variable-length data of rank > 1 is not supported".to_string())
        } else {
            m.dtype_problem.clone()
        };
        match problem {
            Some(why) if explicit => return Err(Error::new(ErrorKind::Unsupported, at, why)),
            Some(why) => skipped.push((m.name.clone(), why)),
            None => usable.push(m),
        }
    }
    let samples = if explicit {
        let first = usable.first().map_or(0, |m| m.shape[0]);
        if let Some(m) = usable.iter().find(|m| m.shape[0] != first) {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                format!("{location}:{}", m.name),
                format!(
                    "has {} samples, but {} has {first}",
                    m.shape[0], usable[0].name
                ),
            ));
        }
        first
    } else {
        // The most common first dimension (the larger on a tie).
        let mut counts: HashMap<usize, usize> = HashMap::new();
        for m in &usable {
            *counts.entry(m.shape[0]).or_default() += 1;
        }
        let best = counts
            .into_iter()
            .max_by_key(|&(n, c)| (c, n))
            .map_or(0, |(n, _)| n);
        usable.retain(|m| {
            let keep = m.shape[0] == best;
            if !keep {
                skipped.push((
                    m.name.clone(),
                    format!("has {} samples, not {best}", m.shape[0]),
                ));
            }
            keep
        });
        best
    };
    let mut datasets = Vec::with_capacity(usable.len());
    for m in usable {
        let ds = dataset(m, location)?;
        match (&ds.path, explicit) {
            // Asked for everything: leave out what nobody can decode, and say why.
            (ReadPath::Unreadable(why), false) => skipped.push((ds.meta.name.clone(), why.clone())),
            _ => datasets.push(ds),
        }
    }
    Ok((datasets, samples, skipped))
}

fn dataset(meta: DatasetMeta, location: &str) -> Result<Hdf5Dataset> {
    let at = format!("{location}:{}", meta.name);
    let dtype = meta.dtype.clone().expect("selected datasets have a dtype");
    let itemsize = dtype.itemsize();
    let sample_bytes = meta.shape[1..].iter().product::<usize>() * itemsize;
    let mut chunk_bytes = 0;
    let tiling = match &meta.layout {
        Layout::Chunked { chunk, .. } => {
            Tiling::new(&meta.shape, chunk, itemsize).map_err(|m| h5err(&at, m))?
        }
        _ => Tiling::default(),
    };
    let path = match &meta.layout {
        Layout::Contiguous { addr: Some(a) } => ReadPath::Contiguous(*a),
        Layout::Contiguous { addr: None } => ReadPath::Fill,
        // libhdf5 would hand back its in-memory sequences, not the stored heap IDs.
        Layout::Other(why) if meta.vlen.is_some() => {
            ReadPath::Unreadable(format!("variable-length data in {why} is not supported"))
        }
        Layout::Other(why) => ReadPath::Library(why.clone()),
        Layout::Chunked { chunk, .. } => {
            chunk_bytes = chunk.iter().product::<usize>() * itemsize;
            match native_filters(&meta.filters, chunk_bytes, meta.vlen.is_some(), &at)? {
                Some(filters) => ReadPath::Chunked { filters },
                None => match meta.filters.iter().find(|f| !f.available) {
                    Some(f) => ReadPath::Unreadable(format!(
                        "filter {} ({}) is not available: packread cannot decode this pipeline and its libhdf5 lacks the filter",
                        f.id,
                        if f.name.is_empty() { "unknown" } else { &f.name }
                    )),
                    None if meta.vlen.is_some() => ReadPath::Unreadable(
                        "variable-length data behind a filter pipeline packread does not decode"
                            .into(),
                    ),
                    None => ReadPath::Library("a filter packread does not decode".into()),
                },
            }
        }
    };
    Ok(Hdf5Dataset {
        meta,
        dtype,
        path,
        sample_bytes,
        chunk_bytes,
        tiling,
    })
}

/// The pipeline packread decodes itself, or `None` if a filter needs libhdf5. Parameters are
/// checked here: a malformed pipeline is an error, not a guess.
fn native_filters(
    filters: &[Filter],
    chunk_bytes: usize,
    vlen: bool,
    at: &str,
) -> Result<Option<Vec<FilterStep>>> {
    let mut steps = Vec::with_capacity(filters.len());
    let mut compressors = 0;
    for f in filters {
        let bad = |what: &str| {
            h5err(
                at,
                format!(
                    "filter {} ({}): {what} (parameters {:?})",
                    f.id, f.name, f.params
                ),
            )
        };
        steps.push(match f.id {
            FILTER_DEFLATE => {
                if f.params.len() != 1 || f.params[0] > 9 {
                    return Err(bad("expected one parameter, the level 0-9"));
                }
                compressors += 1;
                FilterStep::Deflate
            }
            // No parameter: libhdf5 could not set the element size (variable-length data, where
            // PyTables adds it anyway); the optional filter was then skipped for every chunk
            // (its mask bit set), and a chunk claiming otherwise fails to decode.
            FILTER_SHUFFLE if f.params.is_empty() && vlen => FilterStep::Shuffle(0),
            FILTER_SHUFFLE => {
                if f.params.len() != 1 || f.params[0] == 0 {
                    return Err(bad("expected one parameter, the element size"));
                }
                FilterStep::Shuffle(f.params[0] as usize)
            }
            FILTER_FLETCHER32 => {
                if !f.params.is_empty() {
                    return Err(bad("expected no parameters"));
                }
                FilterStep::Fletcher32
            }
            FILTER_LZF => {
                if f.params.len() > 3
                    || (f.params.len() == 3
                        && f.params[2] != 0
                        && f.params[2] as usize != chunk_bytes)
                {
                    return Err(bad("expected at most (version, lzf version, chunk bytes)"));
                }
                compressors += 1;
                FilterStep::Lzf
            }
            // (filter version, blosc version, typesize, chunk bytes, level, shuffle, codec):
            // the buffer's own header says everything decoding needs.
            FILTER_BLOSC => {
                if f.params.len() > 7 {
                    return Err(bad("expected at most 7 parameters"));
                }
                compressors += 1;
                FilterStep::Blosc
            }
            FILTER_ZSTD => {
                if f.params.len() > 1 {
                    return Err(bad("expected at most one parameter, the level"));
                }
                compressors += 1;
                FilterStep::Zstd
            }
            FILTER_LZ4 => {
                if f.params.len() > 1 {
                    return Err(bad("expected at most one parameter, the block size"));
                }
                compressors += 1;
                FilterStep::Lz4
            }
            // (major, minor, element size, block size, compressor, zstd level)
            FILTER_BITSHUFFLE => {
                if !(3..=6).contains(&f.params.len()) || f.params[2] == 0 {
                    return Err(bad(
                        "expected 3 to 6 parameters, the third the element size",
                    ));
                }
                let block = f.params.get(3).copied().unwrap_or(0) as usize;
                if block % 8 != 0 {
                    return Err(bad("block size is not a multiple of 8"));
                }
                let inner = match f.params.get(4).copied().unwrap_or(0) {
                    0 => BitshuffleInner::None,
                    2 => BitshuffleInner::Lz4,
                    3 => BitshuffleInner::Zstd,
                    other => return Err(bad(&format!("unknown compressor {other}"))),
                };
                if inner != BitshuffleInner::None {
                    compressors += 1;
                }
                FilterStep::Bitshuffle {
                    itemsize: f.params[2] as usize,
                    block,
                    inner,
                }
            }
            _ => return Ok(None),
        });
    }
    // Two compressors in a row would need the intermediate size; libhdf5 knows it.
    Ok((compressors <= 1).then_some(steps))
}
