//! Bindings for NPY: `load_npy_file`, `parse_npy_buffer` and `open_npy`.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArrayDescrMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::array::{empty, fresh_bytes, numpy_dtype, Outputs};
use super::errors::IntoPyResult;
use super::options::Dict;
use super::reader::Reader;
use super::source::{open_with, opening, source_of};
use crate::formats::npy::{self, Limits, NpyIndex, NpyRows};
use crate::source::Source;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_npy_file, m)?)?;
    m.add_function(wrap_pyfunction!(parse_npy_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(open_npy, m)?)?;
    m.add_function(wrap_pyfunction!(open_npy_remote, m)?)?;
    m.add_function(wrap_pyfunction!(open_npy_rows, m)?)?;
    Ok(())
}

/// The NPY limits of `options` (`max_header_size`).
fn limits(options: &Bound<'_, PyAny>) -> PyResult<Limits> {
    Ok(Limits {
        max_header_bytes: Dict::new(options)?
            .get("max_header_size", npy::DEFAULT_MAX_HEADER_BYTES)?,
    })
}

/// Reads a whole `.npy` file into a new array (Fortran-ordered if the file is): from a path,
/// an opened object, or a `uint8` view of bytes.
#[pyfunction]
fn load_npy_file<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    options: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let limits = limits(options)?;
    let (source, header, start) = open_with(py, source, "<buffer>", move |s| {
        let read = npy::read_start(&*s, &limits);
        s.opened();
        read.map(|(header, start)| (s, header, start))
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
fn parse_npy_buffer<'py>(
    py: Python<'py>,
    buffer: PyReadonlyArray1<'py, u8>,
    options: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let limits = limits(options)?;
    let bytes = buffer.as_slice()?;
    let (ptr, len) = (bytes.as_ptr(), bytes.len());
    let header = npy::parse_header(bytes, len, "<buffer>", &limits).py_err(py)?;
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
fn open_npy(py: Python<'_>, paths: Vec<PathBuf>, options: &Bound<'_, PyAny>) -> PyResult<Reader> {
    let limits = limits(options)?;
    let num_threads: Option<usize> = Dict::new(options)?.opt("num_threads")?;
    let index = py
        .detach(|| NpyIndex::open_paths(paths, &limits, num_threads))
        .py_err(py)?;
    Reader::new(py, Arc::new(index))
}

/// Many same-shape `.npy` objects (URLs, one sample each) as a batch reader: opened together
/// (each by one request for its head, many in flight), or with `stamps` (`(size, etag,
/// modified)` of each, from a reader pickled after opening) without a request. `options`: the
/// object storage options, `max_header_size`, `num_threads`. Also returns the stamps.
#[pyfunction]
#[allow(clippy::type_complexity)] // the stamps' type is as Python gives and takes them
fn open_npy_remote(
    py: Python<'_>,
    urls: Vec<String>,
    stamps: Option<Vec<(u64, Option<String>, Option<i64>)>>,
    options: &Bound<'_, PyAny>,
) -> PyResult<(Reader, Vec<(u64, Option<String>, Option<i64>)>)> {
    use crate::remote::{open_many, FirstRead, ObjectStamp};
    let limits = limits(options)?;
    let d = Dict::new(options)?;
    let remote = super::options::remote(&d)?;
    let num_threads: Option<usize> = d.opt("num_threads")?;
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
            &remote.store,
            FirstRead::Head(npy::HEADER_PROBE as u64),
            &remote.caches,
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

/// The rows of one or more `.npy` arrays of equal length as a batch reader: sample `i` holds
/// row `i` of each. `arrays` pairs each array's name with its source (a path, an opened
/// object, a `uint8` view of bytes or a binary file object); headers are read here.
#[pyfunction]
fn open_npy_rows(
    py: Python<'_>,
    arrays: Vec<(String, Bound<'_, PyAny>)>,
    options: &Bound<'_, PyAny>,
) -> PyResult<Reader> {
    let limits = limits(options)?;
    let num_threads: Option<usize> = Dict::new(options)?.opt("num_threads")?;
    let named = arrays
        .iter()
        .map(|(name, obj)| Ok((name.clone(), source_of(py, obj, "<bytes>")?)))
        .collect::<PyResult<Vec<_>>>()?;
    let Some((_, first)) = named.first() else {
        return Err(super::errors::invalid_argument(
            py,
            "no arrays to read rows of",
        ));
    };
    let first = first.clone();
    let index = opening(py, &first, move || {
        NpyRows::open(named, &limits, num_threads)
    })?;
    Reader::new(py, Arc::new(index))
}
