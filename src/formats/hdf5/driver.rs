//! libhdf5 opens every file through packread's read-only file driver (`driver.c`, which says
//! why), whose reads come here: a local file's from the reader's own descriptor, an object's
//! from [`RemoteFile::read_meta`] (cached blocks of the object, the on-disk index cache, or a
//! ranged request). Only what libhdf5 reads itself goes this way (the superblock, object
//! headers, the chunk index, and datasets it reads itself); chunks are read by packread's own
//! planner.

use std::ffi::{c_int, c_void, CString};

use hdf5_sys::h5f::{H5Fopen, H5F_ACC_RDONLY};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::H5Pclose;

use super::handle::h5err;
use crate::batch::source::{SharedFile, Source};
use crate::error::{Error, Result};
use crate::remote::RemoteFile;

type ReadFn = unsafe extern "C" fn(*const c_void, u64, usize, *mut c_void) -> c_int;

extern "C" {
    /// A file access property list opening `name` through the driver (driver.c).
    fn packread_vfd_fapl(ctx: *const c_void, name: *const i8, eof: u64, read: ReadFn) -> hid_t;
}

/// What libhdf5 reads a file through.
pub(super) trait DriverFile: Send + Sync {
    /// Length in bytes when opened.
    fn len(&self) -> u64;
    /// Fills `buf` from `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// The error under libhdf5's failure to open, when a read of ours failed first.
    fn failure(&self) -> Option<Error> {
        None
    }
}

impl DriverFile for SharedFile {
    fn len(&self) -> u64 {
        SharedFile::len(self)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_at(0, offset, buf)
    }
}

impl DriverFile for RemoteFile {
    fn len(&self) -> u64 {
        RemoteFile::len(self)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_meta(offset, buf)
    }

    fn failure(&self) -> Option<Error> {
        self.take_failure()
    }
}

/// The driver's read: `ctx` is the `F` being read.
///
/// # Safety
/// `ctx` points to a live `F` (the file's handle keeps it alive while libhdf5 has the file
/// open) and `buf` to `size` writable bytes (libhdf5's buffer).
unsafe extern "C" fn read<F: DriverFile>(
    ctx: *const c_void,
    addr: u64,
    size: usize,
    buf: *mut c_void,
) -> c_int {
    // SAFETY: as the function's contract says.
    let (file, buf) = unsafe {
        (
            &*ctx.cast::<F>(),
            std::slice::from_raw_parts_mut(buf.cast::<u8>(), size),
        )
    };
    // A panic must not unwind into C.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| file.read(addr, buf))) {
        Ok(Ok(())) => 0,
        _ => -1,
    }
}

/// The name libhdf5 knows an open file by, kept alive while it is open (the driver compares
/// the names of files libhdf5 opens against it: an external link to another file is read by
/// that file's name).
pub(super) struct DriverName {
    _name: CString,
}

/// Opens `file` (named `name`: its path, which libhdf5 resolves relative external links and
/// virtual datasets' sources against) with libhdf5 through the driver: the id of the open
/// file, and the name, which must outlive it.
///
/// # Safety
/// libhdf5's lock is held, and `file` outlives the returned file id (closed first).
pub(super) unsafe fn open<F: DriverFile>(
    location: &str,
    name: &str,
    file: &F,
) -> Result<(hid_t, DriverName)> {
    let name = CString::new(name).map_err(|_| h5err(location, "the name holds a NUL byte"))?;
    // SAFETY: lock held (the caller's contract); `file` and `name` outlive the open file.
    let fapl = unsafe {
        packread_vfd_fapl(
            (file as *const F).cast(),
            name.as_ptr(),
            file.len(),
            read::<F>,
        )
    };
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
        // A request that failed (not found, access denied, a timeout) says more than
        // libhdf5's "unable to open file".
        return Err(file.failure().unwrap_or_else(|| {
            let why = hdf5_metno::Error::query()
                .map(|e| e.to_string())
                .unwrap_or_default();
            h5err(location, format!("cannot open as HDF5: {why}"))
        }));
    }
    Ok((id, DriverName { _name: name }))
}
