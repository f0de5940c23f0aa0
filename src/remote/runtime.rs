//! The one tokio runtime of a process, made when the first remote request needs it and made
//! again in a forked child.
//!
//! A child of `fork` inherits the parent's runtime as memory only: its worker threads, its
//! reactor and the sockets of every pooled connection belong to the parent. So the runtime is
//! keyed by process id; a child makes its own on first use and never touches (or drops) the
//! inherited one, since dropping would join threads that do not exist in the child. A
//! process that never reads a remote object (a parent that only made a dataset, a DataLoader
//! worker of a local dataset) never starts one, and [`release`] stops it again once a process
//! has only opened its readers (a dataset made before a DataLoader forks its workers).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::runtime::Runtime;

use crate::error::{Error, ErrorKind, Result};

/// The runtime of the process that made it. A child never drops its parent's (that would
/// join threads the child does not have): it forgets it.
static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// Threads driving requests: they only move bytes between sockets and buffers (decoding is
/// packread's pool's work), so two serve many requests in flight.
const IO_THREADS: usize = 2;

/// This process's runtime, made on first use here.
pub(crate) fn runtime() -> Result<Arc<Runtime>> {
    let pid = std::process::id();
    // A poisoned lock only means a thread panicked while holding it; the slot is still valid.
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    match slot.take() {
        Some((owner, rt)) if owner == pid => {
            *slot = Some((owner, rt.clone()));
            return Ok(rt);
        }
        Some(parents) => std::mem::forget(parents),
        None => {}
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(IO_THREADS)
        .thread_name("packread-io")
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                "",
                format!("cannot start the I/O runtime: {e}"),
            )
        })?;
    let rt = Arc::new(rt);
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}

/// Stops this process's runtime and drops its clients (their connections belong to it), when
/// no request is in flight: a process that has opened its readers and will now fork
/// DataLoader workers keeps no I/O threads. The next request makes both again.
pub fn release() {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((owner, rt)) = slot.take() else {
        return;
    };
    if owner != pid {
        std::mem::forget(rt);
        return;
    }
    match Arc::try_unwrap(rt) {
        Ok(rt) => {
            super::store::forget_clients();
            rt.shutdown_background();
        }
        // A request is running on another thread: the runtime stays.
        Err(rt) => *slot = Some((owner, rt)),
    }
}

/// Runs `fut` on the runtime and waits for it on this thread. The future is spawned rather
/// than driven here, so the wait works from any thread, also one inside another runtime.
pub(crate) fn block_on<T: Send + 'static>(
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    // Held while the request runs: `release` leaves a runtime with requests in flight alone.
    let rt = runtime()?;
    let handle = rt.spawn(fut);
    let done = futures::executor::block_on(handle);
    drop(rt);
    done.map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            "",
            format!("a remote request did not finish: {e}"),
        )
    })?
}
