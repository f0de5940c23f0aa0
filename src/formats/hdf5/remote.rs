//! Remote HDF5 files: libhdf5 opens them through packread's file driver
//! (`remote_vfd.c`), whose reads come here and are served by
//! [`RemoteFile::read_meta`]: cached blocks of the object, the on-disk index cache, or a
//! ranged request. Only metadata goes this way (the superblock, object headers, the chunk
//! index, and datasets libhdf5 reads itself); chunks are read by packread's own planner
//! like a local file's, by merged parallel requests.

use std::ffi::{c_int, c_void, CString};
use std::sync::Arc;

use hdf5_sys::h5f::{H5Fopen, H5F_ACC_RDONLY};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::H5Pclose;

use super::handle::h5err;
use crate::error::Result;
use crate::remote::RemoteFile;

type ReadFn = unsafe extern "C" fn(*const c_void, u64, usize, *mut c_void) -> c_int;

extern "C" {
    /// A file access property list opening through the driver (remote_vfd.c).
    fn packread_vfd_fapl(ctx: *const c_void, eof: u64, read: ReadFn) -> hid_t;
}

/// The driver's read: `ctx` is the [`RemoteFile`] being opened.
///
/// # Safety
/// `ctx` points to a live `RemoteFile` (the file's handle keeps it alive while libhdf5 has the
/// file open) and `buf` to `size` writable bytes (libhdf5's buffer).
unsafe extern "C" fn read(ctx: *const c_void, addr: u64, size: usize, buf: *mut c_void) -> c_int {
    // SAFETY: as the function's contract says.
    let (file, buf) = unsafe {
        (
            &*ctx.cast::<RemoteFile>(),
            std::slice::from_raw_parts_mut(buf.cast::<u8>(), size),
        )
    };
    // A panic must not unwind into C.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| file.read_meta(addr, buf))) {
        Ok(Ok(())) => 0,
        _ => -1,
    }
}

/// Opens `file` with libhdf5 through the driver; the id of the open file.
///
/// # Safety
/// libhdf5's lock is held, and `file` outlives the returned file id (closed first).
pub(super) unsafe fn open(location: &str, file: &Arc<RemoteFile>) -> Result<hid_t> {
    let name = CString::new(location).map_err(|_| h5err(location, "URL holds a NUL byte"))?;
    // SAFETY: lock held (the caller's contract); `file` outlives the open file.
    let fapl = unsafe { packread_vfd_fapl(Arc::as_ptr(file).cast(), file.len(), read) };
    if fapl < 0 {
        return Err(h5err(
            location,
            "libhdf5 refused packread's remote file driver",
        ));
    }
    // SAFETY: a valid name and property list; the list is closed once the file is open.
    let id = unsafe {
        let id = H5Fopen(name.as_ptr(), H5F_ACC_RDONLY, fapl);
        H5Pclose(fapl);
        id
    };
    if id < 0 {
        // A request that failed (not found, access denied, a timeout) says more than
        // libhdf5's "unable to open file".
        return Err(file.take_failure().unwrap_or_else(|| {
            let why = hdf5_metno::Error::query()
                .map(|e| e.to_string())
                .unwrap_or_default();
            h5err(location, format!("cannot open as HDF5: {why}"))
        }));
    }
    Ok(id)
}
