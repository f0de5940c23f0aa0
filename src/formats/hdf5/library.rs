//! libhdf5 itself: its global lock (with a bounded wait in forked children), the fork
//! handlers that keep a child from inheriting a held lock, the handle on the open file (never
//! closed in a child), and the fallback read of datasets packread does not decode.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use hdf5_sys::h5d::{H5Dget_space, H5Dget_type, H5Dread};
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{H5S_seloper_t, H5Sclose, H5Screate_simple, H5Sselect_hyperslab};
use hdf5_sys::h5t::H5Tclose;

use super::driver::DriverFile;
use super::handle::{h5err, Handle};
use super::Hdf5File;
use crate::error::Result;

extern "C" {
    // Declared here: the binding in hdf5-sys takes a pointer, the C function an unsigned int.
    fn H5PLset_loading_state(plugin_control_mask: std::ffi::c_uint) -> i32;
}

/// The process that first used libhdf5; any other is a forked child.
static LIBRARY_PID: AtomicU32 = AtomicU32::new(0);

/// How long a forked child waits for libhdf5's lock before giving up.
const CHILD_LOCK_WAIT: Duration = Duration::from_secs(2);

/// How long `fork` waits for other threads to leave libhdf5 (see [`at_fork`]).
const FORK_LOCK_WAIT: Duration = Duration::from_secs(1);

/// Whether the fork handler took libhdf5's lock for the fork in progress.
static FORK_HELD: AtomicBool = AtomicBool::new(false);

/// Fork handlers: take libhdf5's lock before `fork` (waiting a little for other threads to
/// leave the library) and release it on both sides, so a child does not inherit a lock held
/// by a thread that does not exist there. A thread stuck in libhdf5 longer than the wait is
/// left alone; the child then gets an error from [`with_library`] rather than a hang.
fn at_fork() {
    extern "C" fn prepare() {
        if let Some(guard) = hdf5_sys::LOCK.try_lock_for(FORK_LOCK_WAIT) {
            std::mem::forget(guard);
            FORK_HELD.store(true, Ordering::SeqCst);
        }
    }
    extern "C" fn release() {
        if FORK_HELD.swap(false, Ordering::SeqCst) {
            // SAFETY: `prepare` took the lock on this very thread (also in the child, where
            // the forking thread is the only one) and forgot its guard.
            unsafe { hdf5_sys::LOCK.force_unlock() };
        }
    }
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: plain function pointers with no captured state.
        unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
    });
}

/// Runs `f` holding libhdf5's global lock. In a forked child the lock may have been held by a
/// parent thread at the moment of the fork, and then it is never released: after a while
/// that is an error, not a hang. Plugin loading is switched off once: the only plugins around
/// (hdf5plugin's) are built against h5py's libhdf5, not the one packread links; packread
/// registers its own decoders instead (see [`super::filters`]).
pub(super) fn with_library<T>(location: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    at_fork();
    let pid = std::process::id();
    let first = LIBRARY_PID
        .compare_exchange(0, pid, Ordering::Relaxed, Ordering::Relaxed)
        .map_or_else(|p| p, |_| pid);
    let _guard = if first == pid {
        hdf5_sys::LOCK.lock()
    } else {
        hdf5_sys::LOCK
            .try_lock_for(CHILD_LOCK_WAIT)
            .ok_or_else(|| {
                h5err(
                    location,
                    "libhdf5 is locked by a thread of the parent process, taken when this process \
                 was forked; open HDF5 readers only in the process that uses them, or use the \
                 'spawn' start method",
                )
            })?
    };
    hdf5_metno::sync::sync(|| {
        static PLUGINS_OFF: std::sync::Once = std::sync::Once::new();
        // SAFETY: lock held; a plain setting of the library.
        PLUGINS_OFF.call_once(|| unsafe {
            H5PLset_loading_state(0);
        });
        // SAFETY: libhdf5's lock is held (we are inside `sync`); registering is idempotent.
        unsafe { super::filters::register() };
        f()
    })
}

/// libhdf5's handle on the file. A forked child never closes it: the parent may have held
/// libhdf5's lock at the moment of the fork, and closing would wait on it forever; what the
/// driver reads through then stays too (leaked), since the unclosed file still points at it.
pub(super) struct LibraryHandle {
    pub(super) file: ManuallyDrop<hdf5_metno::File>,
    /// What libhdf5's driver reads the file through: dropped after the file is closed.
    pub(super) _driver: ManuallyDrop<DriverFile>,
    pub(super) pid: u32,
}

impl Drop for LibraryHandle {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // SAFETY: dropped once, here, the file before what its driver reads through.
            unsafe {
                ManuallyDrop::drop(&mut self.file);
                ManuallyDrop::drop(&mut self._driver);
            }
        }
    }
}

impl Hdf5File {
    /// libhdf5 reads each requested sample, under its lock, in the stored byte order.
    pub(super) fn read_with_library(&self, w: usize, rows: &[usize], out: &mut [u8]) -> Result<()> {
        let ds = &self.datasets[w];
        let at = format!("{}:{}", self.location, ds.name());
        let sb = ds.sample_bytes;
        with_library(&at, || -> Result<()> {
            let h5ds = self
                .h5
                .file
                .dataset(ds.name())
                .map_err(|e| h5err(&at, format!("cannot open dataset: {e}")))?;
            let rank = ds.meta.shape.len();
            let mut mem_dims: Vec<u64> = ds.meta.shape.iter().map(|&d| d as u64).collect();
            mem_dims[0] = 1;
            // SAFETY: valid ids, HDF5 lock held; each read fills exactly `sb` bytes of `out`.
            unsafe {
                let opened = |id, close, what| {
                    Handle::checked(id, close)
                        .ok_or_else(|| h5err(&at, format!("libhdf5 could not make {what}")))
                };
                let ftype = opened(H5Dget_type(h5ds.id()), H5Tclose, "the file type")?;
                let fspace = opened(H5Dget_space(h5ds.id()), H5Sclose, "the dataspace")?;
                let mspace = opened(
                    H5Screate_simple(rank as i32, mem_dims.as_ptr(), std::ptr::null()),
                    H5Sclose,
                    "a memory dataspace",
                )?;
                let (ftype, fspace, mspace) = (ftype.0, fspace.0, mspace.0);
                let mut result = Ok(());
                for (k, &i) in rows.iter().enumerate() {
                    let mut start = vec![0u64; rank];
                    start[0] = i as u64;
                    let ok = H5Sselect_hyperslab(
                        fspace,
                        H5S_seloper_t::H5S_SELECT_SET,
                        start.as_ptr(),
                        std::ptr::null(),
                        mem_dims.as_ptr(),
                        std::ptr::null(),
                    ) >= 0
                        && H5Dread(
                            h5ds.id(),
                            ftype,
                            mspace,
                            fspace,
                            H5P_DEFAULT,
                            out[k * sb..].as_mut_ptr().cast(),
                        ) >= 0;
                    if !ok {
                        let why = hdf5_metno::Error::query()
                            .map(|e| e.to_string())
                            .unwrap_or_default();
                        result = Err(h5err(
                            &at,
                            format!("libhdf5 could not read sample {i}: {why}"),
                        ));
                        break;
                    }
                }
                result
            }
        })
    }
}

/// Whether a thread holds libhdf5's global lock now (a call inside the library, which may
/// block for as long as the file system does: an external data file on a FIFO, a slow mount).
pub fn busy() -> bool {
    hdf5_sys::LOCK.is_locked()
}
