//! What the criterion benches share: the rules of `benches/conftest.py`, on the Rust side.
//!
//! - Data sets far larger than the CPU caches: [`SAMPLES`] samples of [`SAMPLE_BYTES`] (403 MB;
//!   this machine's L3 is 32 MiB), written once, flushed and read once before timing ([`warm`]).
//! - A fresh random batch every iteration ([`Samples::bench`] draws one per iteration, untimed),
//!   never one fixed batch, so no iteration finds the previous one's bytes in the caches.
//! - Every variant checked on a fresh batch against the bytes written, before and after its
//!   timing ([`Samples::check`]): a broken path fails the run instead of being timed.
//! - The physical limit: the same samples gathered from memory by `memcpy`, on one and on two
//!   threads ([`gather`], [`on_2_threads`]).
//!
//! Benchmark names start with their role, so that `benches/report.py --criterion` can print
//! ratios: `baseline_` (the naive reader), `anchor_` (plain I/O or the codec alone on the same
//! bytes), `limit_` (the memory gather) and `packread_`.

// Each bench uses a part of this module.
#![allow(dead_code)]

use std::hint::black_box;
use std::path::Path;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup};

/// Samples in every batch-read data set.
pub const SAMPLES: usize = 2048;
/// Samples per batch.
pub const BATCH: usize = 64;
/// One sample: 3x256x256 uint8 (196 KB).
pub const SHAPE: [usize; 3] = [3, 256, 256];
pub const SAMPLE_BYTES: usize = SHAPE[0] * SHAPE[1] * SHAPE[2];

/// A fixed-seed generator: every run writes the same data and draws the same batches.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `k` distinct indices in `0..n`, in random order (a sampler's shuffled batch).
    pub fn sample(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + (self.next() % (n - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(k);
        all
    }

    /// `len` bytes of uniform noise.
    pub fn noise(&mut self, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        for chunk in out.chunks_mut(8) {
            let r = self.next().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        out
    }

    /// `len` bytes in rows of 256 that are random walks (steps `-max_step..=max_step`, wrapping,
    /// from a random start): smooth like natural images, so DEFLATE compresses them (~3x for
    /// `max_step` 1, ~1.5x for 3), like the Python benches' `smooth_images`.
    pub fn smooth(&mut self, len: usize, max_step: u8) -> Vec<u8> {
        let span = 2 * u64::from(max_step) + 1;
        let mut out = vec![0u8; len];
        for row in out.chunks_mut(256) {
            let mut v = self.next() as u8;
            for x in row {
                v = v
                    .wrapping_add((self.next() % span) as u8)
                    .wrapping_sub(max_step);
                *x = v;
            }
        }
        out
    }
}

/// Flushes freshly written files to disk (so that writeback does not compete with the timed
/// runs), then reads each once so that the timed runs find them in the page cache.
pub fn warm<P: AsRef<Path>>(paths: &[P]) {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    for p in paths {
        black_box(std::fs::read(p).expect("read bench file"));
    }
}

/// Copies samples `idx` of `data` (`sample` bytes each) one after another into `out`: what
/// every reader must produce and, on one thread, the physical limit of a raw read.
pub fn gather(data: &[u8], sample: usize, idx: &[usize], out: &mut [u8]) {
    for (slot, &i) in out.chunks_exact_mut(sample).zip(idx) {
        slot.copy_from_slice(&data[i * sample..(i + 1) * sample]);
    }
}

/// Runs `read` on two plain scoped threads (spawned per call), each with half of `idx` and the
/// matching half of `out`: the naive way to use two cores.
pub fn on_2_threads<F>(idx: &[usize], out: &mut [u8], sample: usize, read: &F)
where
    F: Fn(&[usize], &mut [u8]) + Sync,
{
    let half = idx.len() / 2;
    let (oa, ob) = out.split_at_mut(half * sample);
    let (ia, ib) = idx.split_at(half);
    std::thread::scope(|s| {
        s.spawn(|| read(ia, oa));
        read(ib, ob);
    });
}

/// `idx` as the `i64` indices the NPY and HDF5 readers take (negative ones count from the end).
pub fn as_i64(idx: &[usize]) -> Vec<i64> {
    idx.iter().map(|&i| i as i64).collect()
}

/// The samples of a data set as written, and fresh random batches of them.
pub struct Samples<'a> {
    /// Every sample, one after another.
    pub data: &'a [u8],
    pub sample: usize,
    rng: XorShift,
    out: Vec<u8>,
    expected: Vec<u8>,
}

impl<'a> Samples<'a> {
    /// Batches of [`BATCH`] samples of `data`, drawn from `seed`.
    pub fn new(data: &'a [u8], sample: usize, seed: u64) -> Self {
        assert_eq!(data.len() % sample, 0, "whole samples");
        Samples {
            data,
            sample,
            rng: XorShift(seed),
            out: vec![0u8; BATCH * sample],
            expected: vec![0u8; BATCH * sample],
        }
    }

    pub fn len(&self) -> usize {
        self.data.len() / self.sample
    }

    /// Checks that `read` writes the samples of a fresh batch into a zeroed output.
    pub fn check<F: FnMut(&[usize], &mut [u8])>(&mut self, name: &str, read: &mut F) {
        let idx = self.rng.sample(self.len(), BATCH);
        gather(self.data, self.sample, &idx, &mut self.expected);
        self.out.fill(0);
        read(&idx, &mut self.out);
        assert!(
            self.out == self.expected,
            "{name}: differs from the samples written (batch {idx:?})"
        );
    }

    /// Checks `read`, times it in `group` on a fresh batch every iteration (drawn outside the
    /// timing, one reused output buffer), then checks it again.
    pub fn bench<F: FnMut(&[usize], &mut [u8])>(
        &mut self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        name: &str,
        mut read: F,
    ) {
        self.check(name, &mut read);
        let n = self.len();
        let Samples { rng, out, .. } = self;
        group.bench_function(name, |b| {
            b.iter_batched(
                || rng.sample(n, BATCH),
                |idx| read(black_box(&idx), black_box(out)),
                BatchSize::SmallInput,
            )
        });
        self.check(name, &mut read);
    }

    /// The two physical-limit variants: `memcpy` gathers of the same samples from memory, on
    /// one thread and on two.
    pub fn bench_limits(&mut self, group: &mut BenchmarkGroup<'_, WallTime>) {
        let (data, sample) = (self.data, self.sample);
        let one = move |idx: &[usize], out: &mut [u8]| gather(data, sample, idx, out);
        self.bench(group, "limit_memcpy_gather_1_thread", one);
        self.bench(group, "limit_memcpy_gather_2_scoped_threads", |idx, out| {
            on_2_threads(idx, out, sample, &one)
        });
    }
}
