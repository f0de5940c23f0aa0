//! The one tokio runtime of a process, made when the first remote request needs it and made
//! again in a forked child.
//!
//! A child of `fork` inherits the parent's runtime as memory only: its worker threads, its
//! reactor and the sockets of every pooled connection belong to the parent. So the runtime is
//! keyed by process id; a child makes its own on first use and never touches (or drops) the
//! inherited one, since dropping would join threads that do not exist in the child. A
//! process that never reads a remote object (a parent that only made a dataset, a DataLoader
//! worker of a local dataset) never starts one.

use std::future::Future;
use std::sync::Mutex;

use tokio::runtime::Runtime;

use crate::error::{Error, ErrorKind, Result};

/// The runtime of the process that made it. Leaked: it lives as long as the process, and a
/// child must not drop its parent's.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// Threads driving requests: they only move bytes between sockets and buffers (decoding is
/// packread's pool's work), so two serve many requests in flight.
const IO_THREADS: usize = 2;

/// This process's runtime, made on first use here.
pub(crate) fn runtime() -> Result<&'static Runtime> {
    let pid = std::process::id();
    // A poisoned lock only means a thread panicked while holding it; the slot is still valid.
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = *slot {
        if owner == pid {
            return Ok(rt);
        }
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
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// Runs `fut` on the runtime and waits for it on this thread. The future is spawned rather
/// than driven here, so the wait works from any thread, also one inside another runtime.
pub(crate) fn block_on<T: Send + 'static>(
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let handle = runtime()?.spawn(fut);
    futures::executor::block_on(handle).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            "",
            format!("a remote request did not finish: {e}"),
        )
    })?
}
