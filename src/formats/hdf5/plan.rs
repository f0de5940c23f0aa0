//! A batch's reads of HDF5 datasets: per dataset, contiguous rows, fill values, or the chunks
//! the tiling says the rows need (straight into the output, via the chunk cache, or scattered),
//! each chunk's filters undone in reverse order as its mask says.

use super::meta::{ChunkLoc, Layout};
use super::select::ReadPath;
use super::Hdf5File;
use crate::batch::tiling::{ChunkRead, Tiling};
use crate::batch::{After, Dest, Extent, Plan, Tag};
use crate::codec::{ChunkDecoder, Pipeline, Step};
use crate::error::Result;

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

/// The extent decoding one stored chunk (its filters undone as its mask says).
fn chunk_extent(loc: ChunkLoc, decoder: &ChunkDecoder, chunk_bytes: usize, slot: usize) -> Extent {
    Extent {
        file: 0,
        offset: loc.addr,
        stored_len: loc.size as usize,
        pipeline: decoder.pipeline(loc.mask),
        decoded_len: chunk_bytes,
        out: slot as u32,
        dest: Dest::At(0),
    }
}

/// Where the pieces put a chunk of `len` decoded bytes when they copy all of it, in order, to
/// one contiguous place: that place's start.
fn whole_run(pieces: &[crate::batch::Piece], len: usize) -> Option<usize> {
    let first = pieces.first()?;
    if first.src != 0 {
        return None;
    }
    let mut end = (first.src + first.len, first.dst + first.len);
    for p in &pieces[1..] {
        if (p.src, p.dst) != end {
            return None;
        }
        end = (p.src + p.len, p.dst + p.len);
    }
    (end.0 == len).then_some(first.dst)
}

/// Most bytes of whole rows one batch reads to cut frames from.
const MAX_STAGED_BYTES: u64 = 2 << 30;

/// How the frames of a dataset are numbered and read: a frame is a row (`per_row` 1), or one
/// of the `per_row` frames along the second axis of a row (frame `f` is `[f / per_row, f %
/// per_row]`).
#[derive(Debug, Clone)]
pub struct FrameView {
    /// Frames a row holds.
    pub per_row: usize,
    /// Bytes of one frame.
    pub frame_bytes: usize,
    /// The tiling of the frames as rows of one array (first two axes merged), and its chunks'
    /// frames, where the chunks allow it.
    merged: Option<(Tiling, usize)>,
}

impl Hdf5File {
    /// Plans the reads of dataset `w` for `rows` into output `slot`.
    pub(super) fn plan_dataset(
        &self,
        w: usize,
        slot: usize,
        rows: &[usize],
        plan: &mut Plan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        let sb = ds.sample_bytes;
        match &ds.path {
            ReadPath::Contiguous(_) | ReadPath::Fill => {
                self.plan_unchunked(w, slot, rows, sb, plan)
            }
            ReadPath::Chunked { decoder } => {
                let c0 = self.chunk_rows(w);
                self.plan_chunked(w, slot, rows, decoder, (&ds.tiling, c0, sb), plan)?
            }
            ReadPath::Library(_) | ReadPath::Unreadable(_) => unreachable!("planned elsewhere"),
        }
        Ok(())
    }

    /// Plans items `rows` of `bytes` each (samples, or frames) of contiguous or never-written
    /// dataset `w` into output `slot`, item `k` at `k * bytes`.
    fn plan_unchunked(&self, w: usize, slot: usize, rows: &[usize], bytes: usize, plan: &mut Plan) {
        let ds = &self.datasets[w];
        for (k, &i) in rows.iter().enumerate() {
            let (extent, at) = match &ds.path {
                ReadPath::Contiguous(addr) => {
                    let at = addr + (i * bytes) as u64;
                    let mut e = Extent::raw(0, at, bytes, Dest::At(k * bytes));
                    e.out = slot as u32;
                    (e, at)
                }
                _ => (
                    fill_extent(&ds.meta.fill, bytes, slot, Dest::At(k * bytes)),
                    0,
                ),
            };
            plan.push(extent, Tag::new(w as u32, at));
        }
    }

    fn chunk_rows(&self, w: usize) -> usize {
        match &self.datasets[w].meta.layout {
            Layout::Chunked { chunk, .. } => chunk[0],
            _ => 1,
        }
    }

    /// How frames of dataset `w` are read when each of its rows holds `per_row` frames along
    /// its second axis (`per_row` 1: a frame is a row). See [`FrameView`].
    pub(crate) fn frame_view(&self, w: usize, per_row: usize) -> Result<FrameView> {
        let ds = &self.datasets[w];
        let at = || format!("{}:{}", self.location, ds.name());
        if ds.meta.vlen.is_some() {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Unsupported,
                at(),
                "variable-length data cannot be read as frames",
            ));
        }
        if per_row <= 1 {
            return Ok(FrameView {
                per_row: 1,
                frame_bytes: ds.sample_bytes,
                merged: None,
            });
        }
        let shape = ds.shape();
        if shape.len() < 2 || shape[1] != per_row {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Internal,
                at(),
                format!("{per_row} frames a row of shape {shape:?}"),
            ));
        }
        let frame_bytes = ds.sample_bytes / per_row.max(1);
        // Rows of one chunk along the first axis whose second axis the chunks cut evenly:
        // frames are then the rows of an array of shape (N * T, ...) chunked (c1, ...), the
        // chunks numbered alike; else a frame's rows are read whole (staged).
        let merged = match (&ds.path, &ds.meta.layout) {
            (ReadPath::Chunked { .. }, Layout::Chunked { chunk, .. })
                if chunk[0] == 1 && per_row % chunk[1] == 0 =>
            {
                let mut flat = vec![shape[0] * per_row];
                flat.extend_from_slice(&shape[2..]);
                let tiling = Tiling::new(&flat, &chunk[1..], ds.dtype.itemsize()).map_err(|e| {
                    crate::error::Error::new(crate::error::ErrorKind::Hdf5, at(), e)
                })?;
                Some((tiling, chunk[1]))
            }
            _ => None,
        };
        Ok(FrameView {
            per_row,
            frame_bytes,
            merged,
        })
    }

    /// Plans frames `frames` of dataset `w` (as `view` numbers them) into output `slot`, frame
    /// `k` at `k * view.frame_bytes`: straight from the file where the layout allows, else
    /// from the rows read first (libhdf5's own reads included) and copied.
    pub(crate) fn plan_frames(
        &self,
        w: usize,
        slot: usize,
        frames: &[usize],
        view: &FrameView,
        plan: &mut Plan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        let fb = view.frame_bytes;
        match (&ds.path, view.per_row) {
            (ReadPath::Library(_) | ReadPath::Unreadable(_), _) => {}
            (_, 1) => return self.plan_dataset(w, slot, frames, plan),
            (ReadPath::Contiguous(_) | ReadPath::Fill, _) => {
                self.plan_unchunked(w, slot, frames, fb, plan);
                return Ok(());
            }
            (ReadPath::Chunked { decoder }, _) => {
                if let Some((tiling, c0)) = &view.merged {
                    return self.plan_chunked(w, slot, frames, decoder, (tiling, *c0, fb), plan);
                }
            }
        }
        self.stage_frames(w, slot, frames, view, plan)
    }

    /// Reads the rows holding `frames` whole (through the engine, or libhdf5 under its lock)
    /// and copies the frames out of them after the plan's reads.
    fn stage_frames(
        &self,
        w: usize,
        slot: usize,
        frames: &[usize],
        view: &FrameView,
        plan: &mut Plan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        if let ReadPath::Unreadable(why) = &ds.path {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Unsupported,
                format!("{}:{}", self.location, ds.name()),
                why.clone(),
            ));
        }
        let mut rows: Vec<usize> = frames.iter().map(|f| f / view.per_row).collect();
        rows.sort_unstable();
        rows.dedup();
        let total = rows.len() as u64 * ds.sample_bytes as u64;
        if total > MAX_STAGED_BYTES {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::LimitExceeded,
                format!("{}:{}", self.location, ds.name()),
                format!(
                    "a batch needs {total} bytes of whole rows read to cut its frames from, \
                     over {MAX_STAGED_BYTES}: read fewer clips at a time, or store one row a \
                     chunk"
                ),
            ));
        }
        let mut buf = vec![0u8; total as usize];
        let resolved = crate::batch::Rows::of(rows.clone(), 0);
        crate::batch::read_batch(self, &resolved, &[w], &mut [&mut buf])?;
        let fb = view.frame_bytes;
        let pieces = frames
            .iter()
            .enumerate()
            .map(|(k, &f)| {
                let r = rows.binary_search(&(f / view.per_row)).unwrap_or(0);
                crate::batch::Piece {
                    src: r * ds.sample_bytes + (f % view.per_row) * fb,
                    dst: k * fb,
                    len: fb,
                }
            })
            .collect();
        plan.after.push(After::Copy {
            out: slot,
            bytes: buf.into(),
            pieces,
        });
        Ok(())
    }

    fn plan_chunked(
        &self,
        w: usize,
        slot: usize,
        rows: &[usize],
        decoder: &ChunkDecoder,
        (tiling, c0, sb): (&Tiling, usize, usize),
        plan: &mut Plan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        let Layout::Chunked { chunks, .. } = &ds.meta.layout else {
            unreachable!("chunked read path on a chunked layout");
        };
        let exact = tiling.is_exact();
        for ChunkRead {
            linear,
            uses,
            pieces,
        } in tiling.reads(rows)
        {
            let key = (w as u32, linear);
            // The decoded bytes the batch needs from the chunk: its rows' runs end here.
            let need = pieces.iter().map(|p| p.src + p.len).max().unwrap_or(0);
            if let Some(bytes) = self.cache.get(key, need) {
                plan.after.push(After::Copy {
                    out: slot,
                    bytes,
                    pieces,
                });
                continue;
            }
            let loc = chunks.get(&linear).copied();
            let mut extent = match loc {
                None => fill_extent(&ds.meta.fill, ds.chunk_bytes, slot, Dest::At(0)),
                Some(loc) => chunk_extent(loc, decoder, ds.chunk_bytes, slot),
            };
            let addr = loc.map_or(0, |l| l.addr);
            if exact && uses.len() == 1 {
                extent.dest = Dest::At(uses[0].0 * sb);
                plan.push(extent, Tag::new(w as u32, addr));
                continue;
            }
            if let Some(at) = whole_run(&pieces, ds.chunk_bytes) {
                // The batch takes the whole chunk, in order, to one place (a clip's frames
                // of a chunk of frames): decoded straight there.
                extent.dest = Dest::At(at);
                plan.push(extent, Tag::new(w as u32, addr));
                continue;
            }
            // A chunk of several samples read in a random order (the cache mostly misses):
            // decode only up to the last row this batch needs, where the codec can stop.
            let mut len = ds.chunk_bytes;
            if loc.is_some() && need < len && self.cache.mostly_misses() {
                if let Some(prefix) = extent.pipeline.prefix(len, self.cache.was_checked(key)) {
                    extent.pipeline = prefix;
                    extent.decoded_len = need;
                    len = need;
                }
            }
            if c0 > 1 && loc.is_some() && self.cache.fits(len) {
                // Holds several samples: decode once, keep it for the next batch.
                plan.after.push(After::Keep {
                    extent: plan.extents.len(),
                    len,
                    out: slot,
                    pieces,
                    key: Tag::new(key.0, key.1),
                });
                extent.dest = Dest::At(0);
            } else {
                extent.dest = Dest::Scatter(pieces);
            }
            plan.push(extent, Tag::new(w as u32, addr));
        }
        Ok(())
    }
}
