//! `Reader`: the one binding of every format's batch reads. It converts arguments (indices
//! resolved once, output arrays checked), releases the GIL for the read (which runs on the
//! pool, or inline when tiny) and maps errors; the engine does the rest. Format constructors
//! (`open_npy`, `open_npz`, `ZipArchive.samples`, `HDF5File.reader`) make one.

use std::sync::Arc;

use numpy::{PyArrayDescr, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::array::{batch_shape, numpy_dtype, output, Outputs, RawOut};
use super::detached::Detached;
use super::errors::{invalid_argument, IntoPyResult};
use super::pending::{submit, PendingRead};
use crate::batch::{pool, read_split, Index, Rows};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Reader>()
}

/// Batch reads of one index (see `packread._reader.ArrayReader`).
#[pyclass(module = "packread._packread", frozen)]
pub struct Reader {
    index: Detached<Arc<dyn Index>>,
    dtypes: Vec<Py<PyArrayDescr>>,
}

impl Reader {
    /// The binding of `index`: its arrays' numpy dtypes are built once, here.
    pub fn new(py: Python<'_>, index: Arc<dyn Index>) -> PyResult<Reader> {
        let dtypes = index
            .arrays()
            .iter()
            .map(|a| numpy_dtype(py, &a.dtype).map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        Ok(Reader {
            index: Detached::new(index),
            dtypes,
        })
    }

    /// The binding of `index` with the numpy dtypes its arrays are viewed as (raw bytes a
    /// caller gave a dtype for).
    pub fn with_dtypes(index: Arc<dyn Index>, dtypes: Vec<Py<PyArrayDescr>>) -> PyResult<Reader> {
        Ok(Reader {
            index: Detached::new(index),
            dtypes,
        })
    }

    /// The index read.
    pub fn index(&self) -> Arc<dyn Index> {
        Arc::clone(&self.index)
    }
}

#[pymethods]
impl Reader {
    fn __len__(&self) -> usize {
        self.index.len()
    }

    /// How errors name the reader: its file, or its first file and how many more.
    #[getter]
    fn location(&self) -> String {
        self.index.location()
    }

    /// `[(name, dtype, sample shape)]` of the arrays every sample holds.
    fn arrays<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = self
            .index
            .arrays()
            .iter()
            .zip(&self.dtypes)
            .map(|(a, d)| {
                Ok((
                    a.name.clone(),
                    d.bind(py).clone(),
                    PyTuple::new(py, &a.shape)?,
                ))
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Starts reading samples `idx` of the arrays at positions `arrays` into `outs` (one
    /// array each, shaped `(len(idx),) + sample shape`); indices and outputs are checked now,
    /// the read runs on the pool (or at once when tiny). `epoch` is what formats with random
    /// augmentation draw from.
    #[pyo3(signature = (idx, arrays, outs, epoch = 0))]
    fn read_into(
        &self,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        arrays: Vec<usize>,
        outs: Vec<Bound<'_, PyAny>>,
        epoch: u64,
    ) -> PyResult<PendingRead> {
        let rows = Rows::resolve(idx.as_slice()?, self.index.len(), &self.index.location())
            .py_err(py)?
            .in_epoch(epoch);
        if arrays.len() != outs.len() {
            return Err(invalid_argument(py, "one output array per array is needed"));
        }
        let specs = self.index.arrays();
        let raws = arrays
            .iter()
            .zip(&outs)
            .map(|(&a, out)| {
                let spec = specs
                    .get(a)
                    .ok_or_else(|| invalid_argument(py, format!("no array {a}")))?;
                output(
                    out,
                    &batch_shape(rows.len(), &spec.shape),
                    self.dtypes[a].bind(py),
                )
            })
            .collect::<PyResult<Vec<RawOut>>>()?;
        let outputs = Outputs::disjoint(raws).py_err(py)?;
        let index = Arc::clone(&self.index);
        let split = index.split(&rows).py_err(py)?;
        let mut work = index.work(rows.len(), &arrays);
        // A read of object storage waits on the network however small it is: on the pool,
        // so the caller can be interrupted and `batch_async` returns at once.
        if index.waits() {
            work = work.never_inline();
        }
        let keep = outs.into_iter().map(Bound::unbind).collect();
        Ok(submit(py, index.threads(), work, keep, move || {
            // SAFETY: `keep` holds the output arrays until the job ends.
            let mut slices = unsafe { outputs.into_slices() };
            pool::install_with(index.threads(), || {
                read_split(&*index, &rows, split, &arrays, &mut slices)
            })
        }))
    }
}
