//! The one owner of libhdf5 identifiers, and the one way a libhdf5 failure becomes an error.

use hdf5_sys::h5::herr_t;
use hdf5_sys::h5i::hid_t;

use crate::error::{Error, ErrorKind};

/// An `HDF5Error` at `location` (the file, or `file:dataset`).
pub(crate) fn h5err(location: &str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Hdf5, location, msg)
}

/// The libhdf5 function that closes an identifier of one kind (`H5Tclose`, `H5Sclose`, ...).
pub(super) type Close = unsafe extern "C" fn(hid_t) -> herr_t;

/// An identifier this code got from libhdf5 (`.0`) and owns, closed once, on drop, by the
/// function that closes its kind (`.1`). A negative identifier (the call that made it failed)
/// is held as it is, so the failure can be checked after wrapping, and never closed.
///
/// Every `Handle` lives inside `with_library` (the HDF5 lock is held when it is dropped).
pub(super) struct Handle(pub(super) hid_t, pub(super) Close);

impl Handle {
    /// Owns `id`, or `None` when it is negative (the call that made it failed).
    pub(super) fn checked(id: hid_t, close: Close) -> Option<Handle> {
        (id >= 0).then_some(Handle(id, close))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: an identifier libhdf5 gave this code, closed nowhere else, with the
            // function of its kind; dropped under the HDF5 lock (see the type's docs).
            unsafe { (self.1)(self.0) };
        }
    }
}
