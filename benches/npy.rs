//! Criterion benches for the NPY core: header parsing, opening a folder of files, and batch
//! reads against a naive single-threaded `std::fs::read` loop of the same files.
//!
//! Run with `cargo bench --bench npy`. Files are written to a temporary directory and read
//! once before timing, so every number is a warm-page-cache number. Sample counts and
//! measurement times are kept small: the whole run takes well under two minutes on 2 cores.

use std::fs::File;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use packread::npy::{parse_header, Limits, NpySet, MAGIC};
use packread::pool;

/// A version 1.0 NPY header for `dict`: magic, version, u16 header length, then the dict
/// padded with spaces so that the data starts at a multiple of 64, ending in `'\n'`.
fn npy_header(dict: &str) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend([1u8, 0]);
    let mut text = dict.as_bytes().to_vec();
    while (10 + text.len() + 1) % 64 != 0 {
        text.push(b' ');
    }
    text.push(b'\n');
    let len = u16::try_from(text.len()).expect("header fits in a u16");
    out.extend(len.to_le_bytes());
    out.extend(text);
    out
}

/// Writes `n` NPY files `dir/00000.npy`... with `dict` as header and `data_len` bytes of
/// pseudo-random data each; returns the paths.
fn write_files(dir: &Path, n: usize, dict: &str, data_len: usize) -> Vec<PathBuf> {
    let header = npy_header(dict);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|i| {
            let mut bytes = header.clone();
            bytes.extend((0..data_len).map(|_| rng.next() as u8));
            let path = dir.join(format!("{i:05}.npy"));
            std::fs::write(&path, bytes).expect("write bench file");
            path
        })
        .collect()
}

/// Flushes the freshly written files to disk (so that writeback does not compete with the
/// timed runs), then reads every file once so that the timed runs find them in the page cache.
fn warm(paths: &[PathBuf]) {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    for p in paths {
        black_box(std::fs::read(p).expect("read bench file"));
    }
}

/// A fixed-seed generator, so every run reads the same "random" batch.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `k` distinct indices in `0..n`, in random order (a sampler's shuffled batch).
    fn sample(&mut self, n: usize, k: usize) -> Vec<i64> {
        let mut all: Vec<i64> = (0..n as i64).collect();
        for i in 0..k {
            let j = i + (self.next() % (n - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(k);
        all
    }
}

fn bench_parse_header(c: &mut Criterion) {
    let limits = Limits::default();
    let typical = npy_header("{'descr': '|u1', 'fortran_order': False, 'shape': (3, 256, 256), }");
    let structured = npy_header(
        "{'descr': [('x', '<f4'), ('y', '<f4', (3,)), ('label', '|S16'), \
         (('Title', 'name'), '<i8'), ('nested', [('a', '<u2'), ('b', '>f8', (2, 2))])], \
         'fortran_order': False, 'shape': (1024,), }",
    );
    let mut group = c.benchmark_group("npy/parse_header");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (name, header) in [("typical", &typical), ("structured", &structured)] {
        // `available` covers the data the shape asks for, without allocating it.
        let available = header.len() + (1 << 24);
        parse_header(header, available, "bench.npy", &limits).expect("bench header parses");
        group.bench_function(name, |b| {
            b.iter(|| {
                parse_header(
                    black_box(header.as_slice()),
                    available,
                    "bench.npy",
                    &limits,
                )
            })
        });
    }
    group.finish();
}

fn bench_open(c: &mut Criterion) {
    const FILES: usize = 1000;
    let dir = tempfile::tempdir().expect("temp dir");
    let paths = write_files(
        dir.path(),
        FILES,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (16,), }",
        64,
    );
    warm(&paths);
    let limits = Limits::default();
    let mut group = c.benchmark_group("npy/open");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(FILES as u64));
    group.bench_function("1000_small_files", |b| {
        b.iter_batched(
            || paths.clone(),
            |p| NpySet::open(p, &limits).expect("open"),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn bench_read_batch(c: &mut Criterion) {
    const FILES: usize = 512;
    const BATCH: usize = 64;
    let dir = tempfile::tempdir().expect("temp dir");
    let paths = write_files(
        dir.path(),
        FILES,
        "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 256, 256), }",
        3 * 256 * 256,
    );
    warm(&paths);
    let set = NpySet::open(paths.clone(), &Limits::default()).expect("open");
    let sample = set.sample_bytes();
    let offset = std::fs::metadata(&paths[0]).unwrap().len() as usize - sample;
    let idx = XorShift(42).sample(FILES, BATCH);
    let mut out = vec![0u8; BATCH * sample];

    // Every variant must produce the same bytes as the naive loop.
    let naive = |out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(sample).zip(&idx) {
            let bytes = std::fs::read(&paths[i as usize]).expect("read");
            slot.copy_from_slice(&bytes[offset..]);
        }
    };
    let pread = |out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(sample).zip(&idx) {
            let f = File::open(&paths[i as usize]).expect("open");
            f.read_exact_at(slot, offset as u64).expect("pread");
        }
    };
    // The physical anchor: the same preads split over two plain threads (half a batch each).
    let paths_ref = &paths;
    let pread_2 = |out: &mut [u8]| {
        let (a, b) = out.split_at_mut(BATCH / 2 * sample);
        let (ia, ib) = idx.split_at(BATCH / 2);
        std::thread::scope(|s| {
            for (half, ids) in [(a, ia), (b, ib)] {
                s.spawn(move || {
                    for (slot, &i) in half.chunks_exact_mut(sample).zip(ids) {
                        let f = File::open(&paths_ref[i as usize]).expect("open");
                        f.read_exact_at(slot, offset as u64).expect("pread");
                    }
                });
            }
        });
    };
    let mut expected = vec![0u8; out.len()];
    naive(&mut expected);
    set.read_batch(&idx, &mut out).expect("read_batch");
    assert_eq!(out, expected, "read_batch differs from std::fs::read");
    out.fill(0);
    pread(&mut out);
    assert_eq!(out, expected, "pread loop differs from std::fs::read");
    out.fill(0);
    pread_2(&mut out);
    assert_eq!(out, expected, "two-thread pread differs from std::fs::read");

    let threads = pool::num_threads();
    let mut group = c.benchmark_group("npy/read_batch_64x3x256x256_u8");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes((BATCH * sample) as u64));
    group.bench_function("naive_std_fs_read_loop", |b| {
        b.iter(|| naive(black_box(&mut out)))
    });
    group.bench_function("pread_loop_1_thread", |b| {
        b.iter(|| pread(black_box(&mut out)))
    });
    group.bench_function("pread_2_scoped_threads", |b| {
        b.iter(|| pread_2(black_box(&mut out)))
    });
    group.bench_function(format!("packread_{threads}_threads"), |b| {
        b.iter(|| set.read_batch(black_box(&idx), black_box(&mut out)))
    });
    // The same engine on one thread: what the pool adds, separated from per-file costs.
    pool::set_num_threads(1);
    group.bench_function("packread_1_thread", |b| {
        b.iter(|| set.read_batch(black_box(&idx), black_box(&mut out)))
    });
    pool::set_num_threads(0);
    group.finish();
}

criterion_group!(benches, bench_parse_header, bench_open, bench_read_batch);
criterion_main!(benches);
