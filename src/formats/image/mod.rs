//! Encoded images as samples ([`ImageIndex`]): members of a ZIP archive, files of a folder
//! tree, or the rows of an HDF5 dataset of bytes, each one JPEG, PNG or WebP decoded into one
//! fixed-shape sample of the batch ([`ImageSpec`]). The bytes are planned like any other
//! format's (a ZIP member's inflate and CRC-32 steps, then [`Step::Image`]); decoding,
//! cropping, resizing and normalising run on the pool, each straight into the sample's place
//! in the output.
//!
//! Bytes found only by reading first are *staged* (`staged`): the HDF5 rows of a batch (a
//! ragged read of variable-length bytes, or a read of fixed-size opaque rows) are read by the
//! engine, then decoded from memory by a plan whose own source they are ([`Plan::files`]).
//! Images at their own sizes (`sized`, Python's `size=None`) are staged the same way for every
//! source: their output sizes are known only from the bytes.
//!
//! `open` finds the samples of an archive, a folder tree or an HDF5 file, their names and
//! labels, the same for a reader of one file and for every shard of many.
//!
//! With `skip` (Python's `on_error="skip"`), an image that does not decode leaves its slot to
//! be filled after the batch ran: by the next sample in index order (wrapping around) that
//! decodes, with that sample's own crop. Every sample found broken is kept in
//! [`ImageIndex::errors`].

pub mod clip;
mod labels;
pub mod open;
mod sized;
mod staged;
pub mod tree;
pub mod videos;

pub use labels::py_repr;
pub use open::{ImageOptions, ImageSet, Labels, LABELS_MEMBER};

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::batch::pool::Work;
use crate::batch::{
    After, ArraySpec, Dest, Extent, Index, Plan, Ragged, RaggedBatch, RaggedKind, Rows, Tag,
};
use crate::codec::image::geometry::{Crop, Element, ImageSpec, Layout};
use crate::codec::image::{ImageStep, SkipLog};
use crate::codec::{Faults, Pipeline, Step};
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::formats::zip::{Payload, ZipIndex};
use crate::source::{FileList, Files, Source, StampedPath};

/// Where the encoded images are.
pub enum ImageBytes {
    /// Members of one archive: sample `k` is member `members[k]`.
    Zip {
        /// The archive.
        zip: Arc<ZipIndex>,
        /// Member positions, in sample order.
        members: Vec<usize>,
    },
    /// Files, one image each (opened for each read, checked against their stamps).
    Files(FileList),
    /// Rows of an HDF5 dataset: variable-length bytes (h5py `vlen_dtype(uint8)`, PyTables
    /// `VLArray(UInt8Atom)`) or fixed-size rows of bytes (opaque `np.void`, uint8) holding an
    /// image and, after it, padding the decoders ignore.
    #[cfg(feature = "hdf5")]
    Hdf5 {
        /// The file.
        file: Arc<crate::formats::hdf5::Hdf5File>,
        /// The dataset's position in it.
        dataset: usize,
    },
}

/// Most bytes one batch stages (encoded images read before decoding): a batch asking for
/// more is refused, to be read in smaller batches.
pub const MAX_STAGED_BYTES: u64 = 2 << 30;

/// Most bytes one batch of images at their own sizes may decode to.
pub const MAX_SIZED_BYTES: u64 = 4 << 30;

/// Encoded images read as samples of one array, `images`, of `spec`'s shape.
pub struct ImageIndex {
    bytes: ImageBytes,
    names: Vec<String>,
    spec: Arc<ImageSpec>,
    seed: u64,
    skip: bool,
    arrays: [ArraySpec; 1],
    threads: Option<usize>,
    location: String,
    /// Largest encoded file read (a ZIP member is bounded by the archive's own limit).
    max_file_bytes: u64,
    /// Per batch in flight with `skip`: the samples that did not decode.
    logs: Mutex<HashMap<u64, SkipLog>>,
    next_batch: AtomicU64,
    errors: ErrorLog,
}

/// Every sample of a reader found not to decode (with `skip`), with why: shared with whoever
/// keeps the reader's errors beyond the index (a sharded reader, whose shards close and
/// reopen).
pub type ErrorLog = Arc<Mutex<BTreeMap<u64, String>>>;

/// The skip rule images and clips share: `attempt` is tried on each sample after `row` in
/// index order (wrapping around, `len` samples) not yet in `errors`, until one gives `Some`;
/// `None` when none does.
pub(super) fn next_good<T>(
    len: usize,
    row: usize,
    errors: &ErrorLog,
    mut attempt: impl FnMut(usize) -> Result<Option<T>>,
) -> Result<Option<T>> {
    for step in 1..len {
        let other = (row + step) % len;
        let known_bad = errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&(other as u64));
        if known_bad {
            continue;
        }
        if let Some(done) = attempt(other)? {
            return Ok(Some(done));
        }
    }
    Ok(None)
}

/// A new batch's skip log, kept in `logs` under a number of its own, and the step that fills
/// its failed samples in after its reads (see [`take_failed`]).
pub(super) fn open_log(
    next_batch: &AtomicU64,
    logs: &Mutex<HashMap<u64, SkipLog>>,
    plan: &mut Plan,
) -> SkipLog {
    let id = next_batch.fetch_add(1, Ordering::Relaxed);
    let log = SkipLog::default();
    logs.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, log.clone());
    plan.after.push(After::Fill {
        out: 0,
        tag: Tag::new(0, id),
    });
    log
}

/// The samples batch `id` found not to decode (its skip log taken from `logs`), each with why,
/// now also kept in `errors`.
pub(super) fn take_failed(
    logs: &Mutex<HashMap<u64, SkipLog>>,
    id: u64,
    errors: &ErrorLog,
) -> HashMap<u64, String> {
    let log = logs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&id)
        .unwrap_or_default();
    let failed = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    let bad: HashMap<u64, String> = failed.into_iter().collect();
    errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(bad.iter().map(|(k, v)| (*k, v.clone())));
    bad
}

/// Runs the `extents` of sample `row` alone into `out`, their failures collected by `log`:
/// `Ok(false)` (and the failure kept in `errors`) when it does not decode.
#[allow(clippy::too_many_arguments)]
pub(super) fn decode_logged(
    files: &dyn Files,
    extents: &[Extent],
    out: &mut [u8],
    faults: Faults,
    locate: impl Fn(usize, Error) -> Error,
    log: &SkipLog,
    errors: &ErrorLog,
    row: usize,
) -> Result<bool> {
    crate::batch::run_extents(
        files,
        extents,
        &mut [out],
        faults,
        Work::new(extents.len(), 0),
        None,
        locate,
    )?;
    let failed = log.lock().unwrap_or_else(|p| p.into_inner()).pop();
    if let Some((_, why)) = failed {
        errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(row as u64, why);
        return Ok(false);
    }
    Ok(true)
}

/// Largest image file read by default (a file of more is refused, not read whole).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

impl ImageIndex {
    /// Images at `bytes` (named `names`, one per sample), decoded as `spec` says; random crops
    /// are drawn from `seed`. `skip`: replace images that do not decode (see the module).
    pub fn new(
        bytes: ImageBytes,
        names: Vec<String>,
        spec: ImageSpec,
        seed: u64,
        skip: bool,
        threads: Option<usize>,
    ) -> Result<ImageIndex> {
        let (location, len) = match &bytes {
            ImageBytes::Zip { zip, members } => {
                if let Some(&bad) = members.iter().find(|&&m| m >= zip.len()) {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        zip.location(),
                        format!("member {bad} of {}", zip.len()),
                    ));
                }
                (zip.location().to_string(), members.len())
            }
            ImageBytes::Files(set) => {
                let n = set.sources().len();
                let loc = match set.sources().first() {
                    Some(s) if n > 1 => format!("{} (and {} more files)", s.name(), n - 1),
                    Some(s) => s.name().to_string(),
                    None => "<no files>".to_string(),
                };
                (loc, n)
            }
            #[cfg(feature = "hdf5")]
            ImageBytes::Hdf5 { file, dataset } => {
                let ds = file.datasets().get(*dataset).ok_or_else(|| {
                    Error::new(ErrorKind::Internal, file.location(), "no such dataset")
                })?;
                let at = format!("{}:{}", file.location(), ds.name());
                staged::check_bytes_dataset(ds, &at)?;
                (at, ds.shape().first().copied().unwrap_or(0))
            }
        };
        if names.len() != len {
            return Err(Error::new(
                ErrorKind::Internal,
                location,
                format!("{} names for {len} images", names.len()),
            ));
        }
        let c = spec.mode.channels();
        let (h, w) = (spec.size.0 as usize, spec.size.1 as usize);
        let shape = match spec.layout {
            Layout::Nhwc => vec![h, w, c],
            Layout::Nchw => vec![c, h, w],
        };
        let descr = match spec.element {
            Element::U8 => "|u1",
            Element::F32 => "<f4",
            Element::F16 => "<f2",
        };
        let dtype = DType::from_descr(Literal::Str(descr.into()))
            .map_err(|e| Error::new(ErrorKind::Internal, "", format!("{e:?}")))?;
        let ragged = (spec.crop == Crop::Full).then(|| Ragged {
            kind: RaggedKind::Images,
            dtype: dtype.clone(),
            shape: match spec.layout {
                Layout::Nhwc => vec![None, None, Some(c)],
                Layout::Nchw => vec![Some(c), None, None],
            },
        });
        Ok(ImageIndex {
            bytes,
            names,
            spec: Arc::new(spec),
            seed,
            skip,
            arrays: [ArraySpec {
                name: "images".to_string(),
                ragged,
                dtype,
                shape,
            }],
            threads,
            location,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            logs: Mutex::default(),
            next_batch: AtomicU64::new(0),
            errors: ErrorLog::default(),
        })
    }

    /// Image files from `paths`, each checked to be a regular file now (its size and identity
    /// kept: a file changed later is an error, not garbage; none is kept open).
    pub fn image_files(paths: Vec<PathBuf>) -> Result<ImageBytes> {
        let sources = paths
            .into_iter()
            .map(|p| Ok(Arc::new(StampedPath::stamped(p)?) as Arc<dyn Source>))
            .collect::<Result<Vec<_>>>()?;
        Ok(ImageBytes::Files(FileList::new(sources)))
    }

    /// The samples' names (member names, or file paths).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// What each sample becomes.
    pub fn spec(&self) -> &ImageSpec {
        &self.spec
    }

    /// The log [`errors`](ImageIndex::errors) reads, to keep beyond this index.
    pub fn error_log(&self) -> ErrorLog {
        Arc::clone(&self.errors)
    }

    /// The same index, keeping the samples that do not decode in `log` (one log for the image
    /// fields of keyed samples).
    pub fn logging_to(mut self, log: ErrorLog) -> ImageIndex {
        self.errors = log;
        self
    }

    /// Every sample found not to decode so far (with `skip`), with why.
    pub fn errors(&self) -> BTreeMap<u64, String> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn step(&self, row: usize, epoch: u64, log: Option<&SkipLog>) -> Arc<ImageStep> {
        self.step_as(self.spec.clone(), row, epoch, log)
    }

    fn step_as(
        &self,
        spec: Arc<ImageSpec>,
        row: usize,
        epoch: u64,
        log: Option<&SkipLog>,
    ) -> Arc<ImageStep> {
        Arc::new(ImageStep {
            spec,
            seed: self.seed,
            epoch,
            index: row as u64,
            skipped: log.cloned(),
            frames: None,
        })
    }

    /// The size of image file `row`, refused over [`DEFAULT_MAX_FILE_BYTES`] (a file is read
    /// whole).
    fn file_len(&self, set: &FileList, row: usize) -> Result<u64> {
        let len = set.sources()[row].len();
        if len > self.max_file_bytes {
            return Err(Error::new(
                ErrorKind::LimitExceeded,
                self.names[row].clone(),
                format!(
                    "image file of {len} bytes is over the limit of {}",
                    self.max_file_bytes
                ),
            ));
        }
        Ok(len)
    }

    /// The read of sample `row` into output 0 at byte `dst`: from its own bytes, or from
    /// `staged` (its range of the staged bytes, file 0 of the plan's own files).
    fn extent(
        &self,
        row: usize,
        step: Arc<ImageStep>,
        dst: usize,
        staged: Option<Range<usize>>,
    ) -> Result<Extent> {
        let decoded_len = step.spec.sample_bytes();
        if let Some(r) = staged {
            return Ok(Extent {
                file: 0,
                offset: r.start as u64,
                stored_len: r.len(),
                pipeline: Pipeline::new(vec![Step::Image(step)]),
                decoded_len,
                out: 0,
                dest: Dest::At(dst),
            });
        }
        match &self.bytes {
            ImageBytes::Zip { zip, members } => {
                zip.extent(members[row], &Payload::Image(step), 0, dst)
            }
            ImageBytes::Files(set) => {
                let len = self.file_len(set, row)?;
                Ok(Extent {
                    file: row as u32,
                    offset: 0,
                    stored_len: len as usize,
                    pipeline: Pipeline::new(vec![Step::Image(step)]),
                    decoded_len,
                    out: 0,
                    dest: Dest::At(dst),
                })
            }
            #[cfg(feature = "hdf5")]
            ImageBytes::Hdf5 { .. } => Err(Error::new(
                ErrorKind::Internal,
                self.location.clone(),
                "HDF5 rows are read staged",
            )),
        }
    }
}

impl Index for ImageIndex {
    fn len(&self) -> usize {
        self.names.len()
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn faults(&self) -> Faults {
        match &self.bytes {
            ImageBytes::Zip { zip, .. } => zip.faults(),
            _ => Faults::both(ErrorKind::Decode),
        }
    }

    fn files(&self) -> &dyn Files {
        self.source_of()
    }

    /// Decoding dominates: a few milliseconds an image, so every batch but one image is
    /// worth the pool.
    fn work(&self, rows: usize, _arrays: &[usize]) -> Work {
        Work::new(rows, (rows as u64).saturating_mul(1 << 20))
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    fn plan(&self, rows: &Rows, _arrays: &[usize], plan: &mut Plan) -> Result<()> {
        if self.spec.crop == Crop::Full {
            return Err(Error::new(
                ErrorKind::Internal,
                self.location.clone(),
                "images at their own sizes are read by read_sized",
            ));
        }
        let n = self.spec.sample_bytes();
        let staged = if self.stages() {
            let (bytes, ranges) = self.stage(rows)?;
            plan.files = Some(staged::staged_files(bytes));
            Some(ranges)
        } else {
            None
        };
        let log = self
            .skip
            .then(|| open_log(&self.next_batch, &self.logs, plan));
        if let (ImageBytes::Zip { zip, members }, None) = (&self.bytes, &staged) {
            let picked: Vec<usize> = rows.as_slice().iter().map(|&r| members[r]).collect();
            zip.prelocate(&picked, 0);
        }
        for (k, &row) in rows.as_slice().iter().enumerate() {
            let step = self.step(row, rows.epoch(), log.as_ref());
            let range = staged.as_ref().map(|r| r[k].clone());
            let extent = self
                .extent(row, step, k * n, range)
                .map_err(|e| self.locate(Tag::new(0, row as u64), e))?;
            plan.push(extent, Tag::new(0, row as u64));
        }
        Ok(())
    }

    /// The sample (`tag.at`): the archive and member, or the file.
    fn locate(&self, tag: Tag, error: Error) -> Error {
        let row = tag.at;
        match &self.bytes {
            ImageBytes::Zip { zip, members } => {
                error.at(zip.member_location(members[row as usize]))
            }
            ImageBytes::Files(_) => error.at(self.names[row as usize].clone()),
            #[cfg(feature = "hdf5")]
            ImageBytes::Hdf5 { .. } => error.at(format!("{} (sample {row})", self.location)),
        }
    }

    /// Replaces the images of batch `tag.at` that did not decode: each by the next sample in
    /// index order that does.
    fn fill(&self, rows: &Rows, tag: Tag, out: &mut [u8]) -> Result<()> {
        let bad = take_failed(&self.logs, tag.at, &self.errors);
        if bad.is_empty() {
            return Ok(());
        }
        let n = self.spec.sample_bytes();
        for (k, &row) in rows.as_slice().iter().enumerate() {
            let Some(why) = bad.get(&(row as u64)) else {
                continue;
            };
            let slot = &mut out[k * n..(k + 1) * n];
            self.stand_in(row, why, |other| {
                Ok(self.decode_one(other, rows.epoch(), slot)?.then_some(()))
            })?;
        }
        Ok(())
    }

    /// Images at their own sizes.
    fn read_ragged(&self, rows: &Rows, _array: usize) -> Result<RaggedBatch> {
        self.read_sized(rows)
    }
}
