//! Criterion benches for the ZIP core: parsing a large central directory, and batch reads of
//! raw members against naive single-threaded `pread` loops over the same bytes and a `memcpy`
//! gather of the same samples from memory (the physical limit).
//!
//! Run with `cargo bench --bench zip`. Archives are written here, by hand (local headers,
//! central directory, ZIP64 end records when needed: no dependency on a ZIP writer), to a
//! temporary directory, flushed and read once before timing, so every number is a
//! warm-page-cache number; batch reads draw a fresh random batch every iteration from 2,048
//! members (403 MB, see `common`). The whole run takes about two minutes on 2 cores.

mod common;

use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{as_i64, warm, Samples, XorShift, BATCH, SAMPLES, SAMPLE_BYTES};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use libdeflater::{CompressionLvl, Compressor, Decompressor};
use packread::batch::{self, pool};
use packread::dtype::literal::Literal;
use packread::dtype::DType;
use packread::formats::zip::{SamplePayload, ZipIndex, ZipLimits, ZipSamples};
use packread::source;

const STORED: u16 = 0;
const DEFLATED: u16 = 8;

/// One member as written: where its data starts and how it is stored.
struct Written {
    data_start: u64,
    stored_len: usize,
    crc32: u32,
}

/// Writes a ZIP archive of `members` (name, method, bytes as stored, uncompressed length,
/// CRC-32 of the uncompressed bytes) to `path` and returns where each member's data starts.
/// Members and the directory stay below 4 GiB; more than 65,535 members get ZIP64 end records.
fn write_zip<'a>(
    path: &Path,
    members: impl Iterator<Item = (String, u16, &'a [u8], usize, u32)>,
) -> Vec<Written> {
    let mut w = BufWriter::new(File::create(path).expect("create bench zip"));
    let mut central = Vec::new();
    let mut written = Vec::new();
    let mut pos = 0u64;
    let mut put = |w: &mut BufWriter<File>, bytes: &[u8]| {
        w.write_all(bytes).expect("write bench zip");
        pos += bytes.len() as u64;
        pos
    };
    let u16le = |v: u16| v.to_le_bytes();
    let u32le = |v: u32| v.to_le_bytes();
    for (name, method, stored, size, crc) in members {
        let header_offset = u32::try_from(
            written
                .last()
                .map_or(0, |m: &Written| m.data_start + m.stored_len as u64),
        )
        .expect("bench archive below 4 GiB");
        // version needed, flags, method, mtime, mdate (1980-01-01), crc, sizes, name, extra
        let fields: Vec<u8> = [
            &u16le(20)[..],
            &u16le(0),
            &u16le(method),
            &u16le(0),
            &u16le(0x21),
            &u32le(crc),
            &u32le(stored.len() as u32),
            &u32le(size as u32),
            &u16le(name.len() as u16),
            &u16le(0),
        ]
        .concat();
        put(&mut w, &u32le(0x0403_4b50));
        put(&mut w, &fields);
        let data_start = put(&mut w, name.as_bytes());
        put(&mut w, stored);
        central.extend(u32le(0x0201_4b50));
        central.extend(u16le(20)); // version made by
        central.extend(&fields);
        central.extend(u16le(0)); // comment length
        central.extend(u16le(0)); // disk number
        central.extend(u16le(0)); // internal attributes
        central.extend(u32le(0)); // external attributes
        central.extend(u32le(header_offset));
        central.extend(name.as_bytes());
        written.push(Written {
            data_start,
            stored_len: stored.len(),
            crc32: crc,
        });
    }
    let cd_offset = written
        .last()
        .map_or(0, |m| m.data_start + m.stored_len as u64);
    let n = written.len() as u64;
    put(&mut w, &central);
    if n > u64::from(u16::MAX) {
        let zip64_eocd = cd_offset + central.len() as u64;
        put(&mut w, &u32le(0x0606_4b50));
        put(&mut w, &44u64.to_le_bytes()); // size of the rest of this record
        put(&mut w, &u16le(45)); // version made by
        put(&mut w, &u16le(45)); // version needed
        put(&mut w, &u32le(0)); // this disk
        put(&mut w, &u32le(0)); // disk with the directory
        put(&mut w, &n.to_le_bytes());
        put(&mut w, &n.to_le_bytes());
        put(&mut w, &(central.len() as u64).to_le_bytes());
        put(&mut w, &cd_offset.to_le_bytes());
        put(&mut w, &u32le(0x0706_4b50)); // ZIP64 locator
        put(&mut w, &u32le(0));
        put(&mut w, &zip64_eocd.to_le_bytes());
        put(&mut w, &u32le(1));
    }
    let count = u16::try_from(n).unwrap_or(u16::MAX);
    put(&mut w, &u32le(0x0605_4b50));
    put(&mut w, &u16le(0));
    put(&mut w, &u16le(0));
    put(&mut w, &u16le(count));
    put(&mut w, &u16le(count));
    put(&mut w, &u32le(central.len() as u32));
    put(&mut w, &u32le(cd_offset as u32));
    put(&mut w, &u16le(0)); // comment length
    w.flush().expect("flush bench zip");
    written
}

fn bench_open(c: &mut Criterion) {
    const MEMBERS: usize = 100_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tiny_members.zip");
    let payload = b"0123456789abcdef";
    let crc = libdeflater::crc32(payload);
    let written = write_zip(
        &path,
        (0..MEMBERS).map(|i| {
            (
                format!("train/{i:06}.txt"),
                STORED,
                &payload[..],
                payload.len(),
                crc,
            )
        }),
    );
    warm(&[&path]);
    // The archive is what it should be: every member indexed, in order, data where written.
    let index = ZipIndex::open(
        source::local(path.clone()).expect("open"),
        ZipLimits::default(),
    )
    .expect("open");
    assert_eq!(index.len(), MEMBERS);
    for i in [0, 1, MEMBERS / 2, MEMBERS - 1] {
        assert_eq!(index.members()[i].name(), format!("train/{i:06}.txt"));
        assert_eq!(
            index.member_data(i).unwrap().data_start,
            written[i].data_start
        );
        assert_eq!(index.read(i).unwrap(), payload);
    }
    drop(index);

    let mut group = c.benchmark_group("zip/open");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(MEMBERS as u64));
    group.bench_function("100000_tiny_members", |b| {
        b.iter(|| {
            ZipIndex::open(
                source::local(black_box(path.clone())).expect("open"),
                ZipLimits::default(),
            )
            .expect("open")
        })
    });
    group.finish();
}

/// An archive of one member per sample, and what was written.
struct Archive {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// The members' uncompressed bytes, one after another.
    data: Vec<u8>,
    written: Vec<Written>,
}

/// `SAMPLES` members of `SAMPLE_BYTES`: uniform noise when stored, smooth rows (DEFLATE ~2.3x)
/// when deflated.
fn archive(method: u16) -> Archive {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("members.zip");
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let data = if method == STORED {
        rng.noise(SAMPLES * SAMPLE_BYTES)
    } else {
        rng.smooth(SAMPLES * SAMPLE_BYTES, 1)
    };
    let samples = || data.chunks_exact(SAMPLE_BYTES);
    let mut compressor = Compressor::new(CompressionLvl::default());
    let deflated: Vec<Vec<u8>> = if method == STORED {
        Vec::new()
    } else {
        samples()
            .map(|d| {
                let mut z = vec![0u8; compressor.deflate_compress_bound(d.len())];
                let n = compressor.deflate_compress(d, &mut z).expect("deflate");
                z.truncate(n);
                z
            })
            .collect()
    };
    let written = write_zip(
        &path,
        samples().enumerate().map(|(i, d)| {
            let stored = if method == STORED { d } else { &deflated[i] };
            (
                format!("img/{i:05}.raw"),
                method,
                stored,
                SAMPLE_BYTES,
                libdeflater::crc32(d),
            )
        }),
    );
    warm(&[&path]);
    Archive {
        _dir: dir,
        path,
        data,
        written,
    }
}

/// Every member of the archive at `path` as a sample of `SAMPLE_BYTES` raw bytes.
fn raw_samples(path: &std::path::Path, limits: ZipLimits) -> ZipSamples {
    let index = ZipIndex::open(source::local(path).expect("open"), limits).expect("open");
    let members = (0..index.len()).collect();
    let payload = SamplePayload::Raw {
        dtype: DType::from_descr(Literal::Str("|u1".into())).expect("u1"),
        shape: vec![SAMPLE_BYTES],
    };
    ZipSamples::new(Arc::new(index), members, payload, None).expect("samples")
}

fn bench_read_stored(c: &mut Criterion) {
    let a = archive(STORED);
    let index = raw_samples(&a.path, ZipLimits::default());
    let no_crc = ZipLimits {
        verify_crc: false,
        ..ZipLimits::default()
    };
    let index_no_crc = raw_samples(&a.path, no_crc);

    // The naive reader: one handle, kept open (like the seed's per-worker `ZipFile`), the data
    // offsets known, every CRC-32 checked (as zipfile, and packread by default, do).
    let file = File::open(&a.path).expect("open");
    let (file, written) = (&file, &a.written);
    let pread_crc = |idx: &[usize], out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
            file.read_exact_at(slot, written[i].data_start)
                .expect("pread");
            assert_eq!(libdeflater::crc32(slot), written[i].crc32, "CRC-32");
        }
    };
    // Plain I/O of the same bytes, no CRC-32.
    let pread = |idx: &[usize], out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
            file.read_exact_at(slot, written[i].data_start)
                .expect("pread");
        }
    };
    let packread = |idx: &[usize], out: &mut [u8]| {
        batch::read(&index, &as_i64(idx), &[0], &mut [out]).expect("read")
    };
    let packread_no_crc = |idx: &[usize], out: &mut [u8]| {
        batch::read(&index_no_crc, &as_i64(idx), &[0], &mut [out]).expect("read")
    };

    let threads = pool::num_threads();
    let mut samples = Samples::new(&a.data, SAMPLE_BYTES, 42);
    let mut group = c.benchmark_group("zip/read_raw_batch_64x196KB_stored");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes((BATCH * SAMPLE_BYTES) as u64));
    samples.bench(&mut group, "baseline_pread_crc_loop_1_thread", pread_crc);
    samples.bench(&mut group, "anchor_pread_loop_1_thread", pread);
    samples.bench_limits(&mut group);
    let name = format!("packread_{threads}_threads");
    samples.bench(&mut group, &name, packread);
    samples.bench(&mut group, &format!("{name}_no_crc"), packread_no_crc);
    // The same engine on one thread: what the pool adds, separated from per-member costs.
    pool::set_num_threads(1);
    samples.bench(&mut group, "packread_1_thread", packread);
    samples.bench(&mut group, "packread_1_thread_no_crc", packread_no_crc);
    pool::set_num_threads(0);
    group.finish();
}

fn bench_read_deflated(c: &mut Criterion) {
    let a = archive(DEFLATED);
    let index = raw_samples(&a.path, ZipLimits::default());
    let stored: usize = a.written.iter().map(|w| w.stored_len).sum();
    let ratio = a.data.len() as f64 / stored as f64;
    eprintln!("zip/read_raw_batch deflated: compression ratio {ratio:.2}x");

    // The naive reader: pread the compressed bytes, inflate them with libdeflate (the codec
    // packread uses), check the CRC-32; one thread.
    let file = File::open(&a.path).expect("open");
    let written = &a.written;
    let mut scratch = Vec::new();
    let mut decompressor = Decompressor::new();
    let naive = |idx: &[usize], out: &mut [u8]| {
        for (slot, &i) in out.chunks_exact_mut(SAMPLE_BYTES).zip(idx) {
            let w = &written[i];
            scratch.resize(w.stored_len, 0);
            file.read_exact_at(&mut scratch, w.data_start)
                .expect("pread");
            let n = decompressor
                .deflate_decompress(&scratch, slot)
                .expect("inflate");
            assert_eq!(n, SAMPLE_BYTES);
            assert_eq!(libdeflater::crc32(slot), w.crc32, "CRC-32");
        }
    };
    let packread = |idx: &[usize], out: &mut [u8]| {
        batch::read(&index, &as_i64(idx), &[0], &mut [out]).expect("read")
    };

    let threads = pool::num_threads();
    let mut samples = Samples::new(&a.data, SAMPLE_BYTES, 42);
    let mut group = c.benchmark_group("zip/read_raw_batch_64x196KB_deflated");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes((BATCH * SAMPLE_BYTES) as u64));
    samples.bench(
        &mut group,
        "baseline_pread_inflate_crc_loop_1_thread",
        naive,
    );
    samples.bench(&mut group, &format!("packread_{threads}_threads"), packread);
    pool::set_num_threads(1);
    samples.bench(&mut group, "packread_1_thread", packread);
    pool::set_num_threads(0);
    group.finish();
}

criterion_group!(benches, bench_open, bench_read_stored, bench_read_deflated);
criterion_main!(benches);
