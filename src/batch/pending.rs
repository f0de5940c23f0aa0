//! Reads started now and finished in the background: a job queued on the pool, and the handle
//! its caller waits on (`batch_async` in Python).
//!
//! The handle's state is checked without its lock first (an atomic), and a handle carried into
//! a forked child reports [`Wait::Lost`] without touching the lock at all: the pool thread that
//! would have finished the job does not exist there, and may have held the lock at the fork.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::batch::pool;
use crate::error::{Error, ErrorKind, Result};

/// What waiting on a [`Pending`] gave.
#[derive(Debug)]
pub enum Wait<T> {
    /// The job's result (given out once; later waits report [`Wait::Taken`]).
    Ready(Result<T>),
    /// The job is still running after the timeout.
    TimedOut,
    /// The result was already given out by an earlier wait.
    Taken,
    /// The job was started by another process (this one was forked from it): it never ends
    /// here.
    Lost,
}

enum State<T> {
    Running,
    Ready(Result<T>),
    Taken,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    /// Set once the state is `Ready` (readable without the lock).
    done: AtomicBool,
    /// Set when the handle is dropped: a job that has not started yet is skipped.
    cancelled: AtomicBool,
}

/// A job running on the pool, and its result once it is there.
pub struct Pending<T> {
    shared: Arc<Shared<T>>,
    pid: u32,
}

/// Queues `job` on the pool `threads` selects and returns its handle at once. A panic in the
/// job becomes an [`ErrorKind::Internal`] error rather than unwinding into the pool.
///
/// `ordered` jobs run one after another, oldest first (see [`pool::spawn_ordered_with`]);
/// the others (reads that mostly wait on the network) run as soon as a thread is free.
pub fn spawn<T: Send + 'static>(
    threads: Option<usize>,
    ordered: bool,
    job: impl FnOnce() -> Result<T> + Send + 'static,
) -> Pending<T> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::Running),
        ready: Condvar::new(),
        done: AtomicBool::new(false),
        cancelled: AtomicBool::new(false),
    });
    let theirs = shared.clone();
    let run = move || {
        let result = if theirs.cancelled.load(Ordering::Acquire) {
            drop(job);
            Err(Error::new(ErrorKind::Internal, "", "cancelled"))
        } else {
            catch_unwind(AssertUnwindSafe(job)).unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(Error::new(
                    ErrorKind::Internal,
                    "",
                    format!("a packread read panicked: {what}"),
                ))
            })
        };
        let mut state = theirs.state.lock().unwrap_or_else(|e| e.into_inner());
        *state = State::Ready(result);
        theirs.done.store(true, Ordering::Release);
        drop(state);
        theirs.ready.notify_all();
    };
    if ordered {
        pool::spawn_ordered_with(threads, run);
    } else {
        pool::spawn_with(threads, run);
    }
    Pending {
        shared,
        pid: std::process::id(),
    }
}

/// A handle for a job that already ran (a tiny read done inline on the caller's thread): it
/// is done at once, as a queued job would be once it finished.
pub fn ready<T>(result: Result<T>) -> Pending<T> {
    Pending {
        shared: Arc::new(Shared {
            state: Mutex::new(State::Ready(result)),
            ready: Condvar::new(),
            done: AtomicBool::new(true),
            cancelled: AtomicBool::new(false),
        }),
        pid: std::process::id(),
    }
}

impl<T> Pending<T> {
    /// Whether the job has finished (its result may already have been taken).
    pub fn is_done(&self) -> bool {
        self.shared.done.load(Ordering::Acquire)
    }

    /// Whether this handle belongs to another process (it was inherited through `fork`).
    pub fn is_lost(&self) -> bool {
        std::process::id() != self.pid
    }

    /// Waits up to `timeout` (forever with `None`) for the job's result.
    pub fn wait(&self, timeout: Option<Duration>) -> Wait<T> {
        if self.is_lost() {
            return Wait::Lost;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match std::mem::replace(&mut *state, State::Taken) {
                State::Ready(result) => return Wait::Ready(result),
                State::Taken => return Wait::Taken,
                State::Running => *state = State::Running,
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Wait::TimedOut,
                },
            };
            state = match left {
                None => self
                    .shared
                    .ready
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(left) => {
                    let waited = self.shared.ready.wait_timeout(state, left);
                    waited.unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }

    /// Marks the job unwanted: if it has not started, it is skipped (whatever it holds is
    /// dropped on the pool); a job already running finishes.
    pub fn cancel(&self) {
        self.shared.cancelled.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn result_once_then_taken() {
        let p = spawn(None, true, || Ok(41 + 1));
        match p.wait(None) {
            Wait::Ready(Ok(v)) => assert_eq!(v, 42),
            other => panic!("{other:?}"),
        }
        assert!(p.is_done());
        assert!(matches!(p.wait(None), Wait::Taken));
    }

    #[test]
    fn errors_and_panics_come_back() {
        let p: Pending<()> = spawn(None, true, || {
            Err(Error::new(ErrorKind::Hdf5, "f.h5", "bad"))
        });
        match p.wait(None) {
            Wait::Ready(Err(e)) => assert_eq!(e.kind(), ErrorKind::Hdf5),
            other => panic!("{other:?}"),
        }
        let p: Pending<()> = spawn(None, true, || panic!("boom"));
        match p.wait(None) {
            Wait::Ready(Err(e)) => {
                assert_eq!(e.kind(), ErrorKind::Internal);
                assert!(e.message().contains("boom"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ready_is_done_at_once() {
        let p = ready(Ok(3));
        assert!(p.is_done());
        assert!(matches!(p.wait(Some(Duration::ZERO)), Wait::Ready(Ok(3))));
    }

    #[test]
    fn timeout_then_ready() {
        let (tx, rx) = mpsc::channel::<()>();
        let p = spawn(Some(1), false, move || {
            rx.recv().ok();
            Ok(7)
        });
        assert!(matches!(
            p.wait(Some(Duration::from_millis(20))),
            Wait::TimedOut
        ));
        assert!(!p.is_done());
        tx.send(()).unwrap();
        assert!(matches!(p.wait(None), Wait::Ready(Ok(7))));
    }

    #[test]
    fn cancelled_before_start_is_skipped() {
        // Block the one-thread pool so the second job is still queued when it is cancelled.
        let (tx, rx) = mpsc::channel::<()>();
        let blocker = spawn(Some(1), false, move || {
            rx.recv().ok();
            Ok(())
        });
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let skipped = spawn(Some(1), false, move || {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        });
        skipped.cancel();
        tx.send(()).unwrap();
        assert!(matches!(blocker.wait(None), Wait::Ready(Ok(()))));
        assert!(matches!(skipped.wait(None), Wait::Ready(Err(_))));
        assert!(!ran.load(Ordering::SeqCst));
    }

    #[test]
    fn ordered_jobs_run_oldest_first_one_at_a_time() {
        use std::time::Instant;
        let log: Arc<Mutex<Vec<(usize, Instant, Instant)>>> = Arc::default();
        let handles: Vec<Pending<()>> = (0..3)
            .map(|k| {
                let log = log.clone();
                spawn(Some(2), true, move || {
                    let start = Instant::now();
                    // A parallel loop: an ordered job has the whole pool.
                    let n = pool::try_map(&[0u8; 4], |_, _| {
                        std::thread::sleep(Duration::from_millis(20));
                        Ok::<_, Error>(1usize)
                    })?
                    .len();
                    assert_eq!(n, 4);
                    log.lock().unwrap().push((k, start, Instant::now()));
                    Ok(())
                })
            })
            .collect();
        for h in &handles {
            assert!(matches!(h.wait(None), Wait::Ready(Ok(()))));
        }
        let log = log.lock().unwrap();
        assert_eq!(log.iter().map(|e| e.0).collect::<Vec<_>>(), [0, 1, 2]);
        for w in log.windows(2) {
            assert!(
                w[1].1 >= w[0].2,
                "job {} started before job {} ended",
                w[1].0,
                w[0].0
            );
        }
    }
}
