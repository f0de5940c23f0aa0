//! Bindings for HDF5: `HDF5Reader`.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArrayDescr, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::array::{batch_shape, check_disjoint, numpy_dtype, output, slices, RawOut};
use super::errors::{invalid_argument, IntoPyResult};
use super::pending::{submit, PendingRead};
use crate::hdf5::{Hdf5File, Selection};
use crate::plan::resolve_indices;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HDF5Reader>()?;
    Ok(())
}

/// Datasets of one HDF5 file read as batches along their first axis. See `packread.HDF5Reader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct HDF5Reader {
    file: Arc<Hdf5File>,
    dtypes: Vec<Py<PyArrayDescr>>,
    threads: Option<usize>,
}

#[pymethods]
impl HDF5Reader {
    #[new]
    #[pyo3(signature = (path, datasets = None, num_threads = None, cache_bytes = 32 << 20))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        datasets: Option<Vec<String>>,
        num_threads: Option<usize>,
        cache_bytes: usize,
    ) -> PyResult<Self> {
        let selection = datasets.map_or(Selection::All, Selection::Names);
        let file = py
            .detach(|| Hdf5File::open(path, selection, cache_bytes, num_threads))
            .py_err(py)?;
        let dtypes = file
            .datasets()
            .iter()
            .map(|d| numpy_dtype(py, d.dtype()).map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        Ok(HDF5Reader {
            file: Arc::new(file),
            dtypes,
            threads: num_threads,
        })
    }

    fn __len__(&self) -> usize {
        self.file.len()
    }

    #[getter]
    fn path(&self) -> String {
        self.file.location().to_string()
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

    /// `{"dtype", "shape", "chunks", "filters", "read_path"}` of a dataset.
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
        Ok(d)
    }

    /// Starts reading samples `idx` of datasets `names` into `outs` (one array each); names,
    /// indices and outputs are checked now, the read runs on the pool.
    fn read_into(
        &self,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        names: Vec<String>,
        outs: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<PendingRead> {
        let idx = idx.as_slice()?.to_vec();
        if names.len() != outs.len() {
            return Err(invalid_argument(
                py,
                "one output array per dataset is needed",
            ));
        }
        let which = names
            .iter()
            .map(|n| self.file.position(n))
            .collect::<Result<Vec<_>, _>>()
            .py_err(py)?;
        resolve_indices(&idx, self.file.len())
            .map_err(|e| e.at(self.file.location()))
            .py_err(py)?;
        let raws = which
            .iter()
            .zip(&outs)
            .map(|(&w, out)| {
                let ds = &self.file.datasets()[w];
                output(
                    out,
                    &batch_shape(idx.len(), ds.sample_shape()),
                    self.dtypes[w].bind(py),
                )
            })
            .collect::<PyResult<Vec<RawOut>>>()?;
        check_disjoint(&raws).py_err(py)?;
        let file = self.file.clone();
        let keep = outs.into_iter().map(Bound::unbind).collect();
        Ok(submit(self.threads, keep, move || {
            // SAFETY: the outputs are kept alive by the job until it ends, and are disjoint.
            let mut slices = unsafe { slices(&raws) };
            file.read_batch(&idx, &which, &mut slices)
        }))
    }
}
