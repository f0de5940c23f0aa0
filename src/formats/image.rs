//! Encoded images as samples ([`ImageIndex`]): members of a ZIP archive or files of a folder
//! tree, each one JPEG, PNG or WebP decoded into one fixed-shape sample of the batch
//! ([`ImageSpec`]). The bytes are planned like any other format's (a ZIP member's inflate and
//! CRC-32 steps, then [`Step::Image`]); decoding, cropping, resizing and normalising run on
//! the pool, each straight into the sample's place in the output.
//!
//! With `skip` (Python's `on_error="skip"`), an image that does not decode leaves its slot to
//! be filled after the batch ran: by the next sample in index order (wrapping around) that
//! decodes, with that sample's own crop. Every sample found broken is kept in
//! [`ImageIndex::errors`].

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::batch::pool::Work;
use crate::batch::source::{FileStamp, PathSet, SharedFile, Source};
use crate::batch::{ArraySpec, Dest, Extent, Index, Plan, Rows, Tag};
use crate::codec::image::geometry::{Element, ImageSpec, Layout};
use crate::codec::image::{ImageStep, SkipLog};
use crate::codec::{Faults, Pipeline, Step};
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::formats::zip::{Payload, ZipIndex, ZIP_FAULTS};

/// Where the encoded images are.
pub enum ImageBytes {
    /// Members of one archive: sample `k` is member `members[k]`.
    Zip {
        /// The archive.
        zip: Arc<ZipIndex<SharedFile>>,
        /// Member positions, in sample order.
        members: Vec<usize>,
    },
    /// Files, one image each.
    Files(PathSet),
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
    errors: Mutex<BTreeMap<u64, String>>,
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
                let n = set.paths().len();
                let loc = match set.paths().first() {
                    Some(p) if n > 1 => format!("{} (and {} more files)", p.display(), n - 1),
                    Some(p) => p.display().to_string(),
                    None => "<no files>".to_string(),
                };
                (loc, n)
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
            errors: Mutex::default(),
        })
    }

    /// Image files from `paths`, each checked to be a regular file now (its size and identity
    /// kept: a file changed later is an error, not garbage).
    pub fn files(paths: Vec<PathBuf>) -> Result<ImageBytes> {
        let stamps = paths
            .iter()
            .map(|p| {
                let f = crate::batch::source::open_regular(p)?;
                let meta = f
                    .metadata()
                    .map_err(|e| Error::io(p.display().to_string(), e))?;
                Ok(FileStamp::of(&meta))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ImageBytes::Files(PathSet::new(paths, stamps)))
    }

    /// The samples' names (member names, or file paths).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// What each sample becomes.
    pub fn spec(&self) -> &ImageSpec {
        &self.spec
    }

    /// Every sample found not to decode so far (with `skip`), with why.
    pub fn errors(&self) -> BTreeMap<u64, String> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn step(&self, row: usize, epoch: u64, log: Option<&SkipLog>) -> Arc<ImageStep> {
        Arc::new(ImageStep {
            spec: self.spec.clone(),
            seed: self.seed,
            epoch,
            index: row as u64,
            skipped: log.cloned(),
        })
    }

    /// The size of image file `row`, refused over [`DEFAULT_MAX_FILE_BYTES`] (a file is read
    /// whole).
    fn file_len(&self, set: &PathSet, row: usize) -> Result<u64> {
        let len = set.stamp(row).len;
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

    /// The read of sample `row` into output 0 at byte `dst`.
    fn extent(&self, row: usize, step: Arc<ImageStep>, dst: usize) -> Result<Extent> {
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
                    decoded_len: self.spec.sample_bytes(),
                    out: 0,
                    dest: Dest::At(dst),
                })
            }
        }
    }

    fn source_of(&self) -> &dyn Source {
        match &self.bytes {
            ImageBytes::Zip { zip, .. } => zip.source(),
            ImageBytes::Files(set) => set,
        }
    }

    /// The encoded bytes of sample `row`, whole.
    pub fn encoded(&self, row: usize) -> Result<Vec<u8>> {
        match &self.bytes {
            ImageBytes::Zip { zip, members } => zip.read(members[row]),
            ImageBytes::Files(set) => {
                let len = self.file_len(set, row)?;
                let mut buf = vec![0u8; len as usize];
                set.read_at(row as u32, 0, &mut buf)?;
                Ok(buf)
            }
        }
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
        let extent = self.extent(row, self.step(row, epoch, Some(&log)), 0)?;
        crate::batch::run_extents(
            self.source_of(),
            std::slice::from_ref(&extent),
            &mut [out],
            self.faults(),
            Work { units: 1, bytes: 0 },
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
            ImageBytes::Files(_) => Faults::both(ErrorKind::Decode),
        }
    }

    fn source(&self) -> &dyn Source {
        self.source_of()
    }

    /// Decoding dominates: a few milliseconds an image, so every batch but one image is
    /// worth the pool.
    fn work(&self, rows: usize, _arrays: &[usize]) -> Work {
        Work {
            units: rows,
            bytes: (rows as u64).saturating_mul(1 << 20),
        }
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    fn plan(&self, rows: &Rows, _arrays: &[usize], plan: &mut Plan) -> Result<()> {
        let n = self.spec.sample_bytes();
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
        for (k, &row) in rows.as_slice().iter().enumerate() {
            let step = self.step(row, rows.epoch(), log.as_ref());
            let extent = self
                .extent(row, step, k * n)
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
        let len = self.len();
        for (k, &row) in rows.as_slice().iter().enumerate() {
            if !bad.contains_key(&(row as u64)) {
                continue;
            }
            let slot = &mut out[k * n..(k + 1) * n];
            let mut found = false;
            for step in 1..len {
                let other = (row + step) % len;
                if self
                    .errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains_key(&(other as u64))
                {
                    continue;
                }
                if self.decode_one(other, rows.epoch(), slot)? {
                    found = true;
                    break;
                }
            }
            if !found {
                let why = bad.get(&(row as u64)).cloned().unwrap_or_default();
                return Err(self.locate(
                    (0, row as u64),
                    Error::new(
                        ErrorKind::Decode,
                        "",
                        format!("{why}; and no other image of the reader decodes to replace it"),
                    ),
                ));
            }
        }
        Ok(())
    }
}
