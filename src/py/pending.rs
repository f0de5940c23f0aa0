//! `PendingRead`: a batch read queued on packread's pool. Every batch, synchronous or not, is
//! submitted here; `batch` is `batch_async` followed by `wait`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyAny;

use super::errors::to_py;
use crate::batch::pending::{self, Pending, Wait};
use crate::batch::pool::{self, Work};
use crate::error::{Error, ErrorKind, Result};

/// How often a wait comes back for the GIL to let Ctrl-C (and other signals) through.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PendingRead>()?;
    Ok(())
}

/// A read running on packread's pool. `wait` gives its outcome; dropping it unfinished is
/// safe: the arrays it writes into are held by the read itself until it ends.
#[pyclass(module = "packread._packread", frozen)]
pub struct PendingRead {
    pending: Pending<()>,
    /// The outcome once a wait has seen it (`Err` holds the exception to raise again).
    outcome: Mutex<Option<std::result::Result<(), Py<PyAny>>>>,
}

/// The result a finished job left in `slot`, taken once: the read allocated it, so it is
/// only handed to Python after the caller waited on the read.
pub(super) fn take_finished<T>(py: Python<'_>, slot: &Mutex<Option<T>>) -> PyResult<T> {
    slot.lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or_else(|| {
            super::errors::invalid_argument(py, "no finished read to take (wait for it first)")
        })
}

/// Queues `job` on the pool `threads` selects, or runs it now on this thread (the GIL
/// released) when `work` is tiny: the pool hand-off would cost more than the read. Either way
/// the caller gets a handle to wait on; an inline one is already done. `keep` holds the
/// arrays the job writes into: they live until the job has finished, whoever drops the
/// handle first. Queued reads run oldest first, one at a time, each with the whole pool,
/// unless `work` mostly waits on the network (see `pool::spawn_ordered_with`).
pub(super) fn submit(
    py: Python<'_>,
    threads: Option<usize>,
    work: Work,
    keep: Vec<Py<PyAny>>,
    job: impl FnOnce() -> Result<()> + Send + 'static,
) -> PendingRead {
    if work.is_tiny() {
        let result = py.detach(|| pool::run_inline(job));
        drop(keep);
        return PendingRead {
            pending: pending::ready(result),
            outcome: Mutex::new(None),
        };
    }
    let pending = pending::spawn(threads, !work.waits, move || {
        let result = job();
        // Dropped here, on the pool thread, without the GIL: pyo3 defers the decrements to
        // the next time any thread holds the GIL.
        drop(keep);
        result
    });
    PendingRead {
        pending,
        outcome: Mutex::new(None),
    }
}

impl PendingRead {
    fn recorded(&self, py: Python<'_>) -> Option<PyResult<()>> {
        let outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        outcome.as_ref().map(|o| match o {
            Ok(()) => Ok(()),
            Err(exc) => Err(PyErr::from_value(exc.bind(py).clone())),
        })
    }

    fn record(&self, py: Python<'_>, result: Result<()>) -> PyResult<()> {
        let stored = result.map_err(|e| to_py(py, e).into_value(py).into_any());
        let mut outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        *outcome = Some(stored);
        drop(outcome);
        self.recorded(py).expect("just recorded")
    }

    /// Waits for the read (forever with `None`), raising its error, or `TimeoutError`.
    pub fn wait_for(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        if let Some(done) = self.recorded(py) {
            return done;
        }
        let deadline = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => {
                Some(Instant::now() + Duration::from_secs_f64(t.min(1e9)))
            }
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "timeout must be a non-negative number of seconds or None, not {t}"
                )))
            }
        };
        loop {
            let slice = match deadline {
                None => SIGNAL_SLICE,
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(SIGNAL_SLICE),
            };
            match py.detach(|| self.pending.wait(Some(slice))) {
                Wait::Ready(result) => return self.record(py, result),
                Wait::Lost => {
                    return Err(to_py(
                        py,
                        Error::new(
                            ErrorKind::Internal,
                            "",
                            "this batch was started in another process (before a fork) and \
                             cannot finish here; start it again in this process",
                        ),
                    ))
                }
                // Another thread took the result and is recording it.
                Wait::Taken => {
                    if let Some(done) = self.recorded(py) {
                        return done;
                    }
                    py.detach(|| std::thread::sleep(Duration::from_millis(1)));
                }
                Wait::TimedOut => {
                    py.check_signals()?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(PyTimeoutError::new_err(
                            "the batch is still being read".to_string(),
                        ));
                    }
                }
            }
        }
    }
}

#[pymethods]
impl PendingRead {
    /// Whether the read has finished (successfully or not).
    fn done(&self) -> bool {
        self.pending.is_done() || self.pending.is_lost()
    }

    /// Waits for the read to finish and raises its error, if any; `TimeoutError` if it is
    /// still running after `timeout` seconds.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.wait_for(py, timeout)
    }
}

impl Drop for PendingRead {
    fn drop(&mut self) {
        self.pending.cancel();
    }
}
