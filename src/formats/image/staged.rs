//! Encoded bytes read before decoding: a batch's images in HDF5 rows (found only by reading
//! those rows), one image read whole ([`ImageIndex::encoded`]), one sample decoded alone to
//! replace one that did not. The bytes are then the plan's own source, in memory.

use std::ops::Range;
use std::sync::Arc;

use super::{ImageBytes, ImageIndex, MAX_STAGED_BYTES};
use crate::batch::pool::Work;
use crate::batch::{Dest, Extent, Index, Rows, Tag};
use crate::codec::image::SkipLog;
#[cfg(feature = "hdf5")]
use crate::dtype::literal::Literal;
use crate::error::{Error, ErrorKind, Result};
use crate::formats::zip::Payload;
use crate::source::{self, Files, SingleFile};

/// How staged bytes are named in messages (an error always names the sample instead).
const STAGED_NAME: &str = "<staged images>";

/// Staged bytes as the files a plan reads: file 0.
pub(super) fn staged_files(bytes: Vec<u8>) -> Arc<SingleFile> {
    Arc::new(SingleFile(source::memory(STAGED_NAME, bytes)))
}

impl ImageIndex {
    /// Whether a batch's bytes are read before it is planned (HDF5 rows).
    pub(super) fn stages(&self) -> bool {
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
                    let batch = Index::read_ragged(&**file, rows, *dataset)?;
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

    pub(super) fn source_of(&self) -> &dyn Files {
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
                Tag::new(0, row as u64),
                Error::new(ErrorKind::Decode, "", e.to_string()),
            )
        })
    }

    /// Decodes sample `row` alone into `out`: `Ok(false)` if its image does not decode.
    pub(super) fn decode_one(&self, row: usize, epoch: u64, out: &mut [u8]) -> Result<bool> {
        let log: SkipLog = Arc::default();
        let step = self.step(row, epoch, Some(&log));
        let staged = if self.stages() {
            let rows = Rows::resolve(&[row as i64], self.len(), &self.location)?;
            Some(self.stage(&rows)?)
        } else {
            None
        };
        let extent = self.extent(row, step, 0, staged.as_ref().map(|s| s.1[0].clone()))?;
        let own;
        let with: &dyn Files = match staged {
            Some((bytes, _)) => {
                own = staged_files(bytes);
                &*own
            }
            None => self.source_of(),
        };
        super::decode_logged(
            with,
            std::slice::from_ref(&extent),
            out,
            self.faults(),
            |_, e| self.locate(Tag::new(0, row as u64), e),
            &log,
            &self.errors,
            row,
        )
    }
}

/// Refuses a dataset whose rows cannot hold encoded images, saying what would.
#[cfg(feature = "hdf5")]
pub(super) fn check_bytes_dataset(ds: &crate::formats::hdf5::Hdf5Dataset, at: &str) -> Result<()> {
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
