//! Blosc buffers, decoded by c-blosc2 (compiled into the extension by `build.rs`, against the
//! same lz4, zstd and zlib as the rest of packread):
//!
//! - blosc 1.x chunks (HDF5 filter 32001, as PyTables and hdf5plugin write them): every inner
//!   codec (blosclz, lz4, lz4hc, zlib, zstd), byte and bit shuffle, memcpy'ed buffers; c-blosc2
//!   reads the blosc 1.x format (and its own);
//! - blosc2 contiguous frames (HDF5 filter 32026, hdf5plugin's `Blosc2` and PyTables'
//!   `blosc2:*`): one frame per HDF5 chunk holding one blosc2 chunk, or, when the chunk has
//!   dimensions, a b2nd array whose blocks are tiles of the chunk (put back in C order here).
//!
//! Every call uses decompression contexts of its own with one thread, so calls from the pool's
//! threads never share state. c-blosc2 bounds its reads by the sizes in the buffer's header and
//! its writes by the destination size; the headers are still checked against what was stored
//! and what the chunk holds first: a header that disagrees is an error here, never a read past
//! the chunk or a decode of the wrong size.

use super::CodecError;
// c-blosc2 (built by build.rs) calls zlib's `compress2`/`uncompress`: link libz-sys even where
// no Rust code names it (a build without the `hdf5` feature, such as the fuzz targets').
extern crate libz_sys as _;
use std::ffi::{c_char, c_int, CStr};
use std::sync::Once;

/// Bytes of a blosc chunk header (the part blosc 1.x and blosc2 share).
pub const BLOSC_HEADER: usize = 16;
/// Chunk format versions: 2 is blosc 1.x, 3 to 5 blosc2 (c-blosc2 reads them all).
const FORMAT_VERSIONS: std::ops::RangeInclusive<u8> = 1..=5;

extern "C" {
    fn packread_blosc2_init();
    fn packread_blosc_chunk_decode(src: *const u8, srclen: i32, dst: *mut u8, dstlen: i32)
        -> c_int;
    fn packread_blosc2_frame_decode(
        src: *const u8,
        srclen: i64,
        dst: *mut u8,
        dstlen: i64,
        size_out: *mut i64,
        why: *mut c_char,
        whylen: usize,
    ) -> c_int;
    fn packread_blosc2_compress(
        src: *const u8,
        srclen: i32,
        typesize: i32,
        clevel: c_int,
        doshuffle: c_int,
        compname: *const c_char,
        frame: c_int,
        out: *mut *mut u8,
    ) -> i64;
    fn packread_blosc2_free(p: *mut u8);
}

/// c-blosc2's one-time global set-up, before any other call.
fn init() {
    static INIT: Once = Once::new();
    // SAFETY: called once, before any other c-blosc2 function (every entry point here calls
    // this first).
    INIT.call_once(|| unsafe { packread_blosc2_init() });
}

/// What a blosc chunk header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BloscHeader {
    pub version: u8,
    pub flags: u8,
    pub typesize: u8,
    pub nbytes: usize,
    pub blocksize: usize,
    pub cbytes: usize,
}

impl BloscHeader {
    pub fn parse(input: &[u8]) -> Result<BloscHeader, CodecError> {
        let h = input.get(..BLOSC_HEADER).ok_or_else(|| {
            format!(
                "blosc: {} stored bytes, shorter than the {BLOSC_HEADER}-byte header",
                input.len()
            )
        })?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as usize;
        Ok(BloscHeader {
            version: h[0],
            flags: h[2],
            typesize: h[3],
            nbytes: u32_at(4),
            blocksize: u32_at(8),
            cbytes: u32_at(12),
        })
    }
}

/// Decodes the blosc chunk `input` into exactly `out`.
pub fn blosc_decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let h = BloscHeader::parse(input)?;
    if !FORMAT_VERSIONS.contains(&h.version) {
        return Err(CodecError::Corrupt(format!(
            "blosc: header format version {} (expected {FORMAT_VERSIONS:?})",
            h.version
        )));
    }
    if h.nbytes != out.len() {
        return Err(CodecError::Corrupt(format!(
            "blosc: header says {} decoded bytes, the chunk holds {}",
            h.nbytes,
            out.len()
        )));
    }
    if h.cbytes < BLOSC_HEADER || h.cbytes > input.len() {
        return Err(CodecError::Corrupt(format!(
            "blosc: header says {} compressed bytes, {} are stored",
            h.cbytes,
            input.len()
        )));
    }
    if out.is_empty() {
        return Ok(());
    }
    if h.typesize == 0 || h.blocksize == 0 {
        return Err(CodecError::Corrupt(format!(
            "blosc: header has typesize {} and blocksize {} (neither may be 0)",
            h.typesize, h.blocksize
        )));
    }
    let (Ok(srclen), Ok(dstlen)) = (i32::try_from(h.cbytes), i32::try_from(out.len())) else {
        return Err(CodecError::Corrupt(format!(
            "blosc: {} bytes is more than blosc can hold",
            out.len()
        )));
    };
    init();
    // SAFETY: c-blosc2 reads at most `srclen` bytes of `input` (checked above to lie inside
    // it), validating every block offset against it, and writes at most `dstlen` bytes.
    let n =
        unsafe { packread_blosc_chunk_decode(input.as_ptr(), srclen, out.as_mut_ptr(), dstlen) };
    if n != dstlen {
        return Err(CodecError::Corrupt(format!(
            "blosc: corrupt buffer (c-blosc2 returned {n}, expected {} bytes)",
            out.len()
        )));
    }
    Ok(())
}

/// Decodes a blosc2 contiguous frame (one HDF5 blosc2 chunk) into exactly `out`, in C order.
pub fn blosc2_frame_decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    frame(input, Some(out))
        .map(|_| ())
        .map_err(CodecError::Corrupt)
}

/// The number of bytes a blosc2 contiguous frame decodes to.
pub fn blosc2_frame_size(input: &[u8]) -> Result<usize, CodecError> {
    frame(input, None).map_err(CodecError::Corrupt)
}

fn frame(input: &[u8], out: Option<&mut [u8]>) -> Result<usize, String> {
    let len = i64::try_from(input.len()).map_err(|_| "blosc2: frame too large".to_string())?;
    let (dst, dstlen) = match out {
        Some(o) => (o.as_mut_ptr(), o.len() as i64),
        None => (std::ptr::null_mut(), 0),
    };
    init();
    let mut why = [0 as c_char; 200];
    let mut size = -1i64;
    // SAFETY: c-blosc2 reads the frame within `len` bytes (it checks the frame's own length
    // field against it first) without writing or keeping it, and writes at most `dstlen`
    // bytes to `dst` (nothing when it is null); `why` is a buffer of `why.len()` bytes.
    let rc = unsafe {
        packread_blosc2_frame_decode(
            input.as_ptr(),
            len,
            dst,
            dstlen,
            &mut size,
            why.as_mut_ptr(),
            why.len(),
        )
    };
    if rc != 0 {
        // SAFETY: snprintf wrote a NUL-terminated message into `why` (or left it zeroed).
        let msg = unsafe { CStr::from_ptr(why.as_ptr()) };
        return Err(msg.to_string_lossy().into_owned());
    }
    usize::try_from(size).map_err(|_| format!("blosc2: frame of {size} bytes"))
}

/// Compresses `data` with c-blosc2, for tests and benchmarks: one blosc2 chunk, or with
/// `frame` a contiguous frame holding it (what the HDF5 blosc2 filter writes for 1-d chunks).
/// `shuffle`: 0 none, 1 byte, 2 bit.
#[doc(hidden)]
pub fn blosc2_compress(
    data: &[u8],
    typesize: usize,
    shuffle: i32,
    codec: &str,
    level: i32,
    frame: bool,
) -> Vec<u8> {
    init();
    let name = std::ffi::CString::new(codec).expect("no NUL");
    let mut out: *mut u8 = std::ptr::null_mut();
    // SAFETY: valid input slice and name; c-blosc2 mallocs `out`, freed below.
    let n = unsafe {
        packread_blosc2_compress(
            data.as_ptr(),
            i32::try_from(data.len()).expect("under 2 GiB"),
            typesize as i32,
            level,
            shuffle,
            name.as_ptr(),
            c_int::from(frame),
            &mut out,
        )
    };
    assert!(n > 0 && !out.is_null(), "c-blosc2 compression failed: {n}");
    // SAFETY: `out` holds `n` bytes written by c-blosc2, freed once after the copy.
    unsafe {
        let v = std::slice::from_raw_parts(out, n as usize).to_vec();
        packread_blosc2_free(out);
        v
    }
}

#[cfg(test)]
pub(crate) mod tests {
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

    fn data(n: usize) -> Vec<u8> {
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
        // typesize / blocksize 0.
        for at in [3usize, 8] {
            let mut bad = c.clone();
            bad[at..at + if at == 3 { 1 } else { 4 }].fill(0);
            assert!(blosc_decompress(&bad, &mut out).is_err(), "zero at {at}");
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

    #[test]
    fn frames_round_trip_and_bad_frames_are_errors() {
        let d = data(60_001);
        for codec in ["blosclz", "lz4", "zstd", "zlib"] {
            let f = blosc2_compress(&d, 1, 1, codec, 5, true);
            assert_eq!(&f[2..10], b"b2frame\0", "{codec}");
            assert_eq!(blosc2_frame_size(&f).unwrap(), d.len());
            let mut out = vec![0x11; d.len()];
            blosc2_frame_decompress(&f, &mut out).unwrap();
            assert_eq!(out, d, "{codec}");
        }
        let f = blosc2_compress(&d, 1, 1, "lz4", 5, true);
        let mut out = vec![0u8; d.len()];
        assert!(blosc2_frame_decompress(&f, &mut out[..d.len() - 1]).is_err());
        assert!(blosc2_frame_decompress(&f[..f.len() - 1], &mut out).is_err());
        assert!(blosc2_frame_decompress(&f[..40], &mut out).is_err());
        assert!(blosc2_frame_decompress(&[0u8; 200], &mut out).is_err());
        assert!(blosc2_frame_decompress(&[], &mut out).is_err());
        // A header naming a filter id c-blosc2 does not define (5..=31): refused before
        // c-blosc2 builds contexts from it (its own refusal there leaks, see blosc2_shim.c).
        for id in [5u8, 31, 200] {
            let mut bad = f.clone();
            bad[70] = 1;
            bad[71] = id;
            let refused = blosc2_frame_decompress(&bad, &mut out).is_err();
            assert!(refused || id == 200, "filter id {id}");
            assert_eq!(
                blosc2_frame_size(&bad).is_err(),
                id != 200,
                "filter id {id}"
            );
        }
        // The frame's chunk claims more bytes than the frame holds (c-blosc2 would read past
        // the frame): refused before decoding, with a message that says so.
        let header_len = u32::from_be_bytes(f[11..15].try_into().unwrap()) as usize;
        let mut bad = f.clone();
        let claim = u32::try_from(f.len()).unwrap();
        bad[header_len + 12..header_len + 16].copy_from_slice(&claim.to_le_bytes());
        let err = blosc2_frame_decompress(&bad, &mut out).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
        // A chunk, not a frame.
        let c = blosc2_compress(&d, 1, 1, "lz4", 5, false);
        assert!(blosc2_frame_decompress(&c, &mut out).is_err());
        // Garbage in the middle (the chunk's data).
        let mut bad = f.clone();
        let mid = bad.len() / 2;
        bad[mid - 32..mid + 32].fill(0xEE);
        assert!(blosc2_frame_decompress(&bad, &mut out).is_err());
    }
}
