//! Bindings for NPY: `load_npy_file`, `parse_npy_buffer` and `open_npy`.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArrayDescrMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::array::{empty, fresh_bytes, numpy_dtype, Outputs};
use super::errors::IntoPyResult;
use super::reader::Reader;
use super::source::{opening, source_of};
use crate::formats::npy::{self, Limits, NpyIndex};
use crate::source::Source;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_npy_file, m)?)?;
    m.add_function(wrap_pyfunction!(parse_npy_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(open_npy, m)?)?;
    m.add_function(wrap_pyfunction!(open_npy_remote, m)?)?;
    Ok(())
}

fn limits(max_header_size: usize) -> Limits {
    Limits {
        max_header_bytes: max_header_size,
    }
}

/// Reads a whole `.npy` file into a new array (Fortran-ordered if the file is): from a path,
/// an opened object, or a `uint8` view of bytes.
#[pyfunction]
#[pyo3(signature = (path, max_header_size = npy::DEFAULT_MAX_HEADER_BYTES))]
fn load_npy_file<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    max_header_size: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let limits = limits(max_header_size);
    let source = source_of(py, path, "<buffer>", false)?;
    let opened = source.clone();
    let (header, start) = opening(py, &source, move || {
        let read = npy::read_start(&*opened, &limits);
        opened.opened();
        read
    })?;
    let dtype = numpy_dtype(py, &header.dtype)?;
    let arr = empty(py, &header.shape, &dtype, header.fortran_order)?;
    let out = Outputs::one(fresh_bytes(&arr)?);
    py.detach(move || {
        // SAFETY: `arr` is alive on this frame and nothing else knows it yet.
        let out = unsafe { out.into_slice() };
        npy::read_data(&source, &header, &start, out)
    })
    .py_err(py)?;
    Ok(arr)
}

/// Parses the NPY header at the start of `buffer`, a uint8 view of the caller's bytes-like
/// object (`numpy.frombuffer`: zero-copy and contiguous; the stable ABI of Python 3.10 has no
/// buffer protocol). Returns `(dtype, fortran_order, shape, data_offset, aligned)`, where
/// `aligned` says whether the data can be viewed in place with the dtype's alignment.
#[pyfunction]
#[pyo3(signature = (buffer, max_header_size = npy::DEFAULT_MAX_HEADER_BYTES))]
fn parse_npy_buffer<'py>(
    py: Python<'py>,
    buffer: PyReadonlyArray1<'py, u8>,
    max_header_size: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = buffer.as_slice()?;
    let (ptr, len) = (bytes.as_ptr(), bytes.len());
    let header = npy::parse_header(bytes, len, "<buffer>", &limits(max_header_size)).py_err(py)?;
    let dtype = numpy_dtype(py, &header.dtype)?;
    let aligned = header.data_aligned(ptr as usize, dtype.alignment());
    (
        dtype,
        header.fortran_order,
        PyTuple::new(py, &header.shape)?,
        header.data_offset,
        aligned,
    )
        .into_pyobject(py)
}

/// Many same-shape `.npy` files (one sample each) as a batch reader; headers are read (in
/// parallel) and checked here.
#[pyfunction]
#[pyo3(signature = (paths, max_header_size = npy::DEFAULT_MAX_HEADER_BYTES, num_threads = None))]
fn open_npy(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    max_header_size: usize,
    num_threads: Option<usize>,
) -> PyResult<Reader> {
    let limits = limits(max_header_size);
    let index = py
        .detach(|| NpyIndex::open_paths(paths, &limits, num_threads))
        .py_err(py)?;
    Reader::new(py, Arc::new(index))
}

/// Many same-shape `.npy` objects (URLs, one sample each) as a batch reader: opened together
/// (each by one request for its head, many in flight), or with `stamps` (`(size, etag,
/// modified)` of each, from a reader pickled after opening) without a request. Also returns
/// the stamps.
#[pyfunction]
#[pyo3(signature = (urls, options, cache_dir, stamps, max_header_size = npy::DEFAULT_MAX_HEADER_BYTES, num_threads = None, data_cache = None))]
// The stamps' type is as Python gives and takes them; the arguments are the reader's options.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn open_npy_remote(
    py: Python<'_>,
    urls: Vec<String>,
    options: Vec<(String, String)>,
    cache_dir: Option<PathBuf>,
    stamps: Option<Vec<(u64, Option<String>, Option<i64>)>>,
    max_header_size: usize,
    num_threads: Option<usize>,
    data_cache: Option<(PathBuf, u64)>,
) -> PyResult<(Reader, Vec<(u64, Option<String>, Option<i64>)>)> {
    use crate::remote::{open_many, Caches, FirstRead, ObjectStamp, StoreOptions};
    let caches = Caches {
        index: cache_dir,
        data: data_cache,
    };
    let limits = limits(max_header_size);
    let stamps = stamps.map(|s| {
        s.into_iter()
            .map(|(len, etag, modified)| ObjectStamp {
                len,
                etag,
                modified,
            })
            .collect()
    });
    let (index, stamps) = super::remote::interruptible(py, move || {
        let files = open_many(
            &urls,
            &StoreOptions(options),
            FirstRead::Head(npy::HEADER_PROBE as u64),
            &caches,
            stamps,
        )?;
        let stamps = files
            .iter()
            .map(|f| (f.len(), f.stamp().etag.clone(), f.stamp().modified))
            .collect();
        let sources = files
            .into_iter()
            .map(|f| Arc::new(f) as Arc<dyn Source>)
            .collect();
        Ok::<_, crate::error::Error>((NpyIndex::open(sources, &limits, num_threads)?, stamps))
    })?;
    Ok((Reader::new(py, Arc::new(index))?, stamps))
}
