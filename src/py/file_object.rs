//! A Python binary file object (`io.BytesIO`, an open file, an fsspec file) as a byte source:
//! for the filesystems packread's own object storage does not speak (HF Hub, SFTP, ...).
//!
//! A local file opened read-only (`open(path, "rb")`: exactly `io.BufferedReader` or
//! `io.FileIO`) is read as a path is, by `pread` on a duplicate of its descriptor: without the
//! GIL, in parallel, and without its position, which a forked child (a `DataLoader` worker)
//! shares with its parent and its siblings: `seek` then `read` in two processes at once would
//! read each other's bytes.
//!
//! Every read takes the GIL for the object's `seek` and `readinto` (or `read`) calls only, and
//! the reads of one object are serialised (a file object has one position). So a batch from a
//! file object runs its reads one after another, each costing a Python call: nearby reads are
//! merged (see [`Source::coalesce`]) to make fewer of them.

use std::any::Any;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::{Arc, Condvar, Mutex, Weak};

use arc_swap::ArcSwap;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyByteArrayMethods, PyBytes};

use crate::error::{Error, ErrorKind, Result};
use crate::source::{Coalesce, LocalFile, Source};

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
    /// The process that opened it, when the object reads an open descriptor (its `fileno()`
    /// answers): a forked child shares that descriptor's position with this process and with
    /// its siblings, so its reads through `seek` and `read` would read theirs.
    descriptor_of: Option<u32>,
    /// Serialises reads: `seek` then `readinto` must not interleave with another read's, of
    /// this source or of any other over the same object (two readers of one file object).
    /// One process's: a child forked while a parent thread held a turn takes its own (see
    /// [`FileObject::turns`]).
    turns: ArcSwap<Turns>,
}

/// The turns of the file object at `address` in this process, shared by every source reading
/// it (the address is the object's identity while a source holds it). Called with the GIL
/// held only, so no other thread holds `ALL` when a thread holding the GIL forks.
fn turns_of(_py: Python<'_>, address: usize) -> Arc<Turns> {
    static ALL: Mutex<Vec<(u32, usize, Weak<Turns>)>> = Mutex::new(Vec::new());
    let pid = std::process::id();
    let mut all = ALL.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|(p, _, t)| *p == pid && t.strong_count() > 0);
    if let Some(turns) = all
        .iter()
        .find(|(_, a, _)| *a == address)
        .and_then(|(_, _, t)| t.upgrade())
    {
        return turns;
    }
    let turns = Arc::new(Turns {
        pid,
        ..Turns::default()
    });
    all.push((pid, address, Arc::downgrade(&turns)));
    turns
}

/// One read of a file object at a time, waited for without the GIL: a thread holding the GIL
/// never blocks on a read in progress, whose thread may need the GIL to finish it (a
/// `MutexGuard` cannot be carried out of `Python::detach`, hence this small semaphore).
#[derive(Default)]
struct Turns {
    /// The process these turns belong to.
    pid: u32,
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

/// Runs `f` with the GIL, from any thread. On a thread Python does not know (a pool thread),
/// `Python::attach` would make a Python thread state and unmake it around every call, and
/// making one takes CPython's runtime lock without the GIL: should another thread fork at that
/// moment, the child waits for that lock forever in CPython 3.10 and 3.11 (their fork handler
/// takes it before making it anew; 3.12 makes it first). So such a thread makes its state once,
/// on its first call, and keeps it (it lives as long as the thread): later calls only take
/// the GIL, which a thread that forks holds. packread's pools live as long as the process (one
/// per size, see `batch::pool`), so the states kept are a few, made once each.
fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    thread_local!(static KEPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if !KEPT.get() {
        // SAFETY: a thread with no Python thread state cannot hold the GIL; `Ensure` makes its
        // state (and takes the GIL), `SaveThread` gives the GIL back and leaves the state
        // registered to this thread, so the `Ensure` inside `Python::attach` finds it. A thread
        // Python made already has a state and is left alone.
        unsafe {
            if pyo3::ffi::PyGILState_GetThisThreadState().is_null() {
                pyo3::ffi::PyGILState_Ensure();
                pyo3::ffi::PyEval_SaveThread();
            }
        }
        KEPT.set(true);
    }
    Python::attach(f)
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

/// `object` as a source: an open read-only regular file by its descriptor, any other binary
/// file object through its methods (see [`FileObject::open`]).
pub(super) fn open(py: Python<'_>, object: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Source>> {
    if let Some(file) = open_descriptor(py, object)? {
        return Ok(Arc::new(file));
    }
    Ok(Arc::new(FileObject::open(py, object)?))
}

/// The open regular file `object` reads, when it is exactly an `io.BufferedReader` or an
/// `io.FileIO` that cannot write (a subclass may change what `read` returns, and a writable
/// buffered file may hold bytes not yet in the file): a duplicate of its descriptor, stamped
/// now. `None` for anything else, read through its methods.
fn open_descriptor(py: Python<'_>, object: &Bound<'_, PyAny>) -> PyResult<Option<LocalFile>> {
    let io = py.import("io")?;
    let kind = object.get_type();
    if !(kind.is(&io.getattr("BufferedReader")?) || kind.is(&io.getattr("FileIO")?)) {
        return Ok(None);
    }
    let (Ok(writable), Ok(fd)) = (
        object.call_method0("writable"),
        object.call_method0("fileno"),
    ) else {
        return Ok(None); // closed: the methods say so when read
    };
    if writable.is_truthy()? {
        return Ok(None);
    }
    let fd: i32 = fd.extract()?;
    // SAFETY: `fd` is the object's open descriptor (the GIL is held, so it cannot be closed
    // meanwhile); F_DUPFD_CLOEXEC makes a new descriptor, owned by the `File` below.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: `dup` was just made and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(dup) };
    if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Ok(None); // a device or a pipe: its methods, which may refuse it
    }
    let name = object
        .getattr("name")
        .ok()
        .and_then(|n| n.extract::<String>().ok())
        .unwrap_or_else(|| format!("<file descriptor {fd}>"));
    LocalFile::from_open(file, name)
        .map(Some)
        .map_err(|e| super::errors::to_py(py, e))
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
        // `seek` returns the new position in io's classes; some file-like objects return None
        // (then `tell` says it).
        let end = object.call_method1("seek", (0, 2))?;
        let len: u64 = if end.is_none() {
            object.call_method0("tell")?.extract()?
        } else {
            end.extract()?
        };
        object.call_method1("seek", (position,))?;
        let readinto = object.hasattr("readinto")?;
        let descriptor_of = object.call_method0("fileno").is_ok().then(std::process::id);
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
            descriptor_of,
            turns: ArcSwap::new(turns_of(py, object.as_ptr() as usize)),
        })
    }

    /// This process's turns. A forked child inherits the parent's, perhaps taken by a parent
    /// thread that does not exist in the child (or with their lock held): it would wait for
    /// them forever, so it takes turns of its own, shared by its sources over the object.
    /// Swapped with the GIL held, so two threads of the child swap one after the other.
    fn turns(&self, py: Python<'_>) -> Arc<Turns> {
        let turns = self.turns.load_full();
        if turns.pid == std::process::id() {
            return turns;
        }
        let own = turns_of(py, self.object.as_ptr() as usize);
        self.turns.store(own.clone());
        own
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
        if self
            .descriptor_of
            .is_some_and(|pid| pid != std::process::id())
        {
            return Err(Error::new(
                ErrorKind::Unsupported,
                &self.name,
                "a file object over an open descriptor is read through its seek and read, and \
                 a forked process (a DataLoader worker) shares that descriptor's position with \
                 the process that opened it and with the other workers, so their reads would \
                 mix: pass the path, or a file opened with open(path, \"rb\") (read by its \
                 descriptor, not its position)",
            ));
        }
        attach(|py| {
            let turns = self.turns(py);
            let _turn = py.detach(|| turns.take());
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
