//! Blosc chunks, decoded by c-blosc2 (compiled into the extension by `build.rs`, against the
//! same lz4, zstd and zlib as the rest of packread): blosc 1.x chunks (HDF5 filter 32001, as
//! PyTables and hdf5plugin write them; every inner codec, byte and bit shuffle, memcpy'ed
//! buffers) and blosc2 chunks (inside the frames of HDF5 filter 32026, see
//! [`frame`]).
//!
//! c-blosc2 is handed one chunk at a time, and only after its header was checked here against
//! what was stored and what the chunk must decode to ([`check_chunk`]): sizes, block size, type
//! size, the codec and every filter. c-blosc2 would otherwise look an unknown codec or filter
//! id up as a plugin (running `python -c "import blosc2_<name>"` through `popen` and loading
//! what it prints, from whichever pool thread met the chunk, while it edits global tables
//! without a lock), or trust a lazy chunk's pointers into a file it does not have. Chunks that
//! are one value repeated (zeros, NaN, a run of one value, "uninitialised") are written here.
//! Each thread decodes in a c-blosc2 context of its own with one thread, kept from chunk to
//! chunk (a chunk with a zstd dictionary gets a fresh one: see `blosc2_shim.c`), so calls
//! from the pool's threads never share state.

//!
//! The module's parts: [`header`] checks a chunk's header, [`frame`] parses blosc2 frames,
//! [`b2nd`] their n-d arrays, and `encode` (tests, benchmarks and fuzz seeds only, behind the
//! `encoders` feature) compresses with c-blosc2.

mod b2nd;
#[cfg(any(test, feature = "encoders"))]
mod encode;
mod frame;
mod header;

// c-blosc2 (built by build.rs) calls zlib's `compress2`/`uncompress`: link libz-sys even where
// no Rust code names it (a build without the `hdf5` feature, such as the fuzz targets').
extern crate libz_sys as _;
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::Once;

use super::CodecError;
#[cfg(any(test, feature = "encoders"))]
pub use encode::{b2nd_compress, blosc2_compress, blosc2_compress_with_dict};
pub use frame::{blosc2_frame_decompress, blosc2_frame_size};
pub(crate) use header::{check_chunk, BloscHeader, Special};
use header::{corrupt, BLOSC2_HEADER};

/// The shim's per-thread decompression context (opaque here).
#[repr(C)]
struct KeptContext {
    _private: [u8; 0],
}

extern "C" {
    fn packread_blosc2_init();
    fn packread_blosc_chunk_decode(
        src: *const u8,
        srclen: i32,
        dst: *mut u8,
        dstlen: i32,
        kept: *mut *mut KeptContext,
    ) -> c_int;
    fn packread_blosc_dctx_free(kept: *mut KeptContext);
}

/// The calling thread's kept c-blosc2 context (see `packread_blosc_chunk_decode` in
/// `blosc2_shim.c` for when it is reused and when a chunk gets a fresh one), freed when the
/// thread exits.
struct Kept(Cell<*mut KeptContext>);

impl Drop for Kept {
    fn drop(&mut self) {
        // SAFETY: the pointer is null or the shim's, owned by this thread's slot alone.
        unsafe { packread_blosc_dctx_free(self.0.replace(std::ptr::null_mut())) }
    }
}

thread_local! {
    static KEPT: Kept = const { Kept(Cell::new(std::ptr::null_mut())) };
}

/// c-blosc2's one-time global set-up, before any other call.
fn init() {
    static INIT: Once = Once::new();
    // SAFETY: called once, before any other c-blosc2 function (every entry point here calls
    // this first).
    INIT.call_once(|| unsafe { packread_blosc2_init() });
}

/// Decodes the blosc chunk `input` into exactly `out`.
pub fn blosc_decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let h = check_chunk(input, out.len())?;
    decode_checked(input, &h, out)
}

/// [`blosc_decompress`] in a context made for this chunk alone, as every chunk was decoded
/// before contexts were kept: what the benchmarks compare the kept context against.
#[cfg(any(test, feature = "encoders"))]
pub fn blosc_decompress_fresh_context(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let h = check_chunk(input, out.len())?;
    decode_in(input, &h, out, true)
}

/// Decodes a chunk whose header [`check_chunk`] accepted for `out.len()` bytes.
pub(super) fn decode_checked(
    input: &[u8],
    h: &BloscHeader,
    out: &mut [u8],
) -> Result<(), CodecError> {
    decode_in(input, h, out, false)
}

/// [`decode_checked`], in the thread's kept context or (`fresh`) a context of its own.
fn decode_in(input: &[u8], h: &BloscHeader, out: &mut [u8], fresh: bool) -> Result<(), CodecError> {
    if out.is_empty() {
        return Ok(());
    }
    if let Some(special) = h.special()? {
        let typesize = usize::from(h.typesize);
        match special {
            Special::Zeros | Special::Uninit => out.fill(0),
            Special::Nan if typesize == 4 => super::fill(out, &f32::NAN.to_le_bytes()),
            Special::Nan => super::fill(out, &f64::NAN.to_le_bytes()),
            Special::Value => super::fill(out, &input[BLOSC2_HEADER..BLOSC2_HEADER + typesize]),
        }
        return Ok(());
    }
    let (Ok(srclen), Ok(dstlen)) = (i32::try_from(h.cbytes), i32::try_from(out.len())) else {
        return Err(corrupt(format!(
            "blosc: {} bytes is more than blosc can hold",
            out.len()
        )));
    };
    init();
    // The kept context is this thread's alone; the shim replaces or frees it in place. A
    // thread being torn down (its slot gone) decodes in a fresh context.
    let (src, dst) = (input.as_ptr(), out.as_mut_ptr());
    // SAFETY: `check_chunk` proved the header's compressed size inside `input` (`srclen` bytes
    // of it are read, each block offset checked against them by c-blosc2), its decoded size
    // `out.len()` (`dstlen` bytes are written at most), and its codec and filters built in;
    // `kept` is null or this thread's slot, which only the shim writes.
    let decode = |kept: *mut *mut KeptContext| unsafe {
        packread_blosc_chunk_decode(src, srclen, dst, dstlen, kept)
    };
    let n = if fresh {
        decode(std::ptr::null_mut())
    } else {
        KEPT.try_with(|kept| {
            let mut ctx = kept.0.get();
            let n = decode(&mut ctx);
            kept.0.set(ctx);
            n
        })
        .unwrap_or_else(|_| decode(std::ptr::null_mut()))
    };
    if n != dstlen {
        return Err(corrupt(format!(
            "blosc: corrupt chunk (c-blosc2 returned {n}, expected {} bytes)",
            out.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::encode::blosc2_compress_with_dict;
    use super::header::*;
    use super::*;

    /// Compresses with c-blosc2 (for tests): `codec` is a blosc compressor name.
    pub(crate) fn blosc_compress(
        data: &[u8],
        typesize: usize,
        shuffle: i32,
        codec: &str,
    ) -> Vec<u8> {
        blosc2_compress(data, typesize, shuffle, codec, 5, false)
    }

    pub(crate) fn data(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| ((i / 7) % 13) as u8 ^ (i % 3) as u8)
            .collect()
    }

    #[test]
    fn every_codec_and_shuffle_round_trips() {
        let d = data(100_003);
        for codec in ["blosclz", "lz4", "lz4hc", "zlib", "zstd"] {
            for shuffle in 0..3 {
                let c = blosc_compress(&d, 4, shuffle, codec);
                let mut out = vec![0xAA; d.len()];
                blosc_decompress(&c, &mut out).unwrap();
                assert_eq!(out, d, "{codec} shuffle {shuffle}");
            }
        }
    }

    #[test]
    fn bad_headers_are_errors() {
        let d = data(50_000);
        let c = blosc_compress(&d, 8, 1, "lz4");
        let mut out = vec![0u8; d.len()];
        // Wrong decoded size for the chunk.
        assert!(blosc_decompress(&c, &mut out[..d.len() - 8]).is_err());
        // Truncated.
        assert!(blosc_decompress(&c[..c.len() - 1], &mut out).is_err());
        assert!(blosc_decompress(&c[..10], &mut out).is_err());
        // Zeros.
        assert!(blosc_decompress(&[0u8; 64], &mut out).is_err());
        // typesize / blocksize 0, blocksize past the data.
        for (at, value) in [(3usize, 0u32), (8, 0), (8, 60_000)] {
            let mut bad = c.clone();
            if at == 3 {
                bad[3] = value as u8;
            } else {
                bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
            assert!(blosc_decompress(&bad, &mut out).is_err(), "{value} at {at}");
        }
        // Block offsets past the end (after the 32-byte blosc2 header).
        let mut bad = c.clone();
        bad[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(blosc_decompress(&bad, &mut out).is_err());
        // Garbage after a valid header (not 0xFF: in the blosc2 format a negative stream
        // size is a legal run of one byte value, and blosc has no checksum).
        let mut bad = c.clone();
        for b in &mut bad[36..] {
            *b = 0x7E;
        }
        assert!(blosc_decompress(&bad, &mut out).is_err());
    }

    /// A chunk compressed with a zstd dictionary decodes; with the dictionary's size or bytes
    /// damaged it is an error, not c-blosc2's assertion (an abort) on the dictionary zstd
    /// refused (the blosc2 fuzz target's find).
    #[test]
    fn zstd_dictionaries_are_checked_before_c_blosc2_loads_them() {
        let d: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 977).to_le_bytes())
            .collect();
        let c = blosc2_compress_with_dict(&d, 4, 5);
        let h = BloscHeader::parse(&c).unwrap();
        assert_ne!(h.blosc2_flags & USE_DICT, 0, "c-blosc2 wrote no dictionary");
        let mut out = vec![0u8; d.len()];
        blosc_decompress(&c, &mut out).unwrap();
        assert_eq!(out, d);
        let at = BLOSC2_HEADER + 4 * h.nbytes.div_ceil(h.blocksize);
        let size = i32::from_le_bytes(c[at..at + 4].try_into().unwrap()) as usize;
        // A size of 0, past the maximum and past the chunk.
        for bad_size in [0i32, -1, 128 * 1024 + 1, c.len() as i32] {
            let mut bad = c.clone();
            bad[at..at + 4].copy_from_slice(&bad_size.to_le_bytes());
            let err = blosc_decompress(&bad, &mut out).unwrap_err();
            assert!(err.to_string().contains("dictionary"), "{bad_size}: {err}");
        }
        // A trained dictionary (zstd's magic, then entropy tables) whose tables are garbage:
        // zstd refuses to load it.
        assert_eq!(&c[at + 4..at + 8], &0xEC30A437u32.to_le_bytes());
        let mut bad = c.clone();
        for b in &mut bad[at + 12..at + 4 + size.min(64)] {
            *b = 0xFF;
        }
        let err = blosc_decompress(&bad, &mut out).unwrap_err();
        assert!(err.to_string().contains("zstd refuses"), "{err}");
    }

    /// A shuffle filter whose parameter byte names another group size than the type size is
    /// refused: c-blosc2 2.23 unshuffles by that size, the 2.15 linked here by the type size
    /// (the whole-file fuzzer found the two disagreeing on a damaged PyTables chunk).
    #[test]
    fn shuffles_of_other_group_sizes_are_refused() {
        let d: Vec<u8> = (0..4000u32)
            .flat_map(|i| ((i % 61) as u16).to_le_bytes())
            .collect();
        let c = blosc2_compress(&d, 2, 1, "zstd", 5, false);
        let h = BloscHeader::parse(&c).unwrap();
        let slot = h
            .filters
            .unwrap()
            .iter()
            .position(|&f| f == SHUFFLE_FILTER)
            .unwrap();
        let mut out = vec![0u8; d.len()];
        for (meta, ok) in [(0u8, true), (2, true), (8, false), (4, false)] {
            let mut x = c.clone();
            x[24 + slot] = meta;
            let got = blosc_decompress(&x, &mut out);
            assert_eq!(got.is_ok(), ok, "meta {meta}: {got:?}");
            if ok {
                assert_eq!(out, d);
            } else {
                assert!(got.unwrap_err().to_string().contains("2.15"));
            }
        }
    }

    /// The header fields that would make c-blosc2 load a plugin or follow a lazy chunk's
    /// pointers are refused before c-blosc2 sees the chunk.
    #[test]
    fn plugin_codecs_filters_and_lazy_chunks_are_refused() {
        let d = data(20_000);
        let c = blosc_compress(&d, 4, 1, "zstd");
        let mut out = vec![0u8; d.len()];
        let h = BloscHeader::parse(&c).unwrap();
        assert!(h.filters.is_some(), "c-blosc2 writes the extended header");
        let refuse = |bad: Vec<u8>, what: &str| {
            let mut out = vec![0u8; d.len()];
            let e = blosc_decompress(&bad, &mut out).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        };
        // A registered or user codec (flags say 6, the codec byte names 32..).
        let mut bad = c.clone();
        bad[2] = (bad[2] & 0x1F) | (6 << 5);
        bad[22] = 33;
        refuse(bad, "codec 33");
        // The reserved codec slots 2, 5 and 7.
        for code in [2u8, 5, 7] {
            let mut bad = c.clone();
            bad[2] = (bad[2] & 0x1F) | (code << 5);
            refuse(bad, &format!("codec {code}"));
        }
        // Filter ids past the built-in ones, in any slot.
        for (slot, id) in [(0usize, 5u8), (5, 32), (2, 255)] {
            let mut bad = c.clone();
            bad[16 + slot] = id;
            refuse(bad, &format!("filter {id}"));
        }
        for (flag, what) in [(LAZY_CHUNK, "lazy"), (INSTRUMENTED, "instrumented")] {
            let mut bad = c.clone();
            bad[31] |= flag;
            refuse(bad, what);
        }
        // The untouched chunk still decodes.
        blosc_decompress(&c, &mut out).unwrap();
        assert_eq!(out, d);
    }

    /// A blosc 1.x chunk as c-blosc 1.x writes it (format version 2, one lz4 stream a block,
    /// positive stream sizes), written byte by byte: it decodes; with a stream's size made 0
    /// (or negative) it would decode to zeros (a byte run) by blosc2's rules, and is refused.
    #[test]
    fn blosc1_streams_of_size_zero_are_refused() {
        let d = data(5_000);
        let (block, nblocks) = (2_048usize, 3usize);
        let mut c = vec![2u8, 1, 0x10 | (1 << 5), 1];
        c.extend((d.len() as u32).to_le_bytes());
        c.extend((block as u32).to_le_bytes());
        c.extend([0u8; 4]); // cbytes, below
        let mut streams = Vec::new();
        let mut starts = Vec::new();
        for part in d.chunks(block) {
            starts.push(16 + 4 * nblocks + streams.len());
            let z = crate::codec::lz4_compress_block(part);
            streams.extend((z.len() as u32).to_le_bytes());
            streams.extend(z);
        }
        for s in &starts {
            c.extend((*s as u32).to_le_bytes());
        }
        c.extend(&streams);
        let n = c.len() as u32;
        c[12..16].copy_from_slice(&n.to_le_bytes());
        let mut out = vec![0u8; d.len()];
        blosc_decompress(&c, &mut out).unwrap();
        assert_eq!(out, d);
        for size in [0i32, -5] {
            let mut bad = c.clone();
            let at = starts[1];
            bad[at..at + 4].copy_from_slice(&size.to_le_bytes());
            let e = blosc_decompress(&bad, &mut out).unwrap_err();
            assert!(e.to_string().contains("never writes"), "{e}");
        }
        // A block start past the chunk.
        let mut bad = c.clone();
        bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(blosc_decompress(&bad, &mut out).is_err());
    }

    /// One thread's kept context through chunks that change block size, type size and codec,
    /// a chunk with a zstd dictionary between them (decoded in a context of its own: a kept
    /// one would go on using the dictionary c-blosc2 freed), and a damaged chunk (after which
    /// the context is made anew): every chunk decodes as a fresh context decodes it. Under
    /// the fuzz builds' ASan, a dictionary leaking into the kept context is a use after free.
    #[test]
    fn a_kept_context_decodes_every_chunk_as_a_fresh_one() {
        let d = data(300_000);
        let dict_data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 977).to_le_bytes())
            .collect();
        let with_dict = blosc2_compress_with_dict(&dict_data, 4, 5);
        let mut chunks: Vec<(Vec<u8>, &[u8])> = Vec::new();
        for (typesize, codec) in [(1, "lz4"), (8, "zstd"), (4, "blosclz"), (2, "lz4hc")] {
            chunks.push((blosc_compress(&d, typesize, 1, codec), &d));
            chunks.push((with_dict.clone(), &dict_data));
            chunks.push((
                blosc_compress(&d[..70_000], typesize, 2, codec),
                &d[..70_000],
            ));
        }
        for round in 0..2 {
            for (i, (chunk, want)) in chunks.iter().enumerate() {
                let mut kept = vec![0xAA; want.len()];
                blosc_decompress(chunk, &mut kept).unwrap();
                assert_eq!(&kept, want, "round {round}, chunk {i}");
                let mut fresh = vec![0x55; want.len()];
                blosc_decompress_fresh_context(chunk, &mut fresh).unwrap();
                assert_eq!(kept, fresh, "round {round}, chunk {i}");
                // A damaged copy fails, and the next chunk still decodes.
                let mut bad = chunk.clone();
                let n = bad.len();
                bad[n / 2..].fill(0x7E);
                let _ = blosc_decompress(&bad, &mut kept);
            }
        }
    }

    #[test]
    fn special_chunks_are_written_here() {
        let mut chunk = blosc_compress(&data(64), 4, 1, "lz4")[..BLOSC2_HEADER].to_vec();
        chunk[4..8].copy_from_slice(&64u32.to_le_bytes());
        chunk[12..16].copy_from_slice(&(BLOSC2_HEADER as u32).to_le_bytes());
        let mut out = vec![0xAB; 64];
        for (kind, want) in [(1u8, [0u8; 4]), (2, f32::NAN.to_le_bytes()), (4, [0; 4])] {
            chunk[31] = kind << 4;
            out.fill(0xAB);
            blosc_decompress(&chunk, &mut out).unwrap();
            assert!(out.chunks(4).all(|c| c == want), "special {kind}");
        }
        // A run of one value: the value follows the header.
        let mut run = chunk.clone();
        run[31] = 3 << 4;
        run.extend_from_slice(&[1, 2, 3, 4]);
        run[12..16].copy_from_slice(&(BLOSC2_HEADER as u32 + 4).to_le_bytes());
        blosc_decompress(&run, &mut out).unwrap();
        assert!(out.chunks(4).all(|c| c == [1, 2, 3, 4]));
        // ... without it, or a kind that does not exist, or NaN of 3-byte items.
        run.truncate(BLOSC2_HEADER);
        run[12..16].copy_from_slice(&(BLOSC2_HEADER as u32).to_le_bytes());
        assert!(blosc_decompress(&run, &mut out).is_err());
        chunk[31] = 6 << 4;
        assert!(blosc_decompress(&chunk, &mut out).is_err());
        chunk[31] = 2 << 4;
        chunk[3] = 3;
        chunk[4..8].copy_from_slice(&63u32.to_le_bytes());
        chunk[8..12].copy_from_slice(&63u32.to_le_bytes());
        let e = blosc_decompress(&chunk, &mut out[..63]).unwrap_err();
        assert!(e.to_string().contains("NaNs with type size 3"), "{e}");
    }
}
