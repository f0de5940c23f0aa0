//! NPY: one file a sample ([`NpyIndex`], a folder or list of same-shape `.npy` files), and
//! whole files read as `numpy.load` reads them. Headers are parsed by [`header`].

pub mod header;
mod rows;

use std::path::PathBuf;
use std::sync::Arc;

use crate::batch::pool::{self, Work};
use crate::batch::{run_extents, ArraySpec, Dest, Extent, Index, Plan, Rows, Tag};
use crate::codec::{Faults, Pipeline};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::source::{FileList, Files, SingleFile, Source, StampedPath};

pub use header::{header_end, parse_header, Limits, NpyHeader, DEFAULT_MAX_HEADER_BYTES, MAGIC};
pub use rows::NpyRows;

/// The name of an NPY reader's one array.
pub const ARRAY_NAME: &str = "data";

const NPY_FAULTS: Faults = Faults::both(ErrorKind::NpyFormat);
/// How much of a file is read to find its header in one go (numpy pads headers to 64 bytes).
pub const HEADER_PROBE: usize = 4096;

/// Reads and parses the header of an NPY file, through its metadata reads (an object's from
/// its first request's block); also returns the bytes read from its start (at least the
/// header; the data too when the file is small, see [`read_data`]).
pub fn read_start(source: &dyn Source, limits: &Limits) -> Result<(NpyHeader, Vec<u8>)> {
    let location = source.name();
    let available = usize::try_from(source.len()).unwrap_or(usize::MAX);
    let damage = |e: Error| source.cause(e.as_damage(ErrorKind::NpyFormat));
    let mut buf = vec![0u8; HEADER_PROBE.min(available)];
    source.read_meta(0, &mut buf).map_err(damage)?;
    let end = header_end(&buf, available, location, limits)?;
    if end > buf.len() {
        // `end` is bounded by both the header limit and the file length.
        buf.resize(end, 0);
        source.read_meta(0, &mut buf).map_err(damage)?;
    }
    let header = parse_header(&buf, available, location, limits)?;
    Ok((header, buf))
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
/// is what [`read_start`] read: a small file's data is already in it (no second read).
pub fn read_data(
    source: &Arc<dyn Source>,
    header: &NpyHeader,
    start: &[u8],
    out: &mut [u8],
) -> Result<()> {
    if let Some(data) = start.get(header.data_offset..header.data_offset + header.data_len) {
        if data.len() == out.len() {
            out.copy_from_slice(data);
            return Ok(());
        }
    }
    let extent = Extent::raw(0, header.data_offset as u64, header.data_len, Dest::At(0));
    let work = Work::new(1, header.data_len as u64);
    let extents = std::slice::from_ref(&extent);
    run_extents(
        &SingleFile(source.clone()),
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

/// Many NPY files, one sample each, all of the same dtype and shape: one array, named
/// [`ARRAY_NAME`].
pub struct NpyIndex {
    files: FileList,
    /// Each file's path, or URL for an object.
    names: Vec<PathBuf>,
    header: NpyHeader,
    data_offsets: Vec<usize>,
    pipelines: Vec<Pipeline>,
    arrays: [ArraySpec; 1],
    threads: Option<usize>,
}

impl NpyIndex {
    /// The `.npy` files at `paths`, in order: each opened for each read
    /// ([`crate::source::StampedPath`]), so descriptors never run out; stat'ed in parallel.
    pub fn open_paths(
        paths: Vec<PathBuf>,
        limits: &Limits,
        threads: Option<usize>,
    ) -> Result<NpyIndex> {
        let sources = pool::install_with(threads, || {
            pool::try_map(&paths, |_, p| {
                Ok(Arc::new(StampedPath::open(p.clone())?) as Arc<dyn Source>)
            })
        })?;
        NpyIndex::open(sources, limits, threads)
    }

    /// Reads every file's header (in parallel, on `threads` threads or the shared pool;
    /// objects' from the block their opening fetched, or the index cache) and checks that all
    /// samples agree. A folder of many files gives sources opened for each read
    /// ([`crate::source::StampedPath`]): descriptors never run out.
    pub fn open(
        sources: Vec<Arc<dyn Source>>,
        limits: &Limits,
        threads: Option<usize>,
    ) -> Result<NpyIndex> {
        if sources.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "NpyReader needs at least one file",
            ));
        }
        let parsed = pool::install_with(threads, || {
            pool::try_map(&sources, |_, s| {
                let header = read_start(&**s, limits).map(|(h, _)| h);
                s.opened();
                header
            })
        })?;
        let names: Vec<PathBuf> = sources.iter().map(|s| PathBuf::from(s.name())).collect();
        let first = check_agree(&names, &parsed.iter().collect::<Vec<_>>())?;
        Ok(NpyIndex {
            names,
            files: FileList::new(sources),
            data_offsets: parsed.iter().map(|h| h.data_offset).collect(),
            pipelines: parsed.iter().map(layout_pipeline).collect(),
            arrays: [ArraySpec {
                name: ARRAY_NAME.to_string(),
                dtype: first.dtype.clone(),
                shape: first.shape.clone(),
                ragged: None,
            }],
            header: first,
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

    fn files(&self) -> &dyn Files {
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
                Tag::new(0, i as u64),
            );
        }
        Ok(())
    }

    /// The executor names the file already; nothing to add.
    fn locate(&self, _tag: Tag, error: Error) -> Error {
        error
    }
}
