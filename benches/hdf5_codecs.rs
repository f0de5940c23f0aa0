//! Per-decoder speed of the HDF5 plugin codecs: packread's decode step against the codec
//! library called directly on the same chunk bytes (one thread, output buffer reused).
//!
//! - blosc (lz4hc level 9 rows of float64, as the seed writes them; zstd + byte shuffle and
//!   blosclz + shuffle on 3x256x256 uint8 images): packread vs c-blosc2's `blosc2_decompress`
//!   on the same chunk; blosc2 (the same data as HDF5 blosc2 frames): packread vs c-blosc2
//!   decoding the bare chunk inside;
//! - zstd: packread vs `zstd::bulk::Decompressor::decompress_to_buffer`;
//! - HDF5 LZ4 framing: packread vs `LZ4_decompress_safe` over the same blocks;
//! - bitshuffle + LZ4: packread vs the LZ4 decoding alone of the same blocks (no Rust library
//!   does bitshuffle: the LZ4 part is the floor).
//!
//! - the blosc chunk path itself (`blosc_context`): one chunk decoded in the thread's kept
//!   c-blosc2 context against a context made for the chunk (what every chunk cost before
//!   contexts were kept), without a zstd dictionary and with one (always a fresh context).
//!
//! Run: `cargo bench --bench hdf5_codecs`.

use std::ffi::c_void;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use packread::codec::{
    bitshuffle_block, bitunshuffle_block_with, blosc2_compress, blosc2_compress_with_dict,
    blosc_decompress, blosc_decompress_fresh_context, lz4_compress_block, BitshuffleInner, Faults,
    Kernel, Pipeline, Step,
};
use packread::ErrorKind;

const FAULTS: Faults = Faults::both(ErrorKind::Hdf5);

/// A deterministic generator (no dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        self.0 >> 33
    }
}

/// A smooth picture with noise, 3x256x256 uint8.
fn image() -> Vec<u8> {
    let mut rng = Lcg(7);
    let mut out = Vec::with_capacity(3 * 256 * 256);
    for c in 0..3 {
        for y in 0..256 {
            for x in 0..256 {
                let base = 127.0 + 100.0 * ((x as f64) * 0.03).sin() * ((y as f64) * 0.02).cos();
                let noise = (rng.next() % 13) as f64 - 6.0;
                out.push((base + noise + 20.0 * c as f64).clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

/// A quantized random walk holding each value 4 samples: 100k float64 (800 KB).
fn signal() -> Vec<u8> {
    let mut rng = Lcg(9);
    let mut v = 0.0f64;
    let mut out = Vec::with_capacity(800_000);
    for i in 0..100_000 {
        if i % 4 == 0 {
            v += ((rng.next() % 7) as f64 - 3.0) / 100.0;
        }
        out.extend(v.to_le_bytes());
    }
    out
}

extern "C" {
    // c-blosc2's own one-call decoder (linked into packread), for the "library" baselines.
    fn blosc2_decompress(src: *const c_void, srcsize: i32, dest: *mut c_void, destsize: i32)
        -> i32;
}

/// c-blosc2 alone on a bare blosc chunk (its global context; the bench is single-threaded).
fn blosc_library(s: &[u8], d: &mut [u8]) {
    // SAFETY: a valid chunk made by `blosc2_compress` (which also initialised c-blosc2),
    // bounded by both lengths.
    let n = unsafe {
        blosc2_decompress(
            s.as_ptr().cast(),
            s.len() as i32,
            d.as_mut_ptr().cast(),
            d.len() as i32,
        )
    };
    assert_eq!(n as usize, d.len());
}

fn lz4_decode(src: &[u8], dst: &mut [u8]) {
    // SAFETY: bounded by both lengths.
    let n = unsafe {
        lz4_sys::LZ4_decompress_safe(
            src.as_ptr().cast(),
            dst.as_mut_ptr().cast(),
            src.len() as i32,
            dst.len() as i32,
        )
    };
    assert_eq!(n as usize, dst.len());
}

fn bench_pair(
    c: &mut Criterion,
    name: &str,
    stored: &[u8],
    step: Step,
    decoded: &[u8],
    library: &mut dyn FnMut(&[u8], &mut [u8]),
) {
    let pipeline = Pipeline::new(vec![step]);
    let mut out = vec![0u8; decoded.len()];
    let mut tmp = Default::default();
    pipeline.decode(stored, &mut out, &mut tmp, FAULTS).unwrap();
    assert_eq!(out, decoded, "{name}: packread decodes what was written");
    library(stored, &mut out);
    assert_eq!(out, decoded, "{name}: the library decodes what was written");
    let mut g = c.benchmark_group(format!("hdf5_codecs/{name}"));
    g.throughput(Throughput::Bytes(decoded.len() as u64));
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("packread", |b| {
        b.iter(|| {
            pipeline
                .decode(black_box(stored), &mut out, &mut tmp, FAULTS)
                .unwrap()
        })
    });
    g.bench_function("library", |b| {
        b.iter(|| library(black_box(stored), &mut out))
    });
    g.finish();
}

/// One blosc chunk decoded in the kept context against a fresh one: the seed's lz4hc row,
/// zstd images (c-blosc2 makes a zstd decoder per context), and a chunk with a dictionary.
fn blosc_context(c: &mut Criterion) {
    let row = signal();
    let img = image();
    let dict_data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i % 977).to_le_bytes())
        .collect();
    for (name, stored, decoded) in [
        (
            "lz4hc9_f64_row",
            blosc2_compress(&row, 8, 0, "lz4hc", 9, false),
            &row,
        ),
        (
            "zstd5_shuffle_u8_image",
            blosc2_compress(&img, 1, 1, "zstd", 5, false),
            &img,
        ),
        (
            "zstd5_dictionary_u32",
            blosc2_compress_with_dict(&dict_data, 4, 5),
            &dict_data,
        ),
    ] {
        let mut out = vec![0u8; decoded.len()];
        blosc_decompress(&stored, &mut out).unwrap();
        assert_eq!(&out, decoded, "{name}: kept context");
        blosc_decompress_fresh_context(&stored, &mut out).unwrap();
        assert_eq!(&out, decoded, "{name}: fresh context");
        let mut g = c.benchmark_group(format!("blosc_context/{name}"));
        g.throughput(Throughput::Bytes(decoded.len() as u64));
        g.measurement_time(Duration::from_secs(3));
        g.bench_function("kept", |b| {
            b.iter(|| blosc_decompress(black_box(&stored), &mut out).unwrap())
        });
        g.bench_function("fresh", |b| {
            b.iter(|| blosc_decompress_fresh_context(black_box(&stored), &mut out).unwrap())
        });
        g.finish();
    }
}

fn codecs(c: &mut Criterion) {
    let img = image();
    let row = signal();
    for (name, data, typesize, shuffle, codec, level) in [
        ("blosc_lz4hc9_noshuffle_f64_row", &row, 8, 0, "lz4hc", 9),
        ("blosc_zstd5_shuffle_u8_image", &img, 1, 1, "zstd", 5),
        ("blosc_blosclz5_shuffle_u8_image", &img, 1, 1, "blosclz", 5),
    ] {
        let stored = blosc2_compress(data, typesize, shuffle, codec, level, false);
        bench_pair(c, name, &stored, Step::Blosc, data, &mut blosc_library);
        // The same data as one HDF5 blosc2 chunk (a contiguous frame around the chunk),
        // against c-blosc2 decoding the bare chunk: the cost of the frame.
        let frame = blosc2_compress(data, typesize, shuffle, codec, level, true);
        let mut bare = |_: &[u8], d: &mut [u8]| blosc_library(&stored, d);
        bench_pair(
            c,
            &name.replacen("blosc_", "blosc2_frame_", 1),
            &frame,
            Step::Blosc2 {
                shape: [data.len() / typesize].into(),
            },
            data,
            &mut bare,
        );
    }

    let stored = zstd::bulk::compress(&img, 3).unwrap();
    let mut d = zstd::bulk::Decompressor::new().unwrap();
    bench_pair(
        c,
        "zstd3_u8_image",
        &stored,
        Step::Zstd,
        &img,
        &mut |s, o| {
            assert_eq!(d.decompress_to_buffer(s, o).unwrap(), o.len());
        },
    );

    // HDF5 LZ4 framing, one block (hdf5plugin's default block is larger than a chunk).
    let block = lz4_compress_block(&img);
    let mut framed = (img.len() as u64).to_be_bytes().to_vec();
    framed.extend((img.len() as u32).to_be_bytes());
    framed.extend((block.len() as u32).to_be_bytes());
    framed.extend(&block);
    bench_pair(
        c,
        "lz4_hdf5_u8_image",
        &framed,
        Step::Lz4,
        &img,
        &mut |s, o| lz4_decode(&s[16..], o),
    );

    // Bitshuffle + LZ4 with the default block (8192 one-byte elements).
    let mut stored = (img.len() as u64).to_be_bytes().to_vec();
    stored.extend(8192u32.to_be_bytes());
    let mut blocks = Vec::new();
    for b in img.chunks(8192) {
        let c = lz4_compress_block(&bitshuffle_block(b, 1));
        stored.extend((c.len() as u32).to_be_bytes());
        let at = stored.len();
        stored.extend(&c);
        blocks.push((at, c.len(), b.len()));
    }
    let step = Step::Bitshuffle {
        itemsize: 1,
        block: 0,
        inner: BitshuffleInner::Lz4,
    };
    // The floor: the same LZ4 blocks decoded, without the bit transpose.
    let (pipeline, mut want) = (Pipeline::new(vec![step.clone()]), vec![0u8; img.len()]);
    pipeline
        .decode(&stored, &mut want, &mut Default::default(), FAULTS)
        .unwrap();
    assert_eq!(want, img);
    let mut g = c.benchmark_group("hdf5_codecs/bitshuffle_lz4_u8_image");
    g.throughput(Throughput::Bytes(img.len() as u64));
    g.measurement_time(Duration::from_secs(3));
    let mut out = vec![0u8; img.len()];
    let mut tmp = Default::default();
    g.bench_function("packread", |b| {
        b.iter(|| {
            pipeline
                .decode(black_box(&stored), &mut out, &mut tmp, FAULTS)
                .unwrap()
        })
    });
    g.bench_function("lz4_alone", |b| {
        b.iter(|| {
            for &(at, len, n) in &blocks {
                lz4_decode(&stored[at..at + len], &mut out[..n]);
            }
        })
    });
    g.finish();

    // The bit transpose alone, per kernel, on the image's 8192-element blocks.
    let shuffled: Vec<u8> = img
        .chunks(8192)
        .flat_map(|b| bitshuffle_block(b, 1))
        .collect();
    let mut g = c.benchmark_group("hdf5_codecs/bitunshuffle_u8_image");
    g.throughput(Throughput::Bytes(img.len() as u64));
    g.measurement_time(Duration::from_secs(3));
    for kernel in Kernel::available() {
        let mut out = vec![0u8; img.len()];
        let run = |out: &mut [u8]| {
            for (s, d) in shuffled.chunks(8192).zip(out.chunks_mut(8192)) {
                bitunshuffle_block_with(kernel, s, d, 1);
            }
        };
        run(&mut out);
        assert_eq!(out, img, "{kernel:?}");
        g.bench_function(format!("{kernel:?}"), |b| {
            b.iter(|| run(black_box(&mut out)))
        });
    }
    g.finish();
}

criterion_group!(benches, codecs, blosc_context);
criterion_main!(benches);
