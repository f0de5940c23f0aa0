//! Binding for many files as one reader: `ShardSet`. The shards are opened by a Python
//! callable (the format's own reader, with every option it takes), called with the GIL taken
//! from the thread that reads the batch (the pool's, or the caller's for a tiny read, which
//! releases the GIL while it reads): a batch opens its shards group by group, never holding
//! more than `max_open` of them.

use std::io;
use std::sync::Arc;

use numpy::PyArrayDescr;
use pyo3::prelude::*;

use super::detached::Detached;
use super::errors::{invalid_argument, IntoPyResult};
use super::reader::Reader;
use crate::batch::shards::{Opener, Shards};
use crate::batch::{ArraySpec, Index};
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ShardSet>()
}

/// A Python exception raised while opening a shard, as a core error of the same class (so it
/// reaches the caller as the exception the shard's reader raised).
fn from_py(py: Python<'_>, err: PyErr) -> Error {
    let value = err.value(py);
    let message = value
        .str()
        .map(|s| s.to_string())
        .unwrap_or_else(|_| "an error with no message".to_string());
    let class = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    if let (Ok(errno), Ok(filename)) = (
        value.getattr("errno").and_then(|e| e.extract::<i32>()),
        value
            .getattr("filename")
            .and_then(|f| f.extract::<String>()),
    ) {
        return Error::io(filename, io::Error::from_raw_os_error(errno));
    }
    let kind = match class.as_str() {
        "PackreadFileNotFoundError" | "FileNotFoundError" => {
            return Error::io("", io::Error::new(io::ErrorKind::NotFound, message))
        }
        "PackreadPermissionError" | "PermissionError" => {
            return Error::io("", io::Error::new(io::ErrorKind::PermissionDenied, message))
        }
        "PackreadOSError" | "OSError" => return Error::io("", io::Error::other(message)),
        "NpyFormatError" => ErrorKind::NpyFormat,
        "BadZipError" => ErrorKind::BadZip,
        "HDF5Error" => ErrorKind::Hdf5,
        "LimitExceededError" => ErrorKind::LimitExceeded,
        "InconsistentError" => ErrorKind::Inconsistent,
        "InvalidArgumentError" => ErrorKind::InvalidArgument,
        "MissingKeyError" => ErrorKind::Key,
        "IndexOutOfRangeError" => ErrorKind::Index,
        "UnsupportedError" => ErrorKind::Unsupported,
        "DecodeError" => ErrorKind::Decode,
        _ => {
            return Error::new(
                ErrorKind::Internal,
                "",
                format!("opening a shard raised {class}: {message}"),
            )
        }
    };
    Error::new(kind, "", message)
}

/// Shards of one format read as one index (see `packread._shards.ShardedReader`).
#[pyclass(module = "packread._packread", frozen)]
pub struct ShardSet {
    shards: Detached<Arc<Shards>>,
    dtypes: Vec<Py<PyArrayDescr>>,
}

#[pymethods]
impl ShardSet {
    /// Shards `names` of `lengths` samples each, holding `arrays` (`(name, dtype, sample
    /// shape)`), opened by `opener(k)` (which returns the shard's batch `Reader`); `opened`
    /// maps shards already open to their readers. At most `max_open` stay open.
    #[new]
    #[pyo3(signature = (names, lengths, arrays, opener, max_open, opened, num_threads = None))]
    #[allow(clippy::too_many_arguments)] // one per argument of the Python constructor
    fn new(
        py: Python<'_>,
        names: Vec<String>,
        lengths: Vec<usize>,
        arrays: Vec<(String, Bound<'_, PyArrayDescr>, Vec<usize>)>,
        opener: Py<PyAny>,
        max_open: usize,
        opened: Vec<(usize, Bound<'_, Reader>)>,
        num_threads: Option<usize>,
    ) -> PyResult<ShardSet> {
        let mut specs = Vec::with_capacity(arrays.len());
        let mut dtypes = Vec::with_capacity(arrays.len());
        for (name, dtype, shape) in arrays {
            // The core needs the item size only; the reader keeps the numpy dtype given.
            let typestr: String = dtype.getattr("str")?.extract()?;
            let core = DType::from_descr(Literal::Str(typestr))
                .map_err(|e| invalid_argument(py, format!("dtype {dtype}: {e:?}")))?;
            specs.push(ArraySpec {
                name,
                dtype: core,
                shape,
            });
            dtypes.push(dtype.unbind());
        }
        let open: Opener = Box::new(move |k| {
            Python::attach(|py| {
                let reader = opener.bind(py).call1((k,)).map_err(|e| from_py(py, e))?;
                let reader = reader.cast::<Reader>().map_err(|_| {
                    Error::new(
                        ErrorKind::Internal,
                        "",
                        "a shard opener returned something other than a batch reader",
                    )
                })?;
                Ok(reader.get().index())
            })
        });
        let opened = opened
            .into_iter()
            .map(|(k, r)| (k, r.get().index()))
            .filter(|(k, _)| *k < names.len())
            .collect();
        let shards =
            Shards::new(names, &lengths, specs, open, max_open, opened, num_threads).py_err(py)?;
        Ok(ShardSet {
            shards: Detached::new(Arc::new(shards)),
            dtypes,
        })
    }

    fn __len__(&self) -> usize {
        self.shards.len()
    }

    /// Shards open now.
    fn open_count(&self) -> usize {
        self.shards.open_count()
    }

    /// The batch reader of the whole.
    fn reader(&self, py: Python<'_>) -> PyResult<Reader> {
        let dtypes = self.dtypes.iter().map(|d| d.clone_ref(py)).collect();
        let index: Arc<dyn Index> = Arc::clone(&*self.shards) as Arc<dyn Index>;
        Reader::with_dtypes(index, dtypes)
    }
}
