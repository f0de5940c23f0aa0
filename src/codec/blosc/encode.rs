//! Compression with c-blosc2, for tests, benchmarks and fuzz seeds (the `encoders` feature):
//! packread itself only decodes.

use std::ffi::{c_char, c_int};

use super::init;

extern "C" {
    fn packread_blosc2_compress(
        src: *const u8,
        srclen: i32,
        typesize: i32,
        clevel: c_int,
        doshuffle: c_int,
        compname: *const c_char,
        frame: c_int,
        use_dict: c_int,
        out: *mut *mut u8,
    ) -> i64;
    fn packread_b2nd_compress(
        src: *const u8,
        srclen: i64,
        typesize: i32,
        doshuffle: c_int,
        compname: *const c_char,
        ndim: i8,
        shape: *const i64,
        chunkshape: *const i32,
        blockshape: *const i32,
        out: *mut *mut u8,
    ) -> i64;
    fn packread_blosc2_free(p: *mut u8);
}

/// Runs one of the shim's compressors, which mallocs its output into `*out` and returns its
/// length (or an error code), with the codec named `codec`; returns that output, freed.
fn compressed(
    codec: &str,
    what: &str,
    call: impl FnOnce(*const c_char, *mut *mut u8) -> i64,
) -> Vec<u8> {
    init();
    let name = std::ffi::CString::new(codec).expect("no NUL");
    let mut out: *mut u8 = std::ptr::null_mut();
    let n = call(name.as_ptr(), &mut out);
    assert!(n > 0 && !out.is_null(), "c-blosc2 {what} failed: {n}");
    // SAFETY: `out` holds `n` bytes written by c-blosc2, freed once after the copy.
    unsafe {
        let v = std::slice::from_raw_parts(out, n as usize).to_vec();
        packread_blosc2_free(out);
        v
    }
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
    compress_chunk(data, typesize, shuffle, codec, level, frame, false)
}

/// One zstd blosc2 chunk of `data` compressed with a dictionary c-blosc2 trains on its blocks
/// and stores in the chunk (c-blosc2's `use_dict`); for tests and benchmarks.
pub fn blosc2_compress_with_dict(data: &[u8], typesize: usize, level: i32) -> Vec<u8> {
    compress_chunk(data, typesize, 1, "zstd", level, false, true)
}

fn compress_chunk(
    data: &[u8],
    typesize: usize,
    shuffle: i32,
    codec: &str,
    level: i32,
    frame: bool,
    dict: bool,
) -> Vec<u8> {
    compressed(codec, "compression", |name, out| {
        // SAFETY: valid input slice and name; c-blosc2 mallocs `*out`, taken over by
        // `compressed`.
        unsafe {
            packread_blosc2_compress(
                data.as_ptr(),
                i32::try_from(data.len()).expect("under 2 GiB"),
                typesize as i32,
                level,
                shuffle,
                name,
                c_int::from(frame),
                c_int::from(dict),
                out,
            )
        }
    })
}

/// A contiguous frame holding `data` (C order, `shape`) as a b2nd array with the given chunk
/// and block shapes, as hdf5plugin and PyTables write n-d chunks; for tests and fuzz seeds.
#[doc(hidden)]
pub fn b2nd_compress(
    data: &[u8],
    typesize: usize,
    shuffle: i32,
    codec: &str,
    shape: &[i64],
    chunkshape: &[i32],
    blockshape: &[i32],
) -> Vec<u8> {
    assert!(shape.len() == chunkshape.len() && shape.len() == blockshape.len());
    compressed(codec, "b2nd compression", |name, out| {
        // SAFETY: the shapes hold `ndim` entries each (asserted), `data` is a live slice;
        // c-blosc2 mallocs `*out`, taken over by `compressed`.
        unsafe {
            packread_b2nd_compress(
                data.as_ptr(),
                data.len() as i64,
                typesize as i32,
                shuffle,
                name,
                shape.len() as i8,
                shape.as_ptr(),
                chunkshape.as_ptr(),
                blockshape.as_ptr(),
                out,
            )
        }
    })
}
