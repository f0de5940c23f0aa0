//! Bindings for ZIP and NPZ: `ZipReader`, `NpzReader`, `load_npz_file`, `load_npz_buffer`.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use super::array::{batch_shape, empty, fresh_bytes, numpy_dtype, output, Outputs, RawOut};
use super::errors::{invalid_argument, to_py, IntoPyResult};
use super::pending::{submit, PendingRead};
use crate::codec::NpyExpect;
use crate::error::{Error, ErrorKind};
use crate::npy::Limits;
use crate::npz::{self, Content, NpzSet};
use crate::plan::resolve_indices;
use crate::pool::{self, Work};
use crate::source::{SharedFile, Source};
use crate::zip::{ZipIndex, ZipLimits};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ZipReader>()?;
    m.add_class::<NpzReader>()?;
    m.add_function(wrap_pyfunction!(load_npz_file, m)?)?;
    m.add_function(wrap_pyfunction!(load_npz_buffer, m)?)?;
    Ok(())
}

fn limits(verify_crc: bool, max_member_bytes: u64, max_header_size: usize) -> ZipLimits {
    ZipLimits {
        verify_crc,
        max_member_bytes,
        npy: Limits {
            max_header_bytes: max_header_size,
        },
        ..ZipLimits::default()
    }
}

fn check_positions<S: Source>(
    py: Python<'_>,
    positions: &[i64],
    index: &ZipIndex<S>,
) -> PyResult<Vec<usize>> {
    resolve_indices(positions, index.len(), index.location()).py_err(py)
}

/// Members of one ZIP archive read by name or position. See `packread.ZipReader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct ZipReader {
    index: Arc<ZipIndex<SharedFile>>,
    threads: Option<usize>,
}

#[pymethods]
impl ZipReader {
    #[new]
    #[pyo3(signature = (path, verify_crc = true, max_member_bytes = crate::zip::DEFAULT_MAX_MEMBER_BYTES, max_header_size = crate::npy::DEFAULT_MAX_HEADER_BYTES, num_threads = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        verify_crc: bool,
        max_member_bytes: u64,
        max_header_size: usize,
        num_threads: Option<usize>,
    ) -> PyResult<Self> {
        let limits = limits(verify_crc, max_member_bytes, max_header_size);
        let index = py.detach(|| ZipIndex::open(path, limits)).py_err(py)?;
        Ok(ZipReader {
            index: Arc::new(index),
            threads: num_threads,
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
        self.index.positions(&names).py_err(py)
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
            py.detach(|| pool::install_with(threads, || index.read_into(i, buf)))
                .py_err(py)
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

    /// Starts reading raw members into `out`, whose shape is `(len(positions),) + sample
    /// shape`; positions and `out` are checked now, the read runs on the pool.
    fn read_raw_into(
        &self,
        py: Python<'_>,
        positions: PyReadonlyArray1<'_, i64>,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<PendingRead> {
        let positions = check_positions(py, positions.as_slice()?, &self.index)?;
        let arr = out
            .cast::<numpy::PyUntypedArray>()
            .map_err(|_| invalid_argument(py, "out= must be a numpy.ndarray"))?;
        let dtype = numpy::PyUntypedArrayMethods::dtype(arr);
        let shape = numpy::PyUntypedArrayMethods::shape(arr).to_vec();
        if shape.first() != Some(&positions.len()) {
            return Err(invalid_argument(
                py,
                format!(
                    "out= has shape {shape:?}, expected {} rows",
                    positions.len()
                ),
            ));
        }
        let raw = Outputs::one(output(out, &shape, &dtype)?);
        let sample_bytes = shape[1..].iter().product::<usize>() * dtype.itemsize();
        let index = self.index.clone();
        let work = Work {
            units: positions.len(),
            bytes: (positions.len() as u64).saturating_mul(sample_bytes as u64),
        };
        Ok(submit(
            py,
            self.threads,
            work,
            vec![out.clone().unbind()],
            move || {
                // SAFETY: the job holds `out` until it ends.
                index.read_raw_batch(&positions, sample_bytes, unsafe { raw.into_slice() })
            },
        ))
    }

    /// Starts reading `.npy` members into `out`; every member's header must agree with the
    /// header of the member at `reference` (the reader's sample type).
    fn read_npy_into(
        &self,
        py: Python<'_>,
        positions: PyReadonlyArray1<'_, i64>,
        out: &Bound<'_, PyAny>,
        reference: i64,
    ) -> PyResult<PendingRead> {
        let positions = check_positions(py, positions.as_slice()?, &self.index)?;
        let reference = check_positions(py, &[reference], &self.index)?[0];
        let index = self.index.clone();
        let header = py
            .detach(|| index.npy_header(reference))
            .py_err(py)?
            .ok_or_else(|| {
                to_py(
                    py,
                    Error::new(
                        ErrorKind::NpyFormat,
                        format!("{}:{}", index.location(), index.members()[reference].name()),
                        "member is not an NPY array",
                    ),
                )
            })?;
        let dtype = numpy_dtype(py, &header.dtype)?;
        let raw = Outputs::one(output(
            out,
            &batch_shape(positions.len(), &header.shape),
            &dtype,
        )?);
        let expect = Arc::new(NpyExpect {
            dtype: header.dtype,
            shape: header.shape,
            limits: index.limits().npy,
            keep_layout: false,
        });
        let work = Work {
            units: positions.len(),
            bytes: (positions.len() as u64).saturating_mul(expect.data_len() as u64),
        };
        Ok(submit(
            py,
            self.threads,
            work,
            vec![out.clone().unbind()],
            move || {
                // SAFETY: the job holds `out` until it ends.
                index.read_npy_batch(&positions, &expect, unsafe { raw.into_slice() })
            },
        ))
    }
}

/// Many NPZ files with the same keys, one sample each. See `packread.NpzReader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct NpzReader {
    set: Arc<NpzSet>,
    dtypes: Vec<Py<PyArrayDescr>>,
    threads: Option<usize>,
}

#[pymethods]
impl NpzReader {
    #[new]
    #[pyo3(signature = (paths, verify_crc = true, max_member_bytes = crate::zip::DEFAULT_MAX_MEMBER_BYTES, max_header_size = crate::npy::DEFAULT_MAX_HEADER_BYTES, num_threads = None))]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        verify_crc: bool,
        max_member_bytes: u64,
        max_header_size: usize,
        num_threads: Option<usize>,
    ) -> PyResult<Self> {
        let limits = limits(verify_crc, max_member_bytes, max_header_size);
        let set = py.detach(|| NpzSet::open(paths, limits)).py_err(py)?;
        let dtypes = set
            .keys()
            .iter()
            .map(|k| numpy_dtype(py, &k.expect.dtype).map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        Ok(NpzReader {
            set: Arc::new(set),
            dtypes,
            threads: num_threads,
        })
    }

    fn __len__(&self) -> usize {
        self.set.len()
    }

    #[getter]
    fn paths(&self) -> Vec<PathBuf> {
        self.set.paths().to_vec()
    }

    /// How errors name this reader: its first file, and how many more.
    #[getter]
    fn location(&self) -> String {
        self.set.location()
    }

    /// Keys in the first file's member order.
    fn keys(&self) -> Vec<String> {
        self.set.keys().iter().map(|k| k.name.clone()).collect()
    }

    /// `(dtype, shape)` of one sample of `key`.
    fn key_info<'py>(
        &self,
        py: Python<'py>,
        key: &str,
    ) -> PyResult<(Bound<'py, PyArrayDescr>, Bound<'py, PyTuple>)> {
        let k = self.set.key_position(key).py_err(py)?;
        Ok((
            self.dtypes[k].bind(py).clone(),
            PyTuple::new(py, &self.set.keys()[k].expect.shape)?,
        ))
    }

    /// Starts reading samples `idx` of `keys` into `outs` (one array per key); keys, indices
    /// and outputs are checked now, the read runs on the pool.
    fn read_into(
        &self,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        keys: Vec<String>,
        outs: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<PendingRead> {
        let idx = idx.as_slice()?.to_vec();
        if keys.len() != outs.len() {
            return Err(invalid_argument(py, "one output array per key is needed"));
        }
        let positions = keys
            .iter()
            .map(|k| self.set.key_position(k))
            .collect::<Result<Vec<_>, _>>()
            .py_err(py)?;
        resolve_indices(&idx, self.set.len(), &self.set.location()).py_err(py)?;
        let raws = positions
            .iter()
            .zip(&outs)
            .map(|(&k, out)| {
                output(
                    out,
                    &batch_shape(idx.len(), &self.set.keys()[k].expect.shape),
                    self.dtypes[k].bind(py),
                )
            })
            .collect::<PyResult<Vec<RawOut>>>()?;
        let outputs = Outputs::disjoint(raws).py_err(py)?;
        let set = self.set.clone();
        let keep = outs.into_iter().map(Bound::unbind).collect();
        let work = self.set.work(idx.len(), &positions);
        Ok(submit(py, self.threads, work, keep, move || {
            // SAFETY: `keep` holds the output arrays until the job ends.
            let mut slices = unsafe { outputs.into_slices() };
            set.read_batch(&idx, &positions, &mut slices)
        }))
    }
}

/// Loads a whole NPZ file: `dict[key, ndarray | bytes]`, as `dict(numpy.load(path))`.
#[pyfunction]
#[pyo3(signature = (path, verify_crc = true, max_member_bytes = crate::zip::DEFAULT_MAX_MEMBER_BYTES, max_header_size = crate::npy::DEFAULT_MAX_HEADER_BYTES))]
fn load_npz_file<'py>(
    py: Python<'py>,
    path: PathBuf,
    verify_crc: bool,
    max_member_bytes: u64,
    max_header_size: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let limits = limits(verify_crc, max_member_bytes, max_header_size);
    let (index, contents) = py
        .detach(|| {
            let index = ZipIndex::open(path, limits)?;
            let contents =
                pool::install_sized(None, npz::load_work(&index), || npz::contents(&index))?;
            Ok::<_, Error>((index, contents))
        })
        .py_err(py)?;
    load_contents(py, &index, &contents, None)
}

/// Loads a whole NPZ archive from `buffer`, a uint8 view of the caller's bytes-like object
/// (`numpy.frombuffer`: zero-copy and contiguous). Stored, aligned arrays are zero-copy,
/// read-only views of it; compressed ones are inflated in parallel.
#[pyfunction]
#[pyo3(signature = (buffer, verify_crc = true, max_member_bytes = crate::zip::DEFAULT_MAX_MEMBER_BYTES, max_header_size = crate::npy::DEFAULT_MAX_HEADER_BYTES))]
fn load_npz_buffer<'py>(
    py: Python<'py>,
    buffer: PyReadonlyArray1<'py, u8>,
    verify_crc: bool,
    max_member_bytes: u64,
    max_header_size: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let bytes = buffer.as_slice()?;
    let ptr = bytes.as_ptr();
    let limits = limits(verify_crc, max_member_bytes, max_header_size);
    let (index, contents) = py
        .detach(|| {
            let index = ZipIndex::from_bytes("<buffer>", bytes, limits)?;
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
fn load_contents<'py, S: Source>(
    py: Python<'py>,
    index: &ZipIndex<S>,
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
            Content::Array {
                key, header, data, ..
            } => {
                let dtype = numpy_dtype(py, &header.dtype)?;
                if let (Some((buffer, base)), true) = (in_memory, data.is_stored()) {
                    let offset = data.data_start as usize + header.data_offset;
                    let align = dtype.alignment().max(1);
                    let count: usize = header.shape.iter().product();
                    if (base + offset) % align == 0 && count > 0 && dtype.itemsize() > 0 {
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
                    py.detach(|| index.read_into(*member, buf)).py_err(py)
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
