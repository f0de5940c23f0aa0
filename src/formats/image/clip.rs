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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{ErrorLog, ImageBytes, ImageIndex};
use crate::batch::pool::Work;
use crate::batch::{After, ArraySpec, Dest, Extent, Index, Piece, Plan, Rows, Tag};
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
}

impl ClipSpec {
    /// Frames from a clip's first to its last, inclusive.
    pub fn span(&self) -> usize {
        match self.sampling {
            Sampling::Segments { .. } => self.len,
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

    /// The frames (positions in a video of `frames` frames) of clip `k` of that video, for
    /// sample `key` in `epoch` of a reader seeded `seed`.
    pub fn frames(&self, frames: usize, k: usize, seed: u64, epoch: u64, key: u64) -> Vec<usize> {
        let span = self.span();
        let last = frames.saturating_sub(1);
        // Its own stream: a clip's start is drawn apart from its crop.
        let mut draw = Draw::new(seed ^ 0x7C1B_5EED_0F5A_3A11, epoch, key);
        let starts = frames.saturating_sub(span) + 1;
        let start = match self.sampling {
            Sampling::Random => draw.upto((starts - 1).min(u32::MAX as usize) as u32) as usize,
            Sampling::Uniform { clips } => ((2 * k + 1) * starts) / (2 * clips),
            Sampling::Windows { stride } => k * stride,
            Sampling::Segments { random } => {
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
        };
        (0..self.len)
            .map(|t| (start + t * self.step).min(last))
            .collect()
    }
}

/// One video: its frames' rows in the frame index, its name and label.
#[derive(Debug, Clone)]
pub struct Video {
    /// Its name (the folder's path, or in an archive its folder's name).
    pub name: String,
    /// Its first frame's row in the frame index.
    pub first: usize,
    /// Its frames.
    pub frames: usize,
}

/// Clips of videos whose frames are encoded images, as samples of one array, `frames`.
pub struct ClipIndex {
    frames: Arc<ImageIndex>,
    videos: Vec<Video>,
    /// Samples before each video (`videos.len() + 1` entries).
    starts: Vec<usize>,
    clip: ClipSpec,
    spec: Arc<ImageSpec>,
    /// A clip's frames' size, where frames are read at their own size.
    fixed: Option<(u32, u32)>,
    seed: u64,
    skip: bool,
    arrays: [ArraySpec; 1],
    location: String,
    logs: Mutex<HashMap<u64, SkipLog>>,
    next_batch: AtomicU64,
    errors: ErrorLog,
}

impl ClipIndex {
    /// Clips of `videos`, whose frames are the samples of `frames` (decoded as its spec says;
    /// where that spec keeps images whole, every frame must be `frame_size`, `(height,
    /// width)`).
    pub fn new(
        frames: Arc<ImageIndex>,
        videos: Vec<Video>,
        clip: ClipSpec,
        frame_size: Option<(u32, u32)>,
        seed: u64,
        skip: bool,
    ) -> Result<ClipIndex> {
        let location = frames.location.clone();
        if clip.len == 0 || clip.step == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                location,
                "clip_len and frame_step must be at least 1",
            ));
        }
        let mut spec = frames.spec().clone();
        let fixed = match spec.crop {
            Crop::Full => {
                let (h, w) = frame_size.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Internal,
                        location.clone(),
                        "frames at their own size need the first frame's size",
                    )
                })?;
                spec.size = (h, w);
                Some((w, h))
            }
            _ => None,
        };
        let mut starts = Vec::with_capacity(videos.len() + 1);
        starts.push(0usize);
        for v in &videos {
            if v.first + v.frames > frames.len() {
                return Err(Error::new(
                    ErrorKind::Internal,
                    location,
                    format!("video {} past the frames", v.name),
                ));
            }
            let span = clip.span();
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
        let c = spec.mode.channels();
        let (h, w) = (spec.size.0 as usize, spec.size.1 as usize);
        let shape = match spec.layout {
            Layout::Nhwc => vec![clip.len, h, w, c],
            Layout::Nchw => vec![c, clip.len, h, w],
        };
        let descr = match spec.element {
            Element::U8 => "|u1",
            Element::F32 => "<f4",
            Element::F16 => "<f2",
        };
        let dtype = DType::from_descr(Literal::Str(descr.into()))
            .map_err(|e| Error::new(ErrorKind::Internal, "", format!("{e:?}")))?;
        Ok(ClipIndex {
            frames,
            videos,
            starts,
            clip,
            spec: Arc::new(spec),
            fixed,
            seed,
            skip,
            arrays: [ArraySpec::fixed("frames", dtype, shape)],
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

    /// Every sample found not to decode so far (with `skip`), with why.
    pub fn errors(&self) -> BTreeMap<u64, String> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The video of sample `row` and which of its clips it is.
    pub fn video_of(&self, row: usize) -> (usize, usize) {
        let v = self.starts.partition_point(|&s| s <= row) - 1;
        (v, row - self.starts[v])
    }

    /// The frame rows (in the frame index) sample `row` holds in `epoch`.
    pub fn frame_rows(&self, row: usize, epoch: u64) -> Vec<usize> {
        let (v, k) = self.video_of(row);
        let video = &self.videos[v];
        self.clip
            .frames(video.frames, k, self.seed, epoch, row as u64)
            .into_iter()
            .map(|f| video.first + f)
            .collect()
    }

    /// The frame names (files or members) sample `row` holds in `epoch`.
    pub fn frame_names(&self, row: usize, epoch: u64) -> Vec<String> {
        let names = self.frames.names();
        self.frame_rows(row, epoch)
            .into_iter()
            .map(|r| names[r].clone())
            .collect()
    }

    /// `(top, left, height, width, flipped)` of the crop every frame of sample `row` gets in
    /// `epoch`, in the frames' pixels.
    pub fn crop(&self, row: usize, epoch: u64) -> Result<(crate::codec::image::Region, bool)> {
        let first = self.frame_rows(row, epoch)[0];
        let data = self.frames.encoded(first)?;
        let mut draw = Draw::new(self.seed, epoch, row as u64);
        crate::codec::image::geometry::crop_of(&data, &self.spec, &mut draw).map_err(|e| {
            self.frames.locate(
                Tag::new(0, first as u64),
                Error::new(ErrorKind::Decode, "", e.to_string()),
            )
        })
    }

    /// The reads of sample `row`'s frames into output 0 from byte `base`, as `step` decodes
    /// them.
    fn clip_extents(
        &self,
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
            let mut extent = self
                .frames
                .extent(fr, Arc::clone(&step), base + t * frame, None)
                .map_err(|e| self.frames.locate(tag, e))?;
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
    fn decode_one(&self, row: usize, epoch: u64, out: &mut [u8]) -> Result<bool> {
        let log: SkipLog = Arc::default();
        let (extents, tags): (Vec<Extent>, Vec<Tag>) = self
            .clip_extents(row, epoch, 0, Some(&log))?
            .into_iter()
            .unzip();
        crate::batch::run_extents(
            self.frames.source_of(),
            &extents,
            &mut [out],
            self.faults(),
            Work::new(extents.len(), 0),
            None,
            |i, e| self.frames.locate(tags[i], e),
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
        self.frames.faults()
    }

    fn files(&self) -> &dyn Files {
        self.frames.source_of()
    }

    fn work(&self, rows: usize, _arrays: &[usize]) -> Work {
        let frames = rows.saturating_mul(self.clip.len);
        Work::new(frames, (frames as u64).saturating_mul(1 << 18))
    }

    fn threads(&self) -> Option<usize> {
        self.frames.threads
    }

    fn plan(&self, rows: &Rows, _arrays: &[usize], plan: &mut Plan) -> Result<()> {
        let n = self.arrays[0].sample_bytes();
        let log = self.skip.then(|| {
            let id = self.next_batch.fetch_add(1, Ordering::Relaxed);
            let log = SkipLog::default();
            self.logs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, log.clone());
            plan.after.push(After::Fill {
                out: 0,
                tag: Tag::new(0, id),
            });
            log
        });
        if let ImageBytes::Zip { zip, members } = &self.frames.bytes {
            let picked: Vec<usize> = rows
                .as_slice()
                .iter()
                .flat_map(|&r| self.frame_rows(r, rows.epoch()))
                .map(|fr| members[fr])
                .collect();
            zip.prelocate(&picked, 0);
        }
        for (k, &row) in rows.as_slice().iter().enumerate() {
            for (extent, tag) in self.clip_extents(row, rows.epoch(), k * n, log.as_ref())? {
                plan.push(extent, tag);
            }
        }
        Ok(())
    }

    /// The frame (`tag.at`, its row in the frame index): its file, or archive and member.
    fn locate(&self, tag: Tag, error: Error) -> Error {
        self.frames.locate(tag, error)
    }

    /// Replaces the clips of batch `tag.at` that did not decode: each by the next sample in
    /// index order that does.
    fn fill(&self, rows: &Rows, tag: Tag, out: &mut [u8]) -> Result<()> {
        let log = self
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&tag.at)
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
        let n = self.arrays[0].sample_bytes();
        let len = self.len();
        for (k, &row) in rows.as_slice().iter().enumerate() {
            let Some(why) = bad.get(&(row as u64)) else {
                continue;
            };
            let slot = &mut out[k * n..(k + 1) * n];
            let mut done = false;
            for step in 1..len {
                let other = (row + step) % len;
                let known_bad = self
                    .errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains_key(&(other as u64));
                if !known_bad && self.decode_one(other, rows.epoch(), slot)? {
                    done = true;
                    break;
                }
            }
            if !done {
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
