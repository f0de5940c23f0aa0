//! The JPEG decoder choice, measured: libjpeg-turbo (what packread links, through its own
//! wrapper) against zune-jpeg (pure Rust), each decoding whole images to RGB on one thread, and
//! packread's decode + RandomResizedCrop(224) + flip and Resize(256) + CenterCrop(224) on the
//! same files for scale.
//!
//! The files are the image benchmark's photos: `make bench-jpeg` writes them (2,000 JPEGs of
//! about 500x375, quality 90, re-encoded real photographs; `benches/image_workloads.py`) and
//! runs `cargo bench --bench jpeg` with `PACKREAD_JPEG_DIR` pointing at them. Without that
//! variable the bench says so and measures nothing: synthetic images would not decode like
//! photographs. Every iteration decodes every file once, from memory; each decoder's output
//! is checked against libjpeg-turbo's before timing (zune-jpeg's IDCT and upsampling differ, so
//! within a tolerance, and its mean difference is printed).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use packread::codec::image::geometry::{transform, Crop, Draw, Element, ImageSpec, Layout};
use packread::codec::image::{decode, info, Limits, Mode};
use zune_core::bytestream::ZCursor;
use zune_jpeg::JpegDecoder;

fn jpegs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            jpegs(&p, out);
        } else if p
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("jpg") || x.eq_ignore_ascii_case("jpeg"))
        {
            out.push(p);
        }
    }
}

fn turbo(data: &[u8]) -> Vec<u8> {
    let head = info(data, &Limits::default()).expect("a JPEG header");
    decode(data, &head, None, Mode::Rgb)
        .expect("libjpeg-turbo decodes it")
        .pixels
}

fn zune(data: &[u8]) -> Vec<u8> {
    JpegDecoder::new(ZCursor::new(data))
        .decode()
        .expect("zune-jpeg decodes it")
}

fn spec(crop: Crop) -> ImageSpec {
    ImageSpec {
        size: (224, 224),
        crop,
        flip: matches!(crop, Crop::Random { .. }),
        layout: Layout::Nhwc,
        mode: Mode::Rgb,
        element: Element::U8,
        mean: vec![],
        std: vec![],
        exif_transpose: false,
        draft: false,
        limits: Limits::default(),
    }
}

fn bench(c: &mut Criterion) {
    let Some(dir) = std::env::var_os("PACKREAD_JPEG_DIR") else {
        eprintln!(
            "jpeg bench: set PACKREAD_JPEG_DIR to a folder of JPEGs (`make bench-jpeg` writes \
             the image benchmark's photos and runs this); nothing measured"
        );
        return;
    };
    let mut paths = Vec::new();
    jpegs(Path::new(&dir), &mut paths);
    paths.sort();
    let files: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!files.is_empty(), "no JPEGs under {dir:?}");
    // Checked first: same sizes, pixels close (the IDCTs and chroma upsampling differ).
    let mut diff = 0f64;
    let mut count = 0f64;
    for f in &files {
        let (a, b) = (turbo(f), zune(f));
        assert_eq!(a.len(), b.len(), "zune-jpeg decoded another size");
        diff += a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*x as f64 - *y as f64).abs())
            .sum::<f64>();
        count += a.len() as f64;
    }
    eprintln!(
        "jpeg bench: {} files; zune-jpeg's pixels differ from libjpeg-turbo's (= PIL's) by {:.3} \
         levels on average",
        files.len(),
        diff / count
    );
    let mut group = c.benchmark_group("jpeg_decode");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(files.len() as u64));
    group.bench_function("baseline_libjpeg_turbo_full", |b| {
        b.iter(|| {
            for f in &files {
                black_box(turbo(f));
            }
        })
    });
    group.bench_function("anchor_zune_jpeg_full", |b| {
        b.iter(|| {
            for f in &files {
                black_box(zune(f));
            }
        })
    });
    let mut out = vec![0u8; 224 * 224 * 3];
    for (name, crop) in [
        (
            "packread_random_resized_crop_224_flip",
            Crop::Random {
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0),
            },
        ),
        (
            "packread_resize_256_center_crop_224",
            Crop::Center { resize: 256 },
        ),
    ] {
        let spec = spec(crop);
        let mut epoch = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                epoch += 1;
                for (i, f) in files.iter().enumerate() {
                    let mut draw = Draw::new(0, epoch, i as u64);
                    transform(f, &spec, &mut draw, &mut out).expect("decodes");
                }
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
