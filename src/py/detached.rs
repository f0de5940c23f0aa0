//! Core objects dropped with the GIL released. Dropping an HDF5 index closes its libhdf5
//! identifiers under libhdf5's global lock, which a pool thread may hold for as long as a read
//! inside libhdf5 takes (an external data file on a slow or blocking file system). A Python
//! object's last reference often goes away in the garbage collector, on whatever thread runs
//! it: holding the GIL while waiting for that lock would stop every Python thread, and
//! deadlock where the read waits on Python (a FIFO whose writer is a Python thread).

use std::ops::Deref;

use pyo3::prelude::*;

/// `T`, dropped with the GIL released.
pub(super) struct Detached<T: Send>(Option<T>);

impl<T: Send> Detached<T> {
    pub(super) fn new(value: T) -> Detached<T> {
        Detached(Some(value))
    }
}

impl<T: Send> Deref for Detached<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0
            .as_ref()
            .expect("a Detached value is only taken when dropped")
    }
}

impl<T: Send> Drop for Detached<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            // A pyclass is dropped with the GIL held (attach only returns its token here).
            Python::attach(|py| py.detach(move || drop(value)));
        }
    }
}
