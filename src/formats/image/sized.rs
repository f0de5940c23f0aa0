//! Images at their own sizes (Python's `size=None`): each sample decoded whole, upright, into
//! a ragged batch ([`RaggedBatch`]) whose shapes say each one's.

use std::collections::HashMap;
use std::sync::Arc;

use super::staged::staged_files;
use super::{ImageIndex, MAX_SIZED_BYTES};
use crate::batch::pool::Work;
use crate::batch::{Index, RaggedBatch, Rows, Tag};
use crate::codec::image::geometry::{Crop, ImageSpec, Layout};
use crate::codec::image::SkipLog;
use crate::error::{Error, ErrorKind, Result};

impl ImageIndex {
    /// Samples `rows` decoded whole at their own (upright) sizes: Python's `size=None`. The
    /// bytes are staged first (the sizes are in them), then decoded in parallel from memory,
    /// each straight into its place. With `skip`, an image that does not decode is replaced
    /// by the next sample that does (as in batches, at that sample's own size).
    pub fn read_sized(&self, rows: &Rows) -> Result<RaggedBatch> {
        self.sized(rows, self.skip)
    }

    fn sized(&self, rows: &Rows, skip: bool) -> Result<RaggedBatch> {
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
                        Tag::new(0, row as u64),
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
                &*staged_files(bytes),
                &extents,
                &mut [out],
                self.faults(),
                Work::new(extents.len(), total),
                self.threads,
                |k, e| self.locate(Tag::new(0, tags[k] as u64), e),
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
            let shapes = specs.iter().flatten().map(|s| shape(s).to_vec()).collect();
            return Ok(RaggedBatch {
                storage,
                nbytes: total as usize,
                offsets: offsets.iter().map(|o| o / esize).collect(),
                elem_bytes: esize as usize,
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
        Ok(RaggedBatch {
            storage,
            nbytes: total,
            offsets,
            elem_bytes: esize as usize,
            shapes: parts.into_iter().map(|p| p.1.to_vec()).collect(),
        })
    }

    /// The next sample after `row` (wrapping around) that decodes, at its own size, for a
    /// sample that did not (`why`).
    fn replacement(&self, row: usize, epoch: u64, why: &str) -> Result<(Vec<u8>, [usize; 3])> {
        self.stand_in(row, why, |other| {
            let rows = Rows::resolve(&[other as i64], self.len(), &self.location)?.in_epoch(epoch);
            match self.sized(&rows, false) {
                Ok(b) => Ok(Some((b.bytes().to_vec(), shape3(&b.shapes[0])))),
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
    pub(super) fn stand_in<T>(
        &self,
        row: usize,
        why: &str,
        attempt: impl FnMut(usize) -> Result<Option<T>>,
    ) -> Result<T> {
        super::next_good(self.len(), row, &self.errors, attempt)?.ok_or_else(|| {
            self.locate(
                Tag::new(0, row as u64),
                Error::new(
                    ErrorKind::Decode,
                    "",
                    format!("{why}; and no other image of the reader decodes to replace it"),
                ),
            )
        })
    }
}

fn shape3(s: &[usize]) -> [usize; 3] {
    [
        s.first().copied().unwrap_or(0),
        s.get(1).copied().unwrap_or(0),
        s.get(2).copied().unwrap_or(0),
    ]
}
