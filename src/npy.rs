//! The NPY indexer: reads files' headers (parsed by [`crate::npy_header`]) and tells the
//! engine where each sample's bytes are.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::codec::{Faults, Pipeline};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{execute_into, Dest, Extent};
use crate::plan::{check_out_len, resolve_indices};
use crate::pool;
use crate::source::{FileStamp, PathSet};

/// numpy's magic string, header limits and header parser (see [`crate::npy_header`]).
pub use crate::npy_header::{
    header_end, parse_header, Limits, NpyHeader, DEFAULT_MAX_HEADER_BYTES, MAGIC,
};

const NPY_FAULTS: Faults = Faults::both(ErrorKind::NpyFormat);
/// How much of a file is read to find its header in one go (numpy pads headers to 64 bytes).
const HEADER_PROBE: usize = 4096;

/// Reads and parses the header of an NPY file; also returns the file's stamp.
pub fn read_file_header(path: &Path, limits: &Limits) -> Result<(NpyHeader, FileStamp)> {
    read_file_start(path, limits).map(|(header, stamp, _)| (header, stamp))
}

/// [`read_file_header`], also returning the bytes read from the start of the file (at least
/// the header; the data too when the file is small, see [`read_file_data`]).
pub fn read_file_start(path: &Path, limits: &Limits) -> Result<(NpyHeader, FileStamp, Vec<u8>)> {
    let location = path.display().to_string();
    let file = crate::source::open_regular(path)?;
    let stamp = FileStamp::of(&file.metadata().map_err(|e| Error::io(&location, e))?);
    let file_len = stamp.len;
    let available = usize::try_from(file_len).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; HEADER_PROBE.min(available)];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| Error::io(&location, e))?;
    let end = header_end(&buf, available, &location, limits)?;
    if end > buf.len() {
        // `end` is bounded by both the header limit and the file length.
        buf.resize(end, 0);
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| Error::io(&location, e))?;
    }
    let header = parse_header(&buf, available, &location, limits)?;
    Ok((header, stamp, buf))
}

/// The pipeline that turns stored sample bytes into C order.
fn layout_pipeline(header: &NpyHeader) -> Pipeline {
    if header.needs_transpose() {
        Pipeline::fortran_to_c(&header.shape, header.dtype.itemsize())
    } else {
        Pipeline::identity()
    }
}

/// Reads the data of one NPY file, stored layout kept, into `out` (`data_len` bytes). `start`
/// is what [`read_file_start`] read: a small file's data is already in it (no second open).
pub fn read_file_data(
    path: &Path,
    header: &NpyHeader,
    stamp: FileStamp,
    start: &[u8],
    out: &mut [u8],
) -> Result<()> {
    if let Some(data) = start.get(header.data_offset..header.data_offset + header.data_len) {
        if data.len() == out.len() {
            out.copy_from_slice(data);
            return Ok(());
        }
    }
    let files = PathSet::new(vec![path.to_path_buf()], vec![stamp]);
    let extent = Extent::raw(0, header.data_offset as u64, header.data_len, Dest::At(0));
    let work = pool::Work {
        units: 1,
        bytes: header.data_len as u64,
    };
    pool::install_sized(None, work, || {
        execute_into(&files, std::slice::from_ref(&extent), out, NPY_FAULTS)
    })
    .map_err(|f| f.error)
}

/// Many NPY files, one sample each, all of the same dtype and shape.
pub struct NpySet {
    files: PathSet,
    header: NpyHeader,
    data_offsets: Vec<usize>,
    pipelines: Vec<Pipeline>,
}

impl NpySet {
    /// Reads every header (in parallel) and checks that all samples agree.
    pub fn open(paths: Vec<PathBuf>, limits: &Limits) -> Result<NpySet> {
        if paths.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "NpyReader needs at least one file",
            ));
        }
        let parsed = pool::try_map(&paths, |_, p| read_file_header(p, limits))?;
        let first = parsed[0].0.clone();
        for (path, (header, _)) in paths.iter().zip(&parsed) {
            if !header.same_array_type(&first) {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    path.display().to_string(),
                    format!(
                        "sample has dtype {} and shape {:?}, but {} has dtype {} and shape {:?}",
                        header.dtype.descr(),
                        header.shape,
                        paths[0].display(),
                        first.dtype.descr(),
                        first.shape
                    ),
                ));
            }
        }
        let data_offsets = parsed.iter().map(|(h, _)| h.data_offset).collect();
        let pipelines = parsed.iter().map(|(h, _)| layout_pipeline(h)).collect();
        let stamps = parsed.iter().map(|(_, stamp)| *stamp).collect();
        Ok(NpySet {
            files: PathSet::new(paths, stamps),
            header: first,
            data_offsets,
            pipelines,
        })
    }

    pub fn len(&self) -> usize {
        self.data_offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data_offsets.is_empty()
    }

    pub fn dtype(&self) -> &DType {
        &self.header.dtype
    }

    /// Shape of one sample.
    pub fn sample_shape(&self) -> &[usize] {
        &self.header.shape
    }

    pub fn sample_bytes(&self) -> usize {
        self.header.data_len
    }

    pub fn paths(&self) -> &[PathBuf] {
        self.files.paths()
    }

    /// How the reader is named in messages (see [`crate::plan::location_of`]).
    pub fn location(&self) -> String {
        crate::plan::location_of(self.files.paths())
    }

    /// What reading `rows` samples costs (tiny batches run inline, see [`pool::Work`]).
    pub fn work(&self, rows: usize) -> pool::Work {
        pool::Work {
            units: rows,
            bytes: (rows as u64).saturating_mul(self.sample_bytes() as u64),
        }
    }

    /// Reads the samples `idx` (negative counts from the end) into `out`, one after another,
    /// each in C order. `out` must be exactly `idx.len() * sample_bytes()` long.
    pub fn read_batch(&self, idx: &[i64], out: &mut [u8]) -> Result<()> {
        let rows = resolve_indices(idx, self.len(), &self.location())?;
        let n = self.sample_bytes();
        check_out_len(out.len(), rows.len(), n)?;
        let extents: Vec<Extent> = rows
            .iter()
            .enumerate()
            .map(|(k, &i)| Extent {
                file: i as u32,
                offset: self.data_offsets[i] as u64,
                stored_len: n,
                pipeline: self.pipelines[i].clone(),
                decoded_len: n,
                out: 0,
                dest: Dest::At(k * n),
            })
            .collect();
        pool::install(|| execute_into(&self.files, &extents, out, NPY_FAULTS)).map_err(|f| f.error)
    }
}
