//! A Python binary file object (`io.BytesIO`, an open file, an fsspec file) as a byte source:
//! for the filesystems packread's own object storage does not speak (HF Hub, SFTP, ...).
//!
//! Every read takes the GIL for the object's `seek` and `readinto` (or `read`) calls only, and
//! the reads of one object are serialised (a file object has one position). So a batch from a
//! file object runs its reads one after another, each costing a Python call: nearby reads are
//! merged (see [`Source::coalesce`]) to make fewer of them.

use std::any::Any;
use std::sync::{Arc, Condvar, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyByteArrayMethods, PyBytes};

use crate::error::{Error, ErrorKind, Result};
use crate::source::{Coalesce, Source};

/// Reads of a file object at most this far apart are merged into one call.
const MERGE_GAP: u64 = 256 << 10;
/// A merged read grows to at most this many bytes.
const MERGE_MAX: u64 = 16 << 20;

/// A binary file object, read at offsets by `seek` and `readinto`/`read`.
pub(super) struct FileObject {
    object: Py<PyAny>,
    name: String,
    len: u64,
    readinto: bool,
    /// Serialises reads: `seek` then `readinto` must not interleave with another read's, of
    /// this source or of any other over the same object (two readers of one file object).
    turns: Arc<Turns>,
}

/// The turns of the file object at `address`, shared by every source reading it (the address
/// is the object's identity while a source holds it).
fn turns_of(address: usize) -> Arc<Turns> {
    static ALL: Mutex<Vec<(usize, Weak<Turns>)>> = Mutex::new(Vec::new());
    let mut all = ALL.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|(_, t)| t.strong_count() > 0);
    if let Some(turns) = all
        .iter()
        .find(|(a, _)| *a == address)
        .and_then(|(_, t)| t.upgrade())
    {
        return turns;
    }
    let turns = Arc::new(Turns::default());
    all.push((address, Arc::downgrade(&turns)));
    turns
}

/// One read of a file object at a time, waited for without the GIL: a thread holding the GIL
/// never blocks on a read in progress, whose thread may need the GIL to finish it (a
/// `MutexGuard` cannot be carried out of `Python::detach`, hence this small semaphore).
#[derive(Default)]
struct Turns {
    busy: Mutex<bool>,
    free: Condvar,
}

/// A turn taken; given back when dropped.
struct Turn<'a>(&'a Turns);

impl Turns {
    fn take(&self) -> Turn<'_> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy {
            busy = self.free.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy = true;
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.0.free.notify_one();
    }
}

/// The Python exception `err` as an I/O error of `name`.
fn py_error(py: Python<'_>, name: &str, what: &str, err: PyErr) -> Error {
    let kind = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "exception".into());
    Error::new(
        ErrorKind::Io,
        name,
        format!("the file object's {what} raised {kind}: {}", err.value(py)),
    )
}

impl FileObject {
    /// `object` as a source: it must seek (its length is found by seeking to the end; its
    /// position is put back); named by its `name` attribute when that is a string.
    pub(super) fn open(py: Python<'_>, object: &Bound<'_, PyAny>) -> PyResult<FileObject> {
        let name = object
            .getattr("name")
            .ok()
            .and_then(|n| n.extract::<String>().ok())
            .unwrap_or_else(|| "<file object>".to_string());
        let refuse = |why: String| super::errors::invalid_argument(py, format!("{name}: {why}"));
        if let Ok(seekable) = object.call_method0("seekable") {
            if !seekable.is_truthy()? {
                return Err(refuse(
                    "the file object cannot seek (a pipe or a stream); read it into bytes first"
                        .into(),
                ));
            }
        }
        let position: u64 = object.call_method0("tell")?.extract()?;
        let len: u64 = object.call_method1("seek", (0, 2))?.extract()?;
        object.call_method1("seek", (position,))?;
        let readinto = object.hasattr("readinto")?;
        if !readinto && !object.hasattr("read")? {
            return Err(refuse(
                "the file object has neither readinto nor read".into(),
            ));
        }
        Ok(FileObject {
            object: object.clone().unbind(),
            name,
            len,
            readinto,
            turns: turns_of(object.as_ptr() as usize),
        })
    }

    /// One `seek` and as many `readinto`/`read` calls as it takes to fill `buf`.
    fn read_locked(&self, py: Python<'_>, offset: u64, buf: &mut [u8]) -> Result<()> {
        let object = self.object.bind(py);
        object
            .call_method1("seek", (offset,))
            .map_err(|e| py_error(py, &self.name, "seek", e))?;
        let mut filled = 0;
        while filled < buf.len() {
            let want = buf.len() - filled;
            // Into a bytearray Python owns, then copied: a memoryview of `buf` itself would
            // save the copy, but nothing would stop the object keeping a view of it past this
            // call (and writing into freed memory); the copy is small next to the call.
            let got = if self.readinto {
                let chunk = PyByteArray::new_with(py, want, |_| Ok(()))
                    .map_err(|e| py_error(py, &self.name, "readinto", e))?;
                let n = object
                    .call_method1("readinto", (&chunk,))
                    .and_then(|n| n.extract::<Option<usize>>())
                    .map_err(|e| py_error(py, &self.name, "readinto", e))?
                    .unwrap_or(0)
                    .min(want);
                // SAFETY: no Python code runs while the bytes are copied (the GIL is held).
                let bytes = unsafe { chunk.as_bytes() };
                buf[filled..filled + n].copy_from_slice(&bytes[..n]);
                n
            } else {
                let data = object
                    .call_method1("read", (want,))
                    .map_err(|e| py_error(py, &self.name, "read", e))?;
                let bytes = data.cast::<PyBytes>().map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        &self.name,
                        "the file object's read returned text, not bytes: open it in binary \
                         mode (\"rb\")",
                    )
                })?;
                let bytes = bytes.as_bytes();
                let n = bytes.len().min(want);
                buf[filled..filled + n].copy_from_slice(&bytes[..n]);
                n
            };
            if got == 0 {
                return Err(Error::new(
                    ErrorKind::PastEnd,
                    &self.name,
                    format!(
                        "{} bytes at offset {offset} run past the end of the file object \
                         ({} bytes when opened)",
                        buf.len(),
                        self.len
                    ),
                ));
            }
            filled += got;
        }
        Ok(())
    }
}

impl Source for FileObject {
    fn len(&self) -> u64 {
        self.len
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        Python::attach(|py| {
            let _turn = py.detach(|| self.turns.take());
            self.read_locked(py, offset, buf)
        })
    }

    /// Every read is a Python call or more: nearby reads are better made one.
    fn coalesce(&self) -> Option<Coalesce> {
        Some(Coalesce {
            gap: MERGE_GAP,
            max_len: MERGE_MAX,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
