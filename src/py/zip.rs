//! Bindings for ZIP and NPZ: `ZipReader`, `NpzReader`, `load_npz_file`, `load_npz_buffer`.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use super::array::{empty, fresh_bytes, numpy_dtype, Outputs, RawOut};
use super::errors::{invalid_argument, IntoPyResult};
use super::options::{zip_limits, Dict};
use super::reader::Reader;
use super::source::{array_source, open_with};
use crate::batch::pool;
use crate::batch::tiling::resolve_indices;
use crate::error::Error;
use crate::formats::npy::NpyRows;
use crate::formats::npz::{self, Content, NpzIndex};
use crate::formats::zip::ZipIndex;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ZipArchive>()?;
    m.add_function(wrap_pyfunction!(open_npz, m)?)?;
    m.add_function(wrap_pyfunction!(open_npz_rows, m)?)?;
    m.add_function(wrap_pyfunction!(load_npz_file, m)?)?;
    m.add_function(wrap_pyfunction!(load_npz_buffer, m)?)?;
    Ok(())
}

fn check_positions(py: Python<'_>, positions: &[i64], index: &ZipIndex) -> PyResult<Vec<usize>> {
    resolve_indices(positions, index.len(), index.location()).py_err(py)
}

/// One ZIP archive: its members by name or position, read whole or as samples
/// (`samples`). See `packread.ZipReader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct ZipArchive {
    pub(super) index: Arc<ZipIndex>,
    threads: Option<usize>,
}

#[pymethods]
impl ZipArchive {
    /// The archive at `source` (a path, bytes, an opened object, a file object), read with
    /// `options`' limits (`verify_crc`, `max_member_bytes`, `max_header_size`) and pool
    /// (`num_threads`).
    #[new]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let d = Dict::new(options)?;
        let limits = zip_limits(&d)?;
        let threads = d.opt("num_threads")?;
        let index = open_with(py, source, "<buffer>", move |s| ZipIndex::open(s, limits))?;
        Ok(ZipArchive {
            index: Arc::new(index),
            threads,
        })
    }

    fn __len__(&self) -> usize {
        self.index.len()
    }

    #[getter]
    fn path(&self) -> String {
        self.index.location().to_string()
    }

    /// Member names in archive order.
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.index.members().iter().map(|m| m.name()))
    }

    /// Positions of `names`; a missing name is a `KeyError`.
    fn positions(&self, py: Python<'_>, names: Vec<String>) -> PyResult<Vec<usize>> {
        names
            .iter()
            .map(|n| self.index.position(n))
            .collect::<crate::error::Result<Vec<_>>>()
            .py_err(py)
    }

    /// Raises the error reading the member at `position` would raise before any data is read
    /// (encryption, method, size limits, a bad local header).
    fn check(&self, py: Python<'_>, position: i64) -> PyResult<()> {
        let i = check_positions(py, &[position], &self.index)?[0];
        let index = &self.index;
        py.detach(|| index.member_data(i)).py_err(py).map(|_| ())
    }

    /// `(name, size, compressed_size, method, crc32)` of the member at `position`.
    fn info(&self, py: Python<'_>, position: i64) -> PyResult<(String, u64, u64, u16, u32)> {
        let i = check_positions(py, &[position], &self.index)?[0];
        let m = &self.index.members()[i];
        Ok((
            m.name().to_string(),
            m.size(),
            m.compressed_size(),
            m.method(),
            m.crc32(),
        ))
    }

    /// The whole decoded member at `position`, decoded straight into the returned `bytes`
    /// (the GIL released meanwhile: nothing else can see the object yet).
    fn read<'py>(&self, py: Python<'py>, position: i64) -> PyResult<Bound<'py, PyBytes>> {
        let i = check_positions(py, &[position], &self.index)?[0];
        let index = &self.index;
        // Limits and method first: the size below is then one the reader agreed to allocate.
        py.detach(|| index.member_data(i)).py_err(py)?;
        let size = usize::try_from(index.members()[i].size())
            .map_err(|_| invalid_argument(py, "member too large for this platform"))?;
        let threads = self.threads;
        PyBytes::new_with(py, size, |buf| {
            py.detach(|| index.read_into(i, buf, threads)).py_err(py)
        })
    }

    /// `(dtype, shape)` from the NPY header of the member at `position`, or None if it is not
    /// an NPY array.
    fn npy_info<'py>(
        &self,
        py: Python<'py>,
        position: i64,
    ) -> PyResult<Option<(Bound<'py, PyArrayDescr>, Bound<'py, PyTuple>)>> {
        let i = check_positions(py, &[position], &self.index)?[0];
        let index = &self.index;
        let Some(header) = py.detach(|| index.npy_header(i)).py_err(py)? else {
            return Ok(None);
        };
        Ok(Some((
            numpy_dtype(py, &header.dtype)?,
            PyTuple::new(py, &header.shape)?,
        )))
    }

    /// The members `options` select (`members`: all, a pattern or names) as a batch reader of
    /// one array, raw bytes viewed as `dtype` in `shape` or `.npy` arrays (the first member
    /// decides), and the selected members' names.
    fn samples(
        &self,
        py: Python<'_>,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<(Reader, Vec<String>)> {
        let select = super::options::zip_samples(&Dict::new(options)?)?;
        let index = self.index.clone();
        let threads = self.threads;
        let (samples, names) = py
            .detach(|| crate::open::zip_samples(index, &select, threads, false))
            .py_err(py)?;
        let names = names
            .into_iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        Ok((Reader::new(py, Arc::new(samples))?, names))
    }
}

/// Many NPZ files with the same keys (one sample each) as a batch reader of one array per
/// key; the first file's directory and headers are read here.
#[pyfunction]
fn open_npz(py: Python<'_>, paths: Vec<PathBuf>, options: &Bound<'_, PyAny>) -> PyResult<Reader> {
    let d = Dict::new(options)?;
    let limits = zip_limits(&d)?;
    let num_threads: Option<usize> = d.opt("num_threads")?;
    let index = py
        .detach(|| NpzIndex::open(paths, limits, num_threads))
        .py_err(py)?;
    Reader::new(py, Arc::new(index))
}

/// The rows of the stored `.npy` members `keys` (all when `None`) of one NPZ archive (a path,
/// an opened object, a `uint8` view of bytes or a binary file object) as a batch reader:
/// sample `i` holds row `i` of each.
#[pyfunction]
fn open_npz_rows(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    keys: Option<Vec<String>>,
    options: &Bound<'_, PyAny>,
) -> PyResult<Reader> {
    let d = Dict::new(options)?;
    let limits = zip_limits(&d)?;
    let num_threads: Option<usize> = d.opt("num_threads")?;
    let index = open_with(py, source, "<bytes>", move |s| {
        NpyRows::open_npz(ZipIndex::open(s, limits)?, keys, num_threads)
    })?;
    Reader::new(py, Arc::new(index))
}

/// Loads a whole NPZ file: `dict[key, ndarray | bytes]`, as `dict(numpy.load(source))`, from
/// a path, an opened object or a file object (every array copied out).
#[pyfunction]
fn load_npz_file<'py>(
    py: Python<'py>,
    source: &Bound<'py, PyAny>,
    options: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let limits = zip_limits(&Dict::new(options)?)?;
    let (index, contents) = open_with(py, source, "<buffer>", move |s| {
        let index = ZipIndex::open(s, limits)?;
        let contents = pool::install_sized(None, npz::load_work(&index), || npz::contents(&index))?;
        Ok::<_, Error>((index, contents))
    })?;
    load_contents(py, &index, &contents, None)
}

/// Loads a whole NPZ archive from `buffer`, a uint8 view of the caller's bytes-like object
/// (`numpy.frombuffer`: zero-copy and contiguous). Stored, aligned arrays are zero-copy,
/// read-only views of it; compressed ones are inflated in parallel.
#[pyfunction]
fn load_npz_buffer<'py>(
    py: Python<'py>,
    buffer: PyReadonlyArray1<'py, u8>,
    options: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let ptr = buffer.as_slice()?.as_ptr();
    let source = array_source(py, &buffer, "<buffer>")?;
    let limits = zip_limits(&Dict::new(options)?)?;
    let (index, contents) = py
        .detach(|| {
            let index = ZipIndex::open(source, limits)?;
            let contents =
                pool::install_sized(None, npz::load_work(&index), || npz::contents(&index))?;
            npz::verify_stored(&index, &contents)?;
            Ok::<_, Error>((index, contents))
        })
        .py_err(py)?;
    let ptr = ptr as usize;
    load_contents(py, &index, &contents, Some((buffer.as_any(), ptr)))
}

/// Builds the dict: allocates every array, fills the compressed (or unaligned) ones in one
/// parallel pass, views stored aligned arrays in place when the archive is in memory.
fn load_contents<'py>(
    py: Python<'py>,
    index: &ZipIndex,
    contents: &[Content],
    in_memory: Option<(&Bound<'py, PyAny>, usize)>,
) -> PyResult<Bound<'py, PyDict>> {
    let numpy = py.import("numpy")?;
    let dict = PyDict::new(py);
    let mut to_read: Vec<&Content> = Vec::new();
    let mut arrays: Vec<Bound<'py, PyAny>> = Vec::new();
    let mut slots: Vec<(String, Option<usize>, Option<Bound<'py, PyAny>>)> = Vec::new();
    for content in contents {
        match content {
            Content::Array { key, header, .. } => {
                let dtype = numpy_dtype(py, &header.dtype)?;
                let view = in_memory.and_then(|(buffer, base)| {
                    Some((buffer, content.in_place_offset(base, dtype.alignment())?))
                });
                if let Some((buffer, offset)) = view {
                    let count: usize = header.shape.iter().product();
                    let kwargs = PyDict::new(py);
                    kwargs.set_item("dtype", &dtype)?;
                    kwargs.set_item("count", count)?;
                    kwargs.set_item("offset", offset)?;
                    let flat = numpy.call_method("frombuffer", (buffer,), Some(&kwargs))?;
                    flat.getattr("flags")?.setattr("writeable", false)?;
                    let shaped = if header.fortran_order {
                        let rev: Vec<usize> = header.shape.iter().rev().copied().collect();
                        flat.call_method1("reshape", (PyTuple::new(py, rev)?,))?
                            .getattr("T")?
                    } else {
                        flat.call_method1("reshape", (PyTuple::new(py, &header.shape)?,))?
                    };
                    slots.push((key.clone(), None, Some(shaped)));
                    continue;
                }
                let arr = empty(py, &header.shape, &dtype, header.fortran_order)?;
                slots.push((key.clone(), Some(arrays.len()), None));
                arrays.push(arr);
                to_read.push(content);
            }
            Content::Bytes { key, member } => {
                let size = usize::try_from(index.members()[*member].size())
                    .map_err(|_| invalid_argument(py, "member too large for this platform"))?;
                let data = PyBytes::new_with(py, size, |buf| {
                    py.detach(|| index.read_into(*member, buf, None)).py_err(py)
                })?;
                slots.push((key.clone(), None, Some(data.into_any())));
            }
        }
    }
    let raws = arrays
        .iter()
        .map(fresh_bytes)
        .collect::<PyResult<Vec<RawOut>>>()?;
    // Separate allocations: disjoint by construction, checked all the same.
    let outputs = Outputs::disjoint(raws).py_err(py)?;
    if !to_read.is_empty() {
        let index_ref = index;
        let to_read_ref = &to_read;
        py.detach(move || {
            // SAFETY: the arrays were just allocated here and stay alive on this frame.
            let mut outs = unsafe { outputs.into_slices() };
            npz::read_arrays(index_ref, to_read_ref, &mut outs)
        })
        .py_err(py)?;
    }
    for (key, array, value) in slots {
        match (array, value) {
            (Some(a), _) => dict.set_item(key, &arrays[a])?,
            (None, Some(v)) => dict.set_item(key, v)?,
            (None, None) => unreachable!(),
        }
    }
    Ok(dict)
}
