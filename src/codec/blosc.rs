//! Blosc chunks, decoded by c-blosc2 (compiled into the extension by `build.rs`, against the
//! same lz4, zstd and zlib as the rest of packread): blosc 1.x chunks (HDF5 filter 32001, as
//! PyTables and hdf5plugin write them; every inner codec, byte and bit shuffle, memcpy'ed
//! buffers) and blosc2 chunks (inside the frames of HDF5 filter 32026, see
//! [`super::blosc2_frame`]).
//!
//! c-blosc2 is handed one chunk at a time, and only after its header was checked here against
//! what was stored and what the chunk must decode to ([`check_chunk`]): sizes, block size, type
//! size, the codec and every filter. c-blosc2 would otherwise look an unknown codec or filter
//! id up as a plugin (running `python -c "import blosc2_<name>"` through `popen` and loading
//! what it prints, from whichever pool thread met the chunk, while it edits global tables
//! without a lock), or trust a lazy chunk's pointers into a file it does not have. Chunks that
//! are one value repeated (zeros, NaN, a run of one value, "uninitialised") are written here.
//! Every decode uses a context of its own with one thread, so calls from the pool's threads
//! never share state.

use super::CodecError;
// c-blosc2 (built by build.rs) calls zlib's `compress2`/`uncompress`: link libz-sys even where
// no Rust code names it (a build without the `hdf5` feature, such as the fuzz targets').
extern crate libz_sys as _;
use std::ffi::{c_char, c_int};
use std::sync::Once;

/// Bytes of a blosc chunk header (the part blosc 1.x and blosc2 share).
pub(super) const BLOSC_HEADER: usize = 16;
/// Bytes of a blosc2 chunk header with the filter pipeline (the "extended" header).
pub(super) const BLOSC2_HEADER: usize = 32;
/// Chunk format versions: 1 and 2 are blosc 1.x, 3 to 5 blosc2 (c-blosc2 reads them all).
const FORMAT_VERSIONS: std::ops::RangeInclusive<u8> = 1..=5;
/// c-blosc2's largest block (`BLOSC2_MAXBLOCKSIZE`).
const MAX_BLOCK: usize = 536_866_816;

/// Header flag bits (c-blosc2's `BLOSC_DOSHUFFLE`, `BLOSC_MEMCPYED`, `BLOSC_DOBITSHUFFLE`).
const DOSHUFFLE: u8 = 0x1;
const MEMCPYED: u8 = 0x2;
const DOBITSHUFFLE: u8 = 0x4;
/// blosc2 flag bits (byte 31 of the extended header).
const LAZY_CHUNK: u8 = 0x08;
/// blosc2 flags: a zstd dictionary follows the block starts.
const USE_DICT: u8 = 0x01;
/// blosc2's id of the byte-shuffle filter in an extended header's filter pipeline.
const SHUFFLE_FILTER: u8 = 1;
/// Largest dictionary c-blosc2 writes or reads (`BLOSC2_MAXDICTSIZE`).
const MAX_DICT: usize = 128 * 1024;
const INSTRUMENTED: u8 = 0x80;

extern "C" {
    fn packread_blosc2_init();
    fn packread_blosc_chunk_decode(src: *const u8, srclen: i32, dst: *mut u8, dstlen: i32)
        -> c_int;
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

/// c-blosc2's one-time global set-up, before any other call.
fn init() {
    static INIT: Once = Once::new();
    // SAFETY: called once, before any other c-blosc2 function (every entry point here calls
    // this first).
    INIT.call_once(|| unsafe { packread_blosc2_init() });
}

/// What a chunk holds when it is one value repeated (blosc2's "special" chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    Zeros,
    /// NaN of the chunk's type size (4 or 8 bytes).
    Nan,
    /// The `typesize` bytes right after the header, repeated.
    Value,
    /// Written as "not initialised"; packread writes zeros (c-blosc2 would leave the output
    /// as it was, which in a batch buffer is another sample's bytes).
    Uninit,
}

/// What a blosc chunk header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BloscHeader {
    /// Chunk format version (byte 0): 1 and 2 are blosc 1.x, 3 to 5 blosc2.
    pub version: u8,
    /// Flag byte (byte 2): the shuffle, memcpy'ed and don't-split bits, and the codec in the
    /// top three bits (6: the codec is [`BloscHeader::udcodec`]).
    pub flags: u8,
    /// Bytes per element the chunk was shuffled with (byte 3).
    pub typesize: u8,
    /// Bytes the chunk decodes to.
    pub nbytes: usize,
    /// Decoded bytes per block (the last block may hold fewer).
    pub blocksize: usize,
    /// Bytes of the whole stored chunk, header included.
    pub cbytes: usize,
    /// The blosc2 filter pipeline, when the header has one (extended header).
    pub filters: Option<[u8; 6]>,
    /// Each filter's parameter byte (extended header bytes 24-29; zeros without one).
    pub filters_meta: [u8; 6],
    /// The codec named in the extended header when the flags defer to it.
    pub udcodec: u8,
    /// blosc2's flag byte (byte 31 of the extended header: lazy chunk, dictionary, special
    /// kind); 0 without an extended header.
    pub blosc2_flags: u8,
}

impl BloscHeader {
    /// Reads the header at the start of `input`, without judging it (see [`check_chunk`]).
    pub(crate) fn parse(input: &[u8]) -> Result<BloscHeader, CodecError> {
        let h = input.get(..BLOSC_HEADER).ok_or_else(|| {
            format!(
                "blosc: {} stored bytes, shorter than the {BLOSC_HEADER}-byte header",
                input.len()
            )
        })?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as usize;
        let flags = h[2];
        let mut header = BloscHeader {
            version: h[0],
            flags,
            typesize: h[3],
            nbytes: u32_at(4),
            blocksize: u32_at(8),
            cbytes: u32_at(12),
            filters: None,
            filters_meta: [0; 6],
            udcodec: 0,
            blosc2_flags: 0,
        };
        if header.extended() {
            let x = input.get(..BLOSC2_HEADER).ok_or_else(|| {
                format!(
                    "blosc: {} stored bytes, shorter than the {BLOSC2_HEADER}-byte blosc2 header",
                    input.len()
                )
            })?;
            let mut filters = [0u8; 6];
            filters.copy_from_slice(&x[16..22]);
            if header.version == 3 {
                filters[5] = 0; // blosc2's alpha format left the last slot unset
            }
            header.filters = Some(filters);
            header.filters_meta.copy_from_slice(&x[24..30]);
            header.udcodec = x[22];
            header.blosc2_flags = x[31];
        }
        Ok(header)
    }

    /// Whether the header is blosc2's 32-byte one (both shuffle bits set mark it).
    fn extended(&self) -> bool {
        self.flags & (DOSHUFFLE | DOBITSHUFFLE) == DOSHUFFLE | DOBITSHUFFLE
    }

    /// Bytes of this header.
    pub(crate) fn len(&self) -> usize {
        if self.extended() {
            BLOSC2_HEADER
        } else {
            BLOSC_HEADER
        }
    }

    /// The chunk's special kind, if it is one value repeated.
    pub(crate) fn special(&self) -> Result<Option<Special>, CodecError> {
        if !self.extended() {
            return Ok(None);
        }
        Ok(match (self.blosc2_flags >> 4) & 7 {
            0 => None,
            1 => Some(Special::Zeros),
            2 => Some(Special::Nan),
            3 => Some(Special::Value),
            4 => Some(Special::Uninit),
            other => {
                return Err(corrupt(format!(
                    "blosc: unknown special chunk kind {other}"
                )))
            }
        })
    }
}

fn corrupt(msg: String) -> CodecError {
    CodecError::Corrupt(msg)
}

/// Checks everything c-blosc2 trusts in the header of the chunk at the start of `input` before
/// it sees the chunk: it must decode to exactly `nbytes` bytes, lie inside `input`, name a
/// codec and filters that are built in, and be a plain (not lazy, not instrumented) chunk.
pub(crate) fn check_chunk(input: &[u8], nbytes: usize) -> Result<BloscHeader, CodecError> {
    let h = BloscHeader::parse(input)?;
    if !FORMAT_VERSIONS.contains(&h.version) {
        return Err(corrupt(format!(
            "blosc: header format version {} (expected {FORMAT_VERSIONS:?})",
            h.version
        )));
    }
    if h.nbytes != nbytes {
        return Err(corrupt(format!(
            "blosc: header says {} decoded bytes, the chunk holds {nbytes}",
            h.nbytes
        )));
    }
    if h.cbytes < h.len() || h.cbytes > input.len() {
        return Err(corrupt(format!(
            "blosc: header says {} compressed bytes, {} are stored",
            h.cbytes,
            input.len()
        )));
    }
    if h.typesize == 0 {
        return Err(corrupt("blosc: header has type size 0".into()));
    }
    if h.blocksize == 0 || h.blocksize > MAX_BLOCK || (nbytes > 0 && h.blocksize > nbytes) {
        return Err(corrupt(format!(
            "blosc: header has block size {} for {nbytes} bytes",
            h.blocksize
        )));
    }
    if h.blosc2_flags & LAZY_CHUNK != 0 {
        return Err(corrupt(
            "blosc: a lazy chunk (its blocks are in a file packread does not have)".into(),
        ));
    }
    if h.blosc2_flags & INSTRUMENTED != 0 {
        return Err(unsupported(
            "an instrumented codec (a development build's output)",
        ));
    }
    if let Some(special) = h.special()? {
        if nbytes % usize::from(h.typesize) != 0 {
            return Err(corrupt(format!(
                "blosc: {nbytes} bytes of one repeated value is not a whole number of {}-byte items",
                h.typesize
            )));
        }
        if special == Special::Value && h.cbytes < BLOSC2_HEADER + usize::from(h.typesize) {
            return Err(corrupt(
                "blosc: a repeated-value chunk without its value".into(),
            ));
        }
        if special == Special::Nan && !matches!(h.typesize, 4 | 8) {
            return Err(corrupt(format!(
                "blosc: a chunk of NaNs with type size {}",
                h.typesize
            )));
        }
        return Ok(h);
    }
    // The codec: the flags' top three bits, or the extended header's codec byte when they
    // say 6 (c-blosc2's numbering there: 0 blosclz, 1 lz4, 2 lz4hc, 4 zlib, 5 zstd).
    let codec_ok = match h.flags >> 5 {
        0 | 1 | 3 | 4 => true,
        6 => h.extended() && matches!(h.udcodec, 0 | 1 | 2 | 4 | 5),
        _ => false,
    };
    if !codec_ok && h.flags & MEMCPYED == 0 {
        let code = if h.flags >> 5 == 6 {
            h.udcodec
        } else {
            h.flags >> 5
        };
        return Err(unsupported(&format!(
            "codec {code}, which is not one of blosc's own (blosclz, lz4, lz4hc, zlib, zstd)"
        )));
    }
    // Filters: none, shuffle, bitshuffle, delta, truncated precision (undone by nothing).
    if let Some(bad) = h.filters.and_then(|f| f.into_iter().find(|&id| id > 4)) {
        return Err(unsupported(&format!(
            "filter {bad}, which is not one of blosc's own (shuffle, bitshuffle, delta, truncated precision)"
        )));
    }
    // c-blosc2 2.23 and later read a shuffle filter's parameter byte, when not 0, as the
    // number of bytes shuffled together (python-blosc2 writes such chunks); the c-blosc2 2.15
    // packread links ignores it and would unshuffle by the type size: other bytes, silently.
    if let Some(filters) = h.filters {
        for (id, meta) in filters.into_iter().zip(h.filters_meta) {
            if id == SHUFFLE_FILTER && meta != 0 && meta != h.typesize {
                return Err(unsupported(&format!(
                    "a shuffle of {meta}-byte groups in {}-byte items (c-blosc2 2.23's \
                     parameter of the shuffle filter), which packread's c-blosc2 2.15 does not undo",
                    h.typesize
                )));
            }
        }
    }
    if h.version <= 2 && h.flags & MEMCPYED == 0 {
        blosc1_streams(input, &h)?;
    }
    if h.extended() && h.blosc2_flags & USE_DICT != 0 {
        dictionary(input, &h)?;
    }
    Ok(h)
}

/// A chunk compressed with a zstd dictionary carries it after the block starts: its size (1 to
/// 128 KiB) and bytes must lie in the chunk, and, for zstd blocks, zstd must accept it.
/// c-blosc2 loads it with `ZSTD_createDDict` and asserts the result is not NULL before
/// decoding (an abort of the whole process when zstd refuses a damaged dictionary).
fn dictionary(input: &[u8], h: &BloscHeader) -> Result<(), CodecError> {
    let blocks = if h.flags & MEMCPYED == 0 {
        h.nbytes.div_ceil(h.blocksize)
    } else {
        0
    };
    let at = BLOSC2_HEADER + 4 * blocks;
    let size = input
        .get(at..at + 4)
        .filter(|_| at + 4 <= h.cbytes)
        .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| corrupt("blosc: the chunk's dictionary size runs past the chunk".into()))?;
    let size = usize::try_from(size)
        .ok()
        .filter(|&n| (1..=MAX_DICT).contains(&n))
        .ok_or_else(|| corrupt(format!("blosc: a dictionary of {size} bytes")))?;
    let dict = input
        .get(at + 4..at + 4 + size)
        .filter(|_| at + 4 + size <= h.cbytes)
        .ok_or_else(|| corrupt("blosc: the chunk's dictionary runs past the chunk".into()))?;
    let zstd = match h.flags >> 5 {
        4 => true,
        6 => h.udcodec == 5,
        _ => false,
    };
    if zstd && h.flags & MEMCPYED == 0 {
        // SAFETY: `dict` is a live slice; zstd copies it into the DDict, freed at once.
        let ddict = unsafe { zstd_sys::ZSTD_createDDict(dict.as_ptr().cast(), dict.len()) };
        if ddict.is_null() {
            return Err(corrupt(
                "blosc: the chunk's zstd dictionary is damaged (zstd refuses it)".into(),
            ));
        }
        // SAFETY: `ddict` came from ZSTD_createDDict just above and is freed once.
        unsafe { zstd_sys::ZSTD_freeDDict(ddict) };
    }
    Ok(())
}

/// A blosc 1.x chunk's compressed streams, walked as c-blosc2 walks them (each block at its
/// start offset, one stream a block or one per byte of the type size), each of which blosc 1.x
/// always writes with a positive size. c-blosc2 reads blosc 1.x chunks with blosc2's rules,
/// where a size of 0 is a block of zeros and a negative one a run of a byte: in a blosc 1.x
/// chunk those are damage (c-blosc 1.x refuses them), not zeros.
fn blosc1_streams(input: &[u8], h: &BloscHeader) -> Result<(), CodecError> {
    let at = |i: usize| -> Result<i64, CodecError> {
        i.checked_add(4)
            .filter(|&end| end <= h.cbytes)
            .and_then(|end| input.get(i..end))
            .map(|b| i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes"))))
            .ok_or_else(|| corrupt(format!("blosc: a stream at byte {i} runs past the chunk")))
    };
    let nblocks = h.nbytes.div_ceil(h.blocksize);
    let dont_split = h.flags & 0x10 != 0;
    for b in 0..nblocks {
        let start = at(BLOSC_HEADER + 4 * b)?;
        let leftover = b + 1 == nblocks && h.nbytes % h.blocksize != 0;
        let streams = if dont_split || leftover {
            1
        } else {
            usize::from(h.typesize)
        };
        let mut pos = usize::try_from(start).unwrap_or(usize::MAX);
        for _ in 0..streams {
            let size = at(pos)?;
            if size <= 0 {
                return Err(corrupt(format!(
                    "blosc: block {b} has a stream of size {size}, which blosc 1.x never writes"
                )));
            }
            pos = pos.saturating_add(4).saturating_add(size as usize);
            if pos > h.cbytes {
                return Err(corrupt(format!("blosc: block {b} runs past the chunk")));
            }
        }
    }
    Ok(())
}

fn unsupported(what: &str) -> CodecError {
    // A chunk of a known format naming something packread does not decode is still bytes it
    // cannot read: reported as corrupt data of the format (an HDF5Error for HDF5 chunks).
    CodecError::Corrupt(format!("blosc: the chunk uses {what}"))
}

/// Decodes the blosc chunk `input` into exactly `out`.
pub fn blosc_decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let h = check_chunk(input, out.len())?;
    decode_checked(input, &h, out)
}

/// Decodes a chunk whose header [`check_chunk`] accepted for `out.len()` bytes.
pub(super) fn decode_checked(
    input: &[u8],
    h: &BloscHeader,
    out: &mut [u8],
) -> Result<(), CodecError> {
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
    // SAFETY: `check_chunk` proved the header's compressed size inside `input` (`srclen` bytes
    // of it are read, each block offset checked against them by c-blosc2), its decoded size
    // `out.len()` (`dstlen` bytes are written at most), and its codec and filters built in.
    let n =
        unsafe { packread_blosc_chunk_decode(input.as_ptr(), srclen, out.as_mut_ptr(), dstlen) };
    if n != dstlen {
        return Err(corrupt(format!(
            "blosc: corrupt chunk (c-blosc2 returned {n}, expected {} bytes)",
            out.len()
        )));
    }
    Ok(())
}

/// Takes ownership of a buffer c-blosc2 allocated: `n` bytes at `out`, or an error code in `n`.
fn owned(n: i64, out: *mut u8, what: &str) -> Vec<u8> {
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
/// and stores in the chunk (c-blosc2's `use_dict`); for tests.
#[cfg(test)]
fn blosc2_compress_with_dict(data: &[u8], typesize: usize, level: i32) -> Vec<u8> {
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
    init();
    let name = std::ffi::CString::new(codec).expect("no NUL");
    let mut out: *mut u8 = std::ptr::null_mut();
    // SAFETY: valid input slice and name; c-blosc2 mallocs `out`, taken over by `owned`.
    let n = unsafe {
        packread_blosc2_compress(
            data.as_ptr(),
            i32::try_from(data.len()).expect("under 2 GiB"),
            typesize as i32,
            level,
            shuffle,
            name.as_ptr(),
            c_int::from(frame),
            c_int::from(dict),
            &mut out,
        )
    };
    owned(n, out, "compression")
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
    init();
    let name = std::ffi::CString::new(codec).expect("no NUL");
    let mut out: *mut u8 = std::ptr::null_mut();
    // SAFETY: the shapes hold `ndim` entries each (asserted), `data` is a live slice; c-blosc2
    // mallocs `out`, taken over by `owned`.
    let n = unsafe {
        packread_b2nd_compress(
            data.as_ptr(),
            data.len() as i64,
            typesize as i32,
            shuffle,
            name.as_ptr(),
            shape.len() as i8,
            shape.as_ptr(),
            chunkshape.as_ptr(),
            blockshape.as_ptr(),
            &mut out,
        )
    };
    owned(n, out, "b2nd compression")
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
