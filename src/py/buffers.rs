//! Recycled batch buffers: the memory a batch is read into comes back when the consumer drops
//! the batch, so the next batch is written into pages that are already touched (about twice
//! the copy speed of fresh pages, which fault in one by one).
//!
//! The rule is numpy's and torch's own reference counting. Every array carved from a buffer
//! has a [`Lease`] as its numpy base; views and tensors made from those arrays
//! (`torch.from_numpy`) keep the arrays, hence the lease, alive. A lease is dropped only when
//! nothing can reach the buffer any more, and only then does the buffer return: a batch the
//! consumer still holds is never written again, however long it is held.
//!
//! Two homes for the buffers:
//! - [`BufferPool`]: one process. Buffers are this module's allocations (or memory that
//!   Python hands it, e.g. page-locked host memory); a dropped lease puts its buffer on the
//!   pool's free list, which keeps at most `keep` of them.
//! - [`SharedSlab`]: a buffer in shared memory that a DataLoader worker writes and the main
//!   process reads. Its first [`SLAB_HEADER`] bytes hold a state word that both processes
//!   update atomically: the worker claims the slab before writing, and the main process's
//!   lease clears the claim when its last view is gone.

use std::alloc::Layout;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use numpy::npyffi::{self, npy_intp, NPY_ARRAY_CARRAY, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::array::{output, RawOut};
use super::errors::invalid_argument;

/// Alignment of every array carved from a buffer (a cache line: no two arrays share one).
const ALIGN: usize = 64;
use crate::slab::SlabState;
pub(super) use crate::slab::SLAB_HEADER;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BufferPool>()?;
    m.add_class::<SharedSlab>()?;
    m.add_class::<Lease>()?;
    m.add_function(wrap_pyfunction!(slab_bytes, m)?)?;
    m.add("SLAB_HEADER", SLAB_HEADER)?;
    Ok(())
}

/// One array of a batch: its shape and numpy dtype.
type Spec<'py> = (Vec<usize>, Bound<'py, PyArrayDescr>);

/// The offsets of `specs`' arrays in one buffer (each [`ALIGN`]ed) and the bytes they span.
fn layout(specs: &[Spec<'_>]) -> PyResult<(Vec<usize>, usize)> {
    let mut offsets = Vec::with_capacity(specs.len());
    let mut end = 0usize;
    for (shape, dtype) in specs {
        let bytes = shape
            .iter()
            .try_fold(dtype.itemsize(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                pyo3::exceptions::PyOverflowError::new_err("a batch buffer of that size")
            })?;
        let start = end.next_multiple_of(ALIGN);
        offsets.push(start);
        end = start + bytes;
    }
    Ok((offsets, end))
}

/// Bytes a buffer needs for arrays of these `(shape, dtype)` pairs, each 64-byte aligned (a
/// shared slab needs `SLAB_HEADER` more, in front).
///
/// >>> import numpy as np
/// >>> from packread._packread import slab_bytes
/// >>> slab_bytes([((2, 3), np.dtype("u1")), ((2,), np.dtype("<i8"))])
/// 80
#[pyfunction]
fn slab_bytes(specs: Vec<Spec<'_>>) -> PyResult<usize> {
    Ok(layout(&specs)?.1)
}

/// A C-contiguous, writeable array of `shape`/`dtype` over `ptr`, whose numpy base is `base`
/// (which must keep the memory alive).
///
/// # Safety
/// `ptr` must point at enough bytes for the array, alive as long as `base` is.
unsafe fn view<'py>(
    base: Bound<'py, PyAny>,
    ptr: *mut u8,
    shape: &[usize],
    dtype: &Bound<'py, PyArrayDescr>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = base.py();
    let mut dims: Vec<npy_intp> = shape.iter().map(|&d| d as npy_intp).collect();
    // SAFETY: numpy's C API, called with the GIL held. NewFromDescr steals the dtype's
    // reference (hence `into_ptr`); the array does not own `ptr` (no OWNDATA), and
    // SetBaseObject steals `base`'s reference, which keeps the memory alive for the array.
    unsafe {
        let arr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            dtype.clone().into_ptr().cast(),
            dims.len() as c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            ptr.cast(),
            NPY_ARRAY_CARRAY,
            std::ptr::null_mut(),
        );
        let arr = Bound::from_owned_ptr_or_err(py, arr)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(py, arr.as_ptr().cast(), base.into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(arr)
    }
}

/// The arrays of `specs` carved from `len` bytes at `ptr`, each with `base` as its numpy base.
///
/// # Safety
/// As [`view`], for `len` bytes.
unsafe fn carve<'py>(
    base: &Bound<'py, PyAny>,
    ptr: *mut u8,
    len: usize,
    specs: &[Spec<'py>],
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let (offsets, total) = layout(specs)?;
    if total > len {
        return Err(invalid_argument(
            base.py(),
            format!("a buffer of {len} bytes cannot hold arrays of {total} bytes"),
        ));
    }
    specs
        .iter()
        .zip(offsets)
        .map(|((shape, dtype), off)| {
            if dtype.itemsize() == 0 {
                return Err(invalid_argument(
                    base.py(),
                    "batch buffers hold arrays of a non-empty dtype",
                ));
            }
            // SAFETY: `off + bytes <= total <= len` bytes at `ptr`, alive with `base`.
            unsafe { view(base.clone(), ptr.add(off), shape, dtype) }
        })
        .collect()
}

/// A buffer's memory: allocated here, or a numpy array of bytes that Python handed over.
enum Memory {
    Heap {
        ptr: NonNull<u8>,
        layout: Layout,
    },
    /// `_array` keeps the memory alive.
    Borrowed {
        _array: Py<PyAny>,
        raw: RawOut,
    },
}

// SAFETY: the heap pointer is owned by this value alone; a borrowed array is only touched
// (dropped) with the GIL held, and its bytes are reached only through a lease.
unsafe impl Send for Memory {}

impl Memory {
    fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Heap { ptr, .. } => ptr.as_ptr(),
            Memory::Borrowed { raw, .. } => raw.ptr(),
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Memory::Heap { ptr, layout } = self {
            // SAFETY: allocated in `Buffer::heap` with this layout, freed once.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), *layout) };
        }
    }
}

/// A buffer of at least `cap` bytes.
struct Buffer {
    memory: Memory,
    cap: usize,
}

impl Buffer {
    /// `cap` bytes from the allocator, uninitialised (as `numpy.empty`): the pages are touched
    /// by the first batch written into them, and stay touched while the pool keeps them.
    fn heap(cap: usize) -> PyResult<Buffer> {
        let layout = Layout::from_size_align(cap.max(1), 4096)
            .map_err(|_| pyo3::exceptions::PyMemoryError::new_err("batch buffer size"))?;
        // SAFETY: a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) }).ok_or_else(|| {
            pyo3::exceptions::PyMemoryError::new_err(format!(
                "cannot allocate a batch buffer of {cap} bytes"
            ))
        })?;
        Ok(Buffer {
            memory: Memory::Heap { ptr, layout },
            cap,
        })
    }
}

struct PoolInner {
    free: Mutex<Vec<Buffer>>,
    keep: usize,
    /// `allocate(nbytes)` -> a writeable, C-contiguous uint8 numpy array of at least `nbytes`
    /// (page-locked memory, say); `None`: this module allocates.
    allocate: Option<Py<PyAny>>,
    allocated: AtomicU64,
    reused: AtomicU64,
}

impl PoolInner {
    /// A free buffer of at least `bytes` (the smallest that fits), or a new one.
    fn take(&self, py: Python<'_>, bytes: usize) -> PyResult<Buffer> {
        {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.cap >= bytes)
                .min_by_key(|(_, b)| b.cap)
                .map(|(i, _)| i);
            if let Some(i) = best {
                self.reused.fetch_add(1, Ordering::Relaxed);
                return Ok(free.swap_remove(i));
            }
        }
        self.allocated.fetch_add(1, Ordering::Relaxed);
        let Some(allocate) = &self.allocate else {
            return Buffer::heap(bytes);
        };
        let array = allocate.bind(py).call1((bytes,))?;
        let raw = output_bytes(&array)?;
        if raw.len() < bytes {
            return Err(invalid_argument(
                py,
                format!("allocate({bytes}) returned an array of {} bytes", raw.len()),
            ));
        }
        Ok(Buffer {
            cap: raw.len(),
            memory: Memory::Borrowed {
                _array: array.unbind(),
                raw,
            },
        })
    }

    /// Takes a buffer back; beyond `keep` free buffers, the smallest goes.
    fn give_back(&self, buffer: Buffer) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(buffer);
        if free.len() > self.keep {
            let smallest = free
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.cap)
                .map(|(i, _)| i)
                .expect("not empty");
            let gone = free.swap_remove(smallest);
            drop(free);
            drop(gone);
        }
    }
}

/// The bytes of a writeable, C-contiguous numpy array of bytes, any shape.
fn output_bytes(array: &Bound<'_, PyAny>) -> PyResult<RawOut> {
    let py = array.py();
    let len = array
        .getattr("nbytes")
        .and_then(|n| n.extract::<usize>())
        .map_err(|_| invalid_argument(py, "batch buffer memory must be a numpy.ndarray"))?;
    let u8 = numpy::dtype::<u8>(py);
    output(array, &[len], &u8).or_else(|_| {
        // Any shape of bytes will do, viewed flat.
        let flat = array.call_method1("reshape", (PyTuple::new(py, [-1i64])?,))?;
        output(&flat, &[len], &u8)
    })
}

/// A pool of batch buffers, recycled by reference counting.
///
/// ``arrays(specs)`` returns new arrays for one batch, carved from one buffer: a free buffer
/// that fits, else a new one. When every array (and every view or tensor made from them) is
/// gone, the buffer returns to the pool, which keeps at most ``keep`` free buffers.
/// ``allocate(nbytes)``, if given, supplies each new buffer as a writeable uint8 numpy array
/// (page-locked memory, say); the pool keeps it alive.
///
/// >>> import numpy as np
/// >>> from packread._packread import BufferPool
/// >>> pool = BufferPool(keep=2)
/// >>> a, = pool.arrays([((4, 3), np.dtype("f4"))])
/// >>> a.shape, a.dtype, a.flags.writeable
/// ((4, 3), dtype('float32'), True)
/// >>> del a
/// >>> b, = pool.arrays([((4, 3), np.dtype("f4"))])
/// >>> pool.stats()["reused"]
/// 1
#[pyclass(module = "packread._packread", frozen)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

#[pymethods]
impl BufferPool {
    #[new]
    #[pyo3(signature = (keep, allocate = None))]
    fn new(keep: usize, allocate: Option<Py<PyAny>>) -> BufferPool {
        BufferPool {
            inner: Arc::new(PoolInner {
                free: Mutex::new(Vec::new()),
                keep,
                allocate,
                allocated: AtomicU64::new(0),
                reused: AtomicU64::new(0),
            }),
        }
    }

    /// New arrays of these ``(shape, dtype)`` pairs, from one recycled buffer.
    fn arrays<'py>(
        &self,
        py: Python<'py>,
        specs: Vec<Spec<'py>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let (_, total) = layout(&specs)?;
        let buffer = self.inner.take(py, total)?;
        let (ptr, cap) = (buffer.memory.ptr(), buffer.cap);
        let lease = Bound::new(
            py,
            Lease {
                home: Mutex::new(Some(Home::Pool {
                    buffer,
                    pool: self.inner.clone(),
                })),
            },
        )?
        .into_any();
        // SAFETY: the lease owns the buffer (`cap` bytes at `ptr`) until it is dropped.
        unsafe { carve(&lease, ptr, cap, &specs) }
    }

    /// ``{"allocated", "reused", "free", "free_bytes"}``: buffers made and handed out again
    /// since the pool was made, and those free now.
    fn stats(&self) -> std::collections::HashMap<&'static str, u64> {
        let free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        std::collections::HashMap::from([
            ("allocated", self.inner.allocated.load(Ordering::Relaxed)),
            ("reused", self.inner.reused.load(Ordering::Relaxed)),
            ("free", free.len() as u64),
            ("free_bytes", free.iter().map(|b| b.cap as u64).sum()),
        ])
    }

    /// Frees the buffers the pool keeps (buffers still leased return later, as usual).
    fn clear(&self) {
        let gone = std::mem::take(&mut *self.inner.free.lock().unwrap_or_else(|e| e.into_inner()));
        drop(gone);
    }

    fn __repr__(&self) -> String {
        let free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        format!(
            "BufferPool(keep={}, free={}, allocated={}, reused={})",
            self.inner.keep,
            free.len(),
            self.inner.allocated.load(Ordering::Relaxed),
            self.inner.reused.load(Ordering::Relaxed)
        )
    }
}

/// Where a lease returns its buffer.
enum Home {
    Pool {
        buffer: Buffer,
        pool: Arc<PoolInner>,
    },
    /// A shared slab: the slab's memory (kept alive) and its state word.
    Shared {
        slab: Py<PyAny>,
        state: *const AtomicU32,
    },
}

// SAFETY: `state` points into the memory `slab` keeps alive; it is only used atomically.
unsafe impl Send for Home {}

/// The numpy base of the arrays carved from a recycled buffer: when it goes, the buffer
/// returns to its pool (or its shared slab is released to the worker that wrote it).
#[pyclass(module = "packread._packread", frozen)]
pub struct Lease {
    home: Mutex<Option<Home>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let home = self
            .home
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match home {
            Some(Home::Pool { buffer, pool }) => pool.give_back(buffer),
            Some(Home::Shared { slab, state }) => {
                // SAFETY: `slab` keeps the state word's memory alive until after this.
                // Release: every read of the batch in this process happens before the
                // worker, which claims with Acquire, writes the next batch.
                SlabState::new(unsafe { &*state }).release();
                drop(slab);
            }
            None => {}
        }
    }
}

#[pymethods]
impl Lease {
    fn __repr__(&self) -> String {
        let home = self.home.lock().unwrap_or_else(|e| e.into_inner());
        match &*home {
            Some(Home::Pool { buffer, .. }) => format!("Lease({} bytes, pooled)", buffer.cap),
            Some(Home::Shared { .. }) => "Lease(shared slab)".to_string(),
            None => "Lease(returned)".to_string(),
        }
    }
}

/// A batch buffer in memory shared by a DataLoader worker and the main process (a uint8 numpy
/// view of a shared torch storage, made once per slab). Its first ``SLAB_HEADER`` bytes are a
/// state word, updated atomically by both processes:
///
/// - the worker ``claim()``\ s the slab (only when the main process holds no view of it) before
///   reading a batch into ``arrays(specs)``, and sends it;
/// - the main process, after mapping it once, calls ``registered()``; its ``lease(specs)``
///   arrays hand the slab back to the worker when the last of them (or of the tensors made
///   from them) is gone;
/// - ``evict()`` lets the main process drop its mapping of a slab nobody uses.
///
/// >>> import numpy as np
/// >>> from packread._packread import SharedSlab, SLAB_HEADER
/// >>> slab = SharedSlab(np.zeros(SLAB_HEADER + 64, np.uint8))
/// >>> slab.claim(), slab.claim()
/// (0, -1)
/// >>> a, = slab.lease([((8,), np.dtype("<i8"))])
/// >>> del a
/// >>> slab.claim()
/// 0
#[pyclass(module = "packread._packread", frozen)]
pub struct SharedSlab {
    memory: Py<PyAny>,
    raw: RawOut,
}

// SAFETY: the bytes are only reached through atomics (the state word) and through arrays
// whose lifetime `memory` covers.
unsafe impl Sync for SharedSlab {}
// SAFETY: as above.
unsafe impl Send for SharedSlab {}

impl SharedSlab {
    fn state(&self) -> &AtomicU32 {
        // SAFETY: the constructor checked the memory is at least SLAB_HEADER bytes and
        // 4-byte aligned; `memory` keeps it alive as long as `self`.
        unsafe { &*self.raw.ptr().cast::<AtomicU32>() }
    }

    fn slab(&self) -> SlabState<'_> {
        SlabState::new(self.state())
    }

    fn carve_with<'py>(
        &self,
        base: &Bound<'py, PyAny>,
        specs: &[Spec<'py>],
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        // SAFETY: past the header, the slab's bytes, alive with `memory`, which `base` holds.
        unsafe {
            carve(
                base,
                self.raw.ptr().add(SLAB_HEADER),
                self.raw.len() - SLAB_HEADER,
                specs,
            )
        }
    }
}

#[pymethods]
impl SharedSlab {
    #[new]
    fn new(memory: Bound<'_, PyAny>) -> PyResult<SharedSlab> {
        let py = memory.py();
        let raw = output_bytes(&memory)?;
        // The state word needs 4-byte alignment; the arrays are aligned as the slab is (a
        // shared storage starts on a page).
        if raw.len() < SLAB_HEADER || raw.ptr() as usize % 8 != 0 {
            return Err(invalid_argument(
                py,
                format!("a shared slab needs at least {SLAB_HEADER} bytes, 8-byte aligned"),
            ));
        }
        Ok(SharedSlab {
            memory: memory.unbind(),
            raw,
        })
    }

    /// Claims the slab for writing (worker side): ``-1`` if it is busy (being written, in
    /// flight, or viewed by the main process), else ``1`` if the main process holds a
    /// mapping of it and ``0`` if not.
    fn claim(&self) -> i32 {
        self.slab().claim().map_or(-1, i32::from)
    }

    /// Gives up a claim whose batch was never sent (worker side: the read failed).
    fn unclaim(&self) {
        self.slab().release();
    }

    /// Records that the main process holds a mapping of the slab (main side).
    fn registered(&self) {
        self.slab().register();
    }

    /// Forgets the main process's mapping if no worker has claimed the slab (main side):
    /// ``True`` if the mapping may be dropped now.
    fn evict(&self) -> bool {
        self.slab().evict()
    }

    /// Plain views of the slab for ``specs`` (worker side: the batch is read into them).
    fn arrays<'py>(
        &self,
        py: Python<'py>,
        specs: Vec<Spec<'py>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let base = self.memory.bind(py).clone();
        self.carve_with(&base, &specs)
    }

    /// Views of the slab for ``specs`` that release it to its worker when the last of them
    /// is gone (main side).
    fn lease<'py>(
        &self,
        py: Python<'py>,
        specs: Vec<Spec<'py>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let lease = Bound::new(
            py,
            Lease {
                home: Mutex::new(Some(Home::Shared {
                    slab: self.memory.clone_ref(py),
                    state: std::ptr::from_ref(self.state()),
                })),
            },
        )?
        .into_any();
        self.carve_with(&lease, &specs)
    }

    /// Bytes of the slab (its header included).
    #[getter]
    fn nbytes(&self) -> usize {
        self.raw.len()
    }

    /// The state word: 1 busy, 2 registered with the main process.
    #[getter]
    fn state_word(&self) -> u32 {
        self.slab().load()
    }
}
