//! NPY: one file a sample ([`NpyIndex`], a folder or list of same-shape `.npy` files), and
//! whole files read as `numpy.load` reads them. Headers are parsed by [`header`].

pub mod header;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::pool::{self, Work};
use crate::batch::source::{FileStamp, PathSet, Source};
use crate::batch::{run_extents, ArraySpec, Dest, Extent, Index, Plan, Rows, Tag};
use crate::codec::{Faults, Pipeline};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::remote::{RemoteFile, RemoteSet};

pub use header::{header_end, parse_header, Limits, NpyHeader, DEFAULT_MAX_HEADER_BYTES, MAGIC};

/// The name of an NPY reader's one array.
pub const ARRAY_NAME: &str = "data";

const NPY_FAULTS: Faults = Faults::both(ErrorKind::NpyFormat);
/// How much of a file is read to find its header in one go (numpy pads headers to 64 bytes).
pub const HEADER_PROBE: usize = 4096;

/// Reads and parses the header of an NPY file; also returns the file's stamp.
pub fn read_file_header(path: &Path, limits: &Limits) -> Result<(NpyHeader, FileStamp)> {
    read_file_start(path, limits).map(|(header, stamp, _)| (header, stamp))
}

/// [`read_file_header`], also returning the bytes read from the start of the file (at least
/// the header; the data too when the file is small, see [`read_file_data`]).
pub fn read_file_start(path: &Path, limits: &Limits) -> Result<(NpyHeader, FileStamp, Vec<u8>)> {
    let location = path.display().to_string();
    let file = crate::batch::source::open_regular(path)?;
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
    let work = Work::new(1, header.data_len as u64);
    let extents = std::slice::from_ref(&extent);
    run_extents(
        &files,
        extents,
        &mut [out],
        NPY_FAULTS,
        work,
        None,
        |_, e| e,
    )
}

/// Every sample has `headers[0]`'s dtype and shape (`names` in messages); that header.
fn check_agree(names: &[PathBuf], headers: &[&NpyHeader]) -> Result<NpyHeader> {
    let first = headers[0].clone();
    for (path, header) in names.iter().zip(headers) {
        if !header.same_array_type(&first) {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                path.display().to_string(),
                format!(
                    "sample has dtype {} and shape {:?}, but {} has dtype {} and shape {:?}",
                    header.dtype.descr(),
                    header.shape,
                    names[0].display(),
                    first.dtype.descr(),
                    first.shape
                ),
            ));
        }
    }
    Ok(first)
}

/// The header of a `.npy` object, read through its metadata blocks.
fn remote_header(file: &RemoteFile, limits: &Limits) -> Result<NpyHeader> {
    let location = file.url();
    let available = usize::try_from(file.len()).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; HEADER_PROBE.min(available)];
    file.read_meta(0, &mut buf)?;
    let end = header_end(&buf, available, location, limits)?;
    if end > buf.len() {
        buf.resize(end, 0);
        file.read_meta(0, &mut buf)?;
    }
    parse_header(&buf, available, location, limits)
}

/// Where a set of `.npy` samples is: local files or objects.
enum NpyFiles {
    Local(PathSet),
    Remote(RemoteSet),
}

impl Source for NpyFiles {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            NpyFiles::Local(s) => s.read_at(file, offset, buf),
            NpyFiles::Remote(s) => s.read_at(file, offset, buf),
        }
    }

    fn name(&self, file: u32) -> String {
        match self {
            NpyFiles::Local(s) => s.name(file),
            NpyFiles::Remote(s) => s.name(file),
        }
    }

    fn coalesce(&self) -> Option<crate::batch::source::Coalesce> {
        match self {
            NpyFiles::Local(s) => s.coalesce(),
            NpyFiles::Remote(s) => s.coalesce(),
        }
    }

    fn read_ranges(&self, ranges: &[(u32, u64, usize)]) -> Vec<Result<bytes::Bytes>> {
        match self {
            NpyFiles::Local(s) => s.read_ranges(ranges),
            NpyFiles::Remote(s) => s.read_ranges(ranges),
        }
    }
}

/// Many NPY files, one sample each, all of the same dtype and shape: one array, named
/// [`ARRAY_NAME`].
pub struct NpyIndex {
    files: NpyFiles,
    /// Each file's path, or URL for an object.
    names: Vec<PathBuf>,
    header: NpyHeader,
    data_offsets: Vec<usize>,
    pipelines: Vec<Pipeline>,
    arrays: [ArraySpec; 1],
    threads: Option<usize>,
}

impl NpyIndex {
    /// Reads every header (in parallel, on `threads` threads or the shared pool) and checks
    /// that all samples agree.
    pub fn open(paths: Vec<PathBuf>, limits: &Limits, threads: Option<usize>) -> Result<NpyIndex> {
        if paths.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "NpyReader needs at least one file",
            ));
        }
        let parsed = pool::install_with(threads, || {
            pool::try_map(&paths, |_, p| read_file_header(p, limits))
        })?;
        let headers: Vec<&NpyHeader> = parsed.iter().map(|(h, _)| h).collect();
        let first = check_agree(&paths, &headers)?;
        let data_offsets = parsed.iter().map(|(h, _)| h.data_offset).collect();
        let pipelines = parsed.iter().map(|(h, _)| layout_pipeline(h)).collect();
        let stamps = parsed.iter().map(|(_, stamp)| *stamp).collect();
        let arrays = [ArraySpec {
            name: ARRAY_NAME.to_string(),
            dtype: first.dtype.clone(),
            shape: first.shape.clone(),
        }];
        Ok(NpyIndex {
            names: paths.clone(),
            files: NpyFiles::Local(PathSet::new(paths, stamps)),
            header: first,
            data_offsets,
            pipelines,
            arrays,
            threads,
        })
    }

    /// Opens many `.npy` objects (one sample each): every header is read from the blocks
    /// their opening fetched (or the index cache), and checked to agree.
    pub fn open_remote(
        files: Vec<Arc<RemoteFile>>,
        limits: &Limits,
        threads: Option<usize>,
    ) -> Result<NpyIndex> {
        if files.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "NpyReader needs at least one file",
            ));
        }
        let parsed = pool::install_with(threads, || {
            pool::try_map(&files, |_, f| {
                let header = remote_header(f, limits);
                f.save_index();
                header
            })
        })?;
        let names: Vec<PathBuf> = files.iter().map(|f| PathBuf::from(f.url())).collect();
        let first = check_agree(&names, &parsed.iter().collect::<Vec<_>>())?;
        Ok(NpyIndex {
            names,
            files: NpyFiles::Remote(RemoteSet::new(files)),
            header: first,
            data_offsets: parsed.iter().map(|h| h.data_offset).collect(),
            pipelines: parsed.iter().map(layout_pipeline).collect(),
            arrays: [ArraySpec {
                name: ARRAY_NAME.to_string(),
                dtype: parsed[0].dtype.clone(),
                shape: parsed[0].shape.clone(),
            }],
            threads,
        })
    }

    /// The element type.
    pub fn dtype(&self) -> &DType {
        &self.header.dtype
    }

    /// Shape of one sample.
    pub fn sample_shape(&self) -> &[usize] {
        &self.header.shape
    }

    /// Bytes of one sample.
    pub fn sample_bytes(&self) -> usize {
        self.header.data_len
    }

    /// The files, in sample order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.names
    }
}

impl Index for NpyIndex {
    fn len(&self) -> usize {
        self.data_offsets.len()
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        crate::batch::tiling::location_of(&self.names)
    }

    fn faults(&self) -> Faults {
        NPY_FAULTS
    }

    fn source(&self) -> &dyn Source {
        &self.files
    }

    fn work(&self, rows: usize, _arrays: &[usize]) -> Work {
        Work::new(
            rows,
            (rows as u64).saturating_mul(self.sample_bytes() as u64),
        )
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    fn plan(&self, rows: &Rows, _arrays: &[usize], plan: &mut Plan) -> Result<()> {
        let n = self.sample_bytes();
        for (k, &i) in rows.as_slice().iter().enumerate() {
            plan.push(
                Extent {
                    file: i as u32,
                    offset: self.data_offsets[i] as u64,
                    stored_len: n,
                    pipeline: self.pipelines[i].clone(),
                    decoded_len: n,
                    out: 0,
                    dest: Dest::At(k * n),
                },
                (0, i as u64),
            );
        }
        Ok(())
    }

    /// The executor names the file already; nothing to add.
    fn locate(&self, _tag: Tag, error: Error) -> Error {
        error
    }
}
