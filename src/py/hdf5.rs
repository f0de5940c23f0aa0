//! Bindings for HDF5: `HDF5Reader`.

use std::sync::Arc;

use numpy::PyArrayDescr;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use super::array::numpy_dtype;
use super::detached::Detached;
use super::errors::{to_py, IntoPyResult};
use super::options::Dict;
use super::reader::Reader;
use super::source::{opening, source_of};
use crate::batch::Index;
use crate::error::{Error, ErrorKind};
use crate::formats::hdf5::{AttrValue, Hdf5File, VlenKind};

/// Dataset names as UTF-8. A name with a lone surrogate (from `os.fsdecode` of bytes that are
/// not UTF-8) cannot name anything in an HDF5 file: a missing dataset, not an encoding error.
fn dataset_names(py: Python<'_>, at: &str, names: &[Bound<'_, PyString>]) -> PyResult<Vec<String>> {
    names
        .iter()
        .map(|n| {
            n.to_str().map(str::to_owned).map_err(|_| {
                to_py(
                    py,
                    Error::new(
                        ErrorKind::Key,
                        at,
                        format!(
                            "no dataset {:?}: HDF5 names are UTF-8, this one has a lone surrogate",
                            n.to_string_lossy()
                        ),
                    ),
                )
            })
        })
        .collect()
}

/// How a file given as bytes is named in messages.
const MEMORY_NAME: &str = "<HDF5 bytes>";

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HDF5File>()?;
    Ok(())
}

/// One HDF5 file: its datasets' metadata, attributes and variable-length reads, and
/// (`reader`) the batch reader of its fixed-size data. See `packread.HDF5Reader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct HDF5File {
    file: Detached<Arc<Hdf5File>>,
    dtypes: Vec<Py<PyArrayDescr>>,
    reader: Py<Reader>,
}

#[pymethods]
impl HDF5File {
    /// The file at `source` (a path, bytes, an opened object, a file object), read as
    /// `options` say (`datasets`, `cache_bytes`, `in_memory`, `num_threads`).
    #[new]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let d = Dict::new(options)?;
        let mut h5 = super::options::hdf5(&d)?;
        let threads: Option<usize> = d.opt("num_threads")?;
        let source = source_of(py, source, MEMORY_NAME)?;
        if let Some(names) = d.opt::<Vec<Bound<'_, PyString>>>("datasets")? {
            h5.datasets = Some(dataset_names(py, source.name(), &names)?);
        }
        let opened = source.clone();
        let file = opening(py, &source, move || crate::open::hdf5(opened, &h5, threads))?;
        let file = Arc::new(file);
        let reader = Py::new(py, Reader::new(py, file.clone())?)?;
        let dtypes = file
            .datasets()
            .iter()
            .map(|d| numpy_dtype(py, d.dtype()).map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        Ok(HDF5File {
            file: Detached::new(file),
            dtypes,
            reader,
        })
    }

    fn __len__(&self) -> usize {
        self.file.len()
    }

    #[getter]
    fn path(&self) -> String {
        self.file.location()
    }

    /// The batch reader of the file's datasets (one array each, in file order).
    fn reader(&self, py: Python<'_>) -> Py<Reader> {
        self.reader.clone_ref(py)
    }

    /// Dataset paths, in file order.
    fn names(&self) -> Vec<String> {
        self.file
            .datasets()
            .iter()
            .map(|d| d.name().to_string())
            .collect()
    }

    /// Datasets left out when every dataset was asked for: `{path: reason}`.
    fn skipped<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, why) in self.file.skipped() {
            d.set_item(name, why)?;
        }
        Ok(d)
    }

    /// `{"dtype", "shape", "chunks", "filters", "read_path", "vlen", "stored_bytes",
    /// "chunks_written", "chunks_unfiltered"}` of a dataset.
    fn info<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
        let i = self.file.position(name).py_err(py)?;
        let ds = &self.file.datasets()[i];
        let d = PyDict::new(py);
        d.set_item("dtype", self.dtypes[i].bind(py))?;
        d.set_item("shape", PyTuple::new(py, ds.shape())?)?;
        d.set_item(
            "chunks",
            ds.chunks().map(|c| PyTuple::new(py, c)).transpose()?,
        )?;
        let filters = PyList::empty(py);
        for f in ds.filters() {
            filters.append((f.id, f.name.clone(), PyTuple::new(py, &f.params)?))?;
        }
        d.set_item("filters", filters)?;
        d.set_item("read_path", ds.read_path())?;
        let storage = ds.storage();
        d.set_item("stored_bytes", storage.stored_bytes)?;
        d.set_item("chunks_written", storage.chunks_written)?;
        d.set_item("chunks_unfiltered", storage.chunks_unfiltered)?;
        let vlen = match ds.vlen() {
            None => None,
            Some(v) => {
                let info = PyDict::new(py);
                info.set_item("dtype", numpy_dtype(py, &v.base)?)?;
                info.set_item("elem_shape", PyTuple::new(py, &v.elem_shape)?)?;
                let kind = match v.kind {
                    VlenKind::Array => "array",
                    VlenKind::Bytes => "bytes",
                    VlenKind::Unicode => "unicode",
                };
                info.set_item("kind", kind)?;
                Some(info)
            }
        };
        d.set_item("vlen", vlen)?;
        Ok(d)
    }

    /// The attributes of dataset `name` as raw parts, turned into values by `packread._hdf5`:
    /// `(name, "array", dtype, shape, bytes, scalar, text)`, `(name, "strings", values,
    /// shape, scalar)` or `(name, "empty")`.
    fn attrs<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyList>> {
        let i = self.file.position(name).py_err(py)?;
        let out = PyList::empty(py);
        for (key, v) in self.file.datasets()[i].attrs() {
            let item = match v {
                AttrValue::Array {
                    dtype,
                    shape,
                    bytes,
                    scalar,
                    text,
                } => (
                    key,
                    "array",
                    numpy_dtype(py, dtype)?,
                    PyTuple::new(py, shape)?,
                    PyBytes::new(py, bytes),
                    *scalar,
                    *text,
                )
                    .into_pyobject(py)?
                    .into_any(),
                AttrValue::Strings {
                    values,
                    shape,
                    scalar,
                } => (
                    key,
                    "strings",
                    values.clone(),
                    PyTuple::new(py, shape)?,
                    *scalar,
                )
                    .into_pyobject(py)?
                    .into_any(),
                AttrValue::Empty => (key, "empty").into_pyobject(py)?.into_any(),
            };
            out.append(item)?;
        }
        Ok(out)
    }
}
