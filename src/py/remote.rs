//! Bindings for object storage: `RemoteObject` (one object, opened), `remote_glob`,
//! `is_url`. Readers take a `RemoteObject` wherever they take a path.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;

use super::errors::{invalid_argument, IntoPyResult};
use crate::remote::{Caches, FirstRead, ObjectStamp, RemoteFile, StoreOptions};
use crate::source::Source;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RemoteObject>()?;
    m.add_function(wrap_pyfunction!(remote_glob, m)?)?;
    m.add_function(wrap_pyfunction!(is_url, m)?)?;
    m.add_function(wrap_pyfunction!(release_runtime, m)?)?;
    m.add_function(wrap_pyfunction!(index_entry_path, m)?)?;
    Ok(())
}

/// Runs `open` on a thread of its own and waits for it with the GIL released, checking for
/// signals every 50 ms: a Ctrl-C during a slow open (requests waiting on a server) raises
/// `KeyboardInterrupt` at once. The open then finishes, or times out, in the background, and
/// its result is dropped.
pub(super) fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    open: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> PyResult<T> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("packread-open".into())
        .spawn(move || {
            // The receiver is gone when the caller was interrupted: nothing to tell.
            let _ = tx.send(open());
        })
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("cannot start a thread: {e}")))?;
    // In a mutex only so that the wait may run without the GIL (a receiver is not `Sync`).
    let rx = std::sync::Mutex::new(rx);
    let wait = || {
        rx.lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv_timeout(std::time::Duration::from_millis(50))
    };
    loop {
        match py.detach(wait) {
            Ok(result) => return result.py_err(py),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "packread's open thread ended without a result",
                ))
            }
        }
    }
}

/// One object in object storage, opened: its URL, size and ETag, and the client reading it.
///
/// >>> from packread._packread import RemoteObject
/// >>> obj = RemoteObject("s3://bucket/train.h5", [], "head", 1 << 16, None)  # doctest: +SKIP
/// >>> obj.size > 0  # doctest: +SKIP
/// True
#[pyclass(module = "packread._packread", frozen)]
pub struct RemoteObject {
    pub(super) file: Arc<RemoteFile>,
}

fn first_read(py: Python<'_>, first: &str, n: u64) -> PyResult<FirstRead> {
    match first {
        "head" => Ok(FirstRead::Head(n)),
        "tail" => Ok(FirstRead::Tail(n)),
        other => Err(invalid_argument(
            py,
            format!("first must be 'head' or 'tail', not {other:?}"),
        )),
    }
}

#[pymethods]
impl RemoteObject {
    /// Opens `url` with `options` (pairs of strings): one request for its first (`"head"`)
    /// or last (`"tail"`) `n` bytes, which also gives its size and ETag.
    ///
    /// >>> RemoteObject("https://host/data.npy", [], "head", 4096, None).url  # doctest: +SKIP
    /// 'https://host/data.npy'
    #[new]
    #[pyo3(signature = (url, options, first, n, cache_dir, data_cache = None))]
    fn new(
        py: Python<'_>,
        url: String,
        options: Vec<(String, String)>,
        first: &str,
        n: u64,
        cache_dir: Option<PathBuf>,
        data_cache: Option<(PathBuf, u64)>,
    ) -> PyResult<Self> {
        let first = first_read(py, first, n)?;
        let caches = Caches {
            index: cache_dir,
            data: data_cache,
        };
        let file = interruptible(py, move || {
            RemoteFile::open(&url, StoreOptions(options), first, &caches)
        })?;
        Ok(RemoteObject {
            file: Arc::new(file),
        })
    }

    /// The object as opened before (`size`, `etag`, `modified`: its Last-Modified time in
    /// seconds): no request until a read.
    ///
    /// >>> from packread._packread import RemoteObject
    /// >>> RemoteObject.restore("s3://b/k.zip", [], 1024, '"e"', None).size
    /// 1024
    #[staticmethod]
    #[pyo3(signature = (url, options, size, etag, cache_dir, data_cache = None, modified = None))]
    #[allow(clippy::too_many_arguments)] // the stamp's parts and the caches, as pickled
    fn restore(
        py: Python<'_>,
        url: String,
        options: Vec<(String, String)>,
        size: u64,
        etag: Option<String>,
        cache_dir: Option<PathBuf>,
        data_cache: Option<(PathBuf, u64)>,
        modified: Option<i64>,
    ) -> PyResult<Self> {
        let stamp = ObjectStamp {
            len: size,
            etag,
            modified,
        };
        let caches = Caches {
            index: cache_dir,
            data: data_cache,
        };
        let file = RemoteFile::restore(&url, StoreOptions(options), stamp, &caches).py_err(py)?;
        Ok(RemoteObject {
            file: Arc::new(file),
        })
    }

    /// The URL.
    #[getter]
    fn url(&self) -> String {
        self.file.url().to_string()
    }

    /// Size in bytes when opened.
    #[getter]
    fn size(&self) -> u64 {
        self.file.len()
    }

    /// The ETag when opened (`None` if the server gives none).
    #[getter]
    fn etag(&self) -> Option<String> {
        self.file.stamp().etag.clone()
    }

    /// The Last-Modified time when opened, in seconds since 1970 (`None` if the server gives
    /// none).
    #[getter]
    fn modified(&self) -> Option<i64> {
        self.file.stamp().modified
    }

    /// `(requests, bytes)` fetched so far through this object.
    ///
    /// >>> from packread._packread import RemoteObject
    /// >>> RemoteObject.restore("s3://b/k.zip", [], 1024, None, None).fetched()
    /// (0, 0)
    fn fetched(&self) -> (u64, u64) {
        self.file.fetched()
    }

    /// The storage options it was opened with, as `(key, value)` pairs.
    #[getter]
    fn options(&self) -> Vec<(String, String)> {
        self.file.options().0.clone()
    }

    /// The index cache's folder, or `None` when there is none.
    #[getter]
    fn cache_dir(&self) -> Option<PathBuf> {
        self.file.caches().index
    }

    /// The data cache's folder and bound (`cache_dir=`, `cache_bytes`), or `None`.
    #[getter]
    fn data_cache(&self) -> Option<(PathBuf, u64)> {
        self.file.caches().data
    }

    /// Whether the metadata read so far all came from the on-disk index cache.
    #[getter]
    fn index_hit(&self) -> bool {
        self.file.index_hit()
    }
}

/// The objects matching a glob URL (`s3://bucket/train_*.h5`), sorted.
///
/// >>> from packread._packread import remote_glob
/// >>> remote_glob("s3://bucket/shards/train_*.h5", [])  # doctest: +SKIP
/// ['s3://bucket/shards/train_000.h5', 's3://bucket/shards/train_001.h5']
#[pyfunction]
fn remote_glob(
    py: Python<'_>,
    pattern: String,
    options: Vec<(String, String)>,
) -> PyResult<Vec<String>> {
    interruptible(py, move || {
        crate::remote::glob(&pattern, &StoreOptions(options))
    })
}

/// Whether `s` is a URL packread reads from object storage (`s3://`, `gs://`, `az://`,
/// `abfs://`, `http(s)://`).
///
/// >>> from packread._packread import is_url
/// >>> is_url("s3://bucket/key"), is_url("/data/train.h5")
/// (True, False)
#[pyfunction]
fn is_url(s: &str) -> bool {
    crate::remote::is_url(s)
}

/// Where the index cache under `dir` keeps the entry of the object at `url` of `size` bytes,
/// ETag `etag` and Last-Modified time `modified`: what opening it read (headers, directories,
/// chunk indexes). `packread.ray` ships these files to read tasks on other nodes.
///
/// >>> from packread._packread import index_entry_path
/// >>> index_entry_path("/cache", "s3://b/k.h5", 1024, '"abc"', None).parent.name
/// 'index'
#[pyfunction]
#[pyo3(signature = (dir, url, size, etag, modified))]
fn index_entry_path(
    dir: PathBuf,
    url: &str,
    size: u64,
    etag: Option<String>,
    modified: Option<i64>,
) -> PathBuf {
    let stamp = ObjectStamp {
        len: size,
        etag,
        modified,
    };
    crate::remote::index_cache::entry_path(&dir, url, &stamp)
}

/// Stops packread's I/O runtime and drops its connections when no request is in flight (the
/// next request starts them again): `PackDataset` calls it once it has opened its reader, so
/// the process that forks DataLoader workers has no I/O threads.
///
/// >>> from packread._packread import release_runtime
/// >>> release_runtime()
#[pyfunction]
fn release_runtime(py: Python<'_>) {
    py.detach(crate::remote::runtime::release);
}
