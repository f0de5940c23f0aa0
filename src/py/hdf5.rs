//! Bindings for HDF5: `HDF5Reader`.

use std::sync::{Arc, Mutex};

use numpy::{PyArrayDescr, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use super::array::numpy_dtype;
use super::detached::Detached;
use super::errors::{invalid_argument, to_py, IntoPyResult};
use super::pending::{submit, PendingRead};
use super::reader::Reader;
use super::source::{opening, source_of};
use crate::batch::pool::Work;
use crate::batch::{Index, Rows};
use crate::error::{Error, ErrorKind};
use crate::formats::hdf5::{AttrValue, Hdf5File, RaggedBatch, Selection, VlenKind};

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
    m.add_class::<RaggedResult>()?;
    Ok(())
}

/// The sequences a `read_ragged` read, once it has finished.
#[pyclass(module = "packread._packread", frozen)]
pub struct RaggedResult {
    slot: Arc<Mutex<Option<RaggedBatch>>>,
}

#[pymethods]
impl RaggedResult {
    /// `(storage, nbytes, offsets)`: the elements' bytes are the first `nbytes` bytes of
    /// `storage` (uint64, so that any element type can view it aligned), sample `k` is
    /// elements `offsets[k]:offsets[k + 1]`. Given once, after the read has finished.
    fn take<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, usize, Bound<'py, PyAny>)> {
        let batch = super::pending::take_finished(py, &self.slot)?;
        let (storage, nbytes, offsets) = batch.into_parts();
        let offsets: Vec<i64> = offsets.into_iter().map(|o| o as i64).collect();
        Ok((
            numpy::PyArray1::from_vec(py, storage).into_any(),
            nbytes,
            numpy::PyArray1::from_vec(py, offsets).into_any(),
        ))
    }
}

/// One HDF5 file: its datasets' metadata, attributes and variable-length reads, and
/// (`reader`) the batch reader of its fixed-size data. See `packread.HDF5Reader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct HDF5File {
    file: Detached<Arc<Hdf5File>>,
    dtypes: Vec<Py<PyArrayDescr>>,
    reader: Py<Reader>,
    threads: Option<usize>,
}

impl HDF5File {
    /// The opened file, shared with readers built on it (encoded images in its rows).
    pub(super) fn file(&self) -> Arc<Hdf5File> {
        Arc::clone(&self.file)
    }
}

#[pymethods]
impl HDF5File {
    #[new]
    #[pyo3(signature = (src, datasets = None, num_threads = None, cache_bytes = crate::formats::hdf5::DEFAULT_CACHE_BYTES, in_memory = false))]
    fn new(
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        datasets: Option<Vec<Bound<'_, PyString>>>,
        num_threads: Option<usize>,
        cache_bytes: usize,
        in_memory: bool,
    ) -> PyResult<Self> {
        let source = source_of(py, src, MEMORY_NAME, in_memory)?;
        let selection = match datasets {
            None => Selection::All,
            Some(names) => Selection::Names(dataset_names(py, source.name(), &names)?),
        };
        let opened = source.clone();
        let file = opening(py, &source, move || {
            Hdf5File::open(opened, selection, cache_bytes, num_threads)
        })?;
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
            threads: num_threads,
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

    /// Starts reading samples `idx` of the variable-length dataset `name` on the pool (their
    /// sizes are only known from the file, so the read allocates): wait on the returned read,
    /// then take the result.
    fn read_ragged(
        &self,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        name: &str,
    ) -> PyResult<(PendingRead, RaggedResult)> {
        let idx = idx.as_slice()?.to_vec();
        let w = self.file.position(name).py_err(py)?;
        if self.file.datasets()[w].vlen().is_none() {
            return Err(invalid_argument(
                py,
                format!("{name} is not variable-length data"),
            ));
        }
        let rows = Rows::resolve(&idx, self.file.len(), &self.file.location()).py_err(py)?;
        let slot: Arc<Mutex<Option<RaggedBatch>>> = Arc::default();
        let (file, theirs) = (Arc::clone(&self.file), slot.clone());
        // The sequences' sizes are only known from the file: always on the pool.
        let work = Work::new(usize::MAX, u64::MAX);
        let read = submit(py, self.threads, work, Vec::new(), move || {
            let batch = file.read_ragged(&rows, w)?;
            *theirs.lock().unwrap_or_else(|e| e.into_inner()) = Some(batch);
            Ok(())
        });
        Ok((read, RaggedResult { slot }))
    }
}
