//! Criterion benches for the NPY core: header parsing, opening a folder of files, and batch
//! reads against a naive single-threaded `std::fs::read` loop, plain `pread`s and a `memcpy`
//! gather of the same samples from memory (the physical limit).
//!
//! Run with `cargo bench --bench npy`. Files are written to a temporary directory and read
//! once before timing, so every number is a warm-page-cache number; batch reads draw a fresh
//! random batch every iteration from 2,048 files (403 MB, see `common`). The whole run takes
//! about two minutes on 2 cores.

mod common;

use std::fs::File;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{as_i64, on_2_threads, warm, Samples, XorShift, BATCH, SAMPLES, SAMPLE_BYTES};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use packread::batch::{self, pool};
use packread::formats::npy::{parse_header, Limits, NpyIndex, MAGIC};

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

/// Writes one NPY file `dir/00000.npy`... per `sample`-byte slice of `data`, each with `dict`
/// as header; returns the paths.
fn write_files(dir: &Path, dict: &str, data: &[u8], sample: usize) -> Vec<PathBuf> {
    let header = npy_header(dict);
    data.chunks_exact(sample)
        .enumerate()
        .map(|(i, bytes)| {
            let path = dir.join(format!("{i:05}.npy"));
            std::fs::write(&path, [header.as_slice(), bytes].concat()).expect("write bench file");
            path
        })
        .collect()
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
    let data = XorShift(0x9E37_79B9_7F4A_7C15).noise(FILES * 64);
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (16,), }";
    let paths = write_files(dir.path(), dict, &data, 64);
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
            |p| NpyIndex::open_paths(p, &limits, None).expect("open"),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn bench_read_batch(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = XorShift(0x9E37_79B9_7F4A_7C15).noise(SAMPLES * SAMPLE_BYTES);
    let dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 256, 256), }";
    let paths = write_files(dir.path(), dict, &data, SAMPLE_BYTES);
    warm(&paths);
    let set = NpyIndex::open_paths(paths.clone(), &Limits::default(), None).expect("open");
    assert_eq!(set.sample_bytes(), SAMPLE_BYTES);
    let offset = std::fs::metadata(&paths[0]).unwrap().len() - SAMPLE_BYTES as u64;

    // The naive reader: each whole file read, its data copied into the batch, one thread.
    let naive = |idx: &[usize], out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
            let bytes = std::fs::read(&paths[i]).expect("read");
            slot.copy_from_slice(&bytes[offset as usize..]);
        }
    };
    // Plain I/O of the same bytes: open + one pread straight into the batch slot.
    let pread = |idx: &[usize], out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
            let f = File::open(&paths[i]).expect("open");
            f.read_exact_at(slot, offset).expect("pread");
        }
    };

    let threads = pool::num_threads();
    let mut samples = Samples::new(&data, SAMPLE_BYTES, 42);
    let mut group = c.benchmark_group("npy/read_batch_64x3x256x256_u8");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes((BATCH * SAMPLE_BYTES) as u64));
    samples.bench(&mut group, "baseline_std_fs_read_loop_1_thread", naive);
    samples.bench(&mut group, "anchor_pread_loop_1_thread", pread);
    samples.bench(&mut group, "anchor_pread_2_scoped_threads", |idx, out| {
        on_2_threads(idx, out, SAMPLE_BYTES, &pread)
    });
    samples.bench_limits(&mut group);
    let packread = |idx: &[usize], out: &mut [u8]| {
        batch::read(&set, &as_i64(idx), &[0], &mut [out]).expect("read")
    };
    samples.bench(&mut group, &format!("packread_{threads}_threads"), packread);
    // The same engine on one thread: what the pool adds, separated from per-file costs.
    pool::set_num_threads(1);
    samples.bench(&mut group, "packread_1_thread", packread);
    pool::set_num_threads(0);
    group.finish();
}

criterion_group!(benches, bench_parse_header, bench_open, bench_read_batch);
criterion_main!(benches);
