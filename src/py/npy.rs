//! Bindings for NPY: `load_npy_file`, `parse_npy_buffer` and `NpyReader`.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArrayDescr, PyArrayDescrMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::array::{batch_shape, empty, fresh_bytes, numpy_dtype, output, Outputs};
use super::errors::IntoPyResult;
use super::pending::{submit, PendingRead};
use crate::npy::{self, Limits, NpySet};
use crate::plan::resolve_indices;
use crate::pool;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_npy_file, m)?)?;
    m.add_function(wrap_pyfunction!(parse_npy_buffer, m)?)?;
    m.add_class::<NpyReader>()?;
    Ok(())
}

fn limits(max_header_size: usize) -> Limits {
    Limits {
        max_header_bytes: max_header_size,
    }
}

/// Reads a whole `.npy` file into a new array (Fortran-ordered if the file is).
#[pyfunction]
#[pyo3(signature = (path, max_header_size = npy::DEFAULT_MAX_HEADER_BYTES))]
fn load_npy_file<'py>(
    py: Python<'py>,
    path: PathBuf,
    max_header_size: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let limits = limits(max_header_size);
    let (header, stamp, start) = py
        .detach(|| npy::read_file_start(&path, &limits))
        .py_err(py)?;
    let dtype = numpy_dtype(py, &header.dtype)?;
    let arr = empty(py, &header.shape, &dtype, header.fortran_order)?;
    let out = Outputs::one(fresh_bytes(&arr)?);
    py.detach(move || {
        // SAFETY: `arr` is alive on this frame and nothing else knows it yet.
        let out = unsafe { out.into_slice() };
        npy::read_file_data(&path, &header, stamp, &start, out)
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
    let align = dtype.alignment().max(1);
    let aligned = (ptr as usize + header.data_offset) % align == 0;
    (
        dtype,
        header.fortran_order,
        PyTuple::new(py, &header.shape)?,
        header.data_offset,
        aligned,
    )
        .into_pyobject(py)
}

/// Many same-shape `.npy` files read as one stacked batch. See `packread.NpyReader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct NpyReader {
    set: Arc<NpySet>,
    dtype: Py<PyArrayDescr>,
    threads: Option<usize>,
}

#[pymethods]
impl NpyReader {
    #[new]
    #[pyo3(signature = (paths, max_header_size = npy::DEFAULT_MAX_HEADER_BYTES, num_threads = None))]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        max_header_size: usize,
        num_threads: Option<usize>,
    ) -> PyResult<Self> {
        let limits = limits(max_header_size);
        let set = py
            .detach(|| pool::install_with(num_threads, || NpySet::open(paths, &limits)))
            .py_err(py)?;
        let dtype = numpy_dtype(py, set.dtype())?.unbind();
        Ok(NpyReader {
            set: Arc::new(set),
            dtype,
            threads: num_threads,
        })
    }

    fn __len__(&self) -> usize {
        self.set.len()
    }

    /// Shape of one sample.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.set.sample_shape())
    }

    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> Bound<'py, PyArrayDescr> {
        self.dtype.bind(py).clone()
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

    /// Starts reading samples `idx` into `out`, an array of shape `(len(idx),) + shape`;
    /// indices and `out` are checked now, the read runs on the pool.
    fn read_into(
        &self,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<PendingRead> {
        let idx: Vec<i64> = idx.as_array().to_vec();
        resolve_indices(&idx, self.set.len(), &self.set.location()).py_err(py)?;
        let shape = batch_shape(idx.len(), self.set.sample_shape());
        let raw = Outputs::one(output(out, &shape, self.dtype.bind(py))?);
        let set = self.set.clone();
        let work = set.work(idx.len());
        Ok(submit(
            py,
            self.threads,
            work,
            vec![out.clone().unbind()],
            move || {
                // SAFETY: the job holds `out` until it ends.
                let out = unsafe { raw.into_slice() };
                set.read_batch(&idx, out)
            },
        ))
    }
}
