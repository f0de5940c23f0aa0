//! Python objects as byte sources ([`crate::source::Source`]): the one place the binding turns
//! what a user passed (a path, an opened object of object storage, a bytes-like object) into
//! the source a format reads.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::errors::{invalid_argument, IntoPyResult};
use super::remote::RemoteObject;
use crate::source::{LocalFile, Memory, Source};

/// The bytes of a `bytes` object or a numpy `uint8` array, held (the object kept alive) for as
/// long as a reader reads them in place. Python hands other bytes-like objects over as such a
/// view (`numpy.frombuffer`: zero-copy; the stable ABI of Python 3.10 has no buffer protocol).
struct HeldArray {
    _owner: Py<PyAny>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: `ptr` points into the object `_owner` keeps alive: a `bytes` object, immutable, or
// an array, which cannot be resized while referenced from here (numpy refuses while other
// references exist); so the memory stays where it is for this value's life, read-only from
// here.
unsafe impl Send for HeldArray {}
// SAFETY: as for `Send`: only reads go through `ptr`.
unsafe impl Sync for HeldArray {}

impl AsRef<[u8]> for HeldArray {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes from `ptr` are the held array's contiguous data (see the type).
        // Its owner may still write to it (a bytearray, a writeable array): packread reads
        // such bytes as they are at each read, as `numpy.frombuffer` views do.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The bytes of `array` (a C-contiguous 1-D `uint8` array, a view of the caller's bytes-like
/// object), read in place, named `name` in messages.
pub(super) fn array_source(
    py: Python<'_>,
    array: &Bound<'_, PyArray1<u8>>,
    name: &str,
) -> PyResult<Arc<dyn Source>> {
    if !array.is_c_contiguous() {
        return Err(invalid_argument(
            py,
            format!("{name}: the bytes are not contiguous; pass bytes(...) of them"),
        ));
    }
    let len = array.len();
    let ptr = if len == 0 {
        std::ptr::NonNull::dangling().as_ptr()
    } else {
        array.data().cast_const()
    };
    let held = HeldArray {
        _owner: array.clone().into_any().unbind(),
        ptr,
        len,
    };
    Ok(Arc::new(Memory::new(name, Arc::new(held))))
}

/// The source of `obj`: an opened object of object storage, a `uint8` view of a bytes-like
/// object (read in place, named `bytes_name`), a binary file object (read through its `seek`
/// and `readinto`), or a path (a local file, opened now).
pub(super) fn source_of(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    bytes_name: &str,
) -> PyResult<Arc<dyn Source>> {
    if let Ok(remote) = obj.cast::<RemoteObject>() {
        return Ok(remote.get().file.clone());
    }
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        let data = bytes.as_bytes();
        let held = HeldArray {
            _owner: bytes.clone().into_any().unbind(),
            ptr: data.as_ptr(),
            len: data.len(),
        };
        return Ok(Arc::new(Memory::new(bytes_name, Arc::new(held))));
    }
    if let Ok(array) = obj.cast::<PyArray1<u8>>() {
        return array_source(py, array, bytes_name);
    }
    let is_path = obj.is_instance_of::<pyo3::types::PyString>() || obj.hasattr("__fspath__")?;
    if !is_path && obj.hasattr("seek")? && (obj.hasattr("readinto")? || obj.hasattr("read")?) {
        return super::file_object::open(py, obj);
    }
    let path: PathBuf = obj.extract().map_err(|_| {
        invalid_argument(
            py,
            format!(
                "expected a path, an opened object, a bytes-like object or a binary file object, not {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ),
        )
    })?;
    py.detach(|| -> crate::error::Result<Arc<dyn Source>> { Ok(Arc::new(LocalFile::open(path)?)) })
        .py_err(py)
}

/// The source of `obj` (see [`source_of`]) handed to `open`, run as [`opening`] runs it: what
/// every binding that opens a format from one Python object does.
pub(super) fn open_with<T: Send + 'static>(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    bytes_name: &str,
    open: impl FnOnce(Arc<dyn Source>) -> crate::error::Result<T> + Send + 'static,
) -> PyResult<T> {
    let source = source_of(py, obj, bytes_name)?;
    let opened = source.clone();
    opening(py, &source, move || open(opened))
}

/// Runs `open`, which reads `source`: without the GIL, and for a source that waits on a
/// network on a thread of its own, so that Ctrl-C interrupts a slow open (see
/// [`super::remote::interruptible`]).
pub(super) fn opening<T: Send + 'static>(
    py: Python<'_>,
    source: &Arc<dyn Source>,
    open: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> PyResult<T> {
    if source.waits() {
        super::remote::interruptible(py, open)
    } else {
        py.detach(open).py_err(py)
    }
}
