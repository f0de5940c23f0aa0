//! libhdf5 opens every file through packread's read-only file driver (`driver.c`, which says
//! why), whose reads come here: [`Source::read_meta`] of the file's source (a local file's
//! `pread`, bytes in memory, an object's cached blocks, index cache or ranged requests). Only
//! what libhdf5 reads itself goes this way (the superblock, object headers, the chunk index,
//! and datasets it reads itself); chunks are read by packread's own planner.

use std::ffi::{c_int, c_void, CString};
use std::sync::Arc;

use hdf5_sys::h5f::{H5Fopen, H5F_ACC_RDONLY};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::H5Pclose;

use super::handle::h5err;
use crate::error::{ErrorKind, Result};
use crate::source::Source;

type ReadFn = unsafe extern "C" fn(*const c_void, u64, usize, *mut c_void) -> c_int;

extern "C" {
    /// A file access property list opening `name` through the driver (driver.c).
    fn packread_vfd_fapl(ctx: *const c_void, name: *const i8, eof: u64, read: ReadFn) -> hid_t;
}

/// The driver's read: `ctx` is the `Arc<dyn Source>` being read (a thin pointer to it).
///
/// # Safety
/// `ctx` points to a live `Arc<dyn Source>` (the file's [`DriverFile`] keeps it alive while
/// libhdf5 has the file open) and `buf` to `size` writable bytes (libhdf5's buffer).
unsafe extern "C" fn read(ctx: *const c_void, addr: u64, size: usize, buf: *mut c_void) -> c_int {
    // SAFETY: as the function's contract says.
    let (source, buf) = unsafe {
        (
            &*ctx.cast::<Arc<dyn Source>>(),
            std::slice::from_raw_parts_mut(buf.cast::<u8>(), size),
        )
    };
    // A panic must not unwind into C.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| source.read_meta(addr, buf))) {
        Ok(Ok(())) => 0,
        _ => -1,
    }
}

/// What libhdf5's open file reads through, kept alive while it is open: the source (boxed, so
/// that the driver's context pointer stays valid) and the name it was opened by (the driver
/// compares the names of files libhdf5 opens against it: an external link's target is read by
/// its own name).
pub(super) struct DriverFile {
    _source: Box<Arc<dyn Source>>,
    _name: CString,
}

/// Opens `source` (named `name`: its path or URL, which libhdf5 resolves relative external
/// links and virtual datasets' sources against) with libhdf5 through the driver: the id of the
/// open file, and what must outlive it.
///
/// # Safety
/// libhdf5's lock is held, and the returned [`DriverFile`] outlives the file id (closed
/// first).
pub(super) unsafe fn open(source: &Arc<dyn Source>, name: &str) -> Result<(hid_t, DriverFile)> {
    let location = source.name();
    let name = CString::new(name).map_err(|_| h5err(location, "the name holds a NUL byte"))?;
    let boxed: Box<Arc<dyn Source>> = Box::new(source.clone());
    let ctx: *const Arc<dyn Source> = &*boxed;
    // SAFETY: lock held (the caller's contract); the box and the name outlive the open file.
    let fapl = unsafe { packread_vfd_fapl(ctx.cast(), name.as_ptr(), source.len(), read) };
    if fapl < 0 {
        return Err(h5err(location, "libhdf5 refused packread's file driver"));
    }
    // SAFETY: a valid name and property list; the list is closed once the file is open.
    let id = unsafe {
        let id = H5Fopen(name.as_ptr(), H5F_ACC_RDONLY, fapl);
        H5Pclose(fapl);
        id
    };
    if id < 0 {
        // A read that failed (a request: not found, access denied, a timeout; data shorter
        // than it says) says more than libhdf5's "unable to open file".
        let why = hdf5_metno::Error::query()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let error = h5err(location, format!("cannot open as HDF5: {why}"));
        return Err(source.cause(error).as_damage(ErrorKind::Hdf5));
    }
    Ok((
        id,
        DriverFile {
            _source: boxed,
            _name: name,
        },
    ))
}
