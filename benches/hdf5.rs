//! Criterion benches for the HDF5 core: packread's batch read of one-sample chunks against
//! libhdf5's own `H5Dread` (through the `hdf5-metno` crate that packread links) on the same
//! file; for uncompressed chunks against plain `pread`s of the same chunk bytes on two threads,
//! for gzip chunks against libdeflate alone decoding the same chunks from memory.
//!
//! Run with `cargo bench --bench hdf5`. The file is written with `hdf5-metno` into a temporary
//! directory, flushed and read once before timing, so every number is a warm-page-cache
//! number. Samples are 3x256x256 uint8 images that compress about as well as natural images
//! (each row a random walk), one sample per chunk; a batch is 64 random indices. The whole run
//! takes about a minute on 2 cores.

use std::fs::File;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hdf5_sys::h5d::{H5Dget_space, H5Dget_type, H5Dread};
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{H5S_seloper_t, H5Sclose, H5Screate_simple, H5Sselect_hyperslab};
use hdf5_sys::h5t::H5Tclose;
use packread::hdf5::{Hdf5File, Selection};
use packread::pool;

const SAMPLES: usize = 256;
const BATCH: usize = 64;
const SHAPE: [usize; 3] = [3, 256, 256];
const SAMPLE_BYTES: usize = SHAPE[0] * SHAPE[1] * SHAPE[2];
/// packread's default decoded-chunk cache (unused by one-sample chunks, kept as in Python).
const CACHE_BYTES: usize = 32 << 20;

/// A fixed-seed generator, so every run writes and reads the same "random" data.
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

/// `SAMPLES` images whose rows are random walks (steps -3..=3, wrapping): smooth like natural
/// images, so gzip+shuffle compresses them (~1.5-2x), unlike uniform noise.
fn images() -> Vec<u8> {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut data = vec![0u8; SAMPLES * SAMPLE_BYTES];
    for row in data.chunks_exact_mut(SHAPE[2]) {
        let mut v = rng.next() as u8;
        for x in row {
            v = v.wrapping_add((rng.next() % 7) as u8).wrapping_sub(3);
            *x = v;
        }
    }
    data
}

/// How the bench file's dataset is stored.
#[derive(Clone, Copy)]
enum Storage {
    Raw,
    GzipShuffle,
}

/// Writes `/images` of shape (SAMPLES, 3, 256, 256) uint8, one sample per chunk; returns its
/// path and the compression ratio (array bytes / stored bytes).
fn write_file(dir: &Path, storage: Storage, data: &[u8]) -> (PathBuf, f64) {
    let path = dir.join(match storage {
        Storage::Raw => "raw.h5",
        Storage::GzipShuffle => "gzip_shuffle.h5",
    });
    let file = hdf5_metno::File::create(&path).expect("create bench file");
    let builder = file
        .new_dataset::<u8>()
        .shape([SAMPLES, SHAPE[0], SHAPE[1], SHAPE[2]])
        .chunk([1, SHAPE[0], SHAPE[1], SHAPE[2]]);
    let builder = match storage {
        Storage::Raw => builder,
        // HDF5's own order: shuffle first, then deflate (as h5py writes `shuffle=True`).
        Storage::GzipShuffle => builder.shuffle().deflate(4),
    };
    let ds = builder.create("images").expect("create dataset");
    ds.write_raw(data).expect("write dataset");
    let stored = ds.storage_size();
    drop(ds);
    file.close().expect("close bench file");
    // Flush the writes so that writeback does not compete with the timed runs, then read the
    // file once so that the timed runs find it in the page cache.
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    black_box(std::fs::read(&path).expect("read bench file"));
    (path, data.len() as f64 / stored as f64)
}

/// libhdf5's read of the samples `idx`, one hyperslab `H5Dread` per index straight into its
/// slot of `out` (what h5py's `read_direct` or `d[i]` does per sample).
fn h5dread_per_index(ds: &hdf5_metno::Dataset, idx: &[i64], out: &mut [u8]) {
    hdf5_metno::sync::sync(|| {
        let count = [1u64, SHAPE[0] as u64, SHAPE[1] as u64, SHAPE[2] as u64];
        // SAFETY: open dataset id, libhdf5's lock held; each read fills exactly one sample.
        unsafe {
            let ftype = H5Dget_type(ds.id());
            let fspace = H5Dget_space(ds.id());
            let mspace = H5Screate_simple(4, count.as_ptr(), std::ptr::null());
            for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
                let start = [i as u64, 0, 0, 0];
                let sel = H5Sselect_hyperslab(
                    fspace,
                    H5S_seloper_t::H5S_SELECT_SET,
                    start.as_ptr(),
                    std::ptr::null(),
                    count.as_ptr(),
                    std::ptr::null(),
                );
                assert!(sel >= 0, "H5Sselect_hyperslab failed");
                let read = H5Dread(
                    ds.id(),
                    ftype,
                    mspace,
                    fspace,
                    H5P_DEFAULT,
                    slot.as_mut_ptr().cast(),
                );
                assert!(read >= 0, "H5Dread failed");
            }
            H5Sclose(mspace);
            H5Sclose(fspace);
            H5Tclose(ftype);
        }
    })
}

/// Each sample's chunk (address in the file, stored size), by sample index.
fn chunk_locations(ds: &hdf5_metno::Dataset) -> Vec<(u64, usize)> {
    let n = ds.num_chunks().expect("chunked dataset");
    assert_eq!(n, SAMPLES, "one chunk per sample");
    let mut loc = vec![(0u64, 0usize); SAMPLES];
    for k in 0..n {
        let info = ds.chunk_info(k).expect("chunk info");
        assert_eq!(info.filter_mask, 0, "every filter applied");
        loc[info.offset[0] as usize] = (info.addr, info.size as usize);
    }
    loc
}

fn bench_storage(c: &mut Criterion, name: &str, storage: Storage, data: &[u8]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, ratio) = write_file(dir.path(), storage, data);
    let idx = XorShift(42).sample(SAMPLES, BATCH);
    let mut expected = vec![0u8; BATCH * SAMPLE_BYTES];
    for (slot, &i) in expected.chunks_exact_mut(SAMPLE_BYTES).zip(&idx) {
        let i = i as usize;
        slot.copy_from_slice(&data[i * SAMPLE_BYTES..(i + 1) * SAMPLE_BYTES]);
    }
    let mut out = vec![0u8; BATCH * SAMPLE_BYTES];

    let h5 = hdf5_metno::File::open(&path).expect("open with hdf5");
    let ds = h5.dataset("images").expect("dataset");
    let reader = Hdf5File::open(
        path.clone(),
        Selection::Names(vec!["images".into()]),
        CACHE_BYTES,
        None,
    )
    .expect("open with packread");
    // Every variant must produce the bytes that were written.
    h5dread_per_index(&ds, &idx, &mut out);
    assert!(out == expected, "H5Dread differs from the written data");
    out.fill(0);
    reader
        .read_batch(&idx, &[0], &mut [&mut out])
        .expect("read_batch");
    assert!(out == expected, "packread differs from the written data");

    let loc = chunk_locations(&ds);
    let file = File::open(&path).expect("open file");
    // The physical anchor for uncompressed chunks: preads of the same chunk bytes, split over
    // two plain threads (half a batch each).
    let pread_2 = |out: &mut [u8]| {
        let (a, b) = out.split_at_mut(BATCH / 2 * SAMPLE_BYTES);
        let (ia, ib) = idx.split_at(BATCH / 2);
        let (file, loc) = (&file, &loc);
        std::thread::scope(|s| {
            for (half, ids) in [(a, ia), (b, ib)] {
                s.spawn(move || {
                    for (slot, &i) in half.chunks_exact_mut(SAMPLE_BYTES).zip(ids) {
                        file.read_exact_at(slot, loc[i as usize].0).expect("pread");
                    }
                });
            }
        });
    };
    // The codec anchor for gzip chunks: libdeflate alone (packread's inflater) decoding the
    // batch's chunks, already in memory, on one thread and split over two plain threads.
    // Shuffle of 1-byte elements is the identity, so inflate output is the sample itself.
    let stored: Vec<Vec<u8>> = idx
        .iter()
        .map(|&i| {
            let (at, len) = loc[i as usize];
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, at).expect("pread chunk");
            buf
        })
        .collect();
    let inflate = |slots: &mut [u8], chunks: &[Vec<u8>]| {
        let mut d = libdeflater::Decompressor::new();
        for (slot, chunk) in slots.chunks_exact_mut(SAMPLE_BYTES).zip(chunks) {
            let n = d.zlib_decompress(chunk, slot).expect("inflate");
            assert_eq!(n, SAMPLE_BYTES);
        }
    };
    let inflate_2 = |out: &mut [u8]| {
        let (a, b) = out.split_at_mut(BATCH / 2 * SAMPLE_BYTES);
        let (ca, cb) = stored.split_at(BATCH / 2);
        std::thread::scope(|s| {
            s.spawn(|| inflate(a, ca));
            inflate(b, cb);
        });
    };
    let raw = matches!(storage, Storage::Raw);
    out.fill(0);
    if raw {
        pread_2(&mut out);
        assert!(
            out == expected,
            "two-thread pread differs from the written data"
        );
    } else {
        inflate_2(&mut out);
        assert!(out == expected, "libdeflate differs from the written data");
    }
    println!("{name}: compression ratio {ratio:.2}x (array bytes / stored bytes)");

    let threads = pool::num_threads();
    let mut group = c.benchmark_group(format!("hdf5/{name}_64x3x256x256_u8"));
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes((BATCH * SAMPLE_BYTES) as u64));
    group.bench_function("libhdf5_h5dread_hyperslab_per_index", |b| {
        b.iter(|| h5dread_per_index(&ds, black_box(&idx), black_box(&mut out)))
    });
    if raw {
        group.bench_function("pread_2_scoped_threads", |b| {
            b.iter(|| pread_2(black_box(&mut out)))
        });
    } else {
        group.bench_function("libdeflate_in_memory_1_thread", |b| {
            b.iter(|| inflate(black_box(&mut out), &stored))
        });
        group.bench_function("libdeflate_in_memory_2_scoped_threads", |b| {
            b.iter(|| inflate_2(black_box(&mut out)))
        });
    }
    group.bench_function(format!("packread_{threads}_threads"), |b| {
        b.iter(|| reader.read_batch(black_box(&idx), &[0], &mut [black_box(&mut out)]))
    });
    // The same engine on one thread: what the pool adds, separated from per-chunk costs.
    pool::set_num_threads(1);
    group.bench_function("packread_1_thread", |b| {
        b.iter(|| reader.read_batch(black_box(&idx), &[0], &mut [black_box(&mut out)]))
    });
    pool::set_num_threads(0);
    group.finish();
}

fn bench_read_batch(c: &mut Criterion) {
    let data = images();
    bench_storage(c, "raw_1_sample_chunks", Storage::Raw, &data);
    bench_storage(
        c,
        "gzip4_shuffle_1_sample_chunks",
        Storage::GzipShuffle,
        &data,
    );
}

criterion_group!(benches, bench_read_batch);
criterion_main!(benches);
