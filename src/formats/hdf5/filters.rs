//! HDF5 filters packread registers with its own libhdf5 (statically, with `H5Zregister`: no
//! plugin is loaded, and `HDF5_PLUGIN_PATH` is never read), so that libhdf5 itself can read
//! what the fast path leaves to it: blosc (32001) and blosc2 (32026) chunks inside pipelines
//! packread does not run natively, or datasets libhdf5 reads whole. Decode only: writing with
//! them is refused. The decoders are the same ones the fast path uses.

use std::ffi::{c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use hdf5_sys::h5::{H5allocate_memory, H5free_memory};
use hdf5_sys::h5z::{H5Z_class2_t, H5Zregister, H5Z_CLASS_T_VERS, H5Z_FLAG_REVERSE};

use crate::codec::{
    blosc2_frame_decompress, blosc2_frame_size, blosc_decompress, check_chunk, BloscHeader,
    CodecError, FILTER_BLOSC, FILTER_BLOSC2,
};

/// A decoder: the decoded size of a stored buffer (its own claim, checked for consistency),
/// and the decode itself into exactly that; the optional shape is the HDF5 chunk's, which a
/// b2nd array decoding to the chunk's bytes must have.
struct Decoder {
    size: fn(&[u8]) -> Result<usize, CodecError>,
    decode: Decode,
}

/// Decodes a buffer into exactly the output, given the chunk's shape when it is known.
type Decode = fn(&[u8], &mut [u8], Option<&[usize]>) -> Result<(), CodecError>;

const BLOSC: Decoder = Decoder {
    size: |b| check_chunk(b, BloscHeader::parse(b)?.nbytes).map(|h| h.nbytes),
    decode: |input, out, _| blosc_decompress(input, out),
};

const BLOSC2: Decoder = Decoder {
    size: blosc2_frame_size,
    decode: blosc2_frame_decompress,
};

/// libhdf5 chunks are at most 4 GiB; a header asking for more is corrupt.
const MAX_CHUNK: usize = u32::MAX as usize;

/// The chunk the filter's parameters describe (set by the writer's `set_local`, as hdf5-blosc,
/// hdf5plugin and PyTables do): its bytes (`cd[3]`) and, for blosc2, its shape (`cd[7]`
/// dimensions from `cd[8]`). Only a buffer decoding to exactly those bytes is the chunk itself:
/// in a pipeline where another filter ran first, this filter's buffer holds that filter's
/// output, of a size only the buffer says.
fn chunk_shape(cd: &[u32], size: usize) -> Option<Vec<usize>> {
    if cd.get(3).is_none_or(|&b| b as usize != size) {
        return None;
    }
    let rank = *cd.get(7)? as usize;
    let dims = cd.get(8..8 + rank)?;
    Some(dims.iter().map(|&d| d as usize).collect())
}

/// Runs `decode` as libhdf5's filter callback: replaces `*buf` (`nbytes` stored bytes) by a
/// new buffer holding the decoded chunk and returns its size, or returns 0 (failure) and leaves
/// `*buf` alone.
///
/// # Safety
/// `*buf` points to at least `nbytes` readable bytes allocated by libhdf5, and `cd` to
/// `cd_nelmts` parameters, as libhdf5 guarantees when calling a filter.
unsafe fn run(
    d: &Decoder,
    flags: c_uint,
    cd_nelmts: usize,
    cd: *const c_uint,
    nbytes: usize,
    buf_size: *mut usize,
    buf: *mut *mut c_void,
) -> usize {
    if flags & H5Z_FLAG_REVERSE == 0 || cd.is_null() {
        return 0; // packread only reads
    }
    // SAFETY: libhdf5 passes `cd_nelmts` parameters at `cd` (the caller's contract).
    let params = unsafe { std::slice::from_raw_parts(cd, cd_nelmts) };
    // SAFETY: libhdf5 hands the filter `*buf`, `nbytes` readable bytes it allocated (the
    // caller's contract); nothing else touches them during the call.
    let input = unsafe { std::slice::from_raw_parts((*buf).cast::<u8>(), nbytes) };
    let Ok(size) = (d.size)(input) else { return 0 };
    if size == 0 || size > MAX_CHUNK {
        return 0;
    }
    let shape = chunk_shape(params, size);
    // SAFETY: libhdf5's allocator, as a filter must use for the buffer it returns.
    let out = unsafe { H5allocate_memory(size, 0) }.cast::<u8>();
    if out.is_null() {
        return 0;
    }
    let decoded = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `out` was just allocated with `size` bytes and is ours alone.
        (d.decode)(
            input,
            unsafe { std::slice::from_raw_parts_mut(out, size) },
            shape.as_deref(),
        )
    }));
    // SAFETY: `out` came from `H5allocate_memory` and is freed once, on failure; on success
    // the old `*buf` (libhdf5's, per the contract) is freed and replaced, as libhdf5 expects.
    unsafe {
        if !matches!(decoded, Ok(Ok(()))) {
            H5free_memory(out.cast());
            return 0;
        }
        H5free_memory(*buf);
        *buf = out.cast();
        *buf_size = size;
    }
    size
}

/// libhdf5's filter callback: blosc2 frames (32026) or blosc chunks (32001).
unsafe extern "C" fn filter<const BLOSC2_FRAMES: bool>(
    flags: c_uint,
    cd_nelmts: usize,
    cd_values: *const c_uint,
    nbytes: usize,
    buf_size: *mut usize,
    buf: *mut *mut c_void,
) -> usize {
    let decoder = if BLOSC2_FRAMES { &BLOSC2 } else { &BLOSC };
    // SAFETY: called by libhdf5 with a buffer of `nbytes` bytes it allocated and `cd_nelmts`
    // parameters.
    unsafe { run(decoder, flags, cd_nelmts, cd_values, nbytes, buf_size, buf) }
}

/// Registers packread's decoders with libhdf5, once per process (registrations survive
/// `fork`).
///
/// # Safety
/// The caller holds libhdf5's lock.
pub(super) unsafe fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (id, name, filter) in [
            (
                FILTER_BLOSC,
                c"blosc (packread, decode only)",
                filter::<false> as unsafe extern "C" fn(_, _, _, _, _, _) -> _,
            ),
            (
                FILTER_BLOSC2,
                c"blosc2 (packread, decode only)",
                filter::<true>,
            ),
        ] {
            let class = H5Z_class2_t {
                version: H5Z_CLASS_T_VERS as i32,
                id: id as _,
                encoder_present: 0,
                decoder_present: 1,
                name: name.as_ptr(),
                can_apply: None,
                set_local: None,
                filter: Some(filter),
            };
            // SAFETY: lock held (caller); libhdf5 copies the class, and the name and callback
            // are 'static.
            let status = unsafe { H5Zregister((&class as *const H5Z_class2_t).cast()) };
            // A failed registration leaves the filter unavailable: datasets using it are then
            // reported unreadable (naming the filter) when packread cannot decode them either.
            debug_assert!(status >= 0, "H5Zregister({id}) failed");
        }
    });
}
