//! HDF5: libhdf5 (through `hdf5-metno`, statically linked) answers where each dataset's bytes
//! are, once, at open; batches are then read with `pread` and decoded by the shared executor,
//! outside libhdf5's global lock. Datasets the fast path cannot decode (other filters,
//! compact or external storage) are read by libhdf5 itself, under its lock.

mod attrs;
mod cache;
mod driver;
mod filters;
mod handle;
mod library;
pub use library::busy as library_busy;
mod meta;
mod plan;
mod select;
mod types;
mod vlen;

use std::mem::ManuallyDrop;
use std::sync::Arc;

pub use attrs::AttrValue;
pub(crate) use cache::ChunkCache;
pub(crate) use handle::h5err;
use library::{with_library, LibraryHandle};
pub use meta::Filter;
pub(crate) use meta::{DatasetMeta, Layout};
pub use plan::FrameView;
pub use select::Selection;
use select::{normalize, select, ReadPath};
pub use vlen::{RaggedPlan, Vlen, VlenKind};

use crate::batch::pool;
use crate::batch::tiling::Tiling;
use crate::batch::{After, ArraySpec, Index, Plan, Ragged, RaggedBatch, RaggedKind, Rows, Tag};
use crate::codec::Faults;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::source::{Files, SingleFile, Source};

const HDF5_FAULTS: Faults = Faults::both(ErrorKind::Hdf5);

/// Default budget for decoded chunks kept between batches (Python re-exports it).
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;

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
    /// The dataset's path from the root, with its leading `/`.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// The numpy dtype of one element as stored (for variable-length data, the heap ID: see
    /// [`Hdf5Dataset::vlen`]).
    pub fn dtype(&self) -> &DType {
        &self.dtype
    }

    /// The dataset's dimensions, the first the number of samples (never empty: scalars are
    /// not served).
    pub fn shape(&self) -> &[usize] {
        &self.meta.shape
    }

    /// Shape of one sample.
    pub fn sample_shape(&self) -> &[usize] {
        &self.meta.shape[1..]
    }

    /// Bytes of one sample: the sample shape's product times the itemsize.
    pub fn sample_bytes(&self) -> usize {
        self.sample_bytes
    }

    /// The chunk shape in elements, or `None` when the dataset is not chunked.
    pub fn chunks(&self) -> Option<&[usize]> {
        match &self.meta.layout {
            Layout::Chunked { chunk, .. } => Some(chunk),
            _ => None,
        }
    }

    /// The filter pipeline, in the order it was applied when writing (empty when unfiltered).
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

    /// Whether libhdf5 reads this dataset (under its lock) rather than packread.
    pub fn reads_through_library(&self) -> bool {
        matches!(self.path, ReadPath::Library(_))
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
    /// How much of the file the dataset takes (see [`Storage`]).
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

/// An HDF5 file opened for batch reads along the first axis.
pub struct Hdf5File {
    source: SingleFile,
    h5: LibraryHandle,
    location: String,
    datasets: Vec<Hdf5Dataset>,
    samples: usize,
    skipped: Vec<(String, String)>,
    cache: ChunkCache,
    /// One array per dataset: its path, dtype and sample shape.
    arrays: Vec<ArraySpec>,
    /// Where the objects of the global heap collections read so far are (variable-length
    /// data), so later batches read only the objects they need.
    heaps: vlen::HeapIndex,
    threads: Option<usize>,
}

impl Hdf5File {
    /// Opens the HDF5 file in `source`: libhdf5 reads its metadata through packread's file
    /// driver (a local file's `pread`, bytes in place, an object's cached blocks and index
    /// cache), batches read chunks through the source (an object's by merged ranged requests).
    pub fn open(
        source: Arc<dyn Source>,
        selection: Selection,
        cache_bytes: usize,
        threads: Option<usize>,
    ) -> Result<Hdf5File> {
        let opened = Hdf5File::open_source(&source, selection, cache_bytes, threads);
        // What libhdf5 read to open the file is the index cache's entry for an object.
        source.opened();
        opened.map_err(|e| source.cause(e))
    }

    fn open_source(
        source: &Arc<dyn Source>,
        selection: Selection,
        cache_bytes: usize,
        threads: Option<usize>,
    ) -> Result<Hdf5File> {
        selection.check()?;
        let location = source.name().to_string();
        let file_len = source.len();
        let (h5, driven, metas, unreadable) = with_library(&location, || {
            // SAFETY: HDF5 lock held; the LibraryHandle keeps what the driver reads through
            // alive until after libhdf5's file is closed.
            let (id, driven) = unsafe { driver::open(source, &location)? };
            // SAFETY: a file id just opened, owned by the new handle.
            let h5 = unsafe { hdf5_metno::from_id::<hdf5_metno::File>(id) }
                .map_err(|e| h5err(&location, format!("cannot open as HDF5: {e}")))?;
            // SAFETY: open file id, HDF5 lock held.
            let found = unsafe { meta::dataset_names(h5.id(), &location)? };
            let all: Vec<String> = found.iter().map(|(n, _)| n.clone()).collect();
            // Asked for everything: a dataset whose name or object header cannot be read is left
            // out (listed in `skipped`, saying why); the others read as usual.
            let mut unreadable: Vec<(String, String)> = Vec::new();
            let wanted: Vec<String> = match &selection {
                Selection::All => found
                    .into_iter()
                    .filter_map(|(name, why)| match why {
                        Some(why) => {
                            unreadable.push((name, why));
                            None
                        }
                        None => Some(name),
                    })
                    .collect(),
                // Names may reach a dataset through soft or hard links, as in h5py.
                Selection::Names(names) => names.iter().map(|n| normalize(n)).collect(),
            };
            // SAFETY: open file id, HDF5 lock held.
            let facts = unsafe { meta::file_facts(h5.id(), &location)? };
            let mut metas = Vec::with_capacity(wanted.len());
            for name in &wanted {
                let meta = h5
                    .dataset(name)
                    .map_err(|e| {
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
                    })
                    // SAFETY: open dataset id, HDF5 lock held.
                    .and_then(|ds| unsafe {
                        meta::dataset_meta(ds.id(), name, &location, file_len, facts, &**source)
                    });
                metas.push(meta?);
            }
            Ok((h5, driven, metas, unreadable))
        })?;
        let (datasets, samples, mut skipped) = select(metas, &selection, &location)?;
        skipped.extend(unreadable);
        let arrays = datasets
            .iter()
            .map(|d| ArraySpec {
                name: d.name().to_string(),
                dtype: d.dtype.clone(),
                shape: d.sample_shape().to_vec(),
                ragged: d.vlen().map(|v| Ragged {
                    kind: match v.kind {
                        VlenKind::Array => RaggedKind::Values,
                        VlenKind::Bytes => RaggedKind::Bytes,
                        VlenKind::Unicode => RaggedKind::Text,
                    },
                    dtype: v.base.clone(),
                    shape: std::iter::once(None)
                        .chain(v.elem_shape.iter().map(|&n| Some(n)))
                        .collect(),
                }),
            })
            .collect();
        Ok(Hdf5File {
            source: SingleFile(source.clone()),
            h5: LibraryHandle {
                file: ManuallyDrop::new(h5),
                _driver: ManuallyDrop::new(driven),
                pid: std::process::id(),
            },
            location,
            datasets,
            samples,
            skipped,
            cache: ChunkCache::new(cache_bytes),
            arrays,
            heaps: vlen::HeapIndex::default(),
            threads,
        })
    }

    /// The datasets this reader serves, all with the same number of samples; a dataset's
    /// position here is what [`Hdf5File::position`] returns and the `w` other methods take.
    pub fn datasets(&self) -> &[Hdf5Dataset] {
        &self.datasets
    }

    /// Samples stored (and decoded) together: the first chunk dimension of the dataset whose
    /// chunks hold the most bytes; 1 when no chunk holds several samples.
    pub fn samples_per_chunk(&self) -> usize {
        let mut best = (0usize, 1usize);
        for d in &self.datasets {
            if let Some(chunks) = d.chunks().filter(|c| !c.is_empty()) {
                let bytes = chunks.iter().product::<usize>() * d.dtype().itemsize();
                if bytes > best.0 {
                    best = (bytes, chunks[0]);
                }
            }
        }
        best.1.max(1)
    }

    /// Datasets left out of an `All` selection, with the reason.
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// The position of dataset `name` (with or without its leading `/`), or a `KeyError`.
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
}

impl Index for Hdf5File {
    fn len(&self) -> usize {
        self.samples
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn faults(&self) -> Faults {
        HDF5_FAULTS
    }

    fn files(&self) -> &dyn Files {
        &self.source
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    /// At most: a sample in a chunk of several costs its whole chunk (see [`pool::Work`]).
    fn work(&self, rows: usize, which: &[usize]) -> pool::Work {
        // libhdf5's own reads take its global lock and may wait on it (or on a slow external
        // file): never inline, so batch_async always returns at once.
        if which
            .iter()
            .any(|&w| matches!(self.datasets[w].path, ReadPath::Library(_)))
        {
            return pool::Work::new(usize::MAX, u64::MAX);
        }
        let per_row: u64 = which
            .iter()
            .map(|&w| {
                let ds = &self.datasets[w];
                ds.sample_bytes.max(ds.chunk_bytes) as u64
            })
            .sum();
        pool::Work::new(
            rows.saturating_mul(which.len()),
            (rows as u64).saturating_mul(per_row),
        )
    }

    /// Every dataset's reads in one plan: contiguous rows, fill values, chunks (straight into
    /// the output, from the cache, or decoded into a buffer the cache then keeps), and libhdf5's
    /// own reads for what the fast path cannot decode, deferred to the end.
    fn plan(&self, rows: &Rows, which: &[usize], plan: &mut Plan) -> Result<()> {
        for (slot, &w) in which.iter().enumerate() {
            let ds = &self.datasets[w];
            match &ds.path {
                // libhdf5 would hand back its in-memory sequences, not heap IDs.
                ReadPath::Library(_) if ds.meta.vlen.is_some() => {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!("{}:{}", self.location, ds.name()),
                        "variable-length data is read with read_ragged",
                    ));
                }
                ReadPath::Library(_) => plan.after.push(After::Fill {
                    out: slot,
                    tag: Tag::new(w as u32, 0),
                }),
                ReadPath::Unreadable(why) => {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!("{}:{}", self.location, ds.name()),
                        why.clone(),
                    ));
                }
                _ => self.plan_dataset(w, slot, rows.as_slice(), plan)?,
            }
        }
        Ok(())
    }

    /// `(dataset, file offset)`: the dataset and the chunk's address.
    /// The dataset and the chunk's (or row's) address in the file.
    fn locate(&self, tag: Tag, error: Error) -> Error {
        error.at(format!(
            "{}:{} (chunk at byte {})",
            self.location,
            self.datasets[tag.array as usize].name(),
            tag.at
        ))
    }

    /// The chunk cache keeps a decoded chunk by dataset and chunk number.
    fn keep(&self, key: Tag, bytes: Arc<[u8]>) {
        self.cache.insert((key.array, key.at), bytes);
    }

    /// libhdf5 reads dataset `tag.array` itself.
    fn fill(&self, rows: &Rows, tag: Tag, out: &mut [u8]) -> Result<()> {
        self.read_with_library(tag.array as usize, rows.as_slice(), out)
    }

    /// The sequences of variable-length dataset `w`: natively (heap IDs decoded like any
    /// chunk, sequences read in parallel) where its storage allows, else by libhdf5.
    fn read_ragged(&self, rows: &Rows, w: usize) -> Result<RaggedBatch> {
        self.read_sequences(rows, w)
    }
}
