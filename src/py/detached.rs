//! Core objects dropped with the GIL released. Dropping an HDF5 index closes its libhdf5
//! identifiers under libhdf5's global lock, which a pool thread may hold for as long as a read
//! inside libhdf5 takes (an external data file on a slow or blocking file system). A Python
//! object's last reference often goes away in the garbage collector, on whatever thread runs
//! it: holding the GIL while waiting for that lock would stop every Python thread, and even
//! without the GIL the collecting thread may be the one the read waits on (a FIFO whose writer
//! is that thread). So an index let go while libhdf5 is busy is dropped by a reaper thread.

use std::ops::Deref;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;

/// `T`, dropped with the GIL released, or, while libhdf5 is busy, by a thread of its own.
pub(super) struct Detached<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Detached<T> {
    pub(super) fn new(value: T) -> Detached<T> {
        Detached(Some(value))
    }
}

impl<T: Send + 'static> Deref for Detached<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0
            .as_ref()
            .expect("a Detached value is only taken when dropped")
    }
}

/// Whether dropping an index could wait on a libhdf5 call in progress.
fn library_busy() -> bool {
    #[cfg(feature = "hdf5")]
    return crate::formats::hdf5::library_busy();
    #[cfg(not(feature = "hdf5"))]
    false
}

type Garbage = Box<dyn Send>;

/// The thread that drops what was let go while libhdf5 was busy (started on first use).
fn reaper() -> Option<&'static Mutex<Sender<Garbage>>> {
    static REAPER: OnceLock<Option<Mutex<Sender<Garbage>>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = channel::<Garbage>();
            std::thread::Builder::new()
                .name("packread-reaper".into())
                .spawn(move || rx.into_iter().for_each(drop))
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        let Some(value) = self.0.take() else {
            return;
        };
        // A reader's last reference often goes away in the garbage collector, at any point of
        // any thread; if that thread is the one another thread's libhdf5 call waits on (a
        // FIFO's writer), waiting here for libhdf5's lock would never end. Handed to the
        // reaper instead: the files close once the call in progress has returned.
        let value = if library_busy() {
            match reaper() {
                Some(tx) => match tx
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .send(Box::new(value))
                {
                    Ok(()) => return,
                    Err(back) => back.0,
                },
                None => Box::new(value) as Garbage,
            }
        } else {
            Box::new(value) as Garbage
        };
        // A pyclass is dropped with the GIL held (attach only returns its token here).
        Python::attach(|py| py.detach(move || drop(value)));
    }
}
