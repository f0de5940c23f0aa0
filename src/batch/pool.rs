//! The bounded thread pool every read runs on.
//!
//! rayon's global pool does not survive `fork` (its threads stay behind in the parent), so
//! packread keeps its own pool and rebuilds it when the process id changes. The pool handle
//! lives in an `ArcSwap`, which is lock-free: a child forked while another parent thread was
//! inside a read cannot find a lock held by a thread that no longer exists.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// Upper bound on the pool size, whatever is asked for.
pub const MAX_THREADS: usize = 256;

struct Pool {
    pid: u32,
    /// The value of `REQUESTED` the pool was built for (0: the default size).
    requested: usize,
    threads: usize,
    pool: ThreadPool,
    /// Jobs queued with [`spawn_ordered_with`], oldest first.
    ordered: Mutex<Ordered>,
}

/// A job queued on a pool.
type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Ordered {
    queue: VecDeque<Job>,
    /// Whether a pool thread is running the queue.
    driving: bool,
}

static POOL: ArcSwapOption<Pool> = ArcSwapOption::const_empty();
/// Threads asked for with [`set_num_threads`]; 0 means "not set".
static REQUESTED: AtomicUsize = AtomicUsize::new(0);

/// Sets the pool size for later reads (0 returns to the default).
pub fn set_num_threads(n: usize) {
    REQUESTED.store(n.min(MAX_THREADS), Ordering::Relaxed);
}

/// The pool size reads will use: [`set_num_threads`], else `PACKREAD_NUM_THREADS`, else the
/// CPUs this process may run on (read when the pool is built, not on every read: asking the
/// kernel for the CPU quota costs tens of microseconds).
pub fn num_threads() -> usize {
    current().threads
}

fn default_threads() -> usize {
    if let Some(n) = std::env::var("PACKREAD_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n.min(MAX_THREADS);
    }
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
}

fn current() -> Arc<Pool> {
    let pid = std::process::id();
    let requested = REQUESTED.load(Ordering::Relaxed);
    if let Some(p) = POOL.load_full() {
        if p.pid == pid && p.requested == requested {
            return p;
        }
    }
    let threads = if requested > 0 {
        requested
    } else {
        default_threads()
    };
    let pool = ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("packread-{i}"))
        .build()
        .expect("failed to start the packread thread pool");
    let fresh = Arc::new(Pool {
        pid,
        requested,
        threads,
        pool,
        ordered: Mutex::default(),
    });
    if let Some(old) = POOL.swap(Some(fresh.clone())) {
        if old.pid != pid {
            // Inherited from the parent: its threads do not exist here, and dropping it would
            // wait on them. Leak it instead.
            std::mem::forget(old);
        }
    }
    fresh
}

/// Runs `f` inside this process's pool; inline when the caller already runs on a packread
/// pool (a batch started with [`spawn_with`] plans and executes on the pool it was given) or
/// inside [`run_inline`].
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    install_with(None, f)
}

/// Runs `f` in a pool of `threads` threads (this process's shared pool when `None`); inline
/// when the caller already runs on a packread pool or inside [`run_inline`].
pub fn install_with<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() || is_inline() {
        return f();
    }
    pool_for(threads).pool.install(f)
}

/// How much work a read is: how many files or members it touches, and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Files or members the read touches (`usize::MAX`: never inline).
    pub units: usize,
    /// Bytes the read produces, at most (a chunk counts whole; `u64::MAX`: never inline).
    pub bytes: u64,
    /// Whether the read mostly waits on the network: it then runs as soon as a thread is
    /// free, overlapping its waits with other reads', rather than in turn.
    pub waits: bool,
}

impl Work {
    /// Most bytes a read may have to run inline (handing it to a pool thread costs ~7 µs,
    /// waking it more on a busy machine: more than a small read takes).
    pub const INLINE_BYTES: u64 = 256 << 10;
    /// Most files or members a read may touch to run inline (each may cost an `open`).
    pub const INLINE_UNITS: usize = 4;

    /// Sized work that touches `units` files or members and produces `bytes`.
    pub fn new(units: usize, bytes: u64) -> Work {
        Work {
            units,
            bytes,
            waits: false,
        }
    }

    /// The same work, waiting on the network: never run inline (a read whose every request
    /// is a round trip), and not queued behind other reads.
    pub fn never_inline(self) -> Work {
        Work {
            units: self.units.max(Self::INLINE_UNITS + 1),
            waits: true,
            ..self
        }
    }

    /// Whether the read is cheaper on the calling thread than on the pool.
    pub fn is_tiny(self) -> bool {
        self.units <= Self::INLINE_UNITS && self.bytes <= Self::INLINE_BYTES
    }
}

thread_local! {
    static INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is running a read inline (see [`run_inline`]): parallel loops of the
/// read run sequentially, here.
pub fn is_inline() -> bool {
    INLINE.with(std::cell::Cell::get)
}

/// Runs `f` on this thread with every pool hand-off inside it turned into a plain call (for
/// tiny reads, see [`Work::is_tiny`]).
pub fn run_inline<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            INLINE.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(INLINE.with(|c| c.replace(true)));
    f()
}

/// Runs `f` on this thread when `work` is tiny, else in the pool `threads` selects.
pub fn install_sized<R: Send>(
    threads: Option<usize>,
    work: Work,
    f: impl FnOnce() -> R + Send,
) -> R {
    if work.is_tiny() {
        run_inline(f)
    } else {
        install_with(threads, f)
    }
}

// Every parallel loop of packread goes through the helpers below (or checks [`is_inline`] and
// runs inside [`install_with`]): a rayon loop started on a thread that is in no pool runs on
// rayon's global pool, whose threads, started in a parent process, do not exist in a forked
// child, where the loop would then wait forever (a DataLoader worker reading a batch inline).

/// `items.map(f).collect()`, in parallel on the current pool unless this thread runs inline.
pub fn try_map<T: Sync, R: Send, E: Send>(
    items: &[T],
    f: impl Fn(usize, &T) -> Result<R, E> + Sync + Send,
) -> Result<Vec<R>, E> {
    try_map_with(None, items, f)
}

/// [`try_map`] on the pool `threads` selects (as [`install_with`]).
pub fn try_map_with<T: Sync, R: Send, E: Send>(
    threads: Option<usize>,
    items: &[T],
    f: impl Fn(usize, &T) -> Result<R, E> + Sync + Send,
) -> Result<Vec<R>, E> {
    use rayon::prelude::*;
    if items.len() <= 1 || is_inline() {
        return items.iter().enumerate().map(|(k, t)| f(k, t)).collect();
    }
    install_with(threads, || {
        items.par_iter().enumerate().map(|(k, t)| f(k, t)).collect()
    })
}

/// `f` on every item, in parallel on the pool `threads` selects unless this thread runs
/// inline; the first error stops the loop.
pub fn try_for_each_with<T: Send, E: Send>(
    threads: Option<usize>,
    items: &mut [T],
    f: impl Fn(&mut T) -> Result<(), E> + Sync + Send,
) -> Result<(), E> {
    use rayon::prelude::*;
    if items.len() <= 1 || is_inline() {
        return items.iter_mut().try_for_each(f);
    }
    install_with(threads, || items.par_iter_mut().try_for_each(f))
}

/// Queues `job` on the pool `threads` selects (as [`install_with`]) and returns at once. The
/// pool is kept alive until the job has run, even if it is replaced meanwhile.
pub fn spawn_with(threads: Option<usize>, job: impl FnOnce() + Send + 'static) {
    let pool = pool_for(threads);
    let keep = pool.clone();
    pool.pool.spawn(move || {
        job();
        drop(keep);
    });
}

/// Queues `job` on the pool `threads` selects, behind every job queued there before it with
/// this function, and returns at once. Such jobs run one at a time, oldest first, each with
/// the whole pool for its parallel loops: a batch read ahead never takes threads from the
/// batch the consumer waits for, so the first batch arrives after one batch's read rather
/// than after all the reads started with it. (Reads that mostly wait on the network use
/// [`spawn_with`]: they overlap their waits instead.)
pub fn spawn_ordered_with(threads: Option<usize>, job: impl FnOnce() + Send + 'static) {
    let pool = pool_for(threads);
    let mut ordered = pool.ordered.lock().unwrap_or_else(|e| e.into_inner());
    ordered.queue.push_back(Box::new(job));
    if ordered.driving {
        return;
    }
    ordered.driving = true;
    drop(ordered);
    let driver = pool.clone();
    pool.pool.spawn(move || loop {
        let next = {
            let mut ordered = driver.ordered.lock().unwrap_or_else(|e| e.into_inner());
            let next = ordered.queue.pop_front();
            if next.is_none() {
                ordered.driving = false;
            }
            next
        };
        match next {
            Some(job) => job(),
            None => break,
        }
    });
}

/// The pool for `threads`: the shared one, or one of a fixed size for readers given their own
/// `num_threads`.
fn pool_for(threads: Option<usize>) -> Arc<Pool> {
    let Some(threads) = threads.filter(|&n| n > 0).map(|n| n.min(MAX_THREADS)) else {
        return current();
    };
    let pid = std::process::id();
    let pools = SIZED.load_full();
    if let Some(p) = pools
        .iter()
        .flat_map(|v| v.iter())
        .find(|p| p.pid == pid && p.threads == threads)
    {
        return p.clone();
    }
    let pool = ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("packread-{i}"))
        .build()
        .expect("failed to start a packread thread pool");
    let fresh = Arc::new(Pool {
        pid,
        requested: threads,
        threads,
        pool,
        ordered: Mutex::default(),
    });
    // Keep this process's pools; leak (never drop) those inherited from a parent.
    let mut next: Vec<Arc<Pool>> = Vec::new();
    if let Some(old) = pools {
        for p in old.iter() {
            if p.pid == pid {
                next.push(p.clone());
            } else {
                std::mem::forget(p.clone());
            }
        }
    }
    next.push(fresh.clone());
    SIZED.store(Some(Arc::new(next)));
    fresh
}

/// Pools of a fixed size, for readers given their own `num_threads`.
static SIZED: ArcSwapOption<Vec<Arc<Pool>>> = ArcSwapOption::const_empty();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_pools() {
        assert_eq!(install_with(Some(3), rayon::current_num_threads), 3);
        assert_eq!(install_with(Some(2), rayon::current_num_threads), 2);
        assert_eq!(install_with(Some(3), rayon::current_num_threads), 3);
    }

    #[test]
    fn pool_follows_the_requested_size() {
        set_num_threads(3);
        assert_eq!(install(rayon::current_num_threads), 3);
        set_num_threads(1);
        assert_eq!(install(rayon::current_num_threads), 1);
        set_num_threads(0);
        assert!(num_threads() >= 1);
    }

    #[test]
    fn inline_runs_on_this_thread() {
        let me = std::thread::current().id();
        let (here, index) =
            run_inline(|| install(|| (std::thread::current().id(), rayon::current_thread_index())));
        assert_eq!(here, me);
        assert_eq!(index, None);
        assert!(!is_inline());
        let doubled = run_inline(|| try_map(&[1, 2, 3], |_, &x| Ok::<_, ()>(x * 2))).unwrap();
        assert_eq!(doubled, vec![2, 4, 6]);
        assert!(Work::new(1, 64).is_tiny());
        assert!(!Work::new(64, 64).is_tiny());
        assert!(!Work::new(1, 1 << 30).is_tiny());
    }
}
