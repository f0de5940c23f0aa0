//! Blosc 1.x buffers (HDF5 filter 32001, as PyTables and hdf5plugin write them), decoded by
//! c-blosc itself (`blosc-src`): every inner codec (blosclz, lz4, lz4hc, zlib, zstd), byte and
//! bit shuffle, and memcpy'ed buffers. `blosc_decompress_ctx` uses a context of its own per
//! call and no internal threads, so calls from the pool's threads never share state.
//!
//! c-blosc bounds its reads by the compressed size written in the header, and its writes by
//! the destination size, so the header is checked against what was stored and what the chunk
//! holds before the call: a header that disagrees is an error here, never a read past the
//! chunk or a decode of the wrong size.

use super::CodecError;
use std::ffi::c_void;

/// Bytes of a blosc 1.x header.
pub const BLOSC_HEADER: usize = 16;
/// The only blosc format version c-blosc 1.x writes and reads.
const FORMAT_VERSION: u8 = 2;
/// Flag bit: the buffer holds the data as is, after the header.
const MEMCPYED: u8 = 0x2;

/// What a blosc 1.x header says.
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

/// Decodes the blosc buffer `input` into exactly `out`.
pub fn blosc_decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let h = BloscHeader::parse(input)?;
    if h.version != FORMAT_VERSION {
        return Err(CodecError::Corrupt(format!(
            "blosc: header format version {} (expected {FORMAT_VERSION})",
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
    if h.flags & MEMCPYED != 0 {
        // Stored as is: no need for the library.
        if h.cbytes != BLOSC_HEADER + out.len() {
            return Err(CodecError::Corrupt(format!(
                "blosc: a stored (memcpy'ed) buffer of {} bytes holds {} after its header",
                out.len(),
                h.cbytes - BLOSC_HEADER
            )));
        }
        out.copy_from_slice(&input[BLOSC_HEADER..h.cbytes]);
        return Ok(());
    }
    if i32::try_from(out.len()).is_err() {
        return Err(CodecError::Corrupt(format!(
            "blosc: {} bytes is more than blosc can hold",
            out.len()
        )));
    }
    // SAFETY: c-blosc reads at most `cbytes` (checked above to lie inside `input`) bytes of
    // `src`, validating every block offset against it, and writes at most `destsize` bytes.
    let n = unsafe {
        blosc_src::blosc_decompress_ctx(
            input.as_ptr().cast::<c_void>(),
            out.as_mut_ptr().cast::<c_void>(),
            out.len(),
            1,
        )
    };
    if n < 0 || n as usize != out.len() {
        return Err(CodecError::Corrupt(format!(
            "blosc: corrupt buffer (c-blosc returned {n}, expected {} bytes)",
            out.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Compresses with c-blosc (for tests): `codec` is a c-blosc compressor name.
    pub(crate) fn blosc_compress(
        data: &[u8],
        typesize: usize,
        shuffle: i32,
        codec: &str,
    ) -> Vec<u8> {
        let mut out = vec![0u8; data.len() + BLOSC_HEADER + 64];
        let name = std::ffi::CString::new(codec).unwrap();
        // SAFETY: buffers sized as c-blosc requires (input + its maximum overhead).
        let n = unsafe {
            blosc_src::blosc_compress_ctx(
                5,
                shuffle,
                typesize,
                data.len(),
                data.as_ptr().cast(),
                out.as_mut_ptr().cast(),
                out.len(),
                name.as_ptr(),
                0,
                1,
            )
        };
        assert!(n > 0, "blosc_compress_ctx failed: {n}");
        out.truncate(n as usize);
        out
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
        // Block offsets past the end.
        let mut bad = c.clone();
        bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(blosc_decompress(&bad, &mut out).is_err());
        // Garbage after a valid header.
        let mut bad = c.clone();
        for b in &mut bad[20..] {
            *b = 0xFF;
        }
        assert!(blosc_decompress(&bad, &mut out).is_err());
    }
}
