//! What the readers did: time, calls and bytes per stage (planning, reads, the network, each
//! codec, image geometry, copies), and cache lookups, counted per thread and merged on read.
//!
//! Each thread owns one [`Slot`] of counters. Only its owner writes it, with a relaxed load and
//! store (no read-modify-write, no lock); readers sum every slot. Slots are never freed: a
//! thread that ends gives its slot back for the next thread to continue from, so the sums
//! never go down and the number of slots stays at the most threads alive at once. Slots sit in
//! a lock-free list, so a process forked while another thread was counting finds no lock held.
//!
//! A timed region costs two reads of the monotonic clock (about 20 ns each) when statistics
//! are on ([`set_enabled`], `PACKREAD_STATS=0` turns them off), nothing but a load when off.
//! Regions are per extent, per decode step, per image: never per sample piece or per byte.
//!
//! With tracing on ([`set_tracing`]) each region is also kept as a span (stage, start, length)
//! in its thread's slot, taken with [`take_spans`] (a lock per span, taken by its owner only
//! while tracing, otherwise uncontended).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// A stage of reading a batch, with its time (ns), calls and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Stage {
    /// Working out a batch's reads from the index (`Index::plan`).
    Plan,
    /// Reading stored bytes (`pread`, or a ranged GET seen from the reader: waits included).
    Read,
    /// Waiting on object storage for an answer (per request; bytes are the bytes received).
    Network,
    /// Deflate (HDF5 gzip, ZIP deflate, NPZ).
    Inflate,
    /// LZF (h5py).
    Lzf,
    /// blosc 1.x.
    Blosc,
    /// blosc2.
    Blosc2,
    /// zstd.
    Zstd,
    /// LZ4 (HDF5 framing).
    Lz4,
    /// bitshuffle (with its inner codec).
    Bitshuffle,
    /// HDF5's byte shuffle.
    Shuffle,
    /// CRC-32 and Fletcher-32 checks.
    Checksum,
    /// NPY streams and Fortran-order reorders.
    Npy,
    /// Chunks never written (fill values).
    Fill,
    /// JPEG decode.
    Jpeg,
    /// PNG decode.
    Png,
    /// WebP decode.
    Webp,
    /// Image geometry: resize, crop, flip, layout.
    Geometry,
    /// Copies of decoded bytes into the batch.
    Copy,
}

impl Stage {
    /// Every stage, in counter order.
    pub const ALL: [Stage; 19] = [
        Stage::Plan,
        Stage::Read,
        Stage::Network,
        Stage::Inflate,
        Stage::Lzf,
        Stage::Blosc,
        Stage::Blosc2,
        Stage::Zstd,
        Stage::Lz4,
        Stage::Bitshuffle,
        Stage::Shuffle,
        Stage::Checksum,
        Stage::Npy,
        Stage::Fill,
        Stage::Jpeg,
        Stage::Png,
        Stage::Webp,
        Stage::Geometry,
        Stage::Copy,
    ];

    /// The stage's name in snapshots and traces.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Plan => "plan",
            Stage::Read => "read",
            Stage::Network => "network",
            Stage::Inflate => "inflate",
            Stage::Lzf => "lzf",
            Stage::Blosc => "blosc",
            Stage::Blosc2 => "blosc2",
            Stage::Zstd => "zstd",
            Stage::Lz4 => "lz4",
            Stage::Bitshuffle => "bitshuffle",
            Stage::Shuffle => "shuffle",
            Stage::Checksum => "checksum",
            Stage::Npy => "npy",
            Stage::Fill => "fill",
            Stage::Jpeg => "jpeg",
            Stage::Png => "png",
            Stage::Webp => "webp",
            Stage::Geometry => "geometry",
            Stage::Copy => "copy",
        }
    }

    /// Whether the stage decodes (the "decode" total of a snapshot).
    pub fn decodes(self) -> bool {
        !matches!(
            self,
            Stage::Plan | Stage::Read | Stage::Network | Stage::Geometry | Stage::Copy
        )
    }
}

/// A count that is not a stage's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    /// Reads that served several extents at once (merged requests).
    MergedReads,
    /// Extents those merged reads served.
    MergedExtents,
    /// Lookups in a reader's chunk cache (decoded HDF5 chunks).
    ChunkLooks,
    /// Lookups that found the chunk.
    ChunkHits,
    /// Lookups in the on-disk cache of fetched object data (`cache_dir=`).
    DataLooks,
    /// Lookups that found the bytes there.
    DataHits,
    /// Batches read (a `read_batch` or a batch over shards).
    Batches,
}

impl Event {
    /// Every event, in counter order.
    pub const ALL: [Event; 7] = [
        Event::MergedReads,
        Event::MergedExtents,
        Event::ChunkLooks,
        Event::ChunkHits,
        Event::DataLooks,
        Event::DataHits,
        Event::Batches,
    ];

    /// The event's name in snapshots.
    pub fn name(self) -> &'static str {
        match self {
            Event::MergedReads => "merged_reads",
            Event::MergedExtents => "merged_extents",
            Event::ChunkLooks => "chunk_cache_lookups",
            Event::ChunkHits => "chunk_cache_hits",
            Event::DataLooks => "data_cache_lookups",
            Event::DataHits => "data_cache_hits",
            Event::Batches => "batches",
        }
    }
}

const STAGES: usize = Stage::ALL.len();
/// Counters per slot: time, calls and bytes per stage, then the events.
pub const COUNTERS: usize = 3 * STAGES + Event::ALL.len();

/// The name of counter `i` of a snapshot: `<stage>_ns`, `<stage>_calls`, `<stage>_bytes`, then
/// the events'.
pub fn counter_name(i: usize) -> String {
    if i < 3 * STAGES {
        let stage = Stage::ALL[i / 3].name();
        let what = ["ns", "calls", "bytes"][i % 3];
        format!("{stage}_{what}")
    } else {
        Event::ALL[i - 3 * STAGES].name().to_string()
    }
}

/// One span of a trace: a stage, its start (ns of `CLOCK_MONOTONIC`, the clock Python's
/// `time.monotonic_ns` reads, the same in every process) and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The stage.
    pub stage: Stage,
    /// Start, ns of `CLOCK_MONOTONIC`.
    pub start_ns: u64,
    /// Length, ns.
    pub len_ns: u64,
}

/// One thread's counters.
struct Slot {
    counters: [AtomicU64; COUNTERS],
    /// Whether a live thread owns the slot.
    owned: AtomicBool,
    /// The owner's number, for traces (the slot's place in the list).
    id: usize,
    spans: Mutex<Vec<Span>>,
    next: *const Slot,
}

// SAFETY: `next` is written once, before the slot is published, and slots are never freed.
unsafe impl Sync for Slot {}

static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
static SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);
static ENABLED: AtomicBool = AtomicBool::new(true);
static ENV_READ: AtomicBool = AtomicBool::new(false);
static TRACING: AtomicBool = AtomicBool::new(false);
/// Most spans kept per thread between two [`take_spans`] (beyond, new spans are dropped).
const MAX_SPANS: usize = 1 << 20;

/// A slot for this thread: a free one, or a new one pushed on the list.
fn claim_slot() -> &'static Slot {
    let mut at = SLOTS.load(Ordering::Acquire);
    while !at.is_null() {
        // SAFETY: slots are leaked, never freed.
        let slot = unsafe { &*at };
        if slot
            .owned
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return slot;
        }
        at = slot.next as *mut Slot;
    }
    let slot: *mut Slot = Box::into_raw(Box::new(Slot {
        counters: std::array::from_fn(|_| AtomicU64::new(0)),
        owned: AtomicBool::new(true),
        id: SLOT_COUNT.fetch_add(1, Ordering::Relaxed),
        spans: Mutex::new(Vec::new()),
        next: std::ptr::null(),
    }));
    let mut head = SLOTS.load(Ordering::Acquire);
    loop {
        // SAFETY: the slot is not yet published: only this thread sees it.
        unsafe { (*slot).next = head };
        match SLOTS.compare_exchange(head, slot, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: leaked, never freed.
            Ok(_) => return unsafe { &*slot },
            Err(now) => head = now,
        }
    }
}

/// This thread's hold on its slot; gives it back when the thread ends.
struct Held(Cell<Option<&'static Slot>>);

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(slot) = self.0.get() {
            slot.owned.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static MINE: Held = const { Held(Cell::new(None)) };
    /// Time this thread has counted so far, so that a region can leave out the regions
    /// counted inside it ([`Timer::stop_exclusive`]).
    static COUNTED: Cell<u64> = const { Cell::new(0) };
}

fn with_slot(f: impl FnOnce(&Slot)) {
    // A thread being torn down counts nothing more.
    let _ = MINE.try_with(|held| {
        let slot = match held.0.get() {
            Some(s) => s,
            None => {
                let s = claim_slot();
                held.0.set(Some(s));
                s
            }
        };
        f(slot);
    });
}

/// Adds to a counter this thread owns: a relaxed load and store, no read-modify-write.
#[inline]
fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Whether statistics are counted (`PACKREAD_STATS=0` in the environment turns them off
/// until [`set_enabled`]).
#[inline]
pub fn enabled() -> bool {
    if !ENV_READ.load(Ordering::Relaxed) {
        read_env();
    }
    ENABLED.load(Ordering::Relaxed)
}

#[cold]
fn read_env() {
    if std::env::var("PACKREAD_STATS").is_ok_and(|v| v.trim() == "0") {
        ENABLED.store(false, Ordering::Relaxed);
    }
    ENV_READ.store(true, Ordering::Relaxed);
}

/// Turns statistics on or off for this process (off: timed regions cost one load).
pub fn set_enabled(on: bool) {
    ENV_READ.store(true, Ordering::Relaxed);
    ENABLED.store(on, Ordering::Relaxed);
}

/// Turns span recording on or off; turning it off drops spans not yet taken.
pub fn set_tracing(on: bool) {
    TRACING.store(on, Ordering::Relaxed);
    if !on {
        drop(take_spans());
    }
}

/// Whether spans are recorded.
pub fn tracing() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// A timed region: started by [`start`], counted by [`Timer::stop`].
#[must_use = "a timer counts only when stopped"]
pub struct Timer(Option<(Instant, u64)>);

/// Starts timing a region (nothing when statistics are off).
#[inline]
pub fn start() -> Timer {
    Timer(enabled().then(|| (Instant::now(), COUNTED.with(Cell::get))))
}

impl Timer {
    /// Counts the region as one call of `stage` that handled `bytes`.
    #[inline]
    pub fn stop(self, stage: Stage, bytes: usize) {
        if let Some((t0, _)) = self.0 {
            let ns = t0.elapsed().as_nanos() as u64;
            record(stage, t0, ns, ns, 1, bytes as u64);
        }
    }

    /// Counts the region less the regions counted inside it on this thread (an image's
    /// geometry: its transform, less the decode inside it).
    #[inline]
    pub fn stop_exclusive(self, stage: Stage, bytes: usize) {
        if let Some((t0, counted)) = self.0 {
            let ns = t0.elapsed().as_nanos() as u64;
            let inside = COUNTED.with(Cell::get).wrapping_sub(counted);
            record(stage, t0, ns.saturating_sub(inside), ns, 1, bytes as u64);
        }
    }
}

/// Counts `ns` of `stage`; a span (when tracing) covers the whole region, `span_ns` from `t0`,
/// so that spans counted inside it nest in it.
fn record(stage: Stage, t0: Instant, ns: u64, span_ns: u64, calls: u64, bytes: u64) {
    let _ = COUNTED.try_with(|c| c.set(c.get().wrapping_add(ns)));
    let at = stage as usize * 3;
    with_slot(|slot| {
        bump(&slot.counters[at], ns);
        bump(&slot.counters[at + 1], calls);
        bump(&slot.counters[at + 2], bytes);
        if tracing() {
            let span = Span {
                stage,
                start_ns: monotonic_ns(t0),
                len_ns: span_ns,
            };
            if let Ok(mut spans) = slot.spans.lock() {
                if spans.len() < MAX_SPANS {
                    spans.push(span);
                }
            }
        }
    });
}

/// Many calls of one stage on one thread timed as one region (the reads of a run of raw
/// extents: a region per read would cost as much as a small read): [`Region::add`] counts
/// each call and its bytes; the region's time, less the regions counted inside it (decodes,
/// copies), is the stage's when it is dropped.
pub struct Region {
    timer: Timer,
    stage: Stage,
    calls: u64,
    bytes: u64,
}

impl Region {
    /// Starts a region of `stage`.
    #[inline]
    pub fn new(stage: Stage) -> Region {
        Region {
            timer: start(),
            stage,
            calls: 0,
            bytes: 0,
        }
    }

    /// One call of the stage, of `bytes`.
    #[inline]
    pub fn add(&mut self, bytes: usize) {
        self.calls += 1;
        self.bytes += bytes as u64;
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let (Some((t0, counted)), true) = (self.timer.0, self.calls > 0) {
            let ns = t0.elapsed().as_nanos() as u64;
            let inside = COUNTED.with(Cell::get).wrapping_sub(counted);
            record(
                self.stage,
                t0,
                ns.saturating_sub(inside),
                ns,
                self.calls,
                self.bytes,
            );
        }
    }
}

/// Counts `n` of `event` (nothing when statistics are off).
#[inline]
pub fn count(event: Event, n: u64) {
    if enabled() {
        with_slot(|slot| bump(&slot.counters[3 * STAGES + event as usize], n));
    }
}

/// `at` as ns of `CLOCK_MONOTONIC` (the clock `Instant` reads on Linux), from one pairing of
/// the two clocks made on first use.
fn monotonic_ns(at: Instant) -> u64 {
    static BASE: OnceLock<(Instant, u64)> = OnceLock::new();
    let (i0, n0) = *BASE.get_or_init(|| (Instant::now(), clock_monotonic_ns()));
    match at.checked_duration_since(i0) {
        Some(d) => n0 + d.as_nanos() as u64,
        None => n0.saturating_sub(i0.duration_since(at).as_nanos() as u64),
    }
}

/// `CLOCK_MONOTONIC` now, in ns.
pub fn clock_monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn slots() -> impl Iterator<Item = &'static Slot> {
    let mut at = SLOTS.load(Ordering::Acquire) as *const Slot;
    std::iter::from_fn(move || {
        if at.is_null() {
            return None;
        }
        // SAFETY: slots are leaked, never freed.
        let slot = unsafe { &*at };
        at = slot.next;
        Some(slot)
    })
}

/// The sums of every thread's counters (see [`counter_name`]), since the process started
/// (a forked child starts from its parent's sums).
pub fn snapshot() -> [u64; COUNTERS] {
    let mut sums = [0u64; COUNTERS];
    for slot in slots() {
        for (s, c) in sums.iter_mut().zip(&slot.counters) {
            *s = s.wrapping_add(c.load(Ordering::Relaxed));
        }
    }
    sums
}

/// The spans recorded since the last call, per thread: `(thread number, spans)`.
pub fn take_spans() -> Vec<(usize, Vec<Span>)> {
    slots()
        .filter_map(|slot| {
            let spans = std::mem::take(&mut *slot.spans.lock().ok()?);
            (!spans.is_empty()).then_some((slot.id, spans))
        })
        .collect()
}

/// This thread's number in traces (its slot's).
pub fn thread_number() -> usize {
    let mut id = 0;
    with_slot(|slot| id = slot.id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(stage: Stage) -> u64 {
        snapshot()[stage as usize * 3]
    }

    #[test]
    fn regions_are_counted_on_every_thread_and_merged() {
        let before = snapshot();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..10 {
                        let t = start();
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        t.stop(Stage::Fill, 100);
                    }
                    count(Event::Batches, 3);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let after = snapshot();
        let at = Stage::Fill as usize * 3;
        assert!(after[at] - before[at] >= 40_000_000, "4 x 10 x 1 ms");
        assert_eq!(after[at + 1] - before[at + 1], 40);
        assert_eq!(after[at + 2] - before[at + 2], 4000);
        let b = 3 * STAGES + Event::Batches as usize;
        assert_eq!(after[b] - before[b], 12);
        // Ended threads gave their slots back; the sums stay.
        let again: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| start().stop(Stage::Fill, 0)))
            .collect();
        again.into_iter().for_each(|t| t.join().unwrap());
        assert!(ns(Stage::Fill) >= after[at]);
        assert!(SLOT_COUNT.load(Ordering::Relaxed) <= 16);
    }

    #[test]
    fn a_region_counts_its_calls_less_the_regions_inside() {
        std::thread::spawn(|| {
            let at = Stage::Lz4 as usize * 3;
            let before = snapshot();
            {
                let mut region = Region::new(Stage::Lz4);
                for _ in 0..5 {
                    region.add(10);
                    let inner = start();
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    inner.stop(Stage::Zstd, 1);
                }
            }
            let after = snapshot();
            assert_eq!(after[at + 1] - before[at + 1], 5);
            assert_eq!(after[at + 2] - before[at + 2], 50);
            // The sleeps were counted inside (as zstd), not as the region's own time.
            let zstd = Stage::Zstd as usize * 3;
            assert!(after[zstd] - before[zstd] >= 10_000_000);
            assert!(
                after[at] - before[at] < 2_000_000,
                "{}",
                after[at] - before[at]
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn names_cover_every_counter() {
        let names: Vec<String> = (0..COUNTERS).map(counter_name).collect();
        assert_eq!(names[0], "plan_ns");
        assert_eq!(names[3 * STAGES - 1], "copy_bytes");
        assert_eq!(names[COUNTERS - 1], "batches");
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), COUNTERS);
    }

    #[test]
    fn spans_are_kept_only_while_tracing() {
        std::thread::spawn(|| {
            set_tracing(true);
            let t = start();
            t.stop(Stage::Webp, 1);
            let mine = thread_number();
            let spans = take_spans();
            set_tracing(false);
            let (_, own) = spans.iter().find(|(id, _)| *id == mine).unwrap();
            assert!(own.iter().any(|s| s.stage == Stage::Webp));
            let now = clock_monotonic_ns();
            assert!(own.iter().all(|s| s.start_ns <= now));
        })
        .join()
        .unwrap();
    }
}
