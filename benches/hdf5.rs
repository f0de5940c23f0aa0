//! Criterion benches for the HDF5 core: packread's batch read of one-sample chunks against
//! libhdf5's own `H5Dread` (through the `hdf5-metno` crate that packread links) on the same
//! file; for uncompressed chunks against plain `pread`s of the same chunk bytes on two threads
//! and a `memcpy` gather of the same samples from memory (the physical limit), for gzip chunks
//! against libdeflate alone decoding the same chunks from memory.
//!
//! Run with `cargo bench --bench hdf5`. The file is written with `hdf5-metno` into a temporary
//! directory, flushed and read once before timing, so every number is a warm-page-cache
//! number. Samples are 3x256x256 uint8 images that compress about as well as natural images
//! (each row a random walk), one sample per chunk, 2,048 of them (403 MB); every iteration
//! reads a fresh batch of 64 random indices (see `common`). The whole run takes about two
//! minutes on 2 cores.

mod common;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{as_i64, on_2_threads, Samples, XorShift, BATCH, SAMPLES, SAMPLE_BYTES, SHAPE};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hdf5_sys::h5d::{H5Dget_space, H5Dget_type, H5Dread};
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{H5S_seloper_t, H5Sclose, H5Screate_simple, H5Sselect_hyperslab};
use hdf5_sys::h5t::H5Tclose;
use packread::batch::{self, pool};
use packread::formats::hdf5::{Hdf5File, Selection};

/// packread's default decoded-chunk cache (unused by one-sample chunks, kept as in Python).
const CACHE_BYTES: usize = 32 << 20;

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
    common::warm(&[&path]);
    (path, data.len() as f64 / stored as f64)
}

/// libhdf5's read of the samples `idx`, one hyperslab `H5Dread` per index straight into its
/// slot of `out` (what h5py's `read_direct` or `d[i]` does per sample).
fn h5dread_per_index(ds: &hdf5_metno::Dataset, idx: &[usize], out: &mut [u8]) {
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
    let h5 = hdf5_metno::File::open(&path).expect("open with hdf5");
    let ds = h5.dataset("images").expect("dataset");
    let reader = Hdf5File::open(
        packread::source::local(path.clone()).expect("open"),
        Selection::Names(vec!["images".into()]),
        CACHE_BYTES,
        None,
    )
    .expect("open with packread");
    let loc = chunk_locations(&ds);
    let file = File::open(&path).expect("open file");
    println!("{name}: compression ratio {ratio:.2}x (array bytes / stored bytes)");

    let h5dread = |idx: &[usize], out: &mut [u8]| h5dread_per_index(&ds, idx, out);
    let packread = |idx: &[usize], out: &mut [u8]| {
        batch::read(&reader, &as_i64(idx), &[0], &mut [out]).expect("read_batch")
    };
    // Plain I/O of the same chunk bytes (uncompressed chunks only).
    let pread = |idx: &[usize], out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
            file.read_exact_at(slot, loc[i].0).expect("pread");
        }
    };
    // The codec alone (gzip chunks only): libdeflate, packread's inflater, decoding the chunks
    // from memory, every chunk already read. Shuffle of 1-byte elements is the identity, so
    // the inflate output is the sample itself.
    let raw = matches!(storage, Storage::Raw);
    let chunks: Vec<Vec<u8>> = if raw {
        Vec::new()
    } else {
        loc.iter()
            .map(|&(at, len)| {
                let mut buf = vec![0u8; len];
                file.read_exact_at(&mut buf, at).expect("pread chunk");
                buf
            })
            .collect()
    };
    let inflate = |idx: &[usize], out: &mut [u8]| {
        let mut d = libdeflater::Decompressor::new();
        for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
            let n = d.zlib_decompress(&chunks[i], slot).expect("inflate");
            assert_eq!(n, SAMPLE_BYTES);
        }
    };

    let threads = pool::num_threads();
    let mut samples = Samples::new(data, SAMPLE_BYTES, 42);
    let mut group = c.benchmark_group(format!("hdf5/{name}_64x3x256x256_u8"));
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes((BATCH * SAMPLE_BYTES) as u64));
    samples.bench(
        &mut group,
        "baseline_libhdf5_h5dread_hyperslab_per_index",
        h5dread,
    );
    if raw {
        samples.bench(&mut group, "anchor_pread_2_scoped_threads", |idx, out| {
            on_2_threads(idx, out, SAMPLE_BYTES, &pread)
        });
        samples.bench_limits(&mut group);
    } else {
        samples.bench(&mut group, "anchor_libdeflate_in_memory_1_thread", inflate);
        samples.bench(
            &mut group,
            "anchor_libdeflate_in_memory_2_scoped_threads",
            |idx, out| on_2_threads(idx, out, SAMPLE_BYTES, &inflate),
        );
    }
    samples.bench(&mut group, &format!("packread_{threads}_threads"), packread);
    // The same engine on one thread: what the pool adds, separated from per-chunk costs.
    pool::set_num_threads(1);
    samples.bench(&mut group, "packread_1_thread", packread);
    pool::set_num_threads(0);
    group.finish();
}

fn bench_read_batch(c: &mut Criterion) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let data = rng.smooth(SAMPLES * SAMPLE_BYTES, 3);
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
