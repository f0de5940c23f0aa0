//! Clips ([`ClipIndex`]): a sample is `clip_len` frames of one video, each frame an encoded
//! image (a file of a frame folder, or a member of a ZIP holding such folders), decoded on the
//! pool straight into its place in one `(B, T, H, W, C)` (or `(B, C, T, H, W)`) batch.
//!
//! Which frames a sample holds is drawn here from `(seed, epoch, sample)` ([`Sampling`]), so a
//! resumed epoch repeats its clips. Every frame of a clip is decoded with one [`ImageStep`]:
//! the same crop box and the same flip, drawn from the clip's key, and one [`FrameSize`] that
//! every frame must match (frames of different sizes would crop differently). A video shorter
//! than a clip follows [`Short`].
//!
//! With `skip` (Python's `on_error="skip"`), a clip whose frame does not decode is replaced in
//! its slot by the next clip (in index order, wrapping around) that decodes.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::{ErrorLog, ImageBytes, ImageIndex};
use crate::batch::pool::Work;
use crate::batch::{ArraySpec, Dest, Extent, Index, Piece, Plan, Rows, Tag};
use crate::codec::image::geometry::{Crop, Draw, Element, ImageSpec, Layout};
use crate::codec::image::{FrameSize, ImageStep, SkipLog};
use crate::codec::Faults;
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::source::Files;

/// Which frames of a video a sample holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// One clip per video, its start drawn anew each epoch (training).
    Random,
    /// `clips` evenly spaced clips per video, each a sample (evaluation).
    Uniform {
        /// Clips per video.
        clips: usize,
    },
    /// TSN: the video cut into `clip_len` equal segments, one frame of each: at a random
    /// offset (training), or at each segment's centre.
    Segments {
        /// A random offset in each segment, drawn anew each epoch.
        random: bool,
    },
    /// Every window of the video at this stride, each a sample.
    Windows {
        /// Frames between the starts of consecutive windows.
        stride: usize,
    },
}

/// What a video shorter than a clip gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Short {
    /// Frames past the end repeat the last frame (torchcodec's samplers' default).
    #[default]
    RepeatLast,
    /// The reader refuses to open, naming the video.
    Error,
    /// The video gives no samples.
    Skip,
}

/// How clips are cut from videos.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClipSpec {
    /// Frames a clip holds.
    pub len: usize,
    /// Distance between consecutive frames of a clip (1: every frame).
    pub step: usize,
    /// Which clips.
    pub sampling: Sampling,
    /// Videos shorter than a clip.
    pub short: Short,
    /// Frames from a clip's first to its last where per-array offsets say (else `len` frames
    /// `step` apart).
    pub reach: Option<usize>,
}

impl ClipSpec {
    /// Frames from a clip's first to its last, inclusive.
    pub fn span(&self) -> usize {
        match (self.sampling, self.reach) {
            (Sampling::Segments { .. }, _) => self.len,
            (_, Some(reach)) => reach,
            _ => (self.len - 1) * self.step + 1,
        }
    }

    /// Samples a video of `frames` frames gives (before [`Short`] is applied to one too short:
    /// then 1, the clip repeating its last frame).
    fn samples_of(&self, frames: usize) -> usize {
        let span = self.span();
        if frames == 0 || frames < span {
            return match self.short {
                Short::Skip => 0,
                _ => self.per_video(span),
            };
        }
        self.per_video(frames)
    }

    fn per_video(&self, frames: usize) -> usize {
        match self.sampling {
            Sampling::Random | Sampling::Segments { .. } => 1,
            Sampling::Uniform { clips } => clips,
            Sampling::Windows { stride } => (frames - self.span()) / stride + 1,
        }
    }

    /// Its own stream: a clip's start is drawn apart from its crop.
    fn draw(seed: u64, epoch: u64, key: u64) -> Draw {
        Draw::new(seed ^ 0x7C1B_5EED_0F5A_3A11, epoch, key)
    }

    /// The first frame of clip `k` of a video of `frames` frames, for sample `key` in `epoch`
    /// of a reader seeded `seed` (not for segments).
    pub fn start(&self, frames: usize, k: usize, seed: u64, epoch: u64, key: u64) -> usize {
        let starts = frames.saturating_sub(self.span()) + 1;
        match self.sampling {
            Sampling::Random => Self::draw(seed, epoch, key)
                .upto((starts - 1).min(u32::MAX as usize) as u32)
                as usize,
            Sampling::Uniform { clips } => ((2 * k + 1) * starts) / (2 * clips),
            Sampling::Windows { stride } => k * stride,
            Sampling::Segments { .. } => 0,
        }
    }

    /// The frames (positions in a video of `frames` frames) of clip `k` of that video, for
    /// sample `key` in `epoch` of a reader seeded `seed`: `offsets` from its start (default:
    /// `len` frames `step` apart), or for segments one frame of each; past the video's end,
    /// its last frame.
    pub fn frames(
        &self,
        frames: usize,
        k: usize,
        (seed, epoch, key): (u64, u64, u64),
        offsets: Option<&[usize]>,
    ) -> Vec<usize> {
        let last = frames.saturating_sub(1);
        let start = match self.sampling {
            Sampling::Segments { random } => {
                let mut draw = Self::draw(seed, epoch, key);
                return (0..self.len)
                    .map(|i| {
                        let a = i * frames / self.len;
                        let b = (i + 1) * frames / self.len;
                        let offset = match (b - a, random) {
                            (0, _) => 0,
                            (n, true) => draw.upto((n - 1).min(u32::MAX as usize) as u32) as usize,
                            (n, false) => n / 2,
                        };
                        (a + offset).min(last)
                    })
                    .collect();
            }
            _ => self.start(frames, k, seed, epoch, key),
        };
        match offsets {
            Some(o) => o.iter().map(|&d| (start + d).min(last)).collect(),
            None => (0..self.len)
                .map(|t| (start + t * self.step).min(last))
                .collect(),
        }
    }
}

/// One video: its frames' place among the frames of the source, its name.
#[derive(Debug, Clone)]
pub struct Video {
    /// Its name (the folder's path, in an archive its folder's name, an HDF5 row or episode).
    pub name: String,
    /// Its first frame's number among the frames of the source.
    pub first: usize,
    /// Its frames.
    pub frames: usize,
}

/// One array of HDF5 clips: a dataset, its frames (rows, or along the second axis of each
/// row), and which frames of a clip it holds.
#[cfg(feature = "hdf5")]
#[derive(Debug, Clone)]
pub struct FrameKey {
    /// The dataset's position in the file.
    pub w: usize,
    /// The array's name.
    pub name: String,
    /// Frames from the clip's start, where they are not the clip's own `len` frames `step`
    /// apart.
    pub offsets: Option<Vec<usize>>,
    /// How its frames are numbered and read.
    pub view: crate::formats::hdf5::FrameView,
}

/// Where the frames are.
pub enum Frames {
    /// Encoded images, one a frame: a clip's frames share one crop and flip.
    Images(Arc<ImageIndex>),
    /// Frames of HDF5 datasets read as stored: one array per dataset.
    #[cfg(feature = "hdf5")]
    Hdf5 {
        /// The file.
        file: Arc<crate::formats::hdf5::Hdf5File>,
        /// The arrays a clip holds.
        keys: Vec<FrameKey>,
    },
}

/// Clips of videos as samples: of encoded frames one array, `frames`; of HDF5 datasets one
/// array per dataset.
pub struct ClipIndex {
    frames: Frames,
    videos: Vec<Video>,
    /// Samples before each video (`videos.len() + 1` entries).
    starts: Vec<usize>,
    clip: ClipSpec,
    /// How encoded frames are decoded (images only).
    spec: Arc<ImageSpec>,
    /// A clip's frames' size, where encoded frames are read at their own size.
    fixed: Option<(u32, u32)>,
    seed: u64,
    skip: bool,
    arrays: Vec<ArraySpec>,
    location: String,
    logs: Mutex<HashMap<u64, SkipLog>>,
    next_batch: AtomicU64,
    errors: ErrorLog,
}

fn element_dtype(element: Element) -> Result<DType> {
    let descr = match element {
        Element::U8 => "|u1",
        Element::F32 => "<f4",
        Element::F16 => "<f2",
    };
    DType::from_descr(Literal::Str(descr.into()))
        .map_err(|e| Error::new(ErrorKind::Internal, "", format!("{e:?}")))
}

impl ClipIndex {
    /// Clips of `videos`, cut as `clip` says, of `frames` (encoded frames kept whole must all
    /// be `frame_size`, `(height, width)`). Crops and clip starts are drawn from `seed`;
    /// `skip`: a clip whose frame does not decode is replaced (see the module).
    pub fn new(
        frames: Frames,
        videos: Vec<Video>,
        clip: ClipSpec,
        frame_size: Option<(u32, u32)>,
        seed: u64,
        skip: bool,
    ) -> Result<ClipIndex> {
        let (location, total) = match &frames {
            Frames::Images(index) => (index.location.clone(), index.len()),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, keys } => {
                let total = keys
                    .first()
                    .map_or(0, |k| file.datasets()[k.w].shape()[0] * k.view.per_row);
                (file.location(), total)
            }
        };
        if clip.len == 0 || clip.step == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                location,
                "clip_len and frame_step must be at least 1",
            ));
        }
        let mut spec = match &frames {
            Frames::Images(index) => index.spec().clone(),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { .. } => ImageSpec {
                size: (1, 1),
                crop: Crop::Full,
                flip: false,
                layout: Layout::Nhwc,
                mode: crate::codec::image::Mode::L,
                element: Element::U8,
                mean: Vec::new(),
                std: Vec::new(),
                exif_transpose: false,
                draft: false,
                limits: crate::codec::image::Limits::default(),
            },
        };
        let mut fixed = None;
        if let (Frames::Images(_), Crop::Full) = (&frames, spec.crop) {
            let (h, w) = frame_size.ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    location.clone(),
                    "frames at their own size need the first frame's size",
                )
            })?;
            spec.size = (h, w);
            fixed = Some((w, h));
        }
        let mut starts = Vec::with_capacity(videos.len() + 1);
        starts.push(0usize);
        let span = clip.span();
        for v in &videos {
            if v.first + v.frames > total {
                return Err(Error::new(
                    ErrorKind::Internal,
                    location,
                    format!("video {} past the frames", v.name),
                ));
            }
            let refused = match clip.short {
                Short::Skip => false,
                Short::RepeatLast => v.frames == 0,
                Short::Error => v.frames < span,
            };
            if refused {
                let why = if v.frames == 0 {
                    "a video without frames; short='skip' leaves such videos out".to_string()
                } else {
                    format!(
                        "a video of {} frames, fewer than a clip spans ({span}); \
                         short='repeat_last' repeats its last frame, short='skip' leaves it out",
                        v.frames
                    )
                };
                return Err(Error::new(ErrorKind::InvalidArgument, v.name.clone(), why));
            }
            let total = starts[starts.len() - 1] + clip.samples_of(v.frames);
            starts.push(total);
        }
        let arrays = match &frames {
            Frames::Images(_) => {
                let c = spec.mode.channels();
                let (h, w) = (spec.size.0 as usize, spec.size.1 as usize);
                let shape = match spec.layout {
                    Layout::Nhwc => vec![clip.len, h, w, c],
                    Layout::Nchw => vec![c, clip.len, h, w],
                };
                vec![ArraySpec::fixed(
                    "frames",
                    element_dtype(spec.element)?,
                    shape,
                )]
            }
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, keys } => keys
                .iter()
                .map(|k| {
                    let ds = &file.datasets()[k.w];
                    let skip = if k.view.per_row > 1 { 2 } else { 1 };
                    let t = k.offsets.as_ref().map_or(clip.len, Vec::len);
                    let mut shape = vec![t];
                    shape.extend_from_slice(&ds.shape()[skip..]);
                    ArraySpec::fixed(k.name.clone(), ds.dtype().clone(), shape)
                })
                .collect(),
        };
        Ok(ClipIndex {
            frames,
            videos,
            starts,
            clip,
            spec: Arc::new(spec),
            fixed,
            seed,
            skip,
            arrays,
            location,
            logs: Mutex::default(),
            next_batch: AtomicU64::new(0),
            errors: ErrorLog::default(),
        })
    }

    /// Samples video `v` gives.
    pub fn samples_in(&self, v: usize) -> usize {
        self.starts[v + 1] - self.starts[v]
    }

    /// The videos, in order.
    pub fn videos(&self) -> &[Video] {
        &self.videos
    }

    /// The clip rule.
    pub fn clip(&self) -> &ClipSpec {
        &self.clip
    }

    /// The log [`errors`](ClipIndex::errors) reads, to keep beyond this index.
    pub fn error_log(&self) -> ErrorLog {
        Arc::clone(&self.errors)
    }

    /// The video of sample `row` and which of its clips it is.
    pub fn video_of(&self, row: usize) -> (usize, usize) {
        let v = self.starts.partition_point(|&s| s <= row) - 1;
        (v, row - self.starts[v])
    }

    /// The offsets of array `a` from a clip's start (`None`: the clip's own frames).
    fn offsets(&self, a: usize) -> Option<&[usize]> {
        match &self.frames {
            Frames::Images(_) => {
                let _ = a;
                None
            }
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { keys, .. } => keys[a].offsets.as_deref(),
        }
    }

    /// The frames (numbered among the source's frames) array `a` of sample `row` holds in
    /// `epoch`.
    pub fn frame_rows_of(&self, row: usize, epoch: u64, a: usize) -> Vec<usize> {
        let (v, k) = self.video_of(row);
        let video = &self.videos[v];
        self.clip
            .frames(
                video.frames,
                k,
                (self.seed, epoch, row as u64),
                self.offsets(a),
            )
            .into_iter()
            .map(|f| video.first + f)
            .collect()
    }

    /// The frames (numbered among the source's frames) sample `row` holds in `epoch` (its
    /// first array's).
    pub fn frame_rows(&self, row: usize, epoch: u64) -> Vec<usize> {
        self.frame_rows_of(row, epoch, 0)
    }

    /// The frame names (files or members) sample `row` holds in `epoch`; of HDF5 frames, the
    /// dataset and position.
    pub fn frame_names(&self, row: usize, epoch: u64) -> Vec<String> {
        let rows = self.frame_rows(row, epoch);
        match &self.frames {
            Frames::Images(index) => rows.into_iter().map(|r| index.names()[r].clone()).collect(),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { keys, .. } => {
                let k = &keys[0];
                let per = k.view.per_row;
                rows.into_iter()
                    .map(|f| {
                        if per > 1 {
                            format!("{}[{}, {}]", k.name, f / per, f % per)
                        } else {
                            format!("{}[{f}]", k.name)
                        }
                    })
                    .collect()
            }
        }
    }

    /// The names of every frame of video `v`, in order (files or members; of HDF5 frames,
    /// the dataset and position).
    pub fn video_frame_names(&self, v: usize) -> Vec<String> {
        let video = &self.videos[v];
        let rows = video.first..video.first + video.frames;
        match &self.frames {
            Frames::Images(index) => rows.map(|r| index.names()[r].clone()).collect(),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { keys, .. } => {
                let (k, per) = (&keys[0], keys[0].view.per_row);
                rows.map(|f| {
                    if per > 1 {
                        format!("{}[{}, {}]", k.name, f / per, f % per)
                    } else {
                        format!("{}[{f}]", k.name)
                    }
                })
                .collect()
            }
        }
    }

    fn images(&self) -> Result<&Arc<ImageIndex>> {
        match &self.frames {
            Frames::Images(index) => Ok(index),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { .. } => Err(Error::new(
                ErrorKind::Unsupported,
                self.location.clone(),
                "frames of HDF5 datasets are not cropped",
            )),
        }
    }

    /// `(top, left, height, width, flipped)` of the crop every frame of sample `row` gets in
    /// `epoch`, in the frames' pixels.
    pub fn crop(&self, row: usize, epoch: u64) -> Result<(crate::codec::image::Region, bool)> {
        let index = self.images()?;
        let first = self.frame_rows(row, epoch)[0];
        let data = index.encoded(first)?;
        let mut draw = Draw::new(self.seed, epoch, row as u64);
        crate::codec::image::geometry::crop_of(&data, &self.spec, &mut draw).map_err(|e| {
            index.locate(
                Tag::new(0, first as u64),
                Error::new(ErrorKind::Decode, "", e.to_string()),
            )
        })
    }

    /// The reads of sample `row`'s encoded frames into output 0 from byte `base`.
    fn clip_extents(
        &self,
        index: &ImageIndex,
        row: usize,
        epoch: u64,
        base: usize,
        log: Option<&SkipLog>,
    ) -> Result<Vec<(Extent, Tag)>> {
        let step = Arc::new(ImageStep {
            spec: Arc::clone(&self.spec),
            seed: self.seed,
            epoch,
            index: row as u64,
            skipped: log.cloned(),
            frames: Some(Arc::new(FrameSize::new(self.fixed))),
        });
        let frame = self.spec.sample_bytes();
        let plane = frame / self.spec.mode.channels();
        let t_len = self.clip.len;
        let rows = self.frame_rows(row, epoch);
        let mut out = Vec::with_capacity(rows.len());
        for (t, &fr) in rows.iter().enumerate() {
            let tag = Tag::new(0, fr as u64);
            let mut extent = index
                .extent(fr, Arc::clone(&step), base + t * frame, None)
                .map_err(|e| index.locate(tag, e))?;
            if self.spec.layout == Layout::Nchw {
                // Each channel plane of the frame to its place in (C, T, H, W).
                let pieces = (0..self.spec.mode.channels())
                    .map(|c| Piece {
                        src: c * plane,
                        dst: base + (c * t_len + t) * plane,
                        len: plane,
                    })
                    .collect();
                extent.dest = Dest::Scatter(pieces);
            }
            out.push((extent, tag));
        }
        Ok(out)
    }

    /// Decodes sample `row` alone into `out` (one clip's bytes): `Ok(false)` if a frame of it
    /// does not decode.
    fn decode_one(
        &self,
        index: &ImageIndex,
        row: usize,
        epoch: u64,
        out: &mut [u8],
    ) -> Result<bool> {
        let log: SkipLog = Arc::default();
        let (extents, tags): (Vec<Extent>, Vec<Tag>) = self
            .clip_extents(index, row, epoch, 0, Some(&log))?
            .into_iter()
            .unzip();
        super::decode_logged(
            index.source_of(),
            &extents,
            out,
            index.faults(),
            |i, e| index.locate(tags[i], e),
            &log,
            &self.errors,
            row,
        )
    }

    fn plan_images(&self, index: &ImageIndex, rows: &Rows, plan: &mut Plan) -> Result<()> {
        let n = self.arrays[0].sample_bytes();
        let log = self
            .skip
            .then(|| super::open_log(&self.next_batch, &self.logs, plan));
        if let ImageBytes::Zip { zip, members } = &index.bytes {
            let picked: Vec<usize> = rows
                .as_slice()
                .iter()
                .flat_map(|&r| self.frame_rows(r, rows.epoch()))
                .map(|fr| members[fr])
                .collect();
            zip.prelocate(&picked, 0);
        }
        for (k, &row) in rows.as_slice().iter().enumerate() {
            for (extent, tag) in self.clip_extents(index, row, rows.epoch(), k * n, log.as_ref())? {
                plan.push(extent, tag);
            }
        }
        Ok(())
    }
}

impl Index for ClipIndex {
    fn len(&self) -> usize {
        self.starts[self.starts.len() - 1]
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn faults(&self) -> Faults {
        match &self.frames {
            Frames::Images(index) => index.faults(),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, .. } => file.faults(),
        }
    }

    fn files(&self) -> &dyn Files {
        match &self.frames {
            Frames::Images(index) => index.source_of(),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, .. } => file.files(),
        }
    }

    fn work(&self, rows: usize, arrays: &[usize]) -> Work {
        match &self.frames {
            Frames::Images(_) => {
                let _ = arrays;
                let frames = rows.saturating_mul(self.clip.len);
                Work::new(frames, (frames as u64).saturating_mul(1 << 18))
            }
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, keys } => {
                let per_clip: u64 = arrays
                    .iter()
                    .map(|&a| self.arrays[a].sample_bytes() as u64)
                    .sum();
                let which: Vec<usize> = arrays.iter().map(|&a| keys[a].w).collect();
                let theirs = file.work(rows, &which);
                Work::new(
                    rows.saturating_mul(self.clip.len).max(theirs.units),
                    (rows as u64).saturating_mul(per_clip).max(theirs.bytes),
                )
            }
        }
    }

    fn threads(&self) -> Option<usize> {
        match &self.frames {
            Frames::Images(index) => index.threads,
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, .. } => file.threads(),
        }
    }

    fn plan(&self, rows: &Rows, arrays: &[usize], plan: &mut Plan) -> Result<()> {
        match &self.frames {
            Frames::Images(index) => {
                let _ = arrays;
                self.plan_images(index, rows, plan)
            }
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, keys } => {
                for (slot, &a) in arrays.iter().enumerate() {
                    let key = &keys[a];
                    let frames: Vec<usize> = rows
                        .as_slice()
                        .iter()
                        .flat_map(|&r| self.frame_rows_of(r, rows.epoch(), a))
                        .collect();
                    file.plan_frames(key.w, slot, &frames, &key.view, plan)?;
                }
                Ok(())
            }
        }
    }

    /// The frame (`tag.at`, its number among the frames): its file, or archive and member;
    /// of HDF5 frames, the dataset and chunk.
    fn locate(&self, tag: Tag, error: Error) -> Error {
        match &self.frames {
            Frames::Images(index) => index.locate(tag, error),
            #[cfg(feature = "hdf5")]
            Frames::Hdf5 { file, .. } => file.locate(tag, error),
        }
    }

    /// HDF5 chunks of several frames are kept as the file keeps them.
    fn keep(&self, key: Tag, bytes: Arc<[u8]>) {
        #[cfg(feature = "hdf5")]
        if let Frames::Hdf5 { file, .. } = &self.frames {
            file.keep(key, bytes);
        }
        #[cfg(not(feature = "hdf5"))]
        let _ = (key, bytes);
    }

    /// Replaces the clips of batch `tag.at` that did not decode: each by the next sample in
    /// index order that does.
    fn fill(&self, rows: &Rows, tag: Tag, out: &mut [u8]) -> Result<()> {
        let index = self.images()?;
        let bad = super::take_failed(&self.logs, tag.at, &self.errors);
        let n = self.arrays[0].sample_bytes();
        for (k, &row) in rows.as_slice().iter().enumerate() {
            let Some(why) = bad.get(&(row as u64)) else {
                continue;
            };
            let slot = &mut out[k * n..(k + 1) * n];
            let found = super::next_good(self.len(), row, &self.errors, |other| {
                Ok(self
                    .decode_one(index, other, rows.epoch(), slot)?
                    .then_some(()))
            })?;
            if found.is_none() {
                let name = &self.videos[self.video_of(row).0].name;
                return Err(Error::new(
                    ErrorKind::Decode,
                    name.clone(),
                    format!("{why}; and no other clip of the reader decodes to replace it"),
                ));
            }
        }
        Ok(())
    }
}
