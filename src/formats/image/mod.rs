//! Encoded images as samples ([`ImageIndex`]): members of a ZIP archive, files of a folder
//! tree, or the rows of an HDF5 dataset of bytes, each one JPEG, PNG or WebP decoded into one
//! fixed-shape sample of the batch ([`ImageSpec`]). The bytes are planned like any other
//! format's (a ZIP member's inflate and CRC-32 steps, then [`Step::Image`]); decoding,
//! cropping, resizing and normalising run on the pool, each straight into the sample's place
//! in the output.
//!
//! Bytes found only by reading first are *staged*: the HDF5 rows of a batch (a ragged read of
//! variable-length bytes, or a read of fixed-size opaque rows) are read by the engine, then
//! decoded from memory by a second plan over them ([`Plan::staged`]). Images at their own
//! sizes ([`ImageIndex::read_sized`], Python's `size=None`) are staged the same way for every
//! source: their output sizes are known only from the bytes.
//!
//! With `skip` (Python's `on_error="skip"`), an image that does not decode leaves its slot to
//! be filled after the batch ran: by the next sample in index order (wrapping around) that
//! decodes, with that sample's own crop. Every sample found broken is kept in
//! [`ImageIndex::errors`].

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::batch::pool::Work;
use crate::batch::{ArraySpec, Dest, Extent, Index, Plan, Rows, Tag, STAGED_FILE};
use crate::codec::image::geometry::{Crop, Element, ImageSpec, Layout};
use crate::codec::image::{ImageStep, SkipLog};
use crate::codec::{Faults, Pipeline, Step};
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::formats::zip::{Payload, ZipIndex, ZIP_FAULTS};
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

/// Images at their own sizes, decoded: sample `k` is `values[offsets[k]..offsets[k + 1]]`
/// (in elements of the spec's element type) of shape `shapes[k]` (in the spec's layout).
pub struct SizedBatch {
    /// The elements' bytes, in storage aligned for any element type.
    pub storage: Vec<u64>,
    /// Bytes of `storage` in use.
    pub nbytes: usize,
    /// One more than samples, the first 0, in elements.
    pub offsets: Vec<u64>,
    /// Each sample's shape: `(h, w, c)` or `(c, h, w)`.
    pub shapes: Vec<[usize; 3]>,
}

/// The tag of the deferred fill that replaces the images of a batch that did not decode.
const SKIP_TAG: u32 = 1;

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
                check_bytes_dataset(ds, &at)?;
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
        Ok(ImageIndex {
            bytes,
            names,
            spec: Arc::new(spec),
            seed,
            skip,
            arrays: [ArraySpec {
                name: "images".to_string(),
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
    /// `staged` (its range of the staged bytes).
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
                file: STAGED_FILE,
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

    /// Whether a batch's bytes are read before it is planned (HDF5 rows).
    fn stages(&self) -> bool {
        match &self.bytes {
            #[cfg(feature = "hdf5")]
            ImageBytes::Hdf5 { .. } => true,
            _ => false,
        }
    }

    /// The encoded bytes of `rows`, read by the engine one after another (a ZIP member
    /// inflated and CRC-checked, a file whole, HDF5 rows by a ragged or a fixed-size read),
    /// with each row's range of them. An empty range is an image of no bytes.
    pub fn stage(&self, rows: &Rows) -> Result<(Vec<u8>, Vec<Range<usize>>)> {
        let refuse = |total: u64| {
            Error::new(
                ErrorKind::LimitExceeded,
                self.location.clone(),
                format!(
                    "a batch of {} images holds {total} encoded bytes, over the limit of \
                     {MAX_STAGED_BYTES}: read fewer at a time",
                    rows.len()
                ),
            )
        };
        let ranges_of = |lens: &[u64]| -> Result<Vec<Range<usize>>> {
            let total = lens.iter().try_fold(0u64, |a, &l| a.checked_add(l));
            match total {
                Some(t) if t <= MAX_STAGED_BYTES => {}
                t => return Err(refuse(t.unwrap_or(u64::MAX))),
            }
            let mut at = 0usize;
            Ok(lens
                .iter()
                .map(|&l| {
                    let r = at..at + l as usize;
                    at = r.end;
                    r
                })
                .collect())
        };
        match &self.bytes {
            ImageBytes::Zip { zip, members } => {
                let picked: Vec<usize> = rows.as_slice().iter().map(|&r| members[r]).collect();
                let lens: Vec<u64> = picked.iter().map(|&m| zip.members()[m].size()).collect();
                let ranges = ranges_of(&lens)?;
                for &m in &picked {
                    zip.check_readable(m)?;
                }
                zip.prelocate(&picked, 0);
                let mut buf = vec![0u8; ranges.last().map_or(0, |r| r.end)];
                let extents = picked
                    .iter()
                    .zip(&ranges)
                    .map(|(&m, r)| zip.extent(m, &Payload::Raw, 0, r.start))
                    .collect::<Result<Vec<_>>>()?;
                zip.run(&extents, &picked, &mut [&mut buf], self.threads)?;
                Ok((buf, ranges))
            }
            ImageBytes::Files(set) => {
                let lens = rows
                    .as_slice()
                    .iter()
                    .map(|&r| self.file_len(set, r))
                    .collect::<Result<Vec<_>>>()?;
                let ranges = ranges_of(&lens)?;
                let total = ranges.last().map_or(0, |r| r.end);
                let mut buf = vec![0u8; total];
                let extents: Vec<Extent> = rows
                    .as_slice()
                    .iter()
                    .zip(&ranges)
                    .map(|(&row, r)| Extent::raw(row as u32, 0, r.len(), Dest::At(r.start)))
                    .collect();
                crate::batch::run_extents(
                    set,
                    &extents,
                    &mut [&mut buf],
                    self.faults(),
                    Work::new(rows.len(), total as u64),
                    self.threads,
                    |k, e| e.at(self.names[rows.as_slice()[k]].clone()),
                )?;
                Ok((buf, ranges))
            }
            #[cfg(feature = "hdf5")]
            ImageBytes::Hdf5 { file, dataset } => {
                let ds = &file.datasets()[*dataset];
                if ds.vlen().is_some() {
                    let batch = file.read_ragged(rows, *dataset)?;
                    let lens: Vec<u64> = batch.offsets.windows(2).map(|w| w[1] - w[0]).collect();
                    let ranges = ranges_of(&lens)?;
                    return Ok((batch.bytes().to_vec(), ranges));
                }
                let n = ds.sample_bytes();
                let lens = vec![n as u64; rows.len()];
                let ranges = ranges_of(&lens)?;
                let mut buf = vec![0u8; rows.len() * n];
                crate::batch::read_batch(&**file, rows, &[*dataset], &mut [&mut buf])?;
                Ok((buf, ranges))
            }
        }
    }

    fn source_of(&self) -> &dyn Files {
        match &self.bytes {
            ImageBytes::Zip { zip, .. } => zip.files(),
            ImageBytes::Files(set) => set,
            #[cfg(feature = "hdf5")]
            ImageBytes::Hdf5 { file, .. } => file.files(),
        }
    }

    /// The encoded bytes of sample `row`, whole.
    pub fn encoded(&self, row: usize) -> Result<Vec<u8>> {
        let rows = Rows::resolve(&[row as i64], self.len(), &self.location)?;
        let (mut bytes, ranges) = self.stage(&rows)?;
        bytes.truncate(ranges[0].end);
        Ok(bytes)
    }

    /// The crop sample `row` gets in `epoch` (left, top, width, height in its upright
    /// pixels) and whether it is flipped.
    pub fn crop(&self, row: usize, epoch: u64) -> Result<(crate::codec::image::Region, bool)> {
        let data = self.encoded(row)?;
        let mut draw = crate::codec::image::geometry::Draw::new(self.seed, epoch, row as u64);
        crate::codec::image::geometry::crop_of(&data, &self.spec, &mut draw).map_err(|e| {
            self.locate(
                (0, row as u64),
                Error::new(ErrorKind::Decode, "", e.to_string()),
            )
        })
    }

    /// Decodes sample `row` alone into `out`: `Ok(false)` if its image does not decode.
    fn decode_one(&self, row: usize, epoch: u64, out: &mut [u8]) -> Result<bool> {
        let log: SkipLog = Arc::default();
        let step = self.step(row, epoch, Some(&log));
        let staged = if self.stages() {
            let rows = Rows::resolve(&[row as i64], self.len(), &self.location)?;
            Some(self.stage(&rows)?)
        } else {
            None
        };
        let extent = self.extent(row, step, 0, staged.as_ref().map(|s| s.1[0].clone()))?;
        let with = crate::batch::WithStaged::new(
            self.source_of(),
            staged.as_ref().map_or(&[][..], |s| &s.0[..]),
        );
        crate::batch::run_extents(
            &with,
            std::slice::from_ref(&extent),
            &mut [out],
            self.faults(),
            Work::new(1, 0),
            None,
            |_, e| self.locate((0, row as u64), e),
        )?;
        let failed = log.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some((_, why)) = failed {
            self.errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(row as u64, why);
            return Ok(false);
        }
        Ok(true)
    }
}

/// Refuses a dataset whose rows cannot hold encoded images, saying what would.
#[cfg(feature = "hdf5")]
fn check_bytes_dataset(ds: &crate::formats::hdf5::Hdf5Dataset, at: &str) -> Result<()> {
    let wrong = |what: String| {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            at,
            format!(
                "{what}; encoded images are read from variable-length bytes (h5py \
                 vlen_dtype(np.uint8), PyTables VLArray(UInt8Atom)) or from fixed-size rows \
                 of bytes (opaque np.void, uint8), one image a row"
            ),
        ))
    };
    if ds.shape().len() != 1 && ds.vlen().is_some() {
        return wrong(format!(
            "a variable-length dataset of shape {:?}",
            ds.shape()
        ));
    }
    if ds.shape().is_empty() {
        return wrong("a scalar dataset".into());
    }
    let descr = match ds.dtype().descr() {
        Literal::Str(d) => d.clone(),
        other => format!("{other:?}"),
    };
    match ds.vlen() {
        Some(v) => {
            if v.base.itemsize() != 1 || !v.elem_shape.is_empty() {
                return wrong(format!("variable-length sequences of {:?}", v.base.descr()));
            }
            if v.nul_terminated {
                return wrong(
                    "variable-length strings, which end at their first NUL (and so cut \
                     images)"
                        .into(),
                );
            }
        }
        None => {
            let bytes_like = descr.starts_with("|V") || descr == "|u1" || descr == "|i1";
            if !bytes_like || ds.sample_bytes() == 0 {
                return wrong(format!("{descr} rows of shape {:?}", &ds.shape()[1..]));
            }
        }
    }
    Ok(())
}

impl ImageIndex {
    /// Samples `rows` decoded whole at their own (upright) sizes: Python's `size=None`. The
    /// bytes are staged first (the sizes are in them), then decoded in parallel from memory,
    /// each straight into its place. With `skip`, an image that does not decode is replaced
    /// by the next sample that does (as in batches, at that sample's own size).
    pub fn read_sized(&self, rows: &Rows) -> Result<SizedBatch> {
        self.sized(rows, self.skip)
    }

    fn sized(&self, rows: &Rows, skip: bool) -> Result<SizedBatch> {
        let (bytes, ranges) = self.stage(rows)?;
        let spec = &*self.spec;
        let c = spec.mode.channels();
        let mut specs: Vec<Option<Arc<ImageSpec>>> = Vec::with_capacity(rows.len());
        let mut failed: HashMap<usize, String> = HashMap::new();
        for (k, r) in ranges.iter().enumerate() {
            let row = rows.as_slice()[k];
            match crate::codec::image::geometry::upright_size(
                &bytes[r.clone()],
                &spec.limits,
                spec.exif_transpose,
            ) {
                Ok(size) => specs.push(Some(Arc::new(ImageSpec {
                    size,
                    crop: Crop::Full,
                    ..spec.clone()
                }))),
                Err(e) if skip => {
                    failed.insert(k, e.to_string());
                    specs.push(None);
                }
                Err(e) => {
                    return Err(self.locate(
                        (0, row as u64),
                        Error::new(ErrorKind::Decode, "", e.to_string()),
                    ))
                }
            }
        }
        let mut offsets = vec![0u64];
        let mut total = 0u64;
        for s in &specs {
            total += s.as_ref().map_or(0, |s| s.sample_bytes() as u64);
            if total > MAX_SIZED_BYTES {
                return Err(Error::new(
                    ErrorKind::LimitExceeded,
                    self.location.clone(),
                    format!(
                        "a batch of {} images decodes to more than {MAX_SIZED_BYTES} bytes: \
                         read fewer at a time",
                        rows.len()
                    ),
                ));
            }
            offsets.push(total);
        }
        let mut storage = vec![0u64; (total as usize).div_ceil(8)];
        let log: SkipLog = Arc::default();
        let mut extents = Vec::with_capacity(rows.len());
        let mut tags = Vec::with_capacity(rows.len());
        for (k, s) in specs.iter().enumerate() {
            if let Some(s) = s {
                let row = rows.as_slice()[k];
                let step = self.step_as(s.clone(), row, rows.epoch(), skip.then_some(&log));
                extents.push(self.extent(
                    row,
                    step,
                    offsets[k] as usize,
                    Some(ranges[k].clone()),
                )?);
                tags.push(row);
            }
        }
        {
            // SAFETY: a u8 view of initialised u64s, `total` bytes of them.
            let out: &mut [u8] = unsafe {
                std::slice::from_raw_parts_mut(storage.as_mut_ptr().cast(), total as usize)
            };
            crate::batch::run_extents(
                &crate::batch::WithStaged::new(self.source_of(), &bytes),
                &extents,
                &mut [out],
                self.faults(),
                Work::new(extents.len(), total),
                self.threads,
                |k, e| self.locate((0, tags[k] as u64), e),
            )?;
        }
        let decode_failed = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
        for (row, why) in decode_failed {
            for (k, &r) in rows.as_slice().iter().enumerate() {
                if r as u64 == row {
                    failed.insert(k, why.clone());
                }
            }
        }
        let shape = |s: &ImageSpec| match spec.layout {
            Layout::Nhwc => [s.size.0 as usize, s.size.1 as usize, c],
            Layout::Nchw => [c, s.size.0 as usize, s.size.1 as usize],
        };
        let esize = spec.element.size() as u64;
        if failed.is_empty() {
            let shapes = specs.iter().flatten().map(|s| shape(s)).collect();
            return Ok(SizedBatch {
                storage,
                nbytes: total as usize,
                offsets: offsets.iter().map(|o| o / esize).collect(),
                shapes,
            });
        }
        // Some did not decode: each is replaced by the next sample that does, and the batch
        // is put together again.
        {
            let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            for (&k, why) in &failed {
                errors.insert(rows.as_slice()[k] as u64, why.clone());
            }
        }
        let mut parts: Vec<(Vec<u8>, [usize; 3])> = Vec::with_capacity(rows.len());
        // SAFETY: as above.
        let done: &[u8] =
            unsafe { std::slice::from_raw_parts(storage.as_ptr().cast(), total as usize) };
        for (k, s) in specs.iter().enumerate() {
            let row = rows.as_slice()[k];
            match (failed.get(&k), s) {
                (None, Some(s)) => parts.push((
                    done[offsets[k] as usize..offsets[k + 1] as usize].to_vec(),
                    shape(s),
                )),
                (why, _) => parts.push(self.replacement(
                    row,
                    rows.epoch(),
                    why.map_or("", String::as_str),
                )?),
            }
        }
        let total: usize = parts.iter().map(|p| p.0.len()).sum();
        let mut storage = vec![0u64; total.div_ceil(8)];
        // SAFETY: as above.
        let out: &mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(storage.as_mut_ptr().cast(), total) };
        let mut offsets = vec![0u64];
        let mut at = 0usize;
        for (p, _) in &parts {
            out[at..at + p.len()].copy_from_slice(p);
            at += p.len();
            offsets.push(at as u64 / esize);
        }
        Ok(SizedBatch {
            storage,
            nbytes: total,
            offsets,
            shapes: parts.into_iter().map(|p| p.1).collect(),
        })
    }

    /// The next sample after `row` (wrapping around) that decodes, at its own size, for a
    /// sample that did not (`why`).
    fn replacement(&self, row: usize, epoch: u64, why: &str) -> Result<(Vec<u8>, [usize; 3])> {
        self.stand_in(row, why, |other| {
            let rows = Rows::resolve(&[other as i64], self.len(), &self.location)?.in_epoch(epoch);
            match self.sized(&rows, false) {
                Ok(b) => Ok(Some((bytes_of(&b.storage, b.nbytes).to_vec(), b.shapes[0]))),
                Err(e) if e.kind() == ErrorKind::Decode => {
                    self.errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(other as u64, e.message().to_string());
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        })
    }

    /// The skip rule, written once: `attempt` is tried on each sample after `row` in index
    /// order (wrapping around) not yet known to be broken, until one decodes (`Some`); none
    /// does: a `DecodeError` for `row` (which failed with `why`).
    fn stand_in<T>(
        &self,
        row: usize,
        why: &str,
        mut attempt: impl FnMut(usize) -> Result<Option<T>>,
    ) -> Result<T> {
        let len = self.len();
        for step in 1..len {
            let other = (row + step) % len;
            let known_bad = self
                .errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&(other as u64));
            if known_bad {
                continue;
            }
            if let Some(done) = attempt(other)? {
                return Ok(done);
            }
        }
        Err(self.locate(
            (0, row as u64),
            Error::new(
                ErrorKind::Decode,
                "",
                format!("{why}; and no other image of the reader decodes to replace it"),
            ),
        ))
    }
}

fn bytes_of(storage: &[u64], nbytes: usize) -> &[u8] {
    // SAFETY: a u8 view of initialised u64s, at most all of them.
    unsafe { std::slice::from_raw_parts(storage.as_ptr().cast(), nbytes.min(storage.len() * 8)) }
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
        match self.bytes {
            ImageBytes::Zip { .. } => ZIP_FAULTS,
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
            plan.staged = Some(bytes.into());
            Some(ranges)
        } else {
            None
        };
        let log = self.skip.then(|| {
            let id = self.next_batch.fetch_add(1, Ordering::Relaxed);
            let log = SkipLog::default();
            self.logs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, log.clone());
            plan.deferred.push((0, (SKIP_TAG, id)));
            log
        });
        if let (ImageBytes::Zip { zip, members }, None) = (&self.bytes, &staged) {
            let picked: Vec<usize> = rows.as_slice().iter().map(|&r| members[r]).collect();
            zip.prelocate(&picked, 0);
        }
        for (k, &row) in rows.as_slice().iter().enumerate() {
            let step = self.step(row, rows.epoch(), log.as_ref());
            let range = staged.as_ref().map(|r| r[k].clone());
            let extent = self
                .extent(row, step, k * n, range)
                .map_err(|e| self.locate((0, row as u64), e))?;
            plan.push(extent, (0, row as u64));
        }
        Ok(())
    }

    /// `(0, sample)`: the archive and member, or the file.
    fn locate(&self, (_, row): Tag, error: Error) -> Error {
        match &self.bytes {
            ImageBytes::Zip { zip, members } => {
                error.at(zip.member_location(members[row as usize]))
            }
            ImageBytes::Files(_) => error.at(self.names[row as usize].clone()),
            #[cfg(feature = "hdf5")]
            ImageBytes::Hdf5 { .. } => error.at(format!("{} (sample {row})", self.location)),
        }
    }

    /// Replaces the images of the batch that did not decode: each by the next sample in
    /// index order that does.
    fn fill(&self, rows: &Rows, (kind, id): Tag, out: &mut [u8]) -> Result<()> {
        if kind != SKIP_TAG {
            return Err(Error::new(
                ErrorKind::Internal,
                "",
                "an unknown deferred fill",
            ));
        }
        let log = self
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .unwrap_or_default();
        let failed = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
        if failed.is_empty() {
            return Ok(());
        }
        let bad: HashMap<u64, String> = failed.into_iter().collect();
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(bad.iter().map(|(k, v)| (*k, v.clone())));
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
}
