//! `Reader`: the one binding of every format's batch reads. It converts arguments (indices
//! resolved once, output arrays checked), releases the GIL for the read (which runs on the
//! pool, or inline when tiny) and maps errors; the engine does the rest. Format constructors
//! (`open_npy`, `open_npz`, `ZipArchive.samples`, `HDF5File.reader`) make one.

use std::sync::{Arc, Mutex};

use numpy::{PyArrayDescr, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::array::{batch_shape, numpy_dtype, output, Outputs, RawOut};
use super::detached::Detached;
use super::errors::{invalid_argument, IntoPyResult};
use super::pending::{submit, PendingRead};
use crate::batch::pool::Work;
use crate::batch::{pool, Batches, RaggedBatch, RaggedKind, Rows};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Reader>()?;
    m.add_function(wrap_pyfunction!(read_together, m)?)?;
    m.add_class::<RaggedResult>()?;
    Ok(())
}

/// Batch reads of one index, or of shards as one (see `packread._reader.ArrayReader`).
#[pyclass(module = "packread._packread", frozen)]
pub struct Reader {
    index: Detached<Arc<dyn Batches>>,
    /// Each array's numpy dtype: a fixed array's, or a ragged array's element type.
    dtypes: Vec<Py<PyArrayDescr>>,
}

impl Reader {
    /// The binding of `index`: its arrays' numpy dtypes are built once, here.
    pub fn new(py: Python<'_>, index: Arc<dyn Batches>) -> PyResult<Reader> {
        let dtypes = index
            .arrays()
            .iter()
            .map(|a| {
                let dtype = a.ragged.as_ref().map_or(&a.dtype, |r| &r.dtype);
                numpy_dtype(py, dtype).map(Bound::unbind)
            })
            .collect::<PyResult<_>>()?;
        Ok(Reader {
            index: Detached::new(index),
            dtypes,
        })
    }

    /// The binding of `index` with the numpy dtypes its arrays are viewed as (raw bytes a
    /// caller gave a dtype for).
    pub fn with_dtypes(index: Arc<dyn Batches>, dtypes: Vec<Py<PyArrayDescr>>) -> Reader {
        Reader {
            index: Detached::new(index),
            dtypes,
        }
    }
}

/// How a ragged array's samples are presented in Python (and named in a shards' state).
pub(super) fn kind_name(kind: RaggedKind) -> &'static str {
    match kind {
        RaggedKind::Values => "array",
        RaggedKind::Bytes => "bytes",
        RaggedKind::Text => "unicode",
        RaggedKind::Images => "images",
        RaggedKind::Utf8 => "text",
        RaggedKind::Json => "json",
        RaggedKind::Arrays => "arrays",
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

    /// `[(name, dtype, sample shape, ragged)]` of the arrays every sample holds: `ragged` is
    /// `None` for a fixed-size array, else how its samples read (`"array"`, `"bytes"`,
    /// `"unicode"`, `"images"`), its dtype then the elements' and its shape `None` where
    /// samples differ.
    fn arrays<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = self
            .index
            .arrays()
            .iter()
            .zip(&self.dtypes)
            .map(|(a, d)| {
                Ok(match &a.ragged {
                    None => (
                        a.name.clone(),
                        d.bind(py).clone(),
                        PyTuple::new(py, &a.shape)?,
                        None,
                    ),
                    Some(r) => (
                        a.name.clone(),
                        d.bind(py).clone(),
                        PyTuple::new(py, &r.shape)?,
                        Some(kind_name(r.kind)),
                    ),
                })
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
        Ok(ReadInto::prepare(self, py, idx, arrays, outs, epoch)?.submit(py))
    }

    /// Starts reading samples `idx` of the ragged array at position `array` on the pool (their
    /// sizes are known only from the bytes, so the read allocates): wait on the returned read,
    /// then take the result.
    #[pyo3(signature = (idx, array, epoch = 0))]
    fn read_ragged(
        &self,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        array: usize,
        epoch: u64,
    ) -> PyResult<(PendingRead, RaggedResult)> {
        let rows = Rows::resolve(idx.as_slice()?, self.index.len(), &self.index.location())
            .py_err(py)?
            .in_epoch(epoch);
        crate::batch::check_ragged(self.index.arrays(), &self.index.location(), array)
            .py_err(py)?;
        let slot: Arc<Mutex<Option<RaggedBatch>>> = Arc::default();
        let (index, theirs) = (Arc::clone(&self.index), slot.clone());
        // The sizes are only known from the bytes: always on the pool.
        let work = crate::batch::Work::new(usize::MAX, u64::MAX);
        let read = submit(py, index.threads(), work, Vec::new(), move || {
            let batch = index.read_ragged(&rows, array)?;
            *theirs.lock().unwrap_or_else(|e| e.into_inner()) = Some(batch);
            Ok(())
        });
        Ok((read, RaggedResult { slot }))
    }
}

/// The samples a `read_ragged` read, once it has finished.
#[pyclass(module = "packread._packread", frozen)]
pub struct RaggedResult {
    slot: Arc<Mutex<Option<RaggedBatch>>>,
}

#[pymethods]
impl RaggedResult {
    /// `(storage, nbytes, offsets, shapes)`: the elements' bytes are the first `nbytes` bytes
    /// of `storage` (uint64, so that any element type can view it aligned), sample `k` is
    /// elements `offsets[k]:offsets[k + 1]`, of shape `shapes[k]` where samples have shapes
    /// of their own (images; else `None`). Given once, after the read has finished.
    #[allow(clippy::type_complexity)]
    fn take<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(
        Bound<'py, PyAny>,
        usize,
        Bound<'py, PyAny>,
        Option<Vec<Vec<usize>>>,
    )> {
        let batch = super::pending::take_finished(py, &self.slot)?;
        let offsets: Vec<i64> = batch.offsets.iter().map(|&o| o as i64).collect();
        let shapes = (!batch.shapes.is_empty()).then_some(batch.shapes);
        Ok((
            numpy::PyArray1::from_vec(py, batch.storage).into_any(),
            batch.nbytes,
            numpy::PyArray1::from_vec(py, offsets).into_any(),
            shapes,
        ))
    }
}

/// One read into given arrays, checked and ready to run: `Reader.read_into`'s, or one of
/// `read_together`'s.
struct ReadInto {
    index: Arc<dyn Batches>,
    rows: Rows,
    arrays: Vec<usize>,
    outputs: Outputs,
    /// The output arrays, held until the read ends.
    keep: Vec<Py<PyAny>>,
}

impl ReadInto {
    /// Checks `idx` against `reader`'s samples and `outs` against its arrays `arrays`.
    fn prepare(
        reader: &Reader,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        arrays: Vec<usize>,
        outs: Vec<Bound<'_, PyAny>>,
        epoch: u64,
    ) -> PyResult<ReadInto> {
        let index = Arc::clone(&reader.index);
        let rows = Rows::resolve(idx.as_slice()?, index.len(), &index.location())
            .py_err(py)?
            .in_epoch(epoch);
        if arrays.len() != outs.len() {
            return Err(invalid_argument(py, "one output array per array is needed"));
        }
        let specs = index.arrays();
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
                    reader.dtypes[a].bind(py),
                )
            })
            .collect::<PyResult<Vec<RawOut>>>()?;
        let outputs = Outputs::disjoint(raws).py_err(py)?;
        let keep = outs.into_iter().map(Bound::unbind).collect();
        Ok(ReadInto {
            index,
            rows,
            arrays,
            outputs,
            keep,
        })
    }

    fn work(&self) -> Work {
        let work = self.index.work(self.rows.len(), &self.arrays);
        // A read of object storage waits on the network however small it is: on the pool,
        // so the caller can be interrupted and `batch_async` returns at once.
        if self.index.waits() {
            work.never_inline()
        } else {
            work
        }
    }

    /// Runs the read on this thread (inside the pool, or inline).
    fn run(self) -> crate::Result<()> {
        // SAFETY: the caller holds `keep` (the output arrays) until the job ends.
        let mut slices = unsafe { self.outputs.into_slices() };
        let index = self.index;
        pool::install_with(index.threads(), || {
            index.read(&self.rows, &self.arrays, &mut slices)
        })
    }

    fn submit(mut self, py: Python<'_>) -> PendingRead {
        let work = self.work();
        let threads = self.index.threads();
        let keep = std::mem::take(&mut self.keep);
        submit(py, threads, work, keep, move || self.run())
    }
}

/// One read of `read_together`: `(reader, idx, arrays, outs, epoch)`.
type TogetherRead<'py> = (
    PyRef<'py, Reader>,
    PyReadonlyArray1<'py, i64>,
    Vec<usize>,
    Vec<Bound<'py, PyAny>>,
    u64,
);

/// Starts several reads, each `(reader, idx, arrays, outs, epoch)` as `Reader.read_into`
/// takes them, as one job on the pool (the first reader's), run side by side: the batch of a
/// mixture of sources, whose samples come from several readers, costs one hand-off to the
/// pool and one wait, as a batch of one reader does.
/// Everything is checked before anything runs; the first read that fails ends the job.
#[pyfunction]
fn read_together(py: Python<'_>, reads: Vec<TogetherRead<'_>>) -> PyResult<PendingRead> {
    let mut ready = Vec::with_capacity(reads.len());
    for (reader, idx, arrays, outs, epoch) in reads {
        ready.push(ReadInto::prepare(&reader, py, idx, arrays, outs, epoch)?);
    }
    let threads = ready.first().and_then(|r| r.index.threads());
    let mut work = Work::new(0, 0);
    let mut keep = Vec::new();
    for r in &mut ready {
        let w = r.work();
        work.units = work.units.saturating_add(w.units);
        work.bytes = work.bytes.saturating_add(w.bytes);
        work.waits |= w.waits;
        keep.append(&mut r.keep);
    }
    let mut ready: Vec<Option<ReadInto>> = ready.into_iter().map(Some).collect();
    Ok(submit(py, threads, work, keep, move || {
        // The reads side by side: a thread done with its share of one helps with another's,
        // where reads in turn would each end on one busy thread while the others wait.
        pool::try_for_each_with(threads, &mut ready, |r| {
            r.take().map_or(Ok(()), ReadInto::run)
        })
    }))
}
